/* throttle.c - the compute share's token bucket (throttle.h, docs/compute.md).
 *
 * The bucket is the tenant's compute block in the ledger:
 *   tokens_ns  GPU time the tenant may still use (negative: debt);
 *   refill_ns  the wall time up to which tokens have been accrued.
 * Tokens accrue at share_pct ns of GPU time per 100 ns of wall time, in
 * whole steps of 100 ns: refill_ns advances only by the wall time it
 * converted, so the remainder is carried and nothing drifts. Whoever moves
 * refill_ns forward (one compare-and-swap) adds the tokens for that
 * interval (one fetch-and-add), then clamps the bucket at the burst; an
 * admission refills only when the bucket holds too little for it (a
 * bucket that holds enough would gain nothing the clamp keeps: what
 * accrued in the meantime is added whole, clamped, at the next refill).
 * Launches are charged their estimate on admission (a compare-and-swap that
 * succeeds only if the bucket holds enough) and corrected at settle (one
 * fetch-and-add). No lock anywhere: a process killed between two steps
 * loses at most one interval's accrual.
 */
#include "throttle.h"

#include <stdbool.h>

#include "ledger_internal.h"
#include "options.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)VGPU_POLICY_HARD == (int)VGPU_LEDGER_POLICY_HARD &&
	       (int)VGPU_POLICY_ELASTIC == (int)VGPU_LEDGER_POLICY_ELASTIC &&
	       (int)VGPU_POLICY_OFF == (int)VGPU_LEDGER_POLICY_OFF &&
	       (int)VGPU_POLICY_OPPORTUNISTIC ==
	       (int)VGPU_LEDGER_POLICY_OPPORTUNISTIC,
	       "the option's values are the ledger's");

/* ---- atomics on the compute block --------------------------------------- */

static inline int64_t tokens_ld(struct vgpu_ledger_compute *c)
{
	return __atomic_load_n(&c->tokens_ns, __ATOMIC_RELAXED);
}

