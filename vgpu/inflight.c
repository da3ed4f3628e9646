/* inflight.c - a process's capped launches in flight per GPU: see
 * inflight.h for why, docs/compute.md for the numbers.
 *
 * A token's word is its generation (moved at each take) over two bits of
 * state:
 *   FREE     none holds it;
 *   TAKEN    a launch holds it, not made yet (nothing to read);
 *   ARMED    a launch holds it, its events recorded: a reaper may read it;
 *   CLAIMED  a reaper is charging it, then frees it.
 * The holder frees it from TAKEN or ARMED by compare-and-swap; if that
 * fails, a reaper claimed it, and the holder waits for FREE, after which
 * the reaper's charge is in its mark.
 */
#include "inflight.h"
#include "options.h"
#include "throttle.h"

#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TOKENS	VGPU_INFLIGHT_TOKENS

enum { FREE, TAKEN, ARMED, CLAIMED };

/* The holder's launch, set before ARMED and read by reapers, as a
 * seqlock's data: each field alone atomic, stored with release and loaded
 * with acquire, so that a reaper that reads any field a new holder stored
 * sees that holder's take in the word it reads after, and drops what it
 * read (TSan does not take fences, hence no fences). */
struct token {
	uint64_t word;			/* gen << 2 | state */
	struct vgpu_prim_event *start, *end, *ref;
	uint64_t ref_ns, issued;
	const unsigned *epoch_word;
	unsigned epoch;
	uint64_t estimate, key, probe_at;
	int gpu, kind;
	struct vgpu_slot *slot;
	struct vgpu_ledger *ledger;
	unsigned sm_num, sm_den;
	uint64_t *behalf;		/* the holder's mark's field */
	/* The tenant's lane it holds (throttle.h; -1: none), and the slot it
	 * is of: set by its holder at the take, given back by whoever frees
	 * the token, before the token is free (atomic). */
	int lane;
	struct vgpu_slot *lane_slot;
	unsigned tag;			/* the lane's holder tag: its index and
					 * generation (atomic) */
};

#define ST(f, v)	__atomic_store_n(&(f), (v), __ATOMIC_RELEASE)
#define LD(f)		__atomic_load_n(&(f), __ATOMIC_ACQUIRE)

static struct token tokens[VGPU_MAX_DEVICES][TOKENS] = {
	[0 ... VGPU_MAX_DEVICES - 1] = { [0 ... TOKENS - 1] = { .lane = -1 } },
};
/* Threads reading another thread's events now (vgpu_inflight_quiesce). */
static unsigned readers;
/* Tokens given back, per GPU (a futex word), and threads waiting on it. */
static uint32_t freed_seq[VGPU_MAX_DEVICES];
static uint32_t waiting[VGPU_MAX_DEVICES];

/* A token of gpu was given back: one waiter, if any, is woken (a system
 * call only then). */
static void freed(int gpu)
{
	__atomic_add_fetch(&freed_seq[gpu], 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&waiting[gpu], __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &freed_seq[gpu], FUTEX_WAKE_PRIVATE, 1,
			NULL, NULL, 0);
}

uint32_t vgpu_inflight_seq(int gpu)
{
	return __atomic_load_n(&freed_seq[gpu], __ATOMIC_SEQ_CST);
}

void vgpu_inflight_wait(int gpu, uint32_t seq, uint64_t ns,
			void (*wait_on)(uint32_t *, uint32_t, uint64_t),
			void (*sleep)(uint64_t))
{
	if (!wait_on) {
		sleep(ns);
		return;
	}
	__atomic_add_fetch(&waiting[gpu], 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&freed_seq[gpu], __ATOMIC_SEQ_CST) == seq)
		wait_on(&freed_seq[gpu], seq, ns);
	__atomic_sub_fetch(&waiting[gpu], 1, __ATOMIC_SEQ_CST);
}

static uint64_t word_of(uint32_t gen, unsigned state)
{
	return (uint64_t)gen << 2 | state;
}

