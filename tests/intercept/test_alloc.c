/* test_alloc.c - every allocation path, at and past the slice, read back
 * from the ledger file.
 *
 * Each test runs with a 64 MiB slice (VGPU_MEMORY_LIMIT=64MiB) on a 1 GiB
 * simulated device, no context overhead: the slice, not the device, is what
 * refuses. Past the slice, the answer is exactly CUDA_ERROR_OUT_OF_MEMORY
 * and the process goes on: a later allocation that fits succeeds. Every
 * test ends with the tenant's and its slots' usage back at zero.
 */
#include "shimtest.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TENANT "t-alloc"
#define SLICE (64 * MIB)

static void setup(void)
{
	simtest_clean_env();
	shimtest_env(TENANT, "64MiB");
}

TestSuite(alloc, .init = setup, .fini = shimtest_cleanup);

static struct ledger_view v;

static void start(void)
{
	simtest_init_shared();
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
}

/* The tenant's usage of kind, which this process's slot holds too. */
static void expect_usage(int kind, uint64_t bytes)
{
	const struct vgpu_ledger_slot *s = ledger_slot_of(&v, TENANT, getpid());

	cr_assert_not_null(s, "no slot of pid %d", (int)getpid());
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, kind), bytes,
		     "tenant's kind %d: %llu bytes, want %llu", kind,
		     (unsigned long long)ledger_tenant_bytes(&v, TENANT, kind),
		     (unsigned long long)bytes);
	cr_assert_eq(s->usage[kind], bytes, "slot's kind %d: %llu, want %llu",
		     kind, (unsigned long long)s->usage[kind],
		     (unsigned long long)bytes);
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_COUNT), bytes,
		     "tenant's total %llu, want %llu",
		     (unsigned long long)ledger_tenant_bytes(&v, TENANT,
							     VGPU_USAGE_COUNT),
		     (unsigned long long)bytes);
}

static void finish(void)
{
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

#define OOM CUDA_ERROR_OUT_OF_MEMORY

/* ---- cuMemAlloc_v2 ------------------------------------------------------ */

Test(alloc, mem_alloc_at_and_past_the_slice)
{
	CUdeviceptr a, b, c;
	const struct vgpu_ledger_slot *s;

	start();
	CU_OK(cuMemAlloc(&a, SLICE));
	expect_usage(VGPU_USAGE_BUFFER, SLICE);
	s = ledger_slot_of(&v, TENANT, getpid());
	uint64_t failures = s->failures;
	CU_ASSERT(cuMemAlloc(&b, 1), OOM);
	cr_assert_eq(s->failures, failures + 1, "a refusal is counted");
	expect_usage(VGPU_USAGE_BUFFER, SLICE);
	CU_OK(cuMemFree(a));
	expect_usage(VGPU_USAGE_BUFFER, 0);

	CU_OK(cuMemAlloc(&a, 40 * MIB));
	CU_ASSERT(cuMemAlloc(&b, 40 * MIB), OOM);
	CU_OK(cuMemAlloc(&b, 24 * MIB));
	expect_usage(VGPU_USAGE_BUFFER, SLICE);
	CU_ASSERT(cuMemAlloc(&c, 4 * KIB), OOM);
	CU_OK(cuMemFree(a));
	expect_usage(VGPU_USAGE_BUFFER, 24 * MIB);
	CU_OK(cuMemAlloc(&c, 40 * MIB));
	CU_OK(cuMemFree(b));
	CU_OK(cuMemFree(c));
	finish();
}

/* ---- cuMemAllocPitch_v2: the real pitch ---------------------------------- */

Test(alloc, pitch_charges_the_real_pitch)
{
	CUdeviceptr a, b;
	size_t pitch = 0, pitch2 = 0;

	start();
	CU_OK(cuMemAllocPitch(&a, &pitch, 1000, 100, 4));
	cr_assert_geq(pitch, 1000);
	expect_usage(VGPU_USAGE_BUFFER, (uint64_t)pitch * 100);
	CU_OK(cuMemFree(a));
	expect_usage(VGPU_USAGE_BUFFER, 0);

	/* 516-byte rows, pitched to 1024: 65536 rows are exactly the slice,
	 * one more is past it though width x height is half the slice. */
	CU_OK(cuMemAllocPitch(&a, &pitch, 516, 65536, 4));
	cr_assert_eq(pitch, 1024, "the simulator pitches to 512 bytes");
	expect_usage(VGPU_USAGE_BUFFER, SLICE);
	CU_ASSERT(cuMemAllocPitch(&b, &pitch2, 4, 1, 4), OOM);
	CU_OK(cuMemFree(a));
	CU_ASSERT(cuMemAllocPitch(&a, &pitch, 516, 65537, 4), OOM);
	expect_usage(VGPU_USAGE_BUFFER, 0);
	CU_OK(cuMemAllocPitch(&a, &pitch, 516, 1000, 4));
	expect_usage(VGPU_USAGE_BUFFER, 1024 * 1000);
	CU_OK(cuMemFree(a));
	finish();
}

/* ---- cuMemAllocManaged ----------------------------------------------------- */

Test(alloc, managed_is_charged_in_full)
{
	CUdeviceptr a, b;

	start();
	shimtest_need("cuMemAllocManaged", 6000);
	CU_OK(cuMemAllocManaged(&a, 48 * MIB, CU_MEM_ATTACH_GLOBAL));
	expect_usage(VGPU_USAGE_MANAGED, 48 * MIB);
	CU_ASSERT(cuMemAllocManaged(&b, 16 * MIB + 1, CU_MEM_ATTACH_GLOBAL),
		  OOM);
	CU_OK(cuMemAllocManaged(&b, 16 * MIB, CU_MEM_ATTACH_GLOBAL));
	expect_usage(VGPU_USAGE_MANAGED, SLICE);
	CU_OK(cuMemFree(a));
	CU_OK(cuMemFree(b));
	finish();
}

/* ---- stream-ordered allocation and pools --------------------------------- */

static uint64_t pool_held(CUmemoryPool pool)
{
	cuuint64_t held = 0;

	CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
				    &held));
	return held;
}

