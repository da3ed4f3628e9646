/* ledger_ops.c - reserve and release: the allocation path. A tenant lock
 * held for a check and a few stores, no system call unless contended, no
 * allocation, nothing that depends on the number of processes (except the
 * reclaim of the tenant's dead slots after a refusal).
 *
 * Invariant, under the tenant lock: tenant.usage[k] == sum of its active
 * slots' usage[k], and tenant.used == the sum of its device kinds. A holder
 * that dies breaks it; the next locker repairs it (ledger_lock.c).
 */
#include "ledger_internal.h"

#include <time.h>

static bool over(uint64_t used, uint64_t limit, uint64_t bytes)
{
	return used > limit || bytes > limit - used;
}

/* Under the lock: the process's own count of what its slot holds, what a
 * move charges when the file's own count was lost (ledger_move.c). Kept by
 * arithmetic, not copied from the record, which reads zero once the guard
 * has replaced a truncated mapping. */
static inline void mine_add(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	__atomic_store_n(&s->mine[kind], s->mine[kind] + bytes,
			 __ATOMIC_RELAXED);
}

static inline void mine_sub(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	uint64_t have = s->mine[kind];

	__atomic_store_n(&s->mine[kind], have - (bytes < have ? bytes : have),
			 __ATOMIC_RELAXED);
}

/* Under the lock: the check and the charge. */
static int charge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	struct vgpu_ledger_tenant *ten = s->ten;
	struct vgpu_ledger_slot *r = s->rec;
	uint64_t used;

	if (VGPU_USAGE_IS_DEVICE(kind)) {
		used = vgpu__ld(&ten->used);
		if (over(used, vgpu__ld(&ten->mem_limit), bytes))
			return VGPU_LEDGER_EOVERLIMIT;
		vgpu__st(&ten->used, used + bytes);
	} else if (over(vgpu__ld(&ten->usage[kind]),
			vgpu__ld(&ten->spill_limit), bytes)) {
		return VGPU_LEDGER_EOVERLIMIT;
	}
	vgpu__add(&ten->usage[kind], bytes);
	vgpu__add(&r->usage[kind], bytes);
	vgpu__add(&r->allocs, 1);
	mine_add(s, kind, bytes);
	return 0;
}

/* Under the lock: gives back at most what the slot holds of `kind`. */
static void uncharge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	struct vgpu_ledger_tenant *ten = s->ten;
	struct vgpu_ledger_slot *r = s->rec;
	uint64_t have = vgpu__ld(&r->usage[kind]);

	mine_sub(s, kind, bytes);	/* ours, whatever the file says */
	if (bytes > have)
		bytes = have;
	vgpu__st(&r->usage[kind], have - bytes);
	have = vgpu__ld(&ten->usage[kind]);
	vgpu__st(&ten->usage[kind], have - (bytes < have ? bytes : have));
	if (VGPU_USAGE_IS_DEVICE(kind)) {
		have = vgpu__ld(&ten->used);
		vgpu__st(&ten->used, have - (bytes < have ? bytes : have));
	}
}

/* Under the lock: releases that timed out earlier. */
static void apply_deferred(struct vgpu_slot *s)
{
	int k;

	__atomic_store_n(&s->deferred_any, 0, __ATOMIC_RELAXED);
	for (k = 0; k < VGPU_USAGE_COUNT; k++) {
		uint64_t b = __atomic_exchange_n(&s->deferred[k], 0,
						 __ATOMIC_ACQ_REL);
		if (b)
			uncharge(s, k, b);
	}
}

/* The mapping was replaced by the guard (the file was truncated): move
 * first (ledger_move.c), holding nothing. Another thread moving is waited
 * for, up to the lock's bound; a move that fails is an error. */
static int broken(struct vgpu_slot *s, int *waits)
{
	struct timespec ms = { 0, 1000000 };

	switch (vgpu__ledger_check(s->l)) {
	case VGPU__CHECK_BUSY:
		if (++*waits > 1000)
			return VGPU_LEDGER_ETIMEDOUT;
		nanosleep(&ms, NULL);
		return 0;
	case VGPU__CHECK_FAILED:
		return VGPU_LEDGER_EBADFILE;
	}
	return 0;
}

