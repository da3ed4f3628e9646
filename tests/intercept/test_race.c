/* test_race.c - two processes of one tenant race to allocate 600 MiB each
 * under a 1 GiB slice, 1,000 rounds: never both succeed (a check-then-
 * allocate in two steps lets both through), and since the reservation is
 * exact, exactly one does.
 *
 * The two processes are forked once and reused: each round is barrier ->
 * allocate -> barrier -> free, the barriers in shared memory.
 */
#include "shimtest.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TENANT "t-race"
#define ROUNDS 1000
#define RACE_BYTES (600 * MIB)

struct race {
	pthread_barrier_t bar;
	int result[ROUNDS][2];	/* CUresult of each process's allocation */
};

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "4GiB", 1);
	shimtest_env(TENANT, "1GiB");
}

TestSuite(race, .init = setup, .fini = shimtest_cleanup);

static int racer(struct race *r, int me)
{
	CUcontext ctx;
	CUdeviceptr p;

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 10;
	for (int i = 0; i < ROUNDS; i++) {
		pthread_barrier_wait(&r->bar);
		CUresult rc = cuMemAlloc(&p, RACE_BYTES);
		r->result[i][me] = (int)rc;
		pthread_barrier_wait(&r->bar);
		if (rc == CUDA_SUCCESS && cuMemFree(p) != CUDA_SUCCESS)
			return 11;
	}
	return 0;
}

Test(race, two_processes_never_both_get_600mib_of_1gib)
{
	pthread_barrierattr_t ba;
	struct race *r;
	struct ledger_view v;
	pid_t pid[2];
	int both = 0, none = 0, other = 0, wins[2] = { 0, 0 };

	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r, MAP_FAILED);
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	pthread_barrier_init(&r->bar, &ba, 2);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0)
			_exit(racer(r, i));
	}
	for (int i = 0; i < 2; i++) {
		int st;
		cr_assert_eq(waitpid(pid[i], &st, 0), pid[i]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "racer %d failed (status 0x%x)", i, st);
	}
	for (int i = 0; i < ROUNDS; i++) {
		int a = r->result[i][0], b = r->result[i][1];
		wins[0] += a == CUDA_SUCCESS;
		wins[1] += b == CUDA_SUCCESS;
		if (a == CUDA_SUCCESS && b == CUDA_SUCCESS)
			both++;
		else if (a != CUDA_SUCCESS && b != CUDA_SUCCESS)
			none++;
		if ((a != CUDA_SUCCESS && a != CUDA_ERROR_OUT_OF_MEMORY) ||
		    (b != CUDA_SUCCESS && b != CUDA_ERROR_OUT_OF_MEMORY))
			other++;
	}
	cr_log_info("%d rounds: process 0 won %d, process 1 won %d", ROUNDS,
		    wins[0], wins[1]);
	cr_assert_eq(both, 0, "both got 600 MiB of 1 GiB in %d of %d rounds",
		     both, ROUNDS);
	cr_assert_eq(none, 0, "neither did in %d rounds", none);
	cr_assert_eq(other, 0, "%d rounds with an error other than OOM", other);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
	munmap(r, sizeof(*r));
}
