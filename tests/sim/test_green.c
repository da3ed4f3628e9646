/* test_green.c - green contexts: SM resources and their splits, green
 * contexts and their streams and events, the timing model (k of N SMs: N/k
 * times the nominal time), kernels of green contexts side by side across
 * processes, and VGPU_SIM_GREEN_CONTEXTS=0.
 *
 * Timing tests use VGPU_SIM_SM_COUNT=128, so that half the device is a
 * split of the documented granularity (multiples of 8).
 */
#include "simtest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"
#endif

TestSuite(green, .init = simtest_clean_env, .fini = simtest_remove_state);

#define MS 1000000ull

static CUdevResource device_sms(void)
{
	CUdevResource r;

	CU_OK(cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM));
	return r;
}

/* Splits the device into one group of at least `sms` SMs. */
static CUdevResource one_group(unsigned sms)
{
	CUdevResource in = device_sms(), out;
	unsigned n = 1;

	CU_OK(cuDevSmResourceSplitByCount(&out, &n, &in, NULL, 0, sms));
	cr_assert_eq(n, 1);
	return out;
}

/* A green context of `sms` SMs (a multiple of 8) on device 0. */
static CUgreenCtx green_of(unsigned sms)
{
	CUdevResource r = one_group(sms);
	CUdevResourceDesc desc;
	CUgreenCtx g;

	cr_assert_eq(r.sm.smCount, sms);
	CU_OK(cuDevResourceGenerateDesc(&desc, &r, 1));
	CU_OK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
	return g;
}

static CUcontext ctx_of(CUgreenCtx g)
{
	CUcontext c;

	CU_OK(cuCtxFromGreenCtx(&c, g));
	return c;
}

/* ---- resources and splits --------------------------------------------------- */

Test(green, device_resource)
{
	CUdevResource r;

	simtest_init();
	r = device_sms();
	cr_assert_eq(r.type, CU_DEV_RESOURCE_TYPE_SM);
	cr_assert_eq(r.sm.smCount, 132);
	cr_assert_eq(r.sm.minSmPartitionSize, 8);
	/* smCount is a multiple of the alignment: 132 = 33 x 4. */
	cr_assert_eq(r.sm.smCoscheduledAlignment, 4);
	CU_ASSERT(cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_INVALID),
		  CUDA_ERROR_INVALID_RESOURCE_TYPE);
	CU_ASSERT(cuDeviceGetDevResource(0, &r, (CUdevResourceType)7),
		  CUDA_ERROR_INVALID_RESOURCE_TYPE);
	CU_ASSERT(cuDeviceGetDevResource(0, NULL, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetDevResource(1, &r, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_INVALID_DEVICE);
}

Test(green, device_resource_follows_sm_count)
{
	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	simtest_init();
	cr_assert_eq(device_sms().sm.smCount, 128);
	cr_assert_eq(device_sms().sm.smCoscheduledAlignment, 8);
}

Test(green, before_init)
{
	CUdevResource r;

	simtest_env();
	CU_ASSERT(cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_NOT_INITIALIZED);
}

/* Groups are minCount rounded up to a multiple of 8 (at least 8); as many
 * as fit, or as many as asked for; the rest is `remaining`. */
Test(green, split_counts)
{
	CUdevResource in, out[32], rem;
	unsigned n;

	simtest_init();
	in = device_sms();
	n = 0;
	CU_OK(cuDevSmResourceSplitByCount(NULL, &n, &in, NULL, 0, 16));
	cr_assert_eq(n, 8);
	CU_OK(cuDevSmResourceSplitByCount(NULL, &n, &in, NULL, 0, 0));
	cr_assert_eq(n, 16, "minCount 0: groups of 8");
	CU_OK(cuDevSmResourceSplitByCount(NULL, &n, &in, NULL, 0, 9));
	cr_assert_eq(n, 8, "minCount 9: groups of 16");
	n = 32;
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem, 0, 30));
	cr_assert_eq(n, 4);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(out[i].type, CU_DEV_RESOURCE_TYPE_SM);
		cr_assert_eq(out[i].sm.smCount, 32);
		cr_assert_eq(out[i].sm.minSmPartitionSize, 8);
		cr_assert_eq(out[i].sm.smCoscheduledAlignment, 8);
	}
	cr_assert_eq(rem.type, CU_DEV_RESOURCE_TYPE_SM);
	cr_assert_eq(rem.sm.smCount, 4);
	cr_assert_eq(rem.sm.smCoscheduledAlignment, 4);
	/* Fewer groups asked for: the remainder holds the rest. */
	n = 3;
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem, 0, 32));
	cr_assert_eq(n, 3);
	cr_assert_eq(rem.sm.smCount, 132 - 96);
	/* Half of 132 is not a multiple of 8: one group of 72. */
	n = 2;
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem, 0, 66));
	cr_assert_eq(n, 1);
	cr_assert_eq(out[0].sm.smCount, 72);
	cr_assert_eq(rem.sm.smCount, 60);
}

