/* test_measure.c - the measuring of launches (vgpu/measure.c) against a
 * fake driver and a fake clock: every decision of the throttle around a
 * launch, deterministically, with nothing slept and no time measured.
 *
 * The fake GPU runs the kernels of whole-device contexts one at a time,
 * in the order they were made, and those of green contexts beside them; an
 * event completes when the work before it on its stream has. Its clock is
 * the host's (device time = host time), which moves only when the core
 * sleeps (prim->sleep: by the time asked, a yield by YIELD), blocks for an
 * event, or a test moves it. Several threads are several states driven by
 * the one real thread, each with its own stack of current contexts; while
 * one sleeps, a hook lets the others act.
 */
#include "ledger_test.h"
#include "measure.h"
#include "options.h"
#include "throttle.h"
#include "timeline.h"

TestSuite(measure, .init = ledger_dir_make, .fini = ledger_dir_remove);

#define US (UINT64_C(1000))
#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define T0 (100 * SEC)		/* the fake clock's start (0 means never) */
#define YIELD (100 * US)	/* what a yield lets pass */

/* ---- the fake driver -------------------------------------------------------- */

struct fctx;

struct fstream {
	struct fctx *ctx;
	uint64_t busy;		/* its last work ends then */
	bool live;
};

struct fctx {
	const struct vgpu_measure_gpu *gpu;	/* NULL: not measured */
	unsigned sm_held, sm_total;
	struct fstream dflt;	/* its default stream */
	unsigned gen;		/* teardowns: objects of an older gen are gone */
};

struct fevent {
	struct fctx *ctx;
	unsigned gen;
	bool live, recorded;
	uint64_t done;		/* completes then */
	uint64_t seen;		/* a query sees it complete then */
};

struct fthread {
	struct vgpu_measure_thread m;
	struct fctx *stack[8];	/* current contexts, top last */
	int depth;
	unsigned watched;
};

static struct {
	uint64_t now;
	uint64_t engine;	/* the whole-device engine is busy until */
	struct fthread *cur;	/* the thread running */
	void (*on_sleep)(void);	/* others act while cur sleeps */
	struct fevent ev[256];
	struct fstream st[16];
	struct fctx ctx[4];
	unsigned events_made, streams_made, syncs, sleeps, gone_used;
	uint64_t launched_at, kernel_end;
	unsigned late_reads;	/* the next reference readings seen late */
	uint64_t late;		/* by this much */
	uint64_t read_late;	/* run_and_read reads its launch this late */
} fake;

static struct fctx *cur_ctx(void)
{
	return fake.cur->depth ? fake.cur->stack[fake.cur->depth - 1] : NULL;
}

/* A handle of a context torn down since it was made was used. */
static void check_gone(struct fctx *c, unsigned gen)
{
	if (c && c->gen != gen)
		fake.gone_used++;
}

static struct vgpu_prim_ctx *f_ctx_current(void)
{
	return (struct vgpu_prim_ctx *)cur_ctx();
}

static bool f_ctx_push(struct vgpu_prim_ctx *ctx)
{
	fake.cur->stack[fake.cur->depth++] = (struct fctx *)ctx;
	return true;
}

static void f_ctx_pop(void)
{
	cr_assert_gt(fake.cur->depth, 0, "a pop without a push");
	fake.cur->depth--;
}

static struct vgpu_prim_ctx *f_stream_ctx(struct vgpu_prim_stream *s)
{
	return s ? (struct vgpu_prim_ctx *)((struct fstream *)s)->ctx : NULL;
}

static bool f_sm_counts(struct vgpu_prim_ctx *ctx, unsigned *held,
			unsigned *total)
{
	struct fctx *c = (struct fctx *)ctx;

	*held = c->sm_held;
	*total = c->sm_total;
	return c->sm_total != 0;
}

static const struct vgpu_measure_gpu *f_gpu(struct vgpu_prim_ctx *ctx)
{
	return ((struct fctx *)ctx)->gpu;
}

static struct vgpu_prim_stream *f_stream_create(void)
{
	for (int i = 0; i < 16; i++)
		if (!fake.st[i].live) {
			fake.st[i] = (struct fstream){ cur_ctx(), 0, true };
			fake.streams_made++;
			return (struct vgpu_prim_stream *)&fake.st[i];
		}
	cr_assert_fail("out of fake streams");
	return NULL;
}

static void f_stream_destroy(struct vgpu_prim_stream *s)
{
	((struct fstream *)s)->live = false;
}

