/* test_ledger_gone.c - the ledger file truncated or deleted under a running
 * job: the job is not killed (before, `truncate -s 0` made its next
 * allocation die of SIGBUS, status 135), it moves its charges to the file
 * the name points at, and its slice still holds there: exactly the limit's
 * worth of allocations succeed, judged also by the simulated device.
 *
 * Each job runs in a forked child (shimtest_run_child) that prints what it
 * got; the test reads that and the ledger file from outside.
 */
#include "shimtest.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)

static void setup(void)
{
	simtest_clean_env();
	shimtest_env("t-gone", "16MiB");
}

TestSuite(ledger_gone, .init = setup, .fini = shimtest_cleanup);

static char path[1024];

/* Sets `path` to the job's ledger file. */
static int find_path(void)
{
	char u[64];

	shimtest_uuid(0, u, sizeof(u));
	snprintf(path, sizeof(path), "%s/%s.v%d%s", shimtest_ledger_dir(), u,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	return access(path, F_OK) == 0 ? 0 : 5;
}

/* The driver up and device 0's primary context current: 0, or not. */
static int ctx_up(CUcontext *ctx)
{
	return cuInit(0) || cuDevicePrimaryCtxRetain(ctx, 0) ||
	       cuCtxSetCurrent(*ctx);
}

/* 1 MiB allocations until refused: how many, kept in p[]. */
static int fill(CUdeviceptr *p, int max, CUresult *last)
{
	int n = 0;

	while (n < max && (*last = cuMemAlloc(&p[n], MIB)) == CUDA_SUCCESS)
		n++;
	return n;
}

static int truncated_job(void *arg)
{
	CUdeviceptr a, b, p[64];
	CUcontext ctx;
	CUresult last;
	uint64_t base;
	int n;

	(void)arg;
	if (ctx_up(&ctx))
		return 2;
	base = shimtest_device_used();
	if (cuMemAlloc(&a, 4 * MIB) || find_path())
		return 3;
	if (truncate(path, 0) != 0)
		return 4;
	printf("after=%d\n", (int)cuMemAlloc(&b, 4 * MIB));
	n = fill(p, 64, &last);
	printf("more=%d last=%d\n", n, (int)last);
	printf("device=%llu\n",
	       (unsigned long long)((shimtest_device_used() - base) / MIB));
	while (n--)
		cuMemFree(p[n]);
	cuMemFree(b);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_truncated_ledger_kills_no_job_and_the_slice_holds)
{
	static char out[8192];
	struct ledger_view v;
	int rc;

	rc = shimtest_run_child(truncated_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "after=0\n"), "%s", out);
	/* 16 MiB: 4 + 4 before, 8 more, then out of memory (2). */
	cr_assert_not_null(strstr(out, "more=8 last=2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "device=16\n"), "%s", out);
	cr_assert_not_null(strstr(out, "truncated or overwritten while in use"), "%s", out);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, "t-gone");
	ledger_view_close(&v);
}

/* ---- a job that blocks signals, or installs its own SIGBUS handler ------- */

struct blocked {
	CUcontext ctx;
	int after, more, bus_blocked;
};

/* A worker of a server that blocked every signal before starting it: the
 * library keeps SIGBUS out of the mask (the kernel would kill for a fault
 * on a blocked SIGBUS without running the guard). */
static void *blocked_worker(void *arg)
{
	struct blocked *b = arg;
	CUdeviceptr x, p[64];
	CUresult last;
	sigset_t now, all;

	/* A device look-up first (it unblocks SIGBUS once per thread),
	 * then every signal blocked: only the wrapper keeps SIGBUS open. */
	if (cuCtxSetCurrent(b->ctx) || cuMemAlloc(&x, MIB))
		return NULL;
	cuMemFree(x);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	if (truncate(path, 0) != 0)
		return NULL;
	b->after = (int)cuMemAlloc(&x, 4 * MIB);
	b->more = fill(p, 64, &last);
	for (int i = b->more; i--;)
		cuMemFree(p[i]);
	cuMemFree(x);
	pthread_sigmask(SIG_BLOCK, NULL, &now);
	b->bus_blocked = sigismember(&now, SIGBUS);
	return NULL;
}

static int blocked_job(void *arg)
{
	struct blocked b = { .after = -1, .more = -1, .bus_blocked = -1 };
	CUdeviceptr a;
	sigset_t all;
	pthread_t t;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_sigmask(SIG_BLOCK, NULL, &all);
	printf("main_bus_blocked=%d\n", sigismember(&all, SIGBUS));
	if (ctx_up(&b.ctx))
		return 2;
	if (cuMemAlloc(&a, 4 * MIB) || find_path())
		return 3;
	if (pthread_create(&t, NULL, blocked_worker, &b) != 0)
		return 4;
	pthread_join(t, NULL);
	printf("after=%d more=%d bus_blocked=%d\n", b.after, b.more,
	       b.bus_blocked);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_job_that_blocks_every_signal_survives_a_truncation)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(blocked_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d (135: killed by SIGBUS): %s", rc, out);
	/* 16 MiB: 4 held, 4 after the truncation, 8 more. */
	cr_assert_not_null(strstr(out, "main_bus_blocked=0\n"), "%s", out);
	cr_assert_not_null(strstr(out, "after=0 more=8 bus_blocked=0\n"),
			   "%s", out);
}

static sigjmp_buf own_escape;
static volatile sig_atomic_t own_ran;

static void own_bus(int sig)
{
	(void)sig;
	own_ran++;
	siglongjmp(own_escape, 1);
}

/* A fault on a mapped file of the program's own, truncated: its own
 * handler runs (and jumps out). */
static int fault_own_file(void)
{
	char tmpl[] = "/tmp/vgpu-own-bus.XXXXXX";
	volatile char *m;
	int fd = mkstemp(tmpl), got = -1;

	if (fd < 0)
		return -2;
	unlink(tmpl);
	if (ftruncate(fd, 4096) != 0)
		return -3;
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -4;
	if (ftruncate(fd, 0) != 0)
		return -5;
	if (sigsetjmp(own_escape, 1) == 0)
		got = m[0];	/* faults */
	munmap((void *)m, 4096);
	close(fd);
	return got;
}

/* The kernel's SIGBUS handler, read with the system call (past every
 * wrapper). */
struct kernel_act {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

static void (*kernel_bus_handler(void))(int)
{
	struct kernel_act k;

	if (syscall(SYS_rt_sigaction, SIGBUS, NULL, &k, 8) != 0)
		return SIG_ERR;
	return k.handler;
}

extern __sighandler_t __sysv_signal(int, __sighandler_t);

/* A program that installs its own SIGBUS handler after the library's
 * guard (faulthandler.enable() after the first CUDA call): a truncated
 * ledger still kills nothing and does not reach the program's handler;
 * the program reads back its handler; its own faults still reach it. */
static int own_handler_job(void *arg)
{
	struct sigaction sa, back;
	CUdeviceptr a, b;
	CUcontext ctx;
	int got;

	(void)arg;
	if (ctx_up(&ctx))
		return 2;
	if (cuMemAlloc(&a, 4 * MIB) || find_path())
		return 3;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = own_bus;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) != 0 ||
	    sigaction(SIGBUS, NULL, &back) != 0)
		return 4;
	printf("read_back=%d\n", back.sa_handler == own_bus);
	if (truncate(path, 0) != 0)
		return 5;
	printf("after=%d ran=%d\n", (int)cuMemAlloc(&b, 4 * MIB),
	       (int)own_ran);
	got = fault_own_file();
	printf("own_fault=%d ran=%d\n", got, (int)own_ran);
	if (signal(SIGBUS, SIG_DFL) != own_bus)
		return 6;
	/* signal() in a strict ISO C program is __sysv_signal: recorded
	 * too, and the kernel's handler is still the guard's. */
	if (__sysv_signal(SIGBUS, own_bus) != SIG_DFL ||
	    signal(SIGBUS, SIG_DFL) != own_bus)
		return 7;
	printf("kernel_is_own=%d\n", kernel_bus_handler() == own_bus);
	cuMemFree(b);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_handler_installed_after_the_guard_does_not_replace_it)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(own_handler_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "read_back=1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "after=0 ran=0\n"), "%s", out);
	cr_assert_not_null(strstr(out, "own_fault=-1 ran=1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "kernel_is_own=0\n"), "%s", out);
}

/* sigaction(SIGBUS) is async-signal-safe: a handler that reads the SIGBUS
 * disposition while the interrupted code sets it must not wait on it (a
 * lock held by the interrupted code: the process hung for ever). */
static void read_bus(int sig)
{
	struct sigaction o;

	(void)sig;
	sigaction(SIGBUS, NULL, &o);
}

static int handler_reads_job(void *arg)
{
	struct itimerval every = { { 0, 50 }, { 0, 50 } }, off = { 0 };
	struct sigaction sa;
	CUdeviceptr a;
	CUcontext ctx;
	long i;

	(void)arg;
	if (ctx_up(&ctx) || cuMemAlloc(&a, MIB))	/* guard on */
		return 2;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = read_bus;
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGALRM, &sa, NULL) != 0 ||
	    setitimer(ITIMER_REAL, &every, NULL) != 0)
		return 3;
	sa.sa_handler = own_bus;
	for (i = 0; i < 200000; i++)
		sigaction(SIGBUS, &sa, NULL);
	setitimer(ITIMER_REAL, &off, NULL);
	printf("done=%ld\n", i);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, sigaction_of_sigbus_in_a_handler_does_not_hang,
     .timeout = 60)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(handler_reads_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "done=200000\n"), "%s", out);
}

