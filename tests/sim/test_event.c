/* test_event.c - events: completion as streams reach them, and the time
 * between two of them.
 *
 * Timing assertions are lower bounds, with upper bounds loose enough for a
 * busy shared machine.
 */
#include "simtest.h"

#include <stdlib.h>

TestSuite(event, .init = simtest_clean_env, .fini = simtest_remove_state);

/* Generous: the machine may be busy running other tests. */
#define SLACK_MS 250.0f

static float elapsed_ms(CUevent a, CUevent b)
{
	float ms = -1.0f;

	CU_OK(cuEventElapsedTime(&ms, a, b));
	return ms;
}

Test(event, never_recorded_counts_as_complete)
{
	CUevent a, b;
	float ms;

	simtest_init();
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventQuery(a));
	CU_OK(cuEventSynchronize(a));
	/* "If cuEventRecord() has not been called on either event then
	 * CUDA_ERROR_INVALID_HANDLE is returned." */
	CU_ASSERT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuEventRecord(a, NULL));
	CU_ASSERT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
}

Test(event, not_ready_until_stream_reaches_it)
{
	struct simtest_gate *g;
	CUevent a, b;
	CUstream s;
	float ms;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, s));
	simtest_gate_queue(g, s);
	CU_OK(cuEventRecord(b, s));
	CU_ASSERT(cuEventQuery(b), CUDA_ERROR_NOT_READY);
	CU_ASSERT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
	/* a was before the gate: the stream reaches it. */
	CU_OK(cuEventSynchronize(a));
	CU_OK(cuEventQuery(a));
	simtest_gate_open(g);
	CU_OK(cuEventSynchronize(b));
	CU_OK(cuEventQuery(b));
	cr_assert_geq(elapsed_ms(a, b), 0.0f);
}

/* The latest record is the one that counts. */
Test(event, record_again_replaces)
{
	struct simtest_gate *g;
	CUstream held, free_s;
	CUevent e;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamCreate(&free_s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&e, 0));
	simtest_gate_queue(g, held);
	CU_OK(cuEventRecord(e, held));
	CU_ASSERT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
	CU_OK(cuEventRecord(e, free_s));
	CU_OK(cuEventSynchronize(e));
	CU_OK(cuEventQuery(e));
	simtest_gate_open(g);
	CU_OK(cuCtxSynchronize());
	CU_OK(cuEventQuery(e));
}

static void CUDA_CB sleep_20ms(void *arg)
{
	(void)arg;
	simtest_sleep_ms(20);
}

Test(event, elapsed_time_around_host_work)
{
	CUevent a, b;
	CUstream s;
	float ms;

	simtest_init();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuEventCreate(&a, CU_EVENT_BLOCKING_SYNC));
	CU_OK(cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC));
	CU_OK(cuEventRecord(a, s));
	CU_OK(cuLaunchHostFunc(s, sleep_20ms, NULL));
	CU_OK(cuEventRecord(b, s));
	CU_OK(cuEventSynchronize(b));
	ms = elapsed_ms(a, b);
	cr_assert_geq(ms, 20.0f, "%f ms", (double)ms);
	cr_assert_lt(ms, 20.0f + SLACK_MS, "%f ms", (double)ms);
	/* The other way round, the interval is negative. */
	ms = elapsed_ms(b, a);
	cr_assert_leq(ms, -20.0f, "%f ms", (double)ms);
	CU_OK(cuEventElapsedTime_v2(&ms, a, b));
	cr_assert_geq(ms, 20.0f, "%f ms", (double)ms);
}

Test(event, disable_timing)
{
	CUevent a, b;
	float ms;

	simtest_init();
	CU_OK(cuEventCreate(&a, CU_EVENT_DISABLE_TIMING));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, NULL));
	CU_OK(cuEventRecord(b, NULL));
	CU_OK(cuEventSynchronize(b));
	CU_ASSERT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventElapsedTime(&ms, b, a), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventElapsedTime(NULL, b, b), CUDA_ERROR_INVALID_VALUE);
}

