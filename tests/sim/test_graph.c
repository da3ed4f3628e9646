/* test_graph.c - graphs: nodes and dependencies, instantiation, launch,
 * and the graph memory pool (addresses at node creation, physical memory
 * reserved at launch and kept until trimmed or the executable graph goes).
 */
#include "simtest.h"

#include <string.h>

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"
#endif

TestSuite(graph, .init = simtest_clean_env, .fini = simtest_remove_state);

static size_t used(void)
{
	size_t free, total;

	CU_OK(cuMemGetInfo(&free, &total));
	return total - free;
}

static cuuint64_t mem_attr(CUgraphMem_attribute a)
{
	cuuint64_t v = 12345;

	CU_OK(cuDeviceGetGraphMemAttribute(0, a, &v));
	return v;
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = bytes;
	return p;
}

/* alloc(bytes) -> free: returns the graph and the allocation's address. */
static CUgraph alloc_free_graph(size_t bytes, CUdeviceptr *addr, bool free_it)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(bytes);
	CUgraphNode a, f;
	CUgraph g;

	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &p));
	cr_assert_neq(p.dptr, 0);
	if (free_it)
		CU_OK(cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr));
	if (addr)
		*addr = p.dptr;
	return g;
}

Test(graph, nodes_and_dependencies)
{
	CUgraph g, other;
	CUgraphNode n[3], foreign, got[5], dup[2];
	CUgraphNodeType t;
	size_t count;

	simtest_init();
	CU_ASSERT(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphCreate(&other, 0));
	CU_OK(cuGraphAddEmptyNode(&n[0], g, NULL, 0));
	CU_OK(cuGraphAddEmptyNode(&n[1], g, &n[0], 1));
	CU_OK(cuGraphAddEmptyNode(&n[2], g, n, 2));
	CU_OK(cuGraphAddEmptyNode(&foreign, other, NULL, 0));
	CU_ASSERT(cuGraphAddEmptyNode(&n[2], g, &foreign, 1),
		  CUDA_ERROR_INVALID_VALUE);
	dup[0] = dup[1] = n[0];
	CU_ASSERT(cuGraphAddEmptyNode(&n[2], g, dup, 2), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphAddEmptyNode(&n[2], g, NULL, 1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphGetNodes(g, NULL, &count));
	cr_assert_eq(count, 3);
	count = 5;
	CU_OK(cuGraphGetNodes(g, got, &count));
	cr_assert_eq(count, 3);
	cr_assert(got[0] == n[0] && got[1] == n[1] && got[2] == n[2]);
	cr_assert_null(got[3]);
	count = 2;
	CU_OK(cuGraphGetNodes(g, got, &count));
	cr_assert_eq(count, 2);
	CU_OK(cuGraphNodeGetType(n[1], &t));
	cr_assert_eq(t, CU_GRAPH_NODE_TYPE_EMPTY);
	CU_OK(cuGraphDestroy(g));
	CU_ASSERT(cuGraphNodeGetType(n[1], &t), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphGetNodes(g, NULL, &count), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphDestroy(other));
}

Test(graph, empty_graph_launches)
{
	CUgraphExec x;
	CUgraph g;
	CUgraphNode n;

	simtest_init();
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddEmptyNode(&n, g, NULL, 0));
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuGraphLaunch(x, CU_STREAM_PER_THREAD));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuGraphExecDestroy(x));
	CU_ASSERT(cuGraphLaunch(x, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphDestroy(g));
}

Test(graph, instantiate_flags_and_params)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS ip = { 0 };
	CUgraphExec x;
	CUgraph g;

	simtest_init();
	CU_OK(cuGraphCreate(&g, 0));
	CU_ASSERT(cuGraphInstantiateWithFlags(&x, g, 0x100),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphInstantiateWithFlags(&x, g,
		CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphInstantiateWithFlags(&x, g,
		CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
		CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH),
		CUDA_ERROR_INVALID_VALUE);
	ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
	ip.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
	CU_OK(cuGraphInstantiateWithParams(&x, g, &ip));
	cr_assert_eq(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
	CU_OK(cuGraphExecDestroy(x));
	ip.flags = 0x100;
	CU_ASSERT(cuGraphInstantiateWithParams(&x, g, &ip),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(ip.result_out, CUDA_GRAPH_INSTANTIATE_ERROR);
	CU_OK(cuGraphDestroy(g));
}

Test(graph, alloc_node_address_and_params)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(1000), got, bad;
	CUgraphNode a, f, e;
	CUgraphNodeType t;
	CUgraph g;

	simtest_init();
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &p));
	cr_assert_neq(p.dptr, 0);
	CU_OK(cuGraphNodeGetType(a, &t));
	cr_assert_eq(t, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	CU_OK(cuGraphMemAllocNodeGetParams(a, &got));
	cr_assert_eq(got.dptr, p.dptr);
	cr_assert_eq(got.bytesize, 1000);
	cr_assert_eq(got.poolProps.location.id, 0);
	CU_OK(cuGraphAddEmptyNode(&e, g, NULL, 0));
	CU_ASSERT(cuGraphMemAllocNodeGetParams(e, &got), CUDA_ERROR_INVALID_VALUE);
	/* Free nodes: only an allocation of this graph, once. */
	CU_ASSERT(cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr + 8),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr));
	CU_OK(cuGraphNodeGetType(f, &t));
	cr_assert_eq(t, CU_GRAPH_NODE_TYPE_MEM_FREE);
	CU_ASSERT(cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr),
		  CUDA_ERROR_INVALID_VALUE);
	/* Bad parameters. */
	bad = alloc_params(0);
	CU_ASSERT(cuGraphAddMemAllocNode(&a, g, NULL, 0, &bad),
		  CUDA_ERROR_INVALID_VALUE);
	bad = alloc_params(64);
	bad.poolProps.location.id = 5;
	CU_ASSERT(cuGraphAddMemAllocNode(&a, g, NULL, 0, &bad),
		  CUDA_ERROR_INVALID_VALUE);
	bad = alloc_params(64);
	bad.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
	CU_ASSERT(cuGraphAddMemAllocNode(&a, g, NULL, 0, &bad),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphAddMemAllocNode(&a, g, NULL, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphDestroy(g));
}

