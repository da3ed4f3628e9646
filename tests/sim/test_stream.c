/* test_stream.c - streams: order within a stream, the legacy NULL stream's
 * implicit synchronisation, waits on events, host functions, per-thread
 * default streams.
 *
 * "Work in flight" is a gate (simtest.h): a host function that blocks its
 * stream until the test opens it, so no assertion here depends on timing.
 */
#include "simtest.h"

#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

TestSuite(stream, .init = simtest_clean_env, .fini = simtest_remove_state);

static void log_is(struct simtest_log *log, const int *want, int n)
{
	cr_assert_eq(simtest_log_count(log), n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(log->entries[i], want[i], "entry %d: %d, want %d", i,
			     log->entries[i], want[i]);
}

Test(stream, host_functions_run_in_order)
{
	struct simtest_log log = { 0 };
	int want[40];
	CUstream s;

	simtest_init();
	CU_OK(cuStreamCreate(&s, 0));
	for (int i = 0; i < 40; i++) {
		want[i] = i;
		simtest_log_queue(&log, s, i);
	}
	CU_OK(cuStreamSynchronize(s));
	log_is(&log, want, 40);
	CU_ASSERT(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* Copies, memsets and host functions on one stream run in issue order. */
Test(stream, order_within_a_stream)
{
	struct simtest_gate *g;
	uint32_t *host, out[256];
	CUdeviceptr a, b;
	CUstream s;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuMemAllocHost((void **)&host, 1024));
	for (int i = 0; i < 256; i++)
		host[i] = (uint32_t)i;
	CU_OK(cuMemAlloc(&a, 1024));
	CU_OK(cuMemAlloc(&b, 1024));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	simtest_gate_queue(g, s);
	CU_OK(cuMemcpyHtoDAsync(a, host, 1024, s));
	CU_OK(cuMemsetD32Async(a, 7, 16, s));
	CU_OK(cuMemcpyDtoDAsync(b, a, 1024, s));
	CU_OK(cuMemsetD32Async(a, 9, 256, s));
	CU_OK(cuMemcpyDtoHAsync(out, b, 1024, s));
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamQuery(s));
	for (int i = 0; i < 256; i++)
		cr_assert_eq(out[i], i < 16 ? 7u : (uint32_t)i, "i=%d", i);
}

Test(stream, query_not_ready_until_done)
{
	struct simtest_gate *g;
	CUstream s;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuStreamQuery(s));
	simtest_gate_queue(g, s);
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamQuery(s));
}

#ifdef SIMTEST_KERNELS
/* A kernel of 200 ms (the own kernel has no host form) is in flight: the
 * stream and an event after the kernel are not ready, then are after
 * synchronising. */
Test(stream, query_not_ready_during_kernel)
{
	CUfunction f;
	CUstream s;
	CUevent e;
	uint64_t t0;

	setenv("VGPU_SIM_KERNEL_NS", "200000000", 1);
	simtest_init();
	f = simtest_own_kernel();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	t0 = simtest_now_ns();
	simtest_launch_own(f, s);
	CU_OK(cuEventRecord(e, s));
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	CU_ASSERT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
	CU_ASSERT(cuStreamQuery(NULL), CUDA_SUCCESS);
	CU_OK(cuStreamSynchronize(s));
	cr_assert_geq(simtest_now_ns() - t0, 200000000ull);
	CU_OK(cuStreamQuery(s));
	CU_OK(cuEventQuery(e));
}
#endif

/* The legacy NULL stream waits for earlier work on blocking streams. */
Test(stream, null_stream_waits_for_blocking_stream)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	static const int want[] = { 1, 2 };
	CUstream s;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
	simtest_gate_queue(g, s);
	simtest_log_queue(&log, s, 1);
	simtest_log_queue(&log, NULL, 2);
	CU_ASSERT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
	simtest_sleep_ms(20);
	cr_assert_eq(simtest_log_count(&log), 0, "NULL stream ran early");
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(NULL));
	log_is(&log, want, 2);
}

/* ... and a blocking stream waits for earlier NULL-stream work. */
Test(stream, blocking_stream_waits_for_null_stream)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	static const int want[] = { 1, 2 };
	CUstream s;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
	simtest_gate_queue(g, CU_STREAM_LEGACY);
	simtest_log_queue(&log, NULL, 1);
	simtest_log_queue(&log, s, 2);
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(s));
	log_is(&log, want, 2);
}

