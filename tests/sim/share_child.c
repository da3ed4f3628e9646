/* share_child.c - a second process for test_share.c, started with exec so
 * that it shares nothing with the test but VGPU_SIM_STATE_DIR.
 *
 * Usage: sim-share-child MIB. Allocates MIB MiB on device 0, writes "r" to
 * stdout, then waits for stdin to close and returns from main without
 * freeing: the end of a process as most programs end.
 * Exit status: 0, or the step that failed (1-4).
 */
#include <cuda.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	CUcontext ctx;
	CUdeviceptr p;
	char c;

	if (argc != 2)
		return 1;
	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 2;
	if (cuMemAlloc(&p, strtoull(argv[1], NULL, 10) << 20) != CUDA_SUCCESS)
		return 3;
	if (write(STDOUT_FILENO, "r", 1) != 1)
		return 4;
	while (read(STDIN_FILENO, &c, 1) > 0)
		;
	return 0;
}
