/* test_lifetimes.c - a charge lasts exactly as long as the device holds the
 * memory, whatever order the objects are released in.
 *
 * Each test is one of the ways a slice was escaped through an object's
 * lifetime (issue 12): a 1 GiB slice on a 4 GiB simulated device, 512 MiB
 * objects, six rounds. The judge is the simulated device's own count of the
 * memory it holds (its cuMemGetInfo, reached by the simulator's path, not
 * through the shim): it never exceeds what the ledger charges, the charge
 * never exceeds the slice, and both are zero at the end.
 */
#include "shimtest.h"

#include <string.h>
#include <unistd.h>

#define TENANT "t-life"
#define SLICE GIB
#define OBJ (512 * MIB)
#define ROUNDS 6
#define OOM CUDA_ERROR_OUT_OF_MEMORY

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "4GiB", 1);
	shimtest_env(TENANT, "1GiB");
}

TestSuite(lifetimes, .init = setup, .fini = shimtest_cleanup);

static struct ledger_view v;

static uint64_t device_used(void)
{
	return shimtest_device_used();
}

static uint64_t charged(void)
{
	return ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_COUNT);
}

/* The promise, checked after every step. */
static void check(const char *step, int round)
{
	uint64_t held = device_used(), c = charged();

	cr_assert_leq(held, c, "%s, round %d: the device holds %llu MiB, the "
		      "ledger charges %llu MiB", step, round,
		      (unsigned long long)(held / MIB),
		      (unsigned long long)(c / MIB));
	cr_assert_leq(c, SLICE, "%s, round %d: %llu MiB charged", step, round,
		      (unsigned long long)(c / MIB));
}

static void start(void)
{
	simtest_init_shared();
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	cr_assert_eq(device_used(), 0);
}

static void finish(void)
{
	cr_assert_eq(device_used(), 0, "the device still holds %llu bytes",
		     (unsigned long long)device_used());
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

/* ---- virtual memory --------------------------------------------------- */

static CUmemAllocationProp device_prop(void)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

/* Maps handle h at a new reservation of OBJ bytes. */
static CUdeviceptr map_new(CUmemGenericAllocationHandle h)
{
	CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			      CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr va;

	CU_OK(cuMemAddressReserve(&va, OBJ, 0, 0, 0));
	CU_OK(cuMemMap(va, OBJ, 0, h, 0));
	CU_OK(cuMemSetAccess(va, OBJ, &a, 1));
	return va;
}

static void unmap_free(CUdeviceptr va)
{
	CU_OK(cuMemUnmap(va, OBJ));
	CU_OK(cuMemAddressFree(va, OBJ));
}

/* PyTorch's expandable segments: the handle is released right after it is
 * mapped; the mapping keeps the memory. */
Test(lifetimes, vmm_released_while_mapped)
{
	CUmemAllocationProp p = device_prop();
	CUmemGenericAllocationHandle h;
	CUdeviceptr va[ROUNDS];
	int n = 0;

	start();
	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuMemCreate(&h, OBJ, &p, 0);

		check("cuMemCreate", i);
		if (r == OOM)
			continue;
		CU_OK(r);
		va[n++] = map_new(h);
		CU_OK(cuMemRelease(h));
		check("cuMemRelease while mapped", i);
	}
	cr_assert_eq(n, 2, "%d objects of 512 MiB fit a 1 GiB slice", n);
	cr_assert_eq(charged(), SLICE);
	cr_assert_eq(device_used(), SLICE, "the mappings hold the memory");
	unmap_free(va[0]);
	check("cuMemUnmap", 0);
	cr_assert_eq(charged(), OBJ, "the unmapped handle's memory is gone");
	unmap_free(va[1]);
	finish();
}

/* A retained handle is a reference of its own: released twice, the memory
 * stays while mapped; unmapped, it goes. Releases before and after the
 * unmap. */
