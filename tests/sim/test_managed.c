/* test_managed.c - managed memory: host-usable pointers, counted against
 * the device from allocation, freed by cuMemFree; advice, prefetches and
 * what cuMemRangeGetAttribute reports of them; the errors of each call.
 */
#include "simtest.h"

#include <string.h>

TestSuite(managed, .init = simtest_clean_env, .fini = simtest_remove_state);

static size_t free_now(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	return free_b;
}

static int range_int(CUmem_range_attribute a, CUdeviceptr p, size_t n)
{
	int v = 12345;

	CU_OK(cuMemRangeGetAttribute(&v, sizeof(v), a, p, n));
	return v;
}

static CUmemLocation dev_loc(int d)
{
	return (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d };
}

Test(managed, attributes)
{
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
	cr_assert_eq(v, 1);
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0));
	cr_assert_eq(v, 1);
}

/* The host writes, the device copies, the host reads: one memory. */
Test(managed, host_and_device_share_it)
{
	CUdeviceptr m, d;
	unsigned char *h;
	bool managed = false;
	void *hp = NULL;

	simtest_init();
	CU_OK(cuMemAllocManaged(&m, 3 * MIB, CU_MEM_ATTACH_GLOBAL));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 3 * MIB);
	h = (unsigned char *)(uintptr_t)m;
	for (size_t i = 0; i < 3 * MIB; i++)
		h[i] = (unsigned char)(i * 31);
	CU_OK(cuMemAlloc(&d, 3 * MIB));
	CU_OK(cuMemcpyDtoD(d, m, 3 * MIB));
	CU_OK(cuMemsetD8(m, 0, 3 * MIB));
	cr_assert_eq(h[12345], 0);
	CU_OK(cuMemcpyDtoD(m, d, 3 * MIB));
	for (size_t i = 0; i < 3 * MIB; i += 4093)
		cr_assert_eq(h[i], (unsigned char)(i * 31), "byte %zu", i);
	CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 7));
	cr_assert(managed);
	CU_OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m));
	cr_assert_eq(hp, h);
	CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
	cr_assert(!managed);
	CU_OK(cuMemFree(m));
	CU_OK(cuMemFree(d));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(managed, counted_against_capacity)
{
	CUdeviceptr a, b;

	simtest_init();
	CU_ASSERT(cuMemAllocManaged(&a, SIMTEST_MEMORY + 1, CU_MEM_ATTACH_GLOBAL),
		  CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemAllocManaged(&a, SIMTEST_MEMORY / 2, CU_MEM_ATTACH_HOST));
	CU_OK(cuMemAlloc(&b, SIMTEST_MEMORY / 2));
	CU_ASSERT(cuMemAllocManaged(&a, 1, CU_MEM_ATTACH_GLOBAL),
		  CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree(b));
	CU_OK(cuMemFree(a));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(managed, alloc_errors)
{
	CUdeviceptr a;

	simtest_init();
	CU_ASSERT(cuMemAllocManaged(NULL, 1, CU_MEM_ATTACH_GLOBAL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocManaged(&a, 0, CU_MEM_ATTACH_GLOBAL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocManaged(&a, 1, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocManaged(&a, 1, CU_MEM_ATTACH_SINGLE),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocManaged(&a, 1, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuCtxPopCurrent(NULL));
	CU_ASSERT(cuMemAllocManaged(&a, 1, CU_MEM_ATTACH_GLOBAL),
		  CUDA_ERROR_INVALID_CONTEXT);
}

Test(managed, freed_with_its_context)
{
	CUcontext ctx;
	CUdeviceptr a;

	simtest_init();
	CU_OK(cuCtxCreate(&ctx, NULL, 0, 0));
	CU_OK(cuMemAllocManaged(&a, 4 * MIB, CU_MEM_ATTACH_GLOBAL));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * MIB);
	CU_OK(cuCtxDestroy(ctx));
	CU_OK(cuCtxSetCurrent(NULL));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(managed, advice_and_range_attributes)
{
	CUdeviceptr a, plain;
	int by[4];

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMemAllocManaged(&a, 2 * MIB, CU_MEM_ATTACH_GLOBAL));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, a, MIB), 0);
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, a, MIB),
		     CU_DEVICE_INVALID);
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev_loc(0)));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, a, MIB), 1);
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev_loc(1)));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, a, MIB), 1);
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, a, MIB),
		     CU_MEM_LOCATION_TYPE_DEVICE);
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
			  (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_HOST }));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, a, MIB),
		     CU_DEVICE_CPU);
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev_loc(1)));
	CU_OK(cuMemRangeGetAttribute(by, sizeof(by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
				     a, MIB));
	cr_assert_eq(by[0], 1);
	cr_assert_eq(by[1], CU_DEVICE_INVALID);
	cr_assert_eq(by[3], CU_DEVICE_INVALID);
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_UNSET_ACCESSED_BY, dev_loc(1)));
	CU_OK(cuMemRangeGetAttribute(by, sizeof(by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
				     a, MIB));
	cr_assert_eq(by[0], CU_DEVICE_INVALID);
	/* Errors: not managed, outside, bad advice, bad device, bad size. */
	CU_OK(cuMemAlloc(&plain, MIB));
	CU_ASSERT(cuMemAdvise(plain, MIB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev_loc(0)),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAdvise(a, 3 * MIB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev_loc(0)),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAdvise(a, MIB, (CUmem_advise)0, dev_loc(0)),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev_loc(2)),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuMemRangeGetAttribute(by, 3, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
					 a, MIB), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemRangeGetAttribute(by, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
					 plain, MIB), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(plain));
	CU_OK(cuMemFree(a));
}

