/* test_measure.c - the measuring of launches (vgpu/measure.c,
 * measure_read.c) against a fake driver and a fake clock
 * (measure_fake.h): every decision of the throttle around a launch,
 * deterministically, with nothing slept and no time measured. This file:
 * the first launch, estimates, exits and contexts; test_measure_charge.c:
 * what is charged, the reference, the ring, the launches in flight;
 * test_measure_stuck.c: launches that wait for the thread's later work.
 */
#include "measure_fake.h"
#include "measure_internal.h"

/* ---- the first launch ------------------------------------------------------------ */

static struct fthread *reader;	/* the thread the sleep hook lets read */
static uint64_t read_after;	/* once the clock passes this */

static void let_reader_read(void)
{
	if (reader && fake.now >= read_after) {
		sync_as(reader);
		reader = NULL;
	}
}

/* The process's first launch has no estimate: it goes alone, and another
 * thread's first launch waits until its length is read, then goes with
 * that length as its estimate. */
Test(measure, a_first_launch_goes_alone_and_others_wait_for_its_length)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);

	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	cr_expect_neq(newest(a, &fake.ctx[0])->probe_at, 0);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 0);

	reader = a;		/* a reads its launch once it has ended */
	read_after = T0 + 1 * MS;
	fake.on_sleep = let_reader_read;
	cr_assert_eq(launch(b, F2, 2 * MS), 0);
	cr_expect_geq(fake.launched_at, T0 + 1 * MS,
		      "b went at +%llu ns, before a's length was known",
		      (unsigned long long)(fake.launched_at - T0));
	cr_expect_null(reader, "b went before a read its launch");
	cr_expect_eq(a->watched, 1, "the thread's exit armed");
	cr_expect_eq(newest(b, &fake.ctx[0])->probe_at, 0);
	cr_expect_eq(newest(b, &fake.ctx[0])->estimate, 1 * MS,
		     "b goes with a's length");
}

/* The probe's own thread: its next launch waits for the probe's end. */
Test(measure, a_probe_s_own_thread_waits_for_its_end)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	launch(a, F1, 3 * MS);
	launch(a, F2, 1 * MS);
	/* Polled, backing off: read within a quarter of how late it is
	 * (its estimate: 0), END_POLL_NS at most. */
	cr_expect_geq(fake.launched_at, T0 + 3 * MS);
	cr_expect_leq(fake.launched_at, T0 + 3 * MS + VGPU_MEASURE_END_POLL_NS,
		      "went %llu ns after the probe's end",
		      (unsigned long long)(fake.launched_at - T0 - 3 * MS));
	cr_expect_leq(fake.sleeps, 32, "%u polls for 3 ms", fake.sleeps);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 3 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->probe_at, 0);
}

/* The last launch went at lo, or at most slack after. */
static void expect_went_within(uint64_t lo, uint64_t slack)
{
	cr_expect_geq(fake.launched_at, lo, "went %llu ns early",
		      (unsigned long long)(lo - fake.launched_at));
	cr_expect_leq(fake.launched_at, lo + slack, "went %llu ns late",
		      (unsigned long long)(fake.launched_at - lo));
}

/* The probe's thread launches at once in another of its contexts on the
 * GPU: that launch waits for the probe's end, read by the same thread
 * from the other context, not for the tenant's bound and the debt of its
 * retirement (the probe was read only from its own context). */
Test(measure, a_probe_s_thread_in_another_context_reads_it_there)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	launch(a, F1, 3 * MS);
	a->stack[0] = &fake.ctx[1];	/* a makes ctx[1] current */
	cr_assert_eq(launch(a, F2, 1 * MS), 0);
	expect_went_within(T0 + 3 * MS, 2 * VGPU_MEASURE_PROBE_POLL_NS);
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, 0,
		     "the probe not read");
	cr_expect_eq(newest(a, &fake.ctx[1])->estimate, 3 * MS,
		     "goes with the probe's length");
	cr_expect_eq(newest(a, &fake.ctx[1])->probe_at, 0, "not a probe");
}

