/* sim.h - internal header of the simulated GPU (libcuda.so.1 on host memory).
 *
 * Prototypes are grouped by the file that defines them. Everything not listed
 * here is static to its file. Names: vsim_ for the simulator's internals.
 *
 * Device pointers (CUdeviceptr) are host virtual addresses of mappings
 * (anonymous; memfds shared for VMM handles and memory shared between
 * processes), so host implementations of kernels dereference them directly.
 */
#ifndef VGPU_SIM_H
#define VGPU_SIM_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A thread that holds one of the simulator's locks across a cancellation
 * point (open, close, write, a wait) is not cancelled there: a cancelled
 * thread would end holding the lock, and every later call that takes it
 * would hang. A real driver's own locks are not POSIX cancellation
 * points. begin returns the state to give end. */
static inline int vsim_nocancel_begin(void)
{
	int c;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &c);
	return c;
}

static inline void vsim_nocancel_end(int c)
{
	pthread_setcancelstate(c, NULL);
}

#define VSIM_EXPORT __attribute__((visibility("default")))

#define VSIM_MAX_DEVICES 16
#define VSIM_MAX_CTX_STACK 32
#define VSIM_DRIVER_VERSION 13000

/* Handle tags: the first field of every handle, checked on entry. */
enum vsim_magic {
	VSIM_MAGIC_CTX = 0x43545831u,
	VSIM_MAGIC_STREAM = 0x53544d31u,
	VSIM_MAGIC_EVENT = 0x45564e31u,
	VSIM_MAGIC_MODULE = 0x4d4f4431u,
	VSIM_MAGIC_FUNC = 0x46554e31u,
	VSIM_MAGIC_LIBRARY = 0x4c494231u,
	VSIM_MAGIC_KERNEL = 0x4b524e31u,
	VSIM_MAGIC_MEMPOOL = 0x504f4f31u,
	VSIM_MAGIC_MEMHANDLE = 0x4d484e31u,
	VSIM_MAGIC_GREEN = 0x47524e31u,
	VSIM_MAGIC_RESDESC = 0x52534431u,
	VSIM_MAGIC_DEAD = 0xdeaddeadu,
};

/* ---- config.c: VGPU_SIM_* environment ------------------------------------ */

enum vsim_fail_kind { VSIM_FAIL_ALLOC, VSIM_FAIL_LAUNCH, VSIM_FAIL_KINDS };

/* One fault-injection rule: fail calls number first..last (1-based, inclusive;
 * last == UINT64_MAX: for ever), or every `every`-th call when every != 0. */
struct vsim_fail_rule {
	bool active;
	uint64_t first, last, every;
};

struct vsim_config {
	int devices;
	int hip_devices;          /* the last N are AMD's; 0: all are both */
	uint64_t memory;          /* bytes per device */
	int sm_count;
	char name[256];
	char state_dir[4096];
	uint64_t kernel_ns;       /* duration of a kernel with no host form */
	bool green_contexts;      /* false: their entry points are not supported */
	uint64_t bus_bandwidth;   /* bytes/s of kernels' host-memory accesses; 0: free */
	uint64_t host_late_ns;    /* added to host waits and worker wake-ups */
	bool unknown_kernel_fail; /* a kernel with no host form: refused
				   * (VGPU_SIM_UNKNOWN_KERNEL=fail), not a
				   * fixed wait */
	struct vsim_fail_rule fail[VSIM_FAIL_KINDS];
};

/* Why a value was refused; vsim_config_strerror() says it in words. */
enum vsim_cfg_status {
	VSIM_CFG_OK,
	VSIM_CFG_EMPTY,
	VSIM_CFG_NEGATIVE,
	VSIM_CFG_NOT_NUMBER,
	VSIM_CFG_TRAILING,
	VSIM_CFG_UNIT,
	VSIM_CFG_TOO_LARGE,      /* past 64 bits */
	VSIM_CFG_RANGE,          /* outside the row's min..max */
	VSIM_CFG_TOO_LONG,
	VSIM_CFG_NOT_ABSOLUTE,
	VSIM_CFG_UNKNOWN_WORD,
	VSIM_CFG_FAIL_KIND,      /* a VGPU_SIM_FAIL rule of no known kind */
	VSIM_CFG_FAIL_RULE,      /* a VGPU_SIM_FAIL rule of no known form */
};

/* The field of struct vsim_config a variable fills. */
enum vsim_cfg_type {
	VSIM_CFG_INT,            /* int */
	VSIM_CFG_U64,            /* uint64_t */
	VSIM_CFG_BOOL,           /* bool */
	VSIM_CFG_STRING,         /* char[], NUL-terminated */
	VSIM_CFG_RULES,          /* struct vsim_fail_rule[VSIM_FAIL_KINDS] */
};

/* A parsed value, before it is stored: num (INT, U64, BOOL), str and len
 * (STRING, pointing into the value parsed), fail (RULES: the kinds given). */
