/* test_config.c - sim/config.c: the table of VGPU_SIM_* variables and its
 * pure parsers (no environment, no driver state), the loader, the warning
 * about names the table lacks, and docs/simulator.md's table checked
 * against it.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h"

static struct vsim_config cfg;
static char err[512];

/* Why a value is refused, as the messages say it. */
#define EMPTY		"is empty"
#define NEGATIVE	"is negative"
#define NOT_NUMBER	"is not a number"
#define TRAILING	"has trailing characters"
#define UNIT		"has an unknown unit"
#define TOO_LARGE	"is too large"
#define RANGE		"is out of range"
#define TOO_LONG	"is too long"
#define NOT_ABSOLUTE	"is not an absolute path"
#define UNKNOWN_WORD	"is not a known value"
#define FAIL_KIND	"has a rule of no known kind"
#define FAIL_RULE	"has a malformed rule"

static void reset(void)
{
	vsim_config_defaults(&cfg);
	err[0] = '\0';
}

TestSuite(config, .init = reset);
TestSuite(table, .init = reset);
TestSuite(names, .init = reset);

static int parse(const char *var, const char *value)
{
	err[0] = '\0';
	return vsim_config_parse_var(&cfg, var, value, err, sizeof(err));
}

/* A bad value is refused with exactly VAR="value" <why>; expected <the
 * row's expectation>, and leaves the configuration as it was. */
