/* objects.c - HIP's arrays and VMM handles: charged as made, keyed by
 * handle, given back at their free or release.
 *
 * An array is charged the core's estimate of a pitched image (rows padded
 * to 512 bytes, vgpu_array_bytes: the runtime does not say its layout's
 * size), its element as wide as the widest channel times the channels.
 * A VMM handle is charged when its memory is on a device (host locations
 * are not device memory), for as long as the handle, a retained handle or
 * a mapping of it lives: the runtime keeps the memory of a handle released
 * while still mapped, and the charge stays with it (intercept/vmm.c, the
 * CUDA front end's table, shared).
 */
#include "hip.h"
#include "pool.h"
#include "share.h"
#include "track.h"
#include "vmm.h"

#include <stdint.h>

/* Layered and cube-map arrays: their depth counts layers, not halved by
 * a mipmap's levels (hipArrayLayered, hipArrayCubemap). */
#define LAYERS (hipArrayLayered | hipArrayCubemap)

static uint64_t format_bytes(enum hipArray_Format f)
{
	switch (f) {
	case HIP_AD_FORMAT_UNSIGNED_INT8:
	case HIP_AD_FORMAT_SIGNED_INT8:
		return 1;
	case HIP_AD_FORMAT_UNSIGNED_INT16:
	case HIP_AD_FORMAT_SIGNED_INT16:
	case HIP_AD_FORMAT_HALF:
		return 2;
	default:
		return 4;
	}
}

/* The charge of an array of bytes on the current device: *dv NULL when
 * not accounted; refused: the error. */
static hipError_t charge(struct vgpu_hip_dev **dv, uint64_t bytes)
{
	*dv = vgpu__hip_dev_current();
	if (*dv && bytes > VGPU_TRACK_MAX_BYTES)
		return hipErrorOutOfMemory;
	return *dv ? vgpu__hip_charge(*dv, VGPU_USAGE_ARRAY, bytes)
		   : hipSuccess;
}

static hipError_t array_made(struct vgpu_hip_dev *dv, hipError_t r,
			     hipArray **a, uint64_t bytes)
{
	if (!dv)
		return r;
	if (r != hipSuccess || !a)
		vgpu__hip_uncharge(dv, VGPU_USAGE_ARRAY, bytes);
	else if (dv->slot)
		vgpu__track_charged(VGPU_TRACK_HANDLE, (uint64_t)(uintptr_t)*a,
				    VGPU_USAGE_ARRAY, dv->ordinal, bytes, 0);
	return r;
}

static unsigned bits_of(int b)
{
	return b < 0 ? (unsigned)-(long)b : (unsigned)b;
}

/* An element of a channel description: as many bytes as the widest
 * channel, times the channels that are not 0 (a description whose widths
 * do not add up is charged at least what the runtime makes of it). */
static uint64_t channel_bytes(const hipChannelFormatDesc *d)
{
	unsigned b[4], widest = 0, n = 0;

	if (!d)
		return 1;
	b[0] = bits_of(d->x);
	b[1] = bits_of(d->y);
	b[2] = bits_of(d->z);
	b[3] = bits_of(d->w);
	for (int i = 0; i < 4; i++)
		if (b[i]) {
			n++;
			widest = b[i] > widest ? b[i] : widest;
		}
	return n ? (uint64_t)(widest + 7) / 8 * n : 1;
}

hipError_t hipMallocArray(hipArray **a, const hipChannelFormatDesc *d,
			  size_t w, size_t h, unsigned int flags)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = vgpu_array_bytes(channel_bytes(d), w, h, 1);
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMallocArray)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return array_made(dv, vgpu__hip.hipMallocArray(a, d, w, h, flags), a,
			  n);
}

hipError_t hipMalloc3DArray(hipArray **a, const struct hipChannelFormatDesc *d,
			    struct hipExtent e, unsigned int flags)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = vgpu_array_bytes(channel_bytes(d), e.width, e.height,
				      e.depth);
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMalloc3DArray)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return array_made(dv, vgpu__hip.hipMalloc3DArray(a, d, e, flags), a,
			  n);
}

hipError_t hipArrayCreate(hipArray **a, const HIP_ARRAY_DESCRIPTOR *d)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = d ? vgpu_array_bytes(format_bytes(d->Format) *
					  d->NumChannels, d->Width,
					  d->Height, 1) : 1;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipArrayCreate)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return array_made(dv, vgpu__hip.hipArrayCreate(a, d), a, n);
}

