/* test_vmm.c - the virtual memory management API: granularity, handles
 * counted against the device (host ones not), reservations, mappings that
 * copies, memsets and kernels use like cuMemAlloc memory, access flags,
 * handles kept alive by their mappings, and the errors of each call.
 */
#include "simtest.h"

#include <string.h>

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"
#endif

TestSuite(vmm, .init = simtest_clean_env, .fini = simtest_remove_state);

#define GRAN (2 * MIB)

static size_t free_now(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	return free_b;
}

static CUmemAllocationProp dev_prop(int dev)
{
	return (CUmemAllocationProp){
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};
}

static CUmemAccessDesc rw_on(int dev)
{
	return (CUmemAccessDesc){
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
}

/* Reserves size bytes, maps h over them and makes them read-write. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size)
{
	CUmemAccessDesc d = rw_on(0);
	CUdeviceptr va;

	CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CU_OK(cuMemMap(va, size, 0, h, 0));
	CU_OK(cuMemSetAccess(va, size, &d, 1));
	return va;
}

Test(vmm, attributes_and_granularity)
{
	CUmemAllocationProp prop = dev_prop(0);
	size_t g = 0;
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
	cr_assert_eq(v, 1, "test_vmm_share.c");
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0));
	cr_assert_eq(v, 0);
	CU_OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	cr_assert_eq(g, GRAN);
	CU_OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	cr_assert_eq(g, GRAN);
	CU_ASSERT(cuMemGetAllocationGranularity(NULL, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemGetAllocationGranularity(&g, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemGetAllocationGranularity(&g, &prop, 2), CUDA_ERROR_INVALID_VALUE);
	prop.location.id = 1;
	CU_ASSERT(cuMemGetAllocationGranularity(&g, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
}

/* A device handle takes its size from the device until the last of
 * cuMemRelease and the unmaps. */
Test(vmm, create_counts_until_released_and_unmapped)
{
	CUmemAllocationProp prop = dev_prop(0), got;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;

	simtest_init();
	CU_OK(cuMemCreate(&h, 4 * GRAN, &prop, 0));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * GRAN);
	CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
	cr_assert_eq(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
	cr_assert_eq(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
	cr_assert_eq(got.location.id, 0);
	va = map_rw(h, 4 * GRAN);
	CU_OK(cuMemRelease(h));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * GRAN, "still mapped");
	CU_OK(cuMemsetD32(va, 0x01020304, GRAN));
	CU_ASSERT(cuMemGetAllocationPropertiesFromHandle(&got, h),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemUnmap(va, 4 * GRAN));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_OK(cuMemAddressFree(va, 4 * GRAN));
	CU_ASSERT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, create_beyond_capacity)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h, h2;

	simtest_init();
	CU_ASSERT(cuMemCreate(&h, SIMTEST_MEMORY + GRAN, &prop, 0),
		  CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemCreate(&h, SIMTEST_MEMORY, &prop, 0));
	CU_ASSERT(cuMemCreate(&h2, GRAN, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemRelease(h));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(vmm, create_errors)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;

	simtest_init();
	CU_ASSERT(cuMemCreate(NULL, GRAN, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemCreate(&h, GRAN, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemCreate(&h, GRAN + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 1), CUDA_ERROR_INVALID_VALUE);
	prop.location.id = 2;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
	prop = dev_prop(0);
	prop.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	prop = dev_prop(0);
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	/* File descriptors are simulated (test_vmm_share.c), the rest not. */
	prop = dev_prop(0);
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_ASSERT(cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
}

/* Host-located handles are host memory: no device capacity. */
Test(vmm, host_locations_not_device_memory)
{
	CUmemAllocationProp host = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_HOST },
	};
	CUmemAllocationProp numa = host;
	CUmemAccessDesc d[2] = {
		rw_on(0),
		{ .location = { .type = CU_MEM_LOCATION_TYPE_HOST },
		  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE },
	};
	CUmemGenericAllocationHandle h, hn;
	unsigned long long flags = 0;
	uint32_t out[4];
	CUdeviceptr va;

	simtest_init();
	numa.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	numa.location.id = 0;
	CU_OK(cuMemCreate(&h, 8 * GRAN, &host, 0));
	CU_OK(cuMemCreate(&hn, 2 * GRAN, &numa, 0));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	numa.location.id = 5;
	CU_ASSERT(cuMemCreate(&hn, GRAN, &numa, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAddressReserve(&va, 8 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va, 8 * GRAN, 0, h, 0));
	CU_OK(cuMemSetAccess(va, 8 * GRAN, d, 2));
	CU_OK(cuMemGetAccess(&flags, &d[1].location, va));
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU_OK(cuMemsetD32(va + GRAN, 0xcafe, 4));
	memcpy(out, (void *)(uintptr_t)(va + GRAN), sizeof(out));
	for (int i = 0; i < 4; i++)
		cr_assert_eq(out[i], 0xcafe);
	CU_OK(cuMemUnmap(va, 8 * GRAN));
	CU_OK(cuMemAddressFree(va, 8 * GRAN));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemRelease(hn));
}

Test(vmm, reserve_and_free)
{
	CUdeviceptr va, va2, hint;

	simtest_init();
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	cr_assert_eq(va % GRAN, 0);
	CU_OK(cuMemAddressReserve(&va2, GRAN, 16 * GRAN, 0, 0));
	cr_assert_eq(va2 % (16 * GRAN), 0);
	CU_ASSERT(cuMemAddressFree(va, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressFree(va + GRAN, 3 * GRAN), CUDA_ERROR_INVALID_VALUE);
	hint = va;
	CU_OK(cuMemAddressFree(va, 4 * GRAN));
	CU_ASSERT(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);
	/* The hint is taken when the range is free. */
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, hint, 0));
	cr_assert_eq(va, hint);
	CU_OK(cuMemAddressFree(va, 4 * GRAN));
	CU_OK(cuMemAddressFree(va2, GRAN));
	CU_ASSERT(cuMemAddressReserve(NULL, GRAN, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressReserve(&va, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressReserve(&va, 100, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressReserve(&va, GRAN, 3 * GRAN, 0, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressReserve(&va, GRAN, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

/* Two handles mapped side by side are one range for copies and memsets. */
Test(vmm, mapped_range_used_like_device_memory)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h1, h2;
	CUmemAccessDesc d = rw_on(0);
	static unsigned char in[2 * GRAN], out[2 * GRAN];
	CUdeviceptr va, plain;

	simtest_init();
	CU_OK(cuMemCreate(&h1, GRAN, &prop, 0));
	CU_OK(cuMemCreate(&h2, GRAN, &prop, 0));
	CU_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va, GRAN, 0, h1, 0));
	CU_OK(cuMemMap(va + GRAN, GRAN, 0, h2, 0));
	/* Mapped without access: not usable yet. */
	CU_ASSERT(cuMemsetD8(va, 1, 16), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 13 + (i >> 12));
	CU_OK(cuMemcpyHtoD(va, in, sizeof(in)));
	CU_OK(cuMemAlloc(&plain, sizeof(in)));
	CU_OK(cuMemcpyDtoD(plain, va, sizeof(in)));
	CU_OK(cuMemcpyDtoH(out, plain, sizeof(out)));
	cr_assert_arr_eq(out, in, sizeof(in));
	CU_OK(cuMemsetD8(va + GRAN - 8, 0x77, 16));
	CU_OK(cuMemcpyDtoH(out, va + GRAN - 16, 32));
	for (int i = 0; i < 32; i++)
		cr_assert_eq(out[i], i >= 8 && i < 24 ? 0x77 : in[GRAN - 16 + i],
			     "byte %d", i);
	CU_ASSERT(cuMemcpyHtoD(va + GRAN, in, GRAN + 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemFree(va), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(plain));
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	CU_ASSERT(cuMemsetD8(va, 1, 16), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemRelease(h1));
	CU_OK(cuMemRelease(h2));
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* One handle mapped twice: both ranges are the same memory; an offset
 * maps from inside the handle. */
Test(vmm, aliases_and_offsets)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc d = rw_on(0);
	CUdeviceptr a, b;
	uint32_t v = 0;

	simtest_init();
	CU_OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
	a = map_rw(h, 2 * GRAN);
	CU_OK(cuMemAddressReserve(&b, GRAN, 0, 0, 0));
	CU_OK(cuMemMap(b, GRAN, GRAN, h, 0));
	CU_OK(cuMemSetAccess(b, GRAN, &d, 1));
	CU_OK(cuMemsetD32(a + GRAN, 0xabcd1234, 1));
	CU_OK(cuMemcpyDtoH(&v, b, sizeof(v)));
	cr_assert_eq(v, 0xabcd1234);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 2 * GRAN, "counted once");
	CU_OK(cuMemUnmap(a, 2 * GRAN));
	CU_OK(cuMemUnmap(b, GRAN));
	CU_OK(cuMemRelease(h));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(vmm, map_errors)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, other;

	simtest_init();
	CU_OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	CU_ASSERT(cuMemMap(va, GRAN, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va, GRAN, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va, 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va + 4096, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va, GRAN, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va, 3 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va, 2 * GRAN, GRAN, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemMap(va + 3 * GRAN, 2 * GRAN, 0, h, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAlloc(&other, GRAN));
	CU_ASSERT(cuMemMap(other, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemMap(va, 2 * GRAN, 0, h, 0));
	CU_ASSERT(cuMemMap(va + GRAN, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	/* Unmap takes whole mappings only; the reservation outlives none. */
	CU_ASSERT(cuMemUnmap(va, GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemUnmap(va + GRAN, GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	CU_ASSERT(cuMemUnmap(va, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAddressFree(va, 4 * GRAN));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemFree(other));
}

Test(vmm, access_flags)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc d = rw_on(0);
	CUmemLocation loc0 = d.location, loc1 = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
	CUmemLocation host = { .type = CU_MEM_LOCATION_TYPE_HOST };
	unsigned long long flags = 99;
	CUdeviceptr va;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
	CU_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, h, 0));
	CU_OK(cuMemGetAccess(&flags, &loc0, va + 5));
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
	CU_OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
	CU_OK(cuMemGetAccess(&flags, &loc0, va + GRAN));
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CU_OK(cuMemGetAccess(&flags, &loc1, va));
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	d.location.id = 1;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU_OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
	CU_OK(cuMemGetAccess(&flags, &loc1, va));
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	/* Errors: a partial or unmapped range, bad flags and locations, host
	 * access to device memory. */
	CU_ASSERT(cuMemSetAccess(va, GRAN, &d, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemSetAccess(va, 4 * GRAN, &d, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemSetAccess(va, 2 * GRAN, NULL, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemSetAccess(va, 2 * GRAN, &d, 0), CUDA_ERROR_INVALID_VALUE);
	d.flags = (CUmemAccess_flags)2;
	CU_ASSERT(cuMemSetAccess(va, 2 * GRAN, &d, 1), CUDA_ERROR_INVALID_VALUE);
	d = rw_on(2);
	CU_ASSERT(cuMemSetAccess(va, 2 * GRAN, &d, 1), CUDA_ERROR_INVALID_DEVICE);
	d.location = host;
	CU_ASSERT(cuMemSetAccess(va, 2 * GRAN, &d, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemGetAccess(&flags, &loc0, va + 2 * GRAN),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemGetAccess(NULL, &loc0, va), CUDA_ERROR_INVALID_VALUE);
	loc1.id = 7;
	CU_ASSERT(cuMemGetAccess(&flags, &loc1, va), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
	CU_OK(cuMemRelease(h));
}

Test(vmm, retain_allocation_handle)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h, r = 0;
	CUdeviceptr va;
	int x;

	simtest_init();
	CU_OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
	va = map_rw(h, 2 * GRAN);
	CU_OK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + GRAN + 3)));
	cr_assert_eq(r, h);
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 2 * GRAN, "retained");
	CU_OK(cuMemRelease(r));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_ASSERT(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemRetainAllocationHandle(&r, &x), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemRetainAllocationHandle(NULL, (void *)(uintptr_t)va),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
}

Test(vmm, pointer_attributes)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, base = 0;
	unsigned type = 0;
	size_t size = 0;

	simtest_init();
	CU_OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
	va = map_rw(h, 2 * GRAN);
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 9));
	cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
	CU_OK(cuMemGetAddressRange(&base, &size, va + 9));
	cr_assert_eq(base, va);
	cr_assert_eq(size, 2 * GRAN);
	CU_OK(cuMemUnmap(va, 2 * GRAN));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemAddressFree(va, 2 * GRAN));
}

#ifdef SIMTEST_KERNELS
/* vgpu_touch's host form writes and checks a mapped range. */
Test(vmm, kernel_on_mapped_range)
{
	CUmemAllocationProp prop = dev_prop(0);
	CUmemGenericAllocationHandle h;
	unsigned long long n = GRAN / sizeof(uint32_t), mism = 1;
	unsigned expect = 0, write = 5;
	CUdeviceptr va, m_arg = 0, m;
	void *params[] = { &va, &n, &expect, &write, &m_arg };
	uint32_t out[64];
	CUmodule mod;
	CUfunction f;

	simtest_init();
	CU_OK(cuModuleLoadData(&mod, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, mod, "vgpu_touch"));
	CU_OK(cuMemCreate(&h, GRAN, &prop, 0));
	va = map_rw(h, GRAN);
	CU_OK(cuMemAlloc(&m, sizeof(mism)));
	CU_OK(cuMemsetD8(m, 0, sizeof(mism)));
	CU_OK(cuLaunchKernel(f, 64, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuMemcpyDtoH(out, va + GRAN - sizeof(out), sizeof(out)));
	for (unsigned i = 0; i < 64; i++)
		cr_assert_eq(out[i], vgpu_touch_pattern(5, n - 64 + i));
	expect = 5;
	m_arg = m;
	CU_OK(cuLaunchKernel(f, 64, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuMemcpyDtoH(&mism, m, sizeof(mism)));
	cr_assert_eq(mism, 0);
	CU_OK(cuMemUnmap(va, GRAN));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemAddressFree(va, GRAN));
	CU_OK(cuMemFree(m));
}
#endif
