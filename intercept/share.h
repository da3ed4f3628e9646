/* share.h - memory shared between processes (share.c): IPC handles and
 * VMM handles exported as file descriptors, charged once across processes
 * through the ledger's share records. Vendor-neutral: each front end's
 * hooks call it (intercept/ipc.c for CUDA, intercept/hip/ipc.c for HIP)
 * and define the three functions of its side.
 */
#ifndef VGPU_SHARE_H
#define VGPU_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vgpu_slot;
struct vgpu_tracked;

/* ---- the front end's side (one definition in each library) ---- */

/* Device dev's slot in its ledger; NULL when it is not accounted. */
struct vgpu_slot *vgpu__share_slot(int dev);
/* Charges bytes of kind to device dev's tenant: 0, or the front end's own
 * error (a CUresult, a hipError_t; a timeout logged). */
int vgpu__share_charge(int dev, int kind, uint64_t bytes);
/* Gives back bytes of kind charged on device dev. */
void vgpu__share_uncharge(int dev, int kind, uint64_t bytes);

/* ---- share.c ---- */

/* The last reference this process had to shared memory (a free, a close,
 * a release, a context destroyed) is gone: `share` is the number kept in
 * the object's tracked entry (VGPU_TRACK_PTR's aux, or the VMM handle's).
 * Lets go of the ledger's record, or gives back a charge of its own. */
void vgpu__share_gone(unsigned share);
/* In a forked child: the parent's entries are forgotten. */
void vgpu__share_fork_child(void);

/* An IPC handle (len bytes, the same in every process) was made for the
 * allocation whose tracked entry is *t (taken out of the pointer table by
 * the caller, who keeps it again after): a plain buffer the shim charged
 * is recorded once in the ledger, and *t then names the entry (aux) and
 * holds only what the process pays as its own (bytes). */
void vgpu__share_ipc_exported(const void *handle, size_t len,
			      struct vgpu_tracked *t);
/* This process opened the IPC handle at pointer p, on device dev, an
 * allocation of bytes: held for free when the ledger records it, else
 * charged; the pointer is tracked, so that its close (or a free) lets go.
 * 0, or the front end's error when the charge was refused (logged with
 * what, the hook's name; the caller closes the handle again). */
int vgpu__share_ipc_opened(int dev, uint64_t p, const void *handle,
			   size_t len, uint64_t bytes, const char *what);
/* The runtime closed IPC pointer p: its last close lets go. */
void vgpu__share_ipc_closed(uint64_t p);
/* VMM handle `handle` was exported as descriptor fd: recorded once when
 * the shim charged it (vmm.c) and fd is a regular file. */
void vgpu__share_vmm_exported(uint64_t handle, int fd);
/* Descriptor fd was imported as VMM handle `handle`, memory on device
 * dev: held for free when recorded, else charged, for as long as the
 * handle's references live (vmm.c). 0, or the front end's error when the
 * charge was refused (logged with what; the caller releases the handle). */
int vgpu__share_vmm_imported(int dev, uint64_t handle, int fd,
			     const char *what);

#endif
