/* vgpu-top-hist.c - recent snapshots, and the rates between them.
 *
 * A rate over a window W is the difference of a counter between the newest
 * snapshot and the newest earlier one at least W old (or the oldest kept,
 * if none is that old yet), over the time between them. Records are
 * matched by identity: a GPU by UUID, a tenant by record index and name, a
 * process by slot index, pid and join time; a counter that went down (a
 * record reused) gives no rate.
 */
#include "vgpu-top.h"

#include <stdlib.h>
#include <string.h>

#define WINDOW_SLACK	0.95	/* a sample 0.95 W old counts as W old */

int top_hist_init(struct top_hist *h, int cap)
{
	memset(h, 0, sizeof(*h));
	h->ring = calloc((size_t)cap, sizeof(*h->ring));
	if (!h->ring)
		return -1;
	h->cap = cap;
	return 0;
}

void top_hist_free(struct top_hist *h)
{
	for (int i = 0; i < h->cap; i++)
		top_snap_free(&h->ring[i]);
	free(h->ring);
	memset(h, 0, sizeof(*h));
}

/* The i-th newest snapshot kept (0: the newest). */
static const struct top_snap *nth(const struct top_hist *h, int i)
{
	return &h->ring[((h->head - 1 - i) % h->cap + h->cap) % h->cap];
}

/* The snapshot to measure a window of w seconds ending at now from. */
static const struct top_snap *base_for(const struct top_hist *h, double now,
				       double w)
{
	for (int i = 0; i < h->count; i++) {
		const struct top_snap *s = nth(h, i);

		if (now - s->t >= w * WINDOW_SLACK)
			return s;
	}
	return h->count ? nth(h, h->count - 1) : NULL;
}

static const struct top_gpu *find_gpu(const struct top_snap *s,
				      const char *uuid)
{
	for (int i = 0; s && i < s->ngpus; i++)
		if (strcmp(s->gpus[i].uuid, uuid) == 0)
			return &s->gpus[i];
	return NULL;
}

static const struct top_tenant *find_tenant(const struct top_gpu *g,
					    const struct top_tenant *t)
{
	for (int i = 0; g && i < g->ntenants; i++)
		if (g->tenants[i].index == t->index &&
		    strcmp(g->tenants[i].name, t->name) == 0)
			return &g->tenants[i];
	return NULL;
}

static const struct top_proc *find_proc(const struct top_gpu *g,
					const struct top_proc *p)
{
	for (int i = 0; g && i < g->nprocs; i++)
		if (g->procs[i].slot == p->slot && g->procs[i].pid == p->pid &&
		    g->procs[i].start_ns == p->start_ns)
			return &g->procs[i];
	return NULL;
}

/* Rates from the counters (gpu ns, launches, wait ns) now and before. */
static void rates(struct top_rates *r, double dt, uint64_t gpu0,
		  uint64_t gpu1, uint64_t l0, uint64_t l1, uint64_t w0,
		  uint64_t w1)
{
	memset(r, 0, sizeof(*r));
	if (dt <= 0 || gpu1 < gpu0 || l1 < l0 || w1 < w0)
		return;
	r->valid = true;
	r->window_s = dt;
	r->share_pct = 100.0 * (double)(gpu1 - gpu0) / 1e9 / dt;
	r->launches_per_s = (double)(l1 - l0) / dt;
	r->wait_pct = 100.0 * (double)(w1 - w0) / 1e9 / dt;
}

static void proc_rates(struct top_proc *p, const struct top_gpu *old,
		       double dt, struct top_rates *r)
{
	const struct top_proc *o = find_proc(old, p);

	if (o)
		rates(r, dt, o->gpu_time_ns, p->gpu_time_ns, o->launches,
		      p->launches, o->wait_ns, p->wait_ns);
	else
		memset(r, 0, sizeof(*r));
}

/* A tenant's launches per second: the sum over its processes'. */
static double tenant_launch_rate(const struct top_gpu *g, uint32_t index,
				 bool ten)
{
	double sum = 0;

	for (int i = 0; i < g->nprocs; i++) {
		const struct top_rates *r = ten ? &g->procs[i].r10 :
					    &g->procs[i].r1;

		if (g->procs[i].tenant == index && r->valid)
			sum += r->launches_per_s;
	}
	return sum;
}

