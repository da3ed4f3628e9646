/* test_capture.c - stream capture: kernels, stream-ordered allocations,
 * frees and memsets captured into graphs (and not run), the queries while
 * capturing, events across streams, what is refused and with which error,
 * the capture modes, and captures in two threads at once.
 */
#include "simtest.h"

#include <pthread.h>
#include <string.h>

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"
#endif

/* cuda.h maps these names to the newest forms; the older ABIs are
 * exported too and tested by name. */
#undef cuStreamBeginCapture
CUresult CUDAAPI cuStreamBeginCapture(CUstream h);
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h,
					      CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph *g);
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h,
	CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
	const CUgraphNode **deps, size_t *ndeps);

TestSuite(capture, .init = simtest_clean_env, .fini = simtest_remove_state);

#define GLOBAL CU_STREAM_CAPTURE_MODE_GLOBAL
#define THREAD_LOCAL CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
#define RELAXED CU_STREAM_CAPTURE_MODE_RELAXED
#define UNSUPPORTED CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
#define INVALIDATED CUDA_ERROR_STREAM_CAPTURE_INVALIDATED

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

static CUstream new_stream(unsigned flags)
{
	CUstream s;

	CU_OK(cuStreamCreate(&s, flags));
	return s;
}

static CUstreamCaptureStatus status_of(CUstream s)
{
	CUstreamCaptureStatus st = (CUstreamCaptureStatus)99;

	CU_OK(cuStreamIsCapturing(s, &st));
	return st;
}

static cuuint64_t id_of(CUstream s)
{
	CUstreamCaptureStatus st;
	cuuint64_t id = 0;

	CU_OK(cuStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
	cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	return id;
}

/* The types of g's nodes, in creation order; returns how many. */
static size_t node_types(CUgraph g, CUgraphNodeType *types, size_t max)
{
	CUgraphNode nodes[16];
	size_t n = 16;

	CU_OK(cuGraphGetNodes(g, nodes, &n));
	cr_assert_leq(n, max);
	for (size_t i = 0; i < n; i++)
		CU_OK(cuGraphNodeGetType(nodes[i], &types[i]));
	return n;
}

/* Ends a capture that an error invalidated: no graph, and the stream is
 * out of capture and usable again. */
static void end_invalidated(CUstream s)
{
	CUgraph g = (CUgraph)1;

	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	CU_ASSERT(cuStreamEndCapture(s, &g), INVALIDATED);
	cr_assert_null(g);
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
}

/* ---- what is captured ---------------------------------------------------- */

/* Allocations become allocation nodes with their fixed address, frees
 * free nodes, memsets memset nodes (on the capture's own graph memory
 * too): nothing is allocated or set until the graph runs. */
Test(capture, alloc_memset_free_nodes)
{
	CUgraphNodeType t[8];
	CUDA_MEM_ALLOC_NODE_PARAMS ap;
	CUgraphNode nodes[8];
	unsigned h[256];
	CUdeviceptr g_mem, dev;
	size_t base, n = 8;
	CUgraphExec x;
	CUstream s;
	CUgraph g;

	simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuMemAlloc(&dev, sizeof(h)));
	CU_OK(cuMemsetD32(dev, 1, 256));
	base = used();
	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_OK(cuMemAllocAsync(&g_mem, MIB, s));
	cr_assert_neq(g_mem, 0);
	CU_OK(cuMemsetD32Async(g_mem, 0xabcd, MIB / 4, s));
	CU_OK(cuMemsetD32Async(dev, 0x1234, 256, s));
	CU_OK(cuMemFreeAsync(g_mem, s));
	/* Freed in the capture: no longer the graph's to set. */
	CU_ASSERT(cuMemsetD32Async(g_mem, 1, 1, s), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuStreamEndCapture(s, &g));
	cr_assert_eq(used(), base, "a captured allocation took memory");
	CU_OK(cuMemcpyDtoH(h, dev, sizeof(h)));
	cr_assert_eq(h[0], 1, "a captured memset ran");
	cr_assert_eq(node_types(g, t, 8), 4);
	cr_assert_eq(t[0], CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	cr_assert_eq(t[1], CU_GRAPH_NODE_TYPE_MEMSET);
	cr_assert_eq(t[2], CU_GRAPH_NODE_TYPE_MEMSET);
	cr_assert_eq(t[3], CU_GRAPH_NODE_TYPE_MEM_FREE);
	CU_OK(cuGraphGetNodes(g, nodes, &n));
	CU_OK(cuGraphMemAllocNodeGetParams(nodes[0], &ap));
	cr_assert_eq(ap.dptr, g_mem);
	cr_assert_eq(ap.bytesize, MIB);
	cr_assert_eq(ap.poolProps.location.id, 0);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuMemcpyDtoH(h, dev, sizeof(h)));
	for (int i = 0; i < 256; i++)
		cr_assert_eq(h[i], 0x1234, "h[%d] = %#x", i, h[i]);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuMemFree(dev));
	CU_OK(cuStreamDestroy(s));
}

