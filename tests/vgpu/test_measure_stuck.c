/* test_measure_stuck.c - a thread whose launches wait for what it does
 * later (a stream waiting for a value the thread writes next, a kernel
 * spinning on a flag a later kernel sets) is never held for good: the
 * core polls its oldest launch and goes past it once it is stuck
 * (vgpu/measure.c, wait_oldest()). Against the fake driver and clock
 * (measure_fake.h): a stream "waiting for a value" is one whose work is
 * queued far in the future, so the events recorded on it do not
 * complete.
 */
#include "measure_fake.h"
#include "measure_internal.h"

#define STALL VGPU_MEASURE_TOKEN_STALL_NS
#define MAX_WAIT VGPU_MEASURE_RUNNING_MAX_WAIT_NS
#define FULL_WAIT VGPU_MEASURE_FULL_WAIT_NS
#define POLL VGPU_MEASURE_END_POLL_NS

/* t's default stream in context 0 waits for something that comes only
 * much later: work queued on it does not start. */
static void block_stream(void)
{
	fake.ctx[0].dflt.busy = fake.now + 1000 * SEC;
}

/* The last launch went between lo and hi (inclusive). */
static void expect_went_between(uint64_t lo, uint64_t hi)
{
	cr_expect_geq(fake.launched_at, lo, "went %llu ns early",
		      (unsigned long long)(lo - fake.launched_at));
	cr_expect_leq(fake.launched_at, hi, "went %llu ns late",
		      (unsigned long long)(fake.launched_at - hi));
}

/* Two launches queued behind a wait: the third waits for the oldest
 * while it may still start, then goes; the fourth does not wait for the
 * same one again, nor for the second, queued behind it on the same
 * stream (it cannot start before the first does): it goes at once, and
 * both given up on are parked, out of the ring. */
Test(measure, a_launch_that_does_not_start_is_gone_past_once)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	const struct vgpu_measure_ctx *c;
	uint64_t t1;

	run_and_read(a, F1, 100 * US);
	block_stream();
	t1 = fake.now;
	launch(a, F1, 100 * US);
	launch(a, F1, 100 * US);
	expect_went_between(t1, t1);
	launch(a, F1, 100 * US);
	expect_went_between(t1 + STALL, t1 + STALL + POLL);
	t1 = fake.now;
	launch(a, F1, 100 * US);
	expect_went_between(t1, t1);
	c = state_of(a, &fake.ctx[0]);
	cr_expect_eq(c->count, 2, "two in the ring, none read");
	cr_expect_eq(c->npark, 2, "two parked");
	cr_expect_eq(c->nstuck, 0);
}

/* A kernel that has started and does not end (it spins for this thread)
 * is waited for RUNNING_MAX_WAIT_NS at most, and gives its token back:
 * the next launch waits only for its own oldest (queued behind the
 * spinning one on the same stream: the stall). */
Test(measure, a_running_launch_that_does_not_end_is_gone_past)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(a, F1, 100 * US);
	t1 = fake.now;
	launch(a, F2, 1000 * SEC);	/* starts at once, spins */
	launch(a, F1, 100 * US);
	expect_went_between(t1, t1);
	launch(a, F1, 100 * US);
	expect_went_between(t1 + MAX_WAIT, t1 + MAX_WAIT + POLL);
	t1 = fake.now;
	launch(a, F1, 100 * US);
	expect_went_between(t1 + STALL, t1 + STALL + POLL);
	/* Charged as it ran while it was waited for (each poll told the
	 * bucket); given up on, moved behind the others. */
	const struct vgpu_measure_ctx *c = state_of(a, &fake.ctx[0]);
	const struct vgpu_measure_pending *p = NULL;

	for (unsigned i = 0; i < VGPU_MEASURE_RING; i++)
		if (c->ring[i].key == F2)
			p = &c->ring[i];
	cr_assert_not_null(p);
	cr_expect(p->stuck, "given up on");
	cr_expect_geq(p->estimate, MAX_WAIT, "%llu ns charged",
		      (unsigned long long)p->estimate);
}

/* A process's first launch (its tenant's probe) queued behind a wait: the
 * next goes after the stall at a fallback estimate, not as a probe of its
 * own (which would be held and retired, charged PROBE_HOLD_NS each), and
 * the one after goes at once (the probe gave its token back). */
Test(measure, a_first_launch_that_does_not_start_leaves_an_estimate)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1 = fake.now;

	block_stream();
	launch(a, F1, 100 * US);
	cr_expect_neq(newest(a, &fake.ctx[0])->probe_at, 0, "the probe");
	launch(a, F2, 100 * US);
	/* After the stall, and its admission's first waits. */
	expect_went_between(t1 + STALL, t1 + STALL + 1 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->probe_at, 0, "not a probe");
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate,
		     VGPU_MEASURE_STUCK_EST_NS);
	/* The probe, not started, holds the tenant's other processes no
	 * longer (nor is it retired by one, charged its age). */
	cr_expect_eq(__atomic_load_n(&vgpu_ledger_tenant_record(slot)->probe,
				     __ATOMIC_ACQUIRE), 0,
		     "the tenant's probe let go");
	t1 = fake.now;
	launch(a, F3, 100 * US);
	expect_went_between(t1, t1);
	cr_expect_eq(charged(), 0, "nothing ran, nothing retired");
}

