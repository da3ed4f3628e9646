/* test_throttle_lanes.c - the tenant's lanes (throttle.h): at most two
 * launches of unknown length in flight for all of a tenant's processes,
 * taken over from a holder that stops showing it watches them, given back
 * with the process's token (inflight.h); on a fake clock, and threads of
 * two processes' slots hammering them. */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "inflight.h"
#include "ledger_internal.h"
#include "ledger_test.h"
#include "options.h"
#include "throttle.h"

TestSuite(lanes, .init = ledger_dir_make, .fini = ledger_dir_remove);

#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define T0 (100 * SEC)		/* the fake clock's start */
#define STALE VGPU_THROTTLE_LANE_STALE_NS

/* Two processes' slots of one tenant, capped. */
static void two_of_a_tenant(struct vgpu_ledger *l, struct vgpu_slot **a,
			    struct vgpu_slot **b)
{
	*a = ledger_join_ok(l, "team", VGPU_LEDGER_UNLIMITED);
	cr_assert_eq(vgpu_throttle_configure(*a, 30, VGPU_POLICY_HARD, T0), 0);
	*b = ledger_join_ok(l, "team", VGPU_LEDGER_UNLIMITED);
	cr_assert_neq((*a)->owner, (*b)->owner);
}

Test(lanes, two_for_all_of_a_tenant_s_processes)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b, *o;

	two_of_a_tenant(l, &a, &b);
	o = ledger_join_ok(l, "other", VGPU_LEDGER_UNLIMITED);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0), 0);
	cr_assert_eq(vgpu_throttle_lane_take(b, 0, T0), 1);
	cr_expect_eq(vgpu_throttle_lane_take(a, 0, T0 + 1 * MS), -1, "a third");
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + 1 * MS), -1, "a third");
	cr_expect_eq(vgpu_throttle_lane_take(o, 0, T0 + 1 * MS), 0,
		     "another tenant's are its own");
	vgpu_throttle_lane_give(a, 0, 0);
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + 2 * MS), 0,
		     "given back: the other process takes it");
	cr_expect_eq(vgpu_throttle_lane_take(a, 0, T0 + 2 * MS), -1);
	vgpu_ledger_close(l);
}

/* A holder shows it watches its lane (its watch thread); one that stops
 * (dead, stopped, its launch waiting for something) loses it to the next
 * asker after STALE, and then neither its beat nor its give touches the
 * new holder's lane. */
Test(lanes, one_not_shown_for_50ms_is_taken_over)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b;

	two_of_a_tenant(l, &a, &b);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0), 0);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0), 1);
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + STALE - 1 * MS), -1,
		     "shown at its take, 49 ms ago");
	cr_expect(vgpu_throttle_lane_beat(a, 0, 0, T0 + 40 * MS));
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + STALE + 1 * MS), 1,
		     "lane 0 shown 10 ms ago is held, lane 1 is taken over");
	cr_expect(!vgpu_throttle_lane_beat(a, 1, 0, T0 + STALE + 2 * MS),
		  "no longer a's");
	vgpu_throttle_lane_give(a, 1, 0);
	cr_expect_eq(vgpu_throttle_lane_take(a, 0, T0 + STALE + 3 * MS), -1,
		     "a's give left b's lane alone");
	cr_expect(vgpu_throttle_lane_beat(b, 1, 0, T0 + STALE + 3 * MS));
	vgpu_throttle_lane_give(b, 1, 0);
	cr_expect_eq(vgpu_throttle_lane_take(a, 0, T0 + STALE + 4 * MS), 1);
	vgpu_ledger_close(l);
}

/* A lane's word names the launch (its tag) as well as the process: one
 * launch's give does not free the lane another launch of its process
 * took over from it. A word from the future (garbage, another boot) is
 * taken at once. */
