/* ledger_ctl.c - an administrator's changes to a running tenant's terms
 * (vgpu-ctl, docs/control.md): the memory limit, the compute share and
 * policy, the spill limit, each change recorded in the tenant's record.
 *
 * The change is made under the tenant's lock, as every reservation is, so
 * a reservation sees either the old limit or the new one, never a mix.
 * vgpu-ctl is no tenant's process: it takes the lock as a slot it claims
 * for the call (OFD-locked, so alive while it runs and dead when it dies)
 * and never publishes in a tenant. Its waits are bounded like every other
 * (a stopped holder is named, not waited for).
 */
#include "ledger_internal.h"
#include "options.h"

#include <stdio.h>
#include <string.h>

#define CTL_ALL (VGPU_LEDGER_CTL_MEMORY | VGPU_LEDGER_CTL_COMPUTE | \
		 VGPU_LEDGER_CTL_POLICY | VGPU_LEDGER_CTL_SPILL | \
		 VGPU_LEDGER_CTL_SUSPEND)

static bool caps(uint32_t share, uint32_t policy)
{
	return share > 0 && share < 100 && policy != VGPU_POLICY_OFF;
}

static int check(const char *tenant, const struct vgpu_ledger_change *c,
		 char *err, size_t errlen)
{
	if (!vgpu__tenant_name_ok(tenant))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"tenant name '%s': expected 1..%d bytes, no control "
			"characters", tenant ? tenant : "(null)",
			VGPU_LEDGER_NAME_MAX - 1);
	if (!c->fields || (c->fields & ~CTL_ALL))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"a change sets at least one of the memory limit, the "
			"compute share or policy, the spill limit, the "
			"suspension (fields 0x%x)", c->fields);
	if ((c->fields & VGPU_LEDGER_CTL_SUSPEND) && c->suspend > 1)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"suspend %u: expected 0 (resume) or 1 (suspend)",
			c->suspend);
	if ((c->fields & VGPU_LEDGER_CTL_COMPUTE) && c->share_pct > 100)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"compute share %u%%: expected 0..100", c->share_pct);
	if ((c->fields & VGPU_LEDGER_CTL_POLICY) &&
	    c->policy != VGPU_POLICY_HARD && c->policy != VGPU_POLICY_ELASTIC &&
	    c->policy != VGPU_POLICY_OFF &&
	    c->policy != VGPU_POLICY_OPPORTUNISTIC)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"compute policy %u: expected hard, elastic, off or "
			"opportunistic",
			c->policy);
	return 0;
}

/* Under the lock. The throttle reads share_pct, then policy, with no lock:
 * the policy goes first. A tenant that starts to be capped starts with an
 * empty bucket (vgpu_throttle_configure's rule), so the cap holds from its
 * next launch; one capped before keeps its bucket (at most one burst). */
static void set_compute(struct vgpu_ledger_tenant *ten,
			const struct vgpu_ledger_change *c)
{
	struct vgpu_ledger_compute *cp = &ten->compute;
	uint32_t share = vgpu__ld32(&cp->share_pct);
	uint32_t policy = vgpu__ld32(&cp->policy);
	bool was = caps(share, policy);

	if (c->fields & VGPU_LEDGER_CTL_COMPUTE)
		share = c->share_pct >= 100 ? 0 : c->share_pct;
	if (c->fields & VGPU_LEDGER_CTL_POLICY)
		policy = c->policy;
	if (caps(share, policy) && !was) {
		__atomic_store_n(&cp->tokens_ns, 0, __ATOMIC_RELAXED);
		vgpu__st(&cp->refill_ns, vgpu__now_ns(CLOCK_MONOTONIC));
	}
	vgpu__st32(&cp->policy, policy);
	vgpu__st32(&cp->share_pct, share);
}

/* Under the lock: the terms, then the audit, its counter last. */
static void apply(struct vgpu_ledger_tenant *ten,
		  const struct vgpu_ledger_change *c)
{
	uint64_t now = vgpu__now_ns(CLOCK_REALTIME);

	if (c->fields & VGPU_LEDGER_CTL_MEMORY) {
		vgpu__st(&ten->mem_limit, c->mem_limit);
		vgpu__st(&ten->limit_set_ns, now);
		__atomic_store_n(&ten->limit_set_pid, c->pid, __ATOMIC_RELAXED);
	}
	if (c->fields & VGPU_LEDGER_CTL_SPILL)
		vgpu__st(&ten->spill_limit, c->spill_limit);
	if (c->fields & (VGPU_LEDGER_CTL_COMPUTE | VGPU_LEDGER_CTL_POLICY))
		set_compute(ten, c);
	if (c->fields & VGPU_LEDGER_CTL_SUSPEND)
		__atomic_store_n(&ten->suspended, c->suspend, __ATOMIC_RELAXED);
	vgpu__st(&ten->ctl_ns, now);
	__atomic_store_n(&ten->ctl_uid, c->uid, __ATOMIC_RELAXED);
	__atomic_store_n(&ten->ctl_pid, c->pid, __ATOMIC_RELAXED);
	__atomic_store_n(&ten->ctl_host_pid, c->host_pid, __ATOMIC_RELAXED);
	__atomic_store_n(&ten->ctl_fields, c->fields, __ATOMIC_RELAXED);
	__atomic_store_n(&ten->ctl_changes, vgpu__ld(&ten->ctl_changes) + 1,
			 __ATOMIC_RELEASE);
}

