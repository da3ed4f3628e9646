/* launch.c - the launch hooks: every launch path of a capped tenant is
 * handed to the core's measuring (vgpu/measure.c), which admits it
 * against the tenant's GPU-time bucket (vgpu/throttle.c), makes it and
 * charges its real GPU time; docs/compute.md says how.
 *
 * What stays here is the CUDA side of it: each entry point's arguments
 * packed into one struct call and made again by call_real; the fast path
 * (uncapped and nothing movable: one flag test and the driver's call); the
 * kernel parameters read as a signal of use for overcommit; the
 * synchronisation hooks after which the core reads the launches that
 * ended; the thread's measuring state, and its exit, process exit and
 * fork. The old entry points (cuLaunch, cuLaunchGrid, cuLaunchGridAsync)
 * are throttled like the rest; cuLaunchCooperativeKernelMultiDevice is
 * refused while a share is set.
 */
#include "devices.h"
#include "overcommit.h"

#include <pthread.h>
#include <string.h>

/* This thread's launches being measured, per context (the core's). */
static __thread struct vgpu_measure_thread tls_meter;

#define PARAM_CACHE 256

struct param_info {
	CUfunction f;
	unsigned n;		/* parameters, at most 64 */
	uint64_t wide;		/* bit i: parameter i is 8 bytes */
};

static struct param_info param_cache[PARAM_CACHE];
static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;

/* The launch being made, whatever its entry point. */
enum call_kind {
	CALL_KERNEL, CALL_KERNEL_PTSZ, CALL_EX, CALL_EX_PTSZ, CALL_COOP,
	CALL_COOP_PTSZ, CALL_LEGACY, CALL_LEGACY_GRID, CALL_LEGACY_ASYNC,
	CALL_GRAPH, CALL_GRAPH_PTSZ
};

struct call {
	enum call_kind kind;
	CUfunction f;
	unsigned g[3], b[3], shmem;
	CUstream stream;
	void **params, **extra;
	const CUlaunchConfig *config;
	CUgraphExec graph;
};

