/* ledger_join.c - tenants and slots: joining (claim a slot, find or make
 * the tenant's record, set or keep its terms), leaving, and reclaiming the
 * slots of dead processes. All of this may make system calls and allocate;
 * none of it is on the allocation path except the reclaim of one tenant
 * after a refusal.
 *
 * No file-wide lock: a process stopped anywhere in here (a debugger, ^Z, a
 * cgroup freezer) must not hold up another tenant's join. A slot is claimed
 * with its OFD lock (tried, never waited for). A tenant record is found by
 * its key word and made by a compare-and-swap on it; the only waits are for
 * the joiner's own tenant (its record being made by another process, its
 * lock), up to one deadline a second after the join began. Every lock of
 * another tenant is only tried. docs/ledger-abi.md, "Joining", has the
 * protocol and the argument.
 */
#include "ledger_internal.h"
#include "thread.h"
#include "log.h"
#include "options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A tenant record's key: 0 free; else the name's hash in the low half and,
 * in the high half, 0 once the record is ready or, while it is being made,
 * the maker's owner word (its slot and generation: alive or not, as a lock
 * word's owner is). */
#define KEY_HASH(k)	((uint32_t)(k))
#define KEY_MAKER(k)	((uint32_t)((k) >> 32))
#define KEY_BUSY(w, h)	((uint64_t)(w) << 32 | (h))

static uint64_t key_load(const struct vgpu_ledger *l, uint32_t t)
{
	return __atomic_load_n(&l->tenants[t].key, __ATOMIC_SEQ_CST);
}

static bool key_cas(struct vgpu_ledger *l, uint32_t t, uint64_t from,
		    uint64_t to)
{
	return __atomic_compare_exchange_n(&l->tenants[t].key, &from, to,
			false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static uint64_t mono_ns(void)
{
	return vgpu__now_ns(CLOCK_MONOTONIC);
}

/* ---- reclaiming ------------------------------------------------------------ */

/* Subtracts `bytes` of `kind` from the tenant's totals, never below zero. */
static void tenant_sub(struct vgpu_ledger_tenant *ten, int kind, uint64_t bytes)
{
	uint64_t have = vgpu__ld(&ten->usage[kind]);

	vgpu__st(&ten->usage[kind], have - (bytes < have ? bytes : have));
	if (VGPU_USAGE_IS_DEVICE(kind)) {
		have = vgpu__ld(&ten->used);
		vgpu__st(&ten->used, have - (bytes < have ? bytes : have));
	}
}

/* Moves all of a slot's usage back to its tenant (under the tenant lock). */
static void slot_give_back(struct vgpu_ledger_tenant *ten,
			   struct vgpu_ledger_slot *r)
{
	int k;

	for (k = 0; k < VGPU_USAGE_COUNT; k++) {
		uint64_t u = vgpu__ld(&r->usage[k]);

		if (u) {
			tenant_sub(ten, k, u);
			vgpu__st(&r->usage[k], 0);
		}
	}
}

static bool slot_holds_nothing(const struct vgpu_ledger_slot *r)
{
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		if (vgpu__ld(&r->usage[k]))
			return false;
	return true;
}

/* The caller holds the slot's OFD lock. The generation moves first, so the
 * dead owner's lock word, if it still holds the tenant lock, reads as dead
 * and ours as alive, and no shared memory is moved to the slot any more. A
 * slot that then holds nothing is freed without its tenant's lock (its
 * tenant's totals hold nothing of it). */
int vgpu__slot_reclaim(struct vgpu_ledger *l, uint32_t index,
		       uint64_t deadline)
{
	struct vgpu_ledger_slot *r = &l->slots[index];
	uint32_t t, gen, owner;

	if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != VGPU_SLOT_ACTIVE)
		return 0;
	t = __atomic_load_n(&r->tenant, __ATOMIC_RELAXED);
	if (t < VGPU_LEDGER_MAX_TENANTS) {
		gen = __atomic_load_n(&r->generation, __ATOMIC_RELAXED) + 1;
		__atomic_store_n(&r->generation, gen, __ATOMIC_SEQ_CST);
		owner = vgpu__owner_word(index, gen);
		/* Its shared memory first: what it paid for that others
		 * still hold moves to them; if that cannot be done now, the
		 * slot stays (a later reclaim tries again). */
		if (vgpu__shares_slot_gone(l, index, owner, deadline))
			return VGPU_LEDGER_ETIMEDOUT;
		if (!slot_holds_nothing(r)) {
			if (vgpu__tenant_lock_until(l, t, owner, deadline,
						    NULL, 0))
				return VGPU_LEDGER_ETIMEDOUT;
			slot_give_back(&l->tenants[t], r);
			vgpu__tenant_unlock(&l->tenants[t]);
		}
	}
	__atomic_store_n(&r->state, VGPU_SLOT_FREE, __ATOMIC_RELEASE);
	return 0;
}

/* Reclaims the dead slots of tenant t, or of every tenant if t is -1,
 * waiting for locks up to `deadline` in all (0: only trying them). */
static int reclaim_dead(struct vgpu_ledger *l, int64_t t, uint64_t deadline)
{
	struct vgpu_ledger_slot *r;
	uint32_t i;
	int n = 0;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		r = &l->slots[i];
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    (t >= 0 && __atomic_load_n(&r->tenant, __ATOMIC_RELAXED)
				!= (uint32_t)t) ||
		    vgpu__slot_owned(l, i) || !vgpu__slot_trylock(l, i))
			continue;
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) ==
			    VGPU_SLOT_ACTIVE &&
		    vgpu__slot_reclaim(l, i, deadline) == 0)
			n++;
		vgpu__slot_unlock(l, i);
	}
	return n;
}

