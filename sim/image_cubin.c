/* image_cubin.c - cubins: ELF images of sm code and their .nv.info.
 *
 * A kernel is an STT_FUNC symbol with the entry bit in st_other; its
 * parameters and limits are in the section .nv.info.<name>, its
 * registers and frame size in the global .nv.info.
 */
#include "image_internal.h"

#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
	r->hval = img_rd16(h + 2);
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
		return vsim__image_invalid(cx, "short KPARAM_INFO record");
	ord = img_rd16(r->val + 4);
	off = img_rd16(r->val + 6);
	if (r->attr == EIATTR_KPARAM_INFO)
		size = KPARAM_SIZE(img_rd32(r->val + 8));
	else
		size = img_rd32(r->val + 8) & 0xffff;
	if (ord >= k->nparams || seen[ord])
		return vsim__image_invalid(cx,
				"bad parameter ordinal in .nv.info");
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
			sz->param_cbank = img_rd16(r->val + 6);
		break;
	case EIATTR_MAX_THREADS:
	case EIATTR_REQNTID:
		if (r->len >= 12)
			vsim__image_limit_threads(k, img_rd32(r->val),
						  img_rd32(r->val + 4),
						  img_rd32(r->val + 8));
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
			return vsim__image_invalid(cx,
					"missing parameter in .nv.info");
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
		return vsim__image_invalid(cx,
				"parameter past the parameter buffer");
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
		return vsim__image_invalid(cx, "malformed kernel .nv.info");
	if (count) {
		k->params = calloc((size_t)count, sizeof(*k->params));
		seen = calloc((size_t)count, 1);
		if (!k->params || !seen) {
			rc = vsim__image_nomem(cx);
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
		return vsim__image_invalid(cx, "bad ELF section table");
	cb->info_of = calloc(cb->shnum + 1, sizeof(*cb->info_of));
	cb->shared_of = calloc(cb->shnum + 1, sizeof(*cb->shared_of));
	cb->text_used = calloc(cb->shnum + 1, 1);
	if (!cb->info_of || !cb->shared_of || !cb->text_used)
		return vsim__image_nomem(cx);
	while ((scn = elf_nextscn(cb->elf, scn))) {
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			return vsim__image_invalid(cx,
					"bad ELF section header");
		name = elf_strptr(cb->elf, shstrndx, sh.sh_name);
		if (name)
			cubin_note_section(cb, scn, elf_ndxscn(scn), &sh, name);
	}
	if (!cb->symtab)
		return vsim__image_invalid(cx, "cubin without a symbol table");
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
		return vsim__image_nomem(cx);
	memset(cb->regs_of, 0xff, (cb->nsyms + 1) * sizeof(int));
	if (!cb->global_info)
		return CUDA_SUCCESS;
	d = cubin_data(cb->global_info);
	if (!d)
		return vsim__image_invalid(cx, "unreadable .nv.info");
	it = (struct nvinfo_iter){ d->d_buf, d->d_size, 0 };
	while ((more = nvinfo_next(&it, &r)) > 0) {
		uint32_t sym;

		if (r.fmt != EIFMT_SVAL || r.len < 8)
			continue;
		sym = img_rd32(r.val);
		if (sym >= cb->nsyms)
			continue;
		if (r.attr == EIATTR_REGCOUNT)
			cb->regs_of[sym] = img_clamp_int(img_rd32(r.val + 4));
		else if (r.attr == EIATTR_FRAME_SIZE)
			cb->frame_of[sym] = img_clamp_int(img_rd32(r.val + 4));
	}
	if (more < 0)
		return vsim__image_invalid(cx, "malformed .nv.info");
	return CUDA_SUCCESS;
}

/* Everything about one kernel but its name. */
static CUresult cubin_fill_kernel(struct img_ctx *cx, struct cubin *cb,
				  struct vsim_kernel_desc *k, size_t symi,
				  size_t text)
{
	Elf_Scn *scn;
	const Elf_Data *d;
	GElf_Shdr sh;

	k->shared_bytes = img_clamp_int(cb->shared_of[text]);
	k->const_bytes = img_clamp_int(cb->const_bytes);
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
		return vsim__image_invalid(cx, "unreadable kernel .nv.info");
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
		return vsim__image_invalid(cx, "bad symbol");
	if (GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
	    !(sym.st_other & CUBIN_STO_ENTRY))
		return CUDA_SUCCESS;
	if (!sym.st_shndx || sym.st_shndx >= cb->shnum ||
	    cb->text_used[sym.st_shndx])
		return vsim__image_invalid(cx,
				"kernel symbol with a bad section");
	cb->text_used[sym.st_shndx] = 1;
	name = elf_strptr(cb->elf, cb->strtab, sym.st_name);
	if (!name || !*name)
		return vsim__image_invalid(cx, "kernel without a name");
	k = vsim__image_add_kernel(img, cap);
	if (!k || !(k->name = strdup(name)))
		return vsim__image_nomem(cx);
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
		return vsim__image_invalid(cx, "unreadable symbol table");
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
		return vsim__image_invalid(cx, "not a 64-bit ELF");
	if (eh.e_machine != EM_CUDA)
		return vsim__image_invalid(cx, "ELF is not for EM_CUDA");
	img->arch = cubin_arch(&eh);
	if (!img->arch)
		return vsim__image_invalid(cx, "cubin without an sm version");
	rc = cubin_map_sections(cx, &cb);
	if (rc == CUDA_SUCCESS)
		rc = cubin_kernels(cx, &cb, img);
	cubin_release(&cb);
	return rc;
}

/* Reads the cubin in p[0..size).  libelf wants a writable image: the
 * bytes are copied, which also keeps libelf's reads inside our copy. */
CUresult vsim__image_cubin_parse(struct img_ctx *cx, const uint8_t *p,
				 size_t size, struct vsim_image *img)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	char *copy;
	Elf *elf;
	CUresult rc;

	if (size < sizeof(Elf64_Ehdr))
		return vsim__image_invalid(cx, "truncated ELF header");
	pthread_once(&once, cubin_libelf_init);
	copy = malloc(size);
	if (!copy)
		return vsim__image_nomem(cx);
	memcpy(copy, p, size);
	elf = elf_memory(copy, size);
	if (!elf) {
		rc = vsim__image_fail(cx, CUDA_ERROR_INVALID_IMAGE,
				      "invalid image: libelf: %s",
				      elf_errmsg(-1));
		goto out_free;
	}
	rc = cubin_read_elf(cx, elf, img);
	elf_end(elf);
out_free:
	free(copy);
	return rc;
}

