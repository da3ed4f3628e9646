/* test_ctl_suspend.c - vgpu-ctl suspend and resume, and a memory limit
 * lowered below use that moves memory to the host, judged by the simulated
 * device's own count of used memory and by kernels that check the jobs'
 * data (tools-suspend-job, vgpu_touch).
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>

#include "ctl_test.h"

#define SJOB TEST_SUSPEND_JOB

static struct run_result r;

static pid_t jobs[4];

static void setup(void)
{
	runtest_setup("2GiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
}

/* A job left suspended by a failed assertion waits for ever: killed. */
static void cleanup(void)
{
	for (int i = 0; i < 4; i++)
		if (jobs[i] > 0 && waitpid(jobs[i], NULL, WNOHANG) == 0) {
			kill(jobs[i], SIGKILL);
			waitpid(jobs[i], NULL, 0);
		}
	runtest_cleanup();
}

/* No timeout of its own: SUSPEND_TEST_CYCLES=100 runs for minutes; meson's
 * bounds the suite's run. */
TestSuite(ctl_suspend, .init = setup, .fini = cleanup);

/* Starts a job and remembers it for cleanup(). */
static void job_start(struct ctl_job *j, char *const argv[])
{
	ctl_job_start(j, argv);
	for (int i = 0; i < 4; i++)
		if (jobs[i] <= 0 || waitpid(jobs[i], NULL, WNOHANG) != 0) {
			jobs[i] = j->pid;
			return;
		}
}

/* The job's "pass N bad M". */
static void job_status(struct ctl_job *j, unsigned long long *pass,
		       unsigned long long *bad)
{
	char ans[128];

	ctl_job_cmd(j, "status", ans, sizeof(ans));
	cr_assert_eq(sscanf(ans, "pass %llu bad %llu", pass, bad), 2,
		     "status: %s", ans);
}

static void job_quit(struct ctl_job *j)
{
	fprintf(j->in, "quit\n");
	fflush(j->in);
	ctl_job_stop(j);	/* exit 0: no element was ever wrong */
}

static void start_job(struct ctl_job *j, const char *tenant, const char *mem,
		      const char *mib, const char *nbufs, const char *mode)
{
	job_start(j, (char *const[]){ VRUN, "--sim", "--tenant",
		(char *)tenant, "--memory", (char *)mem, "--", SJOB,
		(char *)mib, (char *)nbufs, (char *)mode, NULL });
}

/* How many cycles the busy test makes: SUSPEND_TEST_CYCLES, else 3 (each
 * moves 1.5 GiB each way at the simulated bus's speed, about 4 s a cycle;
 * docs/control.md has a run of 100). */
static int cycles(void)
{
	const char *e = getenv("SUSPEND_TEST_CYCLES");
	int n = e ? atoi(e) : 0;

	return n > 0 ? n : 3;
}

/* ---- a busy tenant suspended, another uses its memory, resumed ----------- */

Test(ctl_suspend, busy_tenant_gives_its_memory_to_another_and_comes_back)
{
	unsigned long long pass0, pass, bad;
	struct ctl_job a, b;
	uint64_t idle_used, held, used;
	int n = cycles();

	setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, "a", "1792MiB", "256", "6", "busy");
	unsetenv("VGPU_CONTROL");
	held = device_used();
	cr_assert_geq(held, 1536 * MIB, "A holds %llu",
		      (unsigned long long)held);
	job_start(&b, (char *const[]){ VRUN, "--sim", "--tenant", "b",
		"--memory", "1792MiB", "--", TEST_CTL_JOB, NULL });
	idle_used = device_used();
	job_status(&a, &pass0, &bad);
	for (int c = 0; c < n; c++) {
		char ans[64], cmd[32], want[32];

		CTL_RUN(&r, 0, "suspend", "a", "--wait", "30");
		cr_assert(strstr(r.out, ": suspended (change "), "%s", r.out);
		/* The device's own count: A's 1.5 GiB is off it. */
		cr_assert_leq(device_used(), idle_used - 1536 * MIB,
			      "cycle %d: the device holds %llu", c,
			      (unsigned long long)device_used());
		ctl_job_cmd(&b, "alloc 1610612736", ans, sizeof(ans));
		snprintf(want, sizeof(want), "ok %d", c);
		cr_assert_str_eq(ans, want, "cycle %d: B's 1.5 GiB: %s", c,
				 ans);
		snprintf(cmd, sizeof(cmd), "free %d", c);
		ctl_job_cmd(&b, cmd, ans, sizeof(ans));
		cr_assert_str_eq(ans, "freed");
		CTL_RUN(&r, 0, "resume", "a", "--wait", "30");
		cr_assert(strstr(r.out, ": resumed (change "), "%s", r.out);
		cr_assert(strstr(r.out, "0 on the host"), "%s", r.out);
		used = device_used();
		cr_assert_eq(used, idle_used, "cycle %d: the device holds %llu "
			     "bytes, %llu before the suspension", c,
			     (unsigned long long)used,
			     (unsigned long long)idle_used);
		/* The loop continues from where it was held. */
		job_status(&a, &pass, &bad);
		cr_assert_eq(bad, 0, "cycle %d: %llu elements wrong", c, bad);
	}
	job_status(&a, &pass, &bad);
	cr_expect_gt(pass, pass0, "A ran passes: %llu then %llu", pass0, pass);
	fclose(b.in);
	waitpid(b.pid, NULL, 0);
	fclose(b.out);
	job_quit(&a);
	cr_expect_eq(device_used(), 0, "the device back to zero");
}

