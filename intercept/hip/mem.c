/* mem.c - HIP's allocations and frees, and the memory views.
 *
 * Every allocating hook follows the core's protocol (vgpu/account.h):
 * charge, the runtime's call, roll back if it refused; made, the object
 * is remembered in the table of what was charged (intercept/track.c), so
 * its free gives back exactly that. Objects the shim never saw (made
 * before a device joined, or by another library) still reach the runtime
 * untouched.
 */
#include "hip.h"
#include "pool.h"
#include "track.h"

#include <stdint.h>

/* The last step of an allocation: refused, the charge given back; made,
 * remembered under key. An entry already under key is stale (a free that
 * the runtime refused, because another thread's free of the same pointer
 * won, put it back): its charge is given back first. */
static hipError_t made(struct vgpu_hip_dev *dv, hipError_t r, int table,
		       uint64_t key, int kind, uint64_t bytes)
{
	struct vgpu_tracked stale;

	if (r != hipSuccess) {
		vgpu__hip_uncharge(dv, kind, bytes);
	} else if (dv->slot) {
		if (vgpu__track_remove(table, key, &stale))
			vgpu__hip_uncharge(vgpu__hip_dev_peek((int)stale.dev),
					   (int)stale.kind, stale.bytes);
		vgpu__track_charged(table, key, kind, dv->ordinal, bytes, 0);
	}
	return r;
}

/* One allocation of hipMalloc's kind: its device (NULL: not accounted,
 * the runtime is called as it is), its charge. */
struct alloc {
	int kind;
	struct vgpu_hip_dev *dv;
	uint64_t n;
	hipError_t r;
};

/* The charge of size bytes at *p on the current device: false when
 * refused (a->r says why). */
static bool begin(struct alloc *a, void **p, size_t size)
{
	a->dv = p && size ? vgpu__hip_dev_current() : NULL;
	if (!a->dv)
		return true;
	a->n = vgpu__alloc_size(size);
	a->r = vgpu__hip_charge(a->dv, a->kind, a->n);
	return a->r == hipSuccess;
}

static hipError_t end(const struct alloc *a, hipError_t r, void **p)
{
	if (!a->dv)
		return r;
	return made(a->dv, r, VGPU_TRACK_PTR,
		    r == hipSuccess ? (uint64_t)(uintptr_t)*p : 0, a->kind,
		    a->n);
}

hipError_t hipMalloc(void **p, size_t size)
{
	struct alloc a = { .kind = VGPU_USAGE_BUFFER };

	vgpu__hip_start();
	if (!vgpu__hip.hipMalloc)
		return hipErrorNotInitialized;
	if (!begin(&a, p, size))
		return a.r;
	return end(&a, vgpu__hip.hipMalloc(p, size), p);
}

hipError_t hipExtMallocWithFlags(void **p, size_t size, unsigned int flags)
{
	struct alloc a = { .kind = VGPU_USAGE_BUFFER };

	vgpu__hip_start();
	if (!vgpu__hip.hipExtMallocWithFlags)
		return hipErrorNotInitialized;
	if (!begin(&a, p, size))
		return a.r;
	return end(&a, vgpu__hip.hipExtMallocWithFlags(p, size, flags), p);
}

/* Managed memory is counted in full, as cuMemAllocManaged is
 * (docs/memory.md): the device is where it lives while used. */
hipError_t hipMallocManaged(void **p, size_t size, unsigned int flags)
{
	struct alloc a = { .kind = VGPU_USAGE_MANAGED };

	vgpu__hip_start();
	if (!vgpu__hip.hipMallocManaged)
		return hipErrorNotInitialized;
	if (!begin(&a, p, size))
		return a.r;
	return end(&a, vgpu__hip.hipMallocManaged(p, size, flags), p);
}

/* A pitched allocation is charged what was asked, then what the runtime
 * really took (its pitch): past the slice, freed and refused. */
static hipError_t pitched(struct vgpu_hip_dev *dv, hipError_t r, void *p,
			  uint64_t charged, uint64_t actual)
{
	int rc;

	if (r != hipSuccess || !dv->slot)
		return made(dv, r, VGPU_TRACK_PTR, (uint64_t)(uintptr_t)p,
			    VGPU_USAGE_BUFFER, charged);
	rc = vgpu_account_adjust(dv->slot, dv->ordinal, VGPU_USAGE_BUFFER,
				 &charged, vgpu__alloc_size(actual));
	if (rc != VGPU_ACCOUNT_OK) {
		vgpu__hip.hipFree(p);
		vgpu__hip_uncharge(dv, VGPU_USAGE_BUFFER, charged);
		return hipErrorOutOfMemory;
	}
	return made(dv, r, VGPU_TRACK_PTR, (uint64_t)(uintptr_t)p,
		    VGPU_USAGE_BUFFER, charged);
}

