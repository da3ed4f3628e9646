/* test_ipc.c - legacy IPC: cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle between processes. The memory is one memory in both
 * (writes seen both ways), the handle's bytes name it, and the device counts
 * it once for as long as any process holds it, whatever the order in which
 * they let go, and however they end (killed, exited).
 *
 * The other processes are peers (ipc_common.h) that the test drives step by
 * step; after every step the test reads the device's used memory, as
 * cuMemGetInfo reports it for all processes, and wants it exact: cuMemAlloc
 * counts whole 4 KiB pages.
 */
#include "simtest.h"
#include "ipc_common.h"

#include <stdlib.h>
#include <string.h>

#ifdef SIMTEST_KERNELS
#include "vgpu_kernels.h"
#endif

TestSuite(ipc, .init = simtest_clean_env, .fini = simtest_remove_state);

#define PAGE 4096ull

static uint64_t pages(uint64_t n)
{
	return (n + PAGE - 1) / PAGE * PAGE;
}

/* What every process together holds on device 0. */
static uint64_t used(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	return total - free_b;
}

static void start(struct peer *p)
{
	cr_assert_eq(peer_start(p), 0, "the peer did not start");
}

static CUresult peer_open_rc(struct peer *p, const CUipcMemHandle *h,
			     CUdeviceptr *out)
{
	struct peer_msg m = { .op = PEER_IPC_OPEN, .handle = *h };
	CUresult rc = peer_do(p, &m, -1, NULL);

	*out = m.a;
	return rc;
}

static CUdeviceptr peer_open(struct peer *p, const CUipcMemHandle *h)
{
	CUdeviceptr q = 0;

	CU_OK(peer_open_rc(p, h, &q));
	cr_assert_neq(q, 0);
	return q;
}

static CUipcMemHandle peer_export(struct peer *p, CUdeviceptr ptr)
{
	struct peer_msg m = { .op = PEER_IPC_GET, .a = ptr };

	CU_OK(peer_do(p, &m, -1, NULL));
	return m.handle;
}

static CUdeviceptr peer_alloc(struct peer *p, uint64_t bytes)
{
	uint64_t q = 0;

	CU_OK(peer_run(p, PEER_ALLOC, bytes, 0, 0, &q));
	return q;
}

static void checked(CUdeviceptr p, size_t n, unsigned char v)
{
	CU_OK(ipc_check(p, n, v));
}

/* ---- one process -------------------------------------------------------- */

/* The same memory gives the same bytes (from any pointer into it), and
 * exporting moves nothing: contents and count stay. New memory at the same
 * address gives new bytes. */
Test(ipc, handle_names_the_memory)
{
	CUipcMemHandle h1, h2, h3, h4;
	CUdeviceptr p, q;
	int capable = 0;

	simtest_init();
	CU_OK(cuMemAlloc(&p, MIB + 1));
	cr_assert_eq(used(), MIB + PAGE);
	CU_OK(cuMemsetD8(p, 0x5a, 3 * PAGE));   /* the rest never written */
	CU_OK(cuPointerGetAttribute(&capable,
		CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
	cr_assert_eq(capable & 0xff, 1);
	CU_OK(cuIpcGetMemHandle(&h1, p));
	CU_OK(cuIpcGetMemHandle(&h2, p));
	CU_OK(cuIpcGetMemHandle(&h3, p + 12345));
	cr_assert_eq(memcmp(&h1, &h2, sizeof(h1)), 0);
	cr_assert_eq(memcmp(&h1, &h3, sizeof(h1)), 0);
	cr_assert_eq(used(), MIB + PAGE);
	checked(p, 3 * PAGE, 0x5a);
	checked(p + 3 * PAGE, MIB + 1 - 3 * PAGE, 0);
	CU_OK(cuMemsetD8(p + MIB, 0x6b, 1));    /* still writable */
	checked(p + MIB, 1, 0x6b);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 0);
	CU_OK(cuMemAlloc(&q, MIB + 1));
	CU_OK(cuIpcGetMemHandle(&h4, q));
	cr_assert_neq(memcmp(&h1, &h4, sizeof(h1)), 0,
		      "new memory%s, same handle",
		      q == p ? " at the same address" : "");
	CU_OK(cuMemFree(q));
	cr_assert_eq(used(), 0);
}

/* Pitched memory is cuMemAlloc memory too. */
Test(ipc, pitched_memory_exports)
{
	CUipcMemHandle h;
	CUdeviceptr p;
	size_t pitch;

	simtest_init();
	CU_OK(cuMemAllocPitch(&p, &pitch, 1000, 300, 4));
	cr_assert_eq(pitch, 1024);
	CU_OK(cuIpcGetMemHandle(&h, p));
	cr_assert_eq(used(), pages(1024 * 300));
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 0);
}