/* Whether the first sample of metric (its name and "{") has value v. */
static bool metric_is(const char *text, const char *metric, const char *v)
{
	const char *p = strstr(text, metric), *end;
	size_t n = strlen(v);

	if (!p || !(end = strchr(p, '\n')))
		return false;
	return (size_t)(end - p) > n + 1 && end[-(long)n - 1] == ' ' &&
	       strncmp(end - n, v, n) == 0;
}

/* ---- an idle process: no driver call, suspended by its control thread ---- */

Test(ctl_suspend, idle_process_is_suspended_within_a_second)
{
	unsigned long long pass, bad;
	struct ctl_job a;
	uint64_t held, t0;

	setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, "idle", "1GiB", "128", "4", "idle");
	unsetenv("VGPU_CONTROL");
	held = device_used();
	cr_assert_geq(held, 512 * MIB);
	t0 = ctl_now_ns();
	CTL_RUN(&r, 0, "suspend", "idle", "--wait", "5");
	cr_expect_lt(ctl_now_ns() - t0, 1000000000ull * 5);
	cr_assert_leq(device_used(), held - 512 * MIB, "device holds %llu",
		      (unsigned long long)device_used());
	CTL_RUN(&r, 0, "show", "idle");
	cr_expect(strstr(r.out, "  state            suspended: 1 of 1 live "
		  "processes carried it out, 0 cannot be suspended"), "%s",
		  r.out);
	/* vgpu-top's metrics say so, for the tenant and its process. */
	RUN(&r, TEST_VGPU_TOP, "--prometheus", "--dir",
	    runtest_path("ledger"));
	cr_expect(metric_is(r.out, "vgpu_tenant_suspended{", "1"), "%s",
		  r.out);
	cr_expect(metric_is(r.out, "vgpu_process_suspended{", "1"), "%s",
		  r.out);
	CTL_RUN(&r, 0, "resume", "idle", "--wait", "5");
	cr_assert_eq(device_used(), held);
	RUN(&r, TEST_VGPU_TOP, "--prometheus", "--dir",
	    runtest_path("ledger"));
	cr_expect(metric_is(r.out, "vgpu_tenant_suspended{", "0"), "%s",
		  r.out);
	job_status(&a, &pass, &bad);
	cr_expect_eq(pass, 1);
	cr_expect_eq(bad, 0);
	job_quit(&a);
}

/* With host overcommit too, a free while suspended brings nothing back to
 * the device (a free promotes spilled ranges into the room it made, but
 * not a suspended process's): the device's count stays where the
 * suspension left it. */
Test(ctl_suspend, free_while_suspended_brings_nothing_back)
{
	unsigned long long pass, bad;
	struct ctl_job a;
	uint64_t held, suspended;
	char ans[64];

	setenv("VGPU_CONTROL", "1", 1);
	setenv("VGPU_OVERCOMMIT", "host", 1);
	start_job(&a, "freeing", "1GiB", "64", "4", "idle");
	unsetenv("VGPU_CONTROL");
	unsetenv("VGPU_OVERCOMMIT");
	held = device_used();
	cr_assert_geq(held, 256 * MIB);
	CTL_RUN(&r, 0, "suspend", "freeing", "--wait", "5");
	suspended = device_used();
	cr_assert_leq(suspended, held - 256 * MIB);
	ctl_job_cmd(&a, "free", ans, sizeof(ans));
	cr_assert_str_eq(ans, "freed 3");
	cr_expect_eq(device_used(), suspended, "device holds %llu, was %llu",
		     (unsigned long long)device_used(),
		     (unsigned long long)suspended);
	CTL_RUN(&r, 0, "resume", "freeing", "--wait", "5");
	cr_expect_eq(device_used(), held - 64 * MIB);
	job_status(&a, &pass, &bad);
	cr_expect_eq(bad, 0);
	job_quit(&a);
}

