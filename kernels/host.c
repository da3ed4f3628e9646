/* host.c - host forms of the workload kernels in vgpu_kernels.cu.
 *
 * The simulator calls these with the launch's packed parameter buffer. The
 * offsets below are those nvcc gives each signature (natural alignment,
 * confirmed from the cubins' KPARAM_INFO); device pointers are host
 * addresses on the simulated GPU. Results match the CUDA forms exactly.
 */
#include <stdint.h>
#include <string.h>

#include "vgpu_kernels.h"

/* vgpu_spin(u64 ns, u64 *times) */
#define SPIN_NS		0
#define SPIN_TIMES	8
#define SPIN_SIZE	16

/* vgpu_touch(u32 *buf, u64 n, u32 expect_seed, u32 write_seed, u64 *mism) */
#define TOUCH_BUF	0
#define TOUCH_N		8
#define TOUCH_EXPECT	16
#define TOUCH_WRITE	20
#define TOUCH_MISMATCH	24
#define TOUCH_SIZE	32

/* vgpu_saxpy(u64 n, float a, const float *x, float *y) */
#define SAXPY_N		0
#define SAXPY_A		8
#define SAXPY_X		16
#define SAXPY_Y		24
#define SAXPY_SIZE	32

static uint64_t param_u64(const struct vgpu_kernel_launch *l, size_t off)
{
	uint64_t v;

	memcpy(&v, l->params + off, sizeof(v));
	return v;
}

static uint32_t param_u32(const struct vgpu_kernel_launch *l, size_t off)
{
	uint32_t v;

	memcpy(&v, l->params + off, sizeof(v));
	return v;
}

static float param_f32(const struct vgpu_kernel_launch *l, size_t off)
{
	float v;

	memcpy(&v, l->params + off, sizeof(v));
	return v;
}

static void *param_ptr(const struct vgpu_kernel_launch *l, size_t off)
{
	return (void *)(uintptr_t)param_u64(l, off);
}

/* Reports `passes` passes over `count` elements of `size` bytes at ptr. */
static void report(const struct vgpu_kernel_launch *l, const void *ptr,
		   uint64_t count, size_t size, unsigned passes)
{
	if (!l->touched || !ptr || count == 0)
		return;
	if (count > UINT64_MAX / size)
		count = UINT64_MAX / size;
	while (passes--)
		l->touched(ptr, count * size);
}

/*
 * One wait of ns for the whole launch: the simulator models blocks as
 * running side by side, so every block ends when the first one does.
 */
static void host_spin(const struct vgpu_kernel_launch *l)
{
	uint64_t ns, start, end;
	unsigned long long *times;

	if (l->params_size < SPIN_SIZE)
		return;
	ns = param_u64(l, SPIN_NS);
	times = param_ptr(l, SPIN_TIMES);
	start = l->now_ns();
	l->busy_until(start + ns);
	end = l->now_ns();
	if (times) {
		times[0] = start;
		times[1] = end;
	}
}

static void host_touch(const struct vgpu_kernel_launch *l)
{
	uint32_t *buf;
	unsigned long long *mismatches;
	uint64_t n, i, bad = 0;
	uint32_t expect_seed, write_seed;

	if (l->params_size < TOUCH_SIZE)
		return;
	buf = param_ptr(l, TOUCH_BUF);
	n = param_u64(l, TOUCH_N);
	expect_seed = param_u32(l, TOUCH_EXPECT);
	write_seed = param_u32(l, TOUCH_WRITE);
	mismatches = param_ptr(l, TOUCH_MISMATCH);

	/* Each element written, and read first when checked. */
	report(l, buf, n, sizeof(*buf), mismatches ? 2 : 1);
	for (i = 0; i < n; i++) {
		if (mismatches && buf[i] != vgpu_touch_pattern(expect_seed, i))
			bad++;
		buf[i] = vgpu_touch_pattern(write_seed, i);
	}
	/* As atomicAdd: other launches may count into the same word. */
	if (bad)
		__atomic_fetch_add(mismatches, bad, __ATOMIC_RELAXED);
}

/*
 * The CUDA form rounds the product and the sum separately (__fmul_rn,
 * __fadd_rn), so this must not become a fused multiply-add: the product is
 * its own statement, and kernels/meson.build adds -ffp-contract=off for
 * compilers that would fuse across statements (GCC in GNU modes).
 */
static void host_saxpy(const struct vgpu_kernel_launch *l)
{
	const float *x;
	float *y;
	float a, p;
	uint64_t n, i;

	if (l->params_size < SAXPY_SIZE)
		return;
	n = param_u64(l, SAXPY_N);
	a = param_f32(l, SAXPY_A);
	x = param_ptr(l, SAXPY_X);
	y = param_ptr(l, SAXPY_Y);

	/* x read; y read and written. */
	report(l, x, n, sizeof(*x), 1);
	report(l, y, n, sizeof(*y), 2);
	for (i = 0; i < n; i++) {
		p = a * x[i];
		y[i] = p + y[i];
	}
}

static const struct vgpu_kernel_impl vgpu_kernels_table[] = {
	{ "vgpu_spin",  host_spin,  SPIN_SIZE },
	{ "vgpu_touch", host_touch, TOUCH_SIZE },
	{ "vgpu_saxpy", host_saxpy, SAXPY_SIZE },
};

const struct vgpu_kernel_impl *vgpu_kernels_find(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < sizeof(vgpu_kernels_table) /
			sizeof(vgpu_kernels_table[0]); i++) {
		if (strcmp(vgpu_kernels_table[i].name, name) == 0)
			return &vgpu_kernels_table[i];
	}
	return NULL;
}
