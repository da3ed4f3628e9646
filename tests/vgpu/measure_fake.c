/* measure_fake.c - the fake driver and clock of the measuring's tests: see
 * measure_fake.h. */
#include "measure_fake.h"

TestSuite(measure, .init = ledger_dir_make, .fini = ledger_dir_remove);

/* ---- the fake driver -------------------------------------------------------- */

struct fake_state fake;

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
	for (int i = 0; i < FAKE_EVENTS; i++)
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

struct fake_gate gate;

void gate_enter(void)
{
	gate.inside++;
	gate.enters++;
	gate.entered_at = fake.now;
	gate.records_at_enter = gate.records;
}

void gate_leave(void)
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

static void f_probe_watch(void)
{
	fake.probe_watches++;
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
	.event_elapsed = f_event_elapsed,
	.now = f_now,
	.sleep = f_sleep,
	.thread_watch = f_thread_watch,
	.probe_watch = f_probe_watch,
};


int f_launch(const void *arg)
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

struct vgpu_ledger *ledger;
struct vgpu_slot *slot;
struct vgpu_measure_gpu gpu0;
struct vgpu_slot *other;

/* A tenant with a share (100: admitted at once, charged all the same) on
 * GPU 0, contexts on it, the clock at T0. */
void start(unsigned share)
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

struct fthread *thread_in(struct fctx *c)
{
	struct fthread *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	if (c)
		t->stack[t->depth++] = c;
	return t;
}

void as(struct fthread *t)
{
	fake.cur = t;
}

/* Thread t launches a kernel of function key, len ns long, on its current
 * context's default stream. */
int launch(struct fthread *t, uint64_t key, uint64_t len)
{
	struct kernel k = { .len = len };
	struct vgpu_measure_call call = {
		.key = key, .kind = VGPU_MEASURE_KERNEL,
		.launch = f_launch, .arg = &k,
	};

	as(t);
	return vgpu_measure_launch(&t->m, &call);
}

void sync_as(struct fthread *t)
{
	struct fthread *was = fake.cur;

	as(t);
	vgpu_measure_synchronised(&t->m);
	as(was);
}

/* t's state for context c, NULL if it has none. */
struct vgpu_measure_ctx *state_of(struct fthread *t, struct fctx *c)
{
	for (int i = 0; i < VGPU_MEASURE_CTXS; i++)
		if (t->m.ctx[i].ctx == (struct vgpu_prim_ctx *)c)
			return &t->m.ctx[i];
	return NULL;
}

/* t's latest launch in c, not yet read. */
const struct vgpu_measure_pending *newest(struct fthread *t,
						 struct fctx *c)
{
	struct vgpu_measure_ctx *s = state_of(t, c);

	cr_assert_not_null(s);
	cr_assert_gt(s->count, 0, "no launch pending");
	unsigned pos = (s->head + s->count - 1) % VGPU_MEASURE_RING;

	return &s->ring[s->perm[pos] ^ pos];
}

const struct vgpu_ledger_compute *compute(void)
{
	return &vgpu_ledger_tenant_record(slot)->compute;
}

uint64_t charged(void)
{
	return __atomic_load_n(&compute()->gpu_time_ns, __ATOMIC_RELAXED);
}

int64_t tokens(void)
{
	return __atomic_load_n(&compute()->tokens_ns, __ATOMIC_RELAXED);
}

uint64_t timeline_head(void)
{
	const struct vgpu_ledger_timeline *tl = (const void *)(
		(const char *)vgpu_ledger_header(ledger) +
		VGPU_LEDGER_TIMELINE_OFFSET);

	return __atomic_load_n(&tl->head, __ATOMIC_RELAXED);
}

unsigned live_events(void)
{
	unsigned n = 0;

	for (int i = 0; i < FAKE_EVENTS; i++)
		n += fake.ev[i].live;
	return n;
}

void run_and_read(struct fthread *t, uint64_t key, uint64_t len)
{
	launch(t, key, len);
	fake.now = fake.kernel_end + fake.read_late;
	sync_as(t);
}
