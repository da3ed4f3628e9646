/* shim.h - the shim's process-wide state, shared by the files of intercept/.
 */
#ifndef VGPU_SHIM_H
#define VGPU_SHIM_H

#include "dlsym_real.h"
#include "hooks.h"
#include "log.h"
#include "options.h"

#include <stdbool.h>
#include <stdint.h>

/* The options, loaded from the environment on first use (and once more in
 * a forked child? no: a child inherits them, as it inherits its parent's
 * environment). Never NULL. */
const struct vgpu_options *vgpu__options(void);

/* Whether a bad option refuses the device (VGPU_ON_ERROR=refuse). Loads the
 * options and reports what was wrong, once. */
bool vgpu__refused(void);

/* Whether the refusal came only once the driver was up: a per-device
 * variable names a device the process does not have (cuInit checks). */
bool vgpu__refused_late(void);

/* Whether limits are off (VGPU_DISABLE / CUDA_DISABLE_CONTROL). */
bool vgpu__disabled(void);

/* The real dlopen, and a call of it that bypasses the shim's name mapping. */
extern void *(*vgpu__real_dlopen)(const char *, int);
void *vgpu__dlopen_real(const char *path, int flags);
/* The dlsym catch (nvml.c, trampolines.S): NULL to go on to the real dlsym
 * (dlsym_real.h), else the hook to return; it resolves vgpu__real_dlsym
 * first. It waits on no thread. */
void *vgpu__dlsym_name(void *handle, const char *name);
const char *vgpu__dlopen_name(const char *name);

/* ---- lifetime.c (the order of the process's life is written there) ---- */

/* The first driver call read the options: from now on a fork is followed
 * and the ledgers are left at exit. */
void vgpu__lifetime_started(void);
/* The calling thread's exit runs vgpu__launch_thread_exit (idempotent). */
void vgpu__lifetime_watch_thread(void);

#endif
