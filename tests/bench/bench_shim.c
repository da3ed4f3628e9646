/* bench_shim.c - what the shim adds to a call, measured.
 *
 *   bench_shim calls LIB [ONLY]     median ns per cuLaunchKernel and per
 *                                   cuMemAlloc_v2+cuMemFree_v2 pair, calling
 *                                   the entry points of LIB (the driver
 *                                   itself, or libvgpu.so in front of it);
 *                                   ONLY "launch" or "pair": that one alone
 *                                   (for a profiler)
 *   bench_shim first-alloc LIB T0   prints the ns from T0 (CLOCK_REALTIME)
 *                                   to the end of the first allocation
 *   bench_shim hold LIB             allocates once, then waits for stdin
 *                                   to close (a registered process)
 *   bench_shim loop LIB WHAT N      N cuLaunchKernel calls (WHAT launch)
 *                                   or pairs (pair), one of each first,
 *                                   untimed: for counting instructions
 *                                   (count-instructions.py)
 *
 * run-bench.py runs these with and without the shim and prints the table.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH 10000
#define BATCHES 51

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
			      unsigned, unsigned, unsigned, unsigned, CUstream,
			      void **, void **);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*setcur_fn)(CUcontext);

static init_fn p_init;
static alloc_fn p_alloc;
static free_fn p_free;
static launch_fn p_launch;
static retain_fn p_retain;
static setcur_fn p_setcur;

static unsigned long long now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull +
	       (unsigned long long)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void open_lib(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "bench_shim: %s\n", dlerror());
		exit(2);
	}
	p_init = (init_fn)dlsym(h, "cuInit");
	p_alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
	p_free = (free_fn)dlsym(h, "cuMemFree_v2");
	p_launch = (launch_fn)dlsym(h, "cuLaunchKernel");
	p_retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
	p_setcur = (setcur_fn)dlsym(h, "cuCtxSetCurrent");
	if (!p_init || !p_alloc || !p_free || !p_launch ||
	    p_init(0) != CUDA_SUCCESS) {
		fprintf(stderr, "bench_shim: %s: no usable driver\n", path);
		exit(2);
	}
	/* A real (or simulated) driver needs a context; the null one has
	 * none to give and needs none. */
	if (p_retain && p_setcur) {
		CUcontext ctx;
		if (p_retain(&ctx, 0) == CUDA_SUCCESS)
			p_setcur(ctx);
	}
}

static double median_ns(int what)
{
	double v[BATCHES];

	for (int b = 0; b < BATCHES; b++) {
		unsigned long long t0 = now(CLOCK_MONOTONIC);
		for (int i = 0; i < BATCH; i++) {
			if (what == 0) {
				p_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL,
					 NULL);
			} else {
				CUdeviceptr d;
				if (p_alloc(&d, 4096) == CUDA_SUCCESS)
					p_free(d);
			}
		}
		v[b] = (double)(now(CLOCK_MONOTONIC) - t0) / BATCH;
	}
	qsort(v, BATCHES, sizeof(v[0]), cmp);
	return v[BATCHES / 2];
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "calls") == 0) {
		const char *only = argc >= 4 ? argv[3] : "";

		open_lib(argv[2]);
		if (strcmp(only, "pair") != 0)
			printf("launch %.2f\n", median_ns(0));
		if (strcmp(only, "launch") != 0)
			printf("pair %.2f\n", median_ns(1));
		return 0;
	}
	if (argc >= 4 && strcmp(argv[1], "first-alloc") == 0) {
		unsigned long long t0 = strtoull(argv[3], NULL, 10);
		CUdeviceptr d;

		open_lib(argv[2]);
		if (p_alloc(&d, 1 << 20) != CUDA_SUCCESS)
			return 1;
		printf("%llu\n", now(CLOCK_REALTIME) - t0);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "hold") == 0) {
		CUdeviceptr d;
		char c;

		open_lib(argv[2]);
		if (p_alloc(&d, 1 << 20) != CUDA_SUCCESS)
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (read(0, &c, 1) > 0)
			;
		return 0;
	}
	if (argc >= 5 && strcmp(argv[1], "loop") == 0) {
		long n = atol(argv[4]);
		bool launch = strcmp(argv[3], "launch") == 0;
		CUdeviceptr d;

		open_lib(argv[2]);
		for (long i = -1; i < n; i++) {
			if (launch) {
				p_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL,
					 NULL);
			} else if (p_alloc(&d, 4096) == CUDA_SUCCESS) {
				p_free(d);
			}
		}
		return 0;
	}
	fprintf(stderr, "usage: bench_shim calls LIB [launch|pair] | "
		"first-alloc LIB T0 | hold LIB | loop LIB launch|pair N\n");
	return 2;
}
