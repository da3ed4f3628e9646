/* test_errors.c - errors that say what happened:
 *   - a process of the tenant holds the tenant's ledger lock and is
 *     stopped (SIGSTOP): the tenant's allocations return CUDA_ERROR_TIMEOUT
 *     after the lock's bound, not CUDA_ERROR_OUT_OF_MEMORY, and stderr
 *     names the tenant and the holder's pid, once; after SIGCONT or
 *     SIGKILL allocations work and the usage is back to zero;
 *   - a tenant's limits are set by the process that starts it: a later
 *     one that states no limit, or another, runs under them with a warning
 *     naming both; once all have exited, the next one sets new ones.
 *
 * The holder takes the lock word from outside the shim, through the
 * ledger's documented layout (docs/ledger-abi.md): its own slot's word.
 */
#include "shimtest.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TENANT "t-errors"
#define SEC 1000000000ull

struct shared {
	int ready;
	int go;
	int rc[3];
	uint64_t ns[3];
};

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "8GiB", 1);
	setenv("VGPU_COMPUTE_LIMIT", "30", 1);
	shimtest_env(TENANT, "1GiB");
}

TestSuite(errors, .init = setup, .fini = shimtest_cleanup);

static struct shared *shared_page(void)
{
	void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

static int start_cuda(void)
{
	CUcontext ctx;

	return cuInit(0) == CUDA_SUCCESS &&
	       cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
	       cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

static void wait_flag(int *flag)
{
	struct timespec ts = { 0, 1000000 };
	uint64_t give_up = simtest_now_ns() + 20 * SEC;

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		cr_assert_lt(simtest_now_ns(), give_up, "a child never got ready");
		nanosleep(&ts, NULL);
	}
}

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* ---- a stopped holder of the tenant lock --------------------------------- */

/* The test's only ledger file, mapped read-write; NULL if none. */
static char *ledger_map_rw(void)
{
	DIR *d = opendir(shimtest_ledger_dir());
	char path[4096] = "";
	struct dirent *e;
	void *m;
	int fd;

	if (!d)
		return NULL;
	while ((e = readdir(d)))
		if (strstr(e->d_name, VGPU_LEDGER_SUFFIX))
			snprintf(path, sizeof(path), "%s/%s",
				 shimtest_ledger_dir(), e->d_name);
	closedir(d);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	m = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	close(fd);
	return m == MAP_FAILED ? NULL : m;
}

/* Takes the tenant's lock word as this process's slot would: (slot index
 * + 1) | (generation & 0xFFFFF) << 11. The word, or NULL. */
static uint32_t *take_tenant_lock(void)
{
	char *m = ledger_map_rw();
	struct vgpu_ledger_tenant *ten;
	struct vgpu_ledger_slot *sl;
	uint32_t t, i, word, free_word = 0;

	if (!m)
		return NULL;
	ten = (struct vgpu_ledger_tenant *)(m + VGPU_LEDGER_TENANTS_OFFSET);
	sl = (struct vgpu_ledger_slot *)(m + VGPU_LEDGER_SLOTS_OFFSET);
	for (t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if (ten[t].state == VGPU_TENANT_ACTIVE &&
		    strcmp(ten[t].name, TENANT) == 0)
			break;
	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (sl[i].state == VGPU_SLOT_ACTIVE && sl[i].tenant == t &&
		    sl[i].pid == getpid())
			break;
	if (t == VGPU_LEDGER_MAX_TENANTS || i == VGPU_LEDGER_MAX_SLOTS)
		return NULL;
	word = (i + 1) | (sl[i].generation & 0xFFFFFu) << 11;
	if (!__atomic_compare_exchange_n(&ten[t].lock, &free_word, word, false,
					 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return NULL;
	return &ten[t].lock;
}

/* The holder: joins through the shim, takes the lock, stops itself; when
 * continued, lets go. */
static int hold_lock(struct shared *sh)
{
	CUdeviceptr p;
	uint32_t *lock;

	if (!start_cuda() || cuMemAlloc(&p, MIB) != CUDA_SUCCESS ||
	    cuMemFree(p) != CUDA_SUCCESS)
		return 1;
	lock = take_tenant_lock();
	if (!lock)
		return 2;
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	raise(SIGSTOP);
	__atomic_store_n(lock, 0, __ATOMIC_RELEASE);
	return 0;
}

static int alloc_twice(void *arg)
{
	struct shared *sh = arg;
	CUdeviceptr p;

	if (!start_cuda())
		return 2;
	for (int i = 0; i < 2; i++) {
		uint64_t t0 = simtest_now_ns();

		sh->rc[i] = (int)cuMemAlloc(&p, MIB);
		sh->ns[i] = simtest_now_ns() - t0;
	}
	return 0;
}

static int alloc_and_free(void *arg)
{
	struct shared *sh = arg;
	CUdeviceptr p;
	uint64_t t0;

	if (!start_cuda())
		return 2;
	t0 = simtest_now_ns();
	sh->rc[2] = (int)cuMemAlloc(&p, 256 * MIB);
	sh->ns[2] = simtest_now_ns() - t0;
	if (sh->rc[2] == CUDA_SUCCESS && cuMemFree(p) != CUDA_SUCCESS)
		return 3;
	return 0;
}

static void stopped_holder(int release_signal)
{
	struct shared *sh = shared_page();
	struct ledger_view v;
	char out[8192], who[64];
	int st;
	pid_t holder = fork();

	cr_assert_geq(holder, 0);
	if (holder == 0)
		_exit(hold_lock(sh));
	wait_flag(&sh->ready);
	cr_assert_eq(waitpid(holder, &st, WUNTRACED), holder);
	cr_assert(WIFSTOPPED(st), "holder status %#x", st);

	cr_assert_eq(shimtest_run_child(alloc_twice, sh, out, sizeof(out)), 0,
		     "%s", out);
	for (int i = 0; i < 2; i++) {
		cr_expect_eq(sh->rc[i], CUDA_ERROR_TIMEOUT, "call %d: %d", i,
			     sh->rc[i]);
		cr_expect_geq(sh->ns[i], SEC / 2, "call %d", i);
		cr_expect_lt(sh->ns[i], 3 * SEC, "call %d: %llu ms", i,
			     (unsigned long long)sh->ns[i] / 1000000);
	}
	cr_log_info("%s", out);
	snprintf(who, sizeof(who), "held for over 1000 ms by pid %d ",
		 (int)holder);
	cr_expect(strstr(out, "tenant '" TENANT "'"), "%s", out);
	cr_expect(strstr(out, who), "no '%s' in: %s", who, out);
	cr_expect(strstr(out, "CUDA_ERROR_TIMEOUT"), "%s", out);
	cr_expect_eq(count(out, "held for over"), 1, "not rate-limited: %s",
		     out);

	kill(holder, release_signal);
	cr_assert_eq(waitpid(holder, &st, 0), holder);
	if (release_signal == SIGCONT)
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%#x", st);
	cr_assert_eq(shimtest_run_child(alloc_and_free, sh, out, sizeof(out)),
		     0, "%s", out);
	cr_expect_eq(sh->rc[2], CUDA_SUCCESS, "%d: %s", sh->rc[2], out);
	cr_expect_lt(sh->ns[2], SEC / 2);
	cr_expect_eq(strstr(out, "error"), NULL, "%s", out);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	cr_expect_eq(ledger_tenant(&v, TENANT)->lock, 0);
	ledger_view_close(&v);
}

Test(errors, a_stopped_lock_holder_gives_a_timeout_naming_it_then_sigcont,
     .timeout = 60)
{
	stopped_holder(SIGCONT);
}

Test(errors, a_stopped_lock_holder_gives_a_timeout_naming_it_then_sigkill,
     .timeout = 60)
{
	stopped_holder(SIGKILL);
}

/* ---- the tenant's limits are its first process's ------------------------ */

/* The first process: 1 GiB (the suite's), compute 30%; holds 512 MiB
 * until told to go. */
static int first_process(struct shared *sh)
{
	struct timespec ts = { 0, 1000000 };
	CUdeviceptr p;

	if (!start_cuda() || cuMemAlloc(&p, 512 * MIB) != CUDA_SUCCESS)
		return 1;
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		nanosleep(&ts, NULL);
	return cuMemFree(p) == CUDA_SUCCESS ? 0 : 2;
}

struct later {
	struct shared *sh;
	const char *limit;	/* VGPU_MEMORY_LIMIT; NULL: unset */
	const char *compute;	/* VGPU_COMPUTE_LIMIT; NULL: unset */
	size_t total;		/* the slice every view must show */
};

/* A later process: fills what is left of 1 GiB, is refused one byte more
 * (rc[0], rc[1]), frees. */
static int later_process(void *arg)
{
	struct later *lt = arg;
	CUdeviceptr p, q;

	if (lt->limit)
		setenv("VGPU_MEMORY_LIMIT", lt->limit, 1);
	else
		unsetenv("VGPU_MEMORY_LIMIT");
	if (lt->compute)
		setenv("VGPU_COMPUTE_LIMIT", lt->compute, 1);
	else
		unsetenv("VGPU_COMPUTE_LIMIT");
	if (!start_cuda())
		return 2;
	size_t total = 0, free = 0;

	/* Every view shows the tenant's slice, not what this process asked. */
	if (cuDeviceTotalMem(&total, 0) != CUDA_SUCCESS || total != lt->total) {
		fprintf(stderr, "cuDeviceTotalMem: %zu\n", total);
		return 4;
	}
	if (cuMemGetInfo(&free, &total) != CUDA_SUCCESS || total != lt->total) {
		fprintf(stderr, "cuMemGetInfo: %zu\n", total);
		return 5;
	}
	lt->sh->rc[0] = (int)cuMemAlloc(&p, 512 * MIB);
	lt->sh->rc[1] = (int)cuMemAlloc(&q, 1);
	if (lt->sh->rc[1] == CUDA_SUCCESS)
		cuMemFree(q);
	if (lt->sh->rc[0] == CUDA_SUCCESS && cuMemFree(p) != CUDA_SUCCESS)
		return 3;
	return 0;
}

static void run_later(struct later *lt, char *out, size_t len)
{
	lt->sh->rc[0] = lt->sh->rc[1] = -1;
	cr_assert_eq(shimtest_run_child(later_process, lt, out, len), 0, "%s",
		     out);
	cr_log_info("%s", out);
}

Test(errors, later_processes_run_under_the_tenants_limits_with_a_warning,
     .timeout = 60)
{
	struct shared *sh = shared_page();
	struct later lt = { sh, NULL, NULL, GIB };
	const struct vgpu_ledger_tenant *ten;
	struct ledger_view v;
	char out[8192];
	int st;
	pid_t first = fork();

	cr_assert_geq(first, 0);
	if (first == 0)
		_exit(first_process(sh));
	wait_flag(&sh->ready);

	/* No limit stated: 1 GiB all the same. */
	run_later(&lt, out, sizeof(out));
	cr_expect_eq(sh->rc[0], CUDA_SUCCESS, "%d: %s", sh->rc[0], out);
	cr_expect_eq(sh->rc[1], CUDA_ERROR_OUT_OF_MEMORY, "%d", sh->rc[1]);
	cr_expect(strstr(out, "tenant '" TENANT "': pid "), "%s", out);
	cr_expect(strstr(out, "asked for no memory limit, but the tenant's "
		  "memory limit, 1 GiB (set by pid "), "%s", out);
	cr_expect(strstr(out, "asked for no compute limit; the tenant has a "
		  "compute share of 30% (hard), which applies"), "%s", out);

	/* Another limit stated: 1 GiB all the same. */
	lt.limit = "4GiB";
	lt.compute = "30";
	run_later(&lt, out, sizeof(out));
	cr_expect_eq(sh->rc[0], CUDA_SUCCESS, "%d: %s", sh->rc[0], out);
	cr_expect_eq(sh->rc[1], CUDA_ERROR_OUT_OF_MEMORY, "%d", sh->rc[1]);
	cr_expect(strstr(out, "asked for a memory limit of 4 GiB, but the "
		  "tenant's memory limit, 1 GiB (set by pid "), "%s", out);
	cr_expect_eq(strstr(out, "compute"), NULL, "%s", out);

	ledger_view_must(&v, NULL);
	ten = ledger_tenant(&v, TENANT);
	cr_expect_eq(ten->mem_limit, GIB);
	cr_expect_eq(ten->limit_set_pid, first);
	cr_expect_eq(ten->limit_changes, 2);
	cr_expect_eq(ten->compute.share_pct, 30);
	ledger_view_close(&v);

	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	cr_assert_eq(waitpid(first, &st, 0), first);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%#x", st);

	/* Everyone gone: the next process sets the limits. */
	lt.limit = "512MiB";
	lt.total = 512 * MIB;
	lt.compute = NULL;
	run_later(&lt, out, sizeof(out));
	cr_expect_eq(sh->rc[0], CUDA_SUCCESS, "%d: %s", sh->rc[0], out);
	cr_expect_eq(sh->rc[1], CUDA_ERROR_OUT_OF_MEMORY, "%d", sh->rc[1]);
	cr_expect_eq(strstr(out, "asked for"), NULL, "%s", out);
	ledger_view_must(&v, NULL);
	ten = ledger_tenant(&v, TENANT);
	cr_expect_eq(ten->mem_limit, 512 * MIB);
	cr_expect_eq(ten->compute.share_pct, 0);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
}
