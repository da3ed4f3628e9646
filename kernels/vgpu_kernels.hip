/* vgpu_kernels.hip - the workload kernels, in HIP.
 *
 * The same kernels as vgpu_kernels.cu, with the same (unmangled) names and
 * parameter lists, so that the host forms in host.c apply to them on the
 * simulated HIP device (sim/hip). AMDGPU lays out the explicit kernel
 * arguments as nvcc does (each at its natural alignment), which sim/hip
 * checks against the code object's metadata at load.
 */
#include <hip/hip_runtime.h>

#include "vgpu_kernels.h"

/* s_memrealtime counts at the device's constant wall clock rate
 * (hipDeviceAttributeWallClockRate): 100 MHz on gfx9 parts, 10 ns a tick.
 * HIP 5.2 has no wall_clock64(); the builtin exists only for the device. */
#define VGPU_WALL_NS_PER_TICK 10ull

static __device__ __forceinline__ unsigned long long vgpu_globaltimer(void)
{
#ifdef __HIP_DEVICE_COMPILE__
	return __builtin_amdgcn_s_memrealtime() * VGPU_WALL_NS_PER_TICK;
#else
	return 0;
#endif
}

/* A thread's place in the whole launch, all three dimensions flattened. */
static __device__ __forceinline__ unsigned long long vgpu_grid_index(void)
{
	unsigned long long block = blockIdx.x + (unsigned long long)gridDim.x *
		(blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
	unsigned int thread = threadIdx.x +
		blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);

	return block * (blockDim.x * blockDim.y * blockDim.z) + thread;
}

static __device__ __forceinline__ unsigned long long vgpu_grid_stride(void)
{
	return (unsigned long long)gridDim.x * gridDim.y * gridDim.z *
		(blockDim.x * blockDim.y * blockDim.z);
}

/* As in vgpu_kernels.cu: each block waits ns since its thread 0 started;
 * block 0's thread 0 reports start and end in times[0..1]. */
extern "C" __global__ void vgpu_spin(unsigned long long ns,
				     unsigned long long *times)
{
	unsigned long long start = 0, now = 0;
	bool lead = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;

	if (lead) {
		start = vgpu_globaltimer();
		do {
			now = vgpu_globaltimer();
		} while (now - start < ns);
		if (times && blockIdx.x == 0 && blockIdx.y == 0 &&
		    blockIdx.z == 0) {
			times[0] = start;
			times[1] = now;
		}
	}
	__syncthreads();
}

/* Counts the elements that differ from expect_seed's pattern (when
 * mismatches is not NULL), then writes write_seed's pattern. */
extern "C" __global__ void vgpu_touch(unsigned int *buf, unsigned long long n,
				      unsigned int expect_seed,
				      unsigned int write_seed,
				      unsigned long long *mismatches)
{
	unsigned long long stride = vgpu_grid_stride();
	unsigned long long bad = 0;
	unsigned long long i;

	for (i = vgpu_grid_index(); i < n; i += stride) {
		if (mismatches && buf[i] != vgpu_touch_pattern(expect_seed, i))
			bad++;
		buf[i] = vgpu_touch_pattern(write_seed, i);
	}
	if (bad)
		atomicAdd(mismatches, bad);
}

/* y[i] = a * x[i] + y[i], the product and the sum rounded apart. */
extern "C" __global__ void vgpu_saxpy(unsigned long long n, float a,
				      const float *x, float *y)
{
	unsigned long long stride = vgpu_grid_stride();
	unsigned long long i;

	for (i = vgpu_grid_index(); i < n; i += stride)
		y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