struct vsim_cfg_value {
	uint64_t num;
	const char *str;
	size_t len;
	struct vsim_fail_rule fail[VSIM_FAIL_KINDS];
};

struct vsim_cfg_var;
/* Parses s (not NULL) for var; returns VSIM_CFG_OK or why it was refused.
 * Pure: writes only *out. */
typedef int vsim_cfg_parse_fn(const struct vsim_cfg_var *var, const char *s,
			      struct vsim_cfg_value *out);

/* One row of the table of VGPU_SIM_* variables (config.c), from which the
 * defaults, the parsing, the messages and the check of docs/simulator.md
 * (tests/sim/test_config.c) all come. */
struct vsim_cfg_var {
	const char *name;         /* VGPU_SIM_X */
	const char *def;          /* the default, parsed as a value is; NULL:
				   * computed by vsim_config_defaults() */
	const char *expect;       /* the message's "expected ..." */
	const char *const *words; /* the accepted words, NULL-terminated; the
				   * value is the index */
	uint64_t min, max;        /* numbers: the range; strings: the length */
	enum vsim_cfg_type type;
	size_t offset;            /* of the field in struct vsim_config */
	vsim_cfg_parse_fn *parse;
};

/* Row i of the table (docs/simulator.md's order), or NULL past the end. */
const struct vsim_cfg_var *vsim_config_var(size_t i);
/* The row of a variable, or NULL. */
const struct vsim_cfg_var *vsim_config_find(const char *name);
const char *vsim_config_strerror(int status);
/* Every variable at its default (the table's; the state directory's under
 * /dev/shm, or /tmp without it). */
void vsim_config_defaults(struct vsim_config *cfg);
/* Parses one variable's value into cfg; returns 0, or -1 with one line in
 * err (no newline) naming the variable, the value, what is wrong and what
 * was expected, cfg unchanged. A name not in the table is refused the
 * same way. Pure. */
int vsim_config_parse_var(struct vsim_config *cfg, const char *var,
			  const char *value, char *err, size_t errlen);
/* Defaults, then every variable of the table set in envp (NAME=value
 * strings, NULL-terminated; NULL for none), as getenv(3) would find it.
 * Returns 0, or -1 with the first bad variable's message in err. Pure. */
int vsim_config_load(struct vsim_config *cfg, const char *const *envp,
		     char *err, size_t errlen);
/* One line in out for each VGPU_SIM_* name in envp that is no variable of
 * the table (nor another part's, such as vgpu-run's VGPU_SIM_LIBRARY), with
 * the closest name when it is near:
 *   VGPU_SIM_MEMROY is not a simulator variable; did you mean
 *   VGPU_SIM_MEMORY? (ignored)
 * Returns the count. Pure. */
int vsim_config_check_names(const char *const *envp, char *out, size_t len);
/* vsim_config_load() on the process's environment; each unknown name is
 * warned about on stderr (vsim_log), and the simulator runs on. */
int vsim_config_from_env(struct vsim_config *cfg, char *err, size_t errlen);
int vsim_parse_size(const char *s, uint64_t *out);
/* True when call number n (1-based) of this kind must fail. */
bool vsim_fail_hit(const struct vsim_fail_rule *r, uint64_t n);

/* ---- state.c: device state shared between processes ---------------------- */

/* Opens (creating if needed) the shared state of device `ordinal` and claims
 * a process slot in it. */
CUresult vsim_state_attach(int ordinal);
void vsim_state_detach_all(void);
/* In a forked child: drops the parent's mappings; the child attaches anew. */
void vsim_state_forget(void);
/* Reserves `bytes` of the device's capacity for this process. */
CUresult vsim_state_reserve(int ordinal, uint64_t bytes);
void vsim_state_release(int ordinal, uint64_t bytes);
uint64_t vsim_state_used(int ordinal);      /* all processes */
uint64_t vsim_state_capacity(int ordinal);
/* Capacity and usage of device `ordinal` in state directory dir, read
 * without attaching (NVML); `fallback` capacity when nobody set it up. */
CUresult vsim_state_peek(const char *dir, int ordinal, uint64_t fallback,
			 uint64_t *capacity, uint64_t *used);
/* The live processes with a context on a device and the memory each
 * holds, read without claiming a slot (NVML's process lists): how many
 * there are (only the first max written to out), or -1 when the device's
 * state cannot be read. */
struct vsim_proc_use {
	int32_t pid;
	uint64_t used;
};
long vsim_state_procs(const char *dir, int ordinal, struct vsim_proc_use *out,
		      size_t max);
/* The execution engine, shared by all processes: a kernel takes `sms` of
 * the device's multiprocessors (0 or more than the device has: all of them)
 * for as long as it runs; kernels are admitted first come first served while
 * the multiprocessors they hold together fit in the device. Each kernel's
 * time on them goes into the device's record (vgpu_sim_record.h).
 *
 * A hold's SMs are free from its deadline on, whatever its thread does (the
 * stop rule, docs/simulator.md). Once admitted, the kernel starts with
 * vsim_engine_start, giving its length if known (a kernel with no host form;
 * 0: its host form computes until it returns or waits); a wait publishes
 * its end with vsim_engine_until. */
