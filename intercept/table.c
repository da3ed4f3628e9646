/* table.c - the cuGetProcAddress table and the real driver's typed table,
 * generated from hooks.def. */
#include "hooks.h"

struct vgpu_real vgpu__real;

#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) \
	{ #name, #symbol, version, per_thread, (void *)symbol, \
	  (void **)&vgpu__real.symbol },
const struct vgpu_hook_entry vgpu__hook_entries[] = {
#include "hooks.def"
};
#undef VGPU_HOOK

const size_t vgpu__hook_count =
	sizeof(vgpu__hook_entries) / sizeof(vgpu__hook_entries[0]);

#define VGPU_HOOK(name, version, symbol, per_thread, ret, params)
#define VGPU_CALL(field, symbol, ret, params) \
	{ #symbol, (void **)&vgpu__real.field },
const struct vgpu_call_entry vgpu__call_entries[] = {
#include "hooks.def"
};
#undef VGPU_CALL
#undef VGPU_HOOK

const size_t vgpu__call_count =
	sizeof(vgpu__call_entries) / sizeof(vgpu__call_entries[0]);
