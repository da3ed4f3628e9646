/* ipc.c - legacy interprocess memory: cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle. Event handles are not simulated.
 *
 * A CUipcMemHandle names a shared object of a device's state file (state.c):
 * the physical device and the object's id, in 64 bytes of which the rest are
 * zero. The bytes are the memory's identity: one allocation always gives the
 * same bytes, and a later allocation, even at the same address, new ones
 * (ids are never reused). The 64 bytes come from the user, so they are
 * checked (a magic, the version, zero padding) and then only looked up.
 *
 * The memory itself (memory.c) is a memfd that the importer reopens through
 * /proc/<exporter pid>/fd/<n>: the exporter must be alive and still hold
 * its allocation when a handle is opened, in the same pid namespace. Once
 * open, the memory is the importer's as much as the exporter's: it stays,
 * and stays counted on the device, until both have let go.
 */
#include "sim.h"

#include <string.h>

#define IPC_MAGIC 0x50495356u        /* "VSIP" */
#define IPC_VERSION 1u

struct ipc_bytes {
	uint32_t magic;
	uint16_t version;
	uint16_t physical;           /* the device: its file dev<N>.state */
	uint64_t id;                 /* the shared object in that file */
	unsigned char zero[CU_IPC_HANDLE_SIZE - 16];
};

_Static_assert(sizeof(struct ipc_bytes) == CU_IPC_HANDLE_SIZE,
	       "a CUipcMemHandle is 64 bytes");

static void encode(CUipcMemHandle *out, int device, uint64_t id)
{
	struct ipc_bytes b = {
		.magic = IPC_MAGIC, .version = IPC_VERSION,
		.physical = (uint16_t)vsim_g.dev[device].physical, .id = id,
	};

	memcpy(out->reserved, &b, sizeof(b));
}

/* The ordinal in this process of the device the handle names, and the
 * object's id; false for bytes no simulator made, or a device not visible
 * here. */
static bool decode(const CUipcMemHandle *h, int *device, uint64_t *id)
{
	struct ipc_bytes b;

	memcpy(&b, h->reserved, sizeof(b));
	if (b.magic != IPC_MAGIC || b.version != IPC_VERSION || b.id == 0)
		return false;
	for (size_t i = 0; i < sizeof(b.zero); i++)
		if (b.zero[i])
			return false;
	for (int d = 0; d < vsim_g.cfg.devices; d++) {
		if (vsim_g.dev[d].physical == b.physical) {
			*device = d;
			*id = b.id;
			return true;
		}
	}
	return false;
}

/* Any pointer into a cuMemAlloc allocation names the whole of it, as with
 * the driver (opening gives the allocation's base). The first export makes
 * the memory shareable; later ones give the same bytes. */
VSIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle,
				       CUdeviceptr dptr)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_mem_export((uintptr_t)dptr, &a);
	if (rc == CUDA_SUCCESS)
		encode(pHandle, a.device, a.share_id);
	return rc;
}

/* Needs the handle's device to be the current context's (the simulator has
 * no peer access). Opening twice in one context gives the same pointer and
 * needs two closes; opening in the exporting process is
 * CUDA_ERROR_INVALID_CONTEXT. */
VSIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr,
					   CUipcMemHandle handle,
					   unsigned int Flags)
{
	struct CUctx_st *ctx;
	uintptr_t p;
	uint64_t id;
	int dev;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	if (!decode(&handle, &dev, &id))
		return CUDA_ERROR_INVALID_HANDLE;
	if (dev != ctx->device)
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	rc = vsim_mem_ipc_open(ctx, dev, id, &p);
	if (rc == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)p;
	return rc;
}

/* The CUDA 4.1 ABI: the same call. */
#undef cuIpcOpenMemHandle
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
				    unsigned int Flags);
VSIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr,
					CUipcMemHandle handle,
					unsigned int Flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

VSIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	return vsim_mem_ipc_close((uintptr_t)dptr);
}

/* Events are not shared between processes:
 * CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED reads 0. */
VSIM_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle,
					 CUevent event)
{
	CUresult rc = vsim_check_init();

	(void)pHandle;
	(void)event;
	return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}

VSIM_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent,
					  CUipcEventHandle handle)
{
	CUresult rc = vsim_check_init();

	(void)phEvent;
	(void)handle;
	return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
}
