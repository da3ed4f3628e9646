/* measure_read.c - the launches of a capped tenant read and charged (see
 * measure.h, and measure_internal.h for the split with measure.c): the
 * estimates they are admitted with, their events placed on the host's
 * clock, each read as it completes, charged its own part of its interval
 * once every process has recorded the ends before it, and the unread
 * ones settled at an estimate (for measure_end.c).
 */
#include "measure_internal.h"
#include "log.h"
#include "options.h"
#include "throttle.h"
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

/* ---- estimates ----------------------------------------------------------------- */

/* What this process measured last, per device and kind, for a thread or
 * context that has measured nothing yet (atomic). */
static uint64_t proc_avg[VGPU_MAX_DEVICES][KINDS];

/* Whether a launch of this process on a GPU was ever given up on
 * (measure.c, wait_oldest(); atomic). */
static bool proc_stuck[VGPU_MAX_DEVICES];

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
 * else this thread's average in the context, else the process's; with
 * none, STUCK_EST_NS once a launch of the process on g was given up on:
 * not a probe, which its own process's launches given up on would hold
 * until retired and charged PROBE_HOLD_NS (four cold threads whose first
 * launches waited for each other took 7 and then 16 s). */
uint64_t vgpu__m_estimate(const struct vgpu_measure_ctx *c,
			  const struct vgpu_measure_gpu *g, int kind,
			  uint64_t key)
{
	uint64_t e = fn_estimate(key);

	if (!e)
		e = c->avg_ns[kind];
	if (!e)
		e = __atomic_load_n(&proc_avg[g->ordinal][kind],
				    __ATOMIC_RELAXED);
	if (!e && __atomic_load_n(&proc_stuck[g->ordinal], __ATOMIC_RELAXED))
		e = VGPU_MEASURE_STUCK_EST_NS;
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
 * in its place meanwhile, what it charged counts as charged. Its lane, if
 * keep_lane, stays p's until vgpu_inflight_give_lane (settle_read: once
 * charged). */
static void token_fold(struct vgpu_measure_pending *p, bool keep_lane)
{
	uint64_t ns = keep_lane
		? vgpu_inflight_release_keep_lane(p->gpu->ordinal, &p->tok)
		: vgpu_inflight_release(p->gpu->ordinal, &p->tok);

	if (ns != UINT64_MAX)
		p->estimate = ns;
}

void vgpu__m_token_fold(struct vgpu_measure_pending *p)
{
	token_fold(p, false);
}

/* Before a charge of measured where charged was admitted: the bucket
 * brought up to now first if it is a debt (vgpu_throttle_refill). now 0
 * (a forced charge, which has no time of its own): the clock's. Given 0,
 * the refill read it as a clock of another boot, moved the bucket's
 * refill time back to 0, and the next admission refilled a full burst:
 * a 30% tenant of 100 us kernels got 99%. */
static void refill_for(struct vgpu_slot *s, uint64_t charged,
		       uint64_t measured, uint64_t now)
{
	if (s && measured > charged)
		vgpu_throttle_refill(s, now ? now : P.now());
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
		if (AT(c, i)->ref == r)
			return true;
	for (unsigned i = 0; i < c->npark; i++)
		if (c->park[i].ref == r)
			return true;
	return false;
}

/* Whether c's reference is to be read again at now: there is none; it is
 * older than CALIBRATE_NS; or it was read in a wide window and its retry
 * is due. Never while a launch in flight is placed against the event a
 * calibration records again. */
bool vgpu__m_cal_due(const struct vgpu_measure_ctx *c, uint64_t now)
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
bool vgpu__m_calibrate(struct vgpu_measure_ctx *c)
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
struct vgpu_measure_done *vgpu__m_done_at(struct vgpu_measure_ctx *c,
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
		refill_for(m->gpu->slot, m->estimate, own, now);
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

void vgpu__m_charge_done(struct vgpu_measure_ctx *c, uint64_t now,
			 bool force)
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

/* p's events back to c's free list (the park's launches hold more than
 * it keeps: those are destroyed). */
static void give_events(struct vgpu_measure_ctx *c,
			const struct vgpu_measure_pending *p)
{
	for (int i = 0; i < VGPU_MEASURE_BLOCKED; i++)
		if (c->blocked[i].start == p->start)
			c->blocked[i].start = NULL;
	if (c->nfree + 2 <= 2 * RING) {
		c->free_ev[c->nfree++] = p->start;
		c->free_ev[c->nfree++] = p->end;
		return;
	}
	P.event_destroy(p->start);
	P.event_destroy(p->end);
}

void vgpu__m_read_launch(struct vgpu_measure_ctx *c,
			 struct vgpu_measure_pending *p, int q, uint64_t seen)
{
	const struct vgpu_measure_gpu *g = p->gpu;
	struct vgpu_measure_done *m;
	uint64_t start, len, first;

	token_fold(p, true);
	probe_fold(p);
	/* An event whose record failed holds an old time: not read. */
	place(c, p, q == VGPU_PRIM_DONE && p->recorded, seen, &start, &len);
	/* Full: the oldest is charged early (the newest may still be
	 * early, settle_read below, and waits for review()). */
	if (c->done_count == 2 * RING)
		charge_some(c, 0, true, 1);
	m = vgpu__m_done_at(c, c->done_count);
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
			m->own = vgpu_timeline_record_own(g->ledger, start,
							  start + len);
		else
			m->own = vgpu_timeline_exclusive(g->ledger, start,
							 start + len);
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
		refill_for(g->slot, p->estimate, first, seen);
		vgpu_throttle_correct(g->slot, p->estimate, first);
		m->estimate = first;
	}
	vgpu_inflight_give_lane(&p->tok);
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
	give_events(c, p);
}

