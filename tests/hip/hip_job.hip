/* hip_job.hip - a HIP job for the simulated HIP device and the HIP shim.
 *
 * Built by hipcc like any HIP program, and run unchanged on the simulated
 * libamdhip64.so.5 (build/sim/hip first in LD_LIBRARY_PATH) or on a GPU.
 * It reads commands, one a line, from its arguments (each argument one
 * command) or, with none, from stdin; it prints one line per command:
 * the command's name, the HIP error code of the call that decided it
 * (0: hipSuccess), then key=value results. Output is flushed per line, so
 * a test can drive it through pipes.
 *
 *   alloc SIZE [PATH]  allocate SIZE bytes (K/M/G suffixes) through PATH:
 *                      malloc (default), pitch (hipMallocPitch, SIZE wide,
 *                      one row), 3d (hipMalloc3D, SIZE x 1 x 1), managed,
 *                      ext (hipExtMallocWithFlags), async (hipMallocAsync
 *                      on the null stream, then a synchronize), array
 *                      (hipMallocArray of SIZE/4 floats, rows of 4096), host
 *                      (hipHostMalloc), narrow (a 1-byte-wide array of SIZE
 *                      rows), odd (1024 x SIZE/4096 of a description with
 *                      channel widths 32, -31), mipmap
 *                      (hipMallocMipmappedArray of floats, 4096 wide,
 *                      SIZE/16K rows, two levels: 20 KiB a row for an
 *                      even number of rows),
 *                      mipmapdrv (the same by hipMipmappedArrayCreate),
 *                      pool (hipMallocFromPoolAsync from the pool made by
 *                      "pool create", then a synchronize), mempitch
 *                      (hipMemAllocPitch, SIZE wide, one row, 4-byte
 *                      elements), arraydestroy (as array, freed by
 *                      hipArrayDestroy).
 *                      Prints "alloc ERR id=N".
 *   free ID            free allocation ID with its path's free function
 *                      (async, pool: hipFreeAsync, then a synchronize).
 *   pool create T      hipMemPoolCreate on device 0 with a release
 *                      threshold of T bytes (K/M/G): "pool ERR".
 *   pool default T     the device's current pool's release threshold.
 *   pool trim [KEEP]   hipMemPoolTrimTo(the created pool, KEEP).
 *   pool destroy       hipMemPoolDestroy(the created pool).
 *   pool reserved [default]  "pool ERR bytes=B": the created (or the
 *                      device's current) pool's ReservedMemCurrent.
 *   vmm create SIZE    hipMemCreate of SIZE bytes on device 0: "vmm ERR
 *                      id=N" (N: the handle's number, -1 when refused).
 *   vmm map N          reserves an address range of the handle's size and
 *                      maps the handle there (hipMemAddressReserve,
 *                      hipMemMap, hipMemSetAccess read-write): "vmm ERR".
 *                      Mapping again maps it at a second range.
 *   vmm unmap N        hipMemUnmap of the handle's newest mapping, then
 *                      hipMemAddressFree of its range.
 *   vmm release N      hipMemRelease of the handle (its mappings stay).
 *   vmm retain N       hipMemRetainAllocationHandle at the handle's newest
 *                      mapping: one more handle reference ("vmm ERR
 *                      same=1" when the runtime gave the same handle).
 *   vmm drop N         hipMemRelease of one retained reference.
 *   vmm touch N [SEED] vgpu_touch over the newest mapping, checked as
 *                      touch does: "vmm ERR bad=N".
 *   memgetinfo         "memgetinfo ERR free=F total=T" (hipMemGetInfo).
 *   totalmem           "totalmem ERR bytes=B" (hipDeviceTotalMem, device 0).
 *   copy ID            round trip: a pattern hipMemcpy'd host to device,
 *                      device to device (a scratch buffer) and back;
 *                      "copy ERR bad=N" (bytes that differ).
 *   touch ID [SEED]    vgpu_touch writes SEED's pattern (default 1) over
 *                      allocation ID, checked on the host after a copy
 *                      back: "touch ERR bad=N" (elements that differ).
 *   spin US COUNT [HOW] COUNT launches of vgpu_spin(US µs) on one stream,
 *                      timed by events: "spin ERR ms=M" (event time). HOW
 *                      is the launch entry: ggl (hipLaunchKernelGGL, the
 *                      default), spt (hipLaunchKernel_spt on the null
 *                      stream, the per-thread default stream, as hipcc
 *                      -fgpu-default-stream=per-thread makes <<<...>>>),
 *                      coopspt (hipLaunchCooperativeKernel_spt, null
 *                      stream), extmodule (hipExtModuleLaunchKernel of the
 *                      program's own code object, hipModuleLoadData'd),
 *                      hccmodule (hipHccModuleLaunchKernel, the same),
 *                      coopmulti (hipLaunchCooperativeKernelMultiDevice,
 *                      one device), extmulti
 *                      (hipExtLaunchMultiKernelMultiDevice, one device).
 *   saxpy N            vgpu_saxpy over N floats, checked on the host:
 *                      "saxpy ERR bad=N".
 *   sync               hipDeviceSynchronize: "sync ERR".
 *   pid                "pid 0 pid=P".
 *   device             "device ERR count=C name=... mem=B cus=N".
 *   exit               "exit 0", then exits 0 (so does end of input).
 *
 * An unknown command prints "COMMAND -1 unknown". Allocations are kept
 * until freed or the process ends.
 */
