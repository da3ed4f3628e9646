/* vgpu-demo - a small driver-API job that shows what it sees of its GPU.
 *
 * It prints the device and its memory, allocates a working set, writes and
 * verifies it with vgpu_touch, checks vgpu_saxpy, then keeps the device busy
 * with vgpu_spin kernels for a while and reports the share of the device's
 * time it got. Under libvgpu the memory and the share are the slice's.
 *
 * Usage: vgpu-demo [--memory SIZE] [--seconds S] [--kernel-us US] [--label L]
 */
#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_kernels.h"

#define CHUNK (64ull << 20)
#define MAX_CHUNKS 1024

struct demo_opts {
	uint64_t memory;
	double seconds;
	uint64_t kernel_ns;
	const char *label;
};

static const char *label = "vgpu-demo";

static int fail(const char *what, CUresult rc)
{
	const char *name = NULL;

	cuGetErrorName(rc, &name);
	fprintf(stderr, "%s: %s failed: %s (%d)\n", label, what,
		name ? name : "unknown error", (int)rc);
	return 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double gib(uint64_t b)
{
	return (double)b / (double)(1ull << 30);
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned shift = 0;

	if (end == s || s[0] == '-')
		return -1;
	if (strcasecmp(end, "k") == 0 || strcasecmp(end, "kib") == 0)
		shift = 10;
	else if (strcasecmp(end, "m") == 0 || strcasecmp(end, "mib") == 0)
		shift = 20;
	else if (strcasecmp(end, "g") == 0 || strcasecmp(end, "gib") == 0)
		shift = 30;
	else if (*end && strcasecmp(end, "b") != 0)
		return -1;
	if (v == 0 || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_args(int argc, char **argv, struct demo_opts *o)
{
	*o = (struct demo_opts){ .memory = 256ull << 20, .seconds = 1.0,
				 .kernel_ns = 1000000, .label = "vgpu-demo" };
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!val)
			goto bad;
		if (strcmp(arg, "--memory") == 0) {
			if (parse_size(val, &o->memory) != 0)
				goto bad;
		} else if (strcmp(arg, "--seconds") == 0) {
			o->seconds = strtod(val, &end);
			if (*end || !(o->seconds > 0 && o->seconds <= 3600))
				goto bad;
		} else if (strcmp(arg, "--kernel-us") == 0) {
			unsigned long us = strtoul(val, &end, 10);
			if (*end || us == 0 || us > 1000000)
				goto bad;
			o->kernel_ns = us * 1000;
		} else if (strcmp(arg, "--label") == 0) {
			o->label = val;
		} else {
			goto bad;
		}
		i++;
	}
	return 0;
bad:
	fprintf(stderr, "usage: vgpu-demo [--memory SIZE (e.g. 256MiB)] "
		"[--seconds S (0-3600)] [--kernel-us US (1-1000000)] "
		"[--label NAME]\n");
	return -1;
}

static CUresult launch(CUfunction f, void *params, size_t size)
{
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, params,
			  CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END };

	return cuLaunchKernel(f, 128, 1, 1, 256, 1, 1, 0, NULL, NULL, extra);
}

/* Allocates the working set in 64 MiB buffers and writes/verifies it. */
static int working_set(CUmodule mod, uint64_t bytes)
{
	CUdeviceptr bufs[MAX_CHUNKS], count;
	unsigned long long mismatches = 0;
	uint64_t done = 0;
	size_t n = 0;
	CUfunction touch;
	CUresult rc;
	int ret = 1;

	if ((rc = cuModuleGetFunction(&touch, mod, "vgpu_touch")) ||
	    (rc = cuMemAlloc(&count, sizeof(mismatches))))
		return fail("loading vgpu_touch", rc);
	while (done < bytes && n < MAX_CHUNKS) {
		uint64_t sz = bytes - done < CHUNK ? bytes - done : CHUNK;
		rc = cuMemAlloc(&bufs[n], sz);
		if (rc != CUDA_SUCCESS) {
			printf("%s: allocating the working set stopped at %.1f MiB "
			       "of %.1f MiB\n", label, (double)done / 1048576.0,
			       (double)bytes / 1048576.0);
			fail("cuMemAlloc", rc);
			goto out;
		}
		/* Write pattern 1 (nothing to check yet), then check it. */
		struct { CUdeviceptr buf; uint64_t n; uint32_t expect, write;
			 CUdeviceptr mismatches; } p = { bufs[n], sz / 4, 0, 1, 0 };
		if ((rc = launch(touch, &p, sizeof(p))) != CUDA_SUCCESS)
			goto out_launch;
		p.expect = 1;
		p.write = 2;
		p.mismatches = count;
		if ((rc = cuMemsetD8(count, 0, sizeof(mismatches))) ||
		    (rc = launch(touch, &p, sizeof(p))) ||
		    (rc = cuMemcpyDtoH(&mismatches, count, sizeof(mismatches))))
			goto out_launch;
		if (mismatches) {
			fprintf(stderr, "%s: %llu mismatches in buffer %zu\n",
				label, mismatches, n);
			n++;
			goto out;
		}
		done += sz;
		n++;
	}
	printf("%s: working set %.1f MiB in %zu buffers, written and verified "
	       "by vgpu_touch: 0 mismatches\n", label,
	       (double)done / 1048576.0, n);
	ret = 0;
	goto out;
out_launch:
	fail("vgpu_touch", rc);
out:
	while (n > 0)
		cuMemFree(bufs[--n]);
	cuMemFree(count);
	return ret;
}

