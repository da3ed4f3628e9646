/* measure.c - the launches of a capped tenant measured and charged: see
 * measure.h for the steps, docs/compute.md for why each is so.
 *
 * The driver, the clock and sleeping are reached only through the
 * primitives (prim.h), copied into P once.
 */
#include "measure.h"
#include "log.h"
#include "options.h"
#include "throttle.h"
#include "timeline.h"

#include <pthread.h>
#include <string.h>

#define RING	VGPU_MEASURE_RING
#define CTXS	VGPU_MEASURE_CTXS
#define KINDS	VGPU_MEASURE_KINDS

/* A copy, so that a call through it costs one load, as a call through the
 * front end's own table of the driver does. Set before any launch. */
static struct vgpu_prim P;

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

/* ---- contexts torn down ------------------------------------------------------ */

/* A thread's events and calibration stream are given back when it exits,
 * if its context has not been torn down since they were made: then the
 * driver has freed them with it, or its handle may name another context.
 * Teardowns are counted per context handle (in buckets: a collision only
 * forgets more). */
static unsigned ctx_epochs[VGPU_MEASURE_EPOCHS];

static unsigned *epoch_of(const struct vgpu_prim_ctx *ctx)
{
	uintptr_t v = (uintptr_t)ctx;

	return &ctx_epochs[(v >> 4 ^ v >> 12) % VGPU_MEASURE_EPOCHS];
}

void vgpu_measure_ctx_teardown(struct vgpu_prim_ctx *ctx)
{
	if (!ctx) {	/* which one is not known: every thread's */
		for (int i = 0; i < VGPU_MEASURE_EPOCHS; i++)
			__atomic_add_fetch(&ctx_epochs[i], 1, __ATOMIC_SEQ_CST);
	} else {
		__atomic_add_fetch(epoch_of(ctx), 1, __ATOMIC_SEQ_CST);
	}
	/* Another thread reading a launch of ctx in its holder's place
	 * (inflight.h) is done with its events before the driver frees
	 * them; later ones see the count moved and leave them. */
	vgpu_inflight_quiesce();
}

/* Whether c's context may have been torn down since c was made: then its
 * handles may be freed, or name another context's objects. */
static bool stale(const struct vgpu_measure_ctx *c)
{
	return c->epoch != __atomic_load_n(epoch_of(c->ctx), __ATOMIC_ACQUIRE);
}

/* ---- estimates ----------------------------------------------------------------- */

/* What this process measured last, per device and kind, for a thread or
 * context that has measured nothing yet (atomic). */
static uint64_t proc_avg[VGPU_MAX_DEVICES][KINDS];

/* The process's first reading on a GPU, of a kind: its average until
 * charges refine it. */
static void proc_avg_seed(int gpu, int kind, uint64_t ns)
{
	if (!__atomic_load_n(&proc_avg[gpu][kind], __ATOMIC_RELAXED))
		__atomic_store_n(&proc_avg[gpu][kind], ns ? ns : 1,
				 __ATOMIC_RELAXED);
}

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

/* What the launch is admitted with: its function's or graph's recent time,
 * else this thread's average in the context, else the process's. */
static uint64_t estimate(const struct vgpu_measure_ctx *c,
			 const struct vgpu_measure_gpu *g, int kind,
			 uint64_t key)
{
	uint64_t e = fn_estimate(key);

	if (!e)
		e = c->avg_ns[kind];
	if (!e)
		e = __atomic_load_n(&proc_avg[g->ordinal][kind],
				    __ATOMIC_RELAXED);
	return e;
}

/* A launch with no estimate anywhere in the process goes alone, and so,
 * across the tenant's processes, does each process's first: other threads
 * and processes wait until its length is read and charged (or it is
 * retired), so that eight threads or eight processes starting at once do
 * not all go unmeasured. The probe is the tenant record's
 * (vgpu_throttle_probe_begin): a measured GPU always has a slot. */
static void probe_done(const struct vgpu_measure_pending *p)
{
	if (p->probe_at)
		vgpu_throttle_probe_end(p->gpu->slot, p->probe_at);
}

/* A probe another process retired unread has been charged by it for the
 * time it had run then: that counts as charged here, so that reading it
 * charges only the rest (or refunds). Asked until found, once. */
static void probe_fold(struct vgpu_measure_pending *p)
{
	uint64_t r;

	if (!p->probe_at || p->probe_folded)
		return;
	r = vgpu_throttle_probe_charged(p->gpu->slot, p->probe_at);
	/* A thread reading it in this one's place charges from its token's
	 * copy of the estimate: the copy follows. If one has it already,
	 * the fold waits for that charge (token_fold, then here): folded
	 * into the estimate alone, the retirement's charge was never given
	 * back (a review read the code). */
	if (!r || !vgpu_inflight_hold(p->gpu->ordinal, &p->tok))
		return;
	p->estimate += r;
	p->probe_folded = true;
	vgpu_inflight_unhold(p->gpu->ordinal, &p->tok, p->estimate);
}

/* p's token back to its process (inflight.h); if another thread read p
 * in its place meanwhile, what it charged counts as charged. */
