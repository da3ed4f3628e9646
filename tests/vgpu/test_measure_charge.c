/* test_measure_charge.c - the measuring of launches against the fake
 * driver (measure_fake.h), continued from test_measure.c: what is charged,
 * the reference event, the ring, the process's launches in flight.
 */
#include "measure_fake.h"

/* ---- what is charged ------------------------------------------------------------ */

/* A green context of 64 of 128 SMs: its launches are charged half their
 * time, and their ends stay out of the GPU's timeline. */
Test(measure, a_green_context_is_charged_for_its_sms_and_kept_out_of_the_timeline)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	fake.ctx[0].sm_held = 64;
	fake.ctx[0].sm_total = 128;
	fake.ctx[1].sm_held = fake.ctx[1].sm_total = 128;
	run_and_read(a, F1, 4 * MS);
	cr_expect_eq(timeline_head(), 0, "a green end recorded");
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_expect_eq(charged(), 2 * MS);

	a->stack[0] = &fake.ctx[1];	/* the whole device */
	run_and_read(a, F2, 4 * MS);
	cr_expect_eq(timeline_head(), 1);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_expect_eq(charged(), 6 * MS);
}

/* A launch that waited behind another tenant's kernel: its events cover
 * the wait, but it is charged only the part after the other's end, which
 * the other process recorded in the timeline. */
Test(measure, a_launch_is_charged_only_after_another_tenant_s_end)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1, before;

	run_and_read(a, F1, 1 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	before = charged();
	t1 = fake.now;
	fake.engine = t1 + 3 * MS;	/* the other's kernel: t1 .. +3 ms */
	vgpu_timeline_record(ledger, t1 + 3 * MS);
	launch(a, F1, 1 * MS);		/* runs +3 .. +4 ms */
	cr_assert_eq(fake.kernel_end, t1 + 4 * MS);
	fake.now = t1 + 4 * MS + VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_expect_eq(charged() - before, 1 * MS, "charged %llu ns",
		     (unsigned long long)(charged() - before));
}

/* The admission's estimate is corrected as soon as the launch is read;
 * the final charge waits CHARGE_DELAY_NS after its end, so that an end
 * another process records late still shortens it. */
