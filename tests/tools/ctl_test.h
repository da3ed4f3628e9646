/* ctl_test.h - what vgpu-ctl's end-to-end tests share (test_ctl.c,
 * test_ctl_compute.c): running vgpu-ctl, and a job under vgpu-run on the
 * simulated GPU that answers commands on its stdin (tools-ctl-job).
 */
#ifndef VGPU_CTL_TEST_H
#define VGPU_CTL_TEST_H

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtest.h"

#define CTL TEST_VGPU_CTL
#define VRUN TEST_VGPU_RUN

static inline uint64_t ctl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void ctl_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* vgpu-ctl ARGS..., asserting its exit code. */
#define CTL_RUN(r, code, ...) do {					\
	RUN((r), CTL, __VA_ARGS__);					\
	cr_assert(runtest_exited((r), (code)), "vgpu-ctl status %#x, "	\
		  "expected exit %d\nout: %s\nerr: %s", (r)->status,	\
		  (code), (r)->out, (r)->err);				\
} while (0)

/* A job answering commands (tools-ctl-job under vgpu-run --sim). */
struct ctl_job {
	pid_t pid;
	FILE *in, *out;
};

static inline void ctl_job_start(struct ctl_job *j, char *const argv[])
{
	int in[2], out[2];
	char line[128];

	cr_assert_eq(pipe(in), 0);
	cr_assert_eq(pipe(out), 0);
	j->pid = fork();
	cr_assert_geq(j->pid, 0);
	if (j->pid == 0) {
		/* Never outlives the test (a job left suspended waits). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[1]);
		close(out[0]);
		execv(argv[0], argv);
		_exit(99);
	}
	close(in[0]);
	close(out[1]);
	j->in = fdopen(in[1], "w");
	j->out = fdopen(out[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), j->out),
			   "the job said nothing");
	cr_assert(strncmp(line, "ready ", 6) == 0, "the job said: %s", line);
}

/* Sends one command; its one-line answer in ans (no newline). */
static inline void ctl_job_cmd(struct ctl_job *j, const char *cmd, char *ans,
			       size_t len)
{
	fprintf(j->in, "%s\n", cmd);
	fflush(j->in);
	cr_assert_not_null(fgets(ans, (int)len, j->out), "no answer to %s",
			   cmd);
	ans[strcspn(ans, "\n")] = '\0';
}

static inline void ctl_job_stop(struct ctl_job *j)
{
	int status;

	fclose(j->in);
	cr_assert_eq(waitpid(j->pid, &status, 0), j->pid);
	fclose(j->out);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "job status %#x", status);
}

/* ---- the simulated device's used memory (its NVML) ----------------------- */

struct nvml_memory {
	unsigned long long total, free, used;
};

static inline uint64_t device_used(void)
{
	static int (*init)(void);
	static int (*get)(unsigned, void **);
	static int (*info)(void *, struct nvml_memory *);
	struct nvml_memory m;
	void *dev;

	if (!init) {
		void *h = dlopen(TEST_SIM_DIR "/libnvidia-ml.so.1", RTLD_NOW);

		cr_assert_not_null(h, "%s", dlerror());
		init = (int (*)(void))dlsym(h, "nvmlInit_v2");
		get = (int (*)(unsigned, void **))dlsym(h,
				"nvmlDeviceGetHandleByIndex_v2");
		info = (int (*)(void *, struct nvml_memory *))dlsym(h,
				"nvmlDeviceGetMemoryInfo");
		cr_assert(init && get && info);
		cr_assert_eq(init(), 0);
	}
	cr_assert_eq(get(0, &dev), 0);
	cr_assert_eq(info(dev, &m), 0);
	return m.used;
}

#endif /* VGPU_CTL_TEST_H */
