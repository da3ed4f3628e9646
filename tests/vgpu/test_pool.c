/* test_pool.c - stream-ordered pools (vgpu/pool.c) against a fake driver:
 * a pool's charge follows what it reserves when it is settled, idle
 * memory is trimmed at the slice's edge, a destroyed pool keeps its
 * charge while a block of it lives, and a default pool is not
 * destroyable; the ledger's totals back to zero after each.
 *
 * The fake driver's pools are handles 1..4, each with the bytes it
 * reserves and the bytes its live blocks use (a trim keeps those); device
 * 0's default pool is handle 1.
 */
#include "account.h"
#include "ledger_test.h"
#include "pool.h"

TestSuite(pool, .init = ledger_dir_make, .fini = ledger_dir_remove);

/* ---- the fake driver ------------------------------------------------------ */

static struct {
	struct vgpu_slot *slot;	/* device 0's */
	uint64_t reserved[5], used[5];
	uint64_t given_back;	/* by uncharge */
} fake;

static bool fake_is_default(uint64_t h, int dev)
{
	return dev == 0 && h == 1;
}

static bool fake_reserved(uint64_t h, uint64_t *bytes)
{
	if (h == 0 || h > 4)
		return false;
	*bytes = fake.reserved[h];
	return true;
}

static void fake_trim(uint64_t h)
{
	fake.reserved[h] = fake.used[h];
}

static struct vgpu_slot *fake_slot(int dev)
{
	return dev == 0 ? fake.slot : NULL;
}

static void fake_uncharge(int dev, uint64_t bytes)
{
	cr_assert_eq(dev, 0);
	fake.given_back += bytes;
	vgpu_account_rollback(fake.slot, VGPU_USAGE_POOL, bytes);
}

static const struct vgpu_pool_ops fake_ops = {
	.is_default = fake_is_default,
	.reserved = fake_reserved,
	.trim = fake_trim,
	.slot = fake_slot,
	.uncharge = fake_uncharge,
};

static bool fake_reclaim(int dev)
{
	return vgpu_pools_reclaim(dev);
}

static const struct vgpu_prim fake_prim = { .reclaim = fake_reclaim };

static struct vgpu_slot *start(struct vgpu_ledger **l, uint64_t limit)
{
	memset(&fake, 0, sizeof(fake));
	vgpu_pools_fork_child();	/* a fresh table */
	*l = ledger_open_ok();
	fake.slot = ledger_join_ok(*l, "team", limit);
	vgpu_account_use(&fake_prim);
	vgpu_pools_use(&fake_ops);
	return fake.slot;
}

/* A block of pool i, as a front end makes it: admitted by its size, the
 * pool grown by grow, settled, the admission given back. */
static int alloc(struct vgpu_slot *s, int i, uint64_t h, uint64_t size,
		 uint64_t grow)
{
	int rc = vgpu_account_reserve(s, 0, VGPU_USAGE_POOL, size);

	if (rc != VGPU_ACCOUNT_OK)
		return rc;
	vgpu_pool_live(i);
	fake.reserved[h] += grow;
	fake.used[h] += size;
	vgpu_pool_settle(i);
	vgpu_account_rollback(s, VGPU_USAGE_POOL, size);
	return rc;
}

static void free_block(int i, uint64_t h, uint64_t size)
{
	fake.used[h] -= size;
	vgpu_pool_freed(i);
}

/* ---- the rule ------------------------------------------------------------------ */

Test(pool, charge_follows_what_the_pool_reserves)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);
	int i = vgpu_pool_index(2, 0, false);

	cr_assert_geq(i, 0);
	cr_assert_eq(vgpu_pool_index(2, 0, false), i, "registered once");
	cr_assert_eq(vgpu_pool_find(2), i);
	cr_assert(vgpu_pool_destroyable(i));
	cr_assert_eq(alloc(s, i, 2, 3 * MiB, 4 * MiB), VGPU_ACCOUNT_OK);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4 * MiB, "rounded up");
	free_block(i, 2, 3 * MiB);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4 * MiB, "kept idle");
	fake_trim(2);
	cr_assert(vgpu_pool_settle(i), "a trim gives bytes back");
	cr_assert_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_pool_destroyed(i);
	cr_assert_eq(vgpu_pool_find(2), -1);
	ledger_leave_empty(l, s);
}

/* At the edge, idle memory is trimmed and the reservation tried again;
 * what live blocks hold is not, and past the slice is refused. */
Test(pool, idle_memory_trimmed_at_the_edge)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, 8 * MiB);
	int i = vgpu_pool_index(2, 0, false);

	cr_assert_eq(alloc(s, i, 2, 6 * MiB, 6 * MiB), VGPU_ACCOUNT_OK);
	free_block(i, 2, 6 * MiB);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 6 * MiB);
	cr_assert_eq(alloc(s, i, 2, 4 * MiB, 4 * MiB), VGPU_ACCOUNT_OK,
		     "the idle 6 MiB trimmed");
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4 * MiB);
	cr_assert_eq(alloc(s, i, 2, 6 * MiB, 6 * MiB), VGPU_ACCOUNT_OVER,
		     "4 MiB live and 6 more");
	free_block(i, 2, 4 * MiB);
	vgpu_pool_destroyed(i);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 0);
	ledger_leave_empty(l, s);
}

/* Destroyed with a block live, a pool keeps its charge until the free. */
Test(pool, destroyed_pool_drains_at_its_last_free)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);
	int i = vgpu_pool_index(3, 0, false);

	cr_assert_eq(alloc(s, i, 3, 2 * MiB, 2 * MiB), VGPU_ACCOUNT_OK);
	cr_assert_eq(alloc(s, i, 3, 2 * MiB, 2 * MiB), VGPU_ACCOUNT_OK);
	vgpu_pool_settle(i);
	vgpu_pool_destroyed(i);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4 * MiB);
	cr_assert_eq(vgpu_pool_find(3), -1, "the handle is gone");
	cr_assert_not(vgpu_pool_unlive(i));
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4 * MiB);
	cr_assert(vgpu_pool_unlive(i), "the last block drains it");
	cr_assert_eq(fake.given_back, 4 * MiB);
	ledger_leave_empty(l, s);
}

/* The default pool is never destroyable; a host pool is never charged. */
Test(pool, default_and_host_pools)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);
	int d = vgpu_pool_index(1, 0, false), h = vgpu_pool_index(4, -1, true);

	cr_assert_not(vgpu_pool_destroyable(d));
	cr_assert_eq(vgpu_pool_dev(d), 0);
	cr_assert_eq(vgpu_pool_dev(h), -1);
	fake.reserved[4] = 8 * MiB;
	cr_assert_not(vgpu_pool_settle(h));
	cr_assert_eq(vgpu_ledger_tenant_used(s), 0);
	cr_assert_eq(vgpu_pool_index(0, 0, false), -1, "no handle");
	ledger_leave_empty(l, s);
}