static CUresult call_driver(const struct call *c)
{
	switch (c->kind) {
	case CALL_KERNEL:
		return vgpu__real.cuLaunchKernel(c->f, c->g[0], c->g[1], c->g[2],
			c->b[0], c->b[1], c->b[2], c->shmem, c->stream,
			c->params, c->extra);
	case CALL_KERNEL_PTSZ:
		return vgpu__real.cuLaunchKernel_ptsz(c->f, c->g[0], c->g[1],
			c->g[2], c->b[0], c->b[1], c->b[2], c->shmem, c->stream,
			c->params, c->extra);
	case CALL_EX:
		return vgpu__real.cuLaunchKernelEx(c->config, c->f, c->params,
						   c->extra);
	case CALL_EX_PTSZ:
		return vgpu__real.cuLaunchKernelEx_ptsz(c->config, c->f,
							c->params, c->extra);
	case CALL_COOP:
		return vgpu__real.cuLaunchCooperativeKernel(c->f, c->g[0],
			c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->shmem,
			c->stream, c->params);
	case CALL_COOP_PTSZ:
		return vgpu__real.cuLaunchCooperativeKernel_ptsz(c->f, c->g[0],
			c->g[1], c->g[2], c->b[0], c->b[1], c->b[2], c->shmem,
			c->stream, c->params);
	case CALL_LEGACY:
		return vgpu__real.cuLaunch(c->f);
	case CALL_LEGACY_GRID:
		return vgpu__real.cuLaunchGrid(c->f, (int)c->g[0], (int)c->g[1]);
	case CALL_LEGACY_ASYNC:
		return vgpu__real.cuLaunchGridAsync(c->f, (int)c->g[0],
						    (int)c->g[1], c->stream);
	case CALL_GRAPH:
		return vgpu__real.cuGraphLaunch(c->graph, c->stream);
	case CALL_GRAPH_PTSZ:
		return vgpu__real.cuGraphLaunch_ptsz(c->graph, c->stream);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* The driver's call, through the gate when the process has one
 * (control.c). A capped launch passes it in the core, around the launch
 * and its events only (throttled()): a move never waits on a share. */
static CUresult call_real(const struct call *c)
{
	CUresult r;

	if (!__atomic_load_n(&vgpu__gate_on, __ATOMIC_RELAXED))
		return call_driver(c);
	vgpu__gate_enter();	/* waits while the process is held */
	r = call_driver(c);
	vgpu__gate_leave();
	return r;
}

static bool per_thread(enum call_kind k)
{
	return k == CALL_KERNEL_PTSZ || k == CALL_EX_PTSZ ||
	       k == CALL_COOP_PTSZ || k == CALL_GRAPH_PTSZ;
}

static CUstream call_stream(const struct call *call)
{
	return call->config ? call->config->hStream : call->stream;
}

static int launch_cb(const void *arg)
{
	return (int)call_driver(arg);
}

/* A capped launch, handed to the core: measured in the current context,
 * or in its stream's when none is current (a CUkernel launched on a
 * stream). */
static CUresult throttled(const struct call *call)
{
	bool graph = call->kind >= CALL_GRAPH;
	struct vgpu_measure_call m = {
		.key = graph ? (uint64_t)(uintptr_t)call->graph
			     : (uint64_t)(uintptr_t)call->f,
		.kind = graph ? VGPU_MEASURE_GRAPH : VGPU_MEASURE_KERNEL,
		.stream = (struct vgpu_prim_stream *)call_stream(call),
		.per_thread = per_thread(call->kind),
		.launch = launch_cb,
		.arg = call,
	};

	/* The gate around the launch and its events, not the admission. */
	if (__atomic_load_n(&vgpu__gate_on, __ATOMIC_RELAXED)) {
		m.enter = vgpu__gate_enter;
		m.leave = vgpu__gate_leave;
	}

	if (__atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE))
		return call_real(call);
	return (CUresult)vgpu_measure_launch(&tls_meter, &m);
}

/* ---- synchronisation: launches seen to end -------------------------------- */

/* After a synchronisation the thread's launches it waited for have ended:
 * the core records their ends in the GPU's timeline now, not at its next
 * launch, which may be far off (a CPU phase). Uncapped: one load. And the
 * ledgers are polled: a job that allocated once and now only computes
 * synchronises, so it follows a deleted or replaced ledger file too (a
 * clock read per device unless a check is due). */
static CUresult after_sync(CUresult r)
{
	if (__atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE))
		return r;
	if (r == CUDA_SUCCESS &&
	    __atomic_load_n(&vgpu__compute_on, __ATOMIC_RELAXED))
		vgpu_measure_synchronised(&tls_meter);
	vgpu__dev_poll_ledgers();
	return r;
}

/* Each hook: the driver's call, then after_sync. */
#define SYNC_HOOK(sym, params, args)					\
	CUresult sym params						\
	{								\
		return vgpu__real.sym ? after_sync(vgpu__real.sym args)	\
				      : CUDA_ERROR_NOT_INITIALIZED;	\
	}

