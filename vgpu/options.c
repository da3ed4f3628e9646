/* options.c - the VGPU_* options: one descriptor table, the option parsers
 * built on parse.c, a loader that reads an environment (NAME=value
 * strings) and names every variable that is no option, and the accessors.
 * The verbose dump is in options_dump.c.
 *
 * Usable from a library constructor: no allocation, no locks, no stdio.
 * Text is formatted into caller or stack buffers.
 * docs/configuration.md describes the same table for users.
 */
#include "options.h"

#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- option parsers: the value of one variable, by kind -------------- */

static int parse_size_opt(const struct vgpu_opt_desc *d, const char *s,
			  struct vgpu_optval *v)
{
	int rc;

	if (s && d->max == VGPU_UNLIMITED && vgpu__word_eq(s, "unlimited")) {
		v->num = VGPU_UNLIMITED;
		return VGPU_PARSE_OK;
	}
	rc = vgpu__parse_size(s, &v->num);
	if (rc)
		return rc;
	return (v->num < d->min || v->num > d->max) ? VGPU_PARSE_RANGE : 0;
}

/* HAMi's memory limit: the same sizes, 0 meaning no limit. */
static int parse_hami_size(const struct vgpu_opt_desc *d, const char *s,
			   struct vgpu_optval *v)
{
	int rc;

	(void)d;
	rc = vgpu__parse_size(s, &v->num);
	if (rc == VGPU_PARSE_OK && v->num == 0)
		v->num = VGPU_UNLIMITED;
	return rc;
}

static int parse_percent_opt(const struct vgpu_opt_desc *d, const char *s,
			     struct vgpu_optval *v)
{
	unsigned pct;
	int rc;

	rc = vgpu__parse_percent(s, &pct);
	if (rc)
		return rc;
	if (pct < d->min || pct > d->max)
		return VGPU_PARSE_RANGE;
	v->num = pct;
	return VGPU_PARSE_OK;
}

/* HAMi's SM limit: 0..100, 0 meaning no limit (the whole GPU). */
static int parse_hami_percent(const struct vgpu_opt_desc *d, const char *s,
			      struct vgpu_optval *v)
{
	unsigned pct;
	int rc;

	(void)d;
	rc = vgpu__parse_percent(s, &pct);
	if (rc)
		return rc;
	v->num = pct ? pct : 100;
	return VGPU_PARSE_OK;
}

static int parse_enum_opt(const struct vgpu_opt_desc *d, const char *s,
			  struct vgpu_optval *v)
{
	int i, rc;

	rc = vgpu__parse_enum(s, d->values, &i);
	if (rc == VGPU_PARSE_OK)
		v->num = (uint64_t)i;
	return rc;
}

static int parse_log_level_opt(const struct vgpu_opt_desc *d, const char *s,
			       struct vgpu_optval *v)
{
	int level, rc;

	(void)d;
	rc = vgpu__parse_log_level(s, &level);
	if (rc == VGPU_PARSE_OK)
		v->num = (uint64_t)level;
	return rc;
}

/* HAMi's log level: a number; values past 4 (some builds use up to 8)
 * mean debug rather than refusing the device over a logging knob. */
static int parse_hami_log_level(const struct vgpu_opt_desc *d, const char *s,
				struct vgpu_optval *v)
{
	const char *p = s;
	uint64_t n;
	int rc;

	(void)d;
	rc = vgpu__parse_whole(&p, &n);
	if (rc == VGPU_PARSE_OVERFLOW) {
		n = UINT64_MAX;
		while (vgpu__is_digit(*p))
			p++;
	} else if (rc) {
		return rc;
	}
	if (*p)
		return VGPU_PARSE_TRAILING;
	v->num = (uint64_t)(n > 4 ? VGPU_LOG_DEBUG
				  : vgpu__log_level_numbers[n]);
	return VGPU_PARSE_OK;
}

static const char *const hami_policy_names[] = {
	"default", "force", "disable", NULL
};
static const int hami_policy_values[] = {
	VGPU_POLICY_ELASTIC, VGPU_POLICY_HARD, VGPU_POLICY_OFF,
};

/* GPU_CORE_UTILIZATION_POLICY: default -> elastic, force -> hard,
 * disable -> off. */
static int parse_hami_policy(const struct vgpu_opt_desc *d, const char *s,
			     struct vgpu_optval *v)
{
	int i, rc;

	(void)d;
	rc = vgpu__parse_enum(s, hami_policy_names, &i);
	if (rc == VGPU_PARSE_OK)
		v->num = (uint64_t)hami_policy_values[i];
	return rc;
}

static int parse_bool_opt(const struct vgpu_opt_desc *d, const char *s,
			  struct vgpu_optval *v)
{
	bool b;
	int rc;

	(void)d;
	rc = vgpu__parse_bool(s, &b);
	if (rc == VGPU_PARSE_OK)
		v->num = b;
	return rc;
}

/* CUDA_OVERSUBSCRIBE: true -> auto, false -> off. */
static int parse_hami_oversubscribe(const struct vgpu_opt_desc *d,
				    const char *s, struct vgpu_optval *v)
{
	bool b;
	int rc;

	(void)d;
	rc = vgpu__parse_bool(s, &b);
	if (rc == VGPU_PARSE_OK)
		v->num = b ? VGPU_OVERCOMMIT_AUTO : VGPU_OVERCOMMIT_OFF;
	return rc;
}

/* Checks a path's length and characters; stores it as a slice. */
static int check_path(const struct vgpu_opt_desc *d, const char *s,
		      struct vgpu_optval *v)
{
	size_t i;

	if (!s || !*s)
		return VGPU_PARSE_EMPTY;
	for (i = 0; s[i]; i++)
		if ((unsigned char)s[i] < ' ' || s[i] == 0x7f)
			return VGPU_PARSE_BAD_CHAR;
	if (i >= d->field_size)
		return VGPU_PARSE_TOO_LONG;
	v->str = s;
	v->len = i;
	return VGPU_PARSE_OK;
}

