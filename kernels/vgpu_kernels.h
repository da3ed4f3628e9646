/* vgpu_kernels.h - the workload kernels' host forms, as the simulator runs them.
 *
 * Each kernel exists twice: CUDA C in vgpu_kernels.cu (built into a fatbin by
 * nvcc) and a host implementation here, bound by name. On the simulated GPU a
 * device pointer is a host address, so the host forms dereference parameters
 * directly.
 */
#ifndef VGPU_KERNELS_H
#define VGPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a host form receives for one launch. */
struct vgpu_kernel_launch {
	unsigned grid[3];
	unsigned block[3];
	unsigned shared_bytes;
	const unsigned char *params;   /* packed parameter buffer */
	size_t params_size;
	/* Supplied by the simulator: the monotonic clock, and a precise wait. */
	uint64_t (*now_ns)(void);
	void (*busy_until)(uint64_t deadline_ns);
	/* The launch's memory traffic: a host form reports each pass over a
	 * buffer, the range [ptr, ptr+bytes) read or written (a pass that reads
	 * and writes an element reports the range twice). The simulator charges
	 * the bytes that lie in host-backed memory the bus's time. NULL: not
	 * counted. */
	void (*touched)(const void *ptr, uint64_t bytes);
};

typedef void (*vgpu_kernel_host_fn)(const struct vgpu_kernel_launch *l);

struct vgpu_kernel_impl {
	const char *name;              /* the kernel's symbol name */
	vgpu_kernel_host_fn fn;
	size_t params_size;            /* expected parameter buffer size */
};

/* The host form of kernel `name`, or NULL. */
const struct vgpu_kernel_impl *vgpu_kernels_find(const char *name);

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VGPU_HD __host__ __device__
#else
#define VGPU_HD
#endif

/* The pattern vgpu_touch writes and checks: element i under seed. */
static inline VGPU_HD uint32_t vgpu_touch_pattern(uint32_t seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
	return (uint32_t)(x ^ (x >> 29));
}

/* The embedded fatbin of all workload kernels (built when nvcc is found). */
extern const unsigned char vgpu_kernels_fatbin[];
extern const size_t vgpu_kernels_fatbin_size;

#ifdef __cplusplus
}
#endif

#endif
