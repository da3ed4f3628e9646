/* test_launch.c - kernel launches in every form: the workload kernels' host
 * forms compute the right results; a kernel with no host form runs as a
 * no-op of VGPU_SIM_KERNEL_NS, or is refused (VGPU_SIM_UNKNOWN_KERNEL=fail),
 * named on stderr once per name.
 */
#include "simtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vgpu_kernels.h"

TestSuite(launch, .init = simtest_clean_env, .fini = simtest_remove_state);

#define N 4096

static CUmodule load_workload(void)
{
	CUmodule m;

	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	return m;
}

static CUfunction get(CUmodule m, const char *name)
{
	CUfunction f;

	CU_OK(cuModuleGetFunction(&f, m, name));
	return f;
}

/* x[i] = i, y[i] = 1 on the device: saxpy with a = 2 gives 2i + 1 exactly. */
struct saxpy {
	CUdeviceptr x, y;
	unsigned long long n;
	float a;
	void *params[4];
};

static void saxpy_setup(struct saxpy *s)
{
	float h[N];

	CU_OK(cuMemAlloc(&s->x, N * sizeof(float)));
	CU_OK(cuMemAlloc(&s->y, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		h[i] = (float)i;
	CU_OK(cuMemcpyHtoD(s->x, h, sizeof(h)));
	CU_OK(cuMemsetD32(s->y, 0x3f800000, N));   /* 1.0f */
	s->n = N;
	s->a = 2.0f;
	s->params[0] = &s->n;
	s->params[1] = &s->a;
	s->params[2] = &s->x;
	s->params[3] = &s->y;
}

/* y is (2i + 1) after `times` launches over the initial y = 1: y = 1 + 2i*t. */
static void saxpy_check(const struct saxpy *s, int times)
{
	float h[N];

	CU_OK(cuMemcpyDtoH(h, s->y, sizeof(h)));
	for (int i = 0; i < N; i++)
		cr_assert_eq(h[i], 1.0f + 2.0f * (float)i * (float)times,
			     "y[%d] = %f after %d launches", i, (double)h[i],
			     times);
}

Test(launch, saxpy_kernel_params)
{
	struct saxpy s;
	CUfunction f;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	CU_OK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, NULL, s.params, NULL));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 1);
}

Test(launch, saxpy_general_values)
{
	float x[N], y[N], out[N];
	CUdeviceptr dx, dy;
	unsigned long long n = N;
	float a = 0.37f;
	void *params[] = { &n, &a, &dx, &dy };
	CUfunction f;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	for (int i = 0; i < N; i++) {
		x[i] = (float)i / 7.0f - 100.0f;
		y[i] = (float)(N - i) * 0.011f;
	}
	CU_OK(cuMemAlloc(&dx, sizeof(x)));
	CU_OK(cuMemAlloc(&dy, sizeof(y)));
	CU_OK(cuMemcpyHtoD(dx, x, sizeof(x)));
	CU_OK(cuMemcpyHtoD(dy, y, sizeof(y)));
	CU_OK(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuMemcpyDtoH(out, dy, sizeof(out)));
	for (int i = 0; i < N; i++) {
		volatile float p = a * x[i];   /* rounded apart, as the kernel */
		cr_assert_eq(out[i], p + y[i], "i=%d", i);
	}
}

struct touch {
	CUdeviceptr buf, mism;
	unsigned long long n;
	unsigned expect, write;
	CUdeviceptr mism_arg;
	void *params[5];
};

static void touch_setup(struct touch *t)
{
	t->n = N;
	CU_OK(cuMemAlloc(&t->buf, N * sizeof(uint32_t)));
	CU_OK(cuMemAlloc(&t->mism, sizeof(unsigned long long)));
	CU_OK(cuMemsetD8(t->mism, 0, sizeof(unsigned long long)));
	t->params[0] = &t->buf;
	t->params[1] = &t->n;
	t->params[2] = &t->expect;
	t->params[3] = &t->write;
	t->params[4] = &t->mism_arg;
}

static unsigned long long mismatches(const struct touch *t)
{
	unsigned long long m = 0;

	CU_OK(cuMemcpyDtoH(&m, t->mism, sizeof(m)));
	return m;
}

