/* vmm.h - the references that keep a virtual-memory handle's physical
 * memory alive, counted so that its charge lasts exactly as long (vmm.c).
 */
#ifndef VGPU_VMM_H
#define VGPU_VMM_H

#include <stdbool.h>
#include <stdint.h>

/* Vendor-neutral: a handle's last reference gives its charge back through
 * the front end's vgpu__share_uncharge, or to the share record (share.h). */

/* A handle charged bytes of kind on device dev, with its one handle reference;
 * returns the entry's generation (0, with a warning, when the table is
 * full: the charge then stays until the process ends). A value still in
 * the table is stale (the driver freed it and handed it out again): its
 * charge is given back first. */
uint64_t vgpu__vmm_add(uint64_t handle, int dev, int kind, uint64_t bytes);
/* (dev -1: charged on no device yet, as a multicast object before its
 * devices are added.) */
/* A multicast object's (handle, gen) memory is now also on device dev,
 * whose charge of *bytes (the object's size) the caller has made: true
 * if the object took it (false: the object is gone or had the device
 * already; the caller gives the charge back). */
bool vgpu__vmm_add_device(uint64_t handle, uint64_t gen, int dev,
			  uint64_t *bytes);
/* Handle (handle, gen), charged as device VMM memory and not shared yet:
 * its device and size, and (share not 0) it is shared from now on, so its
 * last reference lets go through vgpu__share_gone(share) instead of
 * giving the charge back. False when not so (unknown, another generation,
 * multicast, or shared already). */
bool vgpu__vmm_share(uint64_t handle, uint64_t gen, unsigned share,
		     int *dev, uint64_t *bytes);
/* A handle's size and generation (*gen 0: unknown). */
uint64_t vgpu__vmm_bytes(uint64_t handle, uint64_t *gen);
/* One more reference to the handle mapped at va, or at a mapping that
 * contains va (a retain, a binding by address), taken before the driver
 * is asked; its generation (0: no mapping the shim counted is there),
 * *handle set. */
uint64_t vgpu__vmm_ref_mapped(uint64_t va, uint64_t *handle);
/* Multicast object mc bound (handle, gen) at [offset, offset + size), for
 * the device the memory is on: the binding holds that reference until
 * unbound or the object goes. */
void vgpu__vmm_bound(uint64_t mc, uint64_t offset, uint64_t size,
		     uint64_t handle, uint64_t gen);
/* The driver unbound device dev's bindings of mc in [offset, offset +
 * size): their references are given up. */
void vgpu__vmm_unbound(uint64_t mc, int dev, uint64_t offset, uint64_t size);
/* The generation of a charged handle, 0 if the shim does not know it:
 * read before the driver is asked to release it. */
uint64_t vgpu__vmm_gen(uint64_t handle);
/* One more reference to a charged handle (a retain, or a mapping about to
 * be made); returns its generation, 0 if the shim does not know it. */
uint64_t vgpu__vmm_ref(uint64_t handle);
/* One reference fewer of (handle, gen): a release, or a mapping the driver
 * refused. The last gives the charge back; another generation's (the
 * value was handed out again since) or gen 0 is ignored. */
void vgpu__vmm_unref(uint64_t handle, uint64_t gen);
/* The driver mapped [va, va + size) to a handle whose reference (gen) was
 * taken with vgpu__vmm_ref. */
void vgpu__vmm_mapped(uint64_t va, uint64_t size, uint64_t handle,
		      uint64_t gen);
/* Before the driver unmaps [va, va + size): its mappings are marked with
 * the ticket returned. After: unmapped, the marked ones (by this unmap or
 * one that began before it: the driver unmapped them all) give up their
 * references; refused, this unmap's marks are taken off. */
uint64_t vgpu__vmm_unmap_begin(uint64_t va, uint64_t size);
void vgpu__vmm_unmap_end(uint64_t va, uint64_t size, uint64_t ticket,
			 bool unmapped);
/* Charged handles alive (for tests). */
uint64_t vgpu__vmm_count(void);
/* In a forked child: the parent's handles are forgotten. */
void vgpu__vmm_fork_child(void);

#endif
