/* test_views.c - what a process is told about memory: cuMemGetInfo_v2 and
 * cuDeviceTotalMem_v2 report the slice, free never underflows, per-device
 * limits, and CUDA_VISIBLE_DEVICES mapping each ordinal to the ledger of
 * its physical GPU.
 */
#include "shimtest.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TENANT "t-views"

static void setup(void)
{
	simtest_clean_env();
	shimtest_env(TENANT, "64MiB");
}

TestSuite(views, .init = setup, .fini = shimtest_cleanup);

static void expect_info(size_t want_free, size_t want_total)
{
	size_t f = 0, t = 0;

	CU_OK(cuMemGetInfo(&f, &t));
	cr_assert_eq(t, want_total, "total %zu, want %zu", t, want_total);
	cr_assert_eq(f, want_free, "free %zu, want %zu", f, want_free);
}

Test(views, mem_get_info_and_total_mem_report_the_slice)
{
	struct ledger_view v;
	CUdeviceptr a, b;
	size_t total = 0;

	simtest_init_shared();
	CU_OK(cuDeviceTotalMem(&total, 0));
	cr_assert_eq(total, 64 * MIB);
	expect_info(64 * MIB, 64 * MIB);
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	expect_info(48 * MIB, 64 * MIB);
	CU_OK(cuMemAlloc(&b, 48 * MIB));
	expect_info(0, 64 * MIB);
	CU_OK(cuMemFree(a));
	CU_OK(cuMemFree(b));
	expect_info(64 * MIB, 64 * MIB);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

Test(views, no_limit_reports_the_device)
{
	size_t total = 0;

	unsetenv("VGPU_MEMORY_LIMIT");
	simtest_init_shared();
	CU_OK(cuDeviceTotalMem(&total, 0));
	cr_assert_eq(total, GIB);
	expect_info(GIB, GIB);
}

/* Writes the tenant's mem_limit in the ledger file, as an administrator's
 * tool may (a joiner never changes the limit of a tenant in use). */
static void lower_limit(struct ledger_view *v, uint64_t limit)
{
	char path[4096];
	off_t off = (const char *)ledger_tenant(v, TENANT) -
		    (const char *)v->map +
		    (off_t)offsetof(struct vgpu_ledger_tenant, mem_limit);
	char uuid[VGPU_LEDGER_UUID_MAX];
	int fd;

	shimtest_uuid(0, uuid, sizeof(uuid));
	snprintf(path, sizeof(path), "%s/%s.v%d%s", shimtest_ledger_dir(),
		 uuid, VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(pwrite(fd, &limit, sizeof(limit), off),
		     (ssize_t)sizeof(limit));
	close(fd);
}

/* The limit lowered below what the tenant holds: free is 0, not a huge
 * unsigned number, and nothing more fits. */
Test(views, free_never_underflows_when_the_limit_is_lowered)
{
	struct ledger_view v;
	CUdeviceptr a, b;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&a, 48 * MIB));
	ledger_view_must(&v, NULL);
	lower_limit(&v, 16 * MIB);
	cr_assert_eq(ledger_tenant(&v, TENANT)->mem_limit, 16 * MIB);
	expect_info(0, 16 * MIB);
	CU_ASSERT(cuMemAlloc(&b, 4 * KIB), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree(a));
	expect_info(16 * MIB, 16 * MIB);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

/* ---- several devices ------------------------------------------------------ */

static CUcontext use_device(CUdevice d)
{
	CUcontext ctx;

	CU_OK(cuDevicePrimaryCtxRetain(&ctx, d));
	CU_OK(cuCtxSetCurrent(ctx));
	return ctx;
}

static uint64_t device_bytes(const char *uuid)
{
	struct ledger_view v;
	uint64_t b;

	ledger_view_must(&v, uuid);
	b = ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_BUFFER);
	ledger_view_close(&v);
	return b;
}