/* The lock was not had in time: who holds it. */
static int held(struct vgpu_ledger *l, uint32_t t, const char *tenant,
		char *err, size_t errlen)
{
	uint32_t word = __atomic_load_n(&l->tenants[t].lock, __ATOMIC_RELAXED);
	int32_t pid = 0, hpid = 0;
	char who[64];

	if (vgpu__word_holder(l, word, &pid, &hpid) != 0)
		snprintf(who, sizeof(who), "a process that has let go since");
	else if (hpid)
		snprintf(who, sizeof(who), "pid %d (host pid %d)", pid, hpid);
	else
		snprintf(who, sizeof(who), "pid %d", pid);
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ETIMEDOUT,
		"ledger '%s': tenant '%s': its lock has been held for over "
		"%llu ms by %s (stopped?); nothing was changed", l->path,
		tenant, (unsigned long long)(VGPU_LEDGER_LOCK_TIMEOUT_NS /
					     1000000u), who);
}

static int no_tenant(struct vgpu_ledger *l, const char *tenant, char *err,
		     size_t errlen)
{
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ENOENT,
		"ledger '%s' has no tenant '%s'", l->path, tenant);
}

/* With slot `owner` borrowed: find, lock, change, let go. */
static int set_locked(struct vgpu_ledger *l, const char *tenant,
		      uint32_t owner, const struct vgpu_ledger_change *c,
		      struct vgpu_ledger_tenant *after, char *err,
		      size_t errlen)
{
	struct vgpu_ledger_tenant *ten;
	uint64_t key;
	int t, rc;

	t = vgpu__tenant_find(l, tenant, &key);
	if (t < 0)
		return no_tenant(l, tenant, err, errlen);
	ten = &l->tenants[t];
	rc = vgpu__tenant_lock_until(l, (uint32_t)t, owner, vgpu__deadline(),
				     &ten->key, key);
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		return held(l, (uint32_t)t, tenant, err, errlen);
	if (rc)		/* the record was reused meanwhile */
		return no_tenant(l, tenant, err, errlen);
	if (__atomic_load_n(&ten->key, __ATOMIC_SEQ_CST) != key ||
	    !vgpu__tenant_named(l, (uint32_t)t, tenant)) {
		vgpu__tenant_unlock(ten);
		return no_tenant(l, tenant, err, errlen);
	}
	apply(ten, c);
	if (after)
		memcpy(after, ten, sizeof(*after));
	vgpu__tenant_unlock(ten);
	return 0;
}

int vgpu_ledger_ctl_set(struct vgpu_ledger *l, const char *tenant,
			const struct vgpu_ledger_change *c,
			struct vgpu_ledger_tenant *after, char *err,
			size_t errlen)
{
	uint32_t owner;
	int i, rc;

	if (err && errlen)
		err[0] = '\0';
	if (!l || !c)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
					"no ledger or no change");
	rc = check(tenant, c, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&l->mu);
	i = vgpu__slot_borrow(l, c->pid, c->host_pid, &owner);
	if (i < 0) {
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_EFULL,
			"ledger '%s' is full: all %d process slots are in use "
			"by live processes (one is needed to take the tenant's "
			"lock)", l->path, VGPU_LEDGER_MAX_SLOTS);
		goto out_unlock;
	}
	rc = set_locked(l, tenant, owner, c, after, err, errlen);
	vgpu__slot_unlock(l, (uint32_t)i);
out_unlock:
	pthread_mutex_unlock(&l->mu);
	return rc;
}

uint64_t vgpu_ledger_ctl_changes(const struct vgpu_slot *s)
{
	return __atomic_load_n(&s->ten->ctl_changes, __ATOMIC_ACQUIRE);
}

bool vgpu_ledger_suspended(const struct vgpu_slot *s)
{
	return __atomic_load_n(&s->ten->suspended, __ATOMIC_ACQUIRE) != 0;
}

void vgpu_ledger_slot_flags(struct vgpu_slot *s, uint32_t set, uint32_t clear)
{
	if (clear)
		__atomic_fetch_and(&s->rec->flags, ~clear, __ATOMIC_RELEASE);
	if (set)
		__atomic_fetch_or(&s->rec->flags, set, __ATOMIC_RELEASE);
}

void vgpu_ledger_slot_ack(struct vgpu_slot *s, uint64_t changes)
{
	__atomic_store_n(&s->rec->ctl_acked, changes, __ATOMIC_RELEASE);
}

uint32_t vgpu_ledger_slot_flags_get(const struct vgpu_slot *s)
{
	return __atomic_load_n(&s->rec->flags, __ATOMIC_ACQUIRE);
}
