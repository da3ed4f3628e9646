/* ipc.c - HIP's memory shared between processes: the hooks of IPC
 * (hipIpcGetMemHandle, hipIpcOpenMemHandle, hipIpcCloseMemHandle) and of
 * VMM handles exported as POSIX file descriptors
 * (hipMemExportToShareableHandle, hipMemImportFromShareableHandle), over
 * the vendor-neutral record of intercept/share.c, as the CUDA front end's
 * intercept/ipc.c: the exporter pays, importers hold the memory for free,
 * and the memory stays charged while any of them keeps it alive; and the
 * HIP side that share.c calls.
 */
#include "hip.h"
#include "share.h"
#include "track.h"

#include <stdint.h>

/* ---- share.c's side ------------------------------------------------------- */

struct vgpu_slot *vgpu__share_slot(int dev)
{
	struct vgpu_hip_dev *dv = vgpu__hip_dev_peek(dev);

	return dv ? dv->slot : NULL;
}

int vgpu__share_charge(int dev, int kind, uint64_t bytes)
{
	struct vgpu_hip_dev *dv = vgpu__hip_dev_peek(dev);

	return dv ? (int)vgpu__hip_charge(dv, kind, bytes)
		  : (int)hipErrorInvalidDevice;
}

void vgpu__share_uncharge(int dev, int kind, uint64_t bytes)
{
	vgpu__hip_uncharge(vgpu__hip_dev_peek(dev), kind, bytes);
}

/* ---- IPC ------------------------------------------------------------------- */

/* The allocation that holds p: its base and size, false when the runtime
 * cannot say. */
static bool range_of(void *p, uint64_t *base, size_t *size)
{
	hipDeviceptr_t b = NULL;

	if (!vgpu__hip.hipMemGetAddressRange ||
	    vgpu__hip.hipMemGetAddressRange(&b, size, p) != hipSuccess)
		return false;
	*base = (uint64_t)(uintptr_t)b;
	return true;
}

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *p)
{
	struct vgpu_tracked t;
	uint64_t key = (uintptr_t)p;
	size_t size;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipIpcGetMemHandle)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipIpcGetMemHandle(h, p);
	if (r != hipSuccess || !h)
		return r;
	/* The handle is the whole allocation's, whatever pointer into it
	 * was given. */
	if (!range_of(p, &key, &size))
		key = (uintptr_t)p;
	if (!vgpu__track_remove(VGPU_TRACK_PTR, key, &t))
		return r;
	vgpu__share_ipc_exported(h->reserved, sizeof(h->reserved), &t);
	vgpu__track_keep(VGPU_TRACK_PTR, key, &t);
	return r;
}

hipError_t hipIpcOpenMemHandle(void **p, hipIpcMemHandle_t h,
			       unsigned int flags)
{
	struct vgpu_hip_dev *dv;
	uint64_t base;
	size_t size;
	hipError_t r;
	int c;

	vgpu__hip_start();
	if (!vgpu__hip.hipIpcOpenMemHandle)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipIpcOpenMemHandle(p, h, flags);
	if (r != hipSuccess || !p || !(dv = vgpu__hip_dev_current()) ||
	    !dv->slot || !range_of(*p, &base, &size))
		return r;
	c = vgpu__share_ipc_opened(dv->ordinal, (uintptr_t)*p, h.reserved,
				   sizeof(h.reserved), vgpu__alloc_size(size),
				   "hipIpcOpenMemHandle");
	if (c != hipSuccess) {
		if (vgpu__hip.hipIpcCloseMemHandle)
			vgpu__hip.hipIpcCloseMemHandle(*p);
		*p = NULL;
		return (hipError_t)c;
	}
	return r;
}

hipError_t hipIpcCloseMemHandle(void *p)
{
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipIpcCloseMemHandle)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipIpcCloseMemHandle(p);
	if (r == hipSuccess)
		vgpu__share_ipc_closed((uintptr_t)p);
	return r;
}

/* ---- VMM handles exported as file descriptors ------------------------------- */

hipError_t hipMemExportToShareableHandle(void *fd,
					 hipMemGenericAllocationHandle_t h,
					 hipMemAllocationHandleType type,
					 unsigned long long flags)
{
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemExportToShareableHandle)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipMemExportToShareableHandle(fd, h, type, flags);
	if (r == hipSuccess && fd &&
	    type == hipMemHandleTypePosixFileDescriptor)
		vgpu__share_vmm_exported((uintptr_t)h, *(int *)fd);
	return r;
}

hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *h,
					   void *os_handle,
					   hipMemAllocationHandleType type)
{
	hipMemAllocationProp prop = { 0 };
	struct vgpu_hip_dev *dv;
	hipError_t r;
	int c;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemImportFromShareableHandle)
		return hipErrorNotInitialized;
	r = vgpu__hip.hipMemImportFromShareableHandle(h, os_handle, type);
	if (r != hipSuccess || !h ||
	    type != hipMemHandleTypePosixFileDescriptor ||
	    !vgpu__hip.hipMemGetAllocationPropertiesFromHandle ||
	    vgpu__hip.hipMemGetAllocationPropertiesFromHandle(&prop, *h) !=
		    hipSuccess ||
	    prop.location.type != hipMemLocationTypeDevice)
		return r;	/* host memory: no device's */
	dv = vgpu__hip_dev_attach(prop.location.id);
	if (!dv || !dv->slot)
		return r;
	c = vgpu__share_vmm_imported(dv->ordinal, (uintptr_t)*h,
				     (int)(intptr_t)os_handle,
				     "hipMemImportFromShareableHandle");
	if (c != hipSuccess) {
		if (vgpu__hip.hipMemRelease)
			vgpu__hip.hipMemRelease(*h);
		*h = NULL;
		return (hipError_t)c;
	}
	return r;
}