static void refused(const char *var, const char *value, const char *why)
{
	const struct vsim_cfg_var *d = vsim_config_find(var);
	struct vsim_config before = cfg;
	char want[1024];

	cr_assert_not_null(d, "%s is not in the table", var);
	cr_assert_eq(parse(var, value), -1, "%s=\"%s\" was accepted", var,
		     value);
	if (strlen(value) <= 64)    /* longer ones are cut short */
		snprintf(want, sizeof(want), "%s=\"%s\" %s; expected %s", var,
			 value, why, d->expect);
	else
		snprintf(want, sizeof(want), "%s=\"%.64s...\" %s; expected %s",
			 var, value, why, d->expect);
	cr_assert_str_eq(err, want);
	cr_assert_eq(memcmp(&before, &cfg, sizeof(cfg)), 0,
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
	refused("VGPU_SIM_DEVICES", "", EMPTY);
	refused("VGPU_SIM_DEVICES", "0", RANGE);
	refused("VGPU_SIM_DEVICES", "17", RANGE);
	refused("VGPU_SIM_DEVICES", "-1", NEGATIVE);
	refused("VGPU_SIM_DEVICES", "two", NOT_NUMBER);
	refused("VGPU_SIM_DEVICES", "2x", TRAILING);
	refused("VGPU_SIM_DEVICES", "2 ", TRAILING);
	refused("VGPU_SIM_DEVICES", "18446744073709551617", TOO_LARGE);
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
	refused("VGPU_SIM_MEMORY", "", EMPTY);
	refused("VGPU_SIM_MEMORY", "lots", NOT_NUMBER);
	refused("VGPU_SIM_MEMORY", "-64MiB", NEGATIVE);
	refused("VGPU_SIM_MEMORY", "1048575", RANGE);   /* below 1MiB */
	refused("VGPU_SIM_MEMORY", "0", RANGE);
	refused("VGPU_SIM_MEMORY", "64MHz", UNIT);     /* not a size unit */
	refused("VGPU_SIM_MEMORY", "64 MiB", UNIT);
	refused("VGPU_SIM_MEMORY", "99999999999999999999", TOO_LARGE);
	refused("VGPU_SIM_MEMORY", "17179869184GiB", TOO_LARGE);
}

Test(config, sm_count)
{
	accepted("VGPU_SIM_SM_COUNT", "1");
	cr_assert_eq(cfg.sm_count, 1);
	accepted("VGPU_SIM_SM_COUNT", "1024");
	cr_assert_eq(cfg.sm_count, 1024);
	accepted("VGPU_SIM_SM_COUNT", "108");
	cr_assert_eq(cfg.sm_count, 108);
	refused("VGPU_SIM_SM_COUNT", "", EMPTY);
	refused("VGPU_SIM_SM_COUNT", "0", RANGE);
	refused("VGPU_SIM_SM_COUNT", "1025", RANGE);
	refused("VGPU_SIM_SM_COUNT", "-5", NEGATIVE);
	refused("VGPU_SIM_SM_COUNT", "12abc", TRAILING);
	refused("VGPU_SIM_SM_COUNT", "1K", TRAILING);  /* a count: no units */
	refused("VGPU_SIM_SM_COUNT", "99999999999999999999", TOO_LARGE);
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
	refused("VGPU_SIM_GREEN_CONTEXTS", "", EMPTY);
	refused("VGPU_SIM_GREEN_CONTEXTS", "2", UNKNOWN_WORD);
	refused("VGPU_SIM_GREEN_CONTEXTS", "maybe", UNKNOWN_WORD);
	refused("VGPU_SIM_GREEN_CONTEXTS", "on ", UNKNOWN_WORD);
	refused("VGPU_SIM_GREEN_CONTEXTS", "y", UNKNOWN_WORD);
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
	refused("VGPU_SIM_BUS_BANDWIDTH", "", EMPTY);
	refused("VGPU_SIM_BUS_BANDWIDTH", "/s", NOT_NUMBER);
	refused("VGPU_SIM_BUS_BANDWIDTH", "fast", NOT_NUMBER);
	refused("VGPU_SIM_BUS_BANDWIDTH", "-1GiB", NEGATIVE);
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/ms", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "16GiB/s/s", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "16 GiB/s", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "16Gbps", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "1.5GiB", UNIT);
	refused("VGPU_SIM_BUS_BANDWIDTH", "17179869184GiB", TOO_LARGE);
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
	refused("VGPU_SIM_NAME", "", EMPTY);
	refused("VGPU_SIM_NAME", too_long, TOO_LONG);
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
	refused("VGPU_SIM_STATE_DIR", "", EMPTY);
	refused("VGPU_SIM_STATE_DIR", "relative/dir", NOT_ABSOLUTE);
	refused("VGPU_SIM_STATE_DIR", "./dir", NOT_ABSOLUTE);
	/* Room must be left for "/devN.state" after the directory. */
	refused("VGPU_SIM_STATE_DIR", too_long, TOO_LONG);
}

Test(config, kernel_ns)
{
	accepted("VGPU_SIM_KERNEL_NS", "0");
	cr_assert_eq(cfg.kernel_ns, 0);
	accepted("VGPU_SIM_KERNEL_NS", "2000000");
	cr_assert_eq(cfg.kernel_ns, 2000000);
	accepted("VGPU_SIM_KERNEL_NS", "60000000000");
	cr_assert_eq(cfg.kernel_ns, 60000000000ull);
	refused("VGPU_SIM_KERNEL_NS", "", EMPTY);
	refused("VGPU_SIM_KERNEL_NS", "60000000001", RANGE);
	refused("VGPU_SIM_KERNEL_NS", "-1", NEGATIVE);
	refused("VGPU_SIM_KERNEL_NS", "2ms", TRAILING);  /* no units */
	refused("VGPU_SIM_KERNEL_NS", "1e6", TRAILING);
	refused("VGPU_SIM_KERNEL_NS", "99999999999999999999", TOO_LARGE);
}

Test(config, host_late_ns)
{
	accepted("VGPU_SIM_HOST_LATE_NS", "0");
	cr_assert_eq(cfg.host_late_ns, 0);
	accepted("VGPU_SIM_HOST_LATE_NS", "300000");
	cr_assert_eq(cfg.host_late_ns, 300000);
	accepted("VGPU_SIM_HOST_LATE_NS", "1000000000");
	cr_assert_eq(cfg.host_late_ns, 1000000000ull);
	refused("VGPU_SIM_HOST_LATE_NS", "", EMPTY);
	refused("VGPU_SIM_HOST_LATE_NS", "1000000001", RANGE);
	refused("VGPU_SIM_HOST_LATE_NS", "-1", NEGATIVE);
	refused("VGPU_SIM_HOST_LATE_NS", "300us", TRAILING);
	refused("VGPU_SIM_HOST_LATE_NS", "99999999999999999999", TOO_LARGE);
}

Test(config, unknown_kernel)
{
	cr_assert_eq(cfg.unknown_kernel_fail, false, "the default is wait");
	accepted("VGPU_SIM_UNKNOWN_KERNEL", "fail");
	cr_assert_eq(cfg.unknown_kernel_fail, true);
	accepted("VGPU_SIM_UNKNOWN_KERNEL", "wait");
	cr_assert_eq(cfg.unknown_kernel_fail, false);
	refused("VGPU_SIM_UNKNOWN_KERNEL", "", EMPTY);
	refused("VGPU_SIM_UNKNOWN_KERNEL", "FAIL", UNKNOWN_WORD);
	refused("VGPU_SIM_UNKNOWN_KERNEL", "1", UNKNOWN_WORD);
	refused("VGPU_SIM_UNKNOWN_KERNEL", "failure", UNKNOWN_WORD);
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
	refused("VGPU_SIM_FAIL", "alloc", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:0", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:-1", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:4-2", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:%0", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:%", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:3x", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:2-x", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "copy:1", FAIL_KIND);
	refused("VGPU_SIM_FAIL", "Alloc:1", FAIL_KIND);
	refused("VGPU_SIM_FAIL", ":1", FAIL_KIND);
	refused("VGPU_SIM_FAIL", "alloc:1,,launch:2", FAIL_RULE);
	refused("VGPU_SIM_FAIL", "alloc:99999999999999999999", FAIL_RULE);
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

/* A rule set that is partly bad is refused whole: no rule of it is kept. */
Test(config, fail_partly_bad_keeps_nothing)
{
	refused("VGPU_SIM_FAIL", "alloc:1,copy:2", FAIL_KIND);
	refused("VGPU_SIM_FAIL", "launch:2,alloc:x", FAIL_RULE);
	for (int k = 0; k < VSIM_FAIL_KINDS; k++)
		cr_assert(!cfg.fail[k].active);
}

/* One exact message per row: the variable, the value, why, and the row's
 * whole expectation. */
Test(config, messages_exact)
{
	static const struct { const char *var, *value, *msg; } cases[] = {
		{ "VGPU_SIM_DEVICES", "17", "VGPU_SIM_DEVICES=\"17\" is out of "
		  "range; expected a device count from 1 to 16" },
		{ "VGPU_SIM_MEMORY", "64MHz", "VGPU_SIM_MEMORY=\"64MHz\" has an "
		  "unknown unit; expected a size of at least 1MiB: a whole "
		  "number of bytes, optionally followed by B, K/KiB, M/MiB, "
		  "G/GiB or T/TiB (e.g. 16GiB)" },
		{ "VGPU_SIM_SM_COUNT", "many", "VGPU_SIM_SM_COUNT=\"many\" is "
		  "not a number; expected a multiprocessor count from 1 to "
		  "1024" },
		{ "VGPU_SIM_NAME", "", "VGPU_SIM_NAME=\"\" is empty; expected a "
		  "name of 1 to 255 bytes" },
		{ "VGPU_SIM_STATE_DIR", "state", "VGPU_SIM_STATE_DIR=\"state\" "
		  "is not an absolute path; expected an absolute directory "
		  "path of 1 to 4031 bytes" },
		{ "VGPU_SIM_KERNEL_NS", "-1", "VGPU_SIM_KERNEL_NS=\"-1\" is "
		  "negative; expected nanoseconds from 0 to 60000000000" },
		{ "VGPU_SIM_UNKNOWN_KERNEL", "skip", "VGPU_SIM_UNKNOWN_KERNEL="
		  "\"skip\" is not a known value; expected wait (a kernel with "
		  "no host form waits out VGPU_SIM_KERNEL_NS) or fail (its "
		  "launch returns CUDA_ERROR_NOT_SUPPORTED)" },
		{ "VGPU_SIM_FAIL", "copy:1", "VGPU_SIM_FAIL=\"copy:1\" has a "
		  "rule of no known kind; expected comma-separated rules "
		  "KIND:N, KIND:N-, KIND:N-M, KIND:%K or KIND:* with KIND "
		  "alloc or launch" },
		{ "VGPU_SIM_FAIL", "alloc:0", "VGPU_SIM_FAIL=\"alloc:0\" has a "
		  "malformed rule; expected comma-separated rules KIND:N, "
		  "KIND:N-, KIND:N-M, KIND:%K or KIND:* with KIND alloc or "
		  "launch" },
		{ "VGPU_SIM_GREEN_CONTEXTS", "maybe", "VGPU_SIM_GREEN_CONTEXTS="
		  "\"maybe\" is not a known value; expected 1, true, yes or on "
		  "(green contexts), or 0, false, no or off (their entry "
		  "points are not supported)" },
		{ "VGPU_SIM_HOST_LATE_NS", "300us", "VGPU_SIM_HOST_LATE_NS="
		  "\"300us\" has trailing characters; expected nanoseconds "
		  "from 0 to 1000000000" },
		{ "VGPU_SIM_BUS_BANDWIDTH", "99999999999999999999/s",
		  "VGPU_SIM_BUS_BANDWIDTH=\"99999999999999999999/s\" is too "
		  "large; expected a size per second such as 16GiB, 16GiB/s "
		  "or 500MiB/s, or 0 for no bus cost" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(parse(cases[i].var, cases[i].value), -1);
		cr_assert_str_eq(err, cases[i].msg);
	}
}

/* A long value is cut at 64 bytes, unprintable bytes shown as '?'. */
Test(config, message_shows_value_safely)
{
	char long_name[300];

	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	cr_assert_eq(parse("VGPU_SIM_NAME", long_name), -1);
	cr_assert_str_eq(err, "VGPU_SIM_NAME=\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
			 "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...\" is too long; "
			 "expected a name of 1 to 255 bytes");
	cr_assert_eq(parse("VGPU_SIM_DEVICES", "2\n\x1b[0m"), -1);
	cr_assert_str_eq(err, "VGPU_SIM_DEVICES=\"2??[0m\" has trailing "
			 "characters; expected a device count from 1 to 16");
}

Test(config, unknown_variable)
{
	struct vsim_config before = cfg;

	cr_assert_eq(parse("VGPU_SIM_MEMROY", "64MiB"), -1);
	cr_assert_str_eq(err, "VGPU_SIM_MEMROY is not a simulator variable; "
			 "did you mean VGPU_SIM_MEMORY?");
	cr_assert_eq(memcmp(&before, &cfg, sizeof(cfg)), 0);
	cr_assert_eq(parse("VGPU_SIM_ZZZ", "1"), -1);
	cr_assert_str_eq(err, "VGPU_SIM_ZZZ is not a simulator variable");
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

/* ---- the table ---------------------------------------------------------- */

static size_t var_count(void)
{
	size_t n = 0;

	while (vsim_config_var(n))
		n++;
	return n;
}

Test(table, every_row_is_described)
{
	size_t n = var_count();

	cr_assert_gt(n, 0);
	for (size_t i = 0; i < n; i++) {
		const struct vsim_cfg_var *d = vsim_config_var(i);

		cr_assert(strncmp(d->name, "VGPU_SIM_", 9) == 0, "%s", d->name);
		cr_assert(d->expect && *d->expect, "%s", d->name);
		cr_assert_not_null(d->parse, "%s", d->name);
		cr_assert_eq(vsim_config_find(d->name), d, "%s", d->name);
		cr_assert_leq(d->min, d->max, "%s", d->name);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(vsim_config_var(j)->name, d->name);
	}
	cr_assert_null(vsim_config_find("VGPU_SIM_MEMROY"));
	cr_assert_null(vsim_config_find("VGPU_SIM_LIBRARY"));
}

/* Every default is a valid value, and the defaults are the rows' ones:
 * setting a variable to its default changes nothing. */
Test(table, defaults_are_the_rows_defaults)
{
	for (size_t i = 0; vsim_config_var(i); i++) {
		const struct vsim_cfg_var *d = vsim_config_var(i);
		struct vsim_config want;

		if (!d->def)
			continue;
		vsim_config_defaults(&want);
		accepted(d->name, d->def);
		cr_assert_eq(memcmp(&want, &cfg, sizeof(cfg)), 0, "%s=%s",
			     d->name, d->def);
	}
}

/* Every row: its default, a valid value that is not the default, and a bad
 * one, each with its outcome. A row without a line here fails. */
static const struct {
	const char *name, *good, *bad, *why;
	size_t offset;
	uint64_t def, set;    /* numbers: the default and the good value */
} rows[] = {
#define O(f) offsetof(struct vsim_config, f)
	{ "VGPU_SIM_DEVICES", "4", "0", RANGE, O(devices), 1, 4 },
	{ "VGPU_SIM_HIP_DEVICES", "2", "17", RANGE, O(hip_devices), 0, 2 },
	{ "VGPU_SIM_MEMORY", "512MiB", "512MiBs", UNIT, O(memory),
	  16ull << 30, 512ull << 20 },
	{ "VGPU_SIM_SM_COUNT", "64", "64.0", TRAILING, O(sm_count), 132, 64 },
	{ "VGPU_SIM_NAME", "Row GPU", "", EMPTY, O(name), 0, 0 },
	{ "VGPU_SIM_STATE_DIR", "/tmp/row", "tmp/row", NOT_ABSOLUTE,
	  O(state_dir), 0, 0 },
	{ "VGPU_SIM_KERNEL_NS", "123", "1000000000000", RANGE, O(kernel_ns),
	  10000, 123 },
	{ "VGPU_SIM_UNKNOWN_KERNEL", "fail", "Wait", UNKNOWN_WORD,
	  O(unknown_kernel_fail), 0, 1 },
	{ "VGPU_SIM_FAIL", "alloc:%2", "launch", FAIL_RULE, O(fail), 0, 0 },
	{ "VGPU_SIM_GREEN_CONTEXTS", "off", "enabled", UNKNOWN_WORD,
	  O(green_contexts), 1, 0 },
	{ "VGPU_SIM_HOST_LATE_NS", "5000", "5e3", TRAILING, O(host_late_ns),
	  0, 5000 },
	{ "VGPU_SIM_BUS_BANDWIDTH", "1GiB/s", "1GiB/h", UNIT,
	  O(bus_bandwidth), 16ull << 30, 1ull << 30 },
#undef O
};

static uint64_t field_num(const struct vsim_cfg_var *d)
{
	const char *p = (const char *)&cfg + d->offset;

	switch (d->type) {
	case VSIM_CFG_INT:
		return (uint64_t)*(const int *)(const void *)p;
	case VSIM_CFG_U64:
		return *(const uint64_t *)(const void *)p;
	case VSIM_CFG_BOOL:
		return *(const bool *)(const void *)p;
	default:
		return 0;
	}
}

Test(table, every_row_default_good_and_bad)
{
	size_t n = sizeof(rows) / sizeof(rows[0]);

	cr_assert_eq(n, var_count(), "a row of the table has no line here");
	for (size_t i = 0; i < n; i++) {
		const struct vsim_cfg_var *d = vsim_config_var(i);
		bool num = d->type <= VSIM_CFG_BOOL;

		cr_assert_str_eq(d->name, rows[i].name, "rows out of order");
		cr_assert_eq(d->offset, rows[i].offset, "%s", d->name);
		reset();
		if (num)
			cr_assert_eq(field_num(d), rows[i].def, "%s", d->name);
		accepted(d->name, rows[i].good);
		if (num)
			cr_assert_eq(field_num(d), rows[i].set, "%s", d->name);
		else if (d->type == VSIM_CFG_STRING)
			cr_assert_str_eq((const char *)&cfg + d->offset,
					 rows[i].good);
		else
			cr_assert(cfg.fail[VSIM_FAIL_ALLOC].active &&
				  cfg.fail[VSIM_FAIL_ALLOC].every == 2);
		refused(d->name, rows[i].bad, rows[i].why);
	}
}

Test(table, strerror_names_every_status)
{
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_EMPTY), EMPTY);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_NEGATIVE), NEGATIVE);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_NOT_NUMBER), NOT_NUMBER);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_TRAILING), TRAILING);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_UNIT), UNIT);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_TOO_LARGE), TOO_LARGE);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_RANGE), RANGE);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_TOO_LONG), TOO_LONG);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_NOT_ABSOLUTE),
			 NOT_ABSOLUTE);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_UNKNOWN_WORD),
			 UNKNOWN_WORD);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_FAIL_KIND), FAIL_KIND);
	cr_assert_str_eq(vsim_config_strerror(VSIM_CFG_FAIL_RULE), FAIL_RULE);
	cr_assert_str_eq(vsim_config_strerror(-1), "is invalid");
}

