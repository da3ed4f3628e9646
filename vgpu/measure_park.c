/* measure_park.c - launches that outlast their place: those a thread
 * gave up on (measure.c, wait_oldest()), parked out of its ring and read
 * when they end; and those still unread when their thread exits or its
 * context state is evicted, handed to the process's watch thread
 * (measure_watch.c), which reads and charges them when they end
 * (docs/compute.md, "A launch that waits for the thread's later work").
 */
#include "measure_internal.h"
#include "inflight.h"
#include "throttle.h"
#include "timeline.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- the park ------------------------------------------------------------- */

bool vgpu__m_park(struct vgpu_measure_ctx *c)
{
	struct vgpu_measure_pending *p = AT(c, 0);

	if (c->npark == c->park_cap) {
		unsigned cap = c->park_cap ? 2 * c->park_cap : RING;
		struct vgpu_measure_pending *n;

		if (cap > VGPU_MEASURE_PARK_MAX)
			return false;
		n = realloc(c->park, cap * sizeof(*n));
		if (!n)
			return false;
		c->park = n;
		c->park_cap = cap;
	}
	c->park[c->npark++] = *p;
	if (p->probe_at)
		c->park_probes++;
	c->head = (c->head + 1) % RING;
	c->count--;
	return true;
}

void vgpu__m_poll_park(struct vgpu_measure_ctx *c, uint64_t now)
{
	unsigned todo = c->npark < VGPU_MEASURE_PARK_BATCH
			? c->npark : VGPU_MEASURE_PARK_BATCH;

	if (now < c->park_next)
		return;
	c->park_next = now + VGPU_MEASURE_PARK_POLL_NS;
	for (; todo && c->npark; todo--) {
		unsigned i = c->park_rr < c->npark ? c->park_rr : 0;
		struct vgpu_measure_pending *p = &c->park[i];
		int q = P.event_query(p->end);

		if (q == VGPU_PRIM_NOT_READY) {
			c->park_rr = i + 1;
			continue;
		}
		if (p->probe_at)
			c->park_probes--;
		vgpu__m_read_launch(c, p, q, P.now());
		c->park[i] = c->park[--c->npark];
		c->park_rr = i;
	}
}

void vgpu__m_park_free(struct vgpu_measure_ctx *c)
{
	free(c->park);
	c->park = NULL;
	c->npark = c->park_cap = c->park_probes = 0;
}

/* ---- the orphans ------------------------------------------------------------ */

/* The reference event an exiting thread placed its launches against
 * (measure_read.c, place()), kept for its orphans until the last of them
 * is read. */
struct orphan_ref {
	struct vgpu_prim_event *ev;
	uint64_t ns;			/* host time it completed at */
	unsigned users;			/* orphans placed against it */
};

/* A launch whose thread (or context state) is gone: what reading it
 * needs. */
struct orphan {
	struct vgpu_prim_event *start, *end;
	struct orphan_ref *ref;		/* NULL: none */
	uint64_t estimate;		/* what its tenant was charged so far */
	uint64_t issued;
	const unsigned *epoch_word;	/* its context's teardown count */
	unsigned epoch;
	struct vgpu_slot *slot;
	struct vgpu_ledger *ledger;	/* its GPU's timeline */
	unsigned sm_num, sm_den;
	bool recorded, timeline;	/* its end goes into the timeline */
};

/* The process's orphans: the watch thread reads them (one pass at a
 * time, under orphans_mu, which also guards the array and the refs). */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static struct orphan *orphans;
static unsigned norphans, orphans_cap, orphans_rr;
static unsigned orphans_any;	/* norphans, for a look without the lock */

/* o's hold on its reference given up (under orphans_mu); the last one
 * destroys the event, unless its context is gone (and the event with
 * it). */
static void ref_drop(struct orphan *o, bool live)
{
	struct orphan_ref *r = o->ref;

	o->ref = NULL;
	if (!r || --r->users)
		return;
	if (live)
		P.event_destroy(r->ev);
	free(r);
}

