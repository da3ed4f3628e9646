/* test_throttle.c - the compute throttle's bucket, driven by a fake clock:
 * its exact arithmetic, its counters, its limits; a simulated GPU (one
 * kernel at a time, round robin between tenants' queues) on which tenants
 * launch back-to-back kernels asynchronously or launch-then-synchronise,
 * as the shim does; and threads hammering one bucket. */
#include <math.h>
#include <pthread.h>

#include "ledger_test.h"
#include "options.h"
#include "throttle.h"

TestSuite(throttle, .init = ledger_dir_make, .fini = ledger_dir_remove);

#define US (UINT64_C(1000))
#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define T0 (100 * SEC)		/* the fake clock's start (0 means never) */
#define NEVER UINT64_MAX

static struct vgpu_ledger_compute *compute(struct vgpu_slot *s)
{
	return (struct vgpu_ledger_compute *)&vgpu_ledger_tenant_record(s)->compute;
}

static int64_t tokens(struct vgpu_slot *s)
{
	return __atomic_load_n(&compute(s)->tokens_ns, __ATOMIC_RELAXED);
}

/* Joins a new tenant (named `tenant` and a number: a simulation run many
 * times in one test meets no record of an earlier run) with a share. */
static struct vgpu_slot *capped(struct vgpu_ledger *l, const char *tenant,
				unsigned share, int policy)
{
	static int runs;
	char name[64];
	struct vgpu_slot *s;

	snprintf(name, sizeof(name), "%s-%d", tenant, runs++);
	s = ledger_join_ok(l, name, VGPU_LEDGER_UNLIMITED);

	cr_assert_eq(vgpu_throttle_configure(s, share, policy, T0), 0);
	return s;
}

/* Closes a ledger and removes its file: the next run starts afresh. */
static void ledger_done(struct vgpu_ledger *l)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s", vgpu_ledger_path(l));
	vgpu_ledger_close(l);
	unlink(path);
}

/* ---- the bucket ------------------------------------------------------------ */

Test(throttle, refuses_a_share_over_100_or_an_unknown_policy)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 30, VGPU_POLICY_HARD);

	cr_expect_eq(vgpu_throttle_configure(s, 101, VGPU_POLICY_HARD, T0),
		     VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_throttle_configure(s, 50, 7, T0), VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_throttle_configure(s, 50, -1, T0), VGPU_LEDGER_EINVAL);
	cr_expect_eq(compute(s)->share_pct, 30, "unchanged");
	cr_expect_eq(compute(s)->policy, VGPU_POLICY_HARD);
	vgpu_ledger_close(l);
}

Test(throttle, uncapped_always_goes)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "free", VGPU_LEDGER_UNLIMITED);
	unsigned shares[] = { 0, 100 };

	for (int i = 0; i < 2; i++) {
		cr_assert_eq(vgpu_throttle_configure(s, shares[i],
				VGPU_POLICY_HARD, T0), 0);
		for (int k = 0; k < 100; k++)
			cr_expect_eq(vgpu_throttle_admit(s, T0, SEC), 0);
	}
	cr_assert_eq(vgpu_throttle_configure(s, 10, VGPU_POLICY_OFF, T0), 0);
	cr_expect_eq(vgpu_throttle_admit(s, T0, SEC), 0);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launches, 201);
	vgpu_ledger_close(l);
}

Test(throttle, a_cap_applies_from_the_first_launch_with_an_exact_wait)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 30, VGPU_POLICY_HARD);
	uint64_t w = vgpu_throttle_admit(s, T0, 3 * MS);

	/* 3 ms of GPU time at 30% takes 10 ms of wall time. */
	cr_expect_eq(w, 10 * MS);
	cr_expect_neq(vgpu_throttle_admit(s, T0 + w - 100, 3 * MS), 0);
	cr_expect_eq(vgpu_throttle_admit(s, T0 + w, 3 * MS), 0);
	cr_expect_eq(tokens(s), 0);
	/* An unknown length goes on an empty bucket and is charged later. */
	cr_expect_eq(vgpu_throttle_admit(s, T0 + w, 0), 0);
	vgpu_throttle_settle(s, 3 * MS, 0);
	cr_expect_eq(tokens(s), -3 * (int64_t)MS);
	/* Wall time that is not a whole 100 ns step is carried: the wait
	 * counts it. */
	w = vgpu_throttle_admit(s, T0 + 10 * MS + 150, 1);
	cr_expect_eq(w, 10 * MS + 100 - 150, "%llu", (unsigned long long)w);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launches, 2);
	vgpu_ledger_close(l);
}

Test(throttle, refill_is_exact_at_any_call_pattern)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 37, VGPU_POLICY_HARD);
	uint64_t now = T0, charged = 0, x = 12345;

	/* Deep in debt, so the burst never clamps: the bucket must equal
	 * exactly what 37% of the elapsed whole steps gave, minus charges. */
	vgpu_throttle_settle(s, 3600 * SEC, 0);
	charged = 3600 * SEC;
	for (int i = 0; i < 1000000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		now += (x >> 33) % 7777;		/* 0..7.8 us, odd */
		cr_assert_neq(vgpu_throttle_admit(s, now, 0), 0);
	}
	int64_t want = (int64_t)((now - T0) / 100 * 37) - (int64_t)charged;
	cr_expect_eq(tokens(s), want, "%lld vs %lld", (long long)tokens(s),
		     (long long)want);
	cr_expect_eq(compute(s)->refill_ns, T0 + (now - T0) / 100 * 100);
	vgpu_ledger_close(l);
}

/* A bucket that holds what a launch needs is not refilled (three atomic
 * steps saved), and the accrual it skipped is added whole at the next
 * refill: the same tokens as refilling at every admission. */
Test(throttle, a_bucket_that_holds_enough_is_refilled_later_with_nothing_lost)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 50, VGPU_POLICY_HARD);

	cr_assert_eq(vgpu_throttle_admit(s, T0 + 10 * MS, 1 * MS), 0);
	cr_expect_eq(tokens(s), 4 * (int64_t)MS);
	cr_expect_eq(compute(s)->refill_ns, T0 + 10 * MS);
	cr_assert_eq(vgpu_throttle_admit(s, T0 + 20 * MS, 1 * MS), 0);
	cr_expect_eq(tokens(s), 3 * (int64_t)MS);
	cr_expect_eq(compute(s)->refill_ns, T0 + 10 * MS, "not refilled");
	cr_assert_eq(vgpu_throttle_admit(s, T0 + 30 * MS, 5 * MS), 0);
	cr_expect_eq(tokens(s), 8 * (int64_t)MS, "%lld",
		     (long long)tokens(s));
	cr_expect_eq(compute(s)->refill_ns, T0 + 30 * MS);
	vgpu_ledger_close(l);
}

