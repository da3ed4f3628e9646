/* vgpu-top-text.c - a snapshot as a frame of text: per GPU a summary line,
 * its tenants, its processes; sorted and filtered as the view says. Lines
 * are cut at the view's width and the frame at its height; in live mode
 * every line also clears the rest of its row.
 */
#include "vgpu-top.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct out {
	FILE *f;
	const struct top_view *v;
	int lines;
};

/* One line: cut at the width, dropped past the height. */
static void emit(struct out *o, const char *attr, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int w = o->v->width > 0 && o->v->width < (int)sizeof(line) ?
		o->v->width : (int)sizeof(line) - 1;

	if (o->v->height > 0 && o->lines >= o->v->height)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* Cut at the width, not inside a UTF-8 character. */
	if ((size_t)w < strlen(line))
		while (w > 0 && ((unsigned char)line[w] & 0xc0) == 0x80)
			w--;
	line[w] = '\0';
	if (o->v->color && attr)
		fprintf(o->f, "%s%s\033[0m\033[K\n", attr, line);
	else if (o->v->color)
		fprintf(o->f, "%s\033[K\n", line);
	else
		fprintf(o->f, "%s\n", line);
	o->lines++;
}

/* b in the largest binary unit, one decimal. */
static void size_text(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
}

const char *top_bytes(uint64_t b, char *buf, size_t len)
{
	size_t n;

	size_text(b, buf, len);
	n = strlen(buf);
	if (b >= TOP_DAMAGED_BYTES && n + 1 < len) {
		buf[n] = '!';
		buf[n + 1] = '\0';
	}
	return buf;
}

const char *top_limit(uint64_t b, char *buf, size_t len)
{
	if (b == VGPU_LEDGER_UNLIMITED)
		snprintf(buf, len, "unlimited");
	else
		size_text(b, buf, len);
	return buf;
}

/* ---- escaping what was read from a file --------------------------------------- */

/* The length of the valid UTF-8 character at s that is no control (U+00A0
 * and up), or 0. */
static size_t utf8_printable(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n, i;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xc2 && s[1] < 0xa0) ||	/* C1 controls */
	    (c == 0xe0 && s[1] < 0xa0) ||	/* overlong */
	    (c == 0xed && s[1] > 0x9f) ||	/* surrogates */
	    (c == 0xf0 && s[1] < 0x90) ||	/* overlong */
	    (c == 0xf4 && s[1] > 0x8f))		/* past U+10FFFF */
		return 0;
	return n;
}

#define UNIT_MAX	16	/* one unit escaped: two \uXXXX and a NUL */

/* Whether code point cp is one a terminal shows as nothing or that moves
 * the text after it, so that a name holding it reads as another's or
 * rearranges the line: Unicode's default-ignorable code points (the soft
 * hyphen U+00AD, the joiners and zero-width marks U+200B-F, the
 * invisible operators U+2060-F, variation selectors, fillers, tags
 * U+E0000-E0FFF, ...), the other format marks (U+061C, U+180E, U+FFF9-B),
 * the line and paragraph separators and the bidirectional embeddings,
 * overrides and isolates (U+2028-E, U+2066-9). */
static bool hidden_mark(unsigned cp)
{
	static const unsigned ranges[][2] = {
		{ 0x00ad, 0x00ad }, { 0x034f, 0x034f }, { 0x061c, 0x061c },
		{ 0x115f, 0x1160 }, { 0x17b4, 0x17b5 }, { 0x180b, 0x180f },
		{ 0x200b, 0x200f }, { 0x2028, 0x202e }, { 0x2060, 0x206f },
		{ 0x3164, 0x3164 }, { 0xfe00, 0xfe0f }, { 0xfeff, 0xfeff },
		{ 0xffa0, 0xffa0 }, { 0xfff0, 0xfffb }, { 0x1bca0, 0x1bca3 },
		{ 0x1d173, 0x1d17a }, { 0xe0000, 0xe0fff },
	};

	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		if (cp >= ranges[i][0] && cp <= ranges[i][1])
			return true;
	return false;
}

/* The code point of the character of n bytes at s when it is a hidden
 * mark (hidden_mark), else 0. */