#ifdef VSIM_DOC
/* docs/simulator.md's table under "## Configuration": one line per row of
 * the table, in its order, with its default ("none" for an empty one; any
 * text for one computed at run time). */
Test(table, simulator_doc_matches_the_table)
{
	static char doc[1 << 18];
	char *p, *line, *save = NULL;
	size_t i = 0;
	ssize_t n;
	int fd = open(VSIM_DOC, O_RDONLY);

	cr_assert_geq(fd, 0, "%s", VSIM_DOC);
	n = read(fd, doc, sizeof(doc) - 1);
	close(fd);
	cr_assert(n > 0 && (size_t)n < sizeof(doc) - 1, "%s", VSIM_DOC);
	doc[n] = '\0';
	p = strstr(doc, "\n## Configuration\n");
	cr_assert_not_null(p, "no Configuration section in %s", VSIM_DOC);
	p = strstr(p, "\n| variable | default | meaning |\n");
	cr_assert_not_null(p, "no table of variables in %s", VSIM_DOC);
	p = strchr(p + 1, '\n') + 1;	/* past the heading */
	p = strchr(p, '\n') + 1;	/* past |---| */
	for (line = strtok_r(p, "\n", &save); line && *line == '|';
	     line = strtok_r(NULL, "\n", &save), i++) {
		const struct vsim_cfg_var *d = vsim_config_var(i);
		char name[64], def[256], *o = def;
		const char *c;

		cr_assert_not_null(d, "%s: a line no row has: %s", VSIM_DOC,
				   line);
		cr_assert_eq(sscanf(line, "| `%63[^`]` | %255[^|]|", name, def),
			     2, "%s: %s", VSIM_DOC, line);
		cr_assert_str_eq(name, d->name, "%s: out of the table's order",
				 VSIM_DOC);
		/* Backticks dropped, and the last space. */
		for (c = def; *c; c++)
			if (*c != '`')
				*o++ = *c;
		*o = '\0';
		if (o > def && o[-1] == ' ')
			o[-1] = '\0';
		if (!d->def)
			cr_assert(*def, "%s: %s has no default", VSIM_DOC,
				  d->name);
		else
			cr_assert_str_eq(def, *d->def ? d->def : "none",
					 "%s: %s's default", VSIM_DOC, d->name);
	}
	cr_assert_eq(i, var_count(), "%s lists %zu variables, the table %zu",
		     VSIM_DOC, i, var_count());
}
#endif

