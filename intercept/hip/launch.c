/* launch.c - HIP's launches through the core's compute share
 * (vgpu/measure.c), and the primitives it measures them with.
 *
 * With no share on any device (vgpu__compute_on false) a launch is one
 * flag test and the runtime's call. Otherwise each launch entry point's
 * arguments are packed into a struct call and handed to the core with
 * call_real, as intercept/launch.c does for CUDA.
 *
 * The runtime API has no contexts to speak of: a device is the context
 * (its ordinal + 1 as the handle), made current with hipSetDevice.
 */
#include "hip.h"
#include "pool.h"

#include <stdint.h>

static __thread struct vgpu_measure_thread tls_meter;

enum {
	CALL_KERNEL, CALL_KERNEL_SPT, CALL_EXT, CALL_COOPERATIVE,
	CALL_COOPERATIVE_SPT, CALL_MODULE, CALL_EXT_MODULE,
	CALL_MULTI_COOPERATIVE, CALL_MULTI_EXT, CALL_GRAPH
};

struct call {
	int which;
	const void *f;
	hipFunction_t mf;
	hipGraphExec_t exec;
	hipLaunchParams *list;
	dim3 grid, block;
	unsigned g[3], b[3];	/* module launches: grid (or work-items), block */
	void **args, **extra;
	size_t shm;
	hipStream_t stream;
	hipEvent_t start, stop;
	int flags;
};

static int call_stub(const struct call *c)
{
	switch (c->which) {
	case CALL_KERNEL:
		return vgpu__hip.hipLaunchKernel(c->f, c->grid, c->block,
						 c->args, c->shm, c->stream);
	case CALL_KERNEL_SPT:
		return vgpu__hip.hipLaunchKernel_spt(c->f, c->grid, c->block,
						     c->args, c->shm, c->stream);
	case CALL_EXT:
		return vgpu__hip.hipExtLaunchKernel(c->f, c->grid, c->block,
			c->args, c->shm, c->stream, c->start, c->stop,
			c->flags);
	case CALL_COOPERATIVE:
		return vgpu__hip.hipLaunchCooperativeKernel(c->f, c->grid,
			c->block, c->args, (unsigned)c->shm, c->stream);
	default:
		return vgpu__hip.hipLaunchCooperativeKernel_spt(c->f, c->grid,
			c->block, c->args, (uint32_t)c->shm, c->stream);
	}
}

static int call_module(const struct call *c)
{
	if (c->which == CALL_MODULE)
		return vgpu__hip.hipModuleLaunchKernel(c->mf, c->g[0], c->g[1],
			c->g[2], c->b[0], c->b[1], c->b[2], (unsigned)c->shm,
			c->stream, c->args, c->extra);
	return vgpu__hip.hipExtModuleLaunchKernel(c->mf, c->g[0], c->g[1],
		c->g[2], c->b[0], c->b[1], c->b[2], c->shm, c->stream, c->args,
		c->extra, c->start, c->stop, (uint32_t)c->flags);
}

static int call_real(const void *arg)
{
	const struct call *c = arg;

	switch (c->which) {
	case CALL_MODULE:
	case CALL_EXT_MODULE:
		return call_module(c);
	case CALL_MULTI_COOPERATIVE:
		return vgpu__hip.hipLaunchCooperativeKernelMultiDevice(c->list,
			1, (unsigned)c->flags);
	case CALL_MULTI_EXT:
		return vgpu__hip.hipExtLaunchMultiKernelMultiDevice(c->list,
			1, (unsigned)c->flags);
	case CALL_GRAPH:
		return vgpu__hip.hipGraphLaunch(c->exec, c->stream);
	default:
		return call_stub(c);
	}
}

/* The process's first launch joins its current device's ledger, if
 * nothing did yet (no allocation, no hipSetDevice): the tenant's compute
 * terms then apply to this launch already. */
static bool launched;

static void first_launch(void)
{
	vgpu__hip_dev_current();
	__atomic_store_n(&launched, true, __ATOMIC_RELAXED);
}

/* One launch: to the runtime at once when no device has a share, else
 * through the core. A per-thread entry's null stream is the thread's
 * stream (hipStreamPerThread), where its events are recorded. */
static hipError_t launch(const struct call *c, uint64_t key, int kind)
{
	bool spt = c->which == CALL_KERNEL_SPT ||
		   c->which == CALL_COOPERATIVE_SPT;
	hipStream_t s = spt && !c->stream ? hipStreamPerThread : c->stream;
	struct vgpu_measure_call m = {
		.key = key, .kind = kind,
		.stream = (struct vgpu_prim_stream *)s,
		.per_thread = s == hipStreamPerThread,
		.launch = call_real, .arg = c,
	};

	if (__builtin_expect(!__atomic_load_n(&launched, __ATOMIC_RELAXED), 0))
		first_launch();
	if (!__atomic_load_n(&vgpu__compute_on, __ATOMIC_ACQUIRE))
		return (hipError_t)call_real(c);
	return (hipError_t)vgpu_measure_launch(&tls_meter, &m);
}

