/* nulldrv.c - a driver that does nothing, for measuring the shim alone.
 *
 * Each entry point the benchmark uses returns at once, so the time of a
 * call through libvgpu.so minus the time of the same call made directly is
 * what the shim adds. Device pointers are handed out from a counter.
 */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static unsigned long long next_ptr = 1ull << 40;

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	*dev = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	(void)dev;
	memset(uuid, 0x4e, sizeof(*uuid));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	(void)dev;
	*bytes = (size_t)80 << 30;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
	*p = __atomic_fetch_add(&next_ptr, (bytes + 4095) & ~4095ull,
				__ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	(void)p;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
			       unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shmem, CUstream s,
			       void **params, void **extra)
{
	(void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
	(void)shmem; (void)s; (void)params; (void)extra;
	return CUDA_SUCCESS;
}

/* Enough of contexts, streams and events for the compute throttle's path:
 * every event is complete at once. */
static char fake_ctx, fake_stream;
static unsigned long long next_event = 1;
static unsigned long long stamp[4096], clock_ticks;	/* a tick is 10 ns */

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	*ctx = (CUcontext)&fake_ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	(void)flags;
	*s = (CUstream)&fake_stream;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	(void)flags;
	*e = (CUevent)(uintptr_t)__atomic_fetch_add(&next_event, 1,
						    __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
	(void)s;
	stamp[(uintptr_t)e % 4096] =
		__atomic_add_fetch(&clock_ticks, 1, __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

/* Each record is 10 ns after the one before. */
EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	*ms = (float)((double)stamp[(uintptr_t)b % 4096] -
		      (double)stamp[(uintptr_t)a % 4096]) * 0.00001f;
	return CUDA_SUCCESS;
}
