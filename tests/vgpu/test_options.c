/* test_options.c - the options module: the table, the loader driven by a
 * fake environment, HAMi aliases, precedence, per-device overrides, error
 * messages, the unknown-name check and the verbose dump read back. The pure
 * parsers are in test_parse.c. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "options.h"

#define GiB (UINT64_C(1) << 30)
#define MiB (UINT64_C(1) << 20)
#define TiB (UINT64_C(1) << 40)

/* ---- a fake environment ---------------------------------------------- */

struct var {
	char name[64];
	char value[VGPU_PATH_MAX + 64];
};

static struct var env[160];
static int env_count;

static void env_clear(void)
{
	env_count = 0;
}

static void env_set(const char *name, const char *value)
{
	struct var *v = &env[env_count++];

	cr_assert_lt(env_count, (int)(sizeof(env) / sizeof(env[0])));
	cr_assert_lt(strlen(name), sizeof(v->name));
	cr_assert_lt(strlen(value), sizeof(v->value));
	strcpy(v->name, name);
	strcpy(v->value, value);
}

/* The fake environment as NAME=value strings, NULL-terminated. */
static const char *const *fake_envp(void)
{
	static char text[160][64 + VGPU_PATH_MAX + 64];
	static const char *envp[161];
	int i;

	for (i = 0; i < env_count; i++) {
		snprintf(text[i], sizeof(text[i]), "%s=%s", env[i].name,
			 env[i].value);
		envp[i] = text[i];
	}
	envp[i] = NULL;
	return envp;
}

static char err[8192];

static int load(struct vgpu_options *o)
{
	return vgpu__options_load(o, fake_envp(), err, sizeof(err));
}

/* Loads env with only name=value set and expects no error. */
static void load_one(struct vgpu_options *o, const char *name,
		     const char *value)
{
	int bad;

	env_clear();
	env_set(name, value);
	bad = load(o);
	cr_assert_eq(bad, 0, "%s=%s: %s", name, value, err);
}

/* Loads env with only name=value set; expects one error that names the
 * variable, quotes the value, says what was wrong and what was expected. */
static void expect_bad(const char *name, const char *value, const char *what)
{
	struct vgpu_options o;
	char quoted[256], *p;
	int bad;

	env_clear();
	env_set(name, value);
	bad = load(&o);
	cr_assert_eq(bad, 1, "%s=\"%s\": %d errors: %s", name, value, bad, err);
	snprintf(quoted, sizeof(quoted), "%s=\"%.64s\"%s", name, value,
		 strlen(value) > 64 ? "... " : " ");
	for (p = quoted + strlen(name) + 2; *p; p++)
		if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
			*p = '?';
	cr_assert(strncmp(err, quoted, strlen(quoted)) == 0,
		  "%s=\"%s\": message does not start with %s: %s", name,
		  value, quoted, err);
	cr_assert(strstr(err, what), "%s=\"%s\": no \"%s\" in: %s", name,
		  value, what, err);
	cr_assert(strstr(err, "; expected "), "no expectation in: %s", err);
	cr_assert_eq(err[strlen(err) - 1], '\n');
}

/* ---- the table ------------------------------------------------------- */

Test(table, every_option_is_described)
{
	unsigned id;

	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);

		cr_assert_not_null(d);
		cr_assert(strncmp(d->name, "VGPU_", 5) == 0, "%s", d->name);
		cr_assert(d->doc && *d->doc, "%s", d->name);
		cr_assert(d->expect && *d->expect, "%s", d->name);
		cr_assert_not_null(d->parse, "%s", d->name);
		cr_assert_eq(!d->alias, !d->alias_parse, "%s", d->name);
		cr_assert_eq(!d->alias, !d->alias_expect, "%s", d->name);
		if (d->per_device)
			cr_assert(d->kind == VGPU_KIND_SIZE ||
				  d->kind == VGPU_KIND_PERCENT, "%s", d->name);
		if (d->kind == VGPU_KIND_ENUM) {
			cr_assert_not_null(d->values, "%s", d->name);
			cr_assert_not_null(d->values[d->max], "%s", d->name);
			cr_assert_null(d->values[d->max + 1], "%s", d->name);
		}
		if (d->kind <= VGPU_KIND_BOOL)
			cr_assert(d->def >= d->min && d->def <= d->max,
				  "%s", d->name);
	}
	cr_assert_null(vgpu__option_desc(VGPU_OPT_COUNT));
}

#ifdef VGPU_CONFIG_DOC
/* docs/configuration.md names every option and alias. */
Test(table, configuration_doc_lists_every_option)
{
	static char doc[1 << 16];
	ssize_t n;
	unsigned id;
	int fd = open(VGPU_CONFIG_DOC, O_RDONLY);

	cr_assert_geq(fd, 0, "%s", VGPU_CONFIG_DOC);
	n = read(fd, doc, sizeof(doc) - 1);
	close(fd);
	cr_assert_gt(n, 0);
	doc[n] = '\0';
	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);

		cr_assert(strstr(doc, d->name), "%s not in the doc", d->name);
		if (d->alias)
			cr_assert(strstr(doc, d->alias), "%s not in the doc",
				  d->alias);
	}
}
#endif

/* ---- loading: defaults and good values ------------------------------- */

Test(load, defaults_without_any_variable)
{
	struct vgpu_options o;
	unsigned id;
	int dev;

	env_clear();
	cr_assert_eq(load(&o), 0);
	cr_assert_str_eq(err, "");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
	cr_assert_eq(o.compute_limit, 100);
	for (dev = 0; dev < VGPU_MAX_DEVICES; dev++) {
		cr_assert_eq(o.device_memory_limit[dev], VGPU_UNLIMITED);
		cr_assert_eq(o.device_compute_limit[dev], 100);
	}
	cr_assert_eq(o.compute_policy, VGPU_POLICY_HARD);
	cr_assert_eq(o.compute_mode, VGPU_MODE_TIME);
	cr_assert_eq(o.overcommit, VGPU_OVERCOMMIT_OFF);
	cr_assert_eq(o.host_spill_limit, VGPU_UNLIMITED);
	cr_assert_str_eq(o.ledger_dir, "/dev/shm/vgpu");
	cr_assert(strncmp(o.tenant, "uid", 3) == 0, "%s", o.tenant);
	cr_assert_eq(o.log_level, VGPU_LOG_WARN);
	cr_assert(!o.verbose);
	cr_assert_eq(o.on_error, VGPU_ON_ERROR_REFUSE);
	cr_assert(!o.disable);
	cr_assert_str_eq(o.real_libcuda, "");
	for (id = 0; id < VGPU_OPT_COUNT; id++)
		cr_assert_eq(o.src[id], VGPU_SRC_DEFAULT);
}

Test(load, default_tenant_is_uid_at_host)
{
	struct vgpu_options o;
	char want[VGPU_TENANT_MAX], host[256] = "";

	gethostname(host, sizeof(host) - 1);
	vgpu__format_tenant(want, sizeof(want), (unsigned long)getuid(), host);
	env_clear();
	cr_assert_eq(load(&o), 0);
	cr_assert_str_eq(o.tenant, want);
}

Test(load, memory_limit)
{
	struct vgpu_options o;

	load_one(&o, "VGPU_MEMORY_LIMIT", "8GiB");
	cr_assert_eq(o.memory_limit, 8 * GiB);
	cr_assert_eq(o.device_memory_limit[0], 8 * GiB);
	cr_assert_eq(o.device_memory_limit[63], 8 * GiB);
	cr_assert_eq(o.src[VGPU_OPT_MEMORY_LIMIT], VGPU_SRC_NAME);
	cr_assert_eq(o.device_src[VGPU_OPT_MEMORY_LIMIT][5], VGPU_SRC_NAME);
	load_one(&o, "VGPU_MEMORY_LIMIT", "1");
	cr_assert_eq(o.memory_limit, 1);
	load_one(&o, "VGPU_MEMORY_LIMIT", "Unlimited");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
}

