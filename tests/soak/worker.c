/* worker.c - one process of the soak (soak.py): allocates, writes and checks
 * data patterns, frees, launches and forks on one simulated GPU through the
 * shim, until SIGTERM or its time ends.
 *
 *   soak-worker --device D --seconds S --status FILE --seed N --max-mib M
 *               [--duty F]
 *
 * Its tenant, slice, compute share and injected faults come from the
 * environment (VGPU_*, VGPU_SIM_FAIL). Every CUDA call is timed; the slowest
 * is reported. --duty F (0 < F <= 1): after each step, sleep so that steps
 * take about F of the time (soak.py keeps the host's CPUs from being
 * oversubscribed, which would slow the simulated GPU itself down). Each allocation holds the vgpu_touch pattern of its own seed;
 * every check reads it back with a kernel, and a word that differs is data
 * loss. An injected allocation failure is an OOM; an injected launch
 * failure leaves the buffer as it was (the kernel never ran).
 *
 * SIGUSR1: finish the current step, wait for the child, write the status
 * with "paused 1" and hold still until SIGTERM (the driver's snapshot).
 * The status file (written atomically, every 200 ms and at the end):
 *   pid P dev D held B ctx 0|1 max_ns T calls N ooms N alloc_ok N
 *   launch_fail N launches N checks N forks N child_fail N paused 0|1
 *
 * Exit codes: 0 done, 2 an unexpected CUDA result, 3 no device (cuInit or
 * the context refused: e.g. a ledger that cannot be created), 4 no room
 * (the context refused with CUDA_ERROR_OUT_OF_MEMORY: the tenant's slice
 * is full, as designed), 10 data loss, 11 a forked child failed.
 */
#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_kernels.h"

#define EXIT_CUDA 2
#define EXIT_NODEV 3
#define EXIT_NOROOM 4
#define EXIT_LOSS 10
#define EXIT_CHILD 11
#define EXIT_CHILD_SLOW 12	/* a child's call past 1 s: known issue */

#define NBUF 12
#define MIB (1024ull * 1024ull)
#define STATUS_NS 200000000ull

struct buf {
	CUdeviceptr p;
	size_t bytes;
	uint32_t seed;		/* the pattern it holds; 0: none yet */
};

struct stats {
	uint64_t max_ns, calls, ooms, alloc_ok, launch_fail, launches;
	uint64_t checks, forks, child_fail, child_slow;
};

static volatile sig_atomic_t stop_flag, pause_flag;
static struct stats st;
static struct buf bufs[NBUF];
static CUfunction touch_fn, spin_fn;
static CUdeviceptr mismatch;	/* page-locked: the kernel's count */
static unsigned seed_state;
static int device;
static int have_ctx;
static pid_t child;
static const char *slowest = "none";

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		pause_flag = 1;
	else
		stop_flag = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Records how long the call that started at t0 took; returns r. */
static CUresult timed(const char *what, uint64_t t0, CUresult r)
{
	uint64_t dt = now_ns() - t0;

	if (dt > st.max_ns) {
		st.max_ns = dt;
		slowest = what;
	}
	st.calls++;
	return r;
}

static const char *rname(CUresult r)
{
	const char *s = NULL;

	cuGetErrorName(r, &s);
	return s ? s : "?";
}

static int fail(const char *what, CUresult r, int code)
{
	fprintf(stderr, "soak-worker %d: %s: %s\n", (int)getpid(), what,
		rname(r));
	return code;
}

static uint64_t held_bytes(void)
{
	uint64_t held = 0;

	for (int i = 0; i < NBUF; i++)
		held += bufs[i].p ? bufs[i].bytes : 0;
	return held;
}

/* The slowest call of any forked child, in a page shared with them. */
static uint64_t *child_max;