/* hipMallocPitch's and hipMemAllocPitch's (elem: its element size; 0
 * for hipMallocPitch): w x h charged, then the pitch the runtime chose. */
static hipError_t pitch_alloc(void **p, size_t *pitch, size_t w, size_t h,
			      unsigned elem, bool mem)
{
	struct vgpu_hip_dev *dv;
	uint64_t n;
	hipError_t r;

	vgpu__hip_start();
	if ((mem ? !vgpu__hip.hipMemAllocPitch : !vgpu__hip.hipMallocPitch) ||
	    !vgpu__hip.hipFree)
		return hipErrorNotInitialized;
	dv = vgpu__hip_dev_current();
	if (dv && p && pitch && w && h && w <= VGPU_TRACK_MAX_BYTES / h) {
		n = vgpu__alloc_size((uint64_t)w * h);
		r = vgpu__hip_charge(dv, VGPU_USAGE_BUFFER, n);
		if (r != hipSuccess)
			return r;
	} else {
		dv = NULL;	/* the runtime's answer, not accounted */
		n = 0;
	}
	r = mem ? vgpu__hip.hipMemAllocPitch((hipDeviceptr_t *)p, pitch, w, h,
					     elem)
		: vgpu__hip.hipMallocPitch(p, pitch, w, h);
	if (!dv)
		return r;
	return pitched(dv, r, r == hipSuccess ? *p : NULL, n,
		       r == hipSuccess ? (uint64_t)*pitch * h : 0);
}

hipError_t hipMallocPitch(void **p, size_t *pitch, size_t w, size_t h)
{
	return pitch_alloc(p, pitch, w, h, 0, false);
}

/* The driver-style name of the same (elem: 4, 8 or 16, the runtime's
 * check). */
hipError_t hipMemAllocPitch(hipDeviceptr_t *p, size_t *pitch, size_t w,
			    size_t h, unsigned int elem)
{
	return pitch_alloc((void **)p, pitch, w, h, elem, true);
}

hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent e)
{
	struct vgpu_hip_dev *dv;
	uint64_t n, hd;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMalloc3D || !vgpu__hip.hipFree)
		return hipErrorNotInitialized;
	dv = vgpu__hip_dev_current();
	hd = (uint64_t)(e.height ? e.height : 1) * (e.depth ? e.depth : 1);
	if (!dv || !pp || !e.width || hd > VGPU_TRACK_MAX_BYTES / e.width)
		return vgpu__hip.hipMalloc3D(pp, e);
	n = vgpu__alloc_size(e.width * hd);
	r = vgpu__hip_charge(dv, VGPU_USAGE_BUFFER, n);
	if (r != hipSuccess)
		return r;
	r = vgpu__hip.hipMalloc3D(pp, e);
	return pitched(dv, r, r == hipSuccess ? pp->ptr : NULL, n,
		       r == hipSuccess ? (uint64_t)pp->pitch * hd : 0);
}

/* A stream-ordered allocation may be freed here too (pools.c's, given
 * back to its pool: vgpu__hip_freed). */
hipError_t hipFree(void *p)
{
	struct vgpu_tracked t;
	uint64_t key = (uint64_t)(uintptr_t)p;
	bool had;

	vgpu__hip_start();
	if (!vgpu__hip.hipFree)
		return hipErrorNotInitialized;
	had = p && vgpu__track_remove(VGPU_TRACK_PTR, key, &t);
	return vgpu__hip_freed(VGPU_TRACK_PTR, key, had, &t,
			       vgpu__hip.hipFree(p));
}

/* ---- the memory views ----------------------------------------------------- */

hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	struct vgpu_hip_dev *dv;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemGetInfo)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipMemGetInfo(free, total);
	if (r != hipSuccess || !free || !total)
		return r;
	dv = vgpu__hip_dev_current();
	if (dv)
		vgpu_pools_settle_device(dv->ordinal);
	vgpu_device_mem_view(dv ? &dv->core : NULL, free, total);
	return r;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t d)
{
	struct vgpu_hip_dev *dv;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipDeviceTotalMem)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipDeviceTotalMem(bytes, d);
	if (r != hipSuccess || !bytes || d < 0 || d >= VGPU_MAX_DEVICES)
		return r;
	dv = vgpu__hip_dev_peek(d);
	vgpu_device_total_view(dv ? &dv->core : NULL, vgpu__hip_options(), d,
			       bytes);
	return r;
}

hipError_t hipGetDeviceProperties(hipDeviceProp_t *prop, int d)
{
	struct vgpu_hip_dev *dv;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipGetDeviceProperties)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipGetDeviceProperties(prop, d);
	if (r != hipSuccess || !prop || d < 0 || d >= VGPU_MAX_DEVICES)
		return r;
	dv = vgpu__hip_dev_peek(d);
	vgpu_device_total_view(dv ? &dv->core : NULL, vgpu__hip_options(), d,
			       &prop->totalGlobalMem);
	return r;
}