#include <hip/hip_ext.h>
#include <hip/hip_runtime.h>

#include <elf.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vgpu_kernels.h"

#define MAX_ALLOCS 64

extern "C" __global__ void vgpu_spin(unsigned long long ns,
				     unsigned long long *times);
extern "C" __global__ void vgpu_touch(unsigned int *buf, unsigned long long n,
				      unsigned int expect_seed,
				      unsigned int write_seed,
				      unsigned long long *mismatches);
extern "C" __global__ void vgpu_saxpy(unsigned long long n, float a,
				      const float *x, float *y);

enum path { P_MALLOC, P_PITCH, P_3D, P_MANAGED, P_EXT, P_ASYNC, P_ARRAY,
	    P_HOST, P_NARROW, P_ODD, P_MIPMAP, P_MIPMAP_DRV, P_POOL,
	    P_MEMPITCH, P_ARRAY_DESTROY };
static const char *const path_names[] = { "malloc", "pitch", "3d", "managed",
					   "ext", "async", "array", "host",
					   "narrow", "odd", "mipmap",
					   "mipmapdrv", "pool", "mempitch",
					   "arraydestroy" };
static hipMemPool_t pool;	/* "pool create"'s */

struct alloc {
	bool used;
	enum path path;
	void *ptr;
	hipArray_t array;
	hipMipmappedArray_t mipmap;
	size_t size;
};
static struct alloc allocs[MAX_ALLOCS];

static unsigned long long parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	switch (*end) {
	case 'G': case 'g': v <<= 10; /* fall through */
	case 'M': case 'm': v <<= 10; /* fall through */
	case 'K': case 'k': v <<= 10; break;
	default: break;
	}
	return v;
}

