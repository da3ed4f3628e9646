/* test_nvml.c - the simulated libnvidia-ml.so.1: initialisation, devices by
 * physical index and UUID, and memory that the simulated libcuda of this
 * and other processes uses; the process lists, utilisation, and the names
 * (unversioned and versioned) that dlopen-ing programs look up.
 */
#include "simtest.h"
#include "vgpu_nvml_types.h"

#include <stdio.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
					    nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
			       unsigned int length);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
			       unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
					nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
					nvmlDevice_t *device);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
	unsigned int *count, nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
					   nvmlUtilization_t *util);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
	nvmlProcessUtilizationSample_t *samples, unsigned int *count,
	unsigned long long lastSeen);

TestSuite(nvml, .init = simtest_clean_env, .fini = simtest_remove_state);

#define NVML_ASSERT(call, want)                                               \
	do {                                                                  \
		nvmlReturn_t nv_got_ = (call);                                \
		nvmlReturn_t nv_want_ = (want);                               \
		cr_assert_eq(nv_got_, nv_want_, "%s: got %d (%s), want %d",  \
			     #call, (int)nv_got_, nvmlErrorString(nv_got_),   \
			     (int)nv_want_);                                  \
	} while (0)
#define NVML_OK(call) NVML_ASSERT(call, NVML_SUCCESS)

static nvmlDevice_t handle(unsigned index)
{
	nvmlDevice_t d = NULL;

	NVML_OK(nvmlDeviceGetHandleByIndex_v2(index, &d));
	cr_assert_not_null(d);
	return d;
}

static nvmlMemory_t memory(nvmlDevice_t d)
{
	nvmlMemory_t m;

	NVML_OK(nvmlDeviceGetMemoryInfo(d, &m));
	cr_assert_eq(m.free + m.used, m.total);
	return m;
}

Test(nvml, calls_before_init_are_uninitialized)
{
	unsigned count;
	nvmlDevice_t d;
	char buf[96];

	simtest_env();
	NVML_ASSERT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlSystemGetDriverVersion(buf, sizeof(buf)),
		    NVML_ERROR_UNINITIALIZED);
}

Test(nvml, init_is_counted)
{
	unsigned count;

	simtest_env();
	NVML_OK(nvmlInit_v2());
	NVML_OK(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS));
	NVML_OK(nvmlShutdown());
	NVML_OK(nvmlDeviceGetCount_v2(&count));    /* one init still open */
	NVML_OK(nvmlShutdown());
	NVML_ASSERT(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlInitWithFlags(0x80), NVML_ERROR_INVALID_ARGUMENT);
}

Test(nvml, error_strings)
{
	cr_assert_str_eq(nvmlErrorString(NVML_SUCCESS), "Success");
	cr_assert_str_eq(nvmlErrorString(NVML_ERROR_UNINITIALIZED),
			 "Uninitialized");
	cr_assert_str_eq(nvmlErrorString(NVML_ERROR_UNKNOWN), "Unknown Error");
	cr_assert_str_eq(nvmlErrorString((nvmlReturn_t)12345), "Unknown Error");
}

Test(nvml, driver_version)
{
	char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], small[4];

	simtest_env();
	NVML_OK(nvmlInit_v2());
	NVML_OK(nvmlSystemGetDriverVersion(buf, sizeof(buf)));
	cr_assert_str_eq(buf, "580.65.06");
	NVML_ASSERT(nvmlSystemGetDriverVersion(small, sizeof(small)),
		    NVML_ERROR_INSUFFICIENT_SIZE);
	NVML_ASSERT(nvmlSystemGetDriverVersion(NULL, 80),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlShutdown());
}