static unsigned mark_of(const unsigned char *s, size_t n)
{
	unsigned cp;

	if (n == 2)
		cp = (s[0] & 0x1fu) << 6 | (s[1] & 0x3fu);
	else if (n == 3)
		cp = (s[0] & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 |
		     (s[2] & 0x3fu);
	else if (n == 4)
		cp = (s[0] & 0x07u) << 18 | (s[1] & 0x3fu) << 12 |
		     (s[2] & 0x3fu) << 6 | (s[3] & 0x3fu);
	else
		return 0;
	return hidden_mark(cp) ? cp : 0;
}

/* The escaped form of the unit at s into out (NUL-terminated); returns
 * the bytes of s it stands for. */
static size_t escape_unit(const unsigned char *s, enum top_esc how,
			  char out[UNIT_MAX])
{
	size_t n = utf8_printable(s);
	unsigned mark = n ? mark_of(s, n) : 0;

	/* A mark: in JSON its code point (past U+FFFF as a surrogate pair),
	 * as text its bytes (\xNN). */
	if (mark && how == TOP_ESC_JSON) {
		if (mark > 0xffff)
			snprintf(out, UNIT_MAX, "\\u%04x\\u%04x",
				 0xd800 + ((mark - 0x10000) >> 10),
				 0xdc00 + ((mark - 0x10000) & 0x3ff));
		else
			snprintf(out, UNIT_MAX, "\\u%04x", mark);
		return n;
	}
	if (n && !mark) {
		memcpy(out, s, n);
		out[n] = '\0';
		return n;
	}
	if (s[0] >= 0x20 && s[0] < 0x7f) {
		bool esc = s[0] == '\\' || (how == TOP_ESC_JSON && s[0] == '"');

		snprintf(out, UNIT_MAX, esc ? "\\%c" : "%c", s[0]);
		return 1;
	}
	if (how == TOP_ESC_TEXT) {
		snprintf(out, UNIT_MAX, "\\x%02x", s[0]);
		return 1;
	}
	/* JSON: a C1 control as its code point, any other byte as U+00NN. */
	if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] < 0xa0) {
		snprintf(out, UNIT_MAX, "\\u%04x", s[1]);
		return 2;
	}
	snprintf(out, UNIT_MAX, "\\u%04x", s[0]);
	return 1;
}

const char *top_escape(const char *s, enum top_esc how, char *buf,
		       size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t used = 0, n;
	char unit[UNIT_MAX];

	while (*p) {
		n = escape_unit(p, how, unit);
		if (used + strlen(unit) >= len)
			break;
		memcpy(buf + used, unit, strlen(unit));
		used += strlen(unit);
		p += n;
	}
	buf[used] = '\0';
	return buf;
}

void top_put_escaped(FILE *f, const char *s, enum top_esc how)
{
	const unsigned char *p = (const unsigned char *)s;
	char unit[UNIT_MAX];

	while (*p) {
		p += escape_unit(p, how, unit);
		fputs(unit, f);
	}
}

/* ---- pids and namespaces ------------------------------------------------------ */

enum top_pidns top_pid_view(const struct top_proc *p, int32_t *shown)
{
	if (p->host_pid > 0 && p->host_pid != p->pid) {
		*shown = p->host_pid;
		return TOP_PIDNS_OTHER;
	}
	*shown = p->pid_here || p->host_pid == p->pid ? p->pid : 0;
	return *shown ? TOP_PIDNS_SAME : TOP_PIDNS_UNKNOWN;
}

const char *top_pidns_name(enum top_pidns ns)
{
	static const char *const names[] = { "same", "other", "unknown" };

	return names[ns];
}

static const char *pct(const struct top_rates *r, double v, char *buf,
		       size_t len)
{
	if (!r->valid)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", v);
	return buf;
}

static const char *rate(const struct top_rates *r, char *buf, size_t len)
{
	if (!r->valid)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.0f", r->launches_per_s);
	return buf;
}

/* ---- sorting and filtering ---------------------------------------------------- */

static const struct top_gpu *sort_gpu;	/* the comparators' context */
static enum top_sort sort_key;

static const char *name_of(const struct top_gpu *g, uint32_t index)
{
	for (int i = 0; i < g->ntenants; i++)
		if (g->tenants[i].index == index)
			return g->tenants[i].name;
	return "?";
}

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
	return a < b ? 1 : a > b ? -1 : 0;
}

static int cmp_dbl_desc(double a, double b)
{
	return a < b ? 1 : a > b ? -1 : 0;
}

