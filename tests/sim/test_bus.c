/* test_bus.c - the bus model: kernels' passes over host-backed memory (a
 * host-located VMM mapping, managed memory on the host, page-locked host
 * memory) take bytes / VGPU_SIM_BUS_BANDWIDTH longer; over device memory
 * (cuMemAlloc, a device-located mapping, managed memory prefetched to the
 * device) they do not.
 *
 * Timing is measured with events around the kernel. The bandwidth is set
 * low (16 MiB/s) so that the bus time of a pass over 1 MiB (62.5 ms) dwarfs
 * the host form's own time: assertions are lower bounds (the bus time is
 * waited out in full) and upper bounds of half the bus time for memory
 * that must not pay it, which a loaded machine would need to slow a 1 MiB
 * loop some hundred times to break. The kernels come from PTX text written here
 * (vgpu_touch and vgpu_saxpy are bound to their host forms by name), so
 * this runs without nvcc.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

#include "vgpu_kernels.h"

TestSuite(bus, .init = simtest_clean_env, .fini = simtest_remove_state);

#define GRAN (2 * MIB)
#define BUF (1 * MIB)                         /* what the kernels touch */
#define BANDWIDTH (16 * MIB)                  /* bytes per second */
#define BANDWIDTH_STR "16MiB/s"

/* The parameter lists of kernels/vgpu_kernels.cu, empty bodies. */
static const char ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry vgpu_touch(.param .u64 buf, .param .u64 n,\n"
	"    .param .u32 expect, .param .u32 write, .param .u64 mism)\n"
	"{ ret; }\n"
	".visible .entry vgpu_saxpy(.param .u64 n, .param .f32 a,\n"
	"    .param .u64 x, .param .u64 y)\n"
	"{ ret; }\n";

struct bus_env {
	CUfunction touch, saxpy;
	CUstream s;
	CUevent t0, t1;
	CUdeviceptr mism;        /* vgpu_touch's mismatch counter, on the device */
};

static struct bus_env env;

/* A device of its own with the bus at `bandwidth` (NULL: the default),
 * and the kernels. */
static void setup(const char *bandwidth)
{
	CUmodule m;

	if (bandwidth)
		setenv("VGPU_SIM_BUS_BANDWIDTH", bandwidth, 1);
	simtest_init();
	CU_OK(cuModuleLoadData(&m, ptx));
	CU_OK(cuModuleGetFunction(&env.touch, m, "vgpu_touch"));
	CU_OK(cuModuleGetFunction(&env.saxpy, m, "vgpu_saxpy"));
	CU_OK(cuStreamCreate(&env.s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&env.t0, CU_EVENT_DEFAULT));
	CU_OK(cuEventCreate(&env.t1, CU_EVENT_DEFAULT));
	CU_OK(cuMemAlloc(&env.mism, sizeof(unsigned long long)));
}

/* Nanoseconds that `bytes` take on the test's bus. */
static double bus_ns(double bytes)
{
	return bytes * 1e9 / (double)BANDWIDTH;
}

/* Launches f between two events on the test stream; its time in ns. */
static double timed(CUfunction f, void **params)
{
	float ms = 0;

	CU_OK(cuEventRecord(env.t0, env.s));
	CU_OK(cuLaunchKernel(f, 64, 1, 1, 128, 1, 1, 0, env.s, params, NULL));
	CU_OK(cuEventRecord(env.t1, env.s));
	CU_OK(cuEventSynchronize(env.t1));
	CU_OK(cuEventElapsedTime(&ms, env.t0, env.t1));
	return (double)ms * 1e6;
}

/* vgpu_touch writes seed over the buffer (one pass); its time in ns. */
static double touch_write(CUdeviceptr buf, size_t bytes, unsigned seed)
{
	unsigned long long n = bytes / sizeof(uint32_t);
	unsigned expect = 0;
	CUdeviceptr none = 0;
	void *params[] = { &buf, &n, &expect, &seed, &none };

	return timed(env.touch, params);
}

/* vgpu_touch checks the buffer holds seed and rewrites it with seed + 1
 * (two passes); asserts no mismatch; its time in ns. */
static double touch_check(CUdeviceptr buf, size_t bytes, unsigned seed)
{
	unsigned long long n = bytes / sizeof(uint32_t), mism = 1;
	unsigned write = seed + 1;
	void *params[] = { &buf, &n, &seed, &write, &env.mism };
	double ns;

	CU_OK(cuMemsetD8(env.mism, 0, sizeof(mism)));
	ns = timed(env.touch, params);
	CU_OK(cuMemcpyDtoH(&mism, env.mism, sizeof(mism)));
	cr_assert_eq(mism, 0, "%llu elements lost", mism);
	return ns;
}

/* The bus time was paid in full: ns at least `bytes` at the bandwidth (a
 * hair less, for the float milliseconds of cuEventElapsedTime), and not
 * absurdly more. */
static void paid(double ns, double bytes, const char *what)
{
	double want = bus_ns(bytes);

	cr_assert_geq(ns, want * 0.999, "%s: %.2f ms, want at least %.2f ms",
		      what, ns / 1e6, want / 1e6);
	cr_assert_lt(ns, want + 5e9, "%s: %.2f ms", what, ns / 1e6);
}

/* No bus time: under half of what `bytes` would cost on the bus. */
static void free_of_bus(double ns, double bytes, const char *what)
{
	cr_assert_lt(ns, bus_ns(bytes) / 2, "%s: %.2f ms, the bus would take "
		     "%.2f ms", what, ns / 1e6, bus_ns(bytes) / 1e6);
}

static const CUmemLocation on_host = { .type = CU_MEM_LOCATION_TYPE_HOST };
static const CUmemLocation on_dev0 = { .type = CU_MEM_LOCATION_TYPE_DEVICE };

static CUmemAllocationProp prop_at(CUmemLocationType type, int id)
{
	return (CUmemAllocationProp){
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = type, .id = id },
	};
}

