/* dlsym_real.c - the real dlsym (dlsym_real.h), shared by libvgpu.so and
 * libvgpu-hip.so.
 */
#include "dlsym_real.h"

#include <dlfcn.h>

void *(*vgpu__real_dlsym)(void *, const char *);

/* Found without a once: two threads that both find it unset both look it
 * up and store the same address. Uninstrumented: the sanitizers' start-up
 * calls dlsym. */
VGPU_UNINSTRUMENTED void *(*vgpu__dlsym_real(void))(void *, const char *)
{
	void *(*f)(void *, const char *) =
		__atomic_load_n(&vgpu__real_dlsym, __ATOMIC_ACQUIRE);
	void *g;

	if (f)
		return f;
	g = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!g)
		g = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	f = (void *(*)(void *, const char *))g;
	__atomic_store_n(&vgpu__real_dlsym, f, __ATOMIC_RELEASE);
	return f;
}

VGPU_UNINSTRUMENTED bool vgpu__name_starts(const char *name,
					   const char *prefix)
{
	if (!name)
		return false;
	for (; *prefix; name++, prefix++)
		if (*name != *prefix)
			return false;
	return true;
}