int vgpu__reclaim_tenant(struct vgpu_ledger *l, uint32_t t)
{
	return reclaim_dead(l, t, vgpu__deadline());
}

int vgpu_ledger_reclaim(struct vgpu_ledger *l)
{
	return reclaim_dead(l, -1, vgpu__deadline());
}

/* ---- what tenants have ------------------------------------------------------ */

/* The tenants with an active slot (dead or alive), as bits. */
struct tenant_set {
	uint64_t bits[VGPU_LEDGER_MAX_TENANTS / 64];
};

static void set_add(struct tenant_set *ts, uint32_t t)
{
	if (t < VGPU_LEDGER_MAX_TENANTS)
		ts->bits[t / 64] |= UINT64_C(1) << (t % 64);
}

static bool set_has(const struct tenant_set *ts, uint32_t t)
{
	return ts->bits[t / 64] & (UINT64_C(1) << (t % 64));
}

static void tenants_with_slots(struct vgpu_ledger *l, struct tenant_set *ts)
{
	memset(ts, 0, sizeof(*ts));
	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (__atomic_load_n(&l->slots[i].state, __ATOMIC_SEQ_CST) ==
		    VGPU_SLOT_ACTIVE)
			set_add(ts, __atomic_load_n(&l->slots[i].tenant,
						    __ATOMIC_RELAXED));
}

static bool tenant_has_slots(struct vgpu_ledger *l, uint32_t t)
{
	uint32_t i;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (__atomic_load_n(&l->slots[i].state, __ATOMIC_SEQ_CST) ==
			    VGPU_SLOT_ACTIVE &&
		    __atomic_load_n(&l->slots[i].tenant, __ATOMIC_RELAXED) == t)
			return true;
	return false;
}

static bool tenant_holds_nothing(struct vgpu_ledger *l, uint32_t t)
{
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		if (vgpu__ld(&l->tenants[t].usage[k]))
			return false;
	return true;
}

static bool tenant_idle(struct vgpu_ledger *l, uint32_t t)
{
	return tenant_holds_nothing(l, t) && !tenant_has_slots(l, t);
}

/* Whether a slot of tenant t is held by a live process (this one's
 * included): a test of each slot's OFD lock, reclaiming nothing. */
static bool tenant_live(struct vgpu_ledger *l, uint32_t t)
{
	struct vgpu_ledger_slot *r;
	uint32_t i;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		r = &l->slots[i];
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    __atomic_load_n(&r->tenant, __ATOMIC_RELAXED) != t)
			continue;
		if (vgpu__slot_owned(l, i) || !vgpu__slot_trylock(l, i))
			return true;
		vgpu__slot_unlock(l, i);
	}
	return false;
}

/* ---- terms -------------------------------------------------------------------- */

/* A size for a message: "none", "<n> GiB", "<n> MiB" or bytes. */
static const char *size_text(uint64_t b, char *buf, size_t len)
{
	if (b == VGPU_LEDGER_UNLIMITED)
		snprintf(buf, len, "none");
	else if (b && b % (UINT64_C(1) << 30) == 0)
		snprintf(buf, len, "%llu GiB", (unsigned long long)(b >> 30));
	else if (b && b % (UINT64_C(1) << 20) == 0)
		snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
	else
		snprintf(buf, len, "%llu bytes", (unsigned long long)b);
	return buf;
}

/* The setter writes the terms; a changed compute setting zeroes the
 * bucket's refill time, so vgpu_throttle_configure restarts it. */