Test(measure, the_estimate_is_corrected_at_once_and_the_charge_waits_for_late_ends)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1;
	int64_t before;

	run_and_read(a, F1, 10 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_assert_eq(charged(), 10 * MS);

	/* Admitted at 10 ms, runs 1: corrected when read, charged later. */
	launch(a, F1, 1 * MS);
	cr_assert_eq(newest(a, &fake.ctx[0])->estimate, 10 * MS);
	fake.now = fake.kernel_end;
	before = tokens();
	sync_as(a);
	cr_expect_eq(tokens() - before, 9 * (int64_t)MS,
		     "corrected to the 1 ms read: %+lld",
		     (long long)(tokens() - before));
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS - 1;
	sync_as(a);
	cr_expect_eq(charged(), 10 * MS, "charged before the delay");
	fake.now += 1;
	sync_as(a);
	cr_expect_eq(charged(), 11 * MS);

	/* Behind another tenant's kernel (+0 .. +2 ms), whose end is
	 * recorded after this launch was read (as 3 ms). */
	t1 = fake.now;
	fake.engine = t1 + 2 * MS;
	launch(a, F1, 1 * MS);
	cr_assert_eq(fake.kernel_end, t1 + 3 * MS);
	fake.now = t1 + 3 * MS;
	sync_as(a);
	vgpu_timeline_record(ledger, t1 + 2 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_expect_eq(charged() - 11 * MS, 1 * MS, "charged %llu ns, not 1 ms",
		     (unsigned long long)(charged() - 11 * MS));
}

/* The timeline counts an end recorded after a later one as late, so that a
 * launch read once is read again at its charge only then; the newest end
 * is kept, and one from another boot (a minute ahead) is replaced. */
Test(measure, the_timeline_counts_ends_recorded_late)
{
	start(100);
	const struct vgpu_ledger_timeline *tl = (const void *)(
		(const char *)vgpu_ledger_header(ledger) +
		VGPU_LEDGER_TIMELINE_OFFSET);

	vgpu_timeline_record(ledger, T0 + 10);
	vgpu_timeline_record(ledger, T0 + 20);
	vgpu_timeline_record(ledger, T0 + 20);
	cr_expect_eq(vgpu_timeline_late(ledger), 0, "in order");
	vgpu_timeline_record(ledger, T0 + 15);
	cr_expect_eq(vgpu_timeline_late(ledger), 1);
	cr_expect_eq(tl->newest_ns, T0 + 20);
	vgpu_timeline_record(ledger, T0 + 25);
	cr_expect_eq(vgpu_timeline_late(ledger), 1);
	cr_expect_eq(tl->newest_ns, T0 + 25);
	vgpu_timeline_record(ledger, T0 + 61 * SEC);
	vgpu_timeline_record(ledger, T0 + 30);
	cr_expect_eq(vgpu_timeline_late(ledger), 1, "another boot's");
	cr_expect_eq(tl->newest_ns, T0 + 30);
	cr_expect_eq(timeline_head(), 7);
}

/* Recording an end and reading an interval's own part in one call
 * (vgpu_timeline_record_own) answers what the scan answers, over random
 * intervals recorded roughly in order by several "processes", seeded:
 * without the scan only when no end recorded before cuts the interval. */
Test(measure, recording_an_end_with_its_own_part_agrees_with_the_scan)
{
	start(100);
	uint64_t seed = 12345, at = T0, fast = 0;

	for (int i = 0; i < 20000; i++) {
		uint64_t r, start_ns, end_ns, own, scan, newest;
		const struct vgpu_ledger_timeline *tl = (const void *)(
			(const char *)vgpu_ledger_header(ledger) +
			VGPU_LEDGER_TIMELINE_OFFSET);

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		r = seed >> 33;
		/* Intervals of up to 200 us, starting up to 100 us before or
		 * after the last one's end (overlaps, gaps, out of order). */
		start_ns = at + (r % 200) * US / 2 - 50 * US;
		end_ns = start_ns + (r >> 8) % (200 * US);
		at = end_ns;
		newest = tl->newest_ns;
		/* The scan's answer with the end recorded, on a copy of the
		 * state: record, then read the exclusive part. */
		own = vgpu_timeline_record_own(ledger, start_ns, end_ns);
		scan = vgpu_timeline_exclusive(ledger, start_ns, end_ns);
		cr_assert_eq(own, scan, "step %d: [%llu, %llu]: %llu, the scan "
			     "%llu", i, (unsigned long long)(start_ns - T0),
			     (unsigned long long)(end_ns - T0),
			     (unsigned long long)own,
			     (unsigned long long)scan);
		fast += newest <= start_ns;
	}
	cr_expect_gt(fast, 1000, "the fast path taken %llu times",
		     (unsigned long long)fast);
}

/* ---- the reference ---------------------------------------------------------------- */

/* The next `reads` readings of a reference event are seen `late` ns after
 * it completed: the host ran the polling thread late (a stream's first
 * wake-up, a loaded machine). */
static void reference_seen_late(unsigned reads, uint64_t late)
{
	fake.late_reads = reads;
	fake.late = late;
}

/* The latest end recorded in the GPU's timeline. */
static uint64_t last_end(void)
{
	const struct vgpu_ledger_timeline *tl = (const void *)(
		(const char *)vgpu_ledger_header(ledger) +
		VGPU_LEDGER_TIMELINE_OFFSET);
	uint64_t head = timeline_head();

	cr_assert_gt(head, 0, "no end recorded");
	return __atomic_load_n(
		&tl->end_ns[(head - 1) % VGPU_LEDGER_TIMELINE_ENTRIES],
		__ATOMIC_RELAXED);
}

/* What another tenant's kernel of len ns, queued behind the last launch
 * and run right after it, is charged by the timeline. */
static uint64_t next_tenant_charge(uint64_t len)
{
	return vgpu_timeline_exclusive(ledger, fake.kernel_end - 1 * MS,
				       fake.kernel_end + len);
}

/* A reference seen late is placed at the middle of its window, late by
 * half of it: every end the thread records is as late, and cuts the
 * charge of another tenant's kernel that ran after it (on the simulator
 * a hard 70% tenant's first reading, seen 955 us late, took an elastic
 * 30% tenant's charges down by half: it got 51.7% of the device). Each
 * launch read narrows the window: its start event cannot have completed
 * before it was issued, nor its end after it was seen. A launch on an
 * idle stream, read as it ends, places the reference exactly. */
Test(measure, a_reference_seen_late_is_narrowed_by_the_launches_read)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_measure_ctx *c;

	reference_seen_late(1, 2 * MS);
	launch(a, F1, 1 * MS);
	c = state_of(a, &fake.ctx[0]);
	cr_assert_eq(c->ref_err[c->ref], 1 * MS);
	/* Read 300 us after it ended: the reference within 150 us. */
	fake.now = fake.kernel_end + 300 * US;
	sync_as(a);
	cr_expect_eq(c->ref_err[c->ref], 150 * US);
	cr_expect_eq(last_end(), fake.kernel_end + 150 * US);
	/* Read as it ends: exact, and the next tenant's kernel whole. */
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(c->ref_err[c->ref], 0);
	cr_expect_eq(last_end(), fake.kernel_end, "placed %+lld ns off",
		     (long long)(last_end() - fake.kernel_end));
	cr_expect_eq(next_tenant_charge(2 * MS), 2 * MS);
	cr_expect_eq(fake.late_reads, 0);
}

/* Bounds that contradict the reference (the GPU's clock drifted from the
 * host's since it was read) move it to the newer one; a launch's bounds
 * that contradict each other are ignored. */
Test(measure, a_reference_follows_bounds_that_contradict_it)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_measure_ctx *c;
	uint64_t at;

	run_and_read(a, F1, 1 * MS);
	c = state_of(a, &fake.ctx[0]);
	cr_assert_eq(c->ref_err[c->ref], 0);
	at = c->ref_ns[c->ref];
	/* The host's clock runs 20 us ahead of where the reference puts
	 * the GPU's: a launch issued now starts 20 us "before" its issue. */
	c->ref_ns[c->ref] += 20 * US;
	c->ref_lo[c->ref] = c->ref_hi[c->ref] = c->ref_ns[c->ref];
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(c->ref_ns[c->ref], at, "moved %+lld ns",
		     (long long)(c->ref_ns[c->ref] - at - 20 * US));
	cr_expect_eq(c->ref_err[c->ref], 0);
	cr_expect_eq(last_end(), fake.kernel_end);
}