/* The tenant's probe: one at a time; one whose holder lives is held up
 * to its bound, then retired by the next asker, the tenant charged the
 * time since it went (its kernel may still run); its own process,
 * reading it after all, finds what was charged for it. */
Test(throttle, a_live_holder_s_probe_is_held_then_retired_and_charged)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "t", 30, VGPU_POLICY_HARD);
	struct vgpu_slot *b = ledger_join_ok(l, vgpu_ledger_tenant_record(a)->name,
					     VGPU_LEDGER_UNLIMITED);
	uint64_t pa = 0, pb = 0, hold = VGPU_THROTTLE_PROBE_HOLD_NS;
	int64_t before;

	cr_assert_eq(vgpu_throttle_probe_begin(a, T0, &pa),
		     VGPU_THROTTLE_PROBE_TAKEN);
	cr_assert_neq(pa, 0);
	cr_expect_eq(vgpu_throttle_probe_begin(b, T0 + SEC, &pb),
		     VGPU_THROTTLE_PROBE_BUSY, "its holder lives");
	cr_expect_eq(vgpu_throttle_probe_begin(b, T0 + hold, &pb),
		     VGPU_THROTTLE_PROBE_BUSY, "not past its bound");
	before = tokens(a);
	cr_expect_eq(vgpu_throttle_probe_begin(b, T0 + hold + SEC, &pb),
		     VGPU_THROTTLE_PROBE_RETIRED);
	cr_expect_eq(tokens(a), before - (int64_t)(hold + SEC),
		     "charged the time it may have run");
	cr_expect_eq(vgpu_throttle_probe_charged(a, pa), hold + SEC);
	cr_expect_eq(vgpu_throttle_probe_charged(a, pa + 1), 0,
		     "another probe's");
	/* The retired one's end lets go of nothing: b's probe holds. */
	cr_assert_eq(vgpu_throttle_probe_begin(b, T0 + hold + SEC, &pb),
		     VGPU_THROTTLE_PROBE_TAKEN);
	vgpu_throttle_probe_end(a, pa);
	cr_expect_eq(vgpu_throttle_probe_begin(a, T0 + hold + SEC + 1, &pa),
		     VGPU_THROTTLE_PROBE_BUSY);
	vgpu_throttle_probe_end(b, pb);
	cr_expect_eq(vgpu_throttle_probe_begin(a, T0 + hold + 2 * SEC, &pa),
		     VGPU_THROTTLE_PROBE_TAKEN);
	vgpu_ledger_close(l);
}

/* A probe whose holder died (a slot no process holds) is retired as soon
 * as that can be seen, charged only the time since it went. */
Test(throttle, a_dead_holder_s_probe_is_retired_at_once)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "t", 30, VGPU_POLICY_HARD);
	struct vgpu_ledger_tenant *ten =
		(struct vgpu_ledger_tenant *)vgpu_ledger_tenant_record(a);
	/* Slot 900 of generation 3: nobody's. */
	uint64_t dead = (uint64_t)(901u | 3u << 11) << 32 |
			(T0 / MS & UINT32_MAX);
	uint64_t p = 0;
	int64_t before = tokens(a);

	__atomic_store_n(&ten->probe, dead, __ATOMIC_RELEASE);
	cr_expect_eq(vgpu_throttle_probe_begin(a, T0 + 10 * MS, &p),
		     VGPU_THROTTLE_PROBE_BUSY, "too young to look");
	cr_expect_eq(vgpu_throttle_probe_begin(a, T0 + 60 * MS, &p),
		     VGPU_THROTTLE_PROBE_RETIRED);
	cr_expect_eq(tokens(a), before - 60 * (int64_t)MS);
	cr_expect_eq(vgpu_throttle_probe_begin(a, T0 + 60 * MS, &p),
		     VGPU_THROTTLE_PROBE_TAKEN);
	vgpu_ledger_close(l);
}

/* A launch admitted beside the tenant's running probe needs the probe's
 * time in flight besides its own: four processes starting 300 ms kernels
 * together ran a probe and a known kernel in one second under 30% (a
 * window of 60%). The probe's own process is told it is its own; a probe
 * past the limit, or whose process stopped showing that it watches it
 * (stopped, frozen or dead: it held the tenant a second), holds nobody. */
Test(throttle, a_running_probe_holds_the_tenant_s_known_launches)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "t", 50, VGPU_POLICY_HARD);
	struct vgpu_slot *b = ledger_join_ok(l, vgpu_ledger_tenant_record(a)->name,
					     VGPU_LEDGER_UNLIMITED);
	struct vgpu_ledger_tenant *ten =
		(struct vgpu_ledger_tenant *)vgpu_ledger_tenant_record(a);
	uint64_t pa = 0, now = T0 + 40 * MS, held;
	bool mine = true;

	/* 40 ms at 50%: the bucket holds the burst, 20 ms. */
	cr_assert_eq(vgpu_throttle_probe_running(b, now, SEC, &mine), 0);
	cr_expect(!mine);
	cr_assert_eq(vgpu_throttle_probe_begin(a, now, &pa),
		     VGPU_THROTTLE_PROBE_TAKEN);
	held = vgpu_throttle_probe_running(b, now + 25 * MS + 1, SEC, &mine);
	cr_expect_eq(held, 26 * MS, "whole ms, rounded up: %llu",
		     (unsigned long long)held);
	cr_expect(!mine, "a's probe, asked by b");
	cr_expect_neq(vgpu_throttle_admit_held(b, 0, now + 25 * MS, MS, 0,
					       held), 0,
		      "20 ms held: 26 ms more than 1 ms may not go");
	cr_expect_eq(vgpu_throttle_admit_held(b, 0, now + 25 * MS, MS, 0,
					      18 * MS), 0, "19 ms: it goes");
	cr_expect_eq(tokens(b), 19 * (int64_t)MS, "charged its own only");
	cr_expect_neq(vgpu_throttle_probe_running(a, now + 5 * MS, SEC, &mine),
		      0);
	cr_expect(mine, "a's own");
	/* Past PROBE_DEAD_NS it holds only while its process shows that it
	 * watches it (a process stopped, frozen or dead does not). */
	cr_expect_eq(vgpu_throttle_probe_running(b, now + 49 * MS, SEC, &mine),
		     50 * MS, "young: held");
	cr_expect_eq(vgpu_throttle_probe_running(b, now + 50 * MS, SEC, &mine),
		     0, "no sign for 50 ms");
	vgpu_throttle_probe_beat(b, now + 50 * MS);
	cr_expect_eq(vgpu_throttle_probe_running(b, now + 50 * MS, SEC, &mine),
		     0, "only its own process's sign counts");
	vgpu_throttle_probe_beat(a, now + 50 * MS);
	cr_expect_eq(ten->probe_beat, now + 50 * MS);
	vgpu_throttle_probe_beat(a, now + 50 * MS + MS - 1);
	cr_expect_eq(ten->probe_beat, now + 50 * MS, "once a ms at most");
	cr_expect_eq(vgpu_throttle_probe_running(b, now + 99 * MS, SEC, &mine),
		     100 * MS, "watched: held");
	vgpu_throttle_probe_beat(a, now + SEC - 10 * MS);
	cr_expect_eq(vgpu_throttle_probe_running(b, now + SEC, SEC, &mine), 0,
		     "past the limit");
	vgpu_throttle_probe_end(a, pa);
	cr_expect_eq(vgpu_throttle_probe_running(b, now + 6 * MS, SEC, &mine),
		     0, "read: nothing held");
	vgpu_ledger_close(l);
}

