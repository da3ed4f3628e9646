/* overcommit.c - allocations past the slice spill to host memory instead of
 * failing (VGPU_OVERCOMMIT), within the tenant's host spill budget
 * (VGPU_HOST_SPILL_LIMIT). docs/overcommit.md describes the modes.
 *
 * managed: the allocation becomes managed memory advised to live on the
 *          host and to be accessed by the device; the driver pages it on
 *          demand. It stays spilled until freed.
 * host:    the allocation is a reserved virtual range backed by a
 *          host-located VMM handle, mapped for the device: the kernel reads
 *          it over the bus without faults. When room frees on the device
 *          (a free of this process), spilled ranges are promoted: at a safe
 *          point (the context synchronised), a device handle is filled from
 *          the host one through a scratch mapping and mapped at the same
 *          address, so pointers held by the job stay valid.
 *
 * Spilled bytes are charged to the SPILLED kind (host memory, not device
 * memory); promoted ones move to BUFFER. The spilled ranges of a process
 * are kept in a small table under a mutex: spilling and promoting are rare
 * and slow (driver calls made outside the mutex), the hot path never looks.
 *
 * Threads. An entry is owned by one thread at a time: whoever marks it
 * BUSY under spill_lock (a mover, a freer, the creator) is the only one to
 * touch its range and fields until it gives the entry back (settle()).
 * A free of a range that another thread is moving does not touch the
 * range: it marks the entry doomed and waits (bounded) for the mover,
 * which releases the range itself when its move ends. spill_lock is never
 * held across a driver call; the one wait is on spill_cond, bounded.
 */
#include "devices.h"
#include "overcommit.h"
#include "track.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define MAX_SPILLS 2048
/* How long a free waits for the move of its range to end; past it the
 * mover releases the range on its own, later. */
#define FREE_WAIT_S 1

enum { SPILL_FREE, SPILL_HOST, SPILL_DEVICE, SPILL_MANAGED, SPILL_BUSY };

/* state, va, size and last_use are also read without spill_lock
 * (vgpu__note_use), atomically; the rest only by the entry's owner or under
 * spill_lock. */
struct spill {
	int state;
	bool doomed;		/* freed by the job while BUSY: the owner frees */
	unsigned gen;		/* bumped each time the entry becomes FREE */
	int dev;
	CUdeviceptr va;
	size_t size;		/* mapped size (granularity) */
	size_t asked;		/* the size the job asked for */
	CUmemGenericAllocationHandle handle;
	uint64_t seq;		/* order of spilling */
	uint64_t last_use;	/* use stamp: allocation, kernel arguments */
	CUcontext ctx;		/* current at the allocation: its owner */
};

static struct spill spills[MAX_SPILLS];
static pthread_mutex_t spill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spill_cond = PTHREAD_COND_INITIALIZER;	/* settled */
static uint64_t spill_seq;	/* atomic */
static unsigned spilled_host;	/* SPILL_HOST entries, atomic */
unsigned vgpu__movable_count;	/* SPILL_HOST + SPILL_DEVICE entries, atomic */
static uint64_t use_clock;	/* use stamps, atomic */
static bool ever_spilled;	/* an entry was ever claimed, atomic */

static int claim_entry(void)
{
	int i;

	pthread_mutex_lock(&spill_lock);
	for (i = 0; i < MAX_SPILLS && spills[i].state != SPILL_FREE; i++)
		;
	if (i < MAX_SPILLS) {
		__atomic_store_n(&ever_spilled, true, __ATOMIC_RELAXED);
		__atomic_store_n(&spills[i].state, SPILL_BUSY, __ATOMIC_RELAXED);
		spills[i].doomed = false;
	}
	pthread_mutex_unlock(&spill_lock);
	return i < MAX_SPILLS ? i : -1;
}

static bool is_movable(int state)
{
	return state == SPILL_HOST || state == SPILL_DEVICE;
}

/* Sets entry i's state under spill_lock, keeping the counts, and wakes
 * the frees waiting for it. A BUSY entry was taken out of the counts by
 * whoever made it BUSY (take()). */