/* The probe's thread does not come back to read it (it waits for
 * another thread's work): another thread of its process reads it in its
 * place once it has ended (the probe keeps its token), goes with its
 * length, and the probe is paid once when its thread reads it after all.
 * It waited for the probe's bound before (2 s, then the debt charged for
 * it). */
Test(measure, a_probe_its_thread_leaves_unread_is_read_by_another)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t op = 0;

	launch(a, F1, 3 * MS);
	cr_assert_geq(newest(a, &fake.ctx[0])->tok.tok, 0, "the probe's token");
	cr_assert_eq(launch(b, F2, 1 * MS), 0);
	expect_went_within(T0 + 3 * MS, 2 * VGPU_MEASURE_PROBE_POLL_NS);
	cr_expect_eq(newest(b, &fake.ctx[0])->estimate, 3 * MS,
		     "goes with the probe's length");
	cr_expect_eq(newest(b, &fake.ctx[0])->probe_at, 0, "not a probe");
	/* Read, the probe is the tenant's no more: another process's
	 * first launch may go (it waited for the bound, then for the
	 * debt of the retirement). */
	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_expect_eq(vgpu_throttle_probe_begin(other, fake.now, &op),
		     VGPU_THROTTLE_PROBE_TAKEN, "the tenant's probe not ended");
	vgpu_throttle_probe_end(other, op);
	fake.now += 1 * SEC;
	sync_as(a);
	sync_as(b);
	as(a);
	vgpu_measure_thread_exit(&a->m);
	as(b);
	vgpu_measure_thread_exit(&b->m);
	cr_expect_eq(charged(), 3 * MS + 1 * MS, "charged %llu ns",
		     (unsigned long long)charged());
}

/* The probe cannot start (queued behind a host function that waits for
 * another thread of its process): that thread's first launch waits
 * TOKEN_STALL_NS for it, then goes without it, holding a token, as a
 * launch of unknown length; the probe stays the tenant's. It waited for
 * the probe's bound (2 s) and the debt of its retirement before. */
Test(measure, a_probe_that_cannot_start_holds_its_process_only_a_while)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[1]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t t1, op = 0;

	fake.ctx[1].dflt.busy = fake.now + 3600 * SEC;	/* blocked */
	launch(a, F1, 1 * MS);
	cr_assert_neq(newest(a, &fake.ctx[1])->probe_at, 0);
	fake.engine = fake.now;		/* nothing of a's has started */
	t1 = fake.now;
	cr_assert_eq(launch(b, F2, 1 * MS), 0);
	expect_went_within(t1 + VGPU_MEASURE_TOKEN_STALL_NS,
			   2 * VGPU_MEASURE_PROBE_POLL_NS);
	cr_expect_eq(newest(b, &fake.ctx[0])->probe_at, 0, "not a probe");
	cr_expect_geq(newest(b, &fake.ctx[0])->tok.tok, 0, "holds a token");
	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_expect_eq(vgpu_throttle_probe_begin(other, fake.now, &op),
		     VGPU_THROTTLE_PROBE_BUSY, "a's probe is the tenant's");
}

/* A probe that runs and does not end, whose thread never reads it, holds
 * its process's other threads TOKEN_MAX_WAIT_NS, as a launch holding a
 * token does: then they go holding a token, as launches of unknown
 * length, and the probe stays the tenant's (other processes wait for it
 * up to the tenant's bound: below). */
Test(measure, a_running_probe_never_read_holds_its_process_to_the_longest_wait)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);

	launch(a, F1, 3600 * SEC);
	launch(b, F2, 1 * MS);
	expect_went_within(T0 + VGPU_MEASURE_TOKEN_MAX_WAIT_NS,
			   2 * VGPU_MEASURE_PROBE_POLL_NS);
	cr_expect_eq(newest(b, &fake.ctx[0])->probe_at, 0);
	cr_expect_geq(newest(b, &fake.ctx[0])->tok.tok, 0);
	cr_expect(vgpu_throttle_probe_mine(slot), "a's probe is the tenant's");
}

/* A forked child's first launch waits for the parent's probe only until
 * the parent reads it (it was once held a full second by a copy of the
 * parent's probe no one would ever clear: the soak's forked children). */
