/* objects.c - the other consumers of device memory: arrays, VMM handles,
 * multicast objects and contexts (green ones included). Each is charged
 * before the driver creates it and given back when the driver frees its
 * memory: arrays and contexts when destroyed (the handle is remembered in
 * track.c's handle table), VMM handles and multicast objects when their
 * last reference goes (vmm.c). Graph memory is graphs.c's.
 */
#include "devices.h"
#include "overcommit.h"
#include "share.h"
#include "track.h"
#include "vmm.h"

/* ---- arrays ------------------------------------------------------------ */

/* Arrays without a size from the driver: the core's estimate of a pitched
 * image (vgpu_array_bytes, front.h; docs/memory.md). */
#define LAYERS		(CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)

/* Bytes of one element of one channel, and the channels a packed format
 * implies (0: NumChannels says); 4 bytes for formats not listed here. */
static uint64_t format_bytes(CUarray_format f, unsigned *implied)
{
	*implied = 0;
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
	case CU_AD_FORMAT_UNORM_INT8X1:
	case CU_AD_FORMAT_SNORM_INT8X1:
		return 1;
	case CU_AD_FORMAT_UNORM_INT8X2:
	case CU_AD_FORMAT_SNORM_INT8X2:
		*implied = 2;
		return 1;
	case CU_AD_FORMAT_UNORM_INT8X4:
	case CU_AD_FORMAT_SNORM_INT8X4:
		*implied = 4;
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
	case CU_AD_FORMAT_UNORM_INT16X1:
	case CU_AD_FORMAT_SNORM_INT16X1:
		return 2;
	case CU_AD_FORMAT_UNORM_INT16X2:
	case CU_AD_FORMAT_SNORM_INT16X2:
		*implied = 2;
		return 2;
	case CU_AD_FORMAT_UNORM_INT16X4:
	case CU_AD_FORMAT_SNORM_INT16X4:
		*implied = 4;
		return 2;
	default:
		return 4;
	}
}

/* A w x h x d array (0 counts as 1) of the estimate above, saturating.
 * layers: d counts layers or cube faces (it does not shrink with levels). */
/* An element of format f in channels channels (a format may imply
 * them). */
static uint64_t array_elem(CUarray_format f, unsigned channels)
{
	unsigned implied;
	uint64_t elem = format_bytes(f, &implied);

	return elem * (implied ? implied : (channels ? channels : 1));
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f,
			    unsigned channels)
{
	return vgpu_array_bytes(array_elem(f, channels), w, h, d);
}