static struct vgpu_prim_event *f_event_create(void)
{
	for (int i = 0; i < 256; i++)
		if (!fake.ev[i].live) {
			fake.ev[i] = (struct fevent){ cur_ctx(), cur_ctx()->gen,
						      true, false, 0, 0 };
			fake.events_made++;
			return (struct vgpu_prim_event *)&fake.ev[i];
		}
	cr_assert_fail("out of fake events");
	return NULL;
}

static void f_event_destroy(struct vgpu_prim_event *e)
{
	struct fevent *f = (struct fevent *)e;

	check_gone(f->ctx, f->gen);
	cr_assert(f->live, "an event destroyed twice");
	f->live = false;
}

/* The front end's gate around a launch (vgpu_measure_call's enter and
 * leave): when it was entered and left, and the events recorded by then. */
static struct {
	int inside, enters, leaves;
	uint64_t entered_at;
	unsigned records, records_at_enter, records_at_leave;
} gate;

static void gate_enter(void)
{
	gate.inside++;
	gate.enters++;
	gate.entered_at = fake.now;
	gate.records_at_enter = gate.records;
}

static void gate_leave(void)
{
	gate.inside--;
	gate.leaves++;
	gate.records_at_leave = gate.records;
}

static struct fstream *stream_of(struct vgpu_prim_stream *s)
{
	return s ? (struct fstream *)s : &cur_ctx()->dflt;
}

static bool f_event_record(struct vgpu_prim_event *e,
			   struct vgpu_prim_stream *s, bool per_thread)
{
	struct fevent *f = (struct fevent *)e;
	struct fstream *fs = stream_of(s);

	(void)per_thread;
	check_gone(f->ctx, f->gen);
	gate.records++;
	f->recorded = true;
	f->done = fs->busy > fake.now ? fs->busy : fake.now;
	f->seen = f->done;
	/* A stream the core made: the reference's. */
	if (fake.late_reads && fs >= fake.st && fs < fake.st + 16) {
		fake.late_reads--;
		f->seen += fake.late;
	}
	return true;
}

static int f_event_query(struct vgpu_prim_event *e)
{
	struct fevent *f = (struct fevent *)e;

	check_gone(f->ctx, f->gen);
	if (!f->recorded)
		return VGPU_PRIM_ERROR;
	if (f->done > fake.now)
		return VGPU_PRIM_NOT_READY;
	/* Seen late: the polling thread was not run until then. */
	if (f->seen > fake.now)
		fake.now = f->seen;
	return VGPU_PRIM_DONE;
}

static bool f_event_sync(struct vgpu_prim_event *e)
{
	struct fevent *f = (struct fevent *)e;

	check_gone(f->ctx, f->gen);
	fake.syncs++;
	if (!f->recorded)
		return false;
	if (f->done > fake.now)
		fake.now = f->done;
	return true;
}

static bool f_event_elapsed(struct vgpu_prim_event *a,
			    struct vgpu_prim_event *b, uint64_t *ns)
{
	struct fevent *x = (struct fevent *)a, *y = (struct fevent *)b;

	if (!x->recorded || !y->recorded || y->done > fake.now ||
	    y->done < x->done)
		return false;
	*ns = y->done - x->done;
	return true;
}

static uint64_t f_now(void)
{
	return fake.now;
}

static void f_sleep(uint64_t ns)
{
	fake.sleeps++;
	fake.now += ns ? ns : YIELD;
	if (fake.on_sleep)
		fake.on_sleep();
}

static void f_thread_watch(void)
{
	fake.cur->watched++;
}

static const struct vgpu_prim fake_prim = {
	.ctx_current = f_ctx_current,
	.ctx_push = f_ctx_push,
	.ctx_pop = f_ctx_pop,
	.stream_ctx = f_stream_ctx,
	.sm_counts = f_sm_counts,
	.gpu = f_gpu,
	.stream_create = f_stream_create,
	.stream_destroy = f_stream_destroy,
	.event_create = f_event_create,
	.event_destroy = f_event_destroy,
	.event_record = f_event_record,
	.event_query = f_event_query,
	.event_sync = f_event_sync,
	.event_elapsed = f_event_elapsed,
	.now = f_now,
	.sleep = f_sleep,
	.thread_watch = f_thread_watch,
};

/* A kernel of len ns on stream s (NULL: the current context's default):
 * it starts when its stream, and for a whole-device context the engine,
 * are free. */
struct kernel {
	uint64_t len;
	struct fstream *s;
	int refuse;		/* the driver's error, if it refuses */
};