static void terms_set(struct vgpu_ledger_tenant *ten,
		      const struct vgpu_ledger_terms *want, int32_t pid)
{
	struct vgpu_ledger_compute *c = &ten->compute;

	vgpu__st(&ten->mem_limit, want->mem_limit);
	vgpu__st(&ten->limit_set_ns, vgpu__now_ns(CLOCK_REALTIME));
	__atomic_store_n(&ten->limit_set_pid, pid, __ATOMIC_RELAXED);
	/* A suspension ends with the tenant's last process and memory:
	 * the tenant starts anew, running (docs/control.md). */
	if (__atomic_exchange_n(&ten->suspended, 0, __ATOMIC_RELAXED))
		vgpu_log(VGPU_LOG_WARN, "tenant '%s' was suspended by vgpu-ctl "
			 "and had no process or memory left: it starts anew, "
			 "running", ten->name);
	if (!want->compute || (vgpu__ld32(&c->share_pct) == want->share_pct &&
			       vgpu__ld32(&c->policy) == want->policy))
		return;
	__atomic_store_n(&c->tokens_ns, 0, __ATOMIC_RELAXED);
	vgpu__st(&c->refill_ns, 0);
	vgpu__st32(&c->policy, want->policy);
	vgpu__st32(&c->share_pct, want->share_pct);
}

/* A later joiner runs under the tenant's limit; asking for another one is
 * reported (and counted in limit_changes). */
static int terms_keep(struct vgpu_ledger_tenant *ten, uint64_t limit,
		      int32_t pid, char *err, size_t errlen)
{
	uint64_t have = vgpu__ld(&ten->mem_limit);
	char a[32], b[32];

	if (have == limit)
		return 0;
	__atomic_fetch_add(&ten->limit_changes, 1, __ATOMIC_RELAXED);
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_LIMIT_KEPT,
		"tenant '%s': pid %d asked for %s%s, but the tenant's memory "
		"limit, %s (set by pid %d), applies; a tenant keeps the limit "
		"it was started with while it has processes or usage",
		ten->name, (int)pid,
		limit == VGPU_LEDGER_UNLIMITED ? "no memory limit"
					       : "a memory limit of ",
		limit == VGPU_LEDGER_UNLIMITED ? ""
					       : size_text(limit, a, sizeof(a)),
		size_text(have, b, sizeof(b)),
		(int)__atomic_load_n(&ten->limit_set_pid, __ATOMIC_RELAXED));
}

/* ---- slots ------------------------------------------------------------------- */

/* A free slot, else one whose owner died (reclaimed first, its tenant's
 * lock only tried: another tenant's stopped process is not waited for),
 * those that hold nothing before the others. Returns its index with its
 * OFD lock held, or -1. */
static int claim_slot(struct vgpu_ledger *l)
{
	uint32_t i, pass, want;

	for (pass = 0; pass < 3; pass++) {
		want = pass == 0 ? VGPU_SLOT_FREE : VGPU_SLOT_ACTIVE;
		for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
			if (__atomic_load_n(&l->slots[i].state,
					    __ATOMIC_ACQUIRE) != want ||
			    (pass == 1 &&
			     !slot_holds_nothing(&l->slots[i])) ||
			    !vgpu__slot_trylock(l, i))
				continue;
			if (vgpu__slot_reclaim(l, i, 0) == 0)
				return (int)i;
			vgpu__slot_unlock(l, i);
		}
	}
	return -1;
}

/* Whether any tenant's lock word or key names owner (a stale word in a
 * damaged file, or one left by the slot's previous owner). */
static bool owner_named(const struct vgpu_ledger *l, uint32_t owner)
{
	for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if ((__atomic_load_n(&l->tenants[t].lock, __ATOMIC_RELAXED) &
		     ~VGPU__LOCK_WAITERS) == owner ||
		    KEY_MAKER(__atomic_load_n(&l->tenants[t].key,
					      __ATOMIC_RELAXED)) == owner)
			return true;
	return false;
}

/* Slot i, claimed (its OFD lock held), becomes s's: a new generation, the
 * pids, nothing held. It stays free to everyone else (never reclaimed: its
 * OFD lock is held) until published in a tenant. */
static void slot_take(struct vgpu_ledger *l, struct vgpu_slot *s, uint32_t i,
		      int32_t pid, int32_t host_pid)
{
	struct vgpu_ledger_slot *r = &l->slots[i];
	uint32_t gen = __atomic_load_n(&r->generation, __ATOMIC_RELAXED) + 1;

	/* A generation no lock word or key names: a word that names this
	 * slot then always reads as a dead owner's, and is taken over. */
	for (int n = 0; n <= 2 * VGPU_LEDGER_MAX_TENANTS &&
			owner_named(l, vgpu__owner_word(i, gen)); n++)
		gen++;
	memset(&r->pid, 0, sizeof(*r) - offsetof(struct vgpu_ledger_slot, pid));
	__atomic_store_n(&r->tenant, VGPU_LEDGER_MAX_TENANTS, __ATOMIC_RELAXED);
	__atomic_store_n(&r->generation, gen, __ATOMIC_SEQ_CST);
	__atomic_store_n(&r->pid, pid, __ATOMIC_RELAXED);
	__atomic_store_n(&r->host_pid, host_pid, __ATOMIC_RELAXED);
	s->l = l;
	s->rec = r;
	s->index = i;
	s->owner = vgpu__owner_word(i, gen);
}