/* Maps handles h[0..n) of GRAN bytes each side by side, readable and
 * writable by device 0. */
static CUdeviceptr map_chunks(const CUmemGenericAllocationHandle *h, int n)
{
	CUmemAccessDesc d = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUdeviceptr va;

	CU_OK(cuMemAddressReserve(&va, n * GRAN, 0, 0, 0));
	for (int i = 0; i < n; i++)
		CU_OK(cuMemMap(va + i * GRAN, GRAN, 0, h[i], 0));
	CU_OK(cuMemSetAccess(va, n * GRAN, &d, 1));
	return va;
}

static void unmap_chunks(CUdeviceptr va, CUmemGenericAllocationHandle *h,
			 int n)
{
	CU_OK(cuMemUnmap(va, n * GRAN));
	CU_OK(cuMemAddressFree(va, n * GRAN));
	for (int i = 0; i < n; i++)
		CU_OK(cuMemRelease(h[i]));
}

/* A mapping of host-located handles, HOST or HOST_NUMA node 0. */
static CUdeviceptr host_mapping(CUmemLocationType type,
				CUmemGenericAllocationHandle h[2])
{
	CUmemAllocationProp prop = prop_at(type, 0);

	CU_OK(cuMemCreate(&h[0], GRAN, &prop, 0));
	CU_OK(cuMemCreate(&h[1], GRAN, &prop, 0));
	return map_chunks(h, 2);
}

/* Managed memory advised to live on the host, accessed by device 0. */
static CUdeviceptr managed_on_host(size_t bytes)
{
	CUdeviceptr p;

	CU_OK(cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL));
	CU_OK(cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
			     on_host));
	CU_OK(cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, on_dev0));
	return p;
}

/* (a) cuMemAlloc memory is the device's: no bus time. */
Test(bus, device_memory_is_free)
{
	CUdeviceptr p;

	setup(BANDWIDTH_STR);
	CU_OK(cuMemAlloc(&p, BUF));
	free_of_bus(touch_write(p, BUF, 3), BUF, "write");
	free_of_bus(touch_check(p, BUF, 3), 2.0 * BUF, "check");
	CU_OK(cuMemFree(p));
}

/* A mapping of a device-located handle is device memory too. */
Test(bus, device_mapping_is_free)
{
	CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va;

	setup(BANDWIDTH_STR);
	CU_OK(cuMemCreate(&h[0], GRAN, &prop, 0));
	CU_OK(cuMemCreate(&h[1], GRAN, &prop, 0));
	va = map_chunks(h, 2);
	free_of_bus(touch_write(va, BUF, 3), BUF, "write");
	free_of_bus(touch_check(va, BUF, 3), 2.0 * BUF, "check");
	unmap_chunks(va, h, 2);
}

/* (b) A host-located VMM mapping: every pass crosses the bus, and the
 * data is intact. */