static void token_fold(struct vgpu_measure_pending *p)
{
	uint64_t ns = vgpu_inflight_release(p->gpu->ordinal, &p->tok);

	if (ns != UINT64_MAX)
		p->estimate = ns;
}

/* ---- placing events on the host's clock ------------------------------------- */

/* Waits for the reference event: spins briefly, then yields the CPU (on
 * a loaded host the thread that completes it may need this one's core). */
static int cal_wait(struct vgpu_prim_event *e)
{
	uint64_t t0 = P.now();
	int q;

	while ((q = P.event_query(e)) == VGPU_PRIM_NOT_READY)
		if (P.now() - t0 > VGPU_MEASURE_CAL_SPIN_NS)
			P.sleep(0);
	return q;
}

/* Whether a launch in flight is placed against reference r (which a
 * calibration would record again). */
static bool placed_against(const struct vgpu_measure_ctx *c, int r)
{
	for (unsigned i = 0; i < c->count; i++)
		if (c->ring[(c->head + i) % RING].ref == r)
			return true;
	return false;
}

/* Whether c's reference is to be read again at now: there is none; it is
 * older than CALIBRATE_NS; or it was read in a wide window and its retry
 * is due. Never while a launch in flight is placed against the event a
 * calibration records again. */
static bool cal_due(const struct vgpu_measure_ctx *c, uint64_t now)
{
	if (c->ref < 0)
		return true;
	/* The ring is walked only when a reading is due (rarely). */
	return (now - c->ref_ns[c->ref] > VGPU_MEASURE_CALIBRATE_NS ||
		(2 * c->ref_err[c->ref] > VGPU_MEASURE_CAL_NARROW_NS &&
		 now >= c->cal_next)) &&
	       !placed_against(c, 1 - c->ref);
}

/* A reading of reference r (not the current one), at `at` in a window
 * this wide, becomes the current one if there is none, if the current one
 * is too old to be precise, or if it is narrower. A current one left wide
 * is read again later: CAL_RETRY_NS, then twice as long each time. */
static void cal_keep(struct vgpu_measure_ctx *c, int r, uint64_t at,
		     uint64_t window)
{
	if (c->ref < 0 || at - c->ref_ns[c->ref] > VGPU_MEASURE_CALIBRATE_NS ||
	    window / 2 < c->ref_err[c->ref]) {
		c->ref_ns[r] = at;
		c->ref_err[r] = window / 2;
		c->ref_lo[r] = at - window / 2;
		c->ref_hi[r] = at + window / 2;
		c->ref = r;
	}
	if (2 * c->ref_err[c->ref] <= VGPU_MEASURE_CAL_NARROW_NS) {
		c->cal_retry = 0;
		return;
	}
	c->cal_retry = !c->cal_retry ? VGPU_MEASURE_CAL_RETRY_NS
		     : 2 * c->cal_retry < VGPU_MEASURE_CALIBRATE_NS
			     ? 2 * c->cal_retry : VGPU_MEASURE_CALIBRATE_NS;
	c->cal_next = P.now() + c->cal_retry;
}

/* Records the reference event and reads when it completed: the middle of
 * its record-to-completion window, recording it again (the first tries
 * wake the stream up) until the window is narrow, for up to twenty tries
 * and CAL_BUDGET_NS: on a host too busy to give a narrow window, the last
 * one is taken with its error (ref_err) rather than holding up the launch,
 * and kept only if it is better than the current one (cal_keep). */
static bool calibrate(struct vgpu_measure_ctx *c)
{
	int r = c->ref < 0 ? 0 : 1 - c->ref;
	uint64_t window = UINT64_MAX, at = 0, begin = P.now();

	if (!c->cal_stream)
		c->cal_stream = P.stream_create();
	if (!c->cal_stream)
		return false;
	if (!c->ref_ev[r] && !(c->ref_ev[r] = P.event_create()))
		return false;
	/* Each try records the event again: the last try is the one that
	 * counts, so stop at the first narrow window. */
	for (int i = 0; i < 20 && window > VGPU_MEASURE_CAL_NARROW_NS &&
			(i == 0 ||
			 P.now() - begin < VGPU_MEASURE_CAL_BUDGET_NS); i++) {
		uint64_t t0 = P.now(), t1;
		int q;

		if (!P.event_record(c->ref_ev[r], c->cal_stream, false))
			return false;
		q = cal_wait(c->ref_ev[r]);
		t1 = P.now();
		if (q != VGPU_PRIM_DONE)
			return false;
		window = t1 - t0;
		at = t0 + window / 2;
	}
	cal_keep(c, r, at, window);
	return true;
}

/* ---- reading and charging ------------------------------------------------------ */

/* The part of a measured launch's interval that was its own: a green
 * context's share of it by SMs; else the part after the latest end any
 * process recorded before its own (the time it ran, not the time it
 * waited behind another context's kernel). */
static uint64_t own_time(const struct vgpu_measure_done *m)
{
	if (m->sm_den)
		return (m->end - m->start) * m->sm_num / m->sm_den;
	if (!m->gpu->ledger)
		return m->end - m->start;
	/* As read (settle_read), unless an end was recorded late since:
	 * every other end recorded since is later than its own. */
	if (vgpu_timeline_late(m->gpu->ledger) == m->late)
		return m->own;
	return vgpu_timeline_exclusive(m->gpu->ledger, m->start, m->end);
}

