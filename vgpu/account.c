/* account.c - reserve, roll back, adjust: the accounting protocol
 * (account.h), over the ledger and the front end's primitives (prim.h).
 */
#include "account.h"

static const struct vgpu_prim *prim;

void vgpu_account_use(const struct vgpu_prim *p)
{
	__atomic_store_n(&prim, p, __ATOMIC_RELEASE);
}

static int result(int rc)
{
	switch (rc) {
	case 0:
		return VGPU_ACCOUNT_OK;
	case VGPU_LEDGER_EOVERLIMIT:
		return VGPU_ACCOUNT_OVER;
	case VGPU_LEDGER_ETIMEDOUT:
		return VGPU_ACCOUNT_TIMEOUT;
	default:
		return VGPU_ACCOUNT_INVALID;
	}
}

int vgpu_account_reserve(struct vgpu_slot *s, int dev, int kind,
			 uint64_t bytes)
{
	const struct vgpu_prim *p = __atomic_load_n(&prim, __ATOMIC_ACQUIRE);
	int rc = vgpu_ledger_reserve(s, kind, bytes);

	if (__builtin_expect(rc != VGPU_LEDGER_EOVERLIMIT, 1))
		return result(rc);
	if (!p || !p->reclaim || !p->reclaim(dev))
		return VGPU_ACCOUNT_OVER;
	return result(vgpu_ledger_reserve(s, kind, bytes));
}

void vgpu_account_rollback(struct vgpu_slot *s, int kind, uint64_t bytes)
{
	vgpu_ledger_release(s, kind, bytes);
}

int vgpu_account_adjust(struct vgpu_slot *s, int dev, int kind,
			uint64_t *charged, uint64_t actual)
{
	int rc;

	if (actual == 0 || actual == *charged)
		return VGPU_ACCOUNT_OK;
	if (actual < *charged) {
		vgpu_ledger_release(s, kind, *charged - actual);
	} else {
		rc = vgpu_account_reserve(s, dev, kind, actual - *charged);
		if (rc != VGPU_ACCOUNT_OK)
			return rc;
	}
	*charged = actual;
	return VGPU_ACCOUNT_OK;
}
