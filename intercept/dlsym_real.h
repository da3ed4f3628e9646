/* dlsym_real.h - the real dlsym, for the dlsym catches of both front ends
 * (libvgpu.so's NVML catch, libvgpu-hip.so's ROCm SMI catch): each library
 * exports its own dlsym (an assembly trampoline), which asks its catch and
 * otherwise jumps to vgpu__real_dlsym. Compiled into each library.
 */
#ifndef VGPU_DLSYM_REAL_H
#define VGPU_DLSYM_REAL_H

#include <stdbool.h>

/* Code reached by the dlopen and dlsym catches before the program's
 * sanitizers are up: AddressSanitizer's and ThreadSanitizer's own start-up
 * look functions up with dlsym, which is ours, before their shadow memory
 * exists, so an instrumented load there faults (every sanitizer build
 * crashed at start-up). Such code reads memory only through plain loads
 * and calls no intercepted function. */
#define VGPU_UNINSTRUMENTED \
	__attribute__((no_sanitize_address, no_sanitize_thread, \
		       no_sanitize_undefined, noinline))

/* The real dlsym: set by vgpu__dlsym_real, which the catch calls first,
 * so that the trampoline's jump through it is never through NULL. */
extern void *(*vgpu__real_dlsym)(void *, const char *);
void *(*vgpu__dlsym_real(void))(void *, const char *);

/* Whether name starts with prefix, by plain loads (uninstrumented: the
 * catches test names before the sanitizers are up). */
bool vgpu__name_starts(const char *name, const char *prefix);

#endif