/* The pid shown first, or the namespace's where none can be. */
static int32_t pid_key(const struct top_proc *p)
{
	int32_t shown;

	top_pid_view(p, &shown);
	return shown ? shown : p->pid;
}

static int cmp_proc(const void *pa, const void *pb)
{
	const struct top_proc *a = *(const struct top_proc *const *)pa;
	const struct top_proc *b = *(const struct top_proc *const *)pb;
	int c = 0;

	switch (sort_key) {
	case TOP_SORT_MEMORY:
		c = cmp_u64_desc(a->used + a->usage[VGPU_USAGE_SPILLED],
				 b->used + b->usage[VGPU_USAGE_SPILLED]);
		break;
	case TOP_SORT_COMPUTE:
		c = cmp_dbl_desc(a->r1.share_pct, b->r1.share_pct);
		if (!c)
			c = cmp_u64_desc(a->gpu_time_ns, b->gpu_time_ns);
		break;
	case TOP_SORT_TENANT:
		c = strcmp(name_of(sort_gpu, a->tenant),
			   name_of(sort_gpu, b->tenant));
		break;
	case TOP_SORT_PID:
		break;
	}
	return c ? c : (pid_key(a) > pid_key(b)) - (pid_key(a) < pid_key(b));
}

static int cmp_tenant(const void *pa, const void *pb)
{
	const struct top_tenant *a = *(const struct top_tenant *const *)pa;
	const struct top_tenant *b = *(const struct top_tenant *const *)pb;
	int c = 0;

	if (sort_key == TOP_SORT_MEMORY)
		c = cmp_u64_desc(a->used + a->usage[VGPU_USAGE_SPILLED],
				 b->used + b->usage[VGPU_USAGE_SPILLED]);
	else if (sort_key == TOP_SORT_COMPUTE)
		c = cmp_dbl_desc(a->r1.share_pct, b->r1.share_pct);
	return c ? c : strcmp(a->name, b->name);
}

static bool proc_matches(const struct top_gpu *g, const struct top_proc *p,
			 const char *filter)
{
	char pid[16], host[16];

	if (!filter || !*filter)
		return true;
	snprintf(pid, sizeof(pid), "%" PRId32, p->pid);
	snprintf(host, sizeof(host), "%" PRId32, p->host_pid);
	return strstr(pid, filter) || (p->host_pid && strstr(host, filter)) ||
	       strstr(name_of(g, p->tenant), filter);
}

static bool tenant_matches(const struct top_gpu *g, const struct top_tenant *t,
			   const char *filter)
{
	if (!filter || !*filter || strstr(t->name, filter))
		return true;
	for (int i = 0; i < g->nprocs; i++)
		if (g->procs[i].tenant == t->index &&
		    proc_matches(g, &g->procs[i], filter))
			return true;
	return false;
}

/* ---- the frame ------------------------------------------------------------------ */

static void print_gpu_line(struct out *o, const struct top_gpu *g)
{
	char phys[32], sl[32], used[32], sp[32], u1[16], u10[16], extra[48],
	     uuid[4 * VGPU_LEDGER_UUID_MAX];

	extra[0] = '\0';
	if (g->unlimited_tenants)
		snprintf(extra, sizeof(extra), " + %d unlimited",
			 g->unlimited_tenants);
	emit(o, "\033[1m", "GPU %s  memory %s  slices %s (%.0f%%)%s  used %s  "
	     "spilled %s  util %s (10s %s)",
	     top_escape(g->uuid, TOP_ESC_TEXT, uuid, sizeof(uuid)),
	     top_bytes(g->physical_bytes, phys, sizeof(phys)),
	     top_bytes(g->slices_bytes, sl, sizeof(sl)),
	     g->physical_bytes ? 100.0 * (double)g->slices_bytes /
				 (double)g->physical_bytes : 0.0, extra,
	     top_bytes(g->used, used, sizeof(used)),
	     top_bytes(g->spilled, sp, sizeof(sp)),
	     pct(&g->r1, g->r1.share_pct, u1, sizeof(u1)),
	     pct(&g->r10, g->r10.share_pct, u10, sizeof(u10)));
}

/* The tenant's last change (vgpu-ctl), under its line: how many, when
 * (UTC, as vgpu-ctl show says it), who, what. Nothing before the first. */