Test(ipc, what_cannot_be_exported)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUmemGenericAllocationHandle vh;
	CUdeviceptr managed, pooled, va;
	CUipcMemHandle h;
	void *host;
	int local = 0;

	simtest_init();
	CU_ASSERT(cuIpcGetMemHandle(&h, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)&local),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocManaged(&managed, MIB, CU_MEM_ATTACH_GLOBAL));
	CU_ASSERT(cuIpcGetMemHandle(&h, managed), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocHost(&host, MIB));
	CU_ASSERT(cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)host),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemAllocAsync(&pooled, MIB, NULL));
	CU_ASSERT(cuIpcGetMemHandle(&h, pooled), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemCreate(&vh, IPC_GRAN, &prop, 0));
	CU_OK(ipc_vmm_map(vh, IPC_GRAN, &va));
	CU_ASSERT(cuIpcGetMemHandle(&h, va), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuIpcGetMemHandle(NULL, managed), CUDA_ERROR_INVALID_VALUE);
	CU_OK(ipc_vmm_unmap(va, IPC_GRAN));
	CU_OK(cuMemRelease(vh));
	CU_OK(cuMemFreeAsync(pooled, NULL));
	CU_OK(cuMemFree(managed));
	CU_OK(cuMemFreeHost(host));
}

/* Every bit of a handle matters, and no bytes crash the driver. */
Test(ipc, bad_handles_are_refused)
{
	CUipcMemHandle h, bad;
	CUdeviceptr p, q = 0;
	CUcontext ctx;
	int v = 1;

	srand(20240611);
	simtest_init();
	CU_OK(cuMemAlloc(&p, MIB));
	CU_OK(cuIpcGetMemHandle(&h, p));
	/* The exporter itself may not open it. */
	CU_ASSERT(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		  CUDA_ERROR_INVALID_CONTEXT);
	for (int i = 0; i < CU_IPC_HANDLE_SIZE * 8; i++) {
		bad = h;
		bad.reserved[i / 8] ^= (char)(1 << (i % 8));
		CU_ASSERT(cuIpcOpenMemHandle(&q, bad, 0),
			  CUDA_ERROR_INVALID_HANDLE);
	}
	for (int i = 0; i < 1000; i++) {
		for (int j = 0; j < CU_IPC_HANDLE_SIZE; j++)
			bad.reserved[j] = (char)rand();
		CU_ASSERT(cuIpcOpenMemHandle(&q, bad, 0),
			  CUDA_ERROR_INVALID_HANDLE);
	}
	memset(&bad, 0, sizeof(bad));
	CU_ASSERT(cuIpcOpenMemHandle(&q, bad, 0), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuIpcOpenMemHandle(&q, h, 2), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuIpcOpenMemHandle(NULL, h, 0), CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(q, 0);
	CU_ASSERT(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuIpcCloseMemHandle(0), CUDA_ERROR_INVALID_VALUE);
	/* Events are not shared. */
	CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 0));
	cr_assert_eq(v, 0);
	CU_ASSERT(cuIpcGetEventHandle(NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 0);
	CU_OK(cuCtxPopCurrent(&ctx));
	CU_ASSERT(cuIpcOpenMemHandle(&q, h, 0), CUDA_ERROR_INVALID_CONTEXT);
}

/* Device 1's memory opened in a context of device 0 would need peer
 * access, which the simulated devices lack. */