/* --- the size of an ELF given without one ------------------------------ */

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
CUresult vsim__image_elf_size(struct img_ctx *cx, const uint8_t *p,
			      size_t *size)
{
	Elf64_Ehdr eh;
	uint64_t end = sizeof(eh), shnum;

	memcpy(&eh, p, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64)
		return vsim__image_invalid(cx, "not a 64-bit ELF");
	shnum = eh.e_shoff && eh.e_shentsize >= sizeof(Elf64_Shdr) ?
		elf_shnum(p, &eh) : 0;
	if (shnum > IMG_MAX_SIZE / sizeof(Elf64_Shdr))
		return vsim__image_invalid(cx, "too many ELF sections");
	if (!grow_end(&end, eh.e_phoff,
		      (uint64_t)eh.e_phnum * eh.e_phentsize) ||
	    !grow_end(&end, eh.e_shoff, shnum * eh.e_shentsize))
		return vsim__image_invalid(cx,
				"ELF header tables out of range");
	for (uint64_t i = 0; i < shnum; i++) {
		Elf64_Shdr sh;

		memcpy(&sh, p + eh.e_shoff + i * eh.e_shentsize, sizeof(sh));
		if (sh.sh_type != SHT_NOBITS &&
		    !grow_end(&end, sh.sh_offset, sh.sh_size))
			return vsim__image_invalid(cx,
					"ELF section out of range");
	}
	if (end > IMG_MAX_SIZE)
		return vsim__image_invalid(cx, "ELF too large");
	*size = (size_t)end;
	return CUDA_SUCCESS;
}