struct vsim_hold {
	int ordinal;
	uint32_t index;            /* in the device's hold table */
	uint32_t sms;              /* taken */
	uint64_t start_ns;         /* admitted, then started (CLOCK_MONOTONIC) */
};
void vsim_engine_acquire(int ordinal, unsigned sms, unsigned long long ctx_id,
			 struct vsim_hold *out);
/* The kernel starts: its interval starts here, not at its admission (the
 * engine's hand-off and the host thread's way to the kernel are not the
 * kernel's time), on the device's clock: when its stream reached it
 * (not_before; 0: now) and the SMs were free, however late this thread is
 * (docs/simulator.md, "The device's clock"). Returns the start, also in
 * h->start_ns; never later than now. */
uint64_t vsim_engine_start(struct vsim_hold *h, uint64_t not_before,
			   uint64_t nominal_ns);
/* Holds until deadline_ns (longer than a previous wait's, if the hold was
 * not ended meanwhile), and waits till then (vsim_busy_until). */
void vsim_engine_until(const struct vsim_hold *h, uint64_t deadline_ns);
/* The kernel is done: its SMs go back (unless its time was up and another
 * process ended the hold already), its time into the record and the
 * process's total. lag_ns: how far the device's clock is behind
 * CLOCK_MONOTONIC for this thread. Returns the end on the device's
 * clock. */
uint64_t vsim_engine_release(const struct vsim_hold *h, uint64_t lag_ns);

/* The device's clock of the stream whose worker is this thread: when its
 * last op ended there (stream.c sets it before each op; a kernel moves it
 * to its end). 0 off a worker. */
extern _Thread_local uint64_t vsim_stream_clock;

/* Shared objects: device memory that several processes may hold (legacy
 * IPC, ipc.c; exported VMM handles, vmm.c). Its bytes count once on the
 * device, in an entry of the shared state rather than in a process's slot,
 * for as long as any live process holds it. Each process counts its own
 * holds of an object; its death, or its exit, drops them all. */
enum vsim_shared_kind { VSIM_SHARED_IPC = 1, VSIM_SHARED_VMM = 2 };

struct vsim_shared_desc {
	enum vsim_shared_kind kind;
	uint64_t size;             /* bytes counted on the device */
	uint64_t asked;            /* IPC: the size the allocation asked for */
	int fd;                    /* the memory, a memfd */
	CUmemAllocationProp prop;  /* VMM: the exported handle's properties */
};

/* Makes d->size bytes that this process reserved on device `ordinal` (with
 * vsim_state_reserve) a new shared object held once by this process; the
 * device's used memory does not change. An IPC object remembers d->fd as
 * the one importers reopen (the caller keeps it open while it holds the
 * object). CUDA_ERROR_OUT_OF_MEMORY when the table is full. */
CUresult vsim_shared_create(int ordinal, const struct vsim_shared_desc *d,
			    uint64_t *id);
/* Drops one hold of this process; when it was the last hold of the last
 * live process, the object's bytes return to the device. */
void vsim_shared_drop(int ordinal, uint64_t id);
/* Legacy IPC: takes a hold of object `id` of device `ordinal` and opens its
 * memory (a new O_RDWR, O_CLOEXEC fd in *fd). The exporter must be alive and
 * still hold it: else CUDA_ERROR_INVALID_HANDLE, as for an unknown id;
 * CUDA_ERROR_INVALID_CONTEXT when this process is the exporter;
 * CUDA_ERROR_MAP_FAILED when its memory cannot be opened. */
CUresult vsim_shared_open(int ordinal, uint64_t id, int *fd,
			  struct vsim_shared_desc *out);
/* VMM: takes a hold of the exported object whose memory fd is, on any
 * device of this process; its ordinal, id and description (prop's location
 * in this process's ordinals). CUDA_ERROR_INVALID_VALUE when fd is no live
 * object's memory. */
CUresult vsim_shared_import(int fd, int *ordinal, uint64_t *id,
			    struct vsim_shared_desc *out);

/* ---- visible.c: CUDA_VISIBLE_DEVICES ------------------------------------- */

#define VSIM_UUID_STRLEN 41   /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL */

/* Formats u as the driver prints UUIDs: "GPU-xxxxxxxx-xxxx-...". */
void vsim_uuid_format(const CUuuid *u, char out[VSIM_UUID_STRLEN]);
/* Parses a CUDA_VISIBLE_DEVICES value: the physical devices it makes
 * visible, in order, into out (at most max). Entries are indices or UUIDs
 * ("GPU-..." in full or a unique prefix); an entry that names no device, or
 * one named already, ends the list. uuids[i] is physical device i's string.
 * Returns the number of devices. Pure. */
