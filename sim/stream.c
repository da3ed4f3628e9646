/* stream.c - streams: in-order queues of work, each run by a worker thread.
 *
 * Ordering between streams follows the driver's rules for the legacy NULL
 * stream: work on it waits for all earlier work on the context's blocking
 * streams, and work on a blocking stream waits for earlier NULL-stream work.
 * Such waits are dependencies (stream, sequence number) that the worker
 * waits for before it runs an op.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define PER_THREAD_SLOTS 8

static atomic_ullong next_stream_id = 1;

/* This thread's per-thread default streams, one per context. */
static _Thread_local struct {
	struct CUctx_st *ctx;
	unsigned long long ctx_id;
	struct CUstream_st *stream;
} per_thread[PER_THREAD_SLOTS];

struct vsim_op *vsim_op_new(enum vsim_op_kind kind)
{
	struct vsim_op *op = calloc(1, sizeof(*op));

	if (op)
		op->kind = kind;
	return op;
}

static void op_free(struct vsim_op *op)
{
	if (op->kind == VSIM_OP_KERNEL)
		free(op->u.kernel.launch);
	free(op->deps);
	free(op);
}

static void fill(void *dst, uint32_t value, unsigned elem, size_t count)
{
	unsigned char *p = dst;

	if (elem == 1) {
		memset(p, (int)value, count);
		return;
	}
	for (size_t i = 0; i < count; i++) {
		if (elem == 2) {
			uint16_t v = (uint16_t)value;
			memcpy(p + 2 * i, &v, 2);
		} else {
			memcpy(p + 4 * i, &value, 4);
		}
	}
}

void vsim_fill_rows(void *dst, size_t pitch, uint32_t value, unsigned elem,
		    size_t count, size_t height)
{
	for (size_t r = 0; r < height; r++)
		fill((char *)dst + r * pitch, value, elem, count);
}

_Thread_local uint64_t vsim_stream_clock;

/* Runs op on s's worker. The device's clock (docs/simulator.md, "The
 * device's clock") is at vsim_stream_clock when the op starts there; a
 * kernel moves it to its end, an event is stamped with it, a copy or a
 * host function adds the time it took. */
static void op_run(struct CUstream_st *s, struct vsim_op *op)
{
	uint64_t began = vsim_now_ns(), clock = vsim_stream_clock;

	switch (op->kind) {
	case VSIM_OP_KERNEL:
		vsim_launch_run(s->ctx->device, op->u.kernel.launch);
		return;
	case VSIM_OP_COPY:
		memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.len);
		break;
	case VSIM_OP_COPY2D:
		for (size_t z = 0; z < op->u.copy2d.depth; z++)
			for (size_t r = 0; r < op->u.copy2d.height; r++)
				memmove((char *)op->u.copy2d.dst +
						z * op->u.copy2d.dslice +
						r * op->u.copy2d.dpitch,
					(const char *)op->u.copy2d.src +
						z * op->u.copy2d.sslice +
						r * op->u.copy2d.spitch,
					op->u.copy2d.width);
		break;
	case VSIM_OP_SET:
		vsim_fill_rows(op->u.set.dst, op->u.set.pitch, op->u.set.value,
			       op->u.set.elem, op->u.set.count,
			       op->u.set.height);
		break;
	case VSIM_OP_EVENT:
		vsim_event_complete(op->u.event.event, op->seq, clock);
		return;
	case VSIM_OP_HOST_FN:
		op->u.host.fn(op->u.host.data);
		if (vsim_stream_clock != clock)
			return;		/* a graph's kernels moved it */
		break;
	case VSIM_OP_WAIT:
		return;
	case VSIM_OP_MEMOP:
		vsim_memop_run(op);
		break;
	}
	vsim_stream_clock = clock + (vsim_now_ns() - began);
}

/* Where s's device clock stands when op starts: after the op before it,
 * after what it waits for (the clock of the stream it waited on, when
 * that finished: no earlier than the op waited for), and not before op
 * was submitted. Read after the waits, on the worker. */
static uint64_t clock_at_start(struct CUstream_st *s, const struct vsim_op *op)
{
	uint64_t clock = s->clock_done;

	for (unsigned i = 0; i < op->ndeps; i++) {
		struct CUstream_st *t = op->deps[i].stream;

		pthread_mutex_lock(&t->lock);
		if (t->clock_done > clock)
			clock = t->clock_done;
		pthread_mutex_unlock(&t->lock);
	}
	return op->queued_ns > clock ? op->queued_ns : clock;
}

