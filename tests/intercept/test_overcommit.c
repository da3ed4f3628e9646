/* test_overcommit.c - allocations past the slice spill to host memory
 * (VGPU_OVERCOMMIT=host|managed) and come back (host), data intact.
 *
 * A 64 MiB slice, contexts free. In host mode the least recently used
 * allocation spills (kernel arguments mark use); in managed mode the new
 * one does. Data is written before the spill point and checked by the
 * host (cuMemcpyDtoH) and by vgpu_touch kernels, after spilling and after
 * promotion; frees return both budgets.
 */
#include "shimtest.h"
#include "vgpu_kernels.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define TENANT "oc"

static CUmodule mod;
static CUfunction touch;

static void start(const char *mode, const char *spill_limit)
{
	shimtest_env(TENANT, "64MiB");
	setenv("VGPU_OVERCOMMIT", mode, 1);
	if (spill_limit)
		setenv("VGPU_HOST_SPILL_LIMIT", spill_limit, 1);
	simtest_init_shared();
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&touch, mod, "vgpu_touch"),
		     CUDA_SUCCESS);
}

/* vgpu_touch over p: checks expect (0: no check), writes next; returns
 * the mismatches. */
static uint64_t touch_run(CUdeviceptr p, size_t bytes, uint32_t expect,
			  uint32_t next)
{
	static CUdeviceptr bad;
	uint64_t mismatches = 0;
	uint64_t n = bytes / 4;

	if (!bad)
		cr_assert_eq(cuMemAllocHost((void **)&bad, 8), CUDA_SUCCESS);
	*(volatile uint64_t *)bad = 0;
	CUdeviceptr mm = expect ? bad : 0;
	void *params[] = { &p, &n, &expect, &next, &mm };
	cr_assert_eq(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, params,
				    NULL), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
	mismatches = *(volatile uint64_t *)bad;
	return mismatches;
}

/* The host's view: every word is pattern(seed, i). */
static void host_check(CUdeviceptr p, size_t bytes, uint32_t seed)
{
	uint32_t *buf = malloc(bytes);
	size_t bad = 0;

	cr_assert_not_null(buf);
	cr_assert_eq(cuMemcpyDtoH(buf, p, bytes), CUDA_SUCCESS);
	for (size_t i = 0; i < bytes / 4; i++)
		bad += buf[i] != vgpu_touch_pattern(seed, i);
	free(buf);
	cr_assert_eq(bad, 0, "%zu words differ from seed %u", bad, seed);
}

static uint64_t usage(int kind)
{
	struct ledger_view v;
	uint64_t b;

	ledger_view_must(&v, NULL);
	b = ledger_tenant_bytes(&v, TENANT, kind);
	ledger_view_close(&v);
	return b;
}

