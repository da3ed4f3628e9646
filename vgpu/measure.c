/* measure.c - the launches of a capped tenant measured and charged: see
 * measure.h for the steps, docs/compute.md for why each is so. This half:
 * a launch (its admission, tokens and probe) and a thread's state per
 * context; measure_read.c reads the launches and charges them,
 * measure_end.c ends them (measure_internal.h).
 *
 * The driver, the clock and sleeping are reached only through the
 * primitives (prim.h), copied into P once.
 */
#include "measure_internal.h"
#include "log.h"
#include "options.h"
#include "throttle.h"

#include <pthread.h>
#include <string.h>

struct vgpu_prim vgpu__m_prim;

void vgpu_measure_use(const struct vgpu_prim *prim)
{
	P = *prim;
}

/* ---- cancellation ----------------------------------------------------------- */

/* A capped launch makes the driver's calls of its own (its events'
 * records and reads, a calibration's, the launch). A thread cancelled
 * (pthread_cancel) inside one of them could end holding the driver's
 * locks, and every later call of the process would hang: the simulator's
 * stream lock did. So a measured launch runs with cancellation disabled,
 * and enables it, when the job's thread had it, only in its waits for
 * admission (wait_ns), where it holds nothing: a thread held by its
 * share is still cancelled there at once. */
static __thread bool cancel_in_waits;

static void wait_ns(uint64_t ns)
{
	if (!cancel_in_waits) {
		P.sleep(ns);
		return;
	}
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	pthread_testcancel();
	P.sleep(ns);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
}

/* ---- a thread's state per context ------------------------------------------- */

/* The SMs c's context holds, if fewer than its device's (a green context):
 * its kernels run side by side with others', each stretched sm_den/sm_num
 * times, so they are charged sm_num/sm_den of their time. c's context is
 * current. */
static void sm_share(struct vgpu_measure_ctx *c)
{
	unsigned held = 0, total = 0;

	c->sm_num = c->sm_den = 0;
	if (!P.sm_counts(c->ctx, &held, &total))
		return;
	if (held && held < total) {
		c->sm_num = held;
		c->sm_den = total;
	}
}

/* t's state for the current context, NULL if none is current. */
static struct vgpu_measure_ctx *state(struct vgpu_measure_thread *t)
{
	struct vgpu_measure_ctx *c, *lru = &t->ctx[0];
	struct vgpu_prim_ctx *ctx = P.ctx_current();

	if (!ctx)
		return NULL;
	for (int i = 0; i < CTXS; i++) {
		c = &t->ctx[i];
		if (c->ctx == ctx && !vgpu__m_stale(c)) {
			c->used = ++t->clock;
			return c;
		}
		if (c->ctx == ctx) {	/* the handle outlived a teardown */
			vgpu__m_forget(c);
			lru = c;
			break;
		}
		if (c->used < lru->used)
			lru = &t->ctx[i];
	}
	/* A context new to the thread: the states of contexts torn down
	 * since are dropped now (their launches charged their time since
	 * issued, up to now), not when a fifth context evicts them: a
	 * thread that made and destroyed a context per task, unsynchronised,
	 * had each eviction charge the time since issue, the waits before
	 * included, and waited 72 ms, 0.3, 1.3, then 5.8 s (a hostile
	 * review). */
	for (int i = 0; i < CTXS; i++) {
		c = &t->ctx[i];
		if (c->ctx && vgpu__m_stale(c)) {
			vgpu__m_forget(c);
			if (lru->ctx)
				lru = c;
		}
	}
	/* A fifth context: the least recently used one's launches are
	 * settled, waiting for those still running up to TOKEN_MAX_WAIT_NS
	 * (never for good: one may wait for this thread), and its state
	 * given back. */
	if (lru->ctx) {
		vgpu__m_retire(lru, P.now() + VGPU_MEASURE_TOKEN_MAX_WAIT_NS);
		vgpu_log(VGPU_LOG_DEBUG, "a thread uses more than %d contexts: "
			 "measurements of the oldest settled", CTXS);
	}
	memset(lru, 0, sizeof(*lru));
	lru->ctx = ctx;
	lru->epoch = __atomic_load_n(vgpu__m_epoch_of(ctx), __ATOMIC_ACQUIRE);
	lru->used = ++t->clock;
	lru->ref = -1;
	sm_share(lru);
	P.thread_watch();
	return lru;
}

/* ---- a launch ---------------------------------------------------------------- */

/* Two events for a launch, from c's free list: a full list waits for the
 * oldest launch, an empty one makes new events. */
