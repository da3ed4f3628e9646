/* ledger_internal.h - what the ledger's files share: the process-local
 * handles, the named atomic operations on the mapped records, and the
 * cross-file prototypes grouped by the file that defines them.
 *
 * Locks, in the order they are taken (never the other way round):
 *   1. l->mu, a process-local mutex: join, leave, close, reclaim-all;
 *   2. a slot's OFD lock on its byte (offset of the slot record): held by
 *      the owner for its life; taken only with F_OFD_SETLK (never waits);
 *   3. the shares lock: an OFD lock on the shares region's first byte
 *      (ledger_shares.c), bounded, taken only for shared memory;
 *   4. a tenant's lock word (ledger_lock.c): a few instructions at a time,
 *      or a join's decision on its tenant's terms. Outside l->mu and the
 *      shares mutex, a slot's word is taken only inside the handle's move
 *      gate (vgpu__gate_enter, entered just before the word and left just
 *      after it): a move holds l->mu and the shares mutex and then waits
 *      for the gate to empty, so nothing inside it may wait for either.
 * There is no file-wide lock: a tenant record is found or made lock-free,
 * through its key word (ledger_join.c), so that no process stopped inside
 * a join holds up another tenant's (docs/ledger-abi.md, "Joining").
 */
#ifndef VGPU_LEDGER_INTERNAL_H
#define VGPU_LEDGER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
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

#define VGPU__GATE_MOVER	(1u << 31)

struct vgpu_ledger {
	int fd;				/* O_RDWR | O_CLOEXEC */
	void *map;
	struct vgpu_ledger_header *hdr;
	struct vgpu_ledger_tenant *tenants;
	struct vgpu_ledger_slot *slots;
	struct vgpu_ledger_shares *shares;	/* the shared memory records */
	struct vgpu_ledger_share *share;	/* [VGPU_LEDGER_MAX_SHARES] */
	pthread_mutex_t mu;		/* joined list; joins, one at a time */
	pthread_mutex_t shares_mu;	/* this process's shares lock user */
	uint32_t shares_stuck;		/* its wait ran out: tried only, until
					 * had again (atomic) */
	struct vgpu_slot *joined;	/* slots joined through this handle */
	/* Slots whose OFD lock this process holds (its own, or one it is
	 * reclaiming): alive as far as this process is concerned, and never
	 * tried by another of its threads. Atomic bit operations. */
	uint64_t owned[VGPU__OWNED_WORDS];
	/* Following the name (ledger_move.c, ledger_guard.c). */
	int guard;			/* the mapping's SIGBUS guard, or -1 */
	/* The tenant locks the reserve and release path holds, by tenant:
	 * the owner word, 0 when not held (plain stores, under the lock). */
	uint32_t held[VGPU_LEDGER_MAX_TENANTS];
	/* The move's gate (atomic): the threads between taking a slot's
	 * tenant lock word and letting it go (lock() and unlock() in
	 * ledger_ops.c), and VGPU__GATE_MOVER while a move waits for them to
	 * leave or grafts. The tenant lock word names a process, not a
	 * thread, so it cannot tell this process's threads from each other
	 * across a change of the mapping; the gate can. */
	uint32_t gate;
	uint32_t checking;		/* a thread checks the name (atomic) */
	uint64_t next_check_ns;		/* coarse clock (atomic) */
	uint64_t moves;			/* moves done (atomic) */
	uint64_t move_failures;		/* under checking */
	uint64_t retry_ns;		/* a failed move, again (checking) */
	dev_t dev;			/* the file mapped, to compare the */
	ino_t ino;			/* name's with */
	uint64_t physical_bytes;	/* as opened, to make a new file */
	char uuid[VGPU_LEDGER_UUID_MAX];
	char group[80];			/* VGPU_LEDGER_GROUP as opened */
	char path[4096];
};

#define VGPU__IMPORTS_KEPT	16