Test(launch, touch_writes_and_checks)
{
	struct touch t;
	uint32_t h[N];
	CUfunction f;

	simtest_init();
	f = get(load_workload(), "vgpu_touch");
	touch_setup(&t);
	/* First pass: no check, write seed 11. */
	t.expect = 0;
	t.write = 11;
	t.mism_arg = 0;
	CU_OK(cuLaunchKernel(f, 8, 1, 1, 64, 1, 1, 0, NULL, t.params, NULL));
	CU_OK(cuMemcpyDtoH(h, t.buf, sizeof(h)));
	for (uint64_t i = 0; i < N; i++)
		cr_assert_eq(h[i], vgpu_touch_pattern(11, i), "i=%llu",
			     (unsigned long long)i);
	/* Second: expect 11 (all match), write 12. */
	t.expect = 11;
	t.write = 12;
	t.mism_arg = t.mism;
	CU_OK(cuLaunchKernel(f, 8, 1, 1, 64, 1, 1, 0, NULL, t.params, NULL));
	cr_assert_eq(mismatches(&t), 0);
	/* Third: expect 11 again, but 12 is there: every element differs. */
	CU_OK(cuLaunchKernel(f, 8, 1, 1, 64, 1, 1, 0, NULL, t.params, NULL));
	cr_assert_eq(mismatches(&t), N);
}

/* The extra form: the application packs the buffer itself, at the offsets
 * cuFuncGetParamInfo reports. */
Test(launch, touch_extra_buffer)
{
	struct touch t;
	unsigned char buf[32];
	size_t size = sizeof(buf), off;
	uint32_t h[N];
	CUfunction f;
	uint32_t seed = 77;

	simtest_init();
	f = get(load_workload(), "vgpu_touch");
	touch_setup(&t);
	memset(buf, 0, sizeof(buf));
	CU_OK(cuFuncGetParamInfo(f, 0, &off, NULL));
	memcpy(buf + off, &t.buf, 8);
	CU_OK(cuFuncGetParamInfo(f, 1, &off, NULL));
	memcpy(buf + off, &t.n, 8);
	CU_OK(cuFuncGetParamInfo(f, 3, &off, NULL));
	memcpy(buf + off, &seed, 4);
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, buf,
		CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_END,
	};
	CU_OK(cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
	CU_OK(cuMemcpyDtoH(h, t.buf, sizeof(h)));
	for (uint64_t i = 0; i < N; i++)
		cr_assert_eq(h[i], vgpu_touch_pattern(77, i));
}

Test(launch, saxpy_extra_buffer)
{
	struct saxpy s;
	unsigned char buf[32];
	size_t size = sizeof(buf);
	CUfunction f;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_BUFFER_POINTER, buf,
		NULL,   /* "terminated with either NULL or CU_LAUNCH_PARAM_END" */
	};

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	memset(buf, 0, sizeof(buf));
	memcpy(buf + 0, &s.n, 8);
	memcpy(buf + 8, &s.a, 4);
	memcpy(buf + 16, &s.x, 8);
	memcpy(buf + 24, &s.y, 8);
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 1);
}

Test(launch, bad_parameters)
{
	struct saxpy s;
	unsigned char buf[32] = { 0 };
	size_t small = 16;
	CUfunction f;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, buf,
		CU_LAUNCH_PARAM_BUFFER_SIZE, &small,
		CU_LAUNCH_PARAM_END,
	};
	void *no_size[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, buf,
			    CU_LAUNCH_PARAM_END };

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	/* "CUDA_ERROR_INVALID_VALUE will be returned if kernel parameters are
	 * specified with both kernelParams and extra" */
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, s.params, extra),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, no_size),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, s.params,
				 NULL), CUDA_ERROR_INVALID_HANDLE);
	void *missing[] = { &s.n, &s.a, NULL, &s.y };
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, missing, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 0);
}

Test(launch, bad_dimensions)
{
	struct saxpy s;
	CUfunction f;
	void **p;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	p = s.params;
	CU_ASSERT(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 0, 1, 32, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 65536, 32, 1, 1, 0, NULL, p, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernel(f, 0x80000000u, 1, 1, 32, 1, 1, 0, NULL, p,
				 NULL), CUDA_ERROR_INVALID_VALUE);
	/* More dynamic shared memory than the function allows. */
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 48 * 1024 + 1, NULL, p,
				 NULL), CUDA_ERROR_INVALID_VALUE);
	/* The limits themselves are fine. */
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 1024, 1, 1, 48 * 1024, NULL, p, NULL));
	CU_OK(cuLaunchKernel(f, 2, 65535, 1, 1, 1, 64, 0, NULL, p, NULL));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 2);
}

