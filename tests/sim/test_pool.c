/* test_pool.c - memory pools and stream-ordered allocation: what a pool
 * reserves from the device (2 MiB chunks), what frees give back (used, not
 * reserved), release at synchronisation above the threshold, trimming,
 * pools created and destroyed, and the errors of each call.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(pool, .init = simtest_clean_env, .fini = simtest_remove_state);

static size_t free_now(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	return free_b;
}

static cuuint64_t pool_attr(CUmemoryPool p, CUmemPool_attribute a)
{
	cuuint64_t v = 0;

	CU_OK(cuMemPoolGetAttribute(p, a, &v));
	return v;
}

static cuuint64_t reserved(CUmemoryPool p)
{
	return pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

static cuuint64_t used(CUmemoryPool p)
{
	return pool_attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}

static void set_threshold(CUmemoryPool p, cuuint64_t v)
{
	CU_OK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
}

static CUmemoryPool default_pool(void)
{
	CUmemoryPool p = NULL;

	CU_OK(cuDeviceGetDefaultMemPool(&p, 0));
	cr_assert_not_null(p);
	return p;
}

Test(pool, default_pool_is_current)
{
	CUmemoryPool def, cur;
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	def = default_pool();
	CU_OK(cuDeviceGetMemPool(&cur, 0));
	cr_assert_eq(cur, def);
	cr_assert_eq(reserved(def), 0);
	cr_assert_eq(used(def), 0);
	cr_assert_eq(pool_attr(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
	CU_ASSERT(cuDeviceGetDefaultMemPool(&def, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetMemPool(&cur, -1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, not_initialized)
{
	CUmemoryPool p;
	CUdeviceptr d;

	CU_ASSERT(cuDeviceGetDefaultMemPool(&p, 0), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuMemAllocAsync(&d, 1, NULL), CUDA_ERROR_NOT_INITIALIZED);
}

/* Blocks come out of 2 MiB chunks, each reserved from the device. */
Test(pool, allocations_reserve_chunks)
{
	CUmemoryPool p;
	CUdeviceptr a, b, c;
	CUstream s;

	simtest_init();
	p = default_pool();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuMemAllocAsync(&a, MIB, s));
	cr_assert_eq(reserved(p), 2 * MIB);
	cr_assert_eq(used(p), MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 2 * MIB);
	CU_OK(cuMemAllocAsync(&b, MIB, s));
	cr_assert_eq(reserved(p), 2 * MIB, "the second fits the first chunk");
	cr_assert_eq(used(p), 2 * MIB);
	cr_assert_eq(b, a + MIB);
	CU_OK(cuMemAllocAsync(&c, 3 * MIB, s));
	cr_assert_eq(reserved(p), 6 * MIB, "a 3 MiB block takes a 4 MiB chunk");
	cr_assert_eq(used(p), 5 * MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 6 * MIB);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6 * MIB);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 5 * MIB);
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuMemFreeAsync(b, s));
	CU_OK(cuMemFreeAsync(c, s));
	CU_OK(cuStreamSynchronize(s));
	cr_assert_eq(used(p), 0);
	cr_assert_eq(reserved(p), 0);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6 * MIB);
}

/* A free happens when the stream reaches it; reserved memory goes back at
 * the next synchronisation (threshold 0), not before. */
Test(pool, free_in_stream_order_release_at_sync)
{
	struct simtest_gate *g = simtest_gate_new();
	CUmemoryPool p;
	CUdeviceptr a;
	CUstream s;

	simtest_init();
	p = default_pool();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuMemAllocAsync(&a, 4 * MIB, s));
	simtest_gate_queue(g, s);
	CU_OK(cuMemFreeAsync(a, s));
	simtest_sleep_ms(20);
	cr_assert_eq(used(p), 4 * MIB, "the stream has not reached the free");
	cr_assert_eq(reserved(p), 4 * MIB);
	simtest_gate_open(g);
	while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY)
		simtest_sleep_ms(1);
	cr_assert_eq(used(p), 0);
	cr_assert_eq(reserved(p), 4 * MIB, "kept until a synchronisation");
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * MIB);
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(reserved(p), 0);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(pool, event_synchronize_releases)
{
	CUmemoryPool p;
	CUdeviceptr a;
	CUevent e;

	simtest_init();
	p = default_pool();
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuMemAllocAsync(&a, 2 * MIB, NULL));
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuEventRecord(e, NULL));
	CU_OK(cuEventSynchronize(e));
	cr_assert_eq(reserved(p), 0);
}