int vsim_visible_parse(const char *spec, int nphys,
		       char (*uuids)[VSIM_UUID_STRLEN], int *out, int max);

/* ---- init.c: global state, cuInit, fork handling -------------------------- */

struct vsim_device {
	int ordinal;
	int physical;          /* the simulated device under CUDA_VISIBLE_DEVICES */
	CUuuid uuid;
	char pci_bus_id[32];
	struct CUctx_st *primary;
	pthread_mutex_t primary_lock;
	unsigned primary_flags;
	int primary_refs;
};

struct vsim_global {
	bool initialized;
	CUresult init_result;
	struct vsim_config cfg;
	struct vsim_device dev[VSIM_MAX_DEVICES];
	atomic_uint_fast64_t fail_count[VSIM_FAIL_KINDS];
	/* Calls given an event or stream that was destroyed, or whose context
	 * was torn down after it was made (vsim_stale_handle_uses()). */
	atomic_uint_fast64_t stale_uses;
};

extern struct vsim_global vsim_g;

/* CUDA_ERROR_NOT_INITIALIZED until cuInit succeeded. */
CUresult vsim_check_init(void);
CUresult vsim_check_device(CUdevice dev);
/* Counts a call of this kind and tells whether fault injection fails it. */
bool vsim_fail_now(enum vsim_fail_kind kind);
uint64_t vsim_now_ns(void);
/* The UUID of device `ordinal` of a simulator named `name` (VGPU_SIM_NAME). */
void vsim_device_uuid_make(const char *name, int ordinal, CUuuid *out);
/* Exported for the simulated HIP runtime, which calls it before its
 * cuInit: this process sees the devices as HIP does (VGPU_SIM_HIP_DEVICES,
 * ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES), not as a CUDA program. */
void vsim_hip_process(void);
/* The device's UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void vsim_device_uuid_string(int dev, char *out, size_t len);
/* Waits until CLOCK_MONOTONIC reaches deadline_ns, precisely (sleep, then spin). */
void vsim_busy_until(uint64_t deadline_ns);
/* VGPU_SIM_HOST_LATE_NS: sleeps that long (a loaded host's lateness). */
void vsim_host_late(void);
/* Keeps a destroyed handle's memory for the life of the process, reachable,
 * so that a stale handle is refused (its magic is VSIM_MAGIC_DEAD) instead of
 * reading freed memory. */
void vsim_graveyard_add(void *p);
void vsim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- context.c ----------------------------------------------------------- */

struct vsim_stream;
struct CUgreenCtx_st;

struct CUctx_st {
	uint32_t magic;
	int device;
	unsigned flags;
	bool primary;
	bool active;                   /* false: destroyed, or released primary */
	unsigned generation;           /* teardowns so far */
	unsigned long long id;
	size_t limits[CU_LIMIT_MAX];
	CUfunc_cache cache_config;
	pthread_mutex_t lock;          /* guards streams list */
	struct CUstream_st *legacy;    /* the NULL stream of this context */
	struct CUstream_st *streams;   /* created streams, linked by next */
	/* A green context's (green.c): its SM count and its kernels' lock (they
	 * share its multiprocessors, so they run one at a time). */
	struct CUgreenCtx_st *green;   /* NULL: not a green context */
	unsigned sm_count;             /* 0: the whole device */
	pthread_mutex_t exec_lock;
};

/* The calling thread's current context, or NULL. */
struct CUctx_st *vsim_ctx_current(void);
/* Current context, or CUDA_ERROR_INVALID_CONTEXT (none), or
 * CUDA_ERROR_CONTEXT_IS_DESTROYED (destroyed by another thread). */
CUresult vsim_ctx_get(struct CUctx_st **out);
bool vsim_ctx_valid(struct CUctx_st *ctx);
/* True when a and b share modules and events: the same context, or a green
 * context and its device's primary context (or two such green contexts). */
bool vsim_ctx_same_space(const struct CUctx_st *a, const struct CUctx_st *b);
/* A new live context on dev, not made current (green contexts). */
CUresult vsim_ctx_new(int dev, unsigned flags, struct CUctx_st **out);
/* Waits for ctx's work, stops its streams and kills the handle; its memory
 * is freed too unless keep_memory. Not for primary contexts. */
void vsim_ctx_destroy(struct CUctx_st *ctx, bool keep_memory);
/* In a forked child: forget the parent's contexts (their threads are gone). */
void vsim_ctx_fork_child(void);

/* ---- memory.c ------------------------------------------------------------ */

enum vsim_mem_kind { VSIM_MEM_DEVICE, VSIM_MEM_HOST };

/* In vsim_alloc.flags: user memory registered with cuMemHostRegister. */
#define VSIM_ALLOC_REGISTERED 0x80000000u
/* A block of a memory pool's chunk (pool.c); owner is the chunk. */
#define VSIM_ALLOC_POOL 0x40000000u
/* cuMemAllocManaged memory (managed.c); the low bits keep the attach flags. */
#define VSIM_ALLOC_MANAGED 0x20000000u
/* A mapped range of the VMM API (vmm.c), never in the allocation table. */
#define VSIM_ALLOC_MAPPED 0x10000000u
/* Another process's memory opened with cuIpcOpenMemHandle (ipc.c). */
#define VSIM_ALLOC_IPC 0x08000000u

