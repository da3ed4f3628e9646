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
	line[w] = '\0';
	if (o->v->color && attr)
		fprintf(o->f, "%s%s\033[0m\033[K\n", attr, line);
	else if (o->v->color)
		fprintf(o->f, "%s\033[K\n", line);
	else
		fprintf(o->f, "%s\n", line);
	o->lines++;
}

const char *top_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	double v = (double)b;
	int u = 0;

	if (b == VGPU_LEDGER_UNLIMITED) {
		snprintf(buf, len, "unlimited");
		return buf;
	}
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
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
	return c ? c : (a->pid > b->pid) - (a->pid < b->pid);
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
	char pid[16];

	if (!filter || !*filter)
		return true;
	snprintf(pid, sizeof(pid), "%" PRId32, p->pid);
	return strstr(pid, filter) || strstr(name_of(g, p->tenant), filter);
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
	char phys[32], sl[32], used[32], sp[32], u1[16], u10[16], extra[48];

	extra[0] = '\0';
	if (g->unlimited_tenants)
		snprintf(extra, sizeof(extra), " + %d unlimited",
			 g->unlimited_tenants);
	emit(o, "\033[1m", "GPU %s  memory %s  slices %s (%.0f%%)%s  used %s  "
	     "spilled %s  util %s (10s %s)", g->uuid,
	     top_bytes(g->physical_bytes, phys, sizeof(phys)),
	     top_bytes(g->slices_bytes, sl, sizeof(sl)),
	     g->physical_bytes ? 100.0 * (double)g->slices_bytes /
				 (double)g->physical_bytes : 0.0, extra,
	     top_bytes(g->used, used, sizeof(used)),
	     top_bytes(g->spilled, sp, sizeof(sp)),
	     pct(&g->r1, g->r1.share_pct, u1, sizeof(u1)),
	     pct(&g->r10, g->r10.share_pct, u10, sizeof(u10)));
}

static void print_tenant(struct out *o, const struct top_tenant *t)
{
	char used[32], lim[32], um[72], sp[32], tgt[16], a1[16], a10[16],
	     lr[24], w[16];

	snprintf(um, sizeof(um), "%s / %s", top_bytes(t->used, used, 32),
		 top_bytes(t->mem_limit, lim, 32));
	if (t->share_pct == 0 || t->share_pct >= 100)
		snprintf(tgt, sizeof(tgt), "-");
	else
		snprintf(tgt, sizeof(tgt), "%" PRIu32 "%%", t->share_pct);
	emit(o, NULL, "  %-16.16s %-25s %-10s %6s %7s %7s %9s %7s %3d/%d",
	     t->name, um, top_bytes(t->usage[VGPU_USAGE_SPILLED], sp, 32), tgt,
	     pct(&t->r1, t->r1.share_pct, a1, 16),
	     pct(&t->r10, t->r10.share_pct, a10, 16), rate(&t->r1, lr, 24),
	     pct(&t->r1, t->r1.wait_pct, w, 16), t->alive, t->procs);
}

static void print_proc(struct out *o, const struct top_gpu *g,
		       const struct top_proc *p)
{
	char used[32], sp[32], a1[16], a10[16], lr[24], w[16];

	emit(o, p->state == TOP_ALIVE ? NULL : "\033[2m",
	     "  %-8" PRId32 " %-16.16s %-8s %-11s %-10s %7s %7s %9s %7s %5"
	     PRIu32, p->pid, name_of(g, p->tenant), top_state_name(p->state),
	     top_bytes(p->used, used, 32),
	     top_bytes(p->usage[VGPU_USAGE_SPILLED], sp, 32),
	     pct(&p->r1, p->r1.share_pct, a1, 16),
	     pct(&p->r10, p->r10.share_pct, a10, 16), rate(&p->r1, lr, 24),
	     pct(&p->r1, p->r1.wait_pct, w, 16), p->slot);
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
	emit(o, "\033[7m", "  %-16s %-25s %-10s %6s %7s %7s %9s %7s %s",
	     "TENANT", "USED / LIMIT", "SPILLED", "TARGET", "GPU 1s",
	     "GPU 10s", "LAUNCH/s", "WAIT", "ALIVE");
	for (int i = 0; i < nt; i++)
		print_tenant(o, ts[i]);
	emit(o, "\033[7m", "  %-8s %-16s %-8s %-11s %-10s %7s %7s %9s %7s %5s",
	     "PID", "TENANT", "STATE", "USED", "SPILLED", "GPU 1s", "GPU 10s",
	     "LAUNCH/s", "WAIT", "SLOT");
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
	char when[32];
	time_t now = (time_t)(s->realtime_ns / 1000000000u);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	emit(&o, "\033[1m", "vgpu-top %s  %s  %d GPU%s  sort: %s  filter: %s",
	     VGPU_VERSION_STRING, when, s->ngpus, s->ngpus == 1 ? "" : "s",
	     sort_name(v->sort), v->filter && *v->filter ? v->filter : "-");
	if (s->nskipped)
		emit(&o, "\033[1m", "%d file%s skipped, not usable ledgers "
		     "(vgpu-top --once lists them): %s", s->nskipped,
		     s->nskipped == 1 ? "" : "s", s->skipped[0].path);
	for (int i = 0; i < s->ngpus; i++) {
		emit(&o, NULL, "%s", "");
		print_gpu(&o, &s->gpus[i]);
	}
}
