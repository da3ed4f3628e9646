/* test_ctl.c - vgpu-ctl itself: a memory limit lowered below what a running
 * job holds and raised again (judged by the job's allocations, the ledger
 * and the simulated device's used memory), show's report, the audit, a
 * user who may not write the ledger, bad command lines, and a stopped
 * holder of the tenant's lock. The compute share's timing is in
 * test_ctl_compute.c.
 */
#include <signal.h>
#include <sys/stat.h>

#include "ctl_test.h"

static struct run_result r;

static void setup(void)
{
	runtest_setup("1GiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
}

TestSuite(ctl, .init = setup, .fini = runtest_cleanup, .timeout = 60);

static const struct vgpu_ledger_tenant *tenant(const unsigned char **base,
					       const char *name)
{
	if (!*base)
		*base = runtest_ledger(runtest_path("ledger"), NULL);
	cr_assert_not_null(*base, "no ledger");
	return runtest_tenant(*base, name);
}

static void expect_answer(struct ctl_job *j, const char *cmd,
			  const char *want)
{
	char ans[128];

	ctl_job_cmd(j, cmd, ans, sizeof(ans));
	cr_expect_str_eq(ans, want, "%s", cmd);
}

static void alloc_mib(struct ctl_job *j, unsigned mib, const char *want)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "alloc %llu", (unsigned long long)mib * MIB);
	expect_answer(j, cmd, want);
}

/* ---- a memory limit lowered below use, then raised ----------------------- */

Test(ctl, memory_limit_lowered_below_use_then_raised)
{
	const unsigned char *base = NULL;
	const struct vgpu_ledger_tenant *t;
	struct ctl_job j;
	uint64_t u0;

	ctl_job_start(&j, (char *const[]){ VRUN, "--sim", "--tenant", "mem",
		"--memory", "512MiB", "--", TEST_CTL_JOB, NULL });
	for (int i = 0; i < 4; i++) {
		char want[16];

		snprintf(want, sizeof(want), "ok %d", i);
		alloc_mib(&j, 100, want);
	}
	u0 = device_used();
	t = tenant(&base, "mem");
	cr_assert_eq(t->used, 400 * MIB);

	CTL_RUN(&r, 0, "set", "mem", "--memory", "256MiB");
	cr_expect(strstr(r.out, "tenant 'mem' on GPU-"), "%s", r.out);
	cr_expect(strstr(r.out, ": memory limit 256MiB; change 1\n"), "%s",
		  r.out);
	cr_expect(strstr(r.out, " holds 400MiB: over limit by 144MiB; its "
		  "new allocations are refused until its usage is below the "
		  "limit (with host overcommit or VGPU_CONTROL, its least "
		  "recently used movable ranges go to the host first)\n"),
		  "%s", r.out);
	CTL_RUN(&r, 0, "show", "mem");
	cr_expect(strstr(r.out, "  memory limit     256MiB (set by pid "),
		  "%s", r.out);
	cr_expect(strstr(r.out, "  memory used      400MiB\n"), "%s", r.out);
	cr_expect(strstr(r.out, "  over limit by    144MiB: new allocations "
		  "are refused until usage is below the limit\n"), "%s", r.out);
	cr_expect(strstr(r.out, "  processes        1 live\n"), "%s", r.out);
	cr_expect(strstr(r.out, "  changes          1; the last at "), "%s",
		  r.out);
	cr_expect(strstr(r.out, "by uid 0 pid "), "%s", r.out);
	cr_expect(strstr(r.out, ": memory\n"), "%s", r.out);

	/* Refused at the next allocation; the device gives nothing. */
	alloc_mib(&j, 1, "fail 2");
	cr_expect_eq(device_used(), u0);
	/* Frees bring it under; then what fits is admitted. */
	expect_answer(&j, "free 0", "freed");
	expect_answer(&j, "free 1", "freed");
	alloc_mib(&j, 50, "ok 4");
	alloc_mib(&j, 10, "fail 2");
	cr_expect_eq(device_used(), u0 - 150 * MIB);
	cr_expect_eq(t->used, 250 * MIB);
	CTL_RUN(&r, 0, "show", "mem");
	cr_expect_null(strstr(r.out, "over limit"), "%s", r.out);

	/* Raised: more fits at once. */
	CTL_RUN(&r, 0, "set", "mem", "--memory", "768MiB");
	cr_expect_null(strstr(r.err, "note:"), "%s", r.err);
	alloc_mib(&j, 500, "ok 5");
	cr_expect_eq(device_used(), u0 + 350 * MIB);
	cr_expect_eq(t->used, 750 * MIB);
	cr_expect_eq(t->ctl_changes, 2);
	cr_expect_eq(t->ctl_fields, VGPU_LEDGER_CTL_MEMORY);
	cr_expect_eq(t->ctl_uid, 0);
	/* More than the GPU has: accepted, with a note saying so. */
	CTL_RUN(&r, 0, "set", "mem", "--memory", "64GiB");
	cr_expect(strstr(r.err, "vgpu-ctl: note: --memory 64GiB is more than "
			 "GPU "), "%s", r.err);
	CTL_RUN(&r, 0, "set", "mem", "--memory", "768MiB");
	ctl_job_stop(&j);
	cr_expect_eq(t->used, 0, "the ledger back to zero");
	cr_expect_eq(device_used(), 0, "the device back to zero");
	runtest_unmap(base);
}

