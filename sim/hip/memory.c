/* memory.c - the simulated HIP runtime's allocations, copies and memsets.
 *
 * Each allocation is the simulated driver's, in the current device's
 * primary context, so the device's used count (and every process's
 * cuMemGetInfo or hipMemGetInfo) sees it. Arrays are HIP's public struct
 * hipArray (driver_types.h) around the driver's CUarray, kept in .data.
 */
#include "hip_sim.h"

#include <stdlib.h>
#include <string.h>

static CUdeviceptr dptr(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

VHIP_EXPORT hipError_t hipMalloc(void **ptr, size_t size)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr)
		return vhip_error(hipErrorInvalidValue);
	if (!size) {
		*ptr = NULL;
		return hipSuccess;
	}
	e = vhip_result(cuMemAlloc(&d, size));
	*ptr = e == hipSuccess ? (void *)(uintptr_t)d : NULL;
	return e;
}

VHIP_EXPORT hipError_t hipExtMallocWithFlags(void **ptr, size_t size,
					     unsigned int flags)
{
	if (flags & ~(unsigned)(hipDeviceMallocFinegrained |
				hipMallocSignalMemory))
		return vhip_error(hipErrorInvalidValue);
	return hipMalloc(ptr, size);
}

/* The driver's own pitched allocation, its element size checked by it. */
VHIP_EXPORT hipError_t hipMemAllocPitch(hipDeviceptr_t *ptr, size_t *pitch,
					size_t width, size_t height,
					unsigned int elem)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr || !pitch)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemAllocPitch(&d, pitch, width, height, elem));
	*ptr = e == hipSuccess ? (hipDeviceptr_t)(uintptr_t)d : NULL;
	return e;
}

/* Rows aligned for the widest element the driver knows (16 bytes). */
VHIP_EXPORT hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width,
				      size_t height)
{
	return hipMemAllocPitch((hipDeviceptr_t *)ptr, pitch, width, height,
				16);
}

VHIP_EXPORT hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent extent)
{
	size_t pitch = 0;
	void *p = NULL;
	hipError_t e;

	if (!pp)
		return vhip_error(hipErrorInvalidValue);
	e = hipMallocPitch(&p, &pitch, extent.width,
			   extent.height * extent.depth);
	if (e != hipSuccess)
		return e;
	pp->ptr = p;
	pp->pitch = pitch;
	pp->xsize = extent.width;
	pp->ysize = extent.height;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipMallocManaged(void **ptr, size_t size,
					unsigned int flags)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemAllocManaged(&d, size, flags));
	*ptr = e == hipSuccess ? (void *)(uintptr_t)d : NULL;
	return e;
}

/* The allocation that holds p: its base and size (the driver's). */
VHIP_EXPORT hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase,
					     size_t *psize,
					     hipDeviceptr_t p)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!pbase && !psize)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemGetAddressRange(&base, &size, dptr(p)));
	if (e == hipSuccess && pbase)
		*pbase = (hipDeviceptr_t)(uintptr_t)base;
	if (e == hipSuccess && psize)
		*psize = size;
	return e;
}

VHIP_EXPORT hipError_t hipFree(void *ptr)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess || !ptr)
		return e;
	return vhip_result(cuMemFree(dptr(ptr)));
}

/* HIP's hipHostMalloc flags that CUDA's cuMemHostAlloc has (portable,
 * mapped, write-combined, the same bits); coherence and NUMA hints mean
 * nothing on host memory and are accepted. */
VHIP_EXPORT hipError_t hipHostMalloc(void **ptr, size_t size,
				     unsigned int flags)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemHostAlloc(ptr, size,
					  flags & (CU_MEMHOSTALLOC_PORTABLE |
						   CU_MEMHOSTALLOC_DEVICEMAP |
						   CU_MEMHOSTALLOC_WRITECOMBINED)));
}

VHIP_EXPORT hipError_t hipHostFree(void *ptr)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess || !ptr)
		return e;
	return vhip_result(cuMemFreeHost(ptr));
}

/* ---- stream-ordered allocation and pools -------------------------------- */

