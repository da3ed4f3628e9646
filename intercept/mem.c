/* mem.c - the memory hooks: every path that consumes device memory is
 * charged to the tenant before the driver is asked, and given back when the
 * driver refused or the memory is freed.
 *
 * The protocol: reserve in the ledger (refused: CUDA_ERROR_OUT_OF_MEMORY,
 * the driver is not called), call the driver, release if it failed,
 * remember what was charged (track.c) so the free gives back exactly that.
 * A free of something the shim never charged goes to the driver untouched.
 */
#include "devices.h"
#include "overcommit.h"
#include "share.h"
#include "track.h"

#include <string.h>

/* ---- buffers ----------------------------------------------------------- */

/* A new pointer p from the driver charged bytes of kind: into the table,
 * and an entry the table still had for p (stale, track.h) given back. */
static void ptr_charged(CUdeviceptr p, int kind, int dev, uint64_t bytes)
{
	struct vgpu_tracked stale;

	if (vgpu__track_charged_fresh(VGPU_TRACK_PTR, p, kind, dev, bytes, 0,
				      &stale))
		vgpu__ptr_drop(&stale);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	uint64_t held;
	CUresult r;

	if (!vgpu__real.cuMemAlloc_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dv || !dptr || bytesize == 0)
		return vgpu__real.cuMemAlloc_v2(dptr, bytesize);
	if (dv->slot && vgpu__dev_movable(dv)) {
		/* Movable device memory; no room (host overcommit): the
		 * least recently used ranges go to the host first, then this
		 * one if need be. */
		r = vgpu__alloc_movable(dv, dptr, bytesize);
		if (r == CUDA_ERROR_OUT_OF_MEMORY &&
		    vgpu__make_room(dv, bytesize))
			r = vgpu__alloc_movable(dv, dptr, bytesize);
		if (r != CUDA_ERROR_NOT_SUPPORTED)
			return r == CUDA_SUCCESS
				       ? r : vgpu__spill(dv, dptr, bytesize);
	}
	held = vgpu__alloc_size(bytesize);
	if ((r = vgpu__charge(dv, VGPU_USAGE_BUFFER, held)) != CUDA_SUCCESS)
		return r == CUDA_ERROR_OUT_OF_MEMORY && dv->overcommit
			       ? vgpu__spill(dv, dptr, bytesize) : r;
	r = vgpu__real.cuMemAlloc_v2(dptr, bytesize);
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, held);
		/* The device itself is full (other tenants' slices). */
		return r == CUDA_ERROR_OUT_OF_MEMORY && dv->overcommit
			       ? vgpu__spill(dv, dptr, bytesize) : r;
	}
	if (dv->slot) {
		ptr_charged(*dptr, VGPU_USAGE_BUFFER, dv->ordinal, held);
	}
	return r;
}

/* The pitch is not known before the call: charge the width rounded to 512
 * bytes first, then whatever the real pitch adds (refused: freed, OOM). */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
			    size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	uint64_t guess, real;
	CUresult r;

	if (!vgpu__real.cuMemAllocPitch_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dv || !dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
	    WidthInBytes > (SIZE_MAX - 511) / Height)
		return vgpu__real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes,
						     Height, ElementSizeBytes);
	guess = vgpu__alloc_size((uint64_t)((WidthInBytes + 511) &
					    ~(size_t)511) * Height);
	if ((r = vgpu__charge(dv, VGPU_USAGE_BUFFER, guess)) != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height,
					  ElementSizeBytes);
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, guess);
		return r;
	}
	real = vgpu__alloc_size((uint64_t)*pPitch * Height);
	if (dv->slot && (r = vgpu__account_error(dv, vgpu_account_adjust(
			dv->slot, dv->ordinal, VGPU_USAGE_BUFFER, &guess,
			real))) != CUDA_SUCCESS) {
		vgpu__real.cuMemFree_v2(*dptr);
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, guess);
		*dptr = 0;
		return r;
	}
	if (dv->slot) {
		ptr_charged(*dptr, VGPU_USAGE_BUFFER, dv->ordinal, real);
	}
	return r;
}

/* Managed memory is charged in full as device memory: the driver may make
 * all of it resident on the device (docs/memory.md). */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
			   unsigned int flags)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	uint64_t held;
	CUresult r;

	if (!vgpu__real.cuMemAllocManaged)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dv || !dptr || bytesize == 0)
		return vgpu__real.cuMemAllocManaged(dptr, bytesize, flags);
	held = vgpu__alloc_size(bytesize);
	if ((r = vgpu__charge(dv, VGPU_USAGE_MANAGED, held)) != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMemAllocManaged(dptr, bytesize, flags);
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_MANAGED, held);
		return r;
	}
	if (dv->slot) {
		ptr_charged(*dptr, VGPU_USAGE_MANAGED, dv->ordinal, held);
	}
	return r;
}


/* A free the driver refused because another thread's cuCtxDestroy freed
 * the memory with its context first: the context's sweep found the entry
 * taken out by this free, so the charge is this free's to give back. */
static bool freed_with_context(CUdeviceptr p)
{
	CUdeviceptr base;
	size_t size;
	CUresult r;

	if (!vgpu__real.cuMemGetAddressRange_v2)
		return false;
	r = vgpu__real.cuMemGetAddressRange_v2(&base, &size, p);
	return r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct vgpu_tracked t;
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuMemFree_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t))
		return vgpu__real.cuMemFree_v2(dptr);
	r = t.kind == VGPU_USAGE_SPILLED ? vgpu__spill_free(dptr, &t)
					 : vgpu__real.cuMemFree_v2(dptr);
	if (r != CUDA_SUCCESS && !(t.kind != VGPU_USAGE_SPILLED &&
				   freed_with_context(dptr))) {
		vgpu__track_insert(VGPU_TRACK_PTR, dptr, &t);
		return r;
	}
	dv = vgpu__dev_peek((int)t.dev);
	if (t.kind == VGPU_USAGE_POOL)
		vgpu_pool_freed((int)t.aux);
	else if (t.kind == VGPU_USAGE_BUFFER && t.aux)	/* shared (IPC) */
		vgpu__share_gone(t.aux);
	else if (t.kind != VGPU_USAGE_SPILLED)
		vgpu__uncharge(dv, (int)t.kind, t.bytes);
	/* Room may have freed: spilled ranges come back to the device. */
	vgpu__promote(dv);
	return r;
}

/* ---- views ------------------------------------------------------------- */

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	CUresult r;

	if (!vgpu__real.cuMemGetInfo_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemGetInfo_v2(free, total);
	if (r != CUDA_SUCCESS || !dv || !dv->slot || !free || !total)
		return r;
	vgpu_pools_settle_device(dv->ordinal);
	vgpu_device_mem_view(&dv->core, free, total);
	return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuDeviceTotalMem_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuDeviceTotalMem_v2(bytes, dev);
	if (r != CUDA_SUCCESS || !bytes)
		return r;
	/* The tenant's slice once the device has joined it (its first
	 * process set it); before that, the slice as configured. */
	dv = vgpu__dev_peek(dev);
	vgpu_device_total_view(dv ? &dv->core : NULL, vgpu__options(), dev,
			       bytes);
	return r;
}