/* ---- who may change it ------------------------------------------------------ */

#define NOBODY "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", \
	       "--clear-groups"

Test(ctl, a_user_who_may_not_write_the_ledger_is_refused)
{
	const unsigned char *base = NULL;
	char want[2048], path[1024];
	struct ctl_job j;

	if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
		cr_skip_test("needs root and setpriv to act as another user");
		return;
	}
	ctl_job_start(&j, (char *const[]){ VRUN, "--sim", "--tenant", "t",
		"--memory", "512MiB", "--", TEST_CTL_JOB, NULL });
	/* Others may reach the file, not write it (root's, mode 0600). */
	cr_assert_eq(chmod(runtest_dir(), 0755), 0);
	cr_assert_eq(chmod(runtest_path("ledger"), 0755), 0);
	cr_assert_not_null(tenant(&base, "t"));
	{
		const struct vgpu_ledger_header *h = (const void *)base;

		snprintf(path, sizeof(path), "%s/%s.v%d.ledger",
			 runtest_path("ledger"), h->gpu_uuid,
			 VGPU_LEDGER_VERSION);
	}
	RUN(&r, NOBODY, CTL, "set", "t", "--memory", "1GiB");
	cr_expect(runtest_exited(&r, 77), "status %#x: %s", r.status, r.err);
	snprintf(want, sizeof(want), "vgpu-ctl: ledger '%s' (owned by root "
		 "(uid 0), group root (gid 0), mode 0600) may not be changed "
		 "by uid 65534: Permission denied; only a user who may write "
		 "it (its owner, root, or with mode 0660 its group's members) "
		 "may change its tenants\n", path);
	cr_expect_str_eq(r.err, want);
	/* suspend and resume are changes: refused alike. */
	RUN(&r, NOBODY, CTL, "suspend", "t");
	cr_expect(runtest_exited(&r, 77), "status %#x: %s", r.status, r.err);
	cr_expect_str_eq(r.err, want);
	RUN(&r, NOBODY, CTL, "resume", "t");
	cr_expect(runtest_exited(&r, 77), "status %#x: %s", r.status, r.err);
	RUN(&r, NOBODY, CTL, "show", "t");
	cr_expect(runtest_exited(&r, 77), "status %#x: %s", r.status, r.err);
	snprintf(want, sizeof(want), "vgpu-ctl: ledger '%s' (owned by root "
		 "(uid 0), mode 0600) cannot be read by uid 65534: Permission "
		 "denied\n", path);
	cr_expect_str_eq(r.err, want);
	cr_expect_eq(tenant(&base, "t")->mem_limit, 512 * MIB, "unchanged");
	cr_expect_eq(tenant(&base, "t")->ctl_changes, 0);
	cr_expect_eq(tenant(&base, "t")->suspended, 0);
	/* The directory closed to others: refused there, by name. */
	cr_assert_eq(chmod(runtest_path("ledger"), 0700), 0);
	RUN(&r, NOBODY, CTL, "set", "t", "--memory", "1GiB");
	cr_expect(runtest_exited(&r, 77), "status %#x: %s", r.status, r.err);
	snprintf(want, sizeof(want), "vgpu-ctl: cannot read the ledger "
		 "directory '%s': Permission denied\n", runtest_path("ledger"));
	cr_expect_str_eq(r.err, want);
	ctl_job_stop(&j);
	runtest_unmap(base);
}

