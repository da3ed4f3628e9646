/* copy.c - copies and memsets, synchronous and on streams.
 *
 * Every copy is an op on a stream; the synchronous forms queue it on the
 * NULL stream (or the per-thread stream for the _ptds entry points) and wait
 * for it. Device ranges are checked against the allocation table: a range
 * that leaves its allocation is CUDA_ERROR_INVALID_VALUE, never a crash.
 */
#include "sim.h"

#include <string.h>

enum side { SIDE_HOST, SIDE_DEVICE, SIDE_ANY };

static CUresult check_side(const void *p, size_t len, enum side side)
{
	struct vsim_alloc a;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (side == SIDE_DEVICE && !vsim_mem_lookup((uintptr_t)p, len, &a))
		return CUDA_ERROR_INVALID_VALUE;
	/* Unified addressing: a device pointer given as either side must
	 * still lie inside its allocation. */
	if (side == SIDE_ANY && vsim_mem_lookup((uintptr_t)p, 1, &a) &&
	    !vsim_mem_lookup((uintptr_t)p, len, &a))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult copy(void *dst, enum side dside, const void *src,
		     enum side sside, size_t n, CUstream h, bool ptds, bool sync)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == 0)
		return CUDA_SUCCESS;
	rc = check_side(dst, n, dside);
	if (rc == CUDA_SUCCESS)
		rc = check_side(src, n, sside);
	if (rc != CUDA_SUCCESS)
		return rc;
	op = vsim_op_new(VSIM_OP_COPY);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.copy.dst = dst;
	op->u.copy.src = src;
	op->u.copy.len = n;
	return sync ? vsim_stream_run(s, op) : vsim_stream_submit(s, op, NULL);
}

#define DPTR(p) ((void *)(uintptr_t)(p))

VSIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(DPTR(dst), SIDE_DEVICE, src, SIDE_HOST, n, NULL, false, true);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);
VSIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src,
					  size_t n)
{
	return copy(DPTR(dst), SIDE_DEVICE, src, SIDE_HOST, n, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	return copy(dst, SIDE_HOST, DPTR(src), SIDE_DEVICE, n, NULL, false, true);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
VSIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	return copy(dst, SIDE_HOST, DPTR(src), SIDE_DEVICE, n, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(DPTR(dst), SIDE_DEVICE, DPTR(src), SIDE_DEVICE, n, NULL,
		    false, true);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
VSIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src,
					  size_t n)
{
	return copy(DPTR(dst), SIDE_DEVICE, DPTR(src), SIDE_DEVICE, n, NULL,
		    true, true);
}

VSIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(DPTR(dst), SIDE_ANY, DPTR(src), SIDE_ANY, n, NULL, false,
		    true);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
VSIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return copy(DPTR(dst), SIDE_ANY, DPTR(src), SIDE_ANY, n, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src,
					  size_t n, CUstream h)
{
	return copy(DPTR(dst), SIDE_DEVICE, src, SIDE_HOST, n, h, false, false);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src,
					   size_t n, CUstream h);
VSIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src,
					       size_t n, CUstream h)
{
	return copy(DPTR(dst), SIDE_DEVICE, src, SIDE_HOST, n, h, true, false);
}

VSIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n,
					  CUstream h)
{
	return copy(dst, SIDE_HOST, DPTR(src), SIDE_DEVICE, n, h, false, false);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n,
					   CUstream h);
VSIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src,
					       size_t n, CUstream h)
{
	return copy(dst, SIDE_HOST, DPTR(src), SIDE_DEVICE, n, h, true, false);
}

VSIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src,
					  size_t n, CUstream h)
{
	return copy(DPTR(dst), SIDE_DEVICE, DPTR(src), SIDE_DEVICE, n, h, false,
		    false);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src,
					   size_t n, CUstream h);
VSIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src,
					       size_t n, CUstream h)
{
	return copy(DPTR(dst), SIDE_DEVICE, DPTR(src), SIDE_DEVICE, n, h, true,
		    false);
}

VSIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
				   CUstream h)
{
	return copy(DPTR(dst), SIDE_ANY, DPTR(src), SIDE_ANY, n, h, false, false);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
				    CUstream h);
VSIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src,
					size_t n, CUstream h)
{
	return copy(DPTR(dst), SIDE_ANY, DPTR(src), SIDE_ANY, n, h, true, false);
}

/* ---- 2D copies ------------------------------------------------------------ */

/* The shape of a 2D or 3D copy: width bytes of height rows, depth slices. */
struct shape {
	size_t width, height, depth;
};

/* Resolves one side of a CUDA_MEMCPY2D or 3D to an address and checks its
 * extent: from (x, y, z), rows pitch apart, slices rows * pitch apart. */
static CUresult side_3d(CUmemorytype type, const void *host, CUdeviceptr dev,
			size_t x, size_t y, size_t z, size_t pitch,
			size_t rows, const struct shape *sh, const char **out)
{
	const char *base;
	size_t offset, extent, slice = 0, zoff, last;
	size_t width = sh->width, height = sh->height;

	switch (type) {
	case CU_MEMORYTYPE_HOST:
		base = host;
		break;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		base = DPTR(dev);
		break;
	case CU_MEMORYTYPE_ARRAY:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!base || ((height > 1 || sh->depth > 1) && pitch < width) ||
	    (sh->depth > 1 && rows < height))
		return CUDA_ERROR_INVALID_VALUE;
	/* Offsets and extents that overflow would wrap into small ranges
	 * that pass the check below. */
	if ((sh->depth > 1 || z) && __builtin_mul_overflow(rows, pitch, &slice))
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(y, pitch, &offset) ||
	    __builtin_add_overflow(offset, x, &offset) ||
	    __builtin_mul_overflow(z, slice, &zoff) ||
	    __builtin_add_overflow(offset, zoff, &offset) ||
	    __builtin_mul_overflow(height - 1, pitch, &extent) ||
	    __builtin_add_overflow(extent, width, &extent) ||
	    __builtin_mul_overflow(sh->depth - 1, slice, &last) ||
	    __builtin_add_overflow(extent, last, &extent) ||
	    (uintptr_t)base > UINTPTR_MAX - offset ||
	    (uintptr_t)base + offset > UINTPTR_MAX - extent)
		return CUDA_ERROR_INVALID_VALUE;
	base += offset;
	if (check_side(base, extent, type == CU_MEMORYTYPE_DEVICE ?
					 SIDE_DEVICE : SIDE_ANY) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	*out = base;
	return CUDA_SUCCESS;
}

/* Queues (or runs) the copy of sh's rows and slices from src to dst. */
static CUresult submit_rows(struct CUstream_st *s, const char *dst,
			    size_t dpitch, size_t dslice, const char *src,
			    size_t spitch, size_t sslice, const struct shape *sh,
			    bool sync)
{
	struct vsim_op *op = vsim_op_new(VSIM_OP_COPY2D);

	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.copy2d.dst = (void *)dst;
	op->u.copy2d.src = src;
	op->u.copy2d.dpitch = dpitch;
	op->u.copy2d.spitch = spitch;
	op->u.copy2d.width = sh->width;
	op->u.copy2d.height = sh->height;
	op->u.copy2d.depth = sh->depth;
	op->u.copy2d.dslice = dslice;
	op->u.copy2d.sslice = sslice;
	return sync ? vsim_stream_run(s, op) : vsim_stream_submit(s, op, NULL);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *c, CUstream h, bool ptds, bool sync)
{
	struct CUstream_st *s;
	const char *src, *dst;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->WidthInBytes == 0 || c->Height == 0)
		return CUDA_SUCCESS;
	const struct shape sh = { c->WidthInBytes, c->Height, 1 };

	rc = side_3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes,
		     c->srcY, 0, c->srcPitch, c->Height, &sh, &src);
	if (rc == CUDA_SUCCESS)
		rc = side_3d(c->dstMemoryType, c->dstHost, c->dstDevice,
			     c->dstXInBytes, c->dstY, 0, c->dstPitch, c->Height,
			     &sh, &dst);
	if (rc != CUDA_SUCCESS)
		return rc;
	return submit_rows(s, dst, c->dstPitch, 0, src, c->srcPitch, 0, &sh,
			   sync);
}

