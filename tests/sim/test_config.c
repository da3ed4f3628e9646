/* test_config.c - sim/config.c: the VGPU_SIM_* variables, parsed by pure
 * functions (no environment, no driver state).
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static struct vsim_config cfg;
static char err[512];

static void reset(void)
{
	vsim_config_defaults(&cfg);
	err[0] = '\0';
}

TestSuite(config, .init = reset);

static int parse(const char *var, const char *value)
{
	err[0] = '\0';
	return vsim_config_parse_var(&cfg, var, value, err, sizeof(err));
}

static bool same_settings(const struct vsim_config *a,
			  const struct vsim_config *b)
{
	return a->devices == b->devices && a->memory == b->memory &&
	       a->sm_count == b->sm_count && a->kernel_ns == b->kernel_ns &&
	       a->green_contexts == b->green_contexts &&
	       a->bus_bandwidth == b->bus_bandwidth &&
	       a->host_late_ns == b->host_late_ns &&
	       a->unknown_kernel_fail == b->unknown_kernel_fail &&
	       strcmp(a->name, b->name) == 0 &&
	       strcmp(a->state_dir, b->state_dir) == 0;
}

/* A bad value is refused with a message naming the variable and the value,
 * and leaves the other settings as they were. */
static void refused(const char *var, const char *value)
{
	struct vsim_config before = cfg;

	cr_assert_eq(parse(var, value), -1, "%s=\"%s\" was accepted", var, value);
	cr_assert_not_null(strstr(err, var), "message \"%s\" does not name %s",
			   err, var);
	if (strlen(value) < 200)   /* longer ones are cut short in err */
		cr_assert_not_null(strstr(err, value), "message \"%s\" does "
				   "not quote \"%s\"", err, value);
	cr_assert(same_settings(&before, &cfg),
		  "%s=\"%s\" changed the configuration", var, value);
}

static void accepted(const char *var, const char *value)
{
	cr_assert_eq(parse(var, value), 0, "%s=\"%s\" refused: %s", var, value,
		     err);
}

static uint64_t size_of(const char *s)
{
	uint64_t v = 0xdeadbeef;

	cr_assert_eq(vsim_parse_size(s, &v), 0, "\"%s\" refused", s);
	return v;
}

static void size_refused(const char *s)
{
	uint64_t v = 0xdeadbeef;

	cr_assert_eq(vsim_parse_size(s, &v), -1, "\"%s\" accepted", s);
	cr_assert_eq(v, 0xdeadbeef, "\"%s\" wrote a result", s);
}

Test(config, defaults)
{
	cr_assert_eq(cfg.devices, 1);
	cr_assert_eq(cfg.memory, 16ull << 30);
	cr_assert_eq(cfg.sm_count, 132);
	cr_assert_str_eq(cfg.name, "libvgpu simulated GPU");
	cr_assert_eq(cfg.kernel_ns, 10000);
	cr_assert(cfg.green_contexts);
	cr_assert_eq(cfg.bus_bandwidth, 16ull << 30);
	cr_assert(strncmp(cfg.state_dir, "/dev/shm/vgpu-sim-", 18) == 0 ||
		  strncmp(cfg.state_dir, "/tmp/vgpu-sim-", 14) == 0,
		  "state_dir %s", cfg.state_dir);
	for (int k = 0; k < VSIM_FAIL_KINDS; k++)
		cr_assert(!cfg.fail[k].active);
}

Test(config, size_units)
{
	cr_assert_eq(size_of("0"), 0);
	cr_assert_eq(size_of("1"), 1);
	cr_assert_eq(size_of("1073741824"), 1ull << 30);
	cr_assert_eq(size_of("7B"), 7);
	cr_assert_eq(size_of("7b"), 7);
	cr_assert_eq(size_of("3K"), 3ull << 10);
	cr_assert_eq(size_of("3kb"), 3ull << 10);
	cr_assert_eq(size_of("3KiB"), 3ull << 10);
	cr_assert_eq(size_of("64M"), 64ull << 20);
	cr_assert_eq(size_of("64MB"), 64ull << 20);
	cr_assert_eq(size_of("64mib"), 64ull << 20);
	cr_assert_eq(size_of("16G"), 16ull << 30);
	cr_assert_eq(size_of("16GiB"), 16ull << 30);
	cr_assert_eq(size_of("2TiB"), 2ull << 40);
	cr_assert_eq(size_of("2tb"), 2ull << 40);
}

