/* test_vgpu_run_exec.c - vgpu-run itself, on the simulated GPU: what the
 * command gets (its slice, its preload, its GPU), what is the command's own
 * (exit status, signals, pid), vgpu-run's exit codes, placement by the
 * ledgers of jobs that hold their GPUs, and --install-preload.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtest.h"

#define VRUN TEST_VGPU_RUN
#define SH "/bin/sh"

static struct run_result r;

static void setup(void)
{
	runtest_setup("4GiB", 3);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
}

TestSuite(run_exec, .init = setup, .fini = runtest_cleanup, .timeout = 60);

static const char *shim_path(void)
{
	static char real[PATH_MAX];

	cr_assert_not_null(realpath(TEST_SHIM, real));
	return real;
}

/* ---- the command's own ----------------------------------------------------- */

Test(run_exec, exit_status_is_the_commands)
{
	RUN(&r, VRUN, "--sim", "--", SH, "-c", "exit 7");
	cr_assert(runtest_exited(&r, 7), "status %#x: %s", r.status, r.err);
	RUN(&r, VRUN, "--sim", SH, "-c", "exit 0");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
}

Test(run_exec, signal_is_the_commands)
{
	RUN(&r, VRUN, "--sim", "--", SH, "-c", "kill -TERM $$; sleep 5");
	cr_assert(runtest_killed(&r, SIGTERM), "status %#x: %s", r.status,
		  r.err);
	RUN(&r, VRUN, "--memory", "1GiB", "--", SH, "-c", "kill -KILL $$");
	cr_assert(runtest_killed(&r, SIGKILL), "status %#x", r.status);
}

Test(run_exec, exec_keeps_the_pid)
{
	char want[32];

	RUN(&r, VRUN, "--sim", "--", SH, "-c", "echo $$");
	snprintf(want, sizeof(want), "%d\n", (int)r.pid);
	cr_assert_str_eq(r.out, want, "no child process in between");
}

/* ---- the environment -------------------------------------------------------- */

Test(run_exec, options_become_variables)
{
	RUN(&r, VRUN, "--memory", "4096m", "--compute", "30", "--policy",
	    "elastic", "--overcommit", "host", "--tenant", "job-7", "--",
	    "/usr/bin/env");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "\nVGPU_MEMORY_LIMIT=4096m\n"), "%s", r.out);
	cr_assert(strstr(r.out, "\nVGPU_COMPUTE_LIMIT=30\n"));
	cr_assert(strstr(r.out, "\nVGPU_COMPUTE_POLICY=elastic\n"));
	cr_assert(strstr(r.out, "\nVGPU_OVERCOMMIT=host\n"));
	cr_assert(strstr(r.out, "\nVGPU_TENANT=job-7\n"));
	cr_assert_null(strstr(r.out, "CUDA_VISIBLE_DEVICES="), "no --gpu");
	cr_assert_null(strstr(r.out, "VGPU_REAL_LIBCUDA="), "no --sim");
}

Test(run_exec, preload_added)
{
	char want[PATH_MAX + 16];

	RUN(&r, VRUN, "--", SH, "-c", "printf %s \"$LD_PRELOAD\"");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert_str_eq(r.out, shim_path());
	snprintf(want, sizeof(want), "%s:%s", shim_path(), TEST_NEXT);
	setenv("LD_PRELOAD", TEST_NEXT, 1);
	RUN(&r, VRUN, "--", SH, "-c", "printf %s \"$LD_PRELOAD\"");
	cr_assert_str_eq(r.out, want, "merged with the existing value");
	snprintf(want, sizeof(want), "%s %s", TEST_NEXT, shim_path());
	setenv("LD_PRELOAD", want, 1);
	snprintf(want, sizeof(want), "%s:%s", shim_path(), TEST_NEXT);
	RUN(&r, VRUN, "--", SH, "-c", "printf %s \"$LD_PRELOAD\"");
	cr_assert_str_eq(r.out, want, "no duplicate");
}

Test(run_exec, library_override)
{
	setenv("VGPU_LIBRARY", TEST_SHIM, 1);
	RUN(&r, VRUN, "--", "/usr/bin/env");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert_null(strstr(r.out, "VGPU_LIBRARY="), "not passed on");
	setenv("VGPU_LIBRARY", "/nonexistent/libvgpu.so", 1);
	RUN(&r, VRUN, "--", "/bin/true");
	cr_assert(runtest_exited(&r, 69), "status %#x", r.status);
	cr_assert(strstr(r.err, "VGPU_LIBRARY"), "%s", r.err);
}

/* ---- the slice -------------------------------------------------------------- */

