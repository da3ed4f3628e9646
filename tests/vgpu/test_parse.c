/* test_parse.c - the pure value parsers and formatters (parse.c): sizes,
 * percentages, booleans, enum words, log levels, the status phrases, and
 * the size and tenant formatters. */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "options.h"

#define GiB (UINT64_C(1) << 30)
#define MiB (UINT64_C(1) << 20)
#define KiB (UINT64_C(1) << 10)
#define TiB (UINT64_C(1) << 40)

/* ---- vgpu__parse_size ------------------------------------------------ */

struct size_case {
	const char *s;
	uint64_t v;
};

Test(parse_size, accepts_binary_units_in_any_case)
{
	static const struct size_case ok[] = {
		{ "0", 0 },		{ "1", 1 },
		{ "512B", 512 },	{ "512b", 512 },
		{ "4k", 4 * KiB },	{ "4K", 4 * KiB },
		{ "4KiB", 4 * KiB },	{ "4kib", 4 * KiB },
		{ "4KIB", 4 * KiB },	{ "4096m", 4 * GiB },
		{ "4M", 4 * MiB },	{ "4MiB", 4 * MiB },
		{ "2g", 2 * GiB },	{ "2GiB", 2 * GiB },
		{ "1T", TiB },		{ "1TiB", TiB },
		{ "007", 7 },		{ "4 GiB", 4 * GiB },
		{ "4   k", 4 * KiB },	{ "16777215TiB", 16777215 * TiB },
		{ "18446744073709551614", UINT64_MAX - 1 },
	};
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 12345;
		int rc = vgpu__parse_size(ok[i].s, &v);

		cr_assert_eq(rc, VGPU_PARSE_OK, "\"%s\": %s", ok[i].s,
			     vgpu__parse_strerror(rc));
		cr_assert_eq(v, ok[i].v, "\"%s\": %llu", ok[i].s,
			     (unsigned long long)v);
	}
}

struct bad_case {
	const char *s;
	int rc;
};

Test(parse_size, rejects_bad_sizes_with_the_reason)
{
	static const struct bad_case bad[] = {
		{ "", VGPU_PARSE_EMPTY },
		{ "-1", VGPU_PARSE_NEGATIVE },
		{ "-4GiB", VGPU_PARSE_NEGATIVE },
		{ "-", VGPU_PARSE_NOT_NUMBER },
		{ "abc", VGPU_PARSE_NOT_NUMBER },
		{ "GiB", VGPU_PARSE_NOT_NUMBER },
		{ " 4G", VGPU_PARSE_NOT_NUMBER },
		{ "+4G", VGPU_PARSE_NOT_NUMBER },
		{ "1.5G", VGPU_PARSE_FRACTION },
		{ "1,5G", VGPU_PARSE_FRACTION },
		{ "4G ", VGPU_PARSE_TRAILING },
		{ "4 ", VGPU_PARSE_TRAILING },
		{ "4GiB/s", VGPU_PARSE_TRAILING },
		{ "4%", VGPU_PARSE_TRAILING },
		{ "4G4", VGPU_PARSE_TRAILING },
		{ "4\n", VGPU_PARSE_TRAILING },
		{ "4GB", VGPU_PARSE_UNIT },
		{ "4MB", VGPU_PARSE_UNIT },
		{ "4kb", VGPU_PARSE_UNIT },
		{ "4PiB", VGPU_PARSE_UNIT },
		{ "4x", VGPU_PARSE_UNIT },
		{ "0x10", VGPU_PARSE_UNIT },
		{ "4 bytes", VGPU_PARSE_UNIT },
		/* 2^64 - 1 is "no limit" (VGPU_UNLIMITED, the ledger's
		 * VGPU_LEDGER_UNLIMITED): no size, however written. */
		{ "18446744073709551615", VGPU_PARSE_OVERFLOW },
		{ "18446744073709551615B", VGPU_PARSE_OVERFLOW },
		{ "018446744073709551615", VGPU_PARSE_OVERFLOW },
		{ "18446744073709551616", VGPU_PARSE_OVERFLOW },
		{ "99999999999999999999999", VGPU_PARSE_OVERFLOW },
		{ "16777216TiB", VGPU_PARSE_OVERFLOW },
		{ "17179869184G", VGPU_PARSE_OVERFLOW },
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 777;
		int rc = vgpu__parse_size(bad[i].s, &v);

		cr_assert_eq(rc, bad[i].rc, "\"%s\": got \"%s\", want \"%s\"",
			     bad[i].s, vgpu__parse_strerror(rc),
			     vgpu__parse_strerror(bad[i].rc));
		cr_assert_eq(v, 777, "\"%s\": output written on error",
			     bad[i].s);
	}
	cr_assert_eq(vgpu__parse_size(NULL, &(uint64_t){ 0 }),
		     VGPU_PARSE_EMPTY);
}

