/* measure.h - what a capped launch really took on the GPU, and every
 * decision the compute share makes around it (docs/compute.md).
 *
 * The front end hands each capped launch to vgpu_measure_launch, with a
 * function that makes it. The core then, on the launching thread:
 *   1. reads the thread's earlier launches whose end has completed (never
 *      blocking), places them on the host's clock against a reference
 *      event, records their ends in the GPU's timeline (timeline.h) and,
 *      once every process has had time to record the ends before them,
 *      charges each the part of its interval it ran (throttle.h);
 *   2. chooses the launch's estimate (its function's or graph's recent
 *      time, else the thread's average in the context, else the
 *      process's) and waits for admission against the tenant's bucket;
 *      a launch with no estimate at all goes alone (the probe);
 *   3. records an event, makes the launch, records another, and keeps
 *      the pair in a ring of VGPU_MEASURE_RING per thread and context.
 * It settles what is left when a thread exits, when the process exits
 * and when a context is torn down.
 *
 * The driver is reached only through prim.h's measuring primitives, the
 * clock and sleeping too, so every decision runs against a fake driver and
 * a fake clock (tests/vgpu/measure_fake.c, test_measure*.c).
 *
 * Threads: a thread's state (struct vgpu_measure_thread) is its own, used
 * only by it (the front end keeps it in thread-local storage); the
 * per-function and per-process estimates are shared, and atomic.
 */
#ifndef VGPU_MEASURE_H
#define VGPU_MEASURE_H

#include "inflight.h"
#include "prim.h"

#include <stdbool.h>
#include <stdint.h>

struct vgpu_ledger;
struct vgpu_slot;

#define VGPU_MEASURE_RING	16	/* room for launches in flight */
/* Launches in flight at once per thread and context. Two keep the device
 * fed (the next kernel is queued while one runs: 86% of the device with
 * 100 us kernels under a 90% cap, against 85% with one and 86% with 16);
 * more let launches admitted on an estimate too low (a function's long
 * kernel after its short ones) run back to back before any is read: with
 * 16, 15 launches of 100 ms after 40 of 20 us took a 1-second window to
 * 100% under a 30% cap, 40% with 4, 30% with 2 (escape-mixed-30pct). */
#define VGPU_MEASURE_DEPTH	2
/* An elastic tenant alone on its GPU has no share to escape: its launches
 * are lent the GPU. It may keep more launches in flight (up to the ring),
 * while their estimates add up to at most this much, so that a host
 * thread late to wake (a loaded machine) does not leave the GPU idle; when
 * a competitor arrives, what it has queued is at most one burst. */
#define VGPU_MEASURE_LENT_QUEUE_NS	VGPU_THROTTLE_BURST_NS
/* An opportunistic tenant keeps launches in flight (up to the ring) while
 * their estimates add up to at most this much, one at least: enough to
 * keep the GPU fed when it is alone, little for a guaranteed tenant's
 * first kernel to wait behind once it launches (docs/compute.md). */
#define VGPU_MEASURE_OPP_QUEUE_NS	4000000ull	/* 4 ms */
#define VGPU_MEASURE_CTXS	4	/* contexts a thread keeps state for */
/* Context teardowns are counted per handle, in this many buckets. */
#define VGPU_MEASURE_EPOCHS	256

/* A measured launch is charged this long after its end, once every
 * process has had time to record the launches that ended before it. */
#define VGPU_MEASURE_CHARGE_DELAY_NS	20000000ull	/* 20 ms */
/* The reference event is recorded again this often (the driver's elapsed
 * time loses precision as the distance from it grows). */
#define VGPU_MEASURE_CALIBRATE_NS	4000000000ull	/* 4 s */
/* Calibration's tries stop after this long; a wait for one spins this
 * long before it yields. */
