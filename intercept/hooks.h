/* hooks.h - the shim's view of the driver: the hooked entry points'
 * prototypes and the typed table of the real driver's functions, both
 * generated from hooks.def.
 */
#ifndef VGPU_HOOKS_H
#define VGPU_HOOKS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

/* cuda.h maps these to their newest ABI; hooks.def names each ABI itself. */
#undef cuGetProcAddress
#undef cuStreamSynchronize

#define VGPU_EXPORT __attribute__((visibility("default")))

#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) \
	VGPU_EXPORT ret symbol params;
#include "hooks.def"
#undef VGPU_HOOK

/* The real driver's functions, one field per hooked symbol. Filled once by
 * vgpu__real_load(); a symbol the driver lacks is NULL. */
struct vgpu_real {
#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) \
	ret (*symbol) params;
#include "hooks.def"
#undef VGPU_HOOK
	CUresult (*cuCtxGetDevice)(CUdevice *dev);
	CUresult (*cuDeviceGetUuid_v2)(CUuuid *uuid, CUdevice dev);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr *base, size_t *size,
					    CUdeviceptr dptr);
	CUresult (*cuMemPoolGetAttribute)(CUmemoryPool pool,
					  CUmemPool_attribute attr, void *value);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *pool,
					      CUdevice dev);
	CUresult (*cuDeviceGetMemPool)(CUmemoryPool *pool, CUdevice dev);
	CUresult (*cuStreamGetCtx)(CUstream hStream, CUcontext *pctx);
	CUresult (*cuCtxPushCurrent_v2)(CUcontext ctx);
	CUresult (*cuCtxPopCurrent_v2)(CUcontext *pctx);
	CUresult (*cuDeviceGetGraphMemAttribute)(CUdevice device,
						 CUgraphMem_attribute attr,
						 void *value);
	CUresult (*cuArrayGetDescriptor_v2)(CUDA_ARRAY_DESCRIPTOR *d,
					    CUarray a);
	CUresult (*cuCtxGetCurrent)(CUcontext *pctx);
	CUresult (*cuStreamCreate)(CUstream *s, unsigned int flags);
	CUresult (*cuStreamDestroy_v2)(CUstream s);
	CUresult (*cuDeviceGetAttribute)(int *pi, CUdevice_attribute a,
					 CUdevice dev);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *ptr, size_t size,
					size_t align, CUdeviceptr addr,
					unsigned long long flags);
	CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
			     CUmemGenericAllocationHandle h,
			     unsigned long long flags);
	CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size,
				   const CUmemAccessDesc *desc, size_t count);
	CUresult (*cuMemGetAllocationGranularity)(size_t *g,
			const CUmemAllocationProp *prop,
			CUmemAllocationGranularity_flags option);
	CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr dst, CUdeviceptr src,
				    size_t bytes);
	CUresult (*cuFuncGetParamInfo)(CUfunction f, size_t i, size_t *off,
				       size_t *size);
	CUresult (*cuMemAdvise_v2)(CUdeviceptr p, size_t count,
				   CUmem_advise advice, CUmemLocation loc);
	CUresult (*cuEventCreate)(CUevent *e, unsigned int flags);
	CUresult (*cuEventDestroy_v2)(CUevent e);
	CUresult (*cuEventRecord)(CUevent e, CUstream s);
	CUresult (*cuEventRecord_ptsz)(CUevent e, CUstream s);
	CUresult (*cuEventQuery)(CUevent e);
	CUresult (*cuEventElapsedTime_v2)(float *ms, CUevent a, CUevent b);
	CUresult (*cuEventElapsedTime_v1)(float *ms, CUevent a, CUevent b);
};

extern struct vgpu_real vgpu__real;

/* One row of the cuGetProcAddress table. */
struct vgpu_hook_entry {
	const char *name;
	const char *symbol;
	int version;
	int per_thread;
	void *hook;		/* the shim's function */
	void **real;		/* its field in vgpu__real */
};

extern const struct vgpu_hook_entry vgpu__hook_entries[];
extern const size_t vgpu__hook_count;

/* Loads the real driver and fills vgpu__real and the forwarders' table.
 * Idempotent, thread-safe; returns false when no driver could be loaded. */
bool vgpu__real_load(void);

/* Where the real driver was loaded from ("" if it was not). */
const char *vgpu__real_path(void);

/* The forwarders' table (forwarders.S), with names (fwd_names.c). */
extern void *vgpu__fwd_table[];
extern const char *const vgpu__fwd_names[];
extern const size_t vgpu__fwd_count;

#endif
