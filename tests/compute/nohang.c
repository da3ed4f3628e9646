/* nohang.c - a capped thread whose earlier launches wait for something
 * the thread itself does later must not hang under the shim.
 *
 *   nohang --style STYLE [--launches N] [--warm]
 *
 * On stream s1, the thread queues a wait (STYLE wait-value: for a value
 * in device memory to reach 1; host-fn: a host function that waits for a
 * semaphore), then N kernels of 100 us behind it; then one kernel on
 * stream s2, and only then what releases s1 (the value written from s2,
 * or the semaphore posted). Without the shim this always completes; a
 * shim that waits in the driver for s1's launches before letting the
 * thread launch on s2 hangs the job for good. --warm: a few kernels are
 * launched and synchronised first (the process has an estimate); without
 * it the first launch behind the wait is the process's first (its
 * tenant's probe). Past the shim's ring (15 in flight) and its park
 * (1024 launches given up on), each further launch waits 10 s under a
 * cap (docs/compute.md).
 *
 * Passes when every kernel ran (its stamps written) and the
 * job ended; a watchdog ends it with a message after 30 s, so a hang is a
 * failure, not a stuck test. Exit status: 0 pass, 1 fail, 2 could not
 * run.
 */
#include "cu_util.h"
#include "vgpu_kernels.h"

#include <semaphore.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LAUNCHES 1000
#define WATCHDOG_S 30

static const char *style = "wait-value";
static sem_t gate;

static void die(const char *what, CUresult r)
{
	exit(cu_report("nohang", what, r));
}

static void hung(int sig)
{
	static const char msg[] = "nohang: the job hung (30 s): launches "
				  "behind a wait for later work never went\n";
	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void CUDA_CB wait_gate(void *arg)
{
	(void)arg;
	while (sem_wait(&gate) != 0)
		;
}

static void spin(CUfunction f, CUstream s, CUdeviceptr times, int i)
{
	unsigned long long ns = 100000;
	CUdeviceptr t = times + (CUdeviceptr)i * 2 * sizeof(uint64_t);
	void *params[] = { &ns, &t };
	CUresult r;

	if ((r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL)))
		die("launch", r);
}

int main(int argc, char **argv)
{
	int n = 3, k = 0;
	bool warm = false;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUstream s1, s2;
	CUdeviceptr flag, times;
	uint64_t t[2 * (MAX_LAUNCHES + 8)];
	CUresult r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--style") && i + 1 < argc)
			style = argv[++i];
		else if (!strcmp(argv[i], "--launches") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warm"))
			warm = true;
		else
			n = -1;
	}
	if (n < 1 || n > MAX_LAUNCHES ||
	    (strcmp(style, "wait-value") && strcmp(style, "host-fn"))) {
		fprintf(stderr, "usage: nohang --style wait-value|host-fn "
				"[--launches 1..%d] [--warm]\n", MAX_LAUNCHES);
		return 2;
	}
	signal(SIGALRM, hung);
	alarm(WATCHDOG_S);
	sem_init(&gate, 0, 0);
	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (r = cuCtxSetCurrent(ctx)))
		die("start", r);
	if ((r = cuModuleLoadData(&mod, vgpu_kernels_fatbin)) ||
	    (r = cuModuleGetFunction(&f, mod, "vgpu_spin")) ||
	    (r = cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
	    (r = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)) ||
	    (r = cuMemAlloc(&flag, 4096)) || (r = cuMemsetD8(flag, 0, 4096)) ||
	    (r = cuMemAlloc(&times, sizeof(t))) ||
	    (r = cuMemsetD8(times, 0, sizeof(t))))
		die("setup", r);
	if (warm) {
		for (int i = 0; i < 3; i++)
			spin(f, s1, times, k++);
		if ((r = cuStreamSynchronize(s1)))
			die("warm", r);
	}
	if (!strcmp(style, "wait-value"))
		r = cuStreamWaitValue32(s1, flag, 1, CU_STREAM_WAIT_VALUE_GEQ);
	else
		r = cuLaunchHostFunc(s1, wait_gate, NULL);
	if (r)
		die("wait", r);
	for (int i = 0; i < n; i++)
		spin(f, s1, times, k++);
	spin(f, s2, times, k++);
	if (!strcmp(style, "wait-value"))
		r = cuStreamWriteValue32(s2, flag, 1, 0);
	else
		r = sem_post(&gate) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
	if (r)
		die("release", r);
	if ((r = cuCtxSynchronize()) ||
	    (r = cuMemcpyDtoH(t, times, sizeof(t))))
		die("synchronise", r);
	for (int i = 0; i < k; i++) {
		if (!t[2 * i] || t[2 * i + 1] < t[2 * i]) {
			printf("nohang %s: kernel %d of %d did not run\n",
			       style, i, k);
			return 1;
		}
	}
	printf("nohang %s: %d kernels ran (%d behind the wait%s)\n", style, k,
	       n, warm ? ", after 3 to warm up" : "");
	return 0;
}