/* The views settle every pool of the device: the ledger then shows what
 * each holds. */
static void settle(void)
{
	size_t f, t;

	CU_OK(cuMemGetInfo(&f, &t));
}

Test(alloc, async_charges_what_the_default_pool_holds)
{
	CUdeviceptr a, b;
	CUmemoryPool pool;
	CUstream s;

	start();
	shimtest_need("cuMemAllocAsync", 11020);
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuMemAllocAsync(&a, 48 * MIB, s));
	CU_OK(cuStreamSynchronize(s));
	cr_assert_geq(pool_held(pool), 48 * MIB);
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_ASSERT(cuMemAllocAsync(&b, 32 * MIB, s), OOM);
	CU_OK(cuMemAllocAsync(&b, 8 * MIB, s));
	CU_OK(cuStreamSynchronize(s));
	settle();
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuMemFreeAsync(b, s));
	CU_OK(cuStreamSynchronize(s));
	settle();
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_OK(cuMemPoolTrimTo(pool, 0));
	cr_assert_eq(pool_held(pool), 0);
	expect_usage(VGPU_USAGE_POOL, 0);
	CU_OK(cuStreamDestroy(s));
	finish();
}

/* A pool that keeps its memory after the frees (release threshold at the
 * maximum) stays charged for it until trimmed. */
Test(alloc, pool_keeps_its_charge_until_trimmed)
{
	cuuint64_t keep = UINT64_MAX;
	CUdeviceptr a;
	CUmemoryPool pool;
	CUstream s;

	start();
	shimtest_need("cuMemAllocAsync", 11020);
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				    &keep));
	CU_OK(cuMemAllocAsync(&a, 32 * MIB, s));
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuStreamSynchronize(s));
	settle();
	cr_assert_geq(pool_held(pool), 32 * MIB, "the pool keeps its memory");
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_OK(cuMemPoolTrimTo(pool, 0));
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	cr_assert_eq(pool_held(pool), 0);
	CU_OK(cuStreamDestroy(s));
	finish();
}

/* Memory a pool already holds is not new device memory: allocating it
 * again from the pool must not be refused. A loop of 48 MiB allocations
 * and frees under a 64 MiB slice, with a pool that keeps its memory. */
