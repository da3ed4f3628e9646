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

#include <dlfcn.h>

typedef CUresult (*get_res_fn)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*split_fn)(CUdevResource *, unsigned *, const CUdevResource *,
			     CUdevResource *, unsigned, unsigned);
typedef CUresult (*desc_fn)(CUdevResourceDesc *, CUdevResource *, unsigned);
typedef CUresult (*green_fn)(CUgreenCtx *, CUdevResourceDesc, CUdevice,
			     unsigned);
typedef CUresult (*from_green_fn)(CUcontext *, CUgreenCtx);

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
	void *h = dlopen(vgpu__real_path(), RTLD_NOW | RTLD_NOLOAD);
	get_res_fn get_res = h ? (get_res_fn)dlsym(h, "cuDeviceGetDevResource")
			       : NULL;
	split_fn split = h ? (split_fn)dlsym(h, "cuDevSmResourceSplitByCount")
			   : NULL;
	desc_fn desc = h ? (desc_fn)dlsym(h, "cuDevResourceGenerateDesc") : NULL;
	green_fn green = h ? (green_fn)dlsym(h, "cuGreenCtxCreate") : NULL;
	from_green_fn from = h ? (from_green_fn)dlsym(h, "cuCtxFromGreenCtx")
			       : NULL;
	CUdevResource all, part, rest;
	CUdevResourceDesc d;
	CUgreenCtx g;
	unsigned n = 1, want, unit;
	CUresult r;

	if (h)
		dlclose(h);
	if (!get_res || !split || !desc || !green || !from)
		return fail(dv, "finding the green-context API",
			    CUDA_ERROR_NOT_SUPPORTED);
	if ((r = get_res(dv->ordinal, &all, CU_DEV_RESOURCE_TYPE_SM)))
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
	if ((r = split(&part, &n, &all, &rest, 0, want)) || n != 1)
		return fail(dv, "cuDevSmResourceSplitByCount",
			    r ? r : CUDA_ERROR_INVALID_VALUE);
	if ((r = desc(&d, &part, 1)))
		return fail(dv, "cuDevResourceGenerateDesc", r);
	if ((r = green(&g, d, dv->ordinal, CU_GREEN_CTX_DEFAULT_STREAM)))
		return fail(dv, "cuGreenCtxCreate", r);
	if ((r = from(ctx, g)))
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
