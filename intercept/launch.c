/* launch.c - the compute share: every launch path is admitted against the
 * tenant's GPU-time bucket (vgpu/throttle.c) and its real GPU time charged.
 *
 * Uncapped (no VGPU_COMPUTE_LIMIT below 100 anywhere, or limits off), a
 * launch hook is one load and a call to the driver. Capped, a launch:
 *   1. collects the GPU time of this thread's earlier launches whose end
 *      event has completed (cuEventQuery: never blocks) and settles it;
 *   2. asks the bucket for admission with an estimate of its own GPU time
 *      (what the same function or graph measured last, raised at once by a
 *      longer measurement; else this thread's running average; else the
 *      process's); told to wait, it sleeps holding nothing and asks again;
 *   3. records an event on the launch's stream, launches, records another:
 *      the two events' elapsed time is the launch's GPU time, read back
 *      later by step 1, never by blocking.
 * A launch with no estimate at all (the process's first) goes alone (its
 * length is unknown until it has run); after that up to RING launches are
 * in flight per context and thread, and a full ring waits for its oldest.
 * No launch goes uncharged: a thread that exits waits (boundedly) for its
 * launches and charges what they measured; the process's exit charges the
 * exiting thread's launches at least the time since they were issued; a
 * context torn down forgets only its own threads' state; a launch with no
 * current context is measured in its stream's; the old entry points
 * (cuLaunch, cuLaunchGrid, cuLaunchGridAsync) are throttled like the rest.
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
	uint64_t key;		/* the function or graph, for its estimate */
	bool probe;		/* went with no estimate: others wait for it */
	struct vgpu_dev *dv;
	int kind;
	int ref;		/* the reference event it is placed against */
	uint64_t issued;	/* host time just before the launch call */
};

/* A measured launch waiting to be charged. */
struct measured {
	uint64_t start, end;	/* CLOCK_MONOTONIC ns */
	uint64_t key;
	uint64_t estimate;	/* what the bucket is charged for it so far */
	struct vgpu_dev *dv;
	int kind;
	unsigned sm_num, sm_den;	/* SM-weighted (a green context) */
};

