/* objects.c - the other consumers of device memory: arrays, VMM handles,
 * multicast objects, graph memory nodes and contexts. Each is charged
 * before the driver creates it and given back when it is destroyed; the
 * handle is remembered in track.c's handle table.
 */
#include "devices.h"
#include "track.h"

/* ---- arrays ------------------------------------------------------------ */

/* Bytes of one element of one channel; the formats cuda.h lists with a
 * plain element size, 4 for the rest (docs/memory.md). */
static uint64_t format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
	case CU_AD_FORMAT_UNORM_INT8X1:
	case CU_AD_FORMAT_SNORM_INT8X1:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
	case CU_AD_FORMAT_UNORM_INT16X1:
	case CU_AD_FORMAT_SNORM_INT16X1:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 4;
	}
}

/* width x height x depth elements (0 counts as 1), saturating. */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f,
			    unsigned channels)
{
	uint64_t b = format_bytes(f) * (channels ? channels : 1);
	size_t dims[3] = { w, h ? h : 1, d ? d : 1 };

	for (int i = 0; i < 3; i++) {
		if (dims[i] && b > UINT64_MAX / dims[i])
			return UINT64_MAX;
		b *= dims[i];
	}
	return b;
}

static CUresult charge_handle(struct vgpu_dev *dv, int kind, uint64_t bytes)
{
	if (bytes > VGPU_TRACK_MAX_BYTES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return vgpu__charge(dv, kind, bytes);
}

static void remember_handle(uint64_t key, struct vgpu_dev *dv, int kind,
			    uint64_t bytes)
{
	struct vgpu_tracked t = { bytes, (unsigned)kind, (unsigned)dv->ordinal,
				  0 };

	if (dv->slot && !vgpu__track_insert(VGPU_TRACK_HANDLE, key, &t))
		vgpu_log(VGPU_LOG_WARN, "the handle table is full: %llu bytes "
			 "stay charged after their release",
			 (unsigned long long)bytes);
}

/* Gives back what key was charged, after the driver destroyed it. */
static CUresult forget_handle(uint64_t key, CUresult r,
			      const struct vgpu_tracked *t, bool known)
{
	if (!known)
		return r;
	if (r != CUDA_SUCCESS) {
		vgpu__track_insert(VGPU_TRACK_HANDLE, key, t);
		return r;
	}
	vgpu__uncharge(vgpu__dev_peek((int)t->dev), (int)t->kind, t->bytes);
	return r;
}

#define CREATE(kind, bytes, handle_expr, call)				\
	do {								\
		struct vgpu_dev *dv_ = vgpu__dev_current();		\
		uint64_t b_ = (bytes);					\
		CUresult r_;						\
		if (!dv_ || !dv_->slot)					\
			return dv_ && dv_->state == VGPU_DEV_FAILED	\
				? CUDA_ERROR_INVALID_DEVICE : (call);	\
		if ((r_ = charge_handle(dv_, kind, b_)) != CUDA_SUCCESS) \
			return r_;					\
		r_ = (call);						\
		if (r_ != CUDA_SUCCESS) {				\
			vgpu__uncharge(dv_, kind, b_);			\
			return r_;					\
		}							\
		remember_handle((uint64_t)(uintptr_t)(handle_expr), dv_, \
				kind, b_);				\
		return r_;						\
	} while (0)

#define DESTROY(key, call)						\
	do {								\
		struct vgpu_tracked t_;					\
		uint64_t k_ = (uint64_t)(uintptr_t)(key);		\
		bool known_ = vgpu__track_remove(VGPU_TRACK_HANDLE, k_, &t_); \
		return forget_handle(k_, (call), &t_, known_);		\
	} while (0)

CUresult cuArrayCreate_v2(CUarray *pHandle,
			  const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	if (!vgpu__real.cuArrayCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pHandle || !pAllocateArray)
		return vgpu__real.cuArrayCreate_v2(pHandle, pAllocateArray);
	CREATE(VGPU_USAGE_ARRAY,
	       array_bytes(pAllocateArray->Width, pAllocateArray->Height, 1,
			   pAllocateArray->Format,
			   pAllocateArray->NumChannels),
	       *pHandle, vgpu__real.cuArrayCreate_v2(pHandle, pAllocateArray));
}

CUresult cuArray3DCreate_v2(CUarray *pHandle,
			    const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	if (!vgpu__real.cuArray3DCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pHandle || !pAllocateArray)
		return vgpu__real.cuArray3DCreate_v2(pHandle, pAllocateArray);
	CREATE(VGPU_USAGE_ARRAY,
	       array_bytes(pAllocateArray->Width, pAllocateArray->Height,
			   pAllocateArray->Depth, pAllocateArray->Format,
			   pAllocateArray->NumChannels),
	       *pHandle, vgpu__real.cuArray3DCreate_v2(pHandle, pAllocateArray));
}

CUresult cuArrayDestroy(CUarray hArray)
{
	if (!vgpu__real.cuArrayDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	DESTROY(hArray, vgpu__real.cuArrayDestroy(hArray));
}

/* The levels of a mipmapped array halve each dimension, down to 1. */
static uint64_t mipmapped_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d,
				unsigned levels)
{
	size_t w = d->Width, h = d->Height, z = d->Depth;
	uint64_t sum = 0;

	for (unsigned i = 0; i < levels && i < 64; i++) {
		uint64_t b = array_bytes(w, h, z, d->Format, d->NumChannels);
		if (b > UINT64_MAX - sum)
			return UINT64_MAX;
		sum += b;
		w = w > 1 ? w / 2 : 1;
		h = h > 1 ? h / 2 : h;
		z = z > 1 ? z / 2 : z;
	}
	return sum;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
				const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
				unsigned int numMipmapLevels)
{
	if (!vgpu__real.cuMipmappedArrayCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0)
		return vgpu__real.cuMipmappedArrayCreate(pHandle,
				pMipmappedArrayDesc, numMipmapLevels);
	CREATE(VGPU_USAGE_ARRAY,
	       mipmapped_bytes(pMipmappedArrayDesc, numMipmapLevels), *pHandle,
	       vgpu__real.cuMipmappedArrayCreate(pHandle, pMipmappedArrayDesc,
						 numMipmapLevels));
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	if (!vgpu__real.cuMipmappedArrayDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	DESTROY(hMipmappedArray,
		vgpu__real.cuMipmappedArrayDestroy(hMipmappedArray));
}

/* ---- virtual memory and multicast --------------------------------------- */

/* Device locations are device memory of that device; host locations are
 * not (overcommit counts them as spilled). */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuMemCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !prop || size == 0 ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return vgpu__real.cuMemCreate(handle, size, prop, flags);
	dv = vgpu__dev_attach(prop->location.id);
	if (!dv || !dv->slot)
		return dv && dv->state == VGPU_DEV_FAILED
			       ? CUDA_ERROR_INVALID_DEVICE
			       : vgpu__real.cuMemCreate(handle, size, prop,
							flags);
	if ((r = charge_handle(dv, VGPU_USAGE_VMM, size)) != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMemCreate(handle, size, prop, flags);
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_VMM, size);
		return r;
	}
	remember_handle(*handle, dv, VGPU_USAGE_VMM, size);
	return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	if (!vgpu__real.cuMemRelease)
		return CUDA_ERROR_NOT_INITIALIZED;
	DESTROY(handle, vgpu__real.cuMemRelease(handle));
}