static hipError_t alloc_by(struct alloc *a)
{
	hipError_t rc;

	switch (a->path) {
	case P_PITCH: {
		size_t pitch;

		return hipMallocPitch(&a->ptr, &pitch, a->size, 1);
	}
	case P_MEMPITCH: {
		size_t pitch;

		return hipMemAllocPitch((hipDeviceptr_t *)&a->ptr, &pitch,
					a->size, 1, 4);
	}
	case P_3D: {
		hipPitchedPtr pp;

		rc = hipMalloc3D(&pp, make_hipExtent(a->size, 1, 1));
		a->ptr = pp.ptr;
		return rc;
	}
	case P_MANAGED:
		return hipMallocManaged(&a->ptr, a->size, hipMemAttachGlobal);
	case P_EXT:
		return hipExtMallocWithFlags(&a->ptr, a->size,
					     hipDeviceMallocDefault);
	case P_ASYNC:
		rc = hipMallocAsync(&a->ptr, a->size, 0);
		return rc == hipSuccess ? hipStreamSynchronize(0) : rc;
	case P_ARRAY:
	case P_ARRAY_DESTROY: {
		hipChannelFormatDesc d = hipCreateChannelDesc(
			32, 0, 0, 0, hipChannelFormatKindFloat);

		/* Rows of up to 4096 floats: a 2D array past 16 KiB. */
		size_t w = a->size / 4 < 4096 ? a->size / 4 : 4096;

		return hipMallocArray(&a->array, &d, w,
				      a->size / 4 > w ? a->size / 4 / w : 0,
				      hipArrayDefault);
	}
	case P_NARROW: {	/* one byte wide, SIZE rows */
		hipChannelFormatDesc d = hipCreateChannelDesc(
			8, 0, 0, 0, hipChannelFormatKindUnsigned);

		return hipMallocArray(&a->array, &d, 1, a->size,
				      hipArrayDefault);
	}
	case P_ODD: {	/* channel widths that do not add up */
		hipChannelFormatDesc d = hipCreateChannelDesc(
			32, -31, 0, 0, hipChannelFormatKindFloat);

		return hipMallocArray(&a->array, &d, 1024, a->size / 4096,
				      hipArrayDefault);
	}
	case P_POOL:
		rc = hipMallocFromPoolAsync(&a->ptr, a->size, pool, 0);
		return rc == hipSuccess ? hipStreamSynchronize(0) : rc;
	case P_MIPMAP: {
		hipChannelFormatDesc d = hipCreateChannelDesc(
			32, 0, 0, 0, hipChannelFormatKindFloat);

		return hipMallocMipmappedArray(&a->mipmap, &d,
			make_hipExtent(4096, a->size / (16 << 10), 0), 2,
			hipArrayDefault);
	}
	case P_MIPMAP_DRV: {
		HIP_ARRAY3D_DESCRIPTOR d = {};

		d.Width = 4096;
		d.Height = a->size / (16 << 10);
		d.Format = HIP_AD_FORMAT_FLOAT;
		d.NumChannels = 1;
		return hipMipmappedArrayCreate(&a->mipmap, &d, 2);
	}
	case P_HOST:
		return hipHostMalloc(&a->ptr, a->size, hipHostMallocDefault);
	case P_MALLOC:
	default:
		return hipMalloc(&a->ptr, a->size);
	}
}

static hipError_t free_by(struct alloc *a)
{
	switch (a->path) {
	case P_ARRAY:
	case P_NARROW:
	case P_ODD:
		return hipFreeArray(a->array);
	case P_ARRAY_DESTROY:
		return hipArrayDestroy(a->array);
	case P_MIPMAP:
		return hipFreeMipmappedArray(a->mipmap);
	case P_MIPMAP_DRV:
		return hipMipmappedArrayDestroy(a->mipmap);
	case P_HOST:
		return hipHostFree(a->ptr);
	case P_ASYNC:
	case P_POOL: {
		hipError_t rc = hipFreeAsync(a->ptr, 0);

		return rc == hipSuccess ? hipStreamSynchronize(0) : rc;
	}
	default:
		return hipFree(a->ptr);
	}
}

/* Arrays, which copies and kernels cannot take. */
static bool not_a_buffer(enum path p)
{
	return p == P_ARRAY || p == P_NARROW || p == P_ODD || p == P_MIPMAP ||
	       p == P_MIPMAP_DRV || p == P_ARRAY_DESTROY;
}

static struct alloc *alloc_arg(const char *s)
{
	long id = s ? strtol(s, NULL, 0) : -1;

	if (id < 0 || id >= MAX_ALLOCS || !allocs[id].used)
		return NULL;
	return &allocs[id];
}

static void cmd_alloc(const char *size, const char *path)
{
	struct alloc a = { true, P_MALLOC, NULL, NULL, 0 };
	hipError_t rc;
	int id;

	a.size = size ? parse_size(size) : 0;
	if (path) {
		unsigned i;

		for (i = 0; i < sizeof(path_names) / sizeof(*path_names); i++)
			if (strcmp(path, path_names[i]) == 0)
				break;
		if (i == sizeof(path_names) / sizeof(*path_names)) {
			printf("alloc -1 unknown path %s\n", path);
			return;
		}
		a.path = (enum path)i;
	}
	for (id = 0; id < MAX_ALLOCS && allocs[id].used; id++)
		;
	if (id == MAX_ALLOCS) {
		printf("alloc -1 full\n");
		return;
	}
	rc = alloc_by(&a);
	if (rc == hipSuccess)
		allocs[id] = a;
	printf("alloc %d id=%d\n", (int)rc, rc == hipSuccess ? id : -1);
}