Test(green, split_ignoring_coscheduling)
{
	CUdevResource in, out[80], rem;
	unsigned n = 80;

	simtest_init();
	in = device_sms();
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem,
		CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 3));
	cr_assert_eq(n, 33);
	cr_assert_eq(out[0].sm.smCount, 4);
	cr_assert_eq(out[0].sm.minSmPartitionSize, 2);
	cr_assert_eq(rem.sm.smCount, 0);
	n = 1;
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem,
		CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE, 64));
	cr_assert_eq(out[0].sm.smCount, 64);
}

Test(green, split_errors)
{
	CUdevResource in, out[4], bad;
	unsigned n = 4;

	simtest_init();
	in = device_sms();
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0, 133),
		  CUDA_ERROR_INVALID_VALUE);
	/* 132 rounds up to 136: no group fits. */
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0, 132),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0x4, 8),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDevSmResourceSplitByCount(out, NULL, &in, NULL, 0, 8),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, NULL, NULL, 0, 8),
		  CUDA_ERROR_INVALID_VALUE);
	n = 0;
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0, 8),
		  CUDA_ERROR_INVALID_VALUE);
	n = 4;
	bad = in;
	bad.type = CU_DEV_RESOURCE_TYPE_INVALID;
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &bad, NULL, 0, 8),
		  CUDA_ERROR_INVALID_RESOURCE_TYPE);
	/* Not made by the API. */
	memset(&bad, 0, sizeof(bad));
	bad.type = CU_DEV_RESOURCE_TYPE_SM;
	bad.sm.smCount = 64;
	CU_ASSERT(cuDevSmResourceSplitByCount(out, &n, &bad, NULL, 0, 8),
		  CUDA_ERROR_INVALID_VALUE);
	/* A split's output is split again only through a green context. */
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0, 32));
	CU_ASSERT(cuDevSmResourceSplitByCount(out + 1, &n, &out[0], NULL, 0, 8),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
}

Test(green, descriptors)
{
	CUdevResource in, a[4], b[4], rem, pair[2];
	CUdevResourceDesc desc;
	unsigned n = 4;

	simtest_init();
	in = device_sms();
	CU_OK(cuDevSmResourceSplitByCount(a, &n, &in, &rem, 0, 32));
	n = 4;
	CU_OK(cuDevSmResourceSplitByCount(b, &n, &in, NULL, 0, 32));
	CU_OK(cuDevResourceGenerateDesc(&desc, a, 1));
	CU_OK(cuDevResourceGenerateDesc(&desc, a, 3));
	CU_OK(cuDevResourceGenerateDesc(&desc, &in, 1));
	pair[0] = a[0];
	pair[1] = rem;
	CU_OK(cuDevResourceGenerateDesc(&desc, pair, 2));
	/* Outputs of two splits, the same group twice, a device resource
	 * with another: not one split's outputs. */
	pair[1] = b[1];
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, pair, 2),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	pair[1] = a[0];
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, pair, 2),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	pair[1] = in;
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, pair, 2),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	pair[1] = a[1];
	pair[1].type = CU_DEV_RESOURCE_TYPE_INVALID;
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, pair, 2),
		  CUDA_ERROR_INVALID_RESOURCE_TYPE);
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, a, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDevResourceGenerateDesc(NULL, a, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, NULL, 1),
		  CUDA_ERROR_INVALID_VALUE);
}

