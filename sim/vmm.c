/* vmm.c - the virtual memory management API: cuMemCreate, cuMemMap & co.
 *
 * A handle's memory is a memfd of its size. A reservation is an inaccessible
 * anonymous mapping (PROT_NONE, MAP_NORESERVE); cuMemMap maps the memfd over
 * part of it (MAP_FIXED | MAP_SHARED), still inaccessible; cuMemSetAccess
 * makes it readable and writable. The mapped address is therefore the memory
 * itself: kernels' host forms, copies and memsets use it like cuMemAlloc
 * memory (vsim_mem_lookup falls back to vsim_vmm_lookup, and adjacent
 * mappings make one range). Mapping one handle twice aliases its memory.
 *
 * Device-located handles reserve their size from the device's capacity in
 * the shared state at cuMemCreate and return it when the last reference
 * goes: cuMemRelease and every mapping (and multicast binding) hold one.
 * Host-located handles (CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA) are host
 * memory and count against no device.
 *
 * Shareable handles: a device handle created with requestedHandleTypes
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR exports its memfd itself (a dup:
 * every fd exported for one memory is one inode, which is the memory's
 * identity across processes). At its first export its bytes become a shared
 * object of the device state (state.c), counted once while any process
 * holds a handle or a mapping of it; an import finds the object by the fd's
 * inode and holds it too. An fd alone holds nothing: a process must import
 * it while some process still holds the memory.
 *
 * Granularity: 2 MiB, minimum and recommended. Access flags are kept per
 * location; READ alone maps the memory read-write all the same (a write
 * through a read-only mapping would be a device fault, not simulated).
 */
#include "sim.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define VMM_GRAN ((size_t)2 << 20)
#define HOST_SLOT VSIM_MAX_DEVICES

struct vmm_reservation {
	uintptr_t base;
	size_t size;
};

struct vmm_mapping {
	uintptr_t base;
	size_t size, offset;
	struct vsim_handle *h;
	unsigned char access[VSIM_MAX_DEVICES + 1];   /* CUmemAccess_flags */
};

static pthread_rwlock_t vmm_rw = PTHREAD_RWLOCK_INITIALIZER;
static struct vsim_handle **handles;
static size_t nhandles, handles_cap;
static struct vmm_reservation *resv;
static size_t nresv, resv_cap;
static struct vmm_mapping *maps;        /* sorted by base */
static size_t nmaps, maps_cap;
static atomic_ullong next_handle_id = 3ull << 61;

static __thread int vmm_cancel;	/* the holder's, given back at unlock */

void vsim_vmm_lock(void)
{
	int c = vsim_nocancel_begin();

	pthread_rwlock_wrlock(&vmm_rw);
	vmm_cancel = c;
}

void vsim_vmm_unlock(void)
{
	int c = vmm_cancel;

	pthread_rwlock_unlock(&vmm_rw);
	vsim_nocancel_end(c);
}

/* The parent's handles and mappings are not the child's: forgotten. */
void vsim_vmm_fork_child(void)
{
	pthread_rwlock_init(&vmm_rw, NULL);
	nhandles = nresv = nmaps = 0;
}

