/* test_options.c - options fed bad values refuse the device with a message
 * naming the variable, the value and what was expected (cuInit fails with
 * CUDA_ERROR_INVALID_VALUE) unless VGPU_ON_ERROR=warn; HAMi's aliases; the
 * switch that turns limits off.
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