/* An absolute path (a relative one would differ between processes). */
static int parse_abs_path(const struct vgpu_opt_desc *d, const char *s,
			  struct vgpu_optval *v)
{
	int rc = check_path(d, s, v);

	if (rc == VGPU_PARSE_OK && s[0] != '/')
		return VGPU_PARSE_NOT_ABSOLUTE;
	return rc;
}

/* CUDA_DEVICE_MEMORY_SHARED_CACHE names HAMi's cache file: the ledger
 * lives in the directory that holds it (the part before the last '/'). */
static int parse_hami_cache(const struct vgpu_opt_desc *d, const char *s,
			    struct vgpu_optval *v)
{
	int rc = parse_abs_path(d, s, v);

	if (rc)
		return rc;
	v->len = (size_t)(strrchr(s, '/') - s);
	if (v->len == 0)
		v->len = 1;
	return VGPU_PARSE_OK;
}

/* A library: an absolute path, or a bare file name that dlopen searches. */
static int parse_library(const struct vgpu_opt_desc *d, const char *s,
			 struct vgpu_optval *v)
{
	int rc = check_path(d, s, v);

	if (rc == VGPU_PARSE_OK && s[0] != '/' && strchr(s, '/'))
		return VGPU_PARSE_NOT_ABSOLUTE;
	return rc;
}

static int parse_tenant(const struct vgpu_opt_desc *d, const char *s,
			struct vgpu_optval *v)
{
	size_t i;

	if (!s || !*s)
		return VGPU_PARSE_EMPTY;
	for (i = 0; s[i]; i++)
		if (!vgpu__is_graph(s[i]))
			return VGPU_PARSE_BAD_CHAR;
	if (i >= d->field_size)
		return VGPU_PARSE_TOO_LONG;
	v->str = s;
	v->len = i;
	return VGPU_PARSE_OK;
}

/* ---- the table ------------------------------------------------------- */

#define SIZE_FORMS	"a whole number of bytes, optionally followed by " \
			"B, K/KiB, M/MiB, G/GiB or T/TiB (e.g. 8GiB)"
#define BOOL_FORMS	"1/true/yes/on or 0/false/no/off"
#define FIELD(f)	offsetof(struct vgpu_options, f)

static const char *const policy_names[] = {
	"hard", "elastic", "off", "opportunistic", NULL
};
static const char *const mode_names[] = { "time", "spatial", NULL };
static const char *const overcommit_names[] = {
	"off", "managed", "host", "auto", NULL
};
static const char *const on_error_names[] = { "refuse", "warn", NULL };