/* A launch of no known length needs what the tenant's last launch with an
 * estimate needed (at most the burst), stored when it changes: a
 * process's first 100 ms kernel, on a bucket at 0, went 66 ms nearer the
 * known one before it than a known one would (a window of 33.3% under
 * 30%). Nothing before any. */
Test(throttle, an_unknown_length_needs_what_the_last_known_launch_did)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 30, VGPU_POLICY_HARD);
	int64_t *tok = &compute(s)->tokens_ns;
	uint64_t *refill = &compute(s)->refill_ns;
	uint64_t now = T0 + SEC;

	cr_expect_eq(vgpu_throttle_unknown_need(s), 0, "none yet");
	cr_assert_eq(vgpu_throttle_admit(s, now, 3 * MS), 0);
	cr_expect_eq(vgpu_throttle_unknown_need(s), 3 * MS);
	cr_assert_eq(vgpu_throttle_admit(s, now, 0), 0, "unknown: no change");
	cr_expect_eq(vgpu_throttle_unknown_need(s), 3 * MS);
	__atomic_store_n(tok, 20 * (int64_t)MS, __ATOMIC_RELAXED);
	cr_assert_eq(vgpu_throttle_admit(s, now, 100 * MS), 0);
	cr_expect_eq(vgpu_throttle_unknown_need(s),
		     (uint64_t)VGPU_THROTTLE_BURST_NS, "at most the burst");
	/* The bucket at 0, refilled now: 20 ms take 66.7 ms at 30%. */
	now += SEC;
	__atomic_store_n(tok, 0, __ATOMIC_RELAXED);
	__atomic_store_n(refill, now, __ATOMIC_RELAXED);
	cr_expect_neq(vgpu_throttle_admit_held(s, 0, now + 66 * MS, 0, 0,
					       vgpu_throttle_unknown_need(s)),
		      0);
	cr_expect_eq(vgpu_throttle_admit_held(s, 0, now + 67 * MS, 0, 0,
					      vgpu_throttle_unknown_need(s)),
		     0);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS, "charged nothing: %lld",
		     (long long)tokens(s));
	vgpu_ledger_close(l);
}

Test(throttle, an_idle_bucket_fills_to_the_burst_only)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 50, VGPU_POLICY_HARD);

	/* The first admission that needs tokens refills: an hour's accrual,
	 * clamped at the burst. */
	cr_expect_eq(vgpu_throttle_admit(s, T0 + 3600 * SEC, 1 * MS), 0);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS - (int64_t)MS);
	vgpu_throttle_settle(s, 0, 1 * MS);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS);
	/* A launch longer than the burst goes on a full bucket, into debt. */
	cr_expect_eq(vgpu_throttle_admit(s, T0 + 3600 * SEC, 50 * MS), 0);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS - 50 * (int64_t)MS);
	/* A refund never fills it past the burst either. */
	vgpu_throttle_settle(s, 0, 50 * MS);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS);
	/* A wait is never longer than the maximum: the caller asks again. */
	vgpu_throttle_settle(s, 3600 * SEC, 0);
	cr_expect_eq(vgpu_throttle_admit(s, T0 + 3600 * SEC, 1),
		     VGPU_THROTTLE_MAX_WAIT_NS);
	vgpu_ledger_close(l);
}

Test(throttle, settle_charges_the_difference_and_counts_gpu_time)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 50, VGPU_POLICY_HARD);

	cr_assert_eq(vgpu_throttle_admit(s, T0 + 40 * MS, 5 * MS), 0);
	cr_expect_eq(tokens(s), 15 * (int64_t)MS);
	vgpu_throttle_settle(s, 7 * MS, 5 * MS);
	cr_expect_eq(tokens(s), 13 * (int64_t)MS);
	vgpu_throttle_settle(s, 1 * MS, 5 * MS);
	cr_expect_eq(tokens(s), 17 * (int64_t)MS);
	cr_expect_eq(compute(s)->gpu_time_ns, 8 * MS);
	cr_expect_eq(vgpu_ledger_slot_record(s)->gpu_time_ns, 8 * MS);
	vgpu_throttle_waited(s, 123);
	vgpu_throttle_waited(s, 7);
	cr_expect_eq(compute(s)->wait_ns, 130);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launch_wait_ns, 130);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launches_throttled, 2);
	vgpu_ledger_close(l);
}

Test(throttle, a_correction_moves_the_charge_and_counts_nothing)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 50, VGPU_POLICY_HARD);

	/* Admitted on a full bucket with an estimate of 60 ms: 40 ms debt. */
	cr_assert_eq(vgpu_throttle_admit(s, T0 + 40 * MS, 60 * MS), 0);
	cr_expect_eq(tokens(s), -40 * (int64_t)MS);
	/* Read first at 2 ms: the debt is gone at once. */
	vgpu_throttle_correct(s, 60 * MS, 2 * MS);
	cr_expect_eq(tokens(s), 18 * (int64_t)MS);
	cr_expect_eq(compute(s)->gpu_time_ns, 0);
	/* The final reading, 1.5 ms: charged that, counted once. */
	vgpu_throttle_settle(s, 1500 * US, 2 * MS);
	cr_expect_eq(tokens(s), 18500 * (int64_t)US);
	cr_expect_eq(compute(s)->gpu_time_ns, 1500 * US);
	cr_expect_eq(vgpu_ledger_slot_record(s)->gpu_time_ns, 1500 * US);
	/* A correction upwards charges; a refund stops at the burst. */
	vgpu_throttle_correct(s, 1 * MS, 4 * MS);
	cr_expect_eq(tokens(s), 15500 * (int64_t)US);
	vgpu_throttle_correct(s, 30 * MS, 0);
	cr_expect_eq(tokens(s), VGPU_THROTTLE_BURST_NS);
	cr_expect_eq(compute(s)->gpu_time_ns, 1500 * US);
	vgpu_ledger_close(l);
}