static void cmd_free(const char *id)
{
	struct alloc *a = alloc_arg(id);
	hipError_t rc;

	if (!a) {
		printf("free -1 no such allocation\n");
		return;
	}
	rc = free_by(a);
	if (rc == hipSuccess)
		a->used = false;
	printf("free %d\n", (int)rc);
}

static void cmd_memgetinfo(void)
{
	size_t fr = 0, total = 0;
	hipError_t rc = hipMemGetInfo(&fr, &total);

	printf("memgetinfo %d free=%zu total=%zu\n", (int)rc, fr, total);
}

static void cmd_totalmem(void)
{
	size_t bytes = 0;
	hipError_t rc = hipDeviceTotalMem(&bytes, 0);

	printf("totalmem %d bytes=%zu\n", (int)rc, bytes);
}

/* Host to device, device to device (scratch), device to host. */
static hipError_t round_trip(struct alloc *a, size_t *bad)
{
	unsigned char *in = (unsigned char *)malloc(a->size);
	unsigned char *out = (unsigned char *)calloc(1, a->size);
	void *scratch = NULL;
	hipError_t rc = hipErrorOutOfMemory;

	if (!in || !out)
		goto out;
	for (size_t i = 0; i < a->size; i++)
		in[i] = (unsigned char)(i * 7 + 3);
	rc = hipMalloc(&scratch, a->size);
	if (rc == hipSuccess)
		rc = hipMemcpy(a->ptr, in, a->size, hipMemcpyHostToDevice);
	if (rc == hipSuccess)
		rc = hipMemcpy(scratch, a->ptr, a->size,
			       hipMemcpyDeviceToDevice);
	if (rc == hipSuccess)
		rc = hipMemcpy(out, scratch, a->size, hipMemcpyDeviceToHost);
	*bad = 0;
	for (size_t i = 0; rc == hipSuccess && i < a->size; i++)
		*bad += in[i] != out[i];
out:
	if (scratch)
		(void)hipFree(scratch);
	free(in);
	free(out);
	return rc;
}

static void cmd_copy(const char *id)
{
	struct alloc *a = alloc_arg(id);
	size_t bad = 0;
	hipError_t rc;

	if (!a || not_a_buffer(a->path)) {
		printf("copy -1 no such buffer\n");
		return;
	}
	rc = round_trip(a, &bad);
	printf("copy %d bad=%zu\n", (int)rc, bad);
}

/* vgpu_touch writes seed's pattern over n words at ptr; they are read
 * back and checked on the host: *bad, the words that differ. */
static hipError_t touch_check(void *ptr, unsigned long long n, unsigned seed,
			      unsigned long long *bad)
{
	unsigned *host;
	hipError_t rc;

	*bad = 0;
	hipLaunchKernelGGL(vgpu_touch, dim3(64), dim3(256), 0, 0,
			   (unsigned *)ptr, n, 0u, seed,
			   (unsigned long long *)NULL);
	rc = hipGetLastError();
	if (rc == hipSuccess)
		rc = hipDeviceSynchronize();
	host = (unsigned *)calloc(n ? n : 1, sizeof(unsigned));
	if (rc == hipSuccess)
		rc = hipMemcpy(host, ptr, n * sizeof(unsigned),
			       hipMemcpyDeviceToHost);
	for (unsigned long long i = 0; rc == hipSuccess && i < n; i++)
		*bad += host[i] != vgpu_touch_pattern(seed, i);
	free(host);
	return rc;
}

static void cmd_touch(const char *id, const char *seed_s)
{
	struct alloc *a = alloc_arg(id);
	unsigned seed = seed_s ? (unsigned)strtoul(seed_s, NULL, 0) : 1;
	unsigned long long bad;
	hipError_t rc;

	if (!a || not_a_buffer(a->path)) {
		printf("touch -1 no such buffer\n");
		return;
	}
	rc = touch_check(a->ptr, a->size / sizeof(unsigned), seed, &bad);
	printf("touch %d bad=%llu\n", (int)rc, bad);
}