static const struct vgpu_opt_desc options[VGPU_OPT_COUNT] = {
	[VGPU_OPT_MEMORY_LIMIT] = {
		.name = "VGPU_MEMORY_LIMIT",
		.alias = "CUDA_DEVICE_MEMORY_LIMIT",
		.kind = VGPU_KIND_SIZE, .per_device = true,
		.def = VGPU_UNLIMITED, .min = 1, .max = VGPU_UNLIMITED,
		.unit = "bytes",
		.expect = "a size of at least 1 byte: " SIZE_FORMS
			  ", or unlimited",
		.alias_expect = "bytes, or a number with k, m or g "
				"(e.g. 4096m); 0 for no limit",
		.doc = "device memory each process's tenant may use on a GPU",
		.offset = FIELD(memory_limit),
		.device_offset = FIELD(device_memory_limit),
		.parse = parse_size_opt, .alias_parse = parse_hami_size,
	},
	[VGPU_OPT_COMPUTE_LIMIT] = {
		.name = "VGPU_COMPUTE_LIMIT",
		.alias = "CUDA_DEVICE_SM_LIMIT",
		.kind = VGPU_KIND_PERCENT, .per_device = true,
		.def = 100, .min = 1, .max = 100,
		.unit = "percent",
		.expect = "a whole percentage from 1 to 100",
		.alias_expect = "a whole percentage from 0 to 100 "
				"(0 for no limit)",
		.doc = "share of the GPU's time the tenant's kernels may use",
		.offset = FIELD(compute_limit),
		.device_offset = FIELD(device_compute_limit),
		.parse = parse_percent_opt, .alias_parse = parse_hami_percent,
	},
	[VGPU_OPT_COMPUTE_POLICY] = {
		.name = "VGPU_COMPUTE_POLICY",
		.alias = "GPU_CORE_UTILIZATION_POLICY",
		.kind = VGPU_KIND_ENUM, .values = policy_names,
		.def = VGPU_POLICY_HARD, .max = VGPU_POLICY_OPPORTUNISTIC,
		.expect = "hard, elastic, off or opportunistic",
		.alias_expect = "default, force or disable",
		.doc = "hard: never above the share; elastic: idle time lent "
		       "out; off: not enforced; opportunistic: only time no "
		       "guaranteed tenant wants",
		.offset = FIELD(compute_policy),
		.parse = parse_enum_opt, .alias_parse = parse_hami_policy,
	},
	[VGPU_OPT_COMPUTE_MODE] = {
		.name = "VGPU_COMPUTE_MODE",
		.kind = VGPU_KIND_ENUM, .values = mode_names,
		.def = VGPU_MODE_TIME, .max = VGPU_MODE_SPATIAL,
		.expect = "time or spatial",
		.doc = "time: GPU-time throttle; spatial: an SM share on a "
		       "green context where the driver has them",
		.offset = FIELD(compute_mode),
		.parse = parse_enum_opt,
	},
	[VGPU_OPT_OVERCOMMIT] = {
		.name = "VGPU_OVERCOMMIT",
		.alias = "CUDA_OVERSUBSCRIBE",
		.kind = VGPU_KIND_ENUM, .values = overcommit_names,
		.def = VGPU_OVERCOMMIT_OFF, .max = VGPU_OVERCOMMIT_AUTO,
		.expect = "off, managed, host or auto",
		.alias_expect = "a boolean: " BOOL_FORMS,
		.doc = "what happens past the slice: off (out of memory), "
		       "managed or host paging, auto (best supported)",
		.offset = FIELD(overcommit),
		.parse = parse_enum_opt,
		.alias_parse = parse_hami_oversubscribe,
	},
	[VGPU_OPT_CONTEXT_OVERHEAD] = {
		.name = "VGPU_CONTEXT_OVERHEAD",
		.kind = VGPU_KIND_SIZE,
		.def = UINT64_C(256) << 20, .min = 0, .max = UINT64_C(1) << 40,
		.unit = "bytes",
		.expect = "a size up to 1TiB: " SIZE_FORMS,
		.doc = "device memory charged to the slice for each context "
		       "the process creates on a GPU",
		.offset = FIELD(context_overhead),
		.parse = parse_size_opt,
	},
	[VGPU_OPT_CONTROL] = {
		.name = "VGPU_CONTROL",
		.kind = VGPU_KIND_BOOL, .def = 0, .max = 1,
		.expect = "a boolean: " BOOL_FORMS,
		.doc = "let vgpu-ctl suspend the tenant: allocations made "
		       "movable to the host, a thread that watches the ledger",
		.offset = FIELD(control),
		.parse = parse_bool_opt,
	},
	[VGPU_OPT_HOST_SPILL_LIMIT] = {
		.name = "VGPU_HOST_SPILL_LIMIT",
		.kind = VGPU_KIND_SIZE,
		.def = VGPU_UNLIMITED, .min = 0, .max = VGPU_UNLIMITED,
		.unit = "bytes",
		.expect = "a size: " SIZE_FORMS ", or unlimited",
		.doc = "host memory the tenant may use for spilled allocations",
		.offset = FIELD(host_spill_limit),
		.parse = parse_size_opt,
	},
	[VGPU_OPT_LEDGER_DIR] = {
		.name = "VGPU_LEDGER_DIR",
		.alias = "CUDA_DEVICE_MEMORY_SHARED_CACHE",
		.kind = VGPU_KIND_PATH, .def_str = "/dev/shm/vgpu",
		.expect = "an absolute directory path of fewer than 4096 bytes",
		.alias_expect = "an absolute file path (its directory holds "
				"the ledger)",
		.doc = "directory of the ledger files, one per physical GPU",
		.offset = FIELD(ledger_dir),
		.field_size = VGPU_PATH_MAX,
		.parse = parse_abs_path, .alias_parse = parse_hami_cache,
	},
	[VGPU_OPT_LEDGER_GROUP] = {
		.name = "VGPU_LEDGER_GROUP",
		.kind = VGPU_KIND_STRING, .def_str = "",
		.expect = "a group's name or number: 1 to 63 printable ASCII "
			  "characters without spaces",
		.doc = "share ledgers with this group: files 0660 and the "
		       "directory 0770 given to it; default: 0600 and 0700, "
		       "the user's own",
		.offset = FIELD(ledger_group),
		.field_size = VGPU_GROUP_MAX,
		.parse = parse_tenant,
	},
	[VGPU_OPT_TENANT] = {
		.name = "VGPU_TENANT",
		.kind = VGPU_KIND_STRING, .def_str = NULL,
		.expect = "1 to 63 printable ASCII characters without spaces",
		.doc = "who the limits belong to; default uid<uid>@<host name>",
		.offset = FIELD(tenant),
		.field_size = VGPU_TENANT_MAX,
		.parse = parse_tenant,
	},
	[VGPU_OPT_LOG_LEVEL] = {
		.name = "VGPU_LOG_LEVEL",
		.alias = "LIBCUDA_LOG_LEVEL",
		.kind = VGPU_KIND_ENUM, .values = vgpu__log_level_names,
		.def = VGPU_LOG_WARN, .max = VGPU_LOG_DEBUG,
		.expect = "error, warn, info, debug, or 0 to 4",
		.alias_expect = "a number, 0 (errors) to 4 (debug)",
		.doc = "least severe message written to stderr",
		.offset = FIELD(log_level),
		.parse = parse_log_level_opt,
		.alias_parse = parse_hami_log_level,
	},
	[VGPU_OPT_VERBOSE] = {
		.name = "VGPU_VERBOSE",
		.kind = VGPU_KIND_BOOL, .def = 0, .max = 1,
		.expect = "a boolean: " BOOL_FORMS,
		.doc = "print every effective option once at start",
		.offset = FIELD(verbose),
		.parse = parse_bool_opt,
	},
	[VGPU_OPT_ON_ERROR] = {
		.name = "VGPU_ON_ERROR",
		.kind = VGPU_KIND_ENUM, .values = on_error_names,
		.def = VGPU_ON_ERROR_REFUSE, .max = VGPU_ON_ERROR_WARN,
		.expect = "refuse or warn",
		.doc = "on a bad option: refuse the device, or warn and ignore "
		       "the variable",
		.offset = FIELD(on_error),
		.parse = parse_enum_opt,
	},
	[VGPU_OPT_DISABLE] = {
		.name = "VGPU_DISABLE",
		.alias = "CUDA_DISABLE_CONTROL",
		.kind = VGPU_KIND_BOOL, .def = 0, .max = 1,
		.expect = "a boolean: " BOOL_FORMS,
		.alias_expect = "a boolean: " BOOL_FORMS,
		.doc = "no limits at all: every call passes straight through",
		.offset = FIELD(disable),
		.parse = parse_bool_opt, .alias_parse = parse_bool_opt,
	},
	[VGPU_OPT_REAL_LIBCUDA] = {
		.name = "VGPU_REAL_LIBCUDA",
		.kind = VGPU_KIND_PATH, .def_str = "",
		.expect = "an absolute path, or a file name without '/' "
			  "that dlopen searches for",
		.doc = "the real driver library; default: searched for, "
		       "skipping libvgpu itself",
		.offset = FIELD(real_libcuda),
		.field_size = VGPU_PATH_MAX,
		.parse = parse_library,
	},
};