Test(load, compute_limit)
{
	struct vgpu_options o;

	load_one(&o, "VGPU_COMPUTE_LIMIT", "30");
	cr_assert_eq(o.compute_limit, 30);
	cr_assert_eq(o.device_compute_limit[7], 30);
	load_one(&o, "VGPU_COMPUTE_LIMIT", "1%");
	cr_assert_eq(o.compute_limit, 1);
	load_one(&o, "VGPU_COMPUTE_LIMIT", "100");
	cr_assert_eq(o.compute_limit, 100);
}

Test(load, compute_policy_and_mode)
{
	struct vgpu_options o;

	load_one(&o, "VGPU_COMPUTE_POLICY", "elastic");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_ELASTIC);
	load_one(&o, "VGPU_COMPUTE_POLICY", "HARD");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_HARD);
	load_one(&o, "VGPU_COMPUTE_POLICY", "off");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_OFF);
	load_one(&o, "VGPU_COMPUTE_POLICY", "opportunistic");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_OPPORTUNISTIC);
	load_one(&o, "VGPU_COMPUTE_POLICY", "Opportunistic");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_OPPORTUNISTIC);
	load_one(&o, "VGPU_COMPUTE_MODE", "spatial");
	cr_assert_eq(o.compute_mode, VGPU_MODE_SPATIAL);
	load_one(&o, "VGPU_COMPUTE_MODE", "time");
	cr_assert_eq(o.compute_mode, VGPU_MODE_TIME);
}

Test(load, overcommit_and_spill_limit)
{
	static const char *const modes[] = { "off", "managed", "host", "auto" };
	struct vgpu_options o;
	int i;

	for (i = 0; i < 4; i++) {
		load_one(&o, "VGPU_OVERCOMMIT", modes[i]);
		cr_assert_eq(o.overcommit, i, "%s", modes[i]);
	}
	load_one(&o, "VGPU_HOST_SPILL_LIMIT", "16g");
	cr_assert_eq(o.host_spill_limit, 16 * GiB);
	load_one(&o, "VGPU_HOST_SPILL_LIMIT", "0");
	cr_assert_eq(o.host_spill_limit, 0);
	load_one(&o, "VGPU_HOST_SPILL_LIMIT", "unlimited");
	cr_assert_eq(o.host_spill_limit, VGPU_UNLIMITED);
}

Test(load, ledger_dir_tenant_and_library)
{
	struct vgpu_options o;
	char name[VGPU_TENANT_MAX];

	load_one(&o, "VGPU_LEDGER_DIR", "/run/vgpu ledger");
	cr_assert_str_eq(o.ledger_dir, "/run/vgpu ledger");
	load_one(&o, "VGPU_TENANT", "team-a/job:7");
	cr_assert_str_eq(o.tenant, "team-a/job:7");
	memset(name, 't', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	load_one(&o, "VGPU_TENANT", name);
	cr_assert_str_eq(o.tenant, name);
	load_one(&o, "VGPU_REAL_LIBCUDA", "/usr/lib64/libcuda.so.1");
	cr_assert_str_eq(o.real_libcuda, "/usr/lib64/libcuda.so.1");
	load_one(&o, "VGPU_REAL_LIBCUDA", "libcuda.so.1");
	cr_assert_str_eq(o.real_libcuda, "libcuda.so.1");
}

Test(load, log_level_verbose_on_error_disable)
{
	struct vgpu_options o;

	load_one(&o, "VGPU_LOG_LEVEL", "debug");
	cr_assert_eq(o.log_level, VGPU_LOG_DEBUG);
	load_one(&o, "VGPU_LOG_LEVEL", "0");
	cr_assert_eq(o.log_level, VGPU_LOG_ERROR);
	load_one(&o, "VGPU_VERBOSE", "1");
	cr_assert(o.verbose);
	load_one(&o, "VGPU_VERBOSE", "off");
	cr_assert(!o.verbose);
	load_one(&o, "VGPU_ON_ERROR", "warn");
	cr_assert_eq(o.on_error, VGPU_ON_ERROR_WARN);
	load_one(&o, "VGPU_ON_ERROR", "refuse");
	cr_assert_eq(o.on_error, VGPU_ON_ERROR_REFUSE);
	load_one(&o, "VGPU_DISABLE", "yes");
	cr_assert(o.disable);
}

/* ---- HAMi aliases ---------------------------------------------------- */

Test(alias, cuda_device_memory_limit)
{
	struct vgpu_options o;

	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT", "4096m");
	cr_assert_eq(o.memory_limit, 4 * GiB);
	cr_assert_eq(o.device_memory_limit[2], 4 * GiB);
	cr_assert_eq(o.src[VGPU_OPT_MEMORY_LIMIT], VGPU_SRC_ALIAS);
	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT", "1073741824");
	cr_assert_eq(o.memory_limit, GiB);
	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT", "2g");
	cr_assert_eq(o.memory_limit, 2 * GiB);
	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT", "0");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT_1", "12000m");
	cr_assert_eq(o.device_memory_limit[1], 12000 * MiB);
	cr_assert_eq(o.device_memory_limit[0], VGPU_UNLIMITED);
	cr_assert_eq(o.device_src[VGPU_OPT_MEMORY_LIMIT][1],
		     VGPU_SRC_DEVICE_ALIAS);
}

Test(alias, cuda_device_sm_limit_zero_is_no_limit)
{
	struct vgpu_options o;

	load_one(&o, "CUDA_DEVICE_SM_LIMIT", "40");
	cr_assert_eq(o.compute_limit, 40);
	cr_assert_eq(o.src[VGPU_OPT_COMPUTE_LIMIT], VGPU_SRC_ALIAS);
	load_one(&o, "CUDA_DEVICE_SM_LIMIT", "0");
	cr_assert_eq(o.compute_limit, 100);
	env_clear();
	env_set("CUDA_DEVICE_SM_LIMIT", "50");
	env_set("CUDA_DEVICE_SM_LIMIT_1", "0");
	env_set("CUDA_DEVICE_SM_LIMIT_2", "25");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.device_compute_limit[0], 50);
	cr_assert_eq(o.device_compute_limit[1], 100);
	cr_assert_eq(o.device_compute_limit[2], 25);
}

Test(alias, gpu_core_utilization_policy)
{
	struct vgpu_options o;

	load_one(&o, "GPU_CORE_UTILIZATION_POLICY", "default");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_ELASTIC);
	load_one(&o, "GPU_CORE_UTILIZATION_POLICY", "FORCE");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_HARD);
	load_one(&o, "GPU_CORE_UTILIZATION_POLICY", "disable");
	cr_assert_eq(o.compute_policy, VGPU_POLICY_OFF);
	cr_assert_eq(o.src[VGPU_OPT_COMPUTE_POLICY], VGPU_SRC_ALIAS);
}

Test(alias, cuda_oversubscribe)
{
	struct vgpu_options o;

	load_one(&o, "CUDA_OVERSUBSCRIBE", "true");
	cr_assert_eq(o.overcommit, VGPU_OVERCOMMIT_AUTO);
	load_one(&o, "CUDA_OVERSUBSCRIBE", "false");
	cr_assert_eq(o.overcommit, VGPU_OVERCOMMIT_OFF);
	cr_assert_eq(o.src[VGPU_OPT_OVERCOMMIT], VGPU_SRC_ALIAS);
}

Test(alias, shared_cache_file_gives_the_ledger_directory)
{
	struct vgpu_options o;

	load_one(&o, "CUDA_DEVICE_MEMORY_SHARED_CACHE",
		 "/usr/local/vgpu/abc.cache");
	cr_assert_str_eq(o.ledger_dir, "/usr/local/vgpu");
	cr_assert_eq(o.src[VGPU_OPT_LEDGER_DIR], VGPU_SRC_ALIAS);
	load_one(&o, "CUDA_DEVICE_MEMORY_SHARED_CACHE", "/x.cache");
	cr_assert_str_eq(o.ledger_dir, "/");
	load_one(&o, "CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/");
	cr_assert_str_eq(o.ledger_dir, "/tmp/vgpu");
}

