/* image_fatbin.c - fatbins: containers of cubins and PTX for several
 * architectures, of which one is picked for the device.
 */
#include "image_internal.h"

#include <string.h>

#define FATBIN_HDR_MIN		16	/* u32 magic, u16 ver, u16 hs, u64 size */
#define FATBIN_ENTRY_MIN	64
#define FATBIN_KIND_PTX		1
#define FATBIN_KIND_ELF		2
#define FATBIN_FLAG_LZ4		0x2000u
#define FATBIN_FLAG_ZSTD	0x8000u
#define FATBIN_FLAG_ARCH_EXACT	0x100000u	/* sm_90a and the like */
#define FATBIN_NO_COMPRESS_HINT	"rebuild with nvcc --no-compress " \
				"(or -Xfatbin -compress=false)"

struct fatbin_entry {
	unsigned kind;		/* FATBIN_KIND_PTX, FATBIN_KIND_ELF, others */
	int arch;
	bool compressed;
	bool arch_exact;	/* runs on exactly that sm only (sm_90a) */
	const uint8_t *payload;
	size_t size;
};

/* Reads the entry header at p, avail bytes before the fatbin's end.
 * Layout (little endian): u16 kind, u16 version, u32 header size,
 * u64 payload size, u32 compressed size, u32, u16 minor, u16 major,
 * u32 arch, u32 name offset, u32 name length, u64 flags, u64,
 * u64 uncompressed size; PTX entries have 16 more bytes. */
static CUresult fatbin_entry(struct img_ctx *cx, const uint8_t *p,
			     size_t avail, struct fatbin_entry *e, size_t *step)
{
	uint32_t hs;
	uint64_t psize, flags;

	if (avail < FATBIN_ENTRY_MIN)
		return vsim__image_invalid(cx, "truncated fatbin entry header");
	hs = img_rd32(p + 4);
	psize = img_rd64(p + 8);
	if (hs < FATBIN_ENTRY_MIN || hs > avail || psize > avail - hs)
		return vsim__image_invalid(cx, "fatbin entry out of range");
	flags = img_rd64(p + 40);
	e->kind = img_rd16(p);
	e->arch = img_clamp_int(img_rd32(p + 28));
	e->compressed = (flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD)) ||
			img_rd64(p + 56);
	e->arch_exact = flags & FATBIN_FLAG_ARCH_EXACT;
	e->payload = p + hs;
	e->size = (size_t)psize;
	*step = hs + (size_t)psize;
	return CUDA_SUCCESS;
}

struct fatbin_pick {
	struct fatbin_entry elf, ptx;	/* the best uncompressed ones */
	bool have_elf, have_ptx;
	struct fatbin_entry packed;	/* the best compressed one */
	bool have_packed;
};

/* PTX of arch a is better than of arch b: the highest <= dev, else the
 * lowest (the simulator runs any PTX). */
static bool ptx_better(int a, int b, int dev)
{
	if ((a <= dev) != (b <= dev))
		return a <= dev;
	return a <= dev ? a > b : a < b;
}

static void fatbin_consider(struct fatbin_pick *pk,
			    const struct fatbin_entry *e, int dev)
{
	if (e->kind == FATBIN_KIND_ELF) {
		if (e->arch > dev || (e->arch_exact && e->arch != dev))
			return;
		if (e->compressed) {
			if (!pk->have_packed || e->arch > pk->packed.arch ||
			    pk->packed.kind != FATBIN_KIND_ELF)
				pk->packed = *e;
			pk->have_packed = true;
		} else if (!pk->have_elf || e->arch > pk->elf.arch) {
			pk->elf = *e;
			pk->have_elf = true;
		}
	} else if (e->kind == FATBIN_KIND_PTX) {
		if (e->compressed) {
			if (!pk->have_packed)
				pk->packed = *e;
			pk->have_packed = true;
		} else if (!pk->have_ptx || ptx_better(e->arch, pk->ptx.arch,
							 dev)) {
			pk->ptx = *e;
			pk->have_ptx = true;
		}
	}
}

/* Parses the code picked from a fatbin. */
static CUresult fatbin_use(struct img_ctx *cx, const struct fatbin_pick *pk,
			   struct vsim_image *img)
{
	const struct fatbin_entry *e = pk->have_elf ? &pk->elf : &pk->ptx;
	CUresult rc;

	if (!pk->have_elf && !pk->have_ptx && pk->have_packed)
		return vsim__image_fail(cx, CUDA_ERROR_NOT_SUPPORTED,
					"compressed fatbin entry for %s_%d: %s",
					pk->packed.kind == FATBIN_KIND_PTX ?
					"compute" : "sm", pk->packed.arch,
					FATBIN_NO_COMPRESS_HINT);
	if (!pk->have_elf && !pk->have_ptx)
		return vsim__image_fail(cx, CUDA_ERROR_NO_BINARY_FOR_GPU,
					"fatbin has no cubin for sm_%d or "
					"lower and no PTX", cx->device_arch);
	if (pk->have_elf)
		return vsim__image_cubin_parse(cx, e->payload, e->size, img);
	if (!e->size)
		return vsim__image_invalid(cx, "empty PTX in fatbin");
	rc = vsim__image_ptx_parse(cx, (const char *)e->payload,
				   vsim__image_ptx_length(e->payload, e->size),
				   img);
	if (!img->arch)
		img->arch = e->arch;
	return rc;
}

/* Fatbin header (little endian): u32 magic, u16 version, u16 header
 * size, u64 size of the entries that follow the header. */
CUresult vsim__image_fatbin_parse(struct img_ctx *cx, const uint8_t *p,
				  size_t size, struct vsim_image *img)
{
	struct fatbin_pick pk = { .have_elf = false };
	uint64_t hs, total, off;
	CUresult rc;

	if (size && size < FATBIN_HDR_MIN)
		return vsim__image_invalid(cx, "truncated fatbin header");
	hs = img_rd16(p + 6);
	total = img_rd64(p + 8);
	if (hs < FATBIN_HDR_MIN || total > IMG_MAX_SIZE)
		return vsim__image_invalid(cx, "bad fatbin header");
	total += hs;
	if (size && total > size)
		return vsim__image_invalid(cx, "truncated fatbin");
	for (off = hs; off < total; ) {
		struct fatbin_entry e;
		size_t step = 0;	/* for -Wmaybe-uninitialized */

		rc = fatbin_entry(cx, p + off, (size_t)(total - off), &e,
				  &step);
		if (rc != CUDA_SUCCESS)
			return rc;
		fatbin_consider(&pk, &e, cx->device_arch);
		off += step;
	}
	rc = fatbin_use(cx, &pk, img);
	img->kind = VSIM_IMAGE_FATBIN;
	return rc;
}

/* The wrapper (u32 magic, u32 version, const void *fatbin, ...) points
 * outside the buffer, so it is followed only when no size bounds it. */
CUresult vsim__image_fatbin_wrapper(struct img_ctx *cx, const uint8_t *p,
				    size_t size, struct vsim_image *img)
{
	const uint8_t *fb;

	if (size)
		return vsim__image_invalid(cx, "fatbin wrapper given with a "
					   "size: its fatbin lies outside the "
					   "buffer");
	memcpy(&fb, p + 8, sizeof(fb));
	if (!fb || !vsim__image_has_magic(fb, 0, FATBIN_MAGIC))
		return vsim__image_invalid(cx,
				"fatbin wrapper without a fatbin");
	return vsim__image_fatbin_parse(cx, fb, 0, img);
}