Test(measure, a_forked_child_waits_for_the_parent_s_probe_until_it_is_read)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);

	launch(a, F1, 1 * MS);		/* the parent's probe, in flight */
	vgpu_measure_fork_child(&b->m);	/* b: the child's thread */
	reader = a;
	read_after = T0 + 1 * MS;
	fake.on_sleep = let_reader_read;
	launch(b, F2, 1 * MS);
	cr_expect_null(reader, "the child went before the parent read");
	cr_expect_lt(fake.launched_at, T0 + 1 * MS +
				       2 * VGPU_MEASURE_PROBE_POLL_NS,
		     "the child's launch went at +%llu ns",
		     (unsigned long long)(fake.launched_at - T0));
}

/* Another process of the tenant (another slot) has its probe in flight:
 * this process's first launch waits until that one is read, then goes as
 * a probe of its own (its process knows no length yet). Eight processes
 * starting at once went side by side, each unmeasured, far past a 30%
 * cap. */
static uint64_t other_probe, other_reads_at;

static void other_reads(void)
{
	if (other_probe && fake.now >= other_reads_at) {
		vgpu_throttle_probe_end(other, other_probe);
		other_probe = 0;
	}
}

Test(measure, another_process_s_probe_holds_the_first_launch_until_read)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t mine = 0, next = 0;

	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_assert_eq(vgpu_throttle_probe_begin(other, T0, &other_probe),
		     VGPU_THROTTLE_PROBE_TAKEN);
	cr_assert_eq(vgpu_throttle_probe_begin(slot, T0 + 1, &mine),
		     VGPU_THROTTLE_PROBE_BUSY,
		     "one probe of the tenant at a time");
	other_reads_at = T0 + 5 * MS;
	fake.on_sleep = other_reads;
	launch(a, F1, 1 * MS);
	cr_expect_eq(other_probe, 0, "went before the other probe was read");
	cr_expect_geq(fake.launched_at, T0 + 5 * MS);
	cr_expect_lt(fake.launched_at, T0 + 5 * MS +
				       2 * VGPU_MEASURE_PROBE_POLL_NS);
	cr_expect_neq(newest(a, &fake.ctx[0])->probe_at, 0,
		      "the process's own first is a probe too");
	cr_expect_eq(vgpu_throttle_probe_begin(other, fake.now, &next),
		     VGPU_THROTTLE_PROBE_BUSY,
		     "this process's probe holds the other's next");
}

/* The other process's probe is never read while it lives (it stopped, or
 * computes without reading it): this one waits for it up to its bound,
 * then retires it, charging the tenant the time since it went, and goes
 * once admitted against that debt (here a share of 100: at once). */
Test(measure, a_live_process_s_unread_probe_holds_the_tenant_to_its_bound)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t op = 0, next = 0;
	uint64_t hold = VGPU_THROTTLE_PROBE_HOLD_NS;

	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_assert_eq(vgpu_throttle_probe_begin(other, T0, &op),
		     VGPU_THROTTLE_PROBE_TAKEN);
	launch(a, F1, 1 * MS);
	cr_expect_gt(fake.launched_at, T0 + hold);
	cr_expect_leq(fake.launched_at, T0 + hold + 2 * MS);
	cr_expect_neq(newest(a, &fake.ctx[0])->probe_at, 0);
	cr_expect_geq(vgpu_throttle_probe_charged(other, op), hold,
		      "the retired probe charged the time since it went");
	/* The retired one's end, if it ever came, lets go of nothing. */
	vgpu_throttle_probe_end(other, op);
	cr_expect_eq(vgpu_throttle_probe_begin(other, fake.now, &next),
		     VGPU_THROTTLE_PROBE_BUSY, "this process's probe held");
}

/* Another process's probe read and charged its 30 ms once the clock
 * passes other_reads_at. */
static void other_reads_30ms(void)
{
	if (other_probe && fake.now >= other_reads_at) {
		vgpu_throttle_correct(other, 0, 30 * MS);
		vgpu_throttle_probe_end(other, other_probe);
		other_probe = 0;
	}
}