static inline bool tokens_cas(struct vgpu_ledger_compute *c, int64_t *old,
			      int64_t new)
{
	return __atomic_compare_exchange_n(&c->tokens_ns, old, new, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static inline int64_t tokens_add(struct vgpu_ledger_compute *c, int64_t v)
{
	return __atomic_add_fetch(&c->tokens_ns, v, __ATOMIC_RELAXED);
}

static inline void counter_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t clamp_charge(uint64_t ns)
{
	return ns < VGPU_THROTTLE_MAX_CHARGE_NS ? ns
						: VGPU_THROTTLE_MAX_CHARGE_NS;
}

/* Brings the bucket down to the burst if it holds more; t: its value. */
static void clamp_burst(struct vgpu_ledger_compute *c, int64_t t)
{
	while (t > VGPU_THROTTLE_BURST_NS &&
	       !tokens_cas(c, &t, VGPU_THROTTLE_BURST_NS))
		;
}

/* The share when it caps, else 0. */
static unsigned capped_share(const struct vgpu_ledger_compute *c)
{
	unsigned share = vgpu__ld32(&c->share_pct);

	if (share == 0 || share >= 100 ||
	    vgpu__ld32(&c->policy) == VGPU_POLICY_OFF)
		return 0;
	return share;
}

static bool opportunistic(const struct vgpu_ledger_compute *c)
{
	return vgpu__ld32(&c->policy) == VGPU_POLICY_OPPORTUNISTIC;
}

/* ---- the bucket ------------------------------------------------------------ */

/* Accrues the tokens of the whole steps between refill_ns and now. */
static void refill(struct vgpu_ledger_compute *c, unsigned share,
		   uint64_t now)
{
	uint64_t last = vgpu__ld(&c->refill_ns), steps;
	int64_t add;

	if (now <= last) {
		/* Far ahead of us: a file kept across a reboot (another
		 * CLOCK_MONOTONIC). Start accruing from now. */
		if (last - now > VGPU_THROTTLE_CLOCK_SKEW_NS)
			__atomic_compare_exchange_n(&c->refill_ns, &last, now,
				false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		return;
	}
	if (now - last < VGPU_THROTTLE_STEP_NS)
		return;
	steps = (now - last) / VGPU_THROTTLE_STEP_NS;
	/* A full bucket's worth or more: the clamp takes the rest anyway. */
	add = steps >= (uint64_t)VGPU_THROTTLE_BURST_NS
		      ? VGPU_THROTTLE_BURST_NS
		      : (int64_t)(steps * share);
	if (!__atomic_compare_exchange_n(&c->refill_ns, &last,
					 last + steps * VGPU_THROTTLE_STEP_NS,
					 false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;		/* another caller accrued this interval */
	clamp_burst(c, tokens_add(c, add));
}

/* Marks the tenant active until `until` (coarsely: others look at it with
 * a window of VGPU_THROTTLE_ACTIVE_NS). */
/* A stamp further ahead than any wait the throttle tells (another boot's,
 * or a hand-edited file): read as no stamp, so it can hold nobody, and
 * overwritten by the next. */
static bool stamp_bogus(uint64_t a, uint64_t now)
{
	return a > now + VGPU_THROTTLE_MAX_WAIT_NS + VGPU_THROTTLE_OPP_WINDOW_NS;
}

static void stamp(struct vgpu_ledger_compute *c, uint64_t until)
{
	uint64_t a = vgpu__ld(&c->active_ns);

	if (until > a + VGPU_THROTTLE_STAMP_NS || stamp_bogus(a, until))
		vgpu__st(&c->active_ns, until);
}

/* Whether a guaranteed (not opportunistic) tenant of this GPU other than
 * s's was active lately: an opportunistic tenant takes nothing an elastic
 * one is lent. */
static bool others_active(struct vgpu_slot *s, uint64_t now)
{
	struct vgpu_ledger_tenant *ten = s->l->tenants;
	uint64_t a;

	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		if (i == s->tenant_index ||
		    vgpu__ld32(&ten[i].state) != VGPU_TENANT_ACTIVE ||
		    opportunistic(&ten[i].compute))
			continue;
		a = vgpu__ld(&ten[i].compute.active_ns);
		/* Further ahead than any wait: a stamp of another boot. */
		if (a > now + VGPU_THROTTLE_CLOCK_SKEW_NS)
			continue;
		if (a && a + VGPU_THROTTLE_ACTIVE_NS > now)
			return true;
	}
	return false;
}

/* ---- the opportunistic class ------------------------------------------------ */

/* Whether a guaranteed tenant's stamp says it wants the whole GPU: an
 * uncapped one (its launches stamp it only while an opportunistic tenant
 * is about, measure.c) or an elastic one (lent the GPU when alone). A hard
 * cap wants its share: the opportunistic tenant runs only in its waits. */
static bool wants_all(const struct vgpu_ledger_compute *c)
{
	return !capped_share(c) ||
	       vgpu__ld32(&c->policy) == VGPU_POLICY_ELASTIC;
}

/* 0 when the opportunistic tenant s may launch work that ends at `end`
 * (its queued work included); else how long to wait before asking again.
 * A guaranteed tenant that wants the whole GPU and was active within
 * VGPU_THROTTLE_OPP_WINDOW_NS holds it until its window ends. A hard-capped
 * one holds it while it runs (its stamp is its last admission, within the
 * window) and lets it fill its waits (its stamp is the end of the wait it
 * was told) with work that ends before it. */
static uint64_t guaranteed_busy(struct vgpu_slot *s, uint64_t now,
				uint64_t end)
{
	struct vgpu_ledger_tenant *ten = s->l->tenants;
	uint64_t a, until, wait = 0;

	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		struct vgpu_ledger_compute *c = &ten[i].compute;

		if (i == s->tenant_index ||
		    vgpu__ld32(&ten[i].state) != VGPU_TENANT_ACTIVE ||
		    opportunistic(c) || !(a = vgpu__ld(&c->active_ns)) ||
		    stamp_bogus(a, now))
			continue;
		until = a + VGPU_THROTTLE_OPP_WINDOW_NS;
		if (until <= now)
			continue;		/* idle */
		if (wants_all(c)) {
			if (until - now > wait)
				wait = until - now;
		} else if (a <= now) {		/* a hard cap running */
			if (wait < VGPU_THROTTLE_OPP_POLL_NS)
				wait = VGPU_THROTTLE_OPP_POLL_NS;
		} else if (end + VGPU_THROTTLE_OPP_QUEUE_NS > a) {
			/* Waiting, not long enough: its own work still queued
			 * (up to two launches) may run late, so what fills
			 * the wait must end a queue's length before it. */
			if (wait < a - now)
				wait = a - now;
		}
	}
	return wait;
}

/* The tenant's opportunistic work, across its threads and processes, as a
 * queue that ends at opp_queue_ns: a launch of est is admitted when the
 * queue (from now) plus est is within VGPU_THROTTLE_OPP_QUEUE_NS, or the
 * queue is empty; the queue then ends est later. Time, not a count: a
 * process that dies with work admitted leaks nothing. 0 and the queue's
 * new end in *end, else the wait until it has room. */
static uint64_t opp_queue(struct vgpu_ledger_tenant *ten, uint64_t now,
			  uint64_t est, uint64_t *end, bool take)
{
	uint64_t q = vgpu__ld(&ten->opp_queue_ns), base;

	for (;;) {
		base = q > now && !stamp_bogus(q, now) ? q : now;
		if (base > now && base - now + est > VGPU_THROTTLE_OPP_QUEUE_NS)
			return base - now + est - VGPU_THROTTLE_OPP_QUEUE_NS;
		*end = base + est;
		if (!take || __atomic_compare_exchange_n(&ten->opp_queue_ns, &q,
				*end, false, __ATOMIC_RELAXED,
				__ATOMIC_RELAXED))
			return 0;
	}
}

/* The GPU's signal that an opportunistic tenant is about: its last ask,
 * stored at most once per VGPU_THROTTLE_STAMP_NS. */
static void opportunistic_stamp(struct vgpu_slot *s, uint64_t now)
{
	uint64_t *p = &s->l->hdr->opportunistic_ns;
	uint64_t a = vgpu__ld(p);

	if (now > a + VGPU_THROTTLE_STAMP_NS || stamp_bogus(a, now))
		vgpu__st(p, now);
}

uint64_t vgpu_throttle_opportunistic_ns(const struct vgpu_slot *s)
{
	return vgpu__ld(&s->l->hdr->opportunistic_ns);
}

bool vgpu_throttle_opportunistic_near(const struct vgpu_slot *s,
				      uint64_t now_ns)
{
	uint64_t a = vgpu_throttle_opportunistic_ns(s);

	return a && a <= now_ns + VGPU_THROTTLE_CLOCK_SKEW_NS &&
	       a + VGPU_THROTTLE_OPP_LINGER_NS > now_ns;
}

bool vgpu_throttle_opportunistic(const struct vgpu_slot *s)
{
	return opportunistic(&s->ten->compute);
}

void vgpu_throttle_announce(struct vgpu_slot *s, uint64_t now_ns)
{
	stamp(&s->ten->compute, now_ns);
}

/* Wall time until the bucket holds `need`, given that it holds t < need. */
static uint64_t wait_for(struct vgpu_ledger_compute *c, unsigned share,
			 uint64_t now, int64_t need, int64_t t)
{
	uint64_t deficit = (uint64_t)(need - t), steps, wall, done;
	uint64_t last = vgpu__ld(&c->refill_ns);

	if (deficit / share >= VGPU_THROTTLE_MAX_WAIT_NS / VGPU_THROTTLE_STEP_NS)
		return VGPU_THROTTLE_MAX_WAIT_NS;
	steps = (deficit + share - 1) / share;
	wall = steps * VGPU_THROTTLE_STEP_NS;
	done = now > last ? now - last : 0;	/* the carried remainder */
	return wall > done ? wall - done : 1;
}

static void admitted(struct vgpu_slot *s, struct vgpu_ledger_compute *c,
		     uint64_t now)
{
	counter_add(&s->rec->launches, 1);
	stamp(c, now);
}

/* Turns among a tenant's processes and their threads (turn_of): whoever
 * asks when tokens are there gets them, so a process or thread that asks
 * less often (a new one, a child) can starve behind one that launches back
 * to back. A process that has waited
 * VGPU_THROTTLE_STARVE_NS claims the turn; while a fresh turn names another
 * slot, everyone else waits. Of the starved, the one waiting longest holds
 * it: a claim takes the turn from a holder that began waiting later
 * (turn_since_ns), so the starved are admitted in the order they began to
 * wait, not in the order they happen to ask. The holder refreshes it each
 * time it asks and gives it up when admitted; one not refreshed for
 * VGPU_THROTTLE_TURN_NS (its holder died or stopped asking) is ignored and
 * may be taken over. */
static bool turn_fresh(struct vgpu_ledger_compute *c, uint64_t now)
{
	uint64_t at = vgpu__ld(&c->turn_ns);

	return at + VGPU_THROTTLE_TURN_NS > now &&
	       at < now + VGPU_THROTTLE_CLOCK_SKEW_NS;
}

/* Who asks, as the turn names it: the slot's index + 1 in the low 11 bits
 * (slots < 1024), the thread's tag above them: threads of one process
 * take turns among themselves too. */
static uint32_t turn_of(const struct vgpu_slot *s, uint32_t thread)
{
	return (s->index + 1) | (thread & 0x1fffffu) << 11;
}

/* 0: s may try now; else the wait while another process or thread has
 * the turn. */
static uint64_t take_turn(struct vgpu_slot *s, struct vgpu_ledger_compute *c,
			  uint32_t me, uint64_t now, uint64_t waiting_ns)
{
	uint32_t turn = vgpu__ld32(&c->turn);
	bool fresh = turn && turn_fresh(c, now);
	uint64_t since = now - waiting_ns;

	if (turn == me) {
		vgpu__st(&c->turn_ns, now);
		return 0;
	}
	if (waiting_ns < VGPU_THROTTLE_STARVE_NS)
		return fresh ? VGPU_THROTTLE_TURN_WAIT_NS : 0;
	/* Starved: the turn is ours if it is free, stale, or held by one
	 * that began waiting after us. */
	if (fresh && vgpu__ld(&s->ten->turn_since_ns) <= since)
		return VGPU_THROTTLE_TURN_WAIT_NS;
	if (!__atomic_compare_exchange_n(&c->turn, &turn, me, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return VGPU_THROTTLE_TURN_WAIT_NS;	/* just claimed */
	vgpu__st(&s->ten->turn_since_ns, since);
	vgpu__st(&c->turn_ns, now);
	return 0;
}

static void give_turn(struct vgpu_ledger_compute *c, uint32_t me)
{
	if (vgpu__ld32(&c->turn) == me)
		__atomic_compare_exchange_n(&c->turn, &me, 0, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

uint64_t vgpu_throttle_admit(struct vgpu_slot *s, uint64_t now_ns,
			     uint64_t estimate_ns)
{
	return vgpu_throttle_admit_waiting(s, 0, now_ns, estimate_ns, 0);
}

uint64_t vgpu_throttle_admit_waiting(struct vgpu_slot *s, uint32_t thread,
				     uint64_t now_ns,
				     uint64_t estimate_ns, uint64_t waiting_ns)
{
	return vgpu_throttle_admit_held(s, thread, now_ns, estimate_ns,
					waiting_ns, 0);
}

uint64_t vgpu_throttle_admit_held(struct vgpu_slot *s, uint32_t thread,
				  uint64_t now_ns, uint64_t estimate_ns,
				  uint64_t waiting_ns, uint64_t held_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;
	unsigned share = capped_share(c);
	int64_t est = (int64_t)clamp_charge(estimate_ns);
	int64_t own = est < VGPU_THROTTLE_BURST_NS ? est
						   : VGPU_THROTTLE_BURST_NS;
	int64_t need = own + (int64_t)clamp_charge(held_ns);
	uint64_t wait;
	int64_t t;

	if (opportunistic(c)) {
		/* Yields to the guaranteed, keeps little queued across its
		 * threads and processes; beside them, or alone, it is held to
		 * its share if it has one (as hard). */
		uint64_t end;

		opportunistic_stamp(s, now_ns);
		if ((wait = opp_queue(s->ten, now_ns, (uint64_t)est, &end,
				      false)) != 0 ||
		    (wait = guaranteed_busy(s, now_ns, end)) != 0 ||
		    (wait = opp_queue(s->ten, now_ns, (uint64_t)est, &end,
				      true)) != 0)
			return wait;
	}
	if (!share) {
		admitted(s, c, now_ns);
		return 0;
	}
	if ((wait = take_turn(s, c, turn_of(s, thread), now_ns,
			      waiting_ns)) != 0) {
		stamp(c, now_ns + wait);
		return wait;
	}
	/* The bucket is refilled only when it does not hold what the launch
	 * needs: a full one would be clamped back at once (three atomic
	 * steps a launch for nothing), and the tokens accrued meanwhile
	 * reach it whole at the next refill. */
	t = tokens_ld(c);
	for (bool refilled = false;;) {
		if (t >= need) {
			if (tokens_cas(c, &t, t - est))
				break;
			continue;
		}
		if (!refilled) {
			refill(c, share, now_ns);
			refilled = true;
			t = tokens_ld(c);
			continue;
		}
		if (vgpu__ld32(&c->policy) != VGPU_POLICY_ELASTIC ||
		    others_active(s, now_ns)) {
			wait = wait_for(c, share, now_ns, need, t);
			stamp(c, now_ns + wait);
			return wait;
		}
		/* Elastic and alone: lent, and no debt kept for it. */
		if (tokens_cas(c, &t, 0))
			break;
	}
	give_turn(c, turn_of(s, thread));
	admitted(s, c, now_ns);
	if (own && (uint64_t)own != vgpu__ld(&s->ten->probe_need))
		vgpu__st(&s->ten->probe_need, (uint64_t)own);
	return 0;
}

/* The probe word: the holder slot's owner word (index + 1 and generation,
 * never 0) in the high 32 bits, the CLOCK_MONOTONIC milliseconds it went
 * (truncated) in the low 32. */
static uint64_t probe_word(const struct vgpu_slot *s, uint64_t now_ns)
{
	return (uint64_t)s->owner << 32 | (now_ns / 1000000 & UINT32_MAX);
}

/* A probe word's age at now_ns in whole ms (wrapping with its 32 bits). */
static uint64_t probe_age_ms(uint64_t word, uint64_t now_ns)
{
	return (uint32_t)((now_ns / 1000000) - (word & UINT32_MAX));
}

/* What identifies a probe in probe_charged: 32 bits of its word. */
static uint64_t probe_id(uint64_t word)
{
	return (word * 0x9e3779b97f4a7c15ull) >> 32;
}

int vgpu_throttle_probe_begin(struct vgpu_slot *s, uint64_t now_ns,
			      uint64_t *probe)
{
	uint64_t *p = &s->ten->probe;
	uint64_t w = vgpu__ld(p), want = probe_word(s, now_ns), ms, us;

	if (!w) {
		if (!__atomic_compare_exchange_n(p, &w, want, false,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			return VGPU_THROTTLE_PROBE_BUSY;
		vgpu__st(&s->ten->probe_beat, now_ns);
		*probe = want;
		return VGPU_THROTTLE_PROBE_TAKEN;
	}
	/* Its age (ms, wrapping); a holder alive holds it up to HOLD_NS,
	 * one that died is retired as soon as that can be seen. */
	ms = probe_age_ms(w, now_ns);
	if (ms * 1000000 < VGPU_THROTTLE_PROBE_DEAD_NS ||
	    (ms * 1000000 <= VGPU_THROTTLE_PROBE_HOLD_NS &&
	     !vgpu__owner_dead(s->l, (uint32_t)(w >> 32))))
		return VGPU_THROTTLE_PROBE_BUSY;
	if (!__atomic_compare_exchange_n(p, &w, 0, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return VGPU_THROTTLE_PROBE_BUSY;	/* read or retired */
	us = ms * 1000 < UINT32_MAX ? ms * 1000 : UINT32_MAX;
	vgpu_throttle_correct(s, 0, us * 1000);
	vgpu__st(&s->ten->probe_charged, probe_id(w) << 32 | us);
	return VGPU_THROTTLE_PROBE_RETIRED;
}

uint64_t vgpu_throttle_probe_charged(struct vgpu_slot *s, uint64_t probe)
{
	uint64_t w = vgpu__ld(&s->ten->probe_charged);

	if (!w || w >> 32 != probe_id(probe))
		return 0;
	return (w & UINT32_MAX) * 1000;
}

void vgpu_throttle_probe_end(struct vgpu_slot *s, uint64_t probe)
{
	__atomic_compare_exchange_n(&s->ten->probe, &probe, 0, false,
				    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

uint64_t vgpu_throttle_unknown_need(const struct vgpu_slot *s)
{
	uint64_t n = vgpu__ld(&s->ten->probe_need);

	return n < VGPU_THROTTLE_BURST_NS ? n : VGPU_THROTTLE_BURST_NS;
}

uint64_t vgpu_throttle_probe_running(struct vgpu_slot *s, uint64_t now_ns,
				     uint64_t limit_ns, bool *mine)
{
	uint64_t w = vgpu__ld(&s->ten->probe), age;

	*mine = false;
	if (!w)
		return 0;
	/* Whole ms, rounded up: one that went within this ms holds too. */
	age = (probe_age_ms(w, now_ns) + 1) * 1000000;
	/* Past PROBE_DEAD_NS, only while its process shows it watches it
	 * (a process stopped, frozen or dead does not): no system call. */
	if (age >= limit_ns ||
	    (age >= VGPU_THROTTLE_PROBE_DEAD_NS &&
	     now_ns >= vgpu__ld(&s->ten->probe_beat) +
			       VGPU_THROTTLE_PROBE_DEAD_NS))
		return 0;
	*mine = (uint32_t)(w >> 32) == s->owner;
	return age;
}

void vgpu_throttle_probe_beat(struct vgpu_slot *s, uint64_t now_ns)
{
	if (vgpu_throttle_probe_mine(s) &&
	    now_ns >= vgpu__ld(&s->ten->probe_beat) + VGPU_THROTTLE_BEAT_NS)
		vgpu__st(&s->ten->probe_beat, now_ns);
}

bool vgpu_throttle_probe_mine(const struct vgpu_slot *s)
{
	uint64_t w = vgpu__ld(&s->ten->probe);

	return w && (uint32_t)(w >> 32) == s->owner;
}

/* A lane's word: the holder slot's owner word in the high 32 bits; in
 * the low 32, the holder's tag (which of its process's launches: 8 bits)
 * over the CLOCK_MONOTONIC milliseconds it was last shown (24 bits,
 * wrapping every 4.6 hours; only ages under a second matter). */
#define LANE_MS_MASK	0xffffffu

static uint64_t lane_word(const struct vgpu_slot *s, unsigned tag,
			  uint64_t now_ns)
{
	return (uint64_t)s->owner << 32 | (uint64_t)(tag & 0xffu) << 24 |
	       (now_ns / 1000000 & LANE_MS_MASK);
}

/* The word's holder: owner and tag. */
static uint64_t lane_holder(uint64_t w)
{
	return w & ~(uint64_t)LANE_MS_MASK;
}

/* Whether a lane's word was shown within LANE_STALE_NS of now_ns (ms,
 * wrapping: a word from the future, garbage, reads as old). */
static bool lane_shown(uint64_t w, uint64_t now_ns)
{
	uint32_t age = (uint32_t)(now_ns / 1000000 - (w & LANE_MS_MASK)) &
		       LANE_MS_MASK;

	return (uint64_t)age * 1000000 < VGPU_THROTTLE_LANE_STALE_NS;
}

/* A lane was given back: one sleeper of the tenant woken, if any sleeps
 * and one wanted a lane lately (by the coarse clock: its 4 ms ticks
 * allowed for). A count of sleepers left high (a process killed asleep,
 * garbage) costs a wake call only while lanes are wanted. */
static void wake_lane_sleeper(struct vgpu_ledger_tenant *t)
{
	uint64_t w;

	/* Nobody asleep (the common case): no store on the shared word. A
	 * waiter that counts itself just after this load sleeps its bounded
	 * sleep out. */
	if (!__atomic_load_n(&t->lane_sleepers, __ATOMIC_SEQ_CST))
		return;
	__atomic_add_fetch(&t->lane_seq, 1, __ATOMIC_SEQ_CST);
	w = vgpu__ld(&t->lane_want);
	if (w && vgpu__coarse_ns() < w + VGPU_THROTTLE_LANE_WANT_NS +
					     VGPU_THROTTLE_COARSE_NS)
		syscall(SYS_futex, &t->lane_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

int vgpu_throttle_lane_take(struct vgpu_slot *s, unsigned tag,
			    uint64_t now_ns)
{
	uint64_t want = lane_word(s, tag, now_ns);

	for (int i = 0; i < VGPU_THROTTLE_LANES; i++) {
		uint64_t *p = &s->ten->lane[i], w = vgpu__ld(p);

		if (w && lane_shown(w, now_ns))
			continue;
		if (__atomic_compare_exchange_n(p, &w, want, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return i;
	}
	return -1;
}

void vgpu_throttle_lane_give(struct vgpu_slot *s, int lane, unsigned tag)
{
	uint64_t *p = &s->ten->lane[lane], w = vgpu__ld(p);
	uint64_t me = lane_holder(lane_word(s, tag, 0));

	while (lane_holder(w) == me) {
		if (__atomic_compare_exchange_n(p, &w, 0, false,
						__ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED)) {
			wake_lane_sleeper(s->ten);
			return;
		}
	}
}

bool vgpu_throttle_lane_beat(struct vgpu_slot *s, int lane, unsigned tag,
			     uint64_t now_ns)
{
	uint64_t *p = &s->ten->lane[lane], w = vgpu__ld(p);
	uint64_t want = lane_word(s, tag, now_ns);

	for (;;) {
		if (lane_holder(w) != lane_holder(want))
			return false;
		if (w == want ||
		    __atomic_compare_exchange_n(p, &w, want, false,
						__ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			return true;
	}
}

void vgpu_throttle_lane_want(struct vgpu_slot *s, uint64_t now_ns)
{
	uint64_t w = vgpu__ld(&s->ten->lane_want);

	/* At most once a ms; a value far ahead (garbage) replaced. */
	if (now_ns >= w + 1000000 || w > now_ns + VGPU_THROTTLE_LANE_WANT_NS)
		vgpu__st(&s->ten->lane_want, now_ns);
}

bool vgpu_throttle_lane_wanted(const struct vgpu_slot *s, uint64_t now_ns)
{
	uint64_t w = vgpu__ld(&s->ten->lane_want);

	return w && now_ns < w + VGPU_THROTTLE_LANE_WANT_NS &&
	       w < now_ns + VGPU_THROTTLE_LANE_WANT_NS;
}

uint32_t vgpu_throttle_lane_seq(const struct vgpu_slot *s)
{
	return __atomic_load_n(&s->ten->lane_seq, __ATOMIC_SEQ_CST);
}

void vgpu_throttle_lane_sleep(struct vgpu_slot *s, uint32_t seq,
			      uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000),
			       (long)(ns % 1000000000) };

	__atomic_add_fetch(&s->ten->lane_sleepers, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->ten->lane_seq, __ATOMIC_SEQ_CST) == seq)
		syscall(SYS_futex, &s->ten->lane_seq, FUTEX_WAIT, seq, &ts,
			NULL, 0);
	__atomic_sub_fetch(&s->ten->lane_sleepers, 1, __ATOMIC_SEQ_CST);
}

bool vgpu_throttle_lent(struct vgpu_slot *s, uint64_t now_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;

	return capped_share(c) &&
	       vgpu__ld32(&c->policy) == VGPU_POLICY_ELASTIC &&
	       !others_active(s, now_ns);
}

bool vgpu_throttle_contended(struct vgpu_slot *s, uint64_t now_ns)
{
	return others_active(s, now_ns);
}

void vgpu_throttle_refill(struct vgpu_slot *s, uint64_t now_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;
	unsigned share = capped_share(c);

	if (share && now_ns)	/* 0: no time (refill() would read it as
				 * another boot's, and restart accrual) */
		refill(c, share, now_ns);
}

void vgpu_throttle_correct(struct vgpu_slot *s, uint64_t charged_ns,
			   uint64_t now_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;
	int64_t m = (int64_t)clamp_charge(now_ns);
	int64_t e = (int64_t)clamp_charge(charged_ns);

	if (e > m)	/* a refund: may not fill the bucket past the burst */
		clamp_burst(c, tokens_add(c, e - m));
	else if (m > e)
		tokens_add(c, e - m);
}

void vgpu_throttle_settle(struct vgpu_slot *s, uint64_t measured_ns,
			  uint64_t estimate_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;
	uint64_t m = clamp_charge(measured_ns);

	counter_add(&c->gpu_time_ns, m);
	counter_add(&s->rec->gpu_time_ns, m);
	vgpu_throttle_correct(s, estimate_ns, measured_ns);
}

void vgpu_throttle_waited(struct vgpu_slot *s, uint64_t wait_ns)
{
	counter_add(&s->ten->compute.wait_ns, wait_ns);
	counter_add(&s->rec->launch_wait_ns, wait_ns);
	counter_add(&s->rec->launches_throttled, 1);
}

int vgpu_throttle_configure(struct vgpu_slot *s, unsigned share_pct,
			    int policy, uint64_t now_ns)
{
	struct vgpu_ledger_compute *c = &s->ten->compute;

	if (share_pct > 100 || (policy != VGPU_POLICY_HARD &&
				policy != VGPU_POLICY_ELASTIC &&
				policy != VGPU_POLICY_OFF &&
				policy != VGPU_POLICY_OPPORTUNISTIC))
		return VGPU_LEDGER_EINVAL;
	if (vgpu__ld32(&c->share_pct) == share_pct &&
	    vgpu__ld32(&c->policy) == (uint32_t)policy &&
	    vgpu__ld(&c->refill_ns) != 0)
		return 0;
	/* New settings: the bucket restarts empty, from now. */
	__atomic_store_n(&c->tokens_ns, 0, __ATOMIC_RELAXED);
	vgpu__st(&c->refill_ns, now_ns ? now_ns : 1);
	vgpu__st32(&c->policy, (uint32_t)policy);
	vgpu__st32(&c->share_pct, share_pct);
	return 0;
}
