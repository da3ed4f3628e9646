/* ctxsync.c - every context of the process synchronised, each with a time
 * bound, before the moves of host overcommit and of the control thread
 * (overcommit.c).
 *
 * A move waits for the work queued on every context of the process before
 * it swaps a range's backing. cuCtxSynchronize has no time bound, and the
 * work may wait for the job itself: a stream waiting on a host function
 * or a stream memory operation that the thread now allocating (and so
 * moving) was about to release. Waiting for it there would hang the job.
 *
 * So the wait is made by a thread of the shim's own, the syncer, started
 * at the first move: the mover hands it a context and waits at most
 * SYNC_WAIT_MS. Past that the mover gives up (its move is not made: an
 * allocation spills to the host instead, a suspension is tried again
 * later) and the syncer goes on waiting, alone; a move asked for while it
 * still waits gives up as well, at its own bound. The syncer holds no lock
 * of the shim while it waits and, as every thread of the library's
 * (vgpu/thread.c), takes no signal of the job's but the faults.
 */
#include "devices.h"
#include "overcommit.h"
#include "track.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "thread.h"

/* A move's wait for one context's queued work gives up after this long:
 * the work may wait for the job itself. */
#define SYNC_WAIT_MS 5000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv;	/* on CLOCK_MONOTONIC (init_done_cv) */
static pthread_once_t done_once = PTHREAD_ONCE_INIT;
static CUcontext want;		/* the context asked for (mu) */
static uint64_t asked, done;	/* requests made and answered (mu) */
static CUresult answer;		/* the last one's result (mu) */
static bool started;		/* the syncer exists in this process (mu) */

static void *syncer_main(void *arg)
{
	CUcontext c, popped;
	uint64_t seq;
	CUresult r;

	(void)arg;
	vgpu_thread_mine(true);
	pthread_mutex_lock(&mu);
	for (;;) {
		while (done == asked)
			pthread_cond_wait(&asked_cv, &mu);
		c = want;
		seq = asked;
		pthread_mutex_unlock(&mu);
		r = vgpu__real.cuCtxPushCurrent_v2(c);
		if (r == CUDA_SUCCESS) {
			r = vgpu__real.cuCtxSynchronize();
			vgpu__real.cuCtxPopCurrent_v2(&popped);
		}
		pthread_mutex_lock(&mu);
		answer = r;
		done = seq;
		pthread_cond_broadcast(&done_cv);
	}
	return NULL;
}

static void init_done_cv(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&done_cv, &a);
	pthread_condattr_destroy(&a);
}

static bool start_locked(void)
{
	started = vgpu_thread_start(syncer_main, NULL) == 0;
	return started;
}

static CUresult sync_bounded(CUcontext c, unsigned wait_ms)
{
	struct timespec until;
	CUresult r = CUDA_ERROR_TIMEOUT;
	uint64_t mine;

	if (!vgpu__real.cuCtxPushCurrent_v2 || !vgpu__real.cuCtxPopCurrent_v2 ||
	    !vgpu__real.cuCtxSynchronize)
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_once(&done_once, init_done_cv);
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&mu);
	if (!started && !start_locked()) {
		/* No thread: wait here, unbounded, as before. */
		pthread_mutex_unlock(&mu);
		if ((r = vgpu__real.cuCtxPushCurrent_v2(c)) == CUDA_SUCCESS) {
			CUcontext popped;

			r = vgpu__real.cuCtxSynchronize();
			vgpu__real.cuCtxPopCurrent_v2(&popped);
		}
		return r;
	}
	/* The syncer still waits for an earlier request given up on: its
	 * work is not done, so neither would this be; give up at once
	 * rather than make each mover wait its own bound. */
	if (done != asked)
		goto out;
	want = c;
	mine = ++asked;
	pthread_cond_signal(&asked_cv);
	while (done != mine)
		if (pthread_cond_timedwait(&done_cv, &mu, &until) == ETIMEDOUT)
			goto out;
	r = answer;
out:
	pthread_mutex_unlock(&mu);
	return r;
}

void vgpu__ctx_sync_fork_child(void)
{
	/* The syncer is the parent's; the child starts its own. */
	pthread_mutex_init(&mu, NULL);
	pthread_cond_init(&asked_cv, NULL);
	done_once = (pthread_once_t)PTHREAD_ONCE_INIT;	/* made anew */
	want = NULL;
	asked = done = 0;
	started = false;
}