Test(run_exec, slice_applies)
{
	RUN(&r, VRUN, "--sim", "--memory", "512MiB", "--", TEST_HELPER,
	    "probe", "268435456", "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=536870912 devtotal=536870912"), "%s",
		  r.out);
	cr_assert(strstr(r.out, "a=0 b=2"), "the second allocation is past "
		  "the slice: %s", r.out);
}

Test(run_exec, entrypoint_reads_the_environment)
{
	setenv("VGPU_MEMORY_LIMIT", "256MiB", 1);
	setenv("VGPU_REAL_LIBCUDA", TEST_SIM_LIBCUDA, 1);
	RUN(&r, VRUN, TEST_HELPER, "probe", "1", "1");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=268435456"), "%s", r.out);
}

Test(run_exec, verbose)
{
	RUN(&r, VRUN, "--sim", "--verbose", "--memory", "1GiB", "--",
	    TEST_HELPER, "join");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.err, "vgpu-run: VGPU_MEMORY_LIMIT=1GiB"), "%s",
		  r.err);
	cr_assert(strstr(r.err, "vgpu-run: exec "), "%s", r.err);
	cr_assert(strstr(r.err, "option VGPU_MEMORY_LIMIT=1GiB"),
		  "libvgpu's own dump: %s", r.err);
}

/* ---- vgpu-run's own exit codes ------------------------------------------------ */

Test(run_exec, bad_values_run_nothing)
{
	char *flag = runtest_path("ran");

	RUN(&r, VRUN, "--memory", "8GB", "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 65), "status %#x", r.status);
	cr_assert(strstr(r.err, "--memory \"8GB\" has an unknown unit"), "%s",
		  r.err);
	cr_assert_neq(access(flag, F_OK), 0, "the command did not run");

	setenv("CUDA_DEVICE_SM_LIMIT", "lots", 1);
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 65), "status %#x", r.status);
	cr_assert(strstr(r.err, "CUDA_DEVICE_SM_LIMIT=\"lots\""), "%s", r.err);
	cr_assert_neq(access(flag, F_OK), 0);

	setenv("VGPU_ON_ERROR", "warn", 1);	/* as the library: goes on */
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert_eq(access(flag, F_OK), 0);
}

/* A variable that names no option counts as a bad one: refused by name
 * with the closest option (exit 65, nothing run), or under
 * VGPU_ON_ERROR=warn a warning and the command runs. */
Test(run_exec, unknown_names_run_nothing)
{
	static const char *const names[][2] = {
		{ "VGPU_MEMROY_LIMIT", "vgpu-run: VGPU_MEMROY_LIMIT is not a "
		  "known option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "VGPU_MEMORY_LIMIT_64", "vgpu-run: VGPU_MEMORY_LIMIT_64 is "
		  "not a known option: device 64 is out of range "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
		{ "VGPU_MEMORY_LIMIT_x", "vgpu-run: VGPU_MEMORY_LIMIT_x is not "
		  "a known option: \"x\" is not a device index "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
	};
	char *flag = runtest_path("ran");

	for (size_t i = 0; i < 3; i++) {
		setenv(names[i][0], "1GiB", 1);
		RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
		cr_assert(runtest_exited(&r, 65), "%s: status %#x: %s",
			  names[i][0], r.status, r.err);
		cr_assert(strstr(r.err, names[i][1]), "%s", r.err);
		cr_assert(strstr(r.err, "vgpu-run: fix the variable above, or "
				 "set VGPU_ON_ERROR=warn to run as if it "
				 "was unset\n"), "%s", r.err);
		cr_assert_neq(access(flag, F_OK), 0, "the command did not run");
		unsetenv(names[i][0]);
	}

	setenv("VGPU_MEMROY_LIMIT", "1GiB", 1);
	setenv("VGPU_MEMORY_LIMIT_64", "1GiB", 1);
	setenv("VGPU_ON_ERROR", "warn", 1);
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, names[0][1]), "%s", r.err);
	cr_assert(strstr(r.err, names[1][1]), "%s", r.err);
	cr_assert(strstr(r.err, "vgpu-run: warning: VGPU_ON_ERROR=warn: going "
			 "on as if the variables above were unset\n"), "%s",
		  r.err);
	cr_assert_eq(access(flag, F_OK), 0, "the command ran");
}

/* A HAMi name misspelt is outside the VGPU_ namespace: a warning naming
 * the HAMi variable meant, as the library gives it, and the command runs.
 * VGPU_ alone is a name cut short: refused. */
