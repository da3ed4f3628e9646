/* pools.c - HIP's stream-ordered allocation: what a pool holds is charged,
 * by the core's rule (vgpu/pool.h), as the CUDA front end charges it
 * (intercept/pools.c).
 *
 * A pool's charge is its hipMemPoolAttrReservedMemCurrent, settled after
 * every allocation, free and trim through the shim and when the views are
 * read; an allocation is admitted by reserving its whole size first,
 * given back once the pool is settled. At the slice's edge the device's
 * pools are trimmed and settled (the reclaim primitive, launch.c) and the
 * allocation tried once more. A pool destroyed while allocations from it
 * live keeps its charge until the last of them is freed; a free of a
 * destroyable pool's allocation counts when its stream reaches it (a
 * stream callback: HIP 5.2 has no hipLaunchHostFunc).
 */
#include "hip.h"
#include "pool.h"
#include "track.h"

#include <stdint.h>

/* ---- the runtime's side of the core's pools ----------------------------- */

static bool is_default(uint64_t h, int dev)
{
	hipMemPool_t def = NULL;

	return vgpu__hip.hipDeviceGetDefaultMemPool &&
	       vgpu__hip.hipDeviceGetDefaultMemPool(&def, dev) == hipSuccess &&
	       (uint64_t)(uintptr_t)def == h;
}

static bool reserved(uint64_t h, uint64_t *bytes)
{
	uint64_t held = 0;

	if (!vgpu__hip.hipMemPoolGetAttribute ||
	    vgpu__hip.hipMemPoolGetAttribute((hipMemPool_t)(uintptr_t)h,
					     hipMemPoolAttrReservedMemCurrent,
					     &held) != hipSuccess)
		return false;
	*bytes = held;
	return true;
}

static void trim(uint64_t h)
{
	if (vgpu__hip.hipMemPoolTrimTo)
		vgpu__hip.hipMemPoolTrimTo((hipMemPool_t)(uintptr_t)h, 0);
}

static struct vgpu_slot *slot(int dev)
{
	struct vgpu_hip_dev *dv = vgpu__hip_dev_peek(dev);

	return dv ? dv->slot : NULL;
}

static void uncharge(int dev, uint64_t bytes)
{
	vgpu__hip_uncharge(vgpu__hip_dev_peek(dev), VGPU_USAGE_POOL, bytes);
}

const struct vgpu_pool_ops vgpu__hip_pool_ops = {
	.is_default = is_default,
	.reserved = reserved,
	.trim = trim,
	.slot = slot,
	.uncharge = uncharge,
};

/* ---- allocations ----------------------------------------------------------- */

/* The pool an allocation is made from (explicit, or the device's current
 * one), registered; -1 when the shim cannot follow it. */
static int pool_of(struct vgpu_hip_dev *dv, hipMemPool_t pool,
		   bool explicit_pool)
{
	if (!explicit_pool &&
	    (!vgpu__hip.hipDeviceGetMemPool ||
	     vgpu__hip.hipDeviceGetMemPool(&pool, dv->ordinal) != hipSuccess))
		return -1;
	if (!pool)
		return -1;
	/* A pool made through the shim is registered with its own device
	 * (hipMemPoolCreate); others, found now, are the current device's.
	 * -2: the table is full. */
	int i = vgpu_pool_index((uintptr_t)pool, dv->ordinal, false);

	return i < 0 ? -2 : i;
}

static hipError_t call_alloc(void **p, size_t size, hipMemPool_t pool,
			     hipStream_t s, bool explicit_pool)
{
	return explicit_pool
	       ? vgpu__hip.hipMallocFromPoolAsync(p, size, pool, s)
	       : vgpu__hip.hipMallocAsync(p, size, s);
}

/* A pool the shim cannot follow: the allocation charged as a buffer. */
static hipError_t alloc_unfollowed(struct vgpu_hip_dev *dv, void **p,
				   size_t size, hipMemPool_t pool,
				   hipStream_t s, bool explicit_pool)
{
	uint64_t n = vgpu__alloc_size(size);
	hipError_t r = vgpu__hip_charge(dv, VGPU_USAGE_BUFFER, n);

	if (r != hipSuccess)
		return r;
	r = call_alloc(p, size, pool, s, explicit_pool);
	if (r != hipSuccess)
		vgpu__hip_uncharge(dv, VGPU_USAGE_BUFFER, n);
	else
		vgpu__track_charged(VGPU_TRACK_PTR, (uintptr_t)*p,
				    VGPU_USAGE_BUFFER, dv->ordinal, n, 0);
	return r;
}