/* A 3D copy between host and device memory (arrays: not supported). */
static CUresult copy_3d(const CUDA_MEMCPY3D *c, CUstream h, bool ptds, bool sync)
{
	struct CUstream_st *s;
	const char *src, *dst;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!c || c->srcLOD || c->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0)
		return CUDA_SUCCESS;
	const struct shape sh = { c->WidthInBytes, c->Height, c->Depth };

	rc = side_3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes,
		     c->srcY, c->srcZ, c->srcPitch, c->srcHeight, &sh, &src);
	if (rc == CUDA_SUCCESS)
		rc = side_3d(c->dstMemoryType, c->dstHost, c->dstDevice,
			     c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
			     c->dstHeight, &sh, &dst);
	if (rc != CUDA_SUCCESS)
		return rc;
	return submit_rows(s, dst, c->dstPitch, c->dstPitch * c->dstHeight,
			   src, c->srcPitch, c->srcPitch * c->srcHeight, &sh,
			   sync);
}

VSIM_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c);
VSIM_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c);
VSIM_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c)
{
	return copy_2d(c, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream h)
{
	return copy_2d(c, h, false, false);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream h);
VSIM_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream h)
{
	return copy_2d(c, h, true, false);
}

/* ---- 3D and peer copies ------------------------------------------------------ */

VSIM_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c)
{
	return copy_3d(c, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c);
VSIM_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c)
{
	return copy_3d(c, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream h)
{
	return copy_3d(c, h, false, false);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream h);
VSIM_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream h)
{
	return copy_3d(c, h, true, false);
}

/* Every simulated device's memory is one address space: a peer copy is a
 * device-to-device copy once both contexts are known. */
static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
		     CUcontext sctx, size_t n, CUstream h, bool ptds, bool sync)
{
	if (!vsim_ctx_valid(dctx) || !vsim_ctx_valid(sctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(DPTR(dst), SIDE_DEVICE, DPTR(src), SIDE_DEVICE, n, h, ptds,
		    sync);
}

VSIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx,
				  CUdeviceptr src, CUcontext sctx, size_t n)
{
	return peer(dst, dctx, src, sctx, n, NULL, false, true);
}

CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx,
				   CUdeviceptr src, CUcontext sctx, size_t n);
VSIM_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx,
				       CUdeviceptr src, CUcontext sctx,
				       size_t n)
{
	return peer(dst, dctx, src, sctx, n, NULL, true, true);
}

VSIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx,
				       CUdeviceptr src, CUcontext sctx,
				       size_t n, CUstream h)
{
	return peer(dst, dctx, src, sctx, n, h, false, false);
}

CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx,
					CUdeviceptr src, CUcontext sctx,
					size_t n, CUstream h);
VSIM_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx,
					    CUdeviceptr src, CUcontext sctx,
					    size_t n, CUstream h)
{
	return peer(dst, dctx, src, sctx, n, h, true, false);
}

/* ---- memsets -------------------------------------------------------------- */