/* A launch with an estimate waits while another process's probe runs, as
 * if the probe were charged as it runs: it goes once the probe is read and
 * its length charged. Four processes starting 300 ms kernels together ran
 * a probe and a known kernel in one second under 30% (a window of 60%):
 * known launches went beside the probe on the bucket it left. */
Test(measure, a_running_probe_holds_the_tenant_s_known_launches_until_read)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t x;

	run_and_read(a, F1, 1 * MS);
	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	fake.now += 100 * MS;		/* the bucket full: the burst */
	x = fake.now;
	cr_assert_eq(vgpu_throttle_probe_begin(other, x, &other_probe),
		     VGPU_THROTTLE_PROBE_TAKEN);
	/* 25 ms into the probe: more than the 20 ms the bucket holds. */
	fake.now = x + 25 * MS;
	other_reads_at = x + 30 * MS;
	fake.on_sleep = other_reads_30ms;
	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	cr_expect_eq(other_probe, 0, "went before the probe was read");
	/* 20 ms in the bucket, 30 charged: 1 ms needed, 11 ms at 50%, from
	 * the last refill before the charge (x + 28 to 30 ms). */
	expect_went_within(x + 50 * MS, 3 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 1 * MS);
}

/* The probe's thread makes no driver call after it (it works on the host,
 * or is stopped): the watch the probe started reads it once it has ended,
 * so that the launches it holds in the tenant's other processes go then,
 * not when its thread comes back. A process that launched its first 1 ms
 * kernel and then worked on the host for 1.5 s held its tenant's other
 * process for nearly a second (a hostile review: 987 ms; at 70%, 14 such
 * processes in turn halved its tenant's share). */
Test(measure, a_probe_left_unread_by_its_threads_is_read_by_the_watch)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t op = 0;

	cr_assert_eq(launch(a, F1, 3 * MS), 0);
	cr_assert_neq(newest(a, &fake.ctx[0])->probe_at, 0, "the probe");
	/* Once for its lane (the process holds one: throttle.h), once as
	 * the probe. */
	cr_expect_eq(fake.probe_watches, 2, "watched");
	fake.now = T0 + 1 * MS;
	cr_expect(vgpu_measure_probe_poll(), "running: watched on");
	cr_expect(vgpu_throttle_probe_mine(slot));
	cr_expect_eq(vgpu_ledger_tenant_record(slot)->probe_beat, T0 + 1 * MS,
		     "the watch shows itself to the tenant's other processes");
	fake.now = T0 + 3 * MS;
	cr_expect(!vgpu_measure_probe_poll(), "ended: read, the watch ends");
	cr_expect(!vgpu_throttle_probe_mine(slot), "the tenant's probe ended");
	other = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_expect_eq(vgpu_throttle_probe_running(other, fake.now, SEC,
						 &(bool){ false }), 0,
		     "nothing held");
	cr_expect_eq(vgpu_throttle_probe_begin(other, fake.now, &op),
		     VGPU_THROTTLE_PROBE_TAKEN);
	vgpu_throttle_probe_end(other, op);
	/* Paid once, when its thread reads it after all. */
	fake.now += 1 * SEC;
	sync_as(a);
	cr_expect_eq(charged(), 3 * MS, "charged %llu ns",
		     (unsigned long long)charged());
	cr_expect(!vgpu_measure_probe_poll(), "nothing to watch");
}

/* A probe whose kernel runs past the tenant's bound on a probe
 * (PROBE_HOLD_NS) is watched no longer: the other processes may retire
 * it by then, and the thread watching would poll for as long as it
 * runs. */
Test(measure, the_watch_on_a_probe_ends_at_the_probe_s_bound)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);

	launch(a, F1, 3600 * SEC);
	fake.now = T0 + VGPU_THROTTLE_PROBE_HOLD_NS - 1;
	cr_expect(vgpu_measure_probe_poll());
	fake.now = T0 + VGPU_THROTTLE_PROBE_HOLD_NS;
	cr_expect(!vgpu_measure_probe_poll());
	cr_expect(vgpu_throttle_probe_mine(slot), "still the tenant's");
}