static void tenant_rates(struct top_gpu *g, struct top_tenant *t,
			 const struct top_gpu *old, double dt, bool ten)
{
	const struct top_tenant *o = find_tenant(old, t);
	struct top_rates *r = ten ? &t->r10 : &t->r1;

	memset(r, 0, sizeof(*r));
	if (!o)
		return;
	rates(r, dt, o->gpu_time_ns, t->gpu_time_ns, 0, 0, o->wait_ns,
	      t->wait_ns);
	r->launches_per_s = tenant_launch_rate(g, t->index, ten);
}

/* GPU utilisation: the tenants' GPU time over the window (tenants that
 * came or went meanwhile count from when they were seen). */
static void gpu_rates(struct top_gpu *g, const struct top_gpu *old,
		      double dt, bool ten)
{
	struct top_rates *r = ten ? &g->r10 : &g->r1;
	uint64_t used = 0, waited = 0;

	memset(r, 0, sizeof(*r));
	if (!old || dt <= 0)
		return;
	for (int i = 0; i < g->ntenants; i++) {
		const struct top_tenant *o = find_tenant(old, &g->tenants[i]);

		if (o && g->tenants[i].gpu_time_ns >= o->gpu_time_ns)
			used += g->tenants[i].gpu_time_ns - o->gpu_time_ns;
		if (o && g->tenants[i].wait_ns >= o->wait_ns)
			waited += g->tenants[i].wait_ns - o->wait_ns;
	}
	rates(r, dt, 0, used, 0, 0, 0, waited);
	for (int i = 0; i < g->ntenants; i++)
		r->launches_per_s += ten ? g->tenants[i].r10.launches_per_s :
				     g->tenants[i].r1.launches_per_s;
}

static void window_rates(struct top_snap *s, const struct top_snap *base,
			 bool ten)
{
	for (int i = 0; i < s->ngpus; i++) {
		struct top_gpu *g = &s->gpus[i];
		const struct top_gpu *old = find_gpu(base, g->uuid);
		double dt = base ? s->t - base->t : 0;

		for (int j = 0; j < g->nprocs; j++)
			proc_rates(&g->procs[j], old, dt,
				   ten ? &g->procs[j].r10 : &g->procs[j].r1);
		for (int j = 0; j < g->ntenants; j++)
			tenant_rates(g, &g->tenants[j], old, dt, ten);
		gpu_rates(g, old, dt, ten);
	}
}

/* A slot still locked whose generation moved with the same owner, or
 * that was seen exited: a reclaimer holds it (reclaim bumps the
 * generation first; a new claim also changes the pid and join time). */
static void mark_reaping(struct top_snap *s, const struct top_snap *prev)
{
	for (int i = 0; prev && i < s->ngpus; i++) {
		const struct top_gpu *old = find_gpu(prev, s->gpus[i].uuid);

		for (int j = 0; old && j < s->gpus[i].nprocs; j++) {
			struct top_proc *p = &s->gpus[i].procs[j];
			const struct top_proc *o = find_proc(old, p);

			if (p->state == TOP_ALIVE && o &&
			    (o->state != TOP_ALIVE ||
			     o->generation != p->generation))
				p->state = TOP_REAPING;
		}
	}
}

const struct top_snap *top_hist_push(struct top_hist *h, struct top_snap *s)
{
	const struct top_snap *prev = h->count ? nth(h, 0) : NULL;
	struct top_snap *slot;

	mark_reaping(s, prev);
	window_rates(s, h->count ? base_for(h, s->t, 1.0) : NULL, false);
	window_rates(s, h->count ? base_for(h, s->t, 10.0) : NULL, true);
	slot = &h->ring[h->head];
	top_snap_free(slot);
	*slot = *s;
	memset(s, 0, sizeof(*s));
	h->head = (h->head + 1) % h->cap;
	if (h->count < h->cap)
		h->count++;
	return slot;
}
