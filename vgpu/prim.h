/* prim.h - the driver as the core sees it: the few things the core's
 * policies must ask of the device, with their contracts.
 *
 * Each vendor's front end fills a struct vgpu_prim over its table of the
 * real driver's functions (intercept/prim.c for CUDA) and hands it to the
 * core once (vgpu_account_use, vgpu_measure_use); the core's tests hand it
 * a fake driver (tests/vgpu/test_account.c, tests/vgpu/measure_fake.c), so
 * the policy is tested without a device, and with a fake clock.
 *
 * Common contract: a primitive may call the driver and may take the
 * front end's own locks, never a ledger lock; the core never calls one
 * with a ledger lock held; each returns in bounded time (sleep: as long
 * as it says). None waits for the device's work: a launch may wait for
 * the very thread that would wait (a stream waiting for a value it writes
 * next), so the core polls (event_query) and sleeps. A NULL primitive means the driver cannot
 * do it: the core goes on without (for reclaim); the measuring primitives
 * are all set, or none is (the front end then never measures).
 */
#ifndef VGPU_PRIM_H
#define VGPU_PRIM_H

#include <stdbool.h>
#include <stdint.h>

/* The driver's objects as the core holds them: opaque handles it only
 * stores, compares and passes back to the primitives. NULL is never a
 * handle of an object that exists. */
struct vgpu_prim_ctx;
struct vgpu_prim_stream;
struct vgpu_prim_event;

/* A GPU as the measuring sees it (measure.h). */
struct vgpu_measure_gpu;
struct vgpu_slot;

/* event_query's answers. */
enum {
	VGPU_PRIM_DONE = 0,		/* the work before it has completed */
	VGPU_PRIM_NOT_READY = 1,	/* not yet */
	VGPU_PRIM_ERROR = -1,		/* never will (or not recorded) */
};

struct vgpu_prim {
	/* Makes device dev's charges follow what its caches really hold:
	 * memory a cache keeps without using it (a stream-ordered pool
	 * keeps freed blocks until it is trimmed or synchronised) is read
	 * again from the driver and the difference given back. Returns true
	 * if any of the tenant's charge was given back (then a refused
	 * reservation is worth trying again), false if nothing changed. */
	bool (*reclaim)(int dev);

	/* ---- measuring launches (measure.c) -------------------------------
	 *
	 * Contexts: a thread has a current context (a stack of them); the
	 * objects below belong to the context current when they were made
	 * and are used only while it is current. */

	/* The calling thread's current context; NULL if none. */
	struct vgpu_prim_ctx *(*ctx_current)(void);
	/* Makes ctx the calling thread's current context, above the one
	 * that was: true if it is; each push that succeeded is undone by
	 * exactly one ctx_pop. Fails (false) for a context that no longer
	 * exists, when the driver can tell. */
	bool (*ctx_push)(struct vgpu_prim_ctx *ctx);
	void (*ctx_pop)(void);
	/* The context stream s belongs to: NULL for the default streams
	 * (NULL and the vendor's special handles, which belong to whatever
	 * context is current) and when the driver cannot say. */
	struct vgpu_prim_ctx *(*stream_ctx)(struct vgpu_prim_stream *s);
	/* The SMs that ctx (current) may use, *held, and its device's,
	 * *total: true when the driver says both. A context on the whole
	 * device has *held == *total. */
	bool (*sm_counts)(struct vgpu_prim_ctx *ctx, unsigned *held,
			  unsigned *total);
	/* The GPU whose tenant is charged for launches in ctx (current),
	 * attaching its device on first use; NULL when they are not
	 * measured: no compute share on it, or ctx is a partition whose SMs
	 * the hardware holds to the share (the spatial mode). A GPU, once
	 * answered, is the answer for ctx as long as ctx exists (the core
	 * keeps it with its state for ctx) and stays valid for the process's
	 * life (until a fork: the child starts afresh). */
	const struct vgpu_measure_gpu *(*gpu)(struct vgpu_prim_ctx *ctx);

	/* A new stream of the current context that never waits for other
	 * streams' work (nor they for its); NULL if it could not be made. */
	struct vgpu_prim_stream *(*stream_create)(void);
	void (*stream_destroy)(struct vgpu_prim_stream *s);
	/* A new timing event of the current context; NULL if none could be
	 * made. */
	struct vgpu_prim_event *(*event_create)(void);
	/* Destroys e. Recorded and not complete: the driver frees it once
	 * it completes (its completion is no longer observed). */
	void (*event_destroy)(struct vgpu_prim_event *e);
	/* Records e on s: e completes when all the work issued to s before
	 * it has. A record replaces e's previous one. per_thread: a default
	 * stream in s is the calling thread's own (the launch it brackets
	 * came through a per-thread-stream entry point). true if recorded. */
	bool (*event_record)(struct vgpu_prim_event *e,
			     struct vgpu_prim_stream *s, bool per_thread);
	/* Whether e has completed: VGPU_PRIM_DONE, VGPU_PRIM_NOT_READY or
	 * VGPU_PRIM_ERROR. Never blocks. */
	int (*event_query)(struct vgpu_prim_event *e);
	/* The device time from a's completion to b's, both complete, in ns:
	 * true with *ns set; false when the driver cannot say or b completed
	 * before a. The driver's precision (CUDA: a float of ms). */
	bool (*event_elapsed)(struct vgpu_prim_event *a,
			      struct vgpu_prim_event *b, uint64_t *ns);

	/* The slot of the tenant to stamp active for a launch in ctx
	 * (current) that is not measured (gpu answered NULL): set while an
	 * opportunistic tenant shares ctx's device, so that it yields to
	 * this one (docs/compute.md); else NULL. Optional (NULL: never). */
	struct vgpu_slot *(*announced)(struct vgpu_prim_ctx *ctx);

	/* The host's monotonic clock, ns: the throttle's clock, one for all
	 * the processes of a host (CLOCK_MONOTONIC). Never 0, never back. */
	uint64_t (*now)(void);
	/* The same clock read cheaply: up to a few ms behind now, never
	 * ahead of it. Optional (NULL: now is used). */
	uint64_t (*now_coarse)(void);
	/* Sleeps about ns, holding nothing; 0 yields the CPU once. */
	void (*sleep)(uint64_t ns);
	/* Sleeps while *word (the process's own memory) holds val, up to ns,
	 * holding nothing: woken early by a futex wake on word. Optional
	 * (NULL: sleep is used). */
	void (*wait_on)(uint32_t *word, uint32_t val, uint64_t ns);
	/* Arranges that the calling thread's exit calls
	 * vgpu_measure_thread_exit for its state (measure.h). Idempotent,
	 * and cheap after the first call. */
	void (*thread_watch)(void);
	/* Runs vgpu_measure_probe_poll (measure.h) about every
	 * VGPU_MEASURE_PROBE_POLL_NS from a thread of the library's own
	 * until it returns false; one such thread at a time. Called when
	 * this process's probe goes. Never blocks. The front ends give
	 * vgpu_measure_watch, which does it (their exits call
	 * vgpu_measure_watch_stop); a test gives a counter. Optional (NULL:
	 * the probe is read when the job's threads next reach the shim). */
	void (*probe_watch)(void);
};

#endif