/* One thread's measurements in one context (events belong to a context). */
struct ctx_state {
	CUcontext ctx;
	unsigned epoch;		/* its context's teardown count when taken */
	uint64_t used;		/* last use, for eviction */
	CUevent free_ev[2 * RING];
	int nfree;
	struct pending ring[RING];
	unsigned head, count;
	struct measured done[2 * RING];
	unsigned done_head, done_count;
	uint64_t avg_ns[EST_KINDS];	/* running average, 0: none yet */
	/* A green context holds sm_num of the device's sm_den SMs (0: the
	 * whole device): its kernels run side by side with others', each
	 * stretched sm_den/sm_num times, so they are charged sm_num/sm_den
	 * of their time and stay out of the GPU's timeline. */
	unsigned sm_num, sm_den;
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
 * (lifetime.c calls vgpu__launch_thread_exit), if its context has not been
 * torn down since they were made: then the driver has freed them with it,
 * or its handle may name another context. Teardowns are counted per
 * context handle (in buckets: a collision only forgets more). */
unsigned vgpu__ctx_epochs[VGPU_CTX_EPOCHS];

static unsigned *epoch_of(CUcontext ctx)
{
	uintptr_t v = (uintptr_t)ctx;

	return &vgpu__ctx_epochs[(v >> 4 ^ v >> 12) % VGPU_CTX_EPOCHS];
}

void vgpu__ctx_teardown(CUcontext ctx)
{
	if (!ctx) {	/* which one is not known: every thread's */
		for (int i = 0; i < VGPU_CTX_EPOCHS; i++)
			__atomic_add_fetch(&vgpu__ctx_epochs[i], 1,
					   __ATOMIC_ACQ_REL);
		return;
	}
	__atomic_add_fetch(epoch_of(ctx), 1, __ATOMIC_ACQ_REL);
}

/* ---- estimates ----------------------------------------------------------- */

/* What this process measured last, per device and kind, for a thread or
 * context that has measured nothing yet (atomic). */
static uint64_t proc_avg[VGPU_MAX_DEVICES][EST_KINDS];

/* Per function or graph: its recent GPU time, raised at once by a longer
 * measurement and lowered slowly, so that a long kernel after short ones
 * is not admitted at the short ones' average. A small direct-mapped table
 * of (key, ns) pairs, atomic fields: a torn pair only misestimates one
 * admission, which its measured charge corrects. */
#define FN_EST 1024

static struct {
	uint64_t key, ns;
} fn_est[FN_EST];

static size_t fn_slot(uint64_t key)
{
	return (size_t)((key >> 4) ^ (key >> 17)) % FN_EST;
}

/* A launch with no estimate anywhere in the process goes alone: the
 * CLOCK_MONOTONIC time it went (0: none), per device; other threads wait
 * until its length is read (or PROBE_MAX_NS, if its thread never reads
 * it), so that eight threads starting at once do not all go unmeasured. */
static uint64_t probing[VGPU_MAX_DEVICES];
#define PROBE_MAX_NS 1000000000ull
#define PROBE_POLL_NS 200000

static void probe_done(const struct pending *p)
{
	if (p->probe)
		__atomic_store_n(&probing[p->dv->ordinal], 0, __ATOMIC_RELEASE);
}

static uint64_t fn_estimate(uint64_t key)
{
	size_t i = fn_slot(key);

	if (!key || __atomic_load_n(&fn_est[i].key, __ATOMIC_ACQUIRE) != key)
		return 0;
	return __atomic_load_n(&fn_est[i].ns, __ATOMIC_RELAXED);
}

static void fn_measured(uint64_t key, uint64_t ns)
{
	size_t i = fn_slot(key);
	uint64_t old;

	if (!key)
		return;
	if (__atomic_load_n(&fn_est[i].key, __ATOMIC_ACQUIRE) != key) {
		__atomic_store_n(&fn_est[i].ns, ns ? ns : 1, __ATOMIC_RELAXED);
		__atomic_store_n(&fn_est[i].key, key, __ATOMIC_RELEASE);
		return;
	}
	old = __atomic_load_n(&fn_est[i].ns, __ATOMIC_RELAXED);
	__atomic_store_n(&fn_est[i].ns,
			 ns >= old ? ns : (old * 3 + ns) / 4 + 1,
			 __ATOMIC_RELAXED);
}

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
		if (m->sm_den)
			own = (m->end - m->start) * m->sm_num / m->sm_den;
		else if (m->dv->ledger)
			own = vgpu_timeline_exclusive(m->dv->ledger, m->start,
						      m->end);
		else
			own = m->end - m->start;
		if (m->dv->slot)
			vgpu_throttle_settle(m->dv->slot, own, m->estimate);

		/* Never 0 once measured: 0 means "nothing known yet". */
		uint64_t *avg = &c->avg_ns[m->kind];
		*avg = *avg ? (*avg * 3 + own) / 4 + 1 : own + 1;
		__atomic_store_n(&proc_avg[m->dv->ordinal][m->kind], *avg,
				 __ATOMIC_RELAXED);
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
	uint64_t first = c->sm_den ? len * c->sm_num / c->sm_den
			 : len <= p->estimate || !p->dv->ledger
				 ? len
				 : vgpu_timeline_exclusive(p->dv->ledger, start,
							   start + len);
	if (p->dv->slot)
		vgpu_throttle_correct(p->dv->slot, p->estimate, first);
	struct measured *m =
		&c->done[(c->done_head + c->done_count) % (2 * RING)];
	m->start = start;
	m->end = start + len;
	m->key = p->key;
	m->sm_num = c->sm_num;
	m->sm_den = c->sm_den;
	m->estimate = first;
	fn_measured(p->key, first);
	if (!__atomic_load_n(&proc_avg[p->dv->ordinal][p->kind],
			     __ATOMIC_RELAXED))
		__atomic_store_n(&proc_avg[p->dv->ordinal][p->kind],
				 first ? first : 1, __ATOMIC_RELAXED);
	probe_done(p);
	m->dv = p->dv;
	m->kind = p->kind;
	c->done_count++;
	if (p->dv->ledger && !c->sm_den)
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
	return c->epoch != __atomic_load_n(epoch_of(c->ctx), __ATOMIC_ACQUIRE);
}

