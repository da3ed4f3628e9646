/* suspend_job.c - a CUDA job whose data is checked by kernels, for the
 * suspend/resume tests (test_ctl_suspend.c).
 *
 *   tools-suspend-job MIB NBUFS busy|idle
 *
 * Allocates NBUFS buffers of MIB MiB (cuMemAlloc), writes vgpu_touch's
 * pattern of seed 1 into each, prints "ready PID" and then:
 *   busy: runs passes until told to quit: each pass launches vgpu_touch on
 *         every buffer (checking the last pass's seed, writing the next)
 *         and synchronises; between passes it reads stdin without
 *         waiting. A second thread meanwhile copies a pattern to a 4 MiB
 *         buffer of its own (cuMemcpyHtoD, cuMemsetD32, cuMemcpyDtoH) and
 *         checks it: a copy that fails or comes back wrong counts as a
 *         wrong element.
 *   idle: makes no driver call until a command comes.
 * Commands (one line each, answered with one line):
 *   status   "pass N bad M": passes done, elements found wrong so far
 *            (idle: one pass is made first, so the data is checked)
 *   free     frees the last buffer: "freed N" (N buffers left)
 *   quit     frees everything and exits 0 (1 if any element was wrong)
 *   exit     exit(0) at once: no driver call, the library's exit path
 * Exits 2 when the device or the kernels cannot be had, 3 on a failed
 * driver call (named on stderr).
 */
#include <cuda.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vgpu_kernels.h"

#define MAX_BUFS 64

static CUdeviceptr bufs[MAX_BUFS], bad_dev;
static unsigned long long elems;
static CUfunction touch;
static unsigned seed = 1, nbufs;
static unsigned long long passes;
static CUcontext ctx;
static volatile int copier_stop;
static unsigned long long copy_bad, copies;	/* the copier's */

#define COPY_WORDS (1u << 20)	/* 4 MiB */

/* The copier: a pattern out and back, half by copy, half by memset. */
static void *copier(void *arg)
{
	static unsigned out[COPY_WORDS], back[COPY_WORDS];
	const size_t half = COPY_WORDS / 2 * sizeof(unsigned);
	CUdeviceptr buf;

	(void)arg;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    cuMemAlloc(&buf, COPY_WORDS * sizeof(unsigned)) != CUDA_SUCCESS) {
		__atomic_add_fetch(&copy_bad, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	for (unsigned k = 1; !copier_stop; k++) {
		unsigned long long bad = 0;

		for (unsigned i = 0; i < COPY_WORDS / 2; i++)
			out[i] = vgpu_touch_pattern(k, i);
		if (cuMemcpyHtoD(buf, out, half) != CUDA_SUCCESS ||
		    cuMemsetD32(buf + half, k, COPY_WORDS / 2) != CUDA_SUCCESS ||
		    cuMemcpyDtoH(back, buf, 2 * half) != CUDA_SUCCESS) {
			bad = 1;
		} else {
			for (unsigned i = 0; i < COPY_WORDS / 2; i++)
				bad += back[i] != out[i] ||
				       back[COPY_WORDS / 2 + i] != k;
		}
		__atomic_add_fetch(&copy_bad, bad, __ATOMIC_RELAXED);
		__atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED);
	}
	cuMemFree(buf);
	return NULL;
}

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "tools-suspend-job: %s: %d\n", what, (int)r);
		exit(3);
	}
}

static void launch(CUdeviceptr buf, unsigned expect, unsigned write,
		   CUdeviceptr mismatches)
{
	void *params[] = { &buf, &elems, &expect, &write, &mismatches };

	check(cuLaunchKernel(touch, 64, 1, 1, 128, 1, 1, 0, NULL, params,
			     NULL), "cuLaunchKernel(vgpu_touch)");
}

/* Every buffer checked against seed and rewritten with seed + 1. */
static void one_pass(void)
{
	for (unsigned i = 0; i < nbufs; i++)
		launch(bufs[i], seed, seed + 1, bad_dev);
	check(cuCtxSynchronize(), "cuCtxSynchronize");
	seed++;
	passes++;
}

static unsigned long long bad_count(void)
{
	unsigned long long bad;

	check(cuMemcpyDtoH(&bad, bad_dev, sizeof(bad)), "cuMemcpyDtoH");
	return bad + __atomic_load_n(&copy_bad, __ATOMIC_RELAXED);
}

/* One command from stdin; false at quit or EOF. */
static int command(char *line, bool idle)
{
	if (!strncmp(line, "exit", 4))
		exit(0);
	if (!strncmp(line, "free", 4) && nbufs > 1) {
		check(cuMemFree(bufs[--nbufs]), "cuMemFree");
		printf("freed %u\n", nbufs);
		fflush(stdout);
		return 1;
	}
	if (!strncmp(line, "status", 6)) {
		if (idle)
			one_pass();
		printf("pass %llu bad %llu\n", passes, bad_count());
		fflush(stdout);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long mib = argc == 4 ? strtoull(argv[1], NULL, 10) : 0;
	bool idle = argc == 4 && !strcmp(argv[3], "idle");
	unsigned long long bad;
	char line[128];
	pthread_t cp;
	CUmodule mod;

	nbufs = argc == 4 ? (unsigned)atoi(argv[2]) : 0;
	if (!mib || !nbufs || nbufs > MAX_BUFS ||
	    (!idle && strcmp(argv[3], "busy"))) {
		fprintf(stderr, "usage: tools-suspend-job MIB NBUFS busy|idle\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    cuModuleLoadData(&mod, vgpu_kernels_fatbin) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&touch, mod, "vgpu_touch") != CUDA_SUCCESS) {
		fprintf(stderr, "tools-suspend-job: no device or kernels\n");
		return 2;
	}
	elems = mib * (1ull << 20) / sizeof(unsigned);
	check(cuMemAlloc(&bad_dev, sizeof(unsigned long long)), "cuMemAlloc");
	check(cuMemsetD8(bad_dev, 0, sizeof(unsigned long long)),
	      "cuMemsetD8");
	for (unsigned i = 0; i < nbufs; i++) {
		check(cuMemAlloc(&bufs[i], mib << 20), "cuMemAlloc");
		launch(bufs[i], 0, seed, 0);
	}
	check(cuCtxSynchronize(), "cuCtxSynchronize");
	if (!idle && pthread_create(&cp, NULL, copier, NULL) != 0)
		return 2;
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	for (;;) {
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };

		if (!idle && poll(&p, 1, 0) == 0) {
			one_pass();
			continue;
		}
		if (!fgets(line, sizeof(line), stdin) || !command(line, idle))
			break;
	}
	if (!idle) {
		copier_stop = 1;
		pthread_join(cp, NULL);
		one_pass();	/* the last check */
		fprintf(stderr, "tools-suspend-job: %llu copies checked\n",
			copies);
	}
	bad = bad_count();
	for (unsigned i = 0; i < nbufs; i++)
		check(cuMemFree(bufs[i]), "cuMemFree");
	check(cuMemFree(bad_dev), "cuMemFree");
	cuModuleUnload(mod);
	cuDevicePrimaryCtxRelease(0);
	return bad ? 1 : 0;
}
