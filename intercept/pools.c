/* pools.c - stream-ordered allocation: what a pool really holds is charged.
 *
 * The rule and the table of pools are the core's (vgpu/pool.h): a pool's
 * charge is its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, settled after every
 * allocation, free and trim through the shim and when the views are read;
 * an allocation is admitted by reserving the most the pool may grow by
 * for it (vgpu_pool_admission), given back after the pool is settled, so
 * allocations admitted at once never pass the slice together. At the slice's
 * edge the core asks the pools of the device to give their idle memory
 * back (vgpu_pools_reclaim) and tries once more.
 *
 * Here: the driver's side of it (vgpu__pool_ops), the hooks, and when a
 * free of a destroyable pool's allocation counts (when the stream reaches
 * it: a host function).
 */
#include "devices.h"
#include "pool.h"
#include "share.h"
#include "track.h"

static bool is_default(uint64_t h, int dev)
{
	CUmemoryPool def = NULL;

	return vgpu__real.cuDeviceGetDefaultMemPool &&
	       vgpu__real.cuDeviceGetDefaultMemPool(&def, dev) ==
		       CUDA_SUCCESS && (uint64_t)(uintptr_t)def == h;
}

static bool reserved(uint64_t h, uint64_t *bytes)
{
	cuuint64_t held = 0;

	if (!vgpu__real.cuMemPoolGetAttribute ||
	    vgpu__real.cuMemPoolGetAttribute((CUmemoryPool)(uintptr_t)h,
					     CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
					     &held) != CUDA_SUCCESS)
		return false;
	*bytes = held;
	return true;
}

static void trim(uint64_t h)
{
	if (vgpu__real.cuMemPoolTrimTo)
		vgpu__real.cuMemPoolTrimTo((CUmemoryPool)(uintptr_t)h, 0);
}

static struct vgpu_slot *slot(int dev)
{
	struct vgpu_dev *dv = vgpu__dev_peek(dev);

	return dv ? dv->slot : NULL;
}

static void uncharge(int dev, uint64_t bytes)
{
	vgpu__uncharge(vgpu__dev_peek(dev), VGPU_USAGE_POOL, bytes);
}

const struct vgpu_pool_ops vgpu__pool_ops = {
	.is_default = is_default,
	.reserved = reserved,
	.trim = trim,
	.slot = slot,
	.uncharge = uncharge,
};

/* The device a pool the shim did not make belongs to: the device whose
 * default pool it is (another device's may be named), else dev. */