/* CU_STREAM_NON_BLOCKING: no implicit synchronisation either way. */
Test(stream, non_blocking_stream_independent_of_null_stream)
{
	struct simtest_gate *g1, *g2;
	struct simtest_log log = { 0 };
	CUstream s;

	simtest_init();
	g1 = simtest_gate_new();
	g2 = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	simtest_gate_queue(g1, s);
	simtest_log_queue(&log, NULL, 1);
	CU_OK(cuStreamSynchronize(NULL));   /* does not wait for s */
	cr_assert_eq(simtest_log_count(&log), 1);
	simtest_gate_queue(g2, NULL);
	simtest_gate_open(g1);
	simtest_log_queue(&log, s, 2);
	CU_OK(cuStreamSynchronize(s));      /* does not wait for NULL */
	cr_assert_eq(simtest_log_count(&log), 2);
	simtest_gate_open(g2);
	CU_OK(cuCtxSynchronize());
}

static void *open_later(void *arg)
{
	simtest_sleep_ms(30);
	simtest_gate_open(arg);
	return NULL;
}

/* A synchronous copy runs on the NULL stream: it waits for earlier work on
 * blocking streams, not for non-blocking ones. */
Test(stream, synchronous_copy_and_blocking_streams)
{
	struct simtest_gate *held, *nb_held;
	struct simtest_log log = { 0 };
	unsigned char buf[64] = { 0 };
	CUstream blocking, nb;
	CUdeviceptr d;
	pthread_t th;

	simtest_init();
	held = simtest_gate_new();
	nb_held = simtest_gate_new();
	CU_OK(cuMemAlloc(&d, sizeof(buf)));
	CU_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
	simtest_gate_queue(nb_held, nb);
	CU_OK(cuMemcpyHtoD(d, buf, sizeof(buf)));   /* nb is not waited for */
	CU_OK(cuStreamCreate(&blocking, 0));
	simtest_gate_queue(held, blocking);
	simtest_log_queue(&log, blocking, 1);
	cr_assert_eq(pthread_create(&th, NULL, open_later, held), 0);
	CU_OK(cuMemcpyDtoH(buf, d, sizeof(buf)));   /* blocking is */
	cr_assert_eq(simtest_log_count(&log), 1, "copied before earlier work");
	pthread_join(th, NULL);
	simtest_gate_open(nb_held);
	CU_OK(cuCtxSynchronize());
}

/* Two blocking streams do not wait for each other. */
Test(stream, blocking_streams_independent)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	CUstream a, b;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&a, 0));
	CU_OK(cuStreamCreate(&b, 0));
	simtest_gate_queue(g, a);
	simtest_log_queue(&log, b, 1);
	CU_OK(cuStreamSynchronize(b));
	cr_assert_eq(simtest_log_count(&log), 1);
	simtest_gate_open(g);
	CU_OK(cuCtxSynchronize());
}

Test(stream, wait_event_across_streams)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	CUstream s1, s2;
	CUevent e;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	simtest_gate_queue(g, s1);
	simtest_log_queue(&log, s1, 1);
	CU_OK(cuEventRecord(e, s1));
	CU_OK(cuStreamWaitEvent(s2, e, 0));
	simtest_log_queue(&log, s2, 2);
	CU_ASSERT(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
	/* Recording e again later does not change what s2 waits for. */
	simtest_log_queue(&log, s1, 3);
	CU_OK(cuEventRecord(e, s1));
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(s2));
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(simtest_log_count(&log), 3);
	cr_assert_eq(log.entries[0], 1, "s2 did not wait for the event");
	cr_assert(log.entries[1] == 2 || log.entries[2] == 2);
}

Test(stream, wait_event_bad_arguments)
{
	CUstream s;
	CUevent e;

	simtest_init();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuEventCreate(&e, 0));
	/* Never recorded: nothing to wait for. */
	CU_OK(cuStreamWaitEvent(s, e, 0));
	CU_OK(cuStreamSynchronize(s));
	CU_ASSERT(cuStreamWaitEvent(s, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuStreamWaitEvent(s, e, 0x40), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuEventDestroy(e));
	CU_ASSERT(cuStreamWaitEvent(s, e, 0), CUDA_ERROR_INVALID_HANDLE);
}

struct callback_seen {
	CUstream stream;
	CUresult status;
	void *data;
	int calls;
};