Test(nvml, devices_by_index)
{
	unsigned count, index;
	nvmlDevice_t d;

	setenv("VGPU_SIM_DEVICES", "3", 1);
	simtest_env();
	NVML_OK(nvmlInit_v2());
	NVML_OK(nvmlDeviceGetCount_v2(&count));
	cr_assert_eq(count, 3);
	for (unsigned i = 0; i < count; i++) {
		NVML_OK(nvmlDeviceGetIndex(handle(i), &index));
		cr_assert_eq(index, i);
	}
	NVML_ASSERT(nvmlDeviceGetHandleByIndex_v2(3, &d),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_ASSERT(nvmlDeviceGetHandleByIndex_v2(0, NULL),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_ASSERT(nvmlDeviceGetIndex((nvmlDevice_t)&count, &index),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_ASSERT(nvmlDeviceGetIndex(NULL, &index), NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlShutdown());
}

/* NVML numbers devices physically, whatever CUDA_VISIBLE_DEVICES says. */
Test(nvml, ignores_cuda_visible_devices)
{
	unsigned count;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	setenv("CUDA_VISIBLE_DEVICES", "1", 1);
	simtest_env();
	NVML_OK(nvmlInit_v2());
	NVML_OK(nvmlDeviceGetCount_v2(&count));
	cr_assert_eq(count, 2);
	NVML_OK(nvmlShutdown());
}

Test(nvml, name_and_uuid_match_cuda)
{
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], cname[256];
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], want[64];
	const unsigned char *b;
	CUuuid cu;
	nvmlDevice_t d, byuuid;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	setenv("VGPU_SIM_NAME", "Test GPU 80GB", 1);
	simtest_init();
	NVML_OK(nvmlInit_v2());
	for (unsigned i = 0; i < 2; i++) {
		d = handle(i);
		NVML_OK(nvmlDeviceGetName(d, name, sizeof(name)));
		CU_OK(cuDeviceGetName(cname, sizeof(cname), (CUdevice)i));
		cr_assert_str_eq(name, cname);
		NVML_OK(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)));
		CU_OK(cuDeviceGetUuid(&cu, (CUdevice)i));
		b = (const unsigned char *)cu.bytes;
		snprintf(want, sizeof(want),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
			 "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
			 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
			 b[12], b[13], b[14], b[15]);
		cr_assert_str_eq(uuid, want);
		NVML_OK(nvmlDeviceGetHandleByUUID(uuid, &byuuid));
		cr_assert_eq(byuuid, d);
	}
	NVML_ASSERT(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-"
					      "000000000000", &byuuid),
		    NVML_ERROR_NOT_FOUND);
	NVML_ASSERT(nvmlDeviceGetHandleByUUID(NULL, &byuuid),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_ASSERT(nvmlDeviceGetName(d, name, 5), NVML_ERROR_INSUFFICIENT_SIZE);
	NVML_ASSERT(nvmlDeviceGetUUID(d, uuid, 10), NVML_ERROR_INSUFFICIENT_SIZE);
	NVML_OK(nvmlShutdown());
}

Test(nvml, memory_of_an_unused_device)
{
	nvmlMemory_t m;

	setenv("VGPU_SIM_MEMORY", "48MiB", 1);
	simtest_env();
	NVML_OK(nvmlInit_v2());
	m = memory(handle(0));
	cr_assert_eq(m.total, 48 * MIB);
	cr_assert_eq(m.used, 0);
	NVML_OK(nvmlShutdown());
}

/* cuMemAlloc in this process's simulated libcuda is NVML's used memory. */
Test(nvml, memory_shows_cuda_allocations)
{
	CUdeviceptr p;
	nvmlDevice_t d;
	nvmlMemory_t m;

	simtest_init_shared();
	NVML_OK(nvmlInit_v2());
	d = handle(0);
	m = memory(d);
	cr_assert_eq(m.total, SIMTEST_MEMORY);
	cr_assert_eq(m.used, 0);
	CU_OK(cuMemAlloc(&p, 8 * MIB));
	m = memory(d);
	cr_assert_eq(m.used, 8 * MIB, "used %llu", m.used);
	cr_assert_eq(m.free, SIMTEST_MEMORY - 8 * MIB);
	CU_OK(cuMemFree(p));
	cr_assert_eq(memory(d).used, 0);
	NVML_OK(nvmlShutdown());
}