static int found_pool_device(CUmemoryPool pool, int dev)
{
	int n = 0;

	if (!vgpu__real.cuDeviceGetCount || !vgpu__real.cuDeviceGetDefaultMemPool ||
	    vgpu__real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
		return dev;
	for (int d = 0; d < n && d < VGPU_MAX_DEVICES; d++) {
		CUmemoryPool def = NULL;

		if (vgpu__real.cuDeviceGetDefaultMemPool(&def, d) ==
			    CUDA_SUCCESS && def == pool)
			return d;
	}
	return dev;
}

/* The pool an allocation is made from, registered; -1 when the shim
 * cannot follow it, -2 when the table is full. */
static int pool_of(struct vgpu_dev *dv, CUmemoryPool pool, bool explicit_pool)
{
	int i;

	if (!explicit_pool &&
	    (!vgpu__real.cuDeviceGetMemPool ||
	     vgpu__real.cuDeviceGetMemPool(&pool, dv->ordinal) != CUDA_SUCCESS))
		return -1;
	if (!pool)
		return -1;
	/* A pool made through the shim is registered with its own device
	 * (cuMemPoolCreate); a device's current pool with that device; any
	 * other, found now, with the device whose default pool it is. */
	if ((i = vgpu_pool_find((uintptr_t)pool)) >= 0)
		return i;
	i = vgpu_pool_index((uintptr_t)pool, explicit_pool
			    ? found_pool_device(pool, dv->ordinal)
			    : dv->ordinal, false);
	return i < 0 ? -2 : i;
}

/* The device an allocation on stream s comes from (the stream's
 * device's current pool): the current context's device for the NULL,
 * legacy and per-thread streams, else the stream's context's. */
static struct vgpu_dev *stream_device(CUstream s, struct vgpu_dev *dv)
{
	const struct vgpu_prim *P = &vgpu__prim;
	struct vgpu_prim_ctx *c = P->stream_ctx((struct vgpu_prim_stream *)s);
	CUdevice d;

	if (!c || c == P->ctx_current() || !P->ctx_push(c))
		return dv;
	if (vgpu__real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
		d = dv->ordinal;
	P->ctx_pop();
	return d == dv->ordinal ? dv : vgpu__dev_attach(d);
}

static CUresult call_alloc(CUdeviceptr *dptr, size_t bytesize,
			   CUmemoryPool pool, CUstream hStream, int per_thread,
			   bool explicit_pool)
{
	if (explicit_pool)
		return per_thread
		       ? vgpu__real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize,
								 pool, hStream)
		       : vgpu__real.cuMemAllocFromPoolAsync(dptr, bytesize, pool,
							    hStream);
	return per_thread
	       ? vgpu__real.cuMemAllocAsync_ptsz(dptr, bytesize, hStream)
	       : vgpu__real.cuMemAllocAsync(dptr, bytesize, hStream);
}

/* A captured allocation is an allocation node: the pool does not grow,
 * and graphs.c charges the graph's memory per executable graph. */
static bool capturing(CUstream s, int per_thread)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (!vgpu__real.cuStreamIsCapturing)
		return false;
	if (!s && per_thread)
		s = CU_STREAM_PER_THREAD;
	return vgpu__real.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t bytesize,
			   CUmemoryPool pool, CUstream hStream, int per_thread,
			   bool explicit_pool)
{
	struct vgpu_dev *dv = vgpu__dev_current(), *pdv;
	uint64_t admit;
	CUresult r;
	int i;

	if (vgpu__dev_failed(dv))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!dv || !dv->slot || !dptr || bytesize == 0 ||
	    capturing(hStream, per_thread))
		return call_alloc(dptr, bytesize, pool, hStream, per_thread,
				  explicit_pool);
	/* The stream's device's pool: accounted there, or not at all. */
	if (!explicit_pool) {
		dv = stream_device(hStream, dv);
		if (vgpu__dev_failed(dv))
			return CUDA_ERROR_INVALID_DEVICE;
		if (!dv || !dv->slot)
			return call_alloc(dptr, bytesize, pool, hStream,
					  per_thread, explicit_pool);
	}
	i = pool_of(dv, pool, explicit_pool);
	if (i == -2) {
		vgpu_pools_full();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (i < 0) {
		/* A pool the shim cannot follow: charged as a buffer. */
		uint64_t held = vgpu__alloc_size(bytesize);

		if ((r = vgpu__charge(dv, VGPU_USAGE_BUFFER, held)) !=
		    CUDA_SUCCESS)
			return r;
		r = call_alloc(dptr, bytesize, pool, hStream, per_thread,
			       explicit_pool);
		if (r != CUDA_SUCCESS)
			vgpu__uncharge(dv, VGPU_USAGE_BUFFER, held);
		else
			vgpu__track_charged(VGPU_TRACK_PTR, *dptr,
					    VGPU_USAGE_BUFFER, dv->ordinal,
					    held, 0);
		return r;
	}
	pdv = vgpu_pool_dev(i) < 0 ? NULL : vgpu__dev_attach(vgpu_pool_dev(i));
	if (!pdv || !pdv->slot)
		return call_alloc(dptr, bytesize, pool, hStream, per_thread,
				  explicit_pool);
	/* Admitted at the most the pool may grow by for it (pool.h); the
	 * growth is charged when the pool is settled, and the admission
	 * given back after. */
	admit = vgpu_pool_admission(bytesize);
	if ((r = vgpu__charge(pdv, VGPU_USAGE_POOL, admit)) != CUDA_SUCCESS)
		return r;
	vgpu_pool_live(i);
	r = call_alloc(dptr, bytesize, pool, hStream, per_thread,
		       explicit_pool);
	vgpu_pool_settle(i);
	vgpu__uncharge(pdv, VGPU_USAGE_POOL, admit);
	if (r != CUDA_SUCCESS) {
		vgpu_pool_freed(i);
		return r;
	}
	vgpu__track_charged(VGPU_TRACK_PTR, *dptr, VGPU_USAGE_POOL, pdv->ordinal,
			    bytesize, (unsigned)i);
	return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, NULL, hStream, 0, false);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
			      CUstream hStream)
{
	if (!vgpu__real.cuMemAllocAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, NULL, hStream, 1, false);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
				 CUmemoryPool pool, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocFromPoolAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, pool, hStream, 0, true);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
				      CUmemoryPool pool, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocFromPoolAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, pool, hStream, 1, true);
}

