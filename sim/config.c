/* config.c - the simulator's VGPU_SIM_* environment: one table of variables
 * (name, default, what is expected, the parser and the field it fills), pure
 * parsers, a loader that reads an environment (NAME=value strings) and a
 * check that names every VGPU_SIM_* variable the table lacks.
 *
 * The table is the one list: the defaults are its rows' default values
 * parsed like any other, the messages quote its expectations, and
 * tests/sim/test_config.c checks docs/simulator.md's table against it. The
 * same pattern as vgpu/options.c, written again: the simulator stays
 * independent of the core.
 */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- parsers: pure, by kind ------------------------------------------ */

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* An unsigned decimal number at the start of s; *end after its digits. */
static int parse_number(const char *s, const char **end, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (*p == '\0')
		return VSIM_CFG_EMPTY;
	if (*p == '-')
		return VSIM_CFG_NEGATIVE;
	if (!is_digit(*p))
		return VSIM_CFG_NOT_NUMBER;
	for (; is_digit(*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return VSIM_CFG_TOO_LARGE;
		v = v * 10 + d;
	}
	*end = p;
	*out = v;
	return VSIM_CFG_OK;
}

/* s[0..n): a number with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB
 * (case-insensitive, powers of two). */
static int size_status(const char *s, size_t n, uint64_t *out)
{
	static const struct { const char *unit; unsigned shift; } units[] = {
		{ "", 0 }, { "b", 0 },
		{ "k", 10 }, { "kb", 10 }, { "kib", 10 },
		{ "m", 20 }, { "mb", 20 }, { "mib", 20 },
		{ "g", 30 }, { "gb", 30 }, { "gib", 30 },
		{ "t", 40 }, { "tb", 40 }, { "tib", 40 },
	};
	const char *end;
	uint64_t v;
	size_t ul;
	int rc;

	if (n == 0)
		return VSIM_CFG_EMPTY;
	rc = parse_number(s, &end, &v);
	if (rc)
		return rc;
	ul = n - (size_t)(end - s);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strlen(units[i].unit) != ul ||
		    strncasecmp(end, units[i].unit, ul) != 0)
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return VSIM_CFG_TOO_LARGE;
		*out = v << units[i].shift;
		return VSIM_CFG_OK;
	}
	return VSIM_CFG_UNIT;
}

int vsim_parse_size(const char *s, uint64_t *out)
{
	return s && size_status(s, strlen(s), out) == VSIM_CFG_OK ? 0 : -1;
}

static int in_range(const struct vsim_cfg_var *var, uint64_t v,
		    struct vsim_cfg_value *out)
{
	if (v < var->min || v > var->max)
		return VSIM_CFG_RANGE;
	out->num = v;
	return VSIM_CFG_OK;
}

/* A size of var->min..var->max bytes. */
static int parse_size(const struct vsim_cfg_var *var, const char *s,
		      struct vsim_cfg_value *out)
{
	uint64_t v;
	int rc = size_status(s, strlen(s), &v);

	return rc ? rc : in_range(var, v, out);
}

/* A size per second: a size, optionally followed by "/s". */
static int parse_rate(const struct vsim_cfg_var *var, const char *s,
		      struct vsim_cfg_value *out)
{
	size_t n = strlen(s);
	uint64_t v;
	int rc;

	if (n > 2 && strcmp(s + n - 2, "/s") == 0)
		n -= 2;
	rc = size_status(s, n, &v);
	return rc ? rc : in_range(var, v, out);
}

/* A whole number of var->min..var->max, no unit. */
static int parse_count(const struct vsim_cfg_var *var, const char *s,
		       struct vsim_cfg_value *out)
{
	const char *end;
	uint64_t v;
	int rc = parse_number(s, &end, &v);

	if (rc)
		return rc;
	if (*end != '\0')
		return VSIM_CFG_TRAILING;
	return in_range(var, v, out);
}

/* 1/true/yes/on or 0/false/no/off, in any case. */
static int parse_bool(const struct vsim_cfg_var *var, const char *s,
		      struct vsim_cfg_value *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	(void)var;
	if (*s == '\0')
		return VSIM_CFG_EMPTY;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
			out->num = strcasecmp(s, yes[i]) == 0;
			return VSIM_CFG_OK;
		}
	}
	return VSIM_CFG_UNKNOWN_WORD;
}