/* The i-th measured launch of c not yet charged (0: the oldest). */
static struct vgpu_measure_done *done_at(struct vgpu_measure_ctx *c,
					 unsigned i)
{
	return &c->done[(c->done_head + i) % (2 * RING)];
}

/* Charges the measured launches that ended long enough ago (all, if
 * force; at most max of them), each for its own part of its interval. */
static void charge_some(struct vgpu_measure_ctx *c, uint64_t now, bool force,
			unsigned max)
{
	while (c->done_count && max--) {
		struct vgpu_measure_done *m = &c->done[c->done_head];
		uint64_t own, *avg;

		if (!force && now < m->end + VGPU_MEASURE_CHARGE_DELAY_NS)
			break;
		own = own_time(m);
		if (m->gpu->slot)
			vgpu_throttle_settle(m->gpu->slot, own, m->estimate);
		if (m->early) {		/* charged before review() saw it */
			fn_measured(m->key, own);
			m->early = false;
			c->early--;
		}

		/* Never 0 once measured: 0 means "nothing known yet". */
		avg = &c->avg_ns[m->kind];
		*avg = *avg ? (*avg * 3 + own) / 4 + 1 : own + 1;
		__atomic_store_n(&proc_avg[m->gpu->ordinal][m->kind], *avg,
				 __ATOMIC_RELAXED);
		c->done_head = (c->done_head + 1) % (2 * RING);
		c->done_count--;
	}
}

static void charge_done(struct vgpu_measure_ctx *c, uint64_t now, bool force)
{
	charge_some(c, now, force, 2 * RING);
}

/* Narrows where reference r lies on the host's clock with what one
 * launch placed against it says: its start event cannot have completed
 * before the launch was issued (ref >= lo), nor its end after it was seen
 * complete (ref <= hi). A reference read in a wide window (the host late
 * to see its event: tens of microseconds, a millisecond on a stream's
 * first wake-up) is placed at the window's middle, which puts every end
 * the process records up to half the window off, and an end placed late
 * cuts another tenant's next kernel short: on the 2-core machine a 30%
 * tenant beside a 70% one, both synchronising 100 us kernels, ran 46% of
 * the device (its kernels charged about a third short). Every reading
 * narrows it now, to within the host's latency in seeing a kernel end.
 * Bounds that contradict the reference (the GPU's clock drifting from the
 * host's since it was read) move it to the newer bound; a launch whose
 * two bounds contradict each other says nothing. */
static void narrow(struct vgpu_measure_ctx *c, int r, uint64_t lo,
		   uint64_t hi)
{
	uint64_t a = c->ref_lo[r], b = c->ref_hi[r];

	if (lo > hi + VGPU_MEASURE_REF_SLACK_NS)
		return;
	a = lo > a ? lo : a;
	b = hi < b ? hi : b;
	/* Crossed by the driver's rounding: where they cross. Else the
	 * clocks drifted: the newer bound. */
	if (a > b && a - b <= VGPU_MEASURE_REF_SLACK_NS)
		a = b = b + (a - b) / 2;
	else if (a > b)
		a = b = lo > c->ref_hi[r] ? lo : hi;
	if (a == c->ref_lo[r] && b == c->ref_hi[r])
		return;
	c->ref_lo[r] = a;
	c->ref_hi[r] = b;
	c->ref_ns[r] = a + (b - a) / 2;
	c->ref_err[r] = (b - a) / 2;
}

/* Where p's interval lies on the host's clock: *start and *len, from its
 * events (complete: ok; seen complete before the host's time seen) or,
 * when they cannot say, its estimate ending at seen. */
static void place(struct vgpu_measure_ctx *c,
		  const struct vgpu_measure_pending *p, bool ok,
		  uint64_t seen, uint64_t *start, uint64_t *len)
{
	uint64_t ns;
	bool measured = false;

	*len = p->estimate;
	if (ok && P.event_elapsed(p->start, p->end, &ns)) {
		*len = ns;
		measured = true;
	}
	if (p->ref >= 0 && ok &&
	    P.event_elapsed(c->ref_ev[p->ref], p->start, &ns)) {
		/* Only from a length the events measured (an estimate may be
		 * longer than the launch), and bounds that fit the clock. */
		if (measured && p->issued > ns && seen > ns + *len)
			narrow(c, p->ref, p->issued - ns, seen - ns - *len);
		*start = c->ref_ns[p->ref] + ns;
	} else {
		*start = seen > *len ? seen - *len : 0;
	}
	/* On an idle stream the start event completes at once, before the
	 * launch has even been made: the launch cannot have started before
	 * it was issued (less the error of placing events on the host's
	 * clock, so that a launch is never charged less than it ran). */
	if (p->ref >= 0 && p->issued > *start + c->ref_err[p->ref]) {
		uint64_t end = *start + *len;
		uint64_t from = p->issued - c->ref_err[p->ref];

		*start = from < end ? from : end;
		*len = end - *start;
	}
}

