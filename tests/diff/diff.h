/* diff.h - the differential test of the shim's accounting (docs/reliability.md,
 * "The differential test").
 *
 * Random, seeded sequences of the driver's allocating and freeing calls run
 * under the shim on the simulated GPU, in several threads of several
 * processes. In lockstep: every thread makes one call (a step), all wait at
 * a barrier, one thread compares the simulator's own count of device memory
 * in use with what the ledger charges, all wait again. The run fails at the
 * first step where the device holds more than the ledger charges, or a
 * tenant is charged more than its slice, or when anything is left at the end.
 *
 * Files: diff.c (options, processes, the checks, the trace), ops_mem.c
 * (buffers, pitched, managed, stream-ordered, pools), ops_obj.c (VMM,
 * graphs, arrays, contexts, green contexts), ops_share.c (memory shared
 * between the processes: CUDA IPC, VMM handles exported as descriptors).
 */
#ifndef VGPU_DIFF_H
#define VGPU_DIFF_H

#include <cuda.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIFF_MIB (1ull << 20)
#define DIFF_GRAN (2ull << 20)	/* the simulator's VMM and pool granularity */

/* The op families, selectable with --ops. */
#define DIFF_FAMILY_MAP(X) \
	X(BUF, "buf") X(PITCH, "pitch") X(MANAGED, "managed") \
	X(ASYNC, "async") X(POOL, "pool") X(VMM, "vmm") X(GRAPH, "graph") \
	X(CAPTURE, "capture") X(ARRAY, "array") X(MIPMAP, "mipmap") \
	X(CTX, "ctx") X(GREEN, "green") X(SHARE, "share")

enum diff_family {
#define DIFF_FAMILY_ENUM_(id, name) DIFF_F_##id,
	DIFF_FAMILY_MAP(DIFF_FAMILY_ENUM_)
#undef DIFF_FAMILY_ENUM_
	DIFF_F_COUNT
};

/* An object of the test: what one create made, until it is gone. Its
 * fields are the family's; state is a family's bit set. An object is in
 * its process's table, or owned by the one thread that took it out. */
struct diff_obj {
	int id;
	int fam;
	unsigned state;
	size_t size;
	CUdeviceptr ptr;		/* buffers; VMM: the reserved range */
	CUstream stream;		/* stream-ordered: where it was made */
	CUmemGenericAllocationHandle handle;
	int handle_refs;		/* VMM: create + retains not released */
	struct diff_obj *pool;		/* a pool allocation's pool */
	atomic_int refs;		/* a pool: its table entry + allocations */
	CUmemoryPool mempool;
	CUgraph graph;
	CUgraphExec exec;
	CUarray array;
	CUmipmappedArray mipmap;
	CUcontext ctx;
	CUgreenCtx green;
	int nbuf;			/* contexts: buffers made in them */
	CUdeviceptr buf[8];
	struct {			/* the share family (ops_share.c) */
		int role;		/* exporter, importer, offer received */
		int kind;		/* DIFF_SHARE_IPC or _VMM */
		int fd;			/* a descriptor of the memory, or -1 */
		int offer;		/* importer: its offer's slot, or -1 */
		int from, from_id;	/* the memory: exporter, its object */
		int opens;		/* IPC importer: opens not closed */
		int noffers;		/* exporter: its offers' slots */
		int offers[4];
		CUipcMemHandle ipc;	/* IPC: the handle's bytes */
	} sh;
};

/* One thread while it steps. */
struct diff_thread {
	int proc, thread;
	uint64_t rng;
	int step;
	bool finishing;			/* the drain: only steps that end */
	CUstream capture_stream;	/* this thread's, for captures */
};

/* A worker process: its options and what its threads share. */
struct diff_proc {
	int index;
	unsigned families;		/* bit per enum diff_family */
	uint64_t limit;
	CUdevice dev;
	CUcontext primary;
	CUstream streams[2];		/* shared by the process's threads */
	CUmemoryPool default_pool;
	pthread_mutex_t lock;		/* the table */
	struct diff_obj *objs[1024];
	int nobjs;
	atomic_int next_id;
	atomic_int *pools_live;		/* pools holding memory (shared) */
};

extern struct diff_proc diff_proc;

/* ---- the share family's mailbox (ops_share.c) ---------------------------- */

#define DIFF_OFFERS 32		/* offer slots per exporting process */
enum { DIFF_SHARE_IPC = 1, DIFF_SHARE_VMM = 2 };

/* An offer of memory from one process to another, in shared memory. Its
 * exporter fills it and sets refs (2: its object and the importer's); a
 * VMM offer's descriptor goes over the importer's socket first. Steps
 * stamp every change, and a process acts only on stamps of earlier steps
 * (a barrier lies between), so what it sees does not depend on timing. */
struct diff_offer {
	atomic_int refs;		/* 0: free */
	atomic_int free_step;		/* the step refs fell to 0 */
	atomic_int polled;		/* the importer made it an object */
	atomic_int resolved_step;	/* imported or declined; -1: not yet */
	atomic_int freed_step;		/* the exporter let go; -1: not yet */
	int post_step, from, to, kind, obj_id;
	unsigned seq;
	size_t size;
	CUipcMemHandle ipc;
};

/* ---- check.c: the trace and the two counts ------------------------------- */

#define DIFF_RING 256		/* trace lines kept per thread */
#define DIFF_LINE 176