/* ---- percent, bool, enum, log level ---------------------------------- */

Test(parse_percent, accepts_0_to_100_with_optional_sign)
{
	unsigned v;

	cr_assert_eq(vgpu__parse_percent("0", &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(vgpu__parse_percent("1", &v), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(vgpu__parse_percent("30%", &v), 0);
	cr_assert_eq(v, 30);
	cr_assert_eq(vgpu__parse_percent("100", &v), 0);
	cr_assert_eq(v, 100);
}

Test(parse_percent, rejects_bad_percentages)
{
	static const struct bad_case bad[] = {
		{ "", VGPU_PARSE_EMPTY },
		{ "101", VGPU_PARSE_RANGE },
		{ "1000%", VGPU_PARSE_RANGE },
		{ "99999999999999999999999", VGPU_PARSE_RANGE },
		{ "-5", VGPU_PARSE_NEGATIVE },
		{ "50.5", VGPU_PARSE_FRACTION },
		{ "50 %", VGPU_PARSE_TRAILING },
		{ "50%%", VGPU_PARSE_TRAILING },
		{ "50x", VGPU_PARSE_TRAILING },
		{ "half", VGPU_PARSE_NOT_NUMBER },
	};
	size_t i;
	unsigned v;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(vgpu__parse_percent(bad[i].s, &v), bad[i].rc,
			     "\"%s\"", bad[i].s);
}

Test(parse_bool, accepts_the_usual_words_in_any_case)
{
	static const char *const yes[] = {
		"1", "true", "TRUE", "True", "yes", "YES", "on", "On"
	};
	static const char *const no[] = {
		"0", "false", "FALSE", "no", "No", "off", "OFF"
	};
	size_t i;
	bool b;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		b = false;
		cr_assert_eq(vgpu__parse_bool(yes[i], &b), 0, "%s", yes[i]);
		cr_assert(b, "%s", yes[i]);
	}
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		b = true;
		cr_assert_eq(vgpu__parse_bool(no[i], &b), 0, "%s", no[i]);
		cr_assert(!b, "%s", no[i]);
	}
}

Test(parse_bool, rejects_everything_else)
{
	static const char *const bad[] = {
		"2", "-1", "truee", "yess", " true", "true ", "t", "y", "01"
	};
	size_t i;
	bool b;

	cr_assert_eq(vgpu__parse_bool("", &b), VGPU_PARSE_EMPTY);
	cr_assert_eq(vgpu__parse_bool(NULL, &b), VGPU_PARSE_EMPTY);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(vgpu__parse_bool(bad[i], &b),
			     VGPU_PARSE_UNKNOWN_WORD, "%s", bad[i]);
}

Test(parse_enum, matches_names_in_any_case)
{
	static const char *const names[] = { "off", "managed", "host", NULL };
	int v = -1;

	cr_assert_eq(vgpu__parse_enum("managed", names, &v), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(vgpu__parse_enum("HOST", names, &v), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(vgpu__parse_enum("", names, &v), VGPU_PARSE_EMPTY);
	cr_assert_eq(vgpu__parse_enum("hosts", names, &v),
		     VGPU_PARSE_UNKNOWN_WORD);
	cr_assert_eq(vgpu__parse_enum("hos", names, &v),
		     VGPU_PARSE_UNKNOWN_WORD);
	cr_assert_eq(v, 2);
}

Test(parse_log_level, names_and_hami_numbers)
{
	static const struct { const char *s; int level; } ok[] = {
		{ "error", VGPU_LOG_ERROR }, { "WARN", VGPU_LOG_WARN },
		{ "info", VGPU_LOG_INFO },   { "Debug", VGPU_LOG_DEBUG },
		{ "0", VGPU_LOG_ERROR },     { "1", VGPU_LOG_WARN },
		{ "2", VGPU_LOG_INFO },      { "3", VGPU_LOG_INFO },
		{ "4", VGPU_LOG_DEBUG },
	};
	size_t i;
	int v;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_assert_eq(vgpu__parse_log_level(ok[i].s, &v), 0, "%s",
			     ok[i].s);
		cr_assert_eq(v, ok[i].level, "%s", ok[i].s);
	}
	cr_assert_eq(vgpu__parse_log_level("5", &v), VGPU_PARSE_RANGE);
	cr_assert_eq(vgpu__parse_log_level("-1", &v), VGPU_PARSE_NEGATIVE);
	cr_assert_eq(vgpu__parse_log_level("2x", &v), VGPU_PARSE_TRAILING);
	cr_assert_eq(vgpu__parse_log_level("warning", &v),
		     VGPU_PARSE_UNKNOWN_WORD);
	cr_assert_eq(vgpu__parse_log_level("", &v), VGPU_PARSE_EMPTY);
}

Test(parse_strerror, every_status_has_its_own_phrase)
{
	int a, b;

	for (a = VGPU_PARSE_EMPTY; a <= VGPU_PARSE_BAD_CHAR; a++)
		for (b = a + 1; b <= VGPU_PARSE_BAD_CHAR; b++)
			cr_assert_str_neq(vgpu__parse_strerror(a),
					  vgpu__parse_strerror(b));
}

/* ---- formatting ------------------------------------------------------ */

Test(format_size, largest_exact_unit_and_back)
{
	static const struct size_case c[] = {
		{ "0", 0 },		{ "1000", 1000 },
		{ "1KiB", KiB },	{ "1536", 1536 },
		{ "1536KiB", 1536 * KiB }, { "4GiB", 4 * GiB },
		{ "3TiB", 3 * TiB },	{ "2049MiB", 2049 * MiB },
		{ "unlimited", VGPU_UNLIMITED },
	};
	char buf[32];
	size_t i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint64_t back;

		cr_assert_eq(vgpu__format_size(buf, sizeof(buf), c[i].v),
			     (int)strlen(c[i].s));
		cr_assert_str_eq(buf, c[i].s);
		if (c[i].v == VGPU_UNLIMITED)
			continue;
		cr_assert_eq(vgpu__parse_size(buf, &back), 0);
		cr_assert_eq(back, c[i].v);
	}
	cr_assert_eq(vgpu__format_size(buf, 4, 4 * GiB), -1);
	cr_assert_str_eq(buf, "4Gi");
}

Test(format_tenant, uid_at_host_cut_to_fit)
{
	char buf[VGPU_TENANT_MAX], host[200];

	vgpu__format_tenant(buf, sizeof(buf), 1000, "node7");
	cr_assert_str_eq(buf, "uid1000@node7");
	vgpu__format_tenant(buf, sizeof(buf), 0, "");
	cr_assert_str_eq(buf, "uid0");
	vgpu__format_tenant(buf, sizeof(buf), 5, "a b\tc");
	cr_assert_str_eq(buf, "uid5@a_b_c");
	memset(host, 'h', sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	cr_assert_eq(vgpu__format_tenant(buf, sizeof(buf), 1, host),
		     VGPU_TENANT_MAX - 1);
	cr_assert_eq(strlen(buf), VGPU_TENANT_MAX - 1);
}