Test(ipc, other_device_needs_peer_access)
{
	CUcontext c1;
	CUdeviceptr p, q;
	CUipcMemHandle h;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	simtest_init();
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	CU_OK(cuCtxPushCurrent(c1));
	CU_OK(cuMemAlloc(&p, MIB));
	CU_OK(cuIpcGetMemHandle(&h, p));
	CU_OK(cuCtxPopCurrent(&c1));
	CU_ASSERT(cuIpcOpenMemHandle(&q, h, 0),
		  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
}

/* ---- two processes ------------------------------------------------------ */

/* Writes by copies, memsets (and a kernel) in either process are the
 * other's. */
Test(ipc, writes_are_seen_both_ways)
{
	const size_t n = 3 * MIB + 100;
	unsigned char buf[256];
	struct peer peer;
	CUipcMemHandle h;
	CUdeviceptr p, q;

	simtest_init_shared();
	start(&peer);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(ipc_fill(p, n, 0x11));
	CU_OK(cuIpcGetMemHandle(&h, p));
	q = peer_open(&peer, &h);
	cr_assert_eq(used(), pages(n));
	CU_OK(peer_run(&peer, PEER_CHECK, q, n, 0x11, NULL));
	CU_OK(peer_run(&peer, PEER_FILL, q, n, 0x22, NULL));
	checked(p, n, 0x22);
	memset(buf, 0x33, sizeof(buf));
	CU_OK(cuMemcpyHtoD(p + n - sizeof(buf), buf, sizeof(buf)));
	CU_OK(peer_run(&peer, PEER_CHECK, q + n - sizeof(buf), sizeof(buf),
		       0x33, NULL));
	CU_OK(peer_run(&peer, PEER_CHECK, q, n - sizeof(buf), 0x22, NULL));
	cr_assert_eq(used(), pages(n));
	CU_OK(peer_run(&peer, PEER_IPC_CLOSE, q, 0, 0, NULL));
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 0);
	cr_assert_eq(peer_exit(&peer), 0);
}