static void set_state_locked(int i, int state)
{
	if (spills[i].state == SPILL_HOST)
		__atomic_sub_fetch(&spilled_host, 1, __ATOMIC_RELAXED);
	if (is_movable(spills[i].state))
		__atomic_sub_fetch(&vgpu__movable_count, 1, __ATOMIC_RELAXED);
	if (state == SPILL_FREE) {
		spills[i].gen++;
		spills[i].ctx = NULL;
	}
	__atomic_store_n(&spills[i].state, state, __ATOMIC_RELEASE);
	if (state == SPILL_HOST) {
		spills[i].seq = __atomic_add_fetch(&spill_seq, 1,
						   __ATOMIC_RELAXED);
		__atomic_add_fetch(&spilled_host, 1, __ATOMIC_RELAXED);
	}
	if (is_movable(state))
		__atomic_add_fetch(&vgpu__movable_count, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&spill_cond);
}

static void set_state(int i, int state)
{
	pthread_mutex_lock(&spill_lock);
	set_state_locked(i, state);
	pthread_mutex_unlock(&spill_lock);
}

static uint64_t stamp(void)
{
	return __atomic_add_fetch(&use_clock, 1, __ATOMIC_RELAXED);
}

/* Marks entry i BUSY (under spill_lock), out of the counts: the caller
 * owns it until settle(). */
static void take(int i)
{
	if (spills[i].state == SPILL_HOST)
		__atomic_sub_fetch(&spilled_host, 1, __ATOMIC_RELAXED);
	if (is_movable(spills[i].state))
		__atomic_sub_fetch(&vgpu__movable_count, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&spills[i].state, SPILL_BUSY, __ATOMIC_RELAXED);
}

static uint64_t last_use(int i)
{
	return __atomic_load_n(&spills[i].last_use, __ATOMIC_RELAXED);
}

/* The recommended mapping granularity of dev for device or host handles:
 * asked of the driver once per device and kind, not on every allocation. */
