/* measure_internal.h - what the parts of the measuring core share:
 * measure.c (a launch: its admission, tokens and probe, a thread's state
 * per context), measure_read.c (the estimates, placing events on the
 * host's clock, reading launches and charging them, settling the unread
 * ones at an estimate), measure_end.c (synchronisation, a context
 * retired or forgotten, exits, fork), measure_park.c (launches given up
 * on, and orphans) and measure_watch.c (the watch thread on the probe,
 * the lanes and the orphans). See measure.h for the steps.
 * The names below are the core's own (vgpu__m_), not an interface. */
#ifndef VGPU_MEASURE_INTERNAL_H
#define VGPU_MEASURE_INTERNAL_H

#include "measure.h"

#define RING	VGPU_MEASURE_RING
#define CTXS	VGPU_MEASURE_CTXS
#define KINDS	VGPU_MEASURE_KINDS

/* The driver, the clock and sleeping, reached only through the primitives
 * (prim.h): a copy set by vgpu_measure_use before any launch, so that a
 * call through it costs one load, as a call through the front end's own
 * table of the driver does. */
extern struct vgpu_prim vgpu__m_prim;
#define P vgpu__m_prim

/* ---- measure.c ------------------------------------------------------------ */

/* Whether c's context may have been torn down since c was made: then its
 * handles may be freed, or name another context's objects. */
bool vgpu__m_stale(const struct vgpu_measure_ctx *c);

/* ---- measure_read.c ------------------------------------------------------- */

/* What a launch is admitted with: its function's or graph's recent time,
 * else this thread's average in the context, else the process's. */
uint64_t vgpu__m_estimate(const struct vgpu_measure_ctx *c,
			  const struct vgpu_measure_gpu *g, int kind,
			  uint64_t key);

/* Whether c's reference is to be read again at now; reads it (false:
 * the driver failed). */
bool vgpu__m_cal_due(const struct vgpu_measure_ctx *c, uint64_t now);
bool vgpu__m_calibrate(struct vgpu_measure_ctx *c);

/* The i-th measured launch of c not yet charged (0: the oldest). */
struct vgpu_measure_done *vgpu__m_done_at(struct vgpu_measure_ctx *c,
					  unsigned i);

/* Charges c's measured launches that ended CHARGE_DELAY_NS before now
 * (all, if force). */
void vgpu__m_charge_done(struct vgpu_measure_ctx *c, uint64_t now,
			 bool force);

/* The slot of c's launch in flight at position i (0: the oldest). */
static inline unsigned vgpu__m_slot(const struct vgpu_measure_ctx *c,
				    unsigned i)
{
	unsigned pos = (c->head + i) % RING;

	return c->perm[pos] ^ pos;
}

#define AT(c, i) (&(c)->ring[vgpu__m_slot((c), (i))])

/* The i-th of c's launches not yet read (0 .. count + npark - 1): the
 * ring's, oldest first, then the park's. */
static inline struct vgpu_measure_pending *
vgpu__m_unread(struct vgpu_measure_ctx *c, unsigned i)
{
	return i < c->count ? AT(c, i) : &c->park[i - c->count];
}

/* Whether c's oldest launch in flight is one given up on: then they all
 * are (vgpu__m_stuck_behind()). */
static inline bool vgpu__m_head_stuck(const struct vgpu_measure_ctx *c)
{
	return c->count && AT(c, 0)->stuck;
}

/* c's launches in flight that are not given up on. */
static inline unsigned vgpu__m_live(const struct vgpu_measure_ctx *c)
{
	return c->count - c->nstuck;
}

/* c's oldest launch in flight is given up on (measure.c, wait_oldest()):
 * marked, its token and lane given back (the launches that wait for one
 * would otherwise wait for it again), parked (out of the ring: PARK_MAX)
 * or, with the park full, moved behind the others in the ring; the
 * process's launches with no estimate at all go at STUCK_EST_NS from
 * then on (vgpu__m_estimate). It is read and charged when it ends. */
void vgpu__m_give_up(struct vgpu_measure_ctx *c);
/* c's oldest launch in flight moved behind the others in the ring (its
 * slot and the first free one swap; the head moves on). */
void vgpu__m_oldest_last(struct vgpu_measure_ctx *c);


/* ---- measure_park.c --------------------------------------------------------- */

/* Moves c's oldest launch, given up on (its token given back: no other
 * thread holds its address), out of the ring into the park; false when
 * the park is full (PARK_MAX) or cannot grow. */
bool vgpu__m_park(struct vgpu_measure_ctx *c);
/* Reads c's parked launches that have ended: at most PARK_BATCH of them
 * (a query each), in turn, no more often than PARK_POLL_NS (now: the
 * host's time). */
void vgpu__m_poll_park(struct vgpu_measure_ctx *c, uint64_t now);
/* The memory of c's park back (its launches read or settled; a child
 * after fork, whose parent's they are). */
