/* codeobj.c - offload bundles, AMDGPU code objects and their metadata.
 *
 * An offload bundle: the magic "__CLANG_OFFLOAD_BUNDLE__", a u64 entry
 * count, then per entry u64 offset (from the bundle's start), u64 size,
 * u64 triple length and the triple ("hipv4-amdgcn-amd-amdhsa--gfx90a").
 * An amdgcn entry is an ELF code object whose NT_AMDGPU_METADATA note
 * (owner "AMDGPU", type 32) holds msgpack: a map whose "amdhsa.kernels"
 * is a list of maps with ".name" and ".args" (each ".offset", ".size",
 * ".value_kind"). Arguments whose kind starts "hidden_" are the runtime's,
 * not the program's: they are left out.
 */
#include "codeobj.h"
#include "msgpack.h"

#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUNDLE_MAGIC     "__CLANG_OFFLOAD_BUNDLE__"
#define BUNDLE_MAGIC_LEN 24
#define BUNDLE_MAX       4096u          /* entries */
#define NT_AMDGPU_META   32u

static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (err && len) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static bool is_bundle(const void *data, size_t size)
{
	return size >= BUNDLE_MAGIC_LEN + 8 &&
	       memcmp(data, BUNDLE_MAGIC, BUNDLE_MAGIC_LEN) == 0;
}

struct bundle_entry {
	uint64_t offset, size;
	const char *triple;
	uint64_t triple_len;
};

/* Entry i of the bundle; *pos walks the headers. False past the end. */
static bool bundle_next(const unsigned char *b, size_t size, size_t *pos,
			struct bundle_entry *e)
{
	if (*pos > size || size - *pos < 24)
		return false;
	e->offset = rd64(b + *pos);
	e->size = rd64(b + *pos + 8);
	e->triple_len = rd64(b + *pos + 16);
	*pos += 24;
	if (e->triple_len > size - *pos)
		return false;
	e->triple = (const char *)b + *pos;
	*pos += e->triple_len;
	return true;
}

static size_t elf_extent(const unsigned char *p, size_t limit)
{
	uint64_t shoff, end;
	uint16_t shentsize, shnum;

	if (limit < 64 || memcmp(p, "\177ELF", 4) != 0 || p[4] != 2)
		return 0;
	memcpy(&shoff, p + 0x28, 8);
	memcpy(&shentsize, p + 0x3a, 2);
	memcpy(&shnum, p + 0x3c, 2);
	end = shoff + (uint64_t)shentsize * shnum;
	return end < shoff || end > limit ? 0 : (size_t)end;
}

size_t vhip_image_size(const void *data, size_t limit)
{
	const unsigned char *b = data;
	struct bundle_entry e;
	size_t pos = BUNDLE_MAGIC_LEN + 8, end;
	uint64_t n;

	if (!is_bundle(data, limit))
		return elf_extent(b, limit);
	n = rd64(b + BUNDLE_MAGIC_LEN);
	end = pos;
	for (uint64_t i = 0; i < n && i < BUNDLE_MAX; i++) {
		if (!bundle_next(b, limit, &pos, &e))
			return 0;
		if (e.offset > limit || e.size > limit - e.offset)
			return 0;
		if (e.offset + e.size > end)
			end = (size_t)(e.offset + e.size);
		if (pos > end)
			end = pos;
	}
	return end;
}

static bool triple_is(const struct bundle_entry *e, const char *prefix)
{
	size_t n = strlen(prefix);

	return e->triple_len >= n && memcmp(e->triple, prefix, n) == 0;
}

static bool triple_arch(const struct bundle_entry *e, const char *arch)
{
	size_t n = arch ? strlen(arch) : 0;

	if (!n || e->triple_len < n)
		return false;
	/* "...--gfx90a" or "...--gfx90a:xnack-" */
	for (uint64_t i = 0; i + n <= e->triple_len; i++)
		if (memcmp(e->triple + i, arch, n) == 0 &&
		    (i + n == e->triple_len || e->triple[i + n] == ':'))
			return true;
	return false;
}

