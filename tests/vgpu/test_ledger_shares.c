/* test_ledger_shares.c - memory shared between processes is charged once,
 * to one holder, for as long as any holder lives: every release order,
 * death of the payer, records reused, and a seeded random walk checked
 * against a model after every step. Each ledger handle here stands for one
 * process (its own slot and open file description). */
#include <sys/wait.h>

#include "ledger_test.h"

TestSuite(shares, .init = ledger_dir_make, .fini = ledger_dir_remove);

static const uint64_t K1[2] = { 0x1111, 0x2222 }, K2[2] = { 0x3333, 0x4444 };

static uint64_t vmm(struct vgpu_slot *s)
{
	return vgpu_ledger_slot_usage(s, VGPU_USAGE_VMM);
}

/* s charges bytes and exports them under key, as the shim does. */
static int export_ok(struct vgpu_slot *s, const uint64_t key[2],
		     uint64_t bytes)
{
	bool elsewhere;
	int i;

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_VMM, bytes), 0);
	i = vgpu_ledger_share_export(s, key, VGPU_USAGE_VMM, bytes, &elsewhere);
	cr_assert_geq(i, 0, "export: %d", i);
	if (elsewhere)
		vgpu_ledger_release(s, VGPU_USAGE_VMM, bytes);
	return i;
}

Test(shares, the_importer_pays_nothing_while_the_exporter_holds)
{
	struct vgpu_ledger *a = ledger_open_ok(), *b = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "alpha", GiB);
	struct vgpu_slot *sb = ledger_join_ok(b, "beta", GiB);
	int i = export_ok(sa, K1, 64 * MiB);

	cr_assert_eq(vgpu_ledger_share_hold(sb, K1), i);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), 64 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	/* The importer lets go first: nothing moves. */
	vgpu_ledger_share_drop(sb, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), 64 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	vgpu_ledger_share_drop(sa, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), 0);
	cr_expect_eq(vmm(sa), 0);
	cr_expect_eq(vgpu_ledger_share_hold(sb, K1), VGPU_LEDGER_ENOENT);
	vgpu_ledger_close(a);
	vgpu_ledger_close(b);
}

Test(shares, the_exporter_letting_go_first_hands_the_charge_over)
{
	struct vgpu_ledger *a = ledger_open_ok(), *b = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "alpha", GiB);
	struct vgpu_slot *sb = ledger_join_ok(b, "beta", GiB);
	int32_t pid;
	int i = export_ok(sa, K1, 64 * MiB);

	cr_assert_eq(vgpu_ledger_share_hold(sb, K1), i);
	cr_assert_eq(vgpu_ledger_share_hold(sb, K1), i);	/* opened twice */
	vgpu_ledger_share_drop(sa, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), 0);
	cr_expect_eq(vmm(sb), 64 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 64 * MiB);
	cr_expect_eq(vgpu_ledger_share_payer(sb, i, &pid), 64 * MiB);
	cr_expect_eq(pid, getpid());
	vgpu_ledger_share_drop(sb, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 64 * MiB, "one hold left");
	vgpu_ledger_share_drop(sb, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	cr_expect_eq(vgpu_ledger_share_payer(sb, i, &pid), 0);
	vgpu_ledger_close(a);
	vgpu_ledger_close(b);
}

Test(shares, a_payer_leaving_hands_over_and_a_lone_holder_leaving_gives_back)
{
	struct vgpu_ledger *a = ledger_open_ok(), *b = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "alpha", GiB);
	struct vgpu_slot *sb = ledger_join_ok(b, "beta", GiB);
	int i = export_ok(sa, K1, 10 * MiB);

	export_ok(sa, K2, 20 * MiB);
	cr_assert_eq(vgpu_ledger_share_hold(sb, K1), i);
	vgpu_ledger_leave(sa);	/* K1 moves to beta; K2 is given back */
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 10 * MiB);
	cr_expect_eq(vgpu_ledger_share_hold(sb, K2), VGPU_LEDGER_ENOENT);
	vgpu_ledger_leave(sb);
	sb = ledger_join_ok(b, "beta", GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	cr_expect_eq(vgpu_ledger_share_hold(sb, K1), VGPU_LEDGER_ENOENT);
	vgpu_ledger_close(a);
	vgpu_ledger_close(b);
}