Test(lanes, a_give_frees_only_its_own_launch_s_lane)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b;

	two_of_a_tenant(l, &a, &b);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0), 0);
	cr_assert_eq(vgpu_throttle_lane_take(b, 0, T0), 1);
	cr_assert(vgpu_throttle_lane_beat(b, 1, 0, T0 + STALE));
	cr_assert_eq(vgpu_throttle_lane_take(a, 1, T0 + STALE + 1 * MS), 0,
		     "a's launch 1 takes over its launch 0's lane");
	vgpu_throttle_lane_give(a, 0, 0);
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + STALE + 2 * MS), -1,
		     "launch 0 gave back nothing");
	cr_expect(!vgpu_throttle_lane_beat(a, 0, 0, T0 + STALE + 2 * MS));
	cr_expect(vgpu_throttle_lane_beat(a, 0, 1, T0 + STALE + 2 * MS));
	vgpu_throttle_lane_give(a, 0, 1);
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + STALE + 3 * MS), 0);
	/* Shown "in the future": garbage, not a live holder. */
	vgpu_throttle_lane_give(b, 0, 0);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0 + 10 * SEC), 0);
	cr_expect_eq(vgpu_throttle_lane_take(b, 0, T0 + STALE + 4 * MS), 0,
		     "a word shown 10 s ahead is taken");
	vgpu_ledger_close(l);
}

/* A wish for a lane lasts LANE_WANT_NS (the holders read their ended
 * launches from their watches meanwhile), stored at most once a ms. */
Test(lanes, a_wish_lasts_10ms)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b;

	two_of_a_tenant(l, &a, &b);
	cr_expect(!vgpu_throttle_lane_wanted(a, T0), "none yet");
	vgpu_throttle_lane_want(b, T0);
	cr_expect(vgpu_throttle_lane_wanted(a, T0 + 1 * MS));
	cr_expect(vgpu_throttle_lane_wanted(a, T0 - 1 * MS),
		  "a clock read just before the wish");
	cr_expect(!vgpu_throttle_lane_wanted(a,
		  T0 + VGPU_THROTTLE_LANE_WANT_NS));
	vgpu_throttle_lane_want(b, T0 + 500000);
	cr_expect_eq(vgpu_ledger_tenant_record(a)->lane_want, T0,
		     "not stored again within a ms");
	/* A wish far ahead (garbage) is none, and replaced by the next. */
	vgpu_throttle_lane_want(b, UINT64_MAX / 2);
	cr_expect(!vgpu_throttle_lane_wanted(a, T0 + 2 * SEC));
	vgpu_throttle_lane_want(b, T0 + 2 * SEC);
	cr_expect(vgpu_throttle_lane_wanted(a, T0 + 2 * SEC));
	vgpu_ledger_close(l);
}

/* A process's token comes with a lane (inflight.h): a take fails, saying
 * so, while the tenant's other process holds both; the lane comes back
 * with the token, whoever frees it. */
Test(lanes, a_token_comes_with_a_lane_and_goes_with_it)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b;
	struct vgpu_inflight_mark m;

	two_of_a_tenant(l, &a, &b);
	cr_assert_eq(vgpu_throttle_lane_take(b, 0, T0), 0);
	cr_assert(vgpu_inflight_take(0, a, T0, &m));
	cr_expect(!m.lanes_full);
	cr_expect_eq(vgpu_ledger_tenant_record(a)->lane[1] >> 32, a->owner);
	{
		struct vgpu_inflight_mark m2;

		cr_expect(!vgpu_inflight_take(0, a, T0, &m2));
		cr_expect(m2.lanes_full, "a token was free, no lane");
		cr_expect_eq(m2.tok, -1);
	}
	cr_expect_eq(vgpu_inflight_release(0, &m), UINT64_MAX);
	cr_expect_eq(vgpu_ledger_tenant_record(a)->lane[1], 0,
		     "given back with the token");
	cr_expect_eq(vgpu_ledger_tenant_record(a)->lane[0] >> 32, b->owner,
		     "b's untouched");
	/* Without a slot (an elastic tenant lent the GPU): no lane. */
	cr_assert(vgpu_inflight_take(0, NULL, T0, &m));
	cr_expect_eq(vgpu_ledger_tenant_record(a)->lane[1], 0);
	vgpu_inflight_release(0, &m);
	vgpu_ledger_close(l);
}