static bool cas(uint64_t *w, uint64_t *expected, uint64_t want)
{
	return __atomic_compare_exchange_n(w, expected, want, false,
					   __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* Takes a lane of slot's tenant for t (TAKEN by this thread, index i, at
 * generation gen): false if none is free. Its tag is the token's index
 * and the low bits of its generation, so that a launch of the process
 * whose lane this was (taken over while it waited, or while its reader
 * kept it past its token: vgpu_inflight_release_keep_lane) gives back
 * nothing, be it another token's or an earlier take of this one's. */
static bool take_lane(struct token *t, int i, uint32_t gen,
		      struct vgpu_slot *slot, uint64_t now)
{
	unsigned tag = (gen * TOKENS + (unsigned)i) & 0xffu;
	int lane = vgpu_throttle_lane_take(slot, tag, now);

	if (lane < 0)
		return false;
	ST(t->tag, tag);
	ST(t->lane_slot, slot);
	ST(t->lane, lane);
	return true;
}

bool vgpu_inflight_take(int gpu, struct vgpu_slot *slot, uint64_t now,
			struct vgpu_inflight_mark *m)
{
	m->tok = -1;
	m->lanes_full = false;
	m->lane = -1;
	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE);
		uint32_t gen = (uint32_t)(w >> 2) + 1;

		if ((w & 3) != FREE)
			continue;
		if (!cas(&t->word, &w, word_of(gen, TAKEN)))
			continue;
		if (slot && !take_lane(t, i, gen, slot, now)) {
			/* Back, as it was: nobody waits for a token
			 * that was free. */
			__atomic_store_n(&t->word, word_of(gen, FREE),
					 __ATOMIC_RELEASE);
			m->lanes_full = true;
			return false;
		}
		m->tok = i;
		m->gen = (uint32_t)(w >> 2) + 1;
		m->armed = false;
		m->behalf = 0;
		return true;
	}
	return false;
}

void vgpu_inflight_arm(int gpu, struct vgpu_inflight_mark *m,
		       const struct vgpu_inflight_launch *l)
{
	struct token *t;

	if (m->tok < 0)
		return;
	t = &tokens[gpu][m->tok];
	ST(t->start, l->start);
	ST(t->end, l->end);
	ST(t->ref, l->ref);
	ST(t->ref_ns, l->ref_ns);
	ST(t->issued, l->issued);
	ST(t->epoch_word, l->epoch_word);
	ST(t->epoch, l->epoch);
	ST(t->estimate, l->estimate);
	ST(t->key, l->key);
	ST(t->gpu, l->gpu);
	ST(t->kind, l->kind);
	ST(t->probe_at, l->probe_at);
	ST(t->slot, l->slot);
	ST(t->ledger, l->ledger);
	ST(t->sm_num, l->sm_num);
	ST(t->sm_den, l->sm_den);
	ST(t->behalf, &m->behalf);
	m->armed = true;
	__atomic_store_n(&t->word, word_of(m->gen, ARMED), __ATOMIC_RELEASE);
}

bool vgpu_inflight_hold(int gpu, const struct vgpu_inflight_mark *m)
{
	uint64_t w = word_of(m->gen, ARMED);

	if (m->tok < 0 || !m->armed)
		return true;
	return cas(&tokens[gpu][m->tok].word, &w, word_of(m->gen, CLAIMED));
}

void vgpu_inflight_unhold(int gpu, const struct vgpu_inflight_mark *m,
			  uint64_t estimate)
{
	struct token *t;

	if (m->tok < 0 || !m->armed)
		return;
	t = &tokens[gpu][m->tok];
	ST(t->estimate, estimate);
	__atomic_store_n(&t->word, word_of(m->gen, ARMED), __ATOMIC_RELEASE);
}

/* t's lane into m, to be given back later (keep_lane). */
static void keep_lane(struct token *t, struct vgpu_inflight_mark *m)
{
	m->lane = __atomic_exchange_n(&t->lane, -1, __ATOMIC_ACQ_REL);
	m->lane_tag = LD(t->tag);
	m->lane_slot = LD(t->lane_slot);
}

void vgpu_inflight_give_lane(struct vgpu_inflight_mark *m)
{
	if (m->lane < 0)
		return;
	vgpu_throttle_lane_give(m->lane_slot, m->lane, m->lane_tag);
	m->lane = -1;
}

/* t's lane given back (by whoever frees t, before it is free). */
static void give_lane(struct token *t)
{
	struct vgpu_inflight_mark m;

	keep_lane(t, &m);
	vgpu_inflight_give_lane(&m);
}

static uint64_t release(int gpu, struct vgpu_inflight_mark *m, bool keep)
{
	struct token *t;
	uint64_t w, r = UINT64_MAX;

	m->lane = -1;
	if (m->tok < 0)
		return UINT64_MAX;
	t = &tokens[gpu][m->tok];
	w = word_of(m->gen, m->armed ? ARMED : TAKEN);
	/* Claimed first, so that no reaper frees it while its lane is
	 * given back. */
	if (cas(&t->word, &w, word_of(m->gen, CLAIMED))) {
		if (keep)
			keep_lane(t, m);
		else
			give_lane(t);
		__atomic_store_n(&t->word, word_of(m->gen, FREE),
				 __ATOMIC_RELEASE);
		freed(gpu);
	} else {
		/* A reaper has it (only an armed one is claimed): it writes
		 * the charge, then frees the token. */
		while (__atomic_load_n(&t->word, __ATOMIC_ACQUIRE) ==
		       word_of(m->gen, CLAIMED))
			sched_yield();
		w = __atomic_load_n(&m->behalf, __ATOMIC_ACQUIRE);
		if (w)
			r = w - 1;
	}
	m->tok = -1;
	return r;
}

