/* parse.c - the pure value parsers and formatters behind the options:
 * sizes, percentages, booleans, enum words, log levels, and the bounded
 * formatting (struct vgpu_fmtbuf) the rest of the core writes text with.
 *
 * Usable from a library constructor: no allocation, no locks, no stdio,
 * no environment. Text goes into caller buffers.
 */
#include "options.h"

#include <string.h>

/* ---- characters ------------------------------------------------------ */

bool vgpu__is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Printable ASCII other than space: what a tenant name may hold. */
bool vgpu__is_graph(char c)
{
	return c > ' ' && c < 0x7f;
}

static char to_lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Case-insensitive comparison of s[0..n) with the lower-case word w. */
static bool word_eq_n(const char *s, size_t n, const char *w)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (w[i] == '\0' || to_lower(s[i]) != w[i])
			return false;
	return w[n] == '\0';
}

bool vgpu__word_eq(const char *s, const char *w)
{
	return word_eq_n(s, strlen(s), w);
}

/* ---- bounded formatting ---------------------------------------------- */

void vgpu__fb_init(struct vgpu_fmtbuf *b, char *buf, size_t cap)
{
	b->buf = buf;
	b->cap = buf ? cap : 0;
	b->len = 0;
	b->truncated = false;
	if (b->cap)
		buf[0] = '\0';
}

void vgpu__fb_putc(struct vgpu_fmtbuf *b, char c)
{
	if (b->len + 1 >= b->cap) {
		b->truncated = true;
		return;
	}
	b->buf[b->len++] = c;
	b->buf[b->len] = '\0';
}

void vgpu__fb_puts(struct vgpu_fmtbuf *b, const char *s)
{
	while (*s)
		vgpu__fb_putc(b, *s++);
}

void vgpu__fb_u64(struct vgpu_fmtbuf *b, uint64_t v)
{
	char digits[20];
	int n = 0;

	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		vgpu__fb_putc(b, digits[--n]);
}

/* A user's value, quoted, cut at 64 bytes, non-printables shown as '?'. */
void vgpu__fb_quoted(struct vgpu_fmtbuf *b, const char *s)
{
	size_t i;

	vgpu__fb_putc(b, '"');
	for (i = 0; s[i] && i < 64; i++)
		vgpu__fb_putc(b, (s[i] >= ' ' && s[i] < 0x7f) ? s[i] : '?');
	vgpu__fb_putc(b, '"');
	if (s[i])
		vgpu__fb_puts(b, "...");
}

/* Marks a buffer that ran out of room by ending it with "...". */
void vgpu__fb_finish(struct vgpu_fmtbuf *b)
{
	if (b->truncated && b->cap >= 4)
		memcpy(b->buf + b->cap - 4, "...", 4);
}

/* ---- pure parsers ---------------------------------------------------- */

