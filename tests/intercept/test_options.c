/* test_options.c - options fed bad values refuse the device with a message
 * naming the variable, the value and what was expected (cuInit fails with
 * CUDA_ERROR_INVALID_VALUE) unless VGPU_ON_ERROR=warn; so do variables that
 * name no option (a misspelling, a device out of range), named with the
 * closest option; HAMi's aliases; the switch that turns limits off.
 *
 * Each case runs in a forked child (shimtest_run_child) that sets its
 * variables before its first CUDA call, so its stderr can be read.
 */
#include "shimtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "16GiB", 1);
	shimtest_env("t-options", NULL);
}

TestSuite(options, .init = setup, .fini = shimtest_cleanup);

struct bad_case {
	const char *var;
	const char *value;
};

static char long_name[100], long_path[5000];

static const struct bad_case *bad_cases(size_t *n)
{
	static struct bad_case c[] = {
		{ "VGPU_MEMORY_LIMIT", "" },
		{ "VGPU_MEMORY_LIMIT", "garbage" },
		{ "VGPU_MEMORY_LIMIT", "-1" },
		{ "VGPU_MEMORY_LIMIT", "-64MiB" },
		{ "VGPU_MEMORY_LIMIT", "0" },
		{ "VGPU_MEMORY_LIMIT", "99999999999999999999" },
		{ "VGPU_MEMORY_LIMIT", "17179869184GiB" },
		{ "VGPU_MEMORY_LIMIT", "8GB" },
		{ "VGPU_MEMORY_LIMIT", "8 parsecs" },
		{ "VGPU_MEMORY_LIMIT", "1.5GiB" },
		{ "VGPU_MEMORY_LIMIT", " 8GiB" },
		{ "VGPU_MEMORY_LIMIT_0", "lots" },
		{ "VGPU_MEMORY_LIMIT_1", "-3" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "abc" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "-4096m" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "99999999999999999999m" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "4096q" },
		{ "CUDA_DEVICE_MEMORY_LIMIT_0", "4096mb" },
		{ "VGPU_TENANT", "" },
		{ "VGPU_TENANT", "has space" },
		{ "VGPU_TENANT", "tab\there" },
		{ "VGPU_TENANT", long_name },
		{ "VGPU_LEDGER_DIR", "" },
		{ "VGPU_LEDGER_DIR", "relative/dir" },
		{ "VGPU_LEDGER_DIR", "/tmp/ctl\001char" },
		{ "VGPU_LEDGER_DIR", long_path },
		{ "VGPU_CONTEXT_OVERHEAD", "2TiB" },
		{ "VGPU_CONTEXT_OVERHEAD", "-1" },
		{ "VGPU_COMPUTE_LIMIT", "" },
		{ "VGPU_COMPUTE_LIMIT", "0" },
		{ "VGPU_COMPUTE_LIMIT", "101" },
		{ "VGPU_COMPUTE_LIMIT", "-30" },
		{ "VGPU_COMPUTE_LIMIT", "30.5" },
		{ "VGPU_COMPUTE_LIMIT", "half" },
		{ "VGPU_COMPUTE_LIMIT", "99999999999999999999" },
		{ "VGPU_COMPUTE_LIMIT_0", "30GiB" },
		{ "CUDA_DEVICE_SM_LIMIT", "-1" },
		{ "CUDA_DEVICE_SM_LIMIT", "150" },
		{ "CUDA_DEVICE_SM_LIMIT_1", "x" },
		{ "VGPU_COMPUTE_POLICY", "soft" },
		{ "VGPU_COMPUTE_POLICY", "" },
		{ "GPU_CORE_UTILIZATION_POLICY", "sometimes" },
		{ "VGPU_COMPUTE_MODE", "quantum" },
		{ "VGPU_OVERCOMMIT", "" },
		{ "VGPU_OVERCOMMIT", "yes" },
		{ "VGPU_OVERCOMMIT", "hostt" },
		{ "CUDA_OVERSUBSCRIBE", "maybe" },
		{ "VGPU_HOST_SPILL_LIMIT", "-1" },
		{ "VGPU_HOST_SPILL_LIMIT", "lots" },
		{ "VGPU_HOST_SPILL_LIMIT", "8GB" },
		/* 2^64 - 1 is "no limit" inside: as a size, too large. */
		{ "VGPU_MEMORY_LIMIT", "18446744073709551615" },
		{ "VGPU_MEMORY_LIMIT_0", "18446744073709551615B" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "18446744073709551615" },
		{ "VGPU_HOST_SPILL_LIMIT", "18446744073709551615" },
	};

	memset(long_name, 'n', sizeof(long_name) - 1);
	long_path[0] = '/';
	memset(long_path + 1, 'd', sizeof(long_path) - 2);
	*n = sizeof(c) / sizeof(c[0]);
	return c;
}