static bool take_events(struct vgpu_measure_ctx *c,
			struct vgpu_prim_event **a, struct vgpu_prim_event **b)
{
	/* New events while fewer launches are in flight than ever before
	 * (the caller waits for the oldest at DEPTH, or lent_room's bound):
	 * a few in all, then reused from the free list. */
	for (int i = 0; c->nfree < 2 && i < 2; i++) {
		struct vgpu_prim_event *e = P.event_create();

		if (!e)
			return false;
		c->free_ev[c->nfree++] = e;
	}
	*b = c->free_ev[--c->nfree];
	*a = c->free_ev[--c->nfree];
	return true;
}

/* Whether one more launch of estimate est may join c's launches in flight
 * past VGPU_MEASURE_DEPTH: only while the tenant is lent the GPU (elastic
 * and alone), the ring has room, and the estimates in flight add up to at
 * most VGPU_MEASURE_LENT_QUEUE_NS. */
static bool lent_room(const struct vgpu_measure_ctx *c,
		      const struct vgpu_measure_gpu *g, uint64_t est,
		      uint64_t now)
{
	uint64_t sum = est;

	if (!g->slot || !est || c->count + 1 >= RING)
		return false;
	for (unsigned i = 0; i < c->count; i++)
		sum += AT(c, i)->estimate;
	return sum <= VGPU_MEASURE_LENT_QUEUE_NS &&
	       vgpu_throttle_lent(g->slot, now);
}

/* Whether one more launch of estimate est may join c's launches in
 * flight. An opportunistic tenant's: while their estimates, its own
 * included, add up to at most VGPU_MEASURE_OPP_QUEUE_NS (one at least),
 * so what it has queued when a guaranteed tenant launches is short. Any
 * other's: below VGPU_MEASURE_DEPTH, or while lent_room allows. */
static bool room(const struct vgpu_measure_ctx *c,
		 const struct vgpu_measure_gpu *g, uint64_t est, uint64_t now)
{
	uint64_t sum = est;

	if (g->slot && vgpu_throttle_opportunistic(g->slot)) {
		if (!vgpu__m_live(c))
			return true;
		if (!est || c->count + 1 >= RING)
			return false;
		for (unsigned i = 0; i < c->count; i++)
			sum += AT(c, i)->estimate;
		return sum <= VGPU_MEASURE_OPP_QUEUE_NS;
	}
	return vgpu__m_live(c) < VGPU_MEASURE_DEPTH ||
	       lent_room(c, g, est, now);
}

/* Whether c's oldest launch in flight, waited for `waited`, is given up
 * on: it has not started after TOKEN_STALL_NS (it waits for something: a
 * host function, a value its stream waits for, maybe this very thread's
 * next launch), or not ended after RUNNING_MAX_WAIT_NS (a kernel spinning
 * on a flag that a later kernel of the thread sets; given up after 1 s, a
 * kernel of 8 s had the launches chained to it by an event given up on
 * one by one, 50 ms each, until the ring was full: a hostile review). */
static bool oldest_stuck(const struct vgpu_measure_ctx *c, uint64_t waited)
{
	return (waited >= VGPU_MEASURE_TOKEN_STALL_NS &&
		P.event_query(AT(c, 0)->start) != VGPU_PRIM_DONE) ||
	       waited >= VGPU_MEASURE_RUNNING_MAX_WAIT_NS;
}

/* Whether c's oldest launch in flight cannot start before a launch given
 * up on that has not started either: it went later on that one's stream
 * (queued behind a wait for this thread's later work, each launch past
 * the depth waited TOKEN_STALL_NS: 300 launches, 15 s). */
static bool behind_blocked(const struct vgpu_measure_ctx *c)
{
	const struct vgpu_measure_pending *p = AT(c, 0);

	for (int i = 0; i < VGPU_MEASURE_BLOCKED; i++) {
		const struct vgpu_measure_blocked *b = &c->blocked[i];

		if (b->start && p->stream == b->stream &&
		    p->per_thread == b->per_thread)
			return P.event_query(b->start) != VGPU_PRIM_DONE &&
			       P.event_query(p->start) != VGPU_PRIM_DONE;
	}
	return false;
}

/* Reads c's oldest launch in flight not given up on (and any ended after
 * it) once it has ended, polling. False once oldest_stuck(), or at once
 * when it is behind_blocked(): the launch is given up on and parked (or,
 * the park full, moved behind the others: vgpu__m_give_up()), so that
 * those behind it are read as they end and later launches do not wait
 * for it again; false at once when all in flight were given up on.
 * Never blocks in the driver: the launch may wait for the very launch
 * that waits here (a stream waiting for a value this thread writes next,
 * on another stream, hung the job for good when this blocked). *now:
 * read again after a wait; *since: when the wait began. */
