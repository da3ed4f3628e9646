/* shim_real.c - the shim's checks on whatever driver is behind it: the real
 * one on a GPU machine (tests/gpu/check.sh), the simulated one in the test
 * suite. Run with LD_PRELOAD=libvgpu.so; it sets its own slice.
 *
 * Prints one PASS/FAIL line per check and exits 1 if any failed. Every
 * check is an outcome: the error code, and the bytes the views show.
 */
#include <cuda.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define LIMIT (1024 * MiB)

static int failed;

static void check(const char *name, int ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(const char *name, int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failed |= !ok;
}

/* A kernel that does nothing on a GPU; on the simulator, vgpu_saxpy's host
 * form over n = 0 elements. */
static const char nop_ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry vgpu_saxpy(.param .u64 n, .param .f32 a,\n"
	"    .param .u64 x, .param .u64 y)\n"
	"{ ret; }\n";

struct launcher {
	CUcontext ctx;
	CUfunction f;
	CUresult r;
};

/* Launches three kernels under the compute cap, synchronises and exits:
 * the shim gives back what it made to measure them as the thread ends. */
static void *launch_and_exit(void *arg)
{
	struct launcher *l = arg;
	uint64_t n = 0;
	float k = 1.0f;
	CUdeviceptr none = 0;
	void *params[] = { &n, &k, &none, &none };

	l->r = cuCtxSetCurrent(l->ctx);
	for (int i = 0; i < 3 && l->r == CUDA_SUCCESS; i++)
		l->r = cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				      NULL);
	if (l->r == CUDA_SUCCESS)
		l->r = cuCtxSynchronize();
	return NULL;
}

static size_t free_now(void)
{
	size_t f = 0, t = 0;

	cuMemGetInfo(&f, &t);
	return f;
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr a = 0, b = 0, p = 0;
	size_t total = 0, f0, pitch = 0;
	CUresult r;

	setenv("VGPU_MEMORY_LIMIT", "1GiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
	setenv("VGPU_COMPUTE_LIMIT", "50", 1);	/* launches pass the throttle */
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		printf("FAIL start: no device\n");
		return 1;
	}

	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *h2 = dlopen("libcuda.so", RTLD_NOW);
	check("dlopen", h && h == h2 && dlsym(h, "vgpu_shim_version"),
	      "libcuda.so.1 %p, libcuda.so %p, both the shim", h, h2);
	void *fn = NULL;
	r = cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, NULL);
	check("getprocaddress", r == CUDA_SUCCESS && h &&
	      fn == dlsym(h, "cuMemAlloc_v2"), "cuMemAlloc@12000 -> the hook");

	cuDeviceTotalMem(&total, dev);
	check("total-mem", total == LIMIT, "cuDeviceTotalMem %zu", total);
	size_t f, t;
	cuMemGetInfo(&f, &t);
	check("mem-get-info", t == LIMIT && f <= LIMIT, "free %zu total %zu",
	      f, t);
	f0 = f;

	r = cuMemAlloc(&a, LIMIT / 2);
	check("alloc-half", r == CUDA_SUCCESS && free_now() == f0 - LIMIT / 2,
	      "r=%d free %zu", r, free_now());
	r = cuMemAlloc(&b, LIMIT / 2 + MiB);
	check("alloc-past-slice", r == CUDA_ERROR_OUT_OF_MEMORY, "r=%d", r);
	r = cuMemAlloc(&b, 16 * MiB);
	check("goes-on", r == CUDA_SUCCESS, "r=%d", r);
	cuMemFree(b);
	cuMemFree(a);
	check("freed", free_now() == f0, "free %zu", free_now());

	r = cuMemAllocPitch(&p, &pitch, 1000, 1000, 4);
	check("pitch", r == CUDA_SUCCESS && pitch >= 1000 &&
	      free_now() == f0 - pitch * 1000, "pitch %zu free %zu", pitch,
	      free_now());
	cuMemFree(p);

	r = cuMemAllocAsync(&a, 64 * MiB, NULL);
	cuStreamSynchronize(NULL);
	check("async", r == CUDA_SUCCESS && free_now() <= f0 - 64 * MiB,
	      "r=%d free %zu", r, free_now());
	CUmemoryPool pool;
	cuMemFreeAsync(a, NULL);
	cuStreamSynchronize(NULL);
	cuDeviceGetMemPool(&pool, dev);
	cuMemPoolTrimTo(pool, 0);
	check("async-trimmed", free_now() == f0, "free %zu", free_now());

	CUmemAllocationProp prop;
	size_t gran = 0;
	CUmemGenericAllocationHandle vh;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	cuMemGetAllocationGranularity(&gran, &prop,
				      CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	r = cuMemCreate(&vh, gran, &prop, 0);
	check("vmm-device", r == CUDA_SUCCESS && free_now() == f0 - gran,
	      "r=%d granularity %zu free %zu", r, gran, free_now());
	if (r == CUDA_SUCCESS)
		cuMemRelease(vh);
	check("vmm-released", free_now() == f0, "free %zu", free_now());
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
	prop.location.id = 0;
	r = cuMemCreate(&vh, gran, &prop, 0);
	check("vmm-host-not-charged", free_now() == f0,
	      "cuMemCreate(host) r=%d, free %zu", r, free_now());
	if (r == CUDA_SUCCESS)
		cuMemRelease(vh);

	CUDA_ARRAY_DESCRIPTOR ad = { 1024, 1024, CU_AD_FORMAT_FLOAT, 1 };
	CUarray arr;
	r = cuArrayCreate(&arr, &ad);
	check("array", r == CUDA_SUCCESS && free_now() == f0 - 4 * MiB,
	      "r=%d free %zu", r, free_now());
	if (r == CUDA_SUCCESS)
		cuArrayDestroy(arr);

	r = cuMemFree(0x1000);
	check("untracked-free-reaches-driver", r != CUDA_SUCCESS, "r=%d", r);
	check("back-to-zero", free_now() == f0, "free %zu", free_now());

	/* Threads that launch under the cap and exit, one after another. */
	CUmodule m;
	struct launcher l = { ctx, NULL, CUDA_SUCCESS };
	int done = 0;

	r = cuModuleLoadData(&m, nop_ptx);
	if (r == CUDA_SUCCESS)
		r = cuModuleGetFunction(&l.f, m, "vgpu_saxpy");
	for (; r == CUDA_SUCCESS && done < 8; done++) {
		pthread_t t;

		if (pthread_create(&t, NULL, launch_and_exit, &l) != 0)
			break;
		pthread_join(t, NULL);
		r = l.r;
	}
	check("threads-exit-under-cap", r == CUDA_SUCCESS && done == 8,
	      "%d of 8 threads launched and exited, r=%d", done, r);
	launch_and_exit(&l);	/* and the process goes on launching */
	check("launch-after-threads", l.r == CUDA_SUCCESS, "r=%d", l.r);
	cuDevicePrimaryCtxRelease(dev);
	return failed;
}