/* The pool a "pool" command is about: the created one, or with
 * "default" the device's current pool. */
static hipError_t pool_arg(const char *op, const char *arg, hipMemPool_t *p)
{
	*p = pool;
	if (strcmp(op, "default") == 0 || (arg && !strcmp(arg, "default")))
		return hipDeviceGetMemPool(p, 0);
	return hipSuccess;
}

static hipError_t pool_create(hipMemPool_t *p)
{
	hipMemPoolProps props = {};

	props.allocType = hipMemAllocationTypePinned;
	props.location.type = hipMemLocationTypeDevice;
	return hipMemPoolCreate(p, &props);
}

static void cmd_pool(const char *op, const char *arg)
{
	uint64_t v = arg ? parse_size(arg) : 0;
	hipMemPool_t p;
	hipError_t rc;

	op = op ? op : "";
	rc = strcmp(op, "create") == 0 ? pool_create(&pool) : hipSuccess;
	if (rc == hipSuccess)
		rc = pool_arg(op, arg, &p);
	if (rc != hipSuccess)
		;	/* said below */
	else if (strcmp(op, "create") == 0 || strcmp(op, "default") == 0)
		rc = hipMemPoolSetAttribute(p, hipMemPoolAttrReleaseThreshold,
					    &v);
	else if (strcmp(op, "trim") == 0)
		rc = hipMemPoolTrimTo(p, v);
	else if (strcmp(op, "destroy") == 0)
		rc = hipMemPoolDestroy(p);
	else if (strcmp(op, "reserved") == 0) {
		v = 0;
		rc = hipMemPoolGetAttribute(p, hipMemPoolAttrReservedMemCurrent,
					    &v);
		printf("pool %d bytes=%llu\n", (int)rc, (unsigned long long)v);
		return;
	} else
		rc = hipErrorInvalidValue;
	printf("pool %d\n", (int)rc);
}

/* The program's own offload bundle (its .hip_fatbin section, read from
 * /proc/self/exe, kept), for the module launches; NULL if not found. */
static const void *own_bundle(void)
{
	static char *image;
	FILE *f = image ? NULL : fopen("/proc/self/exe", "rb");
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	long size;

	if (!f)
		return image;
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) <= 0 ||
	    fseek(f, 0, SEEK_SET) || !(image = (char *)malloc(size)) ||
	    fread(image, 1, size, f) != (size_t)size) {
		fclose(f);
		return NULL;
	}
	fclose(f);
	eh = (const Elf64_Ehdr *)image;
	sh = (const Elf64_Shdr *)(image + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++)
		if (strcmp(image + sh[eh->e_shstrndx].sh_offset +
			   sh[i].sh_name, ".hip_fatbin") == 0)
			return image + sh[i].sh_offset;
	return NULL;
}

/* vgpu_spin of the program's own code object, loaded once. */
static hipError_t spin_function(hipFunction_t *fn)
{
	static hipFunction_t spin;
	hipModule_t m;
	const void *bundle = spin ? NULL : own_bundle();
	hipError_t rc = hipSuccess;

	if (!spin && !bundle)
		return hipErrorNotFound;
	if (!spin && (rc = hipModuleLoadData(&m, bundle)) == hipSuccess)
		rc = hipModuleGetFunction(&spin, m, "vgpu_spin");
	*fn = spin;
	return rc;
}

#pragma clang diagnostic ignored "-Wdeprecated-declarations"