/* One of var->words, exactly; the value is its index. */
static int parse_word(const struct vsim_cfg_var *var, const char *s,
		      struct vsim_cfg_value *out)
{
	if (*s == '\0')
		return VSIM_CFG_EMPTY;
	for (size_t i = 0; var->words[i]; i++) {
		if (strcmp(s, var->words[i]) == 0) {
			out->num = i;
			return VSIM_CFG_OK;
		}
	}
	return VSIM_CFG_UNKNOWN_WORD;
}

/* A string of var->min..var->max bytes. */
static int parse_string(const struct vsim_cfg_var *var, const char *s,
			struct vsim_cfg_value *out)
{
	size_t n = strlen(s);

	if (n == 0)
		return VSIM_CFG_EMPTY;
	if (n < var->min || n > var->max)
		return VSIM_CFG_TOO_LONG;
	out->str = s;
	out->len = n;
	return VSIM_CFG_OK;
}

/* An absolute path (a relative one would differ between processes). */
static int parse_abs_path(const struct vsim_cfg_var *var, const char *s,
			  struct vsim_cfg_value *out)
{
	if (*s != '\0' && *s != '/')
		return VSIM_CFG_NOT_ABSOLUTE;
	return parse_string(var, s, out);
}

/* WHEN of a VGPU_SIM_FAIL rule: N (the Nth call), N- (the Nth and all
 * later), N-M, %K (every Kth), * (every call). */
static int parse_when(const char *p, struct vsim_fail_rule *r)
{
	const char *end;

	r->active = true;
	if (strcmp(p, "*") == 0) {
		r->first = 1;
		r->last = UINT64_MAX;
		return VSIM_CFG_OK;
	}
	if (*p == '%')
		return parse_number(p + 1, &end, &r->every) || *end ||
		       r->every == 0 ? VSIM_CFG_FAIL_RULE : VSIM_CFG_OK;
	if (parse_number(p, &end, &r->first) || r->first == 0)
		return VSIM_CFG_FAIL_RULE;
	r->last = r->first;
	if (*end == '-' && end[1] == '\0') {
		r->last = UINT64_MAX;
	} else if (*end == '-') {
		if (parse_number(end + 1, &end, &r->last) || *end ||
		    r->last < r->first)
			return VSIM_CFG_FAIL_RULE;
	} else if (*end != '\0') {
		return VSIM_CFG_FAIL_RULE;
	}
	return VSIM_CFG_OK;
}

/* One rule KIND:WHEN, item[0..len). */
static int parse_fail_rule(const char *item, size_t len,
			   struct vsim_cfg_value *out)
{
	static const char *const kinds[VSIM_FAIL_KINDS] = { "alloc", "launch" };
	struct vsim_fail_rule r = { 0 };
	const char *colon;
	char buf[64];
	int rc;

	if (len == 0 || len >= sizeof(buf))
		return VSIM_CFG_FAIL_RULE;
	memcpy(buf, item, len);
	buf[len] = '\0';
	colon = strchr(buf, ':');
	if (!colon)
		return VSIM_CFG_FAIL_RULE;
	for (int k = 0; k < VSIM_FAIL_KINDS; k++) {
		if ((size_t)(colon - buf) != strlen(kinds[k]) ||
		    strncmp(buf, kinds[k], strlen(kinds[k])) != 0)
			continue;
		rc = parse_when(colon + 1, &r);
		if (rc == VSIM_CFG_OK)
			out->fail[k] = r;
		return rc;
	}
	return VSIM_CFG_FAIL_KIND;
}

/* Comma-separated rules; none at all (an empty value) is no fault. */
static int parse_fail(const struct vsim_cfg_var *var, const char *s,
		      struct vsim_cfg_value *out)
{
	(void)var;
	while (*s) {
		size_t len = strcspn(s, ",");
		int rc = parse_fail_rule(s, len, out);

		if (rc)
			return rc;
		s += len;
		if (*s == ',')
			s++;
	}
	return VSIM_CFG_OK;
}

bool vsim_fail_hit(const struct vsim_fail_rule *r, uint64_t n)
{
	if (!r->active)
		return false;
	if (r->every)
		return n % r->every == 0;
	return n >= r->first && n <= r->last;
}