/* Shared memory a process holds by import, kept by the process. */
struct vgpu__import {
	uint64_t key[2];
	uint64_t bytes;
	uint32_t kind;
	uint32_t count;		/* holds */
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
	bool given_back;		/* left (at exit): its record is free
					 * (under the tenant lock) */
	uint64_t deferred[VGPU_USAGE_COUNT];	/* bytes per kind (atomic) */
	/* To join again elsewhere (ledger_move.c): the record's usage as
	 * this process last left it (under the tenant lock), and the join. */
	uint64_t mine[VGPU_USAGE_COUNT];
	/* The share records this process holds by import (share_hold), to
	 * look at their payers at each reservation (ledger_shares.c); more
	 * than fit: every record is looked at. Written under the shares
	 * lock, read without it (a hint). */
	int32_t imported[VGPU__IMPORTS_KEPT];
	struct vgpu__import imported_what[VGPU__IMPORTS_KEPT];	/* each's */
	uint32_t nimported;		/* atomic; kept full once more */
	bool imported_more;		/* atomic; for good */
	uint64_t payers_seen_ns;	/* coarse clock of the last look
					 * (atomic: a hint) */
	/* Imports carried over a move to another file (ledger_move.c),
	 * whose records stayed in the old one: charged to this slot in the
	 * new file, given back at their last drop (the shares mutex). */
	struct vgpu__import carried[VGPU__IMPORTS_KEPT];
	uint32_t ncarried;
	struct vgpu_ledger_terms terms;
	int32_t pid, host_pid;
	char name[VGPU_LEDGER_NAME_MAX];
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

/* A bounded wait's deadline: VGPU_LEDGER_LOCK_TIMEOUT_NS from now. */
static inline uint64_t vgpu__deadline(void)
{
	return vgpu__now_ns(CLOCK_MONOTONIC) + VGPU_LEDGER_LOCK_TIMEOUT_NS;
}

/* ---- ledger_dir.c -------------------------------------------------------- */

/* Trusted: this process's euid, root and, with VGPU_LEDGER_GROUP, the
 * group's members (docs/ledger-abi.md, "Permissions"). */
struct vgpu__trust {
	uid_t euid;
	bool shared;		/* a group was named */
	gid_t gid;
	char group[80];		/* "gpu (gid 1200)", for messages */
	bool control;		/* an administrator's tool: see ledger.h */
};

/* The trust of an open (VGPU_LEDGER_GROUP's group looked up): 0 or a
 * code, with a message in err. */
int vgpu__trust_of(const struct vgpu_ledger_access *in, struct vgpu__trust *a,
		   char *err, size_t errlen);
/* Owned by a trusted user (this one, root, or the named group). */
bool vgpu__trusted_owner(const struct stat *st, const struct vgpu__trust *a);
/* "alice (uid 1000)", or "uid 1000" when the name is not known. */
void vgpu__user_text(uid_t uid, char *buf, size_t len);
/* "owned by alice (uid 1000), group staff (gid 50), mode 0777" */
void vgpu__owner_text(const struct stat *st, char *buf, size_t len);
/* The owner's refusal of `what` ("ledger", "directory") at path, with how
 * to fix it: VGPU_LEDGER_EPERM, the message in err. */
int vgpu__not_ours(const char *what, const char *path, const struct stat *st,
		   const struct vgpu__trust *a, const char *fix, char *err,
		   size_t errlen);
/* The ledger directory's descriptor (made or checked, no link followed
 * on the way), or a code with a message in err. */
int vgpu__ledger_dir(const char *dir, const struct vgpu__trust *a, char *err,
		     size_t errlen);

/* ---- ledger_lock.c ------------------------------------------------------- */

/* The shares lock: 0, VGPU_LEDGER_ETIMEDOUT once the deadline has passed
 * (deadline 0: tried once, never waits) or _ESYS. vgpu__shares_lock waits
 * up to VGPU_LEDGER_LOCK_TIMEOUT_NS. */
int vgpu__shares_lock_until(struct vgpu_ledger *l, uint64_t deadline);
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
/* The same for an owner word (a tenant lock's, a tenant key's maker). */
bool vgpu__owner_dead(struct vgpu_ledger *l, uint32_t word);
/* The pids of the slot an owner word names: 0, or VGPU_LEDGER_EINVAL when
 * it names none or its slot has moved on (a snapshot, for messages). */
int vgpu__word_holder(const struct vgpu_ledger *l, uint32_t word,
		      int32_t *pid, int32_t *host_pid);

/* Takes tenant t's lock word as `owner`. Takes it from a dead owner (a slot
 * whose OFD lock no process holds) and then recomputes the tenant's totals
 * from its slots. 0, or VGPU_LEDGER_ETIMEDOUT after about a second. */
int vgpu__tenant_lock_slow(struct vgpu_ledger *l, uint32_t t, uint32_t owner);
/* The same up to a deadline (0: tried once, a dead owner's taken at once),
 * giving up with VGPU__LOCK_CHANGED as soon as *watch (if not NULL) no
 * longer reads `expect` (a tenant record's key: the record was reused). */
#define VGPU__LOCK_CHANGED	2
_Static_assert(VGPU__LOCK_CHANGED != VGPU_LEDGER_LIMIT_KEPT, "distinct");
int vgpu__tenant_lock_until(struct vgpu_ledger *l, uint32_t t, uint32_t owner,
			    uint64_t deadline, const uint64_t *watch,
			    uint64_t expect);
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

/* The move's gate (struct vgpu_ledger's gate). Entering waits while a move
 * is under way (a slow path, at most the move's bound); 0, or
 * VGPU_LEDGER_ETIMEDOUT when a move held it for over 3 s. Every thread
 * that takes a tenant lock word of a slot outside l->mu and the shares
 * mutex enters first and leaves after letting the word go: a move then
 * never grafts another file under a held lock.
 *
 * Where the kernel has membarrier(2), a thread is counted in a seat of its
 * own (vgpu__gate_seats, one cache line each; any handle): entering is a
 * plain store, a compiler barrier and a load of l->gate, leaving a release
 * store; the mover sets VGPU__GATE_MOVER, has every running thread of the
 * process execute a full barrier (MEMBARRIER_CMD_PRIVATE_EXPEDITED) and
 * then reads the seats. That orders each thread's store before its load of
 * l->gate against the mover's store and loads, with no atomic
 * read-modify-write on the allocation path (two cost ~28 ns an allocation
 * and free). Without membarrier, or with no seat free, threads count in
 * l->gate itself with atomic adds, as the mover's own store does. Which one
 * is decided once per process, before any thread enters (and again in a
 * fork's child, which has one thread). */
#define VGPU__GATE_SEATS	256
struct vgpu__gate_seat {
	uint32_t inside;	/* written by its thread only; read by movers */
	uint32_t taken;		/* a thread has it (atomic) */
	char pad[56];
};
extern struct vgpu__gate_seat vgpu__gate_seats[VGPU__GATE_SEATS];
extern __thread struct vgpu__gate_seat *vgpu__gate_me;
/* Decides (once) whether threads sit, registering for membarrier: call
 * it before the library starts a thread (ledger_follow.c). */
void vgpu__gate_prepare(void);
struct vgpu__gate_seat *vgpu__gate_sit(void);	/* NULL: count in l->gate */
int vgpu__gate_wait(struct vgpu_ledger *l);

static inline int vgpu__gate_enter(struct vgpu_ledger *l)
{
	struct vgpu__gate_seat *me = vgpu__gate_me;

	if (__builtin_expect(!me, 0))
		me = vgpu__gate_sit();
	if (__builtin_expect(me != NULL, 1)) {
		__atomic_store_n(&me->inside, me->inside + 1,
				 __ATOMIC_RELAXED);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (__builtin_expect(!(__atomic_load_n(&l->gate,
				__ATOMIC_ACQUIRE) & VGPU__GATE_MOVER), 1))
			return 0;
		__atomic_store_n(&me->inside, me->inside - 1,
				 __ATOMIC_RELEASE);
		return vgpu__gate_wait(l);
	}
	if (__builtin_expect(!(__atomic_add_fetch(&l->gate, 1,
			__ATOMIC_ACQ_REL) & VGPU__GATE_MOVER), 1))
		return 0;
	__atomic_sub_fetch(&l->gate, 1, __ATOMIC_RELEASE);
	return vgpu__gate_wait(l);
}

static inline void vgpu__gate_leave(struct vgpu_ledger *l)
{
	struct vgpu__gate_seat *me = vgpu__gate_me;

	if (__builtin_expect(me != NULL, 1))
		__atomic_store_n(&me->inside, me->inside - 1,
				 __ATOMIC_RELEASE);
	else
		__atomic_sub_fetch(&l->gate, 1, __ATOMIC_RELEASE);
}

/* Sets tenant t's totals to the sum of its active slots (under its lock). */
void vgpu__tenant_recompute(struct vgpu_ledger *l, uint32_t t);

/* ---- ledger_join.c ------------------------------------------------------- */

/* Returns a slot whose OFD lock this process holds to its tenant and marks
 * it free, waiting for locks up to `deadline` (0: only trying them). 0 or
 * VGPU_LEDGER_ETIMEDOUT (then the slot stays active, with its usage). A
 * slot that holds nothing takes no tenant lock. */
int vgpu__slot_reclaim(struct vgpu_ledger *l, uint32_t index,
		       uint64_t deadline);

/* Reclaims tenant t's dead slots, waiting a second at most in all;
 * returns how many. */
int vgpu__reclaim_tenant(struct vgpu_ledger *l, uint32_t t);

/* A slot claimed (its OFD lock held: alive, never reclaimed) and given a
 * new generation and the pids, but never published in a tenant: what a
 * process that is no tenant's (vgpu-ctl) takes tenant locks as. Its index
 * with *owner its lock word, or VGPU_LEDGER_EFULL. Under l->mu; given
 * back with vgpu__slot_unlock (it stays free). */
int vgpu__slot_borrow(struct vgpu_ledger *l, int32_t pid, int32_t host_pid,
		      uint32_t *owner);
/* The index of tenant `name`'s ready record, with its key in *key, or -1
 * (none, or only one being made). */
int vgpu__tenant_find(struct vgpu_ledger *l, const char *name, uint64_t *key);
bool vgpu__tenant_named(const struct vgpu_ledger *l, uint32_t t,
			const char *name);
/* 1..63 bytes, no control characters. */
bool vgpu__tenant_name_ok(const char *name);

/* ---- ledger_shares.c ----------------------------------------------------- */

/* Slot `index` is leaving or reclaimed: its holds of shared memory end
 * (every entry with its index: its own and any an earlier owner left);
 * what it pays for moves to another holder or is given back. `owner` is a
 * live lock word to take tenant locks with (the slot's own, or the
 * reclaimer's for it). Before the slot gives its usage back; 0, or
 * VGPU_LEDGER_ETIMEDOUT when a charge it pays for could not be handed
 * over by `deadline` (0: locks only tried): then the slot must keep its
 * usage (not be freed). A slot that no record names takes no lock. */
/* The payers of the shares s holds by import: a payer whose process is
 * gone is reclaimed (its charge moves to a live holder, perhaps s), at
 * once rather than when its own tenant next looks (ledger_shares.c).
 * Takes l->mu when it reclaims; no lock held by the caller. */
void vgpu__shares_payers_check(struct vgpu_slot *s);
static inline bool vgpu__shares_imported(const struct vgpu_slot *s)
{
	return __atomic_load_n(&s->nimported, __ATOMIC_RELAXED) != 0;
}
/* A move (under l->shares_mu, l's old file still mapped): the imports
 * slot s holds in l's file without paying, read from its records: their
 * bytes added to have[] by kind (to be charged to s in the new file), and
 * up to VGPU__IMPORTS_KEPT of them into out. Returns how many are in out.
 * Once the move is done, vgpu__shares_carried(s, out, n) keeps them, to
 * be given back at their drop; the rest stay charged until s leaves. */
unsigned vgpu__shares_imports_of(struct vgpu_ledger *l, struct vgpu_slot *s,
				 uint64_t *have, struct vgpu__import *out);
/* The same from what the process kept of its imports (up to
 * VGPU__IMPORTS_KEPT), for a move whose old file cannot be read (it was
 * truncated). */
unsigned vgpu__shares_imports_kept(struct vgpu_slot *s, uint64_t *have,
				   struct vgpu__import *out);
void vgpu__shares_carried(struct vgpu_slot *s, const struct vgpu__import *in,
			  unsigned n);
int vgpu__shares_slot_gone(struct vgpu_ledger *l, uint32_t index,
			   uint32_t owner, uint64_t deadline);

/* ---- ledger_guard.c ------------------------------------------------------ */

/* Guards a ledger's mapping at `base` against SIGBUS (installing the
 * handler once); `held` is the handle's array of the tenant lock words its
 * threads hold, put back into the memory that replaces a truncated file.
 * The guard's index, or -1 when all are taken (then unguarded). */
int vgpu__guard_add(void *base, const uint32_t *held);
void vgpu__guard_remove(int g);
/* Faults the guard took and no move has mended yet, in any mapping. */
extern uint32_t vgpu__guard_faults;
/* Whether a fault replaced the mapping with anonymous memory. */
bool vgpu__guard_broken(int g);
void vgpu__guard_mended(int g);

/* ---- ledger_move.c -------------------------------------------------------- */

#define VGPU__CHECK_EVERY_NS	100000000u	/* the name, at most this often */

static inline uint64_t vgpu__coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Stats the name (one thread at a time, at most every 100 ms unless the
 * guard took a fault) and moves if it changed: VGPU__CHECK_OK (nothing to
 * do, or moved), _BUSY (another thread checks) or _FAILED (a move failed,
 * now or in the last 100 ms). */
enum { VGPU__CHECK_OK, VGPU__CHECK_BUSY, VGPU__CHECK_FAILED };
int vgpu__ledger_check(struct vgpu_ledger *l);
int vgpu__ledger_move(struct vgpu_ledger *l, char *err, size_t errlen);

/* The slow path's test, for reserve and release: no system call. */
static inline void vgpu__ledger_watch(struct vgpu_ledger *l)
{
	if (__builtin_expect(vgpu__coarse_ns() >=
			     __atomic_load_n(&l->next_check_ns,
					     __ATOMIC_RELAXED) ||
			     __atomic_load_n(&vgpu__guard_faults,
					     __ATOMIC_RELAXED), 0))
		vgpu__ledger_check(l);
}

/* ---- ledger.c (for the move) ------------------------------------------------ */

/* Opens the file l's name points at now, as vgpu_ledger_open would, and
 * replaces it with a new one when it is damaged (truncated, not a ledger). */
int vgpu__ledger_reopen(struct vgpu_ledger *l, struct vgpu_ledger **out,
			char *err, size_t errlen);
/* Unmaps, closes and frees a handle with no slots joined. */
void vgpu__ledger_free(struct vgpu_ledger *l);

#endif