hipError_t hipArray3DCreate(hipArray **a, const HIP_ARRAY3D_DESCRIPTOR *d)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = d ? vgpu_array_bytes(format_bytes(d->Format) *
					  d->NumChannels, d->Width,
					  d->Height, d->Depth) : 1;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipArray3DCreate)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return array_made(dv, vgpu__hip.hipArray3DCreate(a, d), a, n);
}

hipError_t vgpu__hip_freed(int table, uint64_t key, bool had,
			  const struct vgpu_tracked *t, hipError_t r)
{
	if (!had)
		return r;
	if (r != hipSuccess)
		vgpu__track_keep(table, key, t);	/* still there */
	else if (t->kind == VGPU_USAGE_POOL)	/* its pool's, pools.c */
		vgpu_pool_freed((int)t->aux);
	else if (t->kind == VGPU_USAGE_BUFFER && t->aux)  /* shared, ipc.c */
		vgpu__share_gone(t->aux);
	else
		vgpu__hip_uncharge(vgpu__hip_dev_peek((int)t->dev),
				   (int)t->kind, t->bytes);
	return r;
}

/* Takes handle h's entry out of the table, into *t: whether it was
 * there (charged). */
static bool handle_take(const void *h, struct vgpu_tracked *t)
{
	return h && vgpu__track_remove(VGPU_TRACK_HANDLE, (uintptr_t)h, t);
}

hipError_t hipFreeArray(hipArray *a)
{
	struct vgpu_tracked t;
	bool had;

	vgpu__hip_start();
	if (!vgpu__hip.hipFreeArray)
		return hipErrorNotInitialized;
	had = handle_take(a, &t);
	return vgpu__hip_freed(VGPU_TRACK_HANDLE, (uintptr_t)a, had, &t,
			       vgpu__hip.hipFreeArray(a));
}

/* The driver-style name of hipFreeArray. */
hipError_t hipArrayDestroy(hipArray *a)
{
	struct vgpu_tracked t;
	bool had;

	vgpu__hip_start();
	if (!vgpu__hip.hipArrayDestroy)
		return hipErrorNotInitialized;
	had = handle_take(a, &t);
	return vgpu__hip_freed(VGPU_TRACK_HANDLE, (uintptr_t)a, had, &t,
			       vgpu__hip.hipArrayDestroy(a));
}

/* ---- mipmapped arrays: the sum of their levels (vgpu_mipmap_bytes) ----- */

/* A mipmapped array made (r) or refused: tracked by handle, or its
 * charge given back. */
static hipError_t mipmap_made(struct vgpu_hip_dev *dv, hipError_t r,
			      hipMipmappedArray_t *m, uint64_t bytes)
{
	return array_made(dv, r, (hipArray **)m, bytes);
}

hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *m,
				   const struct hipChannelFormatDesc *d,
				   struct hipExtent e, unsigned int levels,
				   unsigned int flags)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = vgpu_mipmap_bytes(channel_bytes(d), e.width, e.height,
				       e.depth, flags & LAYERS, levels);
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMallocMipmappedArray)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return mipmap_made(dv, vgpu__hip.hipMallocMipmappedArray(m, d, e,
			   levels, flags), m, n);
}

hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *m,
				   HIP_ARRAY3D_DESCRIPTOR *d,
				   unsigned int levels)
{
	struct vgpu_hip_dev *dv;
	uint64_t n = d ? vgpu_mipmap_bytes(format_bytes(d->Format) *
					   d->NumChannels, d->Width,
					   d->Height, d->Depth,
					   d->Flags & LAYERS, levels) : 1;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMipmappedArrayCreate)
		return hipErrorNotInitialized;
	r = charge(&dv, n);
	if (r != hipSuccess)
		return r;
	return mipmap_made(dv, vgpu__hip.hipMipmappedArrayCreate(m, d,
			   levels), m, n);
}