/* An empty remainder makes no context. */
Test(green, descriptor_of_no_sms)
{
	CUdevResource in, out[2], rem;
	CUdevResourceDesc desc;
	unsigned n = 2;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	simtest_init();
	in = device_sms();
	CU_OK(cuDevSmResourceSplitByCount(out, &n, &in, &rem, 0, 64));
	cr_assert_eq(n, 2);
	cr_assert_eq(rem.sm.smCount, 0);
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, &rem, 1),
		  CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
}

/* ---- green contexts ---------------------------------------------------------- */

Test(green, create_query_destroy)
{
	CUcontext primary, c, cur;
	CUdevResource r;
	CUgreenCtx g, g2;
	CUdevice dev = -1;
	unsigned long long id, id2;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	primary = simtest_init();
	g = green_of(32);
	g2 = green_of(64);
	CU_OK(cuGreenCtxGetDevResource(g, &r, CU_DEV_RESOURCE_TYPE_SM));
	cr_assert_eq(r.sm.smCount, 32);
	c = ctx_of(g);
	cr_assert_neq(c, primary);
	cr_assert_eq(ctx_of(g), c, "one context per green context");
	CU_OK(cuCtxGetDevResource(c, &r, CU_DEV_RESOURCE_TYPE_SM));
	cr_assert_eq(r.sm.smCount, 32);
	CU_OK(cuCtxGetDevResource(primary, &r, CU_DEV_RESOURCE_TYPE_SM));
	cr_assert_eq(r.sm.smCount, 128);
	CU_OK(cuCtxGetDevice(&dev));
	/* Not current until made so. */
	CU_OK(cuCtxGetCurrent(&cur));
	cr_assert_eq(cur, primary);
	CU_OK(cuCtxPushCurrent(c));
	CU_OK(cuCtxGetDevice(&dev));
	cr_assert_eq(dev, 0);
	CU_OK(cuCtxGetDevResource(NULL, &r, CU_DEV_RESOURCE_TYPE_SM));
	cr_assert_eq(r.sm.smCount, 32);
	CU_OK(cuGreenCtxGetId(NULL, &id));
	CU_OK(cuGreenCtxGetId(g2, &id2));
	cr_assert_neq(id, id2);
	CU_OK(cuGreenCtxGetId(g, &id2));
	cr_assert_eq(id, id2);
	CU_OK(cuCtxPopCurrent(NULL));
	CU_ASSERT(cuGreenCtxGetId(NULL, &id), CUDA_ERROR_INVALID_CONTEXT);
	/* Its context goes with the green context. */
	CU_ASSERT(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuGreenCtxDestroy(g));
	CU_ASSERT(cuGreenCtxDestroy(g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
	CU_ASSERT(cuCtxFromGreenCtx(&c, g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
	CU_ASSERT(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuGreenCtxDestroy(g2));
	CU_ASSERT(cuGreenCtxDestroy(NULL), CUDA_ERROR_INVALID_CONTEXT);
}

Test(green, create_errors)
{
	CUdevResource r;
	CUdevResourceDesc desc;
	CUgreenCtx g;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	r = one_group(16);
	CU_OK(cuDevResourceGenerateDesc(&desc, &r, 1));
	CU_ASSERT(cuGreenCtxCreate(&g, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGreenCtxCreate(&g, desc, 0, 3), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGreenCtxCreate(&g, desc, 1, CU_GREEN_CTX_DEFAULT_STREAM),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGreenCtxCreate(&g, desc, 2, CU_GREEN_CTX_DEFAULT_STREAM),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuGreenCtxCreate(&g, NULL, 0, CU_GREEN_CTX_DEFAULT_STREAM),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGreenCtxCreate(NULL, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuCtxFromGreenCtx(NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
}

/* It retains the primary context and releases it when destroyed. */
Test(green, holds_the_primary_context)
{
	CUdevResource r;
	CUdevResourceDesc desc;
	CUgreenCtx g;
	unsigned flags;
	int active;

	simtest_env();
	CU_OK(cuInit(0));
	r = one_group(16);
	CU_OK(cuDevResourceGenerateDesc(&desc, &r, 1));
	CU_OK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 1);
	CU_OK(cuGreenCtxDestroy(g));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 0);
}

Test(green, streams)
{
	CUcontext primary, c, pc;
	CUgreenCtx g, got;
	CUstream s, ps;
	unsigned flags;

	primary = simtest_init();
	g = green_of(16);
	c = ctx_of(g);
	CU_ASSERT(cuGreenCtxStreamCreate(&s, g, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGreenCtxStreamCreate(NULL, g, CU_STREAM_NON_BLOCKING, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
	CU_OK(cuStreamGetFlags(s, &flags));
	cr_assert_eq(flags, CU_STREAM_NON_BLOCKING);
	CU_OK(cuStreamGetGreenCtx(s, &got));
	cr_assert_eq(got, g);
	CU_OK(cuStreamGetCtx(s, &pc));
	cr_assert_eq(pc, c);
	CU_OK(cuStreamGetCtx_v2(s, &pc, &got));
	cr_assert_eq(pc, primary);
	cr_assert_eq(got, g);
	/* Ordinary streams and the NULL stream of the primary context. */
	CU_OK(cuStreamCreate(&ps, 0));
	CU_OK(cuStreamGetGreenCtx(ps, &got));
	cr_assert_null(got);
	CU_OK(cuStreamGetCtx_v2(NULL, &pc, &got));
	cr_assert_eq(pc, primary);
	cr_assert_null(got);
	/* With the green context current, the NULL stream is its own. */
	CU_OK(cuCtxPushCurrent(c));
	CU_OK(cuStreamGetGreenCtx(NULL, &got));
	cr_assert_eq(got, g);
	CU_ASSERT(cuStreamGetCtx_v2(CU_STREAM_PER_THREAD, &pc, &got),
		  CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuCtxPopCurrent(NULL));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuGreenCtxDestroy(g));
}

/* cuDriverGetVersion says 13.0, and cuGetProcAddress has the green-context
 * entry points from 12.4 on: what tells a caller green contexts exist. */
Test(green, discoverable)
{
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;
	int version = 0;

	simtest_init();
	CU_OK(cuDriverGetVersion(&version));
	cr_assert_geq(version, 12040);
	CU_OK(cuGetProcAddress("cuGreenCtxCreate", &fn, 12040, 0, &st));
	cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
	cr_assert_eq(fn, (void *)cuGreenCtxCreate);
	CU_ASSERT(cuGetProcAddress("cuGreenCtxCreate", &fn, 12030, 0, &st),
		  CUDA_ERROR_NOT_FOUND);
	cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CU_OK(cuGetProcAddress("cuGreenCtxStreamCreate", &fn, 13000, 0, &st));
	CU_OK(cuGetProcAddress("cuStreamGetCtx", &fn, 13000, 0, &st));
	cr_assert_eq(fn, (void *)cuStreamGetCtx_v2);
}

/* VGPU_SIM_GREEN_CONTEXTS=0: the entry points exist and say no. */
Test(green, off_switch)
{
	CUdevResource r;
	CUdevResourceDesc desc = NULL;
	CUgreenCtx g = NULL, got;
	CUcontext c, primary;
	CUstream s;
	unsigned n = 1;
	unsigned long long id;
	void *fn = NULL;

	setenv("VGPU_SIM_GREEN_CONTEXTS", "0", 1);
	primary = simtest_init();
	memset(&r, 0, sizeof(r));
	CU_ASSERT(cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuCtxGetDevResource(primary, &r, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuDevSmResourceSplitByCount(NULL, &n, &r, NULL, 0, 8),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuDevResourceGenerateDesc(&desc, &r, 1),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxDestroy(g), CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuCtxFromGreenCtx(&c, g), CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxGetDevResource(g, &r, CU_DEV_RESOURCE_TYPE_SM),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxRecordEvent(g, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxWaitEvent(g, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGreenCtxGetId(g, &id), CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuStreamGetGreenCtx(NULL, &got), CUDA_ERROR_NOT_SUPPORTED);
	/* A stream query still answers: no green context. */
	CU_OK(cuStreamGetCtx_v2(NULL, &c, &got));
	cr_assert_eq(c, primary);
	cr_assert_null(got);
	CU_OK(cuGetProcAddress("cuGreenCtxCreate", &fn, 13000, 0, NULL));
}

Test(green, off_switch_values)
{
	static const char *const off[] = { "0", "off", "NO", "false" };

	simtest_env();
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		pid_t pid = fork();
		int status;
		if (pid == 0) {
			CUdevResource r;
			setenv("VGPU_SIM_GREEN_CONTEXTS", off[i], 1);
			if (cuInit(0) != CUDA_SUCCESS)
				_exit(1);
			_exit(cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM) ==
			      CUDA_ERROR_NOT_SUPPORTED ? 0 : 2);
		}
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "VGPU_SIM_GREEN_CONTEXTS=%s", off[i]);
	}
}

Test(green, off_switch_bad_value)
{
	char msg[1024];

	setenv("VGPU_SIM_GREEN_CONTEXTS", "maybe", 1);
	simtest_env();
	simtest_stderr_begin();
	CU_ASSERT(cuInit(0), CUDA_ERROR_INVALID_VALUE);
	simtest_stderr_end(msg, sizeof(msg));
	cr_assert_not_null(strstr(msg, "VGPU_SIM_GREEN_CONTEXTS"), "%s", msg);
	cr_assert_not_null(strstr(msg, "maybe"), "%s", msg);
}

#ifdef SIMTEST_KERNELS

/* ---- timing -------------------------------------------------------------------- */

static CUfunction spin_in(CUcontext c)
{
	CUmodule m;
	CUfunction f;

	CU_OK(cuCtxPushCurrent(c));
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_spin"));
	CU_OK(cuCtxPopCurrent(NULL));
	return f;
}

/* Milliseconds between two events around a vgpu_spin of ns on s. */
static double spin_ms(CUfunction f, CUstream s, unsigned long long ns,
		      unsigned long long times[2])
{
	CUdeviceptr dt;
	void *params[] = { &ns, &dt };
	CUevent a, b;
	float ms;

	CU_OK(cuMemAlloc(&dt, 2 * sizeof(unsigned long long)));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	CU_OK(cuEventRecord(a, s));
	CU_OK(cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 0, s, params, NULL));
	CU_OK(cuEventRecord(b, s));
	CU_OK(cuEventSynchronize(b));
	CU_OK(cuEventElapsedTime(&ms, a, b));
	CU_OK(cuMemcpyDtoH(times, dt, 2 * sizeof(unsigned long long)));
	CU_OK(cuMemFree(dt));
	CU_OK(cuEventDestroy(a));
	CU_OK(cuEventDestroy(b));
	return ms;
}

/* The times of `tries` vgpu_spin of ns on s: each at least want_ms (less
 * 1%), and the shortest under limit_ms. Extra time is noise of a loaded
 * host (it only adds), so the shortest of a few is the model's. */
static void spin_check(CUfunction f, CUstream s, unsigned long long ns,
		       double want_ms, double limit_ms)
{
	unsigned long long t[2];
	double best = 1e9;

	for (int i = 0; i < 3; i++) {
		double ms = spin_ms(f, s, ns, t);
		cr_assert_geq(ms, want_ms * 0.99, "%.3f ms, want %.1f", ms,
			      want_ms);
		cr_assert_geq((double)(t[1] - t[0]), want_ms * 0.99 * MS,
			      "the kernel saw %llu ns, want %.1f ms",
			      t[1] - t[0], want_ms);
		best = ms < best ? ms : best;
	}
	cr_assert_lt(best, limit_ms, "%.3f ms, want %.1f", best, want_ms);
}

/* k of N SMs: N/k times the nominal time, by events and by the kernel's own
 * start and end; the whole device: the nominal time. */
Test(green, kernel_takes_n_over_k)
{
	CUcontext primary;
	CUgreenCtx half, quarter;
	CUfunction f;
	CUstream s;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	primary = simtest_init();
	f = spin_in(primary);
	half = green_of(64);
	quarter = green_of(32);
	CU_OK(cuGreenCtxStreamCreate(&s, half, CU_STREAM_NON_BLOCKING, 0));
	spin_check(f, s, 2 * MS, 4.0, 5.5);
	CU_OK(cuGreenCtxStreamCreate(&s, quarter, CU_STREAM_NON_BLOCKING, 0));
	spin_check(f, s, 2 * MS, 8.0, 10.0);
	spin_check(f, NULL, 2 * MS, 2.0, 3.5);
}

/* A kernel with no host form: N/k times VGPU_SIM_KERNEL_NS, in a module
 * loaded in the green context itself. */
Test(green, no_host_form_takes_n_over_k)
{
	CUgreenCtx g;
	CUfunction f;
	CUevent a, b;
	float ms, best = 1e9f;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	setenv("VGPU_SIM_KERNEL_NS", "2000000", 1);
	simtest_init();
	g = green_of(64);
	CU_OK(cuCtxPushCurrent(ctx_of(g)));
	f = simtest_own_kernel();
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	for (int i = 0; i < 3; i++) {
		CU_OK(cuEventRecord(a, NULL));
		simtest_launch_own(f, NULL);
		CU_OK(cuEventRecord(b, NULL));
		CU_OK(cuEventSynchronize(b));
		CU_OK(cuEventElapsedTime(&ms, a, b));
		cr_assert_geq(ms, 3.96f, "%.3f ms, want 4", (double)ms);
		best = ms < best ? ms : best;
	}
	cr_assert_lt(best, 5.5f, "%.3f ms, want 4", (double)best);
	CU_OK(cuEventDestroy(a));
	CU_OK(cuEventDestroy(b));
}

/* Two green contexts of half the device each, in one process: their kernels
 * run side by side. Two streams of one green context share its SMs: one
 * after the other. */
Test(green, disjoint_contexts_overlap_in_a_process)
{
	unsigned long long ns = 20 * MS, ta[2], tb[2];
	CUdeviceptr da, db;
	void *pa[] = { &ns, &da }, *pb[] = { &ns, &db };
	CUgreenCtx g1, g2;
	CUstream s1, s2;
	CUfunction f;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	f = spin_in(simtest_init());
	g1 = green_of(64);
	g2 = green_of(64);
	CU_OK(cuMemAlloc(&da, sizeof(ta)));
	CU_OK(cuMemAlloc(&db, sizeof(tb)));
	CU_OK(cuGreenCtxStreamCreate(&s1, g1, CU_STREAM_NON_BLOCKING, 0));
	CU_OK(cuGreenCtxStreamCreate(&s2, g2, CU_STREAM_NON_BLOCKING, 0));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s1, pa, NULL));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s2, pb, NULL));
	CU_OK(cuStreamSynchronize(s1));
	CU_OK(cuStreamSynchronize(s2));
	CU_OK(cuMemcpyDtoH(ta, da, sizeof(ta)));
	CU_OK(cuMemcpyDtoH(tb, db, sizeof(tb)));
	cr_assert(ta[0] < tb[1] && tb[0] < ta[1], "they did not overlap");
	/* Both streams on g1. */
	CU_OK(cuGreenCtxStreamCreate(&s2, g1, CU_STREAM_NON_BLOCKING, 0));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s1, pa, NULL));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s2, pb, NULL));
	CU_OK(cuStreamSynchronize(s1));
	CU_OK(cuStreamSynchronize(s2));
	CU_OK(cuMemcpyDtoH(ta, da, sizeof(ta)));
	CU_OK(cuMemcpyDtoH(tb, db, sizeof(tb)));
	cr_assert(ta[1] <= tb[0] || tb[1] <= ta[0], "one green context's "
		  "kernels overlapped");
}

