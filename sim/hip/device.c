/* device.c - the simulated HIP device's properties and memory totals.
 *
 * Read from the simulated driver's device (its memory, SM count, limits),
 * presented as an AMD gfx90a: wavefronts of 64, the arch name, a 100 MHz
 * wall clock. An attribute with no driver counterpart and no fixed answer
 * here is hipErrorInvalidValue, not a guess.
 */
#include "hip_sim.h"

#include <string.h>

#define VHIP_WARP 64
#define VHIP_WALL_CLOCK_KHZ 100000

const char vhip_arch[] = "gfx90a";

/* HIP's attribute and the driver's that answers it. */
static const struct {
	hipDeviceAttribute_t hip;
	CUdevice_attribute cu;
} attr_map[] = {
	{ hipDeviceAttributeEccEnabled, CU_DEVICE_ATTRIBUTE_ECC_ENABLED },
	{ hipDeviceAttributeAsyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT },
	{ hipDeviceAttributeCanMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY },
	{ hipDeviceAttributeClockRate, CU_DEVICE_ATTRIBUTE_CLOCK_RATE },
	{ hipDeviceAttributeComputeMode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE },
	{ hipDeviceAttributeConcurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS },
	{ hipDeviceAttributeConcurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS },
	{ hipDeviceAttributeCooperativeLaunch, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH },
	{ hipDeviceAttributeIntegrated, CU_DEVICE_ATTRIBUTE_INTEGRATED },
	{ hipDeviceAttributeL2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE },
	{ hipDeviceAttributeManagedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY },
	{ hipDeviceAttributeMaxBlockDimX, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X },
	{ hipDeviceAttributeMaxBlockDimY, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y },
	{ hipDeviceAttributeMaxBlockDimZ, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z },
	{ hipDeviceAttributeMaxGridDimX, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X },
	{ hipDeviceAttributeMaxGridDimY, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y },
	{ hipDeviceAttributeMaxGridDimZ, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z },
	{ hipDeviceAttributeMaxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK },
	{ hipDeviceAttributeMaxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR },
	{ hipDeviceAttributeMaxPitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH },
	{ hipDeviceAttributeMemoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH },
	{ hipDeviceAttributeMemoryClockRate, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE },
	{ hipDeviceAttributeMultiprocessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT },
	{ hipDeviceAttributePciBusId, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID },
	{ hipDeviceAttributePciDeviceId, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID },
	{ hipDeviceAttributePciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID },
	{ hipDeviceAttributeMaxRegistersPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK },
	{ hipDeviceAttributeMaxSharedMemoryPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK },
	{ hipDeviceAttributeSharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR },
	{ hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR },
	{ hipDeviceAttributeTotalConstantMemory, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY },
	{ hipDeviceAttributeUnifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING },
	{ hipDeviceAttributeMemoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED },
	{ hipDeviceAttributeTextureAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT },
	{ hipDeviceAttributeKernelExecTimeout, CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT },
	{ hipDeviceAttributeIsMultiGpuBoard, CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD },
};

static hipError_t valid_device(int dev)
{
	int n = 0;
	hipError_t e = hipGetDeviceCount(&n);

	if (e != hipSuccess)
		return e;
	return dev >= 0 && dev < n ? hipSuccess :
	       vhip_error(hipErrorInvalidDevice);
}

/* Answers fixed here: what makes the device an AMD gfx90a. */
static bool fixed_attribute(hipDeviceAttribute_t a, int *v)
{
	switch (a) {
	case hipDeviceAttributeWarpSize: *v = VHIP_WARP; return true;
	case hipDeviceAttributeComputeCapabilityMajor: *v = 9; return true;
	case hipDeviceAttributeComputeCapabilityMinor: *v = 0; return true;
	case hipDeviceAttributeGcnArch: *v = 910; return true;
	case hipDeviceAttributeClockInstructionRate: *v = VHIP_WALL_CLOCK_KHZ; return true;
	case hipDeviceAttributeCooperativeMultiDeviceLaunch: *v = 0; return true;
	case hipDeviceAttributeIsLargeBar: *v = 1; return true;
	case hipDeviceAttributeFineGrainSupport: *v = 1; return true;
	default: return false;
	}
}

VHIP_EXPORT hipError_t hipDeviceGetAttribute(int *v, hipDeviceAttribute_t a,
					     int dev)
{
	hipError_t e = valid_device(dev);

	if (e != hipSuccess)
		return e;
	if (!v)
		return vhip_error(hipErrorInvalidValue);
	if (fixed_attribute(a, v))
		return hipSuccess;
	for (size_t i = 0; i < sizeof(attr_map) / sizeof(*attr_map); i++)
		if (attr_map[i].hip == a)
			return vhip_result(cuDeviceGetAttribute(
				v, attr_map[i].cu, (CUdevice)dev));
	return vhip_error(hipErrorInvalidValue);
}