/* The runtime's entry, or NULL: a hook whose real function is missing
 * answers hipErrorNotInitialized. */
static hipError_t launch_if(const void *real, const struct call *c,
			    uint64_t key, int kind)
{
	vgpu__hip_start();
	if (!*(void *const *)real)
		return hipErrorNotInitialized;
	return launch(c, key, kind);
}

hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args,
			   size_t shm, hipStream_t s)
{
	struct call c = { .which = CALL_KERNEL, .f = f, .grid = grid,
			  .block = block, .args = args, .shm = shm,
			  .stream = s };

	return launch_if(&vgpu__hip.hipLaunchKernel, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

/* What <<<...>>> becomes under hipcc -fgpu-default-stream=per-thread. */
hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block,
			       void **args, size_t shm, hipStream_t s)
{
	struct call c = { .which = CALL_KERNEL_SPT, .f = f, .grid = grid,
			  .block = block, .args = args, .shm = shm,
			  .stream = s };

	return launch_if(&vgpu__hip.hipLaunchKernel_spt, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block,
			      void **args, size_t shm, hipStream_t s,
			      hipEvent_t start, hipEvent_t stop, int flags)
{
	struct call c = { .which = CALL_EXT, .f = f, .grid = grid,
			  .block = block, .args = args, .shm = shm,
			  .stream = s, .start = start, .stop = stop,
			  .flags = flags };

	return launch_if(&vgpu__hip.hipExtLaunchKernel, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block,
				      void **args, unsigned int shm,
				      hipStream_t s)
{
	struct call c = { .which = CALL_COOPERATIVE, .f = f, .grid = grid,
			  .block = block, .args = args, .shm = shm,
			  .stream = s };

	return launch_if(&vgpu__hip.hipLaunchCooperativeKernel, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid,
					  dim3 block, void **args,
					  uint32_t shm, hipStream_t s)
{
	struct call c = { .which = CALL_COOPERATIVE_SPT, .f = f,
			  .grid = grid, .block = block, .args = args,
			  .shm = shm, .stream = s };

	return launch_if(&vgpu__hip.hipLaunchCooperativeKernel_spt, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx,
				 unsigned int gy, unsigned int gz,
				 unsigned int bx, unsigned int by,
				 unsigned int bz, unsigned int shm,
				 hipStream_t s, void **args, void **extra)
{
	struct call c = { .which = CALL_MODULE, .mf = f, .g = { gx, gy, gz },
			  .b = { bx, by, bz }, .shm = shm, .stream = s,
			  .args = args, .extra = extra };

	return launch_if(&vgpu__hip.hipModuleLaunchKernel, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

/* hip_ext.h's: sizes in work-items, not blocks (the runtime divides). */
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
				    uint32_t gz, uint32_t lx, uint32_t ly,
				    uint32_t lz, size_t shm, hipStream_t s,
				    void **args, void **extra,
				    hipEvent_t start, hipEvent_t stop,
				    uint32_t flags)
{
	struct call c = { .which = CALL_EXT_MODULE, .mf = f,
			  .g = { gx, gy, gz }, .b = { lx, ly, lz },
			  .shm = shm, .stream = s, .args = args,
			  .extra = extra, .start = start, .stop = stop,
			  .flags = (int)flags };

	return launch_if(&vgpu__hip.hipExtModuleLaunchKernel, &c,
			 (uint64_t)(uintptr_t)f, VGPU_MEASURE_KERNEL);
}

/* hipExtModuleLaunchKernel's deprecated name, without the flags (the
 * runtime's is that call): made as one. */
hipError_t hipHccModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
				    uint32_t gz, uint32_t lx, uint32_t ly,
				    uint32_t lz, size_t shm, hipStream_t s,
				    void **args, void **extra,
				    hipEvent_t start, hipEvent_t stop)
{
	return hipExtModuleLaunchKernel(f, gx, gy, gz, lx, ly, lz, shm, s,
					args, extra, start, stop, 0);
}

/* A multi-device launch of one device is measured as that device's
 * launch. Of more, its kernels cannot be measured as one launch, on one
 * stream: refused while a compute share is set, as the CUDA front end
 * refuses cuLaunchCooperativeKernelMultiDevice. */
static hipError_t launch_multi(const void *real, int which,
			       hipLaunchParams *l, int n, unsigned flags)
{
	struct call c = { .which = which, .list = l, .flags = (int)flags };

	if (n == 1 && l) {
		c.stream = l->stream;
		return launch_if(real, &c, (uint64_t)(uintptr_t)l->func,
				 VGPU_MEASURE_KERNEL);
	}
	vgpu__hip_start();
	if (!*(void *const *)real)
		return hipErrorNotInitialized;
	/* No list, or no device in it: the runtime's own error. */
	if (l && n > 1 && __atomic_load_n(&vgpu__compute_on, __ATOMIC_ACQUIRE)) {
		vgpu_log(VGPU_LOG_ERROR, "a multi-device launch of %d devices "
			 "is refused while a compute share is set "
			 "(VGPU_COMPUTE_LIMIT): its launches cannot be "
			 "measured; launch on each device", n);
		return hipErrorNotSupported;
	}
	return which == CALL_MULTI_COOPERATIVE
		? vgpu__hip.hipLaunchCooperativeKernelMultiDevice(l, n, flags)
		: vgpu__hip.hipExtLaunchMultiKernelMultiDevice(l, n, flags);
}

hipError_t hipLaunchCooperativeKernelMultiDevice(hipLaunchParams *l, int n,
						 unsigned int flags)
{
	return launch_multi(&vgpu__hip.hipLaunchCooperativeKernelMultiDevice,
			    CALL_MULTI_COOPERATIVE, l, n, flags);
}

hipError_t hipExtLaunchMultiKernelMultiDevice(hipLaunchParams *l, int n,
					      unsigned int flags)
{
	return launch_multi(&vgpu__hip.hipExtLaunchMultiKernelMultiDevice,
			    CALL_MULTI_EXT, l, n, flags);
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t s)
{
	struct call c = { .which = CALL_GRAPH, .exec = exec, .stream = s };

	return launch_if(&vgpu__hip.hipGraphLaunch, &c,
			 (uint64_t)(uintptr_t)exec, VGPU_MEASURE_GRAPH);
}

/* ---- synchronisations: the ends read now, the ledgers followed ---------- */

/* A pool gives its idle memory past its release threshold back at a
 * synchronisation: each accounted device's pools are settled. */
static hipError_t synchronised(hipError_t r)
{
	if (r == hipSuccess &&
	    __atomic_load_n(&vgpu__compute_on, __ATOMIC_RELAXED))
		vgpu_measure_synchronised(&tls_meter);
	vgpu__hip_dev_poll();
	for (int d = 0; r == hipSuccess && d < VGPU_MAX_DEVICES; d++)
		if (vgpu__hip_dev_peek(d))
			vgpu_pools_settle_device(d);
	return r;
}

hipError_t hipDeviceSynchronize(void)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipDeviceSynchronize)
		return hipErrorNotInitialized;
	return synchronised(vgpu__hip.hipDeviceSynchronize());
}

hipError_t hipStreamSynchronize(hipStream_t s)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipStreamSynchronize)
		return hipErrorNotInitialized;
	return synchronised(vgpu__hip.hipStreamSynchronize(s));
}

hipError_t hipStreamSynchronize_spt(hipStream_t s)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipStreamSynchronize_spt)
		return hipErrorNotInitialized;
	return synchronised(vgpu__hip.hipStreamSynchronize_spt(s));
}

