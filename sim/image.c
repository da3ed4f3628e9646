/* image.c - reading kernel images: cubins (ELF), fatbins and PTX.
 *
 * Pure parsing of untrusted bytes: every offset and length read from the
 * image is checked against the buffer before use, every loop advances, and
 * every failure frees what was built.  With size != 0 nothing past
 * data + size is read; with size == 0 the size comes from the image's own
 * headers, which then have to be trusted (cuModuleLoadData gives no size).
 *
 * The formats are not documented by NVIDIA; the layouts were worked out
 * from nvcc 13.0 output (see tests/sim/data/README).
 *
 * This file: the entry points, which tell the formats apart, and what the
 * format readers share (errors, the kernel list).  The formats themselves:
 * image_cubin.c, image_fatbin.c, image_ptx.c.
 */
#include "image_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMG_MAX_THREADS		1024
#define IMG_DEFAULT_DYN_SHARED	(48 * 1024)

/* --- errors ------------------------------------------------------------ */

CUresult vsim__image_fail(struct img_ctx *cx, CUresult rc, const char *fmt,
			  ...)
{
	va_list ap;

	if (cx->err && cx->errlen) {
		va_start(ap, fmt);
		vsnprintf(cx->err, cx->errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

CUresult vsim__image_invalid(struct img_ctx *cx, const char *what)
{
	return vsim__image_fail(cx, CUDA_ERROR_INVALID_IMAGE,
				"invalid image: %s", what);
}

CUresult vsim__image_nomem(struct img_ctx *cx)
{
	return vsim__image_fail(cx, CUDA_ERROR_OUT_OF_MEMORY, "out of memory");
}

/* --- readers ----------------------------------------------------------- */

/* True when p starts with the 4 bytes of magic (little endian).  Stops at
 * the first mismatch, so a shorter NUL-terminated text (size == 0) is
 * never read past. */
bool vsim__image_has_magic(const uint8_t *p, size_t size, uint32_t magic)
{
	for (size_t i = 0; i < 4; i++) {
		if (size && i >= size)
			return false;
		if (p[i] != (uint8_t)(magic >> (8 * i)))
			return false;
	}
	return true;
}

/* --- the kernel list --------------------------------------------------- */

/* Appends a zeroed kernel with the defaults; NULL when out of memory. */
struct vsim_kernel_desc *vsim__image_add_kernel(struct vsim_image *img,
						uint32_t *cap)
{
	struct vsim_kernel_desc *k;

	if (img->nkernels == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 8;

		if (*cap > UINT32_MAX / 2 / sizeof(*k))
			return NULL;
		k = realloc(img->kernels, ncap * sizeof(*k));
		if (!k)
			return NULL;
		img->kernels = k;
		*cap = ncap;
	}
	k = &img->kernels[img->nkernels++];
	memset(k, 0, sizeof(*k));
	k->max_threads = IMG_MAX_THREADS;
	k->max_dynamic_shared = IMG_DEFAULT_DYN_SHARED;
	return k;
}

/* Lowers k's thread limit to x*y*z (launch bounds, required ntid). */
void vsim__image_limit_threads(struct vsim_kernel_desc *k, uint64_t x,
			       uint64_t y, uint64_t z)
{
	uint64_t n;

	if (!x || !y || !z || x > IMG_MAX_THREADS || y > IMG_MAX_THREADS ||
	    z > IMG_MAX_THREADS)
		return;
	n = x * y * z;
	if (n < (uint64_t)k->max_threads)
		k->max_threads = (int)n;
}

/* --- entry points ------------------------------------------------------ */

static CUresult image_cubin(struct img_ctx *cx, const uint8_t *p, size_t size,
			    struct vsim_image *img)
{
	CUresult rc = CUDA_SUCCESS;

	if (!size)
		rc = vsim__image_elf_size(cx, p, &size);
	if (rc == CUDA_SUCCESS)
		rc = vsim__image_cubin_parse(cx, p, size, img);
	img->kind = VSIM_IMAGE_CUBIN;
	if (rc == CUDA_SUCCESS && img->arch > cx->device_arch)
		rc = vsim__image_fail(cx, CUDA_ERROR_NO_BINARY_FOR_GPU,
				      "cubin is for sm_%d, the device is sm_%d",
				      img->arch, cx->device_arch);
	return rc;
}

static CUresult image_dispatch(struct img_ctx *cx, const uint8_t *p,
			       size_t size, struct vsim_image *img)
{
	size_t n;

	if (vsim__image_has_magic(p, size, 0x464c457fu))	/* "\x7fELF" */
		return image_cubin(cx, p, size, img);
	if (vsim__image_has_magic(p, size, FATBIN_MAGIC))
		return vsim__image_fatbin_parse(cx, p, size, img);
	if (vsim__image_has_magic(p, size, FATBIN_WRAPPER_MAGIC))
		return vsim__image_fatbin_wrapper(cx, p, size, img);
	n = vsim__image_ptx_length(p, size);
	if (vsim__image_ptx_looks_like((const char *)p, n))
		return vsim__image_ptx_parse(cx, (const char *)p, n, img);
	return vsim__image_invalid(cx, "not a cubin, fatbin or PTX");
}

CUresult vsim_image_parse(const void *data, size_t size, int device_arch,
			  struct vsim_image *out, char *err, size_t errlen)
{
	struct img_ctx cx = { device_arch, err, errlen };
	CUresult rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return vsim__image_fail(&cx, CUDA_ERROR_INVALID_VALUE,
					"no output");
	memset(out, 0, sizeof(*out));
	if (!data)
		return vsim__image_fail(&cx, CUDA_ERROR_INVALID_VALUE,
					"no image");
	rc = image_dispatch(&cx, data, size, out);
	if (rc != CUDA_SUCCESS)
		vsim_image_free(out);
	return rc;
}

void vsim_image_free(struct vsim_image *img)
{
	if (!img)
		return;
	for (uint32_t i = 0; i < img->nkernels; i++) {
		free(img->kernels[i].name);
		free(img->kernels[i].params);
	}
	free(img->kernels);
	memset(img, 0, sizeof(*img));
}

int vsim_image_find(const struct vsim_image *img, const char *name)
{
	if (!img || !name)
		return -1;
	for (uint32_t i = 0; i < img->nkernels; i++) {
		if (img->kernels[i].name && !strcmp(img->kernels[i].name, name))
			return (int)i;
	}
	return -1;
}