/* ---- across processes ---------------------------------------------------------- */

struct runner {
	int ready[2], go[2], times[2];
	unsigned sms;             /* 0: the primary context */
	unsigned long long ns;
};

static pid_t spawn(int (*fn)(struct runner *), struct runner *r)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(fn(r));
	return pid;
}

static void succeeded(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a child failed (status %d)", status);
}

/* In a child: a green context of r->sms SMs (or the primary context), one
 * vgpu_spin of r->ns when told to go; writes the kernel's start and end. */
static int spin_runner(struct runner *r)
{
	unsigned long long t[2];
	CUdevResource in, grp;
	CUdevResourceDesc desc;
	CUcontext c;
	CUgreenCtx g;
	CUmodule m;
	CUfunction f;
	CUdeviceptr dt;
	void *params[] = { &r->ns, &dt };
	unsigned n = 1;
	char ch = 'r';

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS)
		return 10;
	if (r->sms && (cuDeviceGetDevResource(0, &in, CU_DEV_RESOURCE_TYPE_SM) ||
		       cuDevSmResourceSplitByCount(&grp, &n, &in, NULL, 0, r->sms) ||
		       cuDevResourceGenerateDesc(&desc, &grp, 1) ||
		       cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM) ||
		       cuCtxFromGreenCtx(&c, g)))
		return 11;
	if (cuCtxSetCurrent(c) || cuModuleLoadData(&m, vgpu_kernels_fatbin) ||
	    cuModuleGetFunction(&f, m, "vgpu_spin") ||
	    cuMemAlloc(&dt, sizeof(t)))
		return 12;
	if (write(r->ready[1], &ch, 1) != 1 || read(r->go[0], &ch, 1) != 1)
		return 13;
	if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) ||
	    cuMemcpyDtoH(t, dt, sizeof(t)))
		return 14;
	if (write(r->times[1], t, sizeof(t)) != sizeof(t))
		return 15;
	return 0;
}