static CUresult set(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem,
		    size_t width, size_t height, CUstream h, bool ptds, bool sync)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	size_t extent;
	CUresult rc = vsim_stream_resolve(h, ptds, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (width == 0 || height == 0)
		return CUDA_SUCCESS;
	if (dst % elem || (height > 1 && (pitch < width * elem || pitch % elem)))
		return CUDA_ERROR_INVALID_VALUE;
	if (width > SIZE_MAX / elem / 2 || (height > 1 && pitch > SIZE_MAX / height))
		return CUDA_ERROR_INVALID_VALUE;
	extent = (height - 1) * pitch + width * elem;
	/* Captured: a memset node, which may also set the capture's own
	 * graph memory. A synchronous memset is refused by the submission. */
	if (!sync && vsim_capture_memset(s, &(CUDA_MEMSET_NODE_PARAMS){
			.dst = dst, .pitch = pitch, .value = value,
			.elementSize = elem, .width = width, .height = height },
			&rc))
		return rc;
	if (vsim_mem_check_device(dst, extent) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	op = vsim_op_new(VSIM_OP_SET);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.set.dst = DPTR(dst);
	op->u.set.value = value;
	op->u.set.elem = elem;
	op->u.set.count = width;
	op->u.set.pitch = pitch;
	op->u.set.height = height;
	return sync ? vsim_stream_run(s, op) : vsim_stream_submit(s, op, NULL);
}

/* One definition per entry point: name, element type and size, stream and
 * per-thread forms. Each expands to a plain forwarding function. */
#define SET_1D(name, type, elem, ptds)                                        \
	CUresult CUDAAPI name(CUdeviceptr d, type v, size_t n);               \
	VSIM_EXPORT CUresult name(CUdeviceptr d, type v, size_t n)            \
	{                                                                     \
		return set(d, 0, v, elem, n, 1, NULL, ptds, true);            \
	}
#define SET_1D_ASYNC(name, type, elem, ptds)                                  \
	CUresult CUDAAPI name(CUdeviceptr d, type v, size_t n, CUstream h);   \
	VSIM_EXPORT CUresult name(CUdeviceptr d, type v, size_t n, CUstream h) \
	{                                                                     \
		return set(d, 0, v, elem, n, 1, h, ptds, false);              \
	}
#define SET_2D(name, type, elem, ptds)                                        \
	CUresult CUDAAPI name(CUdeviceptr d, size_t p, type v, size_t w,      \
			      size_t ht);                                     \
	VSIM_EXPORT CUresult name(CUdeviceptr d, size_t p, type v, size_t w,  \
				  size_t ht)                                  \
	{                                                                     \
		return set(d, p, v, elem, w, ht, NULL, ptds, true);           \
	}
#define SET_2D_ASYNC(name, type, elem, ptds)                                  \
	CUresult CUDAAPI name(CUdeviceptr d, size_t p, type v, size_t w,      \
			      size_t ht, CUstream h);                         \
	VSIM_EXPORT CUresult name(CUdeviceptr d, size_t p, type v, size_t w,  \
				  size_t ht, CUstream h)                      \
	{                                                                     \
		return set(d, p, v, elem, w, ht, h, ptds, false);             \
	}

SET_1D(cuMemsetD8_v2, unsigned char, 1, false)
SET_1D(cuMemsetD16_v2, unsigned short, 2, false)
SET_1D(cuMemsetD32_v2, unsigned int, 4, false)
SET_1D(cuMemsetD8_v2_ptds, unsigned char, 1, true)
SET_1D(cuMemsetD16_v2_ptds, unsigned short, 2, true)
SET_1D(cuMemsetD32_v2_ptds, unsigned int, 4, true)
SET_1D_ASYNC(cuMemsetD8Async, unsigned char, 1, false)
SET_1D_ASYNC(cuMemsetD16Async, unsigned short, 2, false)
SET_1D_ASYNC(cuMemsetD32Async, unsigned int, 4, false)
SET_1D_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, true)
SET_1D_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, true)
SET_1D_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, true)
SET_2D(cuMemsetD2D8_v2, unsigned char, 1, false)
SET_2D(cuMemsetD2D16_v2, unsigned short, 2, false)
SET_2D(cuMemsetD2D32_v2, unsigned int, 4, false)
SET_2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, true)
SET_2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, true)
SET_2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, true)
SET_2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, false)
SET_2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, false)
SET_2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, false)
SET_2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1, true)
SET_2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2, true)
SET_2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4, true)