/* Thread t launches a kernel of len ns on stream s. */
static int launch_on(struct fthread *t, struct fstream *s, uint64_t len)
{
	struct kernel k = { .len = len, .s = s };
	struct vgpu_measure_call call = {
		.key = F1, .kind = VGPU_MEASURE_KERNEL,
		.stream = (struct vgpu_prim_stream *)s,
		.launch = f_launch, .arg = &k,
	};

	as(t);
	return vgpu_measure_launch(&t->m, &call);
}

/* Launches alternating between two streams, each behind a wait: once the
 * first launch on each has been given up on (a stall each), every later
 * one goes at once (with one stream remembered, each waited the stall). */
Test(measure, launches_behind_waits_on_two_streams_go_at_once)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fstream s1 = { &fake.ctx[0], 0, true };
	struct fstream s2 = { &fake.ctx[0], 0, true };
	uint64_t t1;

	run_and_read(a, F1, 100 * US);
	s1.busy = s2.busy = fake.now + 1000 * SEC;
	t1 = fake.now;
	for (int i = 0; i < 200; i++)
		cr_assert_eq(launch_on(a, i % 2 ? &s2 : &s1, 100 * US), 0);
	cr_expect_leq(fake.now - t1, 2 * (STALL + POLL), "200 launches took "
		      "%llu ns", (unsigned long long)(fake.now - t1));
}

/* Another thread's launches, in another context, while the first one's
 * two launches behind a wait hold the process's two tokens: the first
 * waits the stall and goes without a token, marking the holders stalled;
 * the next ones go at once while those have still not started. */
Test(measure, a_thread_goes_past_holders_found_stalled_at_once)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[1]);
	uint64_t t1;

	run_and_read(a, F1, 100 * US);
	run_and_read(b, F1, 100 * US);
	block_stream();
	launch(a, F1, 100 * US);
	launch(a, F1, 100 * US);
	fake.engine = fake.now;		/* they wait on their stream only */
	t1 = fake.now;
	launch(b, F1, 100 * US);
	expect_went_between(t1 + STALL, t1 + STALL + POLL);
	t1 = fake.now;
	for (int i = 0; i < 40; i++)
		cr_assert_eq(launch(b, F1, 100 * US), 0);
	cr_expect_leq(fake.now - t1, 40 * 1 * MS, "40 launches took %llu ns",
		      (unsigned long long)(fake.now - t1));
}

/* A thread that queued kernels on six streams behind one wait and exited:
 * once released they run one after another, each start event completing
 * at the release, so each one's events span its wait behind the others.
 * The watch places them as their thread would have and charges each the
 * part after the ends before it: what ran, not six times that (each was
 * charged its events' whole span before, a hostile review). */
Test(measure, orphans_on_several_streams_are_charged_what_ran)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fstream st[6];
	uint64_t release, before;
	const int n = 30;

	run_and_read(a, F1, 20 * MS);
	fake.now += 2 * VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);			/* the first one charged */
	release = fake.now + 30 * SEC;
	for (int i = 0; i < 6; i++)
		st[i] = (struct fstream){ &fake.ctx[0], release, true };
	before = charged();
	for (int i = 0; i < n; i++)
		cr_assert_eq(launch_on(a, &st[i % 6], 20 * MS), 0);
	vgpu_measure_thread_exit(&a->m);
	cr_expect_lt(fake.now, release, "still behind the wait");
	cr_expect_eq(charged(), before, "none read yet");
	fake.now = release + n * 20 * MS;	/* all ran, one after another */
	cr_expect_not(vgpu__m_orphans_poll());
	cr_expect_eq(charged() - before, n * 20 * MS, "%llu ns charged for "
		     "%llu ns run", (unsigned long long)(charged() - before),
		     (unsigned long long)(n * 20 * MS));
	cr_expect_eq(live_events(), 0);
}

/* Reads c's parked launches as time passes, 1 ms at a time (the park is
 * polled PARK_BATCH at a time, at most every PARK_POLL_NS), until none is
 * left or `most` has passed; then the charge's delay. */
static void read_park(struct fthread *t, struct vgpu_measure_ctx *c,
		      uint64_t most)
{
	for (uint64_t end = fake.now + most; c->npark && fake.now < end;) {
		fake.now += VGPU_MEASURE_PARK_POLL_NS;
		sync_as(t);
	}
	fake.now += 2 * VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(t);
}

/* Far more launches behind a wait than the ring holds: each past the
 * third goes at once (the first is given up on after the stall, every
 * later one is behind it on its stream); those given up on are parked,
 * and once the wait is released and they have run, each is read and
 * charged what it ran, its events kept or given back. */