/* A reference seen late, and launches read too late to narrow it: it is
 * read again CAL_RETRY_NS later, then twice as long after each reading no
 * narrower, and replaced only by a narrower one. */
Test(measure, a_reference_seen_late_is_read_again_and_only_narrower_kept)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_measure_ctx *c;

	fake.read_late = 4 * MS;
	/* Seen 2 ms late: past the budget, the only try; 1 ms off. */
	reference_seen_late(1, 2 * MS);
	run_and_read(a, F1, 1 * MS);
	c = state_of(a, &fake.ctx[0]);
	cr_assert_eq(c->ref_err[c->ref], 1 * MS);
	cr_expect_eq(last_end(), fake.kernel_end + 1 * MS);
	cr_expect_eq(next_tenant_charge(2 * MS), 1 * MS,
		     "the other tenant's 2 ms cut by the misplaced end");

	/* Not read again before CAL_RETRY_NS. */
	fake.now += VGPU_MEASURE_CAL_RETRY_NS - 2 * MS - fake.read_late;
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(last_end(), fake.kernel_end + 1 * MS);

	/* Then read again, seen 4 ms late: wider, so not kept. */
	fake.now += 2 * MS;
	reference_seen_late(1, 4 * MS);
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(c->ref_err[c->ref], 1 * MS, "a wider reading kept");
	cr_expect_eq(last_end(), fake.kernel_end + 1 * MS);

	/* The next reading waits twice as long; narrow, it replaces it. */
	fake.now += VGPU_MEASURE_CAL_RETRY_NS;
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(c->ref_err[c->ref], 1 * MS, "read again too early");
	fake.now += VGPU_MEASURE_CAL_RETRY_NS;
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(c->ref_err[c->ref], 0);
	cr_expect_eq(last_end(), fake.kernel_end, "placed %+lld ns off",
		     (long long)(last_end() - fake.kernel_end));
	cr_expect_eq(next_tenant_charge(2 * MS), 2 * MS);

	/* Narrow, it is kept CALIBRATE_NS: a late reading is not made. */
	reference_seen_late(1, 2 * MS);
	fake.now += VGPU_MEASURE_CALIBRATE_NS - 1 * SEC;
	run_and_read(a, F1, 1 * MS);
	cr_expect_eq(fake.late_reads, 1, "read again while narrow");
	cr_expect_eq(last_end(), fake.kernel_end);
}

/* A reference is never recorded again while a launch in flight is placed
 * against its event: the retry waits until that launch is read. */
Test(measure, a_reference_is_not_read_again_under_a_launch_in_flight)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_measure_ctx *c;
	uint64_t long_end;
	int first;

	fake.read_late = 4 * MS;	/* too late to narrow the reference */
	reference_seen_late(1, 2 * MS);
	run_and_read(a, F1, 1 * MS);
	c = state_of(a, &fake.ctx[0]);
	first = c->ref;
	launch(a, F2, 100 * MS);	/* placed against the first */
	long_end = fake.kernel_end;
	/* Read again, 1 ms late: narrower, so current; still wide. */
	fake.now += VGPU_MEASURE_CAL_RETRY_NS;
	reference_seen_late(1, 1 * MS);
	launch(a, F1, 1 * MS);
	cr_assert_neq(c->ref, first);
	cr_assert_eq(c->ref_err[c->ref], 500 * US);
	/* Its retry is due, but would record the first again. */
	fake.now += 2 * VGPU_MEASURE_CAL_RETRY_NS;
	cr_assert_lt(fake.now, long_end);
	reference_seen_late(1, 0);
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.late_reads, 1, "recorded again under a launch");
	fake.now = fake.kernel_end + fake.read_late;
	sync_as(a);
	cr_expect_eq(c->ref, first == 0 ? 1 : 0);
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.late_reads, 0, "not read again once it ended");
	cr_expect_eq(c->ref, first);
	cr_expect_eq(c->ref_err[c->ref], 0);
}

/* ---- the ring -------------------------------------------------------------------- */

/* Up to DEPTH launches of a thread are in flight in a context at once;
 * the next waits for the oldest to end and takes its events: after the
 * first DEPTH, no event is made on the launch path. */
