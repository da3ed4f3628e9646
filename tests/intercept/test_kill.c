/* test_kill.c - sixteen processes of one tenant allocate and free in loops
 * through the shim while the test SIGKILLs them at random moments (inside
 * the ledger's locks too, now and then) and starts replacements:
 *   - no allocation or free of any process ever takes a second or more;
 *   - a new process gets the dead ones' quota back at once: what the
 *     survivors do not hold is allocated in one call, in under 50 ms, and
 *     not a byte more;
 *   - at the end the ledger's totals equal what the live processes hold.
 */
#include "shimtest.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TENANT "t-kill"
#define WORKERS 16
#define LIVE 4
#define LIMIT (256 * MIB)
#define KILL_NS (3ull * 1000000000ull)
#define SLOW_NS 1000000000ull		/* the bound on any one call */
#define RECLAIM_NS 50000000ull		/* a new process's quota back */

struct worker {
	pid_t pid;
	int stopped;		/* 1: stopped, held is exact */
	int error;		/* the step that failed */
	uint64_t held;
	uint64_t max_ns;	/* the slowest call */
	uint64_t calls;
};

struct shared {
	int stop;
	struct worker w[WORKERS];
	uint64_t probe_ns;
	int probe_rc[2];
};

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "8GiB", 1);
	shimtest_env(TENANT, "256MiB");
}

TestSuite(kill, .init = setup, .fini = shimtest_cleanup);

static int start_cuda(void)
{
	CUcontext ctx;

	return cuInit(0) == CUDA_SUCCESS &&
	       cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
	       cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

static void note_time(struct worker *w, uint64_t t0)
{
	uint64_t dt = simtest_now_ns() - t0;

	if (dt > __atomic_load_n(&w->max_ns, __ATOMIC_RELAXED))
		__atomic_store_n(&w->max_ns, dt, __ATOMIC_RELAXED);
	__atomic_add_fetch(&w->calls, 1, __ATOMIC_RELAXED);
}

static int work(struct shared *sh, int me)
{
	struct worker *w = &sh->w[me];
	CUdeviceptr p[LIVE] = { 0 };
	size_t size[LIVE];
	unsigned seed = (unsigned)getpid();
	uint64_t held = 0;

	if (!start_cuda())
		return w->error = 1;
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		int k = rand_r(&seed) % LIVE;
		uint64_t t0 = simtest_now_ns();
		CUresult rc;

		if (p[k]) {
			rc = cuMemFree(p[k]);
			note_time(w, t0);
			if (rc != CUDA_SUCCESS)
				return w->error = 2;
			held -= size[k];
			p[k] = 0;
		} else {
			size[k] = (size_t)(1 + rand_r(&seed) % 32) * MIB;
			rc = cuMemAlloc(&p[k], size[k]);
			note_time(w, t0);
			if (rc == CUDA_SUCCESS)
				held += size[k];
			else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
				p[k] = 0;
			else
				return w->error = 3;
		}
	}
	w->held = held;
	__atomic_store_n(&w->stopped, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();
}

static void spawn(struct shared *sh, int i)
{
	pid_t pid;

	sh->w[i].stopped = 0;
	sh->w[i].held = 0;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(work(sh, i));
	sh->w[i].pid = pid;
}

/* A process that comes after: allocates everything the survivors leave. */
static int probe(struct shared *sh, uint64_t rest)
{
	CUdeviceptr a = 0, b;
	uint64_t t0;

	if (!start_cuda())
		return 1;
	t0 = simtest_now_ns();
	sh->probe_rc[0] = rest ? (int)cuMemAlloc(&a, rest) : 0;
	sh->probe_ns = simtest_now_ns() - t0;
	sh->probe_rc[1] = (int)cuMemAlloc(&b, 1);
	if (a && cuMemFree(a) != CUDA_SUCCESS)
		return 2;
	return 0;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000 };

	nanosleep(&ts, NULL);
}

