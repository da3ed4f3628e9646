/* image_internal.h - what the files of the image parser share.
 *
 * Functions defined in one file and called from another are named
 * vsim__image_ and grouped below by the file that defines them; the
 * types, limits and inline readers are img_ and IMG_.  Everything else
 * is static to its file.
 */
#ifndef VGPU_SIM_IMAGE_INTERNAL_H
#define VGPU_SIM_IMAGE_INTERNAL_H

#include "image.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMG_MAX_SIZE		((uint64_t)1 << 30)	/* larger: refused */

#define FATBIN_MAGIC		0xba55ed50u
#define FATBIN_WRAPPER_MAGIC	0x466243b1u

/* One parse: the device it is for, and where its error message goes. */
struct img_ctx {
	int device_arch;
	char *err;
	size_t errlen;
};

/* Little-endian reads; the caller has checked that the bytes are there. */
static inline uint16_t img_rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t img_rd32(const uint8_t *p)
{
	return (uint32_t)img_rd16(p) | (uint32_t)img_rd16(p + 2) << 16;
}

static inline uint64_t img_rd64(const uint8_t *p)
{
	return (uint64_t)img_rd32(p) | (uint64_t)img_rd32(p + 4) << 32;
}

static inline int img_clamp_int(uint64_t v)
{
	return v > INT32_MAX ? INT32_MAX : (int)v;
}

/* image.c: errors, readers, the kernel list */

/* Writes the message into cx's buffer and returns rc. */
CUresult vsim__image_fail(struct img_ctx *cx, CUresult rc, const char *fmt,
			  ...) __attribute__((format(printf, 3, 4)));
/* CUDA_ERROR_INVALID_IMAGE with "invalid image: what". */
CUresult vsim__image_invalid(struct img_ctx *cx, const char *what);
CUresult vsim__image_nomem(struct img_ctx *cx);
bool vsim__image_has_magic(const uint8_t *p, size_t size, uint32_t magic);
struct vsim_kernel_desc *vsim__image_add_kernel(struct vsim_image *img,
						uint32_t *cap);
void vsim__image_limit_threads(struct vsim_kernel_desc *k, uint64_t x,
			       uint64_t y, uint64_t z);

/* image_cubin.c: ELF and .nv.info */

/* Adds the kernels of the cubin in p[0..size), size != 0, to img and
 * sets img->arch. */
CUresult vsim__image_cubin_parse(struct img_ctx *cx, const uint8_t *p,
				 size_t size, struct vsim_image *img);
/* The size of the ELF at p, from its headers (which are trusted). */
CUresult vsim__image_elf_size(struct img_ctx *cx, const uint8_t *p,
			      size_t *size);

/* image_fatbin.c */

/* Parses the code picked for cx->device_arch; size 0: from the header. */
CUresult vsim__image_fatbin_parse(struct img_ctx *cx, const uint8_t *p,
				  size_t size, struct vsim_image *img);
/* Follows a fatbin wrapper's pointer; only when size is 0. */
CUresult vsim__image_fatbin_wrapper(struct img_ctx *cx, const uint8_t *p,
				    size_t size, struct vsim_image *img);

/* image_ptx.c */

/* True when the text starts, after comments, with .version. */
bool vsim__image_ptx_looks_like(const char *text, size_t n);
/* Parses the PTX text[0..n) into img, setting kind, arch and version. */
CUresult vsim__image_ptx_parse(struct img_ctx *cx, const char *text, size_t n,
			       struct vsim_image *img);
/* Up to the NUL, or size when there is none; size 0: up to the NUL. */
size_t vsim__image_ptx_length(const uint8_t *p, size_t size);

#endif