static bool wait_oldest(struct vgpu_measure_ctx *c, uint64_t *now,
			uint64_t *since)
{
	unsigned count = c->count;

	if (vgpu__m_settle_oldest(c))
		return true;
	if (vgpu__m_head_stuck(c))
		return false;
	if (behind_blocked(c)) {
		vgpu__m_give_up(c);
		return false;
	}
	for (*since = *now = P.now(); !oldest_stuck(c, *now - *since);) {
		wait_ns(vgpu__m_until_oldest(c, *now));
		*now = vgpu__m_collect(c);
		if (c->count < count)
			return true;
		if (vgpu__m_head_stuck(c))
			return false;
	}
	vgpu__m_give_up(c);
	return false;
}

/* The launch's estimate, once this thread's earlier launches leave it
 * room (read as they end); with none anywhere, after them all. An earlier
 * launch given up on (wait_oldest()) leaves the launch to go as it is,
 * past VGPU_MEASURE_DEPTH (within the ring: measured()), *since then the
 * time its wait for it began (else 0). *now: the time, read again after a
 * wait. */
static uint64_t estimate_with_room(struct vgpu_measure_ctx *c,
				   const struct vgpu_measure_gpu *g, int kind,
				   uint64_t key, uint64_t *now,
				   uint64_t *since)
{
	/* Reading a launch may change the estimate: asked again after. */
	uint64_t est = vgpu__m_estimate(c, g, kind, key);
	bool stuck = false;

	*since = 0;
	while (!est && vgpu__m_live(c) &&
	       !(stuck = !wait_oldest(c, now, since)))
		est = vgpu__m_estimate(c, g, kind, key);
	/* Past one given up on: STUCK_EST_NS if the process still has no
	 * estimate, not a probe of its own (vgpu__m_estimate). */
	if (stuck && !est)
		est = vgpu__m_estimate(c, g, kind, key);
	while (!stuck && !room(c, g, est, *now) &&
	       !(stuck = !wait_oldest(c, now, since)))
		est = vgpu__m_estimate(c, g, kind, key);
	/* The ring full of launches given up on: one of them may end (queued
	 * behind others' work, or released by another thread), for
	 * FULL_WAIT_NS; then the launch goes unmeasured (measured()). */
	if (c->count + 1 >= RING) {
		uint64_t t0 = *now = P.now();

		while (c->count + 1 >= RING &&
		       *now - t0 < VGPU_MEASURE_FULL_WAIT_NS) {
			wait_ns(VGPU_MEASURE_TOKEN_POLL_NS);
			*now = vgpu__m_collect(c);
		}
		est = vgpu__m_estimate(c, g, kind, key);
	}
	if (!stuck)
		*since = 0;
	return est;
}

/* This thread's tag in the tenant's turns (vgpu_throttle_admit_waiting):
 * threads of one process take turns among themselves too; 0 until
 * first asked. */
static __thread uint32_t thread_tag;
static uint32_t next_tag;

static uint32_t my_tag(void)
{
	if (!thread_tag)
		do
			thread_tag = __atomic_add_fetch(&next_tag, 1,
							__ATOMIC_RELAXED) &
				     0x1fffffu;
		while (!thread_tag);
	return thread_tag;
}

/* How long a launch waiting for admission sleeps at most, for c's oldest
 * launch in flight to be read soon after it ends: its end is what other
 * tenants' charges are cut at, and a neighbour's launch read early waits
 * for it (hold_for_review()). Until its estimated end, then END_POLL_NS
 * at a time (it is queued behind other work, or runs long). */
static uint64_t until_end(const struct vgpu_measure_ctx *c, uint64_t now)
{
	const struct vgpu_measure_pending *p = AT(c, 0);
	uint64_t due = p->issued + p->estimate;

	if (!c->count)
		return UINT64_MAX;
	return (due > now ? due - now : 0) + VGPU_MEASURE_END_POLL_NS;
}

/* Whether c's oldest launch in flight is due to end (admission time plus
 * estimate) no later than the first of those holding the process's
 * tokens (inflight.h). */
static bool own_due_first(const struct vgpu_measure_ctx *c,
			  const struct vgpu_measure_gpu *g)
{
	const struct vgpu_measure_pending *p = AT(c, 0);

	return p->issued + p->estimate <= vgpu_inflight_next_due(g->ordinal);
}

/* Whether a thread that has waited `waited` for the launches holding
 * g's tokens goes without them: none has started for TOKEN_STALL_NS, or
 * TOKEN_MAX_WAIT_NS have passed (take_token(), probe_stuck()). */
