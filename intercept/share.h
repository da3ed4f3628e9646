/* share.h - memory shared between processes (share.c): CUDA IPC and VMM
 * handles exported as file descriptors, charged once across processes
 * through the ledger's share records.
 */
#ifndef VGPU_SHARE_H
#define VGPU_SHARE_H

#include <stdbool.h>
#include <stdint.h>

/* The last reference this process had to shared memory (a free, a close,
 * a release, a context destroyed) is gone: `share` is the number kept in
 * the object's tracked entry (VGPU_TRACK_PTR's aux, or the VMM handle's).
 * Lets go of the ledger's record, or gives back a charge of its own. */
void vgpu__share_gone(unsigned share);
/* In a forked child: the parent's entries are forgotten. */
void vgpu__share_fork_child(void);

#endif