/* Whether a launch's first reading differs from the estimate it was
 * admitted with by more than 1/32 of the estimate: then the bucket is
 * corrected at once. A closer reading (a function's estimate settles a
 * few ns above its launches' length) is left to the charge, which
 * corrects what was charged to the final reading in one step: an atomic
 * add on the tenant's bucket saved on most launches, at the cost of a
 * bucket off by at most 1/32 of the launches read in the last
 * CHARGE_DELAY_NS. */
static bool off_by_much(uint64_t estimate, uint64_t first)
{
	uint64_t d = first > estimate ? first - estimate : estimate - first;

	return d > estimate / 32;
}

/* Takes the oldest launch of c off the ring, its end event found complete
 * (q: the query's answer, VGPU_PRIM_DONE or _ERROR) before the host's
 * time seen, places it on the host's clock and records its end in the
 * GPU's timeline. */
static void settle_read(struct vgpu_measure_ctx *c, int q, uint64_t seen)
{
	struct vgpu_measure_pending *p = &c->ring[c->head];
	const struct vgpu_measure_gpu *g = p->gpu;
	struct vgpu_measure_done *m;
	uint64_t start, len, first;

	token_fold(p);
	probe_fold(p);
	/* An event whose record failed holds an old time: not read. */
	place(c, p, q == VGPU_PRIM_DONE && p->recorded, seen, &start, &len);
	/* Full: the oldest is charged early (the newest may still be
	 * early, settle_read below, and waits for review()). */
	if (c->done_count == 2 * RING)
		charge_some(c, 0, true, 1);
	m = done_at(c, c->done_count);
	/* Its end in the GPU's timeline, then its own time from the ends
	 * recorded so far (the charge reads it again only if an end is
	 * recorded late meanwhile: own_time()). A green context's launch did
	 * not hold the whole device: its end says nothing of when others
	 * could run. An opportunistic tenant's ends are not recorded either:
	 * a guaranteed tenant's charge is never cut by a scavenger's kernels
	 * (a CI run under load charged a hard 30% tenant so little beside
	 * one that it ran at 47.6%); it may be charged for time it waited
	 * behind them, which errs under its cap. */
	if (g->ledger && !c->sm_den) {
		m->late = vgpu_timeline_late(g->ledger);
		if (!(g->slot && vgpu_throttle_opportunistic(g->slot)))
			vgpu_timeline_record(g->ledger, start + len);
		m->own = vgpu_timeline_exclusive(g->ledger, start, start + len);
	} else {
		m->own = c->sm_den ? len * c->sm_num / c->sm_den : len;
	}
	/* A first reading of its own time (ends recorded later can only
	 * shorten it): the estimate it was admitted with is corrected to it
	 * now rather than at the charge, so that an estimate too high does
	 * not hold up the tenant for CHARGE_DELAY_NS or until this thread
	 * launches again. An interval within the estimate is read as it is
	 * (the charge refines it). */
	first = c->sm_den || len > p->estimate ? m->own : len;
	/* Longer than it was admitted for, and read within READ_GRACE_NS of
	 * its end: it may have waited behind another process's kernel whose
	 * end is not recorded yet. It stays charged as it was (its admission
	 * estimate and what running() added), and its function's estimate is
	 * left alone, until review() reads the timeline again; a thread's
	 * next launch may wait for that (hold_for_review()). A 30% tenant of
	 * 50 us kernels beside a 70% tenant of 20 ms ones read each of its
	 * kernels at about 20 ms, was charged that and had its estimate
	 * raised to it, and got 4% of the device with a quarter of it idle.
	 * Only while another tenant is active: alone, a long kernel after
	 * short ones raises the estimate at once. */
	m->early = !c->sm_den && g->ledger && g->slot && !p->probe_at &&
		   first > p->admitted && off_by_much(p->admitted, first) &&
		   seen < start + len + VGPU_MEASURE_READ_GRACE_NS &&
		   vgpu_throttle_contended(g->slot, seen);
	if (m->early) {
		first = p->estimate;	/* as charged (running() included) */
		c->early++;
	}
	m->estimate = p->estimate;
	if (g->slot && off_by_much(p->estimate, first)) {
		vgpu_throttle_correct(g->slot, p->estimate, first);
		m->estimate = first;
	}
	m->start = start;
	m->end = start + len;
	m->key = p->key;
	m->sm_num = c->sm_num;
	m->sm_den = c->sm_den;
	if (!m->early)
		fn_measured(p->key, first);
	proc_avg_seed(g->ordinal, p->kind, first);
	probe_done(p);
	m->gpu = g;
	m->kind = p->kind;
	c->done_count++;
	/* A first estimate, until charges refine it. */
	if (!c->avg_ns[p->kind])
		c->avg_ns[p->kind] = first ? first : 1;
	c->free_ev[c->nfree++] = p->start;
	c->free_ev[c->nfree++] = p->end;
	c->head = (c->head + 1) % RING;
	c->count--;
}

/* Takes the oldest launch of c off the ring once it has completed (wait:
 * block for it), as settle_read. Returns false if it has not completed
 * (and wait is false). */
