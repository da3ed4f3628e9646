/* options_names.c - the variables that name no option: every VGPU_ name
 * not in the table (with the closest option's name, or what is wrong with
 * its device index), an option set twice, per-device variables for devices
 * the process does not have, and HAMi's names misspelt (warnings only).
 *
 * Usable from a library constructor, as options.c: no allocation, no
 * locks, no stdio. docs/configuration.md describes the rules for users.
 */
#include "options.h"

#include <string.h>

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
bool vgpu__name_has_prefix(const char *name, size_t n, const char *word)
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
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);
		const char *w = alias ? d->alias : d->name;
		size_t wl;

		if (!w)
			continue;
		wl = strlen(w);
		if (n == wl && memcmp(name, w, n) == 0)
			return true;
		if (d->per_device && vgpu__name_has_prefix(name, n, w) &&
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
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);

		if (!d->per_device)
			continue;
		if (vgpu__name_has_prefix(name, n, d->name))
			return d->name;
		if (d->alias && vgpu__name_has_prefix(name, n, d->alias))
			return d->alias;
	}
	return NULL;
}

/* The option name or alias without a per-device form that name[0..n)
 * extends with '_' and digits, or NULL. */
static const char *global_base(const char *name, size_t n)
{
	for (unsigned id = 0; id < VGPU_OPT_COUNT; id++) {
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);
		const char *w[2] = { d->name, d->alias };

		for (int i = 0; i < 2 && !d->per_device; i++)
			if (w[i] && vgpu__name_has_prefix(name, n, w[i]) &&
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
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);
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
		if (vgpu__option_desc(id)->per_device && vgpu__option_desc(id)->alias &&
		    vgpu__name_has_prefix(name, n, vgpu__option_desc(id)->alias))
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
int vgpu__options_names_into(const char *const *envp, struct vgpu_fmtbuf *eb)
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
	unknown = vgpu__options_names_into(envp, &eb);
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
		const struct vgpu_opt_desc *d = vgpu__option_desc(id);
		const char *w[2] = { d->name, d->alias };

		for (int i = 0; i < 2 && d->per_device; i++) {
			size_t wl = w[i] ? strlen(w[i]) : 0;
			const char *sfx = name + wl + 1;
			size_t sl = n - wl - 1;

			if (!w[i] || !vgpu__name_has_prefix(name, n, w[i]) ||
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
	const char *visible = vgpu__env_get(envp, "CUDA_VISIBLE_DEVICES");
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
			const struct vgpu_opt_desc *d = vgpu__option_desc(id);
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