Test(bus, host_mapping_pays_the_bus)
{
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va;
	uint32_t out[16];

	setup(BANDWIDTH_STR);
	va = host_mapping(CU_MEM_LOCATION_TYPE_HOST, h);
	paid(touch_write(va, BUF, 3), BUF, "write");
	paid(touch_check(va, BUF, 3), 2.0 * BUF, "check");
	CU_OK(cuMemcpyDtoH(out, va + BUF - sizeof(out), sizeof(out)));
	for (unsigned i = 0; i < 16; i++)
		cr_assert_eq(out[i], vgpu_touch_pattern(4, BUF / 4 - 16 + i));
	unmap_chunks(va, h, 2);
}

Test(bus, host_numa_mapping_pays_the_bus)
{
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va;

	setup(BANDWIDTH_STR);
	va = host_mapping(CU_MEM_LOCATION_TYPE_HOST_NUMA, h);
	paid(touch_write(va, BUF, 3), BUF, "write");
	paid(touch_check(va, BUF, 3), 2.0 * BUF, "check");
	unmap_chunks(va, h, 2);
}

/* One range over a device chunk and a host chunk (an allocation of which
 * part has spilled), half in each: only the host half's bytes pay. */
Test(bus, mixed_range_pays_for_its_host_part)
{
	CUmemAllocationProp dev = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, 0);
	CUmemAllocationProp host = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va;
	double ns;

	setup(BANDWIDTH_STR);
	CU_OK(cuMemCreate(&h[0], GRAN, &dev, 0));
	CU_OK(cuMemCreate(&h[1], GRAN, &host, 0));
	va = map_chunks(h, 2);
	touch_write(va + GRAN - BUF / 2, BUF, 3);
	ns = touch_check(va + GRAN - BUF / 2, BUF, 3);
	paid(ns, BUF, "check");
	/* The device half is free: under the host half's bus time plus half
	 * the device half's would-be time. */
	cr_assert_lt(ns, bus_ns(BUF) * 1.5, "%.2f ms", ns / 1e6);
	unmap_chunks(va, h, 2);
}

/* (c) Managed memory advised to prefer the host pays; (d) prefetched to
 * the device it does not; prefetched back to the host it pays again. */
Test(bus, managed_follows_advice_and_prefetch)
{
	CUdeviceptr p;

	setup(BANDWIDTH_STR);
	p = managed_on_host(BUF);
	paid(touch_write(p, BUF, 3), BUF, "advised to the host");
	paid(touch_check(p, BUF, 3), 2.0 * BUF, "advised to the host");
	CU_OK(cuMemPrefetchAsync_v2(p, BUF, on_dev0, 0, env.s));
	free_of_bus(touch_check(p, BUF, 4), 2.0 * BUF, "prefetched to device");
	CU_OK(cuMemPrefetchAsync_v2(p, BUF, on_host, 0, env.s));
	paid(touch_check(p, BUF, 5), 2.0 * BUF, "prefetched to the host");
	/* Advice to prefer the device brings it back too. */
	CU_OK(cuMemAdvise_v2(p, BUF, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
			     on_dev0));
	free_of_bus(touch_check(p, BUF, 6), 2.0 * BUF, "advised to device");
	CU_OK(cuMemFree(p));
}

/* The pre-12.2 forms, with a CUdevice (CU_DEVICE_CPU: the host); fresh
 * managed memory is on the device, as it is counted. */
#undef cuMemAdvise
#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count,
			     CUmem_advise advice, CUdevice device);
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count,
				    CUdevice dstDevice, CUstream h);

Test(bus, managed_device_forms)
{
	CUdeviceptr p;

	setup(BANDWIDTH_STR);
	CU_OK(cuMemAllocManaged(&p, BUF, CU_MEM_ATTACH_GLOBAL));
	free_of_bus(touch_write(p, BUF, 3), BUF, "fresh");
	CU_OK(cuMemAdvise(p, BUF, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
			  CU_DEVICE_CPU));
	/* Advice about anything but location leaves it where it is. */
	CU_OK(cuMemAdvise(p, BUF, CU_MEM_ADVISE_SET_READ_MOSTLY, 0));
	CU_OK(cuMemAdvise(p, BUF, CU_MEM_ADVISE_SET_ACCESSED_BY, 0));
	paid(touch_check(p, BUF, 3), 2.0 * BUF, "advised to the host");
	CU_OK(cuMemPrefetchAsync(p, BUF, 0, env.s));
	free_of_bus(touch_check(p, BUF, 4), 2.0 * BUF, "prefetched to device");
	CU_OK(cuMemFree(p));
}