Test(measure, a_full_ring_waits_for_its_oldest)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1;
	unsigned made;

	run_and_read(a, F1, 1 * MS);
	t1 = fake.now;
	fake.sleeps = 0;
	for (int i = 0; i < VGPU_MEASURE_DEPTH; i++) {
		launch(a, F1, 1 * MS);
		cr_expect_eq(fake.launched_at, t1, "launch %d went at +%llu ns",
			     i, (unsigned long long)(fake.launched_at - t1));
	}
	cr_expect_eq(fake.sleeps, 0, "nothing waited while the ring had room");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, VGPU_MEASURE_DEPTH);
	made = fake.events_made;
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.launched_at, t1 + 1 * MS, "went at +%llu ns",
		     (unsigned long long)(fake.launched_at - t1));
	cr_expect_gt(fake.sleeps, 0, "waited for the oldest");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, VGPU_MEASURE_DEPTH);
	cr_expect_eq(fake.events_made, made, "the oldest's events reused");
	cr_expect_leq(made, 2 * VGPU_MEASURE_DEPTH + 1, "%u events made", made);
}

/* ---- the process's launches in flight (inflight.h) ---------------------------- */

/* Eight threads switching one function from 20 us kernels to 100 ms ones
 * at once: two launches in flight for the process, not two per thread.
 * The third waits until the first has ended, reads it in its holder's
 * place (the holder never comes back), and goes on its length. */
Test(measure, threads_switching_to_long_kernels_keep_two_in_flight_together)
{
	start(100);
	struct fthread *t[8];
	uint64_t first_end, t1;

	for (int i = 0; i < 8; i++)
		t[i] = thread_in(&fake.ctx[0]);
	run_and_read(t[0], F1, 20 * US);
	t1 = fake.now;
	launch(t[0], F1, 100 * MS);
	first_end = fake.kernel_end;
	cr_expect_eq(fake.launched_at, t1);
	launch(t[1], F1, 100 * MS);
	cr_expect_eq(fake.launched_at, t1, "the second went at once");
	cr_expect_eq(newest(t[1], &fake.ctx[0])->estimate, 20 * US);
	for (int i = 2; i < 8; i++) {
		launch(t[i], F1, 100 * MS);
		cr_expect_geq(fake.launched_at, first_end + (i - 2) * 100 * MS,
			      "thread %d went at +%llu ns", i,
			      (unsigned long long)(fake.launched_at - t1));
		cr_expect_eq(newest(t[i], &fake.ctx[0])->estimate, 100 * MS,
			     "thread %d went on %llu ns", i,
			     (unsigned long long)newest(t[i], &fake.ctx[0])
				     ->estimate);
	}
	cr_expect_eq(fake.gone_used, 0);
}

/* A launch read in its holder's place is paid once: the bucket is charged
 * what it ran over its estimate when another thread reads it, and its
 * holder's own reading later counts that charge as made. (At 100% nothing
 * is charged at admission: the bucket moves by what launches ran over or
 * under their estimates.) */
Test(measure, a_launch_read_in_its_holder_s_place_is_paid_once)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	int64_t before;
	uint64_t used, first_end;

	run_and_read(a, F1, 1 * MS);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);			/* charged */
	before = tokens();
	used = charged();
	launch(a, F1, 10 * MS);		/* on F1's 1 ms */
	first_end = fake.kernel_end;
	launch(a, F2, 1 * MS);		/* a holds both tokens */
	launch(b, F2, 1 * MS);		/* reads a's first in its place */
	cr_expect_geq(fake.launched_at, first_end, "went %lld ns early",
		      (long long)(first_end - fake.launched_at));
	cr_expect_geq(newest(b, &fake.ctx[0])->tok.tok, 0);
	cr_expect_eq(before - tokens(), (int64_t)(9 * MS),
		     "the bucket charged %lld ns",
		     (long long)(before - tokens()));
	fake.now += 1 * SEC;
	sync_as(a);			/* a reads it too */
	sync_as(b);
	as(a);
	vgpu_measure_thread_exit(&a->m);
	as(b);
	vgpu_measure_thread_exit(&b->m);
	cr_expect_eq(charged() - used, 12 * MS, "%llu ns",
		     (unsigned long long)(charged() - used));
	/* b's estimates are its averages, a few ns over its kernels. */
	cr_expect_leq(llabs(before - tokens() - (int64_t)(9 * MS)), 16,
		      "%lld ns", (long long)(before - tokens()));
}

/* A holder whose context was torn down holds nothing: the next thread
 * frees its token without a call on its gone events, and goes at once. */
Test(measure, a_torn_down_holder_s_token_is_freed_without_its_events)
{
	start(100);
	struct fctx *x = &fake.ctx[1];
	struct fthread *a = thread_in(x);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(b, F1, 1 * MS);
	launch(a, F1, 100 * MS);
	launch(a, F1, 100 * MS);
	vgpu_measure_ctx_teardown((struct vgpu_prim_ctx *)x);
	x->gen++;
	fake.engine = fake.now;	/* the context's work is gone with it */
	t1 = fake.now;
	launch(b, F1, 1 * MS);
	cr_expect_eq(fake.launched_at, t1, "went at +%llu ns",
		     (unsigned long long)(fake.launched_at - t1));
	cr_expect_eq(fake.gone_used, 0, "a call on a torn-down event");
}

/* Launches holding both tokens that cannot start (their stream waits on a
 * host function that waits for this thread's next launch) do not hold the
 * next thread for ever: it goes without a token once it has waited
 * TOKEN_STALL_NS while none of them runs. While one runs, it waits. */