/* s's slot joins tenant t: from now on it is one of t's processes (the
 * store sequentially consistent: see join_kept and claim_settle). */
static void slot_publish(struct vgpu_ledger *l, struct vgpu_slot *s,
			 uint32_t t)
{
	__atomic_store_n(&s->rec->tenant, t, __ATOMIC_RELAXED);
	s->rec->start_ns = vgpu__now_ns(CLOCK_REALTIME);
	__atomic_store_n(&s->rec->state, VGPU_SLOT_ACTIVE, __ATOMIC_SEQ_CST);
	s->ten = &l->tenants[t];
	s->tenant_index = t;
}

/* Undoes slot_publish, before the slot held anything. */
static void slot_retract(struct vgpu_slot *s)
{
	__atomic_store_n(&s->rec->state, VGPU_SLOT_FREE, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->rec->tenant, VGPU_LEDGER_MAX_TENANTS,
			 __ATOMIC_RELAXED);
	s->ten = NULL;
}

/* ---- tenant records ------------------------------------------------------------ */

/* FNV-1a of the name, never 0 (docs/ledger-abi.md). */
static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const void *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h ? h : 1;
}

static bool name_is(const struct vgpu_ledger *l, uint32_t t, const char *name)
{
	return strncmp(l->tenants[t].name, name, VGPU_LEDGER_NAME_MAX) == 0;
}

/* What a scan of the keys finds for a name: its ready record, else one
 * being made (or checked for reuse) with its hash (maybe another name's:
 * a collision). */
struct found {
	int ready, busy;
	uint64_t key;			/* the ready one's, else the busy one's */
};

static void find_tenant(struct vgpu_ledger *l, const char *name, uint32_t h,
			struct found *f)
{
	uint64_t k;

	f->ready = f->busy = -1;
	for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		k = key_load(l, t);
		if (!k || KEY_HASH(k) != h)
			continue;
		if (KEY_MAKER(k) == 0 && name_is(l, t, name)) {
			f->ready = (int)t;
			f->key = k;
			return;
		}
		if (KEY_MAKER(k) != 0 && f->busy < 0) {
			f->busy = (int)t;
			f->key = k;
		}
	}
}

/* Tenants with an active slot but no live one (their processes died),
 * their dead slots reclaimed, trying each lock once: their records can
 * then be reused. Only when every record is taken. */
static int reclaim_abandoned(struct vgpu_ledger *l)
{
	struct tenant_set live = { { 0 } };
	struct vgpu_ledger_slot *r;
	uint32_t i;
	int n = 0;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		r = &l->slots[i];
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) !=
		    VGPU_SLOT_ACTIVE)
			continue;
		if (vgpu__slot_owned(l, i) || !vgpu__slot_trylock(l, i)) {
			set_add(&live, __atomic_load_n(&r->tenant,
						       __ATOMIC_RELAXED));
			continue;
		}
		vgpu__slot_unlock(l, i);
	}
	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		r = &l->slots[i];
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    set_has(&live, __atomic_load_n(&r->tenant,
						   __ATOMIC_RELAXED) %
					   VGPU_LEDGER_MAX_TENANTS) ||
		    vgpu__slot_owned(l, i) || !vgpu__slot_trylock(l, i))
			continue;
		if (vgpu__slot_reclaim(l, i, 0) == 0)
			n++;
		vgpu__slot_unlock(l, i);
	}
	return n;
}

/* Record t was just claimed: its key went from `was` to KEY_BUSY(w, hash
 * of was), a hash that keeps joiners of its old name waiting rather than
 * making another record. Nothing is written to a record while a slot is
 * in it: a keeper (join_kept) may have joined its old tenant just before
 * the claim, a maker that died may have left its own slot. Dead slots are
 * reclaimed (locks only tried); then, the claim and this look at the
 * slots being sequentially consistent, as a keeper's publishing and its
 * look at the key are, either the keeper saw the key change and left, or
 * its slot is seen here. Empty: the record is s's to make, its key
 * KEY_BUSY(w, h), true. Else the key goes back (the old tenant, ready
 * again, if it was intact), false. */
static bool claim_settle(struct vgpu_ledger *l, uint32_t t, uint64_t was,
			 uint32_t w, uint32_t h)
{
	struct vgpu_ledger_tenant *ten = &l->tenants[t];
	bool intact = KEY_HASH(was) &&
		      __atomic_load_n(&ten->state, __ATOMIC_ACQUIRE) ==
		      VGPU_TENANT_ACTIVE;

	reclaim_dead(l, t, 0);
	if (tenant_has_slots(l, t)) {
		__atomic_store_n(&ten->key, intact ? KEY_HASH(was) : was,
				 __ATOMIC_SEQ_CST);
		return false;
	}
	__atomic_store_n(&ten->state, VGPU_TENANT_FREE, __ATOMIC_SEQ_CST);
	__atomic_store_n(&ten->key, KEY_BUSY(w, h), __ATOMIC_SEQ_CST);
	return true;
}