VHIP_EXPORT hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t s)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemAllocAsync(&d, size, (CUstream)s));
	*ptr = e == hipSuccess ? (void *)(uintptr_t)d : NULL;
	return e;
}

VHIP_EXPORT hipError_t hipFreeAsync(void *ptr, hipStream_t s)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemFreeAsync(dptr(ptr), (CUstream)s));
}

VHIP_EXPORT hipError_t hipMallocFromPoolAsync(void **ptr, size_t size,
					      hipMemPool_t pool, hipStream_t s)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemAllocFromPoolAsync(&d, size, (CUmemoryPool)pool,
						(CUstream)s));
	*ptr = e == hipSuccess ? (void *)(uintptr_t)d : NULL;
	return e;
}

VHIP_EXPORT hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *pool, int dev)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuDeviceGetDefaultMemPool((CUmemoryPool *)pool,
						     (CUdevice)dev));
}

VHIP_EXPORT hipError_t hipMemPoolCreate(hipMemPool_t *pool,
					const hipMemPoolProps *props)
{
	CUmemPoolProps cp;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!pool || !props)
		return vhip_error(hipErrorInvalidValue);
	memset(&cp, 0, sizeof(cp));
	cp.allocType = (CUmemAllocationType)props->allocType;
	cp.handleTypes = (CUmemAllocationHandleType)props->handleTypes;
	cp.location.type = (CUmemLocationType)props->location.type;
	cp.location.id = props->location.id;
	return vhip_result(cuMemPoolCreate((CUmemoryPool *)pool, &cp));
}

VHIP_EXPORT hipError_t hipMemPoolDestroy(hipMemPool_t pool)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemPoolDestroy((CUmemoryPool)pool));
}

VHIP_EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemPoolTrimTo((CUmemoryPool)pool, keep));
}

/* HIP's pool attributes have the driver's values (hipMemPoolAttr). */
VHIP_EXPORT hipError_t hipMemPoolGetAttribute(hipMemPool_t pool,
					      hipMemPoolAttr attr, void *value)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemPoolGetAttribute((CUmemoryPool)pool,
						 (CUmemPool_attribute)attr,
						 value));
}

VHIP_EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t pool,
					      hipMemPoolAttr attr, void *value)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemPoolSetAttribute((CUmemoryPool)pool,
						 (CUmemPool_attribute)attr,
						 value));
}

VHIP_EXPORT hipError_t hipDeviceGetMemPool(hipMemPool_t *pool, int dev)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuDeviceGetMemPool((CUmemoryPool *)pool,
					      (CUdevice)dev));
}

VHIP_EXPORT hipError_t hipDeviceSetMemPool(int dev, hipMemPool_t pool)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuDeviceSetMemPool((CUdevice)dev,
					      (CUmemoryPool)pool));
}

/* ---- arrays ---------------------------------------------------------------- */

static hipError_t array_wrap(CUarray a, unsigned w, unsigned h, unsigned d,
			     CUarray_format f, unsigned channels,
			     hipArray_t *out)
{
	hipArray_t wrap = calloc(1, sizeof(*wrap));

	if (!wrap) {
		(void)cuArrayDestroy(a);
		return vhip_error(hipErrorOutOfMemory);
	}
	wrap->data = a;
	wrap->width = w;
	wrap->height = h;
	wrap->depth = d;
	wrap->Format = (enum hipArray_Format)f;
	wrap->NumChannels = channels;
	wrap->isDrv = true;
	*out = wrap;
	return hipSuccess;
}

static hipError_t array3d(hipArray_t *out, size_t w, size_t h, size_t d,
			  CUarray_format f, unsigned channels, unsigned flags)
{
	CUDA_ARRAY3D_DESCRIPTOR cd = {
		.Width = w, .Height = h, .Depth = d, .Format = f,
		.NumChannels = channels, .Flags = flags,
	};
	CUarray a = NULL;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!out)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuArray3DCreate(&a, &cd));
	if (e != hipSuccess)
		return e;
	return array_wrap(a, (unsigned)w, (unsigned)h, (unsigned)d, f,
			  channels, out);
}