/* Grows *arr to hold one more element of elem bytes; 0 or -1. */
static int grow(void **arr, size_t *cap, size_t len, size_t elem)
{
	size_t ncap;
	void *n;

	if (len < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	n = realloc(*arr, ncap * elem);
	if (!n)
		return -1;
	*arr = n;
	*cap = ncap;
	return 0;
}

/* ---- handles (caller holds the lock) ---------------------------------------- */

struct vsim_handle *vsim_handle_find(CUmemGenericAllocationHandle v)
{
	for (size_t i = 0; i < nhandles; i++)
		if ((uintptr_t)handles[i] == v && handles[i]->user_refs > 0)
			return handles[i];
	return NULL;
}

/* A new handle of size bytes on memory fd (which it owns from now, even on
 * failure); caller holds the lock. */
static CUresult handle_add(int fd, size_t size, struct vsim_handle **out)
{
	struct vsim_handle *h;

	if (grow((void **)&handles, &handles_cap, nhandles, sizeof(*handles)) ||
	    !(h = calloc(1, sizeof(*h)))) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h->fd = fd;
	h->magic = VSIM_MAGIC_MEMHANDLE;
	h->size = size;
	h->user_refs = 1;
	h->counted_device = -1;
	h->id = atomic_fetch_add(&next_handle_id, 1);
	handles[nhandles++] = h;
	*out = h;
	return CUDA_SUCCESS;
}

CUresult vsim_handle_new(size_t size, struct vsim_handle **out)
{
	int fd = memfd_create("vgpu-sim-vmm", MFD_CLOEXEC);

	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return handle_add(fd, size, out);
}

static void handle_maybe_destroy(struct vsim_handle *h)
{
	if (h->user_refs > 0 || h->map_refs > 0)
		return;
	if (h->mc)
		vsim_mcast_destroy(h);
	if (h->shared_id)
		vsim_shared_drop(h->counted_device, h->shared_id);
	else if (h->counted_device >= 0)
		vsim_state_release(h->counted_device, h->size);
	close(h->fd);
	for (size_t i = 0; i < nhandles; i++) {
		if (handles[i] != h)
			continue;
		handles[i] = handles[--nhandles];
		break;
	}
	h->magic = VSIM_MAGIC_DEAD;
	free(h);
}

void vsim_handle_unmap_ref(struct vsim_handle *h)
{
	h->map_refs--;
	handle_maybe_destroy(h);
}

/* ---- mappings ------------------------------------------------------------------ */

/* Index of the mapping containing p, or -1; caller holds the lock. */
static long map_index(uintptr_t p)
{
	size_t lo = 0, hi = nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (maps[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || p - maps[lo - 1].base >= maps[lo - 1].size)
		return -1;
	return (long)lo - 1;
}

static bool map_accessible(const struct vmm_mapping *m)
{
	for (int i = 0; i <= HOST_SLOT; i++)
		if (m->access[i])
			return true;
	return false;
}

bool vsim_vmm_resolve(uintptr_t p, struct vsim_handle **h, size_t *offset)
{
	long i = map_index(p);

	if (i < 0)
		return false;
	*h = maps[i].h;
	*offset = maps[i].offset + (p - maps[i].base);
	return true;
}

bool vsim_vmm_lookup(uintptr_t p, size_t len, struct vsim_alloc *out)
{
	const CUmemLocation *loc;
	bool found = false;
	uintptr_t end;
	long i;

	pthread_rwlock_rdlock(&vmm_rw);
	i = map_index(p);
	if (i < 0 || !map_accessible(&maps[i]))
		goto out;
	end = maps[i].base + maps[i].size;
	for (size_t j = (size_t)i + 1; end - p < len; j++) {
		if (j == nmaps || maps[j].base != end || !map_accessible(&maps[j]))
			goto out;
		end += maps[j].size;
	}
	loc = &maps[i].h->prop.location;
	*out = (struct vsim_alloc){
		.base = maps[i].base, .size = maps[i].size,
		.mapped = maps[i].size,
		.kind = loc->type == CU_MEM_LOCATION_TYPE_DEVICE ?
			VSIM_MEM_DEVICE : VSIM_MEM_HOST,
		.device = loc->type == CU_MEM_LOCATION_TYPE_DEVICE ? loc->id : 0,
		.flags = VSIM_ALLOC_MAPPED, .id = maps[i].h->id,
	};
	found = true;
out:
	pthread_rwlock_unlock(&vmm_rw);
	return found;
}

/* Host memory as the bus model sees it: host-located handles' memory. */
static bool map_on_host(const struct vmm_mapping *m)
{
	CUmemLocationType t = m->h->prop.location.type;

	return !m->h->mc && (t == CU_MEM_LOCATION_TYPE_HOST ||
			     t == CU_MEM_LOCATION_TYPE_HOST_NUMA);
}

size_t vsim_vmm_span(uintptr_t p, size_t len, bool *host)
{
	size_t n = 0;
	long i;

	pthread_rwlock_rdlock(&vmm_rw);
	i = map_index(p);
	if (i >= 0) {
		n = maps[i].size - (p - maps[i].base);
		if (n > len)
			n = len;
		*host = map_on_host(&maps[i]);
	}
	pthread_rwlock_unlock(&vmm_rw);
	return n;
}

/* The mappings [*first, *last] make up exactly [ptr, ptr+size); caller
 * holds the lock. */
static bool span_exact(uintptr_t ptr, size_t size, size_t *first, size_t *last)
{
	long i = map_index(ptr);
	uintptr_t end;

	if (i < 0 || maps[i].base != ptr || size == 0)
		return false;
	end = ptr + maps[i].size;
	*first = *last = (size_t)i;
	while (end - ptr < size) {
		size_t j = *last + 1;
		if (j == nmaps || maps[j].base != end)
			return false;
		end += maps[j].size;
		*last = j;
	}
	return end - ptr == size;
}

static struct vmm_reservation *reservation_of(uintptr_t p, size_t size)
{
	for (size_t i = 0; i < nresv; i++)
		if (p >= resv[i].base && p - resv[i].base < resv[i].size &&
		    size <= resv[i].size - (p - resv[i].base))
			return &resv[i];
	return NULL;
}

static bool overlaps_mapping(uintptr_t p, size_t size)
{
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].base < p + size && p < maps[i].base + maps[i].size)
			return true;
	return false;
}