hipError_t hipEventSynchronize(hipEvent_t e)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipEventSynchronize)
		return hipErrorNotInitialized;
	return synchronised(vgpu__hip.hipEventSynchronize(e));
}

void vgpu__hip_launch_thread_exit(void)
{
	vgpu_measure_thread_exit(&tls_meter);
}

void vgpu__hip_launch_process_exit(void)
{
	vgpu_measure_process_exit(&tls_meter);
}

void vgpu__hip_launch_fork_child(void)
{
	vgpu_measure_fork_child(&tls_meter);
	launched = false;
}

/* ---- the primitives (vgpu/prim.h) over the runtime ---------------------- */

/* The device's pools give back their idle memory (pools.c). */
static bool reclaim(int dev)
{
	return vgpu_pools_reclaim(dev);
}

static struct vgpu_prim_ctx *ctx_current(void)
{
	int d;

	if (!vgpu__hip.hipGetDevice || vgpu__hip.hipGetDevice(&d) != hipSuccess)
		return NULL;
	return (struct vgpu_prim_ctx *)(uintptr_t)(d + 1);
}

/* The devices made current by ctx_push, to go back to. */
static __thread int tls_pushed[4];
static __thread int tls_depth;

static bool ctx_push(struct vgpu_prim_ctx *ctx)
{
	int was;

	if (tls_depth == 4 || !vgpu__hip.hipGetDevice ||
	    vgpu__hip.hipGetDevice(&was) != hipSuccess ||
	    vgpu__hip.hipSetDevice((int)(uintptr_t)ctx - 1) != hipSuccess)
		return false;
	tls_pushed[tls_depth++] = was;
	return true;
}

