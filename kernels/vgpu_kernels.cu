/* vgpu_kernels.cu - the workload kernels, in CUDA C.
 *
 * Each kernel here has a host form in host.c that gives the same results;
 * the simulator binds the two by the (unmangled) symbol name. Keep the
 * parameter lists in step with the offsets read in host.c.
 */
#include "vgpu_kernels.h"

static __device__ __forceinline__ unsigned long long vgpu_globaltimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/*
 * A thread's place in the whole launch, all three dimensions flattened, so
 * that any grid and block shape covers a range exactly once.
 */
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

/*
 * Each block waits until ns nanoseconds of the global timer have passed
 * since its thread 0 started. Thread 0 of block 0 reports its start and
 * end times in times[0], times[1] when times is not NULL.
 */
extern "C" __global__ void vgpu_spin(unsigned long long ns,
				     unsigned long long *times)
{
	unsigned long long start, now;
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
	/* The rest of the block ends with its thread 0. */
	__syncthreads();
}

/*
 * Over buf[0..n): count the elements that differ from the expect_seed
 * pattern (when mismatches is not NULL), then write the write_seed
 * pattern. Each thread adds its count once.
 */
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

/*
 * y[i] = a * x[i] + y[i] over [0, n). The product and the sum are rounded
 * separately (no fused multiply-add), so the host form can match exactly
 * without libm's fmaf.
 */
extern "C" __global__ void vgpu_saxpy(unsigned long long n, float a,
				      const float *x, float *y)
{
	unsigned long long stride = vgpu_grid_stride();
	unsigned long long i;

	for (i = vgpu_grid_index(); i < n; i += stride)
		y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
