/* test_run_hip_gpus.c - vgpu-run --gpu with AMD GPUs next to NVIDIA ones,
 * on the simulator: four devices, the last two AMD ones
 * (VGPU_SIM_HIP_DEVICES=2). vgpu-run lists 0 and 1 through the CUDA
 * driver, 2 and 3 through the HIP runtime. Each job is judged by the
 * ledger its allocation landed in (the tenant's bytes on that GPU), or by
 * the exit code when it is refused.
 */
#include <criterion/criterion.h>

#include "runtest.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define VRUN TEST_VGPU_RUN
#define SH "/bin/sh"

static struct run_result r;
static char uuid[4][64];	/* GPU i of vgpu-run's list */

/* GPU i's key from vgpu-run --verbose's list: "GPU i (KEY): ...". */
static void read_list(void)
{
	RUN(&r, VRUN, "--sim", "--verbose", "--hip", "--gpu", "2", "--",
	    "/bin/true");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	for (int i = 0; i < 4; i++) {
		char want[32];
		const char *at;

		snprintf(want, sizeof(want), "vgpu-run: GPU %d (", i);
		at = strstr(r.err, want);
		cr_assert_not_null(at, "GPU %d listed: %s", i, r.err);
		cr_assert_eq(sscanf(at + strlen(want), "%63[^)]", uuid[i]), 1);
	}
}