Test(alloc, pool_reuse_is_not_refused)
{
	cuuint64_t keep = UINT64_MAX;
	CUdeviceptr a;
	CUmemoryPool pool;
	CUstream s;

	start();
	shimtest_need("cuMemAllocAsync", 11020);
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				    &keep));
	for (int i = 0; i < 3; i++) {
		CU_OK(cuMemAllocAsync(&a, 48 * MIB, s));
		CU_OK(cuMemFreeAsync(a, s));
		CU_OK(cuStreamSynchronize(s));
	}
	settle();
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_OK(cuMemPoolTrimTo(pool, 0));
	expect_usage(VGPU_USAGE_POOL, 0);
	CU_OK(cuStreamDestroy(s));
	finish();
}

Test(alloc, explicit_pool_charged_until_destroyed)
{
	CUmemPoolProps props;
	CUdeviceptr a, b;
	CUmemoryPool pool;
	CUstream s;

	start();
	shimtest_need("cuMemAllocFromPoolAsync", 11020);
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CU_OK(cuMemPoolCreate(&pool, &props));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuMemAllocFromPoolAsync(&a, 40 * MIB, pool, s));
	CU_ASSERT(cuMemAllocFromPoolAsync(&b, 40 * MIB, pool, s), OOM);
	CU_OK(cuStreamSynchronize(s));
	settle();
	cr_assert_geq(pool_held(pool), 40 * MIB);
	expect_usage(VGPU_USAGE_POOL, pool_held(pool));
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuMemPoolDestroy(pool));
	expect_usage(VGPU_USAGE_POOL, 0);
	/* The slice is whole again. */
	CU_OK(cuMemAlloc(&a, SLICE));
	CU_OK(cuMemFree(a));
	CU_OK(cuStreamDestroy(s));
	finish();
}

/* ---- the virtual memory API ------------------------------------------------ */

static void vmm_prop(CUmemAllocationProp *p, CUmemLocationType where)
{
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->location.type = where;
	p->location.id = 0;
}

Test(alloc, vmm_device_locations_charged_host_not)
{
	CUmemGenericAllocationHandle h1, h2, h3, hh;
	CUmemAllocationProp p;
	size_t gran = 0;
	CUresult r;

	start();
	shimtest_need("cuMemCreate", 10020);
	vmm_prop(&p, CU_MEM_LOCATION_TYPE_DEVICE);
	CU_OK(cuMemGetAllocationGranularity(&gran, &p,
					    CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	cr_assert(gran > 0 && SLICE % gran == 0, "granularity %zu", gran);
	CU_OK(cuMemCreate(&h1, SLICE / 2, &p, 0));
	expect_usage(VGPU_USAGE_VMM, SLICE / 2);
	CU_OK(cuMemCreate(&h2, SLICE / 2, &p, 0));
	expect_usage(VGPU_USAGE_VMM, SLICE);
	CU_ASSERT(cuMemCreate(&h3, gran, &p, 0), OOM);

	/* A host location is not device memory: not charged, not refused. */
	vmm_prop(&p, CU_MEM_LOCATION_TYPE_HOST);
	r = cuMemCreate(&hh, gran, &p, 0);
	if (r == CUDA_SUCCESS) {
		expect_usage(VGPU_USAGE_VMM, SLICE);
		CU_OK(cuMemRelease(hh));
	} else {
		cr_log_warn("the simulator refuses host locations: %s",
			    simtest_err(r));
	}
	expect_usage(VGPU_USAGE_VMM, SLICE);
	CU_OK(cuMemRelease(h1));
	expect_usage(VGPU_USAGE_VMM, SLICE / 2);
	vmm_prop(&p, CU_MEM_LOCATION_TYPE_DEVICE);
	CU_OK(cuMemCreate(&h3, gran, &p, 0));
	CU_OK(cuMemRelease(h2));
	CU_OK(cuMemRelease(h3));
	finish();
}

/* ---- arrays ---------------------------------------------------------------- */

/* The shim's estimate (intercept/objects.c, docs/memory.md): each row of
 * width x channels x the format's bytes rounded up to 512 bytes, times
 * the rows (height) and slices (depth), 0 counting as 1, rounded up to
 * 4 KiB pages; the levels of a mipmapped array halve each dimension, down
 * to 1. */
static uint64_t model(size_t w, size_t h, size_t d, unsigned elem,
		      unsigned channels, unsigned levels)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < levels; i++) {
		size_t lw = w >> i ? w >> i : 1;
		size_t lh = h ? (h >> i ? h >> i : 1) : 1;
		size_t ld = d ? (d >> i ? d >> i : 1) : 1;
		uint64_t row = ((uint64_t)lw * elem * channels + 511) / 512 *
			       512;
		sum += (row * lh * ld + 4095) / 4096 * 4096;
	}
	return sum;
}

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d,
				     CUarray_format f, unsigned ch)
{
	CUDA_ARRAY3D_DESCRIPTOR x;

	memset(&x, 0, sizeof(x));
	x.Width = w;
	x.Height = h;
	x.Depth = d;
	x.Format = f;
	x.NumChannels = ch;
	return x;
}