/* glibc runs a SIGEV_THREAD timer's function in a thread with every
 * signal blocked, a mask the shim's wrappers never see: its first device
 * look-up unblocks SIGBUS, so a truncation met there kills nothing. */
struct timed {
	CUcontext ctx;
	volatile int after, more, bus_blocked;
	volatile int done;
};

static void timed_alloc(union sigval v)
{
	struct timed *t = v.sival_ptr;
	CUdeviceptr x, p[64];
	CUresult last;
	sigset_t now;

	if (cuCtxSetCurrent(t->ctx) == CUDA_SUCCESS &&
	    truncate(path, 0) == 0) {
		t->after = (int)cuMemAlloc(&x, 4 * MIB);
		t->more = fill(p, 64, &last);
		for (int i = t->more; i--;)
			cuMemFree(p[i]);
		cuMemFree(x);
	}
	pthread_sigmask(SIG_BLOCK, NULL, &now);
	t->bus_blocked = sigismember(&now, SIGBUS);
	__atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
}

static int timer_job(void *arg)
{
	struct timed t = { .after = -1, .more = -1, .bus_blocked = -1 };
	struct sigevent ev = { .sigev_notify = SIGEV_THREAD };
	struct itimerspec once = { .it_value = { 0, 1000000 } };
	struct timespec pause = { 0, 10000000 };
	CUdeviceptr a;
	timer_t tm;

	(void)arg;
	if (ctx_up(&t.ctx))
		return 2;
	if (cuMemAlloc(&a, 4 * MIB) || find_path())
		return 3;
	ev.sigev_notify_function = timed_alloc;
	ev.sigev_value.sival_ptr = &t;
	if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0 ||
	    timer_settime(tm, 0, &once, NULL) != 0)
		return 4;
	for (int i = 0; i < 1000 && !__atomic_load_n(&t.done,
						      __ATOMIC_ACQUIRE); i++)
		nanosleep(&pause, NULL);
	timer_delete(tm);
	printf("after=%d more=%d bus_blocked=%d\n", t.after, t.more,
	       t.bus_blocked);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_timer_threads_allocation_survives_a_truncation,
     .timeout = 60)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(timer_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d (135: killed by SIGBUS): %s", rc, out);
	cr_assert_not_null(strstr(out, "after=0 more=8 bus_blocked=0\n"),
			   "%s", out);
}