static void setup(void)
{
	runtest_setup("4GiB", 4);
	setenv("VGPU_SIM_HIP_DEVICES", "2", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
	read_list();
}

TestSuite(run_hip_gpus, .init = setup, .fini = runtest_cleanup,
	  .timeout = 120);

/* The bytes tenant holds in GPU i's ledger (0: none, or no ledger). */
static uint64_t held(int i, const char *tenant)
{
	const unsigned char *l = runtest_ledger(runtest_path("ledger"),
						uuid[i]);
	const struct vgpu_ledger_tenant *t;
	uint64_t used = 0;

	if (!l)
		return 0;
	t = runtest_tenant(l, tenant);
	if (t)
		used = t->used;
	runtest_unmap(l);
	return used;
}

/* A HIP job that allocates 64 MiB, says ready, and holds it until
 * released; vgpu-run's GPU choice given by gpu (and place). */
#define HIP_HOLD_SCRIPT \
	"{ printf 'alloc 64M malloc\\n'; cat; } | " HIP_JOB " | " \
	"{ read l; case \"$l\" in 'alloc 0 '*) echo ready $$;; " \
	"*) echo \"failed $l\";; esac; cat >/dev/null; }"

static void hold_hip(struct holder *h, const char *gpu, const char *place,
		     const char *tenant)
{
	if (place)
		HOLD(h, VRUN, "--sim", "--hip", "--gpu", (char *)gpu,
		     "--place", (char *)place, "--memory", "1GiB", "--tenant",
		     (char *)tenant, "--", SH, "-c", HIP_HOLD_SCRIPT);
	else
		HOLD(h, VRUN, "--sim", "--hip", "--gpu", (char *)gpu,
		     "--memory", "1GiB", "--tenant", (char *)tenant, "--", SH,
		     "-c", HIP_HOLD_SCRIPT);
}

Test(run_hip_gpus, lists_nvidia_then_amd)
{
	cr_assert(strstr(r.err, "GPU 0 (GPU-") && strstr(r.err, "): an "
		  "NVIDIA GPU (the CUDA driver lists it)"), "%s", r.err);
	cr_assert(strstr(r.err, "): an AMD GPU (the HIP runtime lists it), "
			 "4 GiB"), "%s", r.err);
	cr_assert_null(strstr(r.err, "GPU 4 ("), "four GPUs: %s", r.err);
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			cr_assert_str_neq(uuid[i], uuid[j]);
}

Test(run_hip_gpus, hip_job_by_index_and_uuid)
{
	struct holder h;

	hold_hip(&h, "3", NULL, "t3");
	cr_assert_eq(held(3, "t3"), 64 * MIB, "GPU 3 holds the bytes");
	cr_assert_eq(held(2, "t3"), 0);
	runtest_release(&h);
	hold_hip(&h, uuid[2], NULL, "t2");
	cr_assert_eq(held(2, "t2"), 64 * MIB, "GPU 2, by UUID");
	cr_assert_eq(held(3, "t2"), 0);
	runtest_release(&h);
	RUN(&r, VRUN, "--sim", "--hip", "--gpu", "3", "--", SH, "-c",
	    "printf %s \"$HIP_VISIBLE_DEVICES\"");
	cr_assert_str_eq(r.out, "1", "the runtime's ordinal");
}

Test(run_hip_gpus, auto_places_a_hip_job_among_amd_gpus)
{
	struct holder a, b;

	hold_hip(&a, "2", NULL, "a");
	/* spread: GPU 3 has no task; NVIDIA's 0 and 1 are not candidates */
	hold_hip(&b, "auto", NULL, "b");
	cr_assert_eq(held(3, "b"), 64 * MIB, "spread: the empty AMD GPU");
	runtest_release(&b);
	hold_hip(&b, "auto", "binpack", "c");
	cr_assert_eq(held(2, "c"), 64 * MIB, "binpack: the fuller one");
	runtest_release(&b);
	runtest_release(&a);

	RUN(&r, VRUN, "--sim", "--gpu", "auto", "--", SH, "-c",
	    "printf %s \"$CUDA_VISIBLE_DEVICES\"");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert_str_eq(r.out, uuid[0], "a CUDA job: NVIDIA GPUs only");
}

Test(run_hip_gpus, other_vendors_gpu_refused)
{
	RUN(&r, VRUN, "--sim", "--gpu", "2", "--", "/bin/true");
	cr_assert(runtest_exited(&r, 67), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "is an AMD GPU (the HIP runtime lists it); "
			 "a CUDA job cannot run on it"), "%s", r.err);
	RUN(&r, VRUN, "--sim", "--hip", "--gpu", uuid[1], "--", "/bin/true");
	cr_assert(runtest_exited(&r, 67), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "is an NVIDIA GPU (the CUDA driver lists it);"
			 " a HIP job cannot run on it"), "%s", r.err);

	setenv("VGPU_SIM_HIP_DEVICES", "4", 1);	/* every GPU an AMD one */
	RUN(&r, VRUN, "--sim", "--gpu", "auto", "--", "/bin/true");
	cr_assert(runtest_exited(&r, 67), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "no GPU for a CUDA job: the CUDA driver lists"
			 " none"), "%s", r.err);
	setenv("VGPU_SIM_HIP_DEVICES", "0", 1);	/* every GPU both */
	RUN(&r, VRUN, "--sim", "--hip", "--gpu", "auto", "--", "/bin/true");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
}