static void write_status(const char *path, int paused)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "pid %d dev %d held %llu ctx %d max_ns %llu calls %llu "
		"ooms %llu alloc_ok %llu launch_fail %llu launches %llu "
		"checks %llu forks %llu child_fail %llu child_slow %llu "
		"child_max_ns %llu paused %d slowest %s\n",
		(int)getpid(), device, (unsigned long long)held_bytes(),
		have_ctx, (unsigned long long)st.max_ns,
		(unsigned long long)st.calls, (unsigned long long)st.ooms,
		(unsigned long long)st.alloc_ok,
		(unsigned long long)st.launch_fail,
		(unsigned long long)st.launches, (unsigned long long)st.checks,
		(unsigned long long)st.forks,
		(unsigned long long)st.child_fail,
		(unsigned long long)st.child_slow,
		(unsigned long long)(child_max ? *child_max : 0), paused,
		slowest);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static int start_cuda(int dev)
{
	CUdevice d;
	CUcontext ctx;
	CUmodule mod;
	CUresult r;
	uint64_t t0;

	t0 = now_ns();
	if ((r = timed("cuInit", t0, cuInit(0))) != CUDA_SUCCESS)
		return fail("cuInit", r, EXIT_NODEV);
	t0 = now_ns();
	if ((r = timed("cuDeviceGet", t0, cuDeviceGet(&d, dev))) != CUDA_SUCCESS)
		return fail("cuDeviceGet", r, EXIT_NODEV);
	t0 = now_ns();
	if ((r = timed("cuDevicePrimaryCtxRetain", t0, cuDevicePrimaryCtxRetain(&ctx, d))) != CUDA_SUCCESS)
		return fail("cuDevicePrimaryCtxRetain", r,
			    r == CUDA_ERROR_OUT_OF_MEMORY ? EXIT_NOROOM
							  : EXIT_NODEV);
	have_ctx = 1;
	if ((r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
		return fail("cuCtxSetCurrent", r, EXIT_CUDA);
	t0 = now_ns();
	if ((r = timed("cuModuleLoadData", t0, cuModuleLoadData(&mod, vgpu_kernels_fatbin))) !=
	    CUDA_SUCCESS)
		return fail("cuModuleLoadData", r, EXIT_CUDA);
	if ((r = cuModuleGetFunction(&touch_fn, mod, "vgpu_touch")) !=
	    CUDA_SUCCESS ||
	    (r = cuModuleGetFunction(&spin_fn, mod, "vgpu_spin")) !=
	    CUDA_SUCCESS)
		return fail("cuModuleGetFunction", r, EXIT_CUDA);
	t0 = now_ns();
	if ((r = timed("cuMemAllocHost", t0, cuMemAllocHost((void **)&mismatch, 8))) !=
	    CUDA_SUCCESS)
		return fail("cuMemAllocHost", r, EXIT_CUDA);
	return 0;
}

/* vgpu_touch over b: checks b's seed (when it has one), writes `next`.
 * Returns 0 (b now holds next), 1 (an injected launch failure: b is as it
 * was), or an exit code. */
static int touch(struct buf *b, uint32_t next)
{
	uint64_t n = b->bytes / 4;
	uint32_t expect = b->seed;
	CUdeviceptr mm = expect ? mismatch : 0;
	void *params[] = { &b->p, &n, &expect, &next, &mm };
	uint64_t bad, t0;
	CUresult r;

	*(volatile uint64_t *)mismatch = 0;
	t0 = now_ns();
	r = timed("cuLaunchKernel", t0, cuLaunchKernel(touch_fn, 4, 1, 1, 64, 1, 1, 0, NULL,
				     params, NULL));
	st.launches++;
	if (r == CUDA_ERROR_LAUNCH_FAILED) {
		st.launch_fail++;
		return 1;
	}
	if (r != CUDA_SUCCESS)
		return fail("cuLaunchKernel(vgpu_touch)", r, EXIT_CUDA);
	t0 = now_ns();
	if ((r = timed("cuCtxSynchronize", t0, cuCtxSynchronize())) != CUDA_SUCCESS)
		return fail("cuCtxSynchronize", r, EXIT_CUDA);
	bad = *(volatile uint64_t *)mismatch;
	if (expect)
		st.checks++;
	if (bad) {
		fprintf(stderr, "soak-worker %d: DATA LOSS: %llu of %llu words "
			"of a %zu-byte buffer differ from seed %u\n",
			(int)getpid(), (unsigned long long)bad,
			(unsigned long long)n, b->bytes, expect);
		return EXIT_LOSS;
	}
	b->seed = next;
	return 0;
}

static uint32_t new_seed(void)
{
	return 1 + (uint32_t)rand_r(&seed_state) % 0x7ffffffe;
}

/* Allocates into a free entry: mostly within max_mib, now and then far
 * past any slice (an OOM expected), and writes its pattern. */
static int step_alloc(size_t max_mib)
{
	struct buf *b = NULL;
	size_t bytes;
	uint64_t t0;
	CUresult r;
	int rc;

	for (int i = 0; i < NBUF && !b; i++)
		if (!bufs[i].p)
			b = &bufs[i];
	if (!b)
		return 0;
	if (rand_r(&seed_state) % 20 == 0)
		bytes = 4096 * MIB;
	else
		bytes = (size_t)(64 + rand_r(&seed_state) %
				 (unsigned)(max_mib * 16)) * 64 * 1024;
	t0 = now_ns();
	r = timed("cuMemAlloc", t0, cuMemAlloc(&b->p, bytes));
	if (r == CUDA_ERROR_OUT_OF_MEMORY) {
		b->p = 0;
		st.ooms++;
		return 0;
	}
	if (r != CUDA_SUCCESS)
		return fail("cuMemAlloc", r, EXIT_CUDA);
	st.alloc_ok++;
	b->bytes = bytes;
	b->seed = 0;
	rc = touch(b, new_seed());
	return rc == 1 ? 0 : rc;
}

static struct buf *pick(int with_seed)
{
	int start = rand_r(&seed_state) % NBUF;

	for (int i = 0; i < NBUF; i++) {
		struct buf *b = &bufs[(start + i) % NBUF];

		if (b->p && (!with_seed || b->seed))
			return b;
	}
	return NULL;
}

static int step_check(void)
{
	struct buf *b = pick(1);
	int rc;

	if (!b)
		return 0;
	rc = touch(b, new_seed());
	return rc == 1 ? 0 : rc;
}

static int step_free(void)
{
	struct buf *b = pick(0);
	uint64_t t0;
	CUresult r;

	if (!b)
		return 0;
	t0 = now_ns();
	if ((r = timed("cuMemFree", t0, cuMemFree(b->p))) != CUDA_SUCCESS)
		return fail("cuMemFree", r, EXIT_CUDA);
	memset(b, 0, sizeof(*b));
	return 0;
}

static int step_spin(void)
{
	unsigned long long ns = 100000 + (unsigned)rand_r(&seed_state) % 400000;
	CUdeviceptr none = 0;
	void *params[] = { &ns, &none };
	uint64_t t0 = now_ns();
	CUresult r;

	r = timed("cuLaunchKernel", t0, cuLaunchKernel(spin_fn, 1, 1, 1, 32, 1, 1, 0, NULL,
				     params, NULL));
	st.launches++;
	if (r == CUDA_ERROR_LAUNCH_FAILED) {
		st.launch_fail++;
		return 0;
	}
	if (r != CUDA_SUCCESS)
		return fail("cuLaunchKernel(vgpu_spin)", r, EXIT_CUDA);
	if (rand_r(&seed_state) % 4 == 0) {
		t0 = now_ns();
		if ((r = timed("cuCtxSynchronize", t0, cuCtxSynchronize())) != CUDA_SUCCESS)
			return fail("cuCtxSynchronize", r, EXIT_CUDA);
	}
	return 0;
}

/* The forked child: the parent's driver state is not its own, so it starts
 * CUDA afresh, writes and checks one small buffer, and exits. */
static int child_main(void)
{
	struct buf b = { 0 };
	uint64_t t0;
	CUresult r;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 0;
	memset(bufs, 0, sizeof(bufs));
	memset(&st, 0, sizeof(st));
	have_ctx = 0;
	if ((rc = start_cuda(device)) != 0)
		return rc == EXIT_NODEV || rc == EXIT_NOROOM ? 0 : rc;
	b.bytes = 1 * MIB;
	t0 = now_ns();
	r = timed("cuMemAlloc", t0, cuMemAlloc(&b.p, b.bytes));
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return 0;
	if (r != CUDA_SUCCESS)
		return fail("child cuMemAlloc", r, EXIT_CUDA);
	for (int i = 0; i < 3; i++)
		if ((rc = touch(&b, new_seed())) > 1)
			return rc;
	if ((r = cuMemFree(b.p)) != CUDA_SUCCESS)
		return fail("child cuMemFree", r, EXIT_CUDA);
	for (uint64_t m = child_max ? *child_max : UINT64_MAX; m < st.max_ns;)
		if (__atomic_compare_exchange_n(child_max, &m, st.max_ns, false,
						__ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			break;
	if (st.max_ns > 1000000000ull) {
		fprintf(stderr, "soak-worker child %d: %s took %.3f s\n",
			(int)getpid(), slowest, st.max_ns / 1e9);
		return EXIT_CHILD_SLOW;
	}
	return 0;
}

static void reap(int block)
{
	int status;

	if (child <= 0 || waitpid(child, &status, block ? 0 : WNOHANG) <= 0)
		return;
	if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_CHILD_SLOW) {
		st.child_slow++;
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		st.child_fail++;
		fprintf(stderr, "soak-worker %d: child %d ended with %#x\n",
			(int)getpid(), (int)child, status);
	}
	child = 0;
}

static void step_fork(void)
{
	pid_t pid;

	if (child > 0)
		return;
	pid = fork();
	if (pid == 0)
		_exit(child_main());
	if (pid > 0) {
		child = pid;
		st.forks++;
	}
}

static int step(size_t max_mib)
{
	int dice = rand_r(&seed_state) % 100;

	reap(0);
	if (dice < 35)
		return step_alloc(max_mib);
	if (dice < 60)
		return step_check();
	if (dice < 82)
		return step_free();
	if (dice < 97)
		return step_spin();
	step_fork();
	return 0;
}

/* Sleeps ns, at most 1 s; a signal cuts it short. */
static void rest(uint64_t ns)
{
	struct timespec ts;

	if (ns > 1000000000ull)
		ns = 1000000000ull;
	ts.tv_sec = (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	nanosleep(&ts, NULL);
}

static void hold_still(const char *status)
{
	sigset_t none;

	sigemptyset(&none);
	reap(1);
	cuCtxSynchronize();
	write_status(status, 1);
	while (!stop_flag)
		sigsuspend(&none);
}

int main(int argc, char **argv)
{
	const char *status = "/dev/null";
	double seconds = 10;
	size_t max_mib = 8;
	double duty = 1;
	uint64_t end, next_status = 0;
	struct sigaction sa;
	int rc = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);	/* the driver's end is ours */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	seed_state = (unsigned)getpid();
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--device"))
			device = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--status"))
			status = argv[i + 1];
		else if (!strcmp(argv[i], "--seed"))
			seed_state = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--max-mib"))
			max_mib = (size_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--duty"))
			duty = atof(argv[i + 1]);
	}
	child_max = mmap(NULL, sizeof(*child_max), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (child_max == MAP_FAILED)
		child_max = NULL;
	write_status(status, 0);
	if ((rc = start_cuda(device)) != 0)
		goto out;
	end = now_ns() + (uint64_t)(seconds * 1e9);
	while (!stop_flag && now_ns() < end) {
		if (pause_flag) {
			hold_still(status);
			break;
		}
		uint64_t t0 = now_ns();

		if ((rc = step(max_mib)) != 0)
			goto out;
		if (duty > 0 && duty < 1)
			rest((now_ns() - t0) * (1 - duty) / duty);
		if (now_ns() >= next_status) {
			write_status(status, 0);
			next_status = now_ns() + STATUS_NS;
		}
	}
	reap(1);
	if (st.child_fail)
		rc = EXIT_CHILD;
out:
	write_status(status, pause_flag);
	return rc;
}
