/* pools.c - stream-ordered allocation: what a pool really holds is charged.
 *
 * A pool keeps memory reserved after its allocations are freed (up to its
 * release threshold, until a synchronisation or a trim), so the charge of a
 * pool is its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, read after every
 * allocation, free and trim through the shim ("settling" the pool) and when
 * the views are read. An allocation is admitted by reserving its size
 * first; the pool's growth is charged when it is settled, and the
 * reservation given back after that, so the ledger never shows less than
 * the pool holds. The pool may overshoot the slice by its rounding (the
 * driver's granularity), never by a whole allocation.
 *
 * A pool destroyed while allocations from it live keeps its memory until
 * they are freed (the driver's rule): its entry then drains, keeping the
 * charge it had, and gives it back when the last of its allocations the
 * shim counted is freed.
 */
#include "devices.h"
#include "track.h"

#include <pthread.h>

#define MAX_POOLS 2048

struct pool {
	uint64_t handle;	/* CUmemoryPool; 0: free entry */
	int dev;
	uint64_t charged;	/* bytes charged for it, under lock */
	uint64_t reads;		/* settles begun, atomic */
	uint64_t applied;	/* the latest settle applied, under lock */
	pthread_mutex_t lock;	/* charged, applied; after pools_lock */
	unsigned live;		/* its allocations the shim counted, atomic */
	bool draining;		/* destroyed with live allocations */
	bool destroyable;	/* not the device's default pool */
};

static struct pool pools[MAX_POOLS];
static int npools;		/* entries in use or once used, atomic */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* The index of pool p of device dev, registered now if new; -1 if full. */
static int pool_index(CUmemoryPool p, int dev)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE), i;

	CUmemoryPool def = NULL;
	bool destroyable;

	for (i = 0; i < n; i++)
		if (__atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE) ==
		    (uint64_t)(uintptr_t)p)
			return i;
	/* Asked of the driver before the lock is taken. */
	destroyable = !vgpu__real.cuDeviceGetDefaultMemPool ||
		      vgpu__real.cuDeviceGetDefaultMemPool(&def, dev) !=
			      CUDA_SUCCESS || def != p;
	pthread_mutex_lock(&pools_lock);
	for (i = 0; i < npools; i++)
		if (pools[i].handle == (uint64_t)(uintptr_t)p)
			break;
	if (i == npools) {
		for (i = 0; i < npools && (pools[i].handle ||
					      pools[i].draining); i++)
			;
		if (i < MAX_POOLS) {
			if (i == npools)	/* first use of the entry */
				pthread_mutex_init(&pools[i].lock, NULL);
			pthread_mutex_lock(&pools[i].lock);
			pools[i].charged = 0;
			pthread_mutex_unlock(&pools[i].lock);
			pools[i].dev = dev;
			pools[i].live = 0;
			pools[i].destroyable = destroyable;
			__atomic_store_n(&pools[i].handle,
					 (uint64_t)(uintptr_t)p,
					 __ATOMIC_RELEASE);
			if (i == npools)
				__atomic_store_n(&npools, i + 1,
						 __ATOMIC_RELEASE);
		} else {
			i = -1;
		}
	}
	pthread_mutex_unlock(&pools_lock);
	return i;
}

/* Charges pool i for what it holds now; true if that gave bytes back. */
/* Charges pool i for what it holds now; true if that gave bytes back. */
bool vgpu__pool_settle(int i)
{
	struct pool *pl;
	struct vgpu_dev *dv;
	cuuint64_t held = 0;
	uint64_t old, ticket;

	if (i < 0 || i >= MAX_POOLS || !vgpu__real.cuMemPoolGetAttribute)
		return false;
	pl = &pools[i];
	uint64_t h = __atomic_load_n(&pl->handle, __ATOMIC_ACQUIRE);
	dv = vgpu__dev_peek(pl->dev);
	if (!h || !dv || !dv->slot)
		return false;
	ticket = __atomic_add_fetch(&pl->reads, 1, __ATOMIC_ACQ_REL);
	if (vgpu__real.cuMemPoolGetAttribute((CUmemoryPool)(uintptr_t)h,
					     CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
					     &held) != CUDA_SUCCESS)
		return false;
	pthread_mutex_lock(&pl->lock);
	/* A read older than one applied already, or of a pool destroyed
	 * since, is dropped: every change is followed by a settle that
	 * began after it. */
	if (ticket < pl->applied ||
	    __atomic_load_n(&pl->handle, __ATOMIC_ACQUIRE) != h) {
		pthread_mutex_unlock(&pl->lock);
		return false;
	}
	pl->applied = ticket;
	old = pl->charged;
	pl->charged = held;
	if (held > old)
		vgpu_ledger_charge(dv->slot, VGPU_USAGE_POOL, held - old);
	else if (held < old)
		vgpu_ledger_release(dv->slot, VGPU_USAGE_POOL, old - held);
	pthread_mutex_unlock(&pl->lock);
	return held < old;
}

bool vgpu__pools_settle_device(int ordinal)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
	bool freed = false;

	for (int i = 0; i < n; i++)
		if (pools[i].dev == ordinal)
			freed |= vgpu__pool_settle(i);
	return freed;
}