/* A launch made while suspended waits (it does not fail) and runs after
 * the resume. */
Test(ctl_suspend, launch_while_suspended_waits_for_the_resume)
{
	unsigned long long pass, bad;
	struct ctl_job a;

	setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, "w", "1GiB", "64", "2", "idle");
	unsetenv("VGPU_CONTROL");
	CTL_RUN(&r, 0, "suspend", "w");
	fprintf(a.in, "status\n");	/* a pass: launches, held */
	fflush(a.in);
	ctl_sleep_ms(500);
	{
		struct pollfd p = { .fd = fileno(a.out), .events = POLLIN };

		cr_expect_eq(poll(&p, 1, 0), 0, "answered while suspended");
	}
	CTL_RUN(&r, 0, "resume", "w");
	job_status(&a, &pass, &bad);	/* the answer to the held status */
	cr_expect_eq(pass, 1);
	cr_expect_eq(bad, 0);
	job_quit(&a);
}

/* A suspend that a stopped process cannot answer, superseded by a resume:
 * the waiting vgpu-ctl says so and returns at once, not at --wait's end. */
Test(ctl_suspend, suspend_superseded_by_a_resume)
{
	unsigned long long pass, bad;
	struct ctl_job a;
	char out[4096];
	size_t got;
	uint64_t t0;
	FILE *f;

	setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, "sup", "1GiB", "64", "2", "idle");
	unsetenv("VGPU_CONTROL");
	kill(a.pid, SIGSTOP);
	t0 = ctl_now_ns();
	f = popen(CTL " suspend sup --wait 20", "r");
	cr_assert_not_null(f);
	ctl_sleep_ms(300);
	CTL_RUN(&r, 0, "resume", "sup", "--wait", "0");
	got = fread(out, 1, sizeof(out) - 1, f);
	out[got] = '\0';
	cr_expect_eq(WEXITSTATUS(pclose(f)), 0, "%s", out);
	cr_expect_lt(ctl_now_ns() - t0, 10000000000ull, "returned at once");
	cr_expect(strstr(out, ": suspend asked (change 1); superseded by "
		  "change 2 (a resume) before every process answered"), "%s",
		  out);
	kill(a.pid, SIGCONT);
	job_status(&a, &pass, &bad);
	cr_expect_eq(bad, 0);
	job_quit(&a);
}

/* A process that exits while its control thread moves its memory: the exit
 * stops the move between two ranges and leaves the ledger, totals back to
 * zero at once (not left for another process to reclaim). */
Test(ctl_suspend, exit_during_the_move_gives_everything_back)
{
	const unsigned char *base;
	const struct vgpu_ledger_tenant *t;
	struct ctl_job a;
	int status;

	setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, "ex", "1GiB", "200", "4", "idle");
	unsetenv("VGPU_CONTROL");
	CTL_RUN(&r, 0, "suspend", "ex", "--wait", "0");
	ctl_sleep_ms(150);	/* the control thread is moving by now */
	fprintf(a.in, "exit\n");
	fflush(a.in);
	cr_assert_eq(waitpid(a.pid, &status, 0), a.pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%#x",
		  status);
	fclose(a.in);
	fclose(a.out);
	base = runtest_ledger(runtest_path("ledger"), NULL);
	t = runtest_tenant(base, "ex");
	if (t) {
		cr_expect_eq(t->used, 0, "ledger used %llu",
			     (unsigned long long)t->used);
		cr_expect_eq(t->usage[VGPU_USAGE_SPILLED], 0);
	}
	cr_expect_eq(device_used(), 0);
	runtest_unmap(base);
}

/* ---- processes that cannot be suspended ------------------------------------ */

