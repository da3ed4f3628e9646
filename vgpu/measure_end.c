/* measure_end.c - what is left when a thread, a context or the process
 * ends (see measure.h): contexts torn down are counted, so that a
 * thread's state for one is known stale; a thread's synchronisation
 * reads what ended; a context retired reads its launches as they
 * complete for a bounded time, hands the rest to the process's watch
 * (measure_park.c) and gives its events back; one forgotten is settled
 * without a driver call; and fork leaves the child nothing of the
 * parent's launches.
 */
#include "inflight.h"
#include "measure_internal.h"

#include <pthread.h>
#include <string.h>

/* ---- contexts torn down ------------------------------------------------------ */

/* A thread's events and calibration stream are given back when it exits,
 * if its context has not been torn down since they were made: then the
 * driver has freed them with it, or its handle may name another context.
 * Teardowns are counted per context handle (in buckets: a collision only
 * forgets more). */
static unsigned ctx_epochs[VGPU_MEASURE_EPOCHS];

unsigned *vgpu__m_epoch_of(const struct vgpu_prim_ctx *ctx)
{
	uintptr_t v = (uintptr_t)ctx;

	return &ctx_epochs[(v >> 4 ^ v >> 12) % VGPU_MEASURE_EPOCHS];
}

void vgpu_measure_ctx_teardown(struct vgpu_prim_ctx *ctx)
{
	if (!ctx) {	/* which one is not known: every thread's */
		for (int i = 0; i < VGPU_MEASURE_EPOCHS; i++)
			__atomic_add_fetch(&ctx_epochs[i], 1, __ATOMIC_SEQ_CST);
	} else {
		__atomic_add_fetch(vgpu__m_epoch_of(ctx), 1, __ATOMIC_SEQ_CST);
	}
	/* Another thread reading a launch of ctx in its holder's place
	 * (inflight.h) is done with its events before the driver frees
	 * them; later ones see the count moved and leave them. */
	vgpu_inflight_quiesce();
}

const unsigned *vgpu__m_epoch_word(const struct vgpu_measure_ctx *c)
{
	return vgpu__m_epoch_of(c->ctx);
}

/* Whether c's context may have been torn down since c was made: then its
 * handles may be freed, or name another context's objects. */
bool vgpu__m_stale(const struct vgpu_measure_ctx *c)
{
	return c->epoch != __atomic_load_n(vgpu__m_epoch_of(c->ctx), __ATOMIC_ACQUIRE);
}

/* Gives c's events and stream back to the driver (c->ctx current); its
 * launches not yet complete stay charged as settle_unread charged them. */
static void release(struct vgpu_measure_ctx *c)
{
	/* settle_unread gave their tokens back: no other thread reads them
	 * from now on, and one reading them still is waited out. */
	vgpu_inflight_quiesce();
	for (unsigned i = 0; i < c->count + c->npark; i++) {
		struct vgpu_measure_pending *p = vgpu__m_unread(c, i);

		/* Still recorded: the driver frees them once complete. An
		 * orphan's are the watch's. */
		if (p->orphaned)
			continue;
		P.event_destroy(p->start);
		P.event_destroy(p->end);
	}
	vgpu__m_park_free(c);
	for (int i = 0; i < c->nfree; i++)
		P.event_destroy(c->free_ev[i]);
	for (int r = 0; r < 2; r++)
		if (c->ref_ev[r])
			P.event_destroy(c->ref_ev[r]);
	if (c->cal_stream)
		P.stream_destroy(c->cal_stream);
	memset(c, 0, sizeof(*c));
}

/* Drops c without a driver call: its measured launches are charged, the
 * ones not yet read are settled by settle_unread; its events and stream
 * are left to its context. */
void vgpu__m_forget(struct vgpu_measure_ctx *c)
{
	vgpu__m_settle_unread(c, P.now(), UINT64_MAX);
	vgpu__m_charge_done(c, 0, true);
	vgpu__m_park_free(c);
	memset(c, 0, sizeof(*c));
}