const struct vgpu_opt_desc *vgpu__option_desc(enum vgpu_opt_id id)
{
	return (unsigned)id < VGPU_OPT_COUNT ? &options[id] : NULL;
}

/* The name of an enum or bool value, or NULL. */
const char *vgpu__option_value_name(enum vgpu_opt_id id, int value)
{
	const struct vgpu_opt_desc *d = vgpu__option_desc(id);

	if (!d || value < 0 || (uint64_t)value > d->max)
		return NULL;
	if (d->kind == VGPU_KIND_BOOL)
		return value ? "true" : "false";
	if (d->kind == VGPU_KIND_ENUM)
		return d->values[value];
	return NULL;
}

/* ---- storing values -------------------------------------------------- */

/* Byte offset of the value a variable sets: the global one (dev < 0) or
 * device dev's slot. */
size_t vgpu__option_value_offset(const struct vgpu_opt_desc *d, int dev)
{
	size_t elem;

	if (dev < 0)
		return d->offset;
	elem = d->kind == VGPU_KIND_SIZE ? sizeof(uint64_t) : sizeof(unsigned);
	return d->device_offset + (size_t)dev * elem;
}

static void store(struct vgpu_options *o, const struct vgpu_opt_desc *d,
		  size_t off, const struct vgpu_optval *v)
{
	char *p = (char *)o + off;

	switch (d->kind) {
	case VGPU_KIND_SIZE:
		*(uint64_t *)(void *)p = v->num;
		break;
	case VGPU_KIND_PERCENT:
		*(unsigned *)(void *)p = (unsigned)v->num;
		break;
	case VGPU_KIND_ENUM:
		*(int *)(void *)p = (int)v->num;
		break;
	case VGPU_KIND_BOOL:
		*(bool *)(void *)p = v->num != 0;
		break;
	case VGPU_KIND_PATH:
	case VGPU_KIND_STRING:
		memcpy(p, v->str, v->len);
		p[v->len] = '\0';
		break;
	}
}

uint64_t vgpu__option_load_num(const struct vgpu_options *o,
			       const struct vgpu_opt_desc *d, size_t off)
{
	const char *p = (const char *)o + off;

	switch (d->kind) {
	case VGPU_KIND_SIZE:
		return *(const uint64_t *)(const void *)p;
	case VGPU_KIND_PERCENT:
		return *(const unsigned *)(const void *)p;
	case VGPU_KIND_ENUM:
		return (uint64_t)*(const int *)(const void *)p;
	case VGPU_KIND_BOOL:
		return *(const bool *)(const void *)p;
	default:
		return 0;
	}
}

/* ---- defaults and loading -------------------------------------------- */

/* The value of name in envp (NAME=value strings, NULL-terminated; NULL
 * for none): the first definition, as getenv(3) finds it. */
static const char *env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

static void default_tenant(char *buf, size_t len)
{
	struct utsname u;

	if (uname(&u) != 0)
		u.nodename[0] = '\0';
	vgpu__format_tenant(buf, len, (unsigned long)getuid(), u.nodename);
}

/* Every option at its default, every source "default". */
void vgpu__options_defaults(struct vgpu_options *o)
{
	struct vgpu_optval v;
	unsigned id;
	int dev;

	memset(o, 0, sizeof(*o));
	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];

		v.num = d->def;
		v.str = d->def_str;
		v.len = d->def_str ? strlen(d->def_str) : 0;
		if (d->kind == VGPU_KIND_STRING && !d->def_str)
			continue;
		store(o, d, d->offset, &v);
		for (dev = 0; d->per_device && dev < VGPU_MAX_DEVICES; dev++)
			store(o, d, vgpu__option_value_offset(d, dev), &v);
	}
	default_tenant(o->tenant, sizeof(o->tenant));
}

/* name, or name_<dev> when dev >= 0. */
static void var_name(char *buf, size_t len, const char *name, int dev)
{
	struct vgpu_fmtbuf b;

	vgpu__fb_init(&b, buf, len);
	vgpu__fb_puts(&b, name);
	if (dev >= 0) {
		vgpu__fb_putc(&b, '_');
		vgpu__fb_u64(&b, (uint64_t)dev);
	}
}

/* NAME="value" is not a number; expected ...\n */
static void report(struct vgpu_fmtbuf *eb, const char *var, const char *value,
		   int status, const char *expect)
{
	vgpu__fb_puts(eb, var);
	vgpu__fb_putc(eb, '=');
	vgpu__fb_quoted(eb, value);
	vgpu__fb_putc(eb, ' ');
	vgpu__fb_puts(eb, vgpu__parse_strerror(status));
	vgpu__fb_puts(eb, "; expected ");
	vgpu__fb_puts(eb, expect);
	vgpu__fb_putc(eb, '\n');
}

static int check_names(const char *const *envp, struct vgpu_fmtbuf *eb);
static bool has_prefix(const char *name, size_t n, const char *word);

/* Device dev of option id takes the global value (neither of its own
 * variables is set). */
static void inherit(struct vgpu_options *o, enum vgpu_opt_id id, int dev)
{
	const struct vgpu_opt_desc *d = &options[id];
	struct vgpu_optval v;

	v.num = vgpu__option_load_num(o, d, d->offset);
	store(o, d, vgpu__option_value_offset(d, dev), &v);
	o->device_src[id][dev] = o->src[id] & VGPU_SRC_MASK;
}

/*
 * Reads one option's global value (dev < 0) or device dev's: VGPU_X wins
 * over the alias; a bad variable is reported and then ignored as if unset.
 * A device with neither variable takes the global value. Returns the
 * number of bad variables.
 */