/* The amdgcn code object in the bundle: the one for arch, else the first. */
static int bundle_pick(const unsigned char *b, size_t size, const char *arch,
		       const unsigned char **co, size_t *co_size, char *err,
		       size_t errlen)
{
	struct bundle_entry e, pick = { 0, 0, NULL, 0 };
	size_t pos = BUNDLE_MAGIC_LEN + 8;
	uint64_t n = rd64(b + BUNDLE_MAGIC_LEN);

	if (n > BUNDLE_MAX)
		return fail(err, errlen, "offload bundle: %llu entries",
			    (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++) {
		if (!bundle_next(b, size, &pos, &e))
			return fail(err, errlen, "offload bundle truncated");
		if (e.offset > size || e.size > size - e.offset)
			return fail(err, errlen, "offload bundle entry past "
				    "its end");
		if (!e.size || !(triple_is(&e, "hipv4-amdgcn-") ||
				 triple_is(&e, "hip-amdgcn-")))
			continue;
		if (!pick.triple || triple_arch(&e, arch))
			pick = e;
		if (triple_arch(&e, arch))
			break;
	}
	if (!pick.triple)
		return fail(err, errlen, "offload bundle has no amdgcn code");
	*co = b + pick.offset;
	*co_size = (size_t)pick.size;
	return 0;
}

/* ---- the metadata ------------------------------------------------------- */

static int read_arg(struct vhip_mp *c, struct vhip_arg *a, bool *hidden)
{
	uint32_t n, kn, sn;
	const char *k, *s;
	uint64_t v;
	bool have_off = false, have_size = false;

	*hidden = false;
	if (!vhip_mp_map(c, &n))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (!vhip_mp_str(c, &k, &kn))
			return -1;
		if (vhip_mp_eq(k, kn, ".offset") || vhip_mp_eq(k, kn, ".size")) {
			if (!vhip_mp_uint(c, &v) || v > VHIP_MAX_ARG_BYTES)
				return -1;
			if (k[1] == 'o') {
				a->offset = (uint32_t)v;
				have_off = true;
			} else {
				a->size = (uint32_t)v;
				have_size = true;
			}
		} else if (vhip_mp_eq(k, kn, ".value_kind")) {
			if (!vhip_mp_str(c, &s, &sn))
				return -1;
			*hidden = sn >= 7 && memcmp(s, "hidden_", 7) == 0;
		} else if (!vhip_mp_skip(c)) {
			return -1;
		}
	}
	return have_off && have_size ? 0 : -1;
}

static int read_args(struct vhip_mp *c, struct vhip_kernel *k)
{
	struct vhip_arg a;
	uint32_t n;
	bool hidden;

	if (!vhip_mp_array(c, &n) || n > VHIP_MAX_ARGS)
		return -1;
	free(k->args);
	k->args = calloc(n ? n : 1, sizeof(*k->args));
	k->nargs = 0;
	k->explicit_bytes = 0;
	if (!k->args)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (read_arg(c, &a, &hidden) != 0)
			return -1;
		if (hidden)
			continue;
		if (a.offset + a.size > VHIP_MAX_ARG_BYTES)
			return -1;
		k->args[k->nargs++] = a;
		if (a.offset + a.size > k->explicit_bytes)
			k->explicit_bytes = a.offset + a.size;
	}
	return 0;
}

static int read_kernel(struct vhip_mp *c, struct vhip_kernel *k)
{
	uint32_t n, kn, sn;
	const char *key, *s;

	if (!vhip_mp_map(c, &n))
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (!vhip_mp_str(c, &key, &kn))
			return -1;
		if (vhip_mp_eq(key, kn, ".name")) {
			if (!vhip_mp_str(c, &s, &sn) || !sn ||
			    memchr(s, 0, sn) || k->name)
				return -1;
			k->name = strndup(s, sn);
			if (!k->name)
				return -1;
		} else if (vhip_mp_eq(key, kn, ".args")) {
			if (read_args(c, k) != 0)
				return -1;
		} else if (!vhip_mp_skip(c)) {
			return -1;
		}
	}
	return k->name ? 0 : -1;
}

