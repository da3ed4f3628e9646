/* hip_sim.h - the simulated HIP runtime's internals (sim/hip).
 *
 * libamdhip64.so.5 over the simulated libcuda.so.1: every HIP call is made
 * of driver calls in the current device's primary context, so a HIP
 * process and a CUDA process share one simulated device (its memory count,
 * its engine, its record). Prototypes are grouped by the file that
 * defines them.
 */
#ifndef VGPU_SIM_HIP_H
#define VGPU_SIM_HIP_H

#include <cuda.h>
#include <hip/hip_runtime_api.h>

#include "codeobj.h"

#define VHIP_EXPORT __attribute__((visibility("default")))
#define VHIP_MAX_DEVICES 16

/* The simulated driver's (sim/init.c): called before cuInit, so this
 * process sees the devices as the HIP runtime does. */
void vsim_hip_process(void);

/* ---- runtime.c: init, the current device, errors ------------------------- */

/* Every entry's first step: the driver initialised once, and the calling
 * thread's device's primary context current. hipSuccess or the error. */
hipError_t vhip_enter(void);
/* The calling thread's device (hipSetDevice's), and its primary context
 * (valid after vhip_enter). */
int vhip_device(void);
CUcontext vhip_context(void);
/* A driver result as HIP's error, recorded as the thread's last error
 * when it is one. */
hipError_t vhip_result(CUresult rc);
/* Records a HIP error as the thread's last and returns it. */
hipError_t vhip_error(hipError_t e);

/* ---- kernel.c: code objects, registration, launches ---------------------- */

/* The amdgcn architecture the simulated device reports, "gfx90a". */
extern const char vhip_arch[];

#endif
