/* memory.c - device and page-locked host memory, and pointer queries.
 *
 * Device memory is anonymous host memory (MAP_NORESERVE: untouched pages cost
 * nothing); its address is the CUdeviceptr. Capacity is accounted in the
 * shared device state, rounded up to whole pages, so every process using the
 * state directory sees one device. The allocation table is a sorted array:
 * lookups by any address inside an allocation are a binary search.
 *
 * Legacy IPC: an allocation exported with cuIpcGetMemHandle becomes a
 * memfd mapped shared at its own address (its contents copied over), and
 * its bytes a shared object of the device state (state.c), counted once
 * for every process that holds it; another process opens the memfd and maps
 * it where it likes. Lock order: the table's lock, then the state mutex.
 */
#include "sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PITCH_ALIGN 512

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct vsim_alloc *table;
static size_t table_len, table_cap;
static atomic_ullong next_buffer_id = 1;

static size_t page_round(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n + page - 1) & ~(page - 1);
}

/* Index of the first allocation whose base is > p. */
static size_t upper_bound(uintptr_t p)
{
	size_t lo = 0, hi = table_len;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (table[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Index of the allocation containing p, or -1; caller holds table_lock. */
static long find_index(uintptr_t p)
{
	size_t i = upper_bound(p);

	if (i == 0)
		return -1;
	i--;
	if (p - table[i].base < (table[i].size ? table[i].size : 1))
		return (long)i;
	return -1;
}

/* Caller holds table_lock for writing; 0, or -1 out of memory. */
static int table_insert_locked(const struct vsim_alloc *a)
{
	size_t i;

	if (table_len == table_cap) {
		size_t cap = table_cap ? table_cap * 2 : 64;
		struct vsim_alloc *t = realloc(table, cap * sizeof(*t));
		if (!t)
			return -1;
		table = t;
		table_cap = cap;
	}
	i = upper_bound(a->base);
	memmove(&table[i + 1], &table[i], (table_len - i) * sizeof(*table));
	table[i] = *a;
	table_len++;
	return 0;
}

static int table_insert(const struct vsim_alloc *a)
{
	int rc;

	pthread_rwlock_wrlock(&table_lock);
	rc = table_insert_locked(a);
	pthread_rwlock_unlock(&table_lock);
	return rc;
}

/* Removes the allocation starting exactly at base and of kind; 0 if found. */
static int table_remove(uintptr_t base, enum vsim_mem_kind kind,
			struct vsim_alloc *out)
{
	long i;
	int rc = -1;

	pthread_rwlock_wrlock(&table_lock);
	i = find_index(base);
	if (i >= 0 && table[i].base == base && table[i].kind == kind) {
		*out = table[i];
		memmove(&table[i], &table[i + 1],
			(table_len - (size_t)i - 1) * sizeof(*table));
		table_len--;
		rc = 0;
	}
	pthread_rwlock_unlock(&table_lock);
	return rc;
}

bool vsim_mem_lookup(uintptr_t p, size_t len, struct vsim_alloc *out)
{
	bool found = false;
	long i;

	pthread_rwlock_rdlock(&table_lock);
	i = find_index(p);
	if (i >= 0 && len <= table[i].size - (p - table[i].base)) {
		*out = table[i];
		found = true;
	}
	pthread_rwlock_unlock(&table_lock);
	return found || vsim_vmm_lookup(p, len, out);
}

int vsim_mem_register(const struct vsim_alloc *a)
{
	return table_insert(a);
}

bool vsim_mem_unregister(uintptr_t base, struct vsim_alloc *out)
{
	struct vsim_alloc a;

	if (!vsim_mem_lookup(base, 1, &a) || a.base != base ||
	    (a.flags & VSIM_ALLOC_MAPPED))
		return false;
	return table_remove(base, a.kind, out) == 0;
}

/* The parent's allocations are not the child's: forgotten, not unmapped
 * (the child keeps private copies of the pages, as of any memory). */
void vsim_mem_fork_child(void)
{
	pthread_rwlock_init(&table_lock, NULL);
	table_len = 0;
}

CUresult vsim_mem_check_device(CUdeviceptr p, size_t len)
{
	struct vsim_alloc a;

	if (!vsim_mem_lookup((uintptr_t)p, len ? len : 1, &a))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static void release_alloc(const struct vsim_alloc *a)
{
	if (a->flags & VSIM_ALLOC_POOL) {
		vsim_pool_block_free(a);
		return;
	}
	if (a->share_id) {
		/* Counted in the shared object, not in this process's slot.
		 * The hold goes first: an exporter's fd stays open for as long
		 * as importers may reopen it. */
		vsim_shared_drop(a->device, a->share_id);
		munmap((void *)a->base, a->mapped);
		if (!(a->flags & VSIM_ALLOC_IPC))
			close(a->share_fd);
		return;
	}
	if (a->kind == VSIM_MEM_DEVICE)
		vsim_state_release(a->device, a->mapped);
	if (!(a->flags & VSIM_ALLOC_REGISTERED))
		munmap((void *)a->base, a->mapped);
}

void vsim_mem_free_ctx(struct CUctx_st *ctx)
{
	size_t i = 0;
	int cancel = vsim_nocancel_begin();

	pthread_rwlock_wrlock(&table_lock);
	while (i < table_len) {
		/* Pool memory belongs to its pool, not to a context. */
		if (table[i].ctx != ctx || (table[i].flags & VSIM_ALLOC_POOL)) {
			i++;
			continue;
		}
		release_alloc(&table[i]);
		memmove(&table[i], &table[i + 1],
			(table_len - i - 1) * sizeof(*table));
		table_len--;
	}
	pthread_rwlock_unlock(&table_lock);
	vsim_nocancel_end(cancel);
}

/* Maps and records an allocation; device memory is reserved first. */
CUresult vsim_mem_alloc(struct CUctx_st *ctx, size_t size,
			enum vsim_mem_kind kind, unsigned flags, uintptr_t *out)
{
	struct vsim_alloc a = {
		.size = size, .mapped = page_round(size), .kind = kind,
		.device = ctx->device, .ctx = ctx, .flags = flags,
	};
	void *p;
	CUresult rc;

	if (kind == VSIM_MEM_DEVICE) {
		if (vsim_fail_now(VSIM_FAIL_ALLOC))
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = vsim_state_reserve(ctx->device, a.mapped);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	p = mmap(NULL, a.mapped, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_release;
	}
	a.base = (uintptr_t)p;
	a.id = atomic_fetch_add(&next_buffer_id, 1);
	if (table_insert(&a) != 0) {
		munmap(p, a.mapped);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out_release;
	}
	*out = a.base;
	return CUDA_SUCCESS;
out_release:
	if (kind == VSIM_MEM_DEVICE)
		vsim_state_release(ctx->device, a.mapped);
	return rc;
}

VSIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct CUctx_st *ctx;
	uintptr_t p;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* Not stream-ordered, so a capture cannot see it (capture.c). */
	rc = vsim_capture_unsafe_call();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = vsim_mem_alloc(ctx, bytesize, VSIM_MEM_DEVICE, 0, &p);
	if (rc == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)p;
	return rc;
}

VSIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch,
					size_t width, size_t height,
					unsigned int elementSize)
{
	struct CUctx_st *ctx;
	size_t row;
	uintptr_t p;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !pitch || width == 0 || height == 0 ||
	    (elementSize != 4 && elementSize != 8 && elementSize != 16))
		return CUDA_ERROR_INVALID_VALUE;
	if (width > SIZE_MAX - PITCH_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	row = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (height > SIZE_MAX / row)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = vsim_mem_alloc(ctx, row * height, VSIM_MEM_DEVICE, 0, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	*dptr = (CUdeviceptr)p;
	*pitch = row;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dptr == 0)
		return CUDA_SUCCESS;
	if (!vsim_mem_lookup((uintptr_t)dptr, 1, &a) || a.base != dptr ||
	    a.kind != VSIM_MEM_DEVICE ||
	    (a.flags & (VSIM_ALLOC_MAPPED | VSIM_ALLOC_IPC)))
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_capture_unsafe_call();
	if (rc != CUDA_SUCCESS)
		return rc;
	/* As on a GPU, freeing waits for work that may still use the memory;
	 * here it also keeps host forms of kernels off unmapped pages. */
	vsim_ctx_drain(a.ctx);
	if (table_remove(a.base, VSIM_MEM_DEVICE, &a) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	release_alloc(&a);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	struct CUctx_st *ctx;
	uint64_t cap, used;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	cap = vsim_state_capacity(ctx->device);
	used = vsim_state_used(ctx->device);
	*total = cap;
	*free = used < cap ? cap - used : 0;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize,
					     CUdeviceptr dptr)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_mem_lookup((uintptr_t)dptr, 1, &a))
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = (CUdeviceptr)a.base;
	if (psize)
		*psize = a.size;
	return CUDA_SUCCESS;
}

/* ---- legacy IPC (ipc.c's entry points) ------------------------------------ */

/* What cuIpcGetMemHandle takes, as the driver does: cuMemAlloc(Pitch)
 * memory, not pool blocks, managed memory, VMM mappings or memory opened
 * from another process. */
static bool ipc_exportable(const struct vsim_alloc *a)
{
	return a->kind == VSIM_MEM_DEVICE &&
	       !(a->flags & (VSIM_ALLOC_POOL | VSIM_ALLOC_MANAGED |
			     VSIM_ALLOC_MAPPED | VSIM_ALLOC_IPC));
}

static bool all_zero(const unsigned char *p, size_t n)
{
	const uint64_t *w = (const uint64_t *)p;

	for (size_t i = 0; i < n / sizeof(*w); i++)
		if (w[i])
			return false;
	return true;
}

/* Writes a's contents to fd, skipping runs of zeros: the memfd reads them as
 * zeros already, and pages never written stay unallocated in both. */
static int copy_to(int fd, const struct vsim_alloc *a)
{
	const size_t chunk = 64 << 10;

	for (size_t off = 0; off < a->mapped; off += chunk) {
		const unsigned char *src = (const unsigned char *)a->base + off;
		size_t n = a->mapped - off < chunk ? a->mapped - off : chunk;
		size_t done = 0;

		if (all_zero(src, n))
			continue;
		while (done < n) {
			ssize_t w = pwrite(fd, src + done, n - done,
					   (off_t)(off + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return -1;
			done += (size_t)w;
		}
	}
	return 0;
}

/* Moves a's pages to a memfd mapped shared over them, at the same address,
 * and its bytes to a new shared object. Caller holds table_lock for writing,
 * and no work of a's context is in flight. */
static CUresult share_alloc(struct vsim_alloc *a)
{
	struct vsim_shared_desc d = {
		.kind = VSIM_SHARED_IPC, .size = a->mapped, .asked = a->size,
	};
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;

	d.fd = memfd_create("vgpu-sim-ipc", MFD_CLOEXEC);
	if (d.fd < 0)
		return rc;
	if (ftruncate(d.fd, (off_t)a->mapped) != 0 || copy_to(d.fd, a) != 0 ||
	    mmap((void *)a->base, a->mapped, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED, d.fd, 0) == MAP_FAILED)
		goto out_close;
	/* The memory is the memfd's from here; should the object not be made,
	 * it stays so, merely not exported, and counted in this slot. */
	rc = vsim_shared_create(a->device, &d, &a->share_id);
	if (rc != CUDA_SUCCESS)
		goto out_close;
	a->share_fd = d.fd;
	return CUDA_SUCCESS;
out_close:
	close(d.fd);
	return rc;
}

CUresult vsim_mem_export(uintptr_t p, struct vsim_alloc *out)
{
	struct vsim_alloc a;
	CUresult rc = CUDA_SUCCESS;
	int cancel;
	long i;

	if (!vsim_mem_lookup(p, 1, &a) || !ipc_exportable(&a))
		return CUDA_ERROR_INVALID_VALUE;
	if (a.share_id) {
		*out = a;
		return CUDA_SUCCESS;
	}
	/* Work in flight must not write the old pages while they are copied. */
	vsim_ctx_drain(a.ctx);
	cancel = vsim_nocancel_begin();	/* copies and closes under the lock */
	pthread_rwlock_wrlock(&table_lock);
	i = find_index(p);
	if (i < 0 || table[i].base != a.base || !ipc_exportable(&table[i])) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (!table[i].share_id)
		rc = share_alloc(&table[i]);
	*out = table[i];
out:
	pthread_rwlock_unlock(&table_lock);
	vsim_nocancel_end(cancel);
	return rc;
}

/* The table's lock is held for writing throughout, so that two threads
 * opening one handle map it once. */
CUresult vsim_mem_ipc_open(struct CUctx_st *ctx, int device, uint64_t id,
			   uintptr_t *out)
{
	struct vsim_shared_desc d;
	struct vsim_alloc a;
	CUresult rc;
	void *p;
	int fd, cancel = vsim_nocancel_begin();	/* closes under the lock */

	pthread_rwlock_wrlock(&table_lock);
	for (size_t i = 0; i < table_len; i++) {
		struct vsim_alloc *t = &table[i];
		if (!(t->flags & VSIM_ALLOC_IPC) || t->device != device ||
		    t->share_id != id)
			continue;
		/* "Only by one CUcontext per CUdevice per other process". */
		rc = t->ctx == ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
		if (rc == CUDA_SUCCESS) {
			t->ipc_refs++;
			*out = t->base;
		}
		goto out;
	}
	rc = vsim_shared_open(device, id, &fd, &d);
	if (rc != CUDA_SUCCESS)
		goto out;
	p = mmap(NULL, d.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	a = (struct vsim_alloc){
		.base = (uintptr_t)p, .size = d.asked, .mapped = d.size,
		.kind = VSIM_MEM_DEVICE, .device = device, .ctx = ctx,
		.id = atomic_fetch_add(&next_buffer_id, 1),
		.flags = VSIM_ALLOC_IPC, .share_id = id, .share_fd = -1,
		.ipc_refs = 1,
	};
	if (p == MAP_FAILED || table_insert_locked(&a) != 0) {
		rc = p == MAP_FAILED ? CUDA_ERROR_MAP_FAILED
				     : CUDA_ERROR_OUT_OF_MEMORY;
		if (p != MAP_FAILED)
			munmap(p, d.size);
		vsim_shared_drop(device, id);
		goto out;
	}
	*out = a.base;
out:
	pthread_rwlock_unlock(&table_lock);
	vsim_nocancel_end(cancel);
	return rc;
}

CUresult vsim_mem_ipc_close(uintptr_t base)
{
	struct vsim_alloc a;
	CUresult rc = CUDA_SUCCESS;
	bool last = false;
	long i;

	if (!vsim_mem_lookup(base, 1, &a) || a.base != base ||
	    !(a.flags & VSIM_ALLOC_IPC))
		return CUDA_ERROR_INVALID_VALUE;
	/* The last close unmaps: the context's work that may use it ends
	 * first, as for cuMemFree. */
	if (a.ipc_refs == 1)
		vsim_ctx_drain(a.ctx);
	pthread_rwlock_wrlock(&table_lock);
	i = find_index(base);
	if (i < 0 || table[i].base != base ||
	    !(table[i].flags & VSIM_ALLOC_IPC)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (--table[i].ipc_refs > 0)
		goto out;
	a = table[i];
	memmove(&table[i], &table[i + 1],
		(table_len - (size_t)i - 1) * sizeof(*table));
	table_len--;
	last = true;
out:
	pthread_rwlock_unlock(&table_lock);
	if (last)
		release_alloc(&a);
	return rc;
}

/* ---- page-locked host memory --------------------------------------------- */

VSIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize,
				    unsigned int flags)
{
	struct CUctx_st *ctx;
	uintptr_t p;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pp || bytesize == 0 ||
	    (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE |
				 CU_MEMHOSTALLOC_DEVICEMAP |
				 CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_mem_alloc(ctx, bytesize, VSIM_MEM_HOST, flags, &p);
	if (rc == CUDA_SUCCESS)
		*pp = (void *)p;
	return rc;
}

VSIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return cuMemHostAlloc(pp, bytesize, 0);
}

VSIM_EXPORT CUresult cuMemFreeHost(void *p)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_mem_lookup((uintptr_t)p, 1, &a) || a.base != (uintptr_t)p ||
	    a.kind != VSIM_MEM_HOST ||
	    (a.flags & (VSIM_ALLOC_REGISTERED | VSIM_ALLOC_MAPPED)))
		return CUDA_ERROR_INVALID_VALUE;
	vsim_ctx_drain(a.ctx);
	if (table_remove(a.base, VSIM_MEM_HOST, &a) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	release_alloc(&a);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize,
					  unsigned int flags)
{
	struct CUctx_st *ctx;
	struct vsim_alloc a;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!p || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (vsim_mem_lookup((uintptr_t)p, 1, &a))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	a = (struct vsim_alloc){
		.base = (uintptr_t)p, .size = bytesize, .mapped = bytesize,
		.kind = VSIM_MEM_HOST, .device = ctx->device, .ctx = ctx,
		.flags = flags | VSIM_ALLOC_REGISTERED,
		.id = atomic_fetch_add(&next_buffer_id, 1),
	};
	return table_insert(&a) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

VSIM_EXPORT CUresult cuMemHostUnregister(void *p)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_mem_lookup((uintptr_t)p, 1, &a) || a.base != (uintptr_t)p ||
	    !(a.flags & VSIM_ALLOC_REGISTERED))
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	vsim_ctx_drain(a.ctx);
	table_remove(a.base, VSIM_MEM_HOST, &a);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p,
						  unsigned int flags)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pdptr || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!vsim_mem_lookup((uintptr_t)p, 1, &a) || a.kind != VSIM_MEM_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags || !vsim_mem_lookup((uintptr_t)p, 1, &a) ||
	    a.kind != VSIM_MEM_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = a.flags & ~VSIM_ALLOC_REGISTERED;
	return CUDA_SUCCESS;
}

/* ---- pointer attributes -------------------------------------------------- */

#define PUT(type, v) do { *(type *)data = (type)(v); } while (0)

static CUresult pointer_attr(void *data, CUpointer_attribute attr,
			     const struct vsim_alloc *a, uintptr_t p)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		PUT(CUcontext, a->ctx);
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		PUT(unsigned int, a->kind == VSIM_MEM_DEVICE ?
			CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		PUT(CUdeviceptr, p);
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (a->kind != VSIM_MEM_HOST && !(a->flags & VSIM_ALLOC_MANAGED))
			return CUDA_ERROR_INVALID_VALUE;
		PUT(void *, p);
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		PUT(bool, (a->flags & VSIM_ALLOC_MANAGED) != 0);
		break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		PUT(bool, ipc_exportable(a));
		break;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		PUT(bool, false);
		break;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		PUT(bool, true);
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		PUT(unsigned long long, a->id);
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		PUT(int, a->device);
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		PUT(CUdeviceptr, a->base);
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		PUT(size_t, a->size);
		break;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		PUT(unsigned long long, (a->flags & VSIM_ALLOC_MAPPED) ?
			vsim_vmm_handle_types(p) : 0);
		break;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		PUT(int, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		PUT(CUmemoryPool, NULL);
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr,
					   CUdeviceptr ptr)
{
	struct vsim_alloc a;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!vsim_mem_lookup((uintptr_t)ptr, 1, &a))
		return CUDA_ERROR_INVALID_VALUE;
	return pointer_attr(data, attr, &a, (uintptr_t)ptr);
}

static size_t attr_size(CUpointer_attribute attr)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
	case CU_POINTER_ATTRIBUTE_MAPPED:
		return sizeof(bool);
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		return sizeof(int);
	default:
		return sizeof(void *);
	}
}

/* Unlike cuPointerGetAttribute, an unknown pointer is not an error: every
 * attribute reads as zero, and the device ordinal as -2. */
VSIM_EXPORT CUresult cuPointerGetAttributes(unsigned int n,
					    CUpointer_attribute *attrs,
					    void **data, CUdeviceptr ptr)
{
	struct vsim_alloc a;
	bool known;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == 0 || !attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	known = vsim_mem_lookup((uintptr_t)ptr, 1, &a);
	for (unsigned i = 0; i < n; i++) {
		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
		if (known) {
			rc = pointer_attr(data[i], attrs[i], &a, (uintptr_t)ptr);
			if (rc == CUDA_ERROR_INVALID_VALUE &&
			    attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)
				*(void **)data[i] = NULL;
			else if (rc != CUDA_SUCCESS)
				return rc;
		} else if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
			*(int *)data[i] = -2;
		} else {
			memset(data[i], 0, attr_size(attrs[i]));
		}
	}
	return CUDA_SUCCESS;
}