/* ---- loading ------------------------------------------------------------ */

static const char *const good_env[] = {
	"VGPU_SIM_DEVICES=2", "VGPU_SIM_MEMORY=96MiB", "VGPU_SIM_SM_COUNT=8",
	"VGPU_SIM_NAME=Env GPU", "VGPU_SIM_STATE_DIR=/tmp/env-state",
	"VGPU_SIM_KERNEL_NS=5000", "VGPU_SIM_UNKNOWN_KERNEL=fail",
	"VGPU_SIM_FAIL=launch:%3", "VGPU_SIM_GREEN_CONTEXTS=no",
	"VGPU_SIM_HOST_LATE_NS=700", "VGPU_SIM_BUS_BANDWIDTH=1GiB/s",
	"PATH=/bin", NULL,
};

static void good_env_loaded(void)
{
	cr_assert_eq(cfg.devices, 2);
	cr_assert_eq(cfg.memory, 96ull << 20);
	cr_assert_eq(cfg.sm_count, 8);
	cr_assert_str_eq(cfg.name, "Env GPU");
	cr_assert_str_eq(cfg.state_dir, "/tmp/env-state");
	cr_assert_eq(cfg.kernel_ns, 5000);
	cr_assert(cfg.unknown_kernel_fail);
	rule_is(VSIM_FAIL_LAUNCH, 0, 0, 3);
	cr_assert(!cfg.fail[VSIM_FAIL_ALLOC].active);
	cr_assert(!cfg.green_contexts);
	cr_assert_eq(cfg.host_late_ns, 700);
	cr_assert_eq(cfg.bus_bandwidth, 1ull << 30);
}