void vgpu__m_park_free(struct vgpu_measure_ctx *c);

struct vgpu__m_orphan_refs {		/* a retirement's, zeroed */
	struct orphan_ref *ref[2];	/* c's references, once moved */
};
/* Hands p, an unread launch of c (its context live, not a probe), to the
 * process's watch thread, which reads it when it ends and charges it what
 * it ran, placed as c would have placed it (vgpu__m_orphans_poll); p is
 * marked orphaned (its events are the watch's now, and the reference
 * event it is placed against too: c's slot for it is emptied, refs
 * names its holder for c's other launches). False when it cannot be (a
 * probe, c's context torn down, ORPHANS_MAX): then it is settled as
 * before. c is dropped after its launches are handed over. */
bool vgpu__m_orphan(struct vgpu_measure_ctx *c, struct vgpu_measure_pending *p,
		    struct vgpu__m_orphan_refs *refs);
/* One pass of the watch over the orphans (those of a context torn down
 * since charged their share of the time since the oldest was issued; at
 * most ORPHANS_BATCH of the others asked, in turn); whether any is
 * left. */
bool vgpu__m_orphans_poll(void);
/* At the process's exit, the watch stopped: the rest at what they were
 * charged (the driver discards what has not run). */
void vgpu__m_orphans_settle(void);
void vgpu__m_orphans_fork_child(void);

/* p's token back to its process, without its lane (measure_read.c). */
void vgpu__m_token_fold(struct vgpu_measure_pending *p);

/* ---- measure_read.c (reading one) ------------------------------------------ */

/* Reads launch p of c (the oldest in its ring, or one parked), its end
 * event found complete (q: the query's answer, VGPU_PRIM_DONE or _ERROR)
 * before the host's time seen: places it on the host's clock, records its
 * end in the GPU's timeline, and gives its events back. */
void vgpu__m_read_launch(struct vgpu_measure_ctx *c,
			 struct vgpu_measure_pending *p, int q, uint64_t seen);

/* Moves the launches given up on at the front of c's ring behind the
 * others, unless they have ended (then they are read in turn), so that
 * the launches behind them are read as they end. */
void vgpu__m_stuck_behind(struct vgpu_measure_ctx *c);

/* How long a wait for c's oldest launch (c->count > 0) sleeps at now,
 * polling: until it is due, then a quarter of how late it is. */
uint64_t vgpu__m_until_oldest(const struct vgpu_measure_ctx *c, uint64_t now);

/* Takes the oldest launch of c off the ring if it has completed; false
 * if it has not. Never blocks. */
bool vgpu__m_settle_oldest(struct vgpu_measure_ctx *c);

/* Reads c's completed launches and charges those due; never blocks.
 * Returns now, read after the queries. */
uint64_t vgpu__m_collect(struct vgpu_measure_ctx *c);

/* Another thread's launch read in its holder's place, and what is learnt
 * from it once claimed (vgpu_inflight_reap's callbacks). */
bool vgpu__m_read_in_place(const struct vgpu_inflight_launch *l,
			   uint64_t *ns, bool *learn);
void vgpu__m_learnt_in_place(const struct vgpu_inflight_launch *l,
			     uint64_t ns, bool learn);

/* Reads g's launches holding tokens in their holders' place
 * (vgpu_inflight_reap): those torn down, and those ended if `ended`. */
unsigned vgpu__m_reap(const struct vgpu_measure_gpu *g, bool ended);

/* c's unread launches settled without a driver call, each at its
 * estimate or its share of the time since the oldest was issued, the
 * share at most `most`. */
void vgpu__m_settle_unread(struct vgpu_measure_ctx *c, uint64_t now,
			   uint64_t most);

/* ---- measure_end.c -------------------------------------------------------- */

/* ctx's teardown count (in buckets: a collision only forgets more), and
 * c's context's, for a launch read after c is gone. */
unsigned *vgpu__m_epoch_of(const struct vgpu_prim_ctx *ctx);
const unsigned *vgpu__m_epoch_word(const struct vgpu_measure_ctx *c);

/* Ending c: dropped without a driver call (forget), or its launches read
 * until deadline, the rest handed to the watch, and its events given
 * back (retire). */
void vgpu__m_forget(struct vgpu_measure_ctx *c);
void vgpu__m_retire(struct vgpu_measure_ctx *c, uint64_t deadline);

/* ---- measure_watch.c ------------------------------------------------------ */

/* A probe that went on g at now, holding a token (so that another thread
 * can read it in its holder's place): watched until it is read. */
void vgpu__m_watch_probe(const struct vgpu_measure_gpu *g, uint64_t now);
/* A launch took a lane: the watch runs while the process holds one (one
 * load when it does already). */
void vgpu__m_watch_lanes(void);
/* In a child after fork: no watch runs (the parent's thread is not the
 * child's). */
void vgpu__m_watch_fork_child(void);

#endif
