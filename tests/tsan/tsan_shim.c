/* tsan_shim.c - a multi-threaded CUDA program under the shim on the
 * simulated GPU, all of it built with TSan: threads allocate, free, copy
 * and launch on streams of their own in one context; at the end the slice
 * is as free as before. Run with LD_PRELOAD=libvgpu.so,
 * VGPU_REAL_LIBCUDA=the simulator, a 256 MiB slice and a 50% compute cap
 * (tests/tsan/meson.build), so launches pass the throttle too. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "tsan_check.h"

#define THREADS	4
#define ROUNDS	200
#define N	1024

#define CU(call) CHECK((call) == CUDA_SUCCESS)

/* vgpu_saxpy's parameter list; the simulator runs its host form. */
static const char ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry vgpu_saxpy(.param .u64 n, .param .f32 a,\n"
	"    .param .u64 x, .param .u64 y)\n"
	"{ ret; }\n";

static CUcontext ctx;
static CUfunction saxpy;

static void *alloc_launch_free(void *p)
{
	float host[N];
	CUstream s;

	(void)p;
	CU(cuCtxSetCurrent(ctx));
	CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int r = 0; r < ROUNDS; r++) {
		CUdeviceptr x, y;
		uint64_t n = N;
		float a = 2.0f;
		void *args[] = { &n, &a, &x, &y };

		CU(cuMemAlloc(&x, N * sizeof(float)));
		CU(cuMemAlloc(&y, N * sizeof(float)));
		for (int i = 0; i < N; i++)
			host[i] = 1.0f;
		CU(cuMemcpyHtoDAsync(x, host, sizeof(host), s));
		CU(cuMemcpyHtoDAsync(y, host, sizeof(host), s));
		CU(cuLaunchKernel(saxpy, N / 128, 1, 1, 128, 1, 1, 0, s, args,
				  NULL));
		CU(cuMemcpyDtoHAsync(host, y, sizeof(host), s));
		CU(cuStreamSynchronize(s));
		CHECK(host[0] == 3.0f && host[N - 1] == 3.0f);
		CU(cuMemFree(x));
		CU(cuMemFree(y));
	}
	CU(cuStreamDestroy(s));
	return NULL;
}

int main(void)
{
	size_t free0, free1, total;
	CUmodule m;

	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&m, ptx));
	CU(cuModuleGetFunction(&saxpy, m, "vgpu_saxpy"));
	CU(cuMemGetInfo(&free0, &total));
	CHECK(total == (size_t)256 << 20);	/* the slice: the shim is in */
	tsan_run_threads(THREADS, alloc_launch_free, NULL, 0);
	CU(cuMemGetInfo(&free1, &total));
	CHECK(free1 == free0);
	CU(cuModuleUnload(m));
	CU(cuDevicePrimaryCtxRelease(0));
	printf("tsan-shim: %d threads, %d rounds of alloc, launch, free: ok\n",
	       THREADS, ROUNDS);
	return 0;
}
