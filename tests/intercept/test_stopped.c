/* test_stopped.c - a stopped process blocks no other tenant (issue 14, item
 * 3): a process group starting jobs in a loop is stopped (SIGSTOP) at random
 * moments, while another tenant starts jobs; in 20 rounds none of the other
 * tenant's jobs is refused, and none takes a second.
 *
 * A job is this program run anew (VGPU_TEST_STOPPED_JOB set: the
 * constructor below runs it, then exits): cuInit, a context, a module, then
 * eight times cuMemAlloc, cuMemGetInfo, a kernel launched and waited for,
 * cuMemFree; exit. Each tenant is under a memory limit. Tenant A's jobs run
 * three at a time, each loop starting one after another, in a process group
 * the test stops at random moments (seeded: STOPPED_SEED, default 1), so it
 * is caught anywhere in a job, the shim's and the simulator's code alike;
 * every fourth round the group is killed instead of continued, and started
 * anew. While it is stopped, one job of tenant B runs and is timed.
 *
 * Three ways, to tell where a delay comes from: under the shim (the
 * ledger and the simulated device), under the shim with VGPU_DISABLE (the
 * shim passes everything through), and on the plain simulator (no shim).
 * At the end the simulated device counts nothing: every job is gone.
 */
#include "shimtest.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 20
#define KILL_EVERY 4
#define SLOW_NS 1000000000ull         /* a job of B takes less */
#define WATCHDOG_NS 5000000000ull     /* A continued: B's job then ends */
#define JOB_LIMIT_NS 20000000000ull   /* B's job killed: it hung */
#define RUN_MS 60                     /* A runs up to this between stops */
#define JOB_BYTES (16 * MIB)
#define JOB_REPEAT 8
#define A_LOOPS 3                     /* A's jobs at a time */
#define JOB_VAR "VGPU_TEST_STOPPED_JOB"

/* ---- the job ------------------------------------------------------------- */

/* A kernel with no host form: a no-op of VGPU_SIM_KERNEL_NS. */
static const char nop_ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry stopped_nop()\n"
	"{ ret; }\n";

static int job_step(CUresult rc, int step, const char *what)
{
	const char *name = NULL;

	if (rc == CUDA_SUCCESS)
		return 0;
	cuGetErrorName(rc, &name);
	fprintf(stderr, "job %d: %s: %s\n", (int)getpid(), what,
		name ? name : "?");
	return step;
}

static int job(void)
{
	CUdeviceptr p;
	CUcontext ctx;
	CUmodule m;
	CUfunction f;
	int rc;

	if ((rc = job_step(cuInit(0), 10, "cuInit")) ||
	    (rc = job_step(cuDevicePrimaryCtxRetain(&ctx, 0), 11,
			   "cuDevicePrimaryCtxRetain")) ||
	    (rc = job_step(cuCtxSetCurrent(ctx), 12, "cuCtxSetCurrent")) ||
	    (rc = job_step(cuModuleLoadData(&m, nop_ptx), 13,
			   "cuModuleLoadData")) ||
	    (rc = job_step(cuModuleGetFunction(&f, m, "stopped_nop"), 14,
			   "cuModuleGetFunction")))
		return rc;
	/* A few of each: more of a job's time is in what processes share. */
	for (int i = 0; i < JOB_REPEAT; i++) {
		size_t fr, total;

		if ((rc = job_step(cuMemAlloc(&p, JOB_BYTES), 15,
				   "cuMemAlloc")) ||
		    (rc = job_step(cuMemGetInfo(&fr, &total), 16,
				   "cuMemGetInfo")) ||
		    (rc = job_step(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0,
						  NULL, NULL, NULL), 17,
				   "cuLaunchKernel")) ||
		    (rc = job_step(cuCtxSynchronize(), 18,
				   "cuCtxSynchronize")) ||
		    (rc = job_step(cuMemFree(p), 19, "cuMemFree")))
			return rc;
	}
	return 0;
}

__attribute__((constructor)) static void job_main(void)
{
	if (getenv(JOB_VAR))
		_exit(job());
}

/* ---- starting jobs ------------------------------------------------------- */

enum mode { SHIM, SHIM_DISABLED, PLAIN_SIM };