/* Settles c's pending launches without a driver call: each at its
 * estimate, or its share of the time since the oldest was issued if that
 * is more (one stream runs them one after another). They stay in the ring
 * (for release() to give their events back); c is dropped after. */
static void settle_unread(struct ctx_state *c, uint64_t now)
{
	uint64_t first = c->count ? c->ring[c->head].issued : now;
	uint64_t share = c->count && now > first ? (now - first) / c->count : 0;

	for (unsigned i = 0; i < c->count; i++) {
		struct pending *p = &c->ring[(c->head + i) % RING];
		uint64_t t = p->estimate > share ? p->estimate : share;

		if (p->dv->slot)
			vgpu_throttle_settle(p->dv->slot, t, p->estimate);
		probe_done(p);
	}
}

/* Drops c without a driver call: its measured launches are charged, the
 * ones not yet read are settled by settle_unread; its events and stream
 * are left to its context. */
static void forget(struct ctx_state *c)
{
	settle_unread(c, now_ns());
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
	settle_unread(c, now_ns());
	charge_done(c, 0, true);
	release(c);
	vgpu__real.cuCtxPopCurrent_v2(&top);
}

/* A thread that exits with launches still running: it waits for them up
 * to this long (they are its GPU time, to be charged as measured), then
 * charges the rest at least the time since they were issued. */
#define EXIT_WAIT_NS 2000000000ull

void vgpu__launch_thread_exit(void)
{
	uint64_t deadline = now_ns() + EXIT_WAIT_NS;

	for (int i = 0; i < CTXS; i++) {
		struct ctx_state *c = &tls_ctx[i];
		CUcontext top;

		if (!c->ctx)
			continue;
		if (stale(c) ||
		    vgpu__real.cuCtxPushCurrent_v2(c->ctx) != CUDA_SUCCESS) {
			forget(c);
			continue;
		}
		while (c->count) {
			if (settle_oldest(c, false))
				continue;
			if (now_ns() > deadline)
				break;
			sched_yield();
		}
		settle_unread(c, now_ns());
		charge_done(c, 0, true);
		release(c);
		vgpu__real.cuCtxPopCurrent_v2(&top);
	}
}

void vgpu__launch_process_exit(void)
{
	uint64_t now = now_ns();

	for (int i = 0; i < CTXS; i++) {
		struct ctx_state *c = &tls_ctx[i];

		if (!c->ctx)
			continue;
		settle_unread(c, now);
		charge_done(c, 0, true);
		memset(c, 0, sizeof(*c));
	}
}

/* The SMs c's context holds, if fewer than its device's (a green
 * context); c's context is current. */