static bool holders_stuck(const struct vgpu_measure_gpu *g, uint64_t waited)
{
	return (waited >= VGPU_MEASURE_TOKEN_STALL_NS &&
		!vgpu_inflight_any_running(g->ordinal, &P)) ||
	       waited >= VGPU_MEASURE_TOKEN_MAX_WAIT_NS;
}

/* How long a wait for a token or a lane of g sleeps at now: until the
 * first of the process's launches holding a token is due to end
 * (admission time plus estimate), at least TOKEN_MIN_WAIT_NS; once all
 * are past due, TOKEN_POLL_NS; never more than most. */
static uint64_t until_due(const struct vgpu_measure_gpu *g, uint64_t now,
			  uint64_t most)
{
	uint64_t due = vgpu_inflight_next_due(g->ordinal);

	due = due > now ? due - now : VGPU_MEASURE_TOKEN_POLL_NS;
	if (due < VGPU_MEASURE_TOKEN_MIN_WAIT_NS)
		due = VGPU_MEASURE_TOKEN_MIN_WAIT_NS;
	return due < most ? due : most;
}

/* Around a wait: a thread that had cancellation enabled (the launch
 * disabled it: vgpu_measure_launch) may be cancelled there. */
static void cancellable(bool on)
{
	if (!cancel_in_waits)
		return;
	if (on)
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	pthread_testcancel();
	if (!on)
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
}

/* One wait of a launch of c for a lane of its tenant, every one held by
 * another launch (the tenant's other processes', or this process's on a
 * lane it took over: one of its tokens was free). The holders read their
 * ended launches from their watch threads while one is wanted; a lane
 * given back wakes the wait (lseq: the tenant's count of lanes given
 * back when the take failed). Not bounded by the holders' stall as a wait
 * for a token is (take_token()), which cannot see another process's
 * launches: a lane whose holder does not show that it watches its launch
 * is taken over after LANE_STALE_NS, and the wait ends at
 * TOKEN_MAX_WAIT_NS. Returns now. */
static uint64_t wait_lane(struct vgpu_measure_ctx *c,
			  const struct vgpu_measure_gpu *g, uint32_t lseq,
			  uint64_t now)
{
	vgpu_throttle_lane_want(g->slot, now);
	/* Never blocked in the driver on its own running launch: that one
	 * may wait for this very launch (a kernel spinning on a flag that a
	 * later kernel of the thread sets, on another stream), and the
	 * lanes held elsewhere would make the wait a hang. It sleeps until
	 * its launches are due instead (below). */
	cancellable(true);
	/* Until a lane is given back, or at most until the first of the
	 * process's own launches holding one is due to end (queued, not
	 * started: it is read then, here or in its holder's place), as a
	 * wait for a token does; LANE_SLEEP_NS when it holds none. Sleeping
	 * only for a give, the holders themselves waited here past their
	 * launches' ends: four processes of a 70% tenant with 100 us kernels
	 * got 33%. */
	vgpu_throttle_lane_sleep(g->slot, lseq,
				 until_due(g, now, VGPU_MEASURE_LANE_SLEEP_NS));
	cancellable(false);
	vgpu__m_reap(g, true);
	return vgpu__m_collect(c);
}

/* Takes one of the process's tokens for the GPU (inflight.h) for a
 * launch that keeps c's thread within VGPU_MEASURE_DEPTH: while all are
 * held, reads c's own launches as they end and, once it has waited, the
 * other threads' that have ended in their holders' place, blocking for
 * one that runs or sleeping until one is given back. A launch of an
 * opportunistic tenant, or of an elastic one lent the GPU, goes without
 * (room() bounds those; launches given up on do not count toward the
 * depth: wait_oldest()); so does
 * one that has waited TOKEN_STALL_NS while none of the launches holding
 * them runs: they wait for something, maybe for work this thread is about
 * to launch (a thread's host function waiting for another thread, which
 * waited here for a token, hung both before). The wait counts from
 * since, when not 0. Returns now. */