/* What an allocation of bytes may add to what pool i holds: nothing when
 * the pool's idle memory covers it (a reuse is never refused). */
static uint64_t pool_growth(int i, uint64_t bytes)
{
	cuuint64_t reserved = 0, used = 0;
	CUmemoryPool p = (CUmemoryPool)(uintptr_t)
		__atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE);

	if (vgpu__real.cuMemPoolGetAttribute(p,
			CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
		    CUDA_SUCCESS ||
	    vgpu__real.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
					     &used) != CUDA_SUCCESS ||
	    used > reserved)
		return bytes;
	return reserved - used >= bytes ? 0 : bytes - (reserved - used);
}

static bool over_limit(struct vgpu_dev *dv)
{
	return vgpu_ledger_tenant_used(dv->slot) >
	       vgpu_ledger_tenant_limit(dv->slot);
}

/* An allocation admitted as a reuse of idle memory that the idle memory
 * did not hold, and the tenant is now past its limit: the allocation is
 * freed, the stream waited for, and the pool's idle memory given back to
 * the device. CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult undo(struct vgpu_dev *dv, int i, CUdeviceptr p, CUstream s,
		     int per_thread)
{
	CUmemoryPool pool = (CUmemoryPool)(uintptr_t)
		__atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE);

	if (per_thread) {
		vgpu__real.cuMemFreeAsync_ptsz(p, s);
		vgpu__real.cuStreamSynchronize_ptsz(s);
	} else {
		vgpu__real.cuMemFreeAsync(p, s);
		vgpu__real.cuStreamSynchronize(s);
	}
	if (vgpu__real.cuMemPoolTrimTo)
		vgpu__real.cuMemPoolTrimTo(pool, 0);
	vgpu__pool_settle(i);
	vgpu_log(VGPU_LOG_DEBUG, "device %d: a pool allocation grew the pool "
		 "past the slice (its idle memory too fragmented to hold it): "
		 "refused", dv->ordinal);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t bytesize,
			   CUmemoryPool pool, CUstream hStream, int per_thread,
			   bool explicit_pool)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	CUresult r;
	int i = -1;

	if (dv && dv->slot && dptr && bytesize > 0) {
		if (!explicit_pool &&
		    (!vgpu__real.cuDeviceGetMemPool ||
		     vgpu__real.cuDeviceGetMemPool(&pool, dv->ordinal) !=
			     CUDA_SUCCESS))
			pool = NULL;
		if (pool)
			i = pool_index(pool, dv->ordinal);
	}
	uint64_t admit = 0;

	if (i >= 0) {
		admit = pool_growth(i, bytesize);
		r = vgpu__charge(dv, VGPU_USAGE_POOL, admit);
		if (r != CUDA_SUCCESS)
			return r;
	} else if (dv && dv->state == VGPU_DEV_FAILED) {
		return CUDA_ERROR_INVALID_DEVICE;
	} else if (dv && dv->slot && dptr && bytesize > 0) {
		/* A pool the shim cannot follow: charged as a buffer. */
		r = vgpu__charge(dv, VGPU_USAGE_BUFFER, bytesize);
		if (r != CUDA_SUCCESS)
			return r;
	}
	if (explicit_pool)
		r = per_thread
		    ? vgpu__real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize,
							      pool, hStream)
		    : vgpu__real.cuMemAllocFromPoolAsync(dptr, bytesize, pool,
							 hStream);
	else
		r = per_thread
		    ? vgpu__real.cuMemAllocAsync_ptsz(dptr, bytesize, hStream)
		    : vgpu__real.cuMemAllocAsync(dptr, bytesize, hStream);
	if (!dv || !dv->slot || !dptr || bytesize == 0)
		return r;
	if (i >= 0) {
		vgpu__pool_settle(i);
		vgpu__uncharge(dv, VGPU_USAGE_POOL, admit);
		/* Admitted (in part) as a reuse of idle memory, and the
		 * tenant is past its limit now: the idle memory did not hold
		 * it (fragmented, or taken by another thread's allocation
		 * admitted the same way). */
		if (r == CUDA_SUCCESS && admit < bytesize && over_limit(dv)) {
			r = undo(dv, i, *dptr, hStream, per_thread);
			*dptr = 0;
			return r;
		}
	} else if (r != CUDA_SUCCESS) {
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, bytesize);
	}
	if (r == CUDA_SUCCESS && i >= 0)
		__atomic_add_fetch(&pools[i].live, 1, __ATOMIC_ACQ_REL);
	if (r == CUDA_SUCCESS) {
		struct vgpu_tracked t = {
			bytesize, i >= 0 ? VGPU_USAGE_POOL : VGPU_USAGE_BUFFER,
			(unsigned)dv->ordinal, i >= 0 ? (unsigned)i : 0 };
		if (!vgpu__track_insert(VGPU_TRACK_PTR, *dptr, &t))
			vgpu_log(VGPU_LOG_WARN, "the allocation table is full: "
				 "%zu bytes stay charged after their free",
				 bytesize);
	}
	return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, NULL, hStream, 0, false);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
			      CUstream hStream)
{
	if (!vgpu__real.cuMemAllocAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, NULL, hStream, 1, false);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
				 CUmemoryPool pool, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocFromPoolAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, pool, hStream, 0, true);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
				      CUmemoryPool pool, CUstream hStream)
{
	if (!vgpu__real.cuMemAllocFromPoolAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return alloc_from(dptr, bytesize, pool, hStream, 1, true);
}

static void pool_freed_async(int i, CUstream s, int per_thread);

static CUresult free_async(CUdeviceptr dptr, CUstream hStream, int per_thread)
{
	struct vgpu_tracked t;
	bool known = vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t);
	CUresult r = per_thread ? vgpu__real.cuMemFreeAsync_ptsz(dptr, hStream)
				: vgpu__real.cuMemFreeAsync(dptr, hStream);

	if (!known)
		return r;
	if (r != CUDA_SUCCESS) {
		vgpu__track_insert(VGPU_TRACK_PTR, dptr, &t);
		return r;
	}
	if (t.kind == VGPU_USAGE_POOL)
		pool_freed_async((int)t.aux, hStream, per_thread);
	else	/* cuMemAlloc memory freed in stream order */
		vgpu__uncharge(vgpu__dev_peek((int)t.dev), (int)t.kind,
			       t.bytes);
	return r;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	if (!vgpu__real.cuMemFreeAsync)
		return CUDA_ERROR_NOT_INITIALIZED;
	return free_async(dptr, hStream, 0);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	if (!vgpu__real.cuMemFreeAsync_ptsz)
		return CUDA_ERROR_NOT_INITIALIZED;
	return free_async(dptr, hStream, 1);
}

