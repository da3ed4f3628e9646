/* launch.c - the compute share: every launch path is admitted against the
 * tenant's GPU-time bucket (vgpu/throttle.c) and its real GPU time charged.
 *
 * Uncapped (no VGPU_COMPUTE_LIMIT below 100 anywhere, or limits off), a
 * launch hook is one load and a call to the driver. Capped, a launch:
 *   1. collects the GPU time of this thread's earlier launches whose end
 *      event has completed (cuEventQuery: never blocks) and settles it;
 *   2. asks the bucket for admission with an estimate of its own GPU time
 *      (the running average of this thread's measured launches); told to
 *      wait, it sleeps holding nothing and asks again;
 *   3. records an event on the launch's stream, launches, records another:
 *      the two events' elapsed time is the launch's GPU time, read back
 *      later by step 1, never by blocking.
 * The first launch of a thread goes alone (its length is unknown until it
 * has run); after that up to RING launches are in flight per context and
 * thread, and a full ring waits for its oldest.
 */
#include "devices.h"
#include "overcommit.h"
#include "throttle.h"
#include "timeline.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define RING 16		/* launches measured at once, per thread and context */
#define CTXS 4		/* contexts a thread keeps events for */
#define MAX_SLEEP_NS 2000000ull
/* A measured launch is charged this long after its end, once every process
 * has had time to record the launches that ended before it (timeline.h). */
#define CHARGE_DELAY_NS 20000000ull
/* The reference event is recorded again this often (cuEventElapsedTime's
 * float loses precision as the distance from it grows). */
#define CALIBRATE_NS 4000000000ull
/* Calibration's tries stop after this long; a wait for one spins this long
 * before it yields. */
#define CAL_BUDGET_NS 1000000ull
#define CAL_SPIN_NS 50000ull

enum { EST_KERNEL, EST_GRAPH, EST_KINDS };

struct pending {
	CUevent start, end;
	uint64_t estimate;
	struct vgpu_dev *dv;
	int kind;
	int ref;		/* the reference event it is placed against */
	uint64_t issued;	/* host time just before the launch call */
};

/* A measured launch waiting to be charged. */
struct measured {
	uint64_t start, end;	/* CLOCK_MONOTONIC ns */
	uint64_t estimate;	/* what the bucket is charged for it so far */
	struct vgpu_dev *dv;
	int kind;
};

/* One thread's measurements in one context (events belong to a context). */
struct ctx_state {
	CUcontext ctx;
	unsigned epoch;		/* vgpu__ctx_epoch when it was taken */
	uint64_t used;		/* last use, for eviction */
	CUevent free_ev[2 * RING];
	int nfree;
	struct pending ring[RING];
	unsigned head, count;
	struct measured done[2 * RING];
	unsigned done_head, done_count;
	uint64_t avg_ns[EST_KINDS];	/* running average, 0: none yet */
	/* Events are placed on the host's clock against a reference event
	 * whose completion time was observed (two, used in turn). */
	CUstream cal_stream;
	CUevent ref_ev[2];
	uint64_t ref_ns[2];
	uint64_t ref_err[2];	/* half the window it was read in */
	int ref;		/* the current one; -1: none */
};

static __thread struct ctx_state tls_ctx[CTXS];

#define PARAM_CACHE 256

struct param_info {
	CUfunction f;
	unsigned n;		/* parameters, at most 64 */
	uint64_t wide;		/* bit i: parameter i is 8 bytes */
};

static struct param_info param_cache[PARAM_CACHE];
static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uint64_t tls_clock;

/* A thread's events and calibration stream are given back when it exits
 * (lifetime.c calls vgpu__launch_thread_exit), if no context has been torn
 * down since they were made: then the driver has freed them with their
 * context, or their handle may name another one. */
unsigned vgpu__ctx_epoch;

bool vgpu__compute_on;