/* The queries while capturing: ACTIVE, one id for the capture (another
 * for the next), its graph, and the node the next one will depend on. */
Test(capture, queries_while_capturing)
{
	const CUgraphNode *deps;
	const CUgraphEdgeData *edges;
	CUstreamCaptureStatus st;
	CUgraphNode nodes[4];
	cuuint64_t id, id2, first;
	CUgraph graph, g;
	CUdeviceptr p;
	size_t ndeps, n = 4;
	CUstream s;

	simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
	ndeps = 7;
	CU_OK(cuStreamGetCaptureInfo(s, &st, &id, &graph, &deps, NULL, &ndeps));
	cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
	cr_assert_eq(ndeps, 0);
	CU_OK(cuStreamBeginCapture_v2(s, THREAD_LOCAL));
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	first = id_of(s);
	CU_OK(cuStreamGetCaptureInfo(s, &st, &id, &graph, &deps, &edges,
				     &ndeps));
	cr_assert_eq(id, first);
	cr_assert_not_null(graph);
	cr_assert_eq(ndeps, 0);
	CU_OK(cuMemAllocAsync(&p, 4096, s));
	CU_OK(cuStreamGetCaptureInfo_v2(s, &st, &id2, &g, &deps, &ndeps));
	cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	cr_assert_eq(id2, first);
	cr_assert_eq(g, graph);
	cr_assert_eq(ndeps, 1);
	CU_OK(cuGraphGetNodes(graph, nodes, &n));
	cr_assert_eq(n, 1);
	cr_assert_eq(deps[0], nodes[0]);
	CU_OK(cuStreamGetCaptureInfo(s, &st, &id, NULL, &deps, &edges, &ndeps));
	cr_assert_eq(ndeps, 1);
	cr_assert_eq(edges[0].type, 0);
	cr_assert_eq(edges[0].from_port, 0);
	/* Edge data asks for the nodes too. */
	CU_ASSERT(cuStreamGetCaptureInfo(s, &st, &id, NULL, NULL, &edges,
					 &ndeps), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuStreamIsCapturing(s, NULL), CUDA_ERROR_INVALID_VALUE);
	/* The graph handed over is the one being captured into. */
	CU_OK(cuStreamEndCapture(s, &g));
	cr_assert_eq(g, graph);
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
	CU_OK(cuStreamBeginCapture(s));       /* the first ABI: no mode */
	cr_assert_neq(id_of(s), first, "capture ids are unique");
	CU_OK(cuStreamEndCapture(s, &graph));
	CU_OK(cuGraphDestroy(graph));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy(s));
}

/* ---- beginning and ending ------------------------------------------------ */