/* The pool keeps at least its release threshold over synchronisations. */
Test(pool, release_threshold_kept)
{
	CUmemoryPool p;
	CUdeviceptr a[4];

	simtest_init();
	p = default_pool();
	set_threshold(p, 4 * MIB);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 4 * MIB);
	for (int i = 0; i < 4; i++)
		CU_OK(cuMemAllocAsync(&a[i], 2 * MIB, NULL));
	cr_assert_eq(reserved(p), 8 * MIB);
	for (int i = 0; i < 4; i++)
		CU_OK(cuMemFreeAsync(a[i], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(used(p), 0);
	cr_assert_eq(reserved(p), 4 * MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 4 * MIB);
	CU_OK(cuMemPoolTrimTo(p, 0));
	cr_assert_eq(reserved(p), 0);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* TrimTo keeps at least minBytesToKeep, and never a chunk in use. */
Test(pool, trim_to)
{
	CUmemoryPool p;
	CUdeviceptr a[4];

	simtest_init();
	p = default_pool();
	set_threshold(p, UINT64_MAX);
	for (int i = 0; i < 4; i++)
		CU_OK(cuMemAllocAsync(&a[i], 2 * MIB, NULL));
	for (int i = 0; i < 3; i++)
		CU_OK(cuMemFreeAsync(a[i], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(reserved(p), 8 * MIB, "the threshold keeps everything");
	CU_OK(cuMemPoolTrimTo(p, 100 * MIB));
	cr_assert_eq(reserved(p), 8 * MIB);
	CU_OK(cuMemPoolTrimTo(p, 3 * MIB));
	cr_assert_eq(reserved(p), 4 * MIB);
	CU_OK(cuMemPoolTrimTo(p, 0));
	cr_assert_eq(reserved(p), 2 * MIB, "the chunk in use stays");
	cr_assert_eq(used(p), 2 * MIB);
	CU_OK(cuMemFreeAsync(a[3], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemPoolTrimTo(p, 0));
	cr_assert_eq(reserved(p), 0);
	CU_ASSERT(cuMemPoolTrimTo(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, freed_memory_is_reused)
{
	CUmemoryPool p;
	CUdeviceptr a, b;

	simtest_init();
	p = default_pool();
	set_threshold(p, UINT64_MAX);
	CU_OK(cuMemAllocAsync(&a, 3 * MIB, NULL));
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemAllocAsync(&b, 3 * MIB, NULL));
	cr_assert_eq(b, a);
	cr_assert_eq(reserved(p), 4 * MIB);
	CU_OK(cuMemFreeAsync(b, NULL));
}

Test(pool, data_intact)
{
	unsigned char in[8192], out[8192];
	CUdeviceptr a, b;
	CUstream s;

	simtest_init();
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 7 + 3);
	CU_OK(cuMemAllocAsync(&a, sizeof(in), s));
	CU_OK(cuMemAllocAsync(&b, sizeof(in), s));
	CU_OK(cuMemcpyHtoDAsync(a, in, sizeof(in), s));
	CU_OK(cuMemcpyDtoDAsync(b, a, sizeof(in), s));
	CU_OK(cuMemsetD8Async(a, 0xab, 16, s));
	CU_OK(cuMemcpyDtoHAsync(out, b, sizeof(out), s));
	CU_OK(cuStreamSynchronize(s));
	cr_assert_arr_eq(out, in, sizeof(in));
	CU_OK(cuMemcpyDtoH(out, a, 32));
	for (int i = 0; i < 16; i++)
		cr_assert_eq(out[i], 0xab);
	cr_assert_eq(out[16], in[16]);
	/* Beyond the block is not the block's, even inside its chunk. */
	CU_ASSERT(cuMemcpyHtoD(a, in, sizeof(in) + 1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuMemFreeAsync(b, s));
	CU_OK(cuStreamSynchronize(s));
}

Test(pool, out_of_memory)
{
	CUmemoryPool p;
	CUdeviceptr a, b;

	simtest_init();
	p = default_pool();
	CU_ASSERT(cuMemAllocAsync(&a, SIMTEST_MEMORY + 1, NULL),
		  CUDA_ERROR_OUT_OF_MEMORY);
	CU_ASSERT(cuMemAllocAsync(&a, (size_t)-1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemAllocAsync(&a, SIMTEST_MEMORY, NULL));
	cr_assert_eq(free_now(), 0);
	CU_ASSERT(cuMemAllocAsync(&b, 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CU_ASSERT(cuMemAlloc(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(used(p), SIMTEST_MEMORY);
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* A pool short of room gives back its idle chunks before failing. */
Test(pool, idle_chunks_make_room)
{
	CUmemoryPool p;
	CUdeviceptr a, b;

	simtest_init();
	p = default_pool();
	set_threshold(p, UINT64_MAX);
	CU_OK(cuMemAllocAsync(&a, 48 * MIB, NULL));
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(reserved(p), 48 * MIB);
	CU_OK(cuMemAllocAsync(&b, 56 * MIB, NULL));
	cr_assert_eq(reserved(p), 56 * MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 56 * MIB);
	CU_OK(cuMemFreeAsync(b, NULL));
}

/* cuMemFree takes pool memory too, at once; the chunk stays reserved. */
Test(pool, mem_free_of_pool_memory)
{
	CUmemoryPool p;
	CUdeviceptr a;

	simtest_init();
	p = default_pool();
	CU_OK(cuMemAllocAsync(&a, MIB, NULL));
	CU_OK(cuMemFree(a));
	cr_assert_eq(used(p), 0);
	cr_assert_eq(reserved(p), 2 * MIB);
	CU_ASSERT(cuMemFreeAsync(a, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(reserved(p), 0);
}

Test(pool, async_errors)
{
	CUdeviceptr a;

	simtest_init();
	CU_ASSERT(cuMemAllocAsync(NULL, 1, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocAsync(&a, 0, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocFromPoolAsync(&a, 1, NULL, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemFreeAsync(0x1234, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocAsync(&a, 4096, NULL));
	CU_ASSERT(cuMemFreeAsync(a + 512, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_ASSERT(cuMemFreeAsync(a, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuCtxPopCurrent(NULL));
	CU_ASSERT(cuMemAllocAsync(&a, 1, NULL), CUDA_ERROR_INVALID_CONTEXT);
}

/* CUDA allows cuMemAlloc memory to be freed in stream order: the device
 * gets it back, and it is not freed twice. */
Test(pool, free_async_of_plain_memory)
{
	CUdeviceptr plain;
	size_t free0, free1, total;

	simtest_init();
	CU_OK(cuMemGetInfo(&free0, &total));
	CU_OK(cuMemAlloc(&plain, 4 * MIB));
	CU_OK(cuMemFreeAsync(plain, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemGetInfo(&free1, &total));
	cr_assert_eq(free1, free0);
	CU_ASSERT(cuMemFreeAsync(plain, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemFree(plain), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, per_thread_stream_variants)
{
	CUresult (*alloc)(CUdeviceptr *, size_t, CUstream);
	CUresult (*fr)(CUdeviceptr, CUstream);
	CUdriverProcAddressQueryResult q;
	CUdeviceptr a;

	simtest_init();
	CU_OK(cuGetProcAddress("cuMemAllocAsync", (void **)&alloc, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
	CU_OK(cuGetProcAddress("cuMemFreeAsync", (void **)&fr, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
	CU_OK(alloc(&a, MIB, NULL));
	CU_OK(fr(a, NULL));
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	cr_assert_eq(reserved(default_pool()), 0);
}

static CUmemPoolProps device_props(int dev)
{
	return (CUmemPoolProps){
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};
}

Test(pool, create_set_destroy)
{
	CUmemPoolProps props = device_props(0);
	CUmemoryPool p, cur, def;
	CUdeviceptr a, b;

	simtest_init();
	def = default_pool();
	CU_OK(cuMemPoolCreate(&p, &props));
	cr_assert_neq(p, def);
	CU_OK(cuMemAllocFromPoolAsync(&a, MIB, p, NULL));
	cr_assert_eq(used(p), MIB);
	cr_assert_eq(used(def), 0);
	CU_OK(cuDeviceSetMemPool(0, p));
	CU_OK(cuDeviceGetMemPool(&cur, 0));
	cr_assert_eq(cur, p);
	CU_OK(cuMemAllocAsync(&b, MIB, NULL));
	cr_assert_eq(used(p), 2 * MIB);
	/* Destroyed with blocks out: they stay usable, the handle does not. */
	CU_OK(cuMemPoolDestroy(p));
	CU_OK(cuDeviceGetMemPool(&cur, 0));
	cr_assert_eq(cur, def, "the default pool is current again");
	CU_ASSERT(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
					&(cuuint64_t){ 0 }),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemAllocFromPoolAsync(&a, 1, p, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolDestroy(p), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemsetD8(b, 7, MIB));
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 2 * MIB);
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuMemFreeAsync(b, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(free_now(), SIMTEST_MEMORY, "the last free ends the pool");
	CU_ASSERT(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, create_errors)
{
	CUmemPoolProps props = device_props(0);
	CUmemoryPool p;

	simtest_init();
	CU_ASSERT(cuMemPoolCreate(NULL, &props), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolCreate(&p, NULL), CUDA_ERROR_INVALID_VALUE);
	props.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
	CU_ASSERT(cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = device_props(3);
	CU_ASSERT(cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = device_props(0);
	props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
	CU_ASSERT(cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
	props = device_props(0);
	props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CU_ASSERT(cuMemPoolCreate(&p, &props), CUDA_ERROR_NOT_SUPPORTED);
	props.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CU_ASSERT(cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, set_mem_pool_errors)
{
	CUmemPoolProps props = device_props(1);
	CUmemoryPool p1;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuMemPoolCreate(&p1, &props));
	CU_ASSERT(cuDeviceSetMemPool(0, p1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceSetMemPool(0, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceSetMemPool(2, p1), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuDeviceSetMemPool(1, p1));
	CU_OK(cuMemPoolDestroy(p1));
}

/* A host pool reserves nothing on the device. */
Test(pool, host_pool_not_device_memory)
{
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_HOST },
	};
	CUmemoryPool p;
	CUdeviceptr a;
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	CU_OK(cuMemPoolCreate(&p, &props));
	CU_OK(cuMemAllocFromPoolAsync(&a, 3 * MIB, p, NULL));
	cr_assert_eq(reserved(p), 4 * MIB);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	memset((void *)(uintptr_t)a, 0x5a, 3 * MIB);
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuMemPoolDestroy(p));
}

Test(pool, attributes)
{
	CUmemoryPool p;
	CUdeviceptr a;
	cuuint64_t v;
	int reuse = -1;

	simtest_init();
	p = default_pool();
	CU_OK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
				    &reuse));
	cr_assert_eq(reuse, 1);
	reuse = 0;
	CU_OK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
				    &reuse));
	CU_OK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
				    &reuse));
	cr_assert_eq(reuse, 0);
	CU_OK(cuMemAllocAsync(&a, 4 * MIB, NULL));
	CU_OK(cuMemFreeAsync(a, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 4 * MIB);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 4 * MIB);
	v = 1;
	CU_ASSERT(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
		  CUDA_ERROR_INVALID_VALUE);
	v = 0;
	CU_OK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
	CU_OK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0);
	cr_assert_eq(pool_attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0);
	CU_ASSERT(cuMemPoolGetAttribute(p, (CUmemPool_attribute)99, &v),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemPoolGetAttribute(NULL, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v),
		  CUDA_ERROR_INVALID_VALUE);
}

/* Another process on the device sees the pool's chunks as used memory. */
Test(pool, reservation_seen_by_other_process)
{
	CUdeviceptr a;
	int status;
	pid_t pid;

	simtest_init_shared();
	CU_OK(cuMemAllocAsync(&a, MIB, NULL));
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		CUcontext ctx;
		size_t fr = 0, total = 0;
		if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
		    cuCtxSetCurrent(ctx) || cuMemGetInfo(&fr, &total))
			_exit(1);
		_exit(fr == SIMTEST_MEMORY - 2 * MIB ? 0 : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "child step %d", WEXITSTATUS(status));
	CU_OK(cuMemFreeAsync(a, NULL));
}

Test(pool, fault_injection)
{
	CUdeviceptr a;

	setenv("VGPU_SIM_FAIL", "alloc:1", 1);
	simtest_init();
	CU_ASSERT(cuMemAllocAsync(&a, MIB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemAllocAsync(&a, MIB, NULL));
	CU_OK(cuMemFreeAsync(a, NULL));
}
