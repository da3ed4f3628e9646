/* multicast.c - multicast objects: cuMulticastCreate & co.
 *
 * A multicast object is a generic allocation handle (vmm.c) with a team of
 * devices. Each device added reserves the object's size from that device's
 * capacity in the shared state, returned when the object's last reference
 * goes (cuMemRelease, and every mapping of it). Bindings of memory handles
 * are recorded and hold a reference to the memory. Mapped with cuMemMap, the
 * object is memory of its own: the simulator does not broadcast stores to
 * the bound memory. Binding or mapping before the whole team has been added
 * would block a real driver until it is; here it is refused
 * (CUDA_ERROR_NOT_PERMITTED for binds, CUDA_ERROR_INVALID_VALUE for maps).
 * Granularity: 2 MiB, minimum and recommended. Everything runs under the
 * VMM lock.
 */
#include "sim.h"

#include <stdlib.h>

#define MC_GRAN ((size_t)2 << 20)

struct mc_bind {
	int dev;
	size_t mc_off, size, mem_off;
	struct vsim_handle *mem;
};

struct vsim_mcast {
	unsigned num_devices, added;
	int devices[VSIM_MAX_DEVICES];
	struct mc_bind *binds;
	size_t nbinds, cap;
};

bool vsim_mcast_complete(const struct vsim_handle *h)
{
	return h->mc && h->mc->added == h->mc->num_devices;
}

void vsim_mcast_destroy(struct vsim_handle *h)
{
	struct vsim_mcast *mc = h->mc;

	h->mc = NULL;
	for (size_t i = 0; i < mc->nbinds; i++)
		vsim_handle_unmap_ref(mc->binds[i].mem);
	for (unsigned i = 0; i < mc->added; i++)
		vsim_state_release(mc->devices[i], h->size);
	free(mc->binds);
	free(mc);
}

static bool in_team(const struct vsim_mcast *mc, int dev)
{
	for (unsigned i = 0; i < mc->added; i++)
		if (mc->devices[i] == dev)
			return true;
	return false;
}

/* The multicast object behind v, or NULL; caller holds the lock. */
static struct vsim_handle *mcast_find(CUmemGenericAllocationHandle v)
{
	struct vsim_handle *h = vsim_handle_find(v);

	return h && h->mc ? h : NULL;
}

VSIM_EXPORT CUresult cuMulticastGetGranularity(size_t *granularity,
		const CUmulticastObjectProp *prop,
		CUmulticastGranularity_flags option)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!granularity || !prop ||
	    (option != CU_MULTICAST_GRANULARITY_MINIMUM &&
	     option != CU_MULTICAST_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = MC_GRAN;
	return CUDA_SUCCESS;
}

/* Shareable handle types are not simulated. */
VSIM_EXPORT CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle,
				       const CUmulticastObjectProp *prop)
{
	struct vsim_mcast *mc;
	struct vsim_handle *h;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!mcHandle || !prop || prop->numDevices == 0 ||
	    prop->numDevices > VSIM_MAX_DEVICES || prop->size == 0 ||
	    prop->size % MC_GRAN || prop->flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->handleTypes)
		return CUDA_ERROR_NOT_SUPPORTED;
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mc->num_devices = prop->numDevices;
	vsim_vmm_lock();
	rc = vsim_handle_new(prop->size, &h);
	if (rc == CUDA_SUCCESS) {
		h->mc = mc;
		h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		*mcHandle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	}
	vsim_vmm_unlock();
	if (rc != CUDA_SUCCESS)
		free(mc);
	return rc;
}

VSIM_EXPORT CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle,
					  CUdevice dev)
{
	struct vsim_handle *h;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = mcast_find(mcHandle);
	if (!h) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	rc = vsim_check_device(dev);
	if (rc != CUDA_SUCCESS)
		goto out;
	if (in_team(h->mc, dev) || vsim_mcast_complete(h)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	rc = vsim_state_reserve(dev, h->size);
	if (rc == CUDA_SUCCESS)
		h->mc->devices[h->mc->added++] = dev;
out:
	vsim_vmm_unlock();
	return rc;
}

/* Records a binding of mem at mem_off to h at mc_off; caller holds the lock. */
static CUresult bind(struct vsim_handle *h, size_t mc_off,
		     struct vsim_handle *mem, size_t mem_off, size_t size)
{
	struct vsim_mcast *mc = h->mc;
	int dev = mem->prop.location.id;

	if (size == 0 || size % MC_GRAN || mc_off % MC_GRAN || mem_off % MC_GRAN ||
	    mc_off > h->size || size > h->size - mc_off ||
	    mem_off > mem->size || size > mem->size - mem_off)
		return CUDA_ERROR_INVALID_VALUE;
	if (!vsim_mcast_complete(h))
		return CUDA_ERROR_NOT_PERMITTED;
	if (mem->prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    !in_team(mc, dev))
		return CUDA_ERROR_INVALID_DEVICE;
	for (size_t i = 0; i < mc->nbinds; i++)
		if (mc->binds[i].dev == dev && mc->binds[i].mc_off < mc_off + size &&
		    mc_off < mc->binds[i].mc_off + mc->binds[i].size)
			return CUDA_ERROR_INVALID_VALUE;
	if (mc->nbinds == mc->cap) {
		size_t cap = mc->cap ? mc->cap * 2 : 4;
		struct mc_bind *b = realloc(mc->binds, cap * sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		mc->binds = b;
		mc->cap = cap;
	}
	mc->binds[mc->nbinds++] = (struct mc_bind){
		.dev = dev, .mc_off = mc_off, .size = size, .mem_off = mem_off,
		.mem = mem,
	};
	mem->map_refs++;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle,
					size_t mcOffset,
					CUmemGenericAllocationHandle memHandle,
					size_t memOffset, size_t size,
					unsigned long long flags)
{
	struct vsim_handle *h, *mem;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = mcast_find(mcHandle);
	mem = vsim_handle_find(memHandle);
	if (!h || !mem || mem->mc || flags)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		rc = bind(h, mcOffset, mem, memOffset, size);
	vsim_vmm_unlock();
	return rc;
}

/* memptr must be mapped memory of cuMemCreate (pool memory is not taken). */
VSIM_EXPORT CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle,
					 size_t mcOffset, CUdeviceptr memptr,
					 size_t size, unsigned long long flags)
{
	struct vsim_handle *h, *mem;
	size_t off;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = mcast_find(mcHandle);
	if (!h || flags || !vsim_vmm_resolve((uintptr_t)memptr, &mem, &off) ||
	    mem->mc)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		rc = bind(h, mcOffset, mem, off, size);
	vsim_vmm_unlock();
	return rc;
}

/* Unbinds the binding of dev made at exactly (mcOffset, size). */
VSIM_EXPORT CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle,
				       CUdevice dev, size_t mcOffset, size_t size)
{
	struct vsim_handle *h, *mem = NULL;
	struct vsim_mcast *mc;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_vmm_lock();
	h = mcast_find(mcHandle);
	if (!h) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	mc = h->mc;
	for (size_t i = 0; i < mc->nbinds && !mem; i++) {
		if (mc->binds[i].dev != dev || mc->binds[i].mc_off != mcOffset ||
		    mc->binds[i].size != size)
			continue;
		mem = mc->binds[i].mem;
		mc->binds[i] = mc->binds[--mc->nbinds];
	}
	if (mem)
		vsim_handle_unmap_ref(mem);
	else
		rc = CUDA_ERROR_INVALID_VALUE;
out:
	vsim_vmm_unlock();
	return rc;
}