/* How long an idle stream worker polls its queue before sleeping. */
#define VSIM_WORKER_SPIN_NS 100000ull

static void *worker_main(void *arg)
{
	struct CUstream_st *s = arg;
	struct vsim_op *op;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stop) {
			/* A GPU polls its queue: work queued right after the
			 * last op (a launch after the event before it) starts
			 * at once, not after a thread wake-up. */
			uint64_t seen = s->submitted, until;

			pthread_mutex_unlock(&s->lock);
			until = vsim_now_ns() + VSIM_WORKER_SPIN_NS;
			while (__atomic_load_n(&s->submitted,
					       __ATOMIC_ACQUIRE) == seen &&
			       vsim_now_ns() < until)
				;
			pthread_mutex_lock(&s->lock);
			if (!s->head && !s->stop && s->submitted == seen) {
				pthread_cond_wait(&s->cond, &s->lock);
				pthread_mutex_unlock(&s->lock);
				vsim_host_late();
				pthread_mutex_lock(&s->lock);
			}
		}
		if (!s->head)
			break;
		op = s->head;
		pthread_mutex_unlock(&s->lock);
		for (unsigned i = 0; i < op->ndeps; i++)
			vsim_stream_wait_seq(op->deps[i].stream, op->deps[i].seq);
		vsim_stream_clock = clock_at_start(s, op);
		op_run(s, op);
		pthread_mutex_lock(&s->lock);
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->completed = op->seq;
		s->clock_done = vsim_stream_clock;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		op_free(op);
		pthread_mutex_lock(&s->lock);
	}
	s->worker_running = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

struct CUstream_st *vsim_stream_new(struct CUctx_st *ctx, unsigned flags, int prio)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->magic = VSIM_MAGIC_STREAM;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = prio;
	s->id = atomic_fetch_add(&next_stream_id, 1);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	return s;
}

static void ctx_add_stream(struct CUctx_st *ctx, struct CUstream_st *s)
{
	pthread_mutex_lock(&ctx->lock);
	s->next = ctx->streams;
	ctx->streams = s;
	pthread_mutex_unlock(&ctx->lock);
}

static struct CUstream_st *per_thread_stream(struct CUctx_st *ctx)
{
	int free_slot = -1;
	struct CUstream_st *s;

	for (int i = 0; i < PER_THREAD_SLOTS; i++) {
		if (per_thread[i].ctx == ctx && per_thread[i].ctx_id == ctx->id &&
		    per_thread[i].stream->magic == VSIM_MAGIC_STREAM)
			return per_thread[i].stream;
		if (free_slot < 0 && (!per_thread[i].ctx ||
				      per_thread[i].ctx->id != per_thread[i].ctx_id ||
				      !per_thread[i].ctx->active))
			free_slot = i;
	}
	s = vsim_stream_new(ctx, 0, 0);
	if (!s)
		return NULL;
	s->per_thread = true;
	ctx_add_stream(ctx, s);
	if (free_slot < 0)
		free_slot = 0;
	per_thread[free_slot].ctx = ctx;
	per_thread[free_slot].ctx_id = ctx->id;
	per_thread[free_slot].stream = s;
	return s;
}

CUresult vsim_stream_resolve(CUstream h, bool per_thread_default,
			     struct CUstream_st **out)
{
	struct CUctx_st *ctx;
	CUresult rc;