static int load_one(struct vgpu_options *o, enum vgpu_opt_id id, int dev,
		    const char *const *envp, struct vgpu_fmtbuf *eb)
{
	const struct vgpu_opt_desc *d = &options[id];
	uint8_t *src = dev < 0 ? &o->src[id] : &o->device_src[id][dev];
	char name[64], alias[64];
	const char *nv, *av = NULL;
	struct vgpu_optval v;
	int bad = 0, rc;

	var_name(name, sizeof(name), d->name, dev);
	nv = env_get(envp, name);
	if (d->alias) {
		var_name(alias, sizeof(alias), d->alias, dev);
		av = env_get(envp, alias);
	}
	if (nv) {
		rc = d->parse(d, nv, &v);
		if (rc == VGPU_PARSE_OK) {
			store(o, d, vgpu__option_value_offset(d, dev), &v);
			*src = dev < 0 ? VGPU_SRC_NAME : VGPU_SRC_DEVICE_NAME;
			if (av)
				*src |= VGPU_SRC_SHADOWED;
			return 0;
		}
		report(eb, name, nv, rc, d->expect);
		bad++;
	}
	if (av) {
		rc = d->alias_parse(d, av, &v);
		if (rc == VGPU_PARSE_OK) {
			store(o, d, vgpu__option_value_offset(d, dev), &v);
			*src = dev < 0 ? VGPU_SRC_ALIAS : VGPU_SRC_DEVICE_ALIAS;
			return bad;
		}
		report(eb, alias, av, rc, d->alias_expect);
		bad++;
	}
	if (dev >= 0)
		inherit(o, id, dev);
	return bad;
}

/* Whether envp names any per-device form of option d (its name or alias
 * and '_'): without one, no device needs a look of its own. */
static bool any_device_var(const struct vgpu_opt_desc *d,
			   const char *const *envp)
{
	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '=');
		size_t n = eq ? (size_t)(eq - e) : strlen(e);

		if (has_prefix(e, n, d->name) ||
		    (d->alias && has_prefix(e, n, d->alias)))
			return true;
	}
	return false;
}

/*
 * Fills *out from envp (NAME=value strings, NULL-terminated: environ for
 * the real environment; NULL for none). Every bad variable is described in
 * err, one line each, naming the variable, its value and what was
 * expected; then every variable that names no option, as
 * vgpu__options_check_names() describes it. A full buffer ends in "...".
 * Returns the number of bad and unknown variables, 0 if none.
 */
int vgpu__options_load(struct vgpu_options *out, const char *const *envp,
		       char *err, size_t errlen)
{
	struct vgpu_fmtbuf eb;
	unsigned id;
	int bad = 0, dev;

	vgpu__fb_init(&eb, err, errlen);
	vgpu__options_defaults(out);
	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		bool own = options[id].per_device &&
			   any_device_var(&options[id], envp);

		bad += load_one(out, id, -1, envp, &eb);
		for (dev = 0; options[id].per_device &&
			      dev < VGPU_MAX_DEVICES; dev++) {
			if (own)
				bad += load_one(out, id, dev, envp, &eb);
			else
				inherit(out, id, dev);
		}
	}
	bad += check_names(envp, &eb);
	vgpu__fb_finish(&eb);
	return bad;
}

uint64_t vgpu__options_memory_limit(const struct vgpu_options *o,
				    unsigned dev)
{
	return dev < VGPU_MAX_DEVICES ? o->device_memory_limit[dev]
				      : o->memory_limit;
}

unsigned vgpu__options_compute_limit(const struct vgpu_options *o,
				     unsigned dev)
{
	return dev < VGPU_MAX_DEVICES ? o->device_compute_limit[dev]
				      : o->compute_limit;
}

/* ---- names that match no option -------------------------------------- */

/* VGPU_ names of other parts of libvgpu, not options: the simulator's
 * (VGPU_SIM, VGPU_SIM_*), vgpu-run's VGPU_LIBRARY, the tests' VGPU_TEST_*
 * and VGPU_SOAK. A name ending in '_' is a prefix. */
static const char *const other_parts[] = {
	"VGPU_SIM", "VGPU_SIM_", "VGPU_LIBRARY", "VGPU_HIP_LIBRARY",
	"VGPU_TEST_", "VGPU_SOAK", NULL
};

#define NAME_SHOWN	64	/* bytes of a name quoted in a message */
#define CMP_MAX	64	/* longest name compared in full */

static bool is_other_part(const char *name, size_t n)
{
	for (const char *const *w = other_parts; *w; w++) {
		size_t wl = strlen(*w);

		if ((*w)[wl - 1] == '_' ? n > wl && memcmp(name, *w, wl) == 0
					: n == wl && memcmp(name, *w, n) == 0)
			return true;
	}
	return false;
}

/* "0" to "63", without leading zeros. */
static bool is_device_suffix(const char *s, size_t n)
{
	if (n == 1)
		return vgpu__is_digit(s[0]);
	return n == 2 && s[0] >= '1' && s[0] <= '6' && vgpu__is_digit(s[1]) &&
	       (s[0] - '0') * 10 + (s[1] - '0') < VGPU_MAX_DEVICES;
}

static bool all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!vgpu__is_digit(s[i]))
			return false;
	return n > 0;
}

/* Whether name[0..n) starts with word followed by '_'. */
static bool has_prefix(const char *name, size_t n, const char *word)
{
	size_t wl = strlen(word);

	return n > wl && memcmp(name, word, wl) == 0 && name[wl] == '_';
}

/* Whether name[0..n) is a VGPU_ name (or alias) of the table, with a
 * valid _<i> where the option is per device. */
static bool known_name(const char *name, size_t n, bool alias)
{
	unsigned id;

	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];
		const char *w = alias ? d->alias : d->name;
		size_t wl;

		if (!w)
			continue;
		wl = strlen(w);
		if (n == wl && memcmp(name, w, n) == 0)
			return true;
		if (d->per_device && has_prefix(name, n, w) &&
		    is_device_suffix(name + wl + 1, n - wl - 1))
			return true;
	}
	return false;
}

/* The per-device option name or alias that name[0..n) extends with '_',
 * or NULL. */
static const char *device_base(const char *name, size_t n)
{
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];

		if (!d->per_device)
			continue;
		if (has_prefix(name, n, d->name))
			return d->name;
		if (d->alias && has_prefix(name, n, d->alias))
			return d->alias;
	}
	return NULL;
}