/* The probe is a thread's first graph, its process's kernels known: one
 * of them waits for the graph as it runs, reading it in its thread's
 * place once it has ended (its thread does not come back: it may wait
 * for this one), and goes once the graph's length is charged. A first
 * 300 ms graph beside another thread's 100 ms kernels read a window of
 * 59.9% under 30% before. */
Test(measure, a_kernel_waits_for_its_process_s_graph_probe_and_reads_it)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	struct kernel k = { .len = 30 * MS };
	struct vgpu_measure_call graph = {
		.key = F2, .kind = VGPU_MEASURE_GRAPH,
		.launch = f_launch, .arg = &k,
	};
	uint64_t x;

	run_and_read(a, F1, 1 * MS);
	fake.now += 100 * MS;		/* the bucket full: the burst */
	x = fake.now;
	as(b);
	cr_assert_eq(vgpu_measure_launch(&b->m, &graph), 0);
	cr_assert_neq(newest(b, &fake.ctx[0])->probe_at, 0, "the probe");
	fake.now = x + 25 * MS;
	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	/* Read at its end (+30 ms), its 30 ms charged against the 20 ms
	 * held: 1 ms needed, 11 ms at 50% from the last refill. */
	expect_went_within(x + 50 * MS, 3 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 1 * MS);
	fake.now += 1 * SEC;
	sync_as(a);
	sync_as(b);
	cr_expect_eq(charged(), 1 * MS + 30 * MS + 1 * MS,
		     "paid once: %llu ns", (unsigned long long)charged());
}

/* ---- estimates ------------------------------------------------------------------ */

/* A function's estimate follows a longer measurement at once and a
 * shorter one slowly (by a quarter), so a long kernel after short ones is
 * not admitted at the short ones' length. */
Test(measure, a_function_s_estimate_rises_at_once_and_falls_slowly)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	run_and_read(a, F1, 1 * MS);
	launch(a, F1, 10 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 1 * MS);
	fake.now = fake.kernel_end;
	sync_as(a);
	launch(a, F1, 1 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 10 * MS,
		     "raised at once");
	fake.now = fake.kernel_end;
	sync_as(a);
	launch(a, F1, 1 * MS);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate,
		     (3 * 10 * MS + 1 * MS) / 4 + 1, "lowered by a quarter");
	/* Another function is not admitted at F1's length. */
	fake.now = fake.kernel_end;
	sync_as(a);
	run_and_read(a, F2, 50 * US);
	launch(a, F2, 50 * US);
	cr_expect_eq(newest(a, &fake.ctx[0])->estimate, 50 * US);
}

/* A launch measured as taking no time leaves estimates of at least 1 ns:
 * 0 means "nothing known", which would send the next launch as a probe. */
Test(measure, an_estimate_once_measured_is_never_0)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	struct fthread *c;

	run_and_read(a, F1, 0);
	launch(a, F1, 0);		/* its function's */
	cr_expect_geq(newest(a, &fake.ctx[0])->estimate, 1);
	cr_expect_eq(newest(a, &fake.ctx[0])->probe_at, 0);
	launch(a, F2, 0);		/* the thread's */
	cr_expect_geq(newest(a, &fake.ctx[0])->estimate, 1);
	cr_expect_eq(newest(a, &fake.ctx[0])->probe_at, 0);
	launch(b, F3, 0);		/* the process's */
	cr_expect_geq(newest(b, &fake.ctx[0])->estimate, 1);
	cr_expect_eq(newest(b, &fake.ctx[0])->probe_at, 0);
	/* Charged: the averages refined by 0-length launches stay >= 1. */
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	sync_as(b);
	c = thread_in(&fake.ctx[0]);
	launch(c, 0, 0);
	cr_expect_geq(newest(c, &fake.ctx[0])->estimate, 1);
	cr_expect_eq(newest(c, &fake.ctx[0])->probe_at, 0);
}

/* ---- exits ------------------------------------------------------------------------ */

/* A thread that exits waits for its launches and charges what they
 * measured, then gives its events and stream back. */