/* A mipmapped array freed by the runtime's real (either name). */
static hipError_t mipmap_free(hipMipmappedArray_t m,
			      hipError_t (*real)(hipMipmappedArray_t))
{
	struct vgpu_tracked t;
	bool had;

	if (!real)
		return hipErrorNotInitialized;
	had = handle_take(m, &t);
	return vgpu__hip_freed(VGPU_TRACK_HANDLE, (uintptr_t)m, had, &t,
			       real(m));
}

hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t m)
{
	vgpu__hip_start();
	return mipmap_free(m, vgpu__hip.hipMipmappedArrayDestroy);
}

hipError_t hipFreeMipmappedArray(hipMipmappedArray_t m)
{
	vgpu__hip_start();
	return mipmap_free(m, vgpu__hip.hipFreeMipmappedArray);
}

/* ---- VMM: charged while the handle or a mapping of it lives (vmm.c) ---- */

static uint64_t key_of(hipMemGenericAllocationHandle_t h)
{
	return (uint64_t)(uintptr_t)h;
}

/* A device location is device memory of that device; a host location is
 * not. The handle holds the charge with its one reference. */
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *h, size_t size,
			const hipMemAllocationProp *prop,
			unsigned long long flags)
{
	struct vgpu_hip_dev *dv = NULL;
	uint64_t n = vgpu__alloc_size(size);
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemCreate)
		return hipErrorNotInitialized;
	if (h && size && prop &&
	    prop->location.type == hipMemLocationTypeDevice)
		dv = vgpu__hip_dev_attach(prop->location.id);
	if (!dv)
		return vgpu__hip.hipMemCreate(h, size, prop, flags);
	r = vgpu__hip_charge(dv, VGPU_USAGE_VMM, n);
	if (r != hipSuccess)
		return r;
	r = vgpu__hip.hipMemCreate(h, size, prop, flags);
	if (r != hipSuccess)
		vgpu__hip_uncharge(dv, VGPU_USAGE_VMM, n);
	else if (dv->slot)
		vgpu__vmm_add(key_of(*h), dv->ordinal, VGPU_USAGE_VMM, n);
	return r;
}

/* The handle's reference goes; its memory (and charge) stays while a
 * mapping of it, or a retained handle, lives. */
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t h)
{
	uint64_t gen;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemRelease)
		return hipErrorNotInitialized;
	gen = vgpu__vmm_gen(key_of(h));
	r = vgpu__hip.hipMemRelease(h);
	if (r == hipSuccess)
		vgpu__vmm_unref(key_of(h), gen);
	return r;
}

/* A retained handle is one more reference, released by hipMemRelease:
 * counted before the runtime makes it, so that an unmap racing it cannot
 * give the charge back meanwhile. */
hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *h,
					void *addr)
{
	uint64_t gen, pre = 0;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemRetainAllocationHandle)
		return hipErrorNotInitialized;
	gen = vgpu__vmm_ref_mapped((uintptr_t)addr, &pre);
	r = vgpu__hip.hipMemRetainAllocationHandle(h, addr);
	if (r != hipSuccess || !h || key_of(*h) != pre) {
		vgpu__vmm_unref(pre, gen);
		if (r == hipSuccess && h)
			vgpu__vmm_ref(key_of(*h));
	}
	return r;
}

/* A mapping is a reference: counted before the runtime makes it. */
hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
		     hipMemGenericAllocationHandle_t h,
		     unsigned long long flags)
{
	uint64_t gen;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemMap)
		return hipErrorNotInitialized;
	gen = vgpu__vmm_ref(key_of(h));
	r = vgpu__hip.hipMemMap(ptr, size, offset, h, flags);
	if (r != hipSuccess)
		vgpu__vmm_unref(key_of(h), gen);
	else
		vgpu__vmm_mapped((uintptr_t)ptr, size, key_of(h), gen);
	return r;
}

/* The mappings in the range give up their references once the runtime
 * has unmapped them (vmm.c's ticket keeps a racing map's apart). */
hipError_t hipMemUnmap(void *ptr, size_t size)
{
	uint64_t ticket;
	hipError_t r;

	vgpu__hip_start();
	if (!vgpu__hip.hipMemUnmap)
		return hipErrorNotInitialized;
	ticket = vgpu__vmm_unmap_begin((uintptr_t)ptr, size);
	r = vgpu__hip.hipMemUnmap(ptr, size);
	vgpu__vmm_unmap_end((uintptr_t)ptr, size, ticket, r == hipSuccess);
	return r;
}