Test(config, load_every_variable)
{
	cr_assert_eq(vsim_config_load(&cfg, good_env, err, sizeof(err)), 0,
		     "%s", err);
	good_env_loaded();
}

Test(config, load_nothing_gives_defaults)
{
	static const char *const other[] = { "HOME=/root", NULL };
	struct vsim_config want;

	vsim_config_defaults(&want);
	cr_assert_eq(vsim_config_load(&cfg, NULL, err, sizeof(err)), 0);
	cr_assert_eq(memcmp(&want, &cfg, sizeof(cfg)), 0);
	cr_assert_eq(vsim_config_load(&cfg, other, err, sizeof(err)), 0);
	cr_assert_eq(memcmp(&want, &cfg, sizeof(cfg)), 0);
}

/* The first definition counts, as getenv(3) finds it. */
Test(config, load_first_definition_wins)
{
	static const char *const env[] = {
		"VGPU_SIM_DEVICES=3", "VGPU_SIM_DEVICES=zz", NULL
	};

	cr_assert_eq(vsim_config_load(&cfg, env, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(cfg.devices, 3);
}

Test(config, load_names_bad_variable)
{
	static const char *const env[] = {
		"VGPU_SIM_MEMORY=64MiB", "VGPU_SIM_SM_COUNT=many", NULL
	};

	cr_assert_eq(vsim_config_load(&cfg, env, err, sizeof(err)), -1);
	cr_assert_str_eq(err, "VGPU_SIM_SM_COUNT=\"many\" is not a number; "
			 "expected a multiprocessor count from 1 to 1024");
}

Test(config, from_env)
{
	for (size_t i = 0; good_env[i]; i++)
		if (strncmp(good_env[i], "VGPU_SIM_", 9) == 0)
			cr_assert_eq(putenv((char *)good_env[i]), 0);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), 0, "%s", err);
	good_env_loaded();
}