/* ---- bad command lines -------------------------------------------------------- */

static void expect_refused(int code, const char *want_err,
			   char *const argv[])
{
	runtest_run(argv, &r);
	cr_expect(runtest_exited(&r, code), "%s: status %#x, expected %d: %s",
		  argv[1], r.status, code, r.err);
	cr_expect_str_eq(r.err, want_err);
	cr_expect_str_eq(r.out, "");
}

#define REFUSED(code, msg, ...) \
	expect_refused((code), (msg), (char *const[]){ CTL, __VA_ARGS__, NULL })

Test(ctl, bad_arguments_name_what_was_wrong)
{
	char want[1024];

	REFUSED(65, "vgpu-ctl: --memory \"8GB\" has an unknown unit; expected "
		"a size of at least 1 byte: a whole number of bytes, "
		"optionally followed by B, K/KiB, M/MiB, G/GiB or T/TiB (e.g. "
		"8GiB), or unlimited\n", "set", "t", "--memory", "8GB");
	REFUSED(65, "vgpu-ctl: --compute \"0\" is out of range; expected a "
		"whole percentage from 1 to 100\n", "set", "t", "--compute",
		"0");
	REFUSED(65, "vgpu-ctl: --compute \"101\" is out of range; expected a "
		"whole percentage from 1 to 100\n", "set", "t", "--compute",
		"101");
	REFUSED(65, "vgpu-ctl: --policy \"soft\" is not a known value; "
		"expected hard, elastic, off or opportunistic\n", "set", "t",
		"--policy",
		"soft");
	REFUSED(65, "vgpu-ctl: --gpu 'x1' is not a number; expected a GPU "
		"index (0 to 63) or a GPU UUID (GPU-...)\n", "set", "t",
		"--gpu", "x1", "--compute", "5");
	REFUSED(64, "vgpu-ctl: unknown option '--memroy' (vgpu-ctl --help "
		"lists them)\n", "set", "t", "--memroy", "1GiB");
	REFUSED(64, "vgpu-ctl: --memory needs a value\n", "set", "t",
		"--memory");
	REFUSED(64, "vgpu-ctl: --memory: the tenant comes first: vgpu-ctl "
		"set TENANT [OPTIONS]\n", "set", "--memory", "1GiB", "t");
	REFUSED(64, "vgpu-ctl: --memory=1GiB: the tenant comes first: "
		"vgpu-ctl set TENANT [OPTIONS]\n", "set", "--memory=1GiB",
		"t");
	REFUSED(64, "vgpu-ctl: set: nothing to set; give --memory, --compute, "
		"--policy or --host-spill\n", "set", "t");
	REFUSED(64, "vgpu-ctl: --memory: show takes only --gpu and "
		"--ledger-dir\n", "show", "t", "--memory", "1GiB");
	REFUSED(64, "vgpu-ctl: unknown command 'resize': expected set, show, "
		"suspend or resume (vgpu-ctl --help)\n", "resize", "t");
	REFUSED(64, "vgpu-ctl: usage: vgpu-ctl set|show|suspend|resume TENANT "
		"[OPTIONS] (vgpu-ctl --help)\n", "show");
	REFUSED(65, "vgpu-ctl: tenant name '': expected 1 to 63 bytes, no "
		"control characters\n", "show", "");
	REFUSED(65, "vgpu-ctl: --ledger-dir 'rel': expected an absolute "
		"path\n", "show", "t", "--ledger-dir", "rel");
	snprintf(want, sizeof(want), "vgpu-ctl: cannot read the ledger "
		 "directory '%s': No such file or directory (no job has used a "
		 "GPU through libvgpu with it)\n", runtest_path("ledger"));
	REFUSED(67, want, "show", "t");
	RUN(&r, CTL, "--help");
	cr_expect(runtest_exited(&r, 0));
	cr_expect(strstr(r.out, "EXIT STATUS"), "%s", r.out);
}

