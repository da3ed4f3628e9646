/* ipc.c - CUDA's memory shared between processes: the hooks of IPC
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle) and of VMM
 * handles exported as POSIX file descriptors
 * (cuMemExportToShareableHandle, cuMemImportFromShareableHandle), over
 * the vendor-neutral record of share.c, and the CUDA side share.c calls.
 */
#include "devices.h"
#include "overcommit.h"
#include "share.h"
#include "track.h"

#include <string.h>

/* ---- share.c's side ------------------------------------------------------- */

struct vgpu_slot *vgpu__share_slot(int dev)
{
	struct vgpu_dev *dv = vgpu__dev_peek(dev);

	return dv ? dv->slot : NULL;
}

int vgpu__share_charge(int dev, int kind, uint64_t bytes)
{
	struct vgpu_dev *dv = vgpu__dev_peek(dev);

	return dv ? (int)vgpu__charge(dv, kind, bytes)
		  : (int)CUDA_ERROR_INVALID_DEVICE;
}

void vgpu__share_uncharge(int dev, int kind, uint64_t bytes)
{
	vgpu__uncharge(vgpu__dev_peek(dev), kind, bytes);
}

/* ---- legacy IPC ---------------------------------------------------------------- */

/* Legacy IPC handles do not work on VMM memory (the driver's rule): a
 * movable allocation (overcommit to the host, VGPU_CONTROL), on the
 * device or on the host, is refused with a message naming why. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct vgpu_tracked t;
	CUresult r;

	if (vgpu__movable_overlaps(dptr, 1, true)) {
		struct vgpu_dev *dv = vgpu__dev_current();
		bool host = dv && dv->overcommit == VGPU_OVERCOMMIT_HOST;

		vgpu_log(VGPU_LOG_ERROR, "cuIpcGetMemHandle(0x%llx): "
			 "CUDA_ERROR_NOT_SUPPORTED: the allocation is movable "
			 "(%s) and lives in a virtual-memory range, which "
			 "legacy IPC handles cannot share; share it with "
			 "cuMemExportToShareableHandle, or run the job without "
			 "%s", (unsigned long long)dptr,
			 host ? "VGPU_OVERCOMMIT=host" : "VGPU_CONTROL",
			 host ? "host overcommit (VGPU_OVERCOMMIT=managed "
				"keeps IPC)" : "VGPU_CONTROL (it cannot then "
				"be suspended)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!vgpu__real.cuIpcGetMemHandle)
		return CUDA_ERROR_NOT_FOUND;
	r = vgpu__real.cuIpcGetMemHandle(pHandle, dptr);
	if (r != CUDA_SUCCESS || !pHandle)
		return r;
	/* The handle is the whole allocation's, whatever pointer into it
	 * was given. */
	if (vgpu__real.cuMemGetAddressRange_v2) {
		CUdeviceptr base;
		size_t size;

		if (vgpu__real.cuMemGetAddressRange_v2(&base, &size, dptr) ==
		    CUDA_SUCCESS)
			dptr = base;
	}
	if (!vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t))
		return r;
	vgpu__share_ipc_exported(pHandle->reserved, sizeof(pHandle->reserved),
				 &t);
	vgpu__track_keep(VGPU_TRACK_PTR, dptr, &t);
	return r;
}

static CUresult ipc_open(CUresult (*real)(CUdeviceptr *, CUipcMemHandle,
					  unsigned int),
			 CUdeviceptr *pdptr, CUipcMemHandle handle,
			 unsigned int flags)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	CUdeviceptr base;
	size_t size;
	CUresult r, c;

	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	r = real(pdptr, handle, flags);
	if (r != CUDA_SUCCESS || !pdptr || !dv || !dv->slot)
		return r;
	if (!vgpu__real.cuMemGetAddressRange_v2 ||
	    vgpu__real.cuMemGetAddressRange_v2(&base, &size, *pdptr) !=
		    CUDA_SUCCESS)
		return r;
	c = (CUresult)vgpu__share_ipc_opened(dv->ordinal, *pdptr,
					     handle.reserved,
					     sizeof(handle.reserved),
					     vgpu__alloc_size(size),
					     "cuIpcOpenMemHandle");
	if (c != CUDA_SUCCESS) {
		if (vgpu__real.cuIpcCloseMemHandle)
			vgpu__real.cuIpcCloseMemHandle(*pdptr);
		return c;
	}
	return r;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
			    unsigned int Flags)
{
	return ipc_open(vgpu__real.cuIpcOpenMemHandle, pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
			       unsigned int Flags)
{
	return ipc_open(vgpu__real.cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult r;

	if (!vgpu__real.cuIpcCloseMemHandle)
		return CUDA_ERROR_NOT_FOUND;
	r = vgpu__real.cuIpcCloseMemHandle(dptr);
	if (r == CUDA_SUCCESS)
		vgpu__share_ipc_closed(dptr);
	return r;
}

/* ---- VMM handles exported as file descriptors ---------------------------------- */

CUresult cuMemExportToShareableHandle(void *shareableHandle,
				      CUmemGenericAllocationHandle handle,
				      CUmemAllocationHandleType handleType,
				      unsigned long long flags)
{
	CUresult r;

	if (!vgpu__real.cuMemExportToShareableHandle)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemExportToShareableHandle(shareableHandle, handle,
						    handleType, flags);
	if (r == CUDA_SUCCESS && shareableHandle &&
	    handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		vgpu__share_vmm_exported(handle, *(int *)shareableHandle);
	return r;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
					void *osHandle,
					CUmemAllocationHandleType shHandleType)
{
	CUmemAllocationProp prop;
	struct vgpu_dev *dv;
	CUresult r, c;

	if (!vgpu__real.cuMemImportFromShareableHandle)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemImportFromShareableHandle(handle, osHandle,
						      shHandleType);
	if (r != CUDA_SUCCESS || !handle ||
	    shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return r;
	memset(&prop, 0, sizeof(prop));
	if (!vgpu__real.cuMemGetAllocationPropertiesFromHandle ||
	    vgpu__real.cuMemGetAllocationPropertiesFromHandle(&prop, *handle)
		    != CUDA_SUCCESS ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return r;	/* host memory: no device's */
	dv = vgpu__dev_attach(prop.location.id);
	if (!dv || !dv->slot)
		return r;
	c = (CUresult)vgpu__share_vmm_imported(dv->ordinal, *handle,
					       (int)(intptr_t)osHandle,
					       "cuMemImportFromShareableHandle");
	if (c != CUDA_SUCCESS) {
		if (vgpu__real.cuMemRelease)
			vgpu__real.cuMemRelease(*handle);
		return c;
	}
	return r;
}