Test(alloc, arrays_charged_by_the_size_model)
{
	CUDA_ARRAY_DESCRIPTOR d2 = { .Width = 1024, .Height = 1024,
				     .Format = CU_AD_FORMAT_FLOAT,
				     .NumChannels = 4 };
	CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(256, 256, 128,
					   CU_AD_FORMAT_UNSIGNED_INT8, 1);
	CUDA_ARRAY3D_DESCRIPTOR dm = desc3(1024, 1024, 0,
					   CU_AD_FORMAT_HALF, 2);
	CUDA_ARRAY_DESCRIPTOR d1 = { .Width = 1000, .Height = 0,
				     .Format = CU_AD_FORMAT_SIGNED_INT16,
				     .NumChannels = 1 };
	CUarray a2, a3, a1, big;
	CUmipmappedArray m;
	uint64_t want = 0;

	start();
	CU_OK(cuArrayCreate(&a2, &d2));
	want += model(1024, 1024, 0, 4, 4, 1);
	cr_assert_eq(want, 16 * MIB, "rows of 16 KiB need no padding");
	expect_usage(VGPU_USAGE_ARRAY, want);
	CU_OK(cuArray3DCreate(&a3, &d3));
	want += model(256, 256, 128, 1, 1, 1);
	expect_usage(VGPU_USAGE_ARRAY, want);
	CU_OK(cuArrayCreate(&a1, &d1));
	want += model(1000, 0, 0, 2, 1, 1);
	expect_usage(VGPU_USAGE_ARRAY, want);
	CU_OK(cuMipmappedArrayCreate(&m, &dm, 3));
	want += model(1024, 1024, 0, 2, 2, 3);
	expect_usage(VGPU_USAGE_ARRAY, want);

	/* What is left of the slice (whole pages), in rows of 4096 bytes,
	 * first tried one row too large. */
	uint64_t left = SLICE - want;
	CUDA_ARRAY_DESCRIPTOR rows = { .Width = 4096,
				       .Height = left / 4096 + 1,
				       .Format = CU_AD_FORMAT_UNSIGNED_INT8,
				       .NumChannels = 1 };
	cr_assert_eq(left % 4096, 0);
	CU_ASSERT(cuArrayCreate(&big, &rows), OOM);
	rows.Height--;
	CU_OK(cuArrayCreate(&big, &rows));
	expect_usage(VGPU_USAGE_ARRAY, SLICE);
	CUDA_ARRAY3D_DESCRIPTOR one = desc3(1, 0, 0,
					    CU_AD_FORMAT_UNSIGNED_INT8, 1);
	CUarray extra;
	CU_ASSERT(cuArray3DCreate(&extra, &one), OOM);
	CUmipmappedArray m2;
	CU_ASSERT(cuMipmappedArrayCreate(&m2, &one, 1), OOM);

	CU_OK(cuArrayDestroy(big));
	CU_OK(cuMipmappedArrayDestroy(m));
	CU_OK(cuArrayDestroy(a1));
	CU_OK(cuArrayDestroy(a3));
	CU_OK(cuArrayDestroy(a2));
	finish();
}

/* ---- graph memory nodes ---------------------------------------------------- */

/* A graph's allocation nodes cost nothing until it is instantiated; each
 * exec is charged their sum, until it is destroyed (the graph's own
 * destruction changes nothing). */