static void pool_freed_async(int i, CUstream s, int per_thread);

static CUresult free_async(CUdeviceptr dptr, CUstream hStream, int per_thread)
{
	struct vgpu_tracked t;
	bool known = vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t);
	CUresult r = per_thread ? vgpu__real.cuMemFreeAsync_ptsz(dptr, hStream)
				: vgpu__real.cuMemFreeAsync(dptr, hStream);

	if (!known)
		return r;
	if (r != CUDA_SUCCESS) {
		vgpu__track_insert(VGPU_TRACK_PTR, dptr, &t);
		return r;
	}
	if (t.kind == VGPU_USAGE_POOL)
		pool_freed_async((int)t.aux, hStream, per_thread);
	else if (t.kind == VGPU_USAGE_BUFFER && t.aux)	/* shared (IPC) */
		vgpu__share_gone(t.aux);
	else	/* cuMemAlloc memory freed in stream order */
		vgpu__uncharge(vgpu__dev_peek((int)t.dev), (int)t.kind,
			       t.bytes);
	return r;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	if (!vgpu__real.cuMemFreeAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return free_async(dptr, hStream, 0);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	if (!vgpu__real.cuMemFreeAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return free_async(dptr, hStream, 1);
}

/* A pool is registered with its own device (not the current one), and a
 * host pool as host memory. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUresult r;

	if (!vgpu__real.cuMemPoolCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemPoolCreate(pool, poolProps);
	if (r != CUDA_SUCCESS || !pool || !poolProps)
		return r;
	if (vgpu_pool_index((uintptr_t)*pool,
			    poolProps->location.type ==
				    CU_MEM_LOCATION_TYPE_DEVICE
			    ? poolProps->location.id : -1,
			    poolProps->location.type !=
				    CU_MEM_LOCATION_TYPE_DEVICE) < 0) {
		/* Not followed, it could hold memory uncharged. */
		vgpu_pools_full();
		if (vgpu__real.cuMemPoolDestroy)
			vgpu__real.cuMemPoolDestroy(*pool);
		*pool = NULL;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult r;

	if (!vgpu__real.cuMemPoolTrimTo)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemPoolTrimTo(pool, minBytesToKeep);
	if (r == CUDA_SUCCESS)
		vgpu_pool_settle(vgpu_pool_find((uintptr_t)pool));
	return r;
}

/* A stream reached a free of a destroyable pool's allocation. */
static void CUDA_CB freed_in_order(void *arg)
{
	vgpu_pool_unlive((int)(intptr_t)arg);
}

/* cuMemFreeAsync of pool i's allocation: a pool that can be destroyed
 * keeps its memory until the stream reaches the free, so that is when
 * the allocation stops counting (a host function on the stream); the
 * default pool, which cannot be destroyed, is settled at once. */
static void pool_freed_async(int i, CUstream s, int per_thread)
{
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;

	if (i < 0)
		return;
	vgpu_pool_settle(i);
	if (!vgpu_pool_destroyable(i))
		goto now;
	if (per_thread && vgpu__real.cuLaunchHostFunc_ptsz)
		r = vgpu__real.cuLaunchHostFunc_ptsz(s, freed_in_order,
						     (void *)(intptr_t)i);
	else if (!per_thread && vgpu__real.cuLaunchHostFunc)
		r = vgpu__real.cuLaunchHostFunc(s, freed_in_order,
						(void *)(intptr_t)i);
	if (r == CUDA_SUCCESS)
		return;
now:
	vgpu_pool_unlive(i);
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	int i = vgpu_pool_find((uintptr_t)pool);
	CUresult r;

	if (!vgpu__real.cuMemPoolDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* What it holds now is what it keeps while allocations live. */
	vgpu_pool_settle(i);
	r = vgpu__real.cuMemPoolDestroy(pool);
	if (r == CUDA_SUCCESS)
		vgpu_pool_destroyed(i);
	return r;
}