Test(config, from_env_unset_gives_defaults)
{
	struct vsim_config want;

	for (size_t i = 0; vsim_config_var(i); i++)
		unsetenv(vsim_config_var(i)->name);
	vsim_config_defaults(&want);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(memcmp(&want, &cfg, sizeof(cfg)), 0);
}

Test(config, from_env_names_bad_variable)
{
	setenv("VGPU_SIM_MEMORY", "64MiB", 1);
	setenv("VGPU_SIM_SM_COUNT", "many", 1);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), -1);
	cr_assert_str_eq(err, "VGPU_SIM_SM_COUNT=\"many\" is not a number; "
			 "expected a multiprocessor count from 1 to 1024");
}

/* ---- names the table lacks ---------------------------------------------- */

static char warn[2048];

Test(names, unknown_ones_are_named_with_the_closest)
{
	static const char *const env[] = {
		"VGPU_SIM_MEMROY=64MiB",	/* swapped letters */
		"VGPU_SIM_MEMORY=1GiB",		/* known */
		"VGPU_SIM_LIBRARY=/x/libcuda.so.1",	/* vgpu-run's */
		"VGPU_SIM_LIBCUDA=/y",		/* the tools tests' */
		"VGPU_SIM=1",			/* not VGPU_SIM_* */
		"VGPU_SIMX=1",
		"vgpu_sim_memory=1",		/* another case: not ours */
		"PATH=/bin",
		"VGPU_SIM_DEVICE=2",		/* a letter short */
		"VGPU_SIM_green_contexts=0",	/* the case is wrong */
		"VGPU_SIM_WHATEVER=1",		/* near nothing */
		"VGPU_SIM_=1",
		"VGPU_SIM_NOVALUE",
		NULL,
	};

	cr_assert_eq(vsim_config_check_names(env, warn, sizeof(warn)), 6);
	cr_assert_str_eq(warn,
		"VGPU_SIM_MEMROY is not a simulator variable; did you mean "
		"VGPU_SIM_MEMORY? (ignored)\n"
		"VGPU_SIM_DEVICE is not a simulator variable; did you mean "
		"VGPU_SIM_DEVICES? (ignored)\n"
		"VGPU_SIM_green_contexts is not a simulator variable; did you "
		"mean VGPU_SIM_GREEN_CONTEXTS? (ignored)\n"
		"VGPU_SIM_WHATEVER is not a simulator variable (ignored)\n"
		"VGPU_SIM_ is not a simulator variable (ignored)\n"
		"VGPU_SIM_NOVALUE is not a simulator variable (ignored)\n");
}

