/* lifetimes_real.c - object lifetimes under a slice, on whatever driver is
 * behind the shim: the real one on a GPU machine (tests/gpu/check.sh), the
 * simulated one in the suite. Run with LD_PRELOAD=libvgpu.so; it sets its
 * own slice (2 GiB, VGPU_CONTEXT_OVERHEAD=0) and uses 1 GiB objects.
 *
 * For each pattern that once escaped a slice (VMM handles released while
 * mapped, pools destroyed with live allocations, executable graphs that
 * outlive their graph, narrow arrays), it checks the exact error past the
 * slice and compares the memory the device really holds (the driver's own
 * cuMemGetInfo, reached through the library the shim loaded, by its path)
 * with what the slice allows. Prints one PASS/FAIL line per check and
 * exits 1 if any failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define SLICE (2 * GiB)
#define OBJ GiB
#define ROUNDS 4
/* What the driver may hold beyond the objects: its own rounding. */
#define SLACK (64 * MiB)

static int failed;
static CUresult (*real_info)(size_t *, size_t *);
static size_t base_used;

static void check(const char *name, int ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(const char *name, int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failed |= !ok;
}

/* The driver the shim loaded: the other object mapped here that exports
 * cuMemGetInfo_v2. The shim catches dlopen (and answers to the driver's
 * SONAME), so the object is opened by its exact path with libc's own
 * dlopen, which finds the loaded one. */
static int find_driver(struct dl_phdr_info *info, size_t size, void *arg)
{
	static void *(*open_fn)(const char *, int);
	void *h, *f;

	(void)size;
	if (!open_fn) {
		void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

		open_fn = libc ? (void *(*)(const char *, int))dlsym(libc,
								   "dlopen")
			       : NULL;
		if (!open_fn)
			return 1;
	}
	if (!info->dlpi_name[0] || !strstr(info->dlpi_name, "libcuda"))
		return 0;
	h = open_fn(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
	if (!h || dlsym(h, "vgpu_shim_version"))
		return 0;
	f = dlsym(h, "cuMemGetInfo_v2");
	if (!f || f == (void *)cuMemGetInfo_v2)
		return 0;
	*(void **)arg = f;
	return 1;
}

/* What the device holds beyond what it held at the start. */
static size_t held(void)
{
	size_t f = 0, t = 0;

	if (!real_info || real_info(&f, &t) != CUDA_SUCCESS)
		return 0;
	return t - f > base_used ? t - f - base_used : 0;
}

static void within(const char *name, size_t allowed)
{
	size_t h = held();

	check(name, h <= allowed + SLACK, "the device holds %zu MiB, the "
	      "slice allows %zu MiB", h / MiB, allowed / MiB);
}

static CUmemAllocationProp device_prop(void)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

static void vmm_release_after_map(void)
{
	CUmemAllocationProp p = device_prop();
	CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			      CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h;
	CUdeviceptr va[ROUNDS];
	int n = 0, refused = 0;

	for (int i = 0; i < ROUNDS; i++) {
		CUresult r = cuMemCreate(&h, OBJ, &p, 0);

		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			refused++;
			continue;
		}
		if (r != CUDA_SUCCESS ||
		    cuMemAddressReserve(&va[n], OBJ, 0, 0, 0) != CUDA_SUCCESS ||
		    cuMemMap(va[n], OBJ, 0, h, 0) != CUDA_SUCCESS ||
		    cuMemSetAccess(va[n], OBJ, &a, 1) != CUDA_SUCCESS) {
			check("vmm-setup", 0, "round %d: %d", i, (int)r);
			return;
		}
		cuMemRelease(h);
		n++;
	}
	check("vmm-release-after-map", n == 2 && refused == ROUNDS - 2,
	      "%d mapped, %d refused", n, refused);
	within("vmm-release-after-map-held", SLICE);
	for (int i = 0; i < n; i++) {
		cuMemUnmap(va[i], OBJ);
		cuMemAddressFree(va[i], OBJ);
	}
	within("vmm-unmapped-held", 0);
}

static void pool_destroy_live(void)
{
	CUmemPoolProps pp;
	CUdeviceptr d[ROUNDS];
	int n = 0, refused = 0;

	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	pp.location.id = 0;
	for (int i = 0; i < ROUNDS; i++) {
		CUmemoryPool pool;
		CUresult r;

		if (cuMemPoolCreate(&pool, &pp) != CUDA_SUCCESS) {
			check("pool-setup", 0, "cuMemPoolCreate");
			return;
		}
		r = cuMemAllocFromPoolAsync(&d[n], OBJ, pool, NULL);
		cuStreamSynchronize(NULL);
		if (r == CUDA_SUCCESS)
			n++;
		else if (r == CUDA_ERROR_OUT_OF_MEMORY)
			refused++;
		cuMemPoolDestroy(pool);
	}
	check("pool-destroy-live", n == 2 && refused == ROUNDS - 2,
	      "%d allocated, %d refused", n, refused);
	within("pool-destroy-live-held", SLICE);
	for (int i = 0; i < n; i++)
		cuMemFreeAsync(d[i], NULL);
	cuStreamSynchronize(NULL);
	within("pool-freed-held", 0);
}

static void graph_execs(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphExec x[ROUNDS];
	int n = 0, refused = 0;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = OBJ;
	for (int i = 0; i < ROUNDS; i++) {
		CUgraphNode node;
		CUgraph g;
		CUresult r;

		if (cuGraphCreate(&g, 0) != CUDA_SUCCESS ||
		    cuGraphAddMemAllocNode(&node, g, NULL, 0, &p) !=
			    CUDA_SUCCESS) {
			check("graph-setup", 0, "round %d", i);
			return;
		}
		r = cuGraphInstantiateWithFlags(&x[n], g, 0);
		cuGraphDestroy(g);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			refused++;
			continue;
		}
		if (r != CUDA_SUCCESS || cuGraphLaunch(x[n], NULL) !=
						 CUDA_SUCCESS) {
			check("graph-launch", 0, "round %d: %d", i, (int)r);
			return;
		}
		cuStreamSynchronize(NULL);
		n++;
	}
	check("graph-execs", n == 2 && refused == ROUNDS - 2,
	      "%d launched, %d refused", n, refused);
	within("graph-execs-held", SLICE);
	for (int i = 0; i < n; i++)
		cuGraphExecDestroy(x[i]);
	cuDeviceGraphMemTrim(0);
	within("graph-execs-destroyed-held", 0);
}