Test(nvml, memory_v2)
{
	nvmlMemory_v2_t m = { .version = nvmlMemory_v2 };
	CUdeviceptr p;
	nvmlDevice_t d;

	cr_assert_eq(nvmlMemory_v2, (unsigned)sizeof(nvmlMemory_v2_t) | 2u << 24);
	simtest_init_shared();
	NVML_OK(nvmlInit_v2());
	d = handle(0);
	CU_OK(cuMemAlloc(&p, 3 * MIB));
	NVML_OK(nvmlDeviceGetMemoryInfo_v2(d, &m));
	cr_assert_eq(m.total, SIMTEST_MEMORY);
	cr_assert_eq(m.reserved, 0);
	cr_assert_eq(m.used, 3 * MIB);
	cr_assert_eq(m.free, SIMTEST_MEMORY - 3 * MIB);
	m.version = 1;
	NVML_ASSERT(nvmlDeviceGetMemoryInfo_v2(d, &m),
		    NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	NVML_ASSERT(nvmlDeviceGetMemoryInfo_v2(d, NULL),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlShutdown());
}

/* Another process's allocation counts, and stops counting when it dies. */
Test(nvml, memory_of_other_processes)
{
	int to_child[2], to_parent[2];
	char c = 0;
	nvmlDevice_t d;
	pid_t pid;

	simtest_env();
	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(to_parent), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		CUcontext ctx;
		CUdeviceptr p;

		if (cuInit(0) != CUDA_SUCCESS ||
		    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
		    cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
		    cuMemAlloc(&p, 5 * MIB) != CUDA_SUCCESS)
			_exit(1);
		if (write(to_parent[1], "a", 1) != 1 ||
		    read(to_child[0], &c, 1) != 1)
			_exit(2);
		_exit(0);   /* exits holding its allocation */
	}
	NVML_OK(nvmlInit_v2());
	d = handle(0);
	cr_assert_eq(read(to_parent[0], &c, 1), 1, "the child failed");
	cr_assert_eq(memory(d).used, 5 * MIB);
	cr_assert_eq(write(to_child[1], "b", 1), 1);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	cr_assert_eq(memory(d).used, 0);
	NVML_OK(nvmlShutdown());
}

/* The first versions' names, which older programs (and HAMi-core) call,
 * answer as the current ones; the CUDA version is the driver's. */
Test(nvml, unversioned_names_and_the_cuda_version)
{
	unsigned n1 = 0, n2 = 0;
	nvmlDevice_t d = NULL;
	int v1 = 0, v2 = 0;

	simtest_env();
	NVML_ASSERT(nvmlDeviceGetCount(&n1), NVML_ERROR_UNINITIALIZED);
	NVML_ASSERT(nvmlSystemGetCudaDriverVersion(&v1),
		    NVML_ERROR_UNINITIALIZED);
	NVML_OK(nvmlInit());
	NVML_OK(nvmlDeviceGetCount(&n1));
	NVML_OK(nvmlDeviceGetCount_v2(&n2));
	cr_assert_eq(n1, n2);
	NVML_OK(nvmlDeviceGetHandleByIndex(0, &d));
	cr_assert_eq(d, handle(0));
	NVML_ASSERT(nvmlDeviceGetHandleByIndex(n1, &d),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlSystemGetCudaDriverVersion(&v1));
	NVML_OK(nvmlSystemGetCudaDriverVersion_v2(&v2));
	cr_assert_eq(v1, 13000);
	cr_assert_eq(v2, 13000);
	NVML_ASSERT(nvmlSystemGetCudaDriverVersion(NULL),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlShutdown());
}

/* The process list: every process with a context, with the memory it
 * holds, by NVML's two-call protocol; gone when it exits. No graphics. */
