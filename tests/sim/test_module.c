/* test_module.c - modules, functions, libraries and kernels: the workload
 * kernels' fatbin (embedded and as a file) and a user's own cubin.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#include "vgpu_kernels.h"

TestSuite(module, .init = simtest_clean_env, .fini = simtest_remove_state);

static const char *const workload[] = { "vgpu_spin", "vgpu_touch",
					"vgpu_saxpy" };

static void has_workload_kernels(CUmodule m)
{
	unsigned count = 0;
	CUfunction f;
	const char *name;

	CU_OK(cuModuleGetFunctionCount(&count, m));
	cr_assert_eq(count, 3);
	for (int i = 0; i < 3; i++) {
		CU_OK(cuModuleGetFunction(&f, m, workload[i]));
		cr_assert_not_null(f);
		CU_OK(cuFuncGetName(&name, f));
		cr_assert_str_eq(name, workload[i]);
	}
}

Test(module, load_embedded_fatbin)
{
	CUmodule m;
	CUfunction f, g;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	has_workload_kernels(m);
	/* The same name twice: the same function. */
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_touch"));
	CU_OK(cuModuleGetFunction(&g, m, "vgpu_touch"));
	cr_assert_eq(f, g);
	CU_OK(cuModuleUnload(m));
}

Test(module, load_fatbin_file)
{
	CUmodule m;

	simtest_init();
	CU_OK(cuModuleLoad(&m, SIMTEST_FATBIN_FILE));
	has_workload_kernels(m);
	CU_OK(cuModuleUnload(m));
}

Test(module, load_data_ex_and_fat_binary)
{
	CUmodule m;

	simtest_init();
	CU_OK(cuModuleLoadDataEx(&m, vgpu_kernels_fatbin, 0, NULL, NULL));
	has_workload_kernels(m);
	CU_OK(cuModuleLoadFatBinary(&m, vgpu_kernels_fatbin));
	has_workload_kernels(m);
}

Test(module, load_own_cubin)
{
	CUmodule m, owner = NULL;
	CUfunction f;
	unsigned count = 0;
	size_t off = 99, size = 99;
	int v = 0;

	simtest_init();
	CU_OK(cuModuleLoad(&m, SIMTEST_OWN_CUBIN));
	CU_OK(cuModuleGetFunctionCount(&count, m));
	cr_assert_eq(count, 1);
	CU_OK(cuModuleGetFunction(&f, m, "user_scale"));
	CU_OK(cuFuncGetModule(&owner, f));
	cr_assert_eq(owner, m);
	/* user_scale(float *p, float s, int n) */
	CU_OK(cuFuncGetParamInfo(f, 0, &off, &size));
	cr_assert_eq(off, 0);
	cr_assert_eq(size, 8);
	CU_OK(cuFuncGetParamInfo(f, 1, &off, &size));
	cr_assert_eq(off, 8);
	cr_assert_eq(size, 4);
	CU_OK(cuFuncGetParamInfo(f, 2, &off, &size));
	cr_assert_eq(off, 12);
	cr_assert_eq(size, 4);
	CU_ASSERT(cuFuncGetParamInfo(f, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
	/* It was built for sm_80. */
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f));
	cr_assert_eq(v, 80);
	CU_ASSERT(cuModuleGetFunction(&f, m, "vgpu_saxpy"), CUDA_ERROR_NOT_FOUND);
}

Test(module, get_function_not_found)
{
	CUmodule m;
	CUfunction f;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_ASSERT(cuModuleGetFunction(&f, m, "no_such_kernel"),
		  CUDA_ERROR_NOT_FOUND);
	CU_ASSERT(cuModuleGetFunction(&f, m, ""), CUDA_ERROR_NOT_FOUND);
	CU_ASSERT(cuModuleGetFunction(&f, m, "vgpu_spin_"), CUDA_ERROR_NOT_FOUND);
	CU_ASSERT(cuModuleGetFunction(&f, m, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuModuleGetFunction(NULL, m, "vgpu_spin"),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(module, load_errors)
{
	static const char garbage[] = "this is not a kernel image\n";
	CUmodule m;

	simtest_init();
	CU_ASSERT(cuModuleLoad(&m, "/nonexistent/vgpu-simtest.cubin"),
		  CUDA_ERROR_FILE_NOT_FOUND);
	CU_ASSERT(cuModuleLoadData(&m, garbage), CUDA_ERROR_INVALID_IMAGE);
	CU_ASSERT(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuModuleLoadData(NULL, vgpu_kernels_fatbin),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(module, needs_a_context)
{
	CUmodule m;

	simtest_env();
	CU_OK(cuInit(0));
	CU_ASSERT(cuModuleLoadData(&m, vgpu_kernels_fatbin),
		  CUDA_ERROR_INVALID_CONTEXT);
}

static void param_is(CUfunction f, size_t index, size_t off, size_t size)
{
	size_t o = 999, s = 999;

	CU_OK(cuFuncGetParamInfo(f, index, &o, &s));
	cr_assert_eq(o, off, "parameter %zu at %zu, want %zu", index, o, off);
	cr_assert_eq(s, size, "parameter %zu of %zu bytes, want %zu", index, s,
		     size);
}

Test(module, param_info_touch)
{
	CUmodule m;
	CUfunction f;
	size_t off = 0;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_touch"));
	param_is(f, 0, 0, 8);
	param_is(f, 1, 8, 8);
	param_is(f, 2, 16, 4);
	param_is(f, 3, 20, 4);
	param_is(f, 4, 24, 8);
	CU_ASSERT(cuFuncGetParamInfo(f, 5, &off, NULL), CUDA_ERROR_INVALID_VALUE);
	/* The size is optional. */
	CU_OK(cuFuncGetParamInfo(f, 3, &off, NULL));
	cr_assert_eq(off, 20);
}

Test(module, param_info_saxpy_and_spin)
{
	CUmodule m;
	CUfunction f;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_saxpy"));
	param_is(f, 0, 0, 8);
	param_is(f, 1, 8, 4);
	param_is(f, 2, 16, 8);
	param_is(f, 3, 24, 8);
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_spin"));
	param_is(f, 0, 0, 8);
	param_is(f, 1, 8, 8);
}

Test(module, function_attributes)
{
	CUmodule m;
	CUfunction f;
	int v;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_saxpy"));
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	cr_assert_gt(v, 0);
	cr_assert_leq(v, 1024);
	/* The device is sm_90: the fatbin's sm_90 cubin is the one used. */
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f));
	cr_assert_eq(v, 90);
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f));
	cr_assert_gt(v, 0);
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
	cr_assert_geq(v, 0);
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
	cr_assert_eq(v, 0, "saxpy uses no static shared memory");
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
				 f));
	cr_assert_geq(v, 0);
	CU_ASSERT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, f),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuFuncGetAttribute(NULL, CU_FUNC_ATTRIBUTE_NUM_REGS, f),
		  CUDA_ERROR_INVALID_VALUE);
	/* The dynamic shared memory limit can be raised, within the device's. */
	CU_OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
				 65536));
	CU_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
				 f));
	cr_assert_eq(v, 65536);
	CU_ASSERT(cuFuncSetAttribute(f,
				     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
				     1 << 30), CUDA_ERROR_INVALID_VALUE);
}