/* The pre-12.2 forms take a CUdevice, CU_DEVICE_CPU for the host. */
Test(managed, device_forms)
{
	CUresult (*advise)(CUdeviceptr, size_t, CUmem_advise, CUdevice);
	CUresult (*prefetch)(CUdeviceptr, size_t, CUdevice, CUstream);
	CUdriverProcAddressQueryResult q;
	CUdeviceptr a;

	simtest_init();
	CU_OK(cuGetProcAddress("cuMemAdvise", (void **)&advise, 11000, 0, &q));
	CU_OK(cuGetProcAddress("cuMemPrefetchAsync", (void **)&prefetch, 11000, 0, &q));
	CU_OK(cuMemAllocManaged(&a, MIB, CU_MEM_ATTACH_GLOBAL));
	CU_OK(advise(a, MIB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, a, MIB), 0);
	CU_OK(advise(a, MIB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, a, MIB),
		     CU_DEVICE_CPU);
	CU_ASSERT(advise(a, MIB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 4),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_OK(prefetch(a, MIB, 0, NULL));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, a, MIB), 0);
	CU_OK(prefetch(a, MIB, CU_DEVICE_CPU, NULL));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, a, MIB),
		     CU_DEVICE_CPU);
	CU_ASSERT(prefetch(a, MIB, 3, NULL), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuMemFree(a));
}

Test(managed, prefetch)
{
	CUdeviceptr a, plain;
	CUstream s;

	simtest_init();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuMemAllocManaged(&a, 2 * MIB, CU_MEM_ATTACH_GLOBAL));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, a, MIB),
		     CU_DEVICE_INVALID);
	CU_OK(cuMemPrefetchAsync(a, 2 * MIB, dev_loc(0), 0, s));
	CU_OK(cuStreamSynchronize(s));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, a, MIB), 0);
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE,
			       a, MIB), CU_MEM_LOCATION_TYPE_DEVICE);
	CU_OK(cuMemPrefetchAsync(a, MIB,
				 (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_HOST },
				 0, s));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, a, MIB),
		     CU_DEVICE_CPU);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 2 * MIB,
		     "counted wherever it was prefetched");
	CU_OK(cuMemAlloc(&plain, MIB));
	CU_ASSERT(cuMemPrefetchAsync(plain, MIB, dev_loc(0), 0, s),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPrefetchAsync(a, MIB, dev_loc(0), 1, s),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPrefetchAsync(a, MIB, dev_loc(1), 0, s),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuMemPrefetchAsync(a, 0, dev_loc(0), 0, s),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(plain));
	CU_OK(cuMemFree(a));
}

/* Advice does not outlive its allocation (a new one at the address starts
 * without it). */
Test(managed, advice_dies_with_allocation)
{
	CUdeviceptr a, b;

	simtest_init();
	CU_OK(cuMemAllocManaged(&a, MIB, CU_MEM_ATTACH_GLOBAL));
	CU_OK(cuMemAdvise(a, MIB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev_loc(0)));
	CU_OK(cuMemFree(a));
	CU_ASSERT(cuMemRangeGetAttribute(&(int){ 0 }, sizeof(int),
					 CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, a, MIB),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocManaged(&b, MIB, CU_MEM_ATTACH_GLOBAL));
	cr_assert_eq(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, b, MIB), 0);
	CU_OK(cuMemFree(b));
}