	if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
		rc = vsim_check_init();
		if (rc != CUDA_SUCCESS)
			return rc;
		if (h->magic == VSIM_MAGIC_DEAD)
			atomic_fetch_add(&vsim_g.stale_uses, 1);
		if (h->magic != VSIM_MAGIC_STREAM || !vsim_ctx_valid(h->ctx))
			return CUDA_ERROR_INVALID_HANDLE;
		*out = h;
		return CUDA_SUCCESS;
	}
	rc = vsim_ctx_get(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (h == CU_STREAM_PER_THREAD || (!h && per_thread_default))
		*out = per_thread_stream(ctx);
	else
		*out = ctx->legacy;
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Adds dep (t, t->submitted) to op when t has work not yet completed. */
static int add_dep_on(struct vsim_op *op, struct CUstream_st *t, unsigned *cap)
{
	uint64_t seq;

	pthread_mutex_lock(&t->lock);
	seq = t->submitted > t->completed ? t->submitted : 0;
	pthread_mutex_unlock(&t->lock);
	if (!seq)
		return 0;
	if (op->ndeps == *cap) {
		unsigned ncap = *cap ? *cap * 2 : 4;
		struct vsim_dep *d = realloc(op->deps, ncap * sizeof(*d));
		if (!d)
			return -1;
		op->deps = d;
		*cap = ncap;
	}
	op->deps[op->ndeps++] = (struct vsim_dep){ t, seq };
	return 0;
}

/* The implicit dependencies of legacy NULL-stream semantics. */
static int add_implicit_deps(struct CUstream_st *s, struct vsim_op *op)
{
	struct CUctx_st *ctx = s->ctx;
	unsigned cap = op->ndeps;
	int rc = 0;

	if (s->flags & CU_STREAM_NON_BLOCKING)
		return 0;
	if (!s->legacy)
		return add_dep_on(op, ctx->legacy, &cap);
	pthread_mutex_lock(&ctx->lock);
	for (struct CUstream_st *t = ctx->streams; t && rc == 0; t = t->next)
		if (!(t->flags & CU_STREAM_NON_BLOCKING) &&
		    t->magic == VSIM_MAGIC_STREAM)
			rc = add_dep_on(op, t, &cap);
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

/* A capturing stream's work becomes graph nodes instead (capture.c), or
 * is refused; the legacy stream's is refused while it would depend on a
 * capture. */
CUresult vsim_stream_submit(struct CUstream_st *s, struct vsim_op *op,
			    uint64_t *seq)
{
	CUresult rc;

	if (vsim_capture_take(s, op, &rc)) {
		op_free(op);
		return rc;
	}
	return vsim_stream_enqueue(s, op, seq);
}

CUresult vsim_stream_enqueue(struct CUstream_st *s, struct vsim_op *op,
			     uint64_t *seq)
{
	if (add_implicit_deps(s, op) != 0) {
		op_free(op);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&s->lock);
	if (!s->worker_running) {
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		s->stop = false;
		if (pthread_create(&s->worker, &attr, worker_main, s) != 0) {
			pthread_attr_destroy(&attr);
			pthread_mutex_unlock(&s->lock);
			op_free(op);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		pthread_attr_destroy(&attr);
		s->worker_running = true;
	}
	op->seq = s->submitted + 1;
	op->queued_ns = vsim_now_ns();
	__atomic_store_n(&s->submitted, op->seq, __ATOMIC_RELEASE);
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	if (seq)
		*seq = op->seq;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return CUDA_SUCCESS;
}

CUresult vsim_stream_run(struct CUstream_st *s, struct vsim_op *op)
{
	uint64_t seq;
	CUresult rc = vsim_stream_submit(s, op, &seq);

	if (rc == CUDA_SUCCESS)
		vsim_stream_wait_seq(s, seq);
	return rc;
}

/* Not a cancellation point: a thread cancelled in the wait would end
 * holding the stream's lock, and every later call on the stream would
 * hang (a driver's waits are its own futexes and spins, not POSIX
 * cancellation points). */
void vsim_stream_wait_seq(struct CUstream_st *s, uint64_t seq)
{
	int cancel;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&s->lock);
	while (s->completed < seq)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	pthread_setcancelstate(cancel, NULL);
}

CUresult vsim_stream_drain(struct CUstream_st *s)
{
	uint64_t seq;

	pthread_mutex_lock(&s->lock);
	seq = s->submitted;
	pthread_mutex_unlock(&s->lock);
	vsim_stream_wait_seq(s, seq);
	return CUDA_SUCCESS;
}

CUresult vsim_ctx_drain(struct CUctx_st *ctx)
{
	struct CUstream_st *s;

	if (ctx->legacy)
		vsim_stream_drain(ctx->legacy);
	pthread_mutex_lock(&ctx->lock);
	s = ctx->streams;
	pthread_mutex_unlock(&ctx->lock);
	/* The list only grows at its head, so walking it unlocked is safe. */
	for (; s; s = s->next)
		vsim_stream_drain(s);
	return CUDA_SUCCESS;
}

static void stream_stop(struct CUstream_st *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	s->magic = VSIM_MAGIC_DEAD;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void vsim_ctx_streams_destroy(struct CUctx_st *ctx)
{
	vsim_capture_streams_gone(ctx, NULL);
	pthread_mutex_lock(&ctx->lock);
	for (struct CUstream_st *s = ctx->streams; s; s = s->next) {
		stream_stop(s);
		vsim_graveyard_add(s);
	}
	ctx->streams = NULL;
	pthread_mutex_unlock(&ctx->lock);
	if (ctx->legacy) {
		stream_stop(ctx->legacy);
		vsim_graveyard_add(ctx->legacy);
	}
	ctx->legacy = NULL;
}

/* ---- the stream API -------------------------------------------------------- */

VSIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags,
						int priority)
{
	struct CUctx_st *ctx;
	struct CUstream_st *s;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	if (priority > 0)
		priority = 0;
	if (priority < -5)
		priority = -5;
	s = vsim_stream_new(ctx, flags, priority);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_add_stream(ctx, s);
	*ph = s;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	return cuStreamCreateWithPriority(ph, flags, 0);
}

/* Work already queued still completes; the handle is invalid from now. A
 * capture begun on it ends with no graph (capture.c). */
VSIM_EXPORT CUresult cuStreamDestroy_v2(CUstream h)
{
	struct CUstream_st *s;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = vsim_stream_resolve(h, false, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_capture_streams_gone(s->ctx, s);
	stream_stop(s);
	return CUDA_SUCCESS;
}

/* Synchronisation is when pools release memory above their thresholds. */
static CUresult stream_sync(CUstream h, bool ptds)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_refuse(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = vsim_stream_drain(s);
	vsim_pool_sync_release(s->ctx->device);
	return rc;
}

VSIM_EXPORT CUresult cuStreamSynchronize(CUstream h)
{
	return stream_sync(h, false);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h);
VSIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream h)
{
	return stream_sync(h, true);
}

static CUresult stream_query(CUstream h, bool ptds)
{
	struct CUstream_st *s;
	bool busy;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_refuse(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&s->lock);
	busy = s->completed < s->submitted;
	pthread_mutex_unlock(&s->lock);
	return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamQuery(CUstream h)
{
	return stream_query(h, false);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h);
VSIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream h)
{
	return stream_query(h, true);
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags,
				  bool ptds)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!e || e->magic != VSIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	if (vsim_capture_wait(s, e, &rc))
		return rc;
	op = vsim_op_new(VSIM_OP_WAIT);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&e->lock);
	if (e->recorded && e->stream && e->stream != s) {
		op->deps = malloc(sizeof(*op->deps));
		if (op->deps)
			op->deps[op->ndeps++] = (struct vsim_dep){ e->stream, e->seq };
	}
	pthread_mutex_unlock(&e->lock);
	return vsim_stream_submit(s, op, NULL);
}