static uint64_t take_token(struct vgpu_measure_ctx *c,
			   const struct vgpu_measure_gpu *g,
			   struct vgpu_inflight_mark *m, uint64_t now,
			   uint64_t since)
{
	uint64_t t0 = since ? since : now, ignored;
	uint32_t seq = vgpu_inflight_seq(g->ordinal), lseq;

	m->tok = -1;
	if (!g->slot || vgpu__m_live(c) >= VGPU_MEASURE_DEPTH ||
	    vgpu_throttle_opportunistic(g->slot))
		return now;
	lseq = vgpu_throttle_lane_seq(g->slot);
	for (bool waited = false;
	     !vgpu_inflight_take(g->ordinal, g->slot, now, m);
	     waited = true, seq = vgpu_inflight_seq(g->ordinal),
	     lseq = vgpu_throttle_lane_seq(g->slot)) {
		if (m->lanes_full) {
			if (vgpu_throttle_lent(g->slot, now) ||
			    now - t0 >= VGPU_MEASURE_TOKEN_MAX_WAIT_NS)
				return now;
			now = wait_lane(c, g, lseq, now);
			continue;
		}
		/* Holders torn down at once; ended launches once their
		 * holders have had a wait to read them (reading one in its
		 * holder's place as well costs the host a second reading). */
		if (vgpu__m_reap(g, waited))
			continue;
		if (vgpu_throttle_lent(g->slot, now))
			return now;
		/* Its own oldest launch running and due to end first of
		 * those holding tokens (admission time plus estimate): waits
		 * for its end, as a full ring does (wait_oldest(), which
		 * never blocks in the driver: a running kernel may spin on a
		 * flag this very launch sets), and reads it then (its token
		 * comes back at once, and a sleeping waiter is woken). With
		 * another's due first, that one may come back first (a short
		 * kernel beside this thread's long one); and a launch that
		 * has not started may wait for something (a host function, a
		 * stream waiting for a value): then it waits as below. Nobody
		 * waiting for an end, eight tenants of four threads with
		 * 100 us kernels left the device 36% idle: each end was read
		 * when some thread's sleep ran out. */
		if (c->count && own_due_first(c, g) &&
		    P.event_query(AT(c, 0)->start) == VGPU_PRIM_DONE) {
			bool read = wait_oldest(c, &now, &ignored);

			now = P.now();
			if (read)
				continue;
		}
		/* No hang: a launch holding a token may wait for this
		 * thread's next one (a host function or a value its stream
		 * waits for, queued before it or, by another thread, between
		 * its events; a graph behind another launch of itself). One
		 * that has not started is given TOKEN_STALL_NS; one seen to
		 * start may still wait (a start event says only that the
		 * work before it is done), so any is given TOKEN_MAX_WAIT_NS.
		 * Two hostile reviews hung jobs both ways. */
		if (vgpu_inflight_all_stalled(g->ordinal, &P))
			return now;
		if (holders_stuck(g, now - t0)) {
			vgpu_inflight_mark_stalled(g->ordinal, &P);
			return now;
		}
		/* Sleeps until a token is given back (a futex wakes it), or
		 * at most until the first launch holding one is due to end
		 * (within TOKEN_MIN_WAIT_NS and TOKEN_POLL_NS), when it may
		 * be read in its holder's place; once all are past due
		 * (queued behind other tenants' work), TOKEN_POLL_NS at a
		 * time: asking every TOKEN_MIN_WAIT_NS then, 32 threads of
		 * eight tenants on two cores left the simulated device a
		 * quarter idle. It never blocks in the
		 * driver on another thread's launch: that launch may wait for
		 * this thread, and a teardown waits for the readers of
		 * events (a reviewer's unrelated cuCtxDestroy took 860 ms
		 * behind a blocked reader). */
		cancellable(true);
		vgpu_inflight_wait(g->ordinal, seq,
				   until_due(g, now, VGPU_MEASURE_TOKEN_POLL_NS),
				   P.wait_on, P.sleep);
		cancellable(false);
		now = vgpu__m_collect(c);
	}
	if (m->tok >= 0)
		vgpu__m_watch_lanes();
	return now;
}

/* Whether one of c's launches given up on (wait_oldest()) is a probe:
 * then it holds none of the thread's later launches (it may wait for
 * them). */
static bool probe_given_up(const struct vgpu_measure_ctx *c)
{
	if (c->park_probes)
		return true;
	for (unsigned i = 0; c->nstuck && i < c->count; i++)
		if (AT(c, i)->stuck && AT(c, i)->probe_at)
			return true;
	return false;
}

/* What a launch with estimate est, that has waited `waited`, is held for
 * besides its own need (vgpu_throttle_admit_held): the time the tenant's
 * probe has been in flight, charged to nobody until it is read (its own
 * process reads it as soon as it ends, whatever its threads do:
 * vgpu_measure_probe_poll). A launch with no estimate is held by the probe
 * itself (measured()) and needs what the tenant's last known launch did
 * (vgpu_throttle_unknown_need). One of the probe's own process is not held
 * once the launches holding tokens are stuck (the probe may wait for this
 * thread: holders_stuck()); none is held past TOKEN_MAX_WAIT_NS of the
 * probe (a longer kernel, or a process stopped, is the probe's bound's
 * known limit). *mine: held by its own process's probe. */
