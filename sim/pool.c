/* pool.c - memory pools and stream-ordered allocation (cuMemAllocAsync).
 *
 * A pool holds chunks: anonymous mappings of whole multiples of 2 MiB, each
 * reserved from its device's capacity in the shared state when the pool
 * grows, so other processes see what a pool holds. Allocations are blocks
 * carved from the chunks (first fit, 512-byte aligned) and recorded in the
 * allocation table, so copies, memsets and kernels use them as any device
 * memory. A free returns the block to its chunk: the pool's used memory goes
 * down, its reserved memory stays. A chunk goes back to the device only when
 * no block is left in it: at a stream, event or context synchronisation
 * while the pool holds more than its release threshold (default 0), at
 * cuMemPoolTrimTo, or when an allocation needs room the device lacks.
 *
 * cuMemAllocAsync takes its block at once (it is usable earlier than its
 * stream position, which no correct program sees); cuMemFreeAsync returns it
 * when the stream reaches the free. Host pools (CU_MEM_LOCATION_TYPE_HOST,
 * _HOST_NUMA) reserve no device capacity.
 *
 * Locks: pools_lock (the pool list, default and current pools) before a
 * pool's lock; a pool's lock before the shared state's. Neither is held
 * while calling into the allocation table.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define POOL_CHUNK ((size_t)2 << 20)
#define POOL_ALIGN ((size_t)512)

struct pool_block {
	size_t off, size;
	bool freeing;              /* cuMemFreeAsync queued */
};

struct pool_chunk {
	struct CUmemPoolHandle_st *pool;
	uintptr_t base;
	size_t size;
	struct pool_block *blocks;  /* sorted by off */
	size_t nblocks, cap;
	struct pool_chunk *next;
};

struct CUmemPoolHandle_st {
	uint32_t magic;
	int device;                 /* capacity reserved there; -1: host pool */
	CUmemPoolProps props;
	bool is_default, destroyed;
	pthread_mutex_t lock;       /* everything below */
	uint64_t threshold, reserved, reserved_high, used, used_high;
	int reuse[3];               /* the three REUSE_* attributes */
	struct pool_chunk *chunks;
	struct CUmemPoolHandle_st *next;   /* in pools, under pools_lock */
};

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st *pools;
static struct CUmemPoolHandle_st *default_pool[VSIM_MAX_DEVICES];
static struct CUmemPoolHandle_st *current_pool[VSIM_MAX_DEVICES];
static atomic_ullong next_block_id = 1ull << 62;

/* The parent's pools are not the child's: forgotten, like its memory. */
void vsim_pool_fork_child(void)
{
	pthread_mutex_init(&pools_lock, NULL);
	pools = NULL;
	memset(default_pool, 0, sizeof(default_pool));
	memset(current_pool, 0, sizeof(current_pool));
}

static size_t round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

static struct CUmemPoolHandle_st *pool_new(const CUmemPoolProps *props)
{
	struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->magic = VSIM_MAGIC_MEMPOOL;
	p->props = *props;
	p->device = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE ?
		props->location.id : -1;
	p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_lock(&pools_lock);
	p->next = pools;
	pools = p;
	pthread_mutex_unlock(&pools_lock);
	return p;
}

/* The device's default pool, made on first use; NULL out of memory. */
static struct CUmemPoolHandle_st *default_of(int dev)
{
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};
	struct CUmemPoolHandle_st *p;

	pthread_mutex_lock(&pools_lock);
	p = default_pool[dev];
	pthread_mutex_unlock(&pools_lock);
	if (p)
		return p;
	p = pool_new(&props);
	if (!p)
		return NULL;
	p->is_default = true;
	pthread_mutex_lock(&pools_lock);
	if (default_pool[dev]) {         /* another thread was first */
		p->magic = VSIM_MAGIC_DEAD;
		p->destroyed = true;
	} else {
		default_pool[dev] = p;
	}
	p = default_pool[dev];
	pthread_mutex_unlock(&pools_lock);
	return p;
}

static struct CUmemPoolHandle_st *current_of(int dev)
{
	struct CUmemPoolHandle_st *p;

	pthread_mutex_lock(&pools_lock);
	p = current_pool[dev];
	pthread_mutex_unlock(&pools_lock);
	return p ? p : default_of(dev);
}

