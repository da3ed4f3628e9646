/* overcommit.h - allocations past the slice spilled to host memory. */
#ifndef VGPU_OVERCOMMIT_H
#define VGPU_OVERCOMMIT_H

#include "devices.h"
#include "track.h"

/* An allocation of bytes that did not fit dv's slice (or the device), in
 * dv's overcommit mode: CUDA_SUCCESS with *dptr, or OOM (mode off, spill
 * budget exhausted, or the spill failed). */
CUresult vgpu__spill(struct vgpu_dev *dv, CUdeviceptr *dptr, size_t bytes);
/* The free of a spilled allocation t (tracked as VGPU_USAGE_SPILLED). */
CUresult vgpu__spill_free(CUdeviceptr dptr, const struct vgpu_tracked *t);
/* Room may have freed on dv: promote spilled ranges that now fit. */
void vgpu__promote(struct vgpu_dev *dv);
/* host mode: device memory in a movable range (CUDA_ERROR_NOT_SUPPORTED:
 * use a plain allocation; OOM: no room). */
CUresult vgpu__alloc_movable(struct vgpu_dev *dv, CUdeviceptr *dptr,
			     size_t bytes);
/* host mode: spills the least recently used resident ranges until bytes
 * fit the slice; whether they do. */
bool vgpu__make_room(struct vgpu_dev *dv, size_t bytes);
/* What vgpu__move_ranges does: every range of the device to the host
 * (suspend); the least recently used to the host until the tenant's usage
 * and `need` more bytes are within its limit (fit); the most recently used
 * spilled ranges back while they fit the slice (resume). */
enum vgpu_move { VGPU_MOVE_SUSPEND, VGPU_MOVE_FIT, VGPU_MOVE_RESUME };
/* dv's movable ranges moved as how says, each after its context (the one
 * it was made in, else the primary) is made current on this thread and
 * synchronised, between vgpu__moves_begin and _end (control.c): the hooks
 * of the process's other threads are held meanwhile. Any thread: the
 * control thread, an allocation making room, a free promoting, a
 * synchronisation fitting a lowered limit. The number moved, -1 when the
 * gate could not be had in VGPU_MOVE_WAIT_MS (nothing moved); *failed: the
 * bytes that could not be. */
int vgpu__move_ranges(struct vgpu_dev *dv, enum vgpu_move how,
			   size_t need, uint64_t *failed);
/* Whether one of dv's ranges on the host would fit its slice now. */
bool vgpu__host_range_fits(struct vgpu_dev *dv);
/* Bytes of ordinal's movable ranges on the device (or on the host). */
uint64_t vgpu__resident_movable(int ordinal, bool on_device);
/* A kernel argument p: the movable range holding it was used now. */
void vgpu__note_use(CUdeviceptr p);
extern unsigned vgpu__movable_count;
static inline bool vgpu__movable_any(void)
{
	return __atomic_load_n(&vgpu__movable_count, __ATOMIC_RELAXED) != 0;
}
/* Whether [p, p + n) meets a movable range (a VMM range the shim made,
 * for overcommit or VGPU_CONTROL), on the device or on the host: its
 * job's bytes only (job_bytes), or the whole range, rounding included. */
bool vgpu__movable_overlaps(CUdeviceptr p, size_t n, bool job_bytes);
void vgpu__overcommit_fork_child(void);

/* ---- ctxsync.c: contexts synchronised before a pass of moves ---- */

/* The most contexts a pass synchronises (and remembers as done). */
#define VGPU_SYNC_MAX 1024

/* The contexts a pass synchronised so far (the mover's; n = 0 to start). */
struct vgpu_synced {
	CUcontext ctx[VGPU_SYNC_MAX];
	int n;
};

/* Every context of the process (the devices' primary ones, those the job
 * made, green ones through their contexts) synchronised, each within 5 s
 * by the shim's syncer thread. False when the process has more than
 * VGPU_SYNC_MAX contexts or a context's work was not done in time (said
 * once): then nothing may move, an allocation spills instead. */
bool vgpu__sync_every_ctx(struct vgpu_synced *done);
/* Makes c current on this thread (pushed) and synchronises it, once per
 * pass; false (nothing pushed) when it cannot be made current or its work
 * was not done in time. */
bool vgpu__enter_ctx(CUcontext c, struct vgpu_synced *done);
void vgpu__ctx_sync_fork_child(void);
/* The job destroys ctx: the movable ranges allocated in it are released
 * (and their charge given back) before the driver destroys it. */
void vgpu__overcommit_ctx_gone(CUcontext ctx);
/* ctx goes but what was allocated in it stays (a green context's memory
 * is its device's): its ranges are no longer tied to it, so a context
 * given the same handle later does not take them with it. */
void vgpu__overcommit_ctx_orphan(CUcontext ctx);

#endif