const char *vsim_config_strerror(int status)
{
	switch (status) {
	case VSIM_CFG_OK:		return "is valid";
	case VSIM_CFG_EMPTY:		return "is empty";
	case VSIM_CFG_NEGATIVE:		return "is negative";
	case VSIM_CFG_NOT_NUMBER:	return "is not a number";
	case VSIM_CFG_TRAILING:		return "has trailing characters";
	case VSIM_CFG_UNIT:		return "has an unknown unit";
	case VSIM_CFG_TOO_LARGE:	return "is too large";
	case VSIM_CFG_RANGE:		return "is out of range";
	case VSIM_CFG_TOO_LONG:		return "is too long";
	case VSIM_CFG_NOT_ABSOLUTE:	return "is not an absolute path";
	case VSIM_CFG_UNKNOWN_WORD:	return "is not a known value";
	case VSIM_CFG_FAIL_KIND:	return "has a rule of no known kind";
	case VSIM_CFG_FAIL_RULE:	return "has a malformed rule";
	}
	return "is invalid";
}

/* ---- the table -------------------------------------------------------- */

#define SIZE_FORMS	"a whole number of bytes, optionally followed by " \
			"B, K/KiB, M/MiB, G/GiB or T/TiB"
#define FIELD(f)	offsetof(struct vsim_config, f)
#define STATE_DIR_MAX	(sizeof(((struct vsim_config *)0)->state_dir) - 65)

static const char *const unknown_kernel_words[] = { "wait", "fail", NULL };

/* docs/simulator.md's order. */
static const struct vsim_cfg_var vars[] = {
	{
		.name = "VGPU_SIM_DEVICES", .def = "1",
		.expect = "a device count from 1 to 16",
		.min = 1, .max = VSIM_MAX_DEVICES,
		.type = VSIM_CFG_INT, .offset = FIELD(devices),
		.parse = parse_count,
	},
	{
		.name = "VGPU_SIM_HIP_DEVICES", .def = "0",
		.expect = "a device count from 0 to 16",
		.min = 0, .max = VSIM_MAX_DEVICES,
		.type = VSIM_CFG_INT, .offset = FIELD(hip_devices),
		.parse = parse_count,
	},
	{
		.name = "VGPU_SIM_MEMORY", .def = "16GiB",
		.expect = "a size of at least 1MiB: " SIZE_FORMS
			  " (e.g. 16GiB)",
		.min = 1u << 20, .max = UINT64_MAX,
		.type = VSIM_CFG_U64, .offset = FIELD(memory),
		.parse = parse_size,
	},
	{
		.name = "VGPU_SIM_SM_COUNT", .def = "132",
		.expect = "a multiprocessor count from 1 to 1024",
		.min = 1, .max = 1024,
		.type = VSIM_CFG_INT, .offset = FIELD(sm_count),
		.parse = parse_count,
	},
	{
		.name = "VGPU_SIM_NAME", .def = "libvgpu simulated GPU",
		.expect = "a name of 1 to 255 bytes",
		.min = 1, .max = sizeof(((struct vsim_config *)0)->name) - 1,
		.type = VSIM_CFG_STRING, .offset = FIELD(name),
		.parse = parse_string,
	},
	{
		/* Room is left for "/devN.state" and the like. */
		.name = "VGPU_SIM_STATE_DIR", .def = NULL,
		.expect = "an absolute directory path of 1 to 4031 bytes",
		.min = 1, .max = STATE_DIR_MAX,
		.type = VSIM_CFG_STRING, .offset = FIELD(state_dir),
		.parse = parse_abs_path,
	},
	{
		.name = "VGPU_SIM_KERNEL_NS", .def = "10000",
		.expect = "nanoseconds from 0 to 60000000000",
		.min = 0, .max = 60000000000ull,
		.type = VSIM_CFG_U64, .offset = FIELD(kernel_ns),
		.parse = parse_count,
	},
	{
		.name = "VGPU_SIM_UNKNOWN_KERNEL", .def = "wait",
		.expect = "wait (a kernel with no host form waits out "
			  "VGPU_SIM_KERNEL_NS) or fail (its launch returns "
			  "CUDA_ERROR_NOT_SUPPORTED)",
		.words = unknown_kernel_words,
		.type = VSIM_CFG_BOOL, .offset = FIELD(unknown_kernel_fail),
		.parse = parse_word,
	},
	{
		.name = "VGPU_SIM_FAIL", .def = "",
		.expect = "comma-separated rules KIND:N, KIND:N-, KIND:N-M, "
			  "KIND:%K or KIND:* with KIND alloc or launch",
		.type = VSIM_CFG_RULES, .offset = FIELD(fail),
		.parse = parse_fail,
	},
	{
		.name = "VGPU_SIM_GREEN_CONTEXTS", .def = "1",
		.expect = "1, true, yes or on (green contexts), or 0, false, "
			  "no or off (their entry points are not supported)",
		.type = VSIM_CFG_BOOL, .offset = FIELD(green_contexts),
		.parse = parse_bool,
	},
	{
		.name = "VGPU_SIM_HOST_LATE_NS", .def = "0",
		.expect = "nanoseconds from 0 to 1000000000",
		.min = 0, .max = 1000000000ull,
		.type = VSIM_CFG_U64, .offset = FIELD(host_late_ns),
		.parse = parse_count,
	},
	{
		.name = "VGPU_SIM_BUS_BANDWIDTH", .def = "16GiB/s",
		.expect = "a size per second such as 16GiB, 16GiB/s or "
			  "500MiB/s, or 0 for no bus cost",
		.min = 0, .max = UINT64_MAX,
		.type = VSIM_CFG_U64, .offset = FIELD(bus_bandwidth),
		.parse = parse_rate,
	},
};