/* Threads that set their SIGBUS handler over and over while the main
 * thread makes the first CUDA calls (which install the guard): however
 * the calls interleave, the kernel ends with the guard's handler and the
 * program's is the one recorded (a call between the guard's two steps
 * once replaced it for good: 1 run in 40). */
static volatile int racing;

static void *race_signal(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&racing, __ATOMIC_ACQUIRE)) {
		signal(SIGBUS, own_bus);
		sched_yield();
	}
	return NULL;
}

static int install_race_job(void *arg)
{
	struct sigaction back;
	pthread_t t[2];
	CUdeviceptr a;
	CUcontext ctx;

	(void)arg;
	__atomic_store_n(&racing, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, race_signal, NULL) != 0)
			return 2;
	if (ctx_up(&ctx) || cuMemAlloc(&a, MIB))
		return 3;
	__atomic_store_n(&racing, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	sigaction(SIGBUS, NULL, &back);
	printf("kernel_is_own=%d kernel_dfl=%d recorded_own=%d\n",
	       kernel_bus_handler() == own_bus,
	       kernel_bus_handler() == SIG_DFL, back.sa_handler == own_bus);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_handler_set_while_the_guard_installs_does_not_replace_it,
     .timeout = 120)
{
	static char out[8192];

	for (int run = 0; run < 20; run++) {
		int rc = shimtest_run_child(install_race_job, NULL, out,
					    sizeof(out));

		cr_assert_eq(rc, 0, "run %d: status %d: %s", run, rc, out);
		cr_assert_not_null(strstr(out, "kernel_is_own=0 kernel_dfl=0 "
					  "recorded_own=1\n"),
				   "run %d: %s", run, out);
	}
}