/* The option name or alias without a per-device form that name[0..n)
 * extends with '_' and digits, or NULL. */
static const char *global_base(const char *name, size_t n)
{
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];
		const char *w[2] = { d->name, d->alias };

		for (int i = 0; i < 2 && !d->per_device; i++)
			if (w[i] && has_prefix(name, n, w[i]) &&
			    all_digits(name + strlen(w[i]) + 1,
				       n - strlen(w[i]) - 1))
				return w[i];
	}
	return NULL;
}

static char upper(char c)
{
	return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

/*
 * The cost of editing a[0..n) into b, case ignored, a cut at CMP_MAX
 * bytes: adding a character or swapping two neighbours costs 1, changing
 * or dropping one 2 (as git's command suggestions weigh them: a name cut
 * short, VGPU_MEMORY, is nearer VGPU_MEMORY_LIMIT than VGPU_TENANT).
 * Past limit, the walk stops early and says limit + 1 (every variable of
 * the environment is measured against HAMi's names at start-up).
 */
static unsigned edit_cost(const char *a, size_t n, const char *b,
			  unsigned limit)
{
	unsigned row[3][CMP_MAX + 1], *pp, *p, *c, low, prev_low = 0;
	size_t m = strlen(b), i, j;

	/* Row k of the table lives in row[(k + 1) % 3]. */
	n = n < CMP_MAX ? n : CMP_MAX;
	m = m < CMP_MAX ? m : CMP_MAX;
	for (j = 0; j <= m; j++)
		row[1][j] = (unsigned)j;
	for (i = 1; i <= n; i++) {
		pp = row[(i + 2) % 3];	/* i - 2 */
		p = row[i % 3];		/* i - 1 */
		c = row[(i + 1) % 3];	/* i */
		c[0] = 2 * (unsigned)i;
		for (j = 1; j <= m; j++) {
			char x = upper(a[i - 1]), y = upper(b[j - 1]);
			unsigned v = p[j - 1] + (x != y ? 2 : 0);

			if (p[j] + 2 < v)
				v = p[j] + 2;
			if (c[j - 1] + 1 < v)
				v = c[j - 1] + 1;
			if (i > 1 && j > 1 && x == upper(b[j - 2]) &&
			    upper(a[i - 2]) == y && pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
		}
		/* A path crosses row i or, by a swap, row i - 1: past the
		 * limit in both, it ends past it. */
		for (low = c[0], j = 1; j <= m; j++)
			low = c[j] < low ? c[j] : low;
		if (i > 1 && low > limit && prev_low > limit)
			return limit + 1;
		prev_low = low;
	}
	return row[(n + 1) % 3][m];
}

/* An option name to suggest, with the "_<i>" to add to it, and its cost. */
struct suggestion {
	const char *word;
	const char *dev;	/* the "_<i>" to add, or NULL */
	size_t dev_len;
	unsigned cost;
};

static void consider(struct suggestion *s, const char *word, unsigned cost,
		     const char *dev, size_t dev_len)
{
	if (word && cost < s->cost) {
		s->word = word;
		s->dev = dev;
		s->dev_len = dev_len;
		s->cost = cost;
	}
}

/* The closest option name to name[0..n): any name or alias, or a
 * per-device one with name's own _<i> when name ends in a valid one. */
static struct suggestion closest(const char *name, size_t n)
{
	struct suggestion s = { NULL, NULL, 0, ~0u };
	const char *us = NULL;
	size_t base = n;

	for (size_t i = n; i-- > 0;)
		if (name[i] == '_') {
			us = name + i;
			break;
		}
	if (us && is_device_suffix(us + 1, n - (size_t)(us - name) - 1))
		base = (size_t)(us - name);
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];
		const char *w[2] = { d->name, d->alias };

		for (int i = 0; i < 2; i++) {
			if (!w[i])
				continue;
			consider(&s, w[i], edit_cost(name, n, w[i], ~0u - 1),
				 NULL, 0);
			if (d->per_device && base < n)
				consider(&s, w[i],
					 edit_cost(name, base, w[i], ~0u - 1),
					 name + base, n - base);
		}
	}
	return s;
}

/* name[0..n), cut at NAME_SHOWN bytes, unprintable bytes as '?'. */
static void put_name(struct vgpu_fmtbuf *b, const char *name, size_t n)
{
	for (size_t i = 0; i < n && i < NAME_SHOWN; i++)
		vgpu__fb_putc(b, vgpu__is_graph(name[i]) ? name[i] : '?');
	if (n > NAME_SHOWN)
		vgpu__fb_puts(b, "...");
}

/* ": device 64 is out of range (X_0 to X_63)" and the like, for
 * name[0..n) = base_<suffix>. */
static void explain_device(struct vgpu_fmtbuf *b, const char *base,
			   const char *name, size_t n)
{
	const char *sfx = name + strlen(base) + 1;
	size_t sl = n - strlen(base) - 1, z = 0;
	bool digits = all_digits(sfx, sl);

	while (digits && z + 1 < sl && sfx[z] == '0')
		z++;
	if (z && is_device_suffix(sfx + z, sl - z)) {
		vgpu__fb_puts(b, "; did you mean ");
		vgpu__fb_puts(b, base);
		vgpu__fb_putc(b, '_');
		put_name(b, sfx + z, sl - z);
		vgpu__fb_puts(b, "? (no leading zeros)");
		return;
	}
	if (digits) {
		vgpu__fb_puts(b, ": device ");
		put_name(b, sfx, sl);
		vgpu__fb_puts(b, " is out of range");
	} else {
		vgpu__fb_puts(b, ": \"");
		put_name(b, sfx, sl);
		vgpu__fb_puts(b, "\" is not a device index");
	}
	vgpu__fb_puts(b, " (");
	vgpu__fb_puts(b, base);
	vgpu__fb_puts(b, "_0 to ");
	vgpu__fb_puts(b, base);
	vgpu__fb_puts(b, "_63)");
}

