/* overcommit_real.c - overcommit on whatever driver is behind the shim
 * (tests/gpu/check.sh runs it on a real GPU, once per VGPU_OVERCOMMIT mode).
 *
 *   overcommit-real vmm            can a kernel read and write host-located
 *                                  VMM memory? (no shim needed)
 *   overcommit-real touch MiB N    allocates N x 256 MiB buffers, vgpu_touch
 *                                  writes then checks each; prints the time
 *
 * Prints PASS/FAIL lines; exits 1 on a failure.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vgpu_kernels.h"

#define MIB ((size_t)1 << 20)

static CUfunction touch;
static CUdeviceptr bad;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int start(void)
{
	CUcontext ctx;
	CUmodule mod;

	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
	    cuCtxSetCurrent(ctx) ||
	    cuModuleLoadData(&mod, vgpu_kernels_fatbin) ||
	    cuModuleGetFunction(&touch, mod, "vgpu_touch") ||
	    cuMemAllocHost((void **)&bad, 8)) {
		printf("FAIL start: no device, module or kernel\n");
		return 1;
	}
	return 0;
}

/* vgpu_touch over p: expect (0: none) then write next; the mismatches. */
static uint64_t run(CUdeviceptr p, size_t bytes, uint32_t expect,
		    uint32_t next)
{
	uint64_t n = bytes / 4;
	CUdeviceptr mm = expect ? bad : 0;
	void *params[] = { &p, &n, &expect, &next, &mm };

	*(volatile uint64_t *)bad = 0;
	if (cuLaunchKernel(touch, 1024, 1, 1, 256, 1, 1, 0, NULL, params,
			   NULL) || cuCtxSynchronize())
		return UINT64_MAX;
	return *(volatile uint64_t *)bad;
}

static int vmm(void)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	size_t g = 0, size;
	int supported = 0;
	CUresult r;

	cuDeviceGetAttribute(&supported,
		CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
	printf("INFO host-located VMM attribute: %d\n", supported);
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
	cuMemGetAllocationGranularity(&g, &prop,
				      CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	size = g ? (64 * MIB + g - 1) / g * g : 64 * MIB;
	if ((r = cuMemCreate(&h, size, &prop, 0)) ||
	    (r = cuMemAddressReserve(&va, size, 0, 0, 0)) ||
	    (r = cuMemMap(va, size, 0, h, 0))) {
		printf("FAIL vmm-host: creating or mapping a host handle: %d\n",
		       r);
		return 1;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = 0;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if ((r = cuMemSetAccess(va, size, &acc, 1))) {
		printf("FAIL vmm-host: device access refused: %d\n", r);
		return 1;
	}
	uint64_t w = run(va, size, 0, 5), c = run(va, size, 5, 6);
	printf("%s vmm-host: a kernel wrote and read back %zu MiB of "
	       "host-located VMM memory (mismatches %llu)\n",
	       w == 0 && c == 0 ? "PASS" : "FAIL", size / MIB,
	       (unsigned long long)c);
	cuMemUnmap(va, size);
	cuMemRelease(h);
	cuMemAddressFree(va, size);
	return w == 0 && c == 0 ? 0 : 1;
}

static int touch_set(int n)
{
	CUdeviceptr *p = calloc((size_t)n, sizeof(*p));
	uint64_t bad_words = 0;
	double t0;
	int i;

	for (i = 0; i < n; i++)
		if (cuMemAlloc(&p[i], 256 * MIB)) {
			printf("FAIL touch: buffer %d of %d not allocated\n", i,
			       n);
			return 1;
		}
	t0 = now_s();
	for (i = 0; i < n; i++)
		bad_words += run(p[i], 256 * MIB, 0, 11);
	for (int round = 0; round < 3; round++)
		for (i = 0; i < n; i++)
			bad_words += run(p[i], 256 * MIB, 11 + (uint32_t)round,
					 12 + (uint32_t)round);
	double dt = now_s() - t0;
	printf("%s touch: %d x 256 MiB, 4 passes, %.3f s (mode %s, slice %s), "
	       "mismatches %llu\n", bad_words == 0 ? "PASS" : "FAIL", n, dt,
	       getenv("VGPU_OVERCOMMIT") ? getenv("VGPU_OVERCOMMIT") : "off",
	       getenv("VGPU_MEMORY_LIMIT") ? getenv("VGPU_MEMORY_LIMIT")
					   : "none",
	       (unsigned long long)bad_words);
	for (i = 0; i < n; i++)
		cuMemFree(p[i]);
	return bad_words == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 2 || start())
		return 1;
	if (!strcmp(argv[1], "vmm"))
		return vmm();
	if (!strcmp(argv[1], "touch") && argc >= 3)
		return touch_set(atoi(argv[2]));
	fprintf(stderr, "usage: overcommit-real vmm | touch N\n");
	return 2;
}