static int map_insert(const struct vmm_mapping *m)
{
	size_t i = 0;

	if (grow((void **)&maps, &maps_cap, nmaps, sizeof(*maps)))
		return -1;
	while (i < nmaps && maps[i].base < m->base)
		i++;
	memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof(*maps));
	maps[i] = *m;
	nmaps++;
	return 0;
}

/* ---- allocation properties ---------------------------------------------------- */

static CUresult check_prop(const CUmemAllocationProp *prop)
{
	const CUmemLocation *loc = &prop->location;

	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (loc->id < 0 || loc->id >= vsim_g.cfg.devices)
			return CUDA_ERROR_INVALID_DEVICE;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
		return prop->requestedHandleTypes ? CUDA_ERROR_INVALID_VALUE
						  : CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		/* No NUMA here (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID is -1): node 0. */
		return loc->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

VSIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
		const CUmemAllocationProp *prop,
		CUmemAllocationGranularity_flags option)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
				      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_prop(prop);
	if (rc == CUDA_SUCCESS)
		*granularity = VMM_GRAN;
	return rc;
}

#define KNOWN_HANDLE_TYPES (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | \
			    CU_MEM_HANDLE_TYPE_WIN32 | \
			    CU_MEM_HANDLE_TYPE_WIN32_KMT | \
			    CU_MEM_HANDLE_TYPE_FABRIC)

/* File descriptors of device memory are simulated; Windows and fabric
 * handles, and shareable host memory, are not. */