Test(throttle, the_most_recent_settings_apply_and_same_ones_keep_the_bucket)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "t", 50, VGPU_POLICY_HARD);
	struct vgpu_slot *b = ledger_join_ok(l, vgpu_ledger_tenant_record(a)->name,
					     VGPU_LEDGER_UNLIMITED);

	cr_assert_eq(vgpu_throttle_admit(a, T0 + 10 * MS, 1 * MS), 0);
	cr_expect_eq(tokens(a), 4 * (int64_t)MS);
	/* Another process of the tenant joining with the same settings. */
	cr_assert_eq(vgpu_throttle_configure(b, 50, VGPU_POLICY_HARD,
					     T0 + 10 * MS), 0);
	cr_expect_eq(tokens(b), 4 * (int64_t)MS);
	/* Different settings: they apply to both, from an empty bucket. */
	cr_assert_eq(vgpu_throttle_configure(b, 20, VGPU_POLICY_ELASTIC,
					     T0 + 20 * MS), 0);
	cr_expect_eq(compute(a)->share_pct, 20);
	cr_expect_eq(compute(a)->policy, VGPU_POLICY_ELASTIC);
	cr_expect_eq(tokens(a), 0);
	cr_expect_eq(compute(a)->refill_ns, T0 + 20 * MS);
	vgpu_ledger_close(l);
}

Test(throttle, elastic_lends_only_when_no_other_tenant_is_active)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *e = capped(l, "elastic", 30, VGPU_POLICY_ELASTIC);
	struct vgpu_slot *h = capped(l, "hard", 50, VGPU_POLICY_HARD);
	uint64_t now = T0 + SEC;

	vgpu_throttle_settle(e, 5 * SEC, 0);	/* deep in debt */
	cr_expect_eq(vgpu_throttle_admit(e, now, MS), 0, "alone: lent");
	cr_expect_eq(tokens(e), 0, "and no debt kept");
	vgpu_throttle_settle(e, 5 * SEC, 0);
	/* The other tenant asks (told to wait: it is active until then). */
	vgpu_throttle_settle(h, SEC, 0);
	uint64_t w = vgpu_throttle_admit(h, now, MS);
	cr_expect_gt(w, 0);
	cr_expect_neq(vgpu_throttle_admit(e, now, MS), 0, "not alone");
	cr_expect_neq(vgpu_throttle_admit(e, now + w + VGPU_THROTTLE_ACTIVE_NS
					  - MS, MS), 0);
	cr_expect_eq(vgpu_throttle_admit(e, now + w + VGPU_THROTTLE_ACTIVE_NS
					 + MS, MS), 0, "alone again");
	vgpu_ledger_close(l);
}

/* ---- the opportunistic class ------------------------------------------------ */

Test(throttle, opportunistic_yields_to_an_announced_uncapped_tenant)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *o = capped(l, "opp", 0, VGPU_POLICY_OPPORTUNISTIC);
	struct vgpu_slot *g = ledger_join_ok(l, "guaranteed",
					     VGPU_LEDGER_UNLIMITED);
	uint64_t now = T0 + SEC;

	cr_expect(vgpu_throttle_opportunistic(o));
	cr_expect(!vgpu_throttle_opportunistic(g));
	cr_expect_eq(vgpu_throttle_opportunistic_ns(g), 0, "none yet");
	cr_expect(!vgpu_throttle_opportunistic_near(g, now));
	cr_expect_eq(vgpu_throttle_admit(o, now, MS), 0, "alone: goes");
	cr_expect_eq(vgpu_throttle_opportunistic_ns(g), now, "the GPU's sign");
	cr_expect(vgpu_throttle_opportunistic_near(g, now + SEC / 2));
	cr_expect(!vgpu_throttle_opportunistic_near(g, now + 2 * SEC));
	/* The sign is stored at most once a millisecond. */
	vgpu_throttle_admit(o, now + MS / 2, MS);
	cr_expect_eq(vgpu_throttle_opportunistic_ns(g), now);
	/* The guaranteed tenant launches: the other waits out its window. */
	vgpu_throttle_announce(g, now + MS);
	cr_expect_eq(vgpu_throttle_admit(o, now + 2 * MS, MS),
		     VGPU_THROTTLE_OPP_WINDOW_NS - MS);
	cr_expect_eq(vgpu_ledger_slot_record(o)->launches, 2, "nothing counted");
	cr_expect_eq(vgpu_throttle_admit(o, now + MS +
					 VGPU_THROTTLE_OPP_WINDOW_NS, MS), 0);
	vgpu_ledger_close(l);
}

Test(throttle, opportunistic_runs_beside_a_hard_cap_and_never_blocks_elastic)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *o = capped(l, "opp", 0, VGPU_POLICY_OPPORTUNISTIC);
	struct vgpu_slot *h = capped(l, "hard", 30, VGPU_POLICY_HARD);
	struct vgpu_slot *e = capped(l, "elastic", 20, VGPU_POLICY_ELASTIC);
	uint64_t now = T0 + SEC;

	/* The hard tenant is active (told to wait): it wants its share
	 * only, so the opportunistic one still goes. */
	vgpu_throttle_settle(h, SEC, 0);
	cr_expect_gt(vgpu_throttle_admit(h, now, MS), 0);
	cr_expect_eq(vgpu_throttle_admit(o, now, MS), 0);
	/* An elastic tenant is lent the GPU whatever the opportunistic one
	 * does (the hard one is idle by now), and then blocks it. */
	now += VGPU_THROTTLE_MAX_WAIT_NS + VGPU_THROTTLE_ACTIVE_NS;
	cr_expect_eq(vgpu_throttle_admit(o, now, MS), 0);
	vgpu_throttle_settle(e, 5 * SEC, 0);
	cr_expect_eq(vgpu_throttle_admit(e, now, MS), 0, "lent");
	cr_expect_neq(vgpu_throttle_admit(o, now + MS, MS), 0);
	vgpu_ledger_close(l);
}

/* The queue bound is the tenant's, across its processes (two slots of
 * one tenant here), and a time: it empties as the clock moves. */