/* Takes the oldest launch of c off the ring, read (read_launch). */
static void settle_read(struct vgpu_measure_ctx *c, int q, uint64_t seen)
{
	struct vgpu_measure_pending *p = AT(c, 0);

	vgpu__m_read_launch(c, p, q, seen);
	if (p->stuck)
		c->nstuck--;
	c->head = (c->head + 1) % RING;
	c->count--;
}

/* Moves c's oldest launch in flight behind the others: the slots of the
 * head and of the first free position swap, and the head moves on. */
void vgpu__m_oldest_last(struct vgpu_measure_ctx *c)
{
	unsigned h = c->head, t = (c->head + c->count) % RING;
	unsigned a = c->perm[h] ^ h, f = c->perm[t] ^ t;

	c->perm[t] = (unsigned char)(a ^ t);
	c->perm[h] = (unsigned char)(f ^ h);
	c->head = (h + 1) % RING;
}

void vgpu__m_give_up(struct vgpu_measure_ctx *c)
{
	struct vgpu_measure_pending *p = AT(c, 0);

	p->stuck = true;
	__atomic_store_n(&proc_stuck[p->gpu->ordinal], true,
			 __ATOMIC_RELAXED);
	/* Held, a running one (a kernel over a second) made each later
	 * launch wait a second more for a token: an 8 s kernel and 30
	 * launches chained to it took 15.8 s, 9 s before (a hostile
	 * review). */
	token_fold(p, false);
	/* Not started: the launches made after it on its stream cannot
	 * start before it (wait_oldest() goes past them at once). */
	if (P.event_query(p->start) != VGPU_PRIM_DONE) {
		struct vgpu_measure_blocked *b = NULL;

		/* A probe not started says nothing of lengths and runs
		 * nothing: it holds the tenant's other processes no longer,
		 * nor is it retired by one and charged its age as if it ran
		 * (a second process of the tenant beside one whose first of
		 * 1,000 launches waited behind a wait took 9.5 s, 0.06 s
		 * alone). Charged when read, as any launch. */
		probe_done(p);
		/* Its stream's entry, else the oldest. */
		for (int i = 0; i < VGPU_MEASURE_BLOCKED && !b; i++)
			if (c->blocked[i].start &&
			    c->blocked[i].stream == p->stream &&
			    c->blocked[i].per_thread == p->per_thread)
				b = &c->blocked[i];
		if (!b)
			b = &c->blocked[c->blocked_next++ %
					VGPU_MEASURE_BLOCKED];
		*b = (struct vgpu_measure_blocked){ p->stream, p->per_thread,
						    p->start };
	}
	if (vgpu__m_park(c))
		return;
	c->nstuck++;
	vgpu__m_stuck_behind(c);
}

void vgpu__m_stuck_behind(struct vgpu_measure_ctx *c)
{
	for (unsigned k = c->count;
	     k && c->nstuck < c->count && AT(c, 0)->stuck &&
	     P.event_query(AT(c, 0)->end) == VGPU_PRIM_NOT_READY;
	     k--)
		vgpu__m_oldest_last(c);
}

/* How long a thread waiting for c's oldest launch sleeps at now: until
 * the launch is due to end (admission time plus the estimate it was
 * admitted with), a quarter of that estimate at a time (one that ends
 * early is read within a quarter of its estimate); past due, a quarter
 * of how late it is, at most END_POLL_NS (one queued behind other
 * tenants' work is read within a quarter of its delay, and 32 waiting
 * threads do not fill two cores with polling); TOKEN_MIN_WAIT_NS at
 * least. */
uint64_t vgpu__m_until_oldest(const struct vgpu_measure_ctx *c, uint64_t now)
{
	const struct vgpu_measure_pending *p = AT(c, 0);
	uint64_t due = p->issued + p->admitted, ns;

	if (due > now) {
		ns = due - now;
		if (ns > p->admitted / 4)
			ns = p->admitted / 4;
	} else {
		ns = (now - due) / 4;
		if (ns > VGPU_MEASURE_END_POLL_NS)
			ns = VGPU_MEASURE_END_POLL_NS;
	}
	return ns > VGPU_MEASURE_TOKEN_MIN_WAIT_NS
		       ? ns : VGPU_MEASURE_TOKEN_MIN_WAIT_NS;
}

/* Takes the oldest launch of c off the ring if it has completed, as
 * settle_read (the ones given up on first moved behind the others).
 * Returns false if it has not. */