struct vsim_alloc {
	uintptr_t base;
	size_t size;          /* what the caller asked for (pitch*height for 2D) */
	size_t mapped;        /* size of the mapping */
	enum vsim_mem_kind kind;
	int device;
	struct CUctx_st *ctx;
	unsigned long long id;
	unsigned flags;       /* cuMemHostAlloc flags */
	void *owner;          /* what holds the memory (VSIM_ALLOC_POOL) */
	/* Legacy IPC (ipc.c): the shared object (vsim_shared_*) this memory
	 * is, once exported or when opened (VSIM_ALLOC_IPC); 0: none. */
	uint64_t share_id;
	int share_fd;         /* exported: the memfd importers reopen */
	int ipc_refs;         /* VSIM_ALLOC_IPC: opens - closes here */
};

/* Finds the allocation containing [p, p+len); copies it into *out. */
/* Frees every allocation made in ctx (context destruction). */
void vsim_mem_free_ctx(struct CUctx_st *ctx);
bool vsim_mem_lookup(uintptr_t p, size_t len, struct vsim_alloc *out);
/* Checks a device range for a copy: CUDA_ERROR_INVALID_VALUE when unknown. */
CUresult vsim_mem_check_device(CUdeviceptr p, size_t len);
/* In a forked child: forget the parent's allocations. */
void vsim_mem_fork_child(void);
/* Maps and records an allocation of ctx; device memory is reserved first. */
CUresult vsim_mem_alloc(struct CUctx_st *ctx, size_t size,
			enum vsim_mem_kind kind, unsigned flags, uintptr_t *out);
/* Records memory mapped elsewhere (a pool block); 0, or -1 out of memory. */
int vsim_mem_register(const struct vsim_alloc *a);
/* Removes the record starting exactly at base; false when there is none. */
bool vsim_mem_unregister(uintptr_t base, struct vsim_alloc *out);
/* Legacy IPC export (ipc.c): makes the cuMemAlloc allocation holding p a
 * shared object, once (its pages move to a memfd mapped shared at the same
 * address); its record, with share_id, in *out. CUDA_ERROR_INVALID_VALUE
 * for anything but cuMemAlloc(Pitch) memory of this process. */
CUresult vsim_mem_export(uintptr_t p, struct vsim_alloc *out);
/* Legacy IPC import (ipc.c): maps shared object id of device in ctx, or
 * counts one more open when this process has it open already (in another
 * context: CUDA_ERROR_INVALID_CONTEXT). Errors of vsim_shared_open. */
CUresult vsim_mem_ipc_open(struct CUctx_st *ctx, int device, uint64_t id,
			   uintptr_t *out);
/* One open fewer of the memory opened at base; the last unmaps it and drops
 * the hold. CUDA_ERROR_INVALID_VALUE when base is no such memory. */
CUresult vsim_mem_ipc_close(uintptr_t base);

/* ---- pool.c: memory pools and stream-ordered allocation ------------------ */

/* Returns a pool block, already out of the allocation table, to its pool. */
void vsim_pool_block_free(const struct vsim_alloc *a);
/* A stream, event or context synchronisation on device: its pools release
 * reserved memory above their release thresholds. */
void vsim_pool_sync_release(int device);
void vsim_pool_fork_child(void);

/* ---- vmm.c: the virtual memory management API ----------------------------- */

/* A generic allocation handle: memory from cuMemCreate, or a multicast
 * object. The CUmemGenericAllocationHandle is its address. */
struct vsim_mcast;
struct vsim_handle {
	uint32_t magic;              /* VSIM_MAGIC_MEMHANDLE */
	int fd;                      /* memfd backing the memory */
	size_t size;
	CUmemAllocationProp prop;
	int counted_device;          /* capacity reserved there, or -1 */
	int user_refs;               /* create, retain - release */
	int map_refs;                /* mappings and multicast bindings */
	struct vsim_mcast *mc;       /* multicast.c's part, or NULL */
	unsigned long long id;
	/* Exported (cuMemExportToShareableHandle) or imported: the shared
	 * object (vsim_shared_*) its bytes are counted in; 0: none. */
	uint64_t shared_id;
};

/* The VMM lock guards handles, reservations and mappings (multicast.c
 * takes it too). Never held while a kernel runs. */
void vsim_vmm_lock(void);
void vsim_vmm_unlock(void);
/* A handle the caller still references, or NULL; caller holds the lock. */
struct vsim_handle *vsim_handle_find(CUmemGenericAllocationHandle v);
/* A new handle of size bytes backed by a fresh memfd (one user reference);
 * caller holds the lock. */