/* Claims record t from key `was` (free, or its maker dead) for a name of
 * hash h. */
static bool claim_free(struct vgpu_ledger *l, uint32_t t, uint64_t was,
		       uint32_t w, uint32_t h)
{
	return key_cas(l, t, was, KEY_BUSY(w, KEY_HASH(was) ? KEY_HASH(was)
							     : h)) &&
	       claim_settle(l, t, was, w, h);
}

/* An idle tenant's record (ready, no active slot, nothing held), taken for
 * a new name. Under the record's lock (only tried), as setters of the old
 * tenant publish under it (join_settle); keepers are seen after the claim
 * (claim_settle). -1 if none. */
static int reuse_record(struct vgpu_ledger *l, uint32_t w, uint32_t h)
{
	struct tenant_set slots;
	uint64_t k;
	bool ok;

	tenants_with_slots(l, &slots);
	for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		k = key_load(l, t);
		if (!k || KEY_MAKER(k) || set_has(&slots, t) ||
		    !tenant_holds_nothing(l, t) ||
		    vgpu__tenant_lock_until(l, t, w, 0, NULL, 0))
			continue;
		ok = key_load(l, t) == k && tenant_idle(l, t) &&
		     key_cas(l, t, k, KEY_BUSY(w, KEY_HASH(k))) &&
		     claim_settle(l, t, k, w, h);
		vgpu__tenant_unlock(&l->tenants[t]);
		if (ok)
			return (int)t;
	}
	return -1;
}

/* A record for a new name, claimed (claim_settle): a free one (or one
 * whose maker died), else an idle tenant's. -1 when every record belongs
 * to a tenant with a live process or usage. */
static int claim_record(struct vgpu_ledger *l, uint32_t w, uint32_t h)
{
	uint64_t k;
	int t;

	for (t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		k = key_load(l, (uint32_t)t);
		if ((k == 0 || (KEY_MAKER(k) &&
				vgpu__owner_dead(l, KEY_MAKER(k)))) &&
		    claim_free(l, (uint32_t)t, k, w, h))
			return t;
	}
	t = reuse_record(l, w, h);
	if (t < 0 && reclaim_abandoned(l) > 0)
		t = reuse_record(l, w, h);
	return t;
}

/* Gives back a record claimed and settled for a name, before anything
 * was written to it: free, for anyone to claim. */
static void give_up_record(struct vgpu_ledger *l, uint32_t t)
{
	l->tenants[t].name[0] = '\0';
	__atomic_store_n(&l->tenants[t].key, 0, __ATOMIC_SEQ_CST);
}

/* Record `mine` was just claimed for name (hash h). Another record of the
 * name, made or being made at the same time, wins if it is ready, or is
 * being made at a lower index; one being made at a higher index is waited
 * for (its maker sees ours and gives up, or has made it first). Both
 * claims and these scans are sequentially consistent, so of two makers at
 * least one sees the other. Returns 0 to go on, 1 to give `mine` up, or
 * VGPU_LEDGER_ETIMEDOUT with *maker set. */
static int rival(struct vgpu_ledger *l, uint32_t mine, const char *name,
		 uint32_t h, uint64_t deadline, uint32_t *maker)
{
	long pause = 20000;
	uint64_t k;

	for (;;) {
		bool wait = false;

		for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
			k = key_load(l, t);
			if (t == mine || !k || KEY_HASH(k) != h)
				continue;
			if (KEY_MAKER(k) == 0) {
				if (name_is(l, t, name))
					return 1;
				continue;
			}
			if (vgpu__owner_dead(l, KEY_MAKER(k)))
				continue;
			if (t < mine)
				return 1;
			wait = true;
			*maker = KEY_MAKER(k);
		}
		if (!wait)
			return 0;
		if (mono_ns() >= deadline)
			return VGPU_LEDGER_ETIMEDOUT;
		nanosleep(&(struct timespec){ 0, pause }, NULL);
		if (pause < 1000000)
			pause *= 2;
	}
}

/* Record t (claimed and settled) becomes tenant `name`, s its first
 * process and the setter of its terms; then the key says it is ready.
 * Nothing else writes the record meanwhile: joiners of the name wait for
 * the key. */