static uint64_t probe_held(const struct vgpu_measure_ctx *c,
			   const struct vgpu_measure_gpu *g, uint64_t est,
			   uint64_t now, uint64_t waited, bool *mine)
{
	uint64_t held;

	*mine = false;
	if (!est)
		return vgpu_throttle_unknown_need(g->slot);
	held = vgpu_throttle_probe_running(
		g->slot, now, VGPU_MEASURE_TOKEN_MAX_WAIT_NS, mine);
	if (held && *mine &&
	    (holders_stuck(g, waited) || probe_given_up(c)))
		held = 0;
	return held;
}

/* Waits, holding nothing, until one of the process's tokens is c's for
 * the launch (m; inflight.h, take_token()) and the bucket admits *est at
 * *now (both updated), reading c's launches that complete meanwhile. A
 * token is held only while admitted: told to wait, the thread gives it
 * back for the wait (a thread waiting on its share held one of two, and
 * four threads of a 70% tenant with 100 us kernels got 60% of the
 * device); admitted first and then held for a token, launches went later
 * than their admission and several bunched up (a 1-second window at 50%
 * under a 30% cap). The estimate is asked again after each wait: a
 * reading of the launch's function while it waited (its long kernels
 * after short ones) is what it goes on, not the estimate it came with
 * (eight threads switching to 100 ms kernels had a third admitted on the
 * 20 us estimate after the first two were read). since: when the launch
 * began waiting for its own oldest launch, given up on (0: it did not);
 * its wait for a token counts from then (take_token()). */
static void admit(struct vgpu_measure_ctx *c, const struct vgpu_measure_gpu *g,
		  const struct vgpu_measure_call *call, uint64_t *est,
		  uint64_t *now, uint64_t since,
		  struct vgpu_inflight_mark *m)
{
	uint64_t wait, t0 = 0, t, end, held;
	uint32_t me = my_tag();
	bool mine;

	for (;;) {
		t = *now;
		if ((*now = take_token(c, g, m, *now, since)) != t)
			*est = vgpu__m_estimate(c, g, call->kind, call->key);
		held = probe_held(c, g, *est, *now, t0 ? *now - t0 : 0, &mine);
		wait = vgpu_throttle_admit_held(g->slot, me, *now, *est,
						t0 ? *now - t0 : 0, held);
		if (!wait)
			break;
		vgpu_inflight_release(g->ordinal, m);
		end = until_end(c, *now);
		if (!t0)
			t0 = P.now();
		if (wait > VGPU_MEASURE_MAX_SLEEP_NS)
			wait = VGPU_MEASURE_MAX_SLEEP_NS;
		/* Held by its own process's probe: read in its holder's
		 * place once it has ended (its thread may be waiting for
		 * this one). */
		if (held && mine) {
			vgpu__m_reap(g, true);
			if (wait > VGPU_MEASURE_PROBE_POLL_NS)
				wait = VGPU_MEASURE_PROBE_POLL_NS;
		}
		wait_ns(wait < end ? wait : end);
		*now = vgpu__m_collect(c);
		*est = vgpu__m_estimate(c, g, call->kind, call->key);
	}
	if (t0)
		vgpu_throttle_waited(g->slot, *now - t0);
}

/* Whether c holds a launch read early (settle_read) more than HOLD_NS
 * longer than it is charged. A smaller difference lets at most a ring of
 * launches go HOLD_NS each under what they may turn out to cost, and
 * holding for it cost a 70% tenant of 100 us kernels a fifth of the
 * device beside a 30% one. */
static bool must_hold(struct vgpu_measure_ctx *c)
{
	for (unsigned i = 0; c->early && i < c->done_count; i++) {
		const struct vgpu_measure_done *m = vgpu__m_done_at(c, i);

		if (m->early &&
		    m->end - m->start > m->estimate + VGPU_MEASURE_HOLD_NS)
			return true;
	}
	return false;
}

/* While must_hold(c), the next launch waits until review() has read the
 * early one, polling: its length decides this launch's estimate and the
 * bucket's debt (a long kernel of a function after short ones must not
 * let the next launches go on the short estimate). At most READ_GRACE_NS
 * after the early one's end; usually until the other tenant's thread
 * records the end it waited behind. Returns now. */
static uint64_t hold_for_review(struct vgpu_measure_ctx *c, uint64_t now)
{
	while (must_hold(c)) {
		wait_ns(VGPU_MEASURE_REVIEW_POLL_NS);
		now = vgpu__m_collect(c);
	}
	return now;
}