#define ENV_MAX 512

/* The environment of a job of tenant: this one's, with the tenant's
 * options, and per mode the shim on, passed through, or away. */
static char **job_env(enum mode mode, const char *tenant)
{
	extern char **environ;
	static char tenant_var[128];
	static char *env[ENV_MAX];
	size_t n = 0;

	snprintf(tenant_var, sizeof(tenant_var), "VGPU_TENANT=%s", tenant);
	for (char **e = environ; *e && n < ENV_MAX - 8; e++) {
		if (strncmp(*e, "VGPU_TENANT=", 12) == 0 ||
		    strncmp(*e, "VGPU_MEMORY_LIMIT=", 18) == 0 ||
		    strncmp(*e, "VGPU_DISABLE=", 13) == 0 ||
		    strncmp(*e, "LD_LIBRARY_PATH=", 16) == 0 ||
		    (mode == PLAIN_SIM && strncmp(*e, "LD_PRELOAD=", 11) == 0))
			continue;
		env[n++] = *e;
	}
	env[n++] = tenant_var;
	env[n++] = "VGPU_MEMORY_LIMIT=256MiB";
	env[n++] = JOB_VAR "=1";
	if (mode == SHIM_DISABLED)
		env[n++] = "VGPU_DISABLE=1";
	if (mode == PLAIN_SIM)
		env[n++] = "LD_LIBRARY_PATH=" SHIMTEST_SIM_DIR;
	env[n] = NULL;
	return env;
}

/* Starts a job; its stderr into err_fd (-1: as ours). */
static pid_t job_start(char **env, int err_fd)
{
	static char *argv[] = { "test-intercept-stopped-job", NULL };
	pid_t pid = fork();

	if (pid == 0) {
		if (err_fd >= 0)
			dup2(err_fd, STDERR_FILENO);
		execve("/proc/self/exe", argv, env);
		_exit(127);
	}
	return pid;
}

/* ---- tenant A: jobs in a loop, in a group of its own --------------------- */

struct a_stats {
	_Atomic unsigned long jobs, failed;
};

static struct a_stats *a_stats;

static void a_loop(char **env)
{
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);	/* the test failed */
	for (int i = 1; i < A_LOOPS; i++)
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			break;
		}
	for (;;) {
		pid_t pid = job_start(env, -1);
		int status;

		if (pid < 0 || waitpid(pid, &status, 0) != pid)
			_exit(1);
		atomic_fetch_add(&a_stats->jobs, 1);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			atomic_fetch_add(&a_stats->failed, 1);
	}
}

static pid_t a_start(char **env)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		a_loop(env);
	setpgid(pid, pid);
	return pid;
}

static void a_stop(pid_t group)
{
	int status;

	cr_assert_eq(kill(-group, SIGSTOP), 0);
	cr_assert_eq(waitpid(group, &status, WUNTRACED), group);
	cr_assert(WIFSTOPPED(status), "tenant A's loop ended (%d)", status);
	simtest_sleep_ms(2);	/* its job too */
}

static void a_kill(pid_t group)
{
	kill(-group, SIGKILL);
	kill(-group, SIGCONT);
	waitpid(group, NULL, 0);
}

/* The watchdog: A stopped this long is continued, so that a job of B that
 * waits for it ends (and fails the test by its time) rather than hangs. */
static _Atomic pid_t watch_group;
static _Atomic uint64_t watch_since;

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		pid_t g = atomic_load(&watch_group);

		if (g && simtest_now_ns() - atomic_load(&watch_since) >
			 WATCHDOG_NS)
			kill(-g, SIGCONT);
		simtest_sleep_ms(10);
	}
	return NULL;
}

static void watch(pid_t group)
{
	static pthread_t thread;

	if (!thread)
		cr_assert_eq(pthread_create(&thread, NULL, watchdog, NULL), 0);
	atomic_store(&watch_since, simtest_now_ns());
	atomic_store(&watch_group, group);
}

/* ---- tenant B: one job, timed -------------------------------------------- */

struct b_result {
	int status;            /* exit code, or 128 + signal */
	uint64_t ns;
	char err[1024];        /* its stderr */
};