static void sm_share(struct ctx_state *c)
{
	CUdevResource r, d;
	CUdevice dev;

	c->sm_num = c->sm_den = 0;
	if (!vgpu__real.cuCtxGetDevResource ||
	    !vgpu__real.cuDeviceGetDevResource || !vgpu__real.cuCtxGetDevice)
		return;
	memset(&r, 0, sizeof(r));
	memset(&d, 0, sizeof(d));
	if (vgpu__real.cuCtxGetDevResource(c->ctx, &r, CU_DEV_RESOURCE_TYPE_SM)
		    != CUDA_SUCCESS ||
	    vgpu__real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
	    vgpu__real.cuDeviceGetDevResource(dev, &d,
					      CU_DEV_RESOURCE_TYPE_SM) !=
		    CUDA_SUCCESS)
		return;
	if (r.sm.smCount && r.sm.smCount < d.sm.smCount) {
		c->sm_num = r.sm.smCount;
		c->sm_den = d.sm.smCount;
	}
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
	lru->epoch = __atomic_load_n(epoch_of(ctx), __ATOMIC_ACQUIRE);
	lru->used = ++tls_clock;
	lru->ref = -1;
	sm_share(lru);
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
	CALL_COOP_PTSZ, CALL_LEGACY, CALL_LEGACY_GRID, CALL_LEGACY_ASYNC,
	CALL_GRAPH, CALL_GRAPH_PTSZ
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
	case CALL_LEGACY:
		return vgpu__real.cuLaunch(c->f);
	case CALL_LEGACY_GRID:
		return vgpu__real.cuLaunchGrid(c->f, (int)c->g[0], (int)c->g[1]);
	case CALL_LEGACY_ASYNC:
		return vgpu__real.cuLaunchGridAsync(c->f, (int)c->g[0],
						    (int)c->g[1], c->stream);
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

/* What the launch is admitted with: its function's or graph's recent time,
 * else this thread's average in the context, else the process's. */
static uint64_t estimate(const struct ctx_state *c, const struct vgpu_dev *dv,
			 int kind, uint64_t key)
{
	uint64_t e = fn_estimate(key);

	if (!e)
		e = c->avg_ns[kind];
	if (!e)
		e = __atomic_load_n(&proc_avg[dv->ordinal][kind],
				    __ATOMIC_RELAXED);
	return e;
}

static CUstream call_stream(const struct call *call)
{
	return call->config ? call->config->hStream : call->stream;
}

static CUresult throttled_in(const struct call *call, struct vgpu_dev *dv,
			     struct ctx_state *c);

/* Admits, launches and measures one capped launch. With no current
 * context (a CUkernel launched on a stream), the stream's context is made
 * current for it: the launch is measured and charged there. */
static CUresult throttled(const struct call *call)
{
	struct vgpu_dev *dv;
	struct ctx_state *c;
	CUcontext sctx = NULL, top;
	CUstream s = call_stream(call);
	CUresult r;

	if (__atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE))
		return call_real(call);
	c = ctx_state();
	if (!c && s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD &&
	    vgpu__real.cuStreamGetCtx &&
	    vgpu__real.cuStreamGetCtx(s, &sctx) == CUDA_SUCCESS && sctx &&
	    vgpu__real.cuCtxPushCurrent_v2(sctx) == CUDA_SUCCESS)
		c = ctx_state();
	else
		sctx = NULL;
	dv = vgpu__dev_current();
	if (!dv || !dv->slot || !dv->capped || !c)
		r = call_real(call);
	else
		r = throttled_in(call, dv, c);
	if (sctx)
		vgpu__real.cuCtxPopCurrent_v2(&top);
	return r;
}

static CUresult throttled_in(const struct call *call, struct vgpu_dev *dv,
			     struct ctx_state *c)
{
	struct pending *p;
	bool ptsz = per_thread(call->kind);
	int kind = call->kind >= CALL_GRAPH ? EST_GRAPH : EST_KERNEL;
	uint64_t key = kind == EST_GRAPH ? (uint64_t)(uintptr_t)call->graph
					 : (uint64_t)(uintptr_t)call->f;
	uint64_t est, wait, t0 = 0, waited = 0;
	CUevent a, b;
	CUresult r;

	/* On the green context the hardware enforces the share. */
	if (c->ctx == __atomic_load_n(&dv->spatial_ctx, __ATOMIC_ACQUIRE))
		return call_real(call);
	uint64_t now = now_ns();