/* The address range costs nothing; a launch reserves the physical memory,
 * which stays reserved after the free node until trimmed. */
Test(graph, memory_reserved_at_launch_kept_until_trim)
{
	CUgraphExec x;
	CUgraph g;
	size_t base;

	simtest_init();
	base = used();
	g = alloc_free_graph(8 * MIB, NULL, true);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(used(), base + 8 * MIB);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 8 * MIB);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 8 * MIB);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 8 * MIB);
	CU_OK(cuDeviceGraphMemTrim(0));
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 8 * MIB);
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(used(), base + 8 * MIB);
	CU_OK(cuGraphExecDestroy(x));
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CU_OK(cuGraphDestroy(g));
	CU_ASSERT(cuDeviceGraphMemTrim(7), CUDA_ERROR_INVALID_DEVICE);
}

/* Memory nodes on two devices: each device holds its own node's memory
 * (the executable graph reserved all of it on one device before). */
Test(graph, memory_nodes_on_two_devices)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p0 = alloc_params(4 * MIB);
	CUDA_MEM_ALLOC_NODE_PARAMS p1 = alloc_params(8 * MIB);
	cuuint64_t r0 = 1, r1 = 1;
	CUgraphNode n0, n1;
	CUgraphExec x;
	CUgraph g;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	p1.poolProps.location.id = 1;
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&n0, g, NULL, 0, &p0));
	CU_OK(cuGraphAddMemAllocNode(&n1, g, &n0, 1, &p1));
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuDeviceGetGraphMemAttribute(0,
			CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r0));
	CU_OK(cuDeviceGetGraphMemAttribute(1,
			CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r1));
	cr_assert_eq(r0, 4 * MIB);
	cr_assert_eq(r1, 8 * MIB);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuDeviceGetGraphMemAttribute(1,
			CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r1));
	cr_assert_eq(r1, 0);
	CU_OK(cuGraphDestroy(g));
}

Test(graph, launch_out_of_memory)
{
	CUdeviceptr p;
	CUgraphExec x;
	CUgraph g;

	simtest_init();          /* a 64 MiB device */
	g = alloc_free_graph(40 * MIB, NULL, true);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuMemAlloc(&p, 32 * MIB));
	CU_ASSERT(cuGraphLaunch(x, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree(p));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuCtxSynchronize());
	/* Reserved for the graph: a cuMemAlloc no longer fits. */
	CU_ASSERT(cuMemAlloc(&p, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuDeviceGraphMemTrim(0));
	CU_OK(cuMemAlloc(&p, 32 * MIB));
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
}

Test(graph, one_instantiation_with_memory_nodes)
{
	CUgraphExec x, y;
	CUgraph g, plain;
	CUgraphNode n;

	simtest_init();
	g = alloc_free_graph(MIB, NULL, true);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_ASSERT(cuGraphInstantiate(&y, g, 0), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphInstantiate(&y, g, 0));
	/* The executable graph outlives its graph. */
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuGraphLaunch(y, NULL));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuGraphExecDestroy(y));
	/* Without memory nodes, any number. */
	CU_OK(cuGraphCreate(&plain, 0));
	CU_OK(cuGraphAddEmptyNode(&n, plain, NULL, 0));
	CU_OK(cuGraphInstantiate(&x, plain, 0));
	CU_OK(cuGraphInstantiate(&y, plain, 0));
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphExecDestroy(y));
	CU_OK(cuGraphDestroy(plain));
}

/* An allocation the graph does not free outlives the launch: launching
 * again is refused unless AUTO_FREE_ON_LAUNCH. */