Test(capture, begin_and_end_errors)
{
	CUgraph g = NULL;
	CUstream s;

	simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	/* The legacy stream cannot capture. */
	CU_ASSERT(cuStreamBeginCapture_v2(NULL, GLOBAL), UNSUPPORTED);
	CU_ASSERT(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, RELAXED),
		  UNSUPPORTED);
	CU_ASSERT(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)3),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuStreamBeginCapture_v2((CUstream)&g, GLOBAL),
		  CUDA_ERROR_INVALID_HANDLE);
	/* Not capturing: nothing to end. */
	CU_ASSERT(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
	CU_ASSERT(cuStreamEndCapture(NULL, &g), CUDA_ERROR_ILLEGAL_STATE);
	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_ASSERT(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
	CU_ASSERT(cuStreamEndCapture(s, NULL), CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	/* An empty capture is an empty graph. */
	CU_OK(cuStreamEndCapture(s, &g));
	cr_assert_not_null(g);
	CU_ASSERT(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy(s));
}

/* The per-thread default stream captures: the driver refuses only the
 * legacy stream. */
Test(capture, per_thread_stream_captures)
{
	CUstreamCaptureStatus st;
	CUgraphNodeType t[2];
	CUdeviceptr p;
	CUgraph g;

	simtest_init();
	CU_OK(cuStreamBeginCapture_v2_ptsz(NULL, THREAD_LOCAL));
	cr_assert_eq(status_of(CU_STREAM_PER_THREAD),
		     CU_STREAM_CAPTURE_STATUS_ACTIVE);
	/* It blocks with the legacy stream, which would depend on it. */
	CU_ASSERT(cuStreamIsCapturing(NULL, &st),
		  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	CU_OK(cuMemAllocAsync(&p, 4096, CU_STREAM_PER_THREAD));
	CU_OK(cuStreamEndCapture_ptsz(NULL, &g));
	cr_assert_eq(node_types(g, t, 2), 1);
	cr_assert_eq(t[0], CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	CU_OK(cuGraphDestroy(g));
}

struct ender {
	CUcontext ctx;
	CUstream s;
	CUgraph g;
	CUresult rc;
};

static void *end_elsewhere(void *arg)
{
	struct ender *e = arg;

	e->rc = cuCtxSetCurrent(e->ctx);
	if (e->rc == CUDA_SUCCESS)
		e->rc = cuStreamEndCapture(e->s, &e->g);
	return NULL;
}

/* A capture not begun RELAXED must end on the thread that began it. */
Test(capture, end_on_another_thread)
{
	struct ender e = { .g = NULL };
	pthread_t th;

	e.ctx = simtest_init();
	e.s = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamBeginCapture_v2(e.s, THREAD_LOCAL));
	cr_assert_eq(pthread_create(&th, NULL, end_elsewhere, &e), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	CU_ASSERT(e.rc, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
	cr_assert_eq(status_of(e.s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_OK(cuStreamEndCapture(e.s, &e.g));
	CU_OK(cuGraphDestroy(e.g));
	e.g = NULL;
	CU_OK(cuStreamBeginCapture_v2(e.s, RELAXED));
	cr_assert_eq(pthread_create(&th, NULL, end_elsewhere, &e), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	CU_OK(e.rc);
	cr_assert_not_null(e.g);
	CU_OK(cuGraphDestroy(e.g));
	CU_OK(cuStreamDestroy(e.s));
}

/* A capture whose origin is destroyed ends (no thread stays prohibited
 * by it); a stream that joined one and is destroyed invalidates it. */
Test(capture, destroyed_streams)
{
	CUstream s1, s2;
	CUdeviceptr p;
	CUevent e;

	simtest_init();
	s1 = new_stream(CU_STREAM_NON_BLOCKING);
	s2 = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuMemAllocAsync(&p, 4096, s1));
	CU_OK(cuStreamDestroy(s1));
	CU_OK(cuMemAlloc(&p, 64));
	CU_OK(cuMemFree(p));
	s1 = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuEventRecord(e, s1));
	CU_OK(cuStreamWaitEvent(s2, e, 0));
	CU_OK(cuStreamDestroy(s2));
	end_invalidated(s1);
	CU_OK(cuEventDestroy(e));
	CU_OK(cuStreamDestroy(s1));
}

/* ---- what is refused ----------------------------------------------------- */

static void CUDA_CB host_fn(void *arg)
{
	(void)arg;
}

/* Each operation the graph model lacks, on a capturing stream: refused,
 * and the capture invalidated (later work on it: INVALIDATED). */
Test(capture, unsupported_operations_invalidate)
{
	CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
	CUdeviceptr a, b, m, p;
	CUgraphExec x;
	CUgraphNode n;
	CUgraph g;
	CUstream s;
	char h[64];

	simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuMemAlloc(&a, 64));
	CU_OK(cuMemAlloc(&b, 64));
	CU_OK(cuMemAllocManaged(&m, 64, CU_MEM_ATTACH_GLOBAL));
	CU_OK(cuGraphCreate(&g, 0));
	CU_OK(cuGraphAddEmptyNode(&n, g, NULL, 0));
	CU_OK(cuGraphInstantiate(&x, g, 0));

	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuMemcpyDtoDAsync(a, b, 64, s), UNSUPPORTED);
	CU_ASSERT(cuMemAllocAsync(&p, 64, s), INVALIDATED);
	CU_ASSERT(cuMemsetD8Async(a, 0, 64, s), INVALIDATED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuMemcpyHtoDAsync(a, h, sizeof(h), s), UNSUPPORTED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuLaunchHostFunc(s, host_fn, NULL), UNSUPPORTED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuGraphLaunch(x, s), UNSUPPORTED);
	end_invalidated(s);

	/* Synchronising or querying the capturing stream. */
	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuStreamSynchronize(s), UNSUPPORTED);
	end_invalidated(s);
	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuStreamQuery(s), UNSUPPORTED);
	CU_ASSERT(cuStreamQuery(s), INVALIDATED);
	end_invalidated(s);

	/* A prefetch. */
	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuMemPrefetchAsync(m, 64, dev0, 0, s), UNSUPPORTED);
	end_invalidated(s);

	/* A free of memory the capture did not allocate. */
	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_ASSERT(cuMemFreeAsync(a, s), UNSUPPORTED);
	end_invalidated(s);

	/* The stream works again, and nothing refused ran. */
	CU_OK(cuMemcpyDtoHAsync(h, a, sizeof(h), s));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuMemFree(a));
	CU_OK(cuMemFree(b));
	CU_OK(cuMemFree(m));
	CU_OK(cuStreamDestroy(s));
}