	if (c->ref < 0 || now - c->ref_ns[c->ref] > CALIBRATE_NS)
		calibrate(c);
	collect(c, now);
	/* Nothing measured yet: this launch goes alone, after this thread's
	 * earlier ones, and no other thread's probe is in flight. */
	while (!estimate(c, dv, kind, key) && c->count)
		settle_oldest(c, true);
	if (c->count == RING)
		settle_oldest(c, true);
	bool probe = false;
	while (!(est = estimate(c, dv, kind, key))) {
		uint64_t *pr = &probing[dv->ordinal];
		uint64_t went = __atomic_load_n(pr, __ATOMIC_ACQUIRE);
		struct timespec ts = { 0, PROBE_POLL_NS };

		now = now_ns();	/* rare: only before a process's first */
		if ((!went || now - went > PROBE_MAX_NS) &&
		    __atomic_compare_exchange_n(pr, &went, now, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			probe = true;
			break;
		}
		nanosleep(&ts, NULL);
	}
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
		if (probe)
			__atomic_store_n(&probing[dv->ordinal], 0,
					 __ATOMIC_RELEASE);
		return r;
	}
	CUstream s = call_stream(call);
	record(a, s, ptsz);
	r = call_real(call);
	if (r != CUDA_SUCCESS) {
		vgpu_throttle_settle(dv->slot, 0, est);
		c->free_ev[c->nfree++] = a;
		c->free_ev[c->nfree++] = b;
		if (probe)
			__atomic_store_n(&probing[dv->ordinal], 0,
					 __ATOMIC_RELEASE);
		return r;
	}
	record(b, s, ptsz);
	p = &c->ring[(c->head + c->count) % RING];
	p->start = a;
	p->end = b;
	p->estimate = est;
	p->key = key;
	p->probe = probe;
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
/* A query that finds the work done is a synchronisation too (a program
 * that polls instead of waiting). */
SYNC_HOOK(cuStreamQuery, (CUstream s), (s))
SYNC_HOOK(cuStreamQuery_ptsz, (CUstream s), (s))
SYNC_HOOK(cuEventQuery, (CUevent e), (e))

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

/* The launch entry points from before cuLaunchKernel (deprecated, still
 * exported by the driver): throttled like the others. */
CUresult cuLaunch(CUfunction f)
{
	if (FAST)
		return vgpu__real.cuLaunch ? vgpu__real.cuLaunch(f)
					   : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY, .f = f };
	return vgpu__real.cuLaunch ? launch_slow(&c_) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	if (FAST || !vgpu__real.cuLaunchGrid)
		return vgpu__real.cuLaunchGrid
			       ? vgpu__real.cuLaunchGrid(f, grid_width,
							 grid_height)
			       : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY_GRID, .f = f,
			   .g = { (unsigned)grid_width, (unsigned)grid_height,
				  1 } };
	return launch_slow(&c_);
}

CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height,
			   CUstream hStream)
{
	if (FAST || !vgpu__real.cuLaunchGridAsync)
		return vgpu__real.cuLaunchGridAsync
			       ? vgpu__real.cuLaunchGridAsync(f, grid_width,
							      grid_height,
							      hStream)
			       : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY_ASYNC, .f = f,
			   .g = { (unsigned)grid_width, (unsigned)grid_height,
				  1 }, .stream = hStream };
	return launch_slow(&c_);
}

/* Launches on several devices at once, measured by no single stream: with
 * a compute share set, refused with a message (the API is deprecated;
 * cuLaunchCooperativeKernel per device does the same). */
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
					      unsigned int numDevices,
					      unsigned int flags)
{
	if (!vgpu__real.cuLaunchCooperativeKernelMultiDevice)
		return CUDA_ERROR_NOT_FOUND;
	if (__atomic_load_n(&vgpu__compute_on, __ATOMIC_RELAXED)) {
		vgpu_log(VGPU_LOG_ERROR, "cuLaunchCooperativeKernelMultiDevice "
			 "is refused while a compute share is set "
			 "(VGPU_COMPUTE_LIMIT): its launches cannot be "
			 "measured; launch with cuLaunchCooperativeKernel on "
			 "each device");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return vgpu__real.cuLaunchCooperativeKernelMultiDevice(
		launchParamsList, numDevices, flags);
}
