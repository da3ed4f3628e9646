/* nvml_view.c - NVML's memory info through the shim reports the slice.
 *
 * Linked against the simulated libnvidia-ml.so.1 (as nvidia-smi is linked
 * against NVIDIA's), run with LD_PRELOAD=libvgpu.so: the shim's
 * nvmlDeviceGetMemoryInfo/_v2 come first. Two processes of one tenant:
 * the parent uses CUDA and holds 96 MiB; a child that never touches CUDA
 * (like nvidia-smi in the container) must see the slice and the tenant's
 * 96 MiB through the ledger. Prints PASS/FAIL lines, exits 1 on a failure.
 */
#include "vgpu_nvml_types.h"

#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);

#define MiB (1ull << 20)
#define SLICE (512 * MiB)

static int failed;

static void check(const char *name, int ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(const char *name, int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	failed |= !ok;
}

/* What NVML says of device 0, both forms; 0 on success. */
static int view(const char *who, unsigned long long used_expected)
{
	nvmlDevice_t d;
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };

	if (nvmlInit_v2() != NVML_SUCCESS ||
	    nvmlDeviceGetHandleByIndex_v2(0, &d) != NVML_SUCCESS ||
	    nvmlDeviceGetMemoryInfo(d, &m) != NVML_SUCCESS ||
	    nvmlDeviceGetMemoryInfo_v2(d, &m2) != NVML_SUCCESS) {
		check(who, 0, "NVML failed");
		return 1;
	}
	check(who, m.total == SLICE && m.used == used_expected &&
	      m.free == SLICE - used_expected,
	      "v1 total %llu used %llu free %llu", m.total, m.used, m.free);
	check(who, m2.total == SLICE && m2.used == used_expected &&
	      m2.free + m2.reserved == SLICE - used_expected,
	      "v2 total %llu used %llu free %llu reserved %llu", m2.total,
	      m2.used, m2.free, m2.reserved);
	nvmlShutdown();
	return 0;
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	int status;
	pid_t pid;

	char dir[] = "/tmp/vgpu-nvml-view.XXXXXX", sub[64];

	if (!mkdtemp(dir))
		return 2;
	snprintf(sub, sizeof(sub), "%s/ledger", dir);
	setenv("VGPU_LEDGER_DIR", sub, 1);
	setenv("VGPU_SIM_STATE_DIR", dir, 1);
	setenv("VGPU_MEMORY_LIMIT", "512MiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
	/* Before any CUDA use: nothing held yet. */
	view("nvml-before-cuda", 0);
	if (cuInit(0) || cuDeviceGet(&dev, 0) ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
	    cuMemAlloc(&p, 96 * MiB)) {
		check("cuda", 0, "could not allocate");
		return 1;
	}
	view("nvml-same-process", 96 * MiB);
	pid = fork();
	if (pid == 0) {
		/* A process that never used CUDA: reads the ledger. */
		failed = 0;
		view("nvml-other-process", 96 * MiB);
		_exit(failed);
	}
	waitpid(pid, &status, 0);
	check("child", WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "status %d", status);
	cuMemFree(p);
	view("nvml-after-free", 0);
	return failed;
}