/* Reads the launches that have ended in t's contexts other than c: while
 * a launch in c waits for the tenant's probe, the probe may be t's own in
 * another context, which nobody else read (it waited for the probe's
 * bound and then its debt: 8.6 s at 30%). As after a synchronisation,
 * from whichever context is current; a torn-down one is left for its
 * next use. */
static void collect_others(struct vgpu_measure_thread *t,
			   const struct vgpu_measure_ctx *c)
{
	for (int i = 0; i < CTXS; i++) {
		struct vgpu_measure_ctx *o = &t->ctx[i];

		if (o != c && o->ctx && (o->count || o->npark) &&
		    !vgpu__m_stale(o))
			vgpu__m_collect(o);
	}
}

/* Whether a launch with no estimate, holding token tok, that has waited
 * since *since (0: not yet; set now) for the tenant's probe, goes without
 * it: the probe is its own process's and has not started for
 * TOKEN_STALL_NS (nor any other launch holding a token), or has not been
 * read for TOKEN_MAX_WAIT_NS. A probe queued behind a host function that
 * waits for this thread held its first launch for the probe's bound and
 * the debt its retirement charged: 8.6 s at 30% (a hostile review). It
 * goes as a launch of unknown length, bounded by its token, not as the
 * probe. */
static bool probe_stuck(const struct vgpu_measure_gpu *g,
			const struct vgpu_inflight_mark *tok, uint64_t now,
			uint64_t *since)
{
	if (!*since)
		*since = now;
	if (tok->tok < 0 || !vgpu_throttle_probe_mine(g->slot))
		return false;
	return holders_stuck(g, now - *since);
}

/* Admits, makes and measures one launch in c (one of t's), on g. */
static int measured(struct vgpu_measure_thread *t, struct vgpu_measure_ctx *c,
		    const struct vgpu_measure_gpu *g,
		    const struct vgpu_measure_call *call)
{
	struct vgpu_measure_pending *p;
	struct vgpu_prim_event *a, *b;
	struct vgpu_inflight_mark tok;
	uint64_t est, probe_at, probe_wait = 0, since, now = vgpu__m_collect(c);
	bool recorded, full;
	int r;

	if (vgpu__m_cal_due(c, now)) {
		vgpu__m_calibrate(c);
		now = P.now();
	}
	now = hold_for_review(c, now);
	est = estimate_with_room(c, g, call->kind, call->key, &now, &since);
	if (c->early) {		/* one read early to make room */
		now = hold_for_review(c, now);
		est = vgpu__m_estimate(c, g, call->kind, call->key);
	}
	for (probe_at = 0;;) {
		admit(c, g, call, &est, &now, since, &tok);
		if (est)
			break;
		/* No estimate anywhere: it goes as the tenant's probe, alone,
		 * once admitted (a probe waiting for its admission holds no
		 * one: several admitted at once on an estimate of 0 would
		 * all go), or waits for the one in flight to be read. The
		 * probe keeps its token, so that the process's other threads
		 * waiting for it read it in its place once it has ended. */
		r = vgpu_throttle_probe_begin(g->slot, now, &probe_at);
		if (r == VGPU_THROTTLE_PROBE_TAKEN)
			break;
		probe_at = 0;
		if (r == VGPU_THROTTLE_PROBE_BUSY &&
		    probe_stuck(g, &tok, now, &probe_wait))
			break;
		vgpu_inflight_release(g->ordinal, &tok);
		/* One retired was charged what it ran: admitted again. One in
		 * flight may be this thread's in another context, or another
		 * thread's of the process that does not come back to read it
		 * (it waits for this one): read here once it has ended, its
		 * length is this launch's estimate. */
		if (r == VGPU_THROTTLE_PROBE_BUSY) {
			wait_ns(VGPU_MEASURE_PROBE_POLL_NS);
			collect_others(t, c);
			vgpu__m_reap(g, true);
		}
		now = P.now();	/* rare: only before a process's first */
		est = vgpu__m_estimate(c, g, call->kind, call->key);
	}
	if (call->enter)
		call->enter();
	/* Not measured: the ring full of launches given up on
	 * (wait_oldest()) that did not end in FULL_WAIT_NS, or no events to
	 * be had. Charged its estimate, at least FULL_WAIT_NS for a full
	 * ring (a kernel longer than that escapes by the rest; left
	 * unmeasured at its estimate, a hostile review's long kernels got
	 * 99.9% of the device under a 30% cap; refused, a kernel of 8 s
	 * followed by launches chained to it failed a plain program), or
	 * as a launch that runs TOKEN_STALL_NS when it has none (a probe):
	 * never free. */
	full = c->count + 1 >= RING;
	if (full || !take_events(c, &a, &b)) {
		uint64_t charge = est ? est : VGPU_MEASURE_TOKEN_STALL_NS;

		if (full && charge < VGPU_MEASURE_FULL_WAIT_NS)
			charge = VGPU_MEASURE_FULL_WAIT_NS;
		r = call->launch(call->arg);
		if (call->leave)
			call->leave();
		vgpu_throttle_settle(g->slot, charge, est);
		if (probe_at)
			vgpu_throttle_probe_end(g->slot, probe_at);
		vgpu_inflight_release(g->ordinal, &tok);
		return r;
	}
	recorded = P.event_record(a, call->stream, call->per_thread);
	r = call->launch(call->arg);
	if (r != 0) {
		if (call->leave)
			call->leave();
		vgpu_throttle_settle(g->slot, 0, est);
		c->free_ev[c->nfree++] = a;
		c->free_ev[c->nfree++] = b;
		if (probe_at)
			vgpu_throttle_probe_end(g->slot, probe_at);
		vgpu_inflight_release(g->ordinal, &tok);
		return r;
	}
	recorded &= P.event_record(b, call->stream, call->per_thread);
	if (call->leave)
		call->leave();
	p = AT(c, c->count);
	p->recorded = recorded;
	p->start = a;
	p->end = b;
	p->estimate = est;
	p->admitted = est;
	p->key = call->key;
	p->probe_at = probe_at;
	p->probe_folded = false;
	p->gpu = g;
	p->kind = call->kind;
	p->ref = c->ref;
	p->issued = now;	/* before the launch call: never too late */
	p->stuck = false;
	p->stream = call->stream;
	p->per_thread = call->per_thread;
	p->tok = tok;
	/* Readable by other threads only once both events were recorded
	 * (an event whose record failed holds an old time). */
	if (recorded)
		vgpu_inflight_arm(g->ordinal, &p->tok,
			&(struct vgpu_inflight_launch){
				.start = a, .end = b,
				.ref = c->ref >= 0 ? c->ref_ev[c->ref] : NULL,
				.ref_ns = c->ref >= 0 ? c->ref_ns[c->ref] : 0,
				.issued = now,
				.epoch_word = vgpu__m_epoch_of(c->ctx),
				.epoch = c->epoch, .estimate = est,
				.key = call->key, .gpu = g->ordinal,
				.kind = call->kind, .probe_at = probe_at,
				.slot = g->slot,
				.ledger = g->ledger, .sm_num = c->sm_num,
				.sm_den = c->sm_den });
	c->count++;
	if (probe_at && recorded && p->tok.tok >= 0)
		vgpu__m_watch_probe(g, now);
	return r;
}

