/* test_run_hip.c - vgpu-run with HIP jobs on the simulated device: a
 * program that links libamdhip64 is preloaded libvgpu-hip.so (not
 * libvgpu.so) and runs in its slice; --hip does the same for a command
 * vgpu-run cannot see into (a script); a CUDA program keeps libvgpu.so.
 */
#include <criterion/criterion.h>

#include "tools/vgpu-run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/vgpu-run-hip-XXXXXX";
static char out[1 << 16];

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* vgpu-run ARGS with stdin, on this test's simulated device; its stdout
 * and stderr in out; its exit status. */
static int run(const char *args, const char *in)
{
	char cmd[4096];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "printf '%s' | env -u LD_PRELOAD "
		 "-u LD_LIBRARY_PATH VGPU_SIM_STATE_DIR=%s/state "
		 "VGPU_SIM_MEMORY=1GiB VGPU_LEDGER_DIR=%s VGPU_TENANT=r1 "
		 "%s %s 2>&1", in, dir, dir, VGPU_RUN, args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	return WEXITSTATUS(pclose(f));
}

TestSuite(run_hip, .init = setup, .fini = teardown, .timeout = 60);

Test(run_hip, detects_hip_programs)
{
	cr_expect(vrun_is_hip_program(HIP_JOB));
	cr_expect_not(vrun_is_hip_program(HOLDER), "a CUDA program");
	cr_expect_not(vrun_is_hip_program("sh"), "found in PATH, not HIP");
	cr_expect_not(vrun_is_hip_program("/nonexistent/prog"));
	cr_expect_not(vrun_is_hip_program(__FILE__), "not an ELF file");
}

Test(run_hip, hip_job_runs_in_its_slice)
{
	char args[1024];

	snprintf(args, sizeof(args), "--sim --memory 128MiB -- %s", HIP_JOB);
	cr_assert_eq(run(args, "memgetinfo\\nalloc 100M malloc\\n"
			 "alloc 100M malloc\\nexit\\n"), 0, "%s", out);
	cr_expect(strstr(out, "memgetinfo 0 free=134217728 "
			 "total=134217728\n"), "%s", out);
	cr_expect(strstr(out, "alloc 0 id=0\nalloc 2 id=-1\n"),
		  "the second is past the slice: %s", out);
}

Test(run_hip, preload_follows_the_program)
{
	char args[1024];

	run("--sim --hip -- sh -c 'echo \"P=$LD_PRELOAD\"; "
	    "echo \"L=$LD_LIBRARY_PATH\"'", "");
	cr_expect(strstr(out, "P=" HIP_SHIM "\n"), "%s", out);
	cr_expect(strstr(out, "L=" VHIP_LIB_PATH "\n"), "%s", out);
	run("--sim -- sh -c 'echo \"P=$LD_PRELOAD\"'", "");
	cr_expect(strstr(out, "P=" SHIM "\n"), "%s", out);
	snprintf(args, sizeof(args), "--sim --verbose -- %s", HIP_JOB);
	cr_assert_eq(run(args, "exit\\n"), 0, "%s", out);
	cr_expect(strstr(out, "vgpu-run: a HIP job (it links libamdhip64): "
			 "preloading " HIP_SHIM "\n"), "%s", out);
}

Test(run_hip, missing_hip_library)
{
	cr_expect_eq(run("--hip -- true", ""), 0, "%s", out);
	setenv("VGPU_HIP_LIBRARY", "/nonexistent/libvgpu-hip.so", 1);
	cr_expect_eq(run("--hip -- true", ""), 69, "%s", out);
	cr_expect(strstr(out, "VGPU_HIP_LIBRARY=\"/nonexistent/"), "%s", out);
	unsetenv("VGPU_HIP_LIBRARY");
}
