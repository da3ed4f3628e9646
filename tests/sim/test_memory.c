/* test_memory.c - device and page-locked memory: capacity, accounting,
 * pitch, address ranges, pointer attributes and fault injection.
 */
#include "simtest.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(memory, .init = simtest_clean_env, .fini = simtest_remove_state);

static size_t free_now(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(total, SIMTEST_MEMORY);
	return free_b;
}

/* 1 MiB at a time, exactly VGPU_SIM_MEMORY fits; then all of it returns. */
Test(memory, alloc_until_out_of_memory)
{
	CUdeviceptr p[80], extra;
	size_t n = 0;
	CUresult rc;

	simtest_init();
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	while ((rc = cuMemAlloc(&p[n], MIB)) == CUDA_SUCCESS) {
		n++;
		cr_assert_lt(n, sizeof(p) / sizeof(p[0]), "no limit reached");
	}
	CU_ASSERT(rc, CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(n, SIMTEST_MEMORY / MIB);
	cr_assert_eq(free_now(), 0);
	CU_ASSERT(cuMemAlloc(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree(p[7]));
	cr_assert_eq(free_now(), MIB);
	CU_OK(cuMemAlloc(&p[7], MIB));
	cr_assert_eq(free_now(), 0);
	for (size_t i = 0; i < n; i++)
		CU_OK(cuMemFree(p[i]));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(memory, whole_device_in_one)
{
	CUdeviceptr p;

	simtest_init();
	CU_ASSERT(cuMemAlloc(&p, SIMTEST_MEMORY + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_ASSERT(cuMemAlloc(&p, (size_t)-1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemAlloc(&p, SIMTEST_MEMORY));
	cr_assert_eq(free_now(), 0);
	CU_OK(cuMemFree(p));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(memory, get_info_exact)
{
	CUdeviceptr a, b;

	simtest_init();
	CU_OK(cuMemAlloc(&a, 3 * MIB));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 3 * MIB);
	CU_OK(cuMemAlloc(&b, 5 * MIB));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 8 * MIB);
	CU_OK(cuMemFree(a));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 5 * MIB);
	CU_OK(cuMemFree(b));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_ASSERT(cuMemGetInfo(NULL, &(size_t){ 0 }), CUDA_ERROR_INVALID_VALUE);
}

/* Small allocations cost at least something and all of it comes back. */
Test(memory, small_allocations_accounted)
{
	CUdeviceptr p[16];

	simtest_init();
	for (int i = 0; i < 16; i++) {
		size_t before = free_now();
		CU_OK(cuMemAlloc(&p[i], 1 + (size_t)i * 100));
		cr_assert_lt(free_now(), before);
	}
	for (int i = 0; i < 16; i++)
		CU_OK(cuMemFree(p[i]));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(memory, alloc_bad_arguments)
{
	CUdeviceptr p;

	simtest_init();
	CU_ASSERT(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
}

Test(memory, allocations_are_distinct_and_usable)
{
	CUdeviceptr a, b;
	unsigned char buf[4096];

	simtest_init();
	CU_OK(cuMemAlloc(&a, 4096));
	CU_OK(cuMemAlloc(&b, 4096));
	cr_assert(a + 4096 <= b || b + 4096 <= a, "allocations overlap");
	memset(buf, 0xab, sizeof(buf));
	CU_OK(cuMemcpyHtoD(a, buf, sizeof(buf)));
	memset(buf, 0, sizeof(buf));
	CU_OK(cuMemcpyDtoH(buf, a, sizeof(buf)));
	for (size_t i = 0; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xab);
}

Test(memory, free_unknown_pointer)
{
	CUdeviceptr p;
	int on_stack;

	simtest_init();
	CU_ASSERT(cuMemFree((CUdeviceptr)(uintptr_t)&on_stack),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemFree((CUdeviceptr)0x1000), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAlloc(&p, 4096));
	CU_ASSERT(cuMemFree(p + 16), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(p));
	CU_ASSERT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(0));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(memory, pitch)
{
	CUdeviceptr p, base;
	size_t pitch = 0, size = 0;
	int align = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT,
				   0));
	CU_OK(cuMemAllocPitch(&p, &pitch, 100, 10, 4));
	cr_assert_geq(pitch, 100);
	cr_assert_eq(pitch % (size_t)align, 0, "pitch %zu, alignment %d", pitch,
		     align);
	CU_OK(cuMemGetAddressRange(&base, &size, p));
	cr_assert_eq(base, p);
	cr_assert_geq(size, pitch * 10);
	/* A width that is already aligned is not padded. */
	CU_OK(cuMemAllocPitch(&p, &pitch, 1024, 3, 16));
	cr_assert_eq(pitch, 1024);
	CU_ASSERT(cuMemAllocPitch(&p, &pitch, 100, 10, 3),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocPitch(&p, &pitch, 0, 10, 4),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocPitch(&p, NULL, 100, 10, 4),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocPitch(&p, &pitch, 1024, SIMTEST_MEMORY, 4),
		  CUDA_ERROR_OUT_OF_MEMORY);
}

Test(memory, address_range_of_interior_pointer)
{
	CUdeviceptr p, base = 0;
	size_t size = 0;

	simtest_init();
	CU_OK(cuMemAlloc(&p, 1000));
	CU_OK(cuMemGetAddressRange(&base, &size, p + 999));
	cr_assert_eq(base, p);
	cr_assert_eq(size, 1000);
	base = 0;
	CU_OK(cuMemGetAddressRange(&base, NULL, p + 500));
	cr_assert_eq(base, p);
	size = 0;
	CU_OK(cuMemGetAddressRange(NULL, &size, p));
	cr_assert_eq(size, 1000);
	CU_ASSERT(cuMemGetAddressRange(&base, &size, p + 1000),
		  CUDA_ERROR_NOT_FOUND);
	CU_ASSERT(cuMemGetAddressRange(&base, &size, (CUdeviceptr)0x1000),
		  CUDA_ERROR_NOT_FOUND);
}

Test(memory, pointer_attribute)
{
	CUcontext ctx = simtest_init(), c = NULL;
	CUdeviceptr p, q, start = 0;
	unsigned type = 0;
	unsigned long long id_p = 0, id_q = 0;
	size_t size = 0;
	int ordinal = -1;
	void *host = NULL;

	CU_OK(cuMemAlloc(&p, 8192));
	CU_OK(cuMemAlloc(&q, 8192));
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 8));
	cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
	CU_OK(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, p));
	cr_assert_eq(c, ctx);
	CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				    p));
	cr_assert_eq(ordinal, 0);
	CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
				    p + 100));
	cr_assert_eq(start, p);
	CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100));
	cr_assert_eq(size, 8192);
	CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
				    p + 100));
	cr_assert_eq(start, p + 100);
	CU_OK(cuPointerGetAttribute(&id_p, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
	CU_OK(cuPointerGetAttribute(&id_q, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
	cr_assert_neq(id_p, id_q);
	/* Device memory has no host pointer. */
	CU_ASSERT(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER,
					p), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
					p), CUDA_ERROR_INVALID_VALUE);
}

/* "If ptr was not allocated by, mapped by, or registered with a supported
 * unified virtual address space then CUDA_ERROR_INVALID_VALUE is returned." */
Test(memory, pointer_attribute_unknown_pointer)
{
	CUdeviceptr p;
	unsigned type;
	int on_stack;

	simtest_init();
	CU_ASSERT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
					(CUdeviceptr)(uintptr_t)&on_stack),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAlloc(&p, 4096));
	CU_OK(cuMemFree(p));
	CU_ASSERT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(memory, pointer_attributes)
{
	CUcontext ctx = simtest_init(), c = NULL;
	CUdeviceptr p, dp = 0;
	unsigned type = 0;
	int ordinal = -1;
	bool managed = true;
	void *host = (void *)1;
	CUpointer_attribute attrs[] = {
		CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
		CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_HOST_POINTER,
	};
	void *data[] = { &c, &type, &ordinal, &dp, &managed, &host };

	CU_OK(cuMemAlloc(&p, 4096));
	CU_OK(cuPointerGetAttributes(6, attrs, data, p + 4));
	cr_assert_eq(c, ctx);
	cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
	cr_assert_eq(ordinal, 0);
	cr_assert_eq(dp, p + 4);
	cr_assert(!managed);
	cr_assert_null(host);
	CU_ASSERT(cuPointerGetAttributes(0, attrs, data, p),
		  CUDA_ERROR_INVALID_VALUE);
}

