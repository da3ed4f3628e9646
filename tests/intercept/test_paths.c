/* test_paths.c - every way a program reaches the driver gets the shim:
 * dlopen of the driver's names and of its absolute path, dlsym of hooked
 * and forwarded names, cuGetProcAddress for itself; cuGetExportTable passes
 * through; no signal handler is installed; a process that never calls CUDA
 * never loads the driver.
 */
#include "shimtest.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENANT "t-paths"

static void setup(void)
{
	simtest_clean_env();
	shimtest_env(TENANT, "16MiB");
}

TestSuite(paths, .init = setup, .fini = shimtest_cleanup);

/* The file a code address lies in. */
static const char *file_of(const void *addr)
{
	Dl_info info;

	cr_assert(dladdr(addr, &info) && info.dli_fname, "dladdr %p", addr);
	return info.dli_fname;
}

static bool in_shim(const void *addr)
{
	const char *f = file_of(addr), *base = strrchr(f, '/');

	return strcmp(base ? base + 1 : f, "libvgpu.so") == 0;
}

static void *open_driver(const char *name)
{
	void *h = dlopen(name, RTLD_NOW);

	cr_assert_not_null(h, "dlopen(%s): %s", name, dlerror());
	cr_assert_not_null(dlsym(h, "vgpu_shim_version"),
			   "dlopen(%s) did not return the shim", name);
	return h;
}

Test(paths, dlopen_of_every_driver_name_returns_the_shim)
{
	void *h1 = open_driver("libcuda.so.1");
	void *h2 = open_driver("libcuda.so");
	void *h3 = open_driver(SHIMTEST_SIM_LIBCUDA);

	cr_assert_eq(h1, h2);
	cr_assert_eq(h1, h3);
	cr_assert(in_shim(dlsym(h3, "cuInit")));
	cr_assert_eq(dlsym(h1, "cuMemAlloc_v2"), (void *)cuMemAlloc_v2);
	/* Another library's dlopen is untouched. */
	void *m = dlopen("libm.so.6", RTLD_NOW);
	cr_assert_not_null(m);
	cr_assert_null(dlsym(m, "vgpu_shim_version"));
	dlclose(m);
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

Test(paths, dlsym_gives_hooks_and_working_forwarders)
{
	void *h = open_driver("libcuda.so.1");
	alloc_fn alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
	htod_fn htod = (htod_fn)dlsym(h, "cuMemcpyHtoD_v2");
	range_fn range = (range_fn)dlsym(h, "cuMemGetAddressRange_v2");
	range_fn real_range = NULL;
	CUdriverProcAddressQueryResult st;
	CUdeviceptr a, b, base = 0, rbase = 0;
	size_t size = 0, rsize = 0;
	char in[4096], out[4096];

	cr_assert(alloc && htod && range);
	cr_assert(in_shim((void *)htod), "cuMemcpyHtoD_v2 is a hook");
	cr_assert(in_shim((void *)range), "cuMemGetAddressRange_v2 is a "
		  "forwarder");
	simtest_init_shared();
	/* The hook: the slice holds. */
	CU_OK(alloc(&a, 16 * MIB));
	CU_ASSERT(alloc(&b, 4 * KIB), CUDA_ERROR_OUT_OF_MEMORY);
	/* The copy hook copies. */
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (char)(i * 7 + 1);
	CU_OK(htod(a, in, sizeof(in)));
	CU_OK(cuMemcpyDtoH(out, a, sizeof(out)));
	cr_assert_arr_eq(in, out, sizeof(in));
	/* An unhooked name is the driver's own function from
	 * cuGetProcAddress; through the forwarder it answers the same. */
	CU_OK(cuGetProcAddress("cuMemGetAddressRange", (void **)&real_range,
			       13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	cr_assert_not_null(real_range);
	cr_assert(!in_shim((void *)real_range));
	CU_OK(real_range(&rbase, &rsize, a + 100));
	CU_OK(range(&base, &size, a + 100));
	cr_expect_eq(base, rbase);
	cr_expect_eq(size, rsize);
	cr_expect_eq(base, a);
	CU_OK(cuMemFree(a));
}

Test(paths, get_proc_address_hands_out_the_shim_itself)
{
	void *h = open_driver("libcuda.so.1");
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;

	CU_OK(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, &st));
	cr_assert_eq(fn, dlsym(h, "cuGetProcAddress_v2"));
	cr_assert(in_shim(fn));
	CU_OK(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, &st));
	cr_assert_eq(fn, dlsym(h, "cuGetProcAddress"));
	cr_assert(in_shim(fn));
	CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, &st));
	cr_assert_eq(fn, (void *)cuMemAlloc_v2);
	/* Through the pointer handed out, the hook again. */
	simtest_init_shared();
	CUdeviceptr a, b;
	CU_OK(((alloc_fn)fn)(&a, 16 * MIB));
	CU_ASSERT(((alloc_fn)fn)(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemFree(a));
}