static void make_tenant(struct vgpu_ledger *l, struct vgpu_slot *s,
			uint32_t t, uint32_t h, const char *name,
			const struct vgpu_ledger_terms *want, int32_t pid)
{
	struct vgpu_ledger_tenant *ten = &l->tenants[t];
	const size_t head = offsetof(struct vgpu_ledger_tenant, mem_limit);
	const size_t key = offsetof(struct vgpu_ledger_tenant, key);
	const size_t name_at = offsetof(struct vgpu_ledger_tenant, name);

	/* Everything but the lock word, the state and the key. */
	memset((char *)ten + head, 0, key - head);
	memset((char *)ten + name_at, 0, sizeof(*ten) - name_at);
	ten->mem_limit = VGPU_LEDGER_UNLIMITED;
	ten->spill_limit = VGPU_LEDGER_UNLIMITED;
	snprintf(ten->name, sizeof(ten->name), "%s", name);
	terms_set(ten, want, pid);
	slot_publish(l, s, t);
	s->setter = true;
	__atomic_store_n(&ten->state, VGPU_TENANT_ACTIVE, __ATOMIC_RELEASE);
	__atomic_store_n(&ten->key, (uint64_t)h, __ATOMIC_SEQ_CST);
}

/* ---- for an administrator's change (ledger_ctl.c) ------------------------------- */

int vgpu__slot_borrow(struct vgpu_ledger *l, int32_t pid, int32_t host_pid,
		      uint32_t *owner)
{
	struct vgpu_slot s = { 0 };
	int i = claim_slot(l);

	if (i < 0)
		return VGPU_LEDGER_EFULL;
	slot_take(l, &s, (uint32_t)i, pid, host_pid);
	*owner = s.owner;
	return i;
}

int vgpu__tenant_find(struct vgpu_ledger *l, const char *name, uint64_t *key)
{
	struct found f;

	find_tenant(l, name, name_hash(name), &f);
	if (f.ready < 0)
		return -1;
	*key = f.key;
	return f.ready;
}

bool vgpu__tenant_named(const struct vgpu_ledger *l, uint32_t t,
			const char *name)
{
	return name_is(l, t, name);
}

static bool name_ok(const char *name);

bool vgpu__tenant_name_ok(const char *name)
{
	return name_ok(name);
}

/* ---- joining ------------------------------------------------------------------ */

/* What a join is after, and where its messages go. */
struct joiner {
	struct vgpu_ledger *l;
	struct vgpu_slot *s;
	const char *name;
	const struct vgpu_ledger_terms *want;
	int32_t pid;
	uint32_t hash;
	uint64_t deadline;
	char *err;
	size_t errlen;
};

/* A wait for the joiner's own tenant ran out: who held it up. */
static int held_up(const struct joiner *j, uint32_t word, const char *what)
{
	int32_t pid = 0, hpid = 0;
	char who[64];

	if (vgpu__word_holder(j->l, word, &pid, &hpid) != 0)
		snprintf(who, sizeof(who), "a process that has let go since");
	else if (hpid)
		snprintf(who, sizeof(who), "pid %d (host pid %d)", pid, hpid);
	else
		snprintf(who, sizeof(who), "pid %d", pid);
	return vgpu__ledger_err(j->err, j->errlen, VGPU_LEDGER_ETIMEDOUT,
		"ledger '%s': tenant '%s': %s %s for over %llu ms (stopped?); "
		"not joined", j->l->path, j->name, who, what,
		(unsigned long long)(VGPU_LEDGER_LOCK_TIMEOUT_NS / 1000000u));
}

/* A live process is in ready record t (found with key k): this joiner
 * keeps the tenant's terms and takes no lock, so that a stopped holder of
 * it does not hold up the join. Its slot is published, then the key read
 * again: a claim of the record for reuse changes the key first, then
 * looks for slots (claim_settle). 0, VGPU_LEDGER_LIMIT_KEPT, or
 * VGPU__LOCK_CHANGED (the record was claimed meanwhile: look again). */
static int join_kept(struct joiner *j, uint32_t t, uint64_t k)
{
	slot_publish(j->l, j->s, t);
	if (key_load(j->l, t) != k) {
		slot_retract(j->s);
		return VGPU__LOCK_CHANGED;
	}
	j->s->setter = false;
	return terms_keep(&j->l->tenants[t], j->want->mem_limit, j->pid,
			  j->err, j->errlen);
}

/* No live process is in ready record t (found with key k): under its lock,
 * with its dead processes' slots reclaimed, this joiner is the setter if
 * the tenant holds nothing and no live process came meanwhile. 0,
 * VGPU_LEDGER_LIMIT_KEPT, VGPU__LOCK_CHANGED (the record was reused
 * meanwhile: look again) or VGPU_LEDGER_ETIMEDOUT (err names the holder:
 * a stopped process of the tenant, or one stopped taking its record). */