/* A waiter of another process sleeps on the tenant's count of lanes given
 * back (a futex in the shared mapping): a give wakes it long before its
 * sleep's end. */
static struct vgpu_slot *sleeper_slot;
static uint32_t sleeper_seq;

static void *sleeper(void *arg)
{
	(void)arg;
	vgpu_throttle_lane_sleep(sleeper_slot, sleeper_seq, 120 * SEC);
	return NULL;
}

Test(lanes, a_give_wakes_a_sleeper)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b;
	struct timespec limit;
	pthread_t t;

	two_of_a_tenant(l, &a, &b);
	cr_assert_eq(vgpu_throttle_lane_take(a, 0, T0), 0);
	sleeper_slot = b;
	sleeper_seq = vgpu_throttle_lane_seq(b);
	cr_assert_eq(pthread_create(&t, NULL, sleeper, NULL), 0);
	while (!__atomic_load_n(&vgpu_ledger_tenant_record(b)->lane_sleepers,
				__ATOMIC_SEQ_CST))
		sched_yield();
	/* Asleep by now, most likely; if not, the moved count keeps it
	 * from sleeping. */
	usleep(20000);
	/* A waiter wishes for a lane before it sleeps (measure.c): the
	 * giver wakes sleepers only while one did within 10 ms, by the real
	 * clock (a wish made here 20 ms before the give woke nobody). */
	{
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		vgpu_throttle_lane_want(b, (uint64_t)now.tv_sec * SEC +
					   (uint64_t)now.tv_nsec);
	}
	vgpu_throttle_lane_give(a, 0, 0);
	cr_expect_eq(vgpu_throttle_lane_seq(b), sleeper_seq + 1);
	clock_gettime(CLOCK_REALTIME, &limit);
	limit.tv_sec += 60;
	cr_assert_eq(pthread_timedjoin_np(t, NULL, &limit), 0,
		     "the sleeper was not woken (it sleeps 120 s)");
	cr_expect_eq(vgpu_ledger_tenant_record(b)->lane_sleepers, 0);
	vgpu_ledger_close(l);
}

/* ---- threads of two processes' slots hammering the lanes ------------------ */

static struct vgpu_slot *hammer_slot[2];
static unsigned holding;	/* lanes held now, by the test's count */
static unsigned most;		/* the most held at once */
static unsigned takes;

static void *hammer(void *arg)
{
	struct vgpu_slot *s = hammer_slot[(uintptr_t)arg & 1];

	for (int i = 0; i < 20000; i++) {
		int lane = vgpu_throttle_lane_take(s, (unsigned)(uintptr_t)arg, T0);
		unsigned n, m;

		if (lane < 0)
			continue;
		n = __atomic_add_fetch(&holding, 1, __ATOMIC_SEQ_CST);
		m = __atomic_load_n(&most, __ATOMIC_RELAXED);
		while (n > m && !__atomic_compare_exchange_n(
					&most, &m, n, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED))
			;
		__atomic_add_fetch(&takes, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&holding, 1, __ATOMIC_SEQ_CST);
		vgpu_throttle_lane_give(s, lane, (unsigned)(uintptr_t)arg);
	}
	return NULL;
}

Test(lanes, eight_threads_never_hold_more_than_two)
{
	struct vgpu_ledger *l = ledger_open_ok();
	pthread_t t[8];

	two_of_a_tenant(l, &hammer_slot[0], &hammer_slot[1]);
	for (uintptr_t i = 0; i < 8; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, hammer, (void *)i), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	cr_expect_leq(most, VGPU_THROTTLE_LANES, "held at once: %u", most);
	cr_expect_gt(takes, 1000, "taken %u times", takes);
	cr_expect_eq(vgpu_ledger_tenant_record(hammer_slot[0])->lane[0], 0);
	cr_expect_eq(vgpu_ledger_tenant_record(hammer_slot[0])->lane[1], 0,
		     "all given back");
	vgpu_ledger_close(l);
}
