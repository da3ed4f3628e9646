/* spatial.c - VGPU_COMPUTE_MODE=spatial: the process's primary context is
 * built on a green context holding the tenant's share of the device's SMs,
 * so the hardware enforces the share and no launch is throttled.
 *
 * The share is rounded up to what the driver can split (its minimum
 * partition and alignment). Where the driver has no green contexts, or a
 * step fails, the device keeps its real primary context and the time
 * throttle, and a message says so once. Contexts made with cuCtxCreate are
 * not moved: they are throttled in time (docs/compute.md).
 */
#include "devices.h"


static CUresult fail(struct vgpu_dev *dv, const char *step, CUresult r)
{
	vgpu_log(VGPU_LOG_WARN, "device %d: VGPU_COMPUTE_MODE=spatial: %s "
		 "failed (%d); using the time throttle instead", dv->ordinal,
		 step, (int)r);
	return r;
}

/* Builds the green context of dv's share; CUDA_SUCCESS with *ctx set. */
static CUresult build(struct vgpu_dev *dv, CUcontext *ctx, unsigned *sms,
		      unsigned *total)
{
	const struct vgpu_real *drv = &vgpu__real;
	CUdevResource all, part, rest;
	CUdevResourceDesc d;
	CUgreenCtx g;
	unsigned n = 1, want, unit;
	CUresult r;

	/* The real driver's, not the hook: this green context is the
	 * primary context's, charged with it. */
	if (!drv->cuDeviceGetDevResource || !drv->cuDevSmResourceSplitByCount ||
	    !drv->cuDevResourceGenerateDesc || !drv->cuGreenCtxCreate ||
	    !drv->cuCtxFromGreenCtx)
		return fail(dv, "finding the green-context API",
			    CUDA_ERROR_NOT_SUPPORTED);
	if ((r = drv->cuDeviceGetDevResource(dv->ordinal, &all,
					     CU_DEV_RESOURCE_TYPE_SM)))
		return fail(dv, "cuDeviceGetDevResource", r);
	*total = all.sm.smCount;
	unit = all.sm.smCoscheduledAlignment ? all.sm.smCoscheduledAlignment : 1;
	want = (all.sm.smCount * dv->share + 99) / 100;
	want = (want + unit - 1) / unit * unit;
	if (want < all.sm.minSmPartitionSize)
		want = all.sm.minSmPartitionSize;
	if (want >= all.sm.smCount)
		return fail(dv, "a share below the whole device",
			    CUDA_ERROR_INVALID_VALUE);
	if ((r = drv->cuDevSmResourceSplitByCount(&part, &n, &all, &rest, 0,
						  want)) || n != 1)
		return fail(dv, "cuDevSmResourceSplitByCount",
			    r ? r : CUDA_ERROR_INVALID_VALUE);
	if ((r = drv->cuDevResourceGenerateDesc(&d, &part, 1)))
		return fail(dv, "cuDevResourceGenerateDesc", r);
	if ((r = drv->cuGreenCtxCreate(&g, d, dv->ordinal,
					  CU_GREEN_CTX_DEFAULT_STREAM)))
		return fail(dv, "cuGreenCtxCreate", r);
	if ((r = drv->cuCtxFromGreenCtx(ctx, g)))
		return fail(dv, "cuCtxFromGreenCtx", r);
	*sms = part.sm.smCount;
	return CUDA_SUCCESS;
}

CUcontext vgpu__spatial_ctx(struct vgpu_dev *dv)
{
	CUcontext ctx = __atomic_load_n(&dv->spatial_ctx, __ATOMIC_ACQUIRE);
	unsigned sms = 0, total = 0;
	int expected = 0;

	if (ctx || !dv->spatial)
		return ctx;
	/* One thread builds it; the others use the primary context meanwhile
	 * (throttled in time), as they would if it failed. */
	if (!__atomic_compare_exchange_n(&dv->spatial_state, &expected, 1,
					 false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return NULL;
	if (build(dv, &ctx, &sms, &total) != CUDA_SUCCESS) {
		__atomic_store_n(&dv->spatial_state, 2, __ATOMIC_RELEASE);
		return NULL;
	}
	vgpu_log(VGPU_LOG_INFO, "device %d: a green context of %u of %u SMs "
		 "for a %u%% share", dv->ordinal, sms, total, dv->share);
	__atomic_store_n(&dv->spatial_ctx, ctx, __ATOMIC_RELEASE);
	return ctx;
}