Test(launch, launch_kernel_ex)
{
	struct saxpy s;
	CUlaunchAttribute attr;
	CUlaunchConfig cfg;
	CUstream st;
	CUfunction f;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	memset(&cfg, 0, sizeof(cfg));
	memset(&attr, 0, sizeof(attr));
	attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
	attr.value.cooperative = 1;
	cfg.gridDimX = 8;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 128;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = st;
	CU_OK(cuLaunchKernelEx(&cfg, f, s.params, NULL));
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	CU_OK(cuLaunchKernelEx(&cfg, f, s.params, NULL));
	CU_OK(cuStreamSynchronize(st));
	saxpy_check(&s, 2);
	cfg.gridDimX = 0;
	CU_ASSERT(cuLaunchKernelEx(&cfg, f, s.params, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	cfg.gridDimX = 1;
	cfg.attrs = NULL;
	CU_ASSERT(cuLaunchKernelEx(&cfg, f, s.params, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuLaunchKernelEx(NULL, f, s.params, NULL),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(launch, cooperative)
{
	struct saxpy s;
	CUfunction f;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	CU_OK(cuLaunchCooperativeKernel(f, 4, 1, 1, 64, 1, 1, 0, NULL, s.params));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 1);
}

/* A CUkernel from a library, cast to CUfunction, launches in the current
 * context. */
Test(launch, kernel_handle_as_function)
{
	struct saxpy s;
	CUlibrary lib;
	CUkernel k;

	simtest_init();
	saxpy_setup(&s);
	CU_OK(cuLibraryLoadData(&lib, vgpu_kernels_fatbin, NULL, NULL, 0, NULL,
				NULL, 0));
	CU_OK(cuLibraryGetKernel(&k, lib, "vgpu_saxpy"));
	CU_OK(cuLaunchKernel((CUfunction)k, 2, 1, 1, 64, 1, 1, 0, NULL, s.params,
			     NULL));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 1);
}

/* "the context to launch the kernel on will either be taken from the
 * specified stream hStream or the current context in case of NULL stream" */
Test(launch, kernel_handle_takes_context_from_stream)
{
	struct saxpy s;
	CUcontext primary, other;
	CUlibrary lib;
	CUkernel k;
	CUstream st;

	simtest_init();
	saxpy_setup(&s);
	CU_OK(cuStreamCreate(&st, 0));
	CU_OK(cuLibraryLoadData(&lib, vgpu_kernels_fatbin, NULL, NULL, 0, NULL,
				NULL, 0));
	CU_OK(cuLibraryGetKernel(&k, lib, "vgpu_saxpy"));
	CU_OK(cuCtxCreate(&other, NULL, 0, 0));
	CU_OK(cuLaunchKernel((CUfunction)k, 2, 1, 1, 64, 1, 1, 0, st, s.params,
			     NULL));
	CU_OK(cuStreamSynchronize(st));
	/* With no context current at all. */
	CU_OK(cuCtxPopCurrent(&other));
	CU_OK(cuCtxPopCurrent(&primary));
	CU_OK(cuLaunchKernel((CUfunction)k, 2, 1, 1, 64, 1, 1, 0, st, s.params,
			     NULL));
	CU_OK(cuStreamSynchronize(st));
	CU_ASSERT(cuLaunchKernel((CUfunction)k, 2, 1, 1, 64, 1, 1, 0, NULL,
				 s.params, NULL), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuCtxPushCurrent(primary));
	saxpy_check(&s, 2);
}

/* VGPU_SIM_FAIL=launch:2: the second launch fails and does nothing. */
Test(launch, fail_injection_second_launch)
{
	struct saxpy s;
	CUfunction f;

	setenv("VGPU_SIM_FAIL", "launch:2", 1);
	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, s.params, NULL));
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, s.params, NULL),
		  CUDA_ERROR_LAUNCH_FAILED);
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, s.params, NULL));
	CU_OK(cuCtxSynchronize());
	saxpy_check(&s, 2);
}

/* The own kernel has no host form: its data is untouched, and it lasts
 * VGPU_SIM_KERNEL_NS (20 ms here). */