/* Starts two runners together; their kernels' [start, end) in a and b. */
static void race(struct runner *ra, struct runner *rb, unsigned long long a[2],
		 unsigned long long b[2])
{
	pid_t pa, pb;
	char c[2];

	cr_assert_eq(pipe(ra->ready), 0);
	cr_assert_eq(pipe(ra->go), 0);
	cr_assert_eq(pipe(ra->times), 0);
	memcpy(rb->ready, ra->ready, sizeof(ra->ready));
	memcpy(rb->go, ra->go, sizeof(ra->go));
	memcpy(rb->times, ra->times, sizeof(ra->times));
	pa = spawn(spin_runner, ra);
	pb = spawn(spin_runner, rb);
	cr_assert_eq(read(ra->ready[0], c, 1), 1);
	cr_assert_eq(read(ra->ready[0], c + 1, 1), 1);
	cr_assert_eq(write(ra->go[1], "gg", 2), 2);
	succeeded(pa);
	succeeded(pb);
	cr_assert_eq(read(ra->times[0], a, 2 * sizeof(*a)), 2 * sizeof(*a));
	cr_assert_eq(read(ra->times[0], b, 2 * sizeof(*b)), 2 * sizeof(*b));
}

/* Two processes, each on a green context of half the device: both kernels
 * (20 ms nominal, 40 ms on half) at once, as the device's record shows
 * (their own stamps would also show a host thread slow to start). */