/* One vgpu_spin of ns nanoseconds on s through entry how. */
static hipError_t spin_once(const char *how, unsigned long long ns,
			    hipStream_t s)
{
	unsigned long long *times = NULL;
	void *args[] = { &ns, &times };
	hipLaunchParams one = { (void *)vgpu_spin, dim3(1), dim3(64), args, 0,
				s };
	hipFunction_t fn;
	hipError_t rc;

	if (strcmp(how, "ggl") == 0) {
		hipLaunchKernelGGL(vgpu_spin, dim3(1), dim3(64), 0, s, ns,
				   (unsigned long long *)NULL);
		return hipGetLastError();
	}
	if (strcmp(how, "spt") == 0)
		return hipLaunchKernel_spt((const void *)vgpu_spin, dim3(1),
					   dim3(64), args, 0, NULL);
	if (strcmp(how, "coopspt") == 0)
		return hipLaunchCooperativeKernel_spt((const void *)vgpu_spin,
						      dim3(1), dim3(64), args,
						      0, NULL);
	if (strcmp(how, "coopmulti") == 0)
		return hipLaunchCooperativeKernelMultiDevice(&one, 1, 0);
	if (strcmp(how, "extmulti") == 0)
		return hipExtLaunchMultiKernelMultiDevice(&one, 1, 0);
	if ((rc = spin_function(&fn)) != hipSuccess)
		return rc;
	if (strcmp(how, "extmodule") == 0)
		return hipExtModuleLaunchKernel(fn, 64, 1, 1, 64, 1, 1, 0, s,
						args, NULL);
	if (strcmp(how, "hccmodule") == 0)
		return hipHccModuleLaunchKernel(fn, 64, 1, 1, 64, 1, 1, 0, s,
						args, NULL);
	return hipErrorInvalidValue;
}

/* The per-thread entries launch on the null stream, which is the
 * thread's: timed there (hipStreamPerThread). */
static void cmd_spin(const char *us_s, const char *count_s, const char *how)
{
	unsigned long long ns = us_s ? strtoull(us_s, NULL, 0) * 1000 : 0;
	long count = count_s ? strtol(count_s, NULL, 0) : 1;
	bool spt = how && strstr(how, "spt");
	hipEvent_t start = NULL, end = NULL;
	hipStream_t s = hipStreamPerThread;
	float ms = 0;
	hipError_t rc = spt ? hipSuccess : hipStreamCreate(&s);

	if (rc == hipSuccess)
		rc = hipEventCreate(&start);
	if (rc == hipSuccess)
		rc = hipEventCreate(&end);
	if (rc == hipSuccess)
		rc = hipEventRecord(start, s);
	for (long i = 0; rc == hipSuccess && i < count; i++)
		rc = spin_once(how ? how : "ggl", ns, s);
	if (rc == hipSuccess)
		rc = hipEventRecord(end, s);
	if (rc == hipSuccess)
		rc = hipEventSynchronize(end);
	if (rc == hipSuccess)
		rc = hipEventElapsedTime(&ms, start, end);
	if (start)
		(void)hipEventDestroy(start);
	if (end)
		(void)hipEventDestroy(end);
	if (!spt && s)
		(void)hipStreamDestroy(s);
	printf("spin %d ms=%.3f\n", (int)rc, ms);
}

static void cmd_saxpy(const char *n_s)
{
	unsigned long long n = n_s ? strtoull(n_s, NULL, 0) : 1024, bad = 0;
	size_t bytes = n * sizeof(float);
	float *x = (float *)malloc(bytes), *y = (float *)malloc(bytes);
	float *dx = NULL, *dy = NULL;
	hipError_t rc = hipMalloc(&dx, bytes);

	for (unsigned long long i = 0; i < n; i++) {
		x[i] = (float)i;
		y[i] = 1.0f;
	}
	if (rc == hipSuccess)
		rc = hipMalloc(&dy, bytes);
	if (rc == hipSuccess)
		rc = hipMemcpy(dx, x, bytes, hipMemcpyHostToDevice);
	if (rc == hipSuccess)
		rc = hipMemcpy(dy, y, bytes, hipMemcpyHostToDevice);
	if (rc == hipSuccess) {
		hipLaunchKernelGGL(vgpu_saxpy, dim3(16), dim3(128), 0, 0, n,
				   2.0f, (const float *)dx, dy);
		rc = hipGetLastError();
	}
	if (rc == hipSuccess)
		rc = hipMemcpy(y, dy, bytes, hipMemcpyDeviceToHost);
	for (unsigned long long i = 0; rc == hipSuccess && i < n; i++)
		bad += y[i] != 2.0f * (float)i + 1.0f;
	(void)hipFree(dx);
	(void)hipFree(dy);
	free(x);
	free(y);
	printf("saxpy %d bad=%llu\n", (int)rc, bad);
}

