/* prim.c - the core's primitives (vgpu/prim.h) over the CUDA driver: its
 * handles are the driver's, cast; its answers the driver's, translated. */
#include "devices.h"

#include <string.h>

/* Pools keep freed blocks until trimmed or synchronised: at the slice's
 * edge they are trimmed and their charge read again (pools.c). */
static bool reclaim(int dev)
{
	return vgpu_pools_reclaim(dev);
}

/* ---- contexts ------------------------------------------------------------- */

static struct vgpu_prim_ctx *ctx_current(void)
{
	CUcontext ctx = NULL;

	if (!vgpu__real.cuCtxGetCurrent ||
	    vgpu__real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
		return NULL;
	return (struct vgpu_prim_ctx *)ctx;
}

static bool ctx_push(struct vgpu_prim_ctx *ctx)
{
	return vgpu__real.cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS;
}

static void ctx_pop(void)
{
	CUcontext top;

	vgpu__real.cuCtxPopCurrent_v2(&top);
}

/* The legacy and per-thread default streams are handles of no context of
 * their own. */
static struct vgpu_prim_ctx *stream_ctx(struct vgpu_prim_stream *s)
{
	CUstream cs = (CUstream)s;
	CUcontext ctx = NULL;

	if (!cs || cs == CU_STREAM_LEGACY || cs == CU_STREAM_PER_THREAD ||
	    !vgpu__real.cuStreamGetCtx ||
	    vgpu__real.cuStreamGetCtx(cs, &ctx) != CUDA_SUCCESS)
		return NULL;
	return (struct vgpu_prim_ctx *)ctx;
}

/* A green context's SM resource against its device's. */
static bool sm_counts(struct vgpu_prim_ctx *ctx, unsigned *held,
		      unsigned *total)
{
	CUdevResource r, d;
	CUdevice dev;

	if (!vgpu__real.cuCtxGetDevResource ||
	    !vgpu__real.cuDeviceGetDevResource || !vgpu__real.cuCtxGetDevice)
		return false;
	memset(&r, 0, sizeof(r));
	memset(&d, 0, sizeof(d));
	if (vgpu__real.cuCtxGetDevResource((CUcontext)ctx, &r,
					   CU_DEV_RESOURCE_TYPE_SM) !=
		    CUDA_SUCCESS ||
	    vgpu__real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
	    vgpu__real.cuDeviceGetDevResource(dev, &d,
					      CU_DEV_RESOURCE_TYPE_SM) !=
		    CUDA_SUCCESS)
		return false;
	*held = r.sm.smCount;
	*total = d.sm.smCount;
	return true;
}

/* A device with a slot and a share below 100 is measured, except on the
 * green context the spatial mode made for it: the hardware enforces the
 * share there. */
static const struct vgpu_measure_gpu *gpu(struct vgpu_prim_ctx *ctx)
{
	struct vgpu_dev *dv = vgpu__dev_current();

	if (!dv || !dv->slot || !__atomic_load_n(&dv->capped, __ATOMIC_ACQUIRE) ||
	    (CUcontext)ctx == __atomic_load_n(&dv->spatial_ctx,
					      __ATOMIC_ACQUIRE))
		return NULL;
	return &dv->gpu;
}

/* Set while an opportunistic tenant shares the device of a process that
 * is not capped on it (devices.c): its launches stamp its tenant active. */
static struct vgpu_slot *announced(struct vgpu_prim_ctx *ctx)
{
	struct vgpu_dev *dv = vgpu__dev_current();

	(void)ctx;
	if (!dv || !dv->slot ||
	    !__atomic_load_n(&dv->announcing, __ATOMIC_RELAXED))
		return NULL;
	return dv->slot;
}

/* ---- streams and events ------------------------------------------------- */

static struct vgpu_prim_stream *stream_create(void)
{
	CUstream s = NULL;

	if (!vgpu__real.cuStreamCreate ||
	    vgpu__real.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) !=
		    CUDA_SUCCESS)
		return NULL;
	return (struct vgpu_prim_stream *)s;
}

static void stream_destroy(struct vgpu_prim_stream *s)
{
	if (vgpu__real.cuStreamDestroy_v2)
		vgpu__real.cuStreamDestroy_v2((CUstream)s);
}

static struct vgpu_prim_event *event_create(void)
{
	CUevent e = NULL;

	if (vgpu__real.cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		return NULL;
	return (struct vgpu_prim_event *)e;
}

static void event_destroy(struct vgpu_prim_event *e)
{
	vgpu__real.cuEventDestroy_v2((CUevent)e);
}

static bool event_record(struct vgpu_prim_event *e, struct vgpu_prim_stream *s,
			 bool per_thread)
{
	CUresult r = per_thread
		? vgpu__real.cuEventRecord_ptsz((CUevent)e, (CUstream)s)
		: vgpu__real.cuEventRecord((CUevent)e, (CUstream)s);

	return r == CUDA_SUCCESS;
}

static int event_query(struct vgpu_prim_event *e)
{
	CUresult r = vgpu__real.cuEventQuery((CUevent)e);

	return r == CUDA_SUCCESS ? VGPU_PRIM_DONE
	       : r == CUDA_ERROR_NOT_READY ? VGPU_PRIM_NOT_READY
					   : VGPU_PRIM_ERROR;
}

/* The driver answers in a float of ms. */
static bool event_elapsed(struct vgpu_prim_event *a, struct vgpu_prim_event *b,
			  uint64_t *ns)
{
	float ms;
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;

	if (vgpu__real.cuEventElapsedTime_v2)
		r = vgpu__real.cuEventElapsedTime_v2(&ms, (CUevent)a,
						     (CUevent)b);
	else if (vgpu__real.cuEventElapsedTime_v1)
		r = vgpu__real.cuEventElapsedTime_v1(&ms, (CUevent)a,
						     (CUevent)b);
	if (r != CUDA_SUCCESS || !(ms >= 0))
		return false;
	*ns = (uint64_t)((double)ms * 1e6);
	return true;
}

const struct vgpu_prim vgpu__prim = {
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
	/* lifetime.c runs vgpu__launch_thread_exit at the thread's exit. */
	.thread_watch = vgpu__lifetime_watch_thread,
	.probe_watch = vgpu_measure_watch,
};