Test(measure, a_thread_goes_without_a_token_when_the_holders_cannot_start)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[1]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(b, F1, 1 * MS);
	fake.ctx[1].dflt.busy = fake.now + 3600 * SEC;	/* blocked */
	launch(a, F1, 1 * MS);
	launch(a, F1, 1 * MS);
	fake.engine = fake.now;		/* nothing of a's has started */
	t1 = fake.now;
	cr_assert_eq(launch(b, F1, 1 * MS), 0);
	cr_expect_geq(fake.launched_at, t1 + VGPU_MEASURE_TOKEN_STALL_NS);
	cr_expect_leq(fake.launched_at, t1 + VGPU_MEASURE_TOKEN_STALL_NS +
					VGPU_MEASURE_TOKEN_POLL_NS,
		      "went at +%llu ns",
		      (unsigned long long)(fake.launched_at - t1));
	cr_expect_eq(newest(b, &fake.ctx[0])->tok.tok, -1, "without a token");
	cr_expect_eq(fake.gone_used, 0);
}

/* The same with one of the holders' launches running: the next thread
 * waits for it, however long. */
Test(measure, a_thread_waits_for_a_token_while_a_holder_runs)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t end;

	run_and_read(b, F1, 1 * MS);
	launch(a, F1, 200 * MS);
	end = fake.kernel_end;
	launch(a, F1, 1 * MS);
	cr_assert_eq(launch(b, F1, 1 * MS), 0);
	cr_expect_geq(fake.launched_at, end, "went %lld ns early",
		      (long long)(end - fake.launched_at));
	cr_expect_geq(newest(b, &fake.ctx[0])->tok.tok, 0);
}

/* A thread waiting for a token held by a launch past its estimated end
 * (queued behind other tenants' work, or running long) asks again every
 * TOKEN_POLL_NS, not every TOKEN_MIN_WAIT_NS: 32 threads of eight tenants
 * asking every 10 us on two cores left the simulated device a quarter
 * idle (docs/compute.md, "Several tenants at once"). */
Test(measure, a_thread_waiting_for_an_overdue_holder_asks_every_poll)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t end, t1;
	unsigned n;

	run_and_read(b, F1, 1 * MS);
	launch(a, F1, 200 * MS);
	end = fake.kernel_end;
	launch(a, F1, 1 * MS);
	t1 = fake.now;
	n = fake.sleeps;
	cr_assert_eq(launch(b, F1, 1 * MS), 0);
	cr_expect_geq(fake.launched_at, end);
	cr_expect_leq(fake.launched_at, end + 2 * VGPU_MEASURE_TOKEN_POLL_NS,
		      "went %llu ns after the holder's end",
		      (unsigned long long)(fake.launched_at - end));
	cr_expect_leq(fake.sleeps - n,
		      (end - t1) / VGPU_MEASURE_TOKEN_POLL_NS + 20,
		      "%u sleeps in %llu ns", fake.sleeps - n,
		      (unsigned long long)(end - t1));
}

/* A thread whose long kernel holds one token, beside another thread's
 * short kernel holding the other (on a green context: it runs beside),
 * takes the short one's token when it comes back: it does not wait for
 * its own long kernel. */
Test(measure, a_thread_with_a_long_kernel_takes_the_token_a_short_one_frees)
{
	start(100);
	struct fctx *green = &fake.ctx[2];
	struct fthread *a, *b;
	uint64_t long_end, short_end;

	green->sm_held = 64;
	green->sm_total = 128;
	a = thread_in(&fake.ctx[0]);
	b = thread_in(green);
	run_and_read(a, F1, 1 * MS);
	run_and_read(b, F2, 1 * MS);
	launch(a, F1, 500 * MS);
	long_end = fake.kernel_end;
	launch(b, F2, 1 * MS);
	short_end = fake.kernel_end;
	cr_assert_lt(short_end, long_end);
	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	cr_expect_geq(fake.launched_at, short_end);
	cr_expect_lt(fake.launched_at, short_end + 1 * MS,
		     "went at +%llu ns after the short one's end",
		     (unsigned long long)(fake.launched_at - short_end));
	cr_expect_eq(fake.gone_used, 0);
}

/* Launches holding both tokens that started but do not end (a start
 * event says only that the work before it is done: a host function
 * queued between a launch's events, a graph behind another launch of
 * itself) do not hold the next thread for ever either: it goes without a
 * token after TOKEN_MAX_WAIT_NS. */
Test(measure, a_thread_goes_without_a_token_after_the_longest_wait)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[1]);
	struct fthread *b = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(b, F1, 1 * MS);
	launch(a, F1, 3600 * SEC);	/* started, never ends in time */
	launch(a, F1, 1 * MS);
	t1 = fake.now;
	cr_assert_eq(launch(b, F1, 1 * MS), 0);
	cr_expect_geq(fake.launched_at, t1 + VGPU_MEASURE_TOKEN_MAX_WAIT_NS);
	cr_expect_leq(fake.launched_at, t1 + VGPU_MEASURE_TOKEN_MAX_WAIT_NS +
					VGPU_MEASURE_TOKEN_POLL_NS,
		      "went at +%llu ns",
		      (unsigned long long)(fake.launched_at - t1));
	cr_expect_eq(newest(b, &fake.ctx[0])->tok.tok, -1, "without a token");
}

