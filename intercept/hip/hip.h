/* hip.h - libvgpu-hip.so's internal header: the HIP runtime's real
 * functions, each HIP device's place in the ledger, and the accounting
 * calls of the hooks, in HIP's errors. Prototypes grouped by the file that
 * defines them.
 */
#ifndef VGPU_HIP_H
#define VGPU_HIP_H

#include <hip/hip_runtime_api.h>

#include "account.h"
#include "front.h"
#include "log.h"
#include "measure.h"
#include "options.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- real.c: the runtime's functions, options, the process's life ------- */

/* The real functions of hooks.def, found after this library
 * (dlvsym(RTLD_NEXT, name, node)), NULL where the runtime lacks one. */
struct vgpu_hip_real {
#define VGPU_HIP_HOOK(node, name, params) hipError_t (*name) params;
#define VGPU_HIP_HOOK_CXX(node, name, symbol, params) VGPU_HIP_HOOK(, name, params)
#define VGPU_HIP_CALL VGPU_HIP_HOOK
#include "hooks.def"
#undef VGPU_HIP_HOOK
#undef VGPU_HIP_HOOK_CXX
#undef VGPU_HIP_CALL
};
extern struct vgpu_hip_real vgpu__hip;

/* The hooks of C++ names (hip_ext.h declares them for C++ alone), each
 * exported under its runtime's symbol (the others are the header's). */
#define VGPU_HIP_HOOK(node, name, params)
#define VGPU_HIP_HOOK_CXX(node, name, symbol, params) \
	__attribute__((visibility("default"))) hipError_t name params \
		__asm__(#symbol);
#define VGPU_HIP_CALL VGPU_HIP_HOOK
#include "hooks.def"
#undef VGPU_HIP_HOOK
#undef VGPU_HIP_HOOK_CXX
#undef VGPU_HIP_CALL

/* Loads the options (once: reports bad ones, hands the core its
 * primitives, arms the fork handler) and the real functions. */
void vgpu__hip_start(void);
const struct vgpu_options *vgpu__hip_options(void);
/* A bad option refuses the GPU (VGPU_ON_ERROR=refuse): no device is
 * handed out, allocations answer hipErrorInvalidDevice. */
bool vgpu__hip_refused(void);
/* The calling thread's exit settles its measured launches (idempotent). */
void vgpu__hip_watch_thread(void);

/* ---- devices.c ------------------------------------------------------------ */

struct vgpu_hip_dev {
	union {
		struct vgpu_device core;
		struct {
			VGPU_DEVICE_FIELDS
		};
	};
};

/* The ledger's key of HIP device d ("GPU-" and the UUID, else "PCI-" and
 * the bus id) through these runtime functions (either may be NULL);
 * false if neither answers. */
bool vgpu__hip_device_key(hipError_t (*uuid_of)(hipUUID *, hipDevice_t),
			  hipError_t (*bus_of)(char *, int, int), int d,
			  char *key, size_t len);
/* The device's state, joined to its ledger on first use; NULL if d is
 * not a device or the runtime cannot say what it is. */
struct vgpu_hip_dev *vgpu__hip_dev_attach(int d);
/* The calling thread's current device (hipGetDevice), attached. */
struct vgpu_hip_dev *vgpu__hip_dev_current(void);
/* An attached, ready device or NULL; never attaches. */
struct vgpu_hip_dev *vgpu__hip_dev_peek(int d);
void vgpu__hip_dev_leave_all(void);
void vgpu__hip_dev_fork_child(void);
/* Each attached device's ledger polled and its terms watched: at the
 * synchronisation hooks. */
void vgpu__hip_dev_poll(void);

/* Charges bytes of kind to dv's tenant (vgpu_account_reserve):
 * hipSuccess; hipErrorOutOfMemory past the slice or when the tenant's
 * lock was not had in time (logged); hipErrorInvalidDevice for a refused
 * device. A device with no slot (limits off) is not accounted. */
hipError_t vgpu__hip_charge(struct vgpu_hip_dev *dv, int kind,
			    uint64_t bytes);
/* Gives back a refused reservation or a freed object's charge. */
void vgpu__hip_uncharge(struct vgpu_hip_dev *dv, int kind, uint64_t bytes);

/* ---- objects.c ------------------------------------------------------------ */

struct vgpu_tracked;
/* The end of a free of key (had: it was in table, as *t): the runtime's
 * answer r returned; freed, t's charge given back; refused, t kept. */
hipError_t vgpu__hip_freed(int table, uint64_t key, bool had,
			  const struct vgpu_tracked *t, hipError_t r);

/* ---- pools.c ------------------------------------------------------------- */

/* The runtime's side of the core's pools (vgpu/pool.h). */
extern const struct vgpu_pool_ops vgpu__hip_pool_ops;

/* ---- launch.c ------------------------------------------------------------- */

extern const struct vgpu_prim vgpu__hip_prim;
/* The calling thread's launches settled at its exit, or the process's. */
void vgpu__hip_launch_thread_exit(void);
void vgpu__hip_launch_process_exit(void);
void vgpu__hip_launch_fork_child(void);

#endif