struct child_args {
	const char *env[4][2];	/* name, value; NULL-terminated */
	int steps;		/* 0: cuInit only; 1: and a context; 2: and
				 * allocations of 32 MiB and 1 byte */
};

static int child(void *p)
{
	const struct child_args *a = p;
	CUcontext ctx;
	CUdeviceptr x;
	size_t total = 0;
	CUresult r;

	for (int i = 0; i < 4 && a->env[i][0]; i++)
		setenv(a->env[i][0], a->env[i][1], 1);
	r = cuInit(0);
	printf("init=%d\n", (int)r);
	if (r != CUDA_SUCCESS) {
		printf("retain=%d\n", (int)cuDevicePrimaryCtxRetain(&ctx, 0));
		return (int)r;
	}
	if (a->steps >= 1) {
		r = cuDevicePrimaryCtxRetain(&ctx, 0);
		printf("retain=%d\n", (int)r);
		if (r == CUDA_SUCCESS)
			cuCtxSetCurrent(ctx);
		cuDeviceTotalMem(&total, 0);
		printf("total=%zu\n", total);
	}
	if (a->steps >= 2) {
		printf("alloc32=%d\n", (int)cuMemAlloc(&x, 32 * MIB));
		printf("alloc1=%d\n", (int)cuMemAlloc(&x, 1));
	}
	return 0;
}

/* The value as messages quote it: cut at 64 bytes, unprintables as '?'. */
static void quoted(const char *var, const char *value, char *out, size_t len)
{
	char v[65];
	size_t i;

	for (i = 0; value[i] && i < 64; i++)
		v[i] = value[i] >= 0x20 && value[i] < 0x7f ? value[i] : '?';
	v[i] = '\0';
	snprintf(out, len, "%s=\"%s", var, v);
}

Test(options, bad_values_refuse_the_device)
{
	static char out[16384];
	char q[128];
	size_t n;
	const struct bad_case *c = bad_cases(&n);

	for (size_t i = 0; i < n; i++) {
		struct child_args a = { { { c[i].var, c[i].value } }, 0 };
		int st = shimtest_run_child(child, &a, out, sizeof(out));

		cr_assert_eq(st, CUDA_ERROR_INVALID_VALUE,
			     "%s=\"%s\": status %d, want INVALID_VALUE; "
			     "output: %s", c[i].var, c[i].value, st, out);
		cr_assert_not_null(strstr(out, "retain=") ?
				   strstr(out, "retain=") : NULL);
		cr_assert_null(strstr(out, "retain=0"),
			       "%s: a context after a refused cuInit", c[i].var);
		quoted(c[i].var, c[i].value, q, sizeof(q));
		cr_assert_not_null(strstr(out, q), "%s=\"%s\": the message does "
				   "not quote it (%s): %s", c[i].var,
				   c[i].value, q, out);
		cr_assert_not_null(strstr(out, "expected"), "%s=\"%s\": no "
				   "expectation in: %s", c[i].var, c[i].value,
				   out);
	}
}