static void ctx_pop(void)
{
	if (tls_depth > 0)
		vgpu__hip.hipSetDevice(tls_pushed[--tls_depth]);
}

/* The runtime cannot say (hipStreamGetDevice is later than 5.2). */
static struct vgpu_prim_ctx *stream_ctx(struct vgpu_prim_stream *s)
{
	(void)s;
	return NULL;
}

static bool sm_counts(struct vgpu_prim_ctx *ctx, unsigned *held,
		      unsigned *total)
{
	(void)ctx, (void)held, (void)total;
	return false;
}

static struct vgpu_hip_dev *ctx_dev(struct vgpu_prim_ctx *ctx)
{
	return vgpu__hip_dev_attach((int)(uintptr_t)ctx - 1);
}

static const struct vgpu_measure_gpu *gpu(struct vgpu_prim_ctx *ctx)
{
	struct vgpu_hip_dev *dv = ctx_dev(ctx);

	if (!dv || __atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) !=
			   VGPU_DEV_READY || !dv->slot ||
	    !__atomic_load_n(&dv->capped, __ATOMIC_ACQUIRE))
		return NULL;
	return &dv->gpu;
}

static struct vgpu_slot *announced(struct vgpu_prim_ctx *ctx)
{
	struct vgpu_hip_dev *dv = ctx_dev(ctx);

	if (!dv || !dv->slot ||
	    !__atomic_load_n(&dv->announcing, __ATOMIC_RELAXED))
		return NULL;
	return dv->slot;
}

static struct vgpu_prim_stream *stream_create(void)
{
	hipStream_t s = NULL;

	if (!vgpu__hip.hipStreamCreateWithFlags ||
	    vgpu__hip.hipStreamCreateWithFlags(&s, hipStreamNonBlocking) !=
		    hipSuccess)
		return NULL;
	return (struct vgpu_prim_stream *)s;
}

static void stream_destroy(struct vgpu_prim_stream *s)
{
	if (vgpu__hip.hipStreamDestroy)
		vgpu__hip.hipStreamDestroy((hipStream_t)s);
}

static struct vgpu_prim_event *event_create(void)
{
	hipEvent_t e = NULL;

	if (!vgpu__hip.hipEventCreateWithFlags ||
	    vgpu__hip.hipEventCreateWithFlags(&e, hipEventDefault) !=
		    hipSuccess)
		return NULL;
	return (struct vgpu_prim_event *)e;
}

static void event_destroy(struct vgpu_prim_event *e)
{
	vgpu__hip.hipEventDestroy((hipEvent_t)e);
}

/* hipStreamPerThread is its own handle: per_thread needs nothing more. */
static bool event_record(struct vgpu_prim_event *e, struct vgpu_prim_stream *s,
			 bool per_thread)
{
	(void)per_thread;
	return vgpu__hip.hipEventRecord((hipEvent_t)e, (hipStream_t)s) ==
	       hipSuccess;
}

static int event_query(struct vgpu_prim_event *e)
{
	hipError_t r = vgpu__hip.hipEventQuery((hipEvent_t)e);

	return r == hipSuccess ? VGPU_PRIM_DONE
	       : r == hipErrorNotReady ? VGPU_PRIM_NOT_READY
				       : VGPU_PRIM_ERROR;
}

static bool event_elapsed(struct vgpu_prim_event *a, struct vgpu_prim_event *b,
			  uint64_t *ns)
{
	float ms;

	if (vgpu__hip.hipEventElapsedTime(&ms, (hipEvent_t)a,
					  (hipEvent_t)b) != hipSuccess ||
	    !(ms >= 0))
		return false;
	*ns = (uint64_t)((double)ms * 1e6);
	return true;
}

const struct vgpu_prim vgpu__hip_prim = {
	.reclaim = reclaim,
	.ctx_current = ctx_current,
	.ctx_push = ctx_push,
	.ctx_pop = ctx_pop,
	.stream_ctx = stream_ctx,
	.sm_counts = sm_counts,
	.gpu = gpu,
	.stream_create = stream_create,
	.stream_destroy = stream_destroy,
	.event_create = event_create,
	.event_destroy = event_destroy,
	.event_record = event_record,
	.event_query = event_query,
	.event_elapsed = event_elapsed,
	.announced = announced,
	.now = vgpu_host_now,
	.now_coarse = vgpu_host_now_coarse,
	.sleep = vgpu_host_sleep,
	.wait_on = vgpu_host_wait_on,
	.thread_watch = vgpu__hip_watch_thread,
	.probe_watch = vgpu_measure_watch,
};
