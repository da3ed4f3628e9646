/* array.c - CUDA arrays and mipmapped arrays.
 *
 * An array is host memory holding its elements packed, row after row, and
 * it takes device capacity as a pitched image would: each row rounded up to
 * ARRAY_ROW_ALIGN bytes, times the rows (height, at least 1) and the slices
 * (depth or layers, at least 1), rounded up to whole pages as cuMemAlloc is.
 * A mipmapped array takes the sum of its levels. Capacity is reserved in the
 * shared device state, so every process sees it.
 *
 * Dimension limits are the device's texture attributes (device.c).
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARRAY_ROW_ALIGN 512
#define ARRAY_MAGIC 0x41525231u
#define MIPMAP_MAGIC 0x4d495031u
#define MAX_LEVELS 32

struct CUarray_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	size_t accounted;                  /* capacity it takes (0: a level) */
	unsigned char *data;               /* the packed elements */
	size_t data_size;                  /* bytes of packed elements */
	size_t mapped;                     /* size of data's mapping */
	struct CUmipmappedArray_st *owner; /* for a mipmap level */
};

struct CUmipmappedArray_st {
	uint32_t magic;
	struct CUctx_st *ctx;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	size_t accounted;
	unsigned nlevels;
	struct CUarray_st *levels[MAX_LEVELS];
};

/* Bytes of one channel of format f; 0 for a format not simulated. For the
 * formats with their channel count in their name, *channels is set. */
static unsigned format_bytes(CUarray_format f, unsigned *channels)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1:
		*channels = 1;
		return 1;
	case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2:
		*channels = 2;
		return 1;
	case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4:
		*channels = 4;
		return 1;
	case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1:
		*channels = 1;
		return 2;
	case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2:
		*channels = 2;
		return 2;
	case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4:
		*channels = 4;
		return 2;
	default:
		return 0;
	}
}

/* Bytes of one element (all channels), or 0 when the format and channel
 * count are not a valid pair. */
static size_t element_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	unsigned implied = 0;
	unsigned b = format_bytes(d->Format, &implied);

	if (!b || (d->NumChannels != 1 && d->NumChannels != 2 &&
		   d->NumChannels != 4))
		return 0;
	if (implied && implied != d->NumChannels)
		return 0;
	return (size_t)b * d->NumChannels;
}

/* The device's limit a, or no limit when a is 0. */
static size_t limit(CUdevice dev, CUdevice_attribute a)
{
	int v = 0;

	if (!a)
		return SIZE_MAX;
	cuDeviceGetAttribute(&v, a, dev);
	return (size_t)v;
}

/* Checks the shape against the documented kinds of array and the device's
 * limits for that kind: CUDA_ERROR_INVALID_VALUE when it is none of them. */
static CUresult check_shape(const CUDA_ARRAY3D_DESCRIPTOR *d, CUdevice dev)
{
	bool layered = d->Flags & CUDA_ARRAY3D_LAYERED;
	size_t w = d->Width, h = d->Height, z = d->Depth, faces = 1;
	CUdevice_attribute lw, lh = 0, lz = 0;

	if (w == 0 || (h == 0 && z != 0 && !layered))
		return CUDA_ERROR_INVALID_VALUE;
	if (d->Flags & CUDA_ARRAY3D_CUBEMAP) {
		if (w != h || z == 0 || z % 6 != 0 || (!layered && z != 6))
			return CUDA_ERROR_INVALID_VALUE;
		lw = layered ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH
			     : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH;
		if (layered)
			lz = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS;
		faces = 6;
	} else if (layered && z == 0) {
		return CUDA_ERROR_INVALID_VALUE;
	} else if (layered && h == 0) {
		lw = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH;
		lz = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS;
	} else if (layered) {
		lw = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH;
		lh = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT;
		lz = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS;
	} else if (h == 0) {
		lw = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH;
	} else if (z == 0) {
		lw = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH;
		lh = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT;
	} else {
		lw = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH;
		lh = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT;
		lz = CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH;
	}
	if (w > limit(dev, lw) || h > limit(dev, lh) || z / faces > limit(dev, lz))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult check_desc(const CUDA_ARRAY3D_DESCRIPTOR *d, CUdevice dev)
{
	const unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST |
			       CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER |
			       CUDA_ARRAY3D_DEPTH_TEXTURE |
			       CUDA_ARRAY3D_COLOR_ATTACHMENT;
	const unsigned unsimulated = CUDA_ARRAY3D_SPARSE |
				     CUDA_ARRAY3D_DEFERRED_MAPPING |
				     CUDA_ARRAY3D_VIDEO_ENCODE_DECODE;

	if (d->Flags & unsimulated)
		return CUDA_ERROR_NOT_SUPPORTED;
	if ((d->Flags & ~known) || !element_bytes(d))
		return CUDA_ERROR_INVALID_VALUE;
	return check_shape(d, dev);
}

static size_t page_round(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n + page - 1) & ~(page - 1);
}