/* Page-locked host memory used through its device pointer crosses the
 * bus as well. */
Test(bus, page_locked_host_memory_pays_the_bus)
{
	CUdeviceptr d;
	void *h;

	setup(BANDWIDTH_STR);
	CU_OK(cuMemHostAlloc(&h, BUF, CU_MEMHOSTALLOC_DEVICEMAP));
	CU_OK(cuMemHostGetDevicePointer(&d, h, 0));
	paid(touch_write(d, BUF, 3), BUF, "write");
	CU_OK(cuMemFreeHost(h));
}

/* saxpy reads x and reads and writes y: x on the host pays one pass. */
Test(bus, saxpy_pays_for_its_host_operand)
{
	CUmemGenericAllocationHandle h[2];
	unsigned long long n = BUF / sizeof(float);
	CUdeviceptr x, y;
	float a = 2.0f, out[4];
	void *params[] = { &n, &a, &x, &y };
	double ns;

	setup(BANDWIDTH_STR);
	x = host_mapping(CU_MEM_LOCATION_TYPE_HOST, h);
	CU_OK(cuMemAlloc(&y, BUF));
	CU_OK(cuMemsetD32(x, 0x3f800000u, n));      /* 1.0f */
	CU_OK(cuMemsetD32(y, 0x40000000u, n));      /* 2.0f */
	ns = timed(env.saxpy, params);
	paid(ns, BUF, "x on the host");
	cr_assert_lt(ns, bus_ns(BUF) * 1.5, "y paid too: %.2f ms", ns / 1e6);
	CU_OK(cuMemcpyDtoH(out, y + BUF - sizeof(out), sizeof(out)));
	for (int i = 0; i < 4; i++)
		cr_assert_eq(out[i], 4.0f);
	CU_OK(cuMemFree(y));
	unmap_chunks(x, h, 2);
}

/* Copies do not take the bus model's time. On a bus 16 times slower than
 * the other tests' the two would take 2 s: far from what they take even
 * under a sanitizer on a loaded machine (at 16 MiB/s the margin, 62 ms,
 * was crossed under ASan beside two builds). */
Test(bus, copies_are_not_slowed)
{
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va, d;
	uint64_t t0;
	double ns;

	setup("1MiB/s");
	va = host_mapping(CU_MEM_LOCATION_TYPE_HOST, h);
	CU_OK(cuMemAlloc(&d, BUF));
	t0 = simtest_now_ns();
	CU_OK(cuMemcpyDtoD(d, va, BUF));
	CU_OK(cuMemsetD8(va, 1, BUF));
	ns = (double)(simtest_now_ns() - t0);
	cr_assert_lt(ns, 2.0 * BUF * 1e9 / (double)MIB / 2, "copies: %.2f ms, "
		     "the bus would take %.0f ms", ns / 1e6,
		     2.0 * BUF * 1e3 / (double)MIB);
	CU_OK(cuMemFree(d));
	unmap_chunks(va, h, 2);
}

/* VGPU_SIM_BUS_BANDWIDTH=0: host-backed memory costs nothing extra. */
Test(bus, zero_bandwidth_disables_the_cost)
{
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va, p;

	setup("0");
	va = host_mapping(CU_MEM_LOCATION_TYPE_HOST, h);
	free_of_bus(touch_write(va, BUF, 3), BUF, "host mapping");
	free_of_bus(touch_check(va, BUF, 3), 2.0 * BUF, "host mapping");
	p = managed_on_host(BUF);
	free_of_bus(touch_write(p, BUF, 3), BUF, "managed on the host");
	CU_OK(cuMemFree(p));
	unmap_chunks(va, h, 2);
}

/* The default bus (16 GiB/s) charges too: 64 MiB take at least 3.8 ms. */
Test(bus, default_bandwidth)
{
	CUmemAllocationProp prop = prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
	CUmemGenericAllocationHandle h[32];
	CUdeviceptr va;

	setup(NULL);
	for (int i = 0; i < 32; i++)
		CU_OK(cuMemCreate(&h[i], GRAN, &prop, 0));
	va = map_chunks(h, 32);
	paid(touch_write(va, 32 * GRAN, 3), 32.0 * GRAN * BANDWIDTH /
	     (16.0 * (1ull << 30)), "64MiB at 16GiB/s");
	unmap_chunks(va, h, 32);
}