/* The rest of the line after "NAME is not a known option". */
static void explain(struct vgpu_fmtbuf *b, const char *name, size_t n)
{
	const char *base = device_base(name, n);
	struct suggestion s;
	bool near;

	if (n == 5) {		/* "VGPU_" alone */
		vgpu__fb_puts(b, ": nothing follows the prefix");
		return;
	}
	if (base) {
		explain_device(b, base, name, n);
		return;
	}
	base = global_base(name, n);
	if (base) {
		vgpu__fb_puts(b, ": ");
		vgpu__fb_puts(b, base);
		vgpu__fb_puts(b, " has no per-device form");
		return;
	}
	s = closest(name, n);
	/* Near: a cost of 2 at most, or of half the letters after the
	 * prefix (VGPU_, CUDA_) at most. */
	near = s.cost <= 2 || s.cost <= (strlen(s.word) - 5) / 2;
	vgpu__fb_puts(b, near ? "; did you mean " : " (the closest is ");
	vgpu__fb_puts(b, s.word);
	for (size_t i = 0; i < s.dev_len; i++)
		vgpu__fb_putc(b, s.dev[i]);
	vgpu__fb_puts(b, near ? "?" : ")");
}

/* Whether a per-device HAMi alias is name[0..n) without its '_' suffix. */
static bool extends_alias(const char *name, size_t n)
{
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++)
		if (options[id].per_device && options[id].alias &&
		    has_prefix(name, n, options[id].alias))
			return true;
	return false;
}

/* Whether name[0..n) starts with "vgpu_" in another mixture of cases
 * than VGPU_'s (vgpu_memory_limit: a name the loader would not read). */
static bool prefix_other_case(const char *name, size_t n)
{
	static const char p[] = "VGPU_";

	if (n < 5 || memcmp(name, p, 5) == 0)
		return false;
	for (size_t i = 0; i < 5; i++)
		if (upper(name[i]) != p[i])
			return false;
	return true;
}

/* The entry before e in envp (from start) that defines the option e
 * names (name[0..n), then '='), or NULL. */
static const char *defined_before(const char *const *start,
				  const char *const *e, size_t n)
{
	for (; start < e; start++)
		if (strncmp(*start, *e, n + 1) == 0)
			return *start;
	return NULL;
}

/* NAME is set twice; "first" is used, "second" is not\n: getenv(3) and
 * the loader read the first definition, and whoever added the second
 * (a wrapper appending to an environment) meant it. */
static void report_twice(struct vgpu_fmtbuf *eb, const char *first,
			 const char *second, size_t n)
{
	put_name(eb, second, n);
	vgpu__fb_puts(eb, " is set twice; ");
	vgpu__fb_quoted(eb, first + n + 1);
	vgpu__fb_puts(eb, " is used, ");
	vgpu__fb_quoted(eb, second + n + 1);
	vgpu__fb_puts(eb, " is not\n");
}

/* Checked: a VGPU_ name of no other part of libvgpu, or one that extends
 * a per-device HAMi alias with '_'; either not in the table. A name with
 * the prefix in lower (or mixed) case is named too, and an option or
 * alias defined a second time. */
static int check_names(const char *const *envp, struct vgpu_fmtbuf *eb)
{
	const char *const *start = envp;
	int unknown = 0;

	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '='), *first;
		size_t n = eq ? (size_t)(eq - e) : strlen(e);
		bool ours = n >= 5 && memcmp(e, "VGPU_", 5) == 0;
		bool known = ours ? known_name(e, n, false)
				  : known_name(e, n, true);

		if (known && eq && (first = defined_before(start, envp, n))) {
			report_twice(eb, first, e, n);
			unknown++;
			continue;
		}
		if (ours ? is_other_part(e, n) || known
			 : !prefix_other_case(e, n) &&
			   (!extends_alias(e, n) || known))
			continue;
		put_name(eb, e, n);
		vgpu__fb_puts(eb, " is not a known option");
		explain(eb, e, n);
		vgpu__fb_putc(eb, '\n');
		unknown++;
	}
	return unknown;
}

/*
 * Reports the variables in envp (NAME=value strings, NULL-terminated) that
 * name no option, one line each with the closest option's name:
 *
 *   VGPU_MEMROY_LIMIT is not a known option; did you mean VGPU_MEMORY_LIMIT?
 *   VGPU_MEMORY_LIMIT_64 is not a known option: device 64 is out of range
 *   (VGPU_MEMORY_LIMIT_0 to VGPU_MEMORY_LIMIT_63)
 *
 * Checked: every VGPU_ name, VGPU_ alone included (plain VGPU, without
 * the '_', is not in the namespace), but those of other parts of libvgpu (the
 * simulator's VGPU_SIM and VGPU_SIM_*, vgpu-run's VGPU_LIBRARY, the tests'
 * VGPU_TEST_* and VGPU_SOAK), and the per-device forms of HAMi's aliases
 * (CUDA_DEVICE_MEMORY_LIMIT_64). Also named: a name whose prefix is
 * vgpu_ in another case (vgpu_memory_limit), and an option or alias set a
 * second time in envp (VGPU_MEMORY_LIMIT is set twice; "1GiB" is used,
 * "2GiB" is not). vgpu__options_load() calls it. Returns the count.
 */
int vgpu__options_check_names(const char *const *envp, char *err,
			      size_t errlen)
{
	struct vgpu_fmtbuf eb;
	int unknown;

	vgpu__fb_init(&eb, err, errlen);
	unknown = check_names(envp, &eb);
	vgpu__fb_finish(&eb);
	return unknown;
}

/* ---- per-device variables for devices the process does not have ------ */

/* The device index of a per-device variable name[0..n) (an option's name
 * or alias with a valid _<i>), with *base the name or alias; -1 if it is
 * none. */