Test(throttle, opportunistic_queue_is_bounded_across_the_tenant)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *o1 = ledger_join_ok(l, "oq", VGPU_LEDGER_UNLIMITED);
	struct vgpu_slot *o2 = ledger_join_ok(l, "oq", VGPU_LEDGER_UNLIMITED);
	uint64_t now = T0 + SEC;

	cr_assert_eq(vgpu_throttle_configure(o1, 0, VGPU_POLICY_OPPORTUNISTIC,
					     T0), 0);
	cr_expect_eq(vgpu_throttle_admit(o1, now, 3 * MS), 0);
	/* 3 ms queued: another 3 ms from the other process waits 2 ms. */
	cr_expect_eq(vgpu_throttle_admit(o2, now, 3 * MS), 2 * MS);
	cr_expect_eq(vgpu_throttle_admit(o2, now, MS), 0, "1 ms fits");
	/* 4 ms queued by both: at +2 ms, 2 ms are left, 3 more wait 1 ms. */
	cr_expect_eq(vgpu_throttle_admit(o1, now + 2 * MS, 3 * MS), MS);
	cr_expect_eq(vgpu_throttle_admit(o1, now + 3 * MS, 3 * MS), 0);
	/* A kernel longer than the bound goes once nothing is queued. */
	cr_expect_gt(vgpu_throttle_admit(o2, now + 3 * MS, 10 * MS), 0);
	cr_expect_eq(vgpu_throttle_admit(o2, now + 8 * MS, 10 * MS), 0);
	vgpu_ledger_close(l);
}

/* A hard tenant running holds an opportunistic one; waiting, it lets it
 * fill the wait with work that ends before; a stamp from far ahead (a
 * hand-edited file, another boot) holds nobody and is overwritten. */
Test(throttle, opportunistic_fills_a_hard_tenants_waits_only)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *o = capped(l, "opp", 0, VGPU_POLICY_OPPORTUNISTIC);
	struct vgpu_slot *h = capped(l, "hard", 50, VGPU_POLICY_HARD);
	struct vgpu_slot *g = ledger_join_ok(l, "guaranteed",
					     VGPU_LEDGER_UNLIMITED);
	uint64_t now = T0 + SEC, w;

	cr_expect_eq(vgpu_throttle_admit(h, now, MS), 0, "from its burst");
	cr_expect_eq(vgpu_throttle_admit(o, now + MS / 2, MS),
		     VGPU_THROTTLE_OPP_POLL_NS, "the hard one runs");
	vgpu_throttle_settle(h, 100 * MS, 0);	/* in debt: it waits */
	w = vgpu_throttle_admit(h, now + 2 * MS, MS);
	cr_assert_gt(w, 3 * MS);
	cr_expect_eq(vgpu_throttle_admit(o, now + 2 * MS, MS), 0,
		     "1 ms fits its %llu ns wait", (unsigned long long)w);
	cr_expect_gt(vgpu_throttle_admit(o, now + 2 * MS, w), 0,
		     "work past its wait does not");
	/* A bogus stamp 30 s ahead: no hold, and the next stamp wins. */
	now += SEC;
	vgpu_throttle_announce(g, now + 30 * SEC);
	cr_expect_eq(vgpu_throttle_admit(o, now + 10 * MS, MS), 0);
	vgpu_throttle_announce(g, now + 20 * MS);
	cr_expect_gt(vgpu_throttle_admit(o, now + 30 * MS, MS), 0);
	vgpu_ledger_close(l);
}

Test(throttle, opportunistic_with_a_share_is_held_to_it)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *o = capped(l, "opp", 30, VGPU_POLICY_OPPORTUNISTIC);

	/* Alone, as a hard 30%: 3 ms of GPU time takes 10 ms. */
	cr_expect_eq(vgpu_throttle_admit(o, T0, 3 * MS), 10 * MS);
	cr_expect_eq(vgpu_throttle_admit(o, T0 + 10 * MS, 3 * MS), 0);
	vgpu_ledger_close(l);
}

/* ---- threads ---------------------------------------------------------------- */

#define THREADS 8
#define ROUNDS 200000

struct hammer {
	struct vgpu_slot *s;
	uint64_t *clock;	/* shared fake clock, or NULL: fixed */
	uint64_t measured, admitted;
	unsigned seed;
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	uint64_t now = T0;

	for (int i = 0; i < ROUNDS; i++) {
		uint64_t m = 1 + rand_r(&h->seed) % 20000;
		uint64_t e = h->clock ? 0 : m - m / 3;

		if (h->clock)
			now = __atomic_add_fetch(h->clock,
						 rand_r(&h->seed) % 3000,
						 __ATOMIC_RELAXED);
		if (vgpu_throttle_admit(h->s, now, e) != 0)
			continue;
		vgpu_throttle_settle(h->s, m, e);
		h->measured += m;
		h->admitted++;
	}
	return NULL;
}

static void hammer(struct vgpu_slot *s, uint64_t *clock, uint64_t *measured,
		   uint64_t *admitted)
{
	struct hammer h[THREADS];
	pthread_t th[THREADS];

	for (int i = 0; i < THREADS; i++) {
		h[i] = (struct hammer){ .s = s, .clock = clock,
					.seed = 17u * (unsigned)i + 1 };
		cr_assert_eq(pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
	}
	*measured = *admitted = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		*measured += h[i].measured;
		*admitted += h[i].admitted;
	}
}

Test(throttle, threads_lose_no_charge)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 40, VGPU_POLICY_HARD);
	int64_t start = INT64_C(1) << 50;
	uint64_t measured, admitted;

	/* A fixed clock (no refill) and a bucket that never runs dry. */
	__atomic_store_n(&compute(s)->tokens_ns, start, __ATOMIC_RELAXED);
	hammer(s, NULL, &measured, &admitted);
	cr_expect_eq(admitted, THREADS * ROUNDS);
	cr_expect_eq(compute(s)->gpu_time_ns, measured);
	cr_expect_eq(tokens(s), start - (int64_t)measured);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launches, admitted);
	vgpu_ledger_close(l);
}

Test(throttle, threads_refill_exactly)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 40, VGPU_POLICY_HARD);
	uint64_t clock = T0, measured, admitted;

	/* Charges outrun the accrual, so the bucket never reaches the burst:
	 * it must hold exactly the accrual of the converted steps minus
	 * every charge, whoever refilled. */
	hammer(s, &clock, &measured, &admitted);
	cr_expect_gt(admitted, 1000);
	cr_expect_lt(admitted, THREADS * ROUNDS);
	uint64_t refilled = compute(s)->refill_ns;
	cr_expect_leq(refilled, clock);
	cr_expect_eq(tokens(s), (int64_t)((refilled - T0) / 100 * 40) -
				(int64_t)measured);
	cr_expect_eq(compute(s)->gpu_time_ns, measured);
	vgpu_ledger_close(l);
}

/* ---- a simulated GPU -------------------------------------------------------
 *
 * One kernel runs at a time; when it ends, the next one comes from the
 * tenants' queues in turn (round robin: the GPU time-slices contexts). An
 * agent is one tenant's process launching back-to-back kernels of one
 * length, as the shim does (intercept/launch.c):
 *   - asynchronous: up to RING launches in flight; each launch is admitted
 *     with the last measured length as its estimate (the first, unknown,
 *     goes alone: the next waits for it to be measured); finished launches
 *     are settled at the next launch once their end event has been seen
 *     (SEEN_NS after they end); LAUNCH_NS of CPU per launch;
 *   - launch-then-synchronise: one launch at a time, settled SYNC_NS after
 *     it ends, then the next.
 * Told to wait, an agent sleeps the wait plus OVERSLEEP_NS (timer slack).
 * Each agent adds up its GPU time inside given windows of wall time. */