bool vgpu__m_orphan(struct vgpu_measure_ctx *c, struct vgpu_measure_pending *p,
		    struct vgpu__m_orphan_refs *refs)
{
	struct orphan_ref *ref = NULL;
	struct orphan *o;

	if (p->probe_at || !p->gpu->slot || vgpu__m_stale(c))
		return false;
	pthread_mutex_lock(&orphans_mu);
	if (norphans == orphans_cap) {
		unsigned cap = orphans_cap ? 2 * orphans_cap : 64;
		struct orphan *n = cap <= VGPU_MEASURE_ORPHANS_MAX
				   ? realloc(orphans, cap * sizeof(*n)) : NULL;

		if (!n) {
			pthread_mutex_unlock(&orphans_mu);
			return false;
		}
		orphans = n;
		orphans_cap = cap;
	}
	/* Its reference moves to the orphans (c is dropped after this):
	 * one holder per reference of c, made at its first orphan. */
	if (p->ref >= 0) {
		ref = refs->ref[p->ref];
		if (!ref && c->ref_ev[p->ref] &&
		    (ref = malloc(sizeof(*ref))) != NULL) {
			*ref = (struct orphan_ref){ c->ref_ev[p->ref],
						    c->ref_ns[p->ref], 0 };
			refs->ref[p->ref] = ref;
			c->ref_ev[p->ref] = NULL;
		}
		if (ref)
			ref->users++;
	}
	/* Its token back first: a thread waiting for one reads it no more
	 * in its holder's place (what one charged meanwhile counts). */
	vgpu__m_token_fold(p);
	o = &orphans[norphans++];
	*o = (struct orphan){
		.start = p->start, .end = p->end, .ref = ref,
		.estimate = p->estimate, .issued = p->issued,
		.epoch_word = vgpu__m_epoch_word(c), .epoch = c->epoch,
		.slot = p->gpu->slot, .ledger = p->gpu->ledger,
		.sm_num = c->sm_num, .sm_den = c->sm_den,
		.recorded = p->recorded,
		.timeline = p->gpu->ledger && !c->sm_den &&
			    !vgpu_throttle_opportunistic(p->gpu->slot),
	};
	__atomic_store_n(&orphans_any, norphans, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&orphans_mu);
	p->orphaned = true;
	return true;
}

/* Charges o what it ran (measured ns), in place of what it was charged. */
static void orphan_charge(const struct orphan *o, uint64_t ns, uint64_t now)
{
	if (ns > o->estimate)
		vgpu_throttle_refill(o->slot, now);
	vgpu_throttle_settle(o->slot, ns, o->estimate);
}

/* An ended orphan of a pass, placed on the host's clock. */
struct ended {
	unsigned i;
	uint64_t start, len;
};

static int by_end(const void *a, const void *b)
{
	const struct ended *x = a, *y = b;
	uint64_t ex = x->start + x->len, ey = y->start + y->len;

	return (ex > ey) - (ex < ey);
}

/* Where o lies on the host's clock, as its thread would have placed it
 * (measure_read.c, place()): its length from its events, its start from
 * its reference; with none, ending when it was seen. */
static void place(const struct orphan *o, uint64_t seen, struct ended *e)
{
	uint64_t ns, end;

	e->len = o->estimate;
	if (o->recorded && P.event_elapsed(o->start, o->end, &ns))
		e->len = ns;
	if (o->ref && o->recorded && P.event_elapsed(o->ref->ev, o->start, &ns))
		e->start = o->ref->ns + ns;
	else
		e->start = seen > e->len ? seen - e->len : 0;
	/* Not before it was issued (an idle stream's start event). */
	if (o->issued > e->start) {
		end = e->start + e->len;
		e->start = o->issued < end ? o->issued : end;
		e->len = end - e->start;
	}
}

