/* module.c - modules, functions, libraries and kernels.
 *
 * Images are read by image.c. Each kernel is bound by name to its host form
 * (kernels/host.c) when one exists and its parameter buffer has the size the
 * host form expects; any other kernel runs as a no-op of VGPU_SIM_KERNEL_NS.
 * A library is parsed once and gets a module in each context that uses it.
 */
#include "sim.h"
#include "vgpu_kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE_ARCH 90

static CUresult bind_funcs(struct CUmod_st *m)
{
	const struct vsim_image *img = m->image;

	m->funcs = calloc(img->nkernels ? img->nkernels : 1, sizeof(*m->funcs));
	if (!m->funcs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < img->nkernels; i++) {
		struct CUfunc_st *f = &m->funcs[i];
		const struct vgpu_kernel_impl *impl =
			vgpu_kernels_find(img->kernels[i].name);

		f->magic = VSIM_MAGIC_FUNC;
		f->module = m;
		f->desc = &img->kernels[i];
		f->attrs_max_dynamic_shared = img->kernels[i].max_dynamic_shared;
		if (impl && impl->params_size != img->kernels[i].param_bytes) {
			vsim_log("kernel %s has %u bytes of parameters, its host "
				 "form expects %zu: it runs as a no-op",
				 img->kernels[i].name, img->kernels[i].param_bytes,
				 impl->params_size);
			impl = NULL;
		}
		f->impl = impl;
	}
	return CUDA_SUCCESS;
}

static struct CUmod_st *module_new(struct CUctx_st *ctx)
{
	struct CUmod_st *m = calloc(1, sizeof(*m));

	if (m) {
		m->magic = VSIM_MAGIC_MODULE;
		m->ctx = ctx;
	}
	return m;
}

static CUresult load_image(CUmodule *out, const void *image, size_t size)
{
	struct CUctx_st *ctx;
	struct CUmod_st *m;
	char err[256];
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !image)
		return CUDA_ERROR_INVALID_VALUE;
	m = module_new(ctx);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = vsim_image_parse(image, size, DEVICE_ARCH, &m->own, err, sizeof(err));
	if (rc != CUDA_SUCCESS) {
		vsim_log("cannot load module: %s", err);
		free(m);
		return rc;
	}
	m->image = &m->own;
	rc = bind_funcs(m);
	if (rc != CUDA_SUCCESS) {
		vsim_image_free(&m->own);
		free(m);
		return rc;
	}
	*out = m;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	return load_image(module, image, 0);
}

VSIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
					unsigned int numOptions,
					CUjit_option *options, void **values)
{
	(void)numOptions;
	(void)options;
	(void)values;
	return load_image(module, image, 0);
}

VSIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return load_image(module, fatCubin, 0);
}

/* Reads a whole file into memory; NUL-terminated so PTX parses as text. */
static CUresult read_file(const char *path, void **data, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return errno == ENOENT ? CUDA_ERROR_FILE_NOT_FOUND
				       : CUDA_ERROR_INVALID_VALUE;
	do {
		if (cap - len < 65536) {
			char *b = realloc(buf, cap + 65536 + 1);
			if (!b) {
				free(buf);
				fclose(f);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			buf = b;
			cap += 65536;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	buf[len] = '\0';
	*data = buf;
	*size = len;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	void *data;
	size_t size;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!module || !fname)
		return CUDA_ERROR_INVALID_VALUE;
	rc = read_file(fname, &data, &size);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = load_image(module, data, size);
	free(data);
	return rc;
}

static CUresult module_get(CUmodule m)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!m || m->magic != VSIM_MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

/* Waits for the context's work (kernels of this module may be queued), then
 * frees the module. Function handles of it are refused from now on. */
VSIM_EXPORT CUresult cuModuleUnload(CUmodule m)
{
	CUresult rc = module_get(m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (m->library)
		return CUDA_ERROR_INVALID_HANDLE;
	if (vsim_ctx_valid(m->ctx))
		vsim_ctx_drain(m->ctx);
	m->magic = VSIM_MAGIC_DEAD;
	for (uint32_t i = 0; i < m->own.nkernels; i++)
		m->funcs[i].magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(m);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule m,
					 const char *name)
{
	int i;
	CUresult rc = module_get(m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	i = vsim_image_find(m->image, name);
	if (i < 0)
		return CUDA_ERROR_NOT_FOUND;
	*hfunc = &m->funcs[i];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule m)
{
	CUresult rc = module_get(m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = m->image->nkernels;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *functions,
						unsigned int n, CUmodule m)
{
	CUresult rc = module_get(m);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!functions)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n && i < m->image->nkernels; i++)
		functions[i] = &m->funcs[i];
	return CUDA_SUCCESS;
}

/* The simulator does not read module globals. */
VSIM_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes,
					  CUmodule m, const char *name)
{
	CUresult rc = module_get(m);

	(void)dptr;
	(void)bytes;
	if (rc != CUDA_SUCCESS)
		return rc;
	return name ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
}

VSIM_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_EAGER_LOADING;
	return CUDA_SUCCESS;
}

/* ---- functions ------------------------------------------------------------ */

static CUresult library_module_in(struct CUlib_st *lib, struct CUctx_st *ctx,
				  struct CUmod_st **out);

static CUresult kernel_get(CUkernel k)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!k || k->magic != VSIM_MAGIC_KERNEL ||
	    k->library->magic != VSIM_MAGIC_LIBRARY)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