static int join_settle(struct joiner *j, uint32_t t, uint64_t k)
{
	struct vgpu_ledger *l = j->l;
	struct vgpu_ledger_tenant *ten = &l->tenants[t];
	bool setter;
	int rc;

	reclaim_dead(l, t, 0);		/* outside the lock: it takes it */
	rc = vgpu__tenant_lock_until(l, t, j->s->owner, j->deadline,
				     &ten->key, k);
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		return held_up(j, __atomic_load_n(&ten->lock, __ATOMIC_RELAXED),
			       "has held its lock");
	if (rc)
		return rc;
	if (key_load(l, t) != k || !name_is(l, t, j->name)) {
		vgpu__tenant_unlock(ten);
		return VGPU__LOCK_CHANGED;
	}
	setter = !tenant_live(l, t) && tenant_idle(l, t);
	slot_publish(l, j->s, t);
	j->s->setter = setter;
	rc = 0;
	if (setter)
		terms_set(ten, j->want, j->pid);
	else
		rc = terms_keep(ten, j->want->mem_limit, j->pid, j->err,
				j->errlen);
	vgpu__tenant_unlock(ten);
	return rc;
}

static int join_tenant(struct joiner *j, uint32_t t, uint64_t k)
{
	if (tenant_live(j->l, t))
		return join_kept(j, t, k);
	return join_settle(j, t, k);
}

/* Makes a record for the name in t (claimed and settled): unless another
 * record of the name wins. 0, VGPU__LOCK_CHANGED (given up: look again),
 * _ETIMEDOUT. */
static int make_record(struct joiner *j, uint32_t t)
{
	uint32_t maker = 0;
	int rc = rival(j->l, t, j->name, j->hash, j->deadline, &maker);

	if (rc) {
		give_up_record(j->l, t);
		return rc == 1 ? VGPU__LOCK_CHANGED :
			held_up(j, maker, "has been adding it");
	}
	make_tenant(j->l, j->s, t, j->hash, j->name, j->want, j->pid);
	return 0;
}

/* The name's record is being made, or checked for reuse, by another
 * process: waited for while that process lives, taken over once it is
 * dead (its old tenant ready again, if a slot is in it). */
static int wait_for_maker(struct joiner *j, uint32_t t, uint64_t k,
			  long *pause)
{
	if (vgpu__owner_dead(j->l, KEY_MAKER(k)))
		return claim_free(j->l, t, k, j->s->owner, j->hash) ?
			make_record(j, t) : VGPU__LOCK_CHANGED;
	if (mono_ns() >= j->deadline)
		return held_up(j, KEY_MAKER(k), "has been adding it");
	nanosleep(&(struct timespec){ 0, *pause }, NULL);
	if (*pause < 1000000)
		*pause *= 2;
	return VGPU__LOCK_CHANGED;
}

/* s's slot is claimed: find the tenant's record, or make one, and join it.
 * Waits only for this tenant (its record being made, a would-be setter
 * for its lock), until the joiner's deadline. */
static int join_record(struct joiner *j)
{
	struct vgpu_ledger *l = j->l;
	long pause = 20000;
	struct found f;
	int t, rc;

	for (;;) {
		find_tenant(l, j->name, j->hash, &f);
		if (f.ready >= 0) {
			rc = join_tenant(j, (uint32_t)f.ready, f.key);
		} else if (f.busy >= 0) {
			rc = wait_for_maker(j, (uint32_t)f.busy, f.key, &pause);
		} else {
			t = claim_record(l, j->s->owner, j->hash);
			if (t < 0)
				return vgpu__ledger_err(j->err, j->errlen,
					VGPU_LEDGER_EFULL, "ledger '%s' is "
					"full: all %d tenant records are in "
					"use by tenants with live processes; "
					"tenant '%s' not added", l->path,
					VGPU_LEDGER_MAX_TENANTS, j->name);
			rc = make_record(j, (uint32_t)t);
		}
		if (rc != VGPU__LOCK_CHANGED)
			return rc;
		if (mono_ns() >= j->deadline + VGPU_LEDGER_LOCK_TIMEOUT_NS)
			return vgpu__ledger_err(j->err, j->errlen,
				VGPU_LEDGER_ETIMEDOUT, "ledger '%s': tenant "
				"'%s': its record kept changing for two "
				"seconds; not joined", l->path, j->name);
	}
}