#define RING 16
#define LAUNCH_NS (2 * US)
#define SEEN_NS (20 * US)
#define SYNC_NS (3 * US)
#define OVERSLEEP_NS (50 * US)
#define AGENTS 2
#define WINDOWS 16

enum style { ASYNC, SYNC };

struct kernel {
	uint64_t est, start, end;
};

struct agent {
	struct vgpu_slot *s;
	enum style style;
	uint64_t len;			/* its kernels' length */
	uint64_t from, until;		/* wall time it launches in */
	uint64_t next;			/* when it acts next; NEVER: blocked */
	uint64_t est;			/* last measured; 0: none yet */
	uint64_t launched, started, finished, settled;
	uint64_t wait_from;		/* 0: not waiting */
	struct kernel ring[RING];
	uint64_t busy[WINDOWS];		/* GPU time inside each window */
};

struct sim {
	struct agent a[AGENTS];
	int n;
	uint64_t win[WINDOWS][2];
	int nwin;
	int running, rr;		/* agent on the GPU (-1: idle) */
};

static void gpu_start(struct sim *g, uint64_t now)
{
	for (int i = 1; i <= g->n; i++) {
		int k = (g->rr + i) % g->n;
		struct agent *a = &g->a[k];

		if (a->started < a->launched) {
			struct kernel *kn = &a->ring[a->started++ % RING];

			kn->start = now;
			kn->end = now + a->len;
			g->running = k;
			g->rr = k;
			return;
		}
	}
	g->running = -1;
}

static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
	uint64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;

	return hi > lo ? hi - lo : 0;
}

static uint64_t seen_after(const struct agent *a)
{
	return a->style == SYNC ? SYNC_NS : SEEN_NS;
}

static void gpu_finish(struct sim *g)
{
	struct agent *a = &g->a[g->running];
	uint64_t i = a->finished++;
	struct kernel *kn = &a->ring[i % RING];

	for (int w = 0; w < g->nwin; w++)
		a->busy[w] += overlap(kn->start, kn->end, g->win[w][0],
				      g->win[w][1]);
	if (a->next == NEVER && i == a->settled)
		a->next = kn->end + seen_after(a);	/* what it waited for */
	gpu_start(g, kn->end);
}

static void agent_act(struct sim *g, struct agent *a, uint64_t now)
{
	uint64_t w;

	while (a->settled < a->finished &&
	       a->ring[a->settled % RING].end + seen_after(a) <= now) {
		struct kernel *kn = &a->ring[a->settled++ % RING];

		vgpu_throttle_settle(a->s, kn->end - kn->start, kn->est);
		a->est = kn->end - kn->start;
	}
	if (a->launched - a->settled == RING ||
	    (a->launched > a->settled && (a->style == SYNC || !a->est))) {
		a->next = NEVER;	/* woken when the oldest is seen */
		if (a->ring[a->settled % RING].end &&
		    a->settled < a->finished)
			a->next = a->ring[a->settled % RING].end + seen_after(a);
		return;
	}
	w = vgpu_throttle_admit(a->s, now, a->est);
	if (w) {
		if (!a->wait_from)
			a->wait_from = now;
		a->next = now + w + OVERSLEEP_NS;
		return;
	}
	if (a->wait_from) {
		vgpu_throttle_waited(a->s, now - a->wait_from);
		a->wait_from = 0;
	}
	a->ring[a->launched++ % RING] = (struct kernel){ .est = a->est };
	if (g->running < 0)
		gpu_start(g, now);
	a->next = a->style == SYNC ? NEVER : now + LAUNCH_NS;
}

/* Runs until `end` (run past a window's end to count the kernels that
 * straddle it). */
static void sim_run(struct sim *g, uint64_t end)
{
	for (;;) {
		uint64_t t_gpu = g->running >= 0 ?
			g->a[g->running].ring[(g->a[g->running].started - 1) %
					      RING].end : NEVER;
		struct agent *next = NULL;

		for (int i = 0; i < g->n; i++) {
			struct agent *a = &g->a[i];
			uint64_t t = a->next < a->from ? a->from : a->next;

			if (t < a->until && (!next || t < next->next))
				next = a, a->next = t;
		}
		if (t_gpu >= end && (!next || next->next >= end))
			return;
		if (t_gpu <= (next ? next->next : NEVER))
			gpu_finish(g);
		else
			agent_act(g, next, next->next);
	}
}

static void sim_init(struct sim *g)
{
	memset(g, 0, sizeof(*g));
	g->running = -1;
}

static struct agent *sim_agent(struct sim *g, struct vgpu_slot *s,
			       enum style style, uint64_t len, uint64_t from,
			       uint64_t until)
{
	struct agent *a = &g->a[g->n++];

	*a = (struct agent){ .s = s, .style = style, .len = len,
			     .from = from, .until = until, .next = from };
	return a;
}

static int sim_window(struct sim *g, uint64_t from, uint64_t until)
{
	g->win[g->nwin][0] = from;
	g->win[g->nwin][1] = until;
	return g->nwin++;
}

/* Share of the GPU an agent got in window w, in percent. */
static double achieved(const struct sim *g, const struct agent *a, int w)
{
	return 100.0 * (double)a->busy[w] /
	       (double)(g->win[w][1] - g->win[w][0]);
}

/* One tenant alone at `cap` for 3 s: its share, in percent. */
static double alone(unsigned cap, enum style style, uint64_t len)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", cap, VGPU_POLICY_HARD);
	struct sim *g = malloc(sizeof(*g));
	double got;

	cr_assert_not_null(g);
	sim_init(g);
	struct agent *a = sim_agent(g, s, style, len, T0, NEVER);
	int w = sim_window(g, T0, T0 + 3 * SEC);

	sim_run(g, T0 + 3 * SEC + 50 * MS);
	got = achieved(g, a, w);
	/* Every launch admitted was measured and charged, none lost. */
	cr_expect_leq(compute(s)->gpu_time_ns, a->launched * len);
	cr_expect_eq(compute(s)->gpu_time_ns, a->settled * len);
	cr_expect_eq(vgpu_ledger_slot_record(s)->launches, a->launched);
	free(g);
	ledger_done(l);
	return got;
}