CUresult vsim_handle_new(size_t size, struct vsim_handle **out);
/* Drops a mapping or binding reference; caller holds the lock. */
void vsim_handle_unmap_ref(struct vsim_handle *h);
/* The handle and offset mapped at p; caller holds the lock. */
bool vsim_vmm_resolve(uintptr_t p, struct vsim_handle **h, size_t *offset);
/* Finds an accessible mapped range holding [p, p+len) (several adjacent
 * mappings may make it up); fills out as vsim_mem_lookup does. */
bool vsim_vmm_lookup(uintptr_t p, size_t len, struct vsim_alloc *out);
/* The part of [p, p+len) in the mapping holding p, from p (0: p is not
 * mapped), and whether its memory is host-located (the bus model). */
size_t vsim_vmm_span(uintptr_t p, size_t len, bool *host);
/* The requestedHandleTypes of the handle mapped at p (0: none, or not
 * mapped): CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES. */
unsigned long long vsim_vmm_handle_types(uintptr_t p);
void vsim_vmm_fork_child(void);

/* ---- managed.c ------------------------------------------------------------ */

void vsim_managed_fork_child(void);
/* Whether managed allocation a is on the host for the bus model: advised
 * to prefer the host or prefetched there, and not prefetched to (or
 * advised to prefer) a device since. */
bool vsim_managed_on_host(const struct vsim_alloc *a);

/* ---- multicast.c ---------------------------------------------------------- */

/* A multicast handle's last reference is gone: return its reservations and
 * bindings; caller holds the VMM lock. */
void vsim_mcast_destroy(struct vsim_handle *h);
/* Every device of the team has been added (it may be mapped and bound). */
bool vsim_mcast_complete(const struct vsim_handle *h);

/* ---- stream.c: in-order work queues run by worker threads ----------------- */

enum vsim_op_kind {
	VSIM_OP_KERNEL,
	VSIM_OP_COPY,
	VSIM_OP_COPY2D,
	VSIM_OP_SET,
	VSIM_OP_EVENT,
	VSIM_OP_HOST_FN,
	VSIM_OP_WAIT,       /* wait for another stream to reach a sequence number */
	VSIM_OP_MEMOP,      /* a stream memory operation (memop.c) */
};

/* Stream and event structs are never freed: a destroyed one keeps its
 * memory with magic VSIM_MAGIC_DEAD, so dependencies and stale handles stay
 * safe to read. */
struct vsim_dep {
	struct CUstream_st *stream;
	uint64_t seq;
};

struct vsim_op {
	enum vsim_op_kind kind;
	struct vsim_op *next;
	uint64_t seq;
	struct vsim_dep *deps;
	unsigned ndeps;
	uint64_t queued_ns;    /* when it was submitted (CLOCK_MONOTONIC) */
	union {
		struct { void *dst; const void *src; size_t len; } copy;
		/* depth slices of height rows, dslice/sslice bytes apart */
		struct { void *dst; const void *src; size_t dpitch, spitch;
			 size_t width, height, depth, dslice, sslice; } copy2d;
		/* count elements of elem bytes per row, height rows pitch apart */
		struct { void *dst; uint32_t value; unsigned elem; size_t count;
			 size_t pitch, height; } set;
		struct { struct CUevent_st *event; } event;
		struct { CUhostFn fn; void *data; } host;
		struct { struct vsim_launch *launch; } kernel;
		/* CU_STREAM_MEM_OP_*: a value written or waited for at addr */
		struct { void *addr; uint64_t value; unsigned kind;
			 unsigned flags; } memop;
	} u;
};

struct CUstream_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	unsigned flags;        /* CU_STREAM_NON_BLOCKING */
	int priority;
	bool legacy;           /* the context's NULL stream */
	bool per_thread;       /* a thread's per-thread default stream */
	unsigned long long id;
	pthread_mutex_t lock;
	pthread_cond_t cond;   /* work queued, or progress made */
	struct vsim_op *head, *tail;
	uint64_t submitted;    /* seq of the last op queued */
	uint64_t completed;    /* seq of the last op finished */
	uint64_t clock_done;   /* when it finished, on the device's clock */
	bool worker_running;
	bool stop;
	pthread_t worker;
	CUresult sticky;       /* error from an asynchronous op */
	struct CUstream_st *next;   /* in ctx->streams */
	/* The capture it takes part in (capture.c), or NULL: written under
	 * the capture lock, read without it only to skip capture's work. */
	struct vsim_capture *capture;
};

/* Resolves a user stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
 * or a created stream) in the current context. per_thread_default: the call
 * came through a _ptsz/_ptds entry point, so NULL means the per-thread stream. */
CUresult vsim_stream_resolve(CUstream h, bool per_thread_default,
			     struct CUstream_st **out);
/* Queues op (taking ownership) on s, adding the implicit dependencies of
 * legacy-stream semantics. Returns its sequence number via *seq if non-NULL.
 * On a capturing stream the op is captured or refused instead
 * (vsim_capture_take), and *seq is not written. */