/* A channel description as the driver's element format and channels. */
static hipError_t channel_format(const hipChannelFormatDesc *d,
				 CUarray_format *f, unsigned *channels)
{
	int bits = d->x;

	*channels = (d->x > 0) + (d->y > 0) + (d->z > 0) + (d->w > 0);
	switch (d->f) {
	case hipChannelFormatKindFloat:
		*f = bits == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
		return bits == 16 || bits == 32 ? hipSuccess :
		       hipErrorInvalidValue;
	case hipChannelFormatKindSigned:
		*f = bits == 8 ? CU_AD_FORMAT_SIGNED_INT8 :
		     bits == 16 ? CU_AD_FORMAT_SIGNED_INT16 :
		     CU_AD_FORMAT_SIGNED_INT32;
		break;
	case hipChannelFormatKindUnsigned:
		*f = bits == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 :
		     bits == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 :
		     CU_AD_FORMAT_UNSIGNED_INT32;
		break;
	default:
		return hipErrorInvalidValue;
	}
	return bits == 8 || bits == 16 || bits == 32 ? hipSuccess :
	       hipErrorInvalidValue;
}

VHIP_EXPORT hipError_t hipMallocArray(hipArray_t *out,
				      const hipChannelFormatDesc *desc,
				      size_t width, size_t height,
				      unsigned int flags)
{
	CUarray_format f;
	unsigned channels;

	if (!desc || channel_format(desc, &f, &channels) != hipSuccess)
		return vhip_error(hipErrorInvalidValue);
	return array3d(out, width, height, 0, f, channels, flags);
}

VHIP_EXPORT hipError_t hipMalloc3DArray(hipArray_t *out,
					const struct hipChannelFormatDesc *desc,
					struct hipExtent extent,
					unsigned int flags)
{
	CUarray_format f;
	unsigned channels;

	if (!desc || channel_format(desc, &f, &channels) != hipSuccess)
		return vhip_error(hipErrorInvalidValue);
	return array3d(out, extent.width, extent.height, extent.depth, f,
		       channels, flags);
}

VHIP_EXPORT hipError_t hipArrayCreate(hipArray_t *out,
				      const HIP_ARRAY_DESCRIPTOR *d)
{
	if (!d)
		return vhip_error(hipErrorInvalidValue);
	return array3d(out, d->Width, d->Height, 0, (CUarray_format)d->Format,
		       d->NumChannels, 0);
}

VHIP_EXPORT hipError_t hipArray3DCreate(hipArray_t *out,
					const HIP_ARRAY3D_DESCRIPTOR *d)
{
	if (!d)
		return vhip_error(hipErrorInvalidValue);
	return array3d(out, d->Width, d->Height, d->Depth,
		       (CUarray_format)d->Format, d->NumChannels, d->Flags);
}

VHIP_EXPORT hipError_t hipFreeArray(hipArray_t a)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!a)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuArrayDestroy((CUarray)a->data));
	if (e == hipSuccess)
		free(a);
	return e;
}

VHIP_EXPORT hipError_t hipArrayDestroy(hipArray_t a)
{
	return hipFreeArray(a);
}

/* ---- mipmapped arrays: HIP's public struct holding the driver's
 * CUmipmappedArray in .data ------------------------------------------------ */

static hipError_t mipmap_create(hipMipmappedArray_t *out,
				const CUDA_ARRAY3D_DESCRIPTOR *cd,
				unsigned levels)
{
	hipMipmappedArray_t wrap;
	CUmipmappedArray m = NULL;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!out)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMipmappedArrayCreate(&m, cd, levels));
	if (e != hipSuccess)
		return e;
	if (!(wrap = calloc(1, sizeof(*wrap)))) {
		(void)cuMipmappedArrayDestroy(m);
		return vhip_error(hipErrorOutOfMemory);
	}
	wrap->data = m;
	wrap->width = (unsigned)cd->Width;
	wrap->height = (unsigned)cd->Height;
	wrap->depth = (unsigned)cd->Depth;
	wrap->max_mipmap_level = levels ? levels - 1 : 0;
	wrap->flags = cd->Flags;
	wrap->format = (enum hipArray_Format)cd->Format;
	*out = wrap;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *out,
					       HIP_ARRAY3D_DESCRIPTOR *d,
					       unsigned int levels)
{
	CUDA_ARRAY3D_DESCRIPTOR cd;

	if (!d)
		return vhip_error(hipErrorInvalidValue);
	cd = (CUDA_ARRAY3D_DESCRIPTOR){
		.Width = d->Width, .Height = d->Height, .Depth = d->Depth,
		.Format = (CUarray_format)d->Format,
		.NumChannels = d->NumChannels, .Flags = d->Flags,
	};
	return mipmap_create(out, &cd, levels);
}