Test(run_exec, misspelt_hami_names_warn_prefix_alone_refused)
{
	char *flag = runtest_path("ran");

	setenv("CUDA_DEVICE_MEMORY_LIMT", "1g", 1);
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert_str_eq(r.err, "vgpu-run: warning: CUDA_DEVICE_MEMORY_LIMT "
			 "is not a HAMi variable; did you mean "
			 "CUDA_DEVICE_MEMORY_LIMIT? (ignored)\n");
	cr_assert_eq(access(flag, F_OK), 0, "the command ran");
	unsetenv("CUDA_DEVICE_MEMORY_LIMT");
	unlink(flag);
	setenv("VGPU_", "1", 1);
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 65), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "vgpu-run: VGPU_ is not a known option: "
			 "nothing follows the prefix\n"), "%s", r.err);
	cr_assert_neq(access(flag, F_OK), 0, "the command did not run");
}

/* A size of 2^64 - 1 bytes is too large, not "unlimited". */
Test(run_exec, overflowing_sizes_run_nothing)
{
	char *flag = runtest_path("ran");

	setenv("VGPU_MEMORY_LIMIT", "18446744073709551615", 1);
	RUN(&r, VRUN, "--", "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 65), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "vgpu-run: VGPU_MEMORY_LIMIT=\""
			 "18446744073709551615\" is too large; expected "),
		  "%s", r.err);
	cr_assert_neq(access(flag, F_OK), 0, "the command did not run");
	unsetenv("VGPU_MEMORY_LIMIT");
	RUN(&r, VRUN, "--memory", "18446744073709551615", "--",
	    "/usr/bin/touch", flag);
	cr_assert(runtest_exited(&r, 65), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "is too large"), "%s", r.err);
	cr_assert_neq(access(flag, F_OK), 0, "the command did not run");
}

Test(run_exec, usage_errors)
{
	RUN(&r, VRUN, "--memory", "1GiB");
	cr_assert(runtest_exited(&r, 64), "status %#x", r.status);
	cr_assert(strstr(r.err, "no command"), "%s", r.err);
	RUN(&r, VRUN, "--nope", "/bin/true");
	cr_assert(runtest_exited(&r, 64));
	RUN(&r, VRUN, "--help");
	cr_assert(runtest_exited(&r, 0));
	cr_assert(strstr(r.out, "usage: vgpu-run"), "%s", r.out);
}

Test(run_exec, command_not_found_or_not_executable)
{
	RUN(&r, VRUN, "--", "no-such-command-here");
	cr_assert(runtest_exited(&r, 127), "status %#x", r.status);
	cr_assert(strstr(r.err, "cannot run no-such-command-here"), "%s",
		  r.err);
	FILE *f = fopen(runtest_path("plain"), "w");
	cr_assert_not_null(f);
	fclose(f);
	chmod(runtest_path("plain"), 0644);
	RUN(&r, VRUN, "--", runtest_path("plain"));
	cr_assert(runtest_exited(&r, 126), "status %#x", r.status);
}

/* ---- choosing a GPU --------------------------------------------------------- */

/* The UUID of simulated GPU i, as vgpu-run --gpu i sets it. */
static void uuid_of(int i, char *out, size_t len)
{
	char idx[12];

	snprintf(idx, sizeof(idx), "%d", i);
	RUN(&r, VRUN, "--sim", "--gpu", idx, "--", SH, "-c",
	    "printf %s \"$CUDA_VISIBLE_DEVICES\"");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert(strncmp(r.out, "GPU-", 4) == 0, "%s", r.out);
	snprintf(out, len, "%.63s", r.out);
}

/* Where vgpu-run --gpu auto puts a job: the UUID it sets. */
static const char *placed(const char *place, const char *memory,
			  const char *compute)
{
	char *argv[16];
	int n = 0;

	argv[n++] = VRUN;
	argv[n++] = "--sim";
	argv[n++] = "--gpu";
	argv[n++] = "auto";
	if (place) {
		argv[n++] = "--place";
		argv[n++] = (char *)place;
	}
	if (memory) {
		argv[n++] = "--memory";
		argv[n++] = (char *)memory;
	}
	if (compute) {
		argv[n++] = "--compute";
		argv[n++] = (char *)compute;
	}
	argv[n++] = SH;
	argv[n++] = "-c";
	argv[n++] = "printf %s \"$CUDA_VISIBLE_DEVICES\"";
	argv[n] = NULL;
	runtest_run(argv, &r);
	return r.out;
}