Test(measure, launches_behind_a_wait_past_the_ring_go_and_are_read_later)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_measure_ctx *c;
	uint64_t t1, release, before;
	const int n = 300;

	run_and_read(a, F1, 1 * MS);
	release = fake.now + 2 * SEC;
	fake.ctx[0].dflt.busy = release;	/* a wait released in 2 s */
	t1 = fake.now;
	for (int i = 0; i < n; i++)
		cr_assert_eq(launch(a, F1, 1 * MS), 0);
	cr_expect_leq(fake.now, t1 + STALL + POLL, "%d launches took %llu ns",
		      n, (unsigned long long)(fake.now - t1));
	c = state_of(a, &fake.ctx[0]);
	cr_expect_eq(c->count + c->npark, n, "%u in the ring, %u parked",
		     c->count, c->npark);
	cr_expect_leq(c->count, VGPU_MEASURE_DEPTH);
	cr_expect_eq(c->nstuck, 0);
	before = charged();
	fake.now = release + n * MS;	/* all have run, back to back */
	read_park(a, c, 1 * SEC);
	cr_expect_eq(c->count + c->npark, 0, "%u in the ring, %u parked",
		     c->count, c->npark);
	cr_expect_eq(charged() - before, n * MS, "%llu ns charged",
		     (unsigned long long)(charged() - before));
	cr_expect_leq(live_events(), 2 * 2 * VGPU_MEASURE_RING + 2,
		      "%u events left", live_events());
}

/* With the park full as well (PARK_MAX) and the ring full of launches
 * given up on, a launch waits FULL_WAIT_NS for one of them to end, then
 * goes unmeasured, charged that wait at least, and nothing is
 * overwritten. */
Test(measure, a_full_park_and_ring_let_the_next_go_unmeasured,
     .timeout = 60)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	const struct vgpu_measure_ctx *c;
	const int n = VGPU_MEASURE_PARK_MAX + VGPU_MEASURE_RING - 1;
	uint64_t before, t1;

	run_and_read(a, F1, 1 * MS);
	block_stream();
	for (int i = 0; i < n; i++)
		launch(a, F1, 1 * MS);
	c = state_of(a, &fake.ctx[0]);
	cr_expect_eq(c->npark, VGPU_MEASURE_PARK_MAX);
	cr_expect_eq(c->count, VGPU_MEASURE_RING - 1);
	cr_expect_geq(c->nstuck, VGPU_MEASURE_RING - 1 - VGPU_MEASURE_DEPTH,
		      "%u given up on", c->nstuck);
	before = charged();
	for (int i = 0; i < 3; i++) {
		uint64_t last = fake.launched_at;

		t1 = fake.now;
		cr_expect_eq(launch(a, F1, 1 * MS), 0);
		cr_expect_geq(fake.launched_at, t1 + FULL_WAIT,
			      "went %llu ns after it was asked for",
			      (unsigned long long)(fake.launched_at - t1));
		cr_expect_neq(fake.launched_at, last, "launched");
	}
	cr_expect_eq(c->count, VGPU_MEASURE_RING - 1, "the ring untouched");
	cr_expect_eq(c->npark, VGPU_MEASURE_PARK_MAX, "the park untouched");
	cr_expect_eq(charged() - before, 3 * FULL_WAIT, "%llu ns charged",
		     (unsigned long long)(charged() - before));
}

/* A thread that exits with launches queued behind a wait polls them until
 * its deadline, then hands them to the process's watch, which charges
 * each what it ran once the wait is released and it ends: not only their
 * estimate (kernels queued behind a wait that the thread left ran 200 ms
 * each for a 20 us charge once released, 89.6% of a device under a 30%
 * cap, a hostile review), nor the exit's wait (500 kernels of 20 ms ran
 * 10 s for 2 s, 45%, another). */
Test(measure, a_thread_exit_with_stuck_launches_hands_them_to_the_watch)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t before, waited, release;

	run_and_read(a, F1, 100 * US);
	release = fake.now + 3 * SEC;
	fake.ctx[0].dflt.busy = release;	/* a wait released in 3 s */
	for (int i = 0; i < 40; i++)
		launch(a, F1, 20 * MS);		/* estimate: 100 us */
	before = charged();
	waited = fake.now;
	vgpu_measure_thread_exit(&a->m);
	waited = fake.now - waited;
	cr_expect_geq(waited, VGPU_MEASURE_EXIT_WAIT_NS, "waited %llu ns",
		      (unsigned long long)waited);
	cr_expect_lt(fake.now, release, "still behind the wait");
	cr_expect_eq(charged() - before, 0, "none read yet");
	cr_expect_null(state_of(a, &fake.ctx[0]));
	fake.now = release + 40 * 20 * MS;	/* all ran, back to back */
	cr_expect_not(vgpu__m_orphans_poll());
	cr_expect_eq(charged() - before, 40 * 20 * MS, "%llu ns charged",
		     (unsigned long long)(charged() - before));
	cr_expect_eq(live_events(), 0);
}
