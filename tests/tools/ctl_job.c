/* ctl_job.c - a CUDA job that allocates and frees on command, for the
 * vgpu-ctl tests (test_ctl.c).
 *
 *   tools-ctl-job
 *
 * Prints "ready PID", then reads lines from stdin:
 *   alloc BYTES   cuMemAlloc: "ok N" (N its number) or "fail RC"
 *   free N        cuMemFree of allocation N: "freed" or "fail RC"
 * and at EOF frees what it holds and exits 0. Exits 2 when the device
 * cannot be opened.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BUFS 256

static CUdeviceptr bufs[MAX_BUFS];

static void do_alloc(unsigned long long bytes, int *n)
{
	CUresult rc = *n < MAX_BUFS ? cuMemAlloc(&bufs[*n], bytes)
				    : CUDA_ERROR_INVALID_VALUE;

	if (rc == CUDA_SUCCESS)
		printf("ok %d\n", (*n)++);
	else
		printf("fail %d\n", (int)rc);
}

static void do_free(int i, int n)
{
	CUresult rc = i >= 0 && i < n && bufs[i] ? cuMemFree(bufs[i])
						 : CUDA_ERROR_INVALID_VALUE;

	if (rc == CUDA_SUCCESS) {
		bufs[i] = 0;
		printf("freed\n");
	} else {
		printf("fail %d\n", (int)rc);
	}
}

int main(void)
{
	char line[128];
	CUcontext ctx;
	int n = 0;

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "tools-ctl-job: no device or context\n");
		return 2;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "alloc ", 6))
			do_alloc(strtoull(line + 6, NULL, 10), &n);
		else if (!strncmp(line, "free ", 5))
			do_free(atoi(line + 5), n);
		else
			printf("unknown\n");
		fflush(stdout);
	}
	for (int i = 0; i < n; i++)
		if (bufs[i])
			cuMemFree(bufs[i]);
	cuDevicePrimaryCtxRelease(0);
	return 0;
}
