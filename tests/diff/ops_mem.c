/* ops_mem.c - the families of plain allocations: cuMemAlloc, pitched,
 * managed, stream-ordered (the default pool, and cuMemFreeAsync of
 * cuMemAlloc memory), and pools of the process's own.
 */
#include "diff.h"

enum {
	S_ASYNC = 1u << 0,	/* from cuMemAllocAsync: a pool's block */
	S_POOL = 1u << 1,	/* a pool (not one of its allocations) */
};

static CUstream any_stream(struct diff_thread *t)
{
	return diff_proc.streams[diff_below(t, 2)];
}

static void keep(struct diff_thread *t, int fam, CUdeviceptr p, size_t size,
		 unsigned state)
{
	struct diff_obj *o = diff_obj_new(t, fam);

	if (!o)
		return;
	o->ptr = p;
	o->size = size;
	o->state = state;
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

void diff_buf_make(struct diff_thread *t)
{
	size_t size = diff_size(t);
	CUdeviceptr p = 0;

	if (!diff_cu(t, cuMemAlloc(&p, size), true, "cuMemAlloc(%zu)", size))
		keep(t, DIFF_F_BUF, p, size, 0);
}

void diff_pitch_make(struct diff_thread *t)
{
	static const unsigned elem[] = { 4, 8, 16 };
	size_t h = 1 + diff_below(t, 256), w = 1 + diff_size(t) / h, pitch = 0;
	unsigned e = elem[diff_below(t, 3)];
	CUdeviceptr p = 0;

	/* Pitches are multiples of 512: 8 rows make whole pages. */
	if (diff_align() >= 4096)
		h = (h + 7) & ~(size_t)7;

	if (!diff_cu(t, cuMemAllocPitch(&p, &pitch, w, h, e), true,
		     "cuMemAllocPitch(w %zu, h %zu, elem %u)", w, h, e))
		keep(t, DIFF_F_PITCH, p, pitch * h, 0);
}

void diff_managed_make(struct diff_thread *t)
{
	size_t size = diff_size(t);
	CUdeviceptr p = 0;

	if (!diff_cu(t, cuMemAllocManaged(&p, size, CU_MEM_ATTACH_GLOBAL),
		     true, "cuMemAllocManaged(%zu)", size))
		keep(t, DIFF_F_MANAGED, p, size, 0);
}

/* Mostly cuMemAllocAsync; some cuMemAlloc, freed by cuMemFreeAsync. */
void diff_async_make(struct diff_thread *t)
{
	size_t size = diff_size(t);
	CUstream s = any_stream(t);
	CUdeviceptr p = 0;

	if (diff_chance(t, 25)) {
		if (!diff_cu(t, cuMemAlloc(&p, size), true,
			     "cuMemAlloc(%zu) for cuMemFreeAsync", size))
			keep(t, DIFF_F_ASYNC, p, size, 0);
		return;
	}
	if (!diff_cu(t, cuMemAllocAsync(&p, size, s), true,
		     "cuMemAllocAsync(%zu, s%d)", size,
		     s == diff_proc.streams[1]))
		keep(t, DIFF_F_ASYNC, p, size, S_ASYNC);
}

static void sync_some(struct diff_thread *t)
{
	CUstream s = any_stream(t);

	if (diff_chance(t, 50))
		diff_cu(t, cuStreamSynchronize(s), false,
			"cuStreamSynchronize(s%d)", s == diff_proc.streams[1]);
	else
		diff_cu(t, cuCtxSynchronize(), false, "cuCtxSynchronize()");
}

/* Frees a buffer: cuMemFree, or for the stream-ordered family and pools,
 * cuMemFreeAsync on either stream about half the time. */
static void free_ptr(struct diff_thread *t, struct diff_obj *o)
{
	bool pool_mem = o->fam == DIFF_F_POOL || (o->state & S_ASYNC);
	CUstream s = any_stream(t);
	CUresult rc;

	if ((o->fam == DIFF_F_ASYNC || o->fam == DIFF_F_POOL) &&
	    diff_chance(t, 60)) {
		/* The simulator refuses cuMemFreeAsync of cuMemAlloc memory
		 * (INVALID_VALUE); the shim must then keep its charge. */
		rc = diff_cu_allow(t, cuMemFreeAsync(o->ptr, s),
				   pool_mem ? CUDA_SUCCESS
					    : CUDA_ERROR_INVALID_VALUE,
				   "cuMemFreeAsync(#%d, %s, s%d)", o->id,
				   pool_mem ? "pool block" : "cuMemAlloc memory",
				   s == diff_proc.streams[1]);
		if (rc == CUDA_SUCCESS)
			return;
	}
	diff_cu(t, cuMemFree(o->ptr), false, "cuMemFree(#%d)", o->id);
}

bool diff_mem_step(struct diff_thread *t, struct diff_obj *o)
{
	if (!t->finishing && o->fam == DIFF_F_ASYNC && diff_chance(t, 20)) {
		sync_some(t);
		return false;
	}
	free_ptr(t, o);
	diff_obj_drop(o);
	return true;
}

/* ---- pools ----------------------------------------------------------------- */

static void pool_unref(struct diff_obj *pool)
{
	if (atomic_fetch_sub(&pool->refs, 1) != 1)
		return;
	atomic_fetch_sub(diff_proc.pools_live, 1);
	diff_obj_drop(pool);
}

static void pool_create(struct diff_thread *t)
{
	static const uint64_t thresholds[] = { 0, 8ull << 20, UINT64_MAX };
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.handleTypes = CU_MEM_HANDLE_TYPE_NONE,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
	};
	uint64_t th = thresholds[diff_below(t, 3)];
	struct diff_obj *o;
	CUmemoryPool pool;

	if (diff_cu(t, cuMemPoolCreate(&pool, &props), true,
		    "cuMemPoolCreate()"))
		return;
	diff_cu(t, cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
					 &th), false,
		"cuMemPoolSetAttribute(RELEASE_THRESHOLD, %llu)",
		(unsigned long long)th);
	o = diff_obj_new(t, DIFF_F_POOL);
	if (!o)
		return;
	o->mempool = pool;
	o->state = S_POOL;
	atomic_store(&o->refs, 1);
	atomic_fetch_add(diff_proc.pools_live, 1);
	diff_trace(t, "  = pool #%d", o->id);
	diff_obj_put(o);
}