CUresult vsim_stream_submit(struct CUstream_st *s, struct vsim_op *op, uint64_t *seq);
/* vsim_stream_submit without the capture step: for a caller that checked
 * capture itself (vsim_capture_refuse) and holds a lock capture.c takes
 * after its own (graph.c's). */
CUresult vsim_stream_enqueue(struct CUstream_st *s, struct vsim_op *op,
			     uint64_t *seq);
/* Fills height rows, pitch bytes apart, with count elements of elem bytes
 * (1, 2 or 4) of value: memsets. */
void vsim_fill_rows(void *dst, size_t pitch, uint32_t value, unsigned elem,
		    size_t count, size_t height);
/* Queues op and waits for it: the synchronous memory calls. */
CUresult vsim_stream_run(struct CUstream_st *s, struct vsim_op *op);
/* Blocks until s has completed seq. */
void vsim_stream_wait_seq(struct CUstream_st *s, uint64_t seq);
/* Blocks until everything queued on s so far is done. */
CUresult vsim_stream_drain(struct CUstream_st *s);
CUresult vsim_ctx_drain(struct CUctx_st *ctx);
struct vsim_op *vsim_op_new(enum vsim_op_kind kind);
/* memop.c: runs a VSIM_OP_MEMOP on its stream's worker (a wait polls). */
void vsim_memop_run(const struct vsim_op *op);
struct CUstream_st *vsim_stream_new(struct CUctx_st *ctx, unsigned flags, int prio);
/* Stops and frees every stream of ctx (context destruction). */
void vsim_ctx_streams_destroy(struct CUctx_st *ctx);

/* ---- event.c -------------------------------------------------------------- */

struct CUevent_st {
	uint32_t magic;
	unsigned flags;
	struct CUctx_st *ctx;
	unsigned generation;          /* its context's, when it was made */
	pthread_mutex_t lock;
	struct CUstream_st *stream;   /* of the last record, referenced */
	uint64_t seq;                 /* of the last record */
	uint64_t time_ns;             /* completion time of the last record */
	bool recorded;
	bool done;
	/* Recorded last in a capture (capture.c, under its lock, not this
	 * event's): the capture's id, 0 if not, and, while the capture goes
	 * on, the nodes a stream waiting for it would depend on. */
	uint64_t capture_id;
	CUgraphNode *capture_deps;
	size_t capture_ndeps;
};

/* Called by the worker when the record op with sequence seq runs. */
void vsim_event_complete(struct CUevent_st *e, uint64_t seq, uint64_t now);

/* ---- module.c / image.c --------------------------------------------------- */

#include "image.h"

struct CUfunc_st {
	uint32_t magic;
	struct CUmod_st *module;
	const struct vsim_kernel_desc *desc;
	const struct vgpu_kernel_impl *impl;    /* host form, or NULL */
	int attrs_max_dynamic_shared;
	int cache_config;
};

struct CUmod_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	struct vsim_image own;           /* parsed here, unless from a library */
	const struct vsim_image *image;  /* &own, or the library's */
	struct CUfunc_st *funcs;         /* one per image kernel */
	struct CUlib_st *library;        /* when made for a library */
};

struct CUkern_st {
	uint32_t magic;
	struct CUlib_st *library;
	unsigned index;
};

#define VSIM_LIB_CTXS 64

struct CUlib_st {
	uint32_t magic;
	struct vsim_image image;
	struct CUkern_st *kernels;
	/* The library's module in each context that used it, made on demand. */
	pthread_mutex_t lock;
	struct CUmod_st *modules[VSIM_LIB_CTXS];
	unsigned long long module_ctx_id[VSIM_LIB_CTXS];
};

/* Resolves a CUfunction that may be a CUkernel cast to CUfunction. */
CUresult vsim_func_resolve(CUfunction f, struct CUfunc_st **out);
/* The same, with a CUkernel's function taken in ctx rather than the current
 * context (a launch runs in its stream's context). */
CUresult vsim_func_resolve_in(CUfunction f, struct CUctx_st *ctx,
			      struct CUfunc_st **out);

/* ---- launch.c -------------------------------------------------------------- */

struct vsim_launch {
	struct CUfunc_st *func;
	struct CUctx_st *ctx;         /* it runs on this context's SMs */
	unsigned grid[3], block[3];
	unsigned shared_bytes;
	size_t params_size;
	unsigned char params[];       /* packed as the kernel's layout says */
};

/* Builds a launch of f in ctx, checked and with its parameters packed (the
 * caller frees it), without queueing it: graph kernel nodes. */
CUresult vsim_launch_prepare(CUfunction f, struct CUctx_st *ctx,
			     const unsigned grid[3], const unsigned block[3],
			     unsigned shared, void **params, void **extra,
			     struct vsim_launch **out);