Test(measure, a_thread_exit_charges_its_launches_as_measured)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	launch(a, F1, 1 * MS);
	launch(a, F1, 2 * MS);		/* after the probe was read */
	launch(a, F1, 3 * MS);
	cr_assert_lt(fake.now, T0 + 6 * MS, "the last still running");
	vgpu_measure_thread_exit(&a->m);
	cr_expect_eq(charged(), 6 * MS, "%llu",
		     (unsigned long long)charged());
	/* Polled, not blocked for (one may wait for the exiting thread):
	 * read within a quarter of the last one's estimate (2 ms). */
	cr_expect_geq(fake.now, T0 + 6 * MS);
	cr_expect_leq(fake.now, T0 + 6 * MS + 2 * MS / 4,
		      "read %llu ns after the last one's end",
		      (unsigned long long)(fake.now - T0 - 6 * MS));
	cr_expect_eq(live_events(), 0, "events given back");
	cr_expect_not(fake.st[0].live, "the calibration stream given back");
	cr_expect_eq(a->depth, 1, "the context popped");
	cr_expect_null(state_of(a, &fake.ctx[0]));
}

/* A launch still running when the exit's wait is over is handed to the
 * process's watch, which charges it what it ran once it ends (the exit
 * charged at most its wait: a review's 500 kernels queued behind a wait
 * that another thread released after the exit ran 10 s for 2 s). */
Test(measure, a_launch_running_past_a_thread_exit_is_read_by_the_watch)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t issued, watches = fake.probe_watches;

	run_and_read(a, F1, 1 * MS);
	issued = fake.now;
	launch(a, F2, 10 * SEC);	/* estimate: 1 ms */
	vgpu_measure_thread_exit(&a->m);
	/* The wait ends at the first poll past EXIT_WAIT_NS: a quarter of
	 * how late the launch is, END_POLL_NS at most. */
	cr_expect_gt(fake.now, issued + VGPU_MEASURE_EXIT_WAIT_NS);
	cr_expect_leq(fake.now, issued + VGPU_MEASURE_EXIT_WAIT_NS +
				VGPU_MEASURE_END_POLL_NS);
	cr_expect_eq(charged(), 1 * MS, "%llu", (unsigned long long)charged());
	cr_expect_gt(fake.probe_watches, watches, "the watch started");
	cr_expect_eq(live_events(), 3, "its events and its reference the "
		     "watch's");
	cr_expect_null(state_of(a, &fake.ctx[0]));
	cr_expect(vgpu__m_orphans_poll(), "still running");
	cr_expect_eq(charged(), 1 * MS);
	fake.now = issued + 10 * SEC;
	cr_expect_not(vgpu__m_orphans_poll(), "read");
	cr_expect_eq(charged(), 1 * MS + 10 * SEC, "%llu",
		     (unsigned long long)charged());
	cr_expect_eq(live_events(), 0, "its events given back");
}

/* One the process's exit finds unread is charged what it was charged
 * (the driver discards what has not run); one whose context is torn down
 * first, its share of the time since it was issued. */
Test(measure, an_orphan_at_exit_or_teardown_is_charged_at_least_its_estimate)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t issued;

	run_and_read(a, F1, 5 * SEC);
	launch(a, F1, 5 * SEC);		/* estimate: 5 s */
	vgpu_measure_thread_exit(&a->m);
	cr_expect_eq(charged(), 5 * SEC);
	vgpu__m_orphans_settle();
	cr_expect_eq(charged(), 10 * SEC, "%llu",
		     (unsigned long long)charged());
	cr_expect_not(vgpu__m_orphans_poll(), "none left");

	a = thread_in(&fake.ctx[0]);
	issued = fake.now;
	launch(a, F1, 5 * SEC);
	launch(a, F1, 5 * SEC);
	vgpu_measure_thread_exit(&a->m);
	fake.now = issued + 40 * SEC;
	vgpu_measure_ctx_teardown((struct vgpu_prim_ctx *)&fake.ctx[0]);
	cr_expect_not(vgpu__m_orphans_poll(), "dropped");
	cr_expect_eq(charged(), 10 * SEC + 40 * SEC, "%llu",
		     (unsigned long long)charged());
}