#define VAR_COUNT	(sizeof(vars) / sizeof(vars[0]))

const struct vsim_cfg_var *vsim_config_var(size_t i)
{
	return i < VAR_COUNT ? &vars[i] : NULL;
}

const struct vsim_cfg_var *vsim_config_find(const char *name)
{
	for (size_t i = 0; i < VAR_COUNT; i++)
		if (strcmp(vars[i].name, name) == 0)
			return &vars[i];
	return NULL;
}

/* VGPU_SIM_* names of other parts of libvgpu, not the simulator's:
 * vgpu-run's VGPU_SIM_LIBRARY, the tools tests' VGPU_SIM_LIBCUDA. */
static const char *const other_parts[] = {
	"VGPU_SIM_LIBRARY", "VGPU_SIM_LIBCUDA", NULL
};

/* ---- storing, defaults, loading ---------------------------------------- */

static void store(struct vsim_config *cfg, const struct vsim_cfg_var *var,
		  const struct vsim_cfg_value *v)
{
	char *p = (char *)cfg + var->offset;
	struct vsim_fail_rule *rules;

	switch (var->type) {
	case VSIM_CFG_INT:
		*(int *)(void *)p = (int)v->num;
		break;
	case VSIM_CFG_U64:
		*(uint64_t *)(void *)p = v->num;
		break;
	case VSIM_CFG_BOOL:
		*(bool *)(void *)p = v->num != 0;
		break;
	case VSIM_CFG_STRING:
		memcpy(p, v->str, v->len);
		p[v->len] = '\0';
		break;
	case VSIM_CFG_RULES:
		/* The kinds the value names; the others keep their rule. */
		rules = (struct vsim_fail_rule *)(void *)p;
		for (int k = 0; k < VSIM_FAIL_KINDS; k++)
			if (v->fail[k].active)
				rules[k] = v->fail[k];
		break;
	}
}

void vsim_config_defaults(struct vsim_config *cfg)
{
	struct vsim_cfg_value v;

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < VAR_COUNT; i++) {
		memset(&v, 0, sizeof(v));
		if (vars[i].def && vars[i].parse(&vars[i], vars[i].def, &v) ==
				   VSIM_CFG_OK)
			store(cfg, &vars[i], &v);
	}
	if (access("/dev/shm", W_OK) == 0)
		snprintf(cfg->state_dir, sizeof(cfg->state_dir),
			 "/dev/shm/vgpu-sim-%u", (unsigned)getuid());
	else
		snprintf(cfg->state_dir, sizeof(cfg->state_dir),
			 "/tmp/vgpu-sim-%u", (unsigned)getuid());
}

/* Bytes of a value or a name quoted in a message. */
#define SHOWN	64

/* s[0..n) cut at SHOWN bytes ("..." after), unprintable bytes as '?'. */
static void shown(char *buf, size_t len, const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n && i < SHOWN && i + 1 < len; i++)
		buf[i] = (s[i] >= ' ' && s[i] < 0x7f) ? s[i] : '?';
	buf[i] = '\0';
	if (n > SHOWN && i == SHOWN)
		snprintf(buf + i, len - i, "...");
}

static void closest_hint(char *buf, size_t len, const char *name, size_t n);

/* VGPU_SIM_X is not a simulator variable; did you mean VGPU_SIM_Y? */
static void unknown_line(char *buf, size_t len, const char *name, size_t n)
{
	char hint[128], nm[SHOWN + 4];

	shown(nm, sizeof(nm), name, n);
	closest_hint(hint, sizeof(hint), name, n);
	snprintf(buf, len, "%s is not a simulator variable%s", nm, hint);
}

