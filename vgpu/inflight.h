/* inflight.h - a process's capped launches in flight on one GPU, all its
 * threads together (docs/compute.md, "Launches in flight").
 *
 * A launch is admitted on an estimate of its length, and what it really
 * took is known only once its end is read. Each thread keeps at most
 * VGPU_MEASURE_DEPTH launches in flight, but nothing else bounded the
 * process: eight threads that switched a function from 20 us kernels to
 * 100 ms ones at once had sixteen long kernels admitted on the short
 * estimate, and the device ran them back to back (98% of a 1-second
 * window under a 30% cap). So a capped launch also holds one of the
 * process's VGPU_INFLIGHT_TOKENS tokens for the GPU while it is admitted
 * and until its end is read: a process keeps as many launches of unknown
 * length in flight as one thread does (two), whatever its threads.
 *
 * A token's holder may be a thread that does not come back to read its
 * launch for a long time (PyTorch's autograd thread between backward
 * passes). Another thread waiting for a token reads it in its place
 * (vgpu_inflight_reap): once the launch's end has completed, it is
 * charged to the tenant as its holder would charge it, the token freed,
 * and the holder told what was charged when it reads the launch itself
 * (vgpu_inflight_release), so that the launch is paid once.
 *
 * Internal to the core. Lock-free: a token is one word changed by
 * compare-and-swap; reading another thread's events is guarded by a
 * count of readers that a context's teardown waits out before the driver
 * frees them (vgpu_inflight_quiesce).
 */
#ifndef VGPU_INFLIGHT_H
#define VGPU_INFLIGHT_H

#include "prim.h"

#include <stdbool.h>
#include <stdint.h>

/* Launches a process may have in flight on one GPU, all its threads and
 * contexts together (an elastic tenant lent the GPU and an opportunistic
 * one are not held to it: measure.c). Two, as one thread's ring
 * (VGPU_MEASURE_DEPTH): with three, eight threads switching to 300 ms
 * kernels read 90% of a 1-second window under a 30% cap; with two, four
 * threads of a 70% tenant with 100 us kernels beside a 30% one get 62%
 * of the simulated device (69% before; docs/compute.md). */
#define VGPU_INFLIGHT_TOKENS	2

/* A launch's hold on a token (in its measure_pending entry). */
struct vgpu_inflight_mark {
	int tok;			/* -1: none */
	uint32_t gen;			/* the token's generation when taken */
	bool armed;			/* vgpu_inflight_arm made it readable */
	/* What a reaper charged for the launch, + 1 (0: none yet):
	 * written by the reaper, read by the holder only. */
	uint64_t behalf;
	bool lanes_full;		/* the take failed for a lane */
	/* A lane kept past the token's release (vgpu_inflight_release's
	 * keep_lane): -1 none. */
	int lane;
	unsigned lane_tag;
	struct vgpu_slot *lane_slot;
};

/* What a reaper needs to read a launch in its holder's place: its events,
 * the reference its holder places them against on the host's clock, and
 * what it was admitted with. */
struct vgpu_inflight_launch {
	struct vgpu_prim_event *start, *end;
	struct vgpu_prim_event *ref;	/* NULL: none */
	uint64_t ref_ns;		/* host time ref completed at */
	uint64_t issued;		/* host time before the launch call */
	const unsigned *epoch_word;	/* its context's teardown count */
	unsigned epoch;			/* its value when the events were made */
	uint64_t estimate;		/* what the bucket was charged for it */
	uint64_t key;			/* its function or graph */
	int gpu, kind;			/* its GPU's ordinal, measure.h kind */
	uint64_t probe_at;		/* the tenant's probe's word; 0: none */
	struct vgpu_slot *slot;		/* the tenant's bucket */
	struct vgpu_ledger *ledger;	/* the GPU's timeline */
	unsigned sm_num, sm_den;	/* a green context's share; 0: all */
};

/* Reads a launch in its holder's place (the measuring's, measure_read.c):
 * false while its end has not completed, else true with *ns what it is to
 * be charged, and *learn whether its function's estimate is to follow
 * it. Called while its events cannot be freed; its holder may have read
 * it meanwhile and recorded them again for another launch, so nothing is
 * to be learnt from it until the reaper has claimed it (learnt_fn). */
typedef bool vgpu_inflight_read_fn(const struct vgpu_inflight_launch *l,
				   uint64_t *ns, bool *learn);
/* A launch read in its holder's place and claimed: what it took, ns, is
 * charged; learn as read said. */
typedef void vgpu_inflight_learnt_fn(const struct vgpu_inflight_launch *l,
				     uint64_t ns, bool learn);

/* Takes a free token of GPU gpu for one launch and, with slot, a lane of
 * slot's tenant with it (throttle.h) at now: true with *m set, false if
 * all tokens are held or (m->lanes_full) every lane is. A load per token,
 * a compare-and-swap; with slot, a lane's load and compare-and-swap. The
 * lane is given back with the token, by whoever frees it. */
bool vgpu_inflight_take(int gpu, struct vgpu_slot *slot, uint64_t now,
			struct vgpu_inflight_mark *m);

/* The launch holding m has been made and its events recorded: another
 * thread may read it from now on (m->armed). */
