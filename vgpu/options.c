/* options.c - the VGPU_* options: one descriptor table, the option parsers
 * built on parse.c, a loader that reads an environment (NAME=value
 * strings), and the accessors. The names that are no option (misspelt,
 * out of range, HAMi's misspelt) are in options_names.c, the verbose dump
 * in options_dump.c.
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
const char *vgpu__env_get(const char *const *envp, const char *name)
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
	nv = vgpu__env_get(envp, name);
	if (d->alias) {
		var_name(alias, sizeof(alias), d->alias, dev);
		av = vgpu__env_get(envp, alias);
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

		if (vgpu__name_has_prefix(e, n, d->name) ||
		    (d->alias && vgpu__name_has_prefix(e, n, d->alias)))
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
	bad += vgpu__options_names_into(envp, &eb);
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
