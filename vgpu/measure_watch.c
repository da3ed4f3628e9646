/* measure_watch.c - the process's watch (measure_internal.h): a thread
 * of the library's own that reads the process's first launch (the
 * tenant's probe) as soon as it ends, and shows the tenant's lanes the
 * process holds as watched (docs/compute.md, "The shim's side", steps 4
 * and 5), whatever the process's threads do meanwhile. */
#include "measure_internal.h"
#include "thread.h"
#include "throttle.h"

#include <pthread.h>
#include <time.h>

/* This process's probe in flight, for vgpu_measure_probe_poll: its GPU
 * and when it went (atomic; NULL: none watched). */
static const struct vgpu_measure_gpu *watched;
static uint64_t watched_since;

void vgpu__m_watch_probe(const struct vgpu_measure_gpu *g, uint64_t now)
{
	if (!P.probe_watch)
		return;
	__atomic_store_n(&watched_since, now, __ATOMIC_RELAXED);
	__atomic_store_n(&watched, g, __ATOMIC_RELEASE);
	P.probe_watch();
}

bool vgpu_measure_probe_poll(void)
{
	const struct vgpu_measure_gpu *g =
		__atomic_load_n(&watched, __ATOMIC_ACQUIRE);
	uint64_t now = P.now();

	if (g && vgpu_throttle_probe_mine(g->slot) &&
	    now - __atomic_load_n(&watched_since, __ATOMIC_RELAXED) <
		    VGPU_THROTTLE_PROBE_HOLD_NS) {
		vgpu__m_reap(g, true);
		if (vgpu_throttle_probe_mine(g->slot)) {
			vgpu_throttle_probe_beat(g->slot, now);
			return true;
		}
	}
	if (!g)
		return false;
	/* Read (or retired, or past the bound): done, unless another probe
	 * went meanwhile (watched for next). */
	return !__atomic_compare_exchange_n(&watched, &g, NULL, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The watch's thread, one of the library's own (thread.c: no signal of
 * the job's): made when a probe goes or a launch takes a lane, ended
 * with the probe (2 s at most) once the process has held no lane for
 * LANE_LINGER_NS; a pass every PROBE_POLL_NS while a probe is watched,
 * else every LANE_POLL_NS, under watch_mu, so that an exit waits for the
 * pass in progress before the ledgers it reads are left. */
static int watch_running;	/* a watcher thread runs (atomic) */
static bool watch_stopping;	/* the process is exiting (atomic) */
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t watch_lanes_seen;	/* the last pass that saw a lane held */

/* One pass: the probe, then the lanes (inflight.h). Whether to go on:
 * a probe is watched, or a lane was held within LANE_LINGER_NS (a busy
 * process takes and gives them back at every launch: its watcher stays,
 * rather than a thread made per launch). *probe: a probe is watched. */
static bool watch_pass(bool *probe)
{
	uint64_t now;
	bool more = false;

	*probe = false;
	pthread_mutex_lock(&watch_mu);
	if (!__atomic_load_n(&watch_stopping, __ATOMIC_ACQUIRE)) {
		more = *probe = vgpu_measure_probe_poll();
		now = P.now();
		if (vgpu_inflight_lanes_watch(now, &P, vgpu__m_read_in_place,
					      vgpu__m_learnt_in_place))
			watch_lanes_seen = now;
		more |= now - watch_lanes_seen < VGPU_MEASURE_LANE_LINGER_NS;
		more |= vgpu__m_orphans_poll();
	}
	pthread_mutex_unlock(&watch_mu);
	return more;
}

static void *watcher(void *arg)
{
	bool probe = true;

	(void)arg;
	vgpu_thread_mine(true);
	for (;;) {
		/* A probe is read as soon as it ends; lanes need showing
		 * only well within LANE_STALE_NS. */
		do
			P.sleep(probe ? VGPU_MEASURE_PROBE_POLL_NS
				      : VGPU_MEASURE_LANE_POLL_NS);
		while (watch_pass(&probe));
		__atomic_store_n(&watch_running, 0, __ATOMIC_RELEASE);
		/* A probe that went as this one stopped: watched here still,
		 * unless its own launch started another watcher. */
		if (!watch_pass(&probe) ||
		    __atomic_exchange_n(&watch_running, 1, __ATOMIC_ACQ_REL))
			break;
	}
	vgpu_thread_mine(false);
	return NULL;
}

void vgpu__m_watch_lanes(void)
{
	if (P.probe_watch && !__atomic_load_n(&watch_running, __ATOMIC_ACQUIRE))
		P.probe_watch();
}

void vgpu_measure_watch(void)
{
	if (__atomic_exchange_n(&watch_running, 1, __ATOMIC_ACQ_REL))
		return;
	if (vgpu_thread_start(watcher, NULL) != 0)
		__atomic_store_n(&watch_running, 0, __ATOMIC_RELEASE);
}

bool vgpu_measure_watch_stop(void)
{
	struct timespec until;

	__atomic_store_n(&watch_stopping, true, __ATOMIC_RELEASE);
	if (!__atomic_load_n(&watch_running, __ATOMIC_ACQUIRE))
		return true;
	/* A pass never blocks (event queries); one stuck in the driver
	 * anyway is not waited for past a second. */
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 1;
	if (!vgpu_mutex_lock_by(&watch_mu, &until))
		return false;
	pthread_mutex_unlock(&watch_mu);
	return true;
}

void vgpu__m_watch_fork_child(void)
{
	/* The parent's watch on its probe: no thread runs it here. */
	__atomic_store_n(&watched, NULL, __ATOMIC_RELAXED);
	__atomic_store_n(&watch_running, 0, __ATOMIC_RELAXED);
	pthread_mutex_init(&watch_mu, NULL);
}