VSIM_EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
	return stream_wait_event(h, e, flags, false);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags);
VSIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e,
					    unsigned int flags)
{
	return stream_wait_event(h, e, flags, true);
}

VSIM_EXPORT CUresult cuStreamGetFlags(CUstream h, unsigned int *flags)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, false, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = s->flags;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamGetPriority(CUstream h, int *priority)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, false, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = s->priority;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamGetCtx(CUstream h, CUcontext *pctx)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, false, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = s->ctx;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamGetId(CUstream h, unsigned long long *id)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, false, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = s->id;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuStreamGetDevice(CUstream h, CUdevice *device)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, false, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = s->ctx->device;
	return CUDA_SUCCESS;
}

static CUresult launch_host_func(CUstream h, CUhostFn fn, void *data, bool ptds)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	op = vsim_op_new(VSIM_OP_HOST_FN);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.host.fn = fn;
	op->u.host.data = data;
	return vsim_stream_submit(s, op, NULL);
}

VSIM_EXPORT CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data)
{
	return launch_host_func(h, fn, data, false);
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *data);
VSIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *data)
{
	return launch_host_func(h, fn, data, true);
}

struct callback {
	CUstreamCallback fn;
	CUstream stream;
	void *data;
};

static void run_callback(void *arg)
{
	struct callback *cb = arg;

	cb->fn(cb->stream, CUDA_SUCCESS, cb->data);
	free(cb);
}

static CUresult add_callback(CUstream h, CUstreamCallback fn, void *data,
			     unsigned flags, bool ptds)
{
	struct callback *cb;
	CUresult rc;

	if (!fn || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	cb = malloc(sizeof(*cb));
	if (!cb)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*cb = (struct callback){ fn, h, data };
	rc = launch_host_func(h, run_callback, cb, ptds);
	if (rc != CUDA_SUCCESS)
		free(cb);
	return rc;
}

VSIM_EXPORT CUresult cuStreamAddCallback(CUstream h, CUstreamCallback fn,
					 void *data, unsigned int flags)
{
	return add_callback(h, fn, data, flags, false);
}

CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn,
					  void *data, unsigned int flags);
VSIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn,
					      void *data, unsigned int flags)
{
	return add_callback(h, fn, data, flags, true);
}