Test(lifetimes, vmm_retained_handles)
{
	CUmemAllocationProp p = device_prop();
	CUmemGenericAllocationHandle h, again;

	start();
	for (int i = 0; i < ROUNDS; i++) {
		CUdeviceptr va;

		CU_OK(cuMemCreate(&h, OBJ, &p, 0));
		va = map_new(h);
		CU_OK(cuMemRetainAllocationHandle(&again, (void *)va));
		cr_assert_eq(again, h);
		CU_OK(cuMemRelease(h));
		check("release of the created handle", i);
		if (i % 2) {
			CU_OK(cuMemRelease(again));
			check("release of the retained handle", i);
			cr_assert_eq(charged(), OBJ);
			unmap_free(va);
		} else {
			unmap_free(va);
			check("unmap before the retained release", i);
			cr_assert_eq(charged(), OBJ, "the retain holds it");
			CU_OK(cuMemRelease(again));
		}
		cr_assert_eq(charged(), 0);
		check("all gone", i);
	}
	/* Past the slice while the first two are held by mappings only. */
	CUdeviceptr va[2];

	for (int i = 0; i < 2; i++) {
		CU_OK(cuMemCreate(&h, OBJ, &p, 0));
		va[i] = map_new(h);
		CU_OK(cuMemRelease(h));
	}
	CU_ASSERT(cuMemCreate(&h, OBJ, &p, 0), OOM);
	check("refused", 0);
	unmap_free(va[1]);
	unmap_free(va[0]);
	finish();
}

/* A multicast object holds its size on the device added, and each memory
 * handle bound to it: released while bound, the memory stays. */
Test(lifetimes, multicast_bindings_keep_memory)
{
	CUmemAllocationProp p = device_prop();
	CUmulticastObjectProp mp;
	CUmemGenericAllocationHandle mc, h;
	int bound = 0;

	start();
	shimtest_need("cuMulticastBindMem", 12010);
	memset(&mp, 0, sizeof(mp));
	mp.numDevices = 1;
	mp.size = 256 * MIB;
	CU_OK(cuMulticastCreate(&mc, &mp));
	CU_OK(cuMulticastAddDevice(mc, 0));
	check("multicast object added", 0);
	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuMemCreate(&h, 256 * MIB, &p, 0);

		check("cuMemCreate", i);
		if (r == OOM)
			continue;
		CU_OK(r);
		r = cuMulticastBindMem(mc, 0, h, 0, 256 * MIB, 0);
		CU_OK(cuMemRelease(h));
		check("bound and released", i);
		bound += r == CUDA_SUCCESS;
	}
	cr_assert_geq(bound, 1);
	cr_assert_leq(charged(), SLICE);
	CU_OK(cuMulticastUnbind(mc, 0, 0, 256 * MIB));
	check("unbound", 0);
	CU_OK(cuMemRelease(mc));
	finish();
}

/* ---- pools ------------------------------------------------------------- */

static CUmemoryPool new_pool(void)
{
	CUmemPoolProps pp;
	CUmemoryPool pool;

	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 0;
	CU_OK(cuMemPoolCreate(&pool, &pp));
	return pool;
}

/* The driver keeps a destroyed pool's memory while allocations from it
 * live; so does the charge. */