/* A narrow array: whatever the driver lays it out as, the device never
 * holds more than the slice. */
static void narrow_arrays(void)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	CUarray a[ROUNDS];
	int n = 0;

	memset(&d, 0, sizeof(d));
	d.Width = 1;
	d.Height = 16384;
	d.Depth = 128;
	d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
	d.NumChannels = 1;
	for (int i = 0; i < ROUNDS; i++)
		if (cuArray3DCreate(&a[n], &d) == CUDA_SUCCESS)
			n++;
	printf("INFO narrow-arrays: %d of %d made, the device holds %zu MiB\n",
	       n, ROUNDS, held() / MiB);
	within("narrow-arrays-held", SLICE);
	for (int i = 0; i < n; i++)
		cuArrayDestroy(a[i]);
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	char dir[] = "/tmp/vgpu-lifetimes.XXXXXX", sub[64];
	bool own = false;
	CUcontext ctx;
	size_t f = 0, t = 0;

	/* In the suite (no ledger directory given): a ledger and a simulated
	 * device of its own, so that no other test's memory is counted. */
	if (!getenv("VGPU_LEDGER_DIR") && mkdtemp(dir)) {
		own = true;
		snprintf(sub, sizeof(sub), "%s/ledger", dir);
		setenv("VGPU_LEDGER_DIR", sub, 1);
		snprintf(sub, sizeof(sub), "%s/sim", dir);
		setenv("VGPU_SIM_STATE_DIR", sub, 1);
		setenv("VGPU_SIM_MEMORY", "4GiB", 0);
	}
	setenv("VGPU_MEMORY_LIMIT", "2GiB", 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 1);
	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		printf("FAIL init: no device\n");
		return 1;
	}
	dl_iterate_phdr(find_driver, &real_info);
	check("driver-found", real_info != NULL, "the driver behind the shim");
	if (real_info && real_info(&f, &t) == CUDA_SUCCESS)
		base_used = t - f;
	vmm_release_after_map();
	pool_destroy_live();
	graph_execs();
	narrow_arrays();
	cuDevicePrimaryCtxRelease(0);
	if (own)
		nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
	return failed;
}
