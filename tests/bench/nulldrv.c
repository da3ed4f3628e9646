/* nulldrv.c - a driver that does nothing, for measuring the shim alone.
 *
 * Each entry point the benchmark uses returns at once, so the time of a
 * call through libvgpu.so minus the time of the same call made directly is
 * what the shim adds. Device pointers are handed out from a counter, and
 * a freed range is handed out again to the next allocation that fits, as
 * a real driver reuses a freed address: never reusing them made
 * every pair touch a new part of the shim's allocation table, and the
 * benchmark measured the kernel's page faults.
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

/* The last allocations (to find a freed one's size) and the freed ranges,
 * newest last. Not thread-safe: the benchmark allocates from one thread
 * (and thread-local state would cost a dynamic TLS lookup per call in a
 * library the benchmark dlopens). */
#define KEPT 64
struct range {
	CUdeviceptr p;
	size_t size;
};
static struct range made[KEPT], freed[KEPT];
static unsigned nmade, nfreed;

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
	size_t size = (bytes + 4095) & ~(size_t)4095;

	if (nfreed && freed[nfreed - 1].size >= size) {
		*p = freed[--nfreed].p;
		size = freed[nfreed].size;
	} else {
		*p = __atomic_fetch_add(&next_ptr, size, __ATOMIC_RELAXED);
	}
	made[nmade++ % KEPT] = (struct range){ *p, size };
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	for (unsigned i = 0; i < KEPT && i < nmade; i++) {
		struct range *r = &made[(nmade - 1 - i) % KEPT];

		if (r->p == p && r->size) {
			if (nfreed < KEPT)
				freed[nfreed++] = *r;
			r->size = 0;
			break;
		}
	}
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
