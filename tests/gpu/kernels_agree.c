/* kernels_agree.c - the workload kernels on a real GPU agree with host forms.
 *
 * Loads the embedded fatbin with the driver API, runs each kernel on small
 * inputs and compares with the host form run on the same inputs. Both
 * launches use the same packed parameter layout (the device one through
 * CU_LAUNCH_PARAM_BUFFER_POINTER), so this also checks the offsets host.c
 * reads. Prints one PASS/FAIL line per kernel; exits 1 on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "vgpu_kernels.h"

#define TOUCH_N		100003
#define SAXPY_N		100003
#define SPIN_NS		20000000ull
#define GRID		7
#define BLOCK		128

static CUmodule agree_mod;

static void die(CUresult r, const char *what)
{
	const char *s = NULL;

	cuGetErrorString(r, &s);
	printf("FAIL setup: %s: %s (%d)\n", what, s ? s : "?", (int)r);
	exit(1);
}

static void ck(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		die(r, what);
}

static void put(unsigned char *p, size_t off, const void *v, size_t n)
{
	memcpy(p + off, v, n);
}

static void put_u64(unsigned char *p, size_t off, uint64_t v)
{
	put(p, off, &v, sizeof(v));
}

/* Launch `name` on the GPU with a packed parameter buffer; wait for it. */
static void gpu_launch(const char *name, unsigned char *params, size_t size)
{
	CUfunction f;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, params,
		CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_END,
	};

	ck(cuModuleGetFunction(&f, agree_mod, name), name);
	ck(cuLaunchKernel(f, GRID, 1, 1, BLOCK, 1, 1, 0, NULL, NULL, extra),
	   "cuLaunchKernel");
	ck(cuCtxSynchronize(), "cuCtxSynchronize");
}

static uint64_t host_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void host_busy_until(uint64_t deadline)
{
	while (host_now_ns() < deadline)
		;
}

/* Run the host form of `name` with a packed parameter buffer. */
static void host_launch(const char *name, unsigned char *params, size_t size)
{
	const struct vgpu_kernel_impl *k = vgpu_kernels_find(name);
	struct vgpu_kernel_launch l = {
		.grid = { GRID, 1, 1 },
		.block = { BLOCK, 1, 1 },
		.params = params,
		.params_size = size,
		.now_ns = host_now_ns,
		.busy_until = host_busy_until,
	};

	if (!k || k->params_size != size) {
		printf("FAIL setup: no host form of %s of %zu bytes\n",
		       name, size);
		exit(1);
	}
	k->fn(&l);
}

static int report(const char *name, int ok, const char *detail)
{
	printf("%s %s: %s\n", ok ? "PASS" : "FAIL", name, detail);
	return ok ? 0 : 1;
}

static void pack_touch(unsigned char *p, uint64_t buf, uint32_t expect,
		       uint32_t write, uint64_t mism)
{
	put_u64(p, 0, buf);
	put_u64(p, 8, TOUCH_N);
	put(p, 16, &expect, 4);
	put(p, 20, &write, 4);
	put_u64(p, 24, mism);
}