Test(alias, libcuda_log_level)
{
	static const int want[] = {
		VGPU_LOG_ERROR, VGPU_LOG_WARN, VGPU_LOG_INFO, VGPU_LOG_INFO,
		VGPU_LOG_DEBUG, VGPU_LOG_DEBUG, VGPU_LOG_DEBUG, VGPU_LOG_DEBUG,
		VGPU_LOG_DEBUG,
	};
	struct vgpu_options o;
	char s[4];
	int i;

	for (i = 0; i <= 8; i++) {
		snprintf(s, sizeof(s), "%d", i);
		load_one(&o, "LIBCUDA_LOG_LEVEL", s);
		cr_assert_eq(o.log_level, want[i], "%d", i);
	}
	load_one(&o, "LIBCUDA_LOG_LEVEL", "99999999999999999999999");
	cr_assert_eq(o.log_level, VGPU_LOG_DEBUG);
	cr_assert_eq(o.src[VGPU_OPT_LOG_LEVEL], VGPU_SRC_ALIAS);
}

Test(alias, cuda_disable_control)
{
	struct vgpu_options o;

	load_one(&o, "CUDA_DISABLE_CONTROL", "true");
	cr_assert(o.disable);
	cr_assert_eq(o.src[VGPU_OPT_DISABLE], VGPU_SRC_ALIAS);
	load_one(&o, "CUDA_DISABLE_CONTROL", "false");
	cr_assert(!o.disable);
}

/* ---- precedence and per-device overrides ----------------------------- */

Test(precedence, vgpu_name_wins_over_alias)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GiB");
	env_set("CUDA_DEVICE_MEMORY_LIMIT", "4096m");
	env_set("VGPU_COMPUTE_POLICY", "hard");
	env_set("GPU_CORE_UTILIZATION_POLICY", "disable");
	env_set("VGPU_LOG_LEVEL", "error");
	env_set("LIBCUDA_LOG_LEVEL", "4");
	env_set("VGPU_DISABLE", "0");
	env_set("CUDA_DISABLE_CONTROL", "true");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.memory_limit, 8 * GiB);
	cr_assert_eq(o.compute_policy, VGPU_POLICY_HARD);
	cr_assert_eq(o.log_level, VGPU_LOG_ERROR);
	cr_assert(!o.disable);
	cr_assert_eq(o.src[VGPU_OPT_MEMORY_LIMIT],
		     VGPU_SRC_NAME | VGPU_SRC_SHADOWED);
	cr_assert_eq(o.src[VGPU_OPT_DISABLE],
		     VGPU_SRC_NAME | VGPU_SRC_SHADOWED);
}

Test(precedence, per_device_overrides_global)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GiB");
	env_set("VGPU_MEMORY_LIMIT_1", "2GiB");
	env_set("VGPU_MEMORY_LIMIT_63", "1GiB");
	env_set("VGPU_COMPUTE_LIMIT", "50");
	env_set("VGPU_COMPUTE_LIMIT_3", "20");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.device_memory_limit[0], 8 * GiB);
	cr_assert_eq(o.device_memory_limit[1], 2 * GiB);
	cr_assert_eq(o.device_memory_limit[2], 8 * GiB);
	cr_assert_eq(o.device_memory_limit[63], GiB);
	cr_assert_eq(o.device_compute_limit[3], 20);
	cr_assert_eq(o.device_compute_limit[4], 50);
	cr_assert_eq(o.device_src[VGPU_OPT_MEMORY_LIMIT][1],
		     VGPU_SRC_DEVICE_NAME);
	cr_assert_eq(o.device_src[VGPU_OPT_MEMORY_LIMIT][2], VGPU_SRC_NAME);
	cr_assert_eq(vgpu__options_memory_limit(&o, 1), 2 * GiB);
	cr_assert_eq(vgpu__options_memory_limit(&o, 64), 8 * GiB);
	cr_assert_eq(vgpu__options_compute_limit(&o, 3), 20);
	cr_assert_eq(vgpu__options_compute_limit(&o, 1000), 50);
}

Test(precedence, per_device_alias_beats_global_name)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GiB");
	env_set("CUDA_DEVICE_MEMORY_LIMIT_0", "4096m");
	env_set("CUDA_DEVICE_MEMORY_LIMIT_1", "4096m");
	env_set("VGPU_MEMORY_LIMIT_1", "1GiB");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.device_memory_limit[0], 4 * GiB);
	cr_assert_eq(o.device_memory_limit[1], GiB);
	cr_assert_eq(o.device_memory_limit[2], 8 * GiB);
	cr_assert_eq(o.device_src[VGPU_OPT_MEMORY_LIMIT][1],
		     VGPU_SRC_DEVICE_NAME | VGPU_SRC_SHADOWED);
}

Test(precedence, per_device_unlimited_exempts_a_device)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GiB");
	env_set("VGPU_MEMORY_LIMIT_1", "unlimited");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.device_memory_limit[0], 8 * GiB);
	cr_assert_eq(o.device_memory_limit[1], VGPU_UNLIMITED);
}

Test(precedence, bad_name_falls_back_to_alias)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GB");
	env_set("CUDA_DEVICE_MEMORY_LIMIT", "4096m");
	cr_assert_eq(load(&o), 1);
	cr_assert(strstr(err, "VGPU_MEMORY_LIMIT=\"8GB\""), "%s", err);
	cr_assert_eq(o.memory_limit, 4 * GiB);
	cr_assert_eq(o.src[VGPU_OPT_MEMORY_LIMIT], VGPU_SRC_ALIAS);
}

Test(precedence, shadowed_bad_alias_is_not_reported)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_COMPUTE_LIMIT", "30");
	env_set("CUDA_DEVICE_SM_LIMIT", "lots");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_eq(o.compute_limit, 30);
}

/* ---- error messages -------------------------------------------------- */

struct bad_var {
	const char *name;
	const char *value;
	const char *what;
};

static void expect_all_bad(const struct bad_var *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		expect_bad(b[i].name, b[i].value, b[i].what);
}

Test(errors, sizes)
{
	static const struct bad_var bad[] = {
		{ "VGPU_MEMORY_LIMIT", "", "is empty; expected a size" },
		{ "VGPU_MEMORY_LIMIT", "lots", "is not a number" },
		{ "VGPU_MEMORY_LIMIT", "-4GiB", "is negative" },
		{ "VGPU_MEMORY_LIMIT", "20000000TiB", "is too large" },
		{ "VGPU_MEMORY_LIMIT", "18446744073709551616", "is too large" },
		{ "VGPU_MEMORY_LIMIT", "8GB", "has an unknown unit" },
		{ "VGPU_MEMORY_LIMIT", "8 gigs", "has an unknown unit" },
		{ "VGPU_MEMORY_LIMIT", "8GiB!", "has trailing characters" },
		{ "VGPU_MEMORY_LIMIT", "1.5GiB", "is not a whole number" },
		{ "VGPU_MEMORY_LIMIT", "0", "is out of range; expected a size"
					   " of at least 1 byte" },
		{ "VGPU_MEMORY_LIMIT_0", "8GB", "has an unknown unit" },
		{ "VGPU_MEMORY_LIMIT_63", "-1", "is negative" },
		{ "VGPU_HOST_SPILL_LIMIT", "", "is empty" },
		{ "VGPU_HOST_SPILL_LIMIT", "-1", "is negative" },
		{ "VGPU_HOST_SPILL_LIMIT", "4PiB", "has an unknown unit" },
		{ "VGPU_HOST_SPILL_LIMIT", "99999999999999999999", "large" },
		{ "VGPU_HOST_SPILL_LIMIT", "none", "is not a number" },
	};

	expect_all_bad(bad, sizeof(bad) / sizeof(bad[0]));
}