static int device_index(const char *name, size_t n, const char **base)
{
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = &options[id];
		const char *w[2] = { d->name, d->alias };

		for (int i = 0; i < 2 && d->per_device; i++) {
			size_t wl = w[i] ? strlen(w[i]) : 0;
			const char *sfx = name + wl + 1;
			size_t sl = n - wl - 1;

			if (!w[i] || !has_prefix(name, n, w[i]) ||
			    !is_device_suffix(sfx, sl))
				continue;
			*base = w[i];
			return sl == 1 ? sfx[0] - '0'
				       : (sfx[0] - '0') * 10 + (sfx[1] - '0');
		}
	}
	return -1;
}

/*
 * Reports each per-device variable in envp (NAME=value strings,
 * NULL-terminated) whose device the process does not have: an index of
 * count or more, count being the devices the driver shows it (after
 * CUDA_VISIBLE_DEVICES, which the line quotes when envp sets it):
 *
 *   VGPU_MEMORY_LIMIT_1 names device 1, but the process sees 1 device
 *   (VGPU_MEMORY_LIMIT_0)
 *
 * Such a limit would apply to nothing, so the job would run without it.
 * Whatever the variable's value, good or bad. Only the VGPU_ names, or
 * with hami only HAMi's: a HAMi pod sets a limit for each of its GPUs,
 * and a job in it that narrows CUDA_VISIBLE_DEVICES is not wrong (HAMi-core
 * ignores the rest), so those are only warned about. Returns the count.
 */
int vgpu__options_check_devices(const char *const *envp, unsigned count,
				bool hami, char *err, size_t errlen)
{
	const char *visible = env_get(envp, "CUDA_VISIBLE_DEVICES");
	struct vgpu_fmtbuf eb;
	int absent = 0;

	vgpu__fb_init(&eb, err, errlen);
	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '='), *base = NULL;
		size_t n = eq ? (size_t)(eq - e) : strlen(e);
		int dev = device_index(e, n, &base);

		if (dev < 0 || (unsigned)dev < count ||
		    (strncmp(base, "CUDA_DEVICE_", 12) == 0) != hami)
			continue;
		put_name(&eb, e, n);
		vgpu__fb_puts(&eb, " names device ");
		vgpu__fb_u64(&eb, (uint64_t)dev);
		vgpu__fb_puts(&eb, ", but the process sees ");
		if (count == 0) {
			vgpu__fb_puts(&eb, "no device");
		} else {
			vgpu__fb_u64(&eb, count);
			vgpu__fb_puts(&eb, count == 1 ? " device" : " devices");
		}
		if (visible) {
			vgpu__fb_puts(&eb, " under CUDA_VISIBLE_DEVICES=");
			vgpu__fb_quoted(&eb, visible);
		}
		if (count > 0) {
			vgpu__fb_puts(&eb, " (");
			vgpu__fb_puts(&eb, base);
			vgpu__fb_puts(&eb, "_0");
			if (count > 1) {
				vgpu__fb_puts(&eb, " to ");
				vgpu__fb_puts(&eb, base);
				vgpu__fb_putc(&eb, '_');
				vgpu__fb_u64(&eb, count - 1);
			}
			vgpu__fb_putc(&eb, ')');
		}
		vgpu__fb_putc(&eb, '\n');
		absent++;
	}
	vgpu__fb_finish(&eb);
	return absent;
}

/* ---- HAMi's names, misspelt ------------------------------------------ */

/* The cost at most of a misspelling of a HAMi name that is reported: one
 * letter changed or dropped, or two added or swapped (edit_cost). */
#define HAMI_NEAR	2

/*
 * Reports each variable in envp that is not a HAMi name but is within
 * HAMI_NEAR of one (its per-device form included), one line each:
 *
 *   CUDA_DEVICE_MEMORY_LIMT is not a HAMi variable; did you mean
 *   CUDA_DEVICE_MEMORY_LIMIT? (ignored)
 *
 * Those names are outside the VGPU_ namespace, where any program may have
 * its own variables, so the front ends only warn about them. VGPU_ names
 * and the '_' extensions of per-device aliases are left to
 * vgpu__options_check_names(), which refuses them. Returns the count.
 */
int vgpu__options_check_hami_names(const char *const *envp, char *err,
				   size_t errlen)
{
	struct vgpu_fmtbuf eb;
	int near = 0;

	vgpu__fb_init(&eb, err, errlen);
	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '=');
		size_t n = eq ? (size_t)(eq - e) : strlen(e), base = n;
		struct suggestion s = { NULL, NULL, 0, HAMI_NEAR + 1 };

		if ((n >= 5 && memcmp(e, "VGPU_", 5) == 0) ||
		    known_name(e, n, true) || extends_alias(e, n) ||
		    n > CMP_MAX)
			continue;
		for (size_t i = n; i-- > 0;)
			if (e[i] == '_') {
				if (is_device_suffix(e + i + 1, n - i - 1))
					base = i;
				break;
			}
		for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
			const struct vgpu_opt_desc *d = &options[id];
			size_t wl = d->alias ? strlen(d->alias) : 0;

			if (!d->alias)
				continue;
			if (n + HAMI_NEAR >= wl && n <= wl + HAMI_NEAR)
				consider(&s, d->alias,
					 edit_cost(e, n, d->alias, HAMI_NEAR),
					 NULL, 0);
			if (d->per_device && base < n &&
			    base + HAMI_NEAR >= wl && base <= wl + HAMI_NEAR)
				consider(&s, d->alias,
					 edit_cost(e, base, d->alias, HAMI_NEAR),
					 e + base, n - base);
		}
		if (!s.word)
			continue;
		put_name(&eb, e, n);
		vgpu__fb_puts(&eb, " is not a HAMi variable; did you mean ");
		vgpu__fb_puts(&eb, s.word);
		for (size_t i = 0; i < s.dev_len; i++)
			vgpu__fb_putc(&eb, s.dev[i]);
		vgpu__fb_puts(&eb, "? (ignored)\n");
		near++;
	}
	vgpu__fb_finish(&eb);
	return near;
}
