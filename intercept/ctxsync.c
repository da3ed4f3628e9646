/* ctxsync.c - a context synchronised with a time bound, for the moves of
 * host overcommit and of the control thread (overcommit.c).
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
 * of the shim while it waits and takes no signal of the job's.
 */
#include "devices.h"
#include "overcommit.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

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
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, syncer_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	started = rc == 0;
	return started;
}

CUresult vgpu__ctx_sync_bounded(CUcontext c, unsigned wait_ms)
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
	/* The syncer may still wait for an earlier request given up on. */
	while (done != asked)
		if (pthread_cond_timedwait(&done_cv, &mu, &until) == ETIMEDOUT)
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