Test(config, size_limits)
{
	cr_assert_eq(size_of("18446744073709551615"), UINT64_MAX);
	size_refused("18446744073709551616");
	size_refused("99999999999999999999999");
	/* 2^34 GiB is 2^64 bytes: one too many. */
	cr_assert_eq(size_of("17179869183G"), 17179869183ull << 30);
	size_refused("17179869184G");
	size_refused("16777216T");
}

Test(config, size_garbage)
{
	size_refused("");
	size_refused("MiB");
	size_refused("-1");
	size_refused("-64MiB");
	size_refused("+64MiB");
	size_refused(" 64MiB");
	size_refused("64 MiB");
	size_refused("64MiB ");
	size_refused("1.5G");
	size_refused("0x100");
	size_refused("64X");
	size_refused("64PiB");
	size_refused("64MiBs");
	size_refused("64Mi");
	cr_assert_eq(vsim_parse_size(NULL, &(uint64_t){ 0 }), -1);
}

Test(config, devices)
{
	accepted("VGPU_SIM_DEVICES", "1");
	cr_assert_eq(cfg.devices, 1);
	accepted("VGPU_SIM_DEVICES", "16");
	cr_assert_eq(cfg.devices, 16);
	accepted("VGPU_SIM_DEVICES", "3");
	cr_assert_eq(cfg.devices, 3);
	refused("VGPU_SIM_DEVICES", "");
	refused("VGPU_SIM_DEVICES", "0");
	refused("VGPU_SIM_DEVICES", "17");
	refused("VGPU_SIM_DEVICES", "-1");
	refused("VGPU_SIM_DEVICES", "two");
	refused("VGPU_SIM_DEVICES", "2x");
	refused("VGPU_SIM_DEVICES", "2 ");
	refused("VGPU_SIM_DEVICES", "18446744073709551617");
}

Test(config, memory)
{
	accepted("VGPU_SIM_MEMORY", "64MiB");
	cr_assert_eq(cfg.memory, 64ull << 20);
	accepted("VGPU_SIM_MEMORY", "1MiB");
	cr_assert_eq(cfg.memory, 1ull << 20);
	accepted("VGPU_SIM_MEMORY", "1048576");
	cr_assert_eq(cfg.memory, 1ull << 20);
	accepted("VGPU_SIM_MEMORY", "80GiB");
	cr_assert_eq(cfg.memory, 80ull << 30);
	refused("VGPU_SIM_MEMORY", "");
	refused("VGPU_SIM_MEMORY", "lots");
	refused("VGPU_SIM_MEMORY", "-64MiB");
	refused("VGPU_SIM_MEMORY", "1048575");   /* below 1MiB */
	refused("VGPU_SIM_MEMORY", "0");
	refused("VGPU_SIM_MEMORY", "64MHz");     /* not a size unit */
	refused("VGPU_SIM_MEMORY", "64 MiB");
	refused("VGPU_SIM_MEMORY", "99999999999999999999");
	refused("VGPU_SIM_MEMORY", "17179869184GiB");
}

Test(config, sm_count)
{
	accepted("VGPU_SIM_SM_COUNT", "1");
	cr_assert_eq(cfg.sm_count, 1);
	accepted("VGPU_SIM_SM_COUNT", "1024");
	cr_assert_eq(cfg.sm_count, 1024);
	accepted("VGPU_SIM_SM_COUNT", "108");
	cr_assert_eq(cfg.sm_count, 108);
	refused("VGPU_SIM_SM_COUNT", "");
	refused("VGPU_SIM_SM_COUNT", "0");
	refused("VGPU_SIM_SM_COUNT", "1025");
	refused("VGPU_SIM_SM_COUNT", "-5");
	refused("VGPU_SIM_SM_COUNT", "12abc");
	refused("VGPU_SIM_SM_COUNT", "1K");      /* no units for a count */
	refused("VGPU_SIM_SM_COUNT", "99999999999999999999");
}