/* exit() with SIGBUS blocked in the exiting thread (here by the system
 * call, past the wrappers; a signal handler's mask, a thread that never
 * looked a device up) after a truncation: the slots the exit gives back
 * are in the broken mapping; the exit unblocks SIGBUS first. */
static int exit_blocked_job(void *arg)
{
	unsigned long bus = 1ul << (SIGBUS - 1);
	CUdeviceptr a;
	CUcontext ctx;

	(void)arg;
	if (ctx_up(&ctx))
		return 2;
	if (cuMemAlloc(&a, 4 * MIB) || find_path())
		return 3;
	if (truncate(path, 0) != 0)
		return 4;
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &bus, NULL, 8) != 0)
		return 5;
	printf("exiting\n");
	fflush(stdout);
	exit(0);
}

Test(ledger_gone, an_exit_with_sigbus_blocked_after_a_truncation_is_clean)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(exit_blocked_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d (135: killed by SIGBUS): %s", rc, out);
	cr_assert_not_null(strstr(out, "exiting\n"), "%s", out);
}

static int deleted_job(void *arg)
{
	struct timespec pause = { 0, 150 * 1000000 };
	CUdeviceptr a, b, c, p[64];
	struct ledger_view v;
	CUcontext ctx;
	CUresult last;
	int n;

	(void)arg;
	if (ctx_up(&ctx))
		return 2;
	if (cuMemAlloc(&a, 8 * MIB) || find_path())
		return 3;
	if (unlink(path) != 0)
		return 4;
	nanosleep(&pause, NULL);	/* past the name's next check */
	printf("after=%d\n", (int)cuMemAlloc(&b, MIB));
	if (!ledger_view_open(&v, shimtest_ledger_dir(), NULL))
		return 6;
	printf("file=%llu\n", (unsigned long long)(ledger_tenant_bytes(
		&v, "t-gone", VGPU_USAGE_COUNT) / MIB));
	ledger_view_close(&v);
	printf("big=%d\n", (int)cuMemAlloc(&c, 8 * MIB));
	n = fill(p, 64, &last);
	printf("more=%d last=%d\n", n, (int)last);
	while (n--)
		cuMemFree(p[n]);
	cuMemFree(b);
	cuMemFree(a);
	return 0;
}

Test(ledger_gone, a_deleted_ledger_is_made_again_with_the_jobs_charges)
{
	static char out[8192];
	struct ledger_view v;
	int rc;

	rc = shimtest_run_child(deleted_job, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "after=0\nfile=9\n"), "%s", out);
	cr_assert_not_null(strstr(out, "big=2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "more=7 last=2\n"), "%s", out);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, "t-gone");
	ledger_view_close(&v);
}

/* ---- a job that stopped allocating ---------------------------------------- */

/* Holds 8 MiB, tells the test its ledger's path through wfd, then, until
 * the test writes to rfd, only synchronises every 10 ms (a job that
 * allocated once and now computes) or, when !sync, makes no driver call
 * at all (a notebook between cells). */
static int holder(int wfd, int rfd, bool sync)
{
	struct pollfd p = { .fd = rfd, .events = POLLIN };
	CUcontext ctx;
	CUdeviceptr a;
	char go;

	if (ctx_up(&ctx) || cuMemAlloc(&a, 8 * MIB) || find_path())
		return 2;
	if (write(wfd, path, sizeof(path)) != (ssize_t)sizeof(path))
		return 3;
	for (;;) {
		int n = poll(&p, 1, sync ? 10 : -1);

		if (n > 0)
			break;
		if ((n < 0 && errno != EINTR) || (sync && cuCtxSynchronize()))
			return 4;
	}
	if (read(rfd, &go, 1) != 1)
		return 5;
	return cuMemFree(a) ? 6 : 0;
}

/* The tenant's bytes in the file at `path` now; 0 when there is none. */
static uint64_t file_bytes(void)
{
	struct ledger_view v;
	uint64_t b = 0;

	if (!ledger_view_open(&v, shimtest_ledger_dir(), NULL))
		return 0;
	if (ledger_tenant(&v, "t-gone"))
		b = ledger_tenant_bytes(&v, "t-gone", VGPU_USAGE_COUNT);
	ledger_view_close(&v);
	return b;
}

/* Waits (up to 10 s) for the file at the name to charge the tenant at
 * least `want`; what it charged last. */
static uint64_t wait_file_bytes(uint64_t want)
{
	struct timespec tick = { 0, 10 * 1000000 };
	uint64_t b = 0;

	for (int i = 0; i < 1000 && (b = file_bytes()) < want; i++)
		nanosleep(&tick, NULL);
	return b;
}

/* Starts a holder; its pid, and the pipe that lets it go. */
static pid_t start_holder(bool sync, int *go)
{
	int up[2], down[2];
	size_t got = 0;
	ssize_t n;
	pid_t a;

	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	fflush(NULL);
	a = fork();
	cr_assert_geq(a, 0);
	if (a == 0) {
		close(up[0]);
		close(down[1]);
		_exit(holder(up[1], down[0], sync));
	}
	close(up[1]);
	close(down[0]);
	while (got < sizeof(path) &&
	       (n = read(up[0], path + got, sizeof(path) - got)) > 0)
		got += (size_t)n;
	close(up[0]);
	cr_assert_eq(got, sizeof(path), "the holder did not start");
	*go = down[1];
	return a;
}

static void finish_holder(pid_t a, int go)
{
	struct ledger_view v;
	int status;

	cr_assert_eq(write(go, "g", 1), 1);
	close(go);
	cr_assert_eq(waitpid(a, &status, 0), a);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "holder status %d", status);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, "t-gone");
	ledger_view_close(&v);
}