static CUresult pool_check(CUmemoryPool p)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!p || p->magic != VSIM_MAGIC_MEMPOOL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* ---- chunks and blocks (caller holds the pool's lock) -------------------- */

static void chunk_unmap(struct CUmemPoolHandle_st *p, struct pool_chunk *c)
{
	munmap((void *)c->base, c->size);
	if (p->device >= 0)
		vsim_state_release(p->device, c->size);
	p->reserved -= c->size;
	free(c->blocks);
	free(c);
}

/* Returns empty chunks to the device while at least keep bytes stay. */
static void release_empty(struct CUmemPoolHandle_st *p, uint64_t keep)
{
	struct pool_chunk **pc = &p->chunks;

	while (*pc) {
		struct pool_chunk *c = *pc;
		if (c->nblocks == 0 && p->reserved >= keep + c->size) {
			*pc = c->next;
			chunk_unmap(p, c);
		} else {
			pc = &c->next;
		}
	}
}

static CUresult chunk_new(struct CUmemPoolHandle_st *p, size_t size)
{
	struct pool_chunk *c;
	void *m;
	CUresult rc = CUDA_SUCCESS;

	if (p->props.maxSize && p->reserved + size > p->props.maxSize)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (p->device >= 0) {
		rc = vsim_state_reserve(p->device, size);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			release_empty(p, 0);   /* room held idle in this pool */
			rc = vsim_state_reserve(p->device, size);
		}
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	c = calloc(1, sizeof(*c));
	m = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!c || m == MAP_FAILED) {
		free(c);
		if (m != MAP_FAILED)
			munmap(m, size);
		if (p->device >= 0)
			vsim_state_release(p->device, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->pool = p;
	c->base = (uintptr_t)m;
	c->size = size;
	c->next = p->chunks;
	p->chunks = c;
	p->reserved += size;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
	return CUDA_SUCCESS;
}

/* The offset of the first gap of n bytes in c, or SIZE_MAX; *at is the
 * index its block takes. */
static size_t chunk_fit(const struct pool_chunk *c, size_t n, size_t *at)
{
	size_t off = 0;

	for (size_t i = 0; i <= c->nblocks; i++) {
		size_t end = i < c->nblocks ? c->blocks[i].off : c->size;
		if (end - off >= n) {
			*at = i;
			return off;
		}
		if (i < c->nblocks)
			off = c->blocks[i].off + c->blocks[i].size;
	}
	return SIZE_MAX;
}

static int chunk_insert(struct pool_chunk *c, size_t at, size_t off, size_t n)
{
	if (c->nblocks == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 8;
		struct pool_block *b = realloc(c->blocks, cap * sizeof(*b));
		if (!b)
			return -1;
		c->blocks = b;
		c->cap = cap;
	}
	memmove(&c->blocks[at + 1], &c->blocks[at],
		(c->nblocks - at) * sizeof(*c->blocks));
	c->blocks[at] = (struct pool_block){ .off = off, .size = n };
	c->nblocks++;
	return 0;
}

/* Takes n bytes (a multiple of POOL_ALIGN) from p, growing it if needed. */
static CUresult pool_take(struct CUmemPoolHandle_st *p, size_t n,
			  struct pool_chunk **chunk, size_t *off)
{
	struct pool_chunk *c;
	size_t at = 0, o = SIZE_MAX;
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&p->lock);
	for (c = p->chunks; c; c = c->next)
		if ((o = chunk_fit(c, n, &at)) != SIZE_MAX)
			break;
	if (!c) {
		rc = chunk_new(p, round_up(n, POOL_CHUNK));
		if (rc != CUDA_SUCCESS)
			goto out;
		c = p->chunks;
		o = chunk_fit(c, n, &at);
	}
	if (chunk_insert(c, at, o, n) != 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	p->used += n;
	if (p->used > p->used_high)
		p->used_high = p->used;
	*chunk = c;
	*off = o;
out:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

static long block_index(const struct pool_chunk *c, size_t off)
{
	for (size_t i = 0; i < c->nblocks; i++)
		if (c->blocks[i].off == off)
			return (long)i;
	return -1;
}

static void chunk_put(struct pool_chunk *c, size_t off)
{
	struct CUmemPoolHandle_st *p = c->pool;
	long i;

	pthread_mutex_lock(&p->lock);
	i = block_index(c, off);
	if (i >= 0) {
		p->used -= c->blocks[i].size;
		memmove(&c->blocks[i], &c->blocks[i + 1],
			(c->nblocks - (size_t)i - 1) * sizeof(*c->blocks));
		c->nblocks--;
		if (p->destroyed)
			release_empty(p, 0);
	}
	pthread_mutex_unlock(&p->lock);
}

void vsim_pool_block_free(const struct vsim_alloc *a)
{
	struct pool_chunk *c = a->owner;

	chunk_put(c, a->base - c->base);
}

void vsim_pool_sync_release(int device)
{
	pthread_mutex_lock(&pools_lock);
	for (struct CUmemPoolHandle_st *p = pools; p; p = p->next) {
		if (p->device != device && p->device >= 0)
			continue;
		pthread_mutex_lock(&p->lock);
		if (p->reserved > p->threshold)
			release_empty(p, p->threshold);
		pthread_mutex_unlock(&p->lock);
	}
	pthread_mutex_unlock(&pools_lock);
}

/* ---- allocation and free ---------------------------------------------------- */

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytesize,
			   struct CUmemPoolHandle_st *p, struct CUstream_st *s)
{
	struct pool_chunk *c;
	size_t off, n;
	struct vsim_alloc a;
	CUresult rc;

	if (bytesize > SIZE_MAX - POOL_CHUNK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (p->device >= 0 && vsim_fail_now(VSIM_FAIL_ALLOC))
		return CUDA_ERROR_OUT_OF_MEMORY;
	n = round_up(bytesize, POOL_ALIGN);
	rc = pool_take(p, n, &c, &off);
	if (rc != CUDA_SUCCESS)
		return rc;
	a = (struct vsim_alloc){
		.base = c->base + off, .size = bytesize, .mapped = n,
		.kind = p->device >= 0 ? VSIM_MEM_DEVICE : VSIM_MEM_HOST,
		.device = p->device >= 0 ? p->device : s->ctx->device,
		.ctx = s->ctx, .flags = VSIM_ALLOC_POOL, .owner = c,
		.id = atomic_fetch_add(&next_block_id, 1),
	};
	if (vsim_mem_register(&a) != 0) {
		chunk_put(c, off);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)a.base;
	return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize,
			    CUmemoryPool pool, CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pool && pool_check(pool) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pool)
		pool = current_of(s->ctx->device);
	if (!pool)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Captured: an allocation node, which takes nothing from the pool. */
	if (vsim_capture_alloc(s, pool->device, bytesize, dptr, &rc))
		return rc;
	return pool_alloc(dptr, bytesize, pool, s);
}

VSIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
				     CUstream h)
{
	return alloc_async(dptr, bytesize, NULL, h, false);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
				      CUstream h);
VSIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
					  CUstream h)
{
	return alloc_async(dptr, bytesize, NULL, h, true);
}

VSIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
					     CUmemoryPool pool, CUstream h)
{
	if (!pool)
		return pool_check(pool);
	return alloc_async(dptr, bytesize, pool, h, false);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
					      CUmemoryPool pool, CUstream h);
VSIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
						  size_t bytesize,
						  CUmemoryPool pool, CUstream h)
{
	if (!pool)
		return pool_check(pool);
	return alloc_async(dptr, bytesize, pool, h, true);
}

struct free_req {
	uintptr_t base;
	unsigned long long id;
};

/* Runs on the stream's worker when it reaches the free. */
static void CUDA_CB free_at_stream_point(void *arg)
{
	struct free_req *r = arg;
	struct vsim_alloc a;

	/* cuMemFree may have freed it meanwhile (and a new block taken the
	 * address): only the block this free was for goes. */
	if (vsim_mem_lookup(r->base, 1, &a) && a.base == r->base &&
	    a.id == r->id && vsim_mem_unregister(r->base, &a))
		vsim_pool_block_free(&a);
	free(r);
}

/* Marks the block as being freed; false when it is not a pool block or a
 * free is queued already. */
static bool mark_freeing(const struct vsim_alloc *a)
{
	struct pool_chunk *c = a->owner;
	struct CUmemPoolHandle_st *p = c->pool;
	bool ok = false;
	long i;

	pthread_mutex_lock(&p->lock);
	i = block_index(c, a->base - c->base);
	if (i >= 0 && !c->blocks[i].freeing) {
		c->blocks[i].freeing = true;
		ok = true;
	}
	pthread_mutex_unlock(&p->lock);
	return ok;
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	struct vsim_alloc a;
	struct free_req *r;
	struct vsim_op *op;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (vsim_capture_free(s, dptr, &rc))
		return rc;
	if (!vsim_mem_lookup((uintptr_t)dptr, 1, &a) || a.base != dptr)
		return CUDA_ERROR_INVALID_VALUE;
	/* cuMemAlloc memory may be freed in stream order too (CUDA allows
	 * it): freed at once after the context's work, the stream's
	 * included, as cuMemFree does (a stronger order than asked). */
	if (!(a.flags & VSIM_ALLOC_POOL) && a.kind == VSIM_MEM_DEVICE &&
	    !(a.flags & VSIM_ALLOC_MAPPED))
		return cuMemFree_v2(dptr);
	if (!(a.flags & VSIM_ALLOC_POOL) || !mark_freeing(&a))
		return CUDA_ERROR_INVALID_VALUE;
	r = malloc(sizeof(*r));
	op = vsim_op_new(VSIM_OP_HOST_FN);
	if (!r || !op) {
		free(r);
		free(op);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*r = (struct free_req){ .base = a.base, .id = a.id };
	op->u.host.fn = free_at_stream_point;
	op->u.host.data = r;
	return vsim_stream_submit(s, op, NULL);
}

VSIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h)
{
	return free_async(dptr, h, false);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h);
VSIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h)
{
	return free_async(dptr, h, true);
}

/* ---- pools ----------------------------------------------------------------- */

VSIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out,
					       CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	*pool_out = default_of(dev);
	return *pool_out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

VSIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	*pool = current_of(dev);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

VSIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pool_check(pool) != CUDA_SUCCESS || pool->device != dev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pools_lock);
	current_pool[dev] = pool;
	pthread_mutex_unlock(&pools_lock);
	return CUDA_SUCCESS;
}

static CUresult check_location(const CUmemLocation *loc,
			       CUmemAllocationHandleType handles)
{
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (loc->id < 0 || loc->id >= vsim_g.cfg.devices)
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
		return handles ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		/* No NUMA here (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID is -1): node 0. */
		return loc->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* IPC pools (handleTypes other than NONE) are not simulated:
 * CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES is 0. */
VSIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool,
				     const CUmemPoolProps *props)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool || !props ||
	    props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_location(&props->location, props->handleTypes);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	*pool = pool_new(props);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Outstanding blocks keep their chunks until freed; the handle is invalid
 * at once. */
VSIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult rc = pool_check(pool);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (pool->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pools_lock);
	for (int d = 0; d < VSIM_MAX_DEVICES; d++)
		if (current_pool[d] == pool)
			current_pool[d] = NULL;
	pthread_mutex_unlock(&pools_lock);
	pthread_mutex_lock(&pool->lock);
	pool->magic = VSIM_MAGIC_DEAD;
	pool->destroyed = true;
	release_empty(pool, 0);
	pthread_mutex_unlock(&pool->lock);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult rc = pool_check(pool);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&pool->lock);
	release_empty(pool, minBytesToKeep);
	pthread_mutex_unlock(&pool->lock);
	return CUDA_SUCCESS;
}

static bool attr_is_int(CUmemPool_attribute attr)
{
	return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

VSIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool,
					   CUmemPool_attribute attr, void *value)
{
	CUresult rc = pool_check(pool);
	cuuint64_t v;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool->lock);
	if (attr_is_int(attr)) {
		pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
			*(int *)value != 0;
		goto out;
	}
	v = *(cuuint64_t *)value;
	if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
		pool->threshold = v;
	else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH && v == 0)
		pool->reserved_high = pool->reserved;
	else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH && v == 0)
		pool->used_high = pool->used;
	else
		rc = CUDA_ERROR_INVALID_VALUE;
out:
	pthread_mutex_unlock(&pool->lock);
	return rc;
}

VSIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool,
					   CUmemPool_attribute attr, void *value)
{
	CUresult rc = pool_check(pool);
	cuuint64_t v;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool->lock);
	if (attr_is_int(attr)) {
		*(int *)value =
			pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		goto out;
	}
	switch (attr) {
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = pool->threshold; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = pool->reserved; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = pool->reserved_high; break;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = pool->used; break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = pool->used_high; break;
	default:
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	*(cuuint64_t *)value = v;
out:
	pthread_mutex_unlock(&pool->lock);
	return rc;
}
