/* account.h - the one protocol by which device memory is charged:
 *
 *   vgpu_account_reserve    before the driver is asked (refused: the
 *                           driver is not called)
 *   the driver's call       by the front end
 *   vgpu_account_rollback   when the driver refused
 *   vgpu_account_adjust     when the driver took another size than was
 *                           reserved (a pitch, an array's layout)
 *
 * and the charge is given back by vgpu_account_rollback when the object is
 * freed. Every allocating hook of every front end goes through these; the
 * front end only remembers what each object was charged.
 *
 * Vendor-neutral: results are VGPU_ACCOUNT_*, which each front end maps to
 * its own error codes; the driver is reached through prim.h.
 */
#ifndef VGPU_ACCOUNT_H
#define VGPU_ACCOUNT_H

#include "ledger.h"
#include "prim.h"

#include <stdint.h>

enum vgpu_account_rc {
	VGPU_ACCOUNT_OK = 0,
	VGPU_ACCOUNT_OVER,	/* past the tenant's limit */
	VGPU_ACCOUNT_TIMEOUT,	/* the tenant's lock not had within its bound */
	VGPU_ACCOUNT_INVALID,	/* a bad kind: a bug of the caller */
};

/* The front end's primitives, set once before the first reservation (not
 * set: reservations are never retried after a reclaim). */
void vgpu_account_use(const struct vgpu_prim *prim);

/* Reserves bytes of kind for s's tenant on device dev. The ledger's check
 * and charge are one atomic step (past the limit, the usage of the
 * tenant's dead processes is reclaimed and it is tried again there); still
 * past the limit, the device's caches are reclaimed (prim->reclaim) and it
 * is tried once more. 0 bytes always succeed. */
int vgpu_account_reserve(struct vgpu_slot *s, int dev, int kind,
			 uint64_t bytes);

/* Gives back bytes of kind: a reservation the driver refused, or an
 * object's charge when it is freed. Never fails (a lock not had in time
 * defers it: the ledger applies it at its next locked step). */
void vgpu_account_rollback(struct vgpu_slot *s, int kind, uint64_t bytes);

/* The driver took actual bytes where *charged were reserved: the charge
 * follows (reserving the difference, or giving it back) and *charged
 * becomes actual. Past the limit (or the lock not had) nothing changes
 * and the result says why: the caller frees the object and rolls back
 * *charged. actual 0 means the driver did not say: nothing changes. */
int vgpu_account_adjust(struct vgpu_slot *s, int dev, int kind,
			uint64_t *charged, uint64_t actual);

#endif