static void CUDA_CB callback(CUstream s, CUresult status, void *data)
{
	struct callback_seen *seen = data;

	seen->stream = s;
	seen->status = status;
	seen->data = data;
	seen->calls++;
}

Test(stream, add_callback)
{
	struct callback_seen seen = { .status = CUDA_ERROR_UNKNOWN };
	CUstream s;

	simtest_init();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuStreamAddCallback(s, callback, &seen, 0));
	CU_OK(cuStreamSynchronize(s));
	cr_assert_eq(seen.calls, 1);
	cr_assert_eq(seen.stream, s);
	CU_ASSERT(seen.status, CUDA_SUCCESS);
	cr_assert_eq(seen.data, &seen);
	CU_ASSERT(cuStreamAddCallback(s, callback, &seen, 1),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(stream, properties)
{
	CUcontext ctx = simtest_init(), c = NULL;
	CUstream a, b, hi, lo;
	unsigned flags = 99;
	int prio = 99, least, greatest;
	unsigned long long ia = 0, ib = 0, inull = 0, ilegacy = 0;
	CUdevice dev = -1;

	CU_OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamCreate(&b, 0));
	CU_OK(cuStreamGetFlags(a, &flags));
	cr_assert_eq(flags, CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamGetFlags(b, &flags));
	cr_assert_eq(flags, 0);
	CU_OK(cuStreamGetCtx(a, &c));
	cr_assert_eq(c, ctx);
	CU_OK(cuStreamGetDevice(a, &dev));
	cr_assert_eq(dev, 0);
	CU_OK(cuStreamGetId(a, &ia));
	CU_OK(cuStreamGetId(b, &ib));
	CU_OK(cuStreamGetId(NULL, &inull));
	CU_OK(cuStreamGetId(CU_STREAM_LEGACY, &ilegacy));
	cr_assert_neq(ia, ib);
	cr_assert_neq(ia, inull);
	cr_assert_eq(inull, ilegacy);
	/* Priorities outside the range are clamped to it. */
	CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
	CU_OK(cuStreamCreateWithPriority(&hi, 0, greatest - 100));
	CU_OK(cuStreamCreateWithPriority(&lo, 0, least + 100));
	CU_OK(cuStreamGetPriority(hi, &prio));
	cr_assert_eq(prio, greatest);
	CU_OK(cuStreamGetPriority(lo, &prio));
	cr_assert_eq(prio, least);
	CU_ASSERT(cuStreamCreate(&a, 0x100), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuStreamGetFlags(b, NULL), CUDA_ERROR_INVALID_VALUE);
}

static void CUDA_CB sleep_none(void *arg)
{
	(void)arg;
}

static void *open_much_later(void *arg)
{
	simtest_sleep_ms(5000);
	simtest_gate_open(arg);
	return NULL;
}

/* "In case the device is still doing work in the stream hStream when
 * cuStreamDestroy() is called, the function will return immediately and
 * the resources associated with hStream will be released automatically once
 * the device has completed all work in hStream." */
Test(stream, destroy_with_pending_work)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	CUstream s;
	pthread_t th;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, 0));
	simtest_gate_queue(g, s);
	simtest_log_queue(&log, s, 1);
	/* A safety net: should destroy wait, the gate opens after 5 s. */
	cr_assert_eq(pthread_create(&th, NULL, open_much_later, g), 0);
	CU_OK(cuStreamDestroy(s));
	cr_assert_eq(simtest_log_count(&log), 0, "destroy waited for the work");
	CU_ASSERT(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuLaunchHostFunc(s, sleep_none, NULL), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
	simtest_gate_open(g);
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(simtest_log_count(&log), 1, "queued work was dropped");
	pthread_detach(th);
}

