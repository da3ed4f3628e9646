/* holder.c - a CUDA job that holds memory (and keeps launching kernels)
 * until its standard input closes, for the vgpu-top tests.
 *
 *   tools-holder SIZES [KERNEL_US]
 *
 * SIZES: bytes to allocate with cuMemAlloc, comma-separated (each one
 * allocation; "0": none). KERNEL_US > 0: launch-then-synchronise vgpu_spin
 * kernels of that length in a loop (needs the kernels' fatbin). Prints
 * "ready PID" once everything is allocated, "alloc N failed RC" for an
 * allocation refused (it goes on), and exits 0 when stdin reaches EOF,
 * after freeing what it holds. Exits 2 when the device cannot be opened.
 */
#include <cuda.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HOLDER_KERNELS
#include "vgpu_kernels.h"
#endif

#define MAX_BUFS 64

static int spin_setup(CUfunction *spin)
{
#ifdef HOLDER_KERNELS
	CUmodule mod;

	if (cuModuleLoadData(&mod, vgpu_kernels_fatbin) != CUDA_SUCCESS ||
	    cuModuleGetFunction(spin, mod, "vgpu_spin") != CUDA_SUCCESS)
		return -1;
	return 0;
#else
	(void)spin;
	fprintf(stderr, "tools-holder: built without the kernels\n");
	return -1;
#endif
}

static int spin_once(CUfunction spin, unsigned long us)
{
	struct { uint64_t ns; CUdeviceptr times; } p = { us * 1000, 0 };
	size_t size = sizeof(p);
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &p,
			  CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };

	if (cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra) !=
	    CUDA_SUCCESS)
		return -1;
	return cuCtxSynchronize() == CUDA_SUCCESS ? 0 : -1;
}

/* Whether stdin has reached EOF (or has anything: the tests only close). */
static bool stdin_done(int wait_ms)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };

	return poll(&p, 1, wait_ms) > 0;
}

int main(int argc, char **argv)
{
	CUdeviceptr bufs[MAX_BUFS];
	unsigned long us = argc > 2 ? strtoul(argv[2], NULL, 10) : 0;
	CUfunction spin = NULL;
	CUcontext ctx;
	int n = 0;

	if (argc < 2 || cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    (us && spin_setup(&spin) != 0)) {
		fprintf(stderr, "tools-holder: no device, context or kernels\n");
		return 2;
	}
	for (char *s = argv[1], *end; *s && n < MAX_BUFS; s = end) {
		unsigned long long b = strtoull(s, &end, 10);
		CUresult rc;

		if (*end == ',')
			end++;
		if (b == 0)
			continue;
		rc = cuMemAlloc(&bufs[n], b);
		if (rc == CUDA_SUCCESS)
			n++;
		else
			printf("alloc %llu failed %d\n", b, (int)rc);
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (!stdin_done(us ? 0 : 100))
		if (us && spin_once(spin, us) != 0)
			return 3;
	while (n > 0)
		cuMemFree(bufs[--n]);
	cuDevicePrimaryCtxRelease(0);
	return 0;
}
