/* image.c - reading kernel images: cubins (ELF), fatbins and PTX.
 *
 * Pure parsing of untrusted bytes: every offset and length read from the
 * image is checked against the buffer before use, every loop advances, and
 * every failure frees what was built.  With size != 0 nothing past
 * data + size is read; with size == 0 the size comes from the image's own
 * headers, which then have to be trusted (cuModuleLoadData gives no size).
 *
 * The formats are not documented by NVIDIA; the layouts below were worked
 * out from nvcc 13.0 output (see tests/sim/data/README).
 */
#include "image.h"

#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMG_MAX_SIZE		((uint64_t)1 << 30)	/* larger: refused */
#define IMG_MAX_PARAM_BYTES	32764u	/* CUDA's kernel parameter limit */
#define IMG_MAX_THREADS		1024
#define IMG_DEFAULT_DYN_SHARED	(48 * 1024)

/* --- cubin (ELF) ------------------------------------------------------- */

#define CUBIN_OSABI_V2		0x41	/* newer ABI: sm in e_flags bits 8..15 */
#define CUBIN_STO_ENTRY		0x10	/* st_other bit of __global__ functions */

/* .nv.info record: u8 format, u8 attribute, u16 value-or-length, [blob] */
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };

enum {
	EIATTR_MAX_THREADS = 0x05,	/* u32 x, y, z: __launch_bounds__ */
	EIATTR_PARAM_CBANK = 0x0a,	/* u32 sym, u16 offset, u16 size */
	EIATTR_REQNTID = 0x10,		/* u32 x, y, z: .reqntid */
	EIATTR_FRAME_SIZE = 0x11,	/* global: u32 sym, u32 bytes */
	EIATTR_KPARAM_INFO = 0x17,	/* u32 0, u16 ord, u16 off, u32 flags */
	EIATTR_CBANK_PARAM_SIZE = 0x19,	/* HVAL: parameter buffer bytes */
	EIATTR_REGCOUNT = 0x2f,		/* global: u32 sym, u32 registers */
	EIATTR_KPARAM_INFO_V2 = 0x45,	/* u32 0, u16 ord, u16 off, u32 size */
};

/* KPARAM_INFO flags: size in bytes in bits 18..31 */
#define KPARAM_SIZE(flags)	(((flags) >> 18) & 0x3fff)

/* --- fatbin ---------------------------------------------------------- */

#define FATBIN_MAGIC		0xba55ed50u
#define FATBIN_WRAPPER_MAGIC	0x466243b1u
#define FATBIN_HDR_MIN		16	/* u32 magic, u16 ver, u16 hs, u64 size */
#define FATBIN_ENTRY_MIN	64
#define FATBIN_KIND_PTX		1
#define FATBIN_KIND_ELF		2
#define FATBIN_FLAG_LZ4		0x2000u
#define FATBIN_FLAG_ZSTD	0x8000u
#define FATBIN_FLAG_ARCH_EXACT	0x100000u	/* sm_90a and the like */
#define FATBIN_NO_COMPRESS_HINT	"rebuild with nvcc --no-compress " \
				"(or -Xfatbin -compress=false)"

struct img_ctx {
	int device_arch;
	char *err;
	size_t errlen;
};