static void expect_caps(enum style style)
{
	static const unsigned caps[] = { 10, 30, 50, 70, 90 };
	static const uint64_t lens[] = { 50 * US, 1 * MS, 10 * MS };

	for (int j = 0; j < 3; j++)
		for (int i = 0; i < 5; i++) {
			double got = alone(caps[i], style, lens[j]);

			cr_log_info("%s %5llu us at %2u%%: %.3f%%",
				    style == SYNC ? "sync " : "async",
				    (unsigned long long)(lens[j] / US),
				    caps[i], got);
			cr_expect_leq(got, caps[i] + 1e-9,
				      "%llu ns at %u%%: %.3f%%",
				      (unsigned long long)lens[j], caps[i], got);
			cr_expect_geq(got, caps[i] - 2.0,
				      "%llu ns at %u%%: %.3f%%",
				      (unsigned long long)lens[j], caps[i], got);
		}
}

Test(throttle, async_launches_get_their_cap_within_2_points)
{
	expect_caps(ASYNC);
}

Test(throttle, launch_then_synchronise_gets_its_cap_within_2_points)
{
	expect_caps(SYNC);
}

Test(throttle, an_hour_at_37_percent_is_exact)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = capped(l, "t", 37, VGPU_POLICY_HARD);
	struct sim *g = malloc(sizeof(*g));

	cr_assert_not_null(g);
	sim_init(g);
	struct agent *a = sim_agent(g, s, SYNC, 1234567, T0, NEVER);
	int w = sim_window(g, T0, T0 + 3600 * SEC);

	sim_run(g, T0 + 3600 * SEC + 50 * MS);
	cr_log_info("an hour at 37%%: %.5f%%", achieved(g, a, w));
	cr_expect_leq(achieved(g, a, w), 37.0 + 1e-9);
	cr_expect_geq(achieved(g, a, w), 37.0 - 0.01, "%.5f",
		      achieved(g, a, w));
	free(g);
	ledger_done(l);
}

/* Two tenants at 30% and 70% saturating one GPU, each with its style and
 * kernel length. */
static void two_tenants(enum style sa, uint64_t la, enum style sb, uint64_t lb)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s30 = capped(l, "thirty", 30, VGPU_POLICY_HARD);
	struct vgpu_slot *s70 = capped(l, "seventy", 70, VGPU_POLICY_HARD);
	struct sim *g = malloc(sizeof(*g));

	cr_assert_not_null(g);
	sim_init(g);
	struct agent *a = sim_agent(g, s30, sa, la, T0, NEVER);
	struct agent *b = sim_agent(g, s70, sb, lb, T0, NEVER);
	int w = sim_window(g, T0, T0 + 3 * SEC);

	sim_run(g, T0 + 3 * SEC + 50 * MS);
	cr_log_info("30/70: %.3f%% (%llu us) %.3f%% (%llu us)",
		    achieved(g, a, w), (unsigned long long)(la / US),
		    achieved(g, b, w), (unsigned long long)(lb / US));
	cr_expect_leq(fabs(achieved(g, a, w) - 30), 3.0, "%.3f",
		      achieved(g, a, w));
	cr_expect_leq(fabs(achieved(g, b, w) - 70), 3.0, "%.3f",
		      achieved(g, b, w));
	free(g);
	ledger_done(l);
}

Test(throttle, two_tenants_at_30_and_70_get_their_shares_within_3_points)
{
	two_tenants(ASYNC, 1 * MS, ASYNC, 1 * MS);
	two_tenants(SYNC, 1 * MS, SYNC, 1 * MS);
	two_tenants(ASYNC, 10 * MS, ASYNC, 50 * US);
	two_tenants(SYNC, 50 * US, ASYNC, 10 * MS);
	two_tenants(SYNC, 10 * MS, SYNC, 10 * MS);
}

/* An elastic 30% tenant alone for a second, then a hard 70% tenant comes:
 * more than 90% alone, back at 30% within 200 ms. */
static void elastic_gives_back(enum style style, uint64_t len)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *e = capped(l, "elastic", 30, VGPU_POLICY_ELASTIC);
	struct vgpu_slot *h = capped(l, "hard", 70, VGPU_POLICY_HARD);
	struct sim *g = malloc(sizeof(*g));
	uint64_t arrive = T0 + SEC;
	/* Windows long enough to hold many kernels. */
	uint64_t span = len * 40 > 100 * MS ? len * 40 : 100 * MS;
	int w[8];

	cr_assert_not_null(g);
	sim_init(g);
	struct agent *a = sim_agent(g, e, style, len, T0, NEVER);
	struct agent *b = sim_agent(g, h, style, len, arrive, NEVER);
	w[0] = sim_window(g, T0, arrive);
	for (int i = 1; i < 8; i++)	/* from +200 ms on */
		w[i] = sim_window(g, arrive + 200 * MS + (uint64_t)(i - 1) * span,
				  arrive + 200 * MS + (uint64_t)i * span);
	sim_run(g, arrive + 200 * MS + 7 * span + 50 * MS);
	cr_log_info("elastic 30%% %s %llu us alone: %.3f%%",
		    style == SYNC ? "sync" : "async",
		    (unsigned long long)(len / US), achieved(g, a, w[0]));
	cr_expect_gt(achieved(g, a, w[0]), 90.0, "%.3f", achieved(g, a, w[0]));
	for (int i = 1; i < 8; i++) {
		unsigned long long at = (g->win[w[i]][0] - arrive) / MS;

		cr_log_info("  +%llu ms: %.3f%% / %.3f%%", at,
			    achieved(g, a, w[i]), achieved(g, b, w[i]));
		cr_expect_leq(fabs(achieved(g, a, w[i]) - 30), 3.0,
			      "+%llu ms: %.3f", at, achieved(g, a, w[i]));
		cr_expect_geq(achieved(g, b, w[i]), 67.0,
			      "+%llu ms: %.3f", at, achieved(g, b, w[i]));
	}
	free(g);
	ledger_done(l);
}

Test(throttle, elastic_alone_gets_over_90_and_its_share_back_within_200ms)
{
	elastic_gives_back(ASYNC, 1 * MS);
	elastic_gives_back(SYNC, 1 * MS);
	elastic_gives_back(ASYNC, 50 * US);
	elastic_gives_back(SYNC, 10 * MS);
}

Test(throttle, a_ledger_kept_across_a_reboot_does_not_stall_the_bucket)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *e = capped(l, "elastic", 30, VGPU_POLICY_ELASTIC);
	struct vgpu_slot *h = capped(l, "hard", 30, VGPU_POLICY_HARD);
	struct vgpu_slot *o = capped(l, "other", 30, VGPU_POLICY_HARD);
	uint64_t boot = 5 * SEC;	/* CLOCK_MONOTONIC after a reboot */

	/* The records hold times of the previous boot, 95 s ahead. */
	cr_assert_eq(vgpu_throttle_admit(o, T0, 0), 0);
	cr_expect_eq(compute(o)->active_ns, T0);
	/* The other tenant's stamp from then is not "active" ... */
	vgpu_throttle_settle(e, 3 * MS, 0);
	cr_expect_eq(vgpu_throttle_admit(e, boot, 0), 0, "alone: lent");
	/* ... and a bucket restarts from now instead of waiting 95 s. */
	vgpu_throttle_settle(h, 3 * MS, 0);
	uint64_t w = vgpu_throttle_admit(h, boot, 0);
	cr_expect_eq(compute(h)->refill_ns, boot);
	cr_expect_eq(w, 10 * MS, "%llu", (unsigned long long)w);
	vgpu_ledger_close(l);
}

