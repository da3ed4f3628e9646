/* devices.h - each CUDA device's place in the ledger, and the accounting
 * calls the hooks make. */
#ifndef VGPU_DEVICES_H
#define VGPU_DEVICES_H

#include "shim.h"
#include "account.h"
#include "control.h"
#include "front.h"
#include "ledger.h"
#include "measure.h"
#include "pool.h"
#include "throttle.h"

#include <time.h>

/* The core's fields of a device (front.h), read as dv->slot here and
 * handed to the core as &dv->core; then CUDA's own. */
struct vgpu_dev {
	union {
		struct vgpu_device core;
		struct {
			VGPU_DEVICE_FIELDS
		};
	};
	int primary_refs;	/* primary context retains, atomic */
	int overcommit;		/* enum vgpu_overcommit, AUTO resolved */
	bool control;		/* VGPU_CONTROL: may be suspended (control.c) */
	bool fit_due;		/* over a lowered limit: move to the host at
				 * the next synchronisation (atomic) */
	bool spatial;		/* VGPU_COMPUTE_MODE=spatial asked for */
	CUcontext primary;	/* the primary context, once retained */
	int spatial_state;	/* 0 not tried, 1 built or building, 2 failed */
	CUcontext spatial_ctx;	/* the primary context on a green context */
};

/* spatial.c: the primary context on a green context of dv's share, built
 * on first use; NULL when not asked for or not possible (then the time
 * throttle applies). */
CUcontext vgpu__spatial_ctx(struct vgpu_dev *dv);

static inline uint64_t vgpu__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC at the last tick (a few ms behind, never ahead): the
 * vDSO reads it without the time source. */
static inline uint64_t vgpu__mono_coarse_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return vgpu__mono_ns();
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vgpu__launch_fork_child(void);
/* The exiting thread's launches charged and its events given back. */
void vgpu__launch_thread_exit(void);
/* At the process's exit, with no driver call (the driver may be gone):
 * the exiting thread's launches charged at least since they were issued. */
void vgpu__launch_process_exit(void);
/* Set once the process leaves its ledgers at exit (their memory is gone):
 * the launch state's clean-up does nothing from then on. */
extern bool vgpu__leaving;

/* Called before a context that may hold capped launch state is destroyed,
 * reset or released for the last time (NULL: a context not known): the
 * launch state threads made in it before then is dropped without touching
 * its handles (vgpu/measure.c); other contexts' state stays. */
static inline void vgpu__ctx_teardown(CUcontext ctx)
{
	vgpu_measure_ctx_teardown((struct vgpu_prim_ctx *)ctx);
}

/* The device's state, attached on first use; NULL if d is not a device.
 * A FAILED device was refused: its hooks answer CUDA_ERROR_INVALID_DEVICE. */
struct vgpu_dev *vgpu__dev_attach(CUdevice d);
/* An attached, ready device or NULL; never attaches. */
struct vgpu_dev *vgpu__dev_peek(int ordinal);
struct vgpu_dev *vgpu__dev_by_uuid(const char *uuid);
void vgpu__dev_fork_child(void);
void vgpu__dev_leave_all(void);
/* Each attached device's ledger polled (vgpu_ledger_poll): from the
 * synchronisation hooks, so a job that has stopped allocating still
 * follows its ledger file when it is deleted or replaced. */
void vgpu__dev_poll_ledgers(void);
/* Every attached device's watch (vgpu__dev_watch_terms): from the uncapped
 * launch path every 256th launch of a thread, so a process that never
 * synchronises, allocates or frees still sees a share set by vgpu-ctl and
 * an opportunistic neighbour. */
void vgpu__dev_watch_all(void);
/* Whether an attached device has a compute share that caps (not only
 * announcing to an opportunistic tenant). */
bool vgpu__dev_any_capped(void);

/* The tenant's terms were read again (vgpu-ctl): with host overcommit and
 * the limit now below use, ranges move out at the next synchronisation. */
