/* ledger_join.c - tenants and slots: joining (find or make the tenant, set
 * or keep its terms, claim a slot), leaving, and reclaiming the slots of dead
 * processes. All of this may make system calls and allocate; none of it is
 * on the allocation path except the reclaim of one tenant after a refusal.
 */
#include "ledger_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The caller holds the slot's OFD lock. The generation moves first, so the
 * dead owner's lock word, if it still holds the tenant lock, reads as dead
 * and ours as alive. */
int vgpu__slot_reclaim(struct vgpu_ledger *l, uint32_t index)
{
	struct vgpu_ledger_slot *r = &l->slots[index];
	uint32_t t, gen;

	if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != VGPU_SLOT_ACTIVE)
		return 0;
	t = __atomic_load_n(&r->tenant, __ATOMIC_RELAXED);
	if (t < VGPU_LEDGER_MAX_TENANTS) {
		gen = __atomic_load_n(&r->generation, __ATOMIC_RELAXED) + 1;
		__atomic_store_n(&r->generation, gen, __ATOMIC_RELEASE);
		/* Its shared memory first: what it paid for that others
		 * still hold moves to them; if that cannot be done now, the
		 * slot stays (a later reclaim tries again). */
		if (vgpu__shares_slot_gone(l, index,
					   vgpu__owner_word(index, gen)))
			return VGPU_LEDGER_ETIMEDOUT;
		if (vgpu__tenant_lock(l, t, vgpu__owner_word(index, gen)))
			return VGPU_LEDGER_ETIMEDOUT;
		slot_give_back(&l->tenants[t], r);
		vgpu__tenant_unlock(&l->tenants[t]);
	}
	__atomic_store_n(&r->state, VGPU_SLOT_FREE, __ATOMIC_RELEASE);
	return 0;
}

/* Reclaims the dead slots of tenant t, or of every tenant if t is -1. */
static int reclaim_dead(struct vgpu_ledger *l, int64_t t)
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
			    VGPU_SLOT_ACTIVE && vgpu__slot_reclaim(l, i) == 0)
			n++;
		vgpu__slot_unlock(l, i);
	}
	return n;
}

int vgpu__reclaim_tenant(struct vgpu_ledger *l, uint32_t t)
{
	return reclaim_dead(l, t);
}

int vgpu_ledger_reclaim(struct vgpu_ledger *l)
{
	return reclaim_dead(l, -1);
}

/* ---- tenants ---------------------------------------------------------------- */

static bool tenant_has_slots(struct vgpu_ledger *l, uint32_t t)
{
	uint32_t i;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (__atomic_load_n(&l->slots[i].state, __ATOMIC_ACQUIRE) ==
			    VGPU_SLOT_ACTIVE &&
		    __atomic_load_n(&l->slots[i].tenant, __ATOMIC_RELAXED) == t)
			return true;
	return false;
}

static bool tenant_idle(struct vgpu_ledger *l, uint32_t t)
{
	struct vgpu_ledger_tenant *ten = &l->tenants[t];
	int k;

	for (k = 0; k < VGPU_USAGE_COUNT; k++)
		if (vgpu__ld(&ten->usage[k]))
			return false;
	return !tenant_has_slots(l, t);
}

static void tenant_init(struct vgpu_ledger_tenant *ten, const char *name)
{
	__atomic_store_n(&ten->state, VGPU_TENANT_FREE, __ATOMIC_RELEASE);
	memset((char *)ten + sizeof(ten->lock) + sizeof(ten->state), 0,
	       sizeof(*ten) - sizeof(ten->lock) - sizeof(ten->state));
	__atomic_store_n(&ten->lock, 0, __ATOMIC_RELEASE);
	ten->mem_limit = VGPU_LEDGER_UNLIMITED;
	ten->spill_limit = VGPU_LEDGER_UNLIMITED;
	snprintf(ten->name, sizeof(ten->name), "%s", name);
	__atomic_store_n(&ten->state, VGPU_TENANT_ACTIVE, __ATOMIC_RELEASE);
}

/* Under the join lock: the tenant's index, or -1 when all records are
 * taken by tenants with live processes or usage. */