static int newcomer(void *arg)
{
	CUdeviceptr p[64];
	CUcontext ctx;
	CUresult last;
	int n;

	(void)arg;
	if (ctx_up(&ctx))
		return 2;
	n = fill(p, 64, &last);
	printf("got=%d last=%d device=%llu\n", n, (int)last,
	       (unsigned long long)(shimtest_device_used() / MIB));
	while (n--)
		cuMemFree(p[n]);
	return 0;
}

/* A new job of the tenant gets the 8 MiB of 16 that the holder leaves,
 * and the device holds 16. */
static void newcomer_gets_the_rest(void)
{
	static char out[8192];
	int rc;

	rc = shimtest_run_child(newcomer, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "got=8 last=2 device=16\n"), "%s", out);
}

/* The ledger deleted while a job of the tenant holds 8 MiB of its 16 and
 * only synchronises: it follows the name within a check's period (the
 * synchronisation hooks poll), so a new job of the tenant gets the other
 * 8 MiB, not 16 (before: the holder stayed in the deleted file until its
 * next allocation, and the tenant held 24 MiB). */
Test(ledger_gone, a_job_that_only_synchronises_follows_a_deleted_ledger)
{
	struct timespec settle = { 0, 400 * 1000000 };
	int go;
	pid_t a;

	a = start_holder(true, &go);
	cr_assert_eq(unlink(path), 0, "%s", path);
	nanosleep(&settle, NULL);	/* past the holder's next check */
	newcomer_gets_the_rest();
	finish_holder(a, go);
}

/* ---- a job that makes no driver call -------------------------------------- */

/* The ledger deleted while a job holds 8 MiB of its tenant's 16 and makes
 * no driver call at all: the library's follower thread moves its charges
 * to a new file at the name, with no call from the job, so a new job of
 * the tenant gets the other 8 MiB, not 16 (before: the holder stayed in
 * the deleted file, and the device held 24 MiB for a 16 MiB slice). */
Test(ledger_gone, a_job_that_makes_no_call_follows_a_deleted_ledger)
{
	int go;
	pid_t a;

	a = start_holder(false, &go);
	cr_assert_eq(unlink(path), 0, "%s", path);
	cr_assert_eq(wait_file_bytes(8 * MIB), 8 * MIB,
		     "the silent holder did not move to a new file");
	newcomer_gets_the_rest();
	finish_holder(a, go);
}

/* The same holder stopped (SIGSTOP) when the ledger is deleted: it cannot
 * move while stopped (docs/ledger-abi.md), but once continued it moves
 * with no driver call, and the tenant's totals are one again: a new job
 * gets the other 8 MiB. */
