/* codeobj.h - reading HIP device code: offload bundles and AMDGPU code
 * objects, for the kernels' names and explicit argument layouts.
 *
 * Pure parsing, no runtime state: used by the simulated runtime and by the
 * fuzz target. Inputs are untrusted: every read is bounded.
 */
#ifndef VGPU_SIM_HIP_CODEOBJ_H
#define VGPU_SIM_HIP_CODEOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CUDA's limit on a kernel's parameters; larger layouts are refused. */
#define VHIP_MAX_ARG_BYTES 32764u
#define VHIP_MAX_ARGS      1024u
#define VHIP_MAX_KERNELS   65536u

struct vhip_arg {
	uint32_t offset;            /* in the kernarg segment */
	uint32_t size;
};

struct vhip_kernel {
	char *name;                 /* ".name", NUL-terminated */
	uint32_t nargs;             /* the explicit arguments, in order */
	struct vhip_arg *args;
	uint32_t explicit_bytes;    /* end of the last explicit argument */
};

struct vhip_codeobj {
	uint32_t nkernels;
	struct vhip_kernel *kernels;
};

/* The size of the image at data when the caller does not know it (as
 * hipModuleLoadData): an offload bundle's extent, or an ELF's (its section
 * headers' end). 0 if neither. Reads at most `limit` bytes. */
size_t vhip_image_size(const void *data, size_t limit);

/* Reads the kernels of an AMDGPU code object, or of the amdgcn entry of an
 * offload bundle (the one for `arch`, e.g. "gfx90a", if there is one, else
 * the first). Returns 0, or -1 with a message in err (bad input, no
 * amdgcn code, no metadata). On success free out with vhip_codeobj_free. */
int vhip_codeobj_parse(const void *data, size_t size, const char *arch,
		       struct vhip_codeobj *out, char *err, size_t errlen);
void vhip_codeobj_free(struct vhip_codeobj *co);
/* The kernel called name, or NULL. */
const struct vhip_kernel *vhip_codeobj_find(const struct vhip_codeobj *co,
					    const char *name);

/* Reads an NT_AMDGPU_METADATA note's msgpack (exposed for tests). */
int vhip_metadata_parse(const void *msgpack, size_t size,
			struct vhip_codeobj *out, char *err, size_t errlen);

#endif