Test(shares, an_import_of_unrecorded_memory_pays_and_later_importers_do_not)
{
	struct vgpu_ledger *a = ledger_open_ok(), *b = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "alpha", GiB);
	struct vgpu_slot *sb = ledger_join_ok(b, "beta", GiB);
	bool elsewhere;
	int i;

	/* Nobody recorded K1 (its exporter runs without the shim). */
	cr_assert_eq(vgpu_ledger_share_hold(sa, K1), VGPU_LEDGER_ENOENT);
	i = export_ok(sa, K1, 8 * MiB);
	/* A second importer racing the first: it charged too, and is told
	 * to give its charge back. */
	cr_assert_eq(vgpu_ledger_reserve(sb, VGPU_USAGE_VMM, 8 * MiB), 0);
	cr_assert_eq(vgpu_ledger_share_export(sb, K1, VGPU_USAGE_VMM, 8 * MiB,
					      &elsewhere), i);
	cr_expect(elsewhere);
	vgpu_ledger_release(sb, VGPU_USAGE_VMM, 8 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(sa) + vgpu_ledger_tenant_used(sb),
		     8 * MiB);
	vgpu_ledger_share_drop(sa, i, K1);
	vgpu_ledger_share_drop(sb, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa) + vgpu_ledger_tenant_used(sb),
		     0);
	vgpu_ledger_close(a);
	vgpu_ledger_close(b);
}

Test(shares, bad_keys_and_wrong_records_change_nothing)
{
	struct vgpu_ledger *a = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "alpha", GiB);
	const uint64_t zero[2] = { 0, 0 };
	bool elsewhere;
	int i = export_ok(sa, K1, MiB);

	cr_expect_eq(vgpu_ledger_share_export(sa, zero, VGPU_USAGE_VMM, 1,
					      &elsewhere), VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_share_export(sa, K2, VGPU_USAGE_SPILLED, 1,
					      &elsewhere), VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_share_hold(sa, zero), VGPU_LEDGER_EINVAL);
	vgpu_ledger_share_drop(sa, i, K2);	/* another key: ignored */
	vgpu_ledger_share_drop(sa, -1, K1);
	vgpu_ledger_share_drop(sa, VGPU_LEDGER_MAX_SHARES, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), MiB);
	vgpu_ledger_share_drop(sa, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sa), 0);
	vgpu_ledger_close(a);
}

/* The exporter dies (no leave): the reclaim moves its charge to the
 * importer, which then gives it back by letting go. */
Test(shares, the_payers_death_moves_the_charge_to_a_live_holder)
{
	struct vgpu_ledger *b = ledger_open_ok();
	struct vgpu_slot *sb = ledger_join_ok(b, "beta", GiB);
	int status, i;
	int p[2];
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		struct vgpu_ledger *cl;
		struct vgpu_slot *cs;
		char err[256];
		bool elsewhere;

		vgpu_ledger_forget_after_fork(b);
		if (vgpu_ledger_open(test_dir, UUID, 0, &cl, err, sizeof(err))
		    || vgpu_ledger_join(cl, "alpha", GiB, getpid(), 0, &cs, err,
					sizeof(err)) < 0 ||
		    vgpu_ledger_reserve(cs, VGPU_USAGE_VMM, 300 * MiB))
			_exit(10);
		i = vgpu_ledger_share_export(cs, K1, VGPU_USAGE_VMM, 300 * MiB,
					     &elsewhere);
		if (i < 0 || elsewhere || write(p[1], &i, sizeof(i)) != 4)
			_exit(11);
		_exit(0);	/* dies without leaving */
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &i, sizeof(i)), 4);
	close(p[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_eq(status, 0);
	/* The importer took its hold while the exporter lived: here, after
	 * its death, the record still names it (not yet reclaimed). */
	cr_assert_eq(vgpu_ledger_share_hold(sb, K1), i);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	cr_assert_eq(vgpu_ledger_reclaim(b), 1);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 300 * MiB);
	cr_expect_eq(vmm(sb), 300 * MiB);
	vgpu_ledger_share_drop(sb, i, K1);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 0);
	cr_expect_eq(vmm(sb), 0);
	vgpu_ledger_close(b);
}

