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
#undef cuGraphInstantiate
#undef cuIpcOpenMemHandle
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuStreamBatchMemOp
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64

#define VGPU_EXPORT __attribute__((visibility("default")))

#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) \
	VGPU_EXPORT ret symbol params;
#include "hooks.def"
#undef VGPU_HOOK

/* The real driver's functions, one field per hooked symbol and one per
 * function the shim calls without hooking it (VGPU_CALL rows). Filled once
 * by vgpu__real_load(); a symbol the driver lacks is NULL. */
struct vgpu_real {
#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) \
	ret (*symbol) params;
#define VGPU_CALL(field, symbol, ret, params) ret (*field) params;
#include "hooks.def"
#undef VGPU_CALL
#undef VGPU_HOOK
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

/* One row of the called functions' table (VGPU_CALL rows). */
struct vgpu_call_entry {
	const char *symbol;
	void **real;		/* its field in vgpu__real */
};

extern const struct vgpu_call_entry vgpu__call_entries[];
extern const size_t vgpu__call_count;

/* Loads the real driver and fills vgpu__real and the forwarders' table.
 * Idempotent, thread-safe; returns false when no driver could be loaded. */
bool vgpu__real_load(void);

/* Every forwarder answers CUDA_ERROR_NOT_INITIALIZED from now on, as with
 * no driver (a refusal found once the driver was up). */
void vgpu__real_block(void);

/* Where the real driver was loaded from ("" if it was not). */
const char *vgpu__real_path(void);

/* The forwarders' table (forwarders.S), with names (fwd_names.c, sorted). */
extern void *vgpu__fwd_table[];
extern const char *const vgpu__fwd_names[];
extern const size_t vgpu__fwd_count;

/* The driver's error names, from cuda.h (errnames.c, gen_errnames.py). */
struct vgpu_errname {
	int value;
	const char *name;
};
extern const struct vgpu_errname vgpu__errnames[];
extern const size_t vgpu__errname_count;

/* With no driver to ask (none loaded, or refused): what cuGetProcAddress
 * hands out for symbol, which a driver answers before cuInit
 * (cuGetErrorName, cuGetErrorString, cuDriverGetVersion, answered here),
 * any other function of the driver answering CUDA_ERROR_NOT_INITIALIZED,
 * or NULL for a name the driver does not have. Hooks are not looked at
 * (procaddr.c hands those out itself). */
void *vgpu__no_driver_fn(const char *symbol);

#endif
