/* test_procaddr.c - cuGetProcAddress: (name, version, flags) to the entry
 * point of that ABI; cuGetExportTable; error names and strings.
 */
#include "simtest.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <string.h>

TestSuite(procaddr, .init = simtest_clean_env, .fini = simtest_remove_state);

static void *sym(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);

	cr_assert_not_null(p, "dlsym %s: %s", name, dlerror());
	return p;
}

static void *lookup(const char *name, int version, cuuint64_t flags,
		    CUdriverProcAddressQueryResult want_status)
{
	CUdriverProcAddressQueryResult st = 12345;
	void *fn = (void *)1;
	CUresult rc = cuGetProcAddress(name, &fn, version, flags, &st);

	cr_assert_eq(st, want_status, "%s@%d: status %d, want %d", name, version,
		     (int)st, (int)want_status);
	if (want_status == CU_GET_PROC_ADDRESS_SUCCESS) {
		CU_ASSERT(rc, CUDA_SUCCESS);
		cr_assert_not_null(fn);
	} else {
		CU_ASSERT(rc, CUDA_ERROR_NOT_FOUND);
		cr_assert_null(fn);
	}
	return fn;
}

static void *found(const char *name, int version, cuuint64_t flags)
{
	return lookup(name, version, flags, CU_GET_PROC_ADDRESS_SUCCESS);
}

/* The version picks the ABI: cuCtxGetDevice(CUdevice *) up to CUDA 12.9,
 * cuCtxGetDevice_v2(CUdevice *, CUcontext) from 13.0. */
Test(procaddr, version_selects_abi)
{
	void *v1, *v2;

	simtest_init();
	v1 = found("cuCtxGetDevice", 2000, CU_GET_PROC_ADDRESS_DEFAULT);
	v2 = found("cuCtxGetDevice", 13000, CU_GET_PROC_ADDRESS_DEFAULT);
	cr_assert_neq(v1, v2);
	cr_assert_eq(v1, sym("cuCtxGetDevice"));
	cr_assert_eq(v2, sym("cuCtxGetDevice_v2"));
	cr_assert_eq(found("cuCtxGetDevice", 12080, 0), v1);
}

/* "If the specified CUDA version is greater than the driver version, the
 * API will return CUDA_ERROR_INVALID_VALUE." The driver is 13.0. */