/* At the process's exit the driver may be gone: what was read is charged,
 * the rest at its estimate or share, with no driver call. */
Test(measure, a_process_exit_settles_with_no_driver_call)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	unsigned made;

	run_and_read(a, F1, 2 * MS);
	launch(a, F1, 2 * MS);
	made = fake.events_made;
	fake.ctx[0].gen++;	/* any call on its objects now counts */
	as(a);
	vgpu_measure_process_exit(&a->m);
	cr_expect_eq(fake.gone_used, 0);
	cr_expect_eq(fake.events_made, made);
	cr_expect_eq(charged(), 4 * MS);
	cr_expect_null(state_of(a, &fake.ctx[0]));
}

/* ---- contexts ------------------------------------------------------------------- */

/* A context torn down: the state threads made in it is dropped without a
 * call on its objects; other contexts' state, and the estimates, stay. */
Test(measure, a_context_teardown_forgets_only_that_context_s_state)
{
	start(100);
	struct fctx *x = &fake.ctx[0], *y = &fake.ctx[1];
	struct fthread *a = thread_in(x);
	unsigned streams;

	run_and_read(a, F1, 1 * MS);	/* in x */
	a->stack[0] = y;
	run_and_read(a, F2, 1 * MS);	/* in y */
	launch(a, F2, 1 * MS);		/* pending in y */
	a->stack[0] = x;
	launch(a, F1, 1 * MS);		/* pending in x */

	vgpu_measure_ctx_teardown((struct vgpu_prim_ctx *)x);
	x->gen++;		/* x's objects are gone; its handle is reused */
	streams = fake.streams_made;

	a->stack[0] = y;
	sync_as(a);		/* drops x's state, keeps y's */
	cr_expect_eq(fake.gone_used, 0, "a call on a torn-down object");
	cr_expect_null(state_of(a, x));
	cr_assert_not_null(state_of(a, y));
	cr_expect_eq(state_of(a, y)->count, 1, "y's launch still pending");
	cr_expect_eq(charged(), 2 * MS,
		     "x's launches: the one read as measured, the pending one "
		     "at its estimate");

	launch(a, F2, 1 * MS);
	cr_expect_eq(fake.streams_made, streams, "y's state kept");
	a->stack[0] = x;
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.streams_made, streams + 1, "x's state made afresh");
	cr_expect_eq(newest(a, x)->estimate, 1 * MS, "F1's estimate kept");
	cr_expect_eq(newest(a, x)->probe_at, 0);
	cr_expect_eq(fake.gone_used, 0);
}

/* A thread that makes a context per task, launches in it and tears it
 * down unsynchronised: each torn-down state is dropped when the next
 * context is first used, its launches charged up to then, not when a
 * fifth context evicts it (charged the time since issued, the waits
 * between included: a review's waits grew 72 ms, 0.3, 1.3, 5.8 s). */
Test(measure, states_torn_down_are_dropped_at_the_next_context)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t before;

	run_and_read(a, F1, 1 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	before = charged();
	for (int i = 0; i < 9; i++) {
		struct fctx *x = &fake.ctx[i % 4];

		a->stack[0] = x;
		launch(a, F1, 1 * MS);
		if (i == 8)
			break;
		launch(a, F1, 1 * MS);
		fake.now = fake.kernel_end;
		vgpu_measure_ctx_teardown((struct vgpu_prim_ctx *)x);
		x->gen++;
	}
	fake.now = fake.kernel_end + VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	as(a);
	vgpu_measure_thread_exit(&a->m);
	/* 17 kernels of 1 ms; each torn-down pair charged up to the next
	 * task's first launch, a few us after its end. */
	cr_expect_leq(charged() - before, 17 * MS + 100 * US,
		      "charged %llu ns for 17 ms",
		      (unsigned long long)(charged() - before));
	cr_expect_geq(charged() - before, 17 * MS);
	cr_expect_eq(fake.gone_used, 0);
}

/* A teardown of a context not known drops every context's state. */
Test(measure, a_teardown_of_an_unknown_context_forgets_all)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	run_and_read(a, F1, 1 * MS);
	vgpu_measure_ctx_teardown(NULL);
	sync_as(a);
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.streams_made, 2);
}