/* The size model (see the head of this file); the dimensions are checked,
 * so nothing overflows: at most 2^17 * 16 bytes by 2^16 * 2^14 rows. */
static size_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, size_t *packed)
{
	size_t row = d->Width * element_bytes(d);
	size_t rows = (d->Height ? d->Height : 1) * (size_t)(d->Depth ? d->Depth : 1);
	size_t pitch = (row + ARRAY_ROW_ALIGN - 1) / ARRAY_ROW_ALIGN * ARRAY_ROW_ALIGN;

	*packed = row * rows;
	return page_round(pitch * rows);
}

/* A new array of shape d; capacity is the caller's. */
static CUresult array_new(struct CUctx_st *ctx, const CUDA_ARRAY3D_DESCRIPTOR *d,
			  struct CUarray_st **out)
{
	struct CUarray_st *a = calloc(1, sizeof(*a));
	size_t packed;

	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->magic = ARRAY_MAGIC;
	a->ctx = ctx;
	a->desc = *d;
	a->mapped = array_bytes(d, &packed);
	a->data_size = packed;
	a->data = mmap(NULL, a->mapped, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->data == MAP_FAILED) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = a;
	return CUDA_SUCCESS;
}

/* Unmaps and retires an array (its capacity is the caller's). */
static void array_retire(struct CUarray_st *a)
{
	munmap(a->data, a->mapped);
	a->data = NULL;
	a->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(a);
}

/* Reserves bytes on the context's device: fault injection counts it as an
 * allocation. */
static CUresult reserve(struct CUctx_st *ctx, size_t bytes)
{
	if (vsim_fail_now(VSIM_FAIL_ALLOC))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return vsim_state_reserve(ctx->device, bytes);
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct CUctx_st *ctx;
	struct CUarray_st *a;
	size_t packed, bytes;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !d)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_desc(d, ctx->device);
	if (rc != CUDA_SUCCESS)
		return rc;
	bytes = array_bytes(d, &packed);
	rc = reserve(ctx, bytes);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = array_new(ctx, d, &a);
	if (rc != CUDA_SUCCESS) {
		vsim_state_release(ctx->device, bytes);
		return rc;
	}
	a->accounted = bytes;
	*out = a;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle,
					const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
	return array_create(pHandle, desc);
}

VSIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle,
				      const CUDA_ARRAY_DESCRIPTOR *desc)
{
	CUDA_ARRAY3D_DESCRIPTOR d;

	if (!desc)
		return array_create(pHandle, NULL);
	d = (CUDA_ARRAY3D_DESCRIPTOR){
		.Width = desc->Width, .Height = desc->Height,
		.Format = desc->Format, .NumChannels = desc->NumChannels,
	};
	return array_create(pHandle, &d);
}

static CUresult array_get(CUarray h, struct CUarray_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h->magic != ARRAY_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = h;
	return CUDA_SUCCESS;
}

/* Waits for the context's work, as cuMemFree does. A mipmap level belongs
 * to its mipmapped array and is not destroyed alone. */
VSIM_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
	struct CUarray_st *a;
	CUresult rc = array_get(hArray, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (a->owner)
		return CUDA_ERROR_INVALID_HANDLE;
	vsim_ctx_drain(a->ctx);
	vsim_state_release(a->ctx->device, a->accounted);
	array_retire(a);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *desc,
					     CUarray hArray)
{
	struct CUarray_st *a;
	CUresult rc = array_get(hArray, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!desc)
		return CUDA_ERROR_INVALID_VALUE;
	*desc = (CUDA_ARRAY_DESCRIPTOR){
		.Width = a->desc.Width, .Height = a->desc.Height,
		.Format = a->desc.Format, .NumChannels = a->desc.NumChannels,
	};
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc,
					       CUarray hArray)
{
	struct CUarray_st *a;
	CUresult rc = array_get(hArray, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!desc)
		return CUDA_ERROR_INVALID_VALUE;
	*desc = a->desc;
	return CUDA_SUCCESS;
}

/* ---- copies between host memory and arrays (packed element bytes) ------- */

static CUresult array_copy(struct CUarray_st *a, size_t off, void *host,
			   size_t n, bool to_array)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	CUresult rc;

	if (!host || off > a->data_size || n > a->data_size - off)
		return CUDA_ERROR_INVALID_VALUE;
	if (n == 0)
		return CUDA_SUCCESS;
	rc = vsim_stream_resolve(NULL, false, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	op = vsim_op_new(VSIM_OP_COPY);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.copy.dst = to_array ? (void *)(a->data + off) : host;
	op->u.copy.src = to_array ? (const void *)host : a->data + off;
	op->u.copy.len = n;
	return vsim_stream_run(s, op);
}