/* A forked child's launches are bounded by its own tokens: the parent's
 * launches in flight are not the child's to wait for. */
Test(measure, a_forked_child_starts_with_every_token_free)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(a, F1, 1 * MS);
	launch(a, F1, 100 * MS);
	launch(a, F1, 100 * MS);
	vgpu_measure_fork_child(&a->m);
	/* The parent reads its launches meanwhile and gives its lanes back
	 * (a child joins as a slot of its own; here the fake's one slot is
	 * both). */
	for (int i = 0; i < VGPU_THROTTLE_LANES; i++)
		for (unsigned tag = 0; tag < 256; tag++)	/* any */
			vgpu_throttle_lane_give(slot, i, tag);
	fake.engine = fake.now;	/* the child's GPU is idle */
	fake.ctx[0].dflt.busy = fake.now;
	t1 = fake.now;
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.launched_at, t1, "went at +%llu ns",
		     (unsigned long long)(fake.launched_at - t1));
}

/* Another tenant of the GPU, hard 70%, active now. */
static void other_tenant_active(void)
{
	struct vgpu_slot *o = ledger_join_ok(ledger, "other",
					     VGPU_LEDGER_UNLIMITED);

	cr_assert_eq(vgpu_throttle_configure(o, 70, VGPU_POLICY_HARD, fake.now),
		     0);
	cr_assert_eq(vgpu_throttle_admit(o, fake.now, 0), 0);
	vgpu_throttle_settle(o, 0, 0);
}

/* An elastic tenant alone is lent the GPU: more than DEPTH launches in
 * flight, while their estimates add up to one burst at most (and the ring
 * has room), so that a host thread late to wake does not leave the GPU
 * idle. Once another tenant is active, back to DEPTH. */
Test(measure, an_elastic_tenant_alone_queues_up_to_a_burst)
{
	start(30);
	cr_assert_eq(vgpu_throttle_configure(slot, 30, VGPU_POLICY_ELASTIC,
					     T0), 0);
	struct fthread *a = thread_in(&fake.ctx[0]);
	unsigned lent = VGPU_MEASURE_LENT_QUEUE_NS / (1 * MS);
	uint64_t t1;

	if (lent > VGPU_MEASURE_RING - 1)
		lent = VGPU_MEASURE_RING - 1;
	cr_assert_gt(lent, VGPU_MEASURE_DEPTH);
	run_and_read(a, F1, 1 * MS);
	t1 = fake.now;
	fake.sleeps = 0;
	for (unsigned i = 0; i < lent; i++) {
		launch(a, F1, 1 * MS);
		cr_expect_eq(fake.launched_at, t1, "launch %u went at +%llu ns",
			     i, (unsigned long long)(fake.launched_at - t1));
	}
	cr_expect_eq(fake.sleeps, 0, "nothing waited within the burst");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, lent);
	launch(a, F1, 1 * MS);
	cr_expect_gt(fake.sleeps, 0, "past the burst or the ring: the oldest");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, lent);

	/* Launches of 8 ms: two fit in 20 ms of estimates, so the oldest
	 * 1 ms ones are waited for until the sum fits. */
	sync_as(a);
	run_and_read(a, F2, 8 * MS);
	fake.sleeps = 0;
	launch(a, F2, 8 * MS);
	launch(a, F2, 8 * MS);
	cr_expect_eq(fake.sleeps, 0);
	launch(a, F2, 8 * MS);
	cr_expect_gt(fake.sleeps, 0, "24 ms of estimates > one burst");
	cr_expect_eq(fake.launched_at, fake.now, "went once the oldest was read");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, 2);

	/* A competitor arrives: DEPTH again. */
	sync_as(a);
	other_tenant_active();
	fake.sleeps = 0;
	for (int i = 0; i < 6; i++)
		launch(a, F1, 100 * US);
	/* Polling, a wait may read more than the oldest. */
	cr_expect_leq(state_of(a, &fake.ctx[0])->count, VGPU_MEASURE_DEPTH);
	cr_expect_gt(fake.sleeps, 0);
}

/* Beside another tenant, a launch read longer than its estimate right
 * after its end may have waited behind the other's kernel, whose end the
 * other has not recorded yet: it stays charged as it was, its function's
 * estimate left alone, until an end recorded since cuts it (or
 * READ_GRACE_NS after its end); then its own time from the timeline. A 30% tenant of 50 us kernels beside a 70% one
 * of 20 ms got 4% of the simulated device (a quarter of it idle): each of
 * its kernels was charged about 20 ms at once and its estimate raised to
 * that. */
static uint64_t other_end;

static void other_records_its_end(void)
{
	if (other_end)
		vgpu_timeline_record(ledger, other_end);
	other_end = 0;
}