Test(run_hip_gpus, no_cuda_driver_still_lists_hip_gpus)
{
	setenv("VGPU_REAL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	setenv("LD_LIBRARY_PATH", VHIP_LIB_PATH, 1);
	RUN(&r, VRUN, "--verbose", "--hip", "--gpu", "1", "--", SH, "-c",
	    "printf %s \"$HIP_VISIBLE_DEVICES\"");
	unsetenv("LD_LIBRARY_PATH");
	unsetenv("VGPU_REAL_LIBCUDA");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert_str_eq(r.out, "1");
	cr_assert(strstr(r.err, "cannot load the CUDA driver"), "%s", r.err);
	cr_assert(strstr(r.err, "GPU 1 (") && strstr(r.err, "an AMD GPU"),
		  "%s", r.err);
	cr_assert_null(strstr(r.err, "NVIDIA"), "%s", r.err);
}

/* A HIP runtime that cannot be loaded: an empty libamdhip64.so.5 first
 * in LD_LIBRARY_PATH (this machine may have a real one installed). */
static void break_hip_runtime(void)
{
	FILE *f;

	cr_assert_eq(mkdir(runtest_path("nohip"), 0755), 0);
	f = fopen(runtest_path("nohip/libamdhip64.so.5"), "w");
	cr_assert_not_null(f);
	fclose(f);
	setenv("LD_LIBRARY_PATH", runtest_path("nohip"), 1);
}

Test(run_hip_gpus, no_hip_runtime_still_lists_cuda_gpus)
{
	break_hip_runtime();
	setenv("VGPU_REAL_LIBCUDA", TEST_SIM_LIBCUDA, 1);
	RUN(&r, VRUN, "--verbose", "--gpu", "1", "--", SH, "-c",
	    "printf %s \"$CUDA_VISIBLE_DEVICES\"");
	cr_assert(runtest_exited(&r, 0), "status %#x: %s", r.status, r.err);
	cr_assert_str_eq(r.out, uuid[1]);
	cr_assert(strstr(r.err, "cannot load the HIP runtime"), "%s", r.err);
	cr_assert_null(strstr(r.err, "an AMD GPU"), "%s", r.err);

	setenv("VGPU_REAL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	RUN(&r, VRUN, "--gpu", "0", "--", "/bin/true");
	unsetenv("VGPU_REAL_LIBCUDA");
	unsetenv("LD_LIBRARY_PATH");
	cr_assert(runtest_exited(&r, 68), "status %#x: %s", r.status, r.err);
	cr_assert(strstr(r.err, "neither through the CUDA driver (cannot load"
			 " the CUDA driver") && strstr(r.err, "nor through the "
			 "HIP runtime (cannot load the HIP runtime"), "%s",
		  r.err);
}

/* The caller's HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES: the list's
 * GPU 2 is the runtime's device 0 under them, and the job gets that. */
Test(run_hip_gpus, composed_with_the_callers_lists)
{
	struct holder h;

	setenv("HIP_VISIBLE_DEVICES", "1,0", 1);	/* GPU 3, then 2 */
	hold_hip(&h, "2", NULL, "h");
	unsetenv("HIP_VISIBLE_DEVICES");
	cr_assert_eq(held(3, "h"), 64 * MIB, "HIP's 0 is the second AMD GPU");
	runtest_release(&h);

	setenv("ROCR_VISIBLE_DEVICES", "1", 1);		/* GPU 3 alone */
	hold_hip(&h, "2", NULL, "r");
	RUN(&r, VRUN, "--sim", "--hip", "--gpu", "3", "--", "/bin/true");
	unsetenv("ROCR_VISIBLE_DEVICES");
	cr_assert_eq(held(3, "r"), 64 * MIB, "ROCR's 0 is the second one");
	runtest_release(&h);
	cr_assert(runtest_exited(&r, 67), "three GPUs: %s", r.err);
}

/* vgpu-top lists GPUs by their ledgers, not through a driver: an AMD GPU's
 * next to an NVIDIA GPU's, each with its process's front end. */
Test(run_hip_gpus, top_shows_amd_next_to_nvidia)
{
	static char top[1 << 16];
	char cmd[PATH_MAX + 256];
	struct holder c, h;
	size_t n;
	FILE *f;

	HOLD(&c, VRUN, "--sim", "--gpu", "0", "--memory", "1GiB", "--tenant",
	     "n", "--", TEST_HOLDER, "0");
	hold_hip(&h, "3", NULL, "m");
	snprintf(cmd, sizeof(cmd), "%s --dir %s --json --interval 0",
		 VGPU_TOP, runtest_path("ledger"));
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(top, 1, sizeof(top) - 1, f);
	top[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s", top);
	runtest_release(&h);
	runtest_release(&c);
	cr_assert(strstr(top, uuid[0]) && strstr(top, uuid[3]), "%s", top);
	cr_assert(strstr(top, "\"front_end\": \"cuda\"") &&
		  strstr(top, "\"front_end\": \"hip\""), "%s", top);
}