/* A multicast object is charged its size on the current device. */
CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle,
			   const CUmulticastObjectProp *prop)
{
	if (!vgpu__real.cuMulticastCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!mcHandle || !prop || prop->size == 0)
		return vgpu__real.cuMulticastCreate(mcHandle, prop);
	CREATE(VGPU_USAGE_MULTICAST, prop->size, *mcHandle,
	       vgpu__real.cuMulticastCreate(mcHandle, prop));
}

/* ---- graph memory nodes ------------------------------------------------- */

/* A graph's allocation nodes are charged when added and given back when
 * the graph is destroyed: the charge is the graph's, keyed by the graph. */
CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				const CUgraphNode *dependencies,
				size_t numDependencies,
				CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	struct vgpu_dev *dv;
	struct vgpu_tracked t;
	uint64_t key = (uint64_t)(uintptr_t)hGraph;
	CUresult r;

	if (!vgpu__real.cuGraphAddMemAllocNode)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!nodeParams || nodeParams->bytesize == 0 || !hGraph ||
	    nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		goto pass;
	dv = vgpu__dev_attach(nodeParams->poolProps.location.id);
	if (!dv || !dv->slot)
		goto pass;
	r = charge_handle(dv, VGPU_USAGE_GRAPH, nodeParams->bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuGraphAddMemAllocNode(phGraphNode, hGraph,
					      dependencies, numDependencies,
					      nodeParams);
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_GRAPH, nodeParams->bytesize);
		return r;
	}
	/* A graph is used by one thread at a time (CUDA's rule), so the
	 * remove-add-insert of its entry does not race. */
	if (vgpu__track_remove(VGPU_TRACK_HANDLE, key, &t) &&
	    t.dev == (unsigned)dv->ordinal &&
	    t.bytes + nodeParams->bytesize <= VGPU_TRACK_MAX_BYTES) {
		t.bytes += nodeParams->bytesize;
		vgpu__track_insert(VGPU_TRACK_HANDLE, key, &t);
	} else {
		remember_handle(key, dv, VGPU_USAGE_GRAPH,
				nodeParams->bytesize);
	}
	return r;