static int saxpy_check(CUmodule mod)
{
	enum { N = 1 << 16 };
	static float x[N], y[N], out[N];
	CUdeviceptr dx, dy;
	CUfunction saxpy;
	CUresult rc;

	for (int i = 0; i < N; i++) {
		x[i] = (float)i;
		y[i] = 1.0f;
	}
	if ((rc = cuModuleGetFunction(&saxpy, mod, "vgpu_saxpy")) ||
	    (rc = cuMemAlloc(&dx, sizeof(x))) || (rc = cuMemAlloc(&dy, sizeof(y))))
		return fail("vgpu_saxpy setup", rc);
	struct { uint64_t n; float a; CUdeviceptr x, y; } p = { N, 2.0f, dx, dy };
	if ((rc = cuMemcpyHtoD(dx, x, sizeof(x))) ||
	    (rc = cuMemcpyHtoD(dy, y, sizeof(y))) ||
	    (rc = launch(saxpy, &p, sizeof(p))) ||
	    (rc = cuMemcpyDtoH(out, dy, sizeof(out))))
		return fail("vgpu_saxpy", rc);
	cuMemFree(dx);
	cuMemFree(dy);
	for (int i = 0; i < N; i++) {
		if (out[i] != 2.0f * (float)i + 1.0f) {
			fprintf(stderr, "%s: saxpy wrong at %d: %g\n", label, i,
				(double)out[i]);
			return 1;
		}
	}
	printf("%s: vgpu_saxpy on %d floats: correct\n", label, N);
	return 0;
}

/* Launch-then-synchronise loop of vgpu_spin for `seconds`; the share is the
 * kernel time completed over the wall time. */
static int throughput(CUmodule mod, const struct demo_opts *o)
{
	CUfunction spin;
	CUevent start, end;
	uint64_t launches = 0;
	double t0, wall;
	float ms = 0;
	CUresult rc;

	if ((rc = cuModuleGetFunction(&spin, mod, "vgpu_spin")) ||
	    (rc = cuEventCreate(&start, 0)) || (rc = cuEventCreate(&end, 0)))
		return fail("vgpu_spin setup", rc);
	struct { uint64_t ns; CUdeviceptr times; } p = { o->kernel_ns, 0 };
	t0 = now_s();
	cuEventRecord(start, NULL);
	do {
		for (int i = 0; i < 8; i++, launches++)
			if ((rc = launch(spin, &p, sizeof(p))) != CUDA_SUCCESS)
				return fail("vgpu_spin", rc);
		if ((rc = cuCtxSynchronize()) != CUDA_SUCCESS)
			return fail("cuCtxSynchronize", rc);
	} while (now_s() - t0 < o->seconds);
	cuEventRecord(end, NULL);
	cuEventSynchronize(end);
	wall = now_s() - t0;
	cuEventElapsedTime(&ms, start, end);
	printf("%s: %" PRIu64 " x vgpu_spin(%.0f us) in %.2f s: %.0f kernels/s, "
	       "GPU time %.2f s = %.0f%% of the wall time\n", label, launches,
	       (double)o->kernel_ns / 1e3, wall, (double)launches / wall,
	       (double)launches * (double)o->kernel_ns / 1e9,
	       100.0 * (double)launches * (double)o->kernel_ns / 1e9 / wall);
	cuEventDestroy(start);
	cuEventDestroy(end);
	return 0;
}

static int describe(CUdevice dev)
{
	char name[256];
	size_t total, free;
	int sms, major, minor;
	CUresult rc;

	if ((rc = cuDeviceGetName(name, sizeof(name), dev)) ||
	    (rc = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) ||
	    (rc = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ||
	    (rc = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) ||
	    (rc = cuMemGetInfo(&free, &total)))
		return fail("device queries", rc);
	printf("%s: device 0: %s, %d SMs, compute capability %d.%d\n", label,
	       name, sms, major, minor);
	printf("%s: memory: total %.2f GiB, free %.2f GiB\n", label,
	       gib(total), gib(free));
	return 0;
}

int main(int argc, char **argv)
{
	struct demo_opts o;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUresult rc;
	int ret;

	if (parse_args(argc, argv, &o) != 0)
		return 2;
	label = o.label;
	printf("%s: pid %d\n", label, (int)getpid());
	if ((rc = cuInit(0)))
		return fail("cuInit", rc);
	if ((rc = cuDeviceGet(&dev, 0)) ||
	    (rc = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (rc = cuCtxSetCurrent(ctx)))
		return fail("opening device 0", rc);
	if ((rc = cuModuleLoadData(&mod, vgpu_kernels_fatbin)))
		return fail("loading the workload kernels", rc);
	ret = describe(dev);
	if (!ret)
		ret = working_set(mod, o.memory);
	if (!ret)
		ret = saxpy_check(mod);
	if (!ret)
		ret = throughput(mod, &o);
	cuModuleUnload(mod);
	cuDevicePrimaryCtxRelease(dev);
	return ret;
}