/* "Unlike cuPointerGetAttribute, this function will not return an error when
 * the ptr encountered is not a valid CUDA pointer. Instead, the attributes
 * are assigned default NULL values and CUDA_SUCCESS is returned." */
Test(memory, pointer_attributes_unknown_pointer)
{
	CUcontext c = (CUcontext)1;
	CUdeviceptr dp = 1;
	unsigned type = 99;
	int local;
	CUpointer_attribute attrs[] = {
		CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
	};
	void *data[] = { &c, &type, &dp };

	simtest_init();
	CU_OK(cuPointerGetAttributes(3, attrs, data,
				     (CUdeviceptr)(uintptr_t)&local));
	cr_assert_null(c);
	cr_assert_eq(type, 0);
	cr_assert_eq(dp, 0);
}

/* VGPU_SIM_FAIL=alloc:3 fails exactly the third allocation, which costs
 * nothing; the ones around it succeed. */
Test(memory, fail_injection_third_alloc)
{
	CUdeviceptr p[5];

	setenv("VGPU_SIM_FAIL", "alloc:3", 1);
	simtest_init();
	CU_OK(cuMemAlloc(&p[0], MIB));
	CU_OK(cuMemAlloc(&p[1], MIB));
	CU_ASSERT(cuMemAlloc(&p[2], MIB), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemAlloc(&p[3], MIB));
	CU_OK(cuMemAlloc(&p[4], MIB));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * MIB);
}