/* While a blocking stream captures, work on the legacy stream would depend
 * on it: refused, and the capture invalidated; the query only says so. */
Test(capture, legacy_stream_while_blocking_stream_captures)
{
	CUstreamCaptureStatus st;
	CUdeviceptr p, q;
	CUstream b, nb;
	CUgraph g;

	simtest_init();
	b = new_stream(0);
	nb = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuMemAlloc(&p, 64));
	CU_OK(cuStreamBeginCapture_v2(nb, GLOBAL));
	CU_OK(cuMemsetD8Async(p, 1, 64, NULL));   /* nb does not block it */
	CU_OK(cuStreamEndCapture(nb, &g));
	CU_OK(cuGraphDestroy(g));

	CU_OK(cuStreamBeginCapture_v2(b, RELAXED));
	CU_OK(cuMemAllocAsync(&q, 64, b));
	CU_ASSERT(cuStreamIsCapturing(NULL, &st),
		  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	cr_assert_eq(status_of(b), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_ASSERT(cuMemsetD8Async(p, 2, 64, NULL),
		  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	CU_ASSERT(cuStreamSynchronize(NULL),
		  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	end_invalidated(b);
	CU_OK(cuMemsetD8Async(p, 3, 64, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuMemFree(p));
	CU_OK(cuStreamDestroy(b));
	CU_OK(cuStreamDestroy(nb));
}

/* ---- modes --------------------------------------------------------------- */

Test(capture, exchange_mode)
{
	CUstreamCaptureMode m = RELAXED;

	simtest_init();
	CU_OK(cuThreadExchangeStreamCaptureMode(&m));
	cr_assert_eq(m, GLOBAL, "a thread starts in global mode");
	m = THREAD_LOCAL;
	CU_OK(cuThreadExchangeStreamCaptureMode(&m));
	cr_assert_eq(m, RELAXED);
	CU_ASSERT(cuThreadExchangeStreamCaptureMode(NULL),
		  CUDA_ERROR_INVALID_VALUE);
	m = (CUstreamCaptureMode)7;
	CU_ASSERT(cuThreadExchangeStreamCaptureMode(&m),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(m, 7);
	m = GLOBAL;
	CU_OK(cuThreadExchangeStreamCaptureMode(&m));
	cr_assert_eq(m, THREAD_LOCAL);
}

/* The capturing thread's own unsafe calls: refused unless its capture is
 * RELAXED (or the thread's mode is); a refusal invalidates the capture. */
Test(capture, unsafe_calls_on_the_capturing_thread)
{
	CUstreamCaptureMode m;
	CUdeviceptr p, q;
	CUstream s;
	CUgraph g;

	simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuMemAlloc(&q, 64));
	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_ASSERT(cuCtxSynchronize(), UNSUPPORTED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, THREAD_LOCAL));
	CU_ASSERT(cuMemAlloc(&p, 64), UNSUPPORTED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_ASSERT(cuMemFree(q), UNSUPPORTED);
	end_invalidated(s);

	CU_OK(cuStreamBeginCapture_v2(s, RELAXED));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuMemAlloc(&p, 64));
	CU_OK(cuMemFree(p));
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuGraphDestroy(g));

	/* A relaxed thread may, whatever its capture's mode. */
	m = RELAXED;
	CU_OK(cuThreadExchangeStreamCaptureMode(&m));
	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuThreadExchangeStreamCaptureMode(&m));
	CU_OK(cuMemFree(q));
	CU_OK(cuStreamDestroy(s));
}

struct other {
	CUcontext ctx;
	CUstreamCaptureMode mode;   /* the other thread's */
	CUresult rc;
};

static void *sync_elsewhere(void *arg)
{
	struct other *o = arg;
	CUstreamCaptureMode m = o->mode;

	o->rc = cuCtxSetCurrent(o->ctx);
	if (o->rc == CUDA_SUCCESS)
		o->rc = cuThreadExchangeStreamCaptureMode(&m);
	if (o->rc == CUDA_SUCCESS)
		o->rc = cuCtxSynchronize();
	return NULL;
}

static CUresult sync_on_other_thread(CUcontext ctx, CUstreamCaptureMode mode)
{
	struct other o = { ctx, mode, CUDA_ERROR_UNKNOWN };
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, sync_elsewhere, &o), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	return o.rc;
}

