/* next_preload.c - another preloaded library, as users stack them: it wraps
 * dlopen and getenv and reaches the real ones with dlsym(RTLD_NEXT). The
 * shim, preloaded before it, must leave RTLD_NEXT resolving as it would
 * without the shim (test_next.c counts the calls that came through). */
#include <dlfcn.h>
#include <stddef.h>

__attribute__((visibility("default"))) unsigned long vgpu_test_next_dlopens;
__attribute__((visibility("default"))) unsigned long vgpu_test_next_getenvs;

__attribute__((visibility("default")))
void *dlopen(const char *file, int mode)
{
	static void *(*next)(const char *, int);

	if (!next)
		next = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
	__atomic_add_fetch(&vgpu_test_next_dlopens, 1, __ATOMIC_RELAXED);
	return next ? next(file, mode) : NULL;
}

__attribute__((visibility("default")))
char *getenv(const char *name)
{
	static char *(*next)(const char *);

	if (!next)
		next = (char *(*)(const char *))dlsym(RTLD_NEXT, "getenv");
	__atomic_add_fetch(&vgpu_test_next_getenvs, 1, __ATOMIC_RELAXED);
	return next ? next(name) : NULL;
}