/* ---- a seeded random walk against a model ------------------------------- */

#define PROCS	5
#define KEYS	12

struct walk {
	struct vgpu_ledger *l[PROCS];
	struct vgpu_slot *s[PROCS];
	unsigned holds[PROCS][KEYS];	/* the model: holds per process */
	int rec[KEYS];			/* record index, -1: none */
	uint64_t bytes[KEYS];
};

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void key_of(int k, uint64_t key[2])
{
	key[0] = 0x5eed0000u + (uint64_t)k;
	key[1] = 0xfeed;
}

static bool held(const struct walk *w, int k)
{
	for (int p = 0; p < PROCS; p++)
		if (w->holds[p][k])
			return true;
	return false;
}

static void check(struct walk *w, uint64_t seed, int step)
{
	uint64_t want = 0, got = 0;
	int32_t pid;

	for (int k = 0; k < KEYS; k++) {
		if (!held(w, k))
			continue;
		want += w->bytes[k];
		cr_assert_eq(vgpu_ledger_share_payer(w->s[0], w->rec[k], &pid),
			     w->bytes[k], "seed %llu step %d key %d",
			     (unsigned long long)seed, step, k);
	}
	for (int p = 0; p < PROCS; p++)
		got += vmm(w->s[p]);
	cr_assert_eq(got, want, "seed %llu step %d: slots hold %llu, the "
		     "model %llu", (unsigned long long)seed, step,
		     (unsigned long long)got, (unsigned long long)want);
	cr_assert_eq(vgpu_ledger_tenant_usage(w->s[0], VGPU_USAGE_VMM) +
		     vgpu_ledger_tenant_usage(w->s[1], VGPU_USAGE_VMM), want,
		     "seed %llu step %d: tenants", (unsigned long long)seed,
		     step);
}

static void walk(uint64_t seed, int steps)
{
	struct walk w;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, key[2];
	const char *tenants[2] = { "even", "odd" };

	memset(&w, 0, sizeof(w));
	for (int p = 0; p < PROCS; p++) {
		w.l[p] = ledger_open_ok();
		w.s[p] = ledger_join_ok(w.l[p], tenants[p % 2], 100 * GiB);
	}
	for (int k = 0; k < KEYS; k++)
		w.rec[k] = -1;
	for (int step = 0; step < steps; step++) {
		int p = (int)(rnd(&x) % PROCS), k = (int)(rnd(&x) % KEYS);
		int op = (int)(rnd(&x) % 10);

		key_of(k, key);
		if (op < 4 && !held(&w, k)) {
			w.bytes[k] = (1 + rnd(&x) % 64) * MiB;
			w.rec[k] = export_ok(w.s[p], key, w.bytes[k]);
			w.holds[p][k]++;
		} else if (op < 6 && held(&w, k)) {
			cr_assert_eq(vgpu_ledger_share_hold(w.s[p], key),
				     w.rec[k]);
			w.holds[p][k]++;
		} else if (op < 9 && w.holds[p][k]) {
			vgpu_ledger_share_drop(w.s[p], w.rec[k], key);
			w.holds[p][k]--;
		} else if (op == 9) {
			/* The process ends (leaves) and another starts in
			 * its place. */
			vgpu_ledger_leave(w.s[p]);
			memset(w.holds[p], 0, sizeof(w.holds[p]));
			w.s[p] = ledger_join_ok(w.l[p], tenants[p % 2],
					       100 * GiB);
		}
		check(&w, seed, step);
	}
	for (int p = 0; p < PROCS; p++)
		vgpu_ledger_leave(w.s[p]);
	w.s[0] = ledger_join_ok(w.l[0], "even", 100 * GiB);
	w.s[1] = ledger_join_ok(w.l[1], "odd", 100 * GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(w.s[0]), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(w.s[1]), 0);
	cr_expect_eq(vgpu_ledger_share_hold(w.s[0], key), VGPU_LEDGER_ENOENT);
	for (int p = 0; p < PROCS; p++)
		vgpu_ledger_close(w.l[p]);
}

Test(shares, a_random_walk_of_exports_holds_drops_and_leaves)
{
	for (uint64_t seed = 1; seed <= 20; seed++)
		walk(seed, 400);
}