struct diff_line {
	int step;
	char text[DIFF_LINE];
};

/* Shared by all processes (mapped before the fork). */
struct diff_shared {
	pthread_barrier_t barrier;	/* every thread of every process */
	pthread_barrier_t start;	/* one thread per process */
	atomic_int failed;
	atomic_int done;
	atomic_int skipped;		/* no family the driver has */
	int fail_step;
	char fail_msg[1024];
	int procs, threads, tenants, steps;
	atomic_int objs[64];		/* per process: objects left */
	atomic_int pools_live[64];
	atomic_ullong share_slack[64];	/* per process: bytes imported */
	int share_sock[64][2];		/* per process: [0] to send it fds */
	struct diff_offer *offers;	/* procs x DIFF_OFFERS (share) */
	atomic_uint ring_next[64 * 64];
	struct diff_line ring[];	/* procs x threads x DIFF_RING */
};

extern struct diff_shared *diff_sh;
extern bool diff_verbose;

/* Records a line of the thread's trace. */
void diff_trace(struct diff_thread *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Fails the run with a message; the first failure wins. */
void diff_fail(struct diff_thread *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Traces a call's result; one other than CUDA_SUCCESS, and
 * CUDA_ERROR_OUT_OF_MEMORY where ok_oom (a full slice or device), fails
 * the run. Returns rc. */
CUresult diff_cu(struct diff_thread *t, CUresult rc, bool ok_oom,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* As diff_cu, with one error other than CUDA_SUCCESS allowed. */
CUresult diff_cu_allow(struct diff_thread *t, CUresult rc, CUresult allowed,
		       const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Prints the trace of the steps from first to last (all threads); last
 * < 0: the -first steps up to the latest traced. */
void diff_print_trace(int first, int last);

/* Opens the simulator the shim opened (VGPU_REAL_LIBCUDA) and checks that
 * it is not the shim; false with a message on stderr. */
bool diff_sim_open(uint64_t limit);
/* The device memory the simulator holds (all processes). */
uint64_t diff_sim_used(void);
/* Compares the counts after a step; zero: everything must be 0. */
void diff_check(int step, bool zero, const char *overcommit);
/* After the workers exited: every tenant's charge is 0. */
bool diff_check_exited(void);
void diff_ledger_close(void);

/* ---- diff.c -------------------------------------------------------------- */

uint64_t diff_rand(struct diff_thread *t);
/* Uniform in [0, n), n > 0. */
uint64_t diff_below(struct diff_thread *t, uint64_t n);
bool diff_chance(struct diff_thread *t, unsigned percent);
/* A size for an allocation: mostly small, some near the slice, rounded up
 * to diff_align() (--align). */
size_t diff_size(struct diff_thread *t);
size_t diff_align(void);

/* The process's table: new gives an object an id and puts it in the
 * table; take removes a random one of fam (-1: any; NULL: none), put gives
 * it back, drop frees one taken out. */
struct diff_obj *diff_obj_new(struct diff_thread *t, int fam);
void diff_obj_put(struct diff_obj *o);
struct diff_obj *diff_obj_take(struct diff_thread *t, int fam);
void diff_obj_drop(struct diff_obj *o);
int diff_obj_count(int fam);
/* Makes the primary context current again (after an op that pushed). */
void diff_restore_ctx(struct diff_thread *t);

/* ---- ops_mem.c, ops_obj.c: the families ---------------------------------- */

/* make creates an object (in the table); step moves a taken object on
 * and returns true if that ended it (freed), else the caller puts it back.
 * With t->finishing a step always makes progress towards the end. */
struct diff_family_ops {
	const char *name;
	bool (*available)(void);
	void (*make)(struct diff_thread *t);
	bool (*step)(struct diff_thread *t, struct diff_obj *o);
	/* Optional: called at the start of every step of every thread
	 * (draws no random numbers). */
	void (*poll)(struct diff_thread *t);
};

extern const struct diff_family_ops diff_families[DIFF_F_COUNT];

/* Whether the driver (through the shim) has the entry point. */
bool diff_have(const char *name);

void diff_buf_make(struct diff_thread *t);
void diff_pitch_make(struct diff_thread *t);
void diff_managed_make(struct diff_thread *t);
void diff_async_make(struct diff_thread *t);
bool diff_mem_step(struct diff_thread *t, struct diff_obj *o);
void diff_pool_make(struct diff_thread *t);
bool diff_pool_step(struct diff_thread *t, struct diff_obj *o);

void diff_vmm_make(struct diff_thread *t);
bool diff_vmm_step(struct diff_thread *t, struct diff_obj *o);
void diff_graph_make(struct diff_thread *t);
void diff_capture_make(struct diff_thread *t);
bool diff_graph_step(struct diff_thread *t, struct diff_obj *o);
void diff_array_make(struct diff_thread *t);
void diff_mipmap_make(struct diff_thread *t);
bool diff_array_step(struct diff_thread *t, struct diff_obj *o);
void diff_ctx_make(struct diff_thread *t);
void diff_green_make(struct diff_thread *t);
bool diff_ctx_step(struct diff_thread *t, struct diff_obj *o);

void diff_share_make(struct diff_thread *t);
bool diff_share_step(struct diff_thread *t, struct diff_obj *o);
void diff_share_poll(struct diff_thread *t);
/* Before the fork: the mailbox and the sockets, when share is run. */
void diff_share_setup(int procs);

#endif