Test(lifetimes, pool_destroyed_with_live_allocations)
{
	CUdeviceptr live[ROUNDS];
	int n = 0;

	start();
	for (int i = 0; i < ROUNDS; i++) {
		CUmemoryPool pool = new_pool();
		CUresult r = cuMemAllocFromPoolAsync(&live[n], OBJ, pool, NULL);

		check("cuMemAllocFromPoolAsync", i);
		if (r == CUDA_SUCCESS)
			n++;
		else
			CU_ASSERT(r, OOM);
		CU_OK(cuMemPoolDestroy(pool));
		check("cuMemPoolDestroy", i);
	}
	cr_assert_eq(n, 2, "%d allocations of 512 MiB in a 1 GiB slice", n);
	cr_assert_geq(device_used(), SLICE, "the destroyed pools hold it");
	CU_OK(cuMemFreeAsync(live[0], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	check("the first freed", 0);
	CU_OK(cuMemFree(live[1]));
	check("the second freed", 1);
	finish();
}

/* A pool's idle memory in pieces too small for an allocation does not
 * hold it: the pool grows. Admitted as a reuse, the growth past the slice
 * is undone. */
Test(lifetimes, fragmented_pools_do_not_grow_past_the_slice)
{
	CUmemoryPool pool = NULL;
	cuuint64_t max = UINT64_MAX;
	CUdeviceptr small[32], big[ROUNDS];
	int made = 0;

	start();
	pool = new_pool();
	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				    &max));
	for (int i = 0; i < 32; i++)
		CU_OK(cuMemAllocFromPoolAsync(&small[i], 16 * MIB, pool, NULL));
	for (int i = 0; i < 32; i += 2)
		CU_OK(cuMemFreeAsync(small[i], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	check("holes", 0);
	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuMemAllocFromPoolAsync(&big[made], 256 * MIB, pool,
						     NULL);

		CU_OK(cuStreamSynchronize(NULL));
		check("a large allocation", i);
		if (r == CUDA_SUCCESS)
			made++;
		else
			CU_ASSERT(r, OOM);
	}
	/* 256 MiB live in holes, 256 idle: at most 3 more fit once the
	 * refusal gave the idle holes back to the device. */
	cr_assert(made >= 2 && made <= 3, "%d of 256 MiB beside 512 MiB in "
		  "a 1 GiB slice", made);
	for (int i = 0; i < made; i++)
		CU_OK(cuMemFreeAsync(big[i], NULL));
	for (int i = 1; i < 32; i += 2)
		CU_OK(cuMemFreeAsync(small[i], NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemPoolDestroy(pool));
	finish();
}

/* At the slice's edge, an async allocation on a stream held by a host
 * function neither hangs nor escapes: the pools are trimmed and it is
 * refused or admitted on what is in use. */
Test(lifetimes, pool_edge_does_not_wait_for_the_stream, .timeout = 20)
{
	struct simtest_gate *gate = simtest_gate_new();
	cuuint64_t max = UINT64_MAX;
	CUdeviceptr a, b, c;
	CUmemoryPool pool;
	CUstream s;
	CUresult r;

	start();
	pool = new_pool();
	CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
				    &max));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuMemAllocFromPoolAsync(&a, 384 * MIB, pool, NULL));
	CU_OK(cuMemAllocFromPoolAsync(&b, 512 * MIB, pool, NULL));
	CU_OK(cuMemFreeAsync(b, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	check("idle in the pool", 0);
	simtest_gate_queue(gate, s);
	r = cuMemAllocFromPoolAsync(&c, 704 * MIB, pool, s);
	check("past the idle memory, stream held", 0);
	CU_ASSERT(r, OOM);
	r = cuMemAllocFromPoolAsync(&c, 512 * MIB, pool, s);
	check("within the slice once trimmed", 0);
	CU_OK(r);
	simtest_gate_open(gate);
	CU_OK(cuMemFreeAsync(c, s));
	CU_OK(cuMemFreeAsync(a, s));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuMemPoolDestroy(pool));
	finish();
}