Test(stream, special_handles_cannot_be_destroyed)
{
	simtest_init();
	CU_ASSERT(cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuStreamDestroy(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuStreamDestroy(CU_STREAM_PER_THREAD),
		  CUDA_ERROR_INVALID_HANDLE);
}

Test(stream, no_context)
{
	CUstream s;

	simtest_env();
	CU_OK(cuInit(0));
	CU_ASSERT(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- per-thread default streams ------------------------------------------- */

static void *proc(const char *name, int version)
{
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;

	CU_OK(cuGetProcAddress(name, &fn, version,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
	cr_assert_not_null(fn);
	return fn;
}

struct ptds_thread {
	CUcontext ctx;
	unsigned long long id;
	struct simtest_log *log;
	CUresult sync;
};

static void CUDA_CB log_one(void *arg)
{
	struct simtest_log *log = arg;
	int i = atomic_fetch_add(&log->n, 1);

	log->entries[i] = 100;
}

static void *ptds_thread_main(void *arg)
{
	struct ptds_thread *t = arg;

	cuCtxSetCurrent(t->ctx);
	cuStreamGetId(CU_STREAM_PER_THREAD, &t->id);
	cuLaunchHostFunc(CU_STREAM_PER_THREAD, log_one, t->log);
	t->sync = cuStreamSynchronize(CU_STREAM_PER_THREAD);
	return NULL;
}

/* Each thread has its own: a thread's work completes while another
 * thread's per-thread stream is held up. */
Test(stream, per_thread_stream_is_per_thread)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	struct ptds_thread t = { .log = &log };
	unsigned long long mine = 0, again = 0, legacy = 0;
	pthread_t th;

	t.ctx = simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, &mine));
	CU_OK(cuStreamGetId(CU_STREAM_PER_THREAD, &again));
	CU_OK(cuStreamGetId(CU_STREAM_LEGACY, &legacy));
	cr_assert_eq(mine, again);
	cr_assert_neq(mine, legacy);
	simtest_gate_queue(g, CU_STREAM_PER_THREAD);
	cr_assert_eq(pthread_create(&th, NULL, ptds_thread_main, &t), 0);
	pthread_join(th, NULL);
	CU_OK(t.sync);
	cr_assert_eq(simtest_log_count(&log), 1);
	cr_assert_neq(t.id, mine);
	CU_ASSERT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

/* Through a _ptsz entry point the NULL stream means the per-thread stream:
 * the work lands behind the gate there, and the legacy stream stays idle. */
Test(stream, ptsz_entry_point_uses_per_thread_stream)
{
	PFN_cuLaunchHostFunc_v10000_ptsz host_fn_ptsz;
	PFN_cuStreamQuery_v7000_ptsz query_ptsz;
	struct simtest_gate *g;
	struct simtest_log log = { 0 };

	simtest_init();
	host_fn_ptsz = (PFN_cuLaunchHostFunc_v10000_ptsz)proc("cuLaunchHostFunc",
							      10000);
	query_ptsz = (PFN_cuStreamQuery_v7000_ptsz)proc("cuStreamQuery", 7000);
	g = simtest_gate_new();
	simtest_gate_queue(g, CU_STREAM_PER_THREAD);
	CU_OK(host_fn_ptsz(NULL, log_one, &log));
	CU_ASSERT(query_ptsz(NULL), CUDA_ERROR_NOT_READY);
	CU_OK(cuStreamQuery(CU_STREAM_LEGACY));
	CU_OK(cuStreamQuery(NULL));
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	cr_assert_eq(simtest_log_count(&log), 1);
	CU_OK(query_ptsz(NULL));
}

/* The per-thread stream is a blocking stream: the legacy stream waits for
 * it. */
Test(stream, legacy_waits_for_per_thread_stream)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };

	simtest_init();
	g = simtest_gate_new();
	simtest_gate_queue(g, CU_STREAM_PER_THREAD);
	simtest_log_queue(&log, CU_STREAM_LEGACY, 1);
	CU_ASSERT(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(CU_STREAM_LEGACY));
	cr_assert_eq(simtest_log_count(&log), 1);
}

#ifdef SIMTEST_KERNELS
/* cuLaunchKernel_ptsz with the NULL stream: on the per-thread stream. */
Test(stream, launch_kernel_ptsz)
{
	PFN_cuLaunchKernel_v7000_ptsz launch_ptsz;
	struct simtest_gate *g;
	CUdeviceptr p = 0;
	float scale = 2.0f;
	int n = 0;
	void *params[] = { &p, &scale, &n };
	CUfunction f;

	simtest_init();
	f = simtest_own_kernel();
	launch_ptsz = (PFN_cuLaunchKernel_v7000_ptsz)proc("cuLaunchKernel", 7000);
	g = simtest_gate_new();
	simtest_gate_queue(g, CU_STREAM_PER_THREAD);
	CU_OK(launch_ptsz(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuStreamQuery(CU_STREAM_LEGACY));
	CU_ASSERT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}
#endif

/* Capture is not simulated: every valid stream (NULL, and the legacy and
 * per-thread default streams, included) says it is not capturing, through
 * every version of the queries and their per-thread forms; a destroyed
 * stream is refused. cuda-core asks before each stream-ordered allocation. */
Test(stream, capture_queries_say_not_capturing)
{
	PFN_cuStreamGetCaptureInfo_v10010 v1;
	PFN_cuStreamGetCaptureInfo_v11030 v2;
	PFN_cuStreamGetCaptureInfo_v12030 v3, v3_ptsz;
	PFN_cuStreamIsCapturing_v10000 is, is_ptsz;
	CUstream streams[4] = { NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD,
				NULL }, dead;
	CUstreamCaptureStatus st;
	CUdriverProcAddressQueryResult q;
	cuuint64_t id = 77;
	size_t n = 5;

	simtest_init();
	CU_OK(cuStreamCreate(&streams[3], CU_STREAM_NON_BLOCKING));
	CU_OK(cuGetProcAddress("cuStreamIsCapturing", (void **)&is, 10000, 0,
			       &q));
	CU_OK(cuGetProcAddress("cuStreamIsCapturing", (void **)&is_ptsz,
			       10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			       &q));
	CU_OK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v1, 10010,
			       0, &q));
	CU_OK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v2, 11030,
			       0, &q));
	CU_OK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v3, 12030,
			       0, &q));
	CU_OK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v3_ptsz,
			       12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			       &q));
	cr_assert(v1 != (void *)v2 && v2 != (void *)v3 && v3 != v3_ptsz);
	for (int i = 0; i < 4; i++) {
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		CU_OK(is(streams[i], &st));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		CU_OK(is_ptsz(streams[i], &st));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		CU_OK(v1(streams[i], &st, &id));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		n = 5;
		CU_OK(v2(streams[i], &st, &id, NULL, NULL, &n));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		cr_assert_eq(n, 0);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		n = 5;
		CU_OK(v3(streams[i], &st, NULL, NULL, NULL, NULL, &n));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		cr_assert_eq(n, 0);
		st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		n = 5;
		CU_OK(v3_ptsz(streams[i], &st, &id, NULL, NULL, NULL, &n));
		cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
		cr_assert_eq(n, 0);
	}
	CU_ASSERT(is(streams[3], NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuStreamCreate(&dead, 0));
	CU_OK(cuStreamDestroy(dead));
	cr_assert_neq(is(dead, &st), CUDA_SUCCESS);
	CU_OK(cuStreamDestroy(streams[3]));
}