Test(launch, own_kernel_is_a_timed_no_op)
{
	float h[64], out[64];
	CUdeviceptr d;
	float scale = 3.0f;
	int n = 64;
	void *params[] = { &d, &scale, &n };
	CUmodule m;
	CUfunction f;
	CUevent a, b;
	uint64_t t0, wall;
	float ms;

	setenv("VGPU_SIM_KERNEL_NS", "20000000", 1);
	simtest_init();
	CU_OK(cuModuleLoad(&m, SIMTEST_OWN_CUBIN));
	f = get(m, "user_scale");
	for (int i = 0; i < 64; i++)
		h[i] = (float)i;
	CU_OK(cuMemAlloc(&d, sizeof(h)));
	CU_OK(cuMemcpyHtoD(d, h, sizeof(h)));
	CU_OK(cuEventCreate(&a, 0));
	CU_OK(cuEventCreate(&b, 0));
	t0 = simtest_now_ns();
	CU_OK(cuEventRecord(a, NULL));
	CU_OK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuEventRecord(b, NULL));
	CU_OK(cuEventSynchronize(b));
	wall = simtest_now_ns() - t0;
	CU_OK(cuEventElapsedTime(&ms, a, b));
	cr_assert_geq(ms, 20.0f, "%f ms", (double)ms);
	cr_assert_lt(ms, 20.0f + 250.0f, "%f ms", (double)ms);
	cr_assert_geq(wall, 20000000ull);
	CU_OK(cuMemcpyDtoH(out, d, sizeof(out)));
	cr_assert_eq(memcmp(h, out, sizeof(h)), 0);
}

/* vgpu_spin: waits ns and reports when it started and ended. */
Test(launch, spin_reports_its_times)
{
	unsigned long long ns = 5000000, times[2] = { 0, 0 };
	CUdeviceptr dt;
	void *params[] = { &ns, &dt };
	CUfunction f;
	uint64_t before, after;

	simtest_init();
	f = get(load_workload(), "vgpu_spin");
	CU_OK(cuMemAlloc(&dt, sizeof(times)));
	before = simtest_now_ns();
	CU_OK(cuLaunchKernel(f, 4, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuMemcpyDtoH(times, dt, sizeof(times)));
	after = simtest_now_ns();
	cr_assert_geq(times[1] - times[0], ns);
	cr_assert_geq(times[0], before);
	cr_assert_leq(times[1], after);
}

/* A function of one context cannot be launched on a stream of another. */
Test(launch, function_of_another_context)
{
	struct saxpy s;
	CUcontext other;
	CUfunction f;
	CUstream st;

	simtest_init();
	f = get(load_workload(), "vgpu_saxpy");
	saxpy_setup(&s);
	CU_OK(cuCtxCreate(&other, NULL, 0, 0));
	CU_OK(cuStreamCreate(&st, 0));
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, s.params, NULL),
		  CUDA_ERROR_INVALID_HANDLE);
}

/* VGPU_SIM_UNKNOWN_KERNEL=fail: a kernel with no host form is refused
 * (CUDA_ERROR_NOT_SUPPORTED), every time; the memory it would have
 * written is untouched; a kernel with one still runs. */
Test(launch, unknown_kernel_fail_refuses_it)
{
	float h[64], out[64];
	CUdeviceptr d;
	float scale = 3.0f;
	int n = 64;
	void *params[] = { &d, &scale, &n };
	unsigned long long ns = 1000, none = 0;
	void *spin_params[] = { &ns, &none };
	CUmodule m;
	CUfunction f;

	setenv("VGPU_SIM_UNKNOWN_KERNEL", "fail", 1);
	simtest_init();
	CU_OK(cuModuleLoad(&m, SIMTEST_OWN_CUBIN));
	f = get(m, "user_scale");
	for (int i = 0; i < 64; i++)
		h[i] = (float)i;
	CU_OK(cuMemAlloc(&d, sizeof(h)));
	CU_OK(cuMemcpyHtoD(d, h, sizeof(h)));
	for (int i = 0; i < 2; i++)
		CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, params,
					 NULL), CUDA_ERROR_NOT_SUPPORTED);
	CU_OK(cuCtxSynchronize());
	CU_OK(cuMemcpyDtoH(out, d, sizeof(out)));
	cr_assert_eq(memcmp(h, out, sizeof(h)), 0);
	CU_OK(cuLaunchKernel(get(load_workload(), "vgpu_spin"), 1, 1, 1, 1, 1,
			     1, 0, NULL, spin_params, NULL));
	CU_OK(cuCtxSynchronize());
}