/* ---- every context of the process ---------------------------------------- */

static bool sync_gave_up;	/* the mover's (move_mu): a wait timed out */

bool vgpu__enter_ctx(CUcontext c, struct vgpu_synced *done)
{
	static bool said;
	CUcontext popped;
	CUresult r;

	if (!c || !vgpu__real.cuCtxPushCurrent_v2 ||
	    vgpu__real.cuCtxPushCurrent_v2(c) != CUDA_SUCCESS)
		return false;
	for (int k = 0; k < done->n; k++)
		if (done->ctx[k] == c)
			return true;
	if ((r = sync_bounded(c, SYNC_WAIT_MS)) != CUDA_SUCCESS) {
		vgpu__real.cuCtxPopCurrent_v2(&popped);
		if (r == CUDA_ERROR_TIMEOUT) {
			sync_gave_up = true;
			vgpu_log(__atomic_exchange_n(&said, true,
						     __ATOMIC_RELAXED) ?
				 VGPU_LOG_DEBUG : VGPU_LOG_WARN,
				 "VGPU_OVERCOMMIT: work queued on a context "
				 "was not done after %d ms (waiting for the "
				 "job itself?): memory is not moved this time; "
				 "an allocation past the slice spills instead",
				 SYNC_WAIT_MS);
		}
		return false;
	}
	if (done->n < VGPU_SYNC_MAX)
		done->ctx[done->n++] = c;
	return true;
}

/* Every context of the process, synchronised before a pass moves
 * anything: work queued earlier on another context's stream (a peer copy
 * into a range, a kernel of another device reading it) would otherwise
 * run during the move; the gate holds only what is issued from now on.
 * The contexts are the devices' primary ones and those the job made
 * (tracked handles; a green context through its context). Walks the
 * handle table: moves are rare. */
static CUcontext sync_found[VGPU_SYNC_MAX];	/* the mover's (move_mu) */
static int sync_nfound, sync_total;

static bool note_ctx(uint64_t key, const struct vgpu_tracked *t)
{
	CUcontext c = (CUcontext)(uintptr_t)key;

	if (t->kind != VGPU_USAGE_CONTEXT)
		return false;
	if (t->aux == VGPU_CTX_GREEN &&
	    (!vgpu__real.cuCtxFromGreenCtx ||
	     vgpu__real.cuCtxFromGreenCtx(&c, (CUgreenCtx)(uintptr_t)key) !=
		     CUDA_SUCCESS))
		c = NULL;
	sync_total++;
	if (c && sync_nfound < VGPU_SYNC_MAX)
		sync_found[sync_nfound++] = c;
	return false;	/* nothing removed */
}

static void keep_entry(const struct vgpu_tracked *t)
{
	(void)t;
}

bool vgpu__sync_every_ctx(struct vgpu_synced *done)
{
	static bool said;
	CUcontext popped;

	sync_nfound = sync_total = 0;
	for (int d = 0; d < VGPU_MAX_DEVICES; d++) {
		struct vgpu_dev *o = vgpu__dev_peek(d);
		CUcontext p = o ? __atomic_load_n(&o->primary, __ATOMIC_ACQUIRE)
				: NULL;

		if (p) {
			sync_total++;
			if (sync_nfound < VGPU_SYNC_MAX)
				sync_found[sync_nfound++] = p;
		}
		if (o)
			vgpu__track_sweep(VGPU_TRACK_HANDLE, (unsigned)d,
					  note_ctx, keep_entry);
	}
	if (sync_total > VGPU_SYNC_MAX) {
		if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
			vgpu_log(VGPU_LOG_WARN, "VGPU_OVERCOMMIT: more than %d "
				 "contexts in this process: ranges are not "
				 "moved (work queued on them could not all be "
				 "waited for); allocations past the slice "
				 "spill instead", VGPU_SYNC_MAX);
		return false;
	}
	sync_gave_up = false;
	for (int k = 0; k < sync_nfound && !sync_gave_up; k++)
		if (vgpu__enter_ctx(sync_found[k], done))
			vgpu__real.cuCtxPopCurrent_v2(&popped);
	return !sync_gave_up;
}