void vgpu_inflight_arm(int gpu, struct vgpu_inflight_mark *m,
		       const struct vgpu_inflight_launch *l);

/* The holder keeps reapers off its launch while it charges it what it
 * has run so far (it runs past what it was admitted for): true if it may
 * (then vgpu_inflight_unhold with what the bucket is charged now), false
 * if a reaper has read it already (and charged all of it). True at once
 * for a mark that holds no armed token. */
bool vgpu_inflight_hold(int gpu, const struct vgpu_inflight_mark *m);
void vgpu_inflight_unhold(int gpu, const struct vgpu_inflight_mark *m,
			  uint64_t estimate);

/* Whether a launch holding one of GPU gpu's tokens is running: its start
 * event has completed (through prim's event_query; never blocks). A
 * thread that has waited long for a token while none runs goes without
 * one: the launches holding them wait for something, maybe for work this
 * thread is about to launch (a host function or a stream waiting for
 * another thread's next kernel). */
bool vgpu_inflight_any_running(int gpu, const struct vgpu_prim *prim);

/* The holder gives m's token back (its launch read, failed or settled;
 * nothing if m holds none). Returns what a reaper charged the tenant for
 * the launch in its place, in ns, or UINT64_MAX if none did: then the
 * token was still the launch's. Waits (yielding) while a reaper is in the
 * middle of reading it. m->tok is -1 after. */
uint64_t vgpu_inflight_release(int gpu, struct vgpu_inflight_mark *m);
/* The same, but the token's lane, if it still has one, stays held in m
 * until vgpu_inflight_give_lane(m): the holder gives it back once it has
 * charged what it read (given with the token, another process's launch
 * took it and was admitted before the charge, and three long kernels ran
 * back to back). */
uint64_t vgpu_inflight_release_keep_lane(int gpu,
					 struct vgpu_inflight_mark *m);
void vgpu_inflight_give_lane(struct vgpu_inflight_mark *m);

/* Frees GPU gpu's tokens held by launches whose context was torn down
 * (charged as they were: nothing of them runs any more) and, if ended,
 * reads in their holders' place (through read) the launches holding
 * tokens whose end has completed: each charged what read says (less what
 * the bucket was charged for it already), its token freed, and, if it is
 * the tenant's probe, the probe ended (the tenant's other processes wait
 * for that), then learnt (if not NULL) told. Returns the number of tokens
 * freed. */
unsigned vgpu_inflight_reap(int gpu, bool ended, vgpu_inflight_read_fn *read,
			    vgpu_inflight_learnt_fn *learnt);

/* The count of tokens of GPU gpu given back so far (it moves at each):
 * read before trying to take one, then passed to vgpu_inflight_wait. */
uint32_t vgpu_inflight_seq(int gpu);

/* Sleeps up to ns while no token of GPU gpu has been given back since
 * seq was read, through wait_on (prim.h; NULL: sleep): a token given back
 * wakes one waiter. */
void vgpu_inflight_wait(int gpu, uint32_t seq, uint64_t ns,
			void (*wait_on)(uint32_t *, uint32_t, uint64_t),
			void (*sleep)(uint64_t));

/* When the first of GPU gpu's launches holding tokens is due to end
 * (issued + estimate), UINT64_MAX if none is armed: a thread waiting for a
 * token sleeps until then. Reads no event. */
uint64_t vgpu_inflight_next_due(int gpu);

/* A thread that waited TOKEN_STALL_NS for a token while no holder's
 * launch started (measure.c, take_token()) marks those holders stalled;
 * later waiters go past them at once while every token is held by a
 * launch so marked that has still not started (a second context's or
 * another thread's launches behind the first one's two, queued behind a
 * wait for the thread's later work, waited the stall each: 300 in
 * 15.5 s, a hostile review). */
void vgpu_inflight_mark_stalled(int gpu, const struct vgpu_prim *P);
bool vgpu_inflight_all_stalled(int gpu, const struct vgpu_prim *P);

/* Around a reading of events of a thread that may be gone (the watch's
 * orphans, measure_park.c): counted as a reader, so that a teardown,
 * which moves its context's epoch first, waits for it
 * (vgpu_inflight_quiesce) before the driver frees them. */
void vgpu_inflight_read_begin(void);
void vgpu_inflight_read_end(void);

/* Waits until no thread is reading another's events: called after a
 * context's teardown count moved, and before events of launches that
 * held tokens are destroyed. */
void vgpu_inflight_quiesce(void);

/* The process's watch (measure.c's watch thread) at now, once a
 * millisecond or so: shows each lane its launches hold as watched
 * (vgpu_throttle_lane_beat) while the launch runs or was made less than
 * LANE_STALE_NS / 2 ago, and, while another process of the tenant wants a
 * lane, reads the ended launches holding them in their holders' place
 * (vgpu_inflight_reap). Returns the number of lanes the process holds. */
unsigned vgpu_inflight_lanes_watch(uint64_t now, const struct vgpu_prim *prim,
				   vgpu_inflight_read_fn *read,
				   vgpu_inflight_learnt_fn *learnt);

/* In a child after fork: every token free (the parent's threads and
 * their launches are not the child's). */
void vgpu_inflight_fork_child(void);

#endif