static bool name_ok(const char *name)
{
	size_t i, n = name ? strlen(name) : 0;

	if (n == 0 || n >= VGPU_LEDGER_NAME_MAX)
		return false;
	for (i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return false;
	return true;
}

/* Under l->mu (a move of the file never grafts under a join). */
static int join_locked(struct joiner *j, int32_t host_pid)
{
	struct vgpu_ledger *l = j->l;
	int i, rc;

	i = claim_slot(l);
	if (i < 0)
		return vgpu__ledger_err(j->err, j->errlen, VGPU_LEDGER_EFULL,
			"ledger '%s' is full: all %d process slots are in use "
			"by live processes", l->path, VGPU_LEDGER_MAX_SLOTS);
	slot_take(l, j->s, (uint32_t)i, j->pid, host_pid);
	rc = join_record(j);
	if (rc < 0) {
		vgpu__slot_unlock(l, (uint32_t)i);
		return rc;
	}
	__atomic_fetch_add(&l->hdr->joins, 1, __ATOMIC_RELAXED);
	j->s->next = l->joined;
	l->joined = j->s;
	return rc;
}

int vgpu_ledger_join_terms(struct vgpu_ledger *l, const char *tenant,
			   const struct vgpu_ledger_terms *want, int32_t pid,
			   int32_t host_pid, struct vgpu_slot **out,
			   char *err, size_t errlen)
{
	struct joiner j = { .l = l, .name = tenant, .want = want, .pid = pid,
			    .err = err, .errlen = errlen };
	struct vgpu_slot *s;
	int rc;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	if (!l || !want || !name_ok(tenant))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"tenant name '%s': expected 1..%d bytes, no control "
			"characters", tenant ? tenant : "(null)",
			VGPU_LEDGER_NAME_MAX - 1);
	s = calloc(1, sizeof(*s));
	if (!s)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ENOMEM,
			"out of memory joining a ledger");
	/* What a move to another file joins with (ledger_move.c). */
	s->terms = *want;
	s->pid = pid;
	s->host_pid = host_pid;
	snprintf(s->name, sizeof(s->name), "%s", tenant);
	j.s = s;
	j.hash = name_hash(tenant);
	pthread_mutex_lock(&l->mu);
	j.deadline = vgpu__deadline();
	rc = join_locked(&j, host_pid);
	pthread_mutex_unlock(&l->mu);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*out = s;
	return rc;
}

int vgpu_ledger_join(struct vgpu_ledger *l, const char *tenant,
		     uint64_t mem_limit, int32_t pid, int32_t host_pid,
		     struct vgpu_slot **out, char *err, size_t errlen)
{
	struct vgpu_ledger_terms want = { .mem_limit = mem_limit };

	return vgpu_ledger_join_terms(l, tenant, &want, pid, host_pid, out,
				      err, errlen);
}

bool vgpu_ledger_set_terms(const struct vgpu_slot *s)
{
	return s->setter;
}

/* s's record given back to the file and freed, its lock let go (l->mu).
 * On a timeout (here, or handing its shared memory over) the slot stays
 * active with its usage and, once its OFD lock is gone, is reclaimed
 * like a dead process's. */
static void give_back(struct vgpu_ledger *l, struct vgpu_slot *s)
{
	uint64_t deadline = vgpu__deadline();

	if (vgpu__shares_slot_gone(l, s->index, s->owner, deadline) == 0 &&
	    vgpu__tenant_lock_until(l, s->tenant_index, s->owner, deadline,
				    NULL, 0) == 0) {
		slot_give_back(s->ten, s->rec);
		s->given_back = true;	/* a racing charge finds it so */
		vgpu__tenant_unlock(s->ten);
		__atomic_store_n(&s->rec->state, VGPU_SLOT_FREE,
				 __ATOMIC_RELEASE);
	}
	vgpu__slot_unlock(l, s->index);
}

void vgpu_ledger_leave(struct vgpu_slot *s)
{
	struct vgpu_ledger *l;
	struct vgpu_slot **pp;

	if (!s)
		return;
	l = s->l;
	/* l->mu throughout: no move grafts another file under s meanwhile
	 * (it is no longer in the joined list, so it does not move). */
	pthread_mutex_lock(&l->mu);
	for (pp = &l->joined; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	give_back(l, s);
	pthread_mutex_unlock(&l->mu);
	free(s);
}

/* At exit: each slot given back and freed in the file, as a leave, but
 * the handle, its slots and the mapping are kept (ledger.h). l->mu is
 * waited for 3 s at most (a move in progress); past that the slots are
 * left to the reclaiming of a dead process's. A thread that charges or
 * gives back in the instant between the front end's check and this
 * give-back finds the slot given back under the tenant lock, and touches
 * nothing (ledger_ops.c). */
void vgpu_ledger_exit(struct vgpu_ledger *l)
{
	struct timespec by;

	if (!l)
		return;
	clock_gettime(CLOCK_MONOTONIC, &by);
	by.tv_sec += 3;
	if (!vgpu_mutex_lock_by(&l->mu, &by))
		return;
	for (struct vgpu_slot *s = l->joined; s; s = s->next)
		give_back(l, s);
	pthread_mutex_unlock(&l->mu);
}

int vgpu_ledger_set_spill_limit(struct vgpu_slot *s, uint64_t bytes)
{
	if (vgpu__ledger_lock(s))
		return VGPU_LEDGER_ETIMEDOUT;
	vgpu__st(&s->ten->spill_limit, bytes);
	vgpu__ledger_unlock(s);
	return 0;
}