/* Another thread: a GLOBAL capture prohibits its unsafe calls while that
 * thread is in global mode; THREAD_LOCAL and RELAXED captures do not. */
Test(capture, unsafe_calls_on_other_threads)
{
	CUcontext ctx;
	CUstream s;
	CUgraph g;

	ctx = simtest_init();
	s = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamBeginCapture_v2(s, THREAD_LOCAL));
	CU_OK(sync_on_other_thread(ctx, GLOBAL));
	CU_OK(cuStreamEndCapture(s, &g));
	CU_OK(cuGraphDestroy(g));

	CU_OK(cuStreamBeginCapture_v2(s, GLOBAL));
	CU_OK(sync_on_other_thread(ctx, THREAD_LOCAL));
	CU_OK(sync_on_other_thread(ctx, RELAXED));
	cr_assert_eq(status_of(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_ASSERT(sync_on_other_thread(ctx, GLOBAL), UNSUPPORTED);
	end_invalidated(s);
	CU_OK(cuStreamDestroy(s));
}

/* ---- events and several streams ------------------------------------------ */

/* Fork and join through events: the joined stream captures into the same
 * graph, with the same id, and the origin ends the capture once joined. */
Test(capture, fork_and_join)
{
	CUgraphNodeType t[4];
	const CUgraphNode *deps;
	CUstreamCaptureStatus st;
	CUdeviceptr a, b;
	CUevent fork, join;
	CUstream s1, s2;
	size_t ndeps;
	CUgraph g;

	simtest_init();
	s1 = new_stream(CU_STREAM_NON_BLOCKING);
	s2 = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuMemAllocAsync(&a, 4096, s1));
	CU_OK(cuEventRecord(fork, s1));
	CU_ASSERT(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
	CU_ASSERT(cuEventSynchronize(fork), CUDA_ERROR_CAPTURED_EVENT);
	cr_assert_eq(status_of(s2), CU_STREAM_CAPTURE_STATUS_NONE);
	CU_OK(cuStreamWaitEvent(s2, fork, 0));
	cr_assert_eq(status_of(s2), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	cr_assert_eq(id_of(s2), id_of(s1));
	CU_OK(cuMemAllocAsync(&b, 4096, s2));
	CU_OK(cuMemFreeAsync(a, s2));
	CU_OK(cuEventRecord(join, s2));
	CU_OK(cuStreamWaitEvent(s1, join, 0));
	CU_OK(cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, NULL,
				     &ndeps));
	cr_assert_eq(ndeps, 2, "s1 waits for its allocation and s2's free");
	CU_OK(cuMemFreeAsync(b, s1));
	/* Only the origin ends it. */
	CU_OK(cuStreamEndCapture(s1, &g));
	cr_assert_eq(status_of(s2), CU_STREAM_CAPTURE_STATUS_NONE);
	cr_assert_eq(node_types(g, t, 4), 4);
	cr_assert_eq(t[0], CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	cr_assert_eq(t[1], CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	cr_assert_eq(t[2], CU_GRAPH_NODE_TYPE_MEM_FREE);
	cr_assert_eq(t[3], CU_GRAPH_NODE_TYPE_MEM_FREE);
	/* A captured event stays one until recorded outside a capture. */
	CU_ASSERT(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
	CU_ASSERT(cuStreamWaitEvent(s2, fork, 0), CUDA_ERROR_CAPTURED_EVENT);
	CU_OK(cuEventRecord(fork, s2));
	CU_OK(cuEventSynchronize(fork));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuEventDestroy(fork));
	CU_OK(cuEventDestroy(join));
	CU_OK(cuStreamDestroy(s1));
	CU_OK(cuStreamDestroy(s2));
}

Test(capture, cross_stream_errors)
{
	CUevent e, outside;
	CUstream s1, s2, s3;
	CUdeviceptr p;
	CUgraph g = (CUgraph)1;

	simtest_init();
	s1 = new_stream(CU_STREAM_NON_BLOCKING);
	s2 = new_stream(CU_STREAM_NON_BLOCKING);
	s3 = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuEventCreate(&outside, 0));
	CU_OK(cuEventRecord(outside, s3));

	/* A fork never joined back. */
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuEventRecord(e, s1));
	CU_OK(cuStreamWaitEvent(s2, e, 0));
	CU_OK(cuMemAllocAsync(&p, 4096, s2));
	CU_ASSERT(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
	cr_assert_null(g);
	cr_assert_eq(status_of(s2), CU_STREAM_CAPTURE_STATUS_NONE);

	/* Ended from a stream that joined: not its capture to end. */
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuEventRecord(e, s1));
	CU_OK(cuStreamWaitEvent(s2, e, 0));
	CU_ASSERT(cuStreamEndCapture(s2, &g),
		  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
	end_invalidated(s1);

	/* Waiting for work outside the capture. */
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_ASSERT(cuStreamWaitEvent(s1, outside, 0),
		  CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	end_invalidated(s1);

	/* Two captures never merge. */
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuStreamBeginCapture_v2(s2, GLOBAL));
	CU_OK(cuEventRecord(e, s1));
	CU_ASSERT(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
	end_invalidated(s1);
	end_invalidated(s2);

	/* The legacy stream cannot join. */
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuEventRecord(e, s1));
	CU_ASSERT(cuStreamWaitEvent(NULL, e, 0), UNSUPPORTED);
	end_invalidated(s1);

	CU_OK(cuEventDestroy(e));
	CU_OK(cuEventDestroy(outside));
	CU_OK(cuStreamDestroy(s1));
	CU_OK(cuStreamDestroy(s2));
	CU_OK(cuStreamDestroy(s3));
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

struct saxpy {
	unsigned long long n;
	float a;
	CUdeviceptr x, y;
	void *args[4];
};

/* x[i] = i, y[i] = 1. */
static void saxpy_setup(struct saxpy *s)
{
	float h[N];

	s->n = N;
	s->a = 2.0f;
	CU_OK(cuMemAlloc(&s->x, sizeof(h)));
	CU_OK(cuMemAlloc(&s->y, sizeof(h)));
	for (int i = 0; i < N; i++)
		h[i] = (float)i;
	CU_OK(cuMemcpyHtoD(s->x, h, sizeof(h)));
	CU_OK(cuMemsetD32(s->y, 0x3f800000, N));
	s->args[0] = &s->n;
	s->args[1] = &s->a;
	s->args[2] = &s->x;
	s->args[3] = &s->y;
}

/* y[i] == 1 + k * i, compared as bytes. */
static void saxpy_check(const struct saxpy *s, float k)
{
	float h[N], want;

	CU_OK(cuMemcpyDtoH(h, s->y, sizeof(h)));
	for (int i = 0; i < N; i++) {
		want = 1.0f + k * (float)i;
		cr_assert_eq(memcmp(&h[i], &want, sizeof(want)), 0,
			     "y[%d] = %f, want %f", i, (double)h[i],
			     (double)want);
	}
}

static void saxpy_free(struct saxpy *s)
{
	CU_OK(cuMemFree(s->x));
	CU_OK(cuMemFree(s->y));
}

/* Launches by cuLaunchKernel and cuLaunchKernelEx become kernel nodes
 * with their arguments as they were; nothing runs until the graph is
 * launched, and each launch of it runs them all again. */
Test(capture, kernels_captured_then_replayed)
{
	CUgraphNodeType t[4];
	CUlaunchConfig cfg;
	struct saxpy s;
	CUfunction f;
	CUgraphExec x;
	CUstream st;
	CUgraph g;

	simtest_init();
	f = workload("vgpu_saxpy");
	saxpy_setup(&s);
	st = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamBeginCapture_v2(st, GLOBAL));
	CU_OK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, st, s.args, NULL));
	s.a = 100.0f;                 /* too late for the first node */
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDimX = 16;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 256;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = st;
	CU_OK(cuLaunchKernelEx(&cfg, f, s.args, NULL));
	/* A launch refused as outside a capture: nothing captured. */
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 4096, 1, 1, 0, st, s.args, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(status_of(st), CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CU_OK(cuStreamEndCapture(st, &g));
	saxpy_check(&s, 0.0f);        /* nothing captured ran */
	cr_assert_eq(node_types(g, t, 4), 2);
	cr_assert_eq(t[0], CU_GRAPH_NODE_TYPE_KERNEL);
	cr_assert_eq(t[1], CU_GRAPH_NODE_TYPE_KERNEL);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	for (int i = 0; i < 3; i++)
		CU_OK(cuGraphLaunch(x, st));
	CU_OK(cuStreamSynchronize(st));
	saxpy_check(&s, 3 * (2.0f + 100.0f));
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	saxpy_free(&s);
	CU_OK(cuStreamDestroy(st));
}

/* alloc -> touch(write 7) -> touch(expect 7, write 9) -> free, captured:
 * the kernels use the allocation node's address; the graph's memory is
 * reserved at its first launch and returned with the executable graph. */
Test(capture, alloc_kernels_free_graph_memory)
{
	unsigned long long n = N, mism = 0;
	unsigned s0 = 0, s7 = 7, s9 = 9;
	CUdeviceptr buf = 0, dmism, none = 0;
	void *w[] = { &buf, &n, &s0, &s7, &none };
	void *rw[] = { &buf, &n, &s7, &s9, &dmism };
	CUgraphNodeType t[4];
	CUfunction touch;
	CUgraphExec x;
	CUstream st;
	CUgraph g;
	size_t base;

	simtest_init();
	touch = workload("vgpu_touch");
	st = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuMemAlloc(&dmism, sizeof(mism)));
	CU_OK(cuMemsetD8(dmism, 0, sizeof(mism)));
	base = used();
	CU_OK(cuStreamBeginCapture_v2(st, THREAD_LOCAL));
	CU_OK(cuMemAllocAsync(&buf, MIB, st));
	CU_OK(cuLaunchKernel(touch, 8, 1, 1, 64, 1, 1, 0, st, w, NULL));
	CU_OK(cuLaunchKernel(touch, 8, 1, 1, 64, 1, 1, 0, st, rw, NULL));
	CU_OK(cuMemFreeAsync(buf, st));
	CU_OK(cuStreamEndCapture(st, &g));
	cr_assert_eq(node_types(g, t, 4), 4);
	cr_assert_eq(t[0], CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	cr_assert_eq(t[1], CU_GRAPH_NODE_TYPE_KERNEL);
	cr_assert_eq(t[2], CU_GRAPH_NODE_TYPE_KERNEL);
	cr_assert_eq(t[3], CU_GRAPH_NODE_TYPE_MEM_FREE);
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	for (int i = 0; i < 3; i++)
		CU_OK(cuGraphLaunch(x, st));
	CU_OK(cuStreamSynchronize(st));
	CU_OK(cuMemcpyDtoH(&mism, dmism, sizeof(mism)));
	cr_assert_eq(mism, 0, "%llu mismatches", mism);
	cr_assert_eq(used(), base + MIB);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), MIB);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), MIB);
	CU_OK(cuGraphExecDestroy(x));
	cr_assert_eq(used(), base);
	cr_assert_eq(mem_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuMemFree(dmism));
	CU_OK(cuStreamDestroy(st));
}