Test(ledger_gone, a_stopped_job_follows_a_deleted_ledger_once_continued)
{
	struct timespec settle = { 0, 400 * 1000000 };
	int go;
	pid_t a;

	a = start_holder(false, &go);
	cr_assert_eq(kill(a, SIGSTOP), 0);
	cr_assert_eq(unlink(path), 0, "%s", path);
	nanosleep(&settle, NULL);
	cr_assert_eq(kill(a, SIGCONT), 0);
	cr_assert_eq(wait_file_bytes(8 * MIB), 8 * MIB,
		     "the continued holder did not move to a new file");
	newcomer_gets_the_rest();
	finish_holder(a, go);
}

/* ---- the follower thread and the job it lives in -------------------------- */

/* The ledger truncated over and over, each time a full file is at the name
 * again, while an idle job's follower moves to each new file: the guard
 * catches the SIGBUS of a truncation in the follower's move (a thread that
 * blocks SIGBUS is killed by the fault whatever handler is installed: the
 * follower did, and the job died with status 135 after 2 to 10
 * truncations). The job ends well, its charges back to zero. */
Test(ledger_gone, a_truncation_during_the_followers_move_kills_nothing,
     .timeout = 60)
{
	struct timespec tick = { 0, 50 * 1000 };
	uint64_t until;
	int go, cuts = 0, status = 0;
	struct stat st;
	pid_t a;

	a = start_holder(false, &go);
	until = simtest_now_ns() + 3000000000ull;
	while (simtest_now_ns() < until) {
		if (stat(path, &st) == 0 &&
		    st.st_size > 4096 && truncate(path, 4096) == 0)
			cuts++;
		nanosleep(&tick, NULL);
	}
	cr_assert_gt(cuts, 2, "%d truncations", cuts);
	/* The holder must still be there, and move to a whole file again. */
	cr_assert_eq(waitpid(a, &status, WNOHANG), 0,
		     "the holder ended (status %d) after %d truncations",
		     status, cuts);
	cr_assert_eq(wait_file_bytes(8 * MIB), 8 * MIB,
		     "the holder did not move after the last truncation");
	finish_holder(a, go);
}

static void *alloc_and_free(void *arg)
{
	struct timespec pause = { 0, 100 * 1000000 };
	CUcontext ctx = arg;
	CUdeviceptr p;

	nanosleep(&pause, NULL);
	if (cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
	    cuMemAlloc(&p, MIB) == CUDA_SUCCESS)
		cuMemFree(p);
	printf("worker done\n");
	return NULL;
}

/* In the child: a job whose main thread calls pthread_exit after starting
 * a worker. The process must end once the worker has (glibc calls
 * exit(0) at the last thread's end), not be held alive by the follower. */
static int main_exits_first(void *arg)
{
	CUcontext ctx;
	pthread_t t;

	(void)arg;
	if (ctx_up(&ctx) || find_path())
		return 2;
	if (pthread_create(&t, NULL, alloc_and_free, ctx) != 0)
		return 3;
	fflush(NULL);
	pthread_exit(NULL);
}

/* Runs main_exits_first in a child: it ends with status 0 once its
 * worker has, and the tenant's totals are back to zero. */
static void main_exits_first_ends(void)
{
	static char out[4096];
	struct ledger_view v;
	int rc;

	rc = shimtest_run_child(main_exits_first, NULL, out, sizeof(out));
	cr_assert_eq(rc, 0, "status %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "worker done\n"), "%s", out);
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, "t-gone");
	ledger_view_close(&v);
}

Test(ledger_gone, a_job_whose_main_thread_exits_first_still_ends)
{
	main_exits_first_ends();
}

/* The same in a pid namespace of its own that sees the host's /proc (a
 * container given the host's /proc, `unshare --pid --fork` without
 * --mount-proc): gettid's ids there are not /proc's, and the library's
 * threads must still be told from the job's. Before they were told apart
 * by /proc's ids the process outlived its last thread for good. Needs
 * CAP_SYS_ADMIN: skipped without it. */
Test(ledger_gone, a_job_whose_main_thread_exits_first_ends_in_a_pid_namespace)
{
#ifdef __SANITIZE_ADDRESS__
	/* LeakSanitizer's exit check cannot stop the threads of a process
	 * whose pid namespace is not its /proc's (a fatal error, then the
	 * process hangs). The plain build runs this test. */
	cr_skip_test("a pid namespace without its /proc under LeakSanitizer");
#endif
	if (unshare(CLONE_NEWPID) != 0)
		cr_skip_test("unshare(CLONE_NEWPID): %s", strerror(errno));
	main_exits_first_ends();
}