/* Reads a non-negative whole number at *sp, moving *sp past its digits. */
int vgpu__parse_whole(const char **sp, uint64_t *out)
{
	const char *s = *sp;
	uint64_t v = 0;

	if (!s || !*s)
		return VGPU_PARSE_EMPTY;
	if (*s == '-')
		return vgpu__is_digit(s[1]) ? VGPU_PARSE_NEGATIVE
				      : VGPU_PARSE_NOT_NUMBER;
	if (!vgpu__is_digit(*s))
		return VGPU_PARSE_NOT_NUMBER;
	for (; vgpu__is_digit(*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return VGPU_PARSE_OVERFLOW;
		v = v * 10 + d;
	}
	if (*s == '.' || *s == ',')
		return VGPU_PARSE_FRACTION;
	*sp = s;
	*out = v;
	return VGPU_PARSE_OK;
}

struct size_unit {
	const char *word;
	unsigned shift;
};

static const struct size_unit size_units[] = {
	{ "", 0 },   { "b", 0 },
	{ "k", 10 }, { "kib", 10 },
	{ "m", 20 }, { "mib", 20 },
	{ "g", 30 }, { "gib", 30 },
	{ "t", 40 }, { "tib", 40 },
};

/*
 * A size: a whole number, then optional spaces and a binary unit
 * (B, K/KiB, M/MiB, G/GiB, T/TiB, any case). Decimal units (KB, GB) are
 * refused as ambiguous. Nothing may precede the number or follow the unit.
 * A size is below 2^64 - 1 (UINT64_MAX, VGPU_UNLIMITED): more is too large.
 */
int vgpu__parse_size(const char *s, uint64_t *out)
{
	const char *num_end, *unit;
	uint64_t n;
	size_t i, ulen;
	int rc;

	rc = vgpu__parse_whole(&s, &n);
	if (rc)
		return rc;
	num_end = s;
	while (*s == ' ')
		s++;
	unit = s;
	while (is_alpha(*s))
		s++;
	ulen = (size_t)(s - unit);
	for (i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++)
		if (word_eq_n(unit, ulen, size_units[i].word))
			break;
	if (i == sizeof(size_units) / sizeof(size_units[0]))
		return VGPU_PARSE_UNIT;
	if (*s || (ulen == 0 && unit != num_end))
		return VGPU_PARSE_TRAILING;
	/* UINT64_MAX is "no limit" to the options and the ledger: not a
	 * size anyone can write. */
	if (n > (UINT64_MAX >> size_units[i].shift) ||
	    n << size_units[i].shift == UINT64_MAX)
		return VGPU_PARSE_OVERFLOW;
	*out = n << size_units[i].shift;
	return VGPU_PARSE_OK;
}

/* A whole percentage 0..100, optionally followed by '%'. */
int vgpu__parse_percent(const char *s, unsigned *out)
{
	uint64_t n;
	int rc;

	rc = vgpu__parse_whole(&s, &n);
	if (rc == VGPU_PARSE_OVERFLOW)
		return VGPU_PARSE_RANGE;
	if (rc)
		return rc;
	if (*s == '%')
		s++;
	if (*s)
		return VGPU_PARSE_TRAILING;
	if (n > 100)
		return VGPU_PARSE_RANGE;
	*out = (unsigned)n;
	return VGPU_PARSE_OK;
}

static const char *const bool_true[] = { "1", "true", "yes", "on", NULL };
static const char *const bool_false[] = { "0", "false", "no", "off", NULL };

/* 1/true/yes/on or 0/false/no/off, any case. */
int vgpu__parse_bool(const char *s, bool *out)
{
	int i;

	if (!s || !*s)
		return VGPU_PARSE_EMPTY;
	if (vgpu__parse_enum(s, bool_true, &i) == VGPU_PARSE_OK) {
		*out = true;
		return VGPU_PARSE_OK;
	}
	if (vgpu__parse_enum(s, bool_false, &i) == VGPU_PARSE_OK) {
		*out = false;
		return VGPU_PARSE_OK;
	}
	return VGPU_PARSE_UNKNOWN_WORD;
}

/* The index of s in the NULL-terminated list of lower-case names, any case. */
int vgpu__parse_enum(const char *s, const char *const *names, int *out)
{
	int i;

	if (!s || !*s)
		return VGPU_PARSE_EMPTY;
	for (i = 0; names[i]; i++) {
		if (vgpu__word_eq(s, names[i])) {
			*out = i;
			return VGPU_PARSE_OK;
		}
	}
	return VGPU_PARSE_UNKNOWN_WORD;
}

const char *const vgpu__log_level_names[] = {
	"error", "warn", "info", "debug", NULL
};

/* HAMi's numbers: 0 errors, 1 warnings, 2 and 3 information, 4 debug. */
const int vgpu__log_level_numbers[] = {
	VGPU_LOG_ERROR, VGPU_LOG_WARN, VGPU_LOG_INFO, VGPU_LOG_INFO,
	VGPU_LOG_DEBUG,
};

/* error|warn|info|debug (any case), or a number 0..4. */
int vgpu__parse_log_level(const char *s, int *out)
{
	const char *p = s;
	uint64_t n;
	int rc;

	if (s && vgpu__is_digit(*s)) {
		rc = vgpu__parse_whole(&p, &n);
		if (rc == VGPU_PARSE_OVERFLOW)
			return VGPU_PARSE_RANGE;
		if (rc)
			return rc;
		if (*p)
			return VGPU_PARSE_TRAILING;
		if (n > 4)
			return VGPU_PARSE_RANGE;
		*out = vgpu__log_level_numbers[n];
		return VGPU_PARSE_OK;
	}
	if (s && *s == '-')
		return VGPU_PARSE_NEGATIVE;
	return vgpu__parse_enum(s, vgpu__log_level_names, out);
}

const char *vgpu__parse_strerror(int status)
{
	switch (status) {
	case VGPU_PARSE_OK:		return "is valid";
	case VGPU_PARSE_EMPTY:		return "is empty";
	case VGPU_PARSE_NEGATIVE:	return "is negative";
	case VGPU_PARSE_NOT_NUMBER:	return "is not a number";
	case VGPU_PARSE_FRACTION:	return "is not a whole number";
	case VGPU_PARSE_TRAILING:	return "has trailing characters";
	case VGPU_PARSE_UNIT:		return "has an unknown unit";
	case VGPU_PARSE_OVERFLOW:	return "is too large";
	case VGPU_PARSE_RANGE:		return "is out of range";
	case VGPU_PARSE_UNKNOWN_WORD:	return "is not a known value";
	case VGPU_PARSE_NOT_ABSOLUTE:	return "is not an absolute path";
	case VGPU_PARSE_TOO_LONG:	return "is too long";
	case VGPU_PARSE_BAD_CHAR:
		return "holds a character not allowed here";
	}
	return "is invalid";
}

/*
 * Writes bytes in the largest binary unit that divides it exactly ("4GiB",
 * "1000"), or "unlimited". Returns the length, or -1 if buf is too small.
 */
int vgpu__format_size(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "TiB", "GiB", "MiB", "KiB" };
	struct vgpu_fmtbuf b;
	unsigned i;

	vgpu__fb_init(&b, buf, len);
	if (bytes == VGPU_UNLIMITED) {
		vgpu__fb_puts(&b, "unlimited");
	} else if (bytes == 0) {
		vgpu__fb_putc(&b, '0');
	} else {
		for (i = 0; i < 4; i++) {
			unsigned shift = 40 - 10 * i;

			if ((bytes & ((UINT64_C(1) << shift) - 1)) == 0)
				break;
		}
		vgpu__fb_u64(&b, i < 4 ? bytes >> (40 - 10 * i) : bytes);
		if (i < 4)
			vgpu__fb_puts(&b, units[i]);
	}
	return b.truncated ? -1 : (int)b.len;
}

/*
 * The default tenant, "uid<uid>@<host>": one per user on a machine, one per
 * user and pod in Kubernetes (a pod's host name is its own). The host is cut
 * to fit and anything but printable ASCII becomes '_'. Returns the length.
 */
int vgpu__format_tenant(char *buf, size_t len, unsigned long uid,
			const char *host)
{
	struct vgpu_fmtbuf b;

	vgpu__fb_init(&b, buf, len);
	vgpu__fb_puts(&b, "uid");
	vgpu__fb_u64(&b, uid);
	if (host && *host) {
		vgpu__fb_putc(&b, '@');
		for (; *host; host++)
			vgpu__fb_putc(&b, vgpu__is_graph(*host) ? *host : '_');
	}
	return (int)b.len;
}
