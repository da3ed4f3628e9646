/* test_process.c - processes and threads: a forked child gets its own slot
 * and its own accounting, reclaimed after it dies; an exec'd program
 * inherits the slice; many threads allocating at once stay exact.
 */
#include "shimtest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TENANT "t-proc"

static void setup(void)
{
	simtest_clean_env();
	shimtest_env(TENANT, "64MiB");
}

TestSuite(process, .init = setup, .fini = shimtest_cleanup);

/* The forked child: its own context, 8 MiB, a refusal past the tenant's
 * slice, then it tells the parent and waits for the word to exit. */
static int forked_child(int to_parent, int from_parent)
{
	CUcontext ctx;
	CUdeviceptr a, b;
	char c;

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 10;
	if (cuMemAlloc(&a, 8 * MIB) != CUDA_SUCCESS)
		return 11;
	/* The parent holds 16 MiB of the 64. */
	if (cuMemAlloc(&b, 48 * MIB) != CUDA_ERROR_OUT_OF_MEMORY)
		return 12;
	if (cuMemAlloc(&b, 40 * MIB) != CUDA_SUCCESS)
		return 13;
	if (cuMemFree(b) != CUDA_SUCCESS)
		return 14;
	if (write(to_parent, "r", 1) != 1 || read(from_parent, &c, 1) != 1)
		return 15;
	return 0;	/* exits holding its 8 MiB */
}

Test(process, forked_child_has_its_own_slot_reclaimed_after_exit)
{
	struct ledger_view v;
	const struct vgpu_ledger_slot *mine, *its;
	int up[2], down[2], status;
	CUdeviceptr a, b;
	char c;
	pid_t pid;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(forked_child(up[1], down[0]));
	cr_assert_eq(read(up[0], &c, 1), 1, "the child failed");
	ledger_view_must(&v, NULL);
	cr_assert_eq(ledger_active_slots(&v, TENANT), 2);
	mine = ledger_slot_of(&v, TENANT, getpid());
	its = ledger_slot_of(&v, TENANT, pid);
	cr_assert(mine && its && mine != its);
	cr_assert_eq(mine->usage[VGPU_USAGE_BUFFER], 16 * MIB);
	cr_assert_eq(its->usage[VGPU_USAGE_BUFFER], 8 * MIB);
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_BUFFER),
		     24 * MIB);
	cr_assert_eq(write(down[1], "x", 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child failed at step %d", WEXITSTATUS(status));
	/* Its 8 MiB come back when they are needed: 48 fit beside our 16. */
	CU_OK(cuMemAlloc(&b, 48 * MIB));
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_BUFFER),
		     64 * MIB);
	cr_assert_null(ledger_slot_of(&v, TENANT, pid), "the dead child's "
		       "slot is still active");
	cr_assert_eq(ledger_active_slots(&v, TENANT), 1);
	CU_OK(cuMemFree(a));
	CU_OK(cuMemFree(b));
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

/* ---- exec --------------------------------------------------------------------- */

Test(process, exec_inherits_the_slice)
{
	struct ledger_view v;
	char line[256];
	CUdeviceptr a;
	FILE *f;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	/* The program sees the slice, and the parent's 16 MiB in it. */
	f = popen(SHIMTEST_HELPER " probe 33554432 16777217", "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert_eq(pclose(f), 0);
	cr_assert_str_eq(line, "total=67108864 devtotal=67108864 "
			 "free=50331648 a=0 b=2\n");
	CU_OK(cuMemFree(a));
	/* It exited holding 32 MiB: given back when the slice is needed. */
	CU_OK(cuMemAlloc(&a, 64 * MIB));
	CU_OK(cuMemFree(a));
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}

/* ---- threads ------------------------------------------------------------------ */

#define THREADS 8
#define ROUNDS 2000
#define LIVE 8

struct worker {
	pthread_t tid;
	unsigned seed;
	CUcontext ctx;
	CUdeviceptr p[LIVE];
	size_t size[LIVE];
	uint64_t held;
	int errors;
};

static void *thread_loop(void *arg)
{
	struct worker *w = arg;

	if (cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS) {
		w->errors++;
		return NULL;
	}
	for (int i = 0; i < ROUNDS; i++) {
		int k = rand_r(&w->seed) % LIVE;

		if (w->p[k]) {
			if (cuMemFree(w->p[k]) != CUDA_SUCCESS)
				w->errors++;
			w->held -= w->size[k];
			w->p[k] = 0;
		} else {
			size_t n = 1 + (size_t)(rand_r(&w->seed) % (256 * 1024));
			if (cuMemAlloc(&w->p[k], n) != CUDA_SUCCESS) {
				w->errors++;
				w->p[k] = 0;
				continue;
			}
			/* Charged whole pages, as the device holds them. */
			w->size[k] = (n + 4095) / 4096 * 4096;
			w->held += w->size[k];
		}
	}
	return NULL;
}

Test(process, threads_stay_exact)
{
	static struct worker w[THREADS];
	struct ledger_view v;
	CUcontext ctx = simtest_init_shared();
	uint64_t held = 0;

	ledger_view_must(&v, NULL);
	for (int t = 0; t < THREADS; t++) {
		w[t].seed = 1234u + (unsigned)t;
		w[t].ctx = ctx;
		cr_assert_eq(pthread_create(&w[t].tid, NULL, thread_loop, &w[t]),
			     0);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(w[t].tid, NULL);
		cr_assert_eq(w[t].errors, 0, "thread %d: %d failed calls", t,
			     w[t].errors);
		held += w[t].held;
	}
	cr_assert_gt(held, 0);
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_BUFFER), held,
		     "ledger %llu, threads hold %llu",
		     (unsigned long long)ledger_tenant_bytes(&v, TENANT,
							     VGPU_USAGE_BUFFER),
		     (unsigned long long)held);
	cr_assert_eq(ledger_slots_bytes(&v, TENANT, VGPU_USAGE_BUFFER), held);
	for (int t = 0; t < THREADS; t++)
		for (int k = 0; k < LIVE; k++)
			if (w[t].p[k])
				CU_OK(cuMemFree(w[t].p[k]));
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}