static hipError_t alloc_from(void **p, size_t size, hipMemPool_t pool,
			     hipStream_t s, bool explicit_pool)
{
	struct vgpu_hip_dev *dv = p && size ? vgpu__hip_dev_current() : NULL;
	uint64_t admit;
	hipError_t r;
	int i;

	if (!dv)
		return call_alloc(p, size, pool, s, explicit_pool);
	if (!dv->slot) {	/* not accounted, or refused */
		r = vgpu__hip_charge(dv, VGPU_USAGE_POOL, 0);
		return r != hipSuccess ? r : call_alloc(p, size, pool, s,
							explicit_pool);
	}
	i = pool_of(dv, pool, explicit_pool);
	if (i == -2) {
		vgpu_pools_full();
		return hipErrorOutOfMemory;
	}
	if (i < 0)
		return alloc_unfollowed(dv, p, size, pool, s, explicit_pool);
	dv = vgpu_pool_dev(i) < 0 ? NULL : vgpu__hip_dev_attach(vgpu_pool_dev(i));
	if (!dv || !dv->slot)	/* a host pool, or a device not accounted */
		return call_alloc(p, size, pool, s, explicit_pool);
	/* Admitted at the most the pool may grow by for it (pool.h); the
	 * growth is charged when the pool is settled, and the admission
	 * given back after. */
	admit = vgpu_pool_admission(size);
	if ((r = vgpu__hip_charge(dv, VGPU_USAGE_POOL, admit)) != hipSuccess)
		return r;
	vgpu_pool_live(i);
	r = call_alloc(p, size, pool, s, explicit_pool);
	vgpu_pool_settle(i);
	vgpu__hip_uncharge(dv, VGPU_USAGE_POOL, admit);
	if (r != hipSuccess) {
		vgpu_pool_freed(i);
		return r;
	}
	vgpu__track_charged(VGPU_TRACK_PTR, (uintptr_t)*p, VGPU_USAGE_POOL,
			    dv->ordinal, size, (unsigned)i);
	return r;
}

hipError_t hipMallocAsync(void **p, size_t size, hipStream_t s)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipMallocAsync)
		return hipErrorNotInitialized;
	return alloc_from(p, size, NULL, s, false);
}

hipError_t hipMallocFromPoolAsync(void **p, size_t size, hipMemPool_t pool,
				  hipStream_t s)
{
	vgpu__hip_start();
	if (!vgpu__hip.hipMallocFromPoolAsync)
		return hipErrorNotInitialized;
	return alloc_from(p, size, pool, s, true);
}

/* ---- frees ----------------------------------------------------------------- */

/* The stream reached a free of a destroyable pool's allocation. */
static void freed_in_order(hipStream_t s, hipError_t status, void *arg)
{
	(void)s, (void)status;
	vgpu_pool_unlive((int)(intptr_t)arg);
}

/* hipFreeAsync of pool i's allocation: a pool that can be destroyed keeps
 * its memory until the stream reaches the free, so that is when the
 * allocation stops counting; the default pool is settled at once. */
static void pool_freed_async(int i, hipStream_t s)
{
	vgpu_pool_settle(i);
	if (vgpu_pool_destroyable(i) && vgpu__hip.hipStreamAddCallback &&
	    vgpu__hip.hipStreamAddCallback(s, freed_in_order,
					   (void *)(intptr_t)i, 0) ==
		    hipSuccess)
		return;
	vgpu_pool_unlive(i);
}

hipError_t hipFreeAsync(void *p, hipStream_t s)
{
	struct vgpu_tracked t;
	uint64_t key = (uintptr_t)p;
	bool had;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipFreeAsync)
		return hipErrorNotInitialized;
	had = p && vgpu__track_remove(VGPU_TRACK_PTR, key, &t);
	r = vgpu__hip.hipFreeAsync(p, s);
	if (!had || r != hipSuccess || t.kind != VGPU_USAGE_POOL)
		return vgpu__hip_freed(VGPU_TRACK_PTR, key, had, &t, r);
	pool_freed_async((int)t.aux, s);
	return r;
}

/* ---- pools ----------------------------------------------------------------- */

/* A pool is registered with its own device (not the current one), and a
 * host pool as host memory. */
hipError_t hipMemPoolCreate(hipMemPool_t *pool, const hipMemPoolProps *props)
{
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemPoolCreate)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipMemPoolCreate(pool, props);
	if (r != hipSuccess || !pool || !props)
		return r;
	if (vgpu_pool_index((uintptr_t)*pool,
			    props->location.type == hipMemLocationTypeDevice
			    ? props->location.id : -1,
			    props->location.type != hipMemLocationTypeDevice) <
	    0) {
		/* Not followed, it could hold memory uncharged. */
		vgpu_pools_full();
		if (vgpu__hip.hipMemPoolDestroy)
			vgpu__hip.hipMemPoolDestroy(*pool);
		*pool = NULL;
		return hipErrorOutOfMemory;
	}
	return r;
}

hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep)
{
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemPoolTrimTo)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipMemPoolTrimTo(pool, keep);
	if (r == hipSuccess)
		vgpu_pool_settle(vgpu_pool_find((uintptr_t)pool));
	return r;
}

hipError_t hipMemPoolDestroy(hipMemPool_t pool)
{
	int i;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemPoolDestroy)
		return hipErrorNotInitialized;
	i = vgpu_pool_find((uintptr_t)pool);
	/* What it holds now is what it keeps while allocations live. */
	vgpu_pool_settle(i);
	r = vgpu__hip.hipMemPoolDestroy(pool);
	if (r == hipSuccess)
		vgpu_pool_destroyed(i);
	return r;
}