pass:
	return vgpu__real.cuGraphAddMemAllocNode(phGraphNode, hGraph,
						 dependencies, numDependencies,
						 nodeParams);
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
	if (!vgpu__real.cuGraphDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	DESTROY(hGraph, vgpu__real.cuGraphDestroy(hGraph));
}

/* ---- contexts ----------------------------------------------------------- */

/* Each context a process creates costs device memory of its own; it is
 * charged VGPU_CONTEXT_OVERHEAD. The primary context is charged once, on
 * its first retain, and given back on its last release or a reset. */
static uint64_t overhead(void)
{
	return vgpu__options()->context_overhead;
}

/* Destroying a context frees what was allocated in it, without a free
 * call the shim could see: afterwards, every pointer charged on the device
 * that the driver no longer knows is given back (and the pools settled).
 * Arrays and other handles are not probed (a destroyed handle must not be
 * passed to the driver); they stay charged until the process ends. */
static bool ptr_gone(uint64_t key, const struct vgpu_tracked *t)
{
	CUdeviceptr base;
	size_t size;
	CUresult r;

	(void)t;
	if (!vgpu__real.cuMemGetAddressRange_v2)
		return false;
	r = vgpu__real.cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)key);
	return r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE;
}

static void ptr_drop(const struct vgpu_tracked *t)
{
	if (t->kind != VGPU_USAGE_POOL)
		vgpu__uncharge(vgpu__dev_peek((int)t->dev), (int)t->kind,
			       t->bytes);
}

static void sweep_device(int ordinal)
{
	vgpu__track_sweep(VGPU_TRACK_PTR, (unsigned)ordinal, ptr_gone,
			  ptr_drop);
	vgpu__pools_settle_device(ordinal);
}