Test(ctl_suspend, process_without_control_is_named)
{
	struct ctl_job a;
	char ans[64], want[64];

	job_start(&a, (char *const[]){ VRUN, "--sim", "--tenant", "nc",
		"--memory", "1GiB", "--", TEST_CTL_JOB, NULL });
	ctl_job_cmd(&a, "alloc 104857600", ans, sizeof(ans));
	cr_assert_str_eq(ans, "ok 0");
	CTL_RUN(&r, 69, "suspend", "nc", "--wait", "2");
	snprintf(want, sizeof(want), "  pid %d: started without VGPU_CONTROL",
		 (int)a.pid);
	cr_expect(strstr(r.out, "started without VGPU_CONTROL: cannot be "
		  "suspended"), "%s", r.out);
	/* Not "suspended": no process could carry it out. */
	cr_expect(strstr(r.out, ": suspend recorded, carried out by no "
			 "process (change "), "%s", r.out);
	/* Its allocations go on. */
	ctl_job_cmd(&a, "alloc 104857600", ans, sizeof(ans));
	cr_expect_str_eq(ans, "ok 1");
	CTL_RUN(&r, 0, "resume", "nc", "--wait", "2");
	cr_expect(strstr(r.out, ": resume recorded, carried out by no "
			 "process (change "), "%s", r.out);
	ctl_job_stop(&a);
}

Test(ctl_suspend, bad_command_lines)
{
	CTL_RUN(&r, 65, "suspend", "x", "--wait", "soon");
	cr_expect(strstr(r.err, "--wait 'soon'"), "%s", r.err);
	CTL_RUN(&r, 64, "resume", "x", "--memory", "1GiB");
	cr_expect(strstr(r.err, "resume takes only --gpu, --wait and "
		  "--ledger-dir"), "%s", r.err);
	CTL_RUN(&r, 64, "show", "x", "--wait", "1");
}

/* ---- a limit lowered below use ---------------------------------------------- */

/* Host overcommit, no control thread: the job's next synchronisation moves
 * its least recently used ranges to the host until it fits. */
static void lowered_limit(char *tenant, bool control)
{
	const unsigned char *base;
	const struct vgpu_ledger_tenant *t;
	unsigned long long pass, bad;
	struct ctl_job a;
	uint64_t held;

	setenv("VGPU_OVERCOMMIT", "host", 1);
	if (control)
		setenv("VGPU_CONTROL", "1", 1);
	start_job(&a, tenant, "1GiB", "100", "6",
		  control ? "idle" : "busy");
	unsetenv("VGPU_OVERCOMMIT");
	unsetenv("VGPU_CONTROL");
	held = device_used();
	cr_assert_geq(held, 600 * MIB);
	CTL_RUN(&r, 0, "set", tenant, "--memory", "256MiB");
	base = runtest_ledger(runtest_path("ledger"), NULL);
	t = runtest_tenant(base, tenant);
	cr_assert_not_null(t);
	for (int i = 0; i < 1000 && t->used > 256 * MIB; i++)
		ctl_sleep_ms(10);
	cr_expect_leq(t->used, 256 * MIB, "ledger used %llu",
		      (unsigned long long)t->used);
	cr_expect_leq(device_used(), 257 * MIB, "device holds %llu",
		      (unsigned long long)device_used());
	cr_expect_geq(t->usage[VGPU_USAGE_SPILLED], 400 * MIB);
	job_status(&a, &pass, &bad);
	cr_expect_eq(bad, 0, "%llu elements wrong", bad);
	if (control) {
		/* Raised again: the control thread brings the ranges back. */
		CTL_RUN(&r, 0, "set", tenant, "--memory", "1GiB");
		for (int i = 0; i < 1000 && (device_used() < held ||
					      t->usage[VGPU_USAGE_SPILLED]); i++)
			ctl_sleep_ms(10);
		cr_expect_eq(device_used(), held, "device holds %llu",
			     (unsigned long long)device_used());
		cr_expect_eq(t->usage[VGPU_USAGE_SPILLED], 0);
		job_status(&a, &pass, &bad);
		cr_expect_eq(bad, 0, "%llu elements wrong", bad);
	}
	job_quit(&a);
	cr_expect_eq(t->used, 0);
	runtest_unmap(base);
}

Test(ctl_suspend, lowered_limit_moves_memory_to_the_host)
{
	lowered_limit("low", false);
}

Test(ctl_suspend, lowered_limit_moves_an_idle_process_memory)
{
	lowered_limit("lowidle", true);
}
