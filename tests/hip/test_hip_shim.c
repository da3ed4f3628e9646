/* test_hip_shim.c - libvgpu-hip.so on the fake HIP runtime (fake/): the
 * slice's edge on every path the fake has, the views, the frees, a bad
 * option refused, and the binding to the runtime's versioned names. Each
 * test runs the job under LD_PRELOAD with a ledger directory of its own;
 * the fake's own count of what it holds is the ground truth.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[] = "/tmp/vgpu-hip-test-XXXXXX";
static char out[1 << 20];

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

/* Runs the job with env and args; its stdout (and stderr with err) in
 * out. */
static void run(const char *env, const char *args, bool err)
{
	char cmd[1024];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "env LD_PRELOAD=%s VGPU_LEDGER_DIR=%s "
		 "VGPU_TENANT=t1 %s %s %s %s", HIP_SHIM, dir, env, HIP_JOB,
		 args, err ? "2>&1" : "2>/dev/null");
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s: %s", cmd, out);
}

TestSuite(hip_shim, .init = setup, .fini = teardown);

Test(hip_shim, malloc_edge)
{
	run("VGPU_MEMORY_LIMIT=64MiB", "alloc 67108864 alloc 1 free alloc 1 "
	    "free used", false);
	cr_assert_str_eq(out, "0\n2\n0\n0\n0\n0 0\n");
}

Test(hip_shim, managed_edge)
{
	run("VGPU_MEMORY_LIMIT=1MiB", "managed 1048576 managed 1 free used",
	    false);
	cr_assert_str_eq(out, "0\n2\n0\n0 0\n");
}

/* The fake's pitch is 512-byte aligned: 1000 x 1000 holds 1,024,000
 * bytes of a 1 MiB slice, 24,576 left. */
Test(hip_shim, pitch_charged_its_pitch)
{
	run("VGPU_MEMORY_LIMIT=1MiB", "pitch 1000 1000 alloc 24577 "
	    "alloc 24576 free free used", false);
	cr_assert_str_eq(out, "0\n2\n0\n0\n0\n0 0\n");
}

Test(hip_shim, views_show_the_slice)
{
	run("VGPU_MEMORY_LIMIT=64MiB", "memgetinfo totalmem alloc 4096 "
	    "memgetinfo free", false);
	cr_assert_str_eq(out, "0 67108864 67108864\n0 67108864\n0\n"
			 "0 67104768 67108864\n0\n");
}

Test(hip_shim, bad_limit_refused)
{
	run("VGPU_MEMORY_LIMIT=12XB", "alloc 4096", true);
	cr_assert_not_null(strstr(out, "VGPU_MEMORY_LIMIT"), "%s", out);
	cr_assert_not_null(strstr(out, "\n101\n"), "%s", out);
}

/* The job's hipMalloc@hip_4.2 binds to the shim, not the runtime. */
Test(hip_shim, versioned_names_bind)
{
	run("LD_DEBUG=bindings", "alloc 4096 free", true);
	cr_assert_not_null(strstr(out, "libvgpu-hip.so [0]: normal symbol "
				  "`hipMalloc' [hip_4.2]"), "%s", out);
}