/* Kernels on two streams joined by events, into one graph. */
Test(capture, kernels_across_streams)
{
	CUevent fork, join;
	struct saxpy a, b;
	CUstream s1, s2;
	CUgraphExec x;
	CUfunction f;
	CUgraph g;

	simtest_init();
	f = workload("vgpu_saxpy");
	saxpy_setup(&a);
	saxpy_setup(&b);
	b.a = 5.0f;
	s1 = new_stream(CU_STREAM_NON_BLOCKING);
	s2 = new_stream(CU_STREAM_NON_BLOCKING);
	CU_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuStreamBeginCapture_v2(s1, GLOBAL));
	CU_OK(cuEventRecord(fork, s1));
	CU_OK(cuStreamWaitEvent(s2, fork, 0));
	CU_OK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, s1, a.args, NULL));
	CU_OK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, s2, b.args, NULL));
	CU_OK(cuEventRecord(join, s2));
	CU_OK(cuStreamWaitEvent(s1, join, 0));
	CU_OK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, s1, a.args, NULL));
	CU_OK(cuStreamEndCapture(s1, &g));
	saxpy_check(&a, 0.0f);
	saxpy_check(&b, 0.0f);
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, s1));
	CU_OK(cuGraphLaunch(x, s2));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&a, 2 * 2 * 2.0f);
	saxpy_check(&b, 2 * 5.0f);
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuEventDestroy(fork));
	CU_OK(cuEventDestroy(join));
	saxpy_free(&a);
	saxpy_free(&b);
	CU_OK(cuStreamDestroy(s1));
	CU_OK(cuStreamDestroy(s2));
}