#define VGPU_MEASURE_CAL_BUDGET_NS	1000000ull
#define VGPU_MEASURE_CAL_SPIN_NS	50000ull
/* A reference read in a window wider than CAL_NARROW_NS (the host ran the
 * polling thread late: a stream's first wake-up, a loaded machine) places
 * each of the thread's launches up to half that window off, and the ends
 * it records then cut other tenants' charges at the wrong place. It is
 * read again CAL_RETRY_NS later, then twice as long after each reading
 * that leaves it wide (up to CALIBRATE_NS), and replaced only by a
 * narrower one. */
#define VGPU_MEASURE_CAL_NARROW_NS	10000ull	/* 10 us */
#define VGPU_MEASURE_CAL_RETRY_NS	20000000ull	/* 20 ms */
/* A launch read longer than its estimate this soon after its end, beside
 * another tenant, may have waited behind that tenant's kernel whose end
 * its thread has not recorded yet: it stays charged as it was, and is
 * read again once an end recorded since cuts it, or after this long (it
 * ran that long); its thread's next launch waits for that
 * (docs/compute.md, "Several tenants at once"). */
#define VGPU_MEASURE_READ_GRACE_NS	2000000ull	/* 2 ms */
/* A thread's next launch waits for a launch read early only if it was
 * read this much longer than it is charged (measure.c,
 * hold_for_review()). */
#define VGPU_MEASURE_HOLD_NS		1000000ull	/* 1 ms */
/* The next launch of a thread holding one read early asks this often
 * whether it has been resolved. */
#define VGPU_MEASURE_REVIEW_POLL_NS	50000ull	/* 50 us */
/* A launch narrows its reference's window (a reading's bounds) with this
 * much slack: the driver's elapsed times are floats of milliseconds. */
#define VGPU_MEASURE_REF_SLACK_NS	1000ull
/* A launch told to wait while its thread has launches in flight wakes
 * this long after the oldest one's estimated end, then this often, to read
 * it (measure.c, until_end()). */
#define VGPU_MEASURE_END_POLL_NS	200000ull	/* 200 us */
/* The longest sleep of a launch told to wait (it then asks again). */
#define VGPU_MEASURE_MAX_SLEEP_NS	2000000ull
/* A launch waiting for the tenant's probe to be read asks this often
 * (how long it waits: VGPU_THROTTLE_PROBE_HOLD_NS, throttle.h). */
#define VGPU_MEASURE_PROBE_POLL_NS	200000ull
/* A launch waiting for one of its process's tokens (inflight.h) that does
 * not block for a running launch sleeps until a token is given back, or
 * until the first launch holding one is due to end, at least MIN_WAIT_NS
 * and at most POLL_NS at a time; POLL_NS once every holder is past due
 * (measure.c, take_token()). */
#define VGPU_MEASURE_TOKEN_POLL_NS	100000ull	/* 100 us */
/* The watch thread's pass while it shows the process's lanes held
 * (throttle.h, LANE_STALE_NS 50 ms), and how long it stays once the
 * process holds none. */
#define VGPU_MEASURE_LANE_POLL_NS	1000000ull	/* 1 ms */
#define VGPU_MEASURE_LANE_LINGER_NS	200000000ull	/* 200 ms */
/* A wait for a lane sleeps at most this long, unless a lane given back
 * wakes it (one taken over, its holder gone, wakes none). 1 ms and
 * 200 us measured alike with the process's own launches' due times
 * bounding the sleep (4 processes of a 70% tenant, 100 us kernels:
 * 61.5 and 63.2%). */
#define VGPU_MEASURE_LANE_SLEEP_NS	200000ull	/* 200 us */
#define VGPU_MEASURE_TOKEN_MIN_WAIT_NS	10000ull	/* 10 us */
/* A launch that has waited this long for a token while none of the
 * launches holding them runs goes without one (measure.c, take_token()). */
#define VGPU_MEASURE_TOKEN_STALL_NS	50000000ull	/* 50 ms */
/* A launch that has waited this long for a token goes without one,
 * whatever the launches holding them do (measure.c, take_token()). */