static void b_job(char **env, struct b_result *r)
{
	uint64_t t0 = simtest_now_ns();
	int fds[2], status = 0;
	ssize_t n;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = job_start(env, fds[1]);
	close(fds[1]);
	cr_assert_geq(pid, 0);
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (simtest_now_ns() - t0 > JOB_LIMIT_NS)
			kill(pid, SIGKILL);
		simtest_sleep_ms(1);
	}
	r->ns = simtest_now_ns() - t0;
	r->status = WIFEXITED(status) ? WEXITSTATUS(status)
				      : 128 + WTERMSIG(status);
	n = read(fds[0], r->err, sizeof(r->err) - 1);
	r->err[n > 0 ? n : 0] = '\0';
	close(fds[0]);
}

/* ---- the rounds ---------------------------------------------------------- */

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

static const char *const mode_name[] = {
	[SHIM] = "the shim", [SHIM_DISABLED] = "the shim disabled",
	[PLAIN_SIM] = "the plain simulator",
};

static void stopped_rounds(enum mode mode)
{
	const char *s_env = getenv("STOPPED_SEED");
	unsigned seed = s_env ? (unsigned)strtoul(s_env, NULL, 0) : 1, s = seed;
	char **env_a, **env_b;
	uint64_t slowest = 0, total = 0;
	size_t fr, tot;
	CUcontext ctx;
	pid_t a;

	a_stats = mmap(NULL, sizeof(*a_stats), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(a_stats, MAP_FAILED);
	/* This process reads the device's truth at the end. */
	CU_OK(cuInit(0));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuMemGetInfo(&fr, &tot));
	env_a = job_env(mode, "stopped-a");
	a = a_start(env_a);
	for (int r = 0; r < ROUNDS; r++) {
		struct b_result res;

		simtest_sleep_ms(5 + rnd(&s) % RUN_MS);
		watch(a);
		a_stop(a);
		env_b = job_env(mode, "stopped-b");
		b_job(env_b, &res);
		watch(0);
		cr_assert_eq(res.status, 0, "%s, round %d: tenant B's job "
			     "failed (%d) after %llu ms (seed %u): %s",
			     mode_name[mode], r, res.status,
			     (unsigned long long)(res.ns / 1000000), seed,
			     res.err);
		cr_assert_lt(res.ns, SLOW_NS, "%s, round %d: tenant B's job "
			     "took %llu ms (seed %u): %s", mode_name[mode], r,
			     (unsigned long long)(res.ns / 1000000), seed,
			     res.err);
		slowest = res.ns > slowest ? res.ns : slowest;
		total += res.ns;
		if (r % KILL_EVERY == KILL_EVERY - 1) {
			a_kill(a);
			env_a = job_env(mode, "stopped-a");
			a = a_start(env_a);
		} else {
			cr_assert_eq(kill(-a, SIGCONT), 0);
		}
	}
	a_kill(a);
	cr_log_info("%s, seed %u: B's slowest job %llu ms, %llu ms in all; A "
		    "ran %lu jobs to their end (%lu failed)", mode_name[mode],
		    seed, (unsigned long long)(slowest / 1000000),
		    (unsigned long long)(total / 1000000),
		    atomic_load(&a_stats->jobs), atomic_load(&a_stats->failed));
	/* Killed processes drop their slots' locks as they finish dying,
	 * which can take the kernel some milliseconds after the signal. */
	for (int i = 0; i < 1000 && shimtest_device_used() != 0; i++)
		simtest_sleep_ms(1);
	cr_assert_eq(shimtest_device_used(), 0, "%s: the device counts %llu "
		     "bytes with every job gone (seed %u)", mode_name[mode],
		     (unsigned long long)shimtest_device_used(), seed);
}

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "4GiB", 1);
	shimtest_env(NULL, NULL);
}

TestSuite(stopped, .init = setup, .fini = shimtest_cleanup, .timeout = 110);

Test(stopped, shim)
{
	stopped_rounds(SHIM);
}

Test(stopped, shim_disabled)
{
	stopped_rounds(SHIM_DISABLED);
}

Test(stopped, plain_sim)
{
	stopped_rounds(PLAIN_SIM);
}
