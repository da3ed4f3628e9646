/* ipc.c - the simulated HIP runtime's interprocess memory:
 * hipIpcGetMemHandle, hipIpcOpenMemHandle, hipIpcCloseMemHandle.
 *
 * The simulated driver's cuIpc* calls: a hipIpcMemHandle_t is a
 * CUipcMemHandle's 64 bytes, copied as they are. The memory stays, counted
 * once on the device, while the exporter's allocation or any process's
 * open handle refers to it. Event handles are not simulated.
 */
#include "hip_sim.h"

#include <stdint.h>
#include <string.h>

_Static_assert(sizeof(hipIpcMemHandle_t) == sizeof(CUipcMemHandle),
	       "HIP's and the driver's IPC handles are both 64 bytes");

VHIP_EXPORT hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle,
					  void *devPtr)
{
	CUipcMemHandle ch;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!handle || !devPtr)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuIpcGetMemHandle(&ch, (CUdeviceptr)(uintptr_t)devPtr));
	if (e == hipSuccess)
		memcpy(handle, &ch, sizeof(*handle));
	return e;
}

/* HIP's only flag is lazy peer access, 0 in the 5.2 headers and 1 in
 * later ones: both are taken (the simulator has no peers). */
VHIP_EXPORT hipError_t hipIpcOpenMemHandle(void **devPtr,
					   hipIpcMemHandle_t handle,
					   unsigned int flags)
{
	CUipcMemHandle ch;
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!devPtr || flags > 1)
		return vhip_error(hipErrorInvalidValue);
	memcpy(&ch, &handle, sizeof(ch));
	e = vhip_result(cuIpcOpenMemHandle(&d, ch,
					   CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	if (e == hipSuccess)
		*devPtr = (void *)(uintptr_t)d;
	return e;
}

VHIP_EXPORT hipError_t hipIpcCloseMemHandle(void *devPtr)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!devPtr)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)devPtr));
}