/* Fill buf with pattern 1 and plant a few wrong words. */
static void touch_plant(uint32_t *buf)
{
	static const size_t at[] = { 0, 1, 4096, 77777, TOUCH_N - 1 };
	size_t i;

	for (i = 0; i < TOUCH_N; i++)
		buf[i] = vgpu_touch_pattern(1, i);
	for (i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		buf[at[i]] ^= 0x80u;
}

static int check_touch(void)
{
	static uint32_t hbuf[TOUCH_N], gbuf[TOUCH_N];
	unsigned long long hmism = 0, gmism = 0;
	unsigned char p[32];
	CUdeviceptr dbuf, dmism;
	char detail[128];
	int same;

	touch_plant(hbuf);
	ck(cuMemAlloc(&dbuf, sizeof(hbuf)), "cuMemAlloc");
	ck(cuMemAlloc(&dmism, sizeof(gmism)), "cuMemAlloc");
	ck(cuMemcpyHtoD(dbuf, hbuf, sizeof(hbuf)), "cuMemcpyHtoD");
	ck(cuMemcpyHtoD(dmism, &gmism, sizeof(gmism)), "cuMemcpyHtoD");

	pack_touch(p, dbuf, 1, 2, dmism);
	gpu_launch("vgpu_touch", p, sizeof(p));
	pack_touch(p, (uintptr_t)hbuf, 1, 2, (uintptr_t)&hmism);
	host_launch("vgpu_touch", p, sizeof(p));

	ck(cuMemcpyDtoH(gbuf, dbuf, sizeof(gbuf)), "cuMemcpyDtoH");
	ck(cuMemcpyDtoH(&gmism, dmism, sizeof(gmism)), "cuMemcpyDtoH");
	cuMemFree(dbuf);
	cuMemFree(dmism);
	same = memcmp(gbuf, hbuf, sizeof(hbuf)) == 0;
	snprintf(detail, sizeof(detail),
		 "mismatches gpu %llu host %llu (5 planted), buffers %s",
		 gmism, hmism, same ? "agree" : "differ");
	return report("vgpu_touch", gmism == 5 && hmism == 5 && same, detail);
}

static void pack_saxpy(unsigned char *p, float a, uint64_t x, uint64_t y)
{
	put_u64(p, 0, SAXPY_N);
	put(p, 8, &a, 4);
	memset(p + 12, 0, 4);
	put_u64(p, 16, x);
	put_u64(p, 24, y);
}

/* Awkward floats, so that a fused multiply-add on either side would show. */
static void saxpy_fill(float *x, float *y)
{
	uint32_t s = 12345;
	size_t i;

	for (i = 0; i < SAXPY_N; i++) {
		s = s * 1664525u + 1013904223u;
		x[i] = (float)(s >> 8) / 16777216.0f + 0.5f;
		y[i] = -(float)(s >> 9) / 8388608.0f;
	}
}

static int check_saxpy(void)
{
	static float x[SAXPY_N], hy[SAXPY_N], gy[SAXPY_N];
	const float a = 1.0f + 0x1p-12f;
	unsigned char p[32];
	CUdeviceptr dx, dy;
	size_t i, diff = 0;
	char detail[128];

	saxpy_fill(x, hy);
	ck(cuMemAlloc(&dx, sizeof(x)), "cuMemAlloc");
	ck(cuMemAlloc(&dy, sizeof(hy)), "cuMemAlloc");
	ck(cuMemcpyHtoD(dx, x, sizeof(x)), "cuMemcpyHtoD");
	ck(cuMemcpyHtoD(dy, hy, sizeof(hy)), "cuMemcpyHtoD");

	pack_saxpy(p, a, dx, dy);
	gpu_launch("vgpu_saxpy", p, sizeof(p));
	pack_saxpy(p, a, (uintptr_t)x, (uintptr_t)hy);
	host_launch("vgpu_saxpy", p, sizeof(p));

	ck(cuMemcpyDtoH(gy, dy, sizeof(gy)), "cuMemcpyDtoH");
	cuMemFree(dx);
	cuMemFree(dy);
	for (i = 0; i < SAXPY_N; i++)
		diff += memcmp(&gy[i], &hy[i], sizeof(float)) != 0;
	snprintf(detail, sizeof(detail), "%zu of %d results differ bitwise",
		 diff, SAXPY_N);
	return report("vgpu_saxpy", diff == 0, detail);
}

static void pack_spin(unsigned char *p, uint64_t times)
{
	put_u64(p, 0, SPIN_NS);
	put_u64(p, 8, times);
}

/* Spin on the GPU: events and the kernel's own timer both show >= ns. */
static int check_spin(void)
{
	unsigned long long gt[2] = { 0, 0 }, ht[2] = { 0, 0 };
	unsigned char p[16];
	CUevent e0, e1;
	CUdeviceptr dt;
	float ms = 0;
	char detail[160];

	ck(cuMemAlloc(&dt, sizeof(gt)), "cuMemAlloc");
	ck(cuMemcpyHtoD(dt, gt, sizeof(gt)), "cuMemcpyHtoD");
	ck(cuEventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate");
	ck(cuEventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate");
	pack_spin(p, dt);
	ck(cuEventRecord(e0, NULL), "cuEventRecord");
	gpu_launch("vgpu_spin", p, sizeof(p));
	ck(cuEventRecord(e1, NULL), "cuEventRecord");
	ck(cuEventSynchronize(e1), "cuEventSynchronize");
	ck(cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
	ck(cuMemcpyDtoH(gt, dt, sizeof(gt)), "cuMemcpyDtoH");
	cuEventDestroy(e0);
	cuEventDestroy(e1);
	cuMemFree(dt);

	pack_spin(p, (uintptr_t)ht);
	host_launch("vgpu_spin", p, sizeof(p));
	snprintf(detail, sizeof(detail),
		 "events %.3f ms, gpu timer %llu ns, host %llu ns (>= %llu)",
		 ms, gt[1] - gt[0], ht[1] - ht[0], SPIN_NS);
	return report("vgpu_spin", (double)ms * 1e6 >= (double)SPIN_NS &&
		      gt[1] - gt[0] >= SPIN_NS && ht[1] - ht[0] >= SPIN_NS,
		      detail);
}

static void setup(void)
{
	CUdevice dev;
	CUcontext ctx;

	ck(cuInit(0), "cuInit");
	ck(cuDeviceGet(&dev, 0), "cuDeviceGet");
	ck(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	ck(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	ck(cuModuleLoadData(&agree_mod, vgpu_kernels_fatbin),
	   "cuModuleLoadData");
}

int main(void)
{
	int bad = 0;

	setup();
	bad += check_touch();
	bad += check_saxpy();
	bad += check_spin();
	return bad ? 1 : 0;
}