Test(ctl, no_such_tenant_or_gpu)
{
	struct ctl_job j;
	char want[1024];

	ctl_job_start(&j, (char *const[]){ VRUN, "--sim", "--tenant", "t",
		"--", TEST_CTL_JOB, NULL });
	snprintf(want, sizeof(want), "vgpu-ctl: no ledger in '%s' has tenant "
		 "'other' (1 GPU looked at)\n", runtest_path("ledger"));
	REFUSED(66, want, "set", "other", "--compute", "50");
	REFUSED(66, want, "show", "other");
	snprintf(want, sizeof(want), "vgpu-ctl: --gpu GPU-ffff: no ledger of "
		 "a GPU with that UUID in '%s'\n", runtest_path("ledger"));
	REFUSED(67, want, "show", "t", "--gpu", "GPU-ffff");
	/* An AMD GPU keyed by its bus id is named by that key. */
	snprintf(want, sizeof(want), "vgpu-ctl: --gpu PCI-0000-99: no ledger "
		 "of a GPU with that UUID in '%s'\n", runtest_path("ledger"));
	REFUSED(67, want, "show", "t", "--gpu", "PCI-0000-99");
	/* By index, through the driver (the simulator's, as the job's). */
	setenv("VGPU_REAL_LIBCUDA", TEST_SIM_LIBCUDA, 1);
	CTL_RUN(&r, 0, "show", "t", "--gpu", "0");
	cr_expect(strstr(r.out, "tenant 't' on GPU-"), "%s", r.out);
	REFUSED(67, "vgpu-ctl: --gpu 3: no such GPU; the driver shows 1\n",
		"show", "t", "--gpu", "3");
	unsetenv("VGPU_REAL_LIBCUDA");
	ctl_job_stop(&j);
}

/* ---- a stopped holder of the tenant's lock ----------------------------------- */

Test(ctl, a_stopped_lock_holder_times_out_with_its_pid)
{
	char line[64], want[128];
	uint64_t t0, dt;
	int out[2], status;
	FILE *f;
	pid_t p;

	cr_assert_eq(pipe(out), 0);
	p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		dup2(out[1], STDOUT_FILENO);
		close(out[0]);
		execl(TEST_CTL_LOCKER, TEST_CTL_LOCKER, runtest_path("ledger"),
		      "GPU-00000000-ctl-lock", "t", (char *)NULL);
		_exit(99);
	}
	close(out[1]);
	f = fdopen(out[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f), "the locker failed");
	cr_assert_eq(waitpid(p, &status, WUNTRACED), p);
	cr_assert(WIFSTOPPED(status), "status %#x", status);
	t0 = ctl_now_ns();
	RUN(&r, CTL, "set", "t", "--memory", "2GiB");
	dt = ctl_now_ns() - t0;
	cr_expect(runtest_exited(&r, 75), "status %#x: %s", r.status, r.err);
	snprintf(want, sizeof(want), "held for over 1000 ms by pid %d "
		 "(stopped?); nothing was changed\n", (int)p);
	cr_expect(strstr(r.err, want), "%s", r.err);
	cr_expect_lt(dt, 3000000000ull, "%llu ns", (unsigned long long)dt);
	/* show reads without the lock: it answers at once. */
	CTL_RUN(&r, 0, "show", "t");
	cr_expect(strstr(r.out, "  memory limit     1GiB"), "%s", r.out);
	kill(p, SIGKILL);
	cr_assert_eq(waitpid(p, &status, 0), p);
	fclose(f);
	/* Its holder dead: the lock is taken over, the change made. */
	CTL_RUN(&r, 0, "set", "t", "--memory", "2GiB");
	cr_expect(strstr(r.out, "memory limit 2GiB; change 1\n"), "%s", r.out);
	cr_expect(strstr(r.out, "has no live process"), "%s", r.out);
}