static CUresult check_handle_types(const CUmemAllocationProp *prop)
{
	unsigned t = (unsigned)prop->requestedHandleTypes;

	if (t & ~(unsigned)KNOWN_HANDLE_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if ((t & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    (t && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE))
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

/* Compression is not simulated: its device attributes read 0. */
VSIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle,
				 size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags)
{
	struct vsim_handle *h;
	int dev = -1;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle || !prop || flags || size == 0 || size % VMM_GRAN)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_prop(prop);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = check_handle_types(prop);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (prop->allocFlags.compressionType)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
		dev = prop->location.id;
		if (vsim_fail_now(VSIM_FAIL_ALLOC))
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = vsim_state_reserve(dev, size);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	vsim_vmm_lock();
	rc = vsim_handle_new(size, &h);
	if (rc == CUDA_SUCCESS) {
		h->prop = *prop;
		h->counted_device = dev;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	}
	vsim_vmm_unlock();
	if (rc != CUDA_SUCCESS && dev >= 0)
		vsim_state_release(dev, size);
	return rc;
}

VSIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct vsim_handle *h;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = vsim_handle_find(handle);
	if (h) {
		h->user_refs--;
		handle_maybe_destroy(h);
	}
	vsim_vmm_unlock();
	return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

VSIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(
		CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	struct vsim_handle *h;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	vsim_vmm_lock();
	h = vsim_handle_find(handle);
	if (h && !h->mc)
		*prop = h->prop;
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	vsim_vmm_unlock();
	return rc;
}

VSIM_EXPORT CUresult cuMemRetainAllocationHandle(
		CUmemGenericAllocationHandle *handle, void *addr)
{
	struct vsim_handle *h;
	size_t off;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	vsim_vmm_lock();
	if (vsim_vmm_resolve((uintptr_t)addr, &h, &off)) {
		h->user_refs++;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	} else {
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	vsim_vmm_unlock();
	return rc;
}

/* ---- shareable handles ------------------------------------------------------- */

/* File descriptors are simulated; the other known types are not. */
static CUresult check_share_type(CUmemAllocationHandleType t)
{
	switch (t) {
	case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
		return CUDA_SUCCESS;
	case CU_MEM_HANDLE_TYPE_WIN32:
	case CU_MEM_HANDLE_TYPE_WIN32_KMT:
	case CU_MEM_HANDLE_TYPE_FABRIC:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Each call writes a new int fd, a dup of the handle's memfd without
 * FD_CLOEXEC: the caller's, to pass on and to close. A handle created
 * without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is refused. */
VSIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
		CUmemGenericAllocationHandle handle,
		CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct vsim_handle *h;
	int fd;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!shareableHandle || flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_share_type(handleType);
	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = vsim_handle_find(handle);
	if (!h || h->mc || !(h->prop.requestedHandleTypes &
			     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (!h->shared_id) {
		struct vsim_shared_desc d = {
			.kind = VSIM_SHARED_VMM, .size = h->size, .fd = h->fd,
			.prop = h->prop,
		};
		rc = vsim_shared_create(h->counted_device, &d, &h->shared_id);
		if (rc != CUDA_SUCCESS)
			goto out;
	}
	fd = dup(h->fd);
	if (fd < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*(int *)shareableHandle = fd;
out:
	vsim_vmm_unlock();
	return rc;
}

/* osHandle is the fd's value cast to a pointer. The new handle has a memfd
 * of its own (a dup), so the caller may close its fd at once; it holds the
 * memory as the exporter's handle does. An fd that is not the memory of an
 * object some process still holds is CUDA_ERROR_INVALID_VALUE. */
VSIM_EXPORT CUresult cuMemImportFromShareableHandle(
		CUmemGenericAllocationHandle *handle, void *osHandle,
		CUmemAllocationHandleType shHandleType)
{
	struct vsim_shared_desc d;
	struct vsim_handle *h;
	intptr_t v = (intptr_t)osHandle;
	uint64_t id;
	int dev, fd;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_share_type(shHandleType);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (v < 0 || v > INT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	fd = fcntl((int)v, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_shared_import(fd, &dev, &id, &d);
	if (rc != CUDA_SUCCESS) {
		close(fd);
		return rc;
	}
	vsim_vmm_lock();
	rc = handle_add(fd, d.size, &h);
	if (rc == CUDA_SUCCESS) {
		h->prop = d.prop;
		h->counted_device = dev;
		h->shared_id = id;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	}
	vsim_vmm_unlock();
	if (rc != CUDA_SUCCESS)
		vsim_shared_drop(dev, id);
	return rc;
}

unsigned long long vsim_vmm_handle_types(uintptr_t p)
{
	unsigned long long t = 0;
	long i;

	pthread_rwlock_rdlock(&vmm_rw);
	i = map_index(p);
	if (i >= 0)
		t = maps[i].h->prop.requestedHandleTypes;
	pthread_rwlock_unlock(&vmm_rw);
	return t;
}

/* ---- address reservations --------------------------------------------------- */

static void *map_none(void *at, size_t size, int extra)
{
	return mmap(at, size, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra, -1, 0);
}

/* An inaccessible range of size bytes aligned to align, at hint if free. */
static uintptr_t reserve_va(size_t size, size_t align, uintptr_t hint)
{
	uintptr_t m, start;
	void *p;

	if (hint && hint % align == 0) {
		p = map_none((void *)hint, size, MAP_FIXED_NOREPLACE);
		if (p == (void *)hint)
			return hint;
		if (p != MAP_FAILED)
			munmap(p, size);
	}
	p = map_none(NULL, size + align, 0);
	if (p == MAP_FAILED)
		return 0;
	m = (uintptr_t)p;
	start = (m + align - 1) & ~(uintptr_t)(align - 1);
	if (start > m)
		munmap(p, start - m);
	if (m + size + align > start + size)
		munmap((void *)(start + size), m + size + align - start - size);
	return start;
}

VSIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
					 size_t alignment, CUdeviceptr addr,
					 unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t align = alignment > VMM_GRAN ? alignment : VMM_GRAN;
	uintptr_t base;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ptr || size == 0 || size % page || addr % page || flags ||
	    (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (size > SIZE_MAX / 2 || align > SIZE_MAX / 2)
		return CUDA_ERROR_OUT_OF_MEMORY;
	vsim_vmm_lock();
	if (grow((void **)&resv, &resv_cap, nresv, sizeof(*resv))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	base = reserve_va(size, align, (uintptr_t)addr);
	if (!base) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	resv[nresv++] = (struct vmm_reservation){ base, size };
	*ptr = (CUdeviceptr)base;
out:
	vsim_vmm_unlock();
	return rc;
}

/* A reservation still holding mappings is refused (unmap first). */
VSIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult rc = vsim_check_init();
	size_t i;

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	for (i = 0; i < nresv; i++)
		if (resv[i].base == ptr && resv[i].size == size)
			break;
	if (i == nresv || overlaps_mapping(ptr, size)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	munmap((void *)(uintptr_t)ptr, size);
	resv[i] = resv[--nresv];
out:
	vsim_vmm_unlock();
	return rc;
}

/* ---- mapping -------------------------------------------------------------------- */

static CUresult check_map(uintptr_t ptr, size_t size, size_t offset,
			  const struct vsim_handle *h)
{
	if (size == 0 || ptr % VMM_GRAN || size % VMM_GRAN || offset % VMM_GRAN ||
	    offset > h->size || size > h->size - offset)
		return CUDA_ERROR_INVALID_VALUE;
	if (!reservation_of(ptr, size) || overlaps_mapping(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	if (h->mc && !vsim_mcast_complete(h))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			      CUmemGenericAllocationHandle handle,
			      unsigned long long flags)
{
	struct vmm_mapping m = { .base = ptr, .size = size, .offset = offset };
	CUresult rc = vsim_check_init();
	void *p;

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	vsim_vmm_lock();
	m.h = vsim_handle_find(handle);
	rc = m.h ? check_map(ptr, size, offset, m.h) : CUDA_ERROR_INVALID_VALUE;
	if (rc != CUDA_SUCCESS)
		goto out;
	if (grow((void **)&maps, &maps_cap, nmaps, sizeof(*maps))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
		 m.h->fd, (off_t)offset);
	if (p == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	map_insert(&m);
	m.h->map_refs++;
out:
	vsim_vmm_unlock();
	return rc;
}

/* Synchronous: work of the current context, which may use the range, ends
 * first. The range becomes a reservation again. */
VSIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct CUctx_st *ctx = vsim_ctx_current();
	size_t first, last;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (vsim_ctx_valid(ctx))
		vsim_ctx_drain(ctx);
	vsim_vmm_lock();
	if (!span_exact(ptr, size, &first, &last)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	map_none((void *)(uintptr_t)ptr, size, MAP_FIXED);
	for (size_t i = first; i <= last; i++)
		vsim_handle_unmap_ref(maps[i].h);
	memmove(&maps[first], &maps[last + 1],
		(nmaps - last - 1) * sizeof(*maps));
	nmaps -= last - first + 1;
out:
	vsim_vmm_unlock();
	return rc;
}

/* ---- access ---------------------------------------------------------------------- */

/* The access slot of a location: a device ordinal, or HOST_SLOT. */
static CUresult location_slot(const CUmemLocation *loc, int *slot)
{
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		if (loc->id < 0 || loc->id >= vsim_g.cfg.devices)
			return CUDA_ERROR_INVALID_DEVICE;
		*slot = loc->id;
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		*slot = HOST_SLOT;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult check_access_desc(const CUmemAccessDesc *d, int *slot)
{
	if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
	    d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
	    d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return CUDA_ERROR_INVALID_VALUE;
	return location_slot(&d->location, slot);
}

/* Host access is for host-located memory only. */
static bool host_access_ok(size_t first, size_t last)
{
	for (size_t i = first; i <= last; i++)
		if (maps[i].h->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ||
		    maps[i].h->mc)
			return false;
	return true;
}

VSIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
				    const CUmemAccessDesc *desc, size_t count)
{
	size_t first, last;
	int slot;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!desc || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < count; k++)
		if ((rc = check_access_desc(&desc[k], &slot)) != CUDA_SUCCESS)
			return rc;
	vsim_vmm_lock();
	if (!span_exact(ptr, size, &first, &last)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (size_t k = 0; k < count; k++) {
		check_access_desc(&desc[k], &slot);
		if (slot == HOST_SLOT && !host_access_ok(first, last)) {
			rc = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
	}
	for (size_t k = 0; k < count; k++) {
		check_access_desc(&desc[k], &slot);
		for (size_t i = first; i <= last; i++)
			maps[i].access[slot] = (unsigned char)desc[k].flags;
	}
	for (size_t i = first; i <= last; i++)
		mprotect((void *)maps[i].base, maps[i].size,
			 map_accessible(&maps[i]) ? PROT_READ | PROT_WRITE
						  : PROT_NONE);
out:
	vsim_vmm_unlock();
	return rc;
}

VSIM_EXPORT CUresult cuMemGetAccess(unsigned long long *flags,
				    const CUmemLocation *location,
				    CUdeviceptr ptr)
{
	int slot;
	long i;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	rc = location_slot(location, &slot);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_rdlock(&vmm_rw);
	i = map_index((uintptr_t)ptr);
	if (i >= 0)
		*flags = maps[i].access[slot];
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_rwlock_unlock(&vmm_rw);
	return rc;
}