int vsim_config_parse_var(struct vsim_config *cfg, const char *var,
			  const char *value, char *err, size_t errlen)
{
	const struct vsim_cfg_var *d = vsim_config_find(var);
	struct vsim_cfg_value v;
	char val[SHOWN + 4];
	int rc;

	if (!d) {
		unknown_line(err, errlen, var, strlen(var));
		return -1;
	}
	memset(&v, 0, sizeof(v));
	rc = d->parse(d, value, &v);
	if (rc == VSIM_CFG_OK) {
		store(cfg, d, &v);
		return 0;
	}
	shown(val, sizeof(val), value, strlen(value));
	snprintf(err, errlen, "%s=\"%s\" %s; expected %s", d->name, val,
		 vsim_config_strerror(rc), d->expect);
	return -1;
}

/* The value of name in envp, the first definition, as getenv(3) finds it. */
static const char *env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

int vsim_config_load(struct vsim_config *cfg, const char *const *envp,
		     char *err, size_t errlen)
{
	vsim_config_defaults(cfg);
	for (size_t i = 0; i < VAR_COUNT; i++) {
		const char *value = env_get(envp, vars[i].name);

		if (value && vsim_config_parse_var(cfg, vars[i].name, value,
						   err, errlen) != 0)
			return -1;
	}
	return 0;
}

/* ---- names that are no variable ---------------------------------------- */

#define CMP_MAX	64	/* longest name compared in full */

static char upper(char c)
{
	return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

/* The cost of editing a[0..n) into b, case ignored, both cut at CMP_MAX:
 * adding, dropping or changing a character, or swapping two neighbours,
 * costs 1 (optimal string alignment). */
static unsigned edit_cost(const char *a, size_t n, const char *b)
{
	unsigned d[CMP_MAX + 1][CMP_MAX + 1];
	size_t m = strlen(b);

	n = n < CMP_MAX ? n : CMP_MAX;
	m = m < CMP_MAX ? m : CMP_MAX;
	for (size_t i = 0; i <= n; i++)
		d[i][0] = (unsigned)i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++) {
		for (size_t j = 1; j <= m; j++) {
			char x = upper(a[i - 1]), y = upper(b[j - 1]);
			unsigned v = d[i - 1][j - 1] + (x != y);

			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && x == upper(b[j - 2]) &&
			    upper(a[i - 2]) == y && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[n][m];
}

/* "; did you mean VGPU_SIM_Y?" when a variable's name is near name[0..n):
 * two edits at most, or a third of the letters after VGPU_SIM_. Else "". */
static void closest_hint(char *buf, size_t len, const char *name, size_t n)
{
	const char *best = NULL;
	unsigned best_cost = ~0u;

	for (size_t i = 0; i < VAR_COUNT; i++) {
		unsigned c = edit_cost(name, n, vars[i].name);

		if (c < best_cost) {
			best = vars[i].name;
			best_cost = c;
		}
	}
	if (best && (best_cost <= 2 || best_cost <= (strlen(best) - 9) / 3))
		snprintf(buf, len, "; did you mean %s?", best);
	else
		buf[0] = '\0';
}

/* Whether name[0..n) is VGPU_SIM_* and no variable of the table or of
 * another part. */
static bool is_unknown(const char *name, size_t n)
{
	if (n < 9 || memcmp(name, "VGPU_SIM_", 9) != 0)
		return false;
	for (size_t i = 0; i < VAR_COUNT; i++)
		if (strlen(vars[i].name) == n &&
		    memcmp(vars[i].name, name, n) == 0)
			return false;
	for (const char *const *w = other_parts; *w; w++)
		if (strlen(*w) == n && memcmp(*w, name, n) == 0)
			return false;
	return true;
}

int vsim_config_check_names(const char *const *envp, char *out, size_t len)
{
	size_t used = 0;
	int unknown = 0;

	if (len)
		out[0] = '\0';
	for (; envp && *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '=');
		size_t n = eq ? (size_t)(eq - e) : strlen(e);
		char line[256];

		if (!is_unknown(e, n))
			continue;
		unknown_line(line, sizeof(line), e, n);
		if (used < len)
			used += (size_t)snprintf(out + used, len - used,
						 "%s (ignored)\n", line);
		unknown++;
	}
	return unknown;
}

int vsim_config_from_env(struct vsim_config *cfg, char *err, size_t errlen)
{
	const char *const *envp = (const char *const *)environ;
	char warn[1024], *line, *save = NULL;

	if (vsim_config_check_names(envp, warn, sizeof(warn)) > 0)
		for (line = strtok_r(warn, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			vsim_log("%s", line);
	return vsim_config_load(cfg, envp, err, errlen);
}