/* Before anything else, and after: the simulated driver's own answer. */
Test(paths, get_export_table_passes_through)
{
	const void *table = (const void *)1;
	CUuuid id;

	memset(&id, 0x5a, sizeof(id));
	CU_ASSERT(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
	simtest_init_shared();
	CU_ASSERT(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
}

/* ---- what the shim leaves alone --------------------------------------------- */

static void all_actions(struct sigaction *acts)
{
	for (int s = 1; s < NSIG; s++) {
		memset(&acts[s], 0, sizeof(acts[s]));
		sigaction(s, NULL, &acts[s]);
	}
}

Test(paths, no_signal_handler_installed)
{
	static struct sigaction before[NSIG], after[NSIG];
	CUdeviceptr a;
	size_t f, t;

	all_actions(before);
	simtest_init_shared();
	CU_OK(cuMemAlloc(&a, MIB));
	CU_OK(cuMemGetInfo(&f, &t));
	CU_OK(cuMemFree(a));
	all_actions(after);
	for (int s = 1; s < NSIG; s++) {
		/* SIGBUS: the ledger mapping's guard, by design (the test
		 * `vgpu-ledger-move` checks it chains every other fault). */
		if (s == SIGBUS)
			continue;
		cr_assert_eq((void *)before[s].sa_handler,
			     (void *)after[s].sa_handler,
			     "signal %d's handler changed", s);
		cr_assert_eq(before[s].sa_flags, after[s].sa_flags,
			     "signal %d's flags changed", s);
	}
}

/* Whether the simulated driver's file is mapped in this process. */
static bool driver_mapped(void)
{
	char real[4096], line[4352];
	bool found = false;
	FILE *f;

	cr_assert_not_null(realpath(SHIMTEST_SIM_LIBCUDA, real));
	f = fopen("/proc/self/maps", "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, real))
			found = true;
	fclose(f);
	return found;
}

Test(paths, no_driver_without_cuda)
{
	void *m;

	cr_assert(!driver_mapped(), "the driver is loaded before any CUDA "
		  "call");
	/* dlopen of something else, getenv, fork: still nothing. */
	m = dlopen("libm.so.6", RTLD_NOW);
	cr_assert_not_null(m);
	dlclose(m);
	cr_assert(!driver_mapped(), "dlopen(libm) loaded the driver");
	CU_OK(cuInit(0));
	cr_assert(driver_mapped(), "cuInit loads it");
}

/* A driver that is not there: a client that looks everything up through
 * cuGetProcAddress (cuda-bindings, numba, cuda-core, the CUDA runtime)
 * finds every function a driver has: cuInit, which says
 * CUDA_ERROR_NO_DEVICE, cuGetProcAddress itself, the error's name
 * (cuGetErrorName, cuGetErrorString) and a driver version of 0 (no
 * driver), and any other function answering CUDA_ERROR_NOT_INITIALIZED;
 * a name no driver has is not found. The same by the v1 ABI and by dlsym
 * in the handle. Never "function cuInit is not found" (nor
 * cuGetErrorName: cuda-core said so, a hostile review). */
typedef CUresult (*name_fn)(CUresult, const char **);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*init_fn)(unsigned);

static int missing_driver_child(void *arg)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult (*init)(unsigned) = NULL;
	void *gpa = NULL, *alloc = (void *)1;
	CUresult r;

	(void)arg;
	setenv("VGPU_REAL_LIBCUDA", "/nowhere/libcuda.so.1", 1);
	r = cuGetProcAddress("cuInit", (void **)&init, 13000, 0, &st);
	printf("init-lookup=%d status=%d\n", (int)r, (int)st);
	if (!init)
		return 1;
	printf("init=%d\n", (int)init(0));
	r = cuGetProcAddress("cuGetProcAddress", &gpa, 12000, 0, &st);
	printf("gpa-lookup=%d same=%d\n", (int)r,
	       gpa == (void *)cuGetProcAddress_v2);
	r = cuGetProcAddress("cuMemAlloc", &alloc, 3020, 0, &st);
	printf("alloc-lookup=%d status=%d\n", (int)r, (int)st);
	if (r == CUDA_SUCCESS && alloc) {
		CUdeviceptr p;

		printf("alloc=%d\n",
		       (int)((CUresult (*)(CUdeviceptr *, size_t))alloc)(&p,
									 64));
	}
	void *fn = (void *)1;
	const char *str = NULL;
	int version = -1;

	r = cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &st);
	printf("bogus-lookup=%d null=%d status=%d\n", (int)r, fn == NULL,
	       (int)st);
	printf("bad-flags=%d\n",
	       (int)cuGetProcAddress("cuMemAlloc", &fn, 13000, 0xff, &st));
	r = cuGetProcAddress("cuMemAlloc", &fn, 0, 0, &st);
	printf("version-0=%d status=%d\n", (int)r, (int)st);
	r = cuGetProcAddress("cuGetErrorName", &fn, 13000, 0, &st);
	if (r == CUDA_SUCCESS && fn &&
	    ((name_fn)fn)(CUDA_ERROR_NO_DEVICE, &str) == CUDA_SUCCESS)
		printf("name=%s\n", str);
	r = cuGetProcAddress("cuGetErrorString", &fn, 13000, 0, &st);
	if (r == CUDA_SUCCESS && fn)
		printf("unknown-code=%d\n", (int)((name_fn)fn)(12345, &str));
	r = cuGetProcAddress("cuDriverGetVersion", &fn, 13000, 0, &st);
	if (r == CUDA_SUCCESS && fn) {
		r = ((CUresult (*)(int *))fn)(&version);
		printf("version=%d,%d\n", (int)r, version);
	}
	r = cuGetProcAddress("cuDeviceGetCount", &fn, 13000, 0, &st);
	if (r == CUDA_SUCCESS && fn)
		printf("count=%d\n", (int)((CUresult (*)(int *))fn)(&version));
	/* A hook's fast path (an uncapped launch) calls the driver without
	 * a test: it jumped to address 0 once these were handed out. */
	r = cuGetProcAddress("cuLaunchKernel", &fn, 13000, 0, &st);
	if (r == CUDA_SUCCESS && fn) {
		void *args[1] = { NULL };

		r = ((CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
				   unsigned, unsigned, unsigned, unsigned,
				   CUstream, void **, void **))fn)(
			(CUfunction)0x1000, 1, 1, 1, 1, 1, 1, 0, NULL, args,
			NULL);
		printf("launch=%d\n", (int)r);
	}
	/* The v1 ABI of cuGetProcAddress, and dlsym in the driver's handle. */
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	gpa_v1_fn gpa1 = h ? (gpa_v1_fn)dlsym(h, "cuGetProcAddress") : NULL;
	init_fn init1 = NULL, init2 = h ? (init_fn)dlsym(h, "cuInit") : NULL;

	r = gpa1 ? gpa1("cuInit", (void **)&init1, 13000, 0) : (CUresult)-1;
	printf("v1-lookup=%d init=%d\n", (int)r, init1 ? (int)init1(0) : -1);
	printf("dlsym-init=%d\n", init2 ? (int)init2(0) : -1);
	name_fn str2 = h ? (name_fn)dlsym(h, "cuGetErrorString") : NULL;

	str = NULL;
	if (str2 && str2(CUDA_ERROR_NO_DEVICE, &str) == CUDA_SUCCESS)
		printf("dlsym-string=%s\n", str);
	return 0;
}

Test(paths, a_missing_driver_hands_out_cuinit_saying_no_device)
{
	char out[4096];

	cr_assert_eq(shimtest_run_child(missing_driver_child, NULL, out,
					sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "init-lookup=0 status=0\ninit=100\n"
			 "gpa-lookup=0 same=1\nalloc-lookup=0 status=0\n"
			 "alloc=3\nbogus-lookup=500 null=1 status=1\n"
			 "bad-flags=1\nversion-0=500 status=2\n"
			 "name=CUDA_ERROR_NO_DEVICE\nunknown-code=1\n"
			 "version=0,0\ncount=3\nlaunch=3\n"), "%s", out);
	cr_assert(strstr(out, "v1-lookup=0 init=100\ndlsym-init=100\n"
			 "dlsym-string=CUDA_ERROR_NO_DEVICE\n"), "%s", out);
	/* One line says why: where it looked, and what it found there. */
	cr_assert(strstr(out, "VGPU_REAL_LIBCUDA=/nowhere/libcuda.so.1: "
			 "cannot load a CUDA driver from it (missing or not a "
			 "driver)"), "no message naming the driver: %s", out);
}