/* A thread cancelled while it waits in a synchronisation: the wait is no
 * cancellation point (a real driver's waits are its own), so the thread
 * ends at its next one, after the wait, and leaves no lock of the stream
 * held: the stream still runs work and synchronises. */
struct waiter {
	CUcontext ctx;
	CUstream s;
	CUevent e;
	volatile int waiting;
};

static void CUDA_CB count_one(void *arg)
{
	++*(int *)arg;
}

static void *wait_then_test(void *arg)
{
	struct waiter *w = arg;

	cuCtxSetCurrent(w->ctx);
	w->waiting = 1;
	for (;;) {
		cuEventSynchronize(w->e);
		cuStreamSynchronize(w->s);
		pthread_testcancel();
	}
	return NULL;
}

Test(stream, cancelled_waiter_leaves_the_stream_usable, .timeout = 30)
{
	struct simtest_gate *g;
	struct waiter w = { 0 };
	pthread_t t;
	void *res;
	int seen = 0;

	w.ctx = simtest_init();
	CU_OK(cuStreamCreate(&w.s, 0));
	CU_OK(cuEventCreate(&w.e, CU_EVENT_DISABLE_TIMING));
	g = simtest_gate_new();
	simtest_gate_queue(g, w.s);
	CU_OK(cuEventRecord(w.e, w.s));
	cr_assert_eq(pthread_create(&t, NULL, wait_then_test, &w), 0);
	while (!w.waiting || !simtest_gate_reached(g))
		usleep(1000);
	usleep(50 * 1000);	/* inside cuEventSynchronize, gate shut */
	cr_assert_eq(pthread_cancel(t), 0);
	usleep(50 * 1000);
	simtest_gate_open(g);
	cr_assert_eq(pthread_join(t, &res), 0);
	cr_assert_eq(res, PTHREAD_CANCELED);
	CU_OK(cuLaunchHostFunc(w.s, count_one, &seen));
	CU_OK(cuStreamSynchronize(w.s));
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(seen, 1);
	CU_OK(cuEventDestroy(w.e));
	CU_OK(cuStreamDestroy(w.s));
}
