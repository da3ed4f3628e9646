/* measure_fake.h - the fake driver and fake clock the measuring of
 * launches is tested against (measure_fake.c), shared by test_measure.c
 * (the first launch, estimates, exits, contexts) and test_measure_charge.c
 * (what is charged, the reference, the ring, the launches in flight).
 *
 * The fake GPU runs the kernels of whole-device contexts one at a time,
 * in the order they were made, and those of green contexts beside them; an
 * event completes when the work before it on its stream has. Its clock is
 * the host's (device time = host time), which moves only when the core
 * sleeps (prim->sleep: by the time asked, a yield by YIELD), a query sees
 * an event late, or a test moves it. Several threads are several states driven by
 * the one real thread, each with its own stack of current contexts; while
 * one sleeps, a hook lets the others act.
 */
#ifndef VGPU_TEST_MEASURE_FAKE_H
#define VGPU_TEST_MEASURE_FAKE_H

#include "ledger_test.h"
#include "measure.h"
#include "options.h"
#include "throttle.h"
#include "timeline.h"

#define US (UINT64_C(1000))
#define MS (UINT64_C(1000000))
#define SEC (UINT64_C(1000000000))
#define T0 (100 * SEC)		/* the fake clock's start (0 means never) */
#define YIELD (100 * US)	/* what a yield lets pass */

#define F1 0x1000	/* functions */
#define F2 0x2000
#define F3 0x3000

struct fctx;

/* Events the fake driver has: a thread may park VGPU_MEASURE_PARK_MAX
 * launches (two each) besides its ring's. */
#define FAKE_EVENTS 4096

struct fstream {
	struct fctx *ctx;
	uint64_t busy;		/* its last work ends then */
	bool live;
};

struct fctx {
	const struct vgpu_measure_gpu *gpu;	/* NULL: not measured */
	unsigned sm_held, sm_total;
	struct fstream dflt;	/* its default stream */
	unsigned gen;		/* teardowns: objects of an older gen are gone */
};

struct fevent {
	struct fctx *ctx;
	unsigned gen;
	bool live, recorded;
	uint64_t done;		/* completes then */
	uint64_t seen;		/* a query sees it complete then */
};

struct fthread {
	struct vgpu_measure_thread m;
	struct fctx *stack[8];	/* current contexts, top last */
	int depth;
	unsigned watched;
};

struct fake_state {
	uint64_t now;
	uint64_t engine;	/* the whole-device engine is busy until */
	struct fthread *cur;	/* the thread running */
	void (*on_sleep)(void);	/* others act while cur sleeps */
	struct fevent ev[FAKE_EVENTS];
	struct fstream st[16];
	struct fctx ctx[4];
	unsigned events_made, streams_made, sleeps, gone_used;
	unsigned probe_watches;	/* prim->probe_watch calls */
	uint64_t launched_at, kernel_end;
	unsigned late_reads;	/* the next reference readings seen late */
	uint64_t late;		/* by this much */
	uint64_t read_late;	/* run_and_read reads its launch this late */
};
extern struct fake_state fake;

/* The front end's gate around a launch (vgpu_measure_call's enter and
 * leave): when it was entered and left, and the events recorded by then. */
struct fake_gate {
	int inside, enters, leaves;
	uint64_t entered_at;
	unsigned records, records_at_enter, records_at_leave;
};
extern struct fake_gate gate;
void gate_enter(void);
void gate_leave(void);

/* A kernel of len ns on stream s (NULL: the current context's default):
 * it starts when its stream, and for a whole-device context the engine,
 * are free. */
struct kernel {
	uint64_t len;
	struct fstream *s;
	int refuse;		/* the driver's error, if it refuses */
};
int f_launch(const void *arg);

/* ---- the tenant, the threads ------------------------------------------------- */

extern struct vgpu_ledger *ledger;
extern struct vgpu_slot *slot;
extern struct vgpu_measure_gpu gpu0;
extern struct vgpu_slot *other;	/* another process of the tenant */

/* A tenant with a share (100: admitted at once, charged all the same) on
 * GPU 0, contexts on it, the clock at T0. */
void start(unsigned share);
/* A thread with c (NULL: none) current. */
struct fthread *thread_in(struct fctx *c);
/* t is the thread running. */
void as(struct fthread *t);
/* Thread t launches a kernel of function key, len ns long, on its current
 * context's default stream. */
int launch(struct fthread *t, uint64_t key, uint64_t len);
/* Thread t synchronises (its launches read). */
void sync_as(struct fthread *t);
/* Launches key, len ns long, on t and reads it once it has ended. */
void run_and_read(struct fthread *t, uint64_t key, uint64_t len);
/* t's state for context c, NULL if it has none. */
struct vgpu_measure_ctx *state_of(struct fthread *t, struct fctx *c);
/* t's latest launch in c, not yet read. */
const struct vgpu_measure_pending *newest(struct fthread *t, struct fctx *c);
/* The tenant's compute record, what it was charged, its bucket. */
const struct vgpu_ledger_compute *compute(void);
uint64_t charged(void);
int64_t tokens(void);
/* Ends recorded in the GPU's timeline; events live in the fake driver. */
uint64_t timeline_head(void);
unsigned live_events(void);

#endif