Test(nvml, processes_with_their_memory)
{
	int to_child[2], to_parent[2];
	nvmlProcessInfo_v2_t p2[4];
	nvmlProcessInfo_v1_t p1[4];
	unsigned n;
	char c = 0;
	nvmlDevice_t d;
	pid_t pid;

	simtest_env();
	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(to_parent), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		CUcontext ctx;
		CUdeviceptr p;

		if (cuInit(0) != CUDA_SUCCESS ||
		    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
		    cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
		    cuMemAlloc(&p, 6 * MIB) != CUDA_SUCCESS)
			_exit(1);
		if (write(to_parent[1], "a", 1) != 1 ||
		    read(to_child[0], &c, 1) != 1)
			_exit(2);
		_exit(0);
	}
	NVML_OK(nvmlInit_v2());
	d = handle(0);
	cr_assert_eq(read(to_parent[0], &c, 1), 1, "the child failed");
	n = 0;
	NVML_ASSERT(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL),
		    NVML_ERROR_INSUFFICIENT_SIZE);
	cr_assert_eq(n, 1);
	n = 4;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p2));
	cr_assert_eq(n, 1);
	cr_assert_eq(p2[0].pid, (unsigned)pid);
	cr_assert_eq(p2[0].usedGpuMemory, 6 * MIB);
	cr_assert_eq(p2[0].gpuInstanceId, ~0u);
	cr_assert_eq(p2[0].computeInstanceId, ~0u);
	memset(p2, 0, sizeof(p2));
	n = 4;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses_v2(d, &n, p2));
	cr_assert(n == 1 && p2[0].pid == (unsigned)pid &&
		  p2[0].usedGpuMemory == 6 * MIB);
	n = 4;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses(d, &n, p1));
	cr_assert(n == 1 && p1[0].pid == (unsigned)pid &&
		  p1[0].usedGpuMemory == 6 * MIB);
	n = 0;
	NVML_ASSERT(nvmlDeviceGetComputeRunningProcesses(d, &n, p1),
		    NVML_ERROR_INSUFFICIENT_SIZE);
	cr_assert_eq(n, 1);
	n = 4;
	NVML_OK(nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, p2));
	cr_assert_eq(n, 0);
	NVML_ASSERT(nvmlDeviceGetComputeRunningProcesses_v3(d, NULL, p2),
		    NVML_ERROR_INVALID_ARGUMENT);
	cr_assert_eq(write(to_child[1], "b", 1), 1);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	n = 4;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p2));
	cr_assert_eq(n, 0, "a dead process is still listed");
	NVML_OK(nvmlShutdown());
}

/* What programs that dlopen libnvidia-ml.so.1 (pynvml, HAMi-core) look up
 * is there under NVIDIA's names, unversioned and versioned; what the
 * simulator does not answer stays absent. */
Test(nvml, names_found_by_dlsym)
{
	static const char *const names[] = {
		"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags",
		"nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
		"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2",
		"nvmlDeviceGetComputeRunningProcesses",
		"nvmlDeviceGetComputeRunningProcesses_v2",
		"nvmlDeviceGetComputeRunningProcesses_v3",
		"nvmlDeviceGetGraphicsRunningProcesses",
		"nvmlDeviceGetGraphicsRunningProcesses_v2",
		"nvmlDeviceGetGraphicsRunningProcesses_v3",
		"nvmlDeviceGetUtilizationRates",
		"nvmlDeviceGetProcessUtilization",
		"nvmlSystemGetCudaDriverVersion",
		"nvmlSystemGetCudaDriverVersion_v2",
	};
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);

	cr_assert_not_null(lib, "%s", dlerror());
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		cr_assert_not_null(dlsym(lib, names[i]), "%s is missing",
				   names[i]);
	cr_assert_null(dlsym(lib, "nvmlDeviceGetTemperature"));
	cr_assert_null(dlsym(lib, "vsim_log"), "a simulator symbol leaked");
	dlclose(lib);
}

/* A device no process holds a context on: no processes in any version
 * (with no array, 0 and success), no samples (NVML_ERROR_NOT_FOUND, as the
 * real library answers), 0% busy; graphics lists none in any version. */