static void cmd_device(void)
{
	hipDeviceProp_t p;
	int count = 0;
	hipError_t rc = hipGetDeviceCount(&count);

	memset(&p, 0, sizeof(p));
	if (rc == hipSuccess)
		rc = hipGetDeviceProperties(&p, 0);
	printf("device %d count=%d mem=%zu cus=%d arch=%s name=%s\n", (int)rc,
	       count, p.totalGlobalMem, p.multiProcessorCount, p.gcnArchName,
	       p.name);
}

/* ---- vmm: virtual-memory handles and their mappings --------------------- */

#define MAX_HANDLES 32
#define MAX_MAPS 4

struct vhandle {
	bool used;
	bool own;		/* hipMemCreate's reference not released */
	hipMemGenericAllocationHandle_t h;	/* its value, kept after */
	size_t size;
	void *va[MAX_MAPS];	/* its mappings, newest last */
	int maps;
	int retained;		/* references from "retain" not dropped */
};
static struct vhandle vhandles[MAX_HANDLES];

static struct vhandle *vhandle_arg(const char *s)
{
	long id = s ? strtol(s, NULL, 0) : -1;

	if (id < 0 || id >= MAX_HANDLES || !vhandles[id].used)
		return NULL;
	return &vhandles[id];
}

static hipMemAllocationProp device_prop(void)
{
	hipMemAllocationProp p = {};

	p.type = hipMemAllocationTypePinned;
	p.location.type = hipMemLocationTypeDevice;
	p.location.id = 0;
	return p;
}

static void vmm_create(const char *size_s)
{
	hipMemAllocationProp p = device_prop();
	struct vhandle v = {};
	hipError_t rc;
	int id;

	for (id = 0; id < MAX_HANDLES && vhandles[id].used; id++)
		;
	if (id == MAX_HANDLES) {
		printf("vmm -1 full\n");
		return;
	}
	v.size = size_s ? parse_size(size_s) : 0;
	rc = hipMemCreate(&v.h, v.size, &p, 0);
	if (rc == hipSuccess) {
		v.used = true;
		v.own = true;
		vhandles[id] = v;
	}
	printf("vmm %d id=%d\n", (int)rc, rc == hipSuccess ? id : -1);
}

static hipError_t vmm_map(struct vhandle *v)
{
	hipMemAccessDesc d = {};
	void *va = NULL;
	hipError_t rc;

	if (v->maps == MAX_MAPS)
		return hipErrorInvalidValue;
	rc = hipMemAddressReserve(&va, v->size, 0, NULL, 0);
	if (rc != hipSuccess)
		return rc;
	rc = hipMemMap(va, v->size, 0, v->h, 0);
	if (rc == hipSuccess) {
		d.location.type = hipMemLocationTypeDevice;
		d.location.id = 0;
		d.flags = hipMemAccessFlagsProtReadWrite;
		rc = hipMemSetAccess(va, v->size, &d, 1);
		if (rc != hipSuccess)
			hipMemUnmap(va, v->size);
	}
	if (rc != hipSuccess) {
		hipMemAddressFree(va, v->size);
		return rc;
	}
	v->va[v->maps++] = va;
	return hipSuccess;
}

static hipError_t vmm_unmap(struct vhandle *v)
{
	void *va;
	hipError_t rc;

	if (!v->maps)
		return hipErrorInvalidValue;
	va = v->va[v->maps - 1];
	rc = hipMemUnmap(va, v->size);
	if (rc != hipSuccess)
		return rc;
	v->maps--;
	return hipMemAddressFree(va, v->size);
}

/* Forgets the handle once nothing of it is left to the job. */
static void vmm_forget(struct vhandle *v)
{
	if (!v->own && !v->maps && !v->retained)
		v->used = false;
}

static void vmm_touch(struct vhandle *v, const char *seed_s)
{
	unsigned seed = seed_s ? (unsigned)strtoul(seed_s, NULL, 0) : 1;
	unsigned long long bad;
	hipError_t rc;

	if (!v->maps) {
		printf("vmm -1 not mapped\n");
		return;
	}
	rc = touch_check(v->va[v->maps - 1], v->size / sizeof(unsigned), seed,
			 &bad);
	printf("vmm %d bad=%llu\n", (int)rc, bad);
}