#ifdef SIMTEST_KERNELS
/* A kernel in the importer writes the exporter's memory. */
Test(ipc, kernel_writes_are_seen)
{
	unsigned long long n = MIB / sizeof(uint32_t);
	unsigned seed = 0, write = 9;
	struct peer peer;
	CUipcMemHandle h;
	CUdeviceptr p, q, none = 0;
	void *params[] = { &q, &n, &seed, &write, &none };
	CUmodule mod;
	CUfunction f;

	simtest_init_shared();
	start(&peer);
	CU_OK(cuModuleLoadData(&mod, vgpu_kernels_fatbin));
	CU_OK(cuModuleGetFunction(&f, mod, "vgpu_touch"));
	p = peer_alloc(&peer, MIB);
	h = peer_export(&peer, p);
	CU_OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CU_OK(cuLaunchKernel(f, 64, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
	CU_OK(cuCtxSynchronize());
	CU_OK(peer_run(&peer, PEER_CHECK_TOUCH, p, n, 9, NULL));
	CU_OK(cuIpcCloseMemHandle(q));
	cr_assert_eq(used(), MIB);
	cr_assert_eq(peer_exit(&peer), 0);
	cr_assert_eq(used(), 0);
}
#endif

/* The exporter frees first: the importer keeps the memory, counted, until
 * it closes it; meanwhile the handle opens nowhere else (the exporter let
 * go of it). */
Test(ipc, exporter_frees_first)
{
	const size_t n = 5 * MIB;
	struct peer a, b;
	CUipcMemHandle h;
	CUdeviceptr p, q, r;

	simtest_init_shared();
	start(&a);
	start(&b);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(ipc_fill(p, n, 0x44));
	CU_OK(cuIpcGetMemHandle(&h, p));
	q = peer_open(&a, &h);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), n, "the importer's memory went");
	CU_OK(peer_run(&a, PEER_CHECK, q, n, 0x44, NULL));
	CU_OK(peer_run(&a, PEER_FILL, q, n, 0x45, NULL));
	CU_ASSERT(peer_open_rc(&b, &h, &r), CUDA_ERROR_INVALID_HANDLE);
	cr_assert_eq(used(), n);
	CU_OK(peer_run(&a, PEER_IPC_CLOSE, q, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	CU_ASSERT(peer_run(&a, PEER_IPC_CLOSE, q, 0, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(peer_open_rc(&a, &h, &r), CUDA_ERROR_INVALID_HANDLE);
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(peer_exit(&b), 0);
	cr_assert_eq(used(), 0);
}

/* The importer closes first: nothing changes until the exporter frees. */
Test(ipc, importer_closes_first)
{
	const size_t n = 2 * MIB + 1;
	struct peer a;
	CUipcMemHandle h;
	CUdeviceptr p, q;

	simtest_init_shared();
	start(&a);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(cuIpcGetMemHandle(&h, p));
	q = peer_open(&a, &h);
	cr_assert_eq(used(), pages(n));
	CU_OK(peer_run(&a, PEER_FILL, q, n, 0x55, NULL));
	CU_OK(peer_run(&a, PEER_IPC_CLOSE, q, 0, 0, NULL));
	cr_assert_eq(used(), pages(n));
	checked(p, n, 0x55);
	/* It opens again while the exporter holds the memory. */
	q = peer_open(&a, &h);
	CU_OK(peer_run(&a, PEER_CHECK, q, n, 0x55, NULL));
	CU_OK(peer_run(&a, PEER_IPC_CLOSE, q, 0, 0, NULL));
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 0);
	cr_assert_eq(peer_exit(&a), 0);
}

/* Opened twice in one context: the same pointer, and each open needs its
 * close. */
Test(ipc, opened_twice_needs_two_closes)
{
	const size_t n = MIB;
	struct peer a;
	CUipcMemHandle h;
	CUdeviceptr p, q1, q2;

	simtest_init_shared();
	start(&a);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(ipc_fill(p, n, 0x66));
	CU_OK(cuIpcGetMemHandle(&h, p));
	q1 = peer_open(&a, &h);
	q2 = peer_open(&a, &h);
	cr_assert_eq(q1, q2);
	cr_assert_eq(used(), n);
	CU_OK(peer_run(&a, PEER_IPC_CLOSE, q1, 0, 0, NULL));
	CU_OK(peer_run(&a, PEER_CHECK, q1, n, 0x66, NULL));
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), n, "one open is left");
	CU_OK(peer_run(&a, PEER_CHECK, q1, n, 0x66, NULL));
	CU_OK(peer_run(&a, PEER_IPC_CLOSE, q1, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	CU_ASSERT(peer_run(&a, PEER_IPC_CLOSE, q1, 0, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	/* Imported memory is closed, not freed. */
	CU_ASSERT(peer_run(&a, PEER_FREE, q1, 0, 0, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(peer_exit(&a), 0);
}

/* The exporter is killed: the importer keeps the memory, counted, and its
 * contents, until it closes it; the handle opens nowhere else. */
Test(ipc, killed_exporter_leaves_memory_to_importer)
{
	const size_t n = 4 * MIB + 3 * PAGE;
	struct peer a, b;
	CUipcMemHandle h;
	CUdeviceptr p, q, r;

	simtest_init_shared();
	start(&a);
	start(&b);
	p = peer_alloc(&a, n);
	CU_OK(peer_run(&a, PEER_FILL, p, n, 0x77, NULL));
	h = peer_export(&a, p);
	CU_OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	cr_assert_eq(used(), n);
	cr_assert_eq(peer_kill(&a), 0);
	cr_assert_eq(used(), n);
	checked(q, n, 0x77);
	CU_OK(ipc_fill(q, n, 0x78));
	checked(q, n, 0x78);
	CU_ASSERT(peer_open_rc(&b, &h, &r), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuIpcCloseMemHandle(q));
	cr_assert_eq(used(), 0);
	cr_assert_eq(peer_exit(&b), 0);
}

/* The importer is killed: the exporter's free returns the device to where
 * it was. */
Test(ipc, killed_importer_leaves_memory_to_exporter)
{
	const size_t n = 6 * MIB;
	struct peer a;
	CUipcMemHandle h;
	CUdeviceptr p, q, keep;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&keep, MIB));   /* a baseline that is not zero */
	start(&a);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(cuIpcGetMemHandle(&h, p));
	q = peer_open(&a, &h);
	CU_OK(peer_run(&a, PEER_FILL, q, n, 0x88, NULL));
	cr_assert_eq(peer_kill(&a), 0);
	cr_assert_eq(used(), MIB + n);
	checked(p, n, 0x88);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), MIB);
	CU_OK(cuMemFree(keep));
	cr_assert_eq(used(), 0);
}

/* The same after the exporter freed: the importer's death frees it. */
Test(ipc, killed_importer_was_the_last_holder)
{
	const size_t n = 6 * MIB;
	struct peer a;
	CUipcMemHandle h;
	CUdeviceptr p;

	simtest_init_shared();
	start(&a);
	CU_OK(cuMemAlloc(&p, n));
	CU_OK(cuIpcGetMemHandle(&h, p));
	peer_open(&a, &h);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), n);
	cr_assert_eq(peer_kill(&a), 0);
	cr_assert_eq(used(), 0);
}

/* Processes that end normally, holding: an importer's open and an
 * exporter's allocation each go with their process. */
Test(ipc, exiting_processes_let_go)
{
	struct peer a, b;
	CUipcMemHandle h;
	CUdeviceptr p, q, x;

	simtest_init_shared();
	start(&a);
	start(&b);
	CU_OK(cuMemAlloc(&p, MIB));
	CU_OK(cuIpcGetMemHandle(&h, p));
	peer_open(&a, &h);
	x = peer_alloc(&b, 2 * MIB);
	CU_OK(peer_run(&b, PEER_FILL, x, 2 * MIB, 0x99, NULL));
	h = peer_export(&b, x);
	CU_OK(cuIpcOpenMemHandle(&q, h, 0));
	cr_assert_eq(used(), 3 * MIB);
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(used(), 3 * MIB);
	cr_assert_eq(peer_exit(&b), 0);
	cr_assert_eq(used(), 3 * MIB);
	checked(q, 2 * MIB, 0x99);
	CU_OK(cuMemFree(p));
	cr_assert_eq(used(), 2 * MIB);
	CU_OK(cuIpcCloseMemHandle(q));
	cr_assert_eq(used(), 0);
}

/* ---- random release orders ------------------------------------------------ */

#define PROCS 3     /* 0: this process; 1, 2: peers */
#define OBJS 4      /* 0-2 exported here, 3 by peer 1 */

struct obj {
	int exporter;
	bool exported;              /* the exporter still holds it */
	uint64_t size;              /* as asked */
	unsigned char v;
	CUdeviceptr ptr[PROCS];
	int opens[PROCS];
	CUipcMemHandle h;
};

struct world {
	struct peer peers[PROCS];   /* [0] unused */
	bool alive[PROCS];
	struct obj o[OBJS];
};

enum act_kind { ACT_FREE, ACT_CLOSE, ACT_KILL };

struct act {
	enum act_kind kind;
	int proc, obj;
};

static bool held(const struct world *w, const struct obj *o)
{
	if (o->exported && w->alive[o->exporter])
		return true;
	for (int p = 0; p < PROCS; p++)
		if (w->alive[p] && o->opens[p])
			return true;
	return false;
}

static uint64_t expected(const struct world *w)
{
	uint64_t sum = 0;

	for (int i = 0; i < OBJS; i++)
		if (held(w, &w->o[i]))
			sum += pages(w->o[i].size);
	return sum;
}

static CUresult on(struct world *w, int proc, int op, uint64_t a, uint64_t b,
		   uint64_t c)
{
	return peer_run(&w->peers[proc], op, a, b, c, NULL);
}

static void setup(struct world *w)
{
	static const uint64_t sizes[OBJS] = {
		MIB + 1, 3 * MIB, 2 * MIB + PAGE - 1, 5 * MIB - 100,
	};

	memset(w, 0, sizeof(*w));
	w->alive[0] = true;
	for (int p = 1; p < PROCS; p++) {
		start(&w->peers[p]);
		w->alive[p] = true;
	}
	for (int i = 0; i < OBJS; i++) {
		struct obj *o = &w->o[i];
		o->exporter = i < 3 ? 0 : 1;
		o->exported = true;
		o->size = sizes[i];
		o->v = (unsigned char)(0x10 * (i + 1) + 1);
		if (o->exporter == 0) {
			CU_OK(cuMemAlloc(&o->ptr[0], o->size));
			CU_OK(ipc_fill(o->ptr[0], o->size, o->v));
			CU_OK(cuIpcGetMemHandle(&o->h, o->ptr[0]));
		} else {
			o->ptr[1] = peer_alloc(&w->peers[1], o->size);
			CU_OK(on(w, 1, PEER_FILL, o->ptr[1], o->size, o->v));
			o->h = peer_export(&w->peers[1], o->ptr[1]);
		}
	}
}

/* Each importer opens each object 0, 1 or 2 times. */
static void open_some(struct world *w)
{
	for (int i = 0; i < OBJS; i++) {
		struct obj *o = &w->o[i];
		for (int p = 0; p < PROCS; p++) {
			int n = p == o->exporter ? 0 : rand() % 3;
			for (int k = 0; k < n; k++) {
				if (p == 0)
					CU_OK(cuIpcOpenMemHandle(&o->ptr[0], o->h, 0));
				else
					o->ptr[p] = peer_open(&w->peers[p], &o->h);
			}
			o->opens[p] = n;
		}
	}
}

static int plan(struct world *w, struct act *acts)
{
	int n = 0;

	for (int i = 0; i < OBJS; i++) {
		acts[n++] = (struct act){ ACT_FREE, w->o[i].exporter, i };
		for (int p = 0; p < PROCS; p++)
			for (int k = 0; k < w->o[i].opens[p]; k++)
				acts[n++] = (struct act){ ACT_CLOSE, p, i };
	}
	for (int p = 1; p < PROCS; p++)
		if (rand() % 2)
			acts[n++] = (struct act){ ACT_KILL, p, -1 };
	for (int i = n - 1; i > 0; i--) {
		int j = rand() % (i + 1);
		struct act t = acts[i];
		acts[i] = acts[j];
		acts[j] = t;
	}
	return n;
}

static void act(struct world *w, const struct act *a)
{
	struct obj *o = a->obj >= 0 ? &w->o[a->obj] : NULL;
	int p = a->proc;

	if (!w->alive[p])
		return;
	switch (a->kind) {
	case ACT_FREE:
		if (p == 0)
			CU_OK(cuMemFree(o->ptr[0]));
		else
			CU_OK(on(w, p, PEER_FREE, o->ptr[p], 0, 0));
		o->exported = false;
		break;
	case ACT_CLOSE:
		if (p == 0)
			CU_OK(cuIpcCloseMemHandle(o->ptr[0]));
		else
			CU_OK(on(w, p, PEER_IPC_CLOSE, o->ptr[p], 0, 0));
		o->opens[p]--;
		break;
	case ACT_KILL:
		cr_assert_eq(peer_kill(&w->peers[p]), 0);
		w->alive[p] = false;
		break;
	}
}

/* Every object still held has its contents, in one of its holders. */
static void contents_kept(struct world *w)
{
	for (int i = 0; i < OBJS; i++) {
		struct obj *o = &w->o[i];
		for (int p = 0; p < PROCS; p++) {
			bool holds = w->alive[p] && (o->opens[p] ||
				(o->exporter == p && o->exported));
			if (!holds)
				continue;
			if (p == 0)
				checked(o->ptr[0], o->size, o->v);
			else
				CU_OK(on(w, p, PEER_CHECK, o->ptr[p], o->size,
					 o->v));
			break;
		}
	}
}

Test(ipc, random_release_orders, .timeout = 30)
{
	struct act acts[OBJS * (1 + 2 * PROCS) + PROCS];
	struct world w;

	simtest_init_shared();
	for (unsigned seed = 1; seed <= 8; seed++) {
		int n;

		srand(seed);
		setup(&w);
		open_some(&w);
		n = plan(&w, acts);
		cr_assert_eq(used(), expected(&w), "seed %u: before", seed);
		for (int i = 0; i < n; i++) {
			act(&w, &acts[i]);
			cr_assert_eq(used(), expected(&w),
				     "seed %u, step %d (%d by %d of %d)", seed,
				     i, acts[i].kind, acts[i].proc, acts[i].obj);
			contents_kept(&w);
		}
		cr_assert_eq(used(), 0, "seed %u: all let go", seed);
		for (int p = 1; p < PROCS; p++)
			if (w.alive[p])
				cr_assert_eq(peer_exit(&w.peers[p]), 0);
	}
}
