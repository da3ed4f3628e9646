/* pool.c - stream-ordered pools: a pool's charge follows what it holds
 * (pool.h has the rule).
 *
 * The table: an entry per pool, found by handle without a lock; pools_lock
 * guards registering, draining and freeing entries; an entry's own lock
 * (taken after pools_lock) guards what it was charged. A settle takes a
 * ticket before it reads the driver, and applies its reading only if no
 * later ticket's was applied, so every change is followed by a settle
 * that began after it.
 */
#include "pool.h"
#include "log.h"
#include "options.h"

#include <pthread.h>
#include <stddef.h>

#define MAX_POOLS 2048

struct pool {
	uint64_t handle;	/* 0: free entry */
	int dev;
	uint64_t charged;	/* bytes charged for it, under lock */
	uint64_t reads;		/* settles begun, atomic */
	uint64_t applied;	/* the latest settle applied, under lock */
	pthread_mutex_t lock;	/* charged, applied; after pools_lock */
	unsigned live;		/* its allocations the front end counted */
	bool draining;		/* destroyed with live allocations */
	bool destroyable;	/* not the device's default pool */
	bool host;		/* host memory: nothing to charge */
};

static struct pool pools[MAX_POOLS];
static int npools;		/* entries in use or once used, atomic */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct vgpu_pool_ops *ops;

void vgpu_pools_use(const struct vgpu_pool_ops *o)
{
	__atomic_store_n(&ops, o, __ATOMIC_RELEASE);
}

int vgpu_pool_find(uint64_t h)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);

	for (int i = 0; h && i < n; i++)
		if (__atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE) == h)
			return i;
	return -1;
}

/* A free entry for h, set up; pools_lock held. -1 if full. */
static int pool_new(uint64_t h, int dev, bool host, bool destroyable)
{
	int i;

	for (i = 0; i < npools && (pools[i].handle || pools[i].draining); i++)
		;
	if (i == MAX_POOLS)
		return -1;
	if (i == npools)	/* first use of the entry */
		pthread_mutex_init(&pools[i].lock, NULL);
	pthread_mutex_lock(&pools[i].lock);
	pools[i].charged = 0;
	pthread_mutex_unlock(&pools[i].lock);
	pools[i].dev = dev;
	pools[i].live = 0;
	pools[i].destroyable = destroyable;
	pools[i].host = host;
	__atomic_store_n(&pools[i].handle, h, __ATOMIC_RELEASE);
	if (i == npools)
		__atomic_store_n(&npools, i + 1, __ATOMIC_RELEASE);
	return i;
}

void vgpu_pools_full(void)
{
	static int said;

	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		vgpu_log(VGPU_LOG_ERROR, "more than %d stream-ordered pools in "
			 "this process: new pools are refused (out of "
			 "memory), since what they hold could not be charged",
			 MAX_POOLS);
}

uint64_t vgpu_pool_admission(uint64_t bytes)
{
	uint64_t r = bytes + (VGPU_POOL_GROWTH - 1);

	return r < bytes ? bytes : r & ~(VGPU_POOL_GROWTH - 1);
}

int vgpu_pool_index(uint64_t h, int dev, bool host)
{
	const struct vgpu_pool_ops *o = __atomic_load_n(&ops,
							__ATOMIC_ACQUIRE);
	bool destroyable;
	int i = vgpu_pool_find(h);

	if (i >= 0 || !h || !o)
		return i;
	/* Asked of the driver before the lock is taken. */
	destroyable = host || !o->is_default(h, dev);
	pthread_mutex_lock(&pools_lock);
	i = vgpu_pool_find(h);
	if (i < 0)
		i = pool_new(h, host ? -1 : dev, host, destroyable);
	pthread_mutex_unlock(&pools_lock);
	return i;
}

static bool valid(int i)
{
	return i >= 0 && i < MAX_POOLS;
}

int vgpu_pool_dev(int i)
{
	return valid(i) && !pools[i].host ? pools[i].dev : -1;
}

bool vgpu_pool_destroyable(int i)
{
	return valid(i) && pools[i].destroyable;
}

/* Applies reading held of ticket to pool i (handle h); true if it gave
 * bytes back. */
