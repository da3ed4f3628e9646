/* vmm.h - the references that keep a virtual-memory handle's physical
 * memory alive, counted so that its charge lasts exactly as long (vmm.c).
 */
#ifndef VGPU_VMM_H
#define VGPU_VMM_H

#include <stdbool.h>
#include <stdint.h>

struct vgpu_dev;

/* A handle charged bytes of kind on dv, with its one handle reference.
 * false (with a warning) when the table is full: the charge then stays
 * until the process ends. */
bool vgpu__vmm_add(uint64_t handle, struct vgpu_dev *dv, int kind,
		   uint64_t bytes);
/* One more reference to a charged handle (a retain, or a mapping about to
 * be made); false if the shim does not know the handle. */
bool vgpu__vmm_ref(uint64_t handle);
/* One reference fewer (a release, or a mapping the driver refused); the
 * last one gives the charge back. Unknown handles are ignored. */
void vgpu__vmm_unref(uint64_t handle);
/* The driver mapped [va, va + size) to a handle whose reference was taken
 * with vgpu__vmm_ref. */
void vgpu__vmm_mapped(uint64_t va, uint64_t size, uint64_t handle);
/* The driver unmapped [va, va + size): the mappings the shim counted in it
 * give up their references. */
void vgpu__vmm_unmapped(uint64_t va, uint64_t size);
/* Charged handles alive (for tests). */
uint64_t vgpu__vmm_count(void);
/* In a forked child: the parent's handles are forgotten. */
void vgpu__vmm_fork_child(void);

#endif