#define VGPU_MEASURE_TOKEN_MAX_WAIT_NS	1000000000ull	/* 1 s */
/* What a launch is admitted with when its process has no estimate at
 * all and its thread's oldest launch was given up on (it waits for
 * something, maybe for this thread): not a probe, which would be held
 * and retired, charged as running, each PROBE_HOLD_NS (measure.c,
 * wait_oldest()). Corrected once read, as any estimate. */
#define VGPU_MEASURE_STUCK_EST_NS	1000000ull	/* 1 ms */
/* A thread waiting for its own oldest launch gives it up once it has not
 * started after TOKEN_STALL_NS, or has run this long (a kernel spinning
 * for a later launch of the thread; a long kernel is waited for, as the
 * depth asks, up to this: measure.c, wait_oldest()). */
#define VGPU_MEASURE_RUNNING_MAX_WAIT_NS	10000000000ull	/* 10 s */
/* Launches given up on leave the ring for the thread's park in that
 * context (measure_read.c, vgpu__m_give_up()), up to this many, so that a
 * thread may queue more launches behind a wait for its own later work
 * than the ring holds: with them kept in the ring, each launch past 15
 * waited FULL_WAIT_NS (20 kernels behind a value the thread wrote next:
 * 50 s). Read as they end, PARK_BATCH at a time at most every
 * PARK_POLL_NS (a query each). */
#define VGPU_MEASURE_PARK_MAX		1024
#define VGPU_MEASURE_PARK_POLL_NS	1000000ull	/* 1 ms */
#define VGPU_MEASURE_PARK_BATCH		64
/* Streams a thread remembers per context as blocked behind a launch given
 * up on before it started (measure.c, behind_blocked()): with one, launches
 * alternating between two streams behind two waits waited 50 ms each (200
 * in 9.9 s, a hostile review). */
#define VGPU_MEASURE_BLOCKED		4
/* Launches still unread when their thread exits, or its state in a
 * context is evicted, are read and charged by the process's watch thread
 * when they end (measure_park.c), up to this many in the process (past
 * that, as before; a hostile review filled 4,096 with launches behind a
 * wait never released, and later exits were charged their wait): the
 * exit's wait was the most they were charged, and 500 kernels of 20 ms
 * queued behind a wait that another thread released after the exit ran
 * 10 s for a 2 s charge (45% of a device under a 30% cap). */
#define VGPU_MEASURE_ORPHANS_MAX	65536
/* The watch asks this many orphans at most per pass (about every ms), in
 * turn: with 4,096 stuck for good, it queried every one each pass. */
#define VGPU_MEASURE_ORPHANS_BATCH	256
/* With the ring full of launches given up on (the park full, or no
 * memory for it), a launch waits this long for one of them to end, then
 * goes unmeasured, charged the wait. */
#define VGPU_MEASURE_FULL_WAIT_NS	10000000000ull	/* 10 s */
/* A thread that exits waits this long for its launches still running. */
#define VGPU_MEASURE_EXIT_WAIT_NS	2000000000ull

/* What the estimates are kept apart for. */
enum vgpu_measure_kind {
	VGPU_MEASURE_KERNEL,
	VGPU_MEASURE_GRAPH,		/* a whole graph, measured as one */
	VGPU_MEASURE_KINDS
};

/* A GPU as the measuring sees it: the front end keeps one per device,
 * set before the device's first launch and unchanged after (prim->gpu). */
struct vgpu_measure_gpu {
	int ordinal;			/* 0 .. VGPU_MAX_DEVICES - 1 */
	struct vgpu_ledger *ledger;	/* its timeline */
	struct vgpu_slot *slot;		/* the tenant's bucket */
};

