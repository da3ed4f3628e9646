/* ledger_internal.h - what the ledger's files share: the process-local
 * handles, the named atomic operations on the mapped records, and the
 * cross-file prototypes grouped by the file that defines them.
 *
 * Locks, in the order they are taken (never the other way round):
 *   1. l->mu, a process-local mutex: join, leave, close, reclaim-all;
 *   2. the join lock: an OFD lock on byte 0 of the file (cross-process);
 *   3. a slot's OFD lock on its byte (offset of the slot record): held by
 *      the owner for its life; taken only with F_OFD_SETLK (never waits);
 *   4. the shares lock: an OFD lock on the shares region's first byte
 *      (ledger_shares.c), bounded like the join lock;
 *   5. a tenant's lock word (ledger_lock.c): a few instructions at a time.
 */
#ifndef VGPU_LEDGER_INTERNAL_H
#define VGPU_LEDGER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "ledger.h"

/* The tenant lock word: 0 when free, else the owner slot's index + 1 in
 * the low bits, the owner slot's generation above them, and a bit saying
 * that someone may be sleeping on it. */
#define VGPU__OWNER_IDX_BITS	11
#define VGPU__OWNER_IDX_MASK	((1u << VGPU__OWNER_IDX_BITS) - 1)
#define VGPU__OWNER_GEN_MASK	((1u << 20) - 1)
#define VGPU__LOCK_WAITERS	(1u << 31)

_Static_assert(VGPU_LEDGER_MAX_SLOTS < VGPU__OWNER_IDX_MASK, "index fits");

#define VGPU__OWNED_WORDS	(VGPU_LEDGER_MAX_SLOTS / 64)

struct vgpu_ledger {
	int fd;				/* O_RDWR | O_CLOEXEC */
	void *map;
	struct vgpu_ledger_header *hdr;
	struct vgpu_ledger_tenant *tenants;
	struct vgpu_ledger_slot *slots;
	struct vgpu_ledger_shares *shares;	/* the shared memory records */
	struct vgpu_ledger_share *share;	/* [VGPU_LEDGER_MAX_SHARES] */
	pthread_mutex_t mu;		/* joined list, join lock users */
	pthread_mutex_t shares_mu;	/* this process's shares lock user */
	struct vgpu_slot *joined;	/* slots joined through this handle */
	/* Slots whose OFD lock this process holds (its own, or one it is
	 * reclaiming): alive as far as this process is concerned, and never
	 * tried by another of its threads. Atomic bit operations. */
	uint64_t owned[VGPU__OWNED_WORDS];
	char path[4096];
};

struct vgpu_slot {
	struct vgpu_ledger *l;
	struct vgpu_ledger_slot *rec;
	struct vgpu_ledger_tenant *ten;
	uint32_t index;
	uint32_t tenant_index;
	uint32_t owner;			/* this slot's tenant lock word value */
	uint32_t deferred_any;		/* releases waiting (atomic) */
	bool setter;			/* its join set the tenant's terms */
	uint64_t deferred[VGPU_USAGE_COUNT];	/* bytes per kind (atomic) */
	struct vgpu_slot *next;		/* l->joined */
};

/* ---- named atomics on shared fields ------------------------------------ */

static inline uint64_t vgpu__ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void vgpu__st(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline uint32_t vgpu__ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void vgpu__st32(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Adds to a counter only its writers (lock holders) change. */
static inline void vgpu__add(uint64_t *p, uint64_t v)
{
	vgpu__st(p, vgpu__ld(p) + v);
}

static inline uint32_t vgpu__owner_word(uint32_t index, uint32_t gen)
{
	return (index + 1) | ((gen & VGPU__OWNER_GEN_MASK) << VGPU__OWNER_IDX_BITS);
}

/* ---- ledger.c ----------------------------------------------------------- */

/* Formats into err (if errlen > 0) and returns code. */
int vgpu__ledger_err(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
uint64_t vgpu__now_ns(int clock);

/* ---- ledger_lock.c ------------------------------------------------------- */

/* The cross-process join lock, bounded by VGPU_LEDGER_LOCK_TIMEOUT_NS. */
int vgpu__join_lock(struct vgpu_ledger *l);
void vgpu__join_unlock(struct vgpu_ledger *l);
/* The same for the shares lock. */
int vgpu__shares_lock(struct vgpu_ledger *l);
void vgpu__shares_unlock(struct vgpu_ledger *l);

/* A slot's OFD lock: true if this process now holds it (and marks it owned).
 * Fails at once if held by another process or another thread of this one. */
bool vgpu__slot_trylock(struct vgpu_ledger *l, uint32_t index);
void vgpu__slot_unlock(struct vgpu_ledger *l, uint32_t index);
bool vgpu__slot_owned(const struct vgpu_ledger *l, uint32_t index);
/* Whether slot index's owner of generation gen is gone: another generation
 * now, or nobody holds its OFD lock (a system call; not for hot paths). */
bool vgpu__slot_dead(struct vgpu_ledger *l, uint32_t index, uint32_t gen);

/* Takes tenant t's lock word as `owner`. Takes it from a dead owner (a slot
 * whose OFD lock no process holds) and then recomputes the tenant's totals
 * from its slots. 0, or VGPU_LEDGER_ETIMEDOUT after about a second. */
int vgpu__tenant_lock_slow(struct vgpu_ledger *l, uint32_t t, uint32_t owner);
void vgpu__tenant_wake(struct vgpu_ledger_tenant *ten);

static inline int vgpu__tenant_lock(struct vgpu_ledger *l, uint32_t t,
				    uint32_t owner)
{
	uint32_t expected = 0;

	if (__builtin_expect(__atomic_compare_exchange_n(&l->tenants[t].lock,
			&expected, owner, false, __ATOMIC_ACQUIRE,
			__ATOMIC_RELAXED), 1))
		return 0;
	return vgpu__tenant_lock_slow(l, t, owner);
}

static inline void vgpu__tenant_unlock(struct vgpu_ledger_tenant *ten)
{
	if (__atomic_exchange_n(&ten->lock, 0, __ATOMIC_RELEASE) &
	    VGPU__LOCK_WAITERS)
		vgpu__tenant_wake(ten);
}

/* Sets tenant t's totals to the sum of its active slots (under its lock). */
void vgpu__tenant_recompute(struct vgpu_ledger *l, uint32_t t);

/* ---- ledger_join.c ------------------------------------------------------- */

/* Returns a slot whose OFD lock this process holds to its tenant and marks
 * it free. 0 or VGPU_LEDGER_ETIMEDOUT (then the slot is left as it was). */
int vgpu__slot_reclaim(struct vgpu_ledger *l, uint32_t index);

/* Reclaims tenant t's dead slots; returns how many. */
int vgpu__reclaim_tenant(struct vgpu_ledger *l, uint32_t t);

/* ---- ledger_shares.c ----------------------------------------------------- */

/* Slot `index` is leaving or reclaimed: its holds of shared memory end
 * (every entry with its index: its own and any an earlier owner left);
 * what it pays for moves to another holder or is given back. `owner` is a
 * live lock word to take tenant locks with (the slot's own, or the
 * reclaimer's for it). Before the slot gives its usage back; 0, or
 * VGPU_LEDGER_ETIMEDOUT when a charge it pays for could not be handed
 * over in time: then the slot must keep its usage (not be freed). */
int vgpu__shares_slot_gone(struct vgpu_ledger *l, uint32_t index,
			   uint32_t owner);

#endif