void vgpu__dev_fit_check(struct vgpu_dev *dv);

/* The core's watch (vgpu_device_watch) and CUDA's part: at
 * synchronisations, allocations and frees. */
static inline void vgpu__dev_watch_terms(struct vgpu_dev *dv)
{
	if (__builtin_expect(vgpu_device_watch(&dv->core), 0))
		vgpu__dev_fit_check(dv);
}

/* Allocations become movable ranges (overcommit.c): with host overcommit,
 * or to be suspended to the host (VGPU_CONTROL). */
static inline bool vgpu__dev_movable(const struct vgpu_dev *dv)
{
	return dv->overcommit == VGPU_OVERCOMMIT_HOST || dv->control;
}

/* Whether dv was refused (or left at exit, by another thread). */
static inline bool vgpu__dev_failed(const struct vgpu_dev *dv)
{
	return dv && __atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) ==
		     VGPU_DEV_FAILED;
}

/* The current context's device, attached; NULL when there is no current
 * context (the hook then leaves everything to the driver). */
static inline struct vgpu_dev *vgpu__dev_current(void)
{
	CUdevice d;

	if (!vgpu__real.cuCtxGetDevice ||
	    vgpu__real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
		return NULL;
	return vgpu__dev_attach(d);
}

/* pools.c: the driver's side of the core's pools (vgpu/pool.h). */
extern const struct vgpu_pool_ops vgpu__pool_ops;
/* prim.c: the core's primitives over this driver. */
extern const struct vgpu_prim vgpu__prim;


/* The core's answer (VGPU_ACCOUNT_*) as the driver's error. */
static inline CUresult vgpu__account_error(struct vgpu_dev *dv, int rc)
{
	switch (rc) {
	case VGPU_ACCOUNT_OK:
		return CUDA_SUCCESS;
	case VGPU_ACCOUNT_TIMEOUT:
		vgpu_device_timeout(&dv->core, "CUDA_ERROR_TIMEOUT");
		return CUDA_ERROR_TIMEOUT;
	case VGPU_ACCOUNT_OVER:
		return CUDA_ERROR_OUT_OF_MEMORY;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The protocol's first step for the hooks (vgpu_account_reserve): charges
 * bytes of kind to dv's tenant: CUDA_SUCCESS; CUDA_ERROR_OUT_OF_MEMORY past
 * the limit; CUDA_ERROR_TIMEOUT when the tenant's lock was held past its
 * bound (a stopped or stuck process of the tenant: the slice may well have
 * room); CUDA_ERROR_INVALID_DEVICE for a refused device. A device with no
 * slot (limits off) is not accounted: CUDA_SUCCESS. */
static inline CUresult vgpu__charge(struct vgpu_dev *dv, int kind,
				    uint64_t bytes)
{
	int rc;

	/* Atomic: the exit's leave (another thread) sets it FAILED. */
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) != VGPU_DEV_READY)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!dv->slot)
		return CUDA_SUCCESS;
	if (__builtin_expect(__atomic_load_n(&vgpu__gate_on,
					     __ATOMIC_RELAXED), 0) &&
	    VGPU_USAGE_IS_DEVICE(kind))
		vgpu__control_wait();	/* suspended: after the resume */
	vgpu__dev_watch_terms(dv);
	rc = vgpu_account_reserve(dv->slot, dv->ordinal, kind, bytes);
	if (__builtin_expect(rc == VGPU_ACCOUNT_OK, 1))
		return CUDA_SUCCESS;
	return vgpu__account_error(dv, rc);
}

/* The protocol's last step: a refused reservation, or a freed object's
 * charge, given back (vgpu_account_rollback). */
static inline void vgpu__uncharge(struct vgpu_dev *dv, int kind,
				  uint64_t bytes)
{
	if (dv && dv->slot) {
		vgpu__dev_watch_terms(dv);
		vgpu_account_rollback(dv->slot, kind, bytes);
	}
}

#endif
