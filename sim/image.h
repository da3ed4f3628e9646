/* image.h - reading kernel images: cubins (ELF), fatbins and PTX.
 *
 * Pure parsing: no driver state. Used by module.c and by the fuzzer.
 */
#ifndef VGPU_SIM_IMAGE_H
#define VGPU_SIM_IMAGE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

enum vsim_image_kind { VSIM_IMAGE_CUBIN = 1, VSIM_IMAGE_PTX, VSIM_IMAGE_FATBIN };

struct vsim_param {
	uint32_t offset;   /* bytes from the start of the parameter buffer */
	uint32_t size;     /* bytes */
};

struct vsim_kernel_desc {
	char *name;                 /* as in the image (mangled if C++) */
	uint32_t nparams;
	struct vsim_param *params;  /* ordered by parameter index */
	uint32_t param_bytes;       /* size of the packed parameter buffer */
	int num_regs;               /* 0 when the image does not say */
	int shared_bytes;           /* static shared memory */
	int local_bytes;
	int const_bytes;
	int max_threads;            /* 1024 unless the image limits it */
	int max_dynamic_shared;     /* 48 KiB unless the image says more */
};

struct vsim_image {
	enum vsim_image_kind kind;  /* of the input */
	int arch;                   /* sm version of the code used: 90 = sm_90 */
	int ptx_version;            /* major*10+minor, 0 when unknown */
	uint32_t nkernels;
	struct vsim_kernel_desc *kernels;
};

/* Reads the image at data. size == 0: the size is found from the data itself
 * (ELF headers, fatbin header, NUL-terminated PTX), as cuModuleLoadData must.
 * A fatbin wrapper (magic 0x466243b1, what cuModuleLoadFatBinary may receive)
 * is accepted too. From a fatbin, the cubin for the highest sm version <=
 * device_arch is used, else PTX, else CUDA_ERROR_NO_BINARY_FOR_GPU.
 * Returns CUDA_SUCCESS, or CUDA_ERROR_INVALID_IMAGE (or NO_BINARY_FOR_GPU,
 * NOT_SUPPORTED for compressed entries) with a message in err. */
CUresult vsim_image_parse(const void *data, size_t size, int device_arch,
			  struct vsim_image *out, char *err, size_t errlen);
void vsim_image_free(struct vsim_image *img);
/* Index of the kernel called name, or -1. */
int vsim_image_find(const struct vsim_image *img, const char *name);

#endif