VHIP_EXPORT hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *out,
	const struct hipChannelFormatDesc *desc, struct hipExtent extent,
	unsigned int levels, unsigned int flags)
{
	CUDA_ARRAY3D_DESCRIPTOR cd = {
		.Width = extent.width, .Height = extent.height,
		.Depth = extent.depth, .Flags = flags,
	};

	if (!desc || channel_format(desc, &cd.Format, &cd.NumChannels) !=
			     hipSuccess)
		return vhip_error(hipErrorInvalidValue);
	return mipmap_create(out, &cd, levels);
}

VHIP_EXPORT hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t m)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!m)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMipmappedArrayDestroy((CUmipmappedArray)m->data));
	if (e == hipSuccess)
		free(m);
	return e;
}

VHIP_EXPORT hipError_t hipFreeMipmappedArray(hipMipmappedArray_t m)
{
	return hipMipmappedArrayDestroy(m);
}

/* ---- copies and memsets ---------------------------------------------------- */

/* With unified addressing every kind is the same copy: the driver tells
 * host from device memory by the pointers, as hipMemcpyDefault asks. */
static hipError_t check_kind(hipMemcpyKind kind)
{
	return kind >= hipMemcpyHostToHost && kind <= hipMemcpyDefault ?
	       hipSuccess : vhip_error(hipErrorInvalidMemcpyDirection);
}

VHIP_EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t n,
				 hipMemcpyKind kind)
{
	hipError_t e = vhip_enter();

	if (e == hipSuccess)
		e = check_kind(kind);
	if (e != hipSuccess || !n)
		return e;
	return vhip_result(cuMemcpy(dptr(dst), dptr(src), n));
}

VHIP_EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n,
				      hipMemcpyKind kind, hipStream_t s)
{
	hipError_t e = vhip_enter();

	if (e == hipSuccess)
		e = check_kind(kind);
	if (e != hipSuccess || !n)
		return e;
	return vhip_result(cuMemcpyAsync(dptr(dst), dptr(src), n, (CUstream)s));
}

VHIP_EXPORT hipError_t hipMemcpyWithStream(void *dst, const void *src,
					   size_t n, hipMemcpyKind kind,
					   hipStream_t s)
{
	hipError_t e = hipMemcpyAsync(dst, src, n, kind, s);

	return e != hipSuccess ? e : vhip_result(cuStreamSynchronize((CUstream)s));
}

VHIP_EXPORT hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void *src, size_t n)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuMemcpyHtoD(dptr(dst), src, n));
}

VHIP_EXPORT hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t n)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuMemcpyDtoH(dst, dptr(src), n));
}

VHIP_EXPORT hipError_t hipMemcpyDtoD(hipDeviceptr_t dst, hipDeviceptr_t src,
				     size_t n)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemcpyDtoD(dptr(dst), dptr(src), n));
}

VHIP_EXPORT hipError_t hipMemset(void *dst, int value, size_t n)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemsetD8(dptr(dst), (unsigned char)value, n));
}

VHIP_EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t n,
				      hipStream_t s)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemsetD8Async(dptr(dst), (unsigned char)value, n,
					   (CUstream)s));
}

VHIP_EXPORT hipError_t hipMemsetD32(hipDeviceptr_t dst, int value, size_t n)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuMemsetD32(dptr(dst), (unsigned)value, n));
}

VHIP_EXPORT hipChannelFormatDesc hipCreateChannelDesc(int x, int y, int z,
						      int w,
						      hipChannelFormatKind f)
{
	hipChannelFormatDesc d = { .x = x, .y = y, .z = z, .w = w, .f = f };

	return d;
}
