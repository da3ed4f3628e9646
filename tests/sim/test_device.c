/* test_device.c - device queries: count, ordinals, name, UUID, memory,
 * attributes and PCI bus ids, as VGPU_SIM_* configures them.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(device, .init = simtest_clean_env, .fini = simtest_remove_state);

/* Deprecated, but still exported and still used. */
static CUresult compute_capability(int *major, int *minor, CUdevice dev)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	return cuDeviceComputeCapability(major, minor, dev);
#pragma GCC diagnostic pop
}

Test(device, count_and_ordinals)
{
	CUdevice dev = -1;
	int n = 0;

	setenv("VGPU_SIM_DEVICES", "3", 1);
	simtest_init();
	CU_OK(cuDeviceGetCount(&n));
	cr_assert_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		CU_OK(cuDeviceGet(&dev, i));
		cr_assert_eq(dev, i);
	}
	CU_ASSERT(cuDeviceGet(&dev, 3), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
}

Test(device, default_is_one_device)
{
	int n = 0;

	simtest_init();
	CU_OK(cuDeviceGetCount(&n));
	cr_assert_eq(n, 1);
}

Test(device, bad_ordinal_everywhere)
{
	CUcontext ctx;
	CUuuid uuid;
	size_t bytes;
	char buf[64];
	int v, major, minor;
	unsigned flags;

	simtest_init();
	CU_ASSERT(cuDeviceGetName(buf, sizeof(buf), 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetUuid(&uuid, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceTotalMem(&bytes, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, -1),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(compute_capability(&major, &minor, 7),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetPCIBusId(buf, sizeof(buf), 1),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDevicePrimaryCtxGetState(1, &flags, &v),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuCtxCreate(&ctx, NULL, 0, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceCanAccessPeer(&v, 0, 1), CUDA_ERROR_INVALID_DEVICE);
}

Test(device, name_from_env)
{
	char name[256], small[5];

	setenv("VGPU_SIM_NAME", "Simulated H100 80GB", 1);
	simtest_init();
	CU_OK(cuDeviceGetName(name, sizeof(name), 0));
	cr_assert_str_eq(name, "Simulated H100 80GB");
	/* Cut to len bytes with its terminating NUL. */
	CU_OK(cuDeviceGetName(small, sizeof(small), 0));
	cr_assert_str_eq(small, "Simu");
	CU_ASSERT(cuDeviceGetName(NULL, 16, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(device, default_name)
{
	char name[256];

	simtest_init();
	CU_OK(cuDeviceGetName(name, sizeof(name), 0));
	cr_assert_str_eq(name, "libvgpu simulated GPU");
}

/* Reads device dev's UUID in a new process: a fresh cuInit. */
static CUuuid uuid_elsewhere(int dev)
{
	CUuuid uuid;
	int fds[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (cuInit(0) != CUDA_SUCCESS ||
		    cuDeviceGetUuid(&uuid, dev) != CUDA_SUCCESS ||
		    write(fds[1], &uuid, sizeof(uuid)) != sizeof(uuid))
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &uuid, sizeof(uuid)), (ssize_t)sizeof(uuid));
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return uuid;
}

Test(device, uuid_stable_and_distinct)
{
	CUuuid u0, u1, v0, again;
	static const CUuuid zero;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init_shared();
	CU_OK(cuDeviceGetUuid(&u0, 0));
	CU_OK(cuDeviceGetUuid_v2(&v0, 0));
	CU_OK(cuDeviceGetUuid(&u1, 1));
	cr_assert_neq(memcmp(&u0, &zero, sizeof(u0)), 0);
	cr_assert_eq(memcmp(&u0, &v0, sizeof(u0)), 0);
	cr_assert_neq(memcmp(&u0, &u1, sizeof(u0)), 0, "two devices, one UUID");
	CU_OK(cuDeviceGetUuid(&again, 0));
	cr_assert_eq(memcmp(&u0, &again, sizeof(u0)), 0);
	/* Another process, another cuInit: the same UUIDs. */
	again = uuid_elsewhere(0);
	cr_assert_eq(memcmp(&u0, &again, sizeof(u0)), 0);
	again = uuid_elsewhere(1);
	cr_assert_eq(memcmp(&u1, &again, sizeof(u1)), 0);
	CU_ASSERT(cuDeviceGetUuid(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(device, total_mem_is_vgpu_sim_memory)
{
	size_t bytes = 0;

	setenv("VGPU_SIM_MEMORY", "96MiB", 1);
	simtest_init();
	CU_OK(cuDeviceTotalMem(&bytes, 0));
	cr_assert_eq(bytes, (size_t)96 << 20);
	CU_ASSERT(cuDeviceTotalMem(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(device, total_mem_odd_size)
{
	size_t bytes = 0;

	setenv("VGPU_SIM_MEMORY", "12345678", 1);
	simtest_init();
	CU_OK(cuDeviceTotalMem(&bytes, 0));
	cr_assert_eq(bytes, 12345678);
}

static int attr(CUdevice_attribute a)
{
	int v = -12345;

	CU_OK(cuDeviceGetAttribute(&v, a, 0));
	return v;
}

Test(device, sm_count_from_env)
{
	setenv("VGPU_SIM_SM_COUNT", "7", 1);
	simtest_init();
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 7);
}

Test(device, attributes)
{
	int major = 0, minor = -1, v;

	simtest_init();
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
	CU_OK(compute_capability(&major, &minor, 0));
	cr_assert_eq(major, 9);
	cr_assert_eq(minor, 0);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), 1024);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z), 64);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y), 65535);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH), 1);
	cr_assert_geq(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 49152);
	cr_assert_gt(attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE), 0);
	/* Features it does not have read as 0, not as an error. */
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED), 0);
	CU_ASSERT(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(compute_capability(NULL, &minor, 0),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(device, pci_bus_id_round_trip)
{
	char id0[64], id1[64];
	CUdevice dev = -1;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuDeviceGetPCIBusId(id0, sizeof(id0), 0));
	CU_OK(cuDeviceGetPCIBusId(id1, sizeof(id1), 1));
	cr_assert_str_neq(id0, id1);
	CU_OK(cuDeviceGetByPCIBusId(&dev, id1));
	cr_assert_eq(dev, 1);
	CU_OK(cuDeviceGetByPCIBusId(&dev, id0));
	cr_assert_eq(dev, 0);
	CU_ASSERT(cuDeviceGetByPCIBusId(&dev, "0000:ff:1f.7"),
		  CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuDeviceGetByPCIBusId(NULL, id0), CUDA_ERROR_INVALID_VALUE);
	/* The bus number attribute agrees with the id. */
	cr_assert_eq(attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
		     (int)strtol(strchr(id0, ':') + 1, NULL, 16));
}

Test(device, no_peer_access)
{
	int can = -1;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuDeviceCanAccessPeer(&can, 0, 1));
	cr_assert_eq(can, 0);
}

/* Read by numba and cuda-core to pick FP64 paths: an H100/H200-class 2. */
Test(device, single_to_double_ratio_is_set)
{
	int v = 0;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v,
		CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 0));
	cr_assert_eq(v, 2);
}