static inline bool mapping_broken(struct vgpu_ledger *l)
{
	return __builtin_expect(__atomic_load_n(&vgpu__guard_faults,
						__ATOMIC_RELAXED), 0) &&
	       vgpu__guard_broken(l->guard);
}

static inline void unlock(struct vgpu_slot *s)
{
	s->l->held[s->tenant_index] = 0;
	vgpu__tenant_unlock(s->ten);
	vgpu__gate_leave(s->l);
}

/* Past taking the word: the process left meanwhile, or releases that
 * timed out wait (both rare). */
static int lock_taken(struct vgpu_slot *s)
{
	if (s->given_back) {
		/* The process left (exit) while this thread charged or gave
		 * back: its record is free, and the tenant's totals no
		 * longer count it. */
		unlock(s);
		return VGPU_LEDGER_ENOENT;
	}
	apply_deferred(s);
	return 0;
}

/* lock() when its first try did not do: a move under way, a mapping the
 * guard replaced, the word held. */
static __attribute__((noinline)) int lock_slow(struct vgpu_slot *s)
{
	struct vgpu_ledger *l = s->l;
	int waits = 0, rc;
	uint32_t t;

	for (;;) {
		if (vgpu__gate_enter(l))
			return VGPU_LEDGER_ETIMEDOUT;
		if (__builtin_expect(mapping_broken(l), 0)) {
			vgpu__gate_leave(l);
			rc = broken(s, &waits);
			if (rc)
				return rc;
			continue;
		}
		t = s->tenant_index;
		if (vgpu__tenant_lock(l, t, s->owner)) {
			vgpu__gate_leave(l);
			return VGPU_LEDGER_ETIMEDOUT;
		}
		if (__builtin_expect(!mapping_broken(l), 1))
			break;
		/* Truncated while taking it: ours to let go (the guard put
		 * back what this process held; nothing else writes there). */
		vgpu__tenant_unlock(&l->tenants[t]);
		vgpu__gate_leave(l);
	}
	l->held[t] = s->owner;	/* for the guard (ledger_guard.c) */
	if (s->given_back ||
	    __atomic_load_n(&s->deferred_any, __ATOMIC_ACQUIRE))
		return lock_taken(s);
	return 0;
}

/* The slot's tenant lock, inside the move's gate (ledger_internal.h): no
 * move grafts another file under the slot until unlock() has let the
 * word go, so the word let go is the word taken, and no other thread's.
 * Inlined where it is taken: the first try, with nothing in the way, is a
 * few loads, a store and a compare-and-swap; everything else is
 * lock_slow(). */
static inline __attribute__((always_inline)) int lock(struct vgpu_slot *s)
{
	struct vgpu_ledger *l = s->l;
	struct vgpu__gate_seat *me = vgpu__gate_me;
	uint32_t t = s->tenant_index, expected = 0;

	if (__builtin_expect(!me || mapping_broken(l), 0))
		return lock_slow(s);
	__atomic_store_n(&me->inside, me->inside + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect((__atomic_load_n(&l->gate, __ATOMIC_ACQUIRE) &
			      VGPU__GATE_MOVER) ||
			     !__atomic_compare_exchange_n(&l->tenants[t].lock,
				&expected, s->owner, false, __ATOMIC_ACQUIRE,
				__ATOMIC_RELAXED), 0)) {
		__atomic_store_n(&me->inside, me->inside - 1,
				 __ATOMIC_RELEASE);
		return lock_slow(s);
	}
	if (__builtin_expect(mapping_broken(l), 0)) {
		vgpu__tenant_unlock(&l->tenants[t]);
		vgpu__gate_leave(l);
		return lock_slow(s);
	}
	l->held[t] = s->owner;	/* for the guard (ledger_guard.c) */
	if (__builtin_expect(s->given_back ||
			     __atomic_load_n(&s->deferred_any,
					     __ATOMIC_ACQUIRE), 0))
		return lock_taken(s);
	return 0;
}