/* Runs a kernel on the stream's worker: holds the device's engine (its
 * context's SMs), takes N/k times its nominal time in a context of k of
 * the device's N SMs, then the bus time of the host-backed memory its host
 * form touched (bus.c). */
void vsim_launch_run(int device, const struct vsim_launch *l);

/* ---- bus.c: the cost of kernels' accesses to host memory ----------------- */

/* The bytes of [p, p+len) in host-backed memory: host-located VMM
 * mappings, managed memory on the host, page-locked host memory. */
uint64_t vsim_bus_host_bytes(uintptr_t p, uint64_t len);
/* Nanoseconds that bytes take at bandwidth bytes/s (0: free). Pure. */
uint64_t vsim_bus_ns(uint64_t bytes, uint64_t bandwidth);
/* A kernel on this thread starts: nothing touched yet. */
void vsim_bus_begin(void);
/* vgpu_kernel_launch.touched: counts the host-backed bytes of a pass. */
void vsim_bus_touched(const void *ptr, uint64_t bytes);
/* The kernel's host form returned: the bus time it owes, in ns. */
uint64_t vsim_bus_end(void);

/* ---- graph.c ---------------------------------------------------------------- */

/* In a forked child: forget the parent's executable graphs and graph pool. */
void vsim_graph_fork_child(void);
/* Adds a kernel node running l (checked and packed by vsim_launch_prepare;
 * taken, and freed on failure) on device, after deps. */
CUresult vsim_graph_add_launch(CUgraph g, const CUgraphNode *deps, size_t ndeps,
			       struct vsim_launch *l, int device,
			       CUgraphNode *out);
/* Adds a memset node (cuGraphAddMemsetNode's rules: device memory, or
 * memory of g's allocation nodes not yet freed in g). */
CUresult vsim_graph_add_memset(CUgraph g, const CUgraphNode *deps,
			       size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p,
			       CUgraphNode *out);

/* ---- capture.c: stream capture into graphs ----------------------------------
 *
 * Each returns CUDA_SUCCESS (or false) at the cost of one atomic load when
 * no capture is in progress anywhere. Lock order: an event's lock, then the
 * capture lock, then graph.c's; the capture lock is never taken holding
 * graph.c's lock or a stream's. */

struct vsim_capture;

/* Called by vsim_stream_submit: true when op was handled by capture (a
 * kernel captured as a node; anything else on a capturing stream refused
 * and the capture invalidated; work on the legacy stream refused while a
 * blocking stream of its context captures), with the result in *rc; the
 * caller frees op. False: queue it. */
bool vsim_capture_take(struct CUstream_st *s, struct vsim_op *op, CUresult *rc);
/* For work that cannot be captured and must not run behind a capture's
 * back (synchronising or querying s, a graph launch):
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when s captures,
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT when s is the legacy stream of a
 * context whose blocking streams capture; either invalidates those
 * captures. CUDA_SUCCESS otherwise. */
CUresult vsim_capture_refuse(struct CUstream_st *s);
/* A call that capture modes call potentially unsafe (cuCtxSynchronize,
 * cuMemAlloc, cuMemFree): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, with the
 * conflicting captures invalidated, when this thread's mode prohibits it. */
CUresult vsim_capture_unsafe_call(void);
/* cuMemAllocAsync on s: true when s captures, with *dptr the address of a
 * new allocation node on device (or an error) in *rc. */
bool vsim_capture_alloc(struct CUstream_st *s, int device, size_t bytes,
			CUdeviceptr *dptr, CUresult *rc);
/* cuMemFreeAsync on s: true when s captures (a free node, or an error). */
bool vsim_capture_free(struct CUstream_st *s, CUdeviceptr dptr, CUresult *rc);
/* A memset on s: true when s captures (a memset node, or an error). */
bool vsim_capture_memset(struct CUstream_st *s,
			 const CUDA_MEMSET_NODE_PARAMS *p, CUresult *rc);
/* cuEventRecord of e on s: true when s captures. */
bool vsim_capture_record(struct CUstream_st *s, struct CUevent_st *e,
			 CUresult *rc);
/* e is recorded outside any capture: it stops being a captured event. */
void vsim_capture_event_forget(struct CUevent_st *e);
/* CUDA_ERROR_CAPTURED_EVENT when e was last recorded in a capture. */
CUresult vsim_capture_event_check(struct CUevent_st *e);
/* cuStreamWaitEvent(s, e): true when capture decides it (s captures, or
 * e was recorded in a capture), with the result in *rc. */
bool vsim_capture_wait(struct CUstream_st *s, struct CUevent_st *e,
		       CUresult *rc);
/* Streams destroyed: s, or with s NULL every stream of ctx (cuStreamDestroy,
 * context teardown). A capture begun on one ends, its graph destroyed; one
 * they joined is invalidated. */
void vsim_capture_streams_gone(struct CUctx_st *ctx, struct CUstream_st *s);
/* In a forked child: no capture goes on (the captures' threads are gone). */
void vsim_capture_fork_child(void);

#endif