bool vgpu__m_settle_oldest(struct vgpu_measure_ctx *c)
{
	int q;

	if (c->nstuck)
		vgpu__m_stuck_behind(c);
	q = P.event_query(AT(c, 0)->end);

	if (q == VGPU_PRIM_NOT_READY)
		return false;
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
	struct vgpu_measure_pending *p = AT(c, 0);
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
	if (p->gpu->slot) {
		refill_for(p->gpu->slot, p->estimate, ran, now);
		vgpu_throttle_correct(p->gpu->slot, p->estimate, ran);
	}
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
bool vgpu__m_read_in_place(const struct vgpu_inflight_launch *l,
			   uint64_t *ns, bool *learn)
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
	/* Its reaper charges it next (vgpu_inflight_reap). */
	refill_for(l->slot, l->estimate, *ns, seen);
	return true;
}

unsigned vgpu__m_reap(const struct vgpu_measure_gpu *g, bool ended)
{
	return vgpu_inflight_reap(g->ordinal, ended, vgpu__m_read_in_place,
				  vgpu__m_learnt_in_place);
}

/* A launch read in its holder's place, claimed (inflight.h): its
 * function's estimate follows it (unless it may have waited behind
 * another tenant's kernel: read_in_place), and the process's first
 * reading (its probe's, maybe) is an estimate for other functions too. */
void vgpu__m_learnt_in_place(const struct vgpu_inflight_launch *l,
			     uint64_t ns, bool learn)
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
		struct vgpu_measure_done *m = vgpu__m_done_at(c, i);
		uint64_t own;

		if (!m->early)
			continue;
		own = own_time(m);
		/* Unresolved while no end cuts it and the grace runs. */
		if (own >= m->end - m->start &&
		    now < m->end + VGPU_MEASURE_READ_GRACE_NS)
			continue;
		if (m->gpu->slot && off_by_much(m->estimate, own)) {
			refill_for(m->gpu->slot, m->estimate, own, now);
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
uint64_t vgpu__m_collect(struct vgpu_measure_ctx *c)
{
	int q[RING];
	unsigned k;
	uint64_t now;

	/* The clock is read after the queries: the time each completed end
	 * was seen by (place()), and the launch's time. In order, the ones
	 * given up on moved behind the others first; again while that lets
	 * more be read. */
	do {
		if (c->nstuck)
			vgpu__m_stuck_behind(c);
		for (k = 0; k < c->count &&
			    (q[k] = P.event_query(AT(c, k)->end)) !=
				    VGPU_PRIM_NOT_READY;
		     k++)
			;
		now = P.now();
		for (unsigned i = 0; i < k; i++)
			settle_read(c, q[i], now);
	} while (k && c->nstuck && c->nstuck < c->count);
	if (c->npark)
		vgpu__m_poll_park(c, now);
	running(c, now);
	review(c, now);
	if (c->done_count)
		vgpu__m_charge_done(c, now, false);
	return now;
}

/* ---- settling what is left ------------------------------------------------------ */

/* Settles p, one of c's unread launches, without a driver call, at
 * share or its estimate if that is more. */
static void settle_one(struct vgpu_measure_pending *p, uint64_t share,
		       uint64_t now)
{
	uint64_t t;

	token_fold(p, false);
	probe_fold(p);
	/* Those given up on too: charged only their estimate, kernels queued
	 * behind a wait that a thread then left ran 200 ms each for a 20 us
	 * charge once the wait was released (89.6% of the device under a
	 * 30% cap, a hostile review). */
	t = share;
	/* A probe's length is not known at all: charged as if it ran at most
	 * as long as the tenant waits for an unread one (PROBE_HOLD_NS). A
	 * probe launched and left unread for seconds (a process that sleeps,
	 * then exits) charged its tenant all that time and starved it for a
	 * minute. */
	if (p->probe_at && t > VGPU_THROTTLE_PROBE_HOLD_NS)
		t = VGPU_THROTTLE_PROBE_HOLD_NS;
	if (p->estimate > t)
		t = p->estimate;
	refill_for(p->gpu->slot, p->estimate, t, now);
	if (p->gpu->slot)
		vgpu_throttle_settle(p->gpu->slot, t, p->estimate);
	probe_done(p);
}

/* Settles c's pending launches (the ring's and the park's) without a
 * driver call: each at its estimate, or its share of the time since the
 * oldest was issued if that is more (one stream runs them one after
 * another), the share at most most. They stay where they are (for
 * release() to give their events back); c is dropped after. */
void vgpu__m_settle_unread(struct vgpu_measure_ctx *c, uint64_t now,
			   uint64_t most)
{
	uint64_t first = now, share = 0;
	unsigned n = 0;

	for (unsigned i = 0; i < c->count + c->npark; i++) {
		const struct vgpu_measure_pending *p = vgpu__m_unread(c, i);

		if (p->orphaned)
			continue;
		n++;
		if (p->issued < first)
			first = p->issued;
	}
	if (n && now > first)
		share = (now - first) / n;
	if (share > most)
		share = most;
	for (unsigned i = 0; i < c->count + c->npark; i++) {
		struct vgpu_measure_pending *p = vgpu__m_unread(c, i);

		if (!p->orphaned)
			settle_one(p, share, now);
	}
}