static void cmd_vmm(const char *op, const char *arg, const char *arg2)
{
	struct vhandle *v;
	hipError_t rc = hipSuccess;

	if (op && strcmp(op, "create") == 0) {
		vmm_create(arg);
		return;
	}
	if (!op || !(v = vhandle_arg(arg))) {
		printf("vmm -1 no such handle\n");
		return;
	}
	if (strcmp(op, "touch") == 0) {
		vmm_touch(v, arg2);
		return;
	}
	if (strcmp(op, "map") == 0) {
		rc = vmm_map(v);
	} else if (strcmp(op, "unmap") == 0) {
		rc = vmm_unmap(v);
	} else if (strcmp(op, "release") == 0) {
		rc = v->own ? hipMemRelease(v->h) : hipErrorInvalidValue;
		if (rc == hipSuccess)
			v->own = false;
	} else if (strcmp(op, "retain") == 0) {
		hipMemGenericAllocationHandle_t r = NULL;

		if (!v->maps) {
			printf("vmm -1 not mapped\n");
			return;
		}
		rc = hipMemRetainAllocationHandle(&r, v->va[v->maps - 1]);
		if (rc == hipSuccess)
			v->retained++;
		printf("vmm %d same=%d\n", (int)rc,
		       rc == hipSuccess && r == v->h);
		return;
	} else if (strcmp(op, "drop") == 0) {
		/* A retained reference is released by the handle's value. */
		rc = v->retained ? hipMemRelease(v->h) : hipErrorInvalidValue;
		if (rc == hipSuccess)
			v->retained--;
	} else {
		printf("vmm -1 unknown %s\n", op);
		return;
	}
	vmm_forget(v);
	printf("vmm %d\n", (int)rc);
}

/* Runs one command line; false: exit. */
static bool run(char *line)
{
	char *args[4] = { NULL, NULL, NULL, NULL };
	char *save = NULL;
	const char *cmd = strtok_r(line, " \t\r\n", &save);

	if (!cmd)
		return true;
	for (int i = 0; i < 4; i++)
		args[i] = strtok_r(NULL, " \t\r\n", &save);
	if (strcmp(cmd, "alloc") == 0)
		cmd_alloc(args[0], args[1]);
	else if (strcmp(cmd, "free") == 0)
		cmd_free(args[0]);
	else if (strcmp(cmd, "vmm") == 0)
		cmd_vmm(args[0], args[1], args[2]);
	else if (strcmp(cmd, "memgetinfo") == 0)
		cmd_memgetinfo();
	else if (strcmp(cmd, "totalmem") == 0)
		cmd_totalmem();
	else if (strcmp(cmd, "copy") == 0)
		cmd_copy(args[0]);
	else if (strcmp(cmd, "touch") == 0)
		cmd_touch(args[0], args[1]);
	else if (strcmp(cmd, "spin") == 0)
		cmd_spin(args[0], args[1], args[2]);
	else if (strcmp(cmd, "pool") == 0)
		cmd_pool(args[0], args[1]);
	else if (strcmp(cmd, "saxpy") == 0)
		cmd_saxpy(args[0]);
	else if (strcmp(cmd, "sync") == 0)
		printf("sync %d\n", (int)hipDeviceSynchronize());
	else if (strcmp(cmd, "pid") == 0)
		printf("pid 0 pid=%d\n", (int)getpid());
	else if (strcmp(cmd, "device") == 0)
		cmd_device();
	else if (strcmp(cmd, "exit") == 0) {
		printf("exit 0\n");
		return false;
	} else
		printf("%s -1 unknown\n", cmd);
	return true;
}

int main(int argc, char **argv)
{
	char line[512];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1) {
		for (int i = 1; i < argc; i++) {
			snprintf(line, sizeof(line), "%s", argv[i]);
			if (!run(line))
				break;
		}
		return 0;
	}
	while (fgets(line, sizeof(line), stdin))
		if (!run(line))
			break;
	return 0;
}