Test(graph, unfreed_allocation)
{
	CUgraphExec x, y;
	CUgraph g;
	size_t base;

	simtest_init();
	base = used();
	g = alloc_free_graph(4 * MIB, NULL, false);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 4 * MIB);
	CU_ASSERT(cuGraphLaunch(x, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuDeviceGraphMemTrim(0));     /* in use: stays */
	cr_assert_eq(used(), base + 4 * MIB);
	CU_OK(cuGraphExecDestroy(x));
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
	CU_OK(cuGraphInstantiate(&y, g,
		CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	for (int i = 0; i < 3; i++)
		CU_OK(cuGraphLaunch(y, NULL));
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 4 * MIB);
	cr_assert_eq(used(), base + 4 * MIB);
	CU_OK(cuGraphExecDestroy(y));
	cr_assert_eq(used(), base);
	CU_OK(cuGraphDestroy(g));
}

Test(graph, mem_attributes)
{
	cuuint64_t zero = 0, one = 1;
	CUgraphExec x;
	CUgraph g;

	simtest_init();
	g = alloc_free_graph(2 * MIB, NULL, true);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, NULL));
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 2 * MIB);
	CU_OK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
					   &zero));
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 0);
	CU_OK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
					   &zero));
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 2 * MIB);
	CU_ASSERT(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
					       &one), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceSetGraphMemAttribute(0,
		CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
		CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetGraphMemAttribute(0, (CUgraphMem_attribute)9, &one),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetGraphMemAttribute(3, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
					       &one), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
}

#ifdef SIMTEST_KERNELS

#define N 4096

static CUfunction workload(const char *name)
{
	CUmodule m;
	CUfunction f;

	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, name));
	return f;
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **args)
{
	CUDA_KERNEL_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.func = f;
	p.gridDimX = 16;
	p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = 256;
	p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = args;
	return p;
}

/* Two saxpy nodes (a = 2) over y = 1: each launch adds 4i. The arguments
 * are copied when the node is added. */
Test(graph, kernel_nodes_run_in_order)
{
	float h[N];
	CUdeviceptr x, y;
	unsigned long long n = N;
	float a = 2.0f;
	void *args[] = { &n, &a, &x, &y };
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode k1, k2;
	CUgraphExec ex;
	CUgraph g;

	simtest_init();
	CU_OK(cuMemAlloc(&x, sizeof(h)));
	CU_OK(cuMemAlloc(&y, sizeof(h)));
	for (int i = 0; i < N; i++)
		h[i] = (float)i;
	CU_OK(cuMemcpyHtoD(x, h, sizeof(h)));
	CU_OK(cuMemsetD32(y, 0x3f800000, N));
	CU_OK(cuGraphCreate(&g, 0));
	p = kernel_params(workload("vgpu_saxpy"), args);
	CU_OK(cuGraphAddKernelNode(&k1, g, NULL, 0, &p));
	a = 100.0f;      /* too late for k1 */
	CU_OK(cuGraphAddKernelNode(&k2, g, &k1, 1, &p));
	CU_OK(cuGraphInstantiate(&ex, g, 0));
	CU_OK(cuGraphLaunch(ex, NULL));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuMemcpyDtoH(h, y, sizeof(h)));
	for (int i = 0; i < N; i++)
		cr_assert_eq(h[i], 1.0f + 2.0f * (float)i + 100.0f * (float)i,
			     "y[%d] = %f", i, (double)h[i]);
	CU_OK(cuGraphExecDestroy(ex));
	CU_OK(cuGraphDestroy(g));
	p.blockDimX = 4096;
	CU_OK(cuGraphCreate(&g, 0));
	CU_ASSERT(cuGraphAddKernelNode(&k1, g, NULL, 0, &p),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGraphAddKernelNode(&k1, g, NULL, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGraphDestroy(g));
}

/* alloc -> touch(write 7) -> touch(expect 7, write 9) -> free, twice:
 * the kernels use graph memory between its allocation and free nodes. */
Test(graph, kernels_on_graph_memory)
{
	CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(N * sizeof(unsigned));
	unsigned long long n = N, mism = 0;
	unsigned s0 = 0, s7 = 7, s9 = 9;
	CUdeviceptr buf, dmism, none = 0;
	void *w[] = { &buf, &n, &s0, &s7, &none };
	void *rw[] = { &buf, &n, &s7, &s9, &dmism };
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode an, k1, k2, fn;
	CUfunction touch;
	CUgraphExec ex;
	CUgraph g;

	simtest_init();
	touch = workload("vgpu_touch");
	CU_OK(cuMemAlloc(&dmism, sizeof(mism)));
	CU_OK(cuMemsetD8(dmism, 0, sizeof(mism)));
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
	buf = ap.dptr;
	p = kernel_params(touch, w);
	CU_OK(cuGraphAddKernelNode(&k1, g, &an, 1, &p));
	p = kernel_params(touch, rw);
	CU_OK(cuGraphAddKernelNode(&k2, g, &k1, 1, &p));
	CU_OK(cuGraphAddMemFreeNode(&fn, g, &k2, 1, buf));
	CU_OK(cuGraphInstantiate(&ex, g, 0));
	CU_OK(cuGraphLaunch(ex, NULL));
	CU_OK(cuGraphLaunch(ex, NULL));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuMemcpyDtoH(&mism, dmism, sizeof(mism)));
	cr_assert_eq(mism, 0, "%llu mismatches", mism);
	CU_OK(cuGraphExecDestroy(ex));
	CU_OK(cuGraphDestroy(g));
}

#endif
