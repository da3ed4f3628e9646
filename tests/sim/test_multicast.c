/* test_multicast.c - multicast objects: the size reserved on every device
 * added, binds and unbinds of memory on team devices, mapping the object,
 * release with cuMemRelease, and the errors of each call.
 */
#include "simtest.h"

TestSuite(multicast, .init = simtest_clean_env, .fini = simtest_remove_state);

#define GRAN (2 * MIB)

/* Free memory of dev, through its primary context. */
static size_t free_on(int dev)
{
	size_t free_b = 0, total = 0;
	CUcontext ctx;

	CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_OK(cuCtxPushCurrent(ctx));
	CU_OK(cuMemGetInfo(&free_b, &total));
	CU_OK(cuCtxPopCurrent(NULL));
	CU_OK(cuDevicePrimaryCtxRelease(dev));
	return free_b;
}

static CUmemGenericAllocationHandle device_mem(int dev, size_t size)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};
	CUmemGenericAllocationHandle h;

	CU_OK(cuMemCreate(&h, size, &prop, 0));
	return h;
}

Test(multicast, granularity_and_attribute)
{
	CUmulticastObjectProp prop = { .numDevices = 1, .size = GRAN };
	size_t g = 0;
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	CU_OK(cuMulticastGetGranularity(&g, &prop, CU_MULTICAST_GRANULARITY_MINIMUM));
	cr_assert_eq(g, GRAN);
	CU_OK(cuMulticastGetGranularity(&g, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED));
	cr_assert_eq(g, GRAN);
	CU_ASSERT(cuMulticastGetGranularity(NULL, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastGetGranularity(&g, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastGetGranularity(&g, &prop, 7), CUDA_ERROR_INVALID_VALUE);
}

/* Each device added reserves the size there, until cuMemRelease. */
Test(multicast, devices_added_reserve_size)
{
	CUmulticastObjectProp prop = { .numDevices = 2, .size = 4 * GRAN };
	CUmemGenericAllocationHandle mc;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMulticastCreate(&mc, &prop));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
	CU_OK(cuMulticastAddDevice(mc, 1));
	cr_assert_eq(free_on(1), SIMTEST_MEMORY - 4 * GRAN);
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
	CU_ASSERT(cuMulticastAddDevice(mc, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastAddDevice(mc, 2), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuMulticastAddDevice(mc, 0));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY - 4 * GRAN);
	CU_OK(cuMemRelease(mc));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
	cr_assert_eq(free_on(1), SIMTEST_MEMORY);
	CU_ASSERT(cuMulticastAddDevice(mc, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(multicast, add_beyond_capacity)
{
	CUmulticastObjectProp prop = { .numDevices = 1, .size = SIMTEST_MEMORY };
	CUmemGenericAllocationHandle mc, h;

	simtest_init();
	h = device_mem(0, GRAN);
	CU_OK(cuMulticastCreate(&mc, &prop));
	CU_ASSERT(cuMulticastAddDevice(mc, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemRelease(h));
	CU_OK(cuMulticastAddDevice(mc, 0));
	cr_assert_eq(free_on(0), 0);
	CU_OK(cuMemRelease(mc));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
}

Test(multicast, create_errors)
{
	CUmulticastObjectProp prop = { .numDevices = 1, .size = GRAN };
	CUmemGenericAllocationHandle mc;

	simtest_init();
	CU_ASSERT(cuMulticastCreate(NULL, &prop), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastCreate(&mc, NULL), CUDA_ERROR_INVALID_VALUE);
	prop.numDevices = 0;
	CU_ASSERT(cuMulticastCreate(&mc, &prop), CUDA_ERROR_INVALID_VALUE);
	prop.numDevices = 1;
	prop.size = GRAN + 4096;
	CU_ASSERT(cuMulticastCreate(&mc, &prop), CUDA_ERROR_INVALID_VALUE);
	prop.size = GRAN;
	prop.flags = 1;
	CU_ASSERT(cuMulticastCreate(&mc, &prop), CUDA_ERROR_INVALID_VALUE);
	prop.flags = 0;
	prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CU_ASSERT(cuMulticastCreate(&mc, &prop), CUDA_ERROR_NOT_SUPPORTED);
}

/* A binding holds its memory: released, it stays until unbound. */
Test(multicast, bind_and_unbind)
{
	CUmulticastObjectProp prop = { .numDevices = 2, .size = 4 * GRAN };
	CUmemGenericAllocationHandle mc, m0, m1;
	CUmemAccessDesc d = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUdeviceptr va;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMulticastCreate(&mc, &prop));
	m0 = device_mem(0, 2 * GRAN);
	m1 = device_mem(1, 2 * GRAN);
	CU_OK(cuMulticastAddDevice(mc, 0));
	CU_ASSERT(cuMulticastBindMem(mc, 0, m0, 0, 2 * GRAN, 0),
		  CUDA_ERROR_NOT_PERMITTED);
	CU_OK(cuMulticastAddDevice(mc, 1));
	CU_OK(cuMulticastBindMem(mc, 0, m0, 0, 2 * GRAN, 0));
	CU_ASSERT(cuMulticastBindMem(mc, GRAN, m0, 0, GRAN, 0),
		  CUDA_ERROR_INVALID_VALUE);
	/* Through a mapped address. */
	CU_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, m1, 0));
	CU_OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
	CU_OK(cuMulticastBindAddr(mc, 2 * GRAN, va, 2 * GRAN, 0));
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
	CU_OK(cuMemRelease(m0));
	CU_OK(cuMemRelease(m1));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY - 4 * GRAN - 2 * GRAN);
	CU_ASSERT(cuMulticastUnbind(mc, 0, GRAN, GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastUnbind(mc, 5, 0, 2 * GRAN), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuMulticastUnbind(mc, 0, 0, 2 * GRAN));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY - 4 * GRAN, "m0 is gone");
	CU_ASSERT(cuMulticastUnbind(mc, 0, 0, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
	/* Releasing the object drops the remaining binding, then m1. */
	CU_OK(cuMemRelease(mc));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
	cr_assert_eq(free_on(1), SIMTEST_MEMORY);
}

Test(multicast, bind_errors)
{
	CUmulticastObjectProp prop = { .numDevices = 1, .size = 2 * GRAN };
	CUmemGenericAllocationHandle mc, m0, m1, host;
	CUmemAllocationProp hp = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_HOST },
	};
	CUdeviceptr plain;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMulticastCreate(&mc, &prop));
	CU_OK(cuMulticastAddDevice(mc, 0));
	m0 = device_mem(0, 2 * GRAN);
	m1 = device_mem(1, 2 * GRAN);
	CU_OK(cuMemCreate(&host, GRAN, &hp, 0));
	CU_ASSERT(cuMulticastBindMem(mc, 0, m1, 0, GRAN, 0), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuMulticastBindMem(mc, 0, host, 0, GRAN, 0), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuMulticastBindMem(mc, 0, m0, 0, GRAN, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastBindMem(mc, 0, m0, 0, 4096, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastBindMem(mc, GRAN, m0, 0, 2 * GRAN, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastBindMem(mc, 0, m0, GRAN, 2 * GRAN, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastBindMem(m0, 0, m0, 0, GRAN, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMulticastBindMem(mc, 0, mc, 0, GRAN, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAlloc(&plain, GRAN));
	CU_ASSERT(cuMulticastBindAddr(mc, 0, plain, GRAN, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(plain));
	CU_OK(cuMemRelease(m0));
	CU_OK(cuMemRelease(m1));
	CU_OK(cuMemRelease(host));
	CU_OK(cuMemRelease(mc));
}

/* Mapped, the object is memory of its own at a usable address. */
Test(multicast, map_the_object)
{
	CUmulticastObjectProp prop = { .numDevices = 1, .size = 2 * GRAN };
	CUmemAccessDesc d = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUmemGenericAllocationHandle mc;
	uint32_t v = 0;
	CUdeviceptr va;

	simtest_init();
	CU_OK(cuMulticastCreate(&mc, &prop));
	CU_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
	CU_ASSERT(cuMemMap(va, 2 * GRAN, 0, mc, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMulticastAddDevice(mc, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, mc, 0));
	CU_OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
	CU_OK(cuMemsetD32(va, 42, 16));
	CU_OK(cuMemcpyDtoH(&v, va + 60, 4));
	cr_assert_eq(v, 42);
	CU_OK(cuMemRelease(mc));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY - 2 * GRAN, "mapped: still there");
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	cr_assert_eq(free_on(0), SIMTEST_MEMORY);
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
}