Test(procaddr, version_above_driver)
{
	void *fn = NULL;

	simtest_init();
	found("cuMemAlloc", 13000, 0);
	CU_ASSERT(cuGetProcAddress("cuMemAlloc", &fn, 13010, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGetProcAddress("cuCtxGetDevice", &fn, 99999, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
}

Test(procaddr, mem_alloc_v2)
{
	simtest_init();
	cr_assert_eq(found("cuMemAlloc", 3020, 0), sym("cuMemAlloc_v2"));
	cr_assert_eq(found("cuMemAlloc", 13000, 0), sym("cuMemAlloc_v2"));
	/* cuMemAlloc before 3.2 was the 32-bit ABI, which is not offered. */
	lookup("cuMemAlloc", 2000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	lookup("cuMemAlloc", 3010, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

Test(procaddr, per_thread_flag)
{
	const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;

	simtest_init();
	cr_assert_eq(ptds, 2);
	cr_assert_eq(found("cuLaunchKernel", 12000, ptds),
		     sym("cuLaunchKernel_ptsz"));
	cr_assert_eq(found("cuLaunchKernel", 12000, legacy),
		     sym("cuLaunchKernel"));
	cr_assert_eq(found("cuLaunchKernel", 12000, 0), sym("cuLaunchKernel"));
	cr_assert_eq(found("cuMemcpyHtoD", 12000, ptds),
		     sym("cuMemcpyHtoD_v2_ptds"));
	cr_assert_eq(found("cuStreamQuery", 12000, ptds),
		     sym("cuStreamQuery_ptsz"));
	/* No per-thread form: the legacy one. */
	cr_assert_eq(found("cuMemAlloc", 12000, ptds), sym("cuMemAlloc_v2"));
	/* The per-thread form came in 7.0: before, the legacy one. */
	cr_assert_eq(found("cuLaunchKernel", 6050, ptds), sym("cuLaunchKernel"));
}

Test(procaddr, unknown_symbol)
{
	simtest_init();
	lookup("cuNoSuchFunction", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	lookup("", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	/* Names are the base names, without the _v2 suffix. */
	lookup("cuMemAlloc_v2", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	lookup("cumemalloc", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

Test(procaddr, bad_arguments)
{
	void *fn;

	simtest_init();
	CU_ASSERT(cuGetProcAddress(NULL, &fn, 13000, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGetProcAddress("cuMemAlloc", NULL, 13000, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuGetProcAddress("cuMemAlloc", &fn, 13000, 4, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	/* The status is optional. */
	CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, NULL));
}

/* cudart looks entry points up before anything else, cuInit included. */
Test(procaddr, works_before_cuinit)
{
	PFN_cuInit_v2000 init = NULL;
	void *fn = NULL;

	CU_OK(cuGetProcAddress("cuInit", &fn, 2000, 0, NULL));
	init = (PFN_cuInit_v2000)fn;
	cr_assert_eq(fn, sym("cuInit"));
	simtest_env();
	CU_OK(init(0));
}

/* The CUDA 11.3 ABI, without the status argument. */
Test(procaddr, v1_entry_point)
{
	CUresult (*v1)(const char *, void **, int, cuuint64_t);
	void *fn = NULL;

	simtest_init();
	*(void **)&v1 = sym("cuGetProcAddress");
	CU_OK(v1("cuMemAlloc", &fn, 3020, 0));
	cr_assert_eq(fn, sym("cuMemAlloc_v2"));
	CU_ASSERT(v1("cuMemAlloc", &fn, 2000, 0), CUDA_ERROR_NOT_FOUND);
	cr_assert_eq(found("cuGetProcAddress", 11030, 0), sym("cuGetProcAddress"));
	cr_assert_eq(found("cuGetProcAddress", 12000, 0),
		     sym("cuGetProcAddress_v2"));
}

/* What it returns can be called. */
Test(procaddr, returned_functions_work)
{
	CUresult (*get_version)(int *);
	CUresult (*get_count)(int *);
	int v = 0, n = 0;

	simtest_init();
	*(void **)&get_version = found("cuDriverGetVersion", 2020, 0);
	*(void **)&get_count = found("cuDeviceGetCount", 2000, 0);
	CU_OK(get_version(&v));
	cr_assert_eq(v, 13000);
	CU_OK(get_count(&n));
	cr_assert_eq(n, 1);
}

Test(procaddr, export_table_not_supported)
{
	const void *table = (const void *)1;
	CUuuid id;

	memset(&id, 0x42, sizeof(id));
	CU_ASSERT(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
	cr_assert_null(table);
	simtest_init();
	CU_ASSERT(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
}

Test(procaddr, error_names_and_strings)
{
	static const struct { CUresult rc; const char *name; } known[] = {
		{ CUDA_SUCCESS, "CUDA_SUCCESS" },
		{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE" },
		{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY" },
		{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED" },
		{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT" },
		{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND" },
		{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY" },
		{ CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED" },
		{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN" },
	};
	const char *s;

	/* No cuInit needed. */
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		CU_OK(cuGetErrorName(known[i].rc, &s));
		cr_assert_str_eq(s, known[i].name);
		s = NULL;
		CU_OK(cuGetErrorString(known[i].rc, &s));
		cr_assert_not_null(s);
		cr_assert_gt(strlen(s), 0);
	}
	CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	cr_assert_not_null(strstr(s, "memory"), "%s", s);
	/* "If the error code is not recognized, CUDA_ERROR_INVALID_VALUE will
	 * be returned and *pStr will be set to the NULL address." */
	s = "x";
	CU_ASSERT(cuGetErrorName((CUresult)9999, &s), CUDA_ERROR_INVALID_VALUE);
	cr_assert_null(s);
	s = "x";
	CU_ASSERT(cuGetErrorString((CUresult)-1, &s), CUDA_ERROR_INVALID_VALUE);
	cr_assert_null(s);
	CU_ASSERT(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}