Test(green, two_processes_run_side_by_side, .timeout = 30)
{
	struct runner ra = { .sms = 64, .ns = 20 * MS }, rb = ra;
	unsigned long long a[2], b[2];
	struct simtest_record r;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	simtest_init_shared();
	race(&ra, &rb, a, b);
	cr_assert_geq(a[1] - a[0], 40 * MS - 50000);
	cr_assert_geq(b[1] - b[0], 40 * MS - 50000);
	simtest_record_read(&r, NULL);
	cr_assert_eq(r.n, 2);
	cr_assert(r.iv[0].start_ns < r.iv[1].end_ns &&
		  r.iv[1].start_ns < r.iv[0].end_ns, "one after the other: "
		  "[%llu, %llu) and [%llu, %llu)",
		  (unsigned long long)r.iv[0].start_ns,
		  (unsigned long long)r.iv[0].end_ns,
		  (unsigned long long)r.iv[1].start_ns,
		  (unsigned long long)r.iv[1].end_ns);
	simtest_record_free(&r);
}

/* The device's record of the two runners' kernels: they never held more
 * SMs together than the device has. (Not their own stamps: a kernel's SMs
 * are free at its deadline, so a host thread late to stamp its end may
 * stamp it after the next kernel's start.) */
static void record_fits(void)
{
	struct simtest_record r;

	simtest_record_read(&r, NULL);
	cr_assert_eq(r.n, 2);
	simtest_record_assert_fits(&r);
	simtest_record_free(&r);
}