Test(run_exec, gpu_by_index_and_uuid)
{
	char u0[64], u2[64], prefix[16];

	uuid_of(0, u0, sizeof(u0));
	uuid_of(2, u2, sizeof(u2));
	cr_assert_str_neq(u0, u2);
	RUN(&r, VRUN, "--sim", "--gpu", u2, "--", SH, "-c",
	    "printf %s \"$CUDA_VISIBLE_DEVICES\"");
	cr_assert_str_eq(r.out, u2);
	snprintf(prefix, sizeof(prefix), "%.12s", u2);
	RUN(&r, VRUN, "--sim", "--gpu", prefix, "--", SH, "-c",
	    "printf %s \"$CUDA_VISIBLE_DEVICES\"");
	cr_assert_str_eq(r.out, u2, "a unique prefix");
	RUN(&r, VRUN, "--sim", "--gpu", "3", "--", "/bin/true");
	cr_assert(runtest_exited(&r, 67), "status %#x", r.status);
	cr_assert(strstr(r.err, "there are 3"), "%s", r.err);
	RUN(&r, VRUN, "--sim", "--gpu", "GPU-ffffffff", "--", "/bin/true");
	cr_assert(runtest_exited(&r, 67), "status %#x", r.status);
}

Test(run_exec, job_sees_its_gpu_as_device_0)
{
	char u1[64];

	uuid_of(1, u1, sizeof(u1));
	RUN(&r, VRUN, "--sim", "--gpu", "1", "--memory", "1GiB", "--",
	    TEST_HELPER, "join");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	const unsigned char *l = runtest_ledger(runtest_path("ledger"), u1);
	cr_assert_not_null(l, "the job used GPU 1's ledger");
	runtest_unmap(l);
}

Test(run_exec, placement, .timeout = 120)
{
	struct holder a, b;
	char u[3][64];

	for (int i = 0; i < 3; i++)
		uuid_of(i, u[i], sizeof(u[i]));
	/* GPU 0: 1 GiB reserved; GPU 1: 2 GiB and 50%; GPU 2: nothing. */
	HOLD(&a, VRUN, "--sim", "--gpu", "0", "--memory", "1GiB",
	     "--tenant", "a", "--", TEST_HOLDER, "0");
	HOLD(&b, VRUN, "--sim", "--gpu", "1", "--memory", "2GiB",
	     "--compute", "50", "--tenant", "b", "--", TEST_HOLDER, "0");

	cr_assert_str_eq(placed(NULL, "1GiB", NULL), u[2], "spread: no tasks");
	cr_assert_str_eq(placed("binpack", "1GiB", NULL), u[1], "fullest");
	cr_assert_str_eq(placed("binpack", "1GiB", "60"), u[0],
			 "GPU 1 has 50%% left");
	cr_assert_str_eq(placed("binpack", "3GiB", NULL), u[0]);
	cr_assert_str_eq(placed("binpack", NULL, NULL), u[2],
			 "no --memory: a whole GPU");

	placed(NULL, "5GiB", NULL);
	cr_assert(runtest_exited(&r, 66), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "no GPU has room for 5 GiB"), "%s", r.err);
	cr_assert(strstr(r.err, "GPU 0 (") && strstr(r.err, "3 GiB of 4 GiB "
		  "memory free, 100% compute free, 1 task"), "%s", r.err);
	cr_assert(strstr(r.err, "2 GiB of 4 GiB memory free, 50% compute "
			 "free, 1 task"), "%s", r.err);
	cr_assert(strstr(r.err, "4 GiB of 4 GiB memory free, 100% compute "
			 "free, 0 tasks"), "%s", r.err);

	/* A job's own tenant does not count against it. */
	setenv("VGPU_TENANT", "b", 1);
	cr_assert_str_eq(placed("binpack", "4GiB", "90"), u[1]);
	unsetenv("VGPU_TENANT");

	runtest_release(&b);	/* gone: its reservation with it */
	cr_assert_str_eq(placed("binpack", "3GiB", "90"), u[0]);
	cr_assert_str_eq(placed("binpack", "3GiB", NULL), u[0]);
	runtest_release(&a);
	cr_assert_str_eq(placed("binpack", NULL, NULL), u[0],
			 "all empty: the lowest index");
}

/* ---- --install-preload -------------------------------------------------------- */

Test(run_exec, install_preload)
{
	const char *file = runtest_path("ld.so.preload");
	char want[PATH_MAX + 64];
	FILE *f;

	f = fopen(file, "w");
	cr_assert_not_null(f);
	fputs("/lib/libother.so\n", f);
	fclose(f);
	RUN(&r, VRUN, "--install-preload", (char *)file);
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "now lists"), "%s", r.out);
	RUN(&r, VRUN, "--install-preload", (char *)file);
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "already lists"), "%s", r.out);
	RUN(&r, "/bin/cat", (char *)file);
	snprintf(want, sizeof(want), "/lib/libother.so\n%s\n", shim_path());
	cr_assert_str_eq(r.out, want);

	RUN(&r, VRUN, "--install-preload", "/proc/no/such/dir/ld.so.preload");
	cr_assert(runtest_exited(&r, 70), "status %#x", r.status);
	cr_assert(strstr(r.err, "cannot write"), "%s", r.err);
}