/* A launch with no current context is measured in its stream's. */
Test(measure, a_launch_with_no_context_is_charged_in_its_stream_s)
{
	start(100);
	struct fthread *a = thread_in(NULL);
	struct kernel k = { .len = 2 * MS, .s = &fake.ctx[1].dflt };
	struct vgpu_measure_call call = {
		.key = F1, .kind = VGPU_MEASURE_KERNEL,
		.stream = (struct vgpu_prim_stream *)k.s,
		.launch = f_launch, .arg = &k,
	};

	as(a);
	cr_assert_eq(vgpu_measure_launch(&a->m, &call), 0);
	cr_expect_eq(a->depth, 0, "its context pushed, then popped");
	cr_expect_not_null(state_of(a, &fake.ctx[1]));
	fake.now += 2 * MS + VGPU_MEASURE_CHARGE_DELAY_NS;
	vgpu_measure_thread_exit(&a->m);
	cr_expect_eq(charged(), 2 * MS);
	/* With no stream of its own either: made, not measured. */
	call.stream = NULL;
	k.s = &fake.ctx[1].dflt;
	cr_expect_eq(vgpu_measure_launch(&a->m, &call), 0);
	cr_expect_null(state_of(a, &fake.ctx[1]));
}

/* A launch the driver refuses is refunded; a GPU not measured is not
 * charged. */
Test(measure, refused_and_unmeasured_launches_are_not_charged)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct kernel k = { .len = 1 * MS, .refuse = 700 };
	struct vgpu_measure_call call = {
		.key = F1, .kind = VGPU_MEASURE_KERNEL,
		.launch = f_launch, .arg = &k,
	};

	run_and_read(a, F1, 1 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	vgpu_throttle_refill(slot, fake.now);	/* up to now: no refill next */
	int64_t before = tokens();
	uint64_t used = charged();

	as(a);
	cr_expect_eq(vgpu_measure_launch(&a->m, &call), 700);
	cr_expect_eq(charged(), used);
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, 0);
	/* Admitted at 1 ms from a bucket that held enough, refunded whole. */
	cr_expect_eq(tokens() - before, 0, "%+lld",
		     (long long)(tokens() - before));
	fake.ctx[2].gpu = NULL;
	a->stack[0] = &fake.ctx[2];
	k.refuse = 0;
	cr_expect_eq(vgpu_measure_launch(&a->m, &call), 0);
	cr_expect_eq(state_of(a, &fake.ctx[2])->count, 0, "not measured");
}

/* A fifth context: the least recently used one's launches are read
 * (waiting for them) and charged, and its state given back. */
Test(measure, a_fifth_context_retires_the_least_recently_used)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	static struct fctx more[2];

	run_and_read(a, F1, 1 * MS);
	launch(a, F1, 1 * MS);		/* still running when retired */
	for (int i = 1; i < 4; i++) {
		a->stack[0] = &fake.ctx[i];
		launch(a, F1, 1 * MS);
	}
	more[0] = (struct fctx){ .gpu = &gpu0 };
	more[0].dflt = (struct fstream){ &more[0], 0, true };
	a->stack[0] = &more[0];
	launch(a, F1, 1 * MS);
	cr_expect_null(state_of(a, &fake.ctx[0]));
	cr_expect_not_null(state_of(a, &more[0]));
	cr_expect_eq(charged(), 2 * MS, "ctx[0]'s launches charged");
	/* The process keeps two launches in flight on the GPU, all its
	 * contexts together (inflight.h): each launch after the second
	 * waited for the oldest to end, the fifth context's until 4 ms. */
	cr_expect_geq(fake.now, T0 + 4 * MS, "%llu ns",
		      (unsigned long long)(fake.now - T0));
	cr_expect_leq(fake.now, T0 + 4 * MS + 3 * YIELD, "%llu ns, and a "
		      "yield after each wait at most",
		      (unsigned long long)(fake.now - T0));
	cr_expect_eq(a->depth, 1);
}