SYNC_HOOK(cuCtxSynchronize, (void), ())
SYNC_HOOK(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC_HOOK(cuStreamSynchronize, (CUstream s), (s))
SYNC_HOOK(cuStreamSynchronize_ptsz, (CUstream s), (s))
SYNC_HOOK(cuEventSynchronize, (CUevent e), (e))
/* A query that finds the work done is a synchronisation too (a program
 * that polls instead of waiting). */
SYNC_HOOK(cuStreamQuery, (CUstream s), (s))
SYNC_HOOK(cuStreamQuery_ptsz, (CUstream s), (s))
SYNC_HOOK(cuEventQuery, (CUevent e), (e))

/* ---- the thread's and the process's end, fork ------------------------------ */

void vgpu__launch_thread_exit(void)
{
	vgpu_measure_thread_exit(&tls_meter);
}

void vgpu__launch_process_exit(void)
{
	vgpu_measure_process_exit(&tls_meter);
}

void vgpu__launch_fork_child(void)
{
	/* The parent's events are not the child's. */
	vgpu_measure_fork_child(&tls_meter);
	pthread_mutex_init(&param_lock, NULL);
}

/* ---- kernel arguments as a signal of use (overcommit) ------------------- */

/* Which parameters of a function are 8 bytes (could be pointers), read
 * once per function with cuFuncGetParamInfo and kept in a small cache
 * (param_cache, above). */
static bool param_info(CUfunction f, struct param_info *out)
{
	size_t h = ((uintptr_t)f >> 4) % PARAM_CACHE;
	struct param_info pi = { f, 0, 0 };

	pthread_mutex_lock(&param_lock);
	if (param_cache[h].f == f) {
		*out = param_cache[h];
		pthread_mutex_unlock(&param_lock);
		return true;
	}
	pthread_mutex_unlock(&param_lock);
	if (!vgpu__real.cuFuncGetParamInfo)
		return false;
	for (size_t i = 0; i < 64; i++) {
		size_t off, size;
		if (vgpu__real.cuFuncGetParamInfo(f, i, &off, &size) !=
		    CUDA_SUCCESS)
			break;
		pi.n = (unsigned)i + 1;
		if (size == 8)
			pi.wide |= 1ull << i;
	}
	pthread_mutex_lock(&param_lock);
	param_cache[h] = pi;
	pthread_mutex_unlock(&param_lock);
	*out = pi;
	return true;
}

static void note_uses(CUfunction f, void **params)
{
	struct param_info pi;

	if (!params || !f || !param_info(f, &pi))
		return;
	for (unsigned i = 0; i < pi.n; i++)
		if ((pi.wide >> i & 1) && params[i]) {
			uint64_t v;
			memcpy(&v, params[i], sizeof(v));
			vgpu__note_use((CUdeviceptr)v);
		}
}

/* The uncapped fast path: no share, no VGPU_CONTROL, nothing movable.
 * vgpu__compute_on may be turned on by vgpu-ctl or an opportunistic
 * neighbour while threads launch (devices.c): relaxed loads, the same
 * instruction as plain ones. About every 256th launch of the process takes
 * the slow path to look at the ledgers (devices.c's watch: a few loads),
 * for a process that never synchronises, allocates or frees. The count is
 * a relaxed load and store on a line of its own, not a read-modify-write:
 * threads racing on it lose counts, which only delays a look (a
 * thread-local count cost 6 ns a launch here, a shared atomic add would
 * bounce between threads). */
static struct {
	unsigned n;
} __attribute__((aligned(64))) fast_launches;

static inline bool fast(void)
{
	unsigned n;

	if (__builtin_expect(__atomic_load_n(&vgpu__compute_on,
					     __ATOMIC_RELAXED) ||
			     __atomic_load_n(&vgpu__gate_on,
					     __ATOMIC_RELAXED) ||
			     vgpu__movable_any(), 0))
		return false;
	n = __atomic_load_n(&fast_launches.n, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&fast_launches.n, n, __ATOMIC_RELAXED);
	return __builtin_expect((n & 255) != 0, 1);
}

#define FAST fast()

/* The slow path of a launch hook: the ledgers looked at when the fast
 * path's count says so (moved on, so that a process whose launches all
 * take this path does not look each time), overcommit's signal of use,
 * then the throttle if a share is set. */
static CUresult launch_slow(const struct call *c)
{
	unsigned n = __atomic_load_n(&fast_launches.n, __ATOMIC_RELAXED);

	if (__builtin_expect((n & 255) == 0, 0)) {
		__atomic_store_n(&fast_launches.n, n + 1, __ATOMIC_RELAXED);
		vgpu__dev_watch_all();
	}
	if (vgpu__movable_any())
		note_uses(c->f, c->params);
	return __atomic_load_n(&vgpu__compute_on, __ATOMIC_ACQUIRE) ?
	       throttled(c) : call_real(c);
}

/* ---- the hooks ---------------------------------------------------------- */

/* Each hook is the fast path and a tail call: the struct call of its slow
 * path is built in a function of its own with the hook's signature
 * (never inlined), so that the fast path makes no stack frame (with it
 * inlined, every uncapped launch saved six registers and copied its stack
 * arguments twice). */
#define SLOW static __attribute__((noinline)) CUresult

#define KERNEL_ARGS							\
	CUfunction f, unsigned int gridDimX, unsigned int gridDimY,	\
	unsigned int gridDimZ, unsigned int blockDimX,			\
	unsigned int blockDimY, unsigned int blockDimZ,			\
	unsigned int sharedMemBytes, CUstream hStream,			\
	void **kernelParams

#define KERNEL_CALL(k)							\
	struct call c_ = { .kind = (k), .f = f,				\
		.g = { gridDimX, gridDimY, gridDimZ },			\
		.b = { blockDimX, blockDimY, blockDimZ },		\
		.shmem = sharedMemBytes, .stream = hStream,		\
		.params = kernelParams }

#define KERNEL_PASS							\
	f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,		\
	blockDimZ, sharedMemBytes, hStream, kernelParams

SLOW kernel_slow(KERNEL_ARGS, void **extra)
{
	KERNEL_CALL(CALL_KERNEL);
	c_.extra = extra;
	return launch_slow(&c_);
}

CUresult cuLaunchKernel(KERNEL_ARGS, void **extra)
{
	if (FAST)
		return vgpu__real.cuLaunchKernel(KERNEL_PASS, extra);
	return kernel_slow(KERNEL_PASS, extra);
}

SLOW kernel_ptsz_slow(KERNEL_ARGS, void **extra)
{
	KERNEL_CALL(CALL_KERNEL_PTSZ);
	c_.extra = extra;
	return launch_slow(&c_);
}

CUresult cuLaunchKernel_ptsz(KERNEL_ARGS, void **extra)
{
	if (FAST)
		return vgpu__real.cuLaunchKernel_ptsz(KERNEL_PASS, extra);
	return kernel_ptsz_slow(KERNEL_PASS, extra);
}

SLOW coop_slow(KERNEL_ARGS)
{
	KERNEL_CALL(CALL_COOP);
	return launch_slow(&c_);
}

CUresult cuLaunchCooperativeKernel(KERNEL_ARGS)
{
	if (FAST)
		return vgpu__real.cuLaunchCooperativeKernel(KERNEL_PASS);
	return coop_slow(KERNEL_PASS);
}

SLOW coop_ptsz_slow(KERNEL_ARGS)
{
	KERNEL_CALL(CALL_COOP_PTSZ);
	return launch_slow(&c_);
}

CUresult cuLaunchCooperativeKernel_ptsz(KERNEL_ARGS)
{
	if (FAST)
		return vgpu__real.cuLaunchCooperativeKernel_ptsz(KERNEL_PASS);
	return coop_ptsz_slow(KERNEL_PASS);
}

SLOW ex_slow(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
	     void **extra)
{
	struct call c_ = { .kind = CALL_EX, .f = f, .config = config,
			   .params = kernelParams, .extra = extra };
	return launch_slow(&c_);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
			  void **kernelParams, void **extra)
{
	if (FAST || !config)
		return vgpu__real.cuLaunchKernelEx(config, f, kernelParams,
						   extra);
	return ex_slow(config, f, kernelParams, extra);
}

SLOW ex_ptsz_slow(const CUlaunchConfig *config, CUfunction f,
		  void **kernelParams, void **extra)
{
	struct call c_ = { .kind = CALL_EX_PTSZ, .f = f, .config = config,
			   .params = kernelParams, .extra = extra };
	return launch_slow(&c_);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
			       void **kernelParams, void **extra)
{
	if (FAST || !config)
		return vgpu__real.cuLaunchKernelEx_ptsz(config, f, kernelParams,
							extra);
	return ex_ptsz_slow(config, f, kernelParams, extra);
}

SLOW graph_slow(CUgraphExec hGraphExec, CUstream hStream)
{
	struct call c_ = { .kind = CALL_GRAPH, .graph = hGraphExec,
			   .stream = hStream };
	return launch_slow(&c_);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	if (FAST)
		return vgpu__real.cuGraphLaunch(hGraphExec, hStream);
	return graph_slow(hGraphExec, hStream);
}

SLOW graph_ptsz_slow(CUgraphExec hGraphExec, CUstream hStream)
{
	struct call c_ = { .kind = CALL_GRAPH_PTSZ, .graph = hGraphExec,
			   .stream = hStream };
	return launch_slow(&c_);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	if (FAST)
		return vgpu__real.cuGraphLaunch_ptsz(hGraphExec, hStream);
	return graph_ptsz_slow(hGraphExec, hStream);
}

/* The launch entry points from before cuLaunchKernel (deprecated, still
 * exported by the driver): throttled like the others. */
CUresult cuLaunch(CUfunction f)
{
	if (FAST)
		return vgpu__real.cuLaunch ? vgpu__real.cuLaunch(f)
					   : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY, .f = f };
	return vgpu__real.cuLaunch ? launch_slow(&c_) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	if (FAST || !vgpu__real.cuLaunchGrid)
		return vgpu__real.cuLaunchGrid
			       ? vgpu__real.cuLaunchGrid(f, grid_width,
							 grid_height)
			       : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY_GRID, .f = f,
			   .g = { (unsigned)grid_width, (unsigned)grid_height,
				  1 } };
	return launch_slow(&c_);
}

CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height,
			   CUstream hStream)
{
	if (FAST || !vgpu__real.cuLaunchGridAsync)
		return vgpu__real.cuLaunchGridAsync
			       ? vgpu__real.cuLaunchGridAsync(f, grid_width,
							      grid_height,
							      hStream)
			       : CUDA_ERROR_NOT_FOUND;
	struct call c_ = { .kind = CALL_LEGACY_ASYNC, .f = f,
			   .g = { (unsigned)grid_width, (unsigned)grid_height,
				  1 }, .stream = hStream };
	return launch_slow(&c_);
}

/* Launches on several devices at once, measured by no single stream: with
 * a compute share set, refused with a message (the API is deprecated;
 * cuLaunchCooperativeKernel per device does the same). */
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
					      unsigned int numDevices,
					      unsigned int flags)
{
	CUresult r;

	if (!vgpu__real.cuLaunchCooperativeKernelMultiDevice)
		return CUDA_ERROR_NOT_FOUND;
	if (__atomic_load_n(&vgpu__compute_on, __ATOMIC_RELAXED) &&
	    vgpu__dev_any_capped()) {
		vgpu_log(VGPU_LOG_ERROR, "cuLaunchCooperativeKernelMultiDevice "
			 "is refused while a compute share is set "
			 "(VGPU_COMPUTE_LIMIT): its launches cannot be "
			 "measured; launch with cuLaunchCooperativeKernel on "
			 "each device");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!__atomic_load_n(&vgpu__gate_on, __ATOMIC_RELAXED))
		return vgpu__real.cuLaunchCooperativeKernelMultiDevice(
			launchParamsList, numDevices, flags);
	vgpu__gate_enter();	/* waits while the process is held */
	r = vgpu__real.cuLaunchCooperativeKernelMultiDevice(launchParamsList,
							    numDevices, flags);
	vgpu__gate_leave();
	return r;
}