static int read_kernels(struct vhip_mp *c, struct vhip_codeobj *out)
{
	uint32_t n;

	if (!vhip_mp_array(c, &n) || n > VHIP_MAX_KERNELS || out->kernels)
		return -1;
	/* Each kernel is at least one byte: no more than the input holds. */
	if (n > (size_t)(c->end - c->p))
		return -1;
	out->kernels = calloc(n ? n : 1, sizeof(*out->kernels));
	if (!out->kernels)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		out->nkernels = i + 1;
		if (read_kernel(c, &out->kernels[i]) != 0)
			return -1;
	}
	return 0;
}

int vhip_metadata_parse(const void *msgpack, size_t size,
			struct vhip_codeobj *out, char *err, size_t errlen)
{
	struct vhip_mp c = { msgpack, (const uint8_t *)msgpack + size };
	const char *k;
	uint32_t n, kn;

	memset(out, 0, sizeof(*out));
	if (!vhip_mp_map(&c, &n))
		return fail(err, errlen, "AMDGPU metadata is not a map");
	for (uint32_t i = 0; i < n; i++) {
		if (!vhip_mp_str(&c, &k, &kn))
			goto bad;
		if (vhip_mp_eq(k, kn, "amdhsa.kernels")) {
			if (read_kernels(&c, out) != 0)
				goto bad;
		} else if (!vhip_mp_skip(&c)) {
			goto bad;
		}
	}
	if (!out->kernels)
		return fail(err, errlen, "AMDGPU metadata: no amdhsa.kernels");
	return 0;
bad:
	vhip_codeobj_free(out);
	return fail(err, errlen, "AMDGPU metadata: bad msgpack");
}

/* ---- the ELF ------------------------------------------------------------ */

/* The NT_AMDGPU_METADATA note's descriptor in section data d, or NULL. */
static const void *meta_note(Elf_Data *d, size_t *size)
{
	size_t off = 0, next, name_off, desc_off;
	GElf_Nhdr nh;

	while (off < d->d_size &&
	       (next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type == NT_AMDGPU_META && nh.n_namesz == 7 &&
		    memcmp((const char *)d->d_buf + name_off, "AMDGPU", 7) == 0) {
			*size = nh.n_descsz;
			return (const char *)d->d_buf + desc_off;
		}
		off = next;
	}
	return NULL;
}

static int elf_parse(const unsigned char *data, size_t size,
		     struct vhip_codeobj *out, char *err, size_t errlen)
{
	char *copy = malloc(size ? size : 1);
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	const void *meta = NULL;
	size_t meta_size = 0;
	int rc;

	if (!copy)
		return fail(err, errlen, "out of memory");
	memcpy(copy, data, size);
	elf_version(EV_CURRENT);
	elf = elf_memory(copy, size);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		rc = fail(err, errlen, "code object is not ELF");
		goto out;
	}
	while (!meta && (scn = elf_nextscn(elf, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		if (d && d->d_buf)
			meta = meta_note(d, &meta_size);
	}
	if (!meta)
		rc = fail(err, errlen, "code object has no AMDGPU metadata");
	else
		rc = vhip_metadata_parse(meta, meta_size, out, err, errlen);
out:
	if (elf)
		elf_end(elf);
	free(copy);
	return rc;
}

int vhip_codeobj_parse(const void *data, size_t size, const char *arch,
		       struct vhip_codeobj *out, char *err, size_t errlen)
{
	const unsigned char *co = data;
	size_t co_size = size;

	memset(out, 0, sizeof(*out));
	if (!data)
		return fail(err, errlen, "no image");
	if (is_bundle(data, size) &&
	    bundle_pick(data, size, arch, &co, &co_size, err, errlen) != 0)
		return -1;
	return elf_parse(co, co_size, out, err, errlen);
}

void vhip_codeobj_free(struct vhip_codeobj *co)
{
	for (uint32_t i = 0; co->kernels && i < co->nkernels; i++) {
		free(co->kernels[i].name);
		free(co->kernels[i].args);
	}
	free(co->kernels);
	memset(co, 0, sizeof(*co));
}

const struct vhip_kernel *vhip_codeobj_find(const struct vhip_codeobj *co,
					    const char *name)
{
	for (uint32_t i = 0; name && i < co->nkernels; i++)
		if (strcmp(co->kernels[i].name, name) == 0)
			return &co->kernels[i];
	return NULL;
}
