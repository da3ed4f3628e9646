/* pool.h - stream-ordered pools: a pool's charge follows what it holds.
 *
 * The rule (issue 12): a pool keeps memory reserved after its allocations
 * are freed (up to its release threshold, until a synchronisation or a
 * trim), so the charge of a pool is what it reserves, read after every
 * allocation, free and trim through the front end ("settling" it) and
 * when the views are read. An allocation is admitted by the front end
 * reserving its whole size first (vgpu_account_reserve, kind POOL); the
 * pool's growth is charged when it is settled, and the admission given
 * back after that, so the ledger never shows less than the pool holds. A
 * pool's memory lives while the pool or any allocation from it lives: a
 * pool destroyed with live allocations drains, keeping its charge, and
 * gives it back when the last of them is freed.
 *
 * Vendor-neutral: pools are the driver's handles as uint64_t, devices
 * the front end's ordinals; the driver and the front end's devices are
 * reached through struct vgpu_pool_ops. One table per process (each front
 * end links its own copy of the core).
 */
#ifndef VGPU_POOL_H
#define VGPU_POOL_H

#include "ledger.h"

#include <stdbool.h>
#include <stdint.h>

struct vgpu_pool_ops {
	/* Whether pool h is device dev's default pool (never destroyed).
	 * Called with no lock held. */
	bool (*is_default)(uint64_t h, int dev);
	/* What pool h reserves now, in bytes: false if it cannot say. */
	bool (*reserved)(uint64_t h, uint64_t *bytes);
	/* Pool h gives back all the memory it keeps idle. */
	void (*trim)(uint64_t h);
	/* Device dev's ledger slot, NULL when it is not accounted; never
	 * attaches a device. */
	struct vgpu_slot *(*slot)(int dev);
	/* Gives back bytes of kind POOL charged to device dev (the front
	 * end's last step of the protocol). */
	void (*uncharge)(int dev, uint64_t bytes);
};

/* The front end's operations, set once before the first pool is
 * registered. */
void vgpu_pools_use(const struct vgpu_pool_ops *ops);

/* The index of pool h of device dev (host: a host pool, never charged),
 * registered now if new; -1 if the table is full or h is 0. A front end
 * refuses a pool it cannot register (its growth could not be charged),
 * saying so once (vgpu_pools_full). */
int vgpu_pool_index(uint64_t h, int dev, bool host);
/* Says, once per process, that the table of pools is full. */
void vgpu_pools_full(void);

/* The most a pool grows by for one allocation: its growth granularity
 * (2 MiB, the CUDA driver's and the simulators'). An allocation is
 * admitted at its size rounded up to it (vgpu_pool_admission), so that
 * allocations admitted at once, before any of them is settled, never
 * pass the slice together. */
#define VGPU_POOL_GROWTH ((uint64_t)2 << 20)
uint64_t vgpu_pool_admission(uint64_t bytes);
/* The index of pool h if registered, else -1. */
int vgpu_pool_find(uint64_t h);
/* Pool i's device, -1 for a host pool or a bad index. */
int vgpu_pool_dev(int i);
/* Whether pool i can be destroyed (not a device's default pool). */
bool vgpu_pool_destroyable(int i);

/* Charges pool i for what it holds now; true if that gave bytes back.
 * A read older than one applied already is dropped. */
bool vgpu_pool_settle(int i);
/* Every pool of device dev settled; true if any charge fell. */
bool vgpu_pools_settle_device(int dev);
/* At the slice's edge: every pool of device dev trimmed to what its
 * allocations use, then settled; true if any charge fell (a front end's
 * reclaim primitive). */
bool vgpu_pools_reclaim(int dev);

/* An allocation of pool i is being made: it counts as live from before
 * the driver is asked, so a pool destroyed meanwhile keeps its charge. */
void vgpu_pool_live(int i);
/* One allocation of pool i fewer, with no driver call (it may run in a
 * stream's callback); true when that drained the destroyed pool. */
bool vgpu_pool_unlive(int i);
/* An allocation of pool i freed (or refused): unlive, then settled if
 * the pool lives on. */
void vgpu_pool_freed(int i);
/* Pool i was destroyed by the driver: its charge given back now, or, with
 * allocations live, when the last of them is freed. Settle it before. */
void vgpu_pool_destroyed(int i);

/* In a forked child: the parent's pools forgotten. */
void vgpu_pools_fork_child(void);

#endif