/* A launch not measured, made as it is; while an opportunistic tenant
 * shares its GPU, its tenant is stamped active first (a coarse clock; a
 * store at most once a millisecond), so that the other yields to it. */
static int unmeasured(struct vgpu_measure_ctx *c,
		      const struct vgpu_measure_call *call)
{
	struct vgpu_slot *s;
	int r;

	if (c && P.announced && (s = P.announced(c->ctx)) != NULL)
		vgpu_throttle_announce(s, P.now_coarse ? P.now_coarse()
						       : P.now());
	if (call->enter)
		call->enter();
	r = call->launch(call->arg);
	if (call->leave)
		call->leave();
	return r;
}

int vgpu_measure_launch(struct vgpu_measure_thread *t,
			const struct vgpu_measure_call *call)
{
	const struct vgpu_measure_gpu *g = NULL;
	struct vgpu_measure_ctx *c;
	struct vgpu_prim_ctx *sctx = NULL;
	int r, cancel;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	cancel_in_waits = cancel == PTHREAD_CANCEL_ENABLE;
	c = state(t);

	/* No current context (a CUkernel launched on a stream): the
	 * stream's context is made current for it, and the launch is
	 * measured and charged there. */
	if (!c && call->stream && (sctx = P.stream_ctx(call->stream)) &&
	    P.ctx_push(sctx))
		c = state(t);
	else
		sctx = NULL;
	/* A GPU once found measured stays so for the context (prim.h). */
	if (c && !(g = c->gpu))
		g = c->gpu = P.gpu(c->ctx);
	r = g ? measured(t, c, g, call) : unmeasured(c, call);
	if (sctx)
		P.ctx_pop();
	cancel_in_waits = false;
	pthread_setcancelstate(cancel, NULL);
	return r;
}