Test(kill, sigkilled_processes_block_nobody_and_leak_nothing,
     .timeout = 60)
{
	struct shared *sh;
	struct ledger_view v;
	unsigned seed = 42;
	uint64_t end, live = 0, slowest = 0;
	int kills = 0, st;
	pid_t pid;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	for (int i = 0; i < WORKERS; i++)
		spawn(sh, i);
	end = simtest_now_ns() + KILL_NS;
	while (simtest_now_ns() < end) {
		int i = rand_r(&seed) % WORKERS;

		sleep_us((unsigned)(rand_r(&seed) % 8000));
		cr_assert_eq(sh->w[i].error, 0, "worker %d failed at step %d",
			     i, sh->w[i].error);
		kill(sh->w[i].pid, SIGKILL);
		cr_assert_eq(waitpid(sh->w[i].pid, &st, 0), sh->w[i].pid);
		cr_assert(WIFSIGNALED(st), "worker %d exited (status 0x%x, "
			  "step %d)", i, st, sh->w[i].error);
		kills++;
		spawn(sh, i);
	}

	/* Stop the survivors; each then knows exactly what it holds. */
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < WORKERS; i++) {
		uint64_t give_up = simtest_now_ns() + 10 * SLOW_NS;
		while (!__atomic_load_n(&sh->w[i].stopped, __ATOMIC_ACQUIRE)) {
			cr_assert_eq(sh->w[i].error, 0, "worker %d failed at "
				     "step %d", i, sh->w[i].error);
			cr_assert_lt(simtest_now_ns(), give_up, "worker %d "
				     "never stopped", i);
			sleep_us(1000);
		}
		live += sh->w[i].held;
		if (sh->w[i].max_ns > slowest)
			slowest = sh->w[i].max_ns;
	}
	cr_log_info("%d kills; the slowest call of a survivor took %llu us; "
		    "survivors hold %llu MiB", kills,
		    (unsigned long long)slowest / 1000,
		    (unsigned long long)(live / MIB));
	cr_assert_lt(slowest, SLOW_NS, "a call took %llu ms",
		     (unsigned long long)slowest / 1000000);
	cr_assert_leq(live, LIMIT);

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(probe(sh, LIMIT - live));
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the probe failed "
		  "(status 0x%x)", st);
	cr_assert_eq(sh->probe_rc[0], CUDA_SUCCESS, "the dead processes' "
		     "%llu bytes were not given back",
		     (unsigned long long)(LIMIT - live));
	cr_assert_lt(sh->probe_ns, RECLAIM_NS, "getting them back took "
		     "%llu us", (unsigned long long)sh->probe_ns / 1000);
	cr_assert_eq(sh->probe_rc[1], CUDA_ERROR_OUT_OF_MEMORY);

	ledger_view_must(&v, NULL);
	cr_assert_eq(ledger_tenant_bytes(&v, TENANT, VGPU_USAGE_COUNT), live,
		     "the ledger says %llu, the survivors hold %llu",
		     (unsigned long long)ledger_tenant_bytes(&v, TENANT,
							     VGPU_USAGE_COUNT),
		     (unsigned long long)live);
	cr_assert_eq(ledger_slots_bytes(&v, TENANT, VGPU_USAGE_COUNT), live);
	for (int i = 0; i < WORKERS; i++) {
		const struct vgpu_ledger_slot *s =
			ledger_slot_of(&v, TENANT, sh->w[i].pid);
		cr_assert_not_null(s, "no slot of survivor %d", i);
		cr_assert_eq(s->usage[VGPU_USAGE_BUFFER], sh->w[i].held);
	}
	ledger_view_close(&v);
	for (int i = 0; i < WORKERS; i++) {
		kill(sh->w[i].pid, SIGKILL);
		waitpid(sh->w[i].pid, &st, 0);
	}
	munmap(sh, sizeof(*sh));
}