static bool settle_apply(struct pool *pl, uint64_t h, uint64_t ticket,
			 uint64_t held, struct vgpu_slot *slot)
{
	uint64_t old;

	pthread_mutex_lock(&pl->lock);
	/* A read older than one applied already, or of a pool destroyed
	 * since, is dropped. */
	if (ticket < pl->applied ||
	    __atomic_load_n(&pl->handle, __ATOMIC_ACQUIRE) != h) {
		pthread_mutex_unlock(&pl->lock);
		return false;
	}
	pl->applied = ticket;
	old = pl->charged;
	pl->charged = held;
	if (held > old)
		vgpu_ledger_charge(slot, VGPU_USAGE_POOL, held - old);
	else if (held < old)
		vgpu_ledger_release(slot, VGPU_USAGE_POOL, old - held);
	pthread_mutex_unlock(&pl->lock);
	return held < old;
}

bool vgpu_pool_settle(int i)
{
	const struct vgpu_pool_ops *o = __atomic_load_n(&ops,
							__ATOMIC_ACQUIRE);
	struct vgpu_slot *slot;
	uint64_t h, held = 0, ticket;

	if (!valid(i) || !o || pools[i].host)
		return false;
	h = __atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE);
	slot = h ? o->slot(pools[i].dev) : NULL;
	if (!slot)
		return false;
	ticket = __atomic_add_fetch(&pools[i].reads, 1, __ATOMIC_ACQ_REL);
	if (!o->reserved(h, &held))
		return false;
	return settle_apply(&pools[i], h, ticket, held, slot);
}

bool vgpu_pools_settle_device(int dev)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
	bool freed = false;

	for (int i = 0; i < n; i++)
		if (pools[i].dev == dev)
			freed |= vgpu_pool_settle(i);
	return freed;
}

bool vgpu_pools_reclaim(int dev)
{
	const struct vgpu_pool_ops *o = __atomic_load_n(&ops,
							__ATOMIC_ACQUIRE);
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
	bool freed = false;

	for (int i = 0; o && i < n; i++) {
		uint64_t h = __atomic_load_n(&pools[i].handle,
					     __ATOMIC_ACQUIRE);

		if (pools[i].dev != dev || !h || pools[i].host)
			continue;
		o->trim(h);
		freed |= vgpu_pool_settle(i);
	}
	return freed;
}

void vgpu_pool_live(int i)
{
	if (valid(i))
		__atomic_add_fetch(&pools[i].live, 1, __ATOMIC_ACQ_REL);
}

/* Gives back what a drained pool was charged and frees its entry;
 * pools_lock held. */
static void drain(int i)
{
	const struct vgpu_pool_ops *o = __atomic_load_n(&ops,
							__ATOMIC_ACQUIRE);
	uint64_t old;

	pthread_mutex_lock(&pools[i].lock);
	old = pools[i].charged;
	pools[i].charged = 0;
	__atomic_store_n(&pools[i].handle, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pools[i].lock);
	if (old && o && !pools[i].host)
		o->uncharge(pools[i].dev, old);
	pools[i].draining = false;
}

bool vgpu_pool_unlive(int i)
{
	bool drained = false;

	if (!valid(i))
		return false;
	if (__atomic_sub_fetch(&pools[i].live, 1, __ATOMIC_ACQ_REL) == 0 &&
	    __atomic_load_n(&pools[i].draining, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&pools_lock);
		if (pools[i].draining && pools[i].live == 0) {
			drain(i);
			drained = true;
		}
		pthread_mutex_unlock(&pools_lock);
	}
	return drained;
}

void vgpu_pool_freed(int i)
{
	if (valid(i) && !vgpu_pool_unlive(i))
		vgpu_pool_settle(i);
}

void vgpu_pool_destroyed(int i)
{
	if (!valid(i))
		return;
	pthread_mutex_lock(&pools_lock);
	if (__atomic_load_n(&pools[i].live, __ATOMIC_ACQUIRE) == 0) {
		drain(i);
	} else {
		__atomic_store_n(&pools[i].draining, true, __ATOMIC_RELEASE);
		__atomic_store_n(&pools[i].handle, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&pools_lock);
}

void vgpu_pools_fork_child(void)
{
	pthread_mutex_init(&pools_lock, NULL);
	for (int i = 0; i < npools; i++)
		pthread_mutex_init(&pools[i].lock, NULL);
	for (int i = 0; i < MAX_POOLS; i++) {
		pools[i].handle = 0;
		pools[i].charged = 0;
		pools[i].live = 0;
		pools[i].draining = false;
		pools[i].destroyable = false;
		pools[i].host = false;
	}
	npools = 0;
}