/* Ends c: with its context made current, its launches are read as they
 * complete until the host's clock passes deadline (never blocking in the
 * driver: one may wait for the thread that ends c), the rest settled by
 * settle_unread, each at most the time waited here, all charged, and its
 * events and stream destroyed; a stale c, or one whose context cannot be
 * made current, is forgotten. */
void vgpu__m_retire(struct vgpu_measure_ctx *c, uint64_t deadline)
{
	uint64_t now, t0;
	bool orphans = false;
	struct vgpu__m_orphan_refs refs = { { NULL, NULL } };

	if (vgpu__m_stale(c) || !P.ctx_push(c->ctx)) {
		vgpu__m_forget(c);
		return;
	}
	now = t0 = P.now();

	/* The ones given up on are waited for too: left at their estimate,
	 * they could run any length once released. */
	for (; c->count || c->npark; now = P.now()) {
		unsigned parked = c->npark;

		if (c->count && vgpu__m_settle_oldest(c))
			continue;
		c->park_next = 0;
		if (parked) {
			vgpu__m_poll_park(c, now);
			if (c->npark < parked)
				continue;
		}
		if (now > deadline)
			break;
		if (c->count && !vgpu__m_head_stuck(c)) {
			P.sleep(vgpu__m_until_oldest(c, now));
			continue;
		}
		/* All given up on: each polled in turn. */
		if (c->count)
			vgpu__m_oldest_last(c);
		P.sleep(VGPU_MEASURE_TOKEN_POLL_NS);
	}
	/* The rest to the process's watch, which charges each what it ran
	 * once it ends; those it cannot take (probes, a full list) at most
	 * the time waited here each: the time since they were issued
	 * included the throttle's own waits, and each eviction of a thread's
	 * fifth context paid for the one before (4.6 s, 20 s, 86 s, a
	 * hostile review). */
	for (unsigned i = 0; i < c->count + c->npark; i++) {
		struct vgpu_measure_pending *p = vgpu__m_unread(c, i);

		if (vgpu__m_orphan(c, p, &refs))
			orphans = true;
	}
	if (orphans)
		vgpu__m_watch_lanes();
	vgpu__m_settle_unread(c, now, now - t0);
	vgpu__m_charge_done(c, 0, true);
	release(c);
	P.ctx_pop();
}

/* ---- synchronisation, exits, fork ------------------------------------------ */

void vgpu_measure_synchronised(struct vgpu_measure_thread *t)
{
	for (int i = 0; i < CTXS; i++) {
		struct vgpu_measure_ctx *c = &t->ctx[i];

		if (!c->ctx || !(c->count || c->npark || c->done_count))
			continue;
		if (vgpu__m_stale(c)) {
			vgpu__m_forget(c);
			continue;
		}
		vgpu__m_collect(c);
	}
}

void vgpu_measure_thread_exit(struct vgpu_measure_thread *t)
{
	uint64_t deadline = P.now() + VGPU_MEASURE_EXIT_WAIT_NS;
	int cancel;

	/* Not cancelled in the exit's waits (a thread cancelled while it
	 * exits: a review's 500 parked launches went uncharged and their
	 * memory and events leaked). */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	for (int i = 0; i < CTXS; i++)
		if (t->ctx[i].ctx)
			vgpu__m_retire(&t->ctx[i], deadline);
	pthread_setcancelstate(cancel, NULL);
}

void vgpu_measure_process_exit(struct vgpu_measure_thread *t)
{
	for (int i = 0; i < CTXS; i++)
		if (t->ctx[i].ctx)
			vgpu__m_forget(&t->ctx[i]);
	vgpu__m_orphans_settle();
}

void vgpu_measure_fork_child(struct vgpu_measure_thread *t)
{
	for (int i = 0; i < CTXS; i++)
		vgpu__m_park_free(&t->ctx[i]);
	memset(t, 0, sizeof(*t));
	vgpu__m_orphans_fork_child();
	vgpu_inflight_fork_child();
	vgpu__m_watch_fork_child();
	/* A probe the parent had in flight is the tenant's, the parent's to
	 * read (vgpu_throttle_probe_begin). The estimates (proc_avg) are the
	 * parent's and stay: they are good. */
}
