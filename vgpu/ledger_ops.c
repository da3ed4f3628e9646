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

static bool over(uint64_t used, uint64_t limit, uint64_t bytes)
{
	return used > limit || bytes > limit - used;
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
	return 0;
}

/* Under the lock: gives back at most what the slot holds of `kind`. */
static void uncharge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	struct vgpu_ledger_tenant *ten = s->ten;
	struct vgpu_ledger_slot *r = s->rec;
	uint64_t have = vgpu__ld(&r->usage[kind]);

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

static inline int lock(struct vgpu_slot *s)
{
	if (vgpu__tenant_lock(s->l, s->tenant_index, s->owner))
		return VGPU_LEDGER_ETIMEDOUT;
	if (__builtin_expect(__atomic_load_n(&s->deferred_any,
					     __ATOMIC_ACQUIRE), 0))
		apply_deferred(s);
	return 0;
}

static int locked_charge(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	int rc = lock(s);

	if (rc)
		return rc;
	rc = charge(s, kind, bytes);
	vgpu__tenant_unlock(s->ten);
	return rc;
}

int vgpu_ledger_reserve(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	int rc;

	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return VGPU_LEDGER_EINVAL;
	if (bytes == 0)
		return 0;
	rc = locked_charge(s, kind, bytes);
	if (__builtin_expect(rc != VGPU_LEDGER_EOVERLIMIT, 1))
		return rc;
	if (vgpu__reclaim_tenant(s->l, s->tenant_index) > 0)
		rc = locked_charge(s, kind, bytes);
	if (rc == VGPU_LEDGER_EOVERLIMIT)
		__atomic_fetch_add(&s->rec->failures, 1, __ATOMIC_RELAXED);
	return rc;
}

void vgpu_ledger_release(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	if ((unsigned)kind >= VGPU_USAGE_COUNT || bytes == 0)
		return;
	if (lock(s) != 0) {
		__atomic_fetch_add(&s->deferred[kind], bytes, __ATOMIC_ACQ_REL);
		__atomic_store_n(&s->deferred_any, 1, __ATOMIC_RELEASE);
		return;
	}
	uncharge(s, kind, bytes);
	vgpu__add(&s->rec->frees, 1);
	vgpu__tenant_unlock(s->ten);
}

int vgpu__ledger_lock(struct vgpu_slot *s)
{
	return lock(s);
}

void vgpu__ledger_unlock(struct vgpu_slot *s)
{
	vgpu__tenant_unlock(s->ten);
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
	if ((unsigned)kind >= VGPU_USAGE_COUNT)
		return VGPU_LEDGER_EINVAL;
	if (bytes == 0)
		return 0;
	if (lock(s) != 0)
		return VGPU_LEDGER_ETIMEDOUT;
	if (VGPU_USAGE_IS_DEVICE(kind))
		vgpu__add(&s->ten->used, bytes);
	vgpu__add(&s->ten->usage[kind], bytes);
	vgpu__add(&s->rec->usage[kind], bytes);
	vgpu__tenant_unlock(s->ten);
	return 0;
}
