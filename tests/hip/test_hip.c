/* test_hip.c - HIP programs built by hipcc on the simulated HIP device.
 *
 * hip_job (tests/hip/hip_job.hip) runs with build/sim/hip first in
 * LD_LIBRARY_PATH, no shim. This test process is a CUDA process on the
 * same simulated device (simtest_init_shared): it checks what the HIP
 * process did against the device's own count and record.
 */
#include "simtest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(hip, .init = simtest_clean_env, .fini = simtest_remove_state);

struct job {
	pid_t pid;
	FILE *in, *out;
};

static void job_start(struct job *j)
{
	int to[2], from[2];

	cr_assert_eq(pipe(to), 0);
	cr_assert_eq(pipe(from), 0);
	setenv("LD_LIBRARY_PATH", VHIP_LIB_PATH, 1);
	j->pid = fork();
	cr_assert_geq(j->pid, 0);
	if (j->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execl(VHIP_JOB, VHIP_JOB, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	j->in = fdopen(to[1], "w");
	j->out = fdopen(from[0], "r");
	cr_assert(j->in && j->out);
}

/* Sends one command; its reply line in buf. */
static void job_cmd(struct job *j, const char *cmd, char *buf, size_t len)
{
	fprintf(j->in, "%s\n", cmd);
	fflush(j->in);
	cr_assert_not_null(fgets(buf, (int)len, j->out), "%s: no reply", cmd);
}

/* Sends cmd and asserts the reply is exactly want. */
static void job_expect(struct job *j, const char *cmd, const char *want)
{
	char buf[256];

	job_cmd(j, cmd, buf, sizeof(buf));
	buf[strcspn(buf, "\n")] = 0;
	cr_assert_str_eq(buf, want, "%s", cmd);
}

static void job_end(struct job *j)
{
	int status;

	job_expect(j, "exit", "exit 0");
	fclose(j->in);
	fclose(j->out);
	cr_assert_eq(waitpid(j->pid, &status, 0), j->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void memgetinfo(struct job *j, size_t *fr, size_t *total)
{
	char buf[256];

	job_cmd(j, "memgetinfo", buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "memgetinfo 0 free=%zu total=%zu", fr, total),
		     2, "%s", buf);
}

Test(hip, copies_round_trip)
{
	struct job j;

	simtest_init_shared();
	job_start(&j);
	job_expect(&j, "alloc 1M", "alloc 0 id=0");
	job_expect(&j, "copy 0", "copy 0 bad=0");
	job_expect(&j, "alloc 65536 managed", "alloc 0 id=1");
	job_expect(&j, "copy 1", "copy 0 bad=0");
	job_expect(&j, "free 0", "free 0");
	job_expect(&j, "free 1", "free 0");
	job_end(&j);
}

Test(hip, touch_writes_the_pattern)
{
	struct job j;

	simtest_init_shared();
	job_start(&j);
	job_expect(&j, "alloc 1M", "alloc 0 id=0");
	job_expect(&j, "touch 0 7", "touch 0 bad=0");
	job_expect(&j, "touch 0 8", "touch 0 bad=0");
	job_expect(&j, "saxpy 4096", "saxpy 0 bad=0");
	job_expect(&j, "free 0", "free 0");
	job_end(&j);
}

Test(hip, every_allocation_path)
{
	static const char *const paths[] = { "malloc", "pitch", "3d",
		"managed", "ext", "async", "array", "host" };
	char cmd[64], want[64];
	struct job j;

	simtest_init_shared();
	job_start(&j);
	for (int i = 0; i < 8; i++) {
		snprintf(cmd, sizeof(cmd), "alloc 65536 %s", paths[i]);
		snprintf(want, sizeof(want), "alloc 0 id=%d", i);
		job_expect(&j, cmd, want);
	}
	for (int i = 0; i < 8; i++) {
		snprintf(cmd, sizeof(cmd), "free %d", i);
		job_expect(&j, cmd, "free 0");
	}
	job_expect(&j, "alloc 1G", "alloc 2 id=-1");   /* hipErrorOutOfMemory */
	job_expect(&j, "sync", "sync 0");
	job_end(&j);
}

/* The HIP process's kernels are the device's: in its record, as long as
 * asked, under the job's pid. */
Test(hip, spin_takes_device_time)
{
	struct simtest_record r;
	struct job j;
	char buf[256];
	int pid;

	simtest_init_shared();
	job_start(&j);
	job_cmd(&j, "pid", buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "pid 0 pid=%d", &pid), 1);
	job_cmd(&j, "spin 2000 4", buf, sizeof(buf));
	cr_assert_eq(strncmp(buf, "spin 0 ", 7), 0, "%s", buf);
	job_end(&j);
	simtest_record_read(&r, getenv("VGPU_SIM_STATE_DIR"));
	cr_assert_eq(simtest_record_count(&r, pid), 4);
	cr_assert_geq(simtest_record_busy(&r, pid, 0, UINT64_MAX),
		      4ull * 2000 * 1000);
	simtest_record_free(&r);
}

/* One device: the CUDA process sees the HIP process's memory, and the
 * reverse, in the same count. */
Test(hip, one_device_for_hip_and_cuda)
{
	size_t cu_free, cu_total, h_free, h_total, base;
	CUdeviceptr d;
	struct job j;

	simtest_init_shared();
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	job_start(&j);
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_total, cu_total);
	cr_assert_eq(h_free, cu_free);
	base = cu_free;

	job_expect(&j, "alloc 4M", "alloc 0 id=0");
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	cr_assert_eq(cu_free, base - 4 * MIB);

	CU_OK(cuMemAlloc(&d, 8 * MIB));
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_free, base - 12 * MIB);

	job_expect(&j, "free 0", "free 0");
	CU_OK(cuMemFree(d));
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_free, base);
	job_end(&j);
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	cr_assert_eq(cu_free, base);
}