/* One launch, as the front end hands it over. */
struct vgpu_measure_call {
	uint64_t key;		/* its function or graph (0: none) */
	int kind;		/* enum vgpu_measure_kind */
	struct vgpu_prim_stream *stream;
	bool per_thread;	/* a per-thread-stream entry point */
	/* Makes the launch: 0 when made, else the driver's error, which
	 * vgpu_measure_launch returns as it is. */
	int (*launch)(const void *arg);
	const void *arg;
	/* Called around the launch and the events that time it, after its
	 * admission (NULL: nothing): the front end's gate, which may wait
	 * there (intercept/control.c) but never on the throttle. */
	void (*enter)(void);
	void (*leave)(void);
};

/* ---- a thread's state: the front end allocates it (zeroed), the core
 * alone reads and writes its fields ---------------------------------------- */

struct vgpu_measure_pending {		/* a launch whose end is not read */
	struct vgpu_prim_event *start, *end;
	uint64_t estimate;		/* what the bucket was charged */
	uint64_t admitted;		/* the estimate it was admitted with */
	bool recorded;			/* both its events were recorded */
	uint64_t key;
	uint64_t probe_at;		/* went as the probe, its mark; 0: not */
	bool probe_folded;		/* a retirer's charge is in estimate */
	const struct vgpu_measure_gpu *gpu;
	int kind;
	int ref;			/* the reference it is placed against */
	uint64_t issued;		/* host time just before the launch */
	bool stuck;			/* given up on (measure.c,
					 * wait_oldest()) */
	struct vgpu_prim_stream *stream;	/* where it was launched */
	bool per_thread;
	bool orphaned;			/* handed to the process's watch */
	struct vgpu_inflight_mark tok;	/* its hold on the process's
					 * launches in flight (inflight.h) */
};

struct vgpu_measure_done {		/* read, to be charged */
	uint64_t start, end;		/* host time, ns */
	uint64_t key;
	uint64_t estimate;		/* what the bucket is charged so far */
	uint64_t own;			/* its own time when read (own_time) */
	uint64_t late;			/* the timeline's late count then */
	const struct vgpu_measure_gpu *gpu;
	int kind;
	unsigned sm_num, sm_den;	/* SM-weighted (a green context) */
	bool early;			/* read too soon to tell (READ_GRACE) */
};

struct vgpu_measure_ctx {		/* one thread's, in one context */
	struct vgpu_prim_ctx *ctx;
	unsigned epoch;			/* its context's teardowns, when made */
	uint64_t used;			/* last use, for eviction */
	struct vgpu_prim_event *free_ev[2 * VGPU_MEASURE_RING];
	int nfree;
	/* The launches in flight, oldest first, at positions head ..
	 * head + count - 1 (mod RING) of a permutation of the slots: the
	 * slot of position i is perm[i] ^ i (zeroed: in place), so that one
	 * given up on moves behind the others without moving in memory
	 * (its token's reader holds its address). */
	struct vgpu_measure_pending ring[VGPU_MEASURE_RING];
	unsigned char perm[VGPU_MEASURE_RING];
	unsigned head, count;
	unsigned nstuck;		/* of them, given up on */
	/* Launches given up on, out of the ring (malloc'd as needed, up to
	 * PARK_MAX), read as they end: npark of park_cap, polled from
	 * park_rr on at park_next; park_probes of them probes. */
	struct vgpu_measure_pending *park;
	unsigned npark, park_cap, park_rr, park_probes;
	uint64_t park_next;
	/* The streams of the last launches given up on before they started
	 * (VGPU_MEASURE_BLOCKED of them, the oldest replaced), each with its
	 * start event while the launch is parked or in the ring (NULL: none):
	 * a later launch on that stream cannot start before it does. */
	struct vgpu_measure_blocked {
		struct vgpu_prim_stream *stream;
		bool per_thread;
		struct vgpu_prim_event *start;
	} blocked[VGPU_MEASURE_BLOCKED];
	unsigned blocked_next;
	struct vgpu_measure_done done[2 * VGPU_MEASURE_RING];
	unsigned done_head, done_count;
	unsigned early;			/* done entries still early */
	uint64_t avg_ns[VGPU_MEASURE_KINDS];	/* running average; 0: none */
	unsigned sm_num, sm_den;	/* SMs held of the device's; 0: all */
	const struct vgpu_measure_gpu *gpu;	/* prim->gpu's, once known */
	struct vgpu_prim_stream *cal_stream;
	struct vgpu_prim_event *ref_ev[2];
	uint64_t ref_ns[2];		/* host time each completed at */
	uint64_t ref_err[2];		/* half the window it lies in */
	uint64_t ref_lo[2], ref_hi[2];	/* the window, narrowed by launches */
	int ref;			/* the current one; -1: none */
	uint64_t cal_next;		/* a wide one is read again then */
	uint64_t cal_retry;		/* and the wait after that */
};