static CUresult img_fail(struct img_ctx *cx, CUresult rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static CUresult img_fail(struct img_ctx *cx, CUresult rc, const char *fmt, ...)
{
	va_list ap;

	if (cx->err && cx->errlen) {
		va_start(ap, fmt);
		vsnprintf(cx->err, cx->errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static CUresult img_invalid(struct img_ctx *cx, const char *what)
{
	return img_fail(cx, CUDA_ERROR_INVALID_IMAGE, "invalid image: %s", what);
}

static CUresult img_nomem(struct img_ctx *cx)
{
	return img_fail(cx, CUDA_ERROR_OUT_OF_MEMORY, "out of memory");
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int clamp_int(uint64_t v)
{
	return v > INT32_MAX ? INT32_MAX : (int)v;
}

/* True when p starts with the 4 bytes of magic (little endian).  Stops at
 * the first mismatch, so a shorter NUL-terminated text (size == 0) is
 * never read past. */
static bool has_magic(const uint8_t *p, size_t size, uint32_t magic)
{
	for (size_t i = 0; i < 4; i++) {
		if (size && i >= size)
			return false;
		if (p[i] != (uint8_t)(magic >> (8 * i)))
			return false;
	}
	return true;
}

/* Appends a zeroed kernel with the defaults; NULL when out of memory. */
static struct vsim_kernel_desc *img_add_kernel(struct vsim_image *img,
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
static void kernel_limit_threads(struct vsim_kernel_desc *k, uint64_t x,
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

/* --- .nv.info records ------------------------------------------------ */

struct nvinfo_rec {
	uint8_t fmt;
	uint8_t attr;
	uint16_t hval;		/* value (BVAL, HVAL) or blob length (SVAL) */
	const uint8_t *val;	/* SVAL blob, else NULL */
	uint32_t len;
};

struct nvinfo_iter {
	const uint8_t *p;
	size_t n;
	size_t pos;
};

/* 1: the next record is in *r; 0: the end; -1: malformed.  Every record
 * has a 4-byte head, SVAL blobs follow it (padded to 4 bytes). */
static int nvinfo_next(struct nvinfo_iter *it, struct nvinfo_rec *r)
{
	const uint8_t *h;

	if (it->pos >= it->n)
		return 0;
	if (it->n - it->pos < 4)
		return -1;
	h = it->p + it->pos;
	it->pos += 4;
	r->fmt = h[0];
	r->attr = h[1];
	r->hval = rd16(h + 2);
	r->val = NULL;
	r->len = 0;
	if (r->fmt < EIFMT_NVAL || r->fmt > EIFMT_SVAL)
		return -1;
	if (r->fmt != EIFMT_SVAL)
		return 1;
	if (r->hval > it->n - it->pos)
		return -1;
	r->val = h + 4;
	r->len = r->hval;
	it->pos += (r->len + 3u) & ~3u;
	return 1;
}

/* Number of parameter records in a kernel's .nv.info, or -1. */
static long kinfo_count_params(const uint8_t *p, size_t n)
{
	struct nvinfo_iter it = { p, n, 0 };
	struct nvinfo_rec r;
	long count = 0;
	int more;

	while ((more = nvinfo_next(&it, &r)) > 0) {
		if (r.fmt == EIFMT_SVAL && (r.attr == EIATTR_KPARAM_INFO ||
					    r.attr == EIATTR_KPARAM_INFO_V2))
			count++;
	}
	return more < 0 ? -1 : count;
}

/* Stores one KPARAM_INFO(_V2) record into k->params[ordinal]. */
static CUresult kinfo_param(struct img_ctx *cx, struct vsim_kernel_desc *k,
			    uint8_t *seen, const struct nvinfo_rec *r)
{
	uint32_t ord, off, size;

	if (r->len < 12)
		return img_invalid(cx, "short KPARAM_INFO record");
	ord = rd16(r->val + 4);
	off = rd16(r->val + 6);
	if (r->attr == EIATTR_KPARAM_INFO)
		size = KPARAM_SIZE(rd32(r->val + 8));
	else
		size = rd32(r->val + 8) & 0xffff;
	if (ord >= k->nparams || seen[ord])
		return img_invalid(cx, "bad parameter ordinal in .nv.info");
	seen[ord] = 1;
	k->params[ord].offset = off;
	k->params[ord].size = size;
	return CUDA_SUCCESS;
}

struct kinfo_sizes {
	bool have_cbank_size;	/* CBANK_PARAM_SIZE seen */
	uint32_t cbank_size;
	uint32_t param_cbank;	/* size in PARAM_CBANK, 0 if none */
};

/* Applies one record of a kernel's .nv.info to k. */
static CUresult kinfo_apply(struct img_ctx *cx, struct vsim_kernel_desc *k,
			    uint8_t *seen, struct kinfo_sizes *sz,
			    const struct nvinfo_rec *r)
{
	if (r->fmt == EIFMT_HVAL && r->attr == EIATTR_CBANK_PARAM_SIZE) {
		sz->have_cbank_size = true;
		sz->cbank_size = r->hval;
	}
	if (r->fmt != EIFMT_SVAL)
		return CUDA_SUCCESS;
	switch (r->attr) {
	case EIATTR_KPARAM_INFO:
	case EIATTR_KPARAM_INFO_V2:
		return kinfo_param(cx, k, seen, r);
	case EIATTR_PARAM_CBANK:
		if (r->len >= 8)
			sz->param_cbank = rd16(r->val + 6);
		break;
	case EIATTR_MAX_THREADS:
	case EIATTR_REQNTID:
		if (r->len >= 12)
			kernel_limit_threads(k, rd32(r->val), rd32(r->val + 4),
					     rd32(r->val + 8));
		break;
	}
	return CUDA_SUCCESS;
}

/* Sets k->param_bytes and checks every parameter lies inside it. */
static CUresult kinfo_finish(struct img_ctx *cx, struct vsim_kernel_desc *k,
			     const uint8_t *seen, const struct kinfo_sizes *sz)
{
	uint32_t end = 0;

	for (uint32_t i = 0; i < k->nparams; i++) {
		if (!seen[i])
			return img_invalid(cx, "missing parameter in .nv.info");
		if (k->params[i].offset + k->params[i].size > end)
			end = k->params[i].offset + k->params[i].size;
	}
	if (sz->have_cbank_size)
		k->param_bytes = sz->cbank_size;
	else if (sz->param_cbank)
		k->param_bytes = sz->param_cbank;
	else
		k->param_bytes = end;
	if (end > k->param_bytes)
		return img_invalid(cx, "parameter past the parameter buffer");
	return CUDA_SUCCESS;
}

/* Reads a kernel's .nv.info.<name> section: parameters and limits. */
static CUresult kinfo_parse(struct img_ctx *cx, struct vsim_kernel_desc *k,
			    const uint8_t *p, size_t n)
{
	struct nvinfo_iter it = { p, n, 0 };
	struct kinfo_sizes sz = { 0 };
	struct nvinfo_rec r;
	uint8_t *seen = NULL;
	long count = kinfo_count_params(p, n);
	CUresult rc = CUDA_SUCCESS;

	if (count < 0)
		return img_invalid(cx, "malformed kernel .nv.info");
	if (count) {
		k->params = calloc((size_t)count, sizeof(*k->params));
		seen = calloc((size_t)count, 1);
		if (!k->params || !seen) {
			rc = img_nomem(cx);
			goto out_free;
		}
	}
	k->nparams = (uint32_t)count;
	while (rc == CUDA_SUCCESS && nvinfo_next(&it, &r) > 0)
		rc = kinfo_apply(cx, k, seen, &sz, &r);
	if (rc == CUDA_SUCCESS)
		rc = kinfo_finish(cx, k, seen, &sz);
out_free:
	free(seen);
	return rc;
}

/* --- cubin ------------------------------------------------------------- */

struct cubin {
	Elf *elf;
	size_t shnum;
	size_t *info_of;	/* per .text section: its .nv.info.<name> */
	uint64_t *shared_of;	/* per .text section: .nv.shared.<name> size */
	uint8_t *text_used;	/* per .text section: claimed by a kernel */
	Elf_Scn *symtab;
	size_t strtab;		/* the symbol table's string section */
	Elf_Scn *global_info;	/* .nv.info */
	uint64_t const_bytes;	/* .nv.constant3: __constant__ data */
	size_t nsyms;
	int *regs_of;		/* per symbol: REGCOUNT, -1 if none */
	int *frame_of;		/* per symbol: FRAME_SIZE */
};

static void cubin_release(struct cubin *cb)
{
	free(cb->info_of);
	free(cb->shared_of);
	free(cb->text_used);
	free(cb->regs_of);
	free(cb->frame_of);
}

/* Notes one section of interest, found by name; links by sh_info. */
static void cubin_note_section(struct cubin *cb, Elf_Scn *scn, size_t idx,
			       const GElf_Shdr *sh, const char *name)
{
	size_t link = sh->sh_info;

	if (sh->sh_type == SHT_SYMTAB && !cb->symtab) {
		cb->symtab = scn;
		cb->strtab = sh->sh_link;
	} else if (!strcmp(name, ".nv.info")) {
		cb->global_info = scn;
	} else if (!strcmp(name, ".nv.constant3")) {
		cb->const_bytes = sh->sh_size;
	} else if (!strncmp(name, ".nv.info.", 9) && link && link < cb->shnum) {
		cb->info_of[link] = idx;
	} else if (!strncmp(name, ".nv.shared.", 11) && link &&
		   link < cb->shnum && sh->sh_type == SHT_NOBITS) {
		cb->shared_of[link] = sh->sh_size;
	}
}

/* One pass over the section headers: builds the per-section maps. */
static CUresult cubin_map_sections(struct img_ctx *cx, struct cubin *cb)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	if (elf_getshdrnum(cb->elf, &cb->shnum) ||
	    elf_getshdrstrndx(cb->elf, &shstrndx))
		return img_invalid(cx, "bad ELF section table");
	cb->info_of = calloc(cb->shnum + 1, sizeof(*cb->info_of));
	cb->shared_of = calloc(cb->shnum + 1, sizeof(*cb->shared_of));
	cb->text_used = calloc(cb->shnum + 1, 1);
	if (!cb->info_of || !cb->shared_of || !cb->text_used)
		return img_nomem(cx);
	while ((scn = elf_nextscn(cb->elf, scn))) {
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			return img_invalid(cx, "bad ELF section header");
		name = elf_strptr(cb->elf, shstrndx, sh.sh_name);
		if (name)
			cubin_note_section(cb, scn, elf_ndxscn(scn), &sh, name);
	}
	if (!cb->symtab)
		return img_invalid(cx, "cubin without a symbol table");
	return CUDA_SUCCESS;
}

/* Raw contents of a section that must have data (not NOBITS). */
static Elf_Data *cubin_data(Elf_Scn *scn)
{
	Elf_Data *d = elf_getdata(scn, NULL);

	if (!d || (d->d_size && !d->d_buf))
		return NULL;
	return d;
}

/* Reads the global .nv.info: registers and frame size per symbol. */
static CUresult cubin_global_info(struct img_ctx *cx, struct cubin *cb)
{
	const Elf_Data *d;
	struct nvinfo_iter it;
	struct nvinfo_rec r;
	int more;

	cb->regs_of = malloc((cb->nsyms + 1) * sizeof(int));
	cb->frame_of = calloc(cb->nsyms + 1, sizeof(int));
	if (!cb->regs_of || !cb->frame_of)
		return img_nomem(cx);
	memset(cb->regs_of, 0xff, (cb->nsyms + 1) * sizeof(int));
	if (!cb->global_info)
		return CUDA_SUCCESS;
	d = cubin_data(cb->global_info);
	if (!d)
		return img_invalid(cx, "unreadable .nv.info");
	it = (struct nvinfo_iter){ d->d_buf, d->d_size, 0 };
	while ((more = nvinfo_next(&it, &r)) > 0) {
		uint32_t sym;

		if (r.fmt != EIFMT_SVAL || r.len < 8)
			continue;
		sym = rd32(r.val);
		if (sym >= cb->nsyms)
			continue;
		if (r.attr == EIATTR_REGCOUNT)
			cb->regs_of[sym] = clamp_int(rd32(r.val + 4));
		else if (r.attr == EIATTR_FRAME_SIZE)
			cb->frame_of[sym] = clamp_int(rd32(r.val + 4));
	}
	return more < 0 ? img_invalid(cx, "malformed .nv.info") : CUDA_SUCCESS;
}

/* Everything about one kernel but its name. */
static CUresult cubin_fill_kernel(struct img_ctx *cx, struct cubin *cb,
				  struct vsim_kernel_desc *k, size_t symi,
				  size_t text)
{
	Elf_Scn *scn;
	const Elf_Data *d;
	GElf_Shdr sh;

	k->shared_bytes = clamp_int(cb->shared_of[text]);
	k->const_bytes = clamp_int(cb->const_bytes);
	k->local_bytes = cb->frame_of[symi];
	k->num_regs = cb->regs_of[symi];
	if (k->num_regs < 0) {
		/* older layouts: registers in the top byte of sh_info */
		scn = elf_getscn(cb->elf, text);
		k->num_regs = scn && gelf_getshdr(scn, &sh) ?
			(int)((sh.sh_info >> 24) & 0xff) : 0;
	}
	if (!cb->info_of[text])
		return CUDA_SUCCESS;
	scn = elf_getscn(cb->elf, cb->info_of[text]);
	d = scn ? cubin_data(scn) : NULL;
	if (!d)
		return img_invalid(cx, "unreadable kernel .nv.info");
	return kinfo_parse(cx, k, d->d_buf, d->d_size);
}

/* Adds the kernel for symbol symi when it is a __global__ function. */
static CUresult cubin_symbol(struct img_ctx *cx, struct cubin *cb,
			     struct vsim_image *img, uint32_t *cap,
			     Elf_Data *syms, size_t symi)
{
	struct vsim_kernel_desc *k;
	const char *name;
	GElf_Sym sym;

	if (!gelf_getsym(syms, (int)symi, &sym))
		return img_invalid(cx, "bad symbol");
	if (GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
	    !(sym.st_other & CUBIN_STO_ENTRY))
		return CUDA_SUCCESS;
	if (!sym.st_shndx || sym.st_shndx >= cb->shnum ||
	    cb->text_used[sym.st_shndx])
		return img_invalid(cx, "kernel symbol with a bad section");
	cb->text_used[sym.st_shndx] = 1;
	name = elf_strptr(cb->elf, cb->strtab, sym.st_name);
	if (!name || !*name)
		return img_invalid(cx, "kernel without a name");
	k = img_add_kernel(img, cap);
	if (!k || !(k->name = strdup(name)))
		return img_nomem(cx);
	return cubin_fill_kernel(cx, cb, k, symi, sym.st_shndx);
}

/* Walks the symbol table; every entry function becomes a kernel. */
static CUresult cubin_kernels(struct img_ctx *cx, struct cubin *cb,
			      struct vsim_image *img)
{
	Elf_Data *syms = cubin_data(cb->symtab);
	uint32_t cap = 0;
	CUresult rc;

	if (!syms)
		return img_invalid(cx, "unreadable symbol table");
	cb->nsyms = syms->d_size / sizeof(Elf64_Sym);
	rc = cubin_global_info(cx, cb);
	for (size_t i = 1; rc == CUDA_SUCCESS && i < cb->nsyms; i++)
		rc = cubin_symbol(cx, cb, img, &cap, syms, i);
	return rc;
}

/* sm version from e_flags; the encoding changed with CUDA 12's ELF ABI. */
static int cubin_arch(const GElf_Ehdr *eh)
{
	if (eh->e_ident[EI_OSABI] == CUBIN_OSABI_V2)
		return (int)((eh->e_flags >> 8) & 0xff);
	return (int)(eh->e_flags & 0xff);
}

static void cubin_libelf_init(void)
{
	elf_version(EV_CURRENT);
}

static CUresult cubin_read_elf(struct img_ctx *cx, Elf *elf,
			       struct vsim_image *img)
{
	struct cubin cb = { .elf = elf };
	GElf_Ehdr eh;
	CUresult rc;

	if (elf_kind(elf) != ELF_K_ELF || gelf_getclass(elf) != ELFCLASS64 ||
	    !gelf_getehdr(elf, &eh))
		return img_invalid(cx, "not a 64-bit ELF");
	if (eh.e_machine != EM_CUDA)
		return img_invalid(cx, "ELF is not for EM_CUDA");
	img->arch = cubin_arch(&eh);
	if (!img->arch)
		return img_invalid(cx, "cubin without an sm version");
	rc = cubin_map_sections(cx, &cb);
	if (rc == CUDA_SUCCESS)
		rc = cubin_kernels(cx, &cb, img);
	cubin_release(&cb);
	return rc;
}

/* Reads the cubin in p[0..size).  libelf wants a writable image: the
 * bytes are copied, which also keeps libelf's reads inside our copy. */
static CUresult cubin_parse(struct img_ctx *cx, const uint8_t *p, size_t size,
			    struct vsim_image *img)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	char *copy;
	Elf *elf;
	CUresult rc;

	if (size < sizeof(Elf64_Ehdr))
		return img_invalid(cx, "truncated ELF header");
	pthread_once(&once, cubin_libelf_init);
	copy = malloc(size);
	if (!copy)
		return img_nomem(cx);
	memcpy(copy, p, size);
	elf = elf_memory(copy, size);
	if (!elf) {
		rc = img_fail(cx, CUDA_ERROR_INVALID_IMAGE,
			      "invalid image: libelf: %s", elf_errmsg(-1));
		goto out_free;
	}
	rc = cubin_read_elf(cx, elf, img);
	elf_end(elf);
out_free:
	free(copy);
	return rc;
}

static bool grow_end(uint64_t *end, uint64_t off, uint64_t len)
{
	if (off > IMG_MAX_SIZE || len > IMG_MAX_SIZE)
		return false;
	if (off + len > *end)
		*end = off + len;
	return true;
}

/* Number of section headers, resolving the extended (e_shnum == 0) form. */
static uint64_t elf_shnum(const uint8_t *p, const Elf64_Ehdr *eh)
{
	Elf64_Shdr sh0;

	if (eh->e_shnum || !eh->e_shoff)
		return eh->e_shnum;
	memcpy(&sh0, p + eh->e_shoff, sizeof(sh0));
	return sh0.sh_size;
}

/* size == 0: the end of whatever the ELF headers say the file holds. */
static CUresult elf_derive_size(struct img_ctx *cx, const uint8_t *p,
				size_t *size)
{
	Elf64_Ehdr eh;
	uint64_t end = sizeof(eh), shnum;

	memcpy(&eh, p, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64)
		return img_invalid(cx, "not a 64-bit ELF");
	shnum = eh.e_shoff && eh.e_shentsize >= sizeof(Elf64_Shdr) ?
		elf_shnum(p, &eh) : 0;
	if (shnum > IMG_MAX_SIZE / sizeof(Elf64_Shdr))
		return img_invalid(cx, "too many ELF sections");
	if (!grow_end(&end, eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize) ||
	    !grow_end(&end, eh.e_shoff, shnum * eh.e_shentsize))
		return img_invalid(cx, "ELF header tables out of range");
	for (uint64_t i = 0; i < shnum; i++) {
		Elf64_Shdr sh;

		memcpy(&sh, p + eh.e_shoff + i * eh.e_shentsize, sizeof(sh));
		if (sh.sh_type != SHT_NOBITS &&
		    !grow_end(&end, sh.sh_offset, sh.sh_size))
			return img_invalid(cx, "ELF section out of range");
	}
	if (end > IMG_MAX_SIZE)
		return img_invalid(cx, "ELF too large");
	*size = (size_t)end;
	return CUDA_SUCCESS;
}

/* --- PTX --------------------------------------------------------------- */

struct ptx_lex {
	const char *p;
	const char *end;
};

struct ptx_tok {
	const char *s;
	size_t n;		/* 0 at the end of the text */
};

/* A variable's type: what .param, .shared and .local declarations give. */
struct ptx_var {
	uint64_t size;
	uint64_t align;
};

static bool ptx_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '$' ||
	       c == '%';
}

static bool ptx_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

/* Skips white space, // and block comments. */
static void ptx_skip(struct ptx_lex *lx)
{
	while (lx->p < lx->end) {
		const char *q = lx->p;

		if (ptx_space(*q)) {
			lx->p++;
		} else if (*q == '/' && q + 1 < lx->end && q[1] == '/') {
			q = memchr(q, '\n', (size_t)(lx->end - q));
			lx->p = q ? q : lx->end;
		} else if (*q == '/' && q + 1 < lx->end && q[1] == '*') {
			q = memmem(q + 2, (size_t)(lx->end - q - 2), "*/", 2);
			lx->p = q ? q + 2 : lx->end;
		} else {
			return;
		}
	}
}

/* Next token: a run of identifier characters (dots included, so
 * ".param", "9.0" and "ld.param.u64" are one token each), a quoted
 * string, or one other character. */
static struct ptx_tok ptx_next(struct ptx_lex *lx)
{
	struct ptx_tok t;

	ptx_skip(lx);
	t.s = lx->p;
	if (lx->p == lx->end) {
		t.n = 0;
		return t;
	}
	if (ptx_ident_char(*lx->p)) {
		while (lx->p < lx->end && ptx_ident_char(*lx->p))
			lx->p++;
	} else if (*lx->p == '"') {
		const char *q = memchr(lx->p + 1, '"',
				       (size_t)(lx->end - lx->p - 1));
		lx->p = q ? q + 1 : lx->end;
	} else {
		lx->p++;
	}
	t.n = (size_t)(lx->p - t.s);
	return t;
}

static struct ptx_tok ptx_peek(const struct ptx_lex *lx)
{
	struct ptx_lex copy = *lx;

	return ptx_next(&copy);
}

static bool tok_is(struct ptx_tok t, const char *w)
{
	size_t n = strlen(w);

	return t.n == n && !memcmp(t.s, w, n);
}

/* A decimal (or 0x hex) number no greater than max. */
static bool tok_uint(struct ptx_tok t, uint64_t max, uint64_t *v)
{
	size_t i = 0;
	unsigned base = 10;

	if (t.n > 2 && t.s[0] == '0' && (t.s[1] == 'x' || t.s[1] == 'X')) {
		base = 16;
		i = 2;
	}
	if (i == t.n)
		return false;
	for (*v = 0; i < t.n; i++) {
		char c = t.s[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (unsigned)((c | 0x20) - 'a' + 10);
		else
			return false;
		*v = *v * base + d;
		if (*v > max)
			return false;
	}
	return true;
}

/* An identifier that is not a directive. */
static bool tok_name(struct ptx_tok t)
{
	return t.n && t.s[0] != '.' && ptx_ident_char(t.s[0]) &&
	       !(t.s[0] >= '0' && t.s[0] <= '9');
}

/* Bytes of a PTX fundamental type name ("u32"), 0 if it is none. */
static unsigned ptx_type_size(const char *s, size_t n)
{
	static const struct { const char *name; unsigned size; } types[] = {
		{ "b8", 1 }, { "s8", 1 }, { "u8", 1 },
		{ "b16", 2 }, { "s16", 2 }, { "u16", 2 }, { "f16", 2 },
		{ "bf16", 2 }, { "b32", 4 }, { "s32", 4 }, { "u32", 4 },
		{ "f32", 4 }, { "f16x2", 4 }, { "bf16x2", 4 }, { "b64", 8 },
		{ "s64", 8 }, { "u64", 8 }, { "f64", 8 }, { "b128", 16 },
		{ "texref", 8 }, { "samplerref", 8 }, { "surfref", 8 },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strlen(types[i].name) == n && !memcmp(types[i].name, s, n))
			return types[i].size;
	}
	return 0;
}

struct ptx_quals {
	unsigned elem;		/* fundamental type bytes */
	unsigned vec;		/* .v2, .v4: elements */
	uint64_t align;		/* .align N, 0 if none */
	bool ptr;		/* .ptr seen: later .align is the pointee's */
	bool want_align;	/* the next token is .align's number */
};

static bool seg_is(const char *s, size_t n, const char *w)
{
	return strlen(w) == n && !memcmp(s, w, n);
}

/* Applies one dot-separated qualifier ("u64", "align", "v4", "global"). */
static bool ptx_qual(struct ptx_quals *q, const char *s, size_t n)
{
	unsigned size = ptx_type_size(s, n);

	if (size) {
		q->elem = size;
	} else if (seg_is(s, n, "align")) {
		q->want_align = true;
	} else if (seg_is(s, n, "ptr")) {
		q->ptr = true;
	} else if (seg_is(s, n, "v2") || seg_is(s, n, "v4")) {
		q->vec = (unsigned)(s[1] - '0');
	} else if (!seg_is(s, n, "global") && !seg_is(s, n, "const") &&
		   !seg_is(s, n, "shared") && !seg_is(s, n, "local")) {
		return false;
	}
	return true;
}

/* Applies a qualifier token, which may hold several (".ptr.global"). */
static bool ptx_quals_tok(struct ptx_quals *q, struct ptx_tok t)
{
	size_t i = 0;

	while (i < t.n) {
		size_t j;

		if (t.s[i] != '.')
			return false;
		for (j = i + 1; j < t.n && t.s[j] != '.'; j++)
			;
		if (j == i + 1 || !ptx_qual(q, t.s + i + 1, j - i - 1))
			return false;
		i = j;
	}
	return true;
}

/* Reads "[N]" dimensions after a variable's name; "[]" counts as 0. */
static bool ptx_dims(struct ptx_lex *lx, uint64_t *count)
{
	struct ptx_tok t;
	uint64_t n;

	*count = 1;
	while (tok_is(ptx_peek(lx), "[")) {
		ptx_next(lx);
		t = ptx_next(lx);
		if (tok_is(t, "]")) {
			*count = 0;
			continue;
		}
		if (!tok_uint(t, IMG_MAX_SIZE, &n) ||
		    !tok_is(ptx_next(lx), "]"))
			return false;
		*count *= n;
		if (*count > IMG_MAX_SIZE)
			return false;
	}
	return true;
}

/* Reads the qualifiers, name and dimensions of a declaration whose state
 * space directive has been read. */
static bool ptx_var(struct ptx_lex *lx, struct ptx_var *v)
{
	struct ptx_quals q = { .vec = 1 };
	struct ptx_tok t;
	uint64_t count, n;

	for (t = ptx_next(lx); !tok_name(t); t = ptx_next(lx)) {
		if (q.want_align) {
			if (!tok_uint(t, 4096, &n) || !n || (n & (n - 1)))
				return false;
			if (!q.ptr)
				q.align = n;
			q.want_align = false;
		} else if (!t.n || !ptx_quals_tok(&q, t)) {
			return false;
		}
	}
	if (!q.elem || q.want_align || !ptx_dims(lx, &count))
		return false;
	v->size = (uint64_t)q.elem * q.vec * count;
	v->align = q.align ? q.align : (uint64_t)q.elem * q.vec;
	return v->size <= IMG_MAX_SIZE;
}

static CUresult ptx_add_param(struct img_ctx *cx, struct vsim_kernel_desc *k,
			      uint32_t *cap, const struct ptx_var *v)
{
	uint64_t off = ((uint64_t)k->param_bytes + v->align - 1) &
		       ~(v->align - 1);

	if (!v->size || off + v->size > IMG_MAX_PARAM_BYTES)
		return img_invalid(cx, "PTX parameters too large");
	if (k->nparams == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 8;
		struct vsim_param *np = realloc(k->params,
						ncap * sizeof(*np));

		if (!np)
			return img_nomem(cx);
		k->params = np;
		*cap = ncap;
	}
	k->params[k->nparams].offset = (uint32_t)off;
	k->params[k->nparams].size = (uint32_t)v->size;
	k->nparams++;
	k->param_bytes = (uint32_t)(off + v->size);
	return CUDA_SUCCESS;
}

/* Reads "(.param ..., .param ...)" after an entry's name. */
static CUresult ptx_params(struct img_ctx *cx, struct ptx_lex *lx,
			   struct vsim_kernel_desc *k)
{
	uint32_t cap = 0;
	struct ptx_tok t = ptx_next(lx);
	struct ptx_var v;
	CUresult rc;

	if (tok_is(t, ")"))
		return CUDA_SUCCESS;
	for (;;) {
		if (!tok_is(t, ".param") || !ptx_var(lx, &v))
			return img_invalid(cx, "bad PTX parameter");
		rc = ptx_add_param(cx, k, &cap, &v);
		if (rc != CUDA_SUCCESS)
			return rc;
		t = ptx_next(lx);
		if (tok_is(t, ")"))
			return CUDA_SUCCESS;
		if (!tok_is(t, ","))
			return img_invalid(cx, "bad PTX parameter list");
		t = ptx_next(lx);
	}
}

/* Reads ".maxntid x, y, z" or ".reqntid ..." (1 to 3 numbers). */
static CUresult ptx_ntid(struct img_ctx *cx, struct ptx_lex *lx,
			 struct vsim_kernel_desc *k)
{
	uint64_t dim[3] = { 1, 1, 1 };

	for (int i = 0; i < 3; i++) {
		if (!tok_uint(ptx_next(lx), UINT32_MAX, &dim[i]))
			return img_invalid(cx, "bad PTX .maxntid/.reqntid");
		if (!tok_is(ptx_peek(lx), ","))
			break;
		ptx_next(lx);
	}
	kernel_limit_threads(k, dim[0], dim[1], dim[2]);
	return CUDA_SUCCESS;
}

/* Adds a .shared or .local declaration in an entry's body to k. */
static CUresult ptx_body_decl(struct img_ctx *cx, struct ptx_lex *lx,
			      struct vsim_kernel_desc *k, bool shared)
{
	struct ptx_var v;
	uint64_t total;

	if (!ptx_var(lx, &v))
		return img_invalid(cx, "bad PTX declaration");
	total = (uint64_t)(shared ? k->shared_bytes : k->local_bytes);
	total = ((total + v.align - 1) & ~(v.align - 1)) + v.size;
	if (total > INT32_MAX)
		return img_invalid(cx, "PTX declaration too large");
	if (shared)
		k->shared_bytes = (int)total;
	else
		k->local_bytes = (int)total;
	return CUDA_SUCCESS;
}

/* Reads an entry's body up to its closing brace: static .shared and
 * .local declarations at the start of statements are counted. */
static CUresult ptx_body(struct img_ctx *cx, struct ptx_lex *lx,
			 struct vsim_kernel_desc *k)
{
	size_t depth = 1;
	bool stmt = true;
	CUresult rc = CUDA_SUCCESS;

	while (depth && rc == CUDA_SUCCESS) {
		struct ptx_tok t = ptx_next(lx);

		if (!t.n)
			return img_invalid(cx, "unterminated PTX entry");
		if (stmt && (tok_is(t, ".shared") || tok_is(t, ".local")))
			rc = ptx_body_decl(cx, lx, k, tok_is(t, ".shared"));
		if (tok_is(t, "{"))
			depth++;
		else if (tok_is(t, "}"))
			depth--;
		stmt = tok_is(t, "{") || tok_is(t, "}") || tok_is(t, ";");
	}
	return rc;
}

/* Reads ".entry name (params) directives { body }". */
static CUresult ptx_entry(struct img_ctx *cx, struct ptx_lex *lx,
			  struct vsim_image *img, uint32_t *cap)
{
	struct ptx_tok t = ptx_next(lx);
	struct vsim_kernel_desc *k;
	CUresult rc = CUDA_SUCCESS;
	bool have_params = false;

	if (!tok_name(t))
		return img_invalid(cx, "PTX entry without a name");
	k = img_add_kernel(img, cap);
	if (!k || !(k->name = strndup(t.s, t.n)))
		return img_nomem(cx);
	for (t = ptx_next(lx); rc == CUDA_SUCCESS; t = ptx_next(lx)) {
		if (tok_is(t, "(") && have_params) {
			return img_invalid(cx, "two PTX parameter lists");
		} else if (tok_is(t, "(")) {
			have_params = true;
			rc = ptx_params(cx, lx, k);
		} else if (tok_is(t, ".maxntid") || tok_is(t, ".reqntid")) {
			rc = ptx_ntid(cx, lx, k);
		} else if (tok_is(t, "{")) {
			return ptx_body(cx, lx, k);
		} else if (tok_is(t, ";")) {
			return CUDA_SUCCESS;
		} else if (!t.n) {
			return img_invalid(cx, "PTX entry without a body");
		}
	}
	return rc;
}

/* ".version X.Y" gives X*10+Y. */
static CUresult ptx_version(struct img_ctx *cx, struct ptx_tok t, int *ver)
{
	const char *dot = memchr(t.s, '.', t.n);
	struct ptx_tok major_tok, minor_tok;
	uint64_t major, minor;

	if (!dot)
		return img_invalid(cx, "bad PTX .version");
	major_tok = (struct ptx_tok){ t.s, (size_t)(dot - t.s) };
	minor_tok = (struct ptx_tok){ dot + 1, t.n - major_tok.n - 1 };
	if (!tok_uint(major_tok, 99, &major) || !tok_uint(minor_tok, 9, &minor))
		return img_invalid(cx, "bad PTX .version");
	*ver = (int)(major * 10 + minor);
	return CUDA_SUCCESS;
}

/* ".target sm_XY[a|f], ..." gives XY; other targets are left alone. */
static void ptx_target(struct ptx_tok t, int *arch)
{
	uint64_t v = 0;
	size_t i;

	if (t.n < 4 || memcmp(t.s, "sm_", 3))
		return;
	for (i = 3; i < t.n && t.s[i] >= '0' && t.s[i] <= '9' && v < 10000; i++)
		v = v * 10 + (uint64_t)(t.s[i] - '0');
	if (i > 3)
		*arch = (int)v;
}

/* True when the text starts, after comments, with .version. */
static bool ptx_looks_like(const char *text, size_t n)
{
	struct ptx_lex lx = { text, text + n };

	return tok_is(ptx_next(&lx), ".version");
}

static CUresult ptx_parse(struct img_ctx *cx, const char *text, size_t n,
			  struct vsim_image *img)
{
	struct ptx_lex lx = { text, text + n };
	uint32_t cap = 0;
	CUresult rc = CUDA_SUCCESS;
	struct ptx_tok t;

	if (!ptx_looks_like(text, n))
		return img_invalid(cx, "PTX does not start with .version");
	img->kind = VSIM_IMAGE_PTX;
	for (t = ptx_next(&lx); t.n && rc == CUDA_SUCCESS; t = ptx_next(&lx)) {
		if (tok_is(t, ".version"))
			rc = ptx_version(cx, ptx_next(&lx), &img->ptx_version);
		else if (tok_is(t, ".target"))
			ptx_target(ptx_next(&lx), &img->arch);
		else if (tok_is(t, ".entry"))
			rc = ptx_entry(cx, &lx, img, &cap);
	}
	return rc;
}

/* Length of the PTX text: up to the NUL, or to size when it has none. */
static size_t ptx_length(const uint8_t *p, size_t size)
{
	const uint8_t *nul;

	if (!size)
		return strlen((const char *)p);
	nul = memchr(p, 0, size);
	return nul ? (size_t)(nul - p) : size;
}

/* --- fatbin ------------------------------------------------------------ */

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
		return img_invalid(cx, "truncated fatbin entry header");
	hs = rd32(p + 4);
	psize = rd64(p + 8);
	if (hs < FATBIN_ENTRY_MIN || hs > avail || psize > avail - hs)
		return img_invalid(cx, "fatbin entry out of range");
	flags = rd64(p + 40);
	e->kind = rd16(p);
	e->arch = clamp_int(rd32(p + 28));
	e->compressed = (flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD)) ||
			rd64(p + 56);
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
		return img_fail(cx, CUDA_ERROR_NOT_SUPPORTED,
				"compressed fatbin entry for %s_%d: %s",
				pk->packed.kind == FATBIN_KIND_PTX ?
				"compute" : "sm", pk->packed.arch,
				FATBIN_NO_COMPRESS_HINT);
	if (!pk->have_elf && !pk->have_ptx)
		return img_fail(cx, CUDA_ERROR_NO_BINARY_FOR_GPU,
				"fatbin has no cubin for sm_%d or lower "
				"and no PTX", cx->device_arch);
	if (pk->have_elf)
		return cubin_parse(cx, e->payload, e->size, img);
	if (!e->size)
		return img_invalid(cx, "empty PTX in fatbin");
	rc = ptx_parse(cx, (const char *)e->payload,
		       ptx_length(e->payload, e->size), img);
	if (!img->arch)
		img->arch = e->arch;
	return rc;
}

/* Fatbin header (little endian): u32 magic, u16 version, u16 header
 * size, u64 size of the entries that follow the header. */
static CUresult fatbin_parse(struct img_ctx *cx, const uint8_t *p, size_t size,
			     struct vsim_image *img)
{
	struct fatbin_pick pk = { .have_elf = false };
	uint64_t hs, total, off;
	CUresult rc;

	if (size && size < FATBIN_HDR_MIN)
		return img_invalid(cx, "truncated fatbin header");
	hs = rd16(p + 6);
	total = rd64(p + 8);
	if (hs < FATBIN_HDR_MIN || total > IMG_MAX_SIZE)
		return img_invalid(cx, "bad fatbin header");
	total += hs;
	if (size && total > size)
		return img_invalid(cx, "truncated fatbin");
	for (off = hs; off < total; ) {
		struct fatbin_entry e;
		size_t step;

		rc = fatbin_entry(cx, p + off, (size_t)(total - off), &e, &step);
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
static CUresult fatbin_wrapper(struct img_ctx *cx, const uint8_t *p,
			       size_t size, struct vsim_image *img)
{
	const uint8_t *fb;

	if (size)
		return img_invalid(cx, "fatbin wrapper given with a size: "
				   "its fatbin lies outside the buffer");
	memcpy(&fb, p + 8, sizeof(fb));
	if (!fb || !has_magic(fb, 0, FATBIN_MAGIC))
		return img_invalid(cx, "fatbin wrapper without a fatbin");
	return fatbin_parse(cx, fb, 0, img);
}

/* --- entry points ------------------------------------------------------ */

static CUresult image_cubin(struct img_ctx *cx, const uint8_t *p, size_t size,
			    struct vsim_image *img)
{
	CUresult rc = CUDA_SUCCESS;

	if (!size)
		rc = elf_derive_size(cx, p, &size);
	if (rc == CUDA_SUCCESS)
		rc = cubin_parse(cx, p, size, img);
	img->kind = VSIM_IMAGE_CUBIN;
	if (rc == CUDA_SUCCESS && img->arch > cx->device_arch)
		rc = img_fail(cx, CUDA_ERROR_NO_BINARY_FOR_GPU,
			      "cubin is for sm_%d, the device is sm_%d",
			      img->arch, cx->device_arch);
	return rc;
}

static CUresult image_dispatch(struct img_ctx *cx, const uint8_t *p,
			       size_t size, struct vsim_image *img)
{
	size_t n;

	if (has_magic(p, size, 0x464c457fu))	/* "\x7fELF" */
		return image_cubin(cx, p, size, img);
	if (has_magic(p, size, FATBIN_MAGIC))
		return fatbin_parse(cx, p, size, img);
	if (has_magic(p, size, FATBIN_WRAPPER_MAGIC))
		return fatbin_wrapper(cx, p, size, img);
	n = ptx_length(p, size);
	if (ptx_looks_like((const char *)p, n))
		return ptx_parse(cx, (const char *)p, n, img);
	return img_invalid(cx, "not a cubin, fatbin or PTX");
}

CUresult vsim_image_parse(const void *data, size_t size, int device_arch,
			  struct vsim_image *out, char *err, size_t errlen)
{
	struct img_ctx cx = { device_arch, err, errlen };
	CUresult rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return img_fail(&cx, CUDA_ERROR_INVALID_VALUE, "no output");
	memset(out, 0, sizeof(*out));
	if (!data)
		return img_fail(&cx, CUDA_ERROR_INVALID_VALUE, "no image");
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