CUresult vsim_func_resolve_in(CUfunction f, struct CUctx_st *ctx,
			      struct CUfunc_st **out)
{
	struct CUkern_st *k = (struct CUkern_st *)(void *)f;
	struct CUmod_st *m;
	CUresult rc;

	if (!f || f->magic != VSIM_MAGIC_KERNEL)
		return vsim_func_resolve(f, out);
	rc = kernel_get(k);
	if (rc == CUDA_SUCCESS)
		rc = library_module_in(k->library, ctx, &m);
	if (rc == CUDA_SUCCESS)
		*out = &m->funcs[k->index];
	return rc;
}

CUresult vsim_func_resolve(CUfunction f, struct CUfunc_st **out)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (f->magic == VSIM_MAGIC_KERNEL)
		return cuKernelGetFunction(out, (CUkernel)(void *)f);
	if (f->magic != VSIM_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = f;
	return CUDA_SUCCESS;
}

static CUresult desc_attribute(int *pi, CUfunction_attribute attrib,
			       const struct vsim_kernel_desc *d,
			       const struct vsim_image *img, int max_dyn_shared)
{
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*pi = d->max_threads;
		break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
		*pi = d->shared_bytes;
		break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
		*pi = d->const_bytes;
		break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
		*pi = d->local_bytes;
		break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS:
		*pi = d->num_regs;
		break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
		*pi = img->ptx_version ? img->ptx_version : img->arch;
		break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
		*pi = img->arch;
		break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		*pi = max_dyn_shared;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		*pi = -1;
		break;
	default:
		if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		*pi = 0;
	}
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib,
					CUfunction hfunc)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	return desc_attribute(pi, attrib, f->desc, f->module->image,
			      f->attrs_max_dynamic_shared);
}

VSIM_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc,
					CUfunction_attribute attrib, int value)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
		if (value < 0 || value > 232448 - f->desc->shared_bytes)
			return CUDA_ERROR_INVALID_VALUE;
		f->attrs_max_dynamic_shared = value;
	} else if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	f->cache_config = (int)config;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = f->desc->name;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hmod)
		return CUDA_ERROR_INVALID_VALUE;
	*hmod = f->module;
	return CUDA_SUCCESS;
}

static CUresult param_info(const struct vsim_kernel_desc *d, size_t index,
			   size_t *offset, size_t *size)
{
	if (index >= d->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = d->params[index].offset;
	if (size)
		*size = d->params[index].size;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction hfunc, size_t index,
					size_t *offset, size_t *size)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	return rc != CUDA_SUCCESS ? rc : param_info(f->desc, index, offset, size);
}

VSIM_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state,
				    CUfunction hfunc)
{
	struct CUfunc_st *f;
	CUresult rc = vsim_func_resolve(hfunc, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuFuncLoad(CUfunction hfunc)
{
	struct CUfunc_st *f;

	return vsim_func_resolve(hfunc, &f);
}

/* ---- libraries and kernels ------------------------------------------------ */

static CUresult library_from(CUlibrary *out, const void *code, size_t size)
{
	struct CUlib_st *lib;
	char err[256];
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !code)
		return CUDA_ERROR_INVALID_VALUE;
	lib = calloc(1, sizeof(*lib));
	if (!lib)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = vsim_image_parse(code, size, DEVICE_ARCH, &lib->image, err,
			      sizeof(err));
	if (rc != CUDA_SUCCESS) {
		vsim_log("cannot load library: %s", err);
		free(lib);
		return rc;
	}
	lib->kernels = calloc(lib->image.nkernels ? lib->image.nkernels : 1,
			      sizeof(*lib->kernels));
	if (!lib->kernels) {
		vsim_image_free(&lib->image);
		free(lib);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < lib->image.nkernels; i++)
		lib->kernels[i] = (struct CUkern_st){ VSIM_MAGIC_KERNEL, lib, i };
	pthread_mutex_init(&lib->lock, NULL);
	lib->magic = VSIM_MAGIC_LIBRARY;
	*out = lib;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
				       CUjit_option *jitOptions,
				       void **jitOptionsValues,
				       unsigned int numJitOptions,
				       CUlibraryOption *libraryOptions,
				       void **libraryOptionValues,
				       unsigned int numLibraryOptions)
{
	(void)jitOptions;
	(void)jitOptionsValues;
	(void)numJitOptions;
	(void)libraryOptions;
	(void)libraryOptionValues;
	(void)numLibraryOptions;
	return library_from(library, code, 0);
}

VSIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library,
					   const char *fileName,
					   CUjit_option *jitOptions,
					   void **jitOptionsValues,
					   unsigned int numJitOptions,
					   CUlibraryOption *libraryOptions,
					   void **libraryOptionValues,
					   unsigned int numLibraryOptions)
{
	void *data;
	size_t size;
	CUresult rc = vsim_check_init();

	(void)jitOptions;
	(void)jitOptionsValues;
	(void)numJitOptions;
	(void)libraryOptions;
	(void)libraryOptionValues;
	(void)numLibraryOptions;
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!library || !fileName)
		return CUDA_ERROR_INVALID_VALUE;
	rc = read_file(fileName, &data, &size);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = library_from(library, data, size);
	free(data);
	return rc;
}