Test(measure, a_launch_read_early_beside_another_tenant_waits_for_its_ends)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t, before, own, read_at;
	int64_t tok;

	for (int i = 0; i < 4; i++)
		run_and_read(a, F1, 100 * US);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;	/* all charged */
	sync_as(a);
	other_tenant_active();
	/* The other tenant's 20 ms kernel holds the device; ours runs after
	 * it and is read as it ends, before the other records its end. */
	t = fake.now;
	fake.engine = t + 20 * MS;
	before = charged();
	launch(a, F1, 100 * US);
	tok = tokens();
	fake.now = fake.kernel_end;
	sync_as(a);
	cr_expect_geq(tokens(), tok - (int64_t)(5 * US),
		      "charged %lld ns at once",
		      (long long)(tok - tokens()));
	/* The next launch waits for it to be read again; the other's thread
	 * records its end while it waits (at its first poll). */
	read_at = fake.now;
	other_end = t + 20 * MS;
	fake.on_sleep = other_records_its_end;
	launch(a, F1, 100 * US);
	fake.on_sleep = NULL;
	cr_expect_leq(fake.launched_at, read_at + 2 * VGPU_MEASURE_REVIEW_POLL_NS,
		      "held %llu ns", (unsigned long long)(fake.launched_at - read_at));
	cr_expect_leq(newest(a, &fake.ctx[0])->estimate, 200 * US,
		      "estimate raised to %llu ns",
		      (unsigned long long)newest(a, &fake.ctx[0])->estimate);
	fake.now = fake.kernel_end;
	sync_as(a);
	fake.now += VGPU_MEASURE_READ_GRACE_NS + VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	own = charged() - before;
	cr_expect_leq(own, 200 * US + 2 * US, "charged %llu ns for 200 us",
		      (unsigned long long)own);
	cr_expect_geq(own, 200 * US);
}

/* Read early, but less than HOLD_NS longer than it is charged: the next
 * launch goes at once (holding for such a difference cost a 70% tenant
 * of 100 us kernels a fifth of the device); it is read again later. */
Test(measure, a_launch_read_a_little_long_beside_another_tenant_does_not_hold)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t read_at;

	for (int i = 0; i < 4; i++)
		run_and_read(a, F1, 100 * US);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	other_tenant_active();
	fake.engine = fake.now + 500 * US;	/* the other's kernel */
	launch(a, F1, 100 * US);
	fake.now = fake.kernel_end;
	sync_as(a);
	cr_assert_eq(state_of(a, &fake.ctx[0])->early, 1, "not read early");
	read_at = fake.now;
	launch(a, F1, 100 * US);
	cr_expect_eq(fake.launched_at, read_at, "held %llu ns",
		     (unsigned long long)(fake.launched_at - read_at));
	/* Nothing cut it: after the grace, charged what it was read. */
	fake.now = read_at + VGPU_MEASURE_READ_GRACE_NS;
	sync_as(a);
	cr_expect_eq(state_of(a, &fake.ctx[0])->early, 0);
}

/* The same launch with no end in its interval once the grace has passed
 * (it ran all that time): charged all of it, and its function's estimate
 * raised before the thread's next launch goes (else a long kernel after
 * short ones would let its next launches go on the short estimate). */
Test(measure, a_launch_read_early_that_really_ran_long_is_charged_after_the_grace)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t before, long_end;

	for (int i = 0; i < 4; i++)
		run_and_read(a, F1, 100 * US);
	fake.now += VGPU_MEASURE_CHARGE_DELAY_NS;	/* all charged */
	sync_as(a);
	other_tenant_active();
	before = charged();
	run_and_read(a, F1, 20 * MS);
	long_end = fake.kernel_end;
	cr_expect_eq(state_of(a, &fake.ctx[0])->early, 1, "not read early");
	/* Nothing cuts it: the next launch is held out the grace, then goes
	 * on the estimate it raised. */
	launch(a, F1, 100 * US);
	cr_expect_geq(fake.launched_at, long_end + VGPU_MEASURE_READ_GRACE_NS,
		      "went %lld ns after the end",
		      (long long)(fake.launched_at - long_end));
	cr_expect_geq(newest(a, &fake.ctx[0])->estimate, 20 * MS,
		      "estimate %llu ns",
		      (unsigned long long)newest(a, &fake.ctx[0])->estimate);
	fake.now = fake.kernel_end + VGPU_MEASURE_CHARGE_DELAY_NS;
	sync_as(a);
	cr_expect_geq(charged() - before, 20 * MS + 100 * US);
}

/* ---- admission -------------------------------------------------------------------- */

/* Told to wait, a launch sleeps (2 ms at most at a time), reads what ended
 * meanwhile, and goes when the bucket holds its estimate. */
Test(measure, a_launch_waits_for_its_estimate_in_the_bucket)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1;

	run_and_read(a, F1, 4 * MS);	/* the probe: 4 ms of debt */
	t1 = fake.now;
	fake.sleeps = 0;
	launch(a, F1, 4 * MS);
	/* At 50%: 4 ms of debt and 4 ms to come take 16 ms from T0. */
	cr_expect_eq(fake.launched_at, T0 + 16 * MS, "went at T0 + %llu ns",
		     (unsigned long long)(fake.launched_at - T0));
	cr_expect_eq(fake.sleeps, (T0 + 16 * MS - t1) / (2 * MS));
	cr_expect_eq(vgpu_ledger_slot_record(slot)->launches_throttled, 1);
}