#define now_ns vgpu__mono_ns

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	if (vgpu__real.cuEventElapsedTime_v2)
		return vgpu__real.cuEventElapsedTime_v2(ms, a, b);
	if (vgpu__real.cuEventElapsedTime_v1)
		return vgpu__real.cuEventElapsedTime_v1(ms, a, b);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Waits for the reference event: spins briefly, then yields the CPU (on
 * a loaded host the thread that completes it may need this one's core). */
static CUresult cal_wait(CUevent e)
{
	uint64_t t0 = now_ns();
	CUresult q;

	while ((q = vgpu__real.cuEventQuery(e)) == CUDA_ERROR_NOT_READY)
		if (now_ns() - t0 > CAL_SPIN_NS)
			sched_yield();
	return q;
}

/* Records the reference event and reads when it completed: the middle of
 * its record-to-completion window, recording it again (the first tries
 * wake the stream up) until the window is narrow, for up to twenty tries
 * and CAL_BUDGET_NS: on a host too busy to give a narrow window, the last
 * one is kept with its error (ref_err) rather than holding up the launch. */
static bool calibrate(struct ctx_state *c)
{
	int r = c->ref < 0 ? 0 : 1 - c->ref;
	uint64_t window = UINT64_MAX, at = 0, begin = now_ns();

	if (!c->cal_stream && vgpu__real.cuStreamCreate &&
	    vgpu__real.cuStreamCreate(&c->cal_stream,
				      CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		c->cal_stream = NULL;
	if (!c->cal_stream)
		return false;
	if (!c->ref_ev[r] &&
	    vgpu__real.cuEventCreate(&c->ref_ev[r], CU_EVENT_DEFAULT) !=
		    CUDA_SUCCESS)
		return false;
	/* Each try records the event again: the last try is the one that
	 * counts, so stop at the first narrow window. */
	for (int i = 0; i < 20 && window > 10000 &&
			(i == 0 || now_ns() - begin < CAL_BUDGET_NS); i++) {
		uint64_t t0 = now_ns(), t1;
		CUresult q;

		if (vgpu__real.cuEventRecord(c->ref_ev[r], c->cal_stream) !=
		    CUDA_SUCCESS)
			return false;
		q = cal_wait(c->ref_ev[r]);
		t1 = now_ns();
		if (q != CUDA_SUCCESS)
			return false;
		window = t1 - t0;
		at = t0 + window / 2;
	}
	c->ref_ns[r] = at;
	c->ref_err[r] = window / 2;
	c->ref = r;
	return true;
}

/* Charges the measured launches that ended long enough ago (all, if
 * force), each for its own part of its interval. */
static void charge_done(struct ctx_state *c, uint64_t now, bool force)
{
	while (c->done_count) {
		struct measured *m = &c->done[c->done_head];
		uint64_t own;

		if (!force && now < m->end + CHARGE_DELAY_NS)
			break;
		own = m->dv->ledger ? vgpu_timeline_exclusive(m->dv->ledger,
							      m->start, m->end)
				    : m->end - m->start;
		if (m->dv->slot)
			vgpu_throttle_settle(m->dv->slot, own, m->estimate);

		uint64_t *avg = &c->avg_ns[m->kind];
		*avg = *avg ? (*avg * 3 + own) / 4 : (own ? own : 1);
		c->done_head = (c->done_head + 1) % (2 * RING);
		c->done_count--;
	}
}

/* Takes the oldest launch of c off the ring once it has completed (wait:
 * block for it), places it on the host's clock and records its end in the
 * GPU's timeline. Returns false if it has not completed (and wait is
 * false). */
static bool settle_oldest(struct ctx_state *c, bool wait)
{
	struct pending *p = &c->ring[c->head];
	CUresult r = vgpu__real.cuEventQuery(p->end);
	float ms_start, ms_len;
	uint64_t start, len = p->estimate;

	if (r == CUDA_ERROR_NOT_READY) {
		if (!wait)
			return false;
		r = vgpu__real.cuEventSynchronize(p->end);
	}
	if (r == CUDA_SUCCESS &&
	    elapsed(&ms_len, p->start, p->end) == CUDA_SUCCESS && ms_len >= 0)
		len = (uint64_t)((double)ms_len * 1e6);
	if (p->ref >= 0 && r == CUDA_SUCCESS &&
	    elapsed(&ms_start, c->ref_ev[p->ref], p->start) == CUDA_SUCCESS &&
	    ms_start >= 0)
		start = c->ref_ns[p->ref] + (uint64_t)((double)ms_start * 1e6);
	else
		start = now_ns() - len;
	/* On an idle stream the start event completes at once, before the
	 * launch has even been made: the launch cannot have started before
	 * it was issued (less the error of placing events on the host's
	 * clock, so that a launch is never charged less than it ran). */
	if (p->ref >= 0 && p->issued > start + c->ref_err[p->ref]) {
		uint64_t end = start + len, from = p->issued - c->ref_err[p->ref];

		start = from < end ? from : end;
		len = end - start;
	}
	if (c->done_count == 2 * RING)
		charge_done(c, 0, true);
	/* A first reading of its own time, from the ends recorded so far
	 * (ends recorded later can only shorten it): the estimate it was
	 * admitted with is corrected to it now rather than at the charge,
	 * so that an estimate too high does not hold up the tenant for
	 * CHARGE_DELAY_NS or until this thread launches again. An interval
	 * within the estimate is read as it is (the charge refines it), which
	 * spares the timeline's scan on most launches. */
	uint64_t first = len <= p->estimate || !p->dv->ledger
				 ? len
				 : vgpu_timeline_exclusive(p->dv->ledger, start,
							   start + len);
	if (p->dv->slot)
		vgpu_throttle_correct(p->dv->slot, p->estimate, first);
	struct measured *m =
		&c->done[(c->done_head + c->done_count) % (2 * RING)];
	m->start = start;
	m->end = start + len;
	m->estimate = first;
	m->dv = p->dv;
	m->kind = p->kind;
	c->done_count++;
	if (p->dv->ledger)
		vgpu_timeline_record(p->dv->ledger, m->end);
	/* A first estimate, until charges refine it. */
	if (!c->avg_ns[p->kind])
		c->avg_ns[p->kind] = first ? first : 1;
	c->free_ev[c->nfree++] = p->start;
	c->free_ev[c->nfree++] = p->end;
	c->head = (c->head + 1) % RING;
	c->count--;
	return true;
}

static void collect(struct ctx_state *c, uint64_t now)
{
	while (c->count && settle_oldest(c, false))
		;
	if (c->done_count)
		charge_done(c, now, false);
}

/* Gives c's events and stream back to the driver (c->ctx current); its
 * launches not yet complete stay charged at their estimate. */
static void release(struct ctx_state *c)
{
	for (unsigned i = 0; i < c->count; i++) {
		struct pending *p = &c->ring[(c->head + i) % RING];

		/* Still recorded: the driver frees them once complete. */
		vgpu__real.cuEventDestroy_v2(p->start);
		vgpu__real.cuEventDestroy_v2(p->end);
	}
	for (int i = 0; i < c->nfree; i++)
		vgpu__real.cuEventDestroy_v2(c->free_ev[i]);
	for (int r = 0; r < 2; r++)
		if (c->ref_ev[r])
			vgpu__real.cuEventDestroy_v2(c->ref_ev[r]);
	if (c->cal_stream && vgpu__real.cuStreamDestroy_v2)
		vgpu__real.cuStreamDestroy_v2(c->cal_stream);
	memset(c, 0, sizeof(*c));
}

/* Whether a context may have been torn down since c was made: then its
 * handles may be freed, or name another context's objects. */
static bool stale(const struct ctx_state *c)
{
	return c->epoch != __atomic_load_n(&vgpu__ctx_epoch, __ATOMIC_ACQUIRE);
}

/* Drops c without a driver call: its measured launches are charged, the
 * ones not yet read are settled at their estimate (what they were charged
 * on admission); its events and stream are left to its context. */
static void forget(struct ctx_state *c)
{
	for (unsigned i = 0; i < c->count; i++) {
		struct pending *p = &c->ring[(c->head + i) % RING];

		if (p->dv->slot)
			vgpu_throttle_settle(p->dv->slot, p->estimate,
					     p->estimate);
	}
	charge_done(c, 0, true);
	memset(c, 0, sizeof(*c));
}

/* Ends c: with its context made current, its completed launches (all, if
 * wait) are settled and charged and its events and stream destroyed; a
 * stale c, or one whose context cannot be made current, is forgotten. */
static void retire(struct ctx_state *c, bool wait)
{
	CUcontext top;

	if (stale(c) ||
	    vgpu__real.cuCtxPushCurrent_v2(c->ctx) != CUDA_SUCCESS) {
		forget(c);
		return;
	}
	while (c->count && settle_oldest(c, wait))
		;
	charge_done(c, 0, true);
	release(c);
	vgpu__real.cuCtxPopCurrent_v2(&top);
}

void vgpu__launch_thread_exit(void)
{
	for (int i = 0; i < CTXS; i++)
		if (tls_ctx[i].ctx)
			retire(&tls_ctx[i], false);
}

/* This thread's state for the current context, NULL if none is current. */
static struct ctx_state *ctx_state(void)
{
	struct ctx_state *c, *lru = &tls_ctx[0];
	CUcontext ctx = NULL;

	if (!vgpu__real.cuCtxGetCurrent ||
	    vgpu__real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
		return NULL;
	for (int i = 0; i < CTXS; i++) {
		c = &tls_ctx[i];
		if (c->ctx == ctx && !stale(c)) {
			c->used = ++tls_clock;
			return c;
		}
		if (c->ctx == ctx) {	/* the handle outlived a teardown */
			forget(c);
			lru = c;
			break;
		}
		if (c->used < lru->used)
			lru = &tls_ctx[i];
	}
	/* A fifth context: the least recently used one's launches are
	 * settled, waiting for those still running, and its state given
	 * back. */
	if (lru->ctx) {
		retire(lru, true);
		vgpu_log(VGPU_LOG_DEBUG, "a thread uses more than %d contexts: "
			 "measurements of the oldest settled", CTXS);
	}
	memset(lru, 0, sizeof(*lru));
	lru->ctx = ctx;
	lru->epoch = __atomic_load_n(&vgpu__ctx_epoch, __ATOMIC_ACQUIRE);
	lru->used = ++tls_clock;
	lru->ref = -1;
	vgpu__lifetime_watch_thread();
	return lru;
}

static bool take_events(struct ctx_state *c, CUevent *a, CUevent *b)
{
	while (c->nfree < 2 && c->count)
		settle_oldest(c, true);
	for (int i = 0; c->nfree < 2 && i < 2; i++) {
		CUevent e;
		if (vgpu__real.cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
			return false;
		c->free_ev[c->nfree++] = e;
	}
	*b = c->free_ev[--c->nfree];
	*a = c->free_ev[--c->nfree];
	return true;
}

/* The launch being made, whatever its entry point. */
enum call_kind {
	CALL_KERNEL, CALL_KERNEL_PTSZ, CALL_EX, CALL_EX_PTSZ, CALL_COOP,
	CALL_COOP_PTSZ, CALL_GRAPH, CALL_GRAPH_PTSZ
};

struct call {
	enum call_kind kind;
	CUfunction f;
	unsigned g[3], b[3], shmem;
	CUstream stream;
	void **params, **extra;
	const CUlaunchConfig *config;
	CUgraphExec graph;
};

static CUresult call_real(const struct call *c)
{
	switch (c->kind) {
	case CALL_KERNEL:
		return vgpu__real.cuLaunchKernel(c->f, c->g[0], c->g[1], c->g[2],
			c->b[0], c->b[1], c->b[2], c->shmem, c->stream,
			c->params, c->extra);
	case CALL_KERNEL_PTSZ:
		return vgpu__real.cuLaunchKernel_ptsz(c->f, c->g[0], c->g[1],
			c->g[2], c->b[0], c->b[1], c->b[2], c->shmem, c->stream,
			c->params, c->extra);
	case CALL_EX:
		return vgpu__real.cuLaunchKernelEx(c->config, c->f, c->params,
						   c->extra);
	case CALL_EX_PTSZ:
		return vgpu__real.cuLaunchKernelEx_ptsz(c->config, c->f,
							c->params, c->extra);
	case CALL_COOP:
		return vgpu__real.cuLaunchCooperativeKernel(c->f, c->g[0],
			c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->shmem,
			c->stream, c->params);
	case CALL_COOP_PTSZ:
		return vgpu__real.cuLaunchCooperativeKernel_ptsz(c->f, c->g[0],
			c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->shmem,
			c->stream, c->params);
	case CALL_GRAPH:
		return vgpu__real.cuGraphLaunch(c->graph, c->stream);
	case CALL_GRAPH_PTSZ:
		return vgpu__real.cuGraphLaunch_ptsz(c->graph, c->stream);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static bool per_thread(enum call_kind k)
{
	return k == CALL_KERNEL_PTSZ || k == CALL_EX_PTSZ ||
	       k == CALL_COOP_PTSZ || k == CALL_GRAPH_PTSZ;
}

static CUresult record(CUevent e, CUstream s, bool ptsz)
{
	return ptsz ? vgpu__real.cuEventRecord_ptsz(e, s)
		    : vgpu__real.cuEventRecord(e, s);
}

/* Admits, launches and measures one capped launch. */
static CUresult throttled(const struct call *call)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	struct ctx_state *c;
	struct pending *p;
	bool ptsz = per_thread(call->kind);
	int kind = call->kind >= CALL_GRAPH ? EST_GRAPH : EST_KERNEL;
	uint64_t est, wait, t0 = 0, waited = 0;
	CUevent a, b;
	CUresult r;

	if (!dv || !dv->slot || !dv->capped ||
	    __atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE) ||
	    !(c = ctx_state()))
		return call_real(call);
	/* On the green context the hardware enforces the share. */
	if (c->ctx == __atomic_load_n(&dv->spatial_ctx, __ATOMIC_ACQUIRE))
		return call_real(call);
	uint64_t now = now_ns();

	if (c->ref < 0 || now - c->ref_ns[c->ref] > CALIBRATE_NS)
		calibrate(c);
	collect(c, now);
	/* Nothing measured yet: this launch goes alone. */
	while (!c->avg_ns[kind] && c->count)
		settle_oldest(c, true);
	if (c->count == RING)
		settle_oldest(c, true);
	est = c->avg_ns[kind];
	while ((wait = vgpu_throttle_admit_waiting(dv->slot, now, est,
						   t0 ? now - t0 : 0)) != 0) {
		struct timespec ts;

		if (!t0)
			t0 = now_ns();
		if (wait > MAX_SLEEP_NS)
			wait = MAX_SLEEP_NS;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		nanosleep(&ts, NULL);
		now = now_ns();
		collect(c, now);
	}
	if (t0) {
		waited = now - t0;
		vgpu_throttle_waited(dv->slot, waited);
	}
	if (!take_events(c, &a, &b)) {
		r = call_real(call);
		vgpu_throttle_settle(dv->slot, est, est);
		return r;
	}
	CUstream s = call->config ? call->config->hStream : call->stream;
	record(a, s, ptsz);
	r = call_real(call);
	if (r != CUDA_SUCCESS) {
		vgpu_throttle_settle(dv->slot, 0, est);
		c->free_ev[c->nfree++] = a;
		c->free_ev[c->nfree++] = b;
		return r;
	}
	record(b, s, ptsz);
	p = &c->ring[(c->head + c->count) % RING];
	p->start = a;
	p->end = b;
	p->estimate = est;
	p->dv = dv;
	p->kind = kind;
	p->ref = c->ref;
	p->issued = now;	/* before the launch call: never too late */
	c->count++;
	return r;
}

/* ---- synchronisation: launches seen to end -------------------------------- */

/* After a synchronisation the thread's launches it waited for have ended:
 * their ends go into the GPU's timeline now, not at its next launch, which
 * may be far off (a CPU phase). Uncapped: one load. */
static void synchronised(void)
{
	uint64_t now;

	if (!__atomic_load_n(&vgpu__compute_on, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE))
		return;
	now = 0;
	for (int i = 0; i < CTXS; i++) {
		struct ctx_state *c = &tls_ctx[i];

		if (!c->ctx || !(c->count || c->done_count))
			continue;
		if (stale(c)) {
			forget(c);
			continue;
		}
		if (!now)
			now = now_ns();
		collect(c, now);
	}
}

static CUresult after_sync(CUresult r)
{
	if (r == CUDA_SUCCESS)
		synchronised();
	return r;
}

/* Each hook: the driver's call, then synchronised() if it succeeded. */
#define SYNC_HOOK(sym, params, args)					\
	CUresult sym params						\
	{								\
		return vgpu__real.sym ? after_sync(vgpu__real.sym args)	\
				      : CUDA_ERROR_NOT_INITIALIZED;	\
	}

SYNC_HOOK(cuCtxSynchronize, (void), ())
SYNC_HOOK(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC_HOOK(cuStreamSynchronize, (CUstream s), (s))
SYNC_HOOK(cuStreamSynchronize_ptsz, (CUstream s), (s))
SYNC_HOOK(cuEventSynchronize, (CUevent e), (e))

void vgpu__launch_fork_child(void)
{
	/* The parent's events are not the child's. */
	memset(tls_ctx, 0, sizeof(tls_ctx));
	pthread_mutex_init(&param_lock, NULL);
}

/* ---- kernel arguments as a signal of use (overcommit) ------------------- */

/* Which parameters of a function are 8 bytes (could be pointers), read
 * once per function with cuFuncGetParamInfo and kept in a small cache
 * (param_cache, above). */
static bool param_info(CUfunction f, struct param_info *out)
{
	size_t h = ((uintptr_t)f >> 4) % PARAM_CACHE;
	struct param_info pi = { f, 0, 0 };

	pthread_mutex_lock(&param_lock);
	if (param_cache[h].f == f) {
		*out = param_cache[h];
		pthread_mutex_unlock(&param_lock);
		return true;
	}
	pthread_mutex_unlock(&param_lock);
	if (!vgpu__real.cuFuncGetParamInfo)
		return false;
	for (size_t i = 0; i < 64; i++) {
		size_t off, size;
		if (vgpu__real.cuFuncGetParamInfo(f, i, &off, &size) !=
		    CUDA_SUCCESS)
			break;
		pi.n = (unsigned)i + 1;
		if (size == 8)
			pi.wide |= 1ull << i;
	}
	pthread_mutex_lock(&param_lock);
	param_cache[h] = pi;
	pthread_mutex_unlock(&param_lock);
	*out = pi;
	return true;
}

static void note_uses(CUfunction f, void **params)
{
	struct param_info pi;

	if (!params || !f || !param_info(f, &pi))
		return;
	for (unsigned i = 0; i < pi.n; i++)
		if ((pi.wide >> i & 1) && params[i]) {
			uint64_t v;
			memcpy(&v, params[i], sizeof(v));
			vgpu__note_use((CUdeviceptr)v);
		}
}

/* The slow path of a launch hook: overcommit's signal of use, then the
 * throttle if a share is set. */
static CUresult launch_slow(const struct call *c)
{
	if (vgpu__movable_any())
		note_uses(c->f, c->params);
	return vgpu__compute_on ? throttled(c) : call_real(c);
}

#define FAST (__builtin_expect(!vgpu__compute_on, 1) && !vgpu__movable_any())

/* ---- the hooks ---------------------------------------------------------- */

#define KERNEL_CALL(k)							\
	struct call c_ = { .kind = (k), .f = f,				\
		.g = { gridDimX, gridDimY, gridDimZ },			\
		.b = { blockDimX, blockDimY, blockDimZ },		\
		.shmem = sharedMemBytes, .stream = hStream,		\
		.params = kernelParams }

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
			unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes,
			CUstream hStream, void **kernelParams, void **extra)
{
	if (FAST)
		return vgpu__real.cuLaunchKernel(f, gridDimX, gridDimY,
				gridDimZ, blockDimX, blockDimY, blockDimZ,
				sharedMemBytes, hStream, kernelParams, extra);
	KERNEL_CALL(CALL_KERNEL);
	c_.extra = extra;
	return launch_slow(&c_);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
			     unsigned int gridDimY, unsigned int gridDimZ,
			     unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ,
			     unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra)
{
	if (FAST)
		return vgpu__real.cuLaunchKernel_ptsz(f, gridDimX, gridDimY,
				gridDimZ, blockDimX, blockDimY, blockDimZ,
				sharedMemBytes, hStream, kernelParams, extra);
	KERNEL_CALL(CALL_KERNEL_PTSZ);
	c_.extra = extra;
	return launch_slow(&c_);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
				   unsigned int gridDimY,
				   unsigned int gridDimZ,
				   unsigned int blockDimX,
				   unsigned int blockDimY,
				   unsigned int blockDimZ,
				   unsigned int sharedMemBytes,
				   CUstream hStream, void **kernelParams)
{
	if (FAST)
		return vgpu__real.cuLaunchCooperativeKernel(f, gridDimX,
				gridDimY, gridDimZ, blockDimX, blockDimY,
				blockDimZ, sharedMemBytes, hStream,
				kernelParams);
	KERNEL_CALL(CALL_COOP);
	return launch_slow(&c_);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
					unsigned int gridDimY,
					unsigned int gridDimZ,
					unsigned int blockDimX,
					unsigned int blockDimY,
					unsigned int blockDimZ,
					unsigned int sharedMemBytes,
					CUstream hStream, void **kernelParams)
{
	if (FAST)
		return vgpu__real.cuLaunchCooperativeKernel_ptsz(f, gridDimX,
				gridDimY, gridDimZ, blockDimX, blockDimY,
				blockDimZ, sharedMemBytes, hStream,
				kernelParams);
	KERNEL_CALL(CALL_COOP_PTSZ);
	return launch_slow(&c_);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
			  void **kernelParams, void **extra)
{
	if (FAST || !config)
		return vgpu__real.cuLaunchKernelEx(config, f, kernelParams,
						   extra);
	struct call c_ = { .kind = CALL_EX, .f = f, .config = config,
			   .params = kernelParams, .extra = extra };
	return launch_slow(&c_);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
			       void **kernelParams, void **extra)
{
	if (FAST || !config)
		return vgpu__real.cuLaunchKernelEx_ptsz(config, f, kernelParams,
							extra);
	struct call c_ = { .kind = CALL_EX_PTSZ, .f = f, .config = config,
			   .params = kernelParams, .extra = extra };
	return launch_slow(&c_);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	if (FAST)
		return vgpu__real.cuGraphLaunch(hGraphExec, hStream);
	struct call c_ = { .kind = CALL_GRAPH, .graph = hGraphExec,
			   .stream = hStream };
	return launch_slow(&c_);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	if (FAST)
		return vgpu__real.cuGraphLaunch_ptsz(hGraphExec, hStream);
	struct call c_ = { .kind = CALL_GRAPH_PTSZ, .graph = hGraphExec,
			   .stream = hStream };
	return launch_slow(&c_);
}
