/* managed.c - managed (unified) memory: cuMemAllocManaged, advice, prefetch.
 *
 * Managed memory is host memory at a device-like address, as all device
 * memory is here, so the host uses the pointer directly. It counts against
 * the allocating context's device in full from allocation (whole pages), as
 * if resident there for its whole life: a real driver counts pages while
 * they are resident on the device and may oversubscribe and evict; the
 * simulator does not, so cuMemAllocManaged beyond the free capacity is
 * CUDA_ERROR_OUT_OF_MEMORY. cuMemFree frees it; context destruction too.
 *
 * Advice and prefetches change what cuMemRangeGetAttribute reports, and
 * where the bus model (bus.c) takes the memory to be: on the device from
 * allocation; on the host after advice to prefer the host or a prefetch to
 * it; on the device again after advice to prefer a device or a prefetch to
 * one. They are kept per allocation (advice on part of an allocation
 * applies to the whole of it) and take effect at the call, not in stream
 * order.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

struct managed_info {
	unsigned long long id;        /* of the allocation it describes */
	uintptr_t base;
	bool read_mostly;
	CUmemLocation preferred;      /* type 0: none */
	CUmemLocation last_prefetch;  /* type 0: none */
	uint32_t accessed_by;         /* devices */
	bool accessed_by_host;
	bool on_host;                 /* for the bus model */
};

static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed_info *infos;
static size_t ninfos, infos_cap;

/* The parent's allocations are not the child's: forgotten. */
void vsim_managed_fork_child(void)
{
	pthread_mutex_init(&info_lock, NULL);
	ninfos = 0;
}

/* Drops entries whose allocation is gone; caller holds info_lock. */
static void prune(void)
{
	struct vsim_alloc a;
	size_t i = 0;

	while (i < ninfos) {
		if (vsim_mem_lookup(infos[i].base, 1, &a) &&
		    a.base == infos[i].base && a.id == infos[i].id)
			i++;
		else
			infos[i] = infos[--ninfos];
	}
}

static int info_add(const struct vsim_alloc *a)
{
	int rc = 0;

	pthread_mutex_lock(&info_lock);
	prune();
	if (ninfos == infos_cap) {
		size_t cap = infos_cap ? infos_cap * 2 : 16;
		struct managed_info *n = realloc(infos, cap * sizeof(*n));
		if (!n) {
			rc = -1;
			goto out;
		}
		infos = n;
		infos_cap = cap;
	}
	infos[ninfos++] = (struct managed_info){ .id = a->id, .base = a->base };
out:
	pthread_mutex_unlock(&info_lock);
	return rc;
}

/* The info of the managed allocation holding [p, p+count), with info_lock
 * held; NULL (lock not held) when there is none. */
static struct managed_info *info_get(CUdeviceptr p, size_t count)
{
	struct vsim_alloc a;

	if (count == 0 || !vsim_mem_lookup((uintptr_t)p, count, &a) ||
	    !(a.flags & VSIM_ALLOC_MANAGED))
		return NULL;
	pthread_mutex_lock(&info_lock);
	for (size_t i = 0; i < ninfos; i++)
		if (infos[i].id == a.id)
			return &infos[i];
	pthread_mutex_unlock(&info_lock);
	return NULL;
}

bool vsim_managed_on_host(const struct vsim_alloc *a)
{
	bool host = false;

	pthread_mutex_lock(&info_lock);
	for (size_t i = 0; i < ninfos; i++) {
		if (infos[i].id == a->id && infos[i].base == a->base) {
			host = infos[i].on_host;
			break;
		}
	}
	pthread_mutex_unlock(&info_lock);
	return host;
}

VSIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
				       unsigned int flags)
{
	struct CUctx_st *ctx;
	struct vsim_alloc a;
	uintptr_t p;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || bytesize == 0 ||
	    (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_mem_alloc(ctx, bytesize, VSIM_MEM_DEVICE,
			    VSIM_ALLOC_MANAGED | flags, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_mem_lookup(p, 1, &a) || info_add(&a) != 0) {
		cuMemFree_v2((CUdeviceptr)p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)p;
	return CUDA_SUCCESS;
}

/* A location advice or a prefetch may name: a device, or the host. */
static CUresult check_location(const CUmemLocation *loc)
{
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return loc->id >= 0 && loc->id < vsim_g.cfg.devices ?
			CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static void apply_advice(struct managed_info *m, CUmem_advise advice,
			 const CUmemLocation *loc)
{
	bool host = loc->type != CU_MEM_LOCATION_TYPE_DEVICE;

	switch (advice) {
	case CU_MEM_ADVISE_SET_READ_MOSTLY:
		m->read_mostly = true;
		break;
	case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
		m->read_mostly = false;
		break;
	case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
		m->preferred = *loc;
		m->on_host = host;
		break;
	case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
		memset(&m->preferred, 0, sizeof(m->preferred));
		break;
	case CU_MEM_ADVISE_SET_ACCESSED_BY:
		if (host)
			m->accessed_by_host = true;
		else
			m->accessed_by |= 1u << loc->id;
		break;
	case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
		if (host)
			m->accessed_by_host = false;
		else
			m->accessed_by &= ~(1u << loc->id);
		break;
	}
}

static bool advice_needs_location(CUmem_advise advice)
{
	return advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
	       advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
	       advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
}

VSIM_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count,
				    CUmem_advise advice, CUmemLocation location)
{
	struct managed_info *m;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY ||
	    advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
		return CUDA_ERROR_INVALID_VALUE;
	if (advice_needs_location(advice)) {
		rc = check_location(&location);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	m = info_get(devPtr, count);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	apply_advice(m, advice, &location);
	pthread_mutex_unlock(&info_lock);
	return CUDA_SUCCESS;
}

/* A CUdevice of the pre-12.2 forms as a location. */
static CUmemLocation device_location(CUdevice dev)
{
	if (dev == CU_DEVICE_CPU)
		return (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_HOST };
	if (dev < 0)
		return (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_INVALID };
	return (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev };
}

#undef cuMemAdvise
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count,
			     CUmem_advise advice, CUdevice device);
VSIM_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count,
				 CUmem_advise advice, CUdevice device)
{
	CUmemLocation loc = device_location(device);

	if (loc.type == CU_MEM_LOCATION_TYPE_INVALID &&
	    advice_needs_location(advice) && vsim_check_init() == CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	return cuMemAdvise_v2(devPtr, count, advice, loc);
}

static CUresult prefetch(CUdeviceptr devPtr, size_t count, CUmemLocation loc,
			 unsigned flags, CUstream h, bool ptsz)
{
	struct managed_info *m;
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_location(&loc);
	/* No graph node holds a prefetch: refused on a capturing stream. */
	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_refuse(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	m = info_get(devPtr, count);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	m->last_prefetch = loc;
	m->on_host = loc.type != CU_MEM_LOCATION_TYPE_DEVICE;
	pthread_mutex_unlock(&info_lock);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
					   CUmemLocation location,
					   unsigned int flags, CUstream h)
{
	return prefetch(devPtr, count, location, flags, h, false);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
					    CUmemLocation location,
					    unsigned int flags, CUstream h);
VSIM_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
						CUmemLocation location,
						unsigned int flags, CUstream h)
{
	return prefetch(devPtr, count, location, flags, h, true);
}

/* The pre-12.2 forms: a CUdevice, CU_DEVICE_CPU for the host. */
static CUresult prefetch_device(CUdeviceptr devPtr, size_t count, CUdevice dev,
				CUstream h, bool ptsz)
{
	CUmemLocation loc = device_location(dev);
	CUresult rc = vsim_check_init();

	if (rc == CUDA_SUCCESS && loc.type == CU_MEM_LOCATION_TYPE_INVALID)
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (rc != CUDA_SUCCESS)
		return rc;
	return prefetch(devPtr, count, loc, 0, h, ptsz);
}

#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count,
				    CUdevice dstDevice, CUstream h);
VSIM_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count,
					CUdevice dstDevice, CUstream h)
{
	return prefetch_device(devPtr, count, dstDevice, h, false);
}

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count,
					 CUdevice dstDevice, CUstream h);
VSIM_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count,
					     CUdevice dstDevice, CUstream h)
{
	return prefetch_device(devPtr, count, dstDevice, h, true);
}

/* ---- cuMemRangeGetAttribute -------------------------------------------------- */

/* A location as the CUdevice-valued attributes report it. */
static int location_device(const CUmemLocation *loc)
{
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return loc->id;
	case CU_MEM_LOCATION_TYPE_INVALID:
		return CU_DEVICE_INVALID;
	default:
		return CU_DEVICE_CPU;
	}
}

static void accessed_by(const struct managed_info *m, int *out, size_t n)
{
	size_t k = 0;

	for (int d = 0; d < vsim_g.cfg.devices && k < n; d++)
		if (m->accessed_by & (1u << d))
			out[k++] = d;
	if (m->accessed_by_host && k < n)
		out[k++] = CU_DEVICE_CPU;
	while (k < n)
		out[k++] = CU_DEVICE_INVALID;
}

static CUresult range_attr(const struct managed_info *m, void *data,
			   size_t size, CUmem_range_attribute attr)
{
	int v;

	if (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
		if (size == 0 || size % sizeof(int))
			return CUDA_ERROR_INVALID_VALUE;
		accessed_by(m, data, size / sizeof(int));
		return CUDA_SUCCESS;
	}
	if (size != sizeof(int))
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
		v = m->read_mostly;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
		v = location_device(&m->preferred);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
		v = location_device(&m->last_prefetch);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
		v = (int)m->preferred.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
		v = m->preferred.id;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
		v = (int)m->last_prefetch.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
		v = m->last_prefetch.id;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(data, &v, sizeof(v));
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t dataSize,
					    CUmem_range_attribute attribute,
					    CUdeviceptr devPtr, size_t count)
{
	struct managed_info *m;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	m = info_get(devPtr, count);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	rc = range_attr(m, data, dataSize, attribute);
	pthread_mutex_unlock(&info_lock);
	return rc;
}