static void print_last_change(struct out *o, const struct top_tenant *t)
{
	char when[40], user[4 * 64 + 3], pids[48], what[48];
	const char *names[TOP_CTL_FIELDS];
	time_t sec = (time_t)(t->ctl_ns / 1000000000u);
	struct tm tm;
	int n;

	if (!t->ctl_changes)
		return;
	if (gmtime_r(&sec, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	else
		snprintf(when, sizeof(when), "?");
	user[0] = '\0';
	if (t->ctl_user[0]) {
		user[0] = ' ';
		user[1] = '(';
		top_escape(t->ctl_user, TOP_ESC_TEXT, user + 2,
			   sizeof(user) - 3);
		strcat(user, ")");
	}
	if (t->ctl_host_pid)
		snprintf(pids, sizeof(pids), "pid %" PRId32 " (host pid %"
			 PRId32 ")", t->ctl_pid, t->ctl_host_pid);
	else
		snprintf(pids, sizeof(pids), "pid %" PRId32, t->ctl_pid);
	what[0] = '\0';
	n = top_ctl_fields(t->ctl_fields, t->suspended, names);
	for (int i = 0; i < n; i++) {
		strcat(what, " ");
		strcat(what, names[i]);
	}
	emit(o, NULL, "    changes %" PRIu64 "; the last at %s by uid %" PRIu32
	     "%s %s:%s", t->ctl_changes, when, t->ctl_uid, user, pids,
	     n ? what : " nothing");
}

/* TARGET: the compute share and its policy; "-" with no share, and the
 * policy alone for an opportunistic tenant with none. */
static void target_text(const struct top_tenant *t, char *buf, size_t len)
{
	if ((t->share_pct == 0 || t->share_pct >= 100) &&
	    t->policy == VGPU_LEDGER_POLICY_OPPORTUNISTIC)
		snprintf(buf, len, "%s", top_policy_name(t->policy));
	else if (t->share_pct == 0 || t->share_pct >= 100)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%" PRIu32 "%% %s", t->share_pct,
			 top_policy_name(t->policy));
}

/* A tenant holding more than its limit: its line in red. */
#define TOP_ATTR_OVER	"\033[1;31m"

static void print_tenant(struct out *o, const struct top_tenant *t)
{
	char used[32], lim[32], um[72], over[32], sp[32], sl[32], sm[72],
	     tgt[24], a1[16], a10[16], lr[24], w[16], name[17];
	uint64_t by = top_over_limit(t);

	snprintf(um, sizeof(um), "%s / %s", top_bytes(t->used, used, 32),
		 top_limit(t->mem_limit, lim, 32));
	snprintf(sm, sizeof(sm), "%s / %s",
		 top_bytes(t->usage[VGPU_USAGE_SPILLED], sp, 32),
		 top_limit(t->spill_limit, sl, 32));
	if (by)
		top_bytes(by, over, sizeof(over));
	else
		snprintf(over, sizeof(over), "-");
	target_text(t, tgt, sizeof(tgt));
	emit(o, by ? TOP_ATTR_OVER : NULL,
	     "  %-16.16s %-25s %-10s %-17s %-18s %7s %7s %8s %7s %3d/%d",
	     top_escape(t->name, TOP_ESC_TEXT, name, sizeof(name)), um, over,
	     tgt, sm, pct(&t->r1, t->r1.share_pct, a1, 16),
	     pct(&t->r10, t->r10.share_pct, a10, 16), rate(&t->r1, lr, 24),
	     pct(&t->r1, t->r1.wait_pct, w, 16), t->alive, t->procs);
	/* What was carried out, and what the device still holds: "memory
	 * on the host" read the same when no process could move any (a
	 * hostile review: 1.5 GiB still on the device). */
	if (t->suspended)
		emit(o, NULL, "    SUSPENDED by vgpu-ctl: %d of %d live "
		     "processes hold their launches; %s charged on the "
		     "device, %s on the host", t->procs_suspended, t->alive,
		     used, sp);
	print_last_change(o, t);
}

/* PID: the pid that names the process from here, "?" if none can;
 * NS PID: its own namespace's, where that is another. */
static void pid_columns(const struct top_proc *p, char *pid, char *ns,
			size_t len)
{
	int32_t shown;
	enum top_pidns where = top_pid_view(p, &shown);

	if (shown)
		snprintf(pid, len, "%" PRId32, shown);
	else
		snprintf(pid, len, "?");
	if (where == TOP_PIDNS_SAME)
		snprintf(ns, len, "-");
	else
		snprintf(ns, len, "%" PRId32, p->pid);
}

static void print_proc(struct out *o, const struct top_gpu *g,
		       const struct top_proc *p)
{
	char used[32], sp[32], a1[16], a10[16], lr[24], w[16], name[17],
	     pid[16], ns[16];

	pid_columns(p, pid, ns, sizeof(pid));
	emit(o, p->state == TOP_ALIVE ? NULL : "\033[2m",
	     "  %-8s %-8s %-16.16s %-8s %-11s %-10s %7s %7s %9s %7s %5" PRIu32
	     " %s",
	     pid, ns, top_escape(name_of(g, p->tenant), TOP_ESC_TEXT, name,
				 sizeof(name)), top_state_name(p->state),
	     top_bytes(p->used, used, 32),
	     top_bytes(p->usage[VGPU_USAGE_SPILLED], sp, 32),
	     pct(&p->r1, p->r1.share_pct, a1, 16),
	     pct(&p->r10, p->r10.share_pct, a10, 16), rate(&p->r1, lr, 24),
	     pct(&p->r1, p->r1.wait_pct, w, 16), p->slot,
	     top_front_end(p->flags));
}

static void print_gpu(struct out *o, const struct top_gpu *g)
{
	const struct top_tenant **ts = calloc((size_t)g->ntenants + 1,
					      sizeof(*ts));
	const struct top_proc **ps = calloc((size_t)g->nprocs + 1, sizeof(*ps));
	const char *filter = o->v->filter;
	int nt = 0, np = 0;

	print_gpu_line(o, g);
	if (!ts || !ps)
		goto out;
	for (int i = 0; i < g->ntenants; i++)
		if (tenant_matches(g, &g->tenants[i], filter))
			ts[nt++] = &g->tenants[i];
	for (int i = 0; i < g->nprocs; i++)
		if (proc_matches(g, &g->procs[i], filter))
			ps[np++] = &g->procs[i];
	sort_gpu = g;
	sort_key = o->v->sort;
	qsort(ts, (size_t)nt, sizeof(*ts), cmp_tenant);
	qsort(ps, (size_t)np, sizeof(*ps), cmp_proc);
	emit(o, "\033[7m", "  %-16s %-25s %-10s %-17s %-18s %7s %7s %8s %7s "
	     "%s", "TENANT", "USED / LIMIT", "OVER LIMIT", "TARGET",
	     "SPILLED / LIMIT", "GPU 1s", "GPU 10s", "LAUNCH/s", "WAIT",
	     "ALIVE");
	for (int i = 0; i < nt; i++)
		print_tenant(o, ts[i]);
	emit(o, "\033[7m", "  %-8s %-8s %-16s %-8s %-11s %-10s %7s %7s %9s %7s "
	     "%5s %s", "PID", "NS PID", "TENANT", "STATE", "USED", "SPILLED",
	     "GPU 1s", "GPU 10s", "LAUNCH/s", "WAIT", "SLOT", "API");
	for (int i = 0; i < np; i++)
		print_proc(o, g, ps[i]);
out:
	free(ts);
	free(ps);
}

static const char *sort_name(enum top_sort s)
{
	static const char *const names[] = { "memory", "compute", "pid",
					     "tenant" };

	return names[s];
}

void top_print_text(FILE *f, const struct top_snap *s,
		    const struct top_view *v)
{
	struct out o = { f, v, 0 };
	char when[32], filter[4 * 128], path[4 * 256];
	time_t now = (time_t)(s->realtime_ns / 1000000000u);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	emit(&o, "\033[1m", "vgpu-top %s  %s  %d GPU%s  sort: %s  filter: %s",
	     VGPU_VERSION_STRING, when, s->ngpus, s->ngpus == 1 ? "" : "s",
	     sort_name(v->sort), v->filter && *v->filter ?
	     top_escape(v->filter, TOP_ESC_TEXT, filter, sizeof(filter)) : "-");
	if (s->nskipped)
		emit(&o, "\033[1m", "%d file%s skipped, not usable ledgers "
		     "(vgpu-top --once lists them): %s", s->nskipped,
		     s->nskipped == 1 ? "" : "s",
		     top_escape(s->skipped[0].path, TOP_ESC_TEXT, path,
				sizeof(path)));
	for (int i = 0; i < s->ngpus; i++) {
		emit(&o, NULL, "%s", "");
		print_gpu(&o, &s->gpus[i]);
	}
}
