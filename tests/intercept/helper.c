/* helper.c - a CUDA program the preload tests exec.
 *
 *   shim-helper join        cuInit, device 0's primary context; exits 0
 *   shim-helper probe A B   as join, then prints "total=T devtotal=D
 *                           free=F a=RA b=RB": cuMemGetInfo_v2,
 *                           cuDeviceTotalMem_v2, and the results of
 *                           allocating A then B more bytes (both kept)
 *   shim-helper badfree     cuInit and a context, then prints "rc=R" for a
 *                           cuMemFree_v2 of a pointer nobody allocated and
 *                           "double=R" for a second free of a real one
 *
 * Linked against the stub libcuda.so: run it under LD_PRELOAD=libvgpu.so,
 * or with LD_LIBRARY_PATH at the simulated driver for the same program
 * without the shim. Exits 2 when a step before the one tested fails.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int start(void)
{
	CUcontext ctx;

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "shim-helper: no context\n");
		return 2;
	}
	return 0;
}

static int probe(size_t a, size_t b)
{
	size_t free_b = 0, total = 0, devtotal = 0;
	CUdeviceptr pa = 0, pb = 0;
	CUresult ra, rb;

	if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS ||
	    cuDeviceTotalMem(&devtotal, 0) != CUDA_SUCCESS)
		return 2;
	ra = cuMemAlloc(&pa, a);
	rb = cuMemAlloc(&pb, b);
	printf("total=%zu devtotal=%zu free=%zu a=%d b=%d\n", total, devtotal,
	       free_b, (int)ra, (int)rb);
	return 0;
}

static int badfree(void)
{
	CUdeviceptr p;

	printf("rc=%d\n", (int)cuMemFree((CUdeviceptr)0x7f0000123000ull));
	if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS ||
	    cuMemFree(p) != CUDA_SUCCESS)
		return 2;
	printf("double=%d\n", (int)cuMemFree(p));
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2)
		return 2;
	if ((rc = start()) != 0)
		return rc;
	if (strcmp(argv[1], "join") == 0)
		return 0;
	if (strcmp(argv[1], "probe") == 0 && argc == 4)
		return probe(strtoull(argv[2], NULL, 0),
			     strtoull(argv[3], NULL, 0));
	if (strcmp(argv[1], "badfree") == 0)
		return badfree();
	return 2;
}