static CUresult library_get(CUlibrary lib)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!lib || lib->magic != VSIM_MAGIC_LIBRARY)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
	CUresult rc = library_get(lib);

	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&lib->lock);
	for (int i = 0; i < VSIM_LIB_CTXS; i++) {
		struct CUmod_st *m = lib->modules[i];
		if (!m)
			continue;
		if (vsim_ctx_valid(m->ctx) && m->ctx->id == lib->module_ctx_id[i])
			vsim_ctx_drain(m->ctx);
		m->magic = VSIM_MAGIC_DEAD;
		for (uint32_t k = 0; k < lib->image.nkernels; k++)
			m->funcs[k].magic = VSIM_MAGIC_DEAD;
	}
	lib->magic = VSIM_MAGIC_DEAD;
	for (uint32_t k = 0; k < lib->image.nkernels; k++)
		lib->kernels[k].magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(lib);
	pthread_mutex_unlock(&lib->lock);
	return CUDA_SUCCESS;
}

/* The library's module in ctx, made on first use. */
static CUresult library_module_in(struct CUlib_st *lib, struct CUctx_st *ctx,
				  struct CUmod_st **out)
{
	int slot = -1;
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&lib->lock);
	for (int i = 0; i < VSIM_LIB_CTXS; i++) {
		struct CUmod_st *m = lib->modules[i];
		if (m && m->ctx == ctx && lib->module_ctx_id[i] == ctx->id) {
			*out = m;
			goto out;
		}
		if (slot < 0 && (!m || !vsim_ctx_valid(m->ctx) ||
				 m->ctx->id != lib->module_ctx_id[i]))
			slot = i;
	}
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (slot < 0 || !(*out = module_new(ctx)))
		goto out;
	(*out)->image = &lib->image;
	(*out)->library = lib;
	rc = bind_funcs(*out);
	if (rc != CUDA_SUCCESS) {
		free(*out);
		goto out;
	}
	lib->modules[slot] = *out;
	lib->module_ctx_id[slot] = ctx->id;
out:
	pthread_mutex_unlock(&lib->lock);
	return rc;
}

/* The library's module in the current context. */
static CUresult library_module(struct CUlib_st *lib, struct CUmod_st **out)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	return rc != CUDA_SUCCESS ? rc : library_module_in(lib, ctx, out);
}

VSIM_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary lib)
{
	CUresult rc = library_get(lib);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pMod)
		return CUDA_ERROR_INVALID_VALUE;
	return library_module(lib, pMod);
}

VSIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary lib,
					const char *name)
{
	int i;
	CUresult rc = library_get(lib);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	i = vsim_image_find(&lib->image, name);
	if (i < 0)
		return CUDA_ERROR_NOT_FOUND;
	*pKernel = &lib->kernels[i];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	CUresult rc = library_get(lib);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = lib->image.nkernels;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels,
					       unsigned int n, CUlibrary lib)
{
	CUresult rc = library_get(lib);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!kernels)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n && i < lib->image.nkernels; i++)
		kernels[i] = &lib->kernels[i];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel k)
{
	struct CUmod_st *m;
	CUresult rc = kernel_get(k);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = library_module(k->library, &m);
	if (rc == CUDA_SUCCESS)
		*pFunc = &m->funcs[k->index];
	return rc;
}

VSIM_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel k)
{
	CUresult rc = kernel_get(k);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pLib)
		return CUDA_ERROR_INVALID_VALUE;
	*pLib = k->library;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuKernelGetName(const char **name, CUkernel k)
{
	CUresult rc = kernel_get(k);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = k->library->image.kernels[k->index].name;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel k, size_t index,
					  size_t *offset, size_t *size)
{
	CUresult rc = kernel_get(k);

	if (rc != CUDA_SUCCESS)
		return rc;
	return param_info(&k->library->image.kernels[k->index], index, offset,
			  size);
}

VSIM_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib,
					  CUkernel k, CUdevice dev)
{
	const struct vsim_kernel_desc *d;
	CUresult rc = kernel_get(k);

	if (rc == CUDA_SUCCESS)
		rc = vsim_check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	d = &k->library->image.kernels[k->index];
	return desc_attribute(pi, attrib, d, &k->library->image,
			      d->max_dynamic_shared);
}

VSIM_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val,
					  CUkernel k, CUdevice dev)
{
	CUresult rc = kernel_get(k);

	(void)val;
	if (rc == CUDA_SUCCESS)
		rc = vsim_check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config,
					    CUdevice dev)
{
	CUresult rc = kernel_get(k);

	(void)config;
	return rc != CUDA_SUCCESS ? rc : vsim_check_device(dev);
}