Test(views, per_device_limits)
{
	char u0[64], u1[64];
	CUdeviceptr a0, a1, x;
	size_t t0 = 0, t1 = 0;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	setenv("VGPU_MEMORY_LIMIT_1", "32MiB", 1);
	simtest_init_shared();
	CU_OK(cuDeviceTotalMem(&t0, 0));
	CU_OK(cuDeviceTotalMem(&t1, 1));
	cr_assert_eq(t0, 64 * MIB);
	cr_assert_eq(t1, 32 * MIB);
	shimtest_uuid(0, u0, sizeof(u0));
	shimtest_uuid(1, u1, sizeof(u1));
	cr_assert_str_neq(u0, u1);

	use_device(1);
	expect_info(32 * MIB, 32 * MIB);
	CU_OK(cuMemAlloc(&a1, 32 * MIB));
	CU_ASSERT(cuMemAlloc(&x, 4 * KIB), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(device_bytes(u1), 32 * MIB);
	use_device(0);
	CU_OK(cuMemAlloc(&a0, 64 * MIB));
	CU_ASSERT(cuMemAlloc(&x, 4 * KIB), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(device_bytes(u0), 64 * MIB);
	cr_assert_eq(device_bytes(u1), 32 * MIB);
	CU_OK(cuMemFree(a0));
	CU_OK(cuMemFree(a1));
	cr_assert_eq(device_bytes(u0), 0);
	cr_assert_eq(device_bytes(u1), 0);
}

/* ---- CUDA_VISIBLE_DEVICES --------------------------------------------------- */

/* Prints the UUID of each of the 3 physical devices, one a line. */
static int list_uuids(void *arg)
{
	char u[64];
	int n = 0;

	(void)arg;
	unsetenv("CUDA_VISIBLE_DEVICES");
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
		return 2;
	for (int i = 0; i < n; i++) {
		shimtest_uuid(i, u, sizeof(u));
		printf("%s\n", u);
	}
	return 0;
}

static void physical_uuids(char uuids[3][64])
{
	char out[1024];

	setenv("VGPU_SIM_DEVICES", "3", 1);
	cr_assert_eq(shimtest_run_child(list_uuids, NULL, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_eq(sscanf(out, "%63s %63s %63s", uuids[0], uuids[1],
			    uuids[2]), 3, "%s", out);
}

static void need_visible_devices(int want)
{
	int n = 0;

	CU_OK(cuInit(0));
	CU_OK(cuDeviceGetCount(&n));
	if (n == 3 && want != 3)
		cr_skip_test("the simulator does not apply CUDA_VISIBLE_DEVICES "
			     "yet");
	cr_assert_eq(n, want);
}

static bool ledger_exists(const char *uuid)
{
	struct ledger_view v;
	bool ok = ledger_view_open(&v, shimtest_ledger_dir(), uuid);

	ledger_view_close(&v);
	return ok;
}

Test(views, visible_devices_by_index)
{
	char phys[3][64], u[64];
	CUdeviceptr a;
	size_t total = 0;

	physical_uuids(phys);
	setenv("CUDA_VISIBLE_DEVICES", "2", 1);
	setenv("VGPU_MEMORY_LIMIT_0", "32MiB", 1);
	need_visible_devices(1);
	shimtest_uuid(0, u, sizeof(u));
	cr_assert_str_eq(u, phys[2]);
	CU_OK(cuDeviceTotalMem(&total, 0));
	cr_assert_eq(total, 32 * MIB);
	use_device(0);
	CU_OK(cuMemAlloc(&a, 8 * MIB));
	cr_assert_eq(device_bytes(phys[2]), 8 * MIB);
	cr_assert(!ledger_exists(phys[0]), "physical device 0 was charged");
	cr_assert(!ledger_exists(phys[1]), "physical device 1 was charged");
	CU_OK(cuMemFree(a));
	cr_assert_eq(device_bytes(phys[2]), 0);
}

Test(views, visible_devices_by_uuid)
{
	char phys[3][64], list[160], u[64];
	struct ledger_view v;
	CUdeviceptr a, b;

	physical_uuids(phys);
	snprintf(list, sizeof(list), "%s,%s", phys[1], phys[0]);
	setenv("CUDA_VISIBLE_DEVICES", list, 1);
	setenv("VGPU_MEMORY_LIMIT_0", "16MiB", 1);
	setenv("VGPU_MEMORY_LIMIT_1", "32MiB", 1);
	need_visible_devices(2);
	shimtest_uuid(0, u, sizeof(u));
	cr_assert_str_eq(u, phys[1]);
	shimtest_uuid(1, u, sizeof(u));
	cr_assert_str_eq(u, phys[0]);
	use_device(0);
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	use_device(1);
	CU_OK(cuMemAlloc(&b, 32 * MIB));
	cr_assert_eq(device_bytes(phys[1]), 16 * MIB);
	cr_assert_eq(device_bytes(phys[0]), 32 * MIB);
	ledger_view_must(&v, phys[1]);
	cr_assert_eq(ledger_tenant(&v, TENANT)->mem_limit, 16 * MIB);
	ledger_view_close(&v);
	ledger_view_must(&v, phys[0]);
	cr_assert_eq(ledger_tenant(&v, TENANT)->mem_limit, 32 * MIB);
	ledger_view_close(&v);
	cr_assert(!ledger_exists(phys[2]), "physical device 2 was charged");
	CU_OK(cuMemFree(b));
	use_device(0);
	CU_OK(cuMemFree(a));
	cr_assert_eq(device_bytes(phys[0]), 0);
	cr_assert_eq(device_bytes(phys[1]), 0);
}