Test(config, green_contexts)
{
	static const char *const off[] = { "0", "false", "no", "off", "OFF",
					   "False" };
	static const char *const on[] = { "1", "true", "yes", "on", "ON",
					  "Yes" };

	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		accepted("VGPU_SIM_GREEN_CONTEXTS", off[i]);
		cr_assert(!cfg.green_contexts, "%s", off[i]);
		accepted("VGPU_SIM_GREEN_CONTEXTS", on[i]);
		cr_assert(cfg.green_contexts, "%s", on[i]);
	}
	refused("VGPU_SIM_GREEN_CONTEXTS", "");
	refused("VGPU_SIM_GREEN_CONTEXTS", "2");
	refused("VGPU_SIM_GREEN_CONTEXTS", "maybe");
	refused("VGPU_SIM_GREEN_CONTEXTS", "on ");
	refused("VGPU_SIM_GREEN_CONTEXTS", "y");
}

Test(config, bus_bandwidth)
{
	accepted("VGPU_SIM_BUS_BANDWIDTH", "16GiB");
	cr_assert_eq(cfg.bus_bandwidth, 16ull << 30);
	accepted("VGPU_SIM_BUS_BANDWIDTH", "500MiB/s");
	cr_assert_eq(cfg.bus_bandwidth, 500ull << 20);
	accepted("VGPU_SIM_BUS_BANDWIDTH", "64gib/s");
	cr_assert_eq(cfg.bus_bandwidth, 64ull << 30);
	accepted("VGPU_SIM_BUS_BANDWIDTH", "1000000");
	cr_assert_eq(cfg.bus_bandwidth, 1000000);
	accepted("VGPU_SIM_BUS_BANDWIDTH", "0");
	cr_assert_eq(cfg.bus_bandwidth, 0);
	accepted("VGPU_SIM_BUS_BANDWIDTH", "0/s");
	cr_assert_eq(cfg.bus_bandwidth, 0);
	refused("VGPU_SIM_BUS_BANDWIDTH", "");
	refused("VGPU_SIM_BUS_BANDWIDTH", "/s");
	refused("VGPU_SIM_BUS_BANDWIDTH", "fast");
	refused("VGPU_SIM_BUS_BANDWIDTH", "-1GiB");
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/");
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/ms");
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/s/s");
	refused("VGPU_SIM_BUS_BANDWIDTH", "16 GiB/s");
	refused("VGPU_SIM_BUS_BANDWIDTH", "16Gbps");
	refused("VGPU_SIM_BUS_BANDWIDTH", "1.5GiB");
	refused("VGPU_SIM_BUS_BANDWIDTH", "17179869184GiB");
}