/* The front end's gate is passed after the admission, around the launch
 * and both of its events: a wait there (a move of memory, a suspension)
 * is neither inside the throttle nor timed as the kernel's. */
Test(measure, the_gate_is_passed_after_admission_around_the_events)
{
	start(50);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct kernel k = { .len = 4 * MS };
	struct vgpu_measure_call call = {
		.key = F1, .kind = VGPU_MEASURE_KERNEL,
		.launch = f_launch, .arg = &k,
		.enter = gate_enter, .leave = gate_leave,
	};

	run_and_read(a, F1, 4 * MS);	/* the probe: 4 ms of debt */
	memset(&gate, 0, sizeof(gate));
	as(a);
	cr_assert_eq(vgpu_measure_launch(&a->m, &call), 0);
	cr_expect_eq(gate.enters, 1);
	cr_expect_eq(gate.leaves, 1);
	cr_expect_eq(gate.inside, 0);
	/* Entered once admitted (T0 + 16 ms, as in the test above). */
	cr_expect_eq(gate.entered_at, T0 + 16 * MS, "entered at T0 + %llu ns",
		     (unsigned long long)(gate.entered_at - T0));
	cr_expect_eq(gate.records_at_enter, 0);
	cr_expect_eq(gate.records_at_leave, 2, "both events inside");
	/* A refused launch leaves the gate too. */
	k.refuse = 700;
	memset(&gate, 0, sizeof(gate));
	cr_expect_eq(vgpu_measure_launch(&a->m, &call), 700);
	cr_expect_eq(gate.enters, 1);
	cr_expect_eq(gate.leaves, 1);
}

/* This process's probe, a kernel longer than the bound, is retired by
 * another process while it runs (charged the time so far); when it is
 * read, only the rest is charged: the tenant pays its length once. */
Test(measure, a_probe_retired_while_it_runs_is_charged_once)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	struct vgpu_slot *b;
	uint64_t was;

	cr_assert_eq(launch(a, F1, VGPU_THROTTLE_PROBE_HOLD_NS + 3 * SEC), 0);
	cr_assert_neq(newest(a, &fake.ctx[0])->probe_at, 0);
	was = charged();
	b = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	fake.now = T0 + VGPU_THROTTLE_PROBE_HOLD_NS + 1 * SEC;
	uint64_t bp = 0;

	cr_assert_eq(vgpu_throttle_probe_begin(b, fake.now, &bp),
		     VGPU_THROTTLE_PROBE_RETIRED);
	fake.now = fake.kernel_end;
	/* The read brings the bucket up to now before it charges the
	 * rest (vgpu_throttle_refill): done here first, so that only the
	 * charge is seen. */
	vgpu_throttle_refill(slot, fake.now);
	int64_t after_retire = tokens();
	sync_as(a);
	cr_expect_eq(tokens(), after_retire - (int64_t)(2 * SEC),
		     "the read charged %lld ns more, want the 2 s left",
		     (long long)(after_retire - tokens()));
	(void)was;
}

/* A probe left unread until its process exits (a process that launches,
 * sleeps 15 s and exits) is charged at most the tenant's hold bound, not
 * the whole time since it went: that charge starved the tenant's other
 * processes for a minute. */
Test(measure, an_unread_probe_at_exit_is_charged_at_most_the_hold_bound)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t was;

	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	cr_assert_neq(newest(a, &fake.ctx[0])->probe_at, 0);
	was = charged();
	fake.now = T0 + 15 * SEC;
	as(a);
	vgpu_measure_process_exit(&a->m);
	cr_expect_eq(charged() - was, VGPU_THROTTLE_PROBE_HOLD_NS,
		     "charged %llu ns at exit",
		     (unsigned long long)(charged() - was));
}

/* A launch that runs past its estimate after a pause with no admission:
 * the bucket is brought up to the read before the debt is charged, so
 * the pause's accrual (clamped at the burst) does not pay for it. The refill
 * is lazy; charged first, a debt of 99 ms read after 700 ms without an
 * admission was offset by all 210 ms the pause accrued at 30%, and the
 * next launch went at once (a hostile review's gated kernels: three long
 * ones back to back). */
Test(measure, a_debt_after_a_pause_is_not_offset_by_the_pause)
{
	start(30);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t t1, due;
	int64_t debt;

	run_and_read(a, F1, 1 * MS);
	/* Admitted on the 1 ms estimate, it starts 600 ms later (the GPU
	 * busy with other work: a host function before it, say), and is
	 * read at its end, 700 ms after the last refill. */
	fake.engine = fake.now + 600 * MS;
	run_and_read(a, F1, 100 * MS);
	t1 = fake.now;
	debt = -tokens();
	cr_assert_gt(debt, 0, "in debt after the read");
	cr_assert_eq(launch(a, F1, 1 * MS), 0);
	/* The next goes once the debt and its own 1 ms are repaid at 30%,
	 * not earlier: the pause accrued nothing more for it. */
	due = t1 + ((uint64_t)debt + 1 * MS) * 100 / 30;
	cr_expect_geq(fake.launched_at + 1 * MS, due, "went %llu ms early",
		      (unsigned long long)(due - fake.launched_at) / MS);
}
