/* test_next.c - another preloaded library that wraps dlopen and getenv
 * with dlsym(RTLD_NEXT) (next_preload.c), preloaded after the shim as
 * LD_PRELOAD="libvgpu.so libvgpu-test-next.so": its wrappers are still
 * called and still reach the real functions, before and after CUDA starts,
 * and the driver's names still open the shim.
 */
#include "shimtest.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
	simtest_clean_env();
	shimtest_env("t-next", "16MiB");
}

TestSuite(next, .init = setup, .fini = shimtest_cleanup);

static unsigned long counter(const char *name)
{
	unsigned long *c = dlsym(RTLD_DEFAULT, name);

	cr_assert_not_null(c, "%s: the second preload is not loaded", name);
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void check_next(void)
{
	unsigned long d = counter("vgpu_test_next_dlopens");
	unsigned long g = counter("vgpu_test_next_getenvs");
	void *m, *h;

	cr_assert_eq(setenv("VGPU_TEST_NEXT_PROBE", "here", 1), 0);
	cr_assert_str_eq(getenv("VGPU_TEST_NEXT_PROBE"), "here");
	cr_assert_gt(counter("vgpu_test_next_getenvs"), g);
	m = dlopen("libm.so.6", RTLD_NOW);
	cr_assert_not_null(m, "%s", dlerror());
	cr_assert_not_null(dlsym(m, "cos"));
	cr_assert_gt(counter("vgpu_test_next_dlopens"), d,
		     "dlopen skipped the second preload's wrapper");
	dlclose(m);
	h = dlopen("libcuda.so.1", RTLD_NOW);
	cr_assert_not_null(h);
	cr_assert_not_null(dlsym(h, "vgpu_shim_version"));
}

Test(next, rtld_next_still_works_for_another_preload)
{
	CUdeviceptr a, b;

	check_next();
	simtest_init_shared();
	CU_OK(cuMemAlloc(&a, 16 * MIB));
	CU_ASSERT(cuMemAlloc(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
	check_next();
	CU_OK(cuMemFree(a));
}
