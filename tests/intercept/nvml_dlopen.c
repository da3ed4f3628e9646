/* nvml_dlopen.c - NVML reached as pynvml, nvitop and PyTorch reach it:
 * dlopen("libnvidia-ml.so.1") and dlsym in that handle, not linked. Under
 * LD_PRELOAD=libvgpu.so with a 512 MiB slice the memory views say the
 * slice and the tenant's charge, and the process lists name this process
 * with what it is charged, the utilisation is the idle tenant's (0); a function the shim does not hook comes from
 * NVML itself, and dlsym's other uses (RTLD_NEXT, RTLD_DEFAULT, a missing
 * name) behave as without the shim. Prints PASS/FAIL lines; exits 1 on a
 * failure.
 */
#include "vgpu_nvml_types.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

typedef nvmlReturn_t (*init_fn)(void);
typedef nvmlReturn_t (*handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*mem2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*procs_fn)(nvmlDevice_t, unsigned *, void *);
typedef nvmlReturn_t (*name_fn)(nvmlDevice_t, char *, unsigned);
typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*putil_fn)(nvmlDevice_t,
				 nvmlProcessUtilizationSample_t *, unsigned *,
				 unsigned long long);

int main(void)
{
	char dir[] = "/tmp/vgpu-nvml-dlopen.XXXXXX", sub[64], name[96];
	nvmlProcessInfo_v2_t p2[8];
	nvmlProcessInfo_v1_t p1[8];
	nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
	nvmlMemory_t m;
	nvmlDevice_t d;
	CUcontext ctx;
	CUdeviceptr p;
	CUdevice dev;
	nvmlReturn_t rc;
	unsigned n;
	void *h;

	if (!mkdtemp(dir))
		return 2;
	snprintf(sub, sizeof(sub), "%s/ledger", dir);
	setenv("VGPU_LEDGER_DIR", sub, 1);
	setenv("VGPU_SIM_STATE_DIR", dir, 1);
	setenv("VGPU_MEMORY_LIMIT", "512MiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
	if (cuInit(0) || cuDeviceGet(&dev, 0) ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
	    cuMemAlloc(&p, 96 * MiB)) {
		check("cuda", 0, "could not allocate");
		return 1;
	}
	h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	check("dlopen", h != NULL, "%s", h ? "" : dlerror());
	if (!h)
		return 1;
	init_fn init = (init_fn)dlsym(h, "nvmlInit_v2");
	handle_fn get = (handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	mem_fn mem = (mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
	mem2_fn mem2 = (mem2_fn)dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
	procs_fn v3 = (procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
	procs_fn v1 = (procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses");
	procs_fn g3 = (procs_fn)dlsym(h, "nvmlDeviceGetGraphicsRunningProcesses_v3");
	name_fn nm = (name_fn)dlsym(h, "nvmlDeviceGetName");
	util_fn ut = (util_fn)dlsym(h, "nvmlDeviceGetUtilizationRates");
	putil_fn pu = (putil_fn)dlsym(h, "nvmlDeviceGetProcessUtilization");

	if (!init || !get || !mem || !mem2 || !v3 || !v1 || !g3 || !nm || !ut ||
	    !pu) {
		check("dlsym", 0, "a function is missing");
		return 1;
	}
	if (init() || get(0, &d) || mem(d, &m) || mem2(d, &m2)) {
		check("nvml", 0, "a call failed");
		return 1;
	}
	check("memory-v1", m.total == SLICE && m.used == 96 * MiB &&
	      m.free == SLICE - 96 * MiB, "total %llu used %llu free %llu",
	      m.total, m.used, m.free);
	check("memory-v2", m2.total == SLICE && m2.used == 96 * MiB,
	      "total %llu used %llu", m2.total, m2.used);
	n = 0;
	rc = v3(d, &n, NULL);
	check("procs-ask", rc == NVML_ERROR_INSUFFICIENT_SIZE && n == 1,
	      "rc %d n %u", (int)rc, n);
	n = 8;
	rc = v3(d, &n, p2);
	check("procs-v3", rc == NVML_SUCCESS && n == 1 &&
	      p2[0].pid == (unsigned)getpid() &&
	      p2[0].usedGpuMemory == 96 * MiB, "n %u pid %u used %llu", n,
	      n ? p2[0].pid : 0, n ? p2[0].usedGpuMemory : 0);
	n = 8;
	rc = v1(d, &n, p1);
	check("procs-v1", rc == NVML_SUCCESS && n == 1 &&
	      p1[0].pid == (unsigned)getpid() &&
	      p1[0].usedGpuMemory == 96 * MiB, "n %u", n);
	n = 8;
	rc = g3(d, &n, p2);
	check("graphics-v3", rc == NVML_SUCCESS && n == 0, "n %u", n);
	{
		nvmlProcessUtilizationSample_t smp[4];
		nvmlUtilization_t u = { 1000, 1000 };

		rc = ut(d, &u);
		check("utilisation", rc == NVML_SUCCESS && u.gpu == 0 &&
		      u.memory == 0, "rc %d gpu %u memory %u", (int)rc, u.gpu,
		      u.memory);
		n = 4;
		rc = pu(d, smp, &n, 0);
		check("process-utilisation", rc == NVML_ERROR_NOT_FOUND ||
		      (rc == NVML_SUCCESS && n <= 1 &&
		       (!n || smp[0].pid == (unsigned)getpid())),
		      "rc %d n %u", (int)rc, n);
	}
	check("not-hooked", nm(d, name, sizeof(name)) == NVML_SUCCESS &&
	      strstr(name, "simulated") != NULL, "name '%s'", name);
	/* dlsym's other uses, unchanged. */
	check("rtld-default", dlsym(RTLD_DEFAULT, "cuInit") != NULL, "cuInit");
	check("rtld-next", dlsym(RTLD_NEXT, "printf") != NULL, "printf");
	check("missing", dlsym(h, "nvmlNoSuchFunction") == NULL &&
	      dlerror() != NULL, "a missing name sets dlerror");
	cuMemFree(p);
	n = 8;
	rc = v3(d, &n, p2);
	check("procs-after-free", rc == NVML_SUCCESS && n == 1 &&
	      p2[0].usedGpuMemory == 0, "used %llu", n ? p2[0].usedGpuMemory : 0);
	dlclose(h);
	return failed;
}
