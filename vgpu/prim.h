/* prim.h - the driver as the core sees it: the few things the core's
 * accounting policy must ask of the device, with their contracts.
 *
 * Each vendor's front end fills a struct vgpu_prim over its table of the
 * real driver's functions (intercept/prim.c for CUDA) and hands it to the
 * core once (vgpu_account_use); the core's tests hand it a fake driver
 * (tests/vgpu/test_account.c), so the policy is tested without a device.
 *
 * Common contract: a primitive may call the driver and may take the
 * front end's own locks, never a ledger lock; the core never calls one
 * with a ledger lock held; each returns in bounded time. A NULL primitive
 * means the driver cannot do it: the core goes on without.
 */
#ifndef VGPU_PRIM_H
#define VGPU_PRIM_H

#include <stdbool.h>

struct vgpu_prim {
	/* Makes device dev's charges follow what its caches really hold:
	 * memory a cache keeps without using it (a stream-ordered pool
	 * keeps freed blocks until it is trimmed or synchronised) is read
	 * again from the driver and the difference given back. Returns true
	 * if any of the tenant's charge was given back (then a refused
	 * reservation is worth trying again), false if nothing changed. */
	bool (*reclaim)(int dev);
};

#endif
