/* test_contexts.c - each context's own overhead is charged: once for the
 * primary context however often it is retained, and per cuCtxCreate.
 * VGPU_CONTEXT_OVERHEAD=8MiB under a 20 MiB slice.
 */
#include "shimtest.h"

#include <stdlib.h>
#include <unistd.h>

#define TENANT "t-ctx"
#define OVERHEAD (8 * MIB)

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_CONTEXT_OVERHEAD", "8MiB", 1);
	shimtest_env(TENANT, "20MiB");
}

TestSuite(contexts, .init = setup, .fini = shimtest_cleanup);

static uint64_t ctx_bytes(const struct ledger_view *v)
{
	const struct vgpu_ledger_slot *s = ledger_slot_of(v, TENANT, getpid());

	cr_assert_not_null(s);
	cr_assert_eq(s->usage[VGPU_USAGE_CONTEXT],
		     ledger_tenant_bytes(v, TENANT, VGPU_USAGE_CONTEXT));
	return s->usage[VGPU_USAGE_CONTEXT];
}

Test(contexts, primary_charged_once)
{
	struct ledger_view v;
	CUcontext p1, p2;

	CU_OK(cuInit(0));
	CU_OK(cuDevicePrimaryCtxRetain(&p1, 0));
	ledger_view_must(&v, NULL);
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	CU_OK(cuDevicePrimaryCtxRetain(&p2, 0));
	cr_assert_eq(p1, p2);
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	CU_OK(cuDevicePrimaryCtxRelease(0));
	cr_assert_eq(ctx_bytes(&v), OVERHEAD, "one retain is left");
	CU_OK(cuDevicePrimaryCtxRelease(0));
	cr_assert_eq(ctx_bytes(&v), 0);
	/* Retained again: charged again. */
	CU_OK(cuDevicePrimaryCtxRetain(&p1, 0));
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	CU_OK(cuDevicePrimaryCtxRelease(0));
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

typedef CUresult (*ctx_create_v2_fn)(CUcontext *, unsigned int, CUdevice);

Test(contexts, created_contexts_charged_each)
{
	struct ledger_view v;
	CUcontext primary, c1, c2;
	CUdriverProcAddressQueryResult st;
	ctx_create_v2_fn create_v2 = NULL;
	CUdeviceptr a, x;

	primary = simtest_init_shared();
	ledger_view_must(&v, NULL);
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	CU_OK(cuCtxCreate(&c1, NULL, 0, 0));
	cr_assert_eq(ctx_bytes(&v), 2 * OVERHEAD);
	/* The old ABI, as an older program would ask for it. */
	CU_OK(cuGetProcAddress("cuCtxCreate", (void **)&create_v2, 3020, 0,
			       &st));
	CU_ASSERT(create_v2(&c2, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CU_ASSERT(cuCtxCreate(&c2, NULL, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(ctx_bytes(&v), 2 * OVERHEAD);
	CU_OK(cuCtxSetCurrent(primary));
	CU_OK(cuMemAlloc(&a, 4 * MIB));
	CU_ASSERT(cuMemAlloc(&x, 4 * KIB), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuCtxDestroy(c1));
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	CU_OK(create_v2(&c2, 0, 0));
	cr_assert_eq(ctx_bytes(&v), 2 * OVERHEAD);
	CU_OK(cuCtxDestroy(c2));
	CU_OK(cuCtxSetCurrent(primary));
	CU_OK(cuMemFree(a));
	CU_OK(cuDevicePrimaryCtxRelease(0));
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

/* Destroying a context frees the memory allocated in it (the driver's
 * rule): the ledger must give it back too, or the slice shrinks for the
 * rest of the process. */
Test(contexts, destroy_gives_back_what_was_allocated_in_it)
{
	struct ledger_view v;
	CUcontext c;
	CUdeviceptr a;

	setenv("VGPU_MEMORY_LIMIT", "64MiB", 1);
	simtest_init_shared();
	ledger_view_must(&v, NULL);
	CU_OK(cuCtxCreate(&c, NULL, 0, 0));
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	CU_OK(cuCtxDestroy(c));
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_BUFFER), 0,
		     "%llu bytes of the destroyed context are still charged",
		     (unsigned long long)ledger_tenant_bytes(&v, TENANT,
							     VGPU_USAGE_BUFFER));
	cr_assert_eq(ctx_bytes(&v), OVERHEAD);
	ledger_view_close(&v);
}