Test(overcommit, host_spills_the_least_recently_used_and_promotes,
     .fini = shimtest_cleanup)
{
	CUdeviceptr a, b, c, d;
	size_t f, t;

	start("host", NULL);
	cr_assert_eq(cuMemAlloc(&a, 48 * MIB), CUDA_SUCCESS);
	cr_assert_eq(touch_run(a, 48 * MIB, 0, 5), 0);

	/* No room for b: a, the least recently used, goes to the host. */
	CUdeviceptr a_before = a;
	cr_assert_eq(cuMemAlloc(&b, 32 * MIB), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_BUFFER), 32 * MIB, "b on the device");
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 48 * MIB, "a spilled");
	cr_assert_eq(usage(VGPU_USAGE_COUNT), 32 * MIB, "device total");
	cr_assert_eq(cuMemGetInfo(&f, &t), CUDA_SUCCESS);
	cr_assert_eq(t, 64 * MIB);
	cr_assert_eq(f, 32 * MIB, "spilled bytes are not device memory");
	cr_assert_eq(a, a_before, "the address does not move");
	/* Written before the spill, read after it, by the host and a
	 * kernel. */
	host_check(a, 48 * MIB, 5);
	cr_assert_eq(touch_run(a, 48 * MIB, 5, 6), 0);

	/* Room frees: a comes back to the device at the same address. */
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 0, "a promoted");
	cr_assert_eq(usage(VGPU_USAGE_BUFFER), 48 * MIB);
	host_check(a, 48 * MIB, 6);
	cr_assert_eq(touch_run(a, 48 * MIB, 6, 7), 0, "intact on the device");

	/* Kernel arguments are the signal of use: c is allocated after a,
	 * but a is used after c, so d's room comes from c. */
	cr_assert_eq(cuMemAlloc(&c, 16 * MIB), CUDA_SUCCESS);
	cr_assert_eq(touch_run(c, 16 * MIB, 0, 3), 0);
	cr_assert_eq(touch_run(a, 48 * MIB, 7, 8), 0);
	cr_assert_eq(cuMemAlloc(&d, 16 * MIB), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 16 * MIB, "c spilled, not a");
	cr_assert_eq(usage(VGPU_USAGE_BUFFER), 64 * MIB);
	host_check(c, 16 * MIB, 3);
	host_check(a, 48 * MIB, 8);

	cr_assert_eq(cuMemFree(d), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 0, "c promoted");
	host_check(c, 16 * MIB, 3);
	cr_assert_eq(cuMemFree(c), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	struct ledger_view v;
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

Test(overcommit, host_spill_budget_is_enforced, .fini = shimtest_cleanup)
{
	CUdeviceptr a, b, c;

	start("host", "16MiB");
	cr_assert_eq(cuMemAlloc(&a, 60 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&b, 16 * MIB), CUDA_SUCCESS, "fits the budget");
	cr_assert_eq(cuMemAlloc(&c, 8 * MIB), CUDA_ERROR_OUT_OF_MEMORY,
		     "past the slice and the spill budget");
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 16 * MIB);
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 0, "the budget comes back");
	cr_assert_eq(cuMemAlloc(&c, 2 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(c), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	struct ledger_view v;
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

Test(overcommit, managed_spills_with_data_intact, .fini = shimtest_cleanup)
{
	CUdeviceptr a, b;

	start("managed", NULL);
	cr_assert_eq(cuMemAlloc(&a, 48 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&b, 32 * MIB), CUDA_SUCCESS, "spilled");
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 32 * MIB);
	cr_assert_eq(usage(VGPU_USAGE_MANAGED), 0, "not device memory");
	unsigned int is_managed = 0;
	cr_assert_eq(cuPointerGetAttribute(&is_managed,
					   CU_POINTER_ATTRIBUTE_IS_MANAGED, b),
		     CUDA_SUCCESS);
	cr_assert_eq(is_managed, 1);
	cr_assert_eq(touch_run(b, 32 * MIB, 0, 3), 0);
	host_check(b, 32 * MIB, 3);
	cr_assert_eq(touch_run(b, 32 * MIB, 3, 4), 0);
	/* Managed memory is paged by the driver: no promotion. */
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 32 * MIB);
	host_check(b, 32 * MIB, 4);
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	struct ledger_view v;
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

Test(overcommit, off_refuses, .fini = shimtest_cleanup)
{
	CUdeviceptr a, b;

	start("off", NULL);
	cr_assert_eq(cuMemAlloc(&a, 48 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&b, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 0);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
}

Test(overcommit, legacy_ipc_is_refused_on_spilled_memory,
     .fini = shimtest_cleanup)
{
	CUdeviceptr a, b;
	CUipcMemHandle h;

	start("host", NULL);
	cr_assert_eq(cuMemAlloc(&a, 48 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&b, 32 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuIpcGetMemHandle(&h, b), CUDA_ERROR_NOT_SUPPORTED);
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
}

/* A movable range that never left the device is VMM memory too: refused
 * with CUDA_ERROR_NOT_SUPPORTED, not passed to the driver (which said
 * CUDA_ERROR_INVALID_VALUE), under host overcommit and under
 * VGPU_CONTROL alike; without either, legacy IPC works. */
static CUresult ipc_of_a_resident_range(const char *mode, bool control)
{
	CUdeviceptr a;
	CUipcMemHandle h;
	CUresult r;

	if (control)
		setenv("VGPU_CONTROL", "1", 1);
	start(mode, NULL);
	cr_assert_eq(cuMemAlloc(&a, 4 * MIB), CUDA_SUCCESS);
	cr_assert_eq(usage(VGPU_USAGE_SPILLED), 0, "nothing spilled");
	r = cuIpcGetMemHandle(&h, a);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	return r;
}

Test(overcommit, legacy_ipc_is_refused_on_resident_movable_memory,
     .fini = shimtest_cleanup)
{
	cr_assert_eq(ipc_of_a_resident_range("host", false),
		     CUDA_ERROR_NOT_SUPPORTED);
}

Test(overcommit, legacy_ipc_is_refused_under_control,
     .fini = shimtest_cleanup)
{
	cr_assert_eq(ipc_of_a_resident_range("off", true),
		     CUDA_ERROR_NOT_SUPPORTED);
}

Test(overcommit, legacy_ipc_works_on_plain_memory, .fini = shimtest_cleanup)
{
	cr_assert_eq(ipc_of_a_resident_range("off", false), CUDA_SUCCESS);
}

/* A movable range is cuMemAlloc memory to the job: the VMM calls get the
 * driver's answer for that, CUDA_ERROR_INVALID_VALUE, anywhere in the
 * range (its rounding included). A handle retained from one kept its
 * memory on the device after the free gave the charge back (2400 MiB
 * under a 512 MiB slice, a hostile review); the data stays usable. */
static void vmm_calls_on_movable(const char *mode, bool control)
{
	CUmemGenericAllocationHandle h;
	size_t n = 4 * MIB + 123;
	CUdeviceptr a;

	if (control)
		setenv("VGPU_CONTROL", "1", 1);
	start(mode, NULL);
	cr_assert_eq(cuMemAlloc(&a, n), CUDA_SUCCESS);
	cr_assert_eq(touch_run(a, 4 * MIB, 0, 7), 0);
	for (size_t off = 0; off < 6 * MIB; off += MIB) {
		cr_expect_eq(cuMemRetainAllocationHandle(&h, (void *)(a + off)),
			     CUDA_ERROR_INVALID_VALUE, "retain at +%zu MiB",
			     off / MIB);
		cr_expect_eq(cuMemUnmap(a + off, 2 * MIB),
			     CUDA_ERROR_INVALID_VALUE, "unmap at +%zu MiB",
			     off / MIB);
	}
	cr_assert_eq(touch_run(a, 4 * MIB, 7, 8), 0, "the data is intact");
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0, "the charge given back");
}

Test(overcommit, vmm_calls_on_movable_memory_are_refused_host,
     .fini = shimtest_cleanup)
{
	vmm_calls_on_movable("host", false);
}

Test(overcommit, vmm_calls_on_movable_memory_are_refused_control,
     .fini = shimtest_cleanup)
{
	vmm_calls_on_movable("off", true);
}

/* Two tenants whose slices add up to more than the device (200 + 200 MiB
 * on 256 MiB): the second's allocation does not fit the device, spills,
 * and the device is never overcommitted. */
Test(overcommit, two_tenants_never_take_more_than_the_device,
     .fini = shimtest_cleanup)
{
	int ready[2], done[2];
	char c = 0;

	setenv("VGPU_SIM_MEMORY", "256MiB", 1);
	shimtest_env(TENANT, "200MiB");
	setenv("VGPU_OVERCOMMIT", "host", 1);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t pid = fork();
	if (pid == 0) {
		/* The other tenant, before this process touches CUDA. */
		CUdeviceptr p;
		CUcontext ctx;
		setenv("VGPU_TENANT", "other", 1);
		if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
		    cuCtxSetCurrent(ctx) || cuMemAlloc(&p, 150 * MIB))
			_exit(3);
		c = 1;
		if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
			_exit(4);
		_exit(0);
	}
	cr_assert_eq(read(ready[0], &c, 1), 1, "the other tenant allocated");
	CUcontext ctx;	/* on the same simulated device as the other */
	cr_assert_eq(cuInit(0), CUDA_SUCCESS);
	cr_assert_eq(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	CUdeviceptr b;
	cr_assert_eq(cuMemAlloc(&b, 150 * MIB), CUDA_SUCCESS,
		     "within the slice, past the device: spilled");
	struct ledger_view v;
	ledger_view_must(&v, NULL);
	uint64_t other = ledger_tenant_bytes(&v, "other", VGPU_USAGE_COUNT);
	uint64_t mine = ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_COUNT);
	uint64_t spilled = ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_SPILLED);
	ledger_view_close(&v);
	cr_assert_eq(other, 150 * MIB);
	cr_assert_eq(spilled, 150 * MIB, "spilled %llu, device %llu",
		     (unsigned long long)spilled, (unsigned long long)mine);
	cr_assert_leq(other + mine, 256 * MIB, "the device is not overcommitted");
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	cr_assert_eq(write(done[1], &c, 1), 1);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
}