Test(module, unloaded_module_refused)
{
	CUmodule m;
	CUfunction f;
	int v;

	simtest_init();
	CU_OK(cuModuleLoadData(&m, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, m, "vgpu_saxpy"));
	CU_OK(cuModuleUnload(m));
	CU_ASSERT(cuModuleGetFunction(&f, m, "vgpu_saxpy"),
		  CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f),
		  CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
}

Test(module, library_kernels)
{
	CUlibrary lib, owner = NULL;
	CUkernel k, k2;
	CUfunction f, f2;
	CUmodule m;
	unsigned count = 0;
	const char *name;
	size_t off, size;

	simtest_init();
	CU_OK(cuLibraryLoadData(&lib, vgpu_kernels_fatbin, NULL, NULL, 0, NULL,
				NULL, 0));
	CU_OK(cuLibraryGetKernelCount(&count, lib));
	cr_assert_eq(count, 3);
	CU_OK(cuLibraryGetKernel(&k, lib, "vgpu_touch"));
	CU_OK(cuLibraryGetKernel(&k2, lib, "vgpu_touch"));
	cr_assert_eq(k, k2);
	CU_OK(cuKernelGetName(&name, k));
	cr_assert_str_eq(name, "vgpu_touch");
	CU_OK(cuKernelGetLibrary(&owner, k));
	cr_assert_eq(owner, lib);
	CU_OK(cuKernelGetParamInfo(k, 4, &off, &size));
	cr_assert_eq(off, 24);
	cr_assert_eq(size, 8);
	CU_OK(cuKernelGetFunction(&f, k));
	CU_OK(cuKernelGetFunction(&f2, k));
	cr_assert_eq(f, f2, "one function per context");
	CU_OK(cuFuncGetName(&name, f));
	cr_assert_str_eq(name, "vgpu_touch");
	param_is(f, 2, 16, 4);
	/* The library's module in this context holds the function. */
	CU_OK(cuLibraryGetModule(&m, lib));
	CU_OK(cuModuleGetFunction(&f2, m, "vgpu_touch"));
	cr_assert_eq(f, f2);
	CU_ASSERT(cuLibraryGetKernel(&k, lib, "nope"), CUDA_ERROR_NOT_FOUND);
	CU_OK(cuLibraryUnload(lib));
	CU_ASSERT(cuLibraryGetKernel(&k, lib, "vgpu_touch"),
		  CUDA_ERROR_INVALID_HANDLE);
}

/* A library needs no context to load; each context gets its own function. */
Test(module, library_across_contexts)
{
	CUlibrary lib;
	CUkernel k;
	CUcontext a, b;
	CUfunction fa, fb;
	int n;

	simtest_env();
	CU_OK(cuInit(0));
	CU_OK(cuLibraryLoadFromFile(&lib, SIMTEST_OWN_CUBIN, NULL, NULL, 0, NULL,
				    NULL, 0));
	CU_OK(cuLibraryGetKernel(&k, lib, "user_scale"));
	CU_ASSERT(cuKernelGetFunction(&fa, k), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuKernelGetAttribute(&n, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k, 0));
	cr_assert_eq(n, 80);
	CU_OK(cuCtxCreate(&a, NULL, 0, 0));
	CU_OK(cuKernelGetFunction(&fa, k));
	CU_OK(cuCtxCreate(&b, NULL, 0, 0));
	CU_OK(cuKernelGetFunction(&fb, k));
	cr_assert_neq(fa, fb);
}

Test(module, loading_mode)
{
	CUmoduleLoadingMode mode = 0;

	simtest_init();
	CU_OK(cuModuleGetLoadingMode(&mode));
	cr_assert(mode == CU_MODULE_EAGER_LOADING ||
		  mode == CU_MODULE_LAZY_LOADING);
}