struct capturer {
	CUcontext ctx;
	CUfunction f;
	struct saxpy s;
	pthread_barrier_t *both;
	cuuint64_t id;
	CUstreamCaptureStatus seen;   /* of the other's stream: not ours */
	CUstream *streams;
	int me;
	CUresult rc;
};

/* Each thread captures on its own stream, both captures open at once. */
static void *capture_thread(void *arg)
{
	struct capturer *c = arg;
	CUstream st = c->streams[c->me];
	CUstreamCaptureStatus status;
	CUgraphExec x;
	CUgraph g;
	CUresult rc;

	rc = cuCtxSetCurrent(c->ctx);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamBeginCapture_v2(st, GLOBAL);
	pthread_barrier_wait(c->both);
	if (rc == CUDA_SUCCESS)
		rc = cuLaunchKernel(c->f, 16, 1, 1, 256, 1, 1, 0, st, c->s.args,
				    NULL);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamGetCaptureInfo(st, &status, &c->id, NULL, NULL,
					    NULL, NULL);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamIsCapturing(c->streams[!c->me], &c->seen);
	pthread_barrier_wait(c->both);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamEndCapture(st, &g);
	if (rc == CUDA_SUCCESS)
		rc = cuGraphInstantiate(&x, g, 0);
	for (int i = 0; i < 2 && rc == CUDA_SUCCESS; i++)
		rc = cuGraphLaunch(x, st);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamSynchronize(st);
	if (rc == CUDA_SUCCESS)
		rc = cuGraphExecDestroy(x);
	if (rc == CUDA_SUCCESS)
		rc = cuGraphDestroy(g);
	c->rc = rc;
	return NULL;
}

Test(capture, two_threads_at_once)
{
	struct capturer c[2];
	pthread_barrier_t both;
	CUstream streams[2];
	pthread_t th[2];
	CUcontext ctx;
	CUfunction f;

	ctx = simtest_init();
	f = workload("vgpu_saxpy");
	pthread_barrier_init(&both, NULL, 2);
	for (int i = 0; i < 2; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		streams[i] = new_stream(CU_STREAM_NON_BLOCKING);
		c[i].ctx = ctx;
		c[i].f = f;
		c[i].both = &both;
		c[i].streams = streams;
		c[i].me = i;
		c[i].rc = CUDA_ERROR_UNKNOWN;
		saxpy_setup(&c[i].s);
		c[i].s.a = (float)(i + 1);
	}
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, capture_thread,
					    &c[i]), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&both);
	for (int i = 0; i < 2; i++) {
		CU_OK(c[i].rc);
		cr_assert_eq(c[i].seen, CU_STREAM_CAPTURE_STATUS_ACTIVE);
		saxpy_check(&c[i].s, 2 * (float)(i + 1));
		saxpy_free(&c[i].s);
		CU_OK(cuStreamDestroy(streams[i]));
	}
	cr_assert_neq(c[0].id, c[1].id);
}

#endif