Test(nvml, no_processes_no_samples)
{
	nvmlProcessUtilizationSample_t smp[2];
	nvmlProcessInfo_v2_t p2[2];
	nvmlProcessInfo_v1_t p1[2];
	nvmlUtilization_t u = { 7, 7 };
	unsigned n;
	nvmlDevice_t d;

	simtest_env();
	n = 0;
	NVML_ASSERT(nvmlDeviceGetProcessUtilization(NULL, smp, &n, 0),
		    NVML_ERROR_UNINITIALIZED);
	NVML_OK(nvmlInit());
	d = handle(0);
	n = 0;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL));
	cr_assert_eq(n, 0);
	n = 2;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses_v2(d, &n, p2));
	cr_assert_eq(n, 0);
	n = 2;
	NVML_OK(nvmlDeviceGetComputeRunningProcesses(d, &n, p1));
	cr_assert_eq(n, 0);
	n = 2;
	NVML_OK(nvmlDeviceGetGraphicsRunningProcesses(d, &n, p1));
	cr_assert_eq(n, 0);
	n = 2;
	NVML_OK(nvmlDeviceGetGraphicsRunningProcesses_v2(d, &n, p2));
	cr_assert_eq(n, 0);
	n = 0;
	NVML_OK(nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, NULL));
	cr_assert_eq(n, 0);
	n = 2;
	NVML_ASSERT(nvmlDeviceGetProcessUtilization(d, smp, &n, 0),
		    NVML_ERROR_NOT_FOUND);
	NVML_ASSERT(nvmlDeviceGetProcessUtilization(d, NULL, &n, 0),
		    NVML_ERROR_NOT_FOUND);
	NVML_ASSERT(nvmlDeviceGetProcessUtilization(d, smp, NULL, 0),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlDeviceGetUtilizationRates(d, &u));
	cr_assert_eq(u.gpu, 0);
	cr_assert_eq(u.memory, 0);
	NVML_ASSERT(nvmlDeviceGetComputeRunningProcesses_v3(NULL, &n, p2),
		    NVML_ERROR_INVALID_ARGUMENT);
	NVML_OK(nvmlShutdown());
}

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"

/* Utilisation is the device's record over the last second: 300 ms of
 * kernels on every SM read as 30% when asked within the second they ran
 * in (and never more, whenever asked); this process's sample likewise. */
Test(nvml, utilisation_from_the_record)
{
	unsigned long long ns = 100000000ull, none = 0;
	void *params[] = { &ns, &none };
	nvmlProcessUtilizationSample_t smp[4];
	nvmlUtilization_t u = { 1000, 1000 };
	struct timespec t0, t1;
	unsigned n = 4;
	CUmodule m;
	CUfunction f;
	nvmlDevice_t d;

	simtest_init_shared();
	NVML_OK(nvmlInit_v2());
	d = handle(0);
	NVML_OK(nvmlDeviceGetUtilizationRates(d, &u));
	cr_assert_eq(u.gpu, 0);
	cr_assert_eq(u.memory, 0);
	NVML_ASSERT(nvmlDeviceGetUtilizationRates(d, NULL),
		    NVML_ERROR_INVALID_ARGUMENT);
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_spin"));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 3; i++)
		CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				     NULL));
	CU_OK(cuCtxSynchronize());
	NVML_OK(nvmlDeviceGetUtilizationRates(d, &u));
	NVML_OK(nvmlDeviceGetProcessUtilization(d, smp, &n, 0));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert_leq(u.gpu, 30);
	cr_assert_eq(n, 1);
	cr_assert_eq(smp[0].pid, (unsigned)getpid());
	cr_assert_leq(smp[0].smUtil, 30);
	if ((t1.tv_sec - t0.tv_sec) * 1000000000ll +
	    (t1.tv_nsec - t0.tv_nsec) < 1000000000ll) {
		cr_assert_eq(u.gpu, 30, "gpu %u%%", u.gpu);
		cr_assert_eq(smp[0].smUtil, 30);
	}
	NVML_ASSERT(nvmlDeviceGetProcessUtilization(d, smp, &n, ~0ull),
		    NVML_ERROR_NOT_FOUND);
	CU_OK(cuModuleUnload(m));
	NVML_OK(nvmlShutdown());
}
#endif
