/* device.c - device queries: count, name, UUID, memory, attributes.
 *
 * The simulated device presents itself as a compute capability 9.0 part with
 * VGPU_SIM_SM_COUNT multiprocessors and VGPU_SIM_MEMORY bytes. Features the
 * simulator does not implement read as 0. Under CUDA_VISIBLE_DEVICES an
 * ordinal's UUID and PCI bus id are those of its physical device.
 */
#include "sim.h"

#include <stdio.h>
#include <string.h>

static const int attr_values[CU_DEVICE_ATTRIBUTE_MAX] = {
	[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024,
	[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024,
	[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024,
	[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64,
	[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647,
	[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535,
	[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535,
	[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = 49152,
	[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = 65536,
	[CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32,
	[CU_DEVICE_ATTRIBUTE_MAX_PITCH] = 2147483647,
	[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = 65536,
	[CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = 1980000,
	[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = 512,
	/* Arrays (array.c) are checked against the texture limits. */
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH] = 131072,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH] = 131072,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT] = 65536,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH] = 16384,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT] = 16384,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH] = 16384,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS] = 2048,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS] = 2048,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS] = 2046,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH] = 32768,
	[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT] = 32768,
	[CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT] = 512,
	[CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = 32,
	[CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = 1,
	[CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 1,
	[CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = 1,
	[CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = 2619000,
	[CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = 5120,
	[CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 50331648,
	[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048,
	[CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = 2,
	[CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1,
	[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9,
	/* An H100/H200-class device runs FP32 at twice its FP64 rate (its
	 * data sheet: 67 against 34 TFLOPS). */
	[CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = 2,
	[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0,
	[CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = 233472,
	[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = 65536,
	[CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = 1,
	[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = 232448,
	[CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = 32,
	[CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID] = -1,
	/* pool.c, vmm.c, managed.c, multicast.c */
	[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1,
	[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 1,
	[CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED] = 1,
	[CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED] = 1,
	/* vmm.c's shareable handles; ipc.c shares memory, not events. */
	[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 1,
};

static const char *uuid_hex(const CUuuid *u, char *buf)
{
	for (int i = 0; i < 16; i++)
		sprintf(buf + 2 * i, "%02x", (unsigned char)u->bytes[i]);
	return buf;
}

VSIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = vsim_g.cfg.devices;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= vsim_g.cfg.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", vsim_g.cfg.name);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	*uuid = vsim_g.dev[dev].uuid;
	return CUDA_SUCCESS;
}

#undef cuDeviceGetUuid
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
VSIM_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

VSIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = vsim_state_capacity(dev);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
					  CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*pi = vsim_g.cfg.sm_count;
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		*pi = 0x10 + vsim_g.dev[dev].physical;
		break;
	default:
		*pi = attr_values[attrib];
	}
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor,
					       CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	*major = attr_values[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
	*minor = attr_values[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(pciBusId, (size_t)len, "%s", vsim_g.dev[dev].pci_bus_id);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < vsim_g.cfg.devices; i++) {
		/* Accept the short form "BB:DD.F" as well as the full one. */
		const char *full = vsim_g.dev[i].pci_bus_id;
		if (strcasecmp(pciBusId, full) == 0 ||
		    strcasecmp(pciBusId, full + 9) == 0) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

VSIM_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	CUresult rc = vsim_check_device(dev);

	if (rc == CUDA_SUCCESS)
		rc = vsim_check_device(peer);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	*can = 0;
	return CUDA_SUCCESS;
}

/* For logs and tools: the device's UUID as "GPU-xxxxxxxx-...". */
void vsim_device_uuid_string(int dev, char *out, size_t len)
{
	char hex[33];

	uuid_hex(&vsim_g.dev[dev].uuid, hex);
	snprintf(out, len, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8,
		 hex + 12, hex + 16, hex + 20);
}