/* A pool is charged on its own device, whichever context is current. */
Test(lifetimes, pools_charged_on_their_own_device)
{
	CUmemPoolProps pp;
	CUmemoryPool pool;
	CUdeviceptr p;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	start();
	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 1;
	CU_OK(cuMemPoolCreate(&pool, &pp));
	CU_OK(cuMemAllocFromPoolAsync(&p, OBJ, pool, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(charged(), 0, "device 0's ledger charged device 1's "
		     "pool");
	CU_OK(cuMemFreeAsync(p, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemPoolDestroy(pool));
	finish();
}

/* The pool a stream-ordered allocation comes from is the stream's
 * device's (cuMemAllocAsync) or the one named (another device's default
 * pool): charged to that device's slice, whichever context is current. */
Test(lifetimes, pools_of_another_device_charged_there)
{
	struct ledger_view v1;
	CUcontext c1;
	CUdevice d1;
	CUmemoryPool def1;
	CUstream s1;
	CUdeviceptr p[3];
	char u1[64];

	setenv("VGPU_SIM_DEVICES", "2", 1);
	start();
	CU_OK(cuDeviceGet(&d1, 1));
	CU_OK(cuDevicePrimaryCtxRetain(&c1, d1));
	CU_OK(cuCtxPushCurrent(c1));
	CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CU_OK(cuCtxPopCurrent(NULL));
	CU_OK(cuDeviceGetDefaultMemPool(&def1, d1));
	shimtest_uuid(d1, u1, sizeof(u1));
	/* Device 0 current: a device-1 stream, then device 1's pool. */
	CU_OK(cuMemAllocAsync(&p[0], OBJ, s1));
	CU_OK(cuMemAllocFromPoolAsync(&p[1], OBJ, def1, s1));
	CU_ASSERT(cuMemAllocAsync(&p[2], OBJ, s1), OOM);
	CU_OK(cuStreamSynchronize(s1));
	ledger_view_must(&v1, u1);
	cr_assert_eq(ledger_tenant_bytes(&v1, TENANT, VGPU_USAGE_POOL), SLICE,
		     "device 1's pool charged %llu MiB",
		     (unsigned long long)(ledger_tenant_bytes(&v1, TENANT,
				VGPU_USAGE_POOL) / MIB));
	cr_assert_eq(charged(), 0, "device 0 charged for device 1's pool");
	CU_OK(cuMemFreeAsync(p[0], s1));
	CU_OK(cuMemFreeAsync(p[1], s1));
	CU_OK(cuStreamSynchronize(s1));
	CU_OK(cuMemPoolTrimTo(def1, 0));
	CU_OK(cuCtxPushCurrent(c1));
	CU_OK(cuStreamDestroy(s1));
	CU_OK(cuCtxPopCurrent(NULL));
	CU_OK(cuDevicePrimaryCtxRelease(d1));
	ledger_view_close(&v1);
	ledger_view_must(&v1, u1);
	cr_assert_eq(ledger_tenant_bytes(&v1, TENANT, VGPU_USAGE_POOL), 0);
	ledger_view_close(&v1);
	finish();
}

/* A free queued behind work that has not run frees nothing yet: a pool
 * destroyed meanwhile keeps its memory, and its charge, until the stream
 * gets there. */
Test(lifetimes, pool_destroyed_with_frees_still_queued)
{
	struct simtest_gate *gate = simtest_gate_new();
	int made = 0, refused = 0;
	CUstream s;

	start();
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	simtest_gate_queue(gate, s);
	for (int i = 0; i < ROUNDS; i++) {
		CUmemoryPool pool = new_pool();
		CUdeviceptr p;
		CUresult r = cuMemAllocFromPoolAsync(&p, OBJ, pool, NULL);

		CU_OK(cuStreamSynchronize(NULL));
		check("allocated", i);
		if (r == CUDA_SUCCESS) {
			made++;
			CU_OK(cuMemFreeAsync(p, s));
		} else {
			CU_ASSERT(r, OOM);
			refused++;
		}
		CU_OK(cuMemPoolDestroy(pool));
		check("destroyed with its free queued", i);
	}
	cr_assert_eq(made, 2, "%d allocations of 512 MiB in a 1 GiB slice",
		     made);
	simtest_gate_open(gate);
	CU_OK(cuStreamSynchronize(s));
	check("the stream reached the frees", 0);
	CU_OK(cuStreamDestroy(s));
	finish();
}

/* ---- graphs ------------------------------------------------------------ */

/* A graph that allocates OBJ bytes and never frees them: each exec of it
 * holds its own. */
static CUgraph alloc_graph(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode n;
	CUgraph g;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = OBJ;
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&n, g, NULL, 0, &p));
	return g;
}

/* Destroying the graph does not free what its execs hold. */
Test(lifetimes, graph_execs_outlive_their_graph)
{
	CUgraphExec x[ROUNDS];
	int n = 0;

	start();
	shimtest_need("cuGraphInstantiateWithFlags", 11040);
	for (int i = 0; i < ROUNDS; i++) {
		CUgraph g = alloc_graph();
		CUresult r = cuGraphInstantiateWithFlags(&x[n], g, 0);

		check("cuGraphInstantiate", i);
		CU_OK(cuGraphDestroy(g));
		check("cuGraphDestroy", i);
		if (r == OOM)
			continue;
		CU_OK(r);
		CU_OK(cuGraphLaunch(x[n], NULL));
		CU_OK(cuStreamSynchronize(NULL));
		check("cuGraphLaunch", i);
		n++;
	}
	cr_assert_eq(n, 2, "%d execs of 512 MiB in a 1 GiB slice", n);
	cr_assert_eq(device_used(), SLICE, "the execs hold it");
	for (int i = 0; i < n; i++) {
		CU_OK(cuGraphExecDestroy(x[i]));
		check("cuGraphExecDestroy", i);
	}
	finish();
}

/* Every instantiation path charges; a refused one makes no exec. (A graph
 * with memory nodes has one exec at a time: one graph each.) */
Test(lifetimes, graph_instantiate_paths)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS ip;
	CUgraph g[3];
	CUgraphExec a, b, c;

	start();
	shimtest_need("cuGraphInstantiateWithParams", 12000);
	for (int i = 0; i < 3; i++)
		g[i] = alloc_graph();
	CU_OK(cuGraphInstantiateWithFlags(&a, g[0], 0));
	memset(&ip, 0, sizeof(ip));
	CU_OK(cuGraphInstantiateWithParams(&b, g[1], &ip));
	cr_assert_eq(charged(), SLICE);
	memset(&ip, 0, sizeof(ip));
	CU_ASSERT(cuGraphInstantiateWithParams(&c, g[2], &ip), OOM);
	cr_assert_eq(ip.result_out, CUDA_GRAPH_INSTANTIATE_ERROR);
	CU_ASSERT(cuGraphInstantiateWithFlags(&c, g[2], 0), OOM);
	CU_OK(cuGraphExecDestroy(a));
	cr_assert_eq(charged(), OBJ);
	CU_OK(cuGraphInstantiateWithFlags(&c, g[2], 0));
	for (int i = 0; i < 3; i++)
		CU_OK(cuGraphDestroy(g[i]));
	CU_OK(cuGraphLaunch(b, NULL));
	CU_OK(cuGraphLaunch(c, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	check("both launched", 0);
	CU_OK(cuGraphExecDestroy(c));
	CU_OK(cuGraphExecDestroy(b));
	finish();
}

/* Stream capture makes allocation nodes too. */
Test(lifetimes, captured_graphs)
{
	CUgraphExec x[ROUNDS];
	CUstream s;
	int n = 0;

	start();
	shimtest_need("cuStreamBeginCapture", 10010);
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int i = 0; i < ROUNDS; i++) {
		CUdeviceptr p;
		CUgraph g;
		CUresult r;

		CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
		CU_OK(cuMemAllocAsync(&p, OBJ, s));
		CU_OK(cuMemsetD8Async(p, 0x5a, OBJ, s));
		CU_OK(cuStreamEndCapture(s, &g));
		check("captured", i);
		r = cuGraphInstantiateWithFlags(&x[n], g, 0);
		CU_OK(cuGraphDestroy(g));
		if (r == OOM)
			continue;
		CU_OK(r);
		CU_OK(cuGraphLaunch(x[n], s));
		CU_OK(cuStreamSynchronize(s));
		check("launched", i);
		n++;
	}
	cr_assert_eq(n, 2);
	for (int i = 0; i < n; i++)
		CU_OK(cuGraphExecDestroy(x[i]));
	CU_OK(cuStreamDestroy(s));
	finish();
}

/* ---- arrays ------------------------------------------------------------ */

static CUDA_ARRAY3D_DESCRIPTOR narrow(void)
{
	CUDA_ARRAY3D_DESCRIPTOR d;

	memset(&d, 0, sizeof(d));
	d.Width = 1;
	d.Height = 16384;
	d.Depth = 128;
	d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
	d.NumChannels = 1;
	return d;
}

/* 2 MiB of elements, but every row is padded: the device reserves 1 GiB. */
Test(lifetimes, narrow_arrays_charged_their_padding)
{
	CUDA_ARRAY3D_DESCRIPTOR d = narrow();
	CUarray a[ROUNDS];
	int n = 0;

	start();
	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuArray3DCreate(&a[n], &d);

		check("cuArray3DCreate", i);
		if (r == CUDA_SUCCESS)
			n++;
		else
			CU_ASSERT(r, OOM);
	}
	cr_assert_eq(n, 1, "%d padded arrays of 1 GiB in a 1 GiB slice", n);
	cr_assert_eq(device_used(), SLICE, "one array holds the slice");
	CU_OK(cuArrayDestroy(a[0]));
	finish();
}