static size_t granularity(int dev, CUmemLocationType type)
{
	static size_t cache[VGPU_MAX_DEVICES][2];
	size_t *slot = &cache[dev][type == CU_MEM_LOCATION_TYPE_DEVICE];
	size_t g = __atomic_load_n(slot, __ATOMIC_RELAXED);
	CUmemAllocationProp prop;

	if (g)
		return g;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = type;
	prop.location.id = type == CU_MEM_LOCATION_TYPE_DEVICE ? dev : 0;
	if (!vgpu__real.cuMemGetAllocationGranularity ||
	    vgpu__real.cuMemGetAllocationGranularity(&g, &prop,
				CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
		    CUDA_SUCCESS || g == 0)
		g = (size_t)2 << 20;
	__atomic_store_n(slot, g, __ATOMIC_RELAXED);
	return g;
}

static CUresult create(CUmemGenericAllocationHandle *h, size_t size, int dev,
		       CUmemLocationType type)
{
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = type;
	prop.location.id = type == CU_MEM_LOCATION_TYPE_DEVICE ? dev : 0;
	return vgpu__real.cuMemCreate(h, size, &prop, 0);
}

static CUresult map_for(CUdeviceptr va, size_t size,
			CUmemGenericAllocationHandle h, int dev)
{
	CUmemAccessDesc acc;
	CUresult r = vgpu__real.cuMemMap(va, size, 0, h, 0);

	if (r != CUDA_SUCCESS)
		return r;
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = vgpu__real.cuMemSetAccess(va, size, &acc, 1);
	if (r != CUDA_SUCCESS)
		vgpu__real.cuMemUnmap(va, size);
	return r;
}

static bool have_vmm(void)
{
	return vgpu__real.cuMemAddressReserve && vgpu__real.cuMemAddressFree &&
	       vgpu__real.cuMemMap && vgpu__real.cuMemUnmap &&
	       vgpu__real.cuMemSetAccess && vgpu__real.cuMemCreate &&
	       vgpu__real.cuMemRelease;
}

/* A range of size bytes backed by a new handle at loc, mapped for dv. */
static CUresult make_range(struct vgpu_dev *dv, size_t size,
			   CUmemLocationType loc, CUdeviceptr *va,
			   CUmemGenericAllocationHandle *h)
{
	CUresult r = vgpu__real.cuMemAddressReserve(va, size, 0, 0, 0);

	if (r != CUDA_SUCCESS)
		return r;
	r = create(h, size, dv->ordinal, loc);
	if (r == CUDA_SUCCESS) {
		r = map_for(*va, size, *h, dv->ordinal);
		if (r != CUDA_SUCCESS)
			vgpu__real.cuMemRelease(*h);
	}
	if (r != CUDA_SUCCESS)
		vgpu__real.cuMemAddressFree(*va, size);
	return r;
}

/* Entry i now describes the range; the job gets its address. */
static void record_range(int i, struct vgpu_dev *dv, CUdeviceptr va,
			 size_t size, size_t asked,
			 CUmemGenericAllocationHandle h, int state,
			 CUdeviceptr *dptr)
{
	struct vgpu_tracked t = { size, VGPU_USAGE_SPILLED,
				  (unsigned)dv->ordinal, (unsigned)i };
	CUcontext cur;

	spills[i].dev = dv->ordinal;
	__atomic_store_n(&spills[i].va, va, __ATOMIC_RELAXED);
	__atomic_store_n(&spills[i].size, size, __ATOMIC_RELAXED);
	spills[i].asked = asked;
	spills[i].handle = h;
	if (!vgpu__real.cuCtxGetCurrent ||
	    vgpu__real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
		cur = NULL;
	__atomic_store_n(&spills[i].last_use, stamp(), __ATOMIC_RELAXED);
	/* Hooks pass the gate from now on, so moves can hold them. */
	vgpu__gate_use();
	/* The owner is set with the state, under the lock: a context
	 * destroyed meanwhile never sees an entry being made as its own. */
	pthread_mutex_lock(&spill_lock);
	spills[i].ctx = cur;
	set_state_locked(i, state);
	pthread_mutex_unlock(&spill_lock);
	vgpu__track_insert(VGPU_TRACK_PTR, va, &t);
	*dptr = va;
}

/* host mode: a host-backed range mapped for the device. */
static CUresult spill_host(struct vgpu_dev *dv, CUdeviceptr *dptr,
			   size_t bytes)
{
	size_t g = granularity(dv->ordinal, CU_MEM_LOCATION_TYPE_HOST);
	size_t size = (bytes + g - 1) / g * g;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = 0;
	CUresult r;
	int i;

	if (!have_vmm())
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (vgpu_ledger_reserve(dv->slot, VGPU_USAGE_SPILLED, size) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;	/* the spill budget */
	if ((i = claim_entry()) < 0) {
		vgpu__uncharge(dv, VGPU_USAGE_SPILLED, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = make_range(dv, size, CU_MEM_LOCATION_TYPE_HOST, &va, &h);
	if (r != CUDA_SUCCESS) {
		set_state(i, SPILL_FREE);
		vgpu__uncharge(dv, VGPU_USAGE_SPILLED, size);
		vgpu_log(VGPU_LOG_WARN, "device %d: spilling %zu bytes to the "
			 "host failed (%d)", dv->ordinal, bytes, (int)r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	record_range(i, dv, va, size, bytes, h, SPILL_HOST, dptr);
	vgpu_log(VGPU_LOG_DEBUG, "device %d: %zu bytes spilled to the host at "
		 "0x%llx", dv->ordinal, bytes, (unsigned long long)va);
	return CUDA_SUCCESS;
}

/* managed mode: managed memory that prefers the host. */
static CUresult spill_managed(struct vgpu_dev *dv, CUdeviceptr *dptr,
			      size_t bytes)
{
	CUmemLocation host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
	CUmemLocation gpu = { CU_MEM_LOCATION_TYPE_DEVICE, dv->ordinal };
	uint64_t held = vgpu__alloc_size(bytes);	/* whole pages */
	CUcontext cur;
	CUresult r;
	int i;

	if (!vgpu__real.cuMemAllocManaged)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (vgpu_ledger_reserve(dv->slot, VGPU_USAGE_SPILLED, held) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((i = claim_entry()) < 0) {
		vgpu__uncharge(dv, VGPU_USAGE_SPILLED, held);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = vgpu__real.cuMemAllocManaged(dptr, bytes, CU_MEM_ATTACH_GLOBAL);
	if (r != CUDA_SUCCESS) {
		set_state(i, SPILL_FREE);
		vgpu__uncharge(dv, VGPU_USAGE_SPILLED, held);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (vgpu__real.cuMemAdvise_v2) {
		vgpu__real.cuMemAdvise_v2(*dptr, bytes,
					  CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
					  host);
		vgpu__real.cuMemAdvise_v2(*dptr, bytes,
					  CU_MEM_ADVISE_SET_ACCESSED_BY, gpu);
	}
	spills[i].dev = dv->ordinal;
	__atomic_store_n(&spills[i].va, *dptr, __ATOMIC_RELAXED);
	__atomic_store_n(&spills[i].size, held, __ATOMIC_RELAXED);
	spills[i].asked = bytes;
	if (!vgpu__real.cuCtxGetCurrent ||
	    vgpu__real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
		cur = NULL;
	pthread_mutex_lock(&spill_lock);
	spills[i].ctx = cur;
	set_state_locked(i, SPILL_MANAGED);
	pthread_mutex_unlock(&spill_lock);
	struct vgpu_tracked t = { held, VGPU_USAGE_SPILLED,
				  (unsigned)dv->ordinal, (unsigned)i };
	vgpu__track_insert(VGPU_TRACK_PTR, *dptr, &t);
	return CUDA_SUCCESS;
}

int vgpu__overcommit_mode(const struct vgpu_dev *dv)
{
	return dv->overcommit;
}

CUresult vgpu__spill(struct vgpu_dev *dv, CUdeviceptr *dptr, size_t bytes)
{
	if (!dv->slot || bytes == 0 || bytes > VGPU_TRACK_MAX_BYTES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (dv->overcommit == VGPU_OVERCOMMIT_HOST)
		return spill_host(dv, dptr, bytes);
	if (dv->overcommit == VGPU_OVERCOMMIT_MANAGED)
		return spill_managed(dv, dptr, bytes);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Unmaps and releases a range's backing, frees the range. */
static void unmap_release(struct spill *sp)
{
	vgpu__real.cuMemUnmap(sp->va, sp->size);
	vgpu__real.cuMemRelease(sp->handle);
	vgpu__real.cuMemAddressFree(sp->va, sp->size);
}

/* Releases range i, which the caller owns (BUSY) and whose bytes are
 * charged as state says, and frees the entry (not if a managed free
 * failed: the caller still owns it). */
static CUresult release(int i, int state)
{
	struct spill *sp = &spills[i];
	struct vgpu_dev *dv = vgpu__dev_peek(sp->dev);
	CUresult r;

	if (state == SPILL_MANAGED) {
		r = vgpu__real.cuMemFree_v2(sp->va);
		if (r != CUDA_SUCCESS)
			return r;
		vgpu__uncharge(dv, VGPU_USAGE_SPILLED, sp->size);
	} else {
		/* cuMemFree synchronises; so does this before unmapping. */
		vgpu__real.cuCtxSynchronize();
		unmap_release(sp);
		vgpu__uncharge(dv, state == SPILL_DEVICE ? VGPU_USAGE_BUFFER
							  : VGPU_USAGE_SPILLED,
			       sp->size);
	}
	set_state(i, SPILL_FREE);
	return CUDA_SUCCESS;
}

/* The owner of entry i gives it back, now in state; if the job freed the
 * range meanwhile (doomed), the owner releases it instead. */
static void settle(int i, int state)
{
	bool doomed;

	pthread_mutex_lock(&spill_lock);
	doomed = spills[i].doomed;
	if (!doomed)
		set_state_locked(i, state);
	pthread_mutex_unlock(&spill_lock);
	if (!doomed)
		return;
	vgpu_log(VGPU_LOG_DEBUG, "0x%llx: freed during its move, released "
		 "by the mover", (unsigned long long)spills[i].va);
	release(i, state);
}

/* Entry i is BUSY: another thread moves it. Its free is left to that
 * thread (doomed); this waits until it is done, FREE_WAIT_S at most.
 * Called with spill_lock held; whether it was done. */
static bool free_while_moving(int i)
{
	unsigned gen = spills[i].gen;
	struct timespec until;

	spills[i].doomed = true;
	clock_gettime(CLOCK_REALTIME, &until);	/* spill_cond's clock */
	until.tv_sec += FREE_WAIT_S;
	while (spills[i].gen == gen &&
	       pthread_cond_timedwait(&spill_cond, &spill_lock, &until) !=
		       ETIMEDOUT)
		;
	return spills[i].gen != gen;
}

CUresult vgpu__spill_free(CUdeviceptr dptr, const struct vgpu_tracked *t)
{
	int i = (int)t->aux;
	CUresult r;
	int state;

	pthread_mutex_lock(&spill_lock);
	state = spills[i].state;
	if (__atomic_load_n(&spills[i].va, __ATOMIC_RELAXED) != dptr ||
	    state == SPILL_FREE) {
		pthread_mutex_unlock(&spill_lock);
		return vgpu__real.cuMemFree_v2(dptr);
	}
	if (state == SPILL_BUSY) {
		bool done = free_while_moving(i);

		pthread_mutex_unlock(&spill_lock);
		if (!done)
			vgpu_log(VGPU_LOG_DEBUG, "0x%llx: freed while moving; "
				 "released when the move ends",
				 (unsigned long long)dptr);
		return CUDA_SUCCESS;
	}
	take(i);
	pthread_mutex_unlock(&spill_lock);
	r = release(i, state);
	if (r != CUDA_SUCCESS)
		set_state(i, state);
	return r;
}

/* The job destroys ctx: what it allocated in it goes with it, as the
 * driver frees cuMemAlloc memory with its context. Ranges being moved by
 * another thread are left to it (doomed). Called before the driver
 * destroys ctx, which is made current meanwhile (release synchronises). */
void vgpu__overcommit_ctx_gone(CUcontext ctx)
{
	struct vgpu_tracked t;
	CUcontext top;
	bool pushed;
	int state;

	if (!ctx || !__atomic_load_n(&ever_spilled, __ATOMIC_RELAXED) ||
	    !vgpu__real.cuCtxPushCurrent_v2)
		return;
	pushed = vgpu__real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
	for (int i = 0; i < MAX_SPILLS; i++) {
		pthread_mutex_lock(&spill_lock);
		state = spills[i].state;
		if (spills[i].ctx != ctx || state == SPILL_FREE) {
			pthread_mutex_unlock(&spill_lock);
			continue;
		}
		if (state == SPILL_BUSY) {
			/* Being moved: the mover releases it. Its address
			 * leaves the table now, as the job's free would. */
			spills[i].doomed = true;
			pthread_mutex_unlock(&spill_lock);
			vgpu__track_remove(VGPU_TRACK_PTR,
					   __atomic_load_n(&spills[i].va,
							   __ATOMIC_RELAXED),
					   &t);
			continue;
		}
		take(i);
		pthread_mutex_unlock(&spill_lock);
		vgpu__track_remove(VGPU_TRACK_PTR, spills[i].va, &t);
		if (release(i, state) != CUDA_SUCCESS)
			set_state(i, state);
	}
	if (pushed)
		vgpu__real.cuCtxPopCurrent_v2(&top);
}

void vgpu__overcommit_ctx_orphan(CUcontext ctx)
{
	if (!ctx || !__atomic_load_n(&ever_spilled, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&spill_lock);
	for (int i = 0; i < MAX_SPILLS; i++)
		if (spills[i].ctx == ctx)
			spills[i].ctx = NULL;
	pthread_mutex_unlock(&spill_lock);
}

/* Moves range i's backing to `to` (device or host) at the same address,
 * through a scratch mapping of the new backing. Called with nothing in
 * flight (the context synchronised). The caller has reserved the bytes on
 * the new side; on failure the old backing stays mapped, data intact. */
static bool move_backing(int i, struct vgpu_dev *dv, CUmemLocationType to)
{
	struct spill *sp = &spills[i];
	CUmemGenericAllocationHandle nh;
	CUdeviceptr scratch = 0;

	if (create(&nh, sp->size, dv->ordinal, to) != CUDA_SUCCESS)
		return false;
	if (vgpu__real.cuMemAddressReserve(&scratch, sp->size, 0, 0, 0) !=
	    CUDA_SUCCESS) {
		vgpu__real.cuMemRelease(nh);
		return false;
	}
	if (map_for(scratch, sp->size, nh, dv->ordinal) != CUDA_SUCCESS ||
	    vgpu__real.cuMemcpyDtoD_v2(scratch, sp->va, sp->size) !=
		    CUDA_SUCCESS) {
		vgpu__real.cuMemUnmap(scratch, sp->size);
		vgpu__real.cuMemAddressFree(scratch, sp->size);
		vgpu__real.cuMemRelease(nh);
		return false;
	}
	vgpu__real.cuMemUnmap(scratch, sp->size);
	vgpu__real.cuMemAddressFree(scratch, sp->size);
	/* The swap: the old backing out, the new one in, same address. */
	vgpu__real.cuMemUnmap(sp->va, sp->size);
	if (map_for(sp->va, sp->size, nh, dv->ordinal) != CUDA_SUCCESS) {
		map_for(sp->va, sp->size, sp->handle, dv->ordinal);
		vgpu__real.cuMemRelease(nh);
		return false;
	}
	vgpu__real.cuMemRelease(sp->handle);
	sp->handle = nh;
	return true;
}

/* Range i (the caller owns it) to the device (promote) or to the host
 * (demote): the bytes are reserved on the new side first (the slice, or
 * the spill budget), given back on the old side after the move. */
static bool move(int i, struct vgpu_dev *dv, bool to_device)
{
	struct spill *sp = &spills[i];
	int to = to_device ? VGPU_USAGE_BUFFER : VGPU_USAGE_SPILLED;
	int from = to_device ? VGPU_USAGE_SPILLED : VGPU_USAGE_BUFFER;

	if (vgpu_ledger_reserve(dv->slot, to, sp->size) != 0)
		return false;
	if (!move_backing(i, dv, to_device ? CU_MEM_LOCATION_TYPE_DEVICE
					   : CU_MEM_LOCATION_TYPE_HOST)) {
		vgpu__uncharge(dv, to, sp->size);
		return false;
	}
	vgpu__uncharge(dv, from, sp->size);
	vgpu_log(VGPU_LOG_DEBUG, "device %d: %zu bytes at 0x%llx moved to the "
		 "%s", dv->ordinal, sp->asked, (unsigned long long)sp->va,
		 to_device ? "device" : "host (the least recently used)");
	return true;
}

/* host mode, within the slice: device memory in a range of its own, so
 * that it can later be spilled without its address changing. Allocations
 * smaller than the mapping granularity stay plain (not movable). */
CUresult vgpu__alloc_movable(struct vgpu_dev *dv, CUdeviceptr *dptr,
			     size_t bytes)
{
	size_t g = granularity(dv->ordinal, CU_MEM_LOCATION_TYPE_DEVICE);
	size_t size = (bytes + g - 1) / g * g;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = 0;
	CUresult r;
	int i;

	if (bytes < g || !have_vmm() || bytes > VGPU_TRACK_MAX_BYTES)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (vgpu__charge(dv, VGPU_USAGE_BUFFER, size) != CUDA_SUCCESS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((i = claim_entry()) < 0) {
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, size);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	r = make_range(dv, size, CU_MEM_LOCATION_TYPE_DEVICE, &va, &h);
	if (r != CUDA_SUCCESS) {
		set_state(i, SPILL_FREE);
		vgpu__uncharge(dv, VGPU_USAGE_BUFFER, size);
		return r;
	}
	record_range(i, dv, va, size, bytes, h, SPILL_DEVICE, dptr);
	return CUDA_SUCCESS;
}

/* Whether bytes more fit dv's slice now. */
static bool fits(struct vgpu_dev *dv, size_t bytes)
{
	uint64_t limit = vgpu_ledger_tenant_limit(dv->slot);
	uint64_t used = vgpu_ledger_tenant_used(dv->slot);

	return used <= limit && bytes <= limit - used;
}

/* Takes dv's next range to move for how, skipping those in skip
 * (NULL: none): to the
 * host the least recently used on the device, to the device the most
 * recently used spilled range that fits the slice now; -1 if none. */
static int take_next(struct vgpu_dev *dv, enum vgpu_move how,
		     const bool *skip)
{
	bool up = how == VGPU_MOVE_RESUME;
	int want = up ? SPILL_HOST : SPILL_DEVICE, best = -1;
	uint64_t limit = 0, used = 0;

	if (up) {
		limit = vgpu_ledger_tenant_limit(dv->slot);
		used = vgpu_ledger_tenant_used(dv->slot);
		if (used > limit)
			return -1;
	}
	pthread_mutex_lock(&spill_lock);
	for (int i = 0; i < MAX_SPILLS; i++) {
		if ((skip && skip[i]) || spills[i].state != want ||
		    spills[i].dev != dv->ordinal ||
		    (up && spills[i].size > limit - used))
			continue;
		if (best < 0 || (up ? last_use(i) > last_use(best)
				    : last_use(i) < last_use(best)))
			best = i;
	}
	if (best >= 0)
		take(best);
	pthread_mutex_unlock(&spill_lock);
	return best;
}

/* host mode, an allocation of bytes does not fit: the least recently used
 * resident ranges of the device go to the host until it would. Returns
 * whether room was made. Bounded: other threads may take the room as it
 * frees. */
bool vgpu__make_room(struct vgpu_dev *dv, size_t bytes)
{
	if (!dv || !dv->slot || dv->overcommit != VGPU_OVERCOMMIT_HOST)
		return false;
	size_t g = granularity(dv->ordinal, CU_MEM_LOCATION_TYPE_DEVICE);
	bytes = (bytes + g - 1) / g * g;
	if (fits(dv, bytes))
		return true;
	vgpu__move_ranges(dv, VGPU_MOVE_FIT, bytes, NULL);
	return fits(dv, bytes);
}

/* ---- moves: room, promotion, suspension, a lowered limit ----------------- */

/* The context range i was made in, or dv's primary one. */
static CUcontext owner_ctx(int i, struct vgpu_dev *dv)
{
	CUcontext c;

	pthread_mutex_lock(&spill_lock);
	c = spills[i].ctx;
	pthread_mutex_unlock(&spill_lock);
	return c ? c : __atomic_load_n(&dv->primary, __ATOMIC_ACQUIRE);
}

int vgpu__move_ranges(struct vgpu_dev *dv, enum vgpu_move how, size_t need,
		      uint64_t *failed)
{
	static bool skip[MAX_SPILLS];	/* the mover's (move_mu) */
	static struct vgpu_synced done;	/* the mover's (move_mu) */
	CUcontext popped;
	int moved = 0;

	if (failed)
		*failed = 0;
	if (!dv || !dv->slot || !have_vmm())
		return 0;
	/* A suspended process's ranges come back by its resume alone. */
	if (how == VGPU_MOVE_RESUME && vgpu__control_suspended() &&
	    !vgpu__control_thread())
		return 0;
	if (!vgpu__moves_begin(VGPU_MOVE_WAIT_MS))
		return -1;
	done.n = 0;
	if (!vgpu__sync_every_ctx(&done)) {
		vgpu__moves_end();
		return -1;	/* nothing moved: callers try again later */
	}
	memset(skip, 0, sizeof(skip));
	for (int n = 0; n < MAX_SPILLS; n++) {
		bool up = how == VGPU_MOVE_RESUME, ok;
		int i;

		if ((how == VGPU_MOVE_FIT && fits(dv, need)) ||
		    vgpu__control_stopping())
			break;
		if ((i = take_next(dv, how, skip)) < 0)
			break;
		skip[i] = true;
		ok = vgpu__enter_ctx(owner_ctx(i, dv), &done);
		if (ok) {
			ok = move(i, dv, up);
			vgpu__real.cuCtxPopCurrent_v2(&popped);
		}
		if (!ok && failed)
			*failed += spills[i].size;
		settle(i, ok == up ? SPILL_DEVICE : SPILL_HOST);
		moved += ok;
	}
	vgpu__moves_end();
	return moved;
}

bool vgpu__host_range_fits(struct vgpu_dev *dv)
{
	uint64_t limit, used;
	bool fit = false;

	if (!dv || !dv->slot ||
	    !__atomic_load_n(&spilled_host, __ATOMIC_RELAXED))
		return false;
	limit = vgpu_ledger_tenant_limit(dv->slot);
	used = vgpu_ledger_tenant_used(dv->slot);
	if (used >= limit)
		return false;
	pthread_mutex_lock(&spill_lock);
	for (int i = 0; i < MAX_SPILLS && !fit; i++)
		fit = spills[i].state == SPILL_HOST &&
		      spills[i].dev == dv->ordinal &&
		      spills[i].size <= limit - used;
	pthread_mutex_unlock(&spill_lock);
	return fit;
}

uint64_t vgpu__resident_movable(int ordinal, bool on_device)
{
	int want = on_device ? SPILL_DEVICE : SPILL_HOST;
	uint64_t bytes = 0;

	if (!__atomic_load_n(&vgpu__movable_count, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&spill_lock);
	for (int i = 0; i < MAX_SPILLS; i++)
		if (spills[i].state == want && spills[i].dev == ordinal)
			bytes += spills[i].size;
	pthread_mutex_unlock(&spill_lock);
	return bytes;
}

/* Kernel arguments that point into a movable range mark it used. */
void vgpu__note_use(CUdeviceptr p)
{
	if (!__atomic_load_n(&vgpu__movable_count, __ATOMIC_RELAXED))
		return;
	for (int i = 0; i < MAX_SPILLS; i++) {
		struct spill *sp = &spills[i];
		int st = __atomic_load_n(&sp->state, __ATOMIC_ACQUIRE);
		CUdeviceptr va = __atomic_load_n(&sp->va, __ATOMIC_RELAXED);
		size_t size = __atomic_load_n(&sp->size, __ATOMIC_RELAXED);

		if (is_movable(st) && p >= va && p < va + size) {
			__atomic_store_n(&sp->last_use, stamp(),
					 __ATOMIC_RELAXED);
			return;
		}
	}
}

void vgpu__promote(struct vgpu_dev *dv)
{
	if (!dv || !dv->slot || dv->overcommit != VGPU_OVERCOMMIT_HOST ||
	    !__atomic_load_n(&spilled_host, __ATOMIC_RELAXED) ||
	    !vgpu__host_range_fits(dv))
		return;
	vgpu__move_ranges(dv, VGPU_MOVE_RESUME, 0, NULL);
}

/* Legacy IPC handles do not work on VMM memory: refused with a message. */
bool vgpu__movable_overlaps(CUdeviceptr p, size_t n, bool job_bytes)
{
	bool found = false;

	/* Every movable range, on the device or on the host: spill_seq
	 * counts only moves to the host, and a range that never left the
	 * device went to the driver's legacy IPC, which refused it with
	 * CUDA_ERROR_INVALID_VALUE and no word (a hostile review). */
	if (!__atomic_load_n(&ever_spilled, __ATOMIC_RELAXED) || n == 0)
		return false;
	pthread_mutex_lock(&spill_lock);
	for (int i = 0; i < MAX_SPILLS && !found; i++) {
		CUdeviceptr va = __atomic_load_n(&spills[i].va,
						 __ATOMIC_RELAXED);
		size_t size = __atomic_load_n(&spills[i].size,
					      __ATOMIC_RELAXED);

		/* The job's bytes (IPC: past them is past the allocation,
		 * which the driver refuses itself), or the whole range (VMM
		 * calls: the rounding is mapped by the shim's handle too). */
		if (job_bytes && spills[i].asked)
			size = spills[i].asked;
		if (spills[i].state != SPILL_FREE &&
		    spills[i].state != SPILL_MANAGED && p < va + size &&
		    va < p + n)
			found = true;
	}
	pthread_mutex_unlock(&spill_lock);
	return found;
}

void vgpu__overcommit_fork_child(void)
{
	vgpu__ctx_sync_fork_child();
	pthread_mutex_init(&spill_lock, NULL);
	pthread_cond_init(&spill_cond, NULL);
	memset(spills, 0, sizeof(spills));
	spilled_host = 0;
	vgpu__movable_count = 0;
	spill_seq = 0;
}
