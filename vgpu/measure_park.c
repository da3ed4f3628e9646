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

void vgpu__m_poll_park(struct vgpu_measure_ctx *c)
{
	uint64_t now = P.now();
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

/* A launch whose thread (or context state) is gone: what reading it
 * needs, without the thread's reference event (its length is the
 * events' elapsed time; it is charged that, not placed in the GPU's
 * timeline, so never less than it ran). */
struct orphan {
	struct vgpu_prim_event *start, *end;
	uint64_t estimate;		/* what its tenant was charged so far */
	uint64_t issued;
	const unsigned *epoch_word;	/* its context's teardown count */
	unsigned epoch;
	struct vgpu_slot *slot;
	unsigned sm_num, sm_den;
	bool recorded;
};

/* The process's orphans: the watch thread reads them (one pass at a
 * time, under orphans_mu, which also guards the array). */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static struct orphan *orphans;
static unsigned norphans, orphans_cap;
static unsigned orphans_any;	/* norphans, for a look without the lock */

bool vgpu__m_orphan(const struct vgpu_measure_ctx *c,
		    struct vgpu_measure_pending *p)
{
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
	/* Its token back first: a thread waiting for one reads it no more
	 * in its holder's place (what one charged meanwhile counts). */
	vgpu__m_token_fold(p);
	o = &orphans[norphans++];
	*o = (struct orphan){
		.start = p->start, .end = p->end, .estimate = p->estimate,
		.issued = p->issued, .epoch_word = vgpu__m_epoch_word(c),
		.epoch = c->epoch, .slot = p->gpu->slot, .sm_num = c->sm_num,
		.sm_den = c->sm_den, .recorded = p->recorded,
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

bool vgpu__m_orphans_poll(void)
{
	uint64_t now, first = UINT64_MAX, ns;
	unsigned gone = 0;

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
	for (unsigned i = 0; i < norphans;) {
		struct orphan *o = &orphans[i];
		bool done = false;

		/* Its events are not freed meanwhile: a teardown moves the
		 * epoch first, then waits for the readers (inflight.h). */
		vgpu_inflight_read_begin();
		if (__atomic_load_n(o->epoch_word, __ATOMIC_SEQ_CST) !=
		    o->epoch) {
			ns = now > first ? (now - first) / gone : 0;
			orphan_charge(o, ns > o->estimate ? ns : o->estimate,
				      now);
			done = true;
		} else if (P.event_query(o->end) != VGPU_PRIM_NOT_READY) {
			if (!o->recorded || !P.event_elapsed(o->start, o->end,
							     &ns))
				ns = o->estimate;
			if (o->sm_den)
				ns = ns * o->sm_num / o->sm_den;
			orphan_charge(o, ns, now);
			P.event_destroy(o->start);
			P.event_destroy(o->end);
			done = true;
		}
		vgpu_inflight_read_end();
		if (done)
			*o = orphans[--norphans];
		else
			i++;
	}
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
	/* The parent's, read by its watch thread. */
	pthread_mutex_init(&orphans_mu, NULL);
	free(orphans);
	orphans = NULL;
	norphans = orphans_cap = 0;
	orphans_any = 0;
}
