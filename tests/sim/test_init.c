/* test_init.c - cuInit: its flags, calls made before it, and a bad
 * VGPU_SIM_* value, which fails it with CUDA_ERROR_INVALID_VALUE and a
 * message on stderr naming the variable.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

TestSuite(init, .init = simtest_clean_env, .fini = simtest_remove_state);

Test(init, calls_before_cuinit_are_not_initialized)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	size_t bytes;
	int n;
	char name[64];

	CU_ASSERT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuDeviceGetName(name, sizeof(name), 0),
		  CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuDeviceTotalMem(&bytes, 0), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
		  CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuMemAlloc(&p, 1024), CUDA_ERROR_NOT_INITIALIZED);
	CU_ASSERT(cuMemFree(0), CUDA_ERROR_NOT_INITIALIZED);
}

/* What needs no device works before cuInit, as in the driver. */
Test(init, version_and_errors_before_cuinit)
{
	const char *s;
	int v = 0;

	CU_OK(cuDriverGetVersion(&v));
	cr_assert_eq(v, 13000);
	CU_ASSERT(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s));
	cr_assert_str_eq(s, "CUDA_ERROR_NOT_INITIALIZED");
}

Test(init, flags_must_be_zero)
{
	int n;

	simtest_env();
	CU_ASSERT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CU_OK(cuInit(0));
	CU_OK(cuDeviceGetCount(&n));
	cr_assert_eq(n, 1);
}

Test(init, twice_is_fine)
{
	simtest_env();
	CU_OK(cuInit(0));
	CU_OK(cuInit(0));
}

/* cuInit with var=value fails with CUDA_ERROR_INVALID_VALUE, says why on
 * stderr, and fails again the same way: nothing else initialises. */
static void bad_value(const char *var, const char *value)
{
	char msg[2048];
	int n;

	simtest_env();
	cr_assert_eq(setenv(var, value, 1), 0);
	simtest_stderr_begin();
	CUresult rc = cuInit(0);
	simtest_stderr_end(msg, sizeof(msg));
	CU_ASSERT(rc, CUDA_ERROR_INVALID_VALUE);
	cr_assert_not_null(strstr(msg, var), "stderr \"%s\" does not name %s",
			   msg, var);
	cr_assert_not_null(strstr(msg, "vgpu-sim"), "stderr: \"%s\"", msg);
	CU_ASSERT(cuInit(0), CUDA_ERROR_INVALID_VALUE);
	cr_assert_neq(cuDeviceGetCount(&n), CUDA_SUCCESS);
}

Test(init, bad_devices)
{
	bad_value("VGPU_SIM_DEVICES", "0");
}

Test(init, bad_memory_garbage)
{
	bad_value("VGPU_SIM_MEMORY", "lots");
}

Test(init, bad_memory_empty)
{
	bad_value("VGPU_SIM_MEMORY", "");
}

Test(init, bad_memory_negative)
{
	bad_value("VGPU_SIM_MEMORY", "-64MiB");
}

Test(init, bad_memory_overflow)
{
	bad_value("VGPU_SIM_MEMORY", "99999999999999999999999");
}

Test(init, bad_memory_unit)
{
	bad_value("VGPU_SIM_MEMORY", "64Mbit");
}

Test(init, bad_sm_count)
{
	bad_value("VGPU_SIM_SM_COUNT", "1025");
}

Test(init, bad_name)
{
	bad_value("VGPU_SIM_NAME", "");
}

Test(init, bad_state_dir)
{
	bad_value("VGPU_SIM_STATE_DIR", "relative/dir");
}

Test(init, bad_kernel_ns)
{
	bad_value("VGPU_SIM_KERNEL_NS", "2ms");
}

Test(init, bad_fail)
{
	bad_value("VGPU_SIM_FAIL", "alloc:0");
}

/* A state directory that cannot be made is an operating-system error. */
Test(init, unusable_state_dir)
{
	char msg[2048];

	simtest_env();
	setenv("VGPU_SIM_STATE_DIR", "/proc/vgpu-simtest-no-such-dir", 1);
	simtest_stderr_begin();
	CUresult rc = cuInit(0);
	simtest_stderr_end(msg, sizeof(msg));
	CU_ASSERT(rc, CUDA_ERROR_OPERATING_SYSTEM);
	cr_assert_not_null(strstr(msg, "/proc/vgpu-simtest-no-such-dir"),
			   "stderr: \"%s\"", msg);
}