static int locked_charge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	int rc = lock(s);

	if (rc)
		return rc == VGPU_LEDGER_EBADFILE ? VGPU_LEDGER_EOVERLIMIT : rc;
	rc = charge(s, kind, bytes);
	unlock(s);
	return rc;
}

void vgpu_ledger_poll(struct vgpu_ledger *l)
{
	if (l)
		vgpu__ledger_watch(l);
}

int vgpu_ledger_reserve(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	int rc, n, cancel;

	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return VGPU_LEDGER_EINVAL;
	if (bytes == 0)
		return 0;
	vgpu__ledger_watch(s->l);
	if (__builtin_expect(vgpu__shares_imported(s), 0))
		vgpu__shares_payers_check(s);
	rc = locked_charge(s, kind, bytes);
	if (__builtin_expect(rc != VGPU_LEDGER_EOVERLIMIT, 1))
		return rc;
	/* Under l->mu: a move never grafts under a reclaim. Not cancelled
	 * meanwhile: the reclaim may sleep on the shares lock. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&s->l->mu);
	n = vgpu__reclaim_tenant(s->l, s->tenant_index);
	pthread_mutex_unlock(&s->l->mu);
	pthread_setcancelstate(cancel, NULL);
	if (n > 0)
		rc = locked_charge(s, kind, bytes);
	if (rc == VGPU_LEDGER_EOVERLIMIT)
		__atomic_fetch_add(&s->rec->failures, 1, __ATOMIC_RELAXED);
	return rc;
}

void vgpu_ledger_release(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	if ((unsigned)kind >= VGPU_USAGE_COUNT || bytes == 0)
		return;
	/* No look at the file's name (vgpu__ledger_watch): a release on a
	 * file replaced since is carried by the process's own count when it
	 * moves, at its next reservation or by its follower thread
	 * (ledger_follow.c); a truncated one is mended in lock(). */
	if (lock(s) != 0) {
		__atomic_fetch_add(&s->deferred[kind], bytes, __ATOMIC_ACQ_REL);
		__atomic_store_n(&s->deferred_any, 1, __ATOMIC_RELEASE);
		return;
	}
	uncharge(s, kind, bytes);
	vgpu__add(&s->rec->frees, 1);
	unlock(s);
}

int vgpu__ledger_lock(struct vgpu_slot *s)
{
	return lock(s);
}

void vgpu__ledger_unlock(struct vgpu_slot *s)
{
	unlock(s);
}

/* ---- views ---------------------------------------------------------------- */

uint64_t vgpu_ledger_tenant_used(const struct vgpu_slot *s)
{
	return vgpu__ld(&s->ten->used);
}

uint64_t vgpu_ledger_tenant_limit(const struct vgpu_slot *s)
{
	return vgpu__ld(&s->ten->mem_limit);
}

uint64_t vgpu_ledger_tenant_usage(const struct vgpu_slot *s, int kind)
{
	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return 0;
	return vgpu__ld(&s->ten->usage[kind]);
}

uint64_t vgpu_ledger_slot_usage(const struct vgpu_slot *s, int kind)
{
	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return 0;
	return vgpu__ld(&s->rec->usage[kind]);
}

const struct vgpu_ledger_slot *vgpu_ledger_slot_record(const struct vgpu_slot *s)
{
	return s->rec;
}

const struct vgpu_ledger_tenant *vgpu_ledger_tenant_record(const struct vgpu_slot *s)
{
	return s->ten;
}

/* Charges without the limit check: memory the driver has already handed
 * out (a pool that grew past its admitted requests by its rounding). */
int vgpu_ledger_charge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	int rc;

	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return VGPU_LEDGER_EINVAL;

	if (bytes == 0)
		return 0;
	if ((rc = lock(s)) != 0)
		return rc == VGPU_LEDGER_ENOENT ? rc : VGPU_LEDGER_ETIMEDOUT;
	if (VGPU_USAGE_IS_DEVICE(kind))
		vgpu__add(&s->ten->used, bytes);
	vgpu__add(&s->ten->usage[kind], bytes);
	vgpu__add(&s->rec->usage[kind], bytes);
	mine_add(s, kind, bytes);
	unlock(s);
	return 0;
}
