/* test_hip_compute.c - a HIP job's compute share under libvgpu-hip.so, by
 * the simulated device's record of what ran (docs/compute.md, "How the
 * tests judge"): with VGPU_COMPUTE_LIMIT=30 and the hard policy, back to
 * back vgpu_spin kernels of 1 ms get 30% +- 2 points of the device's time
 * over a few seconds; 100 us kernels never more than 32%, at least 25%;
 * and so do 1 ms kernels launched only through each other entry point
 * (per-thread stream, module, multi-device).
 * One test at a time (meson.build runs it with -j1). The window is from the spin command
 * sent to its reply (the job's start and the module's loading outside it).
 */
#include "hipshim.h"

#include <criterion/parameterized.h>

#include <stdlib.h>
#include <string.h>

static void setup(void)
{
	hs_setup("hc", NULL, NULL);
	setenv("VGPU_COMPUTE_LIMIT", "30", 1);
	setenv("VGPU_COMPUTE_POLICY", "hard", 1);
}

TestSuite(hip_compute, .init = setup, .fini = hs_cleanup);

/* Runs "spin US COUNT HOW" and returns the job's share of the window, in
 * percent, by the device's record. */
static double share(unsigned us, unsigned count, const char *how)
{
	struct simtest_record r;
	struct hjob j;
	char cmd[64], buf[128];
	uint64_t t0, t1, busy;
	int pid;

	hjob_start(&j, NULL);
	pid = hjob_pid(&j);
	snprintf(cmd, sizeof(cmd), "spin 1000 1 %s", how);
	hjob_cmd(&j, cmd, buf, sizeof(buf));	/* loaded, probed */
	cr_assert_eq(strncmp(buf, "spin 0 ", 7), 0, "%s", buf);
	snprintf(cmd, sizeof(cmd), "spin %u %u %s", us, count, how);
	t0 = simtest_now_ns();
	hjob_cmd(&j, cmd, buf, sizeof(buf));
	t1 = simtest_now_ns();
	cr_assert_eq(strncmp(buf, "spin 0 ", 7), 0, "%s", buf);
	hjob_end(&j);
	simtest_record_read(&r, getenv("VGPU_SIM_STATE_DIR"));
	busy = simtest_record_busy(&r, pid, t0, t1);
	simtest_record_free(&r);
	return 100.0 * (double)busy / (double)(t1 - t0);
}

/* Never above the cap by more than 2 points; under it by at most under. */
static void judge(unsigned us, unsigned count, double under,
		  const char *how)
{
	double got = share(us, count, how);

	printf("hip share: %u us kernels (%s) at a 30%% hard cap: %.2f%%\n",
	       us, how, got);
	fflush(stdout);
	cr_log_info("%u us kernels (%s): %.2f%%", us, how, got);
	cr_assert(got >= 30.0 - under && got <= 32.0, "%u us kernels (%s): "
		  "%.2f%% of the device, want 30, +2 -%.0f", us, how, got,
		  under);
}

/* 1 ms kernels: 1,000 of them, about 3.3 s at 30%. */
Test(hip_compute, spin_1ms_at_30pct, .timeout = 60)
{
	judge(1000, 1000, 2, "ggl");
}

/* 100 us kernels: 10,000 of them, about 3.3 s at 30%. Up to 5 points
 * under, issue 13's bound for kernels under 500 us (CI read 25.4% once,
 * on a busy machine): each launch admitted on
 * an idle stream is charged the host's time from its admission to the
 * kernel's start, which the simulated HIP runtime's longer launch path
 * (over the simulated driver) makes larger than CUDA's: 28.0-28.9%
 * measured on a two-core machine, CUDA's share 29.0% (docs/hip.md). */
Test(hip_compute, spin_100us_at_30pct, .timeout = 60)
{
	judge(100, 10000, 5, "ggl");
}

/* The other launch entries, each the program's only one: 1 ms kernels,
 * 600 of them (about 2 s at 30%). The entry's name is held in the
 * parameter itself: a test runs in a process of its own, where a
 * pointer into the runner's would not hold. */
struct entry {
	char how[16];
};

ParameterizedTestParameters(hip_compute, each_launch_entry_at_30pct)
{
	static struct entry entries[] = { { "spt" }, { "coopspt" },
					  { "extmodule" }, { "hccmodule" },
					  { "coopmulti" }, { "extmulti" } };

	return cr_make_param_array(struct entry, entries,
				   sizeof(entries) / sizeof(entries[0]));
}

ParameterizedTest(struct entry *e, hip_compute, each_launch_entry_at_30pct,
		  .timeout = 60)
{
	judge(1000, 600, 2, e->how);
}

/* A process of a capped tenant that asks for no share itself (no
 * VGPU_COMPUTE_LIMIT) is capped by the tenant's share from its first
 * launch, though it never allocates or sets a device: its launches join
 * the device's ledger. It ran uncapped (71% of a 30% tenant beside a
 * capped process) when only an allocation joined it. */
Test(hip_compute, an_uncapped_process_of_a_capped_tenant_is_capped,
     .timeout = 60)
{
	static const char *const capped_env[] = { "VGPU_COMPUTE_LIMIT=30",
						  NULL };
	struct hjob holder;
	double got;

	/* The tenant's first process sets its 30% share (its allocation
	 * joins it), then waits. */
	unsetenv("VGPU_COMPUTE_LIMIT");
	hjob_start(&holder, capped_env);
	cr_assert_eq(hjob_alloc(&holder, 1 << 20, "malloc", NULL), 0);
	got = share(1000, 1000, "ggl");
	hjob_end(&holder);
	printf("hip share: an uncapped process of a 30%% tenant: %.2f%%\n",
	       got);
	cr_assert(got >= 28.0 && got <= 32.0, "%.2f%% of the device, want 30 "
		  "+2 -2 (the tenant's share)", got);
}