static void pool_alloc(struct diff_thread *t, struct diff_obj *pool)
{
	size_t size = diff_size(t);
	CUstream s = any_stream(t);
	struct diff_obj *o;
	CUdeviceptr p = 0;

	if (diff_cu(t, cuMemAllocFromPoolAsync(&p, size, pool->mempool, s),
		    true, "cuMemAllocFromPoolAsync(%zu, pool #%d, s%d)", size,
		    pool->id, s == diff_proc.streams[1]))
		return;
	o = diff_obj_new(t, DIFF_F_POOL);
	if (!o)
		return;
	o->ptr = p;
	o->size = size;
	o->pool = pool;
	atomic_fetch_add(&pool->refs, 1);
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

void diff_pool_make(struct diff_thread *t)
{
	struct diff_obj *pool = NULL;

	/* A pool to allocate from: take pools until one is found. */
	for (int i = 0; i < 4 && !pool; i++) {
		struct diff_obj *o = diff_obj_take(t, DIFF_F_POOL);
		if (!o)
			break;
		if (o->state & S_POOL)
			pool = o;
		else
			diff_obj_put(o);
	}
	if (!pool || diff_chance(t, 15)) {
		if (pool)
			diff_obj_put(pool);
		pool_create(t);
		return;
	}
	pool_alloc(t, pool);
	diff_obj_put(pool);
}

/* A pool: trimmed, or destroyed (its allocations may still be live). */
static bool pool_handle_step(struct diff_thread *t, struct diff_obj *o)
{
	unsigned r = (unsigned)diff_below(t, 100);

	if (!t->finishing && r < 35) {
		size_t keep_bytes = diff_chance(t, 50) ? 0 : diff_size(t);
		diff_cu(t, cuMemPoolTrimTo(o->mempool, keep_bytes), false,
			"cuMemPoolTrimTo(pool #%d, %zu)", o->id, keep_bytes);
		return false;
	}
	if (!t->finishing && r < 55) {
		sync_some(t);
		return false;
	}
	if (diff_chance(t, 50))
		diff_cu(t, cuMemPoolTrimTo(o->mempool, 0), false,
			"cuMemPoolTrimTo(pool #%d, 0)", o->id);
	diff_cu(t, cuMemPoolDestroy(o->mempool), false,
		"cuMemPoolDestroy(pool #%d, %d allocations live)", o->id,
		atomic_load(&o->refs) - 1);
	pool_unref(o);
	return true;
}

bool diff_pool_step(struct diff_thread *t, struct diff_obj *o)
{
	struct diff_obj *pool = o->pool;

	if (o->state & S_POOL)
		return pool_handle_step(t, o);
	free_ptr(t, o);
	diff_obj_drop(o);
	pool_unref(pool);
	return true;
}