#define CTX_CREATE(dev, call)						\
	do {								\
		struct vgpu_dev *dv_ = vgpu__dev_attach(dev);		\
		CUresult r_;						\
		if (!dv_ || !dv_->slot)					\
			return dv_ && dv_->state == VGPU_DEV_FAILED	\
				? CUDA_ERROR_INVALID_DEVICE : (call);	\
		if ((r_ = vgpu__charge(dv_, VGPU_USAGE_CONTEXT,		\
				       overhead())) != CUDA_SUCCESS)	\
			return r_;					\
		r_ = (call);						\
		if (r_ != CUDA_SUCCESS) {				\
			vgpu__uncharge(dv_, VGPU_USAGE_CONTEXT, overhead()); \
			return r_;					\
		}							\
		remember_handle((uint64_t)(uintptr_t)*pctx, dv_,	\
				VGPU_USAGE_CONTEXT, overhead());	\
		return r_;						\
	} while (0)

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	if (!vgpu__real.cuCtxCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v2(pctx, flags, dev);
	CTX_CREATE(dev, vgpu__real.cuCtxCreate_v2(pctx, flags, dev));
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
			int numParams, unsigned int flags, CUdevice dev)
{
	if (!vgpu__real.cuCtxCreate_v3)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v3(pctx, paramsArray, numParams,
						 flags, dev);
	CTX_CREATE(dev, vgpu__real.cuCtxCreate_v3(pctx, paramsArray, numParams,
						  flags, dev));
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
			unsigned int flags, CUdevice dev)
{
	if (!vgpu__real.cuCtxCreate_v4)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v4(pctx, ctxCreateParams, flags,
						 dev);
	CTX_CREATE(dev, vgpu__real.cuCtxCreate_v4(pctx, ctxCreateParams, flags,
						  dev));
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	struct vgpu_tracked t;
	uint64_t key = (uint64_t)(uintptr_t)ctx;
	bool known;
	CUresult r;

	if (!vgpu__real.cuCtxDestroy_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	vgpu__ctx_teardown();
	known = vgpu__track_remove(VGPU_TRACK_HANDLE, key, &t);
	r = forget_handle(key, vgpu__real.cuCtxDestroy_v2(ctx), &t, known);
	if (r == CUDA_SUCCESS && known)
		sweep_device((int)t.dev);
	return r;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	struct vgpu_dev *dv;
	CUcontext green;
	CUresult r;
	bool first;

	if (!vgpu__real.cuDevicePrimaryCtxRetain)
		return CUDA_ERROR_NOT_INITIALIZED;
	dv = vgpu__dev_attach(dev);
	if (!dv || !dv->slot || !pctx)
		return dv && dv->state == VGPU_DEV_FAILED
			       ? CUDA_ERROR_INVALID_DEVICE
			       : vgpu__real.cuDevicePrimaryCtxRetain(pctx, dev);
	first = __atomic_fetch_add(&dv->primary_refs, 1, __ATOMIC_ACQ_REL) == 0;
	if (first && (r = vgpu__charge(dv, VGPU_USAGE_CONTEXT, overhead())) !=
			     CUDA_SUCCESS) {
		__atomic_sub_fetch(&dv->primary_refs, 1, __ATOMIC_ACQ_REL);
		return r;
	}
	/* Spatial mode: the primary context stands on a green context; the
	 * real primary context is not retained (nor released later). */
	if (dv->spatial && (green = vgpu__spatial_ctx(dv)) != NULL) {
		*pctx = green;
		return CUDA_SUCCESS;
	}
	r = vgpu__real.cuDevicePrimaryCtxRetain(pctx, dev);
	if (r != CUDA_SUCCESS) {
		__atomic_sub_fetch(&dv->primary_refs, 1, __ATOMIC_ACQ_REL);
		if (first)
			vgpu__uncharge(dv, VGPU_USAGE_CONTEXT, overhead());
	}
	return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	struct vgpu_dev *dv = vgpu__dev_peek(dev);
	CUresult r;

	if (!vgpu__real.cuDevicePrimaryCtxRelease_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	bool spatial = dv && __atomic_load_n(&dv->spatial_ctx,
					     __ATOMIC_ACQUIRE);
	/* Capped launch state exists only on a device with a slot; the last
	 * retain the shim counted is the one that tears the context down. */
	if (!spatial && dv && dv->slot &&
	    __atomic_load_n(&dv->primary_refs, __ATOMIC_ACQUIRE) <= 1)
		vgpu__ctx_teardown();
	r = spatial ? CUDA_SUCCESS
		    : vgpu__real.cuDevicePrimaryCtxRelease_v2(dev);
	if (r != CUDA_SUCCESS || !dv || !dv->slot)
		return r;
	int n = __atomic_load_n(&dv->primary_refs, __ATOMIC_ACQUIRE);
	while (n > 0 && !__atomic_compare_exchange_n(&dv->primary_refs, &n,
						     n - 1, false,
						     __ATOMIC_ACQ_REL,
						     __ATOMIC_ACQUIRE))
		;
	if (n == 1) {
		vgpu__uncharge(dv, VGPU_USAGE_CONTEXT, overhead());
		sweep_device(dv->ordinal);
	}
	return r;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	struct vgpu_dev *dv = vgpu__dev_peek(dev);
	CUresult r;

	if (!vgpu__real.cuDevicePrimaryCtxReset_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dv && dv->slot)
		vgpu__ctx_teardown();
	r = vgpu__real.cuDevicePrimaryCtxReset_v2(dev);
	/* The context and its allocations are gone; its retains stay (it is
	 * created again on next use), and so does its charge. */
	if (r == CUDA_SUCCESS && dv && dv->slot)
		sweep_device(dv->ordinal);
	return r;
}