Test(memory, fail_injection_every_other)
{
	CUdeviceptr p;

	setenv("VGPU_SIM_FAIL", "alloc:%2", 1);
	simtest_init();
	for (int i = 1; i <= 8; i++)
		CU_ASSERT(cuMemAlloc(&p, 4096),
			  i % 2 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

/* Page-locked host memory is not device memory: the device keeps it all. */
Test(memory, host_alloc)
{
	void *h = NULL;
	unsigned flags = 99, type = 0;
	CUdeviceptr dp = 0;

	simtest_init();
	CU_OK(cuMemHostAlloc(&h, 8 * MIB, CU_MEMHOSTALLOC_DEVICEMAP));
	cr_assert_not_null(h);
	memset(h, 0x5a, 8 * MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_OK(cuMemHostGetFlags(&flags, h));
	cr_assert_eq(flags, CU_MEMHOSTALLOC_DEVICEMAP);
	CU_OK(cuMemHostGetDevicePointer(&dp, h, 0));
	cr_assert_neq(dp, 0);
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				    (CUdeviceptr)(uintptr_t)h));
	cr_assert_eq(type, CU_MEMORYTYPE_HOST);
	CU_ASSERT(cuMemFree((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFreeHost(h));
	CU_ASSERT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocHost(&h, 100));
	CU_OK(cuMemFreeHost(h));
	CU_ASSERT(cuMemHostAlloc(&h, 100, 0x80), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemHostAlloc(&h, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(memory, host_register)
{
	static char buf[3 * 4096] __attribute__((aligned(4096)));
	unsigned type = 0;

	simtest_init();
	CU_OK(cuMemHostRegister(buf, sizeof(buf), 0));
	CU_ASSERT(cuMemHostRegister(buf, sizeof(buf), 0),
		  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				    (CUdeviceptr)(uintptr_t)(buf + 100)));
	cr_assert_eq(type, CU_MEMORYTYPE_HOST);
	/* Registered memory is freed by its owner, not by cuMemFreeHost. */
	CU_ASSERT(cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemHostUnregister(buf));
	CU_ASSERT(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	buf[0] = 1;   /* still the caller's */
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* Each device has its own memory. */
Test(memory, devices_have_separate_memory)
{
	CUcontext c1;
	CUdeviceptr p;
	size_t free_b, total;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMemAlloc(&p, SIMTEST_MEMORY));
	CU_OK(cuCtxCreate(&c1, NULL, 0, 1));
	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(free_b, SIMTEST_MEMORY);
	CU_OK(cuMemAlloc(&p, SIMTEST_MEMORY));
	CU_ASSERT(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
	/* A pointer knows its device. */
	int ordinal = -1;
	CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				    p));
	cr_assert_eq(ordinal, 1);
}

enum { THREADS = 8, PER_THREAD = 8 };

struct allocator {
	CUcontext ctx;
	CUdeviceptr p[PER_THREAD];
	CUresult rc;
};

static void *alloc_many(void *arg)
{
	struct allocator *a = arg;

	a->rc = cuCtxSetCurrent(a->ctx);
	for (int i = 0; i < PER_THREAD && a->rc == CUDA_SUCCESS; i++)
		a->rc = cuMemAlloc(&a->p[i], MIB);
	return NULL;
}

static void *free_many(void *arg)
{
	struct allocator *a = arg;

	a->rc = CUDA_SUCCESS;
	for (int i = 0; i < PER_THREAD && a->rc == CUDA_SUCCESS; i++)
		a->rc = cuMemFree(a->p[i]);
	return NULL;
}

static void run_all(struct allocator *a, void *(*fn)(void *))
{
	pthread_t th[THREADS];

	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, fn, &a[i]), 0);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		CU_OK(a[i].rc);
	}
}

/* Threads allocating and freeing at once: the accounting stays exact. */
Test(memory, concurrent_alloc_and_free)
{
	struct allocator a[THREADS];
	CUdeviceptr p;
	CUcontext ctx;

	cr_assert_eq(THREADS * PER_THREAD * MIB, SIMTEST_MEMORY);
	ctx = simtest_init();
	for (int i = 0; i < THREADS; i++)
		a[i].ctx = ctx;
	run_all(a, alloc_many);
	cr_assert_eq(free_now(), 0);
	CU_ASSERT(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
	run_all(a, free_many);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* Processes racing to fill the device, 1 MiB at a time, each until its
 * first refusal: together they get exactly the device (the reservations
 * that race see each other's bytes, so none overcommits, and one refused
 * only by another's being decided tries again). */
#define FILLERS 4

Test(memory, processes_fill_exactly, .timeout = 30)
{
	int go[2], out[2], fin[2];
	pid_t pids[FILLERS];
	uint64_t got, sum = 0;

	simtest_init_shared();
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(fin), 0);
	for (int i = 0; i < FILLERS; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			CUdeviceptr p;
			CUcontext c;
			char ch;

			got = 0;
			if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) ||
			    cuCtxSetCurrent(c) || read(go[0], &ch, 1) != 1)
				_exit(1);
			while (cuMemAlloc(&p, MIB) == CUDA_SUCCESS)
				got += MIB;
			if (write(out[1], &got, sizeof(got)) != sizeof(got))
				_exit(1);
			/* Holds it until the test has counted. */
			close(fin[1]);
			_exit(read(fin[0], &ch, 1) == 0 ? 0 : 1);
		}
	}
	close(out[1]);
	close(fin[0]);
	cr_assert_eq(write(go[1], "gggggggg", FILLERS), FILLERS);
	for (int i = 0; i < FILLERS; i++) {
		cr_assert_eq(read(out[0], &got, sizeof(got)), sizeof(got),
			     "a filler failed");
		sum += got;
	}
	cr_assert_eq(sum, SIMTEST_MEMORY, "the fillers got %llu MiB",
		     (unsigned long long)(sum / MIB));
	cr_assert_eq(free_now(), 0);
	close(fin[1]);
	for (int i = 0; i < FILLERS; i++) {
		int status;

		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}