/* Two kernels of the user's own, from PTX text: no host form. */
static const char unknown_ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry user_one(.param .u64 p)\n"
	"{ ret; }\n"
	".visible .entry user_two(.param .u64 p)\n"
	"{ ret; }\n";

/* Occurrences of `needle` in `hay`. */
static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *at = hay; (at = strstr(at, needle)); at++)
		n++;
	return n;
}

/* A kernel with no host form is named on stderr once per name and
 * process (two modules with the same name count once), with the
 * simulator's prefix; by default it still runs (as a wait); a kernel with
 * a host form is never named. */
Test(launch, unknown_kernel_named_once_per_name)
{
	unsigned long long ns = 1000, none = 0;
	void *spin_params[] = { &ns, &none };
	CUdeviceptr p = 0;
	void *params[] = { &p };
	char msg[4096], prefix[32];
	CUmodule m1, m2;
	CUfunction one, two, again, spin;

	setenv("VGPU_SIM_KERNEL_NS", "1000", 1);
	simtest_init();
	CU_OK(cuModuleLoadData(&m1, unknown_ptx));
	CU_OK(cuModuleLoadData(&m2, unknown_ptx));
	one = get(m1, "user_one");
	two = get(m1, "user_two");
	again = get(m2, "user_one");
	spin = get(load_workload(), "vgpu_spin");
	simtest_stderr_begin();
	for (int i = 0; i < 3; i++) {
		CU_OK(cuLaunchKernel(one, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				     NULL));
		CU_OK(cuLaunchKernel(two, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				     NULL));
		CU_OK(cuLaunchKernel(again, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				     NULL));
		CU_OK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL,
				     spin_params, NULL));
	}
	CU_OK(cuCtxSynchronize());
	simtest_stderr_end(msg, sizeof(msg));
	snprintf(prefix, sizeof(prefix), "vgpu-sim[%d]: kernel ", (int)getpid());
	cr_assert_eq(count_of(msg, "kernel user_one has no host form"), 1,
		     "%s", msg);
	cr_assert_eq(count_of(msg, "kernel user_two has no host form"), 1,
		     "%s", msg);
	cr_assert_eq(count_of(msg, prefix), 2, "%s", msg);
	cr_assert_eq(count_of(msg, "\n"), 2, "%s", msg);
	cr_assert_eq(count_of(msg, "vgpu_spin"), 0, "%s", msg);
	cr_assert_eq(count_of(msg, "VGPU_SIM_UNKNOWN_KERNEL=fail refuses"), 2,
		     "%s", msg);
	CU_OK(cuModuleUnload(m1));
	CU_OK(cuModuleUnload(m2));
}

/* VGPU_SIM_UNKNOWN_KERNEL=fail: the message says so, once; a graph's
 * kernel node of such a kernel is refused when added, as its launch is. */
Test(launch, unknown_kernel_fail_is_named_and_refused_in_graphs)
{
	CUdeviceptr p = 0;
	void *params[] = { &p };
	char msg[2048];
	CUmodule m;
	CUfunction f;
	CUgraph g;
	CUgraphNode node;
	CUDA_KERNEL_NODE_PARAMS kp = {
		.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = 32, .blockDimY = 1, .blockDimZ = 1,
		.kernelParams = params,
	};

	setenv("VGPU_SIM_UNKNOWN_KERNEL", "fail", 1);
	simtest_init();
	CU_OK(cuModuleLoadData(&m, unknown_ptx));
	f = get(m, "user_one");
	kp.func = f;
	CU_OK(cuGraphCreate(&g, 0));
	simtest_stderr_begin();
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuGraphAddKernelNode(&node, g, NULL, 0, &kp),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL),
		  CUDA_ERROR_NOT_SUPPORTED);
	simtest_stderr_end(msg, sizeof(msg));
	cr_assert_eq(count_of(msg, "kernel user_one has no host form"), 1,
		     "%s", msg);
	cr_assert_eq(count_of(msg, "return CUDA_ERROR_NOT_SUPPORTED "
			      "(VGPU_SIM_UNKNOWN_KERNEL=fail)"), 1, "%s", msg);
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuModuleUnload(m));
}