/* A size past 64 bits, or exactly 2^64 - 1 (what the options and the
 * ledger read as "no limit"), is refused by name, never unlimited; the
 * word "unlimited" (and HAMi's 0) stays the way to say no limit. */
Test(errors, sizes_that_overflow_are_refused_by_name)
{
	static const char *const names[] = {
		"VGPU_MEMORY_LIMIT", "VGPU_MEMORY_LIMIT_5",
		"VGPU_HOST_SPILL_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT",
		"CUDA_DEVICE_MEMORY_LIMIT_1",
	};
	static const char *const values[] = {
		"18446744073709551615", "18446744073709551615B",
		"18446744073709551616", "99999999999999999999999999",
		"16777216TiB", "17179869184G", "17592186044416m",
		"18014398509481984k",
	};
	struct vgpu_options o;
	char want[256];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		for (size_t j = 0; j < sizeof(values) / sizeof(values[0]);
		     j++) {
			snprintf(want, sizeof(want), "%s=\"%s\" is too large; "
				 "expected ", names[i], values[j]);
			expect_bad(names[i], values[j], want);
		}
	}
	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "18446744073709551615");
	cr_assert_eq(load(&o), 1);
	cr_assert_str_eq(err, "VGPU_MEMORY_LIMIT=\"18446744073709551615\" is "
			 "too large; expected a size of at least 1 byte: a "
			 "whole number of bytes, optionally followed by B, "
			 "K/KiB, M/MiB, G/GiB or T/TiB (e.g. 8GiB), or "
			 "unlimited\n");
	/* The largest size is one byte less; no limit is said in words. */
	load_one(&o, "VGPU_MEMORY_LIMIT", "18446744073709551614");
	cr_assert_eq(o.memory_limit, UINT64_MAX - 1);
	load_one(&o, "VGPU_MEMORY_LIMIT", "unlimited");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
	load_one(&o, "CUDA_DEVICE_MEMORY_LIMIT", "0");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
}

