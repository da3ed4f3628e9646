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
 * driver's granularity), never by a whole allocation. An allocation is
 * admitted only when its whole size fits, whatever the pool holds idle (idle
 * memory in pieces may not hold it); at the slice's edge the core asks the
 * pools of the device to give their idle memory back (vgpu__pools_reclaim)
 * and tries once more. An allocation counts as live from before the driver
 * is asked, so a pool destroyed meanwhile keeps its charge.
 *
 * A pool destroyed while allocations from it live keeps its memory until
 * they are freed (the driver's rule): its entry then drains, keeping the
 * charge it had, and gives it back when the last of its allocations the
 * shim counted is freed.
 */
#include "devices.h"
#include "share.h"
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
	bool host;		/* host memory: nothing to charge */
};

static struct pool pools[MAX_POOLS];
static int npools;		/* entries in use or once used, atomic */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* The index of pool p of device dev (host: a host pool), registered now
 * if new; -1 if full. */
static int pool_index(CUmemoryPool p, int dev, bool host)
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
			pools[i].host = host;
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

/* At the slice's edge: every pool of the device gives back the memory it
 * keeps idle (trimmed to what its allocations use), then is settled. True
 * if any charge fell. */
bool vgpu__pools_reclaim(int ordinal)
{
	int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
	bool freed = false;

	for (int i = 0; i < n; i++) {
		uint64_t h = __atomic_load_n(&pools[i].handle,
					     __ATOMIC_ACQUIRE);

		if (pools[i].dev != ordinal || !h || pools[i].host)
			continue;
		if (vgpu__real.cuMemPoolTrimTo)
			vgpu__real.cuMemPoolTrimTo((CUmemoryPool)(uintptr_t)h,
						   0);
		freed |= vgpu__pool_settle(i);
	}
	return freed;
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

static int find_pool(CUmemoryPool p);

/* The pool an allocation is made from, registered; -1 when the shim
 * cannot follow it. */
static int pool_of(struct vgpu_dev *dv, CUmemoryPool pool, bool explicit_pool)
{
	int i;

	if (!explicit_pool &&
	    (!vgpu__real.cuDeviceGetMemPool ||
	     vgpu__real.cuDeviceGetMemPool(&pool, dv->ordinal) != CUDA_SUCCESS))
		return -1;
	if (!pool)
		return -1;
	/* A pool made through the shim is registered with its own device
	 * (cuMemPoolCreate); others are the current device's. */
	i = find_pool(pool);
	return i >= 0 ? i : pool_index(pool, dv->ordinal, false);
}

static CUresult call_alloc(CUdeviceptr *dptr, size_t bytesize,
			   CUmemoryPool pool, CUstream hStream, int per_thread,
			   bool explicit_pool)
{
	if (explicit_pool)
		return per_thread
		       ? vgpu__real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize,
								 pool, hStream)
		       : vgpu__real.cuMemAllocFromPoolAsync(dptr, bytesize, pool,
							    hStream);
	return per_thread
	       ? vgpu__real.cuMemAllocAsync_ptsz(dptr, bytesize, hStream)
	       : vgpu__real.cuMemAllocAsync(dptr, bytesize, hStream);
}

/* A captured allocation is an allocation node: the pool does not grow,
 * and graphs.c charges the graph's memory per executable graph. */
static bool capturing(CUstream s, int per_thread)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (!vgpu__real.cuStreamIsCapturing)
		return false;
	if (!s && per_thread)
		s = CU_STREAM_PER_THREAD;
	return vgpu__real.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
	       st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t bytesize,
			   CUmemoryPool pool, CUstream hStream, int per_thread,
			   bool explicit_pool)
{
	struct vgpu_dev *dv = vgpu__dev_current(), *pdv;
	CUresult r;
	int i;

	if (dv && dv->state == VGPU_DEV_FAILED)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!dv || !dv->slot || !dptr || bytesize == 0 ||
	    capturing(hStream, per_thread))
		return call_alloc(dptr, bytesize, pool, hStream, per_thread,
				  explicit_pool);
	i = pool_of(dv, pool, explicit_pool);
	if (i < 0) {
		/* A pool the shim cannot follow: charged as a buffer. */
		uint64_t held = vgpu__alloc_size(bytesize);

		if ((r = vgpu__charge(dv, VGPU_USAGE_BUFFER, held)) !=
		    CUDA_SUCCESS)
			return r;
		r = call_alloc(dptr, bytesize, pool, hStream, per_thread,
			       explicit_pool);
		if (r != CUDA_SUCCESS)
			vgpu__uncharge(dv, VGPU_USAGE_BUFFER, held);
		else
			vgpu__track_charged(VGPU_TRACK_PTR, *dptr,
					    VGPU_USAGE_BUFFER, dv->ordinal,
					    held, 0);
		return r;
	}
	pdv = vgpu__dev_attach(pools[i].dev);
	if (pools[i].host || !pdv || !pdv->slot)
		return call_alloc(dptr, bytesize, pool, hStream, per_thread,
				  explicit_pool);
	/* The whole size is admitted; the pool's growth is charged when it
	 * is settled, and the admission given back after. */
	if ((r = vgpu__charge(pdv, VGPU_USAGE_POOL, bytesize)) != CUDA_SUCCESS)
		return r;
	__atomic_add_fetch(&pools[i].live, 1, __ATOMIC_ACQ_REL);
	r = call_alloc(dptr, bytesize, pool, hStream, per_thread,
		       explicit_pool);
	vgpu__pool_settle(i);
	vgpu__uncharge(pdv, VGPU_USAGE_POOL, bytesize);
	if (r != CUDA_SUCCESS) {
		vgpu__pool_freed(i);
		return r;
	}
	vgpu__track_charged(VGPU_TRACK_PTR, *dptr, VGPU_USAGE_POOL, pdv->ordinal,
			    bytesize, (unsigned)i);
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
	else if (t.kind == VGPU_USAGE_BUFFER && t.aux)	/* shared (IPC) */
		vgpu__share_gone(t.aux);
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

/* A pool is registered with its own device (not the current one), and a
 * host pool as host memory. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUresult r;

	if (!vgpu__real.cuMemPoolCreate)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemPoolCreate(pool, poolProps);
	if (r != CUDA_SUCCESS || !pool || !poolProps)
		return r;
	if (poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		pool_index(*pool, poolProps->location.id, false);
	else
		pool_index(*pool, -1, true);
	return r;
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
		pools[i].host = false;
	}
	npools = 0;
}