static bool settle_oldest(struct vgpu_measure_ctx *c, bool wait)
{
	int q = P.event_query(c->ring[c->head].end);

	if (q == VGPU_PRIM_NOT_READY) {
		if (!wait)
			return false;
		q = P.event_sync(c->ring[c->head].end) ? VGPU_PRIM_DONE
						       : VGPU_PRIM_ERROR;
	}
	settle_read(c, q, P.now());
	return true;
}

/* The oldest launch still in flight has been running longer than it was
 * admitted for (a long kernel of a function whose recent launches were
 * short): the bucket is told now, as it runs, so that the launches queued
 * after it wait for it, rather than when its end is read. Only when it
 * was issued longer ago than its estimate (most launches end within it,
 * and then this costs nothing); its start event says whether, and since
 * when, it runs. */
static void running(struct vgpu_measure_ctx *c, uint64_t now)
{
	struct vgpu_measure_pending *p = &c->ring[c->head];
	uint64_t ns, start, ran;

	if (!c->count)
		return;
	probe_fold(p);
	if (p->ref < 0 || now - p->issued <= p->estimate ||
	    P.event_query(p->start) != VGPU_PRIM_DONE ||
	    !P.event_elapsed(c->ref_ev[p->ref], p->start, &ns))
		return;
	start = c->ref_ns[p->ref] + ns;
	if (start < p->issued)		/* an idle stream's start event */
		start = p->issued;
	if (now <= start)
		return;
	ran = now - start;
	if (c->sm_den)
		ran = ran * c->sm_num / c->sm_den;
	if (ran <= p->estimate)
		return;
	/* A thread reading it in this one's place (it has just ended)
	 * charges all of it: then nothing here. */
	if (!vgpu_inflight_hold(p->gpu->ordinal, &p->tok))
		return;
	if (p->gpu->slot)
		vgpu_throttle_correct(p->gpu->slot, p->estimate, ran);
	p->estimate = ran;
	vgpu_inflight_unhold(p->gpu->ordinal, &p->tok, ran);
}

/* Reads a launch of another thread (or another context of this one)
 * whose end has completed, in its holder's place (inflight.h): as
 * settle_read reads it, placed on the host's clock against its holder's
 * reference, starting no earlier than it was issued, and only the part
 * after the latest end recorded before its own. Tells its function's
 * estimate, unless it may have waited behind another tenant's kernel whose
 * end is not recorded yet (settle_read's early reading). Without a
 * reference, its events' whole interval, which may include time it
 * waited behind other work: its holder's own reading corrects it. */
static bool read_in_place(const struct vgpu_inflight_launch *l, uint64_t *ns,
			  bool *learn)
{
	uint64_t a, b, len, start, end, seen;

	if (P.event_query(l->end) != VGPU_PRIM_DONE)
		return false;
	seen = P.now();
	if (P.event_query(l->start) != VGPU_PRIM_DONE ||
	    !P.event_elapsed(l->start, l->end, &len)) {
		*ns = l->estimate;
		return true;
	}
	if (!l->ref || !P.event_elapsed(l->ref, l->start, &a) ||
	    !P.event_elapsed(l->ref, l->end, &b) || b < a) {
		*ns = l->sm_den ? len * l->sm_num / l->sm_den : len;
		return true;
	}
	start = l->ref_ns + a;
	end = l->ref_ns + b;
	if (end > seen)
		end = seen;
	if (start < l->issued)
		start = l->issued < end ? l->issued : end;
	if (start > end)
		start = end;
	len = end - start;
	if (l->sm_den)
		*ns = len * l->sm_num / l->sm_den;
	else if (l->ledger && len > l->estimate)
		*ns = vgpu_timeline_exclusive(l->ledger, start, end);
	else
		*ns = len;
	*learn = !(*ns > l->estimate &&
		   seen < end + VGPU_MEASURE_READ_GRACE_NS && l->slot &&
		   vgpu_throttle_contended(l->slot, seen));
	return true;
}

/* A launch read in its holder's place, claimed (inflight.h): its
 * function's estimate follows it (unless it may have waited behind
 * another tenant's kernel: read_in_place), and the process's first
 * reading (its probe's, maybe) is an estimate for other functions too. */
static void learnt_in_place(const struct vgpu_inflight_launch *l, uint64_t ns,
			    bool learn)
{
	if (learn)
		fn_measured(l->key, ns);
	proc_avg_seed(l->gpu, l->kind, ns);
}

/* The launches read early (settle_read) whose interval an end recorded
 * since cuts (what they waited behind has been recorded), or whose end
 * is READ_GRACE_NS old at now (nothing cut it: they ran that long): their
 * own time from the timeline; the bucket corrected to it and the
 * function's estimate told. */