/* Two processes of one tenant: one launches back to back (asks every
 * 100 us), the other asks every 2 ms. Without turns the second never finds
 * the tokens (the first takes them the moment they are there); with them it
 * is admitted within the starvation threshold plus a refill. */
static uint64_t starved_for(bool use_waiting)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "turns", 10, VGPU_POLICY_HARD);
	struct vgpu_slot *b = ledger_join_ok(l, vgpu_ledger_tenant_record(a)->name,
					     VGPU_LEDGER_UNLIMITED);
	uint64_t b_start = T0 + 20 * MS, b_next = b_start, admitted = NEVER;

	for (uint64_t t = T0; t < T0 + 2 * SEC && admitted == NEVER;
	     t += 100 * US) {
		if (vgpu_throttle_admit(a, t, 1 * MS) == 0)
			vgpu_throttle_settle(a, 1 * MS, 1 * MS);
		if (t >= b_next) {
			uint64_t w = use_waiting
				? vgpu_throttle_admit_waiting(b, 0, t, 1 * MS,
							      t - b_start)
				: vgpu_throttle_admit(b, t, 1 * MS);
			if (w == 0) {
				vgpu_throttle_settle(b, 1 * MS, 1 * MS);
				admitted = t;
			}
			b_next = t + 2 * MS;
		}
	}
	ledger_done(l);
	return admitted == NEVER ? NEVER : admitted - b_start;
}

Test(throttle, a_process_waiting_long_gets_its_turn)
{
	uint64_t without = starved_for(false), with = starved_for(true);

	cr_expect_eq(without, NEVER, "without turns: starved for 2 s "
		     "(got in after %llu ms)", (unsigned long long)(without / MS));
	cr_assert_leq(with, VGPU_THROTTLE_STARVE_NS + 20 * MS,
		      "with turns: in after %llu ms",
		      (unsigned long long)(with / MS));
}

/* Two threads of one process: one launches back to back (asks every
 * 100 us), the other asks every 2 ms. With one turn for the whole process
 * (thread tag 0 for both) the second never finds the tokens: the first
 * takes them, its turn being the second's too (a review saw two threads
 * split 4/117 launches); tagged apart, the second is admitted within the
 * starvation threshold plus a refill. */
static uint64_t thread_starved_for(uint32_t fast, uint32_t slow)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = capped(l, "threads", 10, VGPU_POLICY_HARD);
	uint64_t b_start = T0 + 20 * MS, b_next = b_start, admitted = NEVER;
	uint64_t a_since = T0;

	for (uint64_t t = T0; t < T0 + 2 * SEC && admitted == NEVER;
	     t += 100 * US) {
		if (vgpu_throttle_admit_waiting(a, fast, t, 1 * MS,
						t - a_since) == 0) {
			vgpu_throttle_settle(a, 1 * MS, 1 * MS);
			a_since = t;
		}
		if (t >= b_next) {
			if (vgpu_throttle_admit_waiting(a, slow, t, 1 * MS,
							t - b_start) == 0) {
				vgpu_throttle_settle(a, 1 * MS, 1 * MS);
				admitted = t;
			}
			b_next = t + 2 * MS;
		}
	}
	ledger_done(l);
	return admitted == NEVER ? NEVER : admitted - b_start;
}

Test(throttle, a_thread_waiting_long_gets_its_turn_over_its_process)
{
	uint64_t same = thread_starved_for(0, 0);
	uint64_t apart = thread_starved_for(1, 2);

	cr_expect_eq(same, NEVER, "one turn for both threads: starved for "
		     "2 s (got in after %llu ms)",
		     (unsigned long long)(same / MS));
	cr_assert_leq(apart, VGPU_THROTTLE_STARVE_NS + 20 * MS,
		      "a turn each: in after %llu ms",
		      (unsigned long long)(apart / MS));
}

/* Four processes of one tenant at 10%, each launching 5 ms kernels again
 * as soon as one is admitted: three ask every 100 us, one every 2 ms. The
 * turn goes to whoever began waiting first, so the slow asker is never
 * passed over by the fast ones: it waits at most for the three admitted
 * before it and its own tokens (4 x 5 ms at 10%: 200 ms), plus the
 * starvation threshold before it claims. Returns its longest wait. */
static uint64_t slow_askers_longest_wait(void)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *p[4];
	uint64_t since[4], next[4], longest = 0;
	unsigned admitted[4] = { 0 };

	p[0] = capped(l, "fifo", 10, VGPU_POLICY_HARD);
	for (int i = 1; i < 4; i++)
		p[i] = ledger_join_ok(l, vgpu_ledger_tenant_record(p[0])->name,
				      VGPU_LEDGER_UNLIMITED);
	for (int i = 0; i < 4; i++)
		since[i] = next[i] = T0 + (uint64_t)i * 10 * US;
	for (uint64_t t = T0; t < T0 + 5 * SEC; t += 100 * US) {
		for (int i = 0; i < 4; i++) {
			if (t < next[i])
				continue;
			next[i] = t + (i == 3 ? 2 * MS : 100 * US);
			if (vgpu_throttle_admit_waiting(p[i], 0, t, 5 * MS,
							t - since[i]) != 0)
				continue;
			vgpu_throttle_settle(p[i], 5 * MS, 5 * MS);
			if (i == 3 && t - since[i] > longest)
				longest = t - since[i];
			admitted[i]++;
			since[i] = t;
		}
	}
	/* One still waiting at the end counts too. */
	if (T0 + 5 * SEC - since[3] > longest)
		longest = T0 + 5 * SEC - since[3];
	for (int i = 0; i < 4; i++)
		cr_expect_gt(admitted[i], 10, "process %d admitted %u times", i,
			     admitted[i]);
	ledger_done(l);
	return longest;
}

Test(throttle, the_starved_are_admitted_in_the_order_they_began_to_wait)
{
	uint64_t longest = slow_askers_longest_wait();

	cr_expect_leq(longest, VGPU_THROTTLE_STARVE_NS + 4 * 50 * MS + 10 * MS,
		      "the slow asker waited %llu ms",
		      (unsigned long long)(longest / MS));
}