static int find_tenant(struct vgpu_ledger *l, const char *name, bool *created)
{
	int t, pass;

	*created = false;
	for (t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if (__atomic_load_n(&l->tenants[t].state, __ATOMIC_ACQUIRE) ==
			    VGPU_TENANT_ACTIVE &&
		    strncmp(l->tenants[t].name, name, VGPU_LEDGER_NAME_MAX) == 0)
			return t;
	*created = true;
	for (pass = 0; pass < 2; pass++) {
		if (pass == 1)
			vgpu_ledger_reclaim(l);
		for (t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
			if (__atomic_load_n(&l->tenants[t].state,
					    __ATOMIC_ACQUIRE) == VGPU_TENANT_FREE ||
			    (pass == 1 && tenant_idle(l, t))) {
				tenant_init(&l->tenants[t], name);
				return t;
			}
		}
	}
	return -1;
}

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

/* Under the join lock: whether a joiner of tenant t sets its terms. A
 * tenant just made does; an existing one does when it has no live process
 * and, once its dead slots are reclaimed, no usage. */
static bool terms_open(struct vgpu_ledger *l, uint32_t t, bool created)
{
	if (created)
		return true;
	if (tenant_live(l, t))
		return false;
	reclaim_dead(l, t);
	return tenant_idle(l, t);
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

/* Under the join lock: a free slot, else one whose owner died (reclaimed
 * first). Returns its index with its OFD lock held, or -1. */
static int claim_slot(struct vgpu_ledger *l)
{
	uint32_t i, pass, want;

	for (pass = 0; pass < 2; pass++) {
		want = pass == 0 ? VGPU_SLOT_FREE : VGPU_SLOT_ACTIVE;
		for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
			if (__atomic_load_n(&l->slots[i].state,
					    __ATOMIC_ACQUIRE) != want ||
			    !vgpu__slot_trylock(l, i))
				continue;
			if (vgpu__slot_reclaim(l, i) == 0)
				return (int)i;
			vgpu__slot_unlock(l, i);
		}
	}
	return -1;
}

/* Whether any tenant's lock word names owner (a stale word in a damaged
 * file, or one left by the slot's previous owner). */
static bool owner_named(const struct vgpu_ledger *l, uint32_t owner)
{
	for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if ((__atomic_load_n(&l->tenants[t].lock, __ATOMIC_RELAXED) &
		     ~VGPU__LOCK_WAITERS) == owner)
			return true;
	return false;
}

static void slot_init(struct vgpu_ledger *l, uint32_t i, uint32_t t,
		      int32_t pid, int32_t host_pid)
{
	struct vgpu_ledger_slot *r = &l->slots[i];
	uint32_t gen = __atomic_load_n(&r->generation, __ATOMIC_RELAXED) + 1;

	/* A generation no lock word names: a word that names this slot then
	 * always reads as a dead owner's, and is taken over. */
	for (int n = 0; n <= VGPU_LEDGER_MAX_TENANTS &&
			owner_named(l, vgpu__owner_word(i, gen)); n++)
		gen++;

	/* Free, so only owner_dead() reads it: keep the generation word. */
	memset(&r->pid, 0, sizeof(*r) - offsetof(struct vgpu_ledger_slot, pid));
	__atomic_store_n(&r->generation, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&r->tenant, t, __ATOMIC_RELAXED);
	r->pid = pid;
	r->host_pid = host_pid;
	r->start_ns = vgpu__now_ns(CLOCK_REALTIME);
	__atomic_store_n(&r->state, VGPU_SLOT_ACTIVE, __ATOMIC_RELEASE);
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

/* Under l->mu and the join lock. */
static int join_locked(struct vgpu_ledger *l, struct vgpu_slot *s,
		       const char *tenant, const struct vgpu_ledger_terms *want,
		       int32_t pid, int32_t host_pid, char *err, size_t errlen)
{
	bool created;
	int t, i, rc = 0;

	t = find_tenant(l, tenant, &created);
	if (t < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EFULL,
			"ledger '%s' is full: all %d tenant records are in use "
			"by tenants with live processes; tenant '%s' not added",
			l->path, VGPU_LEDGER_MAX_TENANTS, tenant);
	i = claim_slot(l);
	if (i < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EFULL,
			"ledger '%s' is full: all %d process slots are in use "
			"by live processes", l->path, VGPU_LEDGER_MAX_SLOTS);
	s->setter = terms_open(l, (uint32_t)t, created);
	if (s->setter)
		terms_set(&l->tenants[t], want, pid);
	else
		rc = terms_keep(&l->tenants[t], want->mem_limit, pid, err,
				errlen);
	slot_init(l, (uint32_t)i, (uint32_t)t, pid, host_pid);
	__atomic_fetch_add(&l->hdr->joins, 1, __ATOMIC_RELAXED);
	s->l = l;
	s->rec = &l->slots[i];
	s->ten = &l->tenants[t];
	s->index = (uint32_t)i;
	s->tenant_index = (uint32_t)t;
	s->owner = vgpu__owner_word((uint32_t)i, s->rec->generation);
	s->next = l->joined;
	l->joined = s;
	return rc;
}

int vgpu_ledger_join_terms(struct vgpu_ledger *l, const char *tenant,
			   const struct vgpu_ledger_terms *want, int32_t pid,
			   int32_t host_pid, struct vgpu_slot **out,
			   char *err, size_t errlen)
{
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
	pthread_mutex_lock(&l->mu);
	rc = vgpu__join_lock(l);
	if (rc == 0) {
		rc = join_locked(l, s, tenant, want, pid, host_pid, err,
				 errlen);
		vgpu__join_unlock(l);
	} else {
		vgpu__ledger_err(err, errlen, rc, "ledger '%s': %s", l->path,
			rc == VGPU_LEDGER_ETIMEDOUT ?
			"its join lock was held for over a second" :
			"cannot lock its join lock");
	}
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

void vgpu_ledger_leave(struct vgpu_slot *s)
{
	struct vgpu_ledger *l;
	struct vgpu_slot **pp;

	if (!s)
		return;
	l = s->l;
	pthread_mutex_lock(&l->mu);
	for (pp = &l->joined; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&l->mu);
	/* On a timeout (here, or handing its shared memory over) the slot
	 * stays active with its usage and, once its OFD lock is gone, is
	 * reclaimed like a dead process's. */
	if (vgpu__shares_slot_gone(l, s->index, s->owner) == 0 &&
	    vgpu__tenant_lock(l, s->tenant_index, s->owner) == 0) {
		slot_give_back(s->ten, s->rec);
		vgpu__tenant_unlock(s->ten);
		__atomic_store_n(&s->rec->state, VGPU_SLOT_FREE,
				 __ATOMIC_RELEASE);
	}
	vgpu__slot_unlock(l, s->index);
	free(s);
}

int vgpu_ledger_set_spill_limit(struct vgpu_slot *s, uint64_t bytes)
{
	if (vgpu__tenant_lock(s->l, s->tenant_index, s->owner))
		return VGPU_LEDGER_ETIMEDOUT;
	vgpu__st(&s->ten->spill_limit, bytes);
	vgpu__tenant_unlock(s->ten);
	return 0;
}