static void review(struct vgpu_measure_ctx *c, uint64_t now)
{
	for (unsigned i = 0; c->early && i < c->done_count; i++) {
		struct vgpu_measure_done *m = done_at(c, i);
		uint64_t own;

		if (!m->early)
			continue;
		own = own_time(m);
		/* Unresolved while no end cuts it and the grace runs. */
		if (own >= m->end - m->start &&
		    now < m->end + VGPU_MEASURE_READ_GRACE_NS)
			continue;
		if (m->gpu->slot && off_by_much(m->estimate, own)) {
			vgpu_throttle_correct(m->gpu->slot, m->estimate, own);
			m->estimate = own;
		}
		fn_measured(m->key, own);
		m->early = false;
		c->early--;
	}
}

/* Reads c's launches that have completed, in order, and charges those
 * that ended CHARGE_DELAY_NS before now; one still running past its
 * estimate is charged what it has run so far. Never blocks. Returns now,
 * the host's time read after the queries. */
static uint64_t collect(struct vgpu_measure_ctx *c)
{
	int q[RING];
	unsigned k = 0;
	uint64_t now;

	/* The clock is read after the queries: the time each completed end
	 * was seen by (place()), and the launch's time. */
	while (k < c->count &&
	       (q[k] = P.event_query(c->ring[(c->head + k) % RING].end)) !=
		       VGPU_PRIM_NOT_READY)
		k++;
	now = P.now();
	for (unsigned i = 0; i < k; i++)
		settle_read(c, q[i], now);
	running(c, now);
	review(c, now);
	if (c->done_count)
		charge_done(c, now, false);
	return now;
}

/* ---- settling what is left ------------------------------------------------------ */

/* Settles c's pending launches without a driver call: each at its
 * estimate, or its share of the time since the oldest was issued if that
 * is more (one stream runs them one after another). They stay in the ring
 * (for release() to give their events back); c is dropped after. */
static void settle_unread(struct vgpu_measure_ctx *c, uint64_t now)
{
	uint64_t first = c->count ? c->ring[c->head].issued : now;
	uint64_t share = c->count && now > first ? (now - first) / c->count : 0;

	for (unsigned i = 0; i < c->count; i++) {
		struct vgpu_measure_pending *p = &c->ring[(c->head + i) % RING];
		uint64_t t;

		token_fold(p);
		probe_fold(p);
		t = share;
		/* A probe's length is not known at all: charged as if it ran
		 * at most as long as the tenant waits for an unread one
		 * (PROBE_HOLD_NS). A probe launched and left unread for
		 * seconds (a process that sleeps, then exits) charged its
		 * tenant all that time and starved it for a minute. */
		if (p->probe_at && t > VGPU_THROTTLE_PROBE_HOLD_NS)
			t = VGPU_THROTTLE_PROBE_HOLD_NS;
		if (p->estimate > t)
			t = p->estimate;

		if (p->gpu->slot)
			vgpu_throttle_settle(p->gpu->slot, t, p->estimate);
		probe_done(p);
	}
}

/* Gives c's events and stream back to the driver (c->ctx current); its
 * launches not yet complete stay charged as settle_unread charged them. */
static void release(struct vgpu_measure_ctx *c)
{
	/* settle_unread gave their tokens back: no other thread reads them
	 * from now on, and one reading them still is waited out. */
	vgpu_inflight_quiesce();
	for (unsigned i = 0; i < c->count; i++) {
		struct vgpu_measure_pending *p = &c->ring[(c->head + i) % RING];

		/* Still recorded: the driver frees them once complete. */
		P.event_destroy(p->start);
		P.event_destroy(p->end);
	}
	for (int i = 0; i < c->nfree; i++)
		P.event_destroy(c->free_ev[i]);
	for (int r = 0; r < 2; r++)
		if (c->ref_ev[r])
			P.event_destroy(c->ref_ev[r]);
	if (c->cal_stream)
		P.stream_destroy(c->cal_stream);
	memset(c, 0, sizeof(*c));
}

/* Drops c without a driver call: its measured launches are charged, the
 * ones not yet read are settled by settle_unread; its events and stream
 * are left to its context. */
static void forget(struct vgpu_measure_ctx *c)
{
	settle_unread(c, P.now());
	charge_done(c, 0, true);
	memset(c, 0, sizeof(*c));
}

/* Ends c: with its context made current, its launches are read as they
 * complete until the host's clock passes deadline (UINT64_MAX: blocking
 * for each), the rest settled by settle_unread, all charged, and its
 * events and stream destroyed; a stale c, or one whose context cannot be
 * made current, is forgotten. */