static int find_pool(CUmemoryPool p)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);

	for (int i = 0; i < n; i++)
		if (__atomic_load_n(&pools[i].handle, __ATOMIC_ACQUIRE) ==
		    (uint64_t)(uintptr_t)p)
			return i;
	return -1;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult r;

	if (!vgpu__real.cuMemPoolTrimTo)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemPoolTrimTo(pool, minBytesToKeep);
	if (r == CUDA_SUCCESS)
		vgpu__pool_settle(find_pool(pool));
	return r;
}

/* Gives back what a drained pool was charged and frees its entry;
 * pools_lock held. */
static void drain(int i)
{
	uint64_t old;

	pthread_mutex_lock(&pools[i].lock);
	old = pools[i].charged;
	pools[i].charged = 0;
	__atomic_store_n(&pools[i].handle, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pools[i].lock);
	vgpu__uncharge(vgpu__dev_peek(pools[i].dev), VGPU_USAGE_POOL, old);
	pools[i].draining = false;
}

/* One allocation of pool i fewer; true when that drained the destroyed
 * pool. Makes no driver call (it runs in a stream's host function too). */
static bool unlive(int i)
{
	bool drained = false;

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

void vgpu__pool_freed(int i)
{
	if (i < 0 || i >= MAX_POOLS)
		return;
	if (!unlive(i))
		vgpu__pool_settle(i);
}

/* A stream reached a free of a destroyable pool's allocation. */
static void CUDA_CB freed_in_order(void *arg)
{
	unlive((int)(intptr_t)arg);
}

/* cuMemFreeAsync of pool i's allocation: a pool that can be destroyed
 * keeps its memory until the stream reaches the free, so that is when
 * the allocation stops counting (a host function on the stream); the
 * default pool, which cannot be destroyed, is settled at once. */
static void pool_freed_async(int i, CUstream s, int per_thread)
{
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;

	if (i < 0 || i >= MAX_POOLS)
		return;
	vgpu__pool_settle(i);
	if (!pools[i].destroyable)
		goto now;
	if (per_thread && vgpu__real.cuLaunchHostFunc_ptsz)
		r = vgpu__real.cuLaunchHostFunc_ptsz(s, freed_in_order,
						     (void *)(intptr_t)i);
	else if (!per_thread && vgpu__real.cuLaunchHostFunc)
		r = vgpu__real.cuLaunchHostFunc(s, freed_in_order,
						(void *)(intptr_t)i);
	if (r == CUDA_SUCCESS)
		return;
now:
	unlive(i);
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	int i = find_pool(pool);
	CUresult r;

	if (!vgpu__real.cuMemPoolDestroy)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* What it holds now is what it keeps while allocations live. */
	vgpu__pool_settle(i);
	r = vgpu__real.cuMemPoolDestroy(pool);
	if (r != CUDA_SUCCESS || i < 0)
		return r;
	pthread_mutex_lock(&pools_lock);
	if (__atomic_load_n(&pools[i].live, __ATOMIC_ACQUIRE) == 0) {
		drain(i);
	} else {
		__atomic_store_n(&pools[i].draining, true, __ATOMIC_RELEASE);
		__atomic_store_n(&pools[i].handle, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&pools_lock);
	return r;
}

void vgpu__pools_fork_child(void)
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
	}
	npools = 0;
}