bool vgpu__m_orphans_poll(void)
{
	struct ended ended[VGPU_MEASURE_ORPHANS_BATCH];
	uint64_t now, first = UINT64_MAX, ns;
	unsigned gone = 0, n = 0, todo;

	if (!__atomic_load_n(&orphans_any, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&orphans_mu);
	now = P.now();
	/* Those of a context torn down since: its events are gone, and what
	 * ran of them is not known; each is charged its share of the time
	 * since the oldest of them was issued (as a live thread's launches
	 * are when it finds its context torn down), its estimate at least. */
	for (unsigned i = 0; i < norphans; i++)
		if (__atomic_load_n(orphans[i].epoch_word, __ATOMIC_ACQUIRE) !=
		    orphans[i].epoch) {
			gone++;
			if (orphans[i].issued < first)
				first = orphans[i].issued;
		}
	for (unsigned i = 0; gone && i < norphans;) {
		struct orphan *o = &orphans[i];

		if (__atomic_load_n(o->epoch_word, __ATOMIC_ACQUIRE) ==
		    o->epoch) {
			i++;
			continue;
		}
		ns = now > first ? (now - first) / gone : 0;
		orphan_charge(o, ns > o->estimate ? ns : o->estimate, now);
		ref_drop(o, false);
		*o = orphans[--norphans];
	}
	/* Those that ended, ORPHANS_BATCH at most, in turn: placed, then
	 * charged in the order they ended, each the part of its interval
	 * after the ends recorded before it (as a live launch is: queued on
	 * six streams behind one wait, each was charged the time it waited
	 * behind the others, six times what ran, a hostile review). Their
	 * events are not freed meanwhile: a teardown moves the epoch first,
	 * then waits for the readers (inflight.h). */
	vgpu_inflight_read_begin();
	todo = norphans < VGPU_MEASURE_ORPHANS_BATCH
	       ? norphans : VGPU_MEASURE_ORPHANS_BATCH;
	for (unsigned k = 0; k < todo; k++) {
		unsigned i = (orphans_rr + k) % norphans;
		const struct orphan *o = &orphans[i];

		if (__atomic_load_n(o->epoch_word, __ATOMIC_SEQ_CST) !=
			    o->epoch ||
		    P.event_query(o->end) == VGPU_PRIM_NOT_READY)
			continue;
		ended[n].i = i;
		place(o, now, &ended[n]);
		n++;
	}
	orphans_rr = norphans ? (orphans_rr + todo) % norphans : 0;
	qsort(ended, n, sizeof(*ended), by_end);
	for (unsigned k = 0; k < n; k++) {
		struct orphan *o = &orphans[ended[k].i];
		uint64_t s = ended[k].start, e = s + ended[k].len;

		if (o->sm_den)
			ns = ended[k].len * o->sm_num / o->sm_den;
		else if (o->timeline)
			ns = vgpu_timeline_record_own(o->ledger, s, e);
		else if (o->ledger)
			ns = vgpu_timeline_exclusive(o->ledger, s, e);
		else
			ns = ended[k].len;
		orphan_charge(o, ns, now);
		P.event_destroy(o->start);
		P.event_destroy(o->end);
		ref_drop(o, true);
		o->start = NULL;	/* read: taken out below */
	}
	vgpu_inflight_read_end();
	for (unsigned i = 0; i < norphans;)
		if (!orphans[i].start)
			orphans[i] = orphans[--norphans];
		else
			i++;
	__atomic_store_n(&orphans_any, norphans, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&orphans_mu);
	return norphans != 0;
}

void vgpu__m_orphans_settle(void)
{
	pthread_mutex_lock(&orphans_mu);
	/* At the process's exit: the driver discards what has not run. */
	for (unsigned i = 0; i < norphans; i++)
		vgpu_throttle_settle(orphans[i].slot, orphans[i].estimate,
				     orphans[i].estimate);
	norphans = 0;
	__atomic_store_n(&orphans_any, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&orphans_mu);
}

void vgpu__m_orphans_fork_child(void)
{
	/* The parent's, read by its watch thread (its refs leak here). */
	pthread_mutex_init(&orphans_mu, NULL);
	free(orphans);
	orphans = NULL;
	norphans = orphans_cap = orphans_rr = 0;
	orphans_any = 0;
}