uint64_t vgpu_inflight_release(int gpu, struct vgpu_inflight_mark *m)
{
	return release(gpu, m, false);
}

uint64_t vgpu_inflight_release_keep_lane(int gpu,
					 struct vgpu_inflight_mark *m)
{
	return release(gpu, m, true);
}

/* A copy of t's launch, true if it is the one of word `seen` (else what
 * was copied may be another's, half set). */
static bool snapshot(struct token *t, uint64_t seen,
		     struct vgpu_inflight_launch *l)
{
	l->start = LD(t->start);
	l->end = LD(t->end);
	l->ref = LD(t->ref);
	l->ref_ns = LD(t->ref_ns);
	l->issued = LD(t->issued);
	l->epoch_word = LD(t->epoch_word);
	l->epoch = LD(t->epoch);
	l->estimate = LD(t->estimate);
	l->key = LD(t->key);
	l->gpu = LD(t->gpu);
	l->kind = LD(t->kind);
	l->probe_at = LD(t->probe_at);
	l->slot = LD(t->slot);
	l->ledger = LD(t->ledger);
	l->sm_num = LD(t->sm_num);
	l->sm_den = LD(t->sm_den);
	return __atomic_load_n(&t->word, __ATOMIC_SEQ_CST) == seen;
}

/* Reads t's launch (ARMED, word `seen`) through read (if ended): true
 * with *ns and *l set if it is read, or its context was torn down (*ns
 * its estimate: nothing of it runs any more). Its events are not freed
 * meanwhile: the holder gives them back only after its token and
 * vgpu_inflight_quiesce, a teardown moves the epoch first. */
static bool read_one(struct token *t, uint64_t seen, bool ended,
		     vgpu_inflight_read_fn *read,
		     struct vgpu_inflight_launch *l, uint64_t *ns, bool *learn)
{
	bool done = false;

	*learn = false;
	__atomic_add_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	if (!snapshot(t, seen, l)) {
		/* freed meanwhile */
	} else if (__atomic_load_n(l->epoch_word, __ATOMIC_SEQ_CST) !=
		   l->epoch) {
		*ns = l->estimate;
		done = true;
	} else if (ended) {
		done = read(l, ns, learn);
	}
	__atomic_sub_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	return done;
}

unsigned vgpu_inflight_reap(int gpu, bool ended, vgpu_inflight_read_fn *read,
			    vgpu_inflight_learnt_fn *learnt)
{
	unsigned n = 0;

	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE), ns;
		struct vgpu_inflight_launch l;
		bool learn;

		if ((w & 3) != ARMED ||
		    !read_one(t, w, ended, read, &l, &ns, &learn))
			continue;
		if (!cas(&t->word, &w, (w & ~3ull) | CLAIMED))
			continue;	/* its holder read it meanwhile */
		/* Claimed: the launch stays its holder's until freed below;
		 * what the holder charged since the copy (it ran past its
		 * estimate) is read again. */
		l.estimate = LD(t->estimate);
		if (l.slot && ns != l.estimate)
			vgpu_throttle_correct(l.slot, l.estimate, ns);
		/* Charged; a retirement's charge meanwhile is the holder's
		 * to fold (probe_fold, measure.c), as when it reads it. */
		if (l.slot && l.probe_at)
			vgpu_throttle_probe_end(l.slot, l.probe_at);
		if (learnt)
			learnt(&l, ns, learn);
		__atomic_store_n(LD(t->behalf), ns + 1, __ATOMIC_RELEASE);
		give_lane(t);
		__atomic_store_n(&t->word, (w & ~3ull) | FREE,
				 __ATOMIC_RELEASE);
		freed(gpu);
		n++;
	}
	return n;
}

uint64_t vgpu_inflight_next_due(int gpu)
{
	uint64_t due = UINT64_MAX;

	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE), d;

		if ((w & 3) != ARMED)
			continue;
		d = LD(t->issued) + LD(t->estimate);
		if (d < due)
			due = d;
	}
	return due;
}

/* What t's launch's start event says (ARMED, word w): event_query's
 * answer, or START_GONE when the token moved on or its context was torn
 * down. Its events are not freed meanwhile (a reader, as in read_one). */
#define START_GONE 2

static int start_of(struct token *t, uint64_t w, const struct vgpu_prim *P)
{
	struct vgpu_inflight_launch l;
	int q = START_GONE;

	__atomic_add_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	if (snapshot(t, w, &l) &&
	    __atomic_load_n(l.epoch_word, __ATOMIC_SEQ_CST) == l.epoch)
		q = P->event_query(l.start);
	__atomic_sub_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	return q;
}