/* A kernel of the whole device does not run beside one of a green context,
 * in another process. */
Test(green, full_device_excludes_green, .timeout = 30)
{
	struct runner ra = { .sms = 64, .ns = 10 * MS }, rb = ra;
	unsigned long long a[2], b[2];

	rb.sms = 0;
	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	simtest_init_shared();
	race(&ra, &rb, a, b);
	record_fits();
}

/* Green contexts whose SMs add up to more than the device: one waits. */
Test(green, oversubscribed_green_contexts_wait, .timeout = 30)
{
	struct runner ra = { .sms = 80, .ns = 10 * MS }, rb = ra;
	unsigned long long a[2], b[2];

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	simtest_init_shared();
	race(&ra, &rb, a, b);
	record_fits();
}

/* Holds 64 SMs in a 10 s kernel until killed. */
static int long_green_kernel(struct runner *r)
{
	CUdevResource in, grp;
	CUdevResourceDesc desc;
	CUcontext c;
	CUgreenCtx g;
	CUfunction f;
	CUdeviceptr p = 0;
	float scale = 1.0f;
	int n0 = 0;
	void *params[] = { &p, &scale, &n0 };
	unsigned n = 1;
	CUmodule m;
	char ch = 'r';

	setenv("VGPU_SIM_KERNEL_NS", "10000000000", 1);
	if (cuInit(0) || cuDeviceGetDevResource(0, &in, CU_DEV_RESOURCE_TYPE_SM) ||
	    cuDevSmResourceSplitByCount(&grp, &n, &in, NULL, 0, r->sms) ||
	    cuDevResourceGenerateDesc(&desc, &grp, 1) ||
	    cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM) ||
	    cuCtxFromGreenCtx(&c, g) || cuCtxSetCurrent(c) ||
	    cuModuleLoad(&m, SIMTEST_OWN_CUBIN) ||
	    cuModuleGetFunction(&f, m, "user_scale") ||
	    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL))
		ch = 'x';
	if (write(r->ready[1], &ch, 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* A process killed while its green context's kernel holds SMs gives them
 * back: a kernel of the whole device runs soon after. */
Test(green, killed_process_returns_its_sms, .timeout = 20)
{
	struct runner r = { .sms = 64 };
	unsigned long long t[2];
	uint64_t t0, took;
	CUfunction f;
	char c = 0;
	pid_t pid;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	f = spin_in(simtest_init_shared());
	cr_assert_eq(pipe(r.ready), 0);
	pid = spawn(long_green_kernel, &r);
	if (read(r.ready[0], &c, 1) == 1 && c == 'r')
		simtest_sleep_ms(50);   /* let its kernel take its SMs */
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	cr_assert_eq(c, 'r', "the child could not launch");
	t0 = simtest_now_ns();
	spin_ms(f, NULL, 1 * MS, t);
	took = simtest_now_ns() - t0;
	cr_assert_lt(took, 5000000000ull, "%llu ms", took / MS);
}

/* ---- events -------------------------------------------------------------------- */

/* cuGreenCtxRecordEvent captures the work of all the green context's
 * streams; the event may come from the primary context. */
Test(green, record_event_captures_all_streams)
{
	unsigned long long ns = 30 * MS;
	CUdeviceptr dt;
	void *params[] = { &ns, &dt };
	CUgreenCtx g;
	CUstream s;
	CUevent e;
	CUfunction f;

	setenv("VGPU_SIM_SM_COUNT", "128", 1);
	f = spin_in(simtest_init());
	g = green_of(64);
	CU_OK(cuMemAlloc(&dt, 16));
	CU_OK(cuEventCreate(&e, 0));
	CU_OK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
	CU_OK(cuGreenCtxRecordEvent(g, e));
	CU_ASSERT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
	CU_OK(cuEventSynchronize(e));
	CU_OK(cuStreamQuery(s));
	CU_ASSERT(cuGreenCtxRecordEvent(g, NULL), CUDA_ERROR_INVALID_HANDLE);
}

/* cuGreenCtxWaitEvent: later work of the green context's NULL stream waits
 * for the event, recorded here on a stream of the primary context. */
Test(green, wait_event)
{
	struct simtest_gate *gate = simtest_gate_new();
	struct simtest_log log = { .n = 0 };
	CUgreenCtx g;
	CUstream ps;
	CUevent e;

	simtest_init();
	g = green_of(16);
	CU_OK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&e, 0));
	simtest_gate_queue(gate, ps);
	CU_OK(cuEventRecord(e, ps));
	CU_OK(cuGreenCtxWaitEvent(g, e));
	CU_OK(cuCtxPushCurrent(ctx_of(g)));
	simtest_log_queue(&log, NULL, 1);
	simtest_sleep_ms(20);
	cr_assert_eq(simtest_log_count(&log), 0, "ran before the event");
	simtest_gate_open(gate);
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(simtest_log_count(&log), 1);
	CU_OK(cuCtxPopCurrent(NULL));
}

#endif
