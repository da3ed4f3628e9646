/* hipshim.c - the HIP shim suites' helpers (hipshim.h). */
#include "hipshim.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void hs_setup(const char *tenant, const char *limit, const char *sim_memory)
{
	CUcontext ctx;

	simtest_clean_env();
	unsetenv("VGPU_MEMORY_LIMIT");
	setenv("VGPU_SIM_MEMORY", sim_memory ? sim_memory : "1GiB", 1);
	shimtest_env(tenant, limit);
	CU_OK(cuInit(0));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
}

void hs_cleanup(void)
{
	shimtest_cleanup();
	simtest_remove_state();
}

void hjob_start_err(struct hjob *j, const char *const *env, bool err)
{
	int to[2], from[2];

	cr_assert_eq(pipe(to), 0);
	cr_assert_eq(pipe(from), 0);
	j->pid = fork();
	cr_assert_geq(j->pid, 0);
	if (j->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		if (err)
			dup2(from[1], 2);
		close(to[1]);
		close(from[0]);
		setenv("LD_LIBRARY_PATH", VHIP_LIB_PATH, 1);
		setenv("LD_PRELOAD", HIP_SHIM, 1);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execl(VHIP_JOB, VHIP_JOB, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	j->in = fdopen(to[1], "w");
	j->out = fdopen(from[0], "r");
	cr_assert(j->in && j->out);
}

void hjob_start(struct hjob *j, const char *const *env)
{
	hjob_start_err(j, env, false);
}

void hjob_send(struct hjob *j, const char *cmd)
{
	fprintf(j->in, "%s\n", cmd);
	fflush(j->in);
}

void hjob_reply(struct hjob *j, char *buf, size_t len)
{
	cr_assert_not_null(fgets(buf, (int)len, j->out), "job %d: no reply",
			   (int)j->pid);
	buf[strcspn(buf, "\n")] = 0;
}

void hjob_cmd(struct hjob *j, const char *cmd, char *buf, size_t len)
{
	hjob_send(j, cmd);
	hjob_reply(j, buf, len);
}

void hjob_expect(struct hjob *j, const char *cmd, const char *want)
{
	char buf[256];

	hjob_cmd(j, cmd, buf, sizeof(buf));
	cr_assert_str_eq(buf, want, "%s", cmd);
}

int hjob_alloc(struct hjob *j, unsigned long long size, const char *path,
	       int *id)
{
	char cmd[96], buf[256];
	int rc, n;

	snprintf(cmd, sizeof(cmd), "alloc %llu %s", size, path);
	hjob_cmd(j, cmd, buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "alloc %d id=%d", &rc, &n), 2, "%s: %s", cmd,
		     buf);
	if (id)
		*id = n;
	return rc;
}

static void reap(struct hjob *j, int *status)
{
	fclose(j->in);
	fclose(j->out);
	cr_assert_eq(waitpid(j->pid, status, 0), j->pid);
}

void hjob_end(struct hjob *j)
{
	int status;

	hjob_expect(j, "exit", "exit 0");
	reap(j, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "job %d: status %#x", (int)j->pid, status);
}

void hjob_kill(struct hjob *j)
{
	int status;

	cr_assert_eq(kill(j->pid, SIGKILL), 0);
	reap(j, &status);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

int hjob_pid(struct hjob *j)
{
	char buf[128];
	int pid;

	hjob_cmd(j, "pid", buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "pid 0 pid=%d", &pid), 1, "%s", buf);
	return pid;
}

uint64_t hs_device_used(void)
{
	size_t fr = 0, total = 0;

	CU_OK(cuMemGetInfo(&fr, &total));
	return total - fr;
}

uint64_t hs_tenant_used(const char *tenant)
{
	struct ledger_view v;
	uint64_t n = 0;

	if (!ledger_view_open(&v, shimtest_ledger_dir(), NULL))
		return 0;
	if (ledger_tenant(&v, tenant))
		n = ledger_tenant_bytes(&v, tenant, VGPU_USAGE_COUNT);
	ledger_view_close(&v);
	return n;
}

unsigned hs_seed(void)
{
	const char *s = getenv("HS_SEED");
	struct timespec ts;
	unsigned seed;

	clock_gettime(CLOCK_REALTIME, &ts);
	seed = s ? (unsigned)strtoul(s, NULL, 0)
		 : (unsigned)(ts.tv_nsec ^ getpid());
	cr_log_info("seed %u (HS_SEED=%u repeats it)", seed, seed);
	fprintf(stderr, "seed %u (HS_SEED=%u repeats it)\n", seed, seed);
	return seed;
}