bool vgpu_inflight_any_running(int gpu, const struct vgpu_prim *P)
{
	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE);

		if ((w & 3) == ARMED && start_of(t, w, P) == VGPU_PRIM_DONE)
			return true;
	}
	return false;
}

/* Each token's word when a waiter found its launch not started after
 * the stall (vgpu_inflight_mark_stalled), + 1; 0: none. A token taken
 * again has another generation, so a mark holds for one launch only. */
static uint64_t stalled[VGPU_MAX_DEVICES][TOKENS];

/* Whether t's launch (ARMED, word w) has not started, its context live. */
static bool unstarted(struct token *t, uint64_t w, const struct vgpu_prim *P)
{
	int q = start_of(t, w, P);

	return q != VGPU_PRIM_DONE && q != START_GONE;
}

void vgpu_inflight_mark_stalled(int gpu, const struct vgpu_prim *P)
{
	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE);

		if ((w & 3) == ARMED && unstarted(t, w, P))
			__atomic_store_n(&stalled[gpu][i], w + 1,
					 __ATOMIC_RELAXED);
	}
}

bool vgpu_inflight_all_stalled(int gpu, const struct vgpu_prim *P)
{
	for (int i = 0; i < TOKENS; i++) {
		struct token *t = &tokens[gpu][i];
		uint64_t w = __atomic_load_n(&t->word, __ATOMIC_ACQUIRE);

		if ((w & 3) != ARMED ||
		    __atomic_load_n(&stalled[gpu][i], __ATOMIC_RELAXED) !=
			    w + 1 ||
		    !unstarted(t, w, P))
			return false;
	}
	return true;
}

void vgpu_inflight_read_begin(void)
{
	__atomic_add_fetch(&readers, 1, __ATOMIC_SEQ_CST);
}

void vgpu_inflight_read_end(void)
{
	__atomic_sub_fetch(&readers, 1, __ATOMIC_SEQ_CST);
}

void vgpu_inflight_quiesce(void)
{
	while (__atomic_load_n(&readers, __ATOMIC_SEQ_CST))
		sched_yield();
}

void vgpu_inflight_fork_child(void)
{
	/* The parent's lanes stay the parent's: the child gives back none. */
	for (int g = 0; g < VGPU_MAX_DEVICES; g++)
		for (int i = 0; i < TOKENS; i++) {
			tokens[g][i].word &= ~3ull;	/* FREE */
			tokens[g][i].lane = -1;
		}
	for (int g = 0; g < VGPU_MAX_DEVICES; g++)
		waiting[g] = 0;
	memset(stalled, 0, sizeof(stalled));
	readers = 0;
}

/* Whether t's launch (ARMED, word w) is shown as watched at now: it
 * runs (its start event has completed), or was made less than
 * LANE_UNSTARTED_NS ago. One that waits longer for something (a host
 * function, another process's work) is not: its lane is taken over, and
 * the tenant's other processes go on. */
static bool lane_live(struct token *t, uint64_t w, uint64_t now,
		      const struct vgpu_prim *P)
{
	struct vgpu_inflight_launch l;
	bool live = true;

	__atomic_add_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	if (snapshot(t, w, &l) &&
	    __atomic_load_n(l.epoch_word, __ATOMIC_SEQ_CST) == l.epoch &&
	    now > l.issued && now - l.issued >= VGPU_THROTTLE_LANE_UNSTARTED_NS)
		live = P->event_query(l.start) == VGPU_PRIM_DONE;
	__atomic_sub_fetch(&readers, 1, __ATOMIC_SEQ_CST);
	return live;
}

unsigned vgpu_inflight_lanes_watch(uint64_t now, const struct vgpu_prim *P,
				   vgpu_inflight_read_fn *read,
				   vgpu_inflight_learnt_fn *learnt)
{
	unsigned held = 0;

	for (int g = 0; g < VGPU_MAX_DEVICES; g++) {
		bool wanted = false;

		for (int i = 0; i < TOKENS; i++) {
			struct token *t = &tokens[g][i];
			uint64_t w = __atomic_load_n(&t->word,
						     __ATOMIC_ACQUIRE);
			int lane = LD(t->lane);
			struct vgpu_slot *slot = LD(t->lane_slot);

			if (lane < 0 || (w & 3) == FREE)
				continue;
			held++;
			if ((w & 3) == ARMED && !lane_live(t, w, now, P))
				continue;
			/* Taken over (its process seemed gone): given back
			 * by nobody. */
			if (!vgpu_throttle_lane_beat(slot, lane, LD(t->tag),
						     now))
				__atomic_compare_exchange_n(&t->lane, &lane, -1,
							    false,
							    __ATOMIC_ACQ_REL,
							    __ATOMIC_ACQUIRE);
			wanted |= vgpu_throttle_lane_wanted(slot, now);
		}
		if (wanted)
			vgpu_inflight_reap(g, true, read, learnt);
	}
	return held;
}