Test(options, bad_values_with_on_error_warn_go_on)
{
	static char out[16384];
	char q[128];
	size_t n;
	const struct bad_case *c = bad_cases(&n);

	for (size_t i = 0; i < n; i++) {
		struct child_args a = { { { c[i].var, c[i].value },
					  { "VGPU_ON_ERROR", "warn" } }, 1 };
		int st = shimtest_run_child(child, &a, out, sizeof(out));

		cr_assert_eq(st, 0, "%s=\"%s\" with warn: status %d; output: "
			     "%s", c[i].var, c[i].value, st, out);
		cr_assert_not_null(strstr(out, "init=0\n"), "%s", out);
		quoted(c[i].var, c[i].value, q, sizeof(q));
		cr_assert_not_null(strstr(out, q), "%s=\"%s\": not named with "
				   "warn: %s", c[i].var, c[i].value, out);
	}
}

Test(options, bad_on_error_refuses)
{
	char out[4096];
	struct child_args a = { { { "VGPU_ON_ERROR", "maybe" } }, 0 };

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)),
		     CUDA_ERROR_INVALID_VALUE, "%s", out);
	cr_assert_not_null(strstr(out, "VGPU_ON_ERROR=\"maybe\""), "%s", out);
}

Test(options, hami_limit_alias_accepted)
{
	char out[4096];
	struct child_args a = { { { "CUDA_DEVICE_MEMORY_LIMIT", "4096m" } }, 1 };
	struct child_args b = { { { "CUDA_DEVICE_MEMORY_LIMIT_0", "16m" },
				  { "CUDA_DEVICE_MEMORY_LIMIT", "4096m" } }, 2 };

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_not_null(strstr(out, "init=0\nretain=0\ntotal=4294967296\n"),
			   "%s", out);
	cr_assert_null(strstr(out, "CUDA_DEVICE_MEMORY_LIMIT"),
		       "a valid value is not reported: %s", out);
	cr_assert_eq(shimtest_run_child(child, &b, out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_not_null(strstr(out, "total=16777216\nalloc32=2\nalloc1=0\n"),
			   "%s", out);
}

Test(options, disable_control_means_no_limit)
{
	char out[4096];
	struct child_args a = { { { "CUDA_DISABLE_CONTROL", "true" },
				  { "VGPU_MEMORY_LIMIT", "16MiB" } }, 2 };
	struct child_args c = { { { "VGPU_MEMORY_LIMIT", "16MiB" } }, 2 };

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_not_null(strstr(out, "total=17179869184\nalloc32=0\n"
				  "alloc1=0\n"), "%s", out);
	/* The control: the same limit without the switch holds. */
	cr_assert_eq(shimtest_run_child(child, &c, out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_not_null(strstr(out, "total=16777216\nalloc32=2\nalloc1=0\n"),
			   "%s", out);
}

/* docs/configuration.md: "With VGPU_DISABLE (or CUDA_DISABLE_CONTROL) on,
 * nothing is enforced, so bad values of the other options are reported as
 * warnings only." */
Test(options, disable_control_makes_bad_values_warnings)
{
	char out[4096];
	struct child_args a = { { { "CUDA_DISABLE_CONTROL", "true" },
				  { "VGPU_MEMORY_LIMIT", "junk" } }, 2 };
	struct child_args b = { { { "VGPU_DISABLE", "1" },
				  { "VGPU_TENANT", "" } }, 2 };

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)), 0,
		     "refused with limits off: %s", out);
	cr_assert_not_null(strstr(out, "init=0\nretain=0\n"), "%s", out);
	cr_assert_not_null(strstr(out, "alloc32=0\n"), "%s", out);
	cr_assert_not_null(strstr(out, "VGPU_MEMORY_LIMIT=\"junk\""), "%s",
			   out);
	cr_assert_eq(shimtest_run_child(child, &b, out, sizeof(out)), 0,
		     "refused with limits off: %s", out);
}

/* ---- variables that name no option --------------------------------------- */

struct unknown_case {
	const char *var;
	const char *line;	/* the message, whole */
};

static const struct unknown_case unknown_cases[] = {
	{ "VGPU_MEMROY_LIMIT", "libvgpu: VGPU_MEMROY_LIMIT is not a known "
	  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
	{ "VGPU_MEMORY_LIMIT_x", "libvgpu: VGPU_MEMORY_LIMIT_x is not a known "
	  "option: \"x\" is not a device index (VGPU_MEMORY_LIMIT_0 to "
	  "VGPU_MEMORY_LIMIT_63)\n" },
	{ "VGPU_MEMORY_LIMIT_99999999999999999999", "libvgpu: "
	  "VGPU_MEMORY_LIMIT_99999999999999999999 is not a known option: "
	  "device 99999999999999999999 is out of range (VGPU_MEMORY_LIMIT_0 "
	  "to VGPU_MEMORY_LIMIT_63)\n" },
	{ "VGPU_MEMORY_LIMIT_64", "libvgpu: VGPU_MEMORY_LIMIT_64 is not a "
	  "known option: device 64 is out of range (VGPU_MEMORY_LIMIT_0 to "
	  "VGPU_MEMORY_LIMIT_63)\n" },
	{ "CUDA_DEVICE_MEMORY_LIMIT_64", "libvgpu: CUDA_DEVICE_MEMORY_LIMIT_64 "
	  "is not a known option: device 64 is out of range "
	  "(CUDA_DEVICE_MEMORY_LIMIT_0 to CUDA_DEVICE_MEMORY_LIMIT_63)\n" },
};

#define UNKNOWN_COUNT (sizeof(unknown_cases) / sizeof(unknown_cases[0]))

/* Under refuse (the default), a misspelt 1 GiB limit refuses the GPU
 * exactly as a bad value does: cuInit fails, no context, the name and
 * the closest option on stderr. */
Test(options, unknown_names_refuse_the_device)
{
	static char out[16384];

	for (size_t i = 0; i < UNKNOWN_COUNT; i++) {
		struct child_args a = { { { unknown_cases[i].var, "1GiB" } },
					2 };
		int st = shimtest_run_child(child, &a, out, sizeof(out));

		cr_assert_eq(st, CUDA_ERROR_INVALID_VALUE, "%s: status %d, "
			     "want INVALID_VALUE: %s", unknown_cases[i].var,
			     st, out);
		cr_assert_not_null(strstr(out, "init=1\nretain="), "%s: %s",
				   unknown_cases[i].var, out);
		cr_assert_null(strstr(out, "retain=0"), "%s: a context after "
			       "a refused cuInit: %s", unknown_cases[i].var,
			       out);
		cr_assert_not_null(strstr(out, unknown_cases[i].line),
				   "no '%s' in: %s", unknown_cases[i].line, out);
		cr_assert_not_null(strstr(out, "libvgpu: error: refusing the "
					  "GPU: fix the variable above, or "
					  "set VGPU_ON_ERROR=warn to run as "
					  "if it was unset\n"), "%s", out);
	}
}

/* Under warn, or with limits off, it is a warning and the job runs as if
 * the variable were unset: the misspelt limit does not apply. */
Test(options, unknown_names_with_warn_or_disable_go_on)
{
	static char out[16384];
	static const char *const also[][2] = {
		{ "VGPU_ON_ERROR", "warn" }, { "VGPU_DISABLE", "1" },
	};

	for (size_t i = 0; i < UNKNOWN_COUNT; i++) {
		for (size_t j = 0; j < 2; j++) {
			struct child_args a = {
				{ { unknown_cases[i].var, "16MiB" },
				  { also[j][0], also[j][1] } }, 2 };
			int st = shimtest_run_child(child, &a, out,
						    sizeof(out));

			cr_assert_eq(st, 0, "%s with %s: status %d: %s",
				     unknown_cases[i].var, also[j][0], st, out);
			cr_assert_not_null(strstr(out, "init=0\nretain=0\n"
					   "total=17179869184\nalloc32=0\n"
					   "alloc1=0\n"), "%s with %s: %s",
					   unknown_cases[i].var, also[j][0],
					   out);
			cr_assert_not_null(strstr(out, unknown_cases[i].line),
					   "%s", out);
			cr_assert_not_null(strstr(out, j ?
				"libvgpu: warning: limits are off "
				"(VGPU_DISABLE): going on as if the variable "
				"above was unset\n" :
				"libvgpu: warning: VGPU_ON_ERROR=warn: going "
				"on as if the variable above was unset\n"),
				"%s", out);
		}
	}
}

/* Names of other parts of libvgpu (the simulator's, vgpu-run's, the
 * tests') are not options and not reported; with them, the limit holds. */
Test(options, other_parts_names_are_not_reported)
{
	char out[4096];
	struct child_args a = { { { "VGPU_LIBRARY", "/nowhere/libvgpu.so" },
				  { "VGPU_SIM", "1" },
				  { "VGPU_TEST_ANYTHING", "1" },
				  { "VGPU_MEMORY_LIMIT", "16MiB" } }, 2 };

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_str_eq(out, "init=0\nretain=0\ntotal=16777216\nalloc32=2\n"
			 "alloc1=0\n");
}

/* ---- per-device variables for devices the process does not have ---------- */

/* cuInit, the device count, a context on device 0 and 32 MiB on it. */
static int count_child(void *p)
{
	const struct child_args *a = p;
	CUcontext ctx;
	CUdeviceptr x;
	CUresult r;
	int n = -1;

	for (int i = 0; i < 4 && a->env[i][0]; i++)
		setenv(a->env[i][0], a->env[i][1], 1);
	r = cuInit(0);
	printf("init=%d\n", (int)r);
	printf("count=%d", (int)cuDeviceGetCount(&n));
	printf(" n=%d\n", n);
	r = cuDevicePrimaryCtxRetain(&ctx, 0);
	printf("retain=%d\n", (int)r);
	if (r != CUDA_SUCCESS)
		return 1;
	cuCtxSetCurrent(ctx);
	printf("alloc32=%d\n", (int)cuMemAlloc(&x, 32 * MIB));
	return 0;
}

struct absent_case {
	const char *var;
	const char *line;	/* the message, whole */
};

/* The simulator shows one device unless VGPU_SIM_DEVICES says more. */
static const struct absent_case absent_cases[] = {
	{ "VGPU_MEMORY_LIMIT_1", "libvgpu: VGPU_MEMORY_LIMIT_1 names device "
	  "1, but the process sees 1 device (VGPU_MEMORY_LIMIT_0)\n" },
	{ "VGPU_COMPUTE_LIMIT_1", "libvgpu: VGPU_COMPUTE_LIMIT_1 names device "
	  "1, but the process sees 1 device (VGPU_COMPUTE_LIMIT_0)\n" },
};

/* HAMi's names for such devices are only warned about: a HAMi pod sets a
 * limit for each of its GPUs, and a job in it may narrow
 * CUDA_VISIBLE_DEVICES (HAMi-core ignores the rest). */
static const struct absent_case absent_hami_cases[] = {
	{ "CUDA_DEVICE_MEMORY_LIMIT_1", "libvgpu: warning: "
	  "CUDA_DEVICE_MEMORY_LIMIT_1 names device 1, but the process sees 1 "
	  "device (CUDA_DEVICE_MEMORY_LIMIT_0) (ignored, as HAMi-core does)\n" },
	{ "CUDA_DEVICE_SM_LIMIT_63", "libvgpu: warning: CUDA_DEVICE_SM_LIMIT_63 "
	  "names device 63, but the process sees 1 device "
	  "(CUDA_DEVICE_SM_LIMIT_0) (ignored, as HAMi-core does)\n" },
};

#define ABSENT_COUNT (sizeof(absent_cases) / sizeof(absent_cases[0]))

/* A limit for a device the job cannot see would apply to nothing: under
 * refuse (the default) cuInit fails once the driver says how many devices
 * there are, and so does what needs the driver after it. */
Test(options, devices_the_process_lacks_refuse_the_device)
{
	static char out[16384];

	for (size_t i = 0; i < ABSENT_COUNT; i++) {
		struct child_args a = { { { absent_cases[i].var, "16" } }, 0 };
		int st = shimtest_run_child(count_child, &a, out, sizeof(out));

		cr_assert_eq(st, 1, "%s: status %d: %s", absent_cases[i].var,
			     st, out);
		cr_assert_not_null(strstr(out, "init=1\ncount=3 n=-1\n"
					  "retain=101\n"), "%s: %s",
				   absent_cases[i].var, out);
		cr_assert_not_null(strstr(out, absent_cases[i].line),
				   "no '%s' in: %s", absent_cases[i].line, out);
		cr_assert_not_null(strstr(out, "libvgpu: error: refusing the "
					  "GPU: fix the variable above, or "
					  "set VGPU_ON_ERROR=warn to run as "
					  "if it was unset\n"), "%s", out);
	}
}

Test(options, devices_the_process_lacks_with_warn_go_on)
{
	static char out[16384];

	for (size_t i = 0; i < ABSENT_COUNT; i++) {
		struct child_args a = { { { absent_cases[i].var, "16" },
					  { "VGPU_MEMORY_LIMIT", "16MiB" },
					  { "VGPU_ON_ERROR", "warn" } }, 0 };
		int st = shimtest_run_child(count_child, &a, out, sizeof(out));

		cr_assert_eq(st, 0, "%s: status %d: %s", absent_cases[i].var,
			     st, out);
		/* Device 0 keeps the global limit. */
		cr_assert_not_null(strstr(out, "init=0\ncount=0 n=1\n"
					  "retain=0\nalloc32=2\n"), "%s: %s",
				   absent_cases[i].var, out);
		cr_assert_not_null(strstr(out, absent_cases[i].line),
				   "no '%s' in: %s", absent_cases[i].line, out);
		cr_assert_not_null(strstr(out, "libvgpu: warning: "
					  "VGPU_ON_ERROR=warn: going on as if "
					  "the variable above was unset\n"),
				   "%s", out);
	}
}

Test(options, hami_devices_the_process_lacks_are_warned_about)
{
	static char out[16384];

	for (size_t i = 0; i < 2; i++) {
		struct child_args a = { { { absent_hami_cases[i].var, "16" },
					  { "VGPU_MEMORY_LIMIT", "16MiB" } },
					0 };
		int st = shimtest_run_child(count_child, &a, out, sizeof(out));

		cr_assert_eq(st, 0, "%s: status %d: %s",
			     absent_hami_cases[i].var, st, out);
		cr_assert_not_null(strstr(out, "init=0\ncount=0 n=1\n"
					  "retain=0\nalloc32=2\n"), "%s: %s",
				   absent_hami_cases[i].var, out);
		cr_assert_not_null(strstr(out, absent_hami_cases[i].line),
				   "no '%s' in: %s", absent_hami_cases[i].line,
				   out);
		cr_assert_null(strstr(out, "refusing"), "%s", out);
	}
}

/* With the device there, the same variable is a limit like any other. */
Test(options, devices_the_process_has_pass)
{
	char out[4096];
	struct child_args a = { { { "VGPU_SIM_DEVICES", "2" },
				  { "VGPU_MEMORY_LIMIT_1", "16MiB" } }, 0 };

	cr_assert_eq(shimtest_run_child(count_child, &a, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_str_eq(out, "init=0\ncount=0 n=2\nretain=0\nalloc32=0\n");
}

/* The index is the one a program passes to cuDeviceGet, after
 * CUDA_VISIBLE_DEVICES: physical device 2, shown alone, is device 0. */
Test(options, devices_are_counted_after_cuda_visible_devices)
{
	char out[4096];
	struct child_args a = { { { "VGPU_SIM_DEVICES", "3" },
				  { "CUDA_VISIBLE_DEVICES", "2" },
				  { "VGPU_MEMORY_LIMIT_2", "16MiB" } }, 0 };
	struct child_args b = { { { "VGPU_SIM_DEVICES", "3" },
				  { "CUDA_VISIBLE_DEVICES", "2" },
				  { "VGPU_MEMORY_LIMIT_0", "16MiB" } }, 0 };

	cr_assert_eq(shimtest_run_child(count_child, &a, out, sizeof(out)), 1,
		     "%s", out);
	cr_assert_not_null(strstr(out, "libvgpu: VGPU_MEMORY_LIMIT_2 names "
				  "device 2, but the process sees 1 device "
				  "under CUDA_VISIBLE_DEVICES=\"2\" "
				  "(VGPU_MEMORY_LIMIT_0)\n"), "%s", out);
	cr_assert_eq(shimtest_run_child(count_child, &b, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_str_eq(out, "init=0\ncount=0 n=1\nretain=0\nalloc32=2\n");
}

/* ---- the VGPU_ namespace's edges, HAMi's names misspelt ------------------- */

/* VGPU_ alone is a name cut short; plain VGPU is not in the namespace. */
Test(options, vgpu_prefix_alone_is_named_plain_vgpu_is_not)
{
	char out[4096];
	struct child_args a = { { { "VGPU_", "1" } }, 0 };
	struct child_args b = { { { "VGPU", "1" },
				  { "VGPU_MEMORY_LIMIT", "16MiB" } }, 0 };

	cr_assert_eq(shimtest_run_child(count_child, &a, out, sizeof(out)), 1,
		     "%s", out);
	cr_assert_not_null(strstr(out, "init=1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "libvgpu: VGPU_ is not a known option: "
				  "nothing follows the prefix\n"), "%s", out);
	cr_assert_eq(shimtest_run_child(count_child, &b, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_str_eq(out, "init=0\ncount=0 n=1\nretain=0\nalloc32=2\n");
}

/* A misspelt HAMi name is outside the VGPU_ namespace: a warning naming
 * the HAMi variable meant, and the job runs as without it. */
Test(options, misspelt_hami_names_are_warned_about)
{
	char out[4096];
	struct child_args a = { { { "CUDA_DEVICE_MEMORY_LIMT", "16m" } }, 0 };
	struct child_args b = { { { "CUDA_DEVICE_SM_LIMT_0", "10" } }, 0 };

	cr_assert_eq(shimtest_run_child(count_child, &a, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_str_eq(out, "libvgpu: warning: CUDA_DEVICE_MEMORY_LIMT is "
			 "not a HAMi variable; did you mean "
			 "CUDA_DEVICE_MEMORY_LIMIT? (ignored)\ninit=0\n"
			 "count=0 n=1\nretain=0\nalloc32=0\n");
	cr_assert_eq(shimtest_run_child(count_child, &b, out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_not_null(strstr(out, "libvgpu: warning: "
				  "CUDA_DEVICE_SM_LIMT_0 is not a HAMi "
				  "variable; did you mean "
				  "CUDA_DEVICE_SM_LIMIT_0? (ignored)\n"),
			   "%s", out);
}

/* A slice larger than the device: accepted, the device's size applies
 * (cuDeviceTotalMem says it), and a warning says so once. */
Test(options, a_slice_larger_than_the_device_is_named_once)
{
	char out[4096], want[256];
	struct child_args a = { { { "VGPU_MEMORY_LIMIT", "64GiB" },
				  { "VGPU_SIM_MEMORY", "64MiB" } }, 2 };
	const char *at;

	cr_assert_eq(shimtest_run_child(child, &a, out, sizeof(out)), 0, "%s",
		     out);
	snprintf(want, sizeof(want), "total=%llu\nalloc32=0\nalloc1=0\n",
		 64ull << 20);
	cr_assert_not_null(strstr(out, want), "%s", out);
	at = strstr(out, "the memory limit, 64GiB (VGPU_MEMORY_LIMIT or "
			 "VGPU_MEMORY_LIMIT_0), is larger than the device's "
			 "64MiB; the device's size applies\n");
	cr_assert_not_null(at, "%s", out);
	cr_assert_null(strstr(at + strlen("the memory limit"),
			      "the memory limit"), "said twice: %s", out);
}