static int attr(hipDeviceAttribute_t a, int dev)
{
	int v = 0;

	(void)hipDeviceGetAttribute(&v, a, dev);
	return v;
}

static void fill_limits(hipDeviceProp_t *p, int dev)
{
	p->sharedMemPerBlock = (size_t)attr(hipDeviceAttributeMaxSharedMemoryPerBlock, dev);
	p->regsPerBlock = attr(hipDeviceAttributeMaxRegistersPerBlock, dev);
	p->warpSize = VHIP_WARP;
	p->maxThreadsPerBlock = attr(hipDeviceAttributeMaxThreadsPerBlock, dev);
	p->maxThreadsDim[0] = attr(hipDeviceAttributeMaxBlockDimX, dev);
	p->maxThreadsDim[1] = attr(hipDeviceAttributeMaxBlockDimY, dev);
	p->maxThreadsDim[2] = attr(hipDeviceAttributeMaxBlockDimZ, dev);
	p->maxGridSize[0] = attr(hipDeviceAttributeMaxGridDimX, dev);
	p->maxGridSize[1] = attr(hipDeviceAttributeMaxGridDimY, dev);
	p->maxGridSize[2] = attr(hipDeviceAttributeMaxGridDimZ, dev);
	p->clockRate = attr(hipDeviceAttributeClockRate, dev);
	p->memoryClockRate = attr(hipDeviceAttributeMemoryClockRate, dev);
	p->memoryBusWidth = attr(hipDeviceAttributeMemoryBusWidth, dev);
	p->totalConstMem = (size_t)attr(hipDeviceAttributeTotalConstantMemory, dev);
	p->multiProcessorCount = attr(hipDeviceAttributeMultiprocessorCount, dev);
	p->l2CacheSize = attr(hipDeviceAttributeL2CacheSize, dev);
	p->maxThreadsPerMultiProcessor =
		attr(hipDeviceAttributeMaxThreadsPerMultiProcessor, dev);
	p->maxSharedMemoryPerMultiProcessor =
		(size_t)attr(hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, dev);
	p->memPitch = (size_t)attr(hipDeviceAttributeMaxPitch, dev);
	p->textureAlignment = (size_t)attr(hipDeviceAttributeTextureAlignment, dev);
}

VHIP_EXPORT hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int dev)
{
	hipError_t e = valid_device(dev);
	size_t total = 0;

	if (e != hipSuccess)
		return e;
	if (!p)
		return vhip_error(hipErrorInvalidValue);
	memset(p, 0, sizeof(*p));
	e = vhip_result(cuDeviceGetName(p->name, sizeof(p->name), dev));
	if (e == hipSuccess)
		e = vhip_result(cuDeviceTotalMem(&total, dev));
	if (e != hipSuccess)
		return e;
	p->totalGlobalMem = total;
	fill_limits(p, dev);
	p->major = 9;
	p->minor = 0;
	p->clockInstructionRate = VHIP_WALL_CLOCK_KHZ;
	p->concurrentKernels = 1;
	p->pciDomainID = attr(hipDeviceAttributePciDomainID, dev);
	p->pciBusID = attr(hipDeviceAttributePciBusId, dev);
	p->pciDeviceID = attr(hipDeviceAttributePciDeviceId, dev);
	p->canMapHostMemory = 1;
	p->gcnArch = 910;
	strcpy(p->gcnArchName, "gfx90a:sramecc+:xnack-");
	p->cooperativeLaunch = 1;
	p->managedMemory = attr(hipDeviceAttributeManagedMemory, dev);
	p->concurrentManagedAccess =
		attr(hipDeviceAttributeConcurrentManagedAccess, dev);
	p->isLargeBar = 1;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev)
{
	hipError_t e = valid_device(dev);

	if (e != hipSuccess)
		return e;
	if (!bytes)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuDeviceTotalMem(bytes, dev));
}

VHIP_EXPORT hipError_t hipDeviceGetName(char *name, int len, hipDevice_t dev)
{
	hipError_t e = valid_device(dev);

	if (e != hipSuccess)
		return e;
	return vhip_result(cuDeviceGetName(name, len, dev));
}

VHIP_EXPORT hipError_t hipDeviceGetUuid(hipUUID *uuid, hipDevice_t dev)
{
	hipError_t e = valid_device(dev);
	CUuuid u;

	if (e != hipSuccess)
		return e;
	if (!uuid)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuDeviceGetUuid(&u, dev));
	if (e == hipSuccess)
		memcpy(uuid->bytes, u.bytes, sizeof(uuid->bytes));
	return e;
}

VHIP_EXPORT hipError_t hipDeviceGetPCIBusId(char *id, int len, int dev)
{
	hipError_t e = valid_device(dev);

	if (e != hipSuccess)
		return e;
	return vhip_result(cuDeviceGetPCIBusId(id, len, dev));
}

VHIP_EXPORT hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!free_bytes || !total)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemGetInfo(free_bytes, total));
}