Test(alloc, graph_mem_nodes_charged_per_exec)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode n1, n2, n3;
	CUgraphExec x;
	CUgraph g, big;

	start();
	shimtest_need("cuGraphAddMemAllocNode", 11040);
	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = 32 * MIB;
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&n1, g, NULL, 0, &p));
	CU_OK(cuGraphAddMemAllocNode(&n2, g, &n1, 1, &p));
	expect_usage(VGPU_USAGE_GRAPH, 0);
	CU_OK(cuGraphCreate(&big, 0));
	p.bytesize = SLICE + 2 * MIB;
	CU_OK(cuGraphAddMemAllocNode(&n3, big, NULL, 0, &p));
	CU_ASSERT(cuGraphInstantiateWithFlags(&x, big, 0), OOM);
	expect_usage(VGPU_USAGE_GRAPH, 0);
	CU_OK(cuGraphDestroy(big));
	CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
	expect_usage(VGPU_USAGE_GRAPH, SLICE);
	CU_OK(cuGraphDestroy(g));
	expect_usage(VGPU_USAGE_GRAPH, SLICE);
	CU_OK(cuGraphExecDestroy(x));
	expect_usage(VGPU_USAGE_GRAPH, 0);
	finish();
}

/* ---- multicast objects ----------------------------------------------------- */

/* A multicast object takes its size on each device added to it (as the
 * simulated device does), until its last reference goes. */
Test(alloc, multicast_objects_charged_per_device_until_released)
{
	CUmulticastObjectProp p;
	CUmemGenericAllocationHandle h1, h2;
	size_t gran = 0;

	start();
	shimtest_need("cuMulticastCreate", 12010);
	memset(&p, 0, sizeof(p));
	p.numDevices = 1;
	p.size = 2 * MIB;
	CU_OK(cuMulticastGetGranularity(&gran, &p,
					CU_MULTICAST_GRANULARITY_MINIMUM));
	cr_assert(gran > 0 && (48 * MIB) % gran == 0, "granularity %zu", gran);
	p.size = 48 * MIB;
	CU_OK(cuMulticastCreate(&h1, &p));
	expect_usage(VGPU_USAGE_MULTICAST, 0);
	CU_OK(cuMulticastAddDevice(h1, 0));
	expect_usage(VGPU_USAGE_MULTICAST, 48 * MIB);
	p.size = 16 * MIB + gran;
	CU_OK(cuMulticastCreate(&h2, &p));
	CU_ASSERT(cuMulticastAddDevice(h2, 0), OOM);
	CU_OK(cuMemRelease(h2));
	p.size = 16 * MIB;
	CU_OK(cuMulticastCreate(&h2, &p));
	CU_OK(cuMulticastAddDevice(h2, 0));
	expect_usage(VGPU_USAGE_MULTICAST, SLICE);
	CU_OK(cuMemRelease(h1));
	expect_usage(VGPU_USAGE_MULTICAST, 16 * MIB);
	CU_OK(cuMemRelease(h2));
	finish();
}

/* ---- a free the shim never saw ---------------------------------------------- */

/* It reaches the driver, which answers as it would without the shim (the
 * helper program run both ways), and the ledger is untouched. */
Test(alloc, unknown_free_reaches_the_driver)
{
	char with[256], without[256];
	CUdeviceptr a;
	FILE *f;

	start();
	CU_OK(cuMemAlloc(&a, MIB));
	cr_assert_neq(cuMemFree((CUdeviceptr)0x7f0000123000ull), CUDA_SUCCESS);
	expect_usage(VGPU_USAGE_BUFFER, MIB);
	CU_OK(cuMemFree(a));
	cr_assert_neq(cuMemFree(a), CUDA_SUCCESS, "a second free");
	expect_usage(VGPU_USAGE_BUFFER, 0);

	f = popen(SHIMTEST_HELPER " badfree", "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(with, sizeof(with), f));
	cr_assert_not_null(fgets(with + strlen(with),
				 (int)(sizeof(with) - strlen(with)), f));
	cr_assert_eq(pclose(f), 0);
	f = popen("env -u LD_PRELOAD LD_LIBRARY_PATH=" SHIMTEST_SIM_DIR " "
		  SHIMTEST_HELPER " badfree", "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(without, sizeof(without), f));
	cr_assert_not_null(fgets(without + strlen(without),
				 (int)(sizeof(without) - strlen(without)), f));
	cr_assert_eq(pclose(f), 0);
	cr_assert_str_eq(with, without, "with the shim: %s, without: %s", with,
			 without);
	cr_assert_str_neq(with, "rc=0\ndouble=0\n");
	finish();
}