VSIM_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset,
				     const void *srcHost, size_t ByteCount)
{
	struct CUarray_st *a;
	CUresult rc = array_get(dstArray, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	return array_copy(a, dstOffset, (void *)(uintptr_t)srcHost, ByteCount,
			  true);
}

VSIM_EXPORT CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray,
				     size_t srcOffset, size_t ByteCount)
{
	struct CUarray_st *a;
	CUresult rc = array_get(srcArray, &a);

	if (rc != CUDA_SUCCESS)
		return rc;
	return array_copy(a, srcOffset, dstHost, ByteCount, false);
}

/* ---- mipmapped arrays ----------------------------------------------------- */

static unsigned shrink(unsigned n, unsigned level)
{
	return n == 0 ? 0 : (n >> level ? n >> level : 1);
}

/* Level l of d: width and height halve; depth too unless it counts layers
 * or cube faces. */
static CUDA_ARRAY3D_DESCRIPTOR level_desc(const CUDA_ARRAY3D_DESCRIPTOR *d,
					  unsigned l)
{
	CUDA_ARRAY3D_DESCRIPTOR ld = *d;
	bool layers = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);

	ld.Width = shrink((unsigned)d->Width, l);
	ld.Height = shrink((unsigned)d->Height, l);
	if (!layers)
		ld.Depth = shrink((unsigned)d->Depth, l);
	return ld;
}

/* 1 + floor(log2(max extent)), the extents that shrink only. */
static unsigned max_levels(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	size_t m = d->Width > d->Height ? d->Width : d->Height;
	unsigned n = 1;

	if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) &&
	    d->Depth > m)
		m = d->Depth;
	while (m >>= 1)
		n++;
	return n;
}

static void mipmap_retire(struct CUmipmappedArray_st *m)
{
	for (unsigned l = 0; l < m->nlevels; l++)
		array_retire(m->levels[l]);
	m->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(m);
}

/* Makes the levels of m; the capacity is reserved by the caller. */
static CUresult mipmap_levels(struct CUmipmappedArray_st *m)
{
	CUresult rc = CUDA_SUCCESS;

	for (unsigned l = 0; l < m->nlevels && rc == CUDA_SUCCESS; l++) {
		CUDA_ARRAY3D_DESCRIPTOR ld = level_desc(&m->desc, l);
		struct CUarray_st *a;

		rc = array_new(m->ctx, &ld, &a);
		if (rc != CUDA_SUCCESS) {
			m->nlevels = l;
			break;
		}
		a->owner = m;
		m->levels[l] = a;
	}
	return rc;
}

VSIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
					    const CUDA_ARRAY3D_DESCRIPTOR *desc,
					    unsigned int numMipmapLevels)
{
	struct CUmipmappedArray_st *m;
	struct CUctx_st *ctx;
	size_t packed, bytes = 0;
	unsigned n;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pHandle || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_desc(desc, ctx->device);
	if (rc != CUDA_SUCCESS)
		return rc;
	n = numMipmapLevels ? numMipmapLevels : 1;
	if (n > max_levels(desc))
		n = max_levels(desc);
	for (unsigned l = 0; l < n; l++) {
		CUDA_ARRAY3D_DESCRIPTOR ld = level_desc(desc, l);
		bytes += array_bytes(&ld, &packed);
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*m = (struct CUmipmappedArray_st){
		.magic = MIPMAP_MAGIC, .ctx = ctx, .desc = *desc,
		.accounted = bytes, .nlevels = n,
	};
	rc = reserve(ctx, bytes);
	if (rc != CUDA_SUCCESS) {
		free(m);
		return rc;
	}
	rc = mipmap_levels(m);
	if (rc != CUDA_SUCCESS) {
		vsim_state_release(ctx->device, bytes);
		mipmap_retire(m);
		return rc;
	}
	*pHandle = m;
	return CUDA_SUCCESS;
}

static CUresult mipmap_get(CUmipmappedArray h, struct CUmipmappedArray_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!h || h->magic != MIPMAP_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = h;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray,
					      CUmipmappedArray hMipmappedArray,
					      unsigned int level)
{
	struct CUmipmappedArray_st *m;
	CUresult rc = mipmap_get(hMipmappedArray, &m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pLevelArray || level >= m->nlevels)
		return CUDA_ERROR_INVALID_VALUE;
	*pLevelArray = m->levels[level];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	struct CUmipmappedArray_st *m;
	CUresult rc = mipmap_get(hMipmappedArray, &m);

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_ctx_drain(m->ctx);
	vsim_state_release(m->ctx->device, m->accounted);
	mipmap_retire(m);
	return CUDA_SUCCESS;
}