static int f_launch(const void *arg)
{
	const struct kernel *k = arg;
	struct fstream *s = k->s ? k->s : &cur_ctx()->dflt;
	bool green = s->ctx->sm_total && s->ctx->sm_held < s->ctx->sm_total;
	uint64_t start = fake.now;

	if (k->refuse)
		return k->refuse;
	if (s->busy > start)
		start = s->busy;
	if (!green && fake.engine > start)
		start = fake.engine;
	s->busy = start + k->len;
	if (!green)
		fake.engine = s->busy;
	fake.launched_at = fake.now;
	fake.kernel_end = s->busy;
	return 0;
}

/* ---- the tenant, the threads ------------------------------------------------- */

static struct vgpu_ledger *ledger;
static struct vgpu_slot *slot;
static struct vgpu_measure_gpu gpu0;

/* A tenant with a share (100: admitted at once, charged all the same) on
 * GPU 0, contexts on it, the clock at T0. */
static void start(unsigned share)
{
	memset(&fake, 0, sizeof(fake));
	fake.now = T0;
	ledger = ledger_open_ok();
	slot = ledger_join_ok(ledger, "team", VGPU_LEDGER_UNLIMITED);
	cr_assert_eq(vgpu_throttle_configure(slot, share, VGPU_POLICY_HARD,
					     T0), 0);
	gpu0 = (struct vgpu_measure_gpu){ 0, ledger, slot };
	for (int i = 0; i < 4; i++) {
		fake.ctx[i].gpu = &gpu0;
		fake.ctx[i].dflt.ctx = &fake.ctx[i];
		fake.ctx[i].dflt.live = true;
	}
	vgpu_measure_use(&fake_prim);
}

static struct fthread *thread_in(struct fctx *c)
{
	struct fthread *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	if (c)
		t->stack[t->depth++] = c;
	return t;
}

static void as(struct fthread *t)
{
	fake.cur = t;
}

/* Thread t launches a kernel of function key, len ns long, on its current
 * context's default stream. */
static int launch(struct fthread *t, uint64_t key, uint64_t len)
{
	struct kernel k = { .len = len };
	struct vgpu_measure_call call = {
		.key = key, .kind = VGPU_MEASURE_KERNEL,
		.launch = f_launch, .arg = &k,
	};

	as(t);
	return vgpu_measure_launch(&t->m, &call);
}

static void sync_as(struct fthread *t)
{
	struct fthread *was = fake.cur;

	as(t);
	vgpu_measure_synchronised(&t->m);
	as(was);
}

/* t's state for context c, NULL if it has none. */
static struct vgpu_measure_ctx *state_of(struct fthread *t, struct fctx *c)
{
	for (int i = 0; i < VGPU_MEASURE_CTXS; i++)
		if (t->m.ctx[i].ctx == (struct vgpu_prim_ctx *)c)
			return &t->m.ctx[i];
	return NULL;
}

/* t's latest launch in c, not yet read. */
static const struct vgpu_measure_pending *newest(struct fthread *t,
						 struct fctx *c)
{
	struct vgpu_measure_ctx *s = state_of(t, c);

	cr_assert_not_null(s);
	cr_assert_gt(s->count, 0, "no launch pending");
	return &s->ring[(s->head + s->count - 1) % VGPU_MEASURE_RING];
}

static const struct vgpu_ledger_compute *compute(void)
{
	return &vgpu_ledger_tenant_record(slot)->compute;
}

static uint64_t charged(void)
{
	return __atomic_load_n(&compute()->gpu_time_ns, __ATOMIC_RELAXED);
}

static int64_t tokens(void)
{
	return __atomic_load_n(&compute()->tokens_ns, __ATOMIC_RELAXED);
}

static uint64_t timeline_head(void)
{
	const struct vgpu_ledger_timeline *tl = (const void *)(
		(const char *)vgpu_ledger_header(ledger) +
		VGPU_LEDGER_TIMELINE_OFFSET);

	return __atomic_load_n(&tl->head, __ATOMIC_RELAXED);
}

static unsigned live_events(void)
{
	unsigned n = 0;

	for (int i = 0; i < 256; i++)
		n += fake.ev[i].live;
	return n;
}

#define F1 0x1000	/* functions */
#define F2 0x2000
#define F3 0x3000

/* ---- the first launch ------------------------------------------------------------ */

static struct vgpu_slot *other;	/* another process of the tenant */

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
	cr_expect_eq(fake.launched_at, T0 + 3 * MS);
	cr_expect_eq(fake.syncs, 1, "blocked for the probe");
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

static void run_and_read(struct fthread *t, uint64_t key, uint64_t len);

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