Test(event, create_flags)
{
	CUevent e;

	simtest_init();
	CU_OK(cuEventCreate(&e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
	CU_OK(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	/* "CU_EVENT_INTERPROCESS must be specified along with
	 * CU_EVENT_DISABLE_TIMING." */
	CU_ASSERT(cuEventCreate(&e, CU_EVENT_INTERPROCESS),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuEventCreate(&e, 0x80), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

/* Destroying an event still pending does not block; the handle is dead. */
Test(event, destroy)
{
	struct simtest_gate *g;
	CUevent e;
	CUstream s;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuEventCreate(&e, 0));
	simtest_gate_queue(g, s);
	CU_OK(cuEventRecord(e, s));
	CU_OK(cuEventDestroy(e));
	CU_ASSERT(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE);
	simtest_gate_open(g);
	CU_OK(cuStreamSynchronize(s));
	CU_ASSERT(cuEventQuery(NULL), CUDA_ERROR_INVALID_HANDLE);
}

/* "hEvent and hStream must be from the same context otherwise
 * CUDA_ERROR_INVALID_HANDLE is returned." */
Test(event, record_in_other_context)
{
	CUcontext other;
	CUstream s;
	CUevent e;

	simtest_init();
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuCtxCreate(&other, NULL, 0, 0));
	CU_OK(cuStreamCreate(&s, 0));
	CU_ASSERT(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuEventRecord(e, NULL), CUDA_ERROR_INVALID_HANDLE);
}

Test(event, record_with_flags)
{
	CUevent e;

	simtest_init();
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuEventRecordWithFlags(e, NULL, CU_EVENT_RECORD_DEFAULT));
	CU_OK(cuEventSynchronize(e));
	CU_ASSERT(cuEventRecordWithFlags(e, NULL, 0x10), CUDA_ERROR_INVALID_VALUE);
}

#ifdef SIMTEST_KERNELS
/* One kernel of VGPU_SIM_KERNEL_NS = 2 ms, timed by events. */
Test(event, elapsed_time_of_one_kernel)
{
	CUfunction f;
	CUevent a, b;
	float ms;

	setenv("VGPU_SIM_KERNEL_NS", "2000000", 1);
	simtest_init();
	f = simtest_own_kernel();
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, NULL));
	simtest_launch_own(f, NULL);
	CU_OK(cuEventRecord(b, NULL));
	CU_OK(cuEventSynchronize(b));
	ms = elapsed_ms(a, b);
	cr_assert_geq(ms, 2.0f, "%f ms", (double)ms);
	cr_assert_lt(ms, 50.0f, "%f ms", (double)ms);
}

/* N kernels in a row take at least N times VGPU_SIM_KERNEL_NS. */
Test(event, elapsed_time_of_n_kernels)
{
	enum { N = 8 };
	CUfunction f;
	CUevent a, b;
	CUstream s;
	float ms;

	setenv("VGPU_SIM_KERNEL_NS", "3000000", 1);
	simtest_init();
	f = simtest_own_kernel();
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, s));
	for (int i = 0; i < N; i++)
		simtest_launch_own(f, s);
	CU_OK(cuEventRecord(b, s));
	CU_OK(cuStreamSynchronize(s));
	ms = elapsed_ms(a, b);
	cr_assert_geq(ms, N * 3.0f, "%f ms", (double)ms);
	cr_assert_lt(ms, N * 3.0f + SLACK_MS, "%f ms", (double)ms);
}

/* Kernels on two streams of one device run one at a time. */
Test(event, kernels_on_two_streams_do_not_overlap)
{
	enum { N = 4 };
	CUfunction f;
	CUevent a, b;
	CUstream s1, s2;
	float ms;

	setenv("VGPU_SIM_KERNEL_NS", "5000000", 1);
	simtest_init();
	f = simtest_own_kernel();
	CU_OK(cuStreamCreate(&s1, 0));
	CU_OK(cuStreamCreate(&s2, 0));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, NULL));
	for (int i = 0; i < N; i++) {
		simtest_launch_own(f, s1);
		simtest_launch_own(f, s2);
	}
	CU_OK(cuEventRecord(b, NULL));   /* waits for s1 and s2 */
	CU_OK(cuEventSynchronize(b));
	ms = elapsed_ms(a, b);
	cr_assert_geq(ms, 2 * N * 5.0f, "%f ms", (double)ms);
}
#endif