static void retire(struct vgpu_measure_ctx *c, uint64_t deadline)
{
	if (stale(c) || !P.ctx_push(c->ctx)) {
		forget(c);
		return;
	}
	while (c->count) {
		if (settle_oldest(c, deadline == UINT64_MAX))
			continue;
		if (P.now() > deadline)
			break;
		P.sleep(0);
	}
	settle_unread(c, P.now());
	charge_done(c, 0, true);
	release(c);
	P.ctx_pop();
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
		if (c->ctx == ctx && !stale(c)) {
			c->used = ++t->clock;
			return c;
		}
		if (c->ctx == ctx) {	/* the handle outlived a teardown */
			forget(c);
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
		if (c->ctx && stale(c)) {
			forget(c);
			if (lru->ctx)
				lru = c;
		}
	}
	/* A fifth context: the least recently used one's launches are
	 * settled, waiting for those still running, and its state given
	 * back. */
	if (lru->ctx) {
		retire(lru, UINT64_MAX);
		vgpu_log(VGPU_LOG_DEBUG, "a thread uses more than %d contexts: "
			 "measurements of the oldest settled", CTXS);
	}
	memset(lru, 0, sizeof(*lru));
	lru->ctx = ctx;
	lru->epoch = __atomic_load_n(epoch_of(ctx), __ATOMIC_ACQUIRE);
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
		sum += c->ring[(c->head + i) % RING].estimate;
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
		if (!c->count)
			return true;
		if (!est || c->count + 1 >= RING)
			return false;
		for (unsigned i = 0; i < c->count; i++)
			sum += c->ring[(c->head + i) % RING].estimate;
		return sum <= VGPU_MEASURE_OPP_QUEUE_NS;
	}
	return c->count < VGPU_MEASURE_DEPTH || lent_room(c, g, est, now);
}

/* The launch's estimate, once this thread's earlier launches leave it
 * room (read, blocking); with none anywhere, after them all. */