static CUresult charge_handle(struct vgpu_dev *dv, int kind, uint64_t bytes)
{
	if (bytes > VGPU_TRACK_MAX_BYTES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return vgpu__charge(dv, kind, bytes);
}

/* The end of the protocol for an object the driver was asked to make
 * after bytes of kind were charged: kept and remembered under key when it
 * made it (r is CUDA_SUCCESS), given back when it refused. Returns r. */
static CUresult commit_handle(struct vgpu_dev *dv, int kind, uint64_t bytes,
			      CUresult r, uint64_t key)
{
	if (r != CUDA_SUCCESS)
		vgpu__uncharge(dv, kind, bytes);
	else
		vgpu__track_charged(VGPU_TRACK_HANDLE, key, kind, dv->ordinal,
				    bytes, 0);
	return r;
}

/* The end of the protocol for destroying an object: its entry was taken
 * out of the table before the driver was asked (known), so that a handle
 * the driver hands out again at once is not confused with it. The charge
 * is given back when the driver destroyed it (r is CUDA_SUCCESS), and the
 * entry put back when it refused. Returns r. */
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

static bool take_handle(uint64_t key, struct vgpu_tracked *t)
{
	return vgpu__track_remove(VGPU_TRACK_HANDLE, key, t);
}

/* Whether dv's tenant is accounted; a refused device answers
 * CUDA_ERROR_INVALID_DEVICE (*refused), any other is left to the driver. */
static bool accounted(const struct vgpu_dev *dv, CUresult *refused)
{
	*refused = vgpu__dev_failed(dv)
			   ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
	return dv && dv->slot;
}

/* The charge follows what the driver says an array really took (req; 0
 * when it did not say: cuArrayGetMemoryRequirements answers for
 * deferred-mapping arrays only). Past the limit: the caller destroys the
 * array and gives back *bytes. */
static CUresult follow_driver(struct vgpu_dev *dv, uint64_t *bytes,
			      uint64_t req)
{
	if (req > VGPU_TRACK_MAX_BYTES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return vgpu__account_error(dv, vgpu_account_adjust(dv->slot,
			dv->ordinal, VGPU_USAGE_ARRAY, bytes, req));
}

static uint64_t array_req(struct vgpu_dev *dv, CUarray a)
{
	CUDA_ARRAY_MEMORY_REQUIREMENTS req;

	if (!vgpu__real.cuArrayGetMemoryRequirements ||
	    vgpu__real.cuArrayGetMemoryRequirements(&req, a, dv->ordinal) !=
		    CUDA_SUCCESS)
		return 0;
	return req.size;
}

static uint64_t mipmapped_req(struct vgpu_dev *dv, CUmipmappedArray m)
{
	CUDA_ARRAY_MEMORY_REQUIREMENTS req;

	if (!vgpu__real.cuMipmappedArrayGetMemoryRequirements ||
	    vgpu__real.cuMipmappedArrayGetMemoryRequirements(&req, m,
							     dv->ordinal) !=
		    CUDA_SUCCESS)
		return 0;
	return req.size;
}

/* The one path of cuArrayCreate and cuArray3DCreate once the shape is
 * known: charge the estimate, create, follow what the driver reports. */
static CUresult array_create(CUarray *pHandle, const void *desc, bool three,
			     uint64_t bytes)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	CUresult r;

	if (!accounted(dv, &r))
		goto pass;
	if ((r = charge_handle(dv, VGPU_USAGE_ARRAY, bytes)) != CUDA_SUCCESS)
		return r;
	r = three ? vgpu__real.cuArray3DCreate_v2(pHandle, desc)
		  : vgpu__real.cuArrayCreate_v2(pHandle, desc);
	if (r == CUDA_SUCCESS &&
	    follow_driver(dv, &bytes, array_req(dv, *pHandle)) != CUDA_SUCCESS) {
		vgpu__real.cuArrayDestroy(*pHandle);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return commit_handle(dv, VGPU_USAGE_ARRAY, bytes, r,
			     r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0);
pass:
	if (r != CUDA_SUCCESS)
		return r;
	return three ? vgpu__real.cuArray3DCreate_v2(pHandle, desc)
		     : vgpu__real.cuArrayCreate_v2(pHandle, desc);
}

CUresult cuArrayCreate_v2(CUarray *pHandle,
			  const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	const CUDA_ARRAY_DESCRIPTOR *d = pAllocateArray;

	if (!vgpu__real.cuArrayCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pHandle || !d)
		return vgpu__real.cuArrayCreate_v2(pHandle, d);
	return array_create(pHandle, d, false,
			    array_bytes(d->Width, d->Height, 0, d->Format,
					d->NumChannels));
}

CUresult cuArray3DCreate_v2(CUarray *pHandle,
			    const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	const CUDA_ARRAY3D_DESCRIPTOR *d = pAllocateArray;

	if (!vgpu__real.cuArray3DCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pHandle || !d)
		return vgpu__real.cuArray3DCreate_v2(pHandle, d);
	return array_create(pHandle, d, true,
			    array_bytes(d->Width, d->Height, d->Depth,
					d->Format, d->NumChannels));
}

CUresult cuArrayDestroy(CUarray hArray)
{
	struct vgpu_tracked t;
	bool known;

	if (!vgpu__real.cuArrayDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	known = take_handle((uintptr_t)hArray, &t);
	return forget_handle((uintptr_t)hArray,
			     vgpu__real.cuArrayDestroy(hArray), &t, known);
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
				const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
				unsigned int numMipmapLevels)
{
	const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
	struct vgpu_dev *dv;
	uint64_t bytes;
	CUresult r;

	if (!vgpu__real.cuMipmappedArrayCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	dv = vgpu__dev_current();
	if (!pHandle || !d || !accounted(dv, &r))
		goto pass;
	/* 0 levels makes one, as the driver does. */
	bytes = vgpu_mipmap_bytes(array_elem(d->Format, d->NumChannels),
				  d->Width, d->Height, d->Depth,
				  d->Flags & LAYERS, numMipmapLevels);
	if ((r = charge_handle(dv, VGPU_USAGE_ARRAY, bytes)) != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMipmappedArrayCreate(pHandle, d, numMipmapLevels);
	if (r == CUDA_SUCCESS &&
	    follow_driver(dv, &bytes, mipmapped_req(dv, *pHandle)) !=
		    CUDA_SUCCESS) {
		vgpu__real.cuMipmappedArrayDestroy(*pHandle);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return commit_handle(dv, VGPU_USAGE_ARRAY, bytes, r,
			     r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0);
pass:
	if (vgpu__dev_failed(dv))
		return CUDA_ERROR_INVALID_DEVICE;
	return vgpu__real.cuMipmappedArrayCreate(pHandle, d, numMipmapLevels);
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	struct vgpu_tracked t;
	bool known;

	if (!vgpu__real.cuMipmappedArrayDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	known = take_handle((uintptr_t)hMipmappedArray, &t);
	return forget_handle((uintptr_t)hMipmappedArray,
			     vgpu__real.cuMipmappedArrayDestroy(hMipmappedArray),
			     &t, known);
}

/* ---- virtual memory and multicast --------------------------------------- */

/* Device locations are device memory of that device; host locations are
 * not (overcommit counts them as spilled). The charge lasts while the
 * handle or any mapping of it lives (vmm.c). */
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
	if (!accounted(dv, &r))
		return r != CUDA_SUCCESS
			       ? r : vgpu__real.cuMemCreate(handle, size, prop,
							    flags);
	if ((r = charge_handle(dv, VGPU_USAGE_VMM, size)) != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMemCreate(handle, size, prop, flags);
	if (r != CUDA_SUCCESS)
		vgpu__uncharge(dv, VGPU_USAGE_VMM, size);
	else
		vgpu__vmm_add(*handle, dv->ordinal, VGPU_USAGE_VMM, size);
	return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	uint64_t gen;
	CUresult r;

	if (!vgpu__real.cuMemRelease)
		return CUDA_ERROR_NOT_INITIALIZED;
	gen = vgpu__vmm_gen(handle);
	r = vgpu__real.cuMemRelease(handle);
	if (r == CUDA_SUCCESS)
		vgpu__vmm_unref(handle, gen);
	return r;
}

/* A movable range (overcommit, VGPU_CONTROL) is the job's cuMemAlloc
 * memory, which the driver refuses to the VMM calls: so does the shim,
 * though the range is VMM memory underneath. A handle retained from one
 * kept its memory on the device after the shim's release gave the
 * charge back: 2400 MiB held under a 512 MiB slice (a hostile review);
 * an unmap would pull the memory from under the shim. */
static bool movable(CUdeviceptr p, size_t n)
{
	if (!vgpu__movable_overlaps(p, n, false))
		return false;
	vgpu_log(VGPU_LOG_DEBUG, "a VMM call on 0x%llx, memory of cuMemAlloc "
		 "made movable: CUDA_ERROR_INVALID_VALUE, as the driver "
		 "answers for cuMemAlloc memory", (unsigned long long)p);
	return true;
}

/* A retained handle is one more reference, released by cuMemRelease. */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
				     void *addr)
{
	uint64_t gen, pre = 0;
	CUresult r;

	if (!vgpu__real.cuMemRetainAllocationHandle)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (movable((uintptr_t)addr, 1))
		return CUDA_ERROR_INVALID_VALUE;
	/* Counted before the driver makes it: an unmap racing it cannot
	 * give the charge back meanwhile. */
	gen = vgpu__vmm_ref_mapped((uintptr_t)addr, &pre);
	r = vgpu__real.cuMemRetainAllocationHandle(handle, addr);
	if (r != CUDA_SUCCESS || !handle || *handle != pre) {
		vgpu__vmm_unref(pre, gen);
		if (r == CUDA_SUCCESS && handle)
			vgpu__vmm_ref(*handle);
	}
	return r;
}

/* A mapping is a reference: counted before the driver makes it. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
		  CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	uint64_t gen;
	CUresult r;

	if (!vgpu__real.cuMemMap)
		return CUDA_ERROR_NOT_INITIALIZED;
	gen = vgpu__vmm_ref(handle);
	r = vgpu__real.cuMemMap(ptr, size, offset, handle, flags);
	if (r != CUDA_SUCCESS)
		vgpu__vmm_unref(handle, gen);
	else
		vgpu__vmm_mapped(ptr, size, handle, gen);
	return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uint64_t ticket;
	CUresult r;

	if (!vgpu__real.cuMemUnmap)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (movable(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	ticket = vgpu__vmm_unmap_begin(ptr, size);
	r = vgpu__real.cuMemUnmap(ptr, size);
	vgpu__vmm_unmap_end(ptr, size, ticket, r == CUDA_SUCCESS);
	return r;
}

/* A multicast object takes its size on each device added to it (the
 * simulator's model; what a real driver takes is for the GPU check to
 * show), for as long as its handle or a mapping of it lives; it holds a
 * reference to each memory handle bound to it (vmm.c). */
CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle,
			   const CUmulticastObjectProp *prop)
{
	CUresult r;

	if (!vgpu__real.cuMulticastCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMulticastCreate(mcHandle, prop);
	if (r == CUDA_SUCCESS && mcHandle && prop)
		vgpu__vmm_add(*mcHandle, -1, VGPU_USAGE_MULTICAST,
			      prop->size);
	return r;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle,
			      CUdevice dev)
{
	struct vgpu_dev *dv;
	uint64_t gen, bytes;
	CUresult r;

	if (!vgpu__real.cuMulticastAddDevice)
		return CUDA_ERROR_NOT_INITIALIZED;
	bytes = vgpu__vmm_bytes(mcHandle, &gen);
	dv = vgpu__dev_attach(dev);
	if (!gen || !accounted(dv, &r))
		return gen && r != CUDA_SUCCESS
			       ? r : vgpu__real.cuMulticastAddDevice(mcHandle,
								     dev);
	if ((r = charge_handle(dv, VGPU_USAGE_MULTICAST, bytes)) !=
	    CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuMulticastAddDevice(mcHandle, dev);
	if (r != CUDA_SUCCESS ||
	    !vgpu__vmm_add_device(mcHandle, gen, dev, &bytes))
		vgpu__uncharge(dv, VGPU_USAGE_MULTICAST, bytes);
	return r;
}

/* A binding is a reference to the memory bound: counted before the
 * driver makes it. */
CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle,
			    size_t mcOffset,
			    CUmemGenericAllocationHandle memHandle,
			    size_t memOffset, size_t size,
			    unsigned long long flags)
{
	uint64_t gen;
	CUresult r;

	if (!vgpu__real.cuMulticastBindMem)
		return CUDA_ERROR_NOT_INITIALIZED;
	gen = vgpu__vmm_ref(memHandle);
	r = vgpu__real.cuMulticastBindMem(mcHandle, mcOffset, memHandle,
					  memOffset, size, flags);
	if (r != CUDA_SUCCESS)
		vgpu__vmm_unref(memHandle, gen);
	else
		vgpu__vmm_bound(mcHandle, mcOffset, size, memHandle, gen);
	return r;
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle,
			     size_t mcOffset, CUdeviceptr memptr, size_t size,
			     unsigned long long flags)
{
	uint64_t gen, handle = 0;
	CUresult r;

	if (!vgpu__real.cuMulticastBindAddr)
		return CUDA_ERROR_NOT_INITIALIZED;
	gen = vgpu__vmm_ref_mapped(memptr, &handle);
	r = vgpu__real.cuMulticastBindAddr(mcHandle, mcOffset, memptr, size,
					   flags);
	if (r != CUDA_SUCCESS)
		vgpu__vmm_unref(handle, gen);
	else
		vgpu__vmm_bound(mcHandle, mcOffset, size, handle, gen);
	return r;
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle,
			   CUdevice dev, size_t mcOffset, size_t size)
{
	CUresult r;

	if (!vgpu__real.cuMulticastUnbind)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMulticastUnbind(mcHandle, dev, mcOffset, size);
	if (r == CUDA_SUCCESS)
		vgpu__vmm_unbound(mcHandle, dev, mcOffset, size);
	return r;
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

	/* Overcommit's ranges are virtual memory, which a context does not
	 * take with it (the driver may not even know them as allocations):
	 * a destroyed context releases its own (vgpu__overcommit_ctx_gone). */
	if (t->kind == VGPU_USAGE_SPILLED || !vgpu__real.cuMemGetAddressRange_v2)
		return false;
	r = vgpu__real.cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)key);
	return r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE;
}

void vgpu__ptr_drop(const struct vgpu_tracked *t)
{
	if (t->kind == VGPU_USAGE_POOL)
		vgpu_pool_freed((int)t->aux);
	else if (t->kind == VGPU_USAGE_BUFFER && t->aux)
		vgpu__share_gone(t->aux);
	else
		vgpu__uncharge(vgpu__dev_peek((int)t->dev), (int)t->kind,
			       t->bytes);
}

static void sweep_device(int ordinal)
{
	vgpu__track_sweep(VGPU_TRACK_PTR, (unsigned)ordinal, ptr_gone,
			  vgpu__ptr_drop);
	vgpu_pools_settle_device(ordinal);
}

/* The protocol for a context the driver is asked to make on dev: its
 * overhead charged first, kept under its handle when it was made. The
 * driver's answer is r; *pass is set when dev is not accounted (the caller
 * then asks the driver itself). */
static struct vgpu_dev *ctx_begin(CUdevice dev, CUresult *r)
{
	struct vgpu_dev *dv = vgpu__dev_attach(dev);

	if (!accounted(dv, r))
		return NULL;
	*r = vgpu__charge(dv, VGPU_USAGE_CONTEXT, overhead());
	return dv;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuCtxCreate_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v2(pctx, flags, dev);
	dv = ctx_begin(dev, &r);
	if (r != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuCtxCreate_v2(pctx, flags, dev);
	if (!dv)
		return r;
	return commit_handle(dv, VGPU_USAGE_CONTEXT, overhead(), r,
			     r == CUDA_SUCCESS ? (uintptr_t)*pctx : 0);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
			int numParams, unsigned int flags, CUdevice dev)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuCtxCreate_v3)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v3(pctx, paramsArray, numParams,
						 flags, dev);
	dv = ctx_begin(dev, &r);
	if (r != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuCtxCreate_v3(pctx, paramsArray, numParams, flags,
				      dev);
	if (!dv)
		return r;
	return commit_handle(dv, VGPU_USAGE_CONTEXT, overhead(), r,
			     r == CUDA_SUCCESS ? (uintptr_t)*pctx : 0);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
			unsigned int flags, CUdevice dev)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuCtxCreate_v4)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return vgpu__real.cuCtxCreate_v4(pctx, ctxCreateParams, flags,
						 dev);
	dv = ctx_begin(dev, &r);
	if (r != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
	if (!dv)
		return r;
	return commit_handle(dv, VGPU_USAGE_CONTEXT, overhead(), r,
			     r == CUDA_SUCCESS ? (uintptr_t)*pctx : 0);
}

/* A green context is a context: charged the same overhead while it lives.
 * (The one spatial mode builds under the primary context is the primary
 * context's, charged with it: spatial.c makes it without this hook.) */
CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc,
			  CUdevice dev, unsigned int flags)
{
	struct vgpu_dev *dv;
	CUresult r;

	if (!vgpu__real.cuGreenCtxCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phCtx)
		return vgpu__real.cuGreenCtxCreate(phCtx, desc, dev, flags);
	dv = ctx_begin(dev, &r);
	if (r != CUDA_SUCCESS)
		return r;
	r = vgpu__real.cuGreenCtxCreate(phCtx, desc, dev, flags);
	if (!dv)
		return r;
	if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_CONTEXT, overhead());
		return r;
	}
	/* Marked green: a move reaches its work through its context. */
	vgpu__track_charged(VGPU_TRACK_HANDLE, (uintptr_t)*phCtx,
			    VGPU_USAGE_CONTEXT, dv->ordinal, overhead(),
			    VGPU_CTX_GREEN);
	return r;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
	struct vgpu_tracked t;
	CUcontext ctx;
	bool known;

	if (!vgpu__real.cuGreenCtxDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* A handle the driver refuses destroys nothing: no teardown (each
	 * thread's launches in flight would be forgotten, charged their
	 * estimates; a review's threads launched 300 ms kernels, destroyed
	 * NULL and exited: 99.8% under a 30% cap). One the shim cannot name
	 * (a driver without cuCtxFromGreenCtx) tears them all down. */
	if (!vgpu__real.cuCtxFromGreenCtx) {
		vgpu__ctx_teardown(NULL);
	} else if (hCtx &&
		   vgpu__real.cuCtxFromGreenCtx(&ctx, hCtx) == CUDA_SUCCESS) {
		vgpu__ctx_teardown(ctx);
		vgpu__overcommit_ctx_orphan(ctx);
	}
	known = take_handle((uintptr_t)hCtx, &t);
	return forget_handle((uintptr_t)hCtx, vgpu__real.cuGreenCtxDestroy(hCtx),
			     &t, known);
}

/* Whether the driver knows ctx as a context (a destroy of it may succeed);
 * true when it cannot say (no cuCtxGetApiVersion). */
static bool live_ctx(CUcontext ctx)
{
	unsigned v;

	return !vgpu__real.cuCtxGetApiVersion ||
	       vgpu__real.cuCtxGetApiVersion(ctx, &v) == CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	struct vgpu_tracked t;
	uint64_t key = (uint64_t)(uintptr_t)ctx;
	bool known;
	CUresult r;

	if (!vgpu__real.cuCtxDestroy_v2)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* As cuGreenCtxDestroy: only a context the driver knows (NULL is
	 * none: the driver refuses it) is torn down. */
	if (ctx && live_ctx(ctx)) {
		vgpu__ctx_teardown(ctx);
		vgpu__overcommit_ctx_gone(ctx);
	}
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
		return vgpu__dev_failed(dv)
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
	if (r == CUDA_SUCCESS)
		__atomic_store_n(&dv->primary, *pctx, __ATOMIC_RELEASE);
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
		vgpu__ctx_teardown(__atomic_load_n(&dv->primary,
						   __ATOMIC_ACQUIRE));
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
		vgpu__ctx_teardown(__atomic_load_n(&dv->primary,
						   __ATOMIC_ACQUIRE));
	r = vgpu__real.cuDevicePrimaryCtxReset_v2(dev);
	/* The context and its allocations are gone; its retains stay (it is
	 * created again on next use), and so does its charge. */
	if (r == CUDA_SUCCESS && dv && dv->slot)
		sweep_device(dv->ordinal);
	return r;
}