/* Launches F1 of len on a and reads it once it has ended. */
static void run_and_read(struct fthread *t, uint64_t key, uint64_t len)
{
	launch(t, key, len);
	fake.now = fake.kernel_end + fake.read_late;
	sync_as(t);
}

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
	cr_expect_eq(fake.now, T0 + 6 * MS, "no longer than its launches");
	cr_expect_eq(live_events(), 0, "events given back");
	cr_expect_not(fake.st[0].live, "the calibration stream given back");
	cr_expect_eq(a->depth, 1, "the context popped");
	cr_expect_null(state_of(a, &fake.ctx[0]));
}

/* A launch still running when the exit's wait is over is charged its
 * share of the time since it was issued... */
Test(measure, a_thread_exit_charges_the_time_since_issued_if_more)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);
	uint64_t issued;

	run_and_read(a, F1, 1 * MS);
	issued = fake.now;
	launch(a, F2, 10 * SEC);	/* estimate: 1 ms */
	vgpu_measure_thread_exit(&a->m);
	/* The wait ends at the first yield past EXIT_WAIT_NS. */
	cr_expect_eq(fake.now, issued + VGPU_MEASURE_EXIT_WAIT_NS + YIELD);
	cr_expect_eq(charged(), 1 * MS + (fake.now - issued), "%llu",
		     (unsigned long long)charged());
	cr_expect_eq(live_events(), 0);
}

/* ... or its estimate, if that is more. */
Test(measure, a_thread_exit_charges_the_estimate_if_more)
{
	start(100);
	struct fthread *a = thread_in(&fake.ctx[0]);

	run_and_read(a, F1, 5 * SEC);
	launch(a, F1, 5 * SEC);		/* estimate: 5 s */
	vgpu_measure_thread_exit(&a->m);
	cr_expect_eq(charged(), 10 * SEC, "%llu",
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
	int64_t before = tokens();
	uint64_t used = charged();

	as(a);
	cr_expect_eq(vgpu_measure_launch(&a->m, &call), 700);
	cr_expect_eq(charged(), used);
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, 0);
	/* Admitted at 1 ms after the refill of 21 ms at 50%, refunded. */
	cr_expect_eq(tokens() - before, (int64_t)(21 * MS / 2), "%+lld",
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
	fake.syncs = 0;
	for (int i = 0; i < VGPU_MEASURE_DEPTH; i++) {
		launch(a, F1, 1 * MS);
		cr_expect_eq(fake.launched_at, t1, "launch %d went at +%llu ns",
			     i, (unsigned long long)(fake.launched_at - t1));
	}
	cr_expect_eq(fake.syncs, 0, "nothing waited while the ring had room");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, VGPU_MEASURE_DEPTH);
	made = fake.events_made;
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.launched_at, t1 + 1 * MS, "went at +%llu ns",
		     (unsigned long long)(fake.launched_at - t1));
	cr_expect_eq(fake.syncs, 1, "blocked for the oldest only");
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
	fake.syncs = 0;
	for (unsigned i = 0; i < lent; i++) {
		launch(a, F1, 1 * MS);
		cr_expect_eq(fake.launched_at, t1, "launch %u went at +%llu ns",
			     i, (unsigned long long)(fake.launched_at - t1));
	}
	cr_expect_eq(fake.syncs, 0, "nothing waited within the burst");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, lent);
	launch(a, F1, 1 * MS);
	cr_expect_eq(fake.syncs, 1, "past the burst or the ring: the oldest");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, lent);

	/* Launches of 8 ms: two fit in 20 ms of estimates, so the oldest
	 * 1 ms ones are waited for until the sum fits. */
	sync_as(a);
	run_and_read(a, F2, 8 * MS);
	fake.syncs = 0;
	launch(a, F2, 8 * MS);
	launch(a, F2, 8 * MS);
	cr_expect_eq(fake.syncs, 0);
	launch(a, F2, 8 * MS);
	cr_expect_eq(fake.syncs, 1, "24 ms of estimates > one burst");
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, 2);

	/* A competitor arrives: DEPTH again. */
	sync_as(a);
	other_tenant_active();
	fake.syncs = 0;
	for (int i = 0; i < 6; i++)
		launch(a, F1, 100 * US);
	cr_expect_eq(state_of(a, &fake.ctx[0])->count, VGPU_MEASURE_DEPTH);
	cr_expect_geq(fake.syncs, 6 - VGPU_MEASURE_DEPTH, "%u syncs",
		      fake.syncs);
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
	int64_t after_retire = tokens();
	fake.now = fake.kernel_end;
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