Test(names, none_unknown)
{
	cr_assert_eq(vsim_config_check_names(good_env, warn, sizeof(warn)), 0);
	cr_assert_str_eq(warn, "");
	cr_assert_eq(vsim_config_check_names(NULL, warn, sizeof(warn)), 0);
	cr_assert_str_eq(warn, "");
}

/* A long name is cut, unprintable bytes shown as '?'; a full buffer still
 * counts every name. */
Test(names, shown_safely)
{
	static char longer[128] = "VGPU_SIM_";
	const char *env[] = { longer, "VGPU_SIM_\x1b[31m=1", NULL };
	char small[32], want[256];

	memset(longer + 9, 'X', 100);
	snprintf(want, sizeof(want), "%.64s... is not a simulator variable "
		 "(ignored)\nVGPU_SIM_?[31m is not a simulator variable "
		 "(ignored)\n", longer);
	cr_assert_eq(vsim_config_check_names(env, warn, sizeof(warn)), 2);
	cr_assert_str_eq(warn, want);
	cr_assert_eq(vsim_config_check_names(env, small, sizeof(small)), 2);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
}

/* Loading ignores an unknown name; the process's environment is warned
 * about on stderr, and the simulator runs on. */
Test(names, from_env_warns_and_runs_on)
{
	char want[512], got[1024] = "";
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO);
	ssize_t n;

	cr_assert(f && saved >= 0);
	for (size_t i = 0; vsim_config_var(i); i++)
		unsetenv(vsim_config_var(i)->name);
	setenv("VGPU_SIM_MEMROY", "64MiB", 1);
	setenv("VGPU_SIM_DEVICES", "2", 1);
	cr_assert_eq(dup2(fileno(f), STDERR_FILENO), STDERR_FILENO);
	cr_assert_eq(vsim_config_from_env(&cfg, err, sizeof(err)), 0, "%s", err);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fileno(f), got, sizeof(got) - 1, 0);
	fclose(f);
	cr_assert_geq(n, 0);
	got[n] = '\0';
	snprintf(want, sizeof(want), "vgpu-sim[%d]: VGPU_SIM_MEMROY is not a "
		 "simulator variable; did you mean VGPU_SIM_MEMORY? "
		 "(ignored)\n", (int)getpid());
	cr_assert_str_eq(got, want);
	cr_assert_eq(cfg.devices, 2);
	cr_assert_eq(cfg.memory, 16ull << 30, "the misspelt one is ignored");
}