Test(config, name)
{
	char longest[256], too_long[257];

	memset(longest, 'n', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	memset(too_long, 'n', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = '\0';

	accepted("VGPU_SIM_NAME", "Test GPU 80GB");
	cr_assert_str_eq(cfg.name, "Test GPU 80GB");
	accepted("VGPU_SIM_NAME", "x");
	cr_assert_str_eq(cfg.name, "x");
	accepted("VGPU_SIM_NAME", longest);
	cr_assert_str_eq(cfg.name, longest);
	refused("VGPU_SIM_NAME", "");
	refused("VGPU_SIM_NAME", too_long);
}

Test(config, state_dir)
{
	char too_long[4096];

	memset(too_long, 'd', sizeof(too_long) - 1);
	too_long[0] = '/';
	too_long[sizeof(too_long) - 1] = '\0';

	accepted("VGPU_SIM_STATE_DIR", "/tmp/some-dir");
	cr_assert_str_eq(cfg.state_dir, "/tmp/some-dir");
	accepted("VGPU_SIM_STATE_DIR", "/");
	cr_assert_str_eq(cfg.state_dir, "/");
	refused("VGPU_SIM_STATE_DIR", "");
	refused("VGPU_SIM_STATE_DIR", "relative/dir");
	refused("VGPU_SIM_STATE_DIR", "./dir");
	/* Room must be left for "/devN.state" after the directory. */
	refused("VGPU_SIM_STATE_DIR", too_long);
}

Test(config, kernel_ns)
{
	accepted("VGPU_SIM_KERNEL_NS", "0");
	cr_assert_eq(cfg.kernel_ns, 0);
	accepted("VGPU_SIM_KERNEL_NS", "2000000");
	cr_assert_eq(cfg.kernel_ns, 2000000);
	accepted("VGPU_SIM_KERNEL_NS", "60000000000");
	cr_assert_eq(cfg.kernel_ns, 60000000000ull);
	refused("VGPU_SIM_KERNEL_NS", "");
	refused("VGPU_SIM_KERNEL_NS", "60000000001");
	refused("VGPU_SIM_KERNEL_NS", "-1");
	refused("VGPU_SIM_KERNEL_NS", "2ms");    /* nanoseconds, no units */
	refused("VGPU_SIM_KERNEL_NS", "1e6");
	refused("VGPU_SIM_KERNEL_NS", "99999999999999999999");
}

Test(config, host_late_ns)
{
	accepted("VGPU_SIM_HOST_LATE_NS", "0");
	cr_assert_eq(cfg.host_late_ns, 0);
	accepted("VGPU_SIM_HOST_LATE_NS", "300000");
	cr_assert_eq(cfg.host_late_ns, 300000);
	accepted("VGPU_SIM_HOST_LATE_NS", "1000000000");
	cr_assert_eq(cfg.host_late_ns, 1000000000ull);
	refused("VGPU_SIM_HOST_LATE_NS", "");
	refused("VGPU_SIM_HOST_LATE_NS", "1000000001");
	refused("VGPU_SIM_HOST_LATE_NS", "-1");
	refused("VGPU_SIM_HOST_LATE_NS", "300us");
	refused("VGPU_SIM_HOST_LATE_NS", "99999999999999999999");
}

Test(config, unknown_kernel)
{
	cr_assert_eq(cfg.unknown_kernel_fail, false, "the default is wait");
	accepted("VGPU_SIM_UNKNOWN_KERNEL", "fail");
	cr_assert_eq(cfg.unknown_kernel_fail, true);
	accepted("VGPU_SIM_UNKNOWN_KERNEL", "wait");
	cr_assert_eq(cfg.unknown_kernel_fail, false);
	refused("VGPU_SIM_UNKNOWN_KERNEL", "");
	refused("VGPU_SIM_UNKNOWN_KERNEL", "FAIL");
	refused("VGPU_SIM_UNKNOWN_KERNEL", "1");
	refused("VGPU_SIM_UNKNOWN_KERNEL", "failure");
}

static void rule_is(enum vsim_fail_kind k, uint64_t first, uint64_t last,
		    uint64_t every)
{
	const struct vsim_fail_rule *r = &cfg.fail[k];

	cr_assert(r->active);
	cr_assert_eq(r->every, every);
	if (!every) {
		cr_assert_eq(r->first, first);
		cr_assert_eq(r->last, last);
	}
}

Test(config, fail_rules)
{
	accepted("VGPU_SIM_FAIL", "alloc:3");
	rule_is(VSIM_FAIL_ALLOC, 3, 3, 0);
	cr_assert(!cfg.fail[VSIM_FAIL_LAUNCH].active);

	reset();
	accepted("VGPU_SIM_FAIL", "launch:5-");
	rule_is(VSIM_FAIL_LAUNCH, 5, UINT64_MAX, 0);
	accepted("VGPU_SIM_FAIL", "alloc:2-4");
	rule_is(VSIM_FAIL_ALLOC, 2, 4, 0);
	accepted("VGPU_SIM_FAIL", "alloc:%4");
	rule_is(VSIM_FAIL_ALLOC, 0, 0, 4);
	accepted("VGPU_SIM_FAIL", "launch:*");
	rule_is(VSIM_FAIL_LAUNCH, 1, UINT64_MAX, 0);

	reset();
	accepted("VGPU_SIM_FAIL", "alloc:1,launch:2");
	rule_is(VSIM_FAIL_ALLOC, 1, 1, 0);
	rule_is(VSIM_FAIL_LAUNCH, 2, 2, 0);
}

/* No rules at all: fault injection off, as when the variable is unset. */
Test(config, fail_empty_means_none)
{
	accepted("VGPU_SIM_FAIL", "");
	for (int k = 0; k < VSIM_FAIL_KINDS; k++)
		cr_assert(!cfg.fail[k].active);
}

Test(config, fail_garbage)
{
	refused("VGPU_SIM_FAIL", "alloc");
	refused("VGPU_SIM_FAIL", "alloc:");
	refused("VGPU_SIM_FAIL", "alloc:0");
	refused("VGPU_SIM_FAIL", "alloc:-1");
	refused("VGPU_SIM_FAIL", "alloc:4-2");
	refused("VGPU_SIM_FAIL", "alloc:%0");
	refused("VGPU_SIM_FAIL", "alloc:%");
	refused("VGPU_SIM_FAIL", "alloc:3x");
	refused("VGPU_SIM_FAIL", "alloc:2-x");
	refused("VGPU_SIM_FAIL", "copy:1");
	refused("VGPU_SIM_FAIL", "Alloc:1");
	refused("VGPU_SIM_FAIL", ":1");
	refused("VGPU_SIM_FAIL", "alloc:1,,launch:2");
	refused("VGPU_SIM_FAIL", "alloc:99999999999999999999");
}

Test(config, fail_hit)
{
	struct vsim_fail_rule off = { 0 };
	struct vsim_fail_rule third = { .active = true, .first = 3, .last = 3 };
	struct vsim_fail_rule from5 = { .active = true, .first = 5,
					.last = UINT64_MAX };
	struct vsim_fail_rule every4 = { .active = true, .every = 4 };

	for (uint64_t n = 1; n <= 20; n++) {
		cr_assert(!vsim_fail_hit(&off, n));
		cr_assert_eq(vsim_fail_hit(&third, n), n == 3, "n=%llu",
			     (unsigned long long)n);
		cr_assert_eq(vsim_fail_hit(&from5, n), n >= 5, "n=%llu",
			     (unsigned long long)n);
		cr_assert_eq(vsim_fail_hit(&every4, n), n % 4 == 0, "n=%llu",
			     (unsigned long long)n);
	}
	cr_assert(vsim_fail_hit(&from5, UINT64_MAX));
}

Test(config, unknown_variable)
{
	cr_assert_eq(parse("VGPU_SIM_MEMROY", "64MiB"), -1);
	cr_assert_not_null(strstr(err, "VGPU_SIM_MEMROY"), "%s", err);
}

/* The message fits the buffer it is given, however small. */
Test(config, message_truncated)
{
	char small[16];

	memset(small, 'z', sizeof(small));
	cr_assert_eq(vsim_config_parse_var(&cfg, "VGPU_SIM_MEMORY", "lots",
					   small, sizeof(small)), -1);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
}

Test(config, from_env)
{
	setenv("VGPU_SIM_DEVICES", "2", 1);
	setenv("VGPU_SIM_MEMORY", "96MiB", 1);
	setenv("VGPU_SIM_SM_COUNT", "8", 1);
	setenv("VGPU_SIM_NAME", "Env GPU", 1);
	setenv("VGPU_SIM_STATE_DIR", "/tmp/env-state", 1);
	setenv("VGPU_SIM_KERNEL_NS", "5000", 1);
	setenv("VGPU_SIM_FAIL", "launch:%3", 1);
	setenv("VGPU_SIM_BUS_BANDWIDTH", "1GiB/s", 1);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.devices, 2);
	cr_assert_eq(cfg.memory, 96ull << 20);
	cr_assert_eq(cfg.sm_count, 8);
	cr_assert_str_eq(cfg.name, "Env GPU");
	cr_assert_str_eq(cfg.state_dir, "/tmp/env-state");
	cr_assert_eq(cfg.kernel_ns, 5000);
	cr_assert_eq(cfg.bus_bandwidth, 1ull << 30);
	rule_is(VSIM_FAIL_LAUNCH, 0, 0, 3);
}

Test(config, from_env_unset_gives_defaults)
{
	struct vsim_config want;
	static const char *const vars[] = {
		"VGPU_SIM_DEVICES", "VGPU_SIM_MEMORY", "VGPU_SIM_SM_COUNT",
		"VGPU_SIM_NAME", "VGPU_SIM_STATE_DIR", "VGPU_SIM_KERNEL_NS",
		"VGPU_SIM_FAIL", "VGPU_SIM_GREEN_CONTEXTS",
		"VGPU_SIM_BUS_BANDWIDTH",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	vsim_config_defaults(&want);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(&want, &cfg, sizeof(cfg)), 0);
}

Test(config, from_env_names_bad_variable)
{
	setenv("VGPU_SIM_MEMORY", "64MiB", 1);
	setenv("VGPU_SIM_SM_COUNT", "many", 1);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), -1);
	cr_assert_not_null(strstr(err, "VGPU_SIM_SM_COUNT"), "%s", err);
	cr_assert_not_null(strstr(err, "many"), "%s", err);
}