Test(lifetimes, narrow_mipmapped_arrays_charged_their_padding)
{
	CUDA_ARRAY3D_DESCRIPTOR d = narrow();
	CUmipmappedArray m[ROUNDS];
	int n = 0;

	start();
	d.Depth = 64;	/* half of it: the levels below add a quarter */
	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuMipmappedArrayCreate(&m[n], &d, 4);

		check("cuMipmappedArrayCreate", i);
		if (r == CUDA_SUCCESS)
			n++;
		else
			CU_ASSERT(r, OOM);
	}
	cr_assert_eq(n, 1);
	CU_OK(cuMipmappedArrayDestroy(m[0]));
	finish();
}

/* ---- contexts ---------------------------------------------------------- */

/* A green context costs what a context costs. */
Test(lifetimes, green_contexts_charged_as_contexts)
{
	CUdevResource all, part, rest;
	CUdevResourceDesc desc;
	CUgreenCtx g[3];
	unsigned groups = 1;

	setenv("VGPU_CONTEXT_OVERHEAD", "400MiB", 1);
	simtest_init_shared();
	ledger_view_must(&v, NULL);
	shimtest_need("cuGreenCtxCreate", 12040);
	CU_OK(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
	CU_OK(cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0,
					  all.sm.minSmPartitionSize));
	CU_OK(cuDevResourceGenerateDesc(&desc, &part, 1));
	/* The primary context (simtest_init's) holds 400 MiB already. */
	CU_OK(cuGreenCtxCreate(&g[0], desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_CONTEXT),
		     800 * MIB);
	CU_ASSERT(cuGreenCtxCreate(&g[1], desc, 0,
				   CU_GREEN_CTX_DEFAULT_STREAM), OOM);
	CU_OK(cuGreenCtxDestroy(g[0]));
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_CONTEXT),
		     400 * MIB);
	CU_OK(cuGreenCtxCreate(&g[2], desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
	CU_OK(cuGreenCtxDestroy(g[2]));
	CU_OK(cuDevicePrimaryCtxRelease(0));
	cr_assert_eq(charged(), 0);
	ledger_view_close(&v);
}

/* ---- stream-ordered frees of plain memory -------------------------------- */

Test(lifetimes, free_async_of_cuMemAlloc_memory)
{
	CUdeviceptr p[ROUNDS];

	start();
	for (int i = 0; i < ROUNDS; i++) {
		CU_OK(cuMemAlloc(&p[i], OBJ));
		check("cuMemAlloc", i);
		CU_OK(cuMemFreeAsync(p[i], NULL));
		CU_OK(cuStreamSynchronize(NULL));
		check("cuMemFreeAsync", i);
		cr_assert_eq(charged(), 0);
	}
	finish();
}