Test(errors, percentages)
{
	static const struct bad_var bad[] = {
		{ "VGPU_COMPUTE_LIMIT", "", "is empty" },
		{ "VGPU_COMPUTE_LIMIT", "0", "is out of range; expected a "
					    "whole percentage from 1 to 100" },
		{ "VGPU_COMPUTE_LIMIT", "101", "is out of range" },
		{ "VGPU_COMPUTE_LIMIT", "99999999999999999999999",
		  "is out of range" },
		{ "VGPU_COMPUTE_LIMIT", "-30", "is negative" },
		{ "VGPU_COMPUTE_LIMIT", "30.5", "is not a whole number" },
		{ "VGPU_COMPUTE_LIMIT", "30 percent", "has trailing" },
		{ "VGPU_COMPUTE_LIMIT", "half", "is not a number" },
		{ "VGPU_COMPUTE_LIMIT_5", "0", "is out of range" },
	};

	expect_all_bad(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(errors, enums_and_bools)
{
	static const struct bad_var bad[] = {
		{ "VGPU_COMPUTE_POLICY", "", "is empty" },
		{ "VGPU_COMPUTE_POLICY", "soft",
		  "is not a known value; expected hard, elastic, off or "
		  "opportunistic" },
		{ "VGPU_COMPUTE_POLICY", "opportunist",
		  "is not a known value" },
		{ "VGPU_COMPUTE_POLICY", "-1", "expected hard, elastic" },
		{ "VGPU_COMPUTE_MODE", "space", "expected time or spatial" },
		{ "VGPU_OVERCOMMIT", "yes", "expected off, managed, host or "
					    "auto" },
		{ "VGPU_LOG_LEVEL", "verbose", "expected error, warn, info" },
		{ "VGPU_LOG_LEVEL", "5", "is out of range" },
		{ "VGPU_LOG_LEVEL", "-1", "is negative" },
		{ "VGPU_LOG_LEVEL", "99999999999999999999999", "out of range" },
		{ "VGPU_VERBOSE", "2", "is not a known value; expected a "
				       "boolean" },
		{ "VGPU_VERBOSE", "", "is empty" },
		{ "VGPU_ON_ERROR", "ignore", "expected refuse or warn" },
		{ "VGPU_DISABLE", "maybe", "expected a boolean" },
	};

	expect_all_bad(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(errors, paths_and_tenant)
{
	static char long_path[VGPU_PATH_MAX + 8];
	static const struct bad_var bad[] = {
		{ "VGPU_LEDGER_DIR", "", "is empty" },
		{ "VGPU_LEDGER_DIR", "vgpu", "is not an absolute path" },
		{ "VGPU_LEDGER_DIR", "./ledger", "is not an absolute path" },
		{ "VGPU_LEDGER_DIR", "/a\nb", "not allowed" },
		{ "VGPU_TENANT", "", "is empty" },
		{ "VGPU_TENANT", "team a",
		  "not allowed here; expected 1 to 63" },
		{ "VGPU_TENANT", "caf\xc3\xa9", "not allowed" },
		{ "VGPU_TENANT", "t234567890123456789012345678901234567890"
				 "123456789012345678901234", "is too long" },
		{ "VGPU_REAL_LIBCUDA", "", "is empty" },
		{ "VGPU_REAL_LIBCUDA", "lib/libcuda.so.1", "not an absolute" },
	};

	expect_all_bad(bad, sizeof(bad) / sizeof(bad[0]));
	long_path[0] = '/';
	memset(long_path + 1, 'p', VGPU_PATH_MAX);
	long_path[VGPU_PATH_MAX] = '\0';
	expect_bad("VGPU_LEDGER_DIR", long_path, "is too long");
}

Test(errors, aliases_name_themselves_and_their_own_forms)
{
	static const struct bad_var bad[] = {
		{ "CUDA_DEVICE_MEMORY_LIMIT", "4096mb", "has an unknown unit; "
		  "expected bytes, or a number with k, m or g" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "-1", "is negative" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "", "is empty" },
		{ "CUDA_DEVICE_MEMORY_LIMIT_3", "4096 MB", "unknown unit" },
		{ "CUDA_DEVICE_MEMORY_LIMIT", "99999999999999999999", "large" },
		{ "CUDA_DEVICE_SM_LIMIT", "150", "is out of range; expected a "
		  "whole percentage from 0 to 100 (0 for no limit)" },
		{ "CUDA_DEVICE_SM_LIMIT_1", "-10", "is negative" },
		{ "GPU_CORE_UTILIZATION_POLICY", "hard",
		  "expected default, force or disable" },
		{ "CUDA_OVERSUBSCRIBE", "host", "expected a boolean" },
		{ "CUDA_DEVICE_MEMORY_SHARED_CACHE", "cache",
		  "is not an absolute path; expected an absolute file path" },
		{ "LIBCUDA_LOG_LEVEL", "debug", "is not a number" },
		{ "LIBCUDA_LOG_LEVEL", "-1", "is negative" },
		{ "LIBCUDA_LOG_LEVEL", "3 ", "has trailing" },
		{ "LIBCUDA_LOG_LEVEL", "99999999999999999999999x", "trailing" },
		{ "CUDA_DISABLE_CONTROL", "sure", "expected a boolean" },
	};

	expect_all_bad(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(errors, every_bad_variable_is_reported)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GB");
	env_set("VGPU_COMPUTE_LIMIT", "0");
	env_set("VGPU_COMPUTE_LIMIT_2", "200");
	env_set("VGPU_OVERCOMMIT", "maybe");
	env_set("VGPU_TENANT", "a b");
	env_set("VGPU_VERBOSE", "1");
	cr_assert_eq(load(&o), 5, "%s", err);
	cr_assert(strstr(err, "VGPU_MEMORY_LIMIT=\"8GB\""));
	cr_assert(strstr(err, "VGPU_COMPUTE_LIMIT=\"0\""));
	cr_assert(strstr(err, "VGPU_COMPUTE_LIMIT_2=\"200\""));
	cr_assert(strstr(err, "VGPU_OVERCOMMIT=\"maybe\""));
	cr_assert(strstr(err, "VGPU_TENANT=\"a b\""));
	/* The bad ones keep their defaults; the good one still applies. */
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
	cr_assert_eq(o.device_compute_limit[2], 100);
	cr_assert_eq(o.overcommit, VGPU_OVERCOMMIT_OFF);
	cr_assert(o.verbose);
}

Test(errors, bounded_buffer_ends_in_dots)
{
	struct vgpu_options o;
	char small[48];

	memset(small, 'X', sizeof(small));
	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GB");
	env_set("VGPU_COMPUTE_LIMIT", "0");
	env_set("VGPU_OVERCOMMIT", "maybe");
	cr_assert_eq(vgpu__options_load(&o, fake_envp(), small, sizeof(small)),
		     3);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
	cr_assert_str_eq(small + sizeof(small) - 4, "...");
	cr_assert(strncmp(small, "VGPU_MEMORY_LIMIT=\"8GB\"", 23) == 0);
	cr_assert_eq(vgpu__options_load(&o, fake_envp(), NULL, 0), 3);
	cr_assert_eq(vgpu__options_load(&o, fake_envp(), small, 1), 3);
	cr_assert_eq(small[0], '\0');
}

Test(errors, long_and_unprintable_values_are_quoted_safely)
{
	struct vgpu_options o;
	char value[200];

	memset(value, '9', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	env_clear();
	env_set("VGPU_MEMORY_LIMIT", value);
	env_set("VGPU_COMPUTE_MODE", "ti\x1bme");
	cr_assert_eq(load(&o), 2);
	cr_assert(strstr(err, "9999\"... is too large"), "%s", err);
	cr_assert(strstr(err, "VGPU_COMPUTE_MODE=\"ti?me\""), "%s", err);
	cr_assert_lt(strlen(err), 500);
}

/* ---- unknown names --------------------------------------------------- */

/* What vgpu__options_check_names() says of one environment entry alone,
 * or "" for nothing; the count it returned in *n. */
static const char *check_one(const char *entry, int *n)
{
	static char out[1024];
	const char *envp[] = { entry, NULL };

	*n = vgpu__options_check_names(envp, out, sizeof(out));
	return out;
}

struct name_case {
	const char *entry;
	const char *says;	/* the whole line; NULL: not reported */
};

static void expect_names(const struct name_case *c, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		int n;
		const char *out = check_one(c[i].entry, &n);

		if (!c[i].says) {
			cr_assert_eq(n, 0, "%s: %s", c[i].entry, out);
			cr_assert_str_eq(out, "", "%s", c[i].entry);
			continue;
		}
		cr_assert_eq(n, 1, "%s: %d: %s", c[i].entry, n, out);
		cr_assert_str_eq(out, c[i].says, "%s", c[i].entry);
	}
}

Test(check_names, known_names_and_other_parts_pass)
{
	static const struct name_case c[] = {
		{ "PATH=/usr/bin", NULL },
		{ "VGPU_MEMORY_LIMIT=8GiB", NULL },
		{ "VGPU_MEMORY_LIMIT_0=1GiB", NULL },
		{ "VGPU_MEMORY_LIMIT_63=1GiB", NULL },
		{ "VGPU_COMPUTE_LIMIT_10=5", NULL },
		{ "VGPU_REAL_LIBCUDA=/x", NULL },
		{ "CUDA_DEVICE_MEMORY_LIMIT_3=4096m", NULL },
		{ "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x.cache", NULL },
		{ "CUDA_DEVICE_SM_LIMIT=10", NULL },
		{ "CUDA_DEVICE_MEMORY=1", NULL },	/* no alias extended */
		{ "CUDA_VISIBLE_DEVICES=0", NULL },
		{ "VGPU_SIM=1", NULL },
		{ "VGPU_SIM_MEMORY=80GiB", NULL },
		{ "VGPU_LIBRARY=/usr/lib/libvgpu.so", NULL },
		{ "VGPU_HIP_LIBRARY=/usr/lib/libvgpu-hip.so", NULL },
		{ "VGPU_TEST_SEED=7", NULL },
		{ "VGPU_SOAK=1", NULL },
		{ "VGPU=1", NULL },	/* not in the VGPU_ namespace */
		{ "VGPUX=1", NULL },
	};

	expect_names(c, sizeof(c) / sizeof(c[0]));
}

Test(check_names, misspelt_names_get_the_closest_option)
{
	static const struct name_case c[] = {
		{ "VGPU_MEMROY_LIMIT=1GiB", "VGPU_MEMROY_LIMIT is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "VGPU_MEMORY_LIMT=1GiB", "VGPU_MEMORY_LIMT is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "VGPU_MEM_LIMIT=1GiB", "VGPU_MEM_LIMIT is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "VGPU_memory_limit=1GiB", "VGPU_memory_limit is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "VGPU_MEMROY_LIMIT_3=1GiB", "VGPU_MEMROY_LIMIT_3 is not a "
		  "known option; did you mean VGPU_MEMORY_LIMIT_3?\n" },
		{ "VGPU_COMPUTE_LIMT_12=5", "VGPU_COMPUTE_LIMT_12 is not a "
		  "known option; did you mean VGPU_COMPUTE_LIMIT_12?\n" },
		{ "VGPU_OVERCOMIT=host", "VGPU_OVERCOMIT is not a known "
		  "option; did you mean VGPU_OVERCOMMIT?\n" },
		{ "VGPU_LEDGERDIR=/x", "VGPU_LEDGERDIR is not a known option; "
		  "did you mean VGPU_LEDGER_DIR?\n" },
		{ "VGPU_TENNANT=a", "VGPU_TENNANT is not a known option; did "
		  "you mean VGPU_TENANT?\n" },
		{ "VGPU_DEVICE_MEMORY_LIMIT=1", "VGPU_DEVICE_MEMORY_LIMIT is "
		  "not a known option; did you mean "
		  "CUDA_DEVICE_MEMORY_LIMIT?\n" },
		{ "VGPU_BANANA=1", "VGPU_BANANA is not a known option (the "
		  "closest is VGPU_TENANT)\n" },
	};

	expect_names(c, sizeof(c) / sizeof(c[0]));
}

/* A lower-case prefix is a name the loader would not read (getenv is
 * case-sensitive): named with the option meant. */
Test(check_names, a_prefix_in_another_case_is_named)
{
	static const struct name_case c[] = {
		{ "vgpu_memory_limit=1GiB", "vgpu_memory_limit is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
		{ "Vgpu_Compute_Limit_2=30", "Vgpu_Compute_Limit_2 is not a "
		  "known option; did you mean VGPU_COMPUTE_LIMIT_2?\n" },
		{ "vGPU_TENANT=a", "vGPU_TENANT is not a known option; did "
		  "you mean VGPU_TENANT?\n" },
		{ "vgpu=1", NULL },	/* not the prefix */
		{ "vgpux_memory=1", NULL },
	};

	expect_names(c, sizeof(c) / sizeof(c[0]));
}

/* An option defined twice in one environment: the loader (as getenv)
 * reads the first, so the second is named with both values; an option
 * named once, and a name only one of whose forms (name, alias) is set
 * twice, are not. */
Test(check_names, an_option_set_twice_is_named_with_both_values)
{
	static const char *const envp[] = {
		"VGPU_MEMORY_LIMIT=1GiB",
		"PATH=/usr/bin",
		"CUDA_DEVICE_MEMORY_LIMIT=4096m",
		"VGPU_MEMORY_LIMIT=2GiB",
		"VGPU_COMPUTE_LIMIT_3=20",
		"CUDA_DEVICE_MEMORY_LIMIT=8192m",
		"PATH=/bin",
		"VGPU_COMPUTE_LIMIT_3=\x1b[2J",
		"VGPU_MEMORY_LIMIT=3GiB",
		NULL,
	};
	char out[1024];
	struct vgpu_options o;

	cr_assert_eq(vgpu__options_check_names(envp, out, sizeof(out)), 4,
		     "%s", out);
	cr_assert_str_eq(out,
		"VGPU_MEMORY_LIMIT is set twice; \"1GiB\" is used, \"2GiB\" "
		"is not\n"
		"CUDA_DEVICE_MEMORY_LIMIT is set twice; \"4096m\" is used, "
		"\"8192m\" is not\n"
		"VGPU_COMPUTE_LIMIT_3 is set twice; \"20\" is used, \"?[2J\" "
		"is not\n"
		"VGPU_MEMORY_LIMIT is set twice; \"1GiB\" is used, \"3GiB\" "
		"is not\n");
	cr_assert_eq(vgpu__options_load(&o, envp, out, sizeof(out)), 4,
		     "%s", out);
	cr_assert_eq(o.memory_limit, UINT64_C(1) << 30);
	cr_assert_eq(o.device_compute_limit[3], 20);
}

/* VGPU_ with nothing after it is a name cut short, not another program's
 * variable: named, with what is wrong. */
Test(check_names, the_prefix_alone_is_named)
{
	static const struct name_case c[] = {
		{ "VGPU_=x", "VGPU_ is not a known option: nothing follows the "
		  "prefix\n" },
		{ "VGPU_=", "VGPU_ is not a known option: nothing follows the "
		  "prefix\n" },
		{ "VGPU_", "VGPU_ is not a known option: nothing follows the "
		  "prefix\n" },
		{ "VGPU__MEMORY_LIMIT=1", "VGPU__MEMORY_LIMIT is not a known "
		  "option; did you mean VGPU_MEMORY_LIMIT?\n" },
	};

	expect_names(c, sizeof(c) / sizeof(c[0]));
}

Test(check_names, devices_out_of_range_are_named_as_such)
{
	static const struct name_case c[] = {
		{ "VGPU_MEMORY_LIMIT_64=1GiB", "VGPU_MEMORY_LIMIT_64 is not a "
		  "known option: device 64 is out of range "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
		{ "VGPU_MEMORY_LIMIT_99999999999999999999=1GiB",
		  "VGPU_MEMORY_LIMIT_99999999999999999999 is not a known "
		  "option: device 99999999999999999999 is out of range "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
		{ "VGPU_MEMORY_LIMIT_x=1GiB", "VGPU_MEMORY_LIMIT_x is not a "
		  "known option: \"x\" is not a device index "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
		{ "VGPU_MEMORY_LIMIT_=1GiB", "VGPU_MEMORY_LIMIT_ is not a "
		  "known option: \"\" is not a device index "
		  "(VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n" },
		{ "VGPU_COMPUTE_LIMIT_01=5", "VGPU_COMPUTE_LIMIT_01 is not a "
		  "known option; did you mean VGPU_COMPUTE_LIMIT_1? (no "
		  "leading zeros)\n" },
		{ "VGPU_COMPUTE_LIMIT_00=5", "VGPU_COMPUTE_LIMIT_00 is not a "
		  "known option; did you mean VGPU_COMPUTE_LIMIT_0? (no "
		  "leading zeros)\n" },
		{ "VGPU_COMPUTE_LIMIT_064=5", "VGPU_COMPUTE_LIMIT_064 is not a "
		  "known option: device 064 is out of range "
		  "(VGPU_COMPUTE_LIMIT_0 to VGPU_COMPUTE_LIMIT_63)\n" },
		{ "CUDA_DEVICE_MEMORY_LIMIT_99=4096m", "CUDA_DEVICE_MEMORY_"
		  "LIMIT_99 is not a known option: device 99 is out of range "
		  "(CUDA_DEVICE_MEMORY_LIMIT_0 to "
		  "CUDA_DEVICE_MEMORY_LIMIT_63)\n" },
		{ "CUDA_DEVICE_SM_LIMIT_x=4", "CUDA_DEVICE_SM_LIMIT_x is not "
		  "a known option: \"x\" is not a device index "
		  "(CUDA_DEVICE_SM_LIMIT_0 to CUDA_DEVICE_SM_LIMIT_63)\n" },
		{ "VGPU_COMPUTE_POLICY_1=hard", "VGPU_COMPUTE_POLICY_1 is not "
		  "a known option: VGPU_COMPUTE_POLICY has no per-device "
		  "form\n" },
	};

	expect_names(c, sizeof(c) / sizeof(c[0]));
}

Test(check_names, unprintable_and_long_names_are_shown_safely)
{
	static char entry[300];
	int n;
	const char *out = check_one("VGPU_\x1b[2J\x07=1", &n);

	cr_assert_eq(n, 1);
	cr_assert(strncmp(out, "VGPU_?[2J? is not a known option", 32) == 0,
		  "%s", out);
	for (const char *p = out; *p; p++)
		cr_assert(*p == '\n' || (*p >= ' ' && *p < 0x7f), "%s", out);
	memcpy(entry, "VGPU_", 5);
	memset(entry + 5, 'Q', 250);
	strcpy(entry + 255, "=1");
	out = check_one(entry, &n);
	cr_assert_eq(n, 1);
	cr_assert(strncmp(out + 64, "... is not a known option", 25) == 0,
		  "%s", out);
}

Test(check_names, counts_every_one_and_bounds_its_buffer)
{
	static const char *const envp[] = {
		"PATH=/usr/bin",
		"VGPU_MEMORY_LIMIT=8GiB",
		"VGPU_MEMROY_LIMIT=8GiB",
		"VGPU_MEMORY_LIMIT_64=1GiB",
		"VGPU_COMPUTE_LIMIT_01=5",
		"VGPU_COMPUTE_POLICY_1=hard",
		"VGPU_SIM_MEMORY=80GiB",
		"CUDA_DEVICE_MEMORY_LIMIT_99=4096m",
		NULL,
	};
	char out[1024], small[40];

	cr_assert_eq(vgpu__options_check_names(envp, out, sizeof(out)), 5,
		     "%s", out);
	cr_assert_null(strstr(out, "SIM"));
	cr_assert_null(strstr(out, "=8GiB"), "values are not shown: %s", out);
	cr_assert_eq(vgpu__options_check_names(envp, small, sizeof(small)), 5);
	cr_assert_str_eq(small + sizeof(small) - 4, "...");
	cr_assert_eq(vgpu__options_check_names(envp, NULL, 0), 5);
	cr_assert_eq(vgpu__options_check_names(NULL, out, sizeof(out)), 0);
	cr_assert_str_eq(out, "");
}

/* The loader reports unknown names after the bad values and counts them
 * alike, so the front ends (the shim, vgpu-run) refuse or warn by the
 * same rule; the rest of the options still load. */
Test(check_names, load_counts_them_with_bad_values)
{
	struct vgpu_options o;

	env_clear();
	env_set("VGPU_MEMROY_LIMIT", "1GiB");
	env_set("VGPU_COMPUTE_LIMIT", "0");
	env_set("VGPU_MEMORY_LIMIT_x", "1GiB");
	env_set("VGPU_TENANT", "t");
	cr_assert_eq(load(&o), 3, "%s", err);
	cr_assert_str_eq(err,
		"VGPU_COMPUTE_LIMIT=\"0\" is out of range; expected a whole "
		"percentage from 1 to 100\n"
		"VGPU_MEMROY_LIMIT is not a known option; did you mean "
		"VGPU_MEMORY_LIMIT?\n"
		"VGPU_MEMORY_LIMIT_x is not a known option: \"x\" is not a "
		"device index (VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)\n");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
	cr_assert_str_eq(o.tenant, "t");
	cr_assert_eq(vgpu__options_load(&o, NULL, err, sizeof(err)), 0);
	cr_assert_str_eq(err, "");
}

/* ---- devices the process does not have ------------------------------ */

Test(check_devices, indices_at_or_past_the_count_are_named)
{
	static const char *const envp[] = {
		"PATH=/usr/bin",
		"VGPU_MEMORY_LIMIT=8GiB",
		"VGPU_MEMORY_LIMIT_0=1GiB",
		"VGPU_MEMORY_LIMIT_1=1GiB",
		"VGPU_COMPUTE_LIMIT_2=junk",	/* bad value: still named */
		"CUDA_DEVICE_MEMORY_LIMIT_1=4096m",
		"CUDA_DEVICE_SM_LIMIT_63=10",
		"VGPU_COMPUTE_POLICY=hard",
		"VGPU_MEMORY_LIMIT_64=1GiB",	/* check_names' */
		"VGPU_MEMORY_LIMIT_01=1GiB",	/* check_names' */
		NULL,
	};
	char out[2048];

	cr_assert_eq(vgpu__options_check_devices(envp, 1, false, out,
						 sizeof(out)), 2, "%s", out);
	cr_assert_str_eq(out,
		"VGPU_MEMORY_LIMIT_1 names device 1, but the process sees 1 "
		"device (VGPU_MEMORY_LIMIT_0)\n"
		"VGPU_COMPUTE_LIMIT_2 names device 2, but the process sees 1 "
		"device (VGPU_COMPUTE_LIMIT_0)\n");
	cr_assert_eq(vgpu__options_check_devices(envp, 1, true, out,
						 sizeof(out)), 2, "%s", out);
	cr_assert_str_eq(out,
		"CUDA_DEVICE_MEMORY_LIMIT_1 names device 1, but the process "
		"sees 1 device (CUDA_DEVICE_MEMORY_LIMIT_0)\n"
		"CUDA_DEVICE_SM_LIMIT_63 names device 63, but the process sees "
		"1 device (CUDA_DEVICE_SM_LIMIT_0)\n");
	cr_assert_eq(vgpu__options_check_devices(envp, 2, false, out,
						 sizeof(out)), 1, "%s", out);
	cr_assert_str_eq(out,
		"VGPU_COMPUTE_LIMIT_2 names device 2, but the process sees 2 "
		"devices (VGPU_COMPUTE_LIMIT_0 to VGPU_COMPUTE_LIMIT_1)\n");
	cr_assert_eq(vgpu__options_check_devices(envp, 2, true, out,
						 sizeof(out)), 1, "%s", out);
	cr_assert_str_eq(out,
		"CUDA_DEVICE_SM_LIMIT_63 names device 63, but the process sees "
		"2 devices (CUDA_DEVICE_SM_LIMIT_0 to "
		"CUDA_DEVICE_SM_LIMIT_1)\n");
	for (int h = 0; h < 2; h++) {
		cr_assert_eq(vgpu__options_check_devices(envp, 64, h, out,
							 sizeof(out)), 0,
			     "%s", out);
		cr_assert_str_eq(out, "");
	}
	cr_assert_eq(vgpu__options_check_devices(envp, 0, false, NULL, 0), 3);
	cr_assert_eq(vgpu__options_check_devices(envp, 0, true, NULL, 0), 2);
	cr_assert_eq(vgpu__options_check_devices(NULL, 0, false, out,
						 sizeof(out)), 0);
}

Test(check_devices, quotes_cuda_visible_devices_and_no_device)
{
	static const char *const envp[] = {
		"CUDA_VISIBLE_DEVICES=GPU-1\x1b,3",
		"VGPU_COMPUTE_LIMIT_3=50",
		NULL,
	};
	char out[512], small[24];

	cr_assert_eq(vgpu__options_check_devices(envp, 2, false, out,
						 sizeof(out)), 1);
	cr_assert_str_eq(out, "VGPU_COMPUTE_LIMIT_3 names device 3, but the "
			 "process sees 2 devices under CUDA_VISIBLE_DEVICES="
			 "\"GPU-1?,3\" (VGPU_COMPUTE_LIMIT_0 to "
			 "VGPU_COMPUTE_LIMIT_1)\n");
	cr_assert_eq(vgpu__options_check_devices(envp, 0, false, out,
						 sizeof(out)), 1);
	cr_assert_str_eq(out, "VGPU_COMPUTE_LIMIT_3 names device 3, but the "
			 "process sees no device under CUDA_VISIBLE_DEVICES="
			 "\"GPU-1?,3\"\n");
	cr_assert_eq(vgpu__options_check_devices(envp, 0, false, small,
						 sizeof(small)), 1);
	cr_assert_str_eq(small + sizeof(small) - 4, "...");
}

/* ---- HAMi's names misspelt ------------------------------------------ */

static const char *hami_one(const char *entry, int *n)
{
	static char out[1024];
	const char *envp[] = { entry, NULL };

	*n = vgpu__options_check_hami_names(envp, out, sizeof(out));
	return out;
}

Test(check_hami_names, near_misses_get_the_hami_name)
{
	static const struct name_case c[] = {
		{ "CUDA_DEVICE_MEMORY_LIMT=1g", "CUDA_DEVICE_MEMORY_LIMT is not "
		  "a HAMi variable; did you mean CUDA_DEVICE_MEMORY_LIMIT? "
		  "(ignored)\n" },
		{ "CUDA_DEVICE_MEMORY_LIMITS=1g", "CUDA_DEVICE_MEMORY_LIMITS is "
		  "not a HAMi variable; did you mean CUDA_DEVICE_MEMORY_LIMIT? "
		  "(ignored)\n" },
		{ "cuda_device_memory_limit=1g", "cuda_device_memory_limit is "
		  "not a HAMi variable; did you mean CUDA_DEVICE_MEMORY_LIMIT? "
		  "(ignored)\n" },
		{ "CUDA_DEVICE_MEMROY_LIMIT_1=1g", "CUDA_DEVICE_MEMROY_LIMIT_1 "
		  "is not a HAMi variable; did you mean "
		  "CUDA_DEVICE_MEMORY_LIMIT_1? (ignored)\n" },
		{ "CUDA_DEVICE_SM_LIMT=10", "CUDA_DEVICE_SM_LIMT is not a HAMi "
		  "variable; did you mean CUDA_DEVICE_SM_LIMIT? (ignored)\n" },
		{ "CUDA_OVERSUBSCRIB=true", "CUDA_OVERSUBSCRIB is not a HAMi "
		  "variable; did you mean CUDA_OVERSUBSCRIBE? (ignored)\n" },
		{ "GPU_CORE_UTILISATION_POLICY=force", "GPU_CORE_UTILISATION_"
		  "POLICY is not a HAMi variable; did you mean "
		  "GPU_CORE_UTILIZATION_POLICY? (ignored)\n" },
		{ "LIBCUDA_LOG_LEVLE=1", "LIBCUDA_LOG_LEVLE is not a HAMi "
		  "variable; did you mean LIBCUDA_LOG_LEVEL? (ignored)\n" },
		{ "CUDA_DISABLE_CONTRL=1", "CUDA_DISABLE_CONTRL is not a HAMi "
		  "variable; did you mean CUDA_DISABLE_CONTROL? (ignored)\n" },
		/* Not near misses: HAMi's own names, names farther off, and
		 * what check_names refuses (VGPU_, an alias extended). */
		{ "CUDA_DEVICE_MEMORY_LIMIT=1g", NULL },
		{ "CUDA_DEVICE_MEMORY_LIMIT_3=1g", NULL },
		{ "CUDA_DEVICE_MEMORY_SHARED_CACHE=/x/y", NULL },
		{ "CUDA_DEVICE_MEMORY_LIMIT_64=1g", NULL },
		{ "CUDA_DEVICE_MEMORY_LIMIT_x=1g", NULL },
		{ "VGPU_MEMORY_LIMT=1g", NULL },
		{ "CUDA_DEVICE_MEMORY=1", NULL },
		{ "CUDA_DEVICE_ORDER=PCI_BUS_ID", NULL },
		{ "CUDA_DEVICE_MAX_CONNECTIONS=1", NULL },
		{ "CUDA_VISIBLE_DEVICES=0", NULL },
		{ "CUDA_LAUNCH_BLOCKING=1", NULL },
		{ "CUDA_MODULE_LOADING=LAZY", NULL },
		{ "CUDA_CACHE_DISABLE=1", NULL },
		{ "PATH=/usr/bin", NULL },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int n;
		const char *out = hami_one(c[i].entry, &n);

		cr_assert_eq(n, c[i].says ? 1 : 0, "%s: %s", c[i].entry, out);
		cr_assert_str_eq(out, c[i].says ? c[i].says : "", "%s",
				 c[i].entry);
	}
}

/* They are warnings: the loader neither counts nor reports them. */
Test(check_hami_names, load_does_not_count_them)
{
	struct vgpu_options o;

	env_clear();
	env_set("CUDA_DEVICE_MEMORY_LIMT", "1g");
	cr_assert_eq(load(&o), 0, "%s", err);
	cr_assert_str_eq(err, "");
	cr_assert_eq(o.memory_limit, VGPU_UNLIMITED);
}

/* ---- the verbose dump ------------------------------------------------ */

/* Runs the dump into a temporary file and returns its text. */
static const char *dump(const struct vgpu_options *o)
{
	static char text[1 << 16];
	FILE *f = tmpfile();
	ssize_t n;

	cr_assert_not_null(f);
	cr_assert_eq(vgpu__options_dump(o, fileno(f)), 0);
	cr_assert_eq(lseek(fileno(f), 0, SEEK_SET), 0);
	n = read(fileno(f), text, sizeof(text) - 1);
	cr_assert_geq(n, 0);
	text[n] = '\0';
	fclose(f);
	return text;
}

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (; (text = strstr(text, needle)); text++)
		n++;
	return n;
}

Test(dump, every_option_once_with_its_source)
{
	struct vgpu_options o;
	const char *text;
	char needle[80];
	unsigned id;

	env_clear();
	env_set("VGPU_MEMORY_LIMIT", "8GiB");
	env_set("CUDA_DEVICE_MEMORY_LIMIT", "2g");
	env_set("CUDA_DEVICE_MEMORY_LIMIT_2", "4096m");
	env_set("CUDA_DEVICE_SM_LIMIT", "40");
	cr_assert_eq(load(&o), 0, "%s", err);
	text = dump(&o);
	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		snprintf(needle, sizeof(needle), "vgpu: option %s=",
			 vgpu__option_desc(id)->name);
		cr_assert_eq(count(text, needle), 1, "%s in:\n%s", needle,
			     text);
	}
	cr_assert(strstr(text, "vgpu: option VGPU_MEMORY_LIMIT=8GiB (set by "
			       "VGPU_MEMORY_LIMIT, CUDA_DEVICE_MEMORY_LIMIT "
			       "ignored)\n"), "%s", text);
	cr_assert(strstr(text, "vgpu: option VGPU_MEMORY_LIMIT_2=4GiB (set "
			       "by CUDA_DEVICE_MEMORY_LIMIT_2)\n"), "%s", text);
	cr_assert(strstr(text, "vgpu: option VGPU_COMPUTE_LIMIT=40 (set by "
			       "CUDA_DEVICE_SM_LIMIT)\n"), "%s", text);
	cr_assert(strstr(text, "vgpu: option VGPU_COMPUTE_POLICY=hard "
			       "(default)\n"), "%s", text);
	cr_assert(strstr(text, "vgpu: option VGPU_HOST_SPILL_LIMIT=unlimited "
			       "(default)\n"), "%s", text);
	cr_assert_eq(count(text, "VGPU_MEMORY_LIMIT_"), 1, "%s", text);
	cr_assert_eq(count(text, "\n"), VGPU_OPT_COUNT + 1, "%s", text);
}

/* Feeds every "vgpu: option NAME=VALUE (source)" line back as NAME=VALUE;
 * empty values (a default that is no valid setting) are left out. */
static void env_from_dump(const char *text)
{
	const char *line, *eq, *paren, *nl, *p;
	char name[64], value[VGPU_PATH_MAX + 64];

	env_clear();
	for (line = text; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		cr_assert_not_null(nl);
		cr_assert(strncmp(line, "vgpu: option ", 13) == 0, "%s", line);
		line += 13;
		eq = strchr(line, '=');
		cr_assert(eq && eq < nl, "%s", line);
		paren = NULL;
		for (p = eq; (p = strstr(p, " (")) && p < nl; p++)
			paren = p;
		cr_assert_not_null(paren, "%s", line);
		snprintf(name, sizeof(name), "%.*s", (int)(eq - line), line);
		snprintf(value, sizeof(value), "%.*s",
			 (int)(paren - eq - 1), eq + 1);
		if (*value)
			env_set(name, value);
	}
}

Test(dump, reads_back_to_the_same_options)
{
	struct vgpu_options a, b;
	unsigned id;

	env_clear();
	env_set("CUDA_DEVICE_MEMORY_LIMIT", "12000m");
	env_set("VGPU_MEMORY_LIMIT_1", "1536");
	env_set("VGPU_MEMORY_LIMIT_7", "unlimited");
	env_set("VGPU_COMPUTE_LIMIT", "30%");
	env_set("CUDA_DEVICE_SM_LIMIT_4", "0");
	env_set("GPU_CORE_UTILIZATION_POLICY", "default");
	env_set("VGPU_COMPUTE_MODE", "SPATIAL");
	env_set("CUDA_OVERSUBSCRIBE", "on");
	env_set("VGPU_HOST_SPILL_LIMIT", "3T");
	env_set("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu (x)/a.cache");
	env_set("VGPU_TENANT", "ns/pod-7");
	env_set("LIBCUDA_LOG_LEVEL", "2");
	env_set("VGPU_VERBOSE", "yes");
	env_set("VGPU_ON_ERROR", "warn");
	env_set("VGPU_REAL_LIBCUDA", "/opt/nv/libcuda.so.1");
	cr_assert_eq(load(&a), 0, "%s", err);
	env_from_dump(dump(&a));
	cr_assert_eq(load(&b), 0, "%s", err);
	cr_assert_eq(memcmp(a.device_memory_limit, b.device_memory_limit,
			    sizeof(a.device_memory_limit)), 0);
	cr_assert_eq(memcmp(a.device_compute_limit, b.device_compute_limit,
			    sizeof(a.device_compute_limit)), 0);
	cr_assert_eq(a.memory_limit, b.memory_limit);
	cr_assert_eq(a.compute_limit, b.compute_limit);
	cr_assert_eq(a.compute_policy, VGPU_POLICY_ELASTIC);
	cr_assert_eq(b.compute_policy, VGPU_POLICY_ELASTIC);
	cr_assert_eq(b.compute_mode, VGPU_MODE_SPATIAL);
	cr_assert_eq(b.overcommit, VGPU_OVERCOMMIT_AUTO);
	cr_assert_eq(b.host_spill_limit, 3 * TiB);
	cr_assert_str_eq(b.ledger_dir, "/tmp/vgpu (x)");
	cr_assert_str_eq(b.tenant, "ns/pod-7");
	cr_assert_eq(b.log_level, VGPU_LOG_INFO);
	cr_assert(b.verbose);
	cr_assert_eq(b.on_error, VGPU_ON_ERROR_WARN);
	cr_assert_str_eq(b.real_libcuda, "/opt/nv/libcuda.so.1");
	for (id = 0; id < VGPU_OPT_COUNT; id++)
		cr_assert_neq(b.src[id], VGPU_SRC_ALIAS, "%u", id);
}

Test(dump, reports_a_failed_write)
{
	struct vgpu_options o;
	int fds[2];

	env_clear();
	cr_assert_eq(load(&o), 0);
	cr_assert_eq(vgpu__options_dump(&o, -1), -1);
	cr_assert_eq(pipe(fds), 0);
	close(fds[1]);
	cr_assert_eq(vgpu__options_dump(&o, fds[0]), -1);
	close(fds[0]);
}
