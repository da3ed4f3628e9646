/* test_account.c - the accounting protocol (vgpu/account.c) against a fake
 * driver: reserve, roll back, adjust, and the retry after the driver's
 * caches are reclaimed, with the ledger's totals checked after each step.
 *
 * The fake driver has one pool per device whose idle bytes are charged
 * (as intercept/pools.c does) until the core asks it to reclaim them.
 */
#include "account.h"
#include "ledger_test.h"

#include <sys/wait.h>

TestSuite(account, .init = ledger_dir_make, .fini = ledger_dir_remove);

/* ---- the fake driver ------------------------------------------------------ */

static struct {
	struct vgpu_slot *slot;	/* whose charge the pool's idle bytes are */
	uint64_t idle[4];	/* per device: charged, not used */
	unsigned reclaims[4];
} fake;

static bool fake_reclaim(int dev)
{
	uint64_t idle = fake.idle[dev];

	fake.reclaims[dev]++;
	if (!idle)
		return false;
	fake.idle[dev] = 0;
	vgpu_account_rollback(fake.slot, VGPU_USAGE_POOL, idle);
	return true;
}

static const struct vgpu_prim fake_prim = { .reclaim = fake_reclaim };

static struct vgpu_slot *start(struct vgpu_ledger **l, uint64_t limit)
{
	memset(&fake, 0, sizeof(fake));
	*l = ledger_open_ok();
	fake.slot = ledger_join_ok(*l, "team", limit);
	vgpu_account_use(&fake_prim);
	return fake.slot;
}

/* ---- the protocol ----------------------------------------------------------- */

Test(account, reserve_then_rollback_returns_to_zero)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);

	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_BUFFER, GiB),
		     VGPU_ACCOUNT_OK);
	cr_assert_eq(vgpu_ledger_tenant_used(s), GiB);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_BUFFER, 1),
		     VGPU_ACCOUNT_OVER);
	cr_assert_eq(fake.reclaims[0], 1, "a refusal asks the driver once");
	vgpu_account_rollback(s, VGPU_USAGE_BUFFER, GiB);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_ARRAY, 0),
		     VGPU_ACCOUNT_OK);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_COUNT, 1),
		     VGPU_ACCOUNT_INVALID);
	ledger_leave_empty(l, s);
}

/* A pool's idle memory is charged; a reservation refused because of it
 * succeeds once the driver gave it back, and the refusal is not
 * retried when the driver had nothing to give. */
Test(account, refused_then_retried_after_the_caches_are_reclaimed)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);

	cr_assert_eq(vgpu_account_reserve(s, 1, VGPU_USAGE_POOL, 768 * MiB),
		     VGPU_ACCOUNT_OK);
	fake.idle[1] = 768 * MiB;	/* freed, kept by the pool */
	cr_assert_eq(vgpu_account_reserve(s, 1, VGPU_USAGE_BUFFER, 512 * MiB),
		     VGPU_ACCOUNT_OK);
	cr_assert_eq(fake.reclaims[1], 1);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 512 * MiB);
	cr_assert_eq(vgpu_account_reserve(s, 1, VGPU_USAGE_BUFFER, 513 * MiB),
		     VGPU_ACCOUNT_OVER);
	cr_assert_eq(fake.reclaims[1], 2);
	cr_assert_eq(fake.reclaims[0], 0, "only the device asked for");
	vgpu_account_rollback(s, VGPU_USAGE_BUFFER, 512 * MiB);
	ledger_leave_empty(l, s);
}

/* No primitives: refusals are final. */
Test(account, without_primitives_no_retry)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, MiB);

	vgpu_account_use(NULL);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_POOL, MiB),
		     VGPU_ACCOUNT_OK);
	fake.idle[0] = MiB;
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_BUFFER, 1),
		     VGPU_ACCOUNT_OVER);
	cr_assert_eq(fake.reclaims[0], 0);
	vgpu_account_rollback(s, VGPU_USAGE_POOL, MiB);
	ledger_leave_empty(l, s);
}

/* The driver took more or less than was reserved: the charge follows,
 * and past the limit nothing changes. */
Test(account, adjust_follows_the_driver_both_ways)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);
	uint64_t charged = 256 * MiB;

	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_ARRAY, charged),
		     VGPU_ACCOUNT_OK);
	cr_assert_eq(vgpu_account_adjust(s, 0, VGPU_USAGE_ARRAY, &charged,
					 0), VGPU_ACCOUNT_OK);
	cr_assert_eq(charged, 256 * MiB, "0: the driver did not say");
	cr_assert_eq(vgpu_account_adjust(s, 0, VGPU_USAGE_ARRAY, &charged,
					 GiB), VGPU_ACCOUNT_OK);
	cr_assert_eq(charged, GiB);
	cr_assert_eq(vgpu_ledger_tenant_used(s), GiB);
	cr_assert_eq(vgpu_account_adjust(s, 0, VGPU_USAGE_ARRAY, &charged,
					 GiB + 1), VGPU_ACCOUNT_OVER);
	cr_assert_eq(charged, GiB, "unchanged when refused");
	cr_assert_eq(vgpu_ledger_tenant_used(s), GiB);
	cr_assert_eq(vgpu_account_adjust(s, 0, VGPU_USAGE_ARRAY, &charged,
					 4096), VGPU_ACCOUNT_OK);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 4096);
	vgpu_account_rollback(s, VGPU_USAGE_ARRAY, charged);
	ledger_leave_empty(l, s);
}

/* A tenant lock held by a stopped process: a timeout, not "over". */
Test(account, a_lock_not_had_is_a_timeout, .timeout = 30)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = start(&l, GiB);
	int pipefd[2], st;
	char c;
	pid_t pid;

	cr_assert_eq(pipe(pipefd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* A process of its own: its own slot, as a real one has. */
		vgpu_ledger_forget_after_fork(l);
		struct vgpu_slot *mine = ledger_join_ok(ledger_open_ok(),
							"team", GiB);

		vgpu__ledger_lock(mine);
		(void)!write(pipefd[1], "x", 1);
		pause();
		_exit(0);
	}
	cr_assert_eq(read(pipefd[0], &c, 1), 1);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_BUFFER, MiB),
		     VGPU_ACCOUNT_TIMEOUT);
	cr_assert_eq(fake.reclaims[0], 0, "a timeout is not retried");
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	cr_assert_eq(vgpu_account_reserve(s, 0, VGPU_USAGE_BUFFER, MiB),
		     VGPU_ACCOUNT_OK);
	vgpu_account_rollback(s, VGPU_USAGE_BUFFER, MiB);
	ledger_leave_empty(l, s);
}