struct vgpu_measure_thread {
	struct vgpu_measure_ctx ctx[VGPU_MEASURE_CTXS];
	uint64_t clock;			/* uses, for eviction */
};

/* ---- measure.c ------------------------------------------------------------ */

/* The front end's primitives (all the measuring ones set), copied once
 * before the first launch is handed over. */
void vgpu_measure_use(const struct vgpu_prim *prim);

/* Admits, makes and measures one launch of thread t, in its current
 * context or, with none, in its stream's (made current for the launch).
 * A launch outside any context, or whose GPU is not measured
 * (prim->gpu), is made at once and not charged. Returns what
 * call->launch returned. May sleep (prim->sleep), holding nothing. */
int vgpu_measure_launch(struct vgpu_measure_thread *t,
			const struct vgpu_measure_call *call);

/* t has just seen work complete (a synchronisation, or a query that
 * found it done): the ends of its launches that completed are read and
 * recorded in the GPU's timeline now, not at its next launch, which may
 * be far off. Never blocks. */
void vgpu_measure_synchronised(struct vgpu_measure_thread *t);

/* t's thread is exiting: in each context, its launches are waited for
 * (up to VGPU_MEASURE_EXIT_WAIT_NS in all) and charged as measured, those
 * still running then at least their share of the time since they were
 * issued; its events and stream are given back. A context torn down since
 * is not touched: its launches are settled without a driver call. */
void vgpu_measure_thread_exit(struct vgpu_measure_thread *t);

/* The process is exiting and the driver may be gone: t's launches are
 * settled with no driver call (those not read at least their share of the
 * time since they were issued) and t forgotten. */
void vgpu_measure_process_exit(struct vgpu_measure_thread *t);

/* ctx is about to be destroyed, reset or released for the last time
 * (NULL: a context not known, so any): every thread's state made in it
 * is dropped, without a driver call, when that thread next uses it;
 * other contexts' state and every estimate stay. Any thread. */
void vgpu_measure_ctx_teardown(struct vgpu_prim_ctx *ctx);

/* In a forked child: t (the thread that forked) holds the parent's
 * events, which are not the child's: forgotten. */
void vgpu_measure_fork_child(struct vgpu_measure_thread *t);

/* One pass of the watch on this process's probe (prim->probe_watch runs
 * it every VGPU_MEASURE_PROBE_POLL_NS from a thread of its own): reads
 * the probe in its holder's place once it has ended, so that the tenant's
 * launches it holds (vgpu_throttle_admit_held) go when it ends, not when
 * the job's threads next reach the shim (a process that launched its
 * first kernel and then worked on the host for a second held its
 * tenant's other processes that second). True while there is more to
 * watch: the probe is in flight and went less than PROBE_HOLD_NS ago.
 * Any thread; never blocks. */
bool vgpu_measure_probe_poll(void);

/* The front ends' prim->probe_watch: a thread of the library's own
 * (thread.c) runs vgpu_measure_probe_poll every PROBE_POLL_NS until it
 * returns false; one at a time; never blocks. */
void vgpu_measure_watch(void);

/* At exit, before the ledgers are left: the watch stops, a pass in
 * progress waited for; false if it did not end within a second (then the
 * ledgers are left as a killed process leaves them). */
bool vgpu_measure_watch_stop(void);

#endif