static uint64_t estimate_with_room(struct vgpu_measure_ctx *c,
				   const struct vgpu_measure_gpu *g, int kind,
				   uint64_t key, uint64_t now)
{
	/* Reading a launch may change the estimate: asked again after. */
	uint64_t est = estimate(c, g, kind, key);

	while (!est && c->count) {
		settle_oldest(c, true);
		est = estimate(c, g, kind, key);
	}
	while (!room(c, g, est, now)) {
		settle_oldest(c, true);
		est = estimate(c, g, kind, key);
	}
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
	const struct vgpu_measure_pending *p = &c->ring[c->head];
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
	const struct vgpu_measure_pending *p = &c->ring[c->head];

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

/* Takes one of the process's tokens for the GPU (inflight.h) for a
 * launch that keeps c's thread within VGPU_MEASURE_DEPTH: while all are
 * held, reads c's own launches as they end and, once it has waited, the
 * other threads' that have ended in their holders' place, blocking for
 * one that runs or sleeping until one is given back. A launch of an opportunistic tenant, or of an
 * elastic one lent the GPU, goes without (room() bounds those); so does
 * one that has waited TOKEN_STALL_NS while none of the launches holding
 * them runs: they wait for something, maybe for work this thread is about
 * to launch (a thread's host function waiting for another thread, which
 * waited here for a token, hung both before). Returns now. */
static uint64_t take_token(struct vgpu_measure_ctx *c,
			   const struct vgpu_measure_gpu *g,
			   struct vgpu_inflight_mark *m, uint64_t now)
{
	uint64_t t0 = now, due;
	uint32_t seq = vgpu_inflight_seq(g->ordinal);

	m->tok = -1;
	if (!g->slot || c->count >= VGPU_MEASURE_DEPTH ||
	    vgpu_throttle_opportunistic(g->slot))
		return now;
	for (bool waited = false; !vgpu_inflight_take(g->ordinal, m);
	     waited = true, seq = vgpu_inflight_seq(g->ordinal)) {
		/* Holders torn down at once; ended launches once their
		 * holders have had a wait to read them (reading one in its
		 * holder's place as well costs the host a second reading). */
		if (vgpu_inflight_reap(g->ordinal, waited, read_in_place,
				       learnt_in_place))
			continue;
		if (vgpu_throttle_lent(g->slot, now))
			return now;
		/* Its own oldest launch running and due to end first of
		 * those holding tokens (admission time plus estimate): blocks
		 * for its end, as a full ring does, and reads it then (its
		 * token comes back at once, and a sleeping waiter is woken).
		 * With another's due first, that one may come back first (a
		 * short kernel beside this thread's long one); and a launch
		 * that has not started may wait for something (a host
		 * function, a stream waiting for a value): then it waits as
		 * below. Nobody blocked on the device, eight tenants of four
		 * threads with 100 us kernels left it 36% idle: each end was
		 * read when some thread's sleep ran out. */
		if (c->count && own_due_first(c, g) &&
		    P.event_query(c->ring[c->head].start) == VGPU_PRIM_DONE) {
			settle_oldest(c, true);
			now = P.now();
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
		if (holders_stuck(g, now - t0))
			return now;
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
		due = vgpu_inflight_next_due(g->ordinal);
		due = due > now ? due - now : VGPU_MEASURE_TOKEN_POLL_NS;
		if (due < VGPU_MEASURE_TOKEN_MIN_WAIT_NS)
			due = VGPU_MEASURE_TOKEN_MIN_WAIT_NS;
		if (due > VGPU_MEASURE_TOKEN_POLL_NS)
			due = VGPU_MEASURE_TOKEN_POLL_NS;
		if (cancel_in_waits) {
			pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
			pthread_testcancel();
		}
		vgpu_inflight_wait(g->ordinal, seq, due, P.wait_on, P.sleep);
		if (cancel_in_waits) {
			pthread_testcancel();
			pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		}
		now = collect(c);
	}
	return now;
}

/* What a launch with estimate est, that has waited `waited`, is held for
 * besides its own need (vgpu_throttle_admit_held): the time the tenant's
 * probe has been in flight, charged to nobody until it is read. A launch
 * with no estimate is held by the probe itself (measured()) and needs the
 * burst (vgpu_throttle_unknown_need). One of its
 * own process is not held once the launches holding tokens are stuck (the
 * probe may wait for this thread: holders_stuck()); none is held past
 * TOKEN_MAX_WAIT_NS of the probe (a longer kernel is the probe's bound's
 * known limit). *mine: held by its own process's probe. */
static uint64_t probe_held(const struct vgpu_measure_gpu *g, uint64_t est,
			   uint64_t now, uint64_t waited, bool *mine)
{
	uint64_t held;

	*mine = false;
	if (!est)
		return vgpu_throttle_unknown_need(g->slot, now);
	held = vgpu_throttle_probe_running(g->slot, now,
					   VGPU_MEASURE_TOKEN_MAX_WAIT_NS, mine);
	if (held && *mine && holders_stuck(g, waited))
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
 * 20 us estimate after the first two were read). */
static void admit(struct vgpu_measure_ctx *c, const struct vgpu_measure_gpu *g,
		  const struct vgpu_measure_call *call, uint64_t *est,
		  uint64_t *now, struct vgpu_inflight_mark *m)
{
	uint64_t wait, t0 = 0, t, end, held;
	uint32_t me = my_tag();
	bool mine;

	for (;;) {
		t = *now;
		if ((*now = take_token(c, g, m, *now)) != t)
			*est = estimate(c, g, call->kind, call->key);
		held = probe_held(g, *est, *now, t0 ? *now - t0 : 0, &mine);
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
			vgpu_inflight_reap(g->ordinal, true, read_in_place,
					   learnt_in_place);
			if (wait > VGPU_MEASURE_PROBE_POLL_NS)
				wait = VGPU_MEASURE_PROBE_POLL_NS;
		}
		wait_ns(wait < end ? wait : end);
		*now = collect(c);
		*est = estimate(c, g, call->kind, call->key);
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
		const struct vgpu_measure_done *m = done_at(c, i);

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
		now = collect(c);
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

		if (o != c && o->ctx && o->count && !stale(o))
			collect(o);
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
	uint64_t est, probe_at, probe_wait = 0, now = collect(c);
	bool recorded;
	int r;

	if (cal_due(c, now)) {
		calibrate(c);
		now = P.now();
	}
	now = hold_for_review(c, now);
	est = estimate_with_room(c, g, call->kind, call->key, now);
	if (c->early) {		/* one read early to make room */
		now = hold_for_review(c, now);
		est = estimate(c, g, call->kind, call->key);
	}
	for (probe_at = 0;;) {
		admit(c, g, call, &est, &now, &tok);
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
			vgpu_inflight_reap(g->ordinal, true, read_in_place,
					   learnt_in_place);
		}
		now = P.now();	/* rare: only before a process's first */
		est = estimate(c, g, call->kind, call->key);
	}
	if (call->enter)
		call->enter();
	if (!take_events(c, &a, &b)) {
		r = call->launch(call->arg);
		if (call->leave)
			call->leave();
		vgpu_throttle_settle(g->slot, est, est);
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
	p = &c->ring[(c->head + c->count) % RING];
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
				.epoch_word = epoch_of(c->ctx),
				.epoch = c->epoch, .estimate = est,
				.key = call->key, .gpu = g->ordinal,
				.kind = call->kind, .probe_at = probe_at,
				.slot = g->slot,
				.ledger = g->ledger, .sm_num = c->sm_num,
				.sm_den = c->sm_den });
	c->count++;
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

/* ---- synchronisation, exits, fork ------------------------------------------ */

void vgpu_measure_synchronised(struct vgpu_measure_thread *t)
{
	for (int i = 0; i < CTXS; i++) {
		struct vgpu_measure_ctx *c = &t->ctx[i];

		if (!c->ctx || !(c->count || c->done_count))
			continue;
		if (stale(c)) {
			forget(c);
			continue;
		}
		collect(c);
	}
}

void vgpu_measure_thread_exit(struct vgpu_measure_thread *t)
{
	uint64_t deadline = P.now() + VGPU_MEASURE_EXIT_WAIT_NS;

	for (int i = 0; i < CTXS; i++)
		if (t->ctx[i].ctx)
			retire(&t->ctx[i], deadline);
}

void vgpu_measure_process_exit(struct vgpu_measure_thread *t)
{
	uint64_t now = 0;

	for (int i = 0; i < CTXS; i++) {
		struct vgpu_measure_ctx *c = &t->ctx[i];

		if (!c->ctx)
			continue;
		if (!now)
			now = P.now();
		settle_unread(c, now);
		charge_done(c, 0, true);
		memset(c, 0, sizeof(*c));
	}
}

void vgpu_measure_fork_child(struct vgpu_measure_thread *t)
{
	memset(t, 0, sizeof(*t));
	vgpu_inflight_fork_child();
	/* A probe the parent had in flight is the tenant's, the parent's to
	 * read (vgpu_throttle_probe_begin). The estimates (proc_avg) are the
	 * parent's and stay: they are good. */
}
