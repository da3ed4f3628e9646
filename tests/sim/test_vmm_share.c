/* test_vmm_share.c - VMM handles shared as file descriptors:
 * cuMemExportToShareableHandle and cuMemImportFromShareableHandle with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, in one process and between
 * processes (fds passed with SCM_RIGHTS, or inherited). Every fd of one
 * memory is one inode; the memory is one memory in every process; and the
 * device counts it once while any process holds a handle or a mapping of
 * it, whatever the order in which they let go, and however they end.
 *
 * The other processes are peers (ipc_common.h) driven step by step; the
 * test reads the device's used memory (cuMemGetInfo, every process's)
 * after each step. Handles are whole multiples of 2 MiB.
 */
#include "simtest.h"
#include "ipc_common.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(vmm_share, .init = simtest_clean_env, .fini = simtest_remove_state);

#define GRAN IPC_GRAN
#define FD_TYPE CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

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

static int export_fd(CUmemGenericAllocationHandle h)
{
	int fd = -1;

	CU_OK(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0));
	cr_assert_geq(fd, 0);
	return fd;
}

static CUmemGenericAllocationHandle import_fd(int fd)
{
	CUmemGenericAllocationHandle h = 0;

	CU_OK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
					     FD_TYPE));
	return h;
}

static CUresult import_rc(intptr_t fd)
{
	CUmemGenericAllocationHandle h;

	return cuMemImportFromShareableHandle(&h, (void *)fd, FD_TYPE);
}

static void same_inode(int a, int b, bool same)
{
	struct stat sa, sb;

	cr_assert_eq(fstat(a, &sa), 0);
	cr_assert_eq(fstat(b, &sb), 0);
	cr_assert(S_ISREG(sa.st_mode) && S_ISREG(sb.st_mode));
	cr_assert_eq(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino, same,
		     "fds %d and %d: inodes %lu and %lu", a, b,
		     (unsigned long)sa.st_ino, (unsigned long)sb.st_ino);
}

static CUdeviceptr mapped(CUmemGenericAllocationHandle h, size_t n)
{
	CUdeviceptr va;

	CU_OK(ipc_vmm_map(h, n, &va));
	return va;
}

/* The peer imports fd (sent with SCM_RIGHTS) and maps it: its address. */
static CUdeviceptr peer_import_map(struct peer *p, int fd, size_t n,
				   uint64_t *handle)
{
	struct peer_msg m = { .op = PEER_VMM_IMPORT };
	uint64_t va;

	CU_OK(peer_do(p, &m, fd, NULL));
	*handle = m.a;
	CU_OK(peer_run(p, PEER_VMM_MAP, *handle, n, 0, &va));
	return va;
}

/* The peer creates n bytes, maps and fills them, and exports an fd. */
static int peer_create_export(struct peer *p, size_t n, unsigned char v,
			      uint64_t *handle, uint64_t *va)
{
	struct peer_msg m = { .op = PEER_VMM_EXPORT };
	int fd = -1;

	CU_OK(peer_run(p, PEER_VMM_CREATE, n, 0, 0, handle));
	CU_OK(peer_run(p, PEER_VMM_MAP, *handle, n, 0, va));
	CU_OK(peer_run(p, PEER_FILL, *va, n, v, NULL));
	m.a = *handle;
	CU_OK(peer_do(p, &m, -1, &fd));
	cr_assert_geq(fd, 0);
	return fd;
}

/* ---- one process ---------------------------------------------------------- */

Test(vmm_share, attribute_and_handle_types)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUmemGenericAllocationHandle h;
	int v = 0, fd = -1;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&v,
		CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
	cr_assert_eq(v, 1);
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
	prop.requestedHandleTypes = FD_TYPE | CU_MEM_HANDLE_TYPE_FABRIC;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
	prop.requestedHandleTypes = 0x40;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	prop.requestedHandleTypes = FD_TYPE;
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	CU_ASSERT(cuMemCreate(&h, GRAN, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
	cr_assert_eq(used(), 0);
	/* Without the type asked for at creation, no export. */
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.requestedHandleTypes = 0;
	CU_OK(cuMemCreate(&h, GRAN, &prop, 0));
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(fd, -1);
	CU_OK(cuMemRelease(h));
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(used(), 0);
}

Test(vmm_share, export_errors)
{
	CUmemGenericAllocationHandle h;
	int fd = -1;

	simtest_init();
	CU_OK(ipc_vmm_create(GRAN, &h));
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, 0x40, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 1),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemExportToShareableHandle(NULL, h, FD_TYPE, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemExportToShareableHandle(&fd, 12345, FD_TYPE, 0),
		  CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(fd, -1);
	CU_OK(cuMemRelease(h));
}

/* No fd that is not a live object's memory is taken, and none crashes. */
Test(vmm_share, import_errors)
{
	CUmemGenericAllocationHandle h, got;
	char path[] = "/tmp/vgpu-vmm-share-XXXXXX";
	int pipefd[2], fd, own, tmp;

	simtest_init();
	CU_OK(ipc_vmm_create(GRAN, &h));
	fd = export_fd(h);
	CU_ASSERT(cuMemImportFromShareableHandle(NULL, (void *)(uintptr_t)fd,
						 FD_TYPE), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemImportFromShareableHandle(&got, (void *)(uintptr_t)fd,
						 CU_MEM_HANDLE_TYPE_FABRIC),
		  CUDA_ERROR_NOT_SUPPORTED);
	CU_ASSERT(cuMemImportFromShareableHandle(&got, (void *)(uintptr_t)fd,
						 0x40), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(import_rc(-1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(import_rc((intptr_t)1 << 40), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(import_rc(1000), CUDA_ERROR_INVALID_VALUE);  /* not open */
	cr_assert_eq(pipe(pipefd), 0);
	CU_ASSERT(import_rc(pipefd[0]), CUDA_ERROR_INVALID_VALUE);
	tmp = mkstemp(path);
	cr_assert_geq(tmp, 0);
	unlink(path);
	cr_assert_eq(ftruncate(tmp, GRAN), 0);
	CU_ASSERT(import_rc(tmp), CUDA_ERROR_INVALID_VALUE);
	own = memfd_create("not-the-driver's", 0);
	cr_assert_geq(own, 0);
	cr_assert_eq(ftruncate(own, GRAN), 0);
	CU_ASSERT(import_rc(own), CUDA_ERROR_INVALID_VALUE);
	/* Once nobody holds the memory, its fd is stale. */
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), 0);
	CU_ASSERT(import_rc(fd), CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(used(), 0);
	close(fd);
	close(own);
	close(tmp);
}

/* Each export is a new fd of one inode; other memory, another inode; an
 * import is a new handle to the same memory, with the original's
 * properties, and counts nothing more. */
Test(vmm_share, fds_of_one_memory_are_one_inode)
{
	CUmemAllocationProp p1, p2;
	CUmemGenericAllocationHandle h, h2, hi;
	CUdeviceptr va, vi;
	unsigned long long types = 0;
	int fd1, fd2, fd3, fd4;

	simtest_init();
	CU_OK(ipc_vmm_create(2 * GRAN, &h));
	CU_OK(ipc_vmm_create(GRAN, &h2));
	cr_assert_eq(used(), 3 * GRAN);
	fd1 = export_fd(h);
	fd2 = export_fd(h);
	cr_assert_neq(fd1, fd2);
	same_inode(fd1, fd2, true);
	cr_assert_eq(fcntl(fd1, F_GETFD) & FD_CLOEXEC, 0, "the caller's fd");
	fd3 = export_fd(h2);
	same_inode(fd1, fd3, false);
	hi = import_fd(fd1);
	cr_assert_neq(hi, h);
	cr_assert_eq(used(), 3 * GRAN);
	CU_OK(cuMemGetAllocationPropertiesFromHandle(&p1, h));
	CU_OK(cuMemGetAllocationPropertiesFromHandle(&p2, hi));
	cr_assert_eq(p2.type, p1.type);
	cr_assert_eq(p2.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
	cr_assert_eq(p2.location.id, 0);
	cr_assert_eq(p2.requestedHandleTypes, FD_TYPE);
	fd4 = export_fd(hi);
	same_inode(fd1, fd4, true);
	/* One memory behind both handles. */
	va = mapped(h, 2 * GRAN);
	vi = mapped(hi, 2 * GRAN);
	CU_OK(cuPointerGetAttribute(&types,
		CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va));
	cr_assert_eq(types, FD_TYPE);
	CU_OK(ipc_fill(va, 2 * GRAN, 0x31));
	CU_OK(ipc_check(vi, 2 * GRAN, 0x31));
	/* Released and unmapped in turn: counted until the last goes. */
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemRelease(hi));
	cr_assert_eq(used(), 3 * GRAN);
	CU_OK(ipc_vmm_unmap(va, 2 * GRAN));
	cr_assert_eq(used(), 3 * GRAN);
	CU_OK(ipc_check(vi, 2 * GRAN, 0x31));
	CU_OK(ipc_vmm_unmap(vi, 2 * GRAN));
	cr_assert_eq(used(), GRAN);
	CU_OK(cuMemRelease(h2));
	cr_assert_eq(used(), 0);
	CU_ASSERT(import_rc(fd4), CUDA_ERROR_INVALID_VALUE);
	close(fd1);
	close(fd2);
	close(fd3);
	close(fd4);
}

/* ---- two processes ----------------------------------------------------------- */

Test(vmm_share, writes_are_seen_both_ways)
{
	CUmemGenericAllocationHandle h;
	struct peer a;
	CUdeviceptr va;
	uint64_t ph, pva;
	unsigned char buf[100];
	int fd;

	simtest_init_shared();
	start(&a);
	CU_OK(ipc_vmm_create(2 * GRAN, &h));
	va = mapped(h, 2 * GRAN);
	CU_OK(ipc_fill(va, 2 * GRAN, 0x5a));
	fd = export_fd(h);
	pva = peer_import_map(&a, fd, 2 * GRAN, &ph);
	close(fd);
	cr_assert_eq(used(), 2 * GRAN);
	CU_OK(peer_run(&a, PEER_CHECK, pva, 2 * GRAN, 0x5a, NULL));
	CU_OK(peer_run(&a, PEER_FILL, pva, 2 * GRAN, 0xa5, NULL));
	CU_OK(ipc_check(va, 2 * GRAN, 0xa5));
	memset(buf, 0x3c, sizeof(buf));
	CU_OK(cuMemcpyHtoD(va + GRAN, buf, sizeof(buf)));
	CU_OK(peer_run(&a, PEER_CHECK, pva + GRAN, sizeof(buf), 0x3c, NULL));
	CU_OK(peer_run(&a, PEER_VMM_UNMAP, pva, 2 * GRAN, 0, NULL));
	CU_OK(peer_run(&a, PEER_VMM_RELEASE, ph, 0, 0, NULL));
	CU_OK(ipc_vmm_unmap(va, 2 * GRAN));
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), 0);
	cr_assert_eq(peer_exit(&a), 0);
}

/* The exporter lets go first: the importer's handle and mapping keep the
 * memory, counted; the importer's handle released while mapped keeps it
 * until the unmap. */
Test(vmm_share, exporter_lets_go_first)
{
	CUmemGenericAllocationHandle h;
	struct peer a;
	CUdeviceptr va;
	uint64_t ph, pva;
	int fd;

	simtest_init_shared();
	start(&a);
	CU_OK(ipc_vmm_create(3 * GRAN, &h));
	va = mapped(h, 3 * GRAN);
	CU_OK(ipc_fill(va, 3 * GRAN, 0x61));
	fd = export_fd(h);
	pva = peer_import_map(&a, fd, 3 * GRAN, &ph);
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), 3 * GRAN);
	CU_OK(ipc_vmm_unmap(va, 3 * GRAN));
	cr_assert_eq(used(), 3 * GRAN, "the importer's memory went");
	CU_OK(peer_run(&a, PEER_CHECK, pva, 3 * GRAN, 0x61, NULL));
	CU_OK(peer_run(&a, PEER_VMM_RELEASE, ph, 0, 0, NULL));
	cr_assert_eq(used(), 3 * GRAN, "still mapped");
	CU_OK(peer_run(&a, PEER_CHECK, pva, 3 * GRAN, 0x61, NULL));
	CU_OK(peer_run(&a, PEER_VMM_UNMAP, pva, 3 * GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	CU_ASSERT(import_rc(fd), CUDA_ERROR_INVALID_VALUE);
	close(fd);
	cr_assert_eq(peer_exit(&a), 0);
}

/* The importer lets go first: nothing changes until the exporter does. */
Test(vmm_share, importer_lets_go_first)
{
	CUmemGenericAllocationHandle h;
	struct peer a;
	CUdeviceptr va;
	uint64_t ph, pva;
	int fd;

	simtest_init_shared();
	start(&a);
	CU_OK(ipc_vmm_create(GRAN, &h));
	fd = export_fd(h);
	pva = peer_import_map(&a, fd, GRAN, &ph);
	CU_OK(peer_run(&a, PEER_FILL, pva, GRAN, 0x71, NULL));
	CU_OK(peer_run(&a, PEER_VMM_UNMAP, pva, GRAN, 0, NULL));
	CU_OK(peer_run(&a, PEER_VMM_RELEASE, ph, 0, 0, NULL));
	cr_assert_eq(used(), GRAN);
	va = mapped(h, GRAN);
	CU_OK(ipc_check(va, GRAN, 0x71));
	/* The fd imports again while the exporter holds the memory. */
	pva = peer_import_map(&a, fd, GRAN, &ph);
	cr_assert_eq(used(), GRAN);
	CU_OK(peer_run(&a, PEER_VMM_RELEASE, ph, 0, 0, NULL));
	CU_OK(peer_run(&a, PEER_VMM_UNMAP, pva, GRAN, 0, NULL));
	CU_OK(cuMemRelease(h));
	CU_OK(ipc_vmm_unmap(va, GRAN));
	cr_assert_eq(used(), 0);
	close(fd);
	cr_assert_eq(peer_exit(&a), 0);
}

/* The exporter is killed: the importer keeps the memory and its contents,
 * counted, until it lets go. */
Test(vmm_share, killed_exporter_leaves_memory_to_importer)
{
	CUmemGenericAllocationHandle h;
	struct peer a;
	CUdeviceptr va;
	uint64_t ph, pva;
	int fd;

	simtest_init_shared();
	start(&a);
	fd = peer_create_export(&a, 2 * GRAN, 0x81, &ph, &pva);
	h = import_fd(fd);
	close(fd);
	va = mapped(h, 2 * GRAN);
	cr_assert_eq(used(), 2 * GRAN);
	cr_assert_eq(peer_kill(&a), 0);
	cr_assert_eq(used(), 2 * GRAN);
	CU_OK(ipc_check(va, 2 * GRAN, 0x81));
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), 2 * GRAN);
	CU_OK(ipc_vmm_unmap(va, 2 * GRAN));
	cr_assert_eq(used(), 0);
}

/* The importer is killed: the exporter's release returns the device to
 * where it was. */
Test(vmm_share, killed_importer_leaves_memory_to_exporter)
{
	CUmemGenericAllocationHandle h, keep;
	struct peer a;
	uint64_t ph;
	int fd;

	simtest_init_shared();
	CU_OK(ipc_vmm_create(GRAN, &keep));
	start(&a);
	CU_OK(ipc_vmm_create(2 * GRAN, &h));
	fd = export_fd(h);
	peer_import_map(&a, fd, 2 * GRAN, &ph);
	cr_assert_eq(used(), 3 * GRAN);
	cr_assert_eq(peer_kill(&a), 0);
	cr_assert_eq(used(), 3 * GRAN);
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), GRAN);
	close(fd);
	CU_OK(cuMemRelease(keep));
	cr_assert_eq(used(), 0);
}

/* An fd inherited across fork and exec imports as one passed over a
 * socket; a peer that ends normally gives its holds back. */
Test(vmm_share, inherited_fd_imports)
{
	CUmemGenericAllocationHandle h;
	struct peer a;
	struct peer_msg m = { .op = PEER_VMM_IMPORT };
	uint64_t pva;
	int fd;

	simtest_init_shared();
	CU_OK(ipc_vmm_create(GRAN, &h));
	fd = export_fd(h);            /* no FD_CLOEXEC: the peer inherits it */
	start(&a);
	m.c = (uint64_t)fd;
	CU_OK(peer_do(&a, &m, -1, NULL));
	CU_OK(peer_run(&a, PEER_VMM_MAP, m.a, GRAN, 0, &pva));
	CU_OK(peer_run(&a, PEER_FILL, pva, GRAN, 0x91, NULL));
	CU_OK(cuMemRelease(h));
	cr_assert_eq(used(), GRAN);
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(used(), 0);
	close(fd);
}

/* ---- random release orders ---------------------------------------------------- */

#define PROCS 3     /* 0: this process; 1, 2: peers */
#define OBJS 3      /* 0, 1 created here, 2 by peer 1 */

/* A holder's handles and mappings of one object: each is a hold. */
struct holding {
	int handles;                  /* handles not yet released */
	uint64_t handle[2];
	bool mapped;
	uint64_t va;
};

struct obj {
	int creator;
	size_t size;
	unsigned char v;
	struct holding in[PROCS];
};

struct world {
	struct peer peers[PROCS];
	bool alive[PROCS];
	struct obj o[OBJS];
};

enum act_kind { ACT_RELEASE, ACT_UNMAP, ACT_KILL };

struct act {
	enum act_kind kind;
	int proc, obj;
};

static bool holds(const struct world *w, int p, const struct obj *o)
{
	return w->alive[p] && (o->in[p].handles || o->in[p].mapped);
}

static uint64_t expected(const struct world *w)
{
	uint64_t sum = 0;

	for (int i = 0; i < OBJS; i++)
		for (int p = 0; p < PROCS; p++)
			if (holds(w, p, &w->o[i])) {
				sum += w->o[i].size;
				break;
			}
	return sum;
}

static void setup(struct world *w)
{
	memset(w, 0, sizeof(*w));
	w->alive[0] = true;
	for (int p = 1; p < PROCS; p++) {
		start(&w->peers[p]);
		w->alive[p] = true;
	}
	for (int i = 0; i < OBJS; i++) {
		struct obj *o = &w->o[i];
		struct holding *c;
		int fd;

		o->creator = i < 2 ? 0 : 1;
		o->size = (size_t)(i + 1) * GRAN;
		o->v = (unsigned char)(0x20 * (i + 1) + 3);
		c = &o->in[o->creator];
		c->handles = 1;
		c->mapped = true;
		if (o->creator == 0) {
			CUmemGenericAllocationHandle h;
			CU_OK(ipc_vmm_create(o->size, &h));
			c->handle[0] = h;
			c->va = mapped(h, o->size);
			CU_OK(ipc_fill(c->va, o->size, o->v));
			fd = export_fd(c->handle[0]);
		} else {
			fd = peer_create_export(&w->peers[1], o->size, o->v,
						&c->handle[0], &c->va);
		}
		/* Others import it once or twice, or not, and map it or not. */
		for (int p = 0; p < PROCS; p++) {
			struct holding *in = &o->in[p];
			if (p == o->creator)
				continue;
			in->handles = rand() % 3;
			for (int k = 0; k < in->handles; k++) {
				if (p == 0) {
					in->handle[k] = import_fd(fd);
				} else {
					struct peer_msg m = { .op = PEER_VMM_IMPORT };
					CU_OK(peer_do(&w->peers[p], &m, fd, NULL));
					in->handle[k] = m.a;
				}
			}
			in->mapped = in->handles && rand() % 2;
			if (in->mapped && p == 0)
				in->va = mapped(in->handle[0], o->size);
			else if (in->mapped)
				CU_OK(peer_run(&w->peers[p], PEER_VMM_MAP,
					       in->handle[0], o->size, 0, &in->va));
		}
		close(fd);
	}
}

static int plan(struct world *w, struct act *acts)
{
	int n = 0;

	for (int i = 0; i < OBJS; i++)
		for (int p = 0; p < PROCS; p++) {
			struct holding *in = &w->o[i].in[p];
			for (int k = 0; k < in->handles; k++)
				acts[n++] = (struct act){ ACT_RELEASE, p, i };
			if (in->mapped)
				acts[n++] = (struct act){ ACT_UNMAP, p, i };
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
	struct holding *in = a->obj >= 0 ? &w->o[a->obj].in[a->proc] : NULL;
	size_t size = a->obj >= 0 ? w->o[a->obj].size : 0;
	int p = a->proc;

	if (!w->alive[p])
		return;
	switch (a->kind) {
	case ACT_RELEASE:
		in->handles--;
		if (p == 0)
			CU_OK(cuMemRelease(in->handle[in->handles]));
		else
			CU_OK(peer_run(&w->peers[p], PEER_VMM_RELEASE,
				       in->handle[in->handles], 0, 0, NULL));
		break;
	case ACT_UNMAP:
		in->mapped = false;
		if (p == 0)
			CU_OK(ipc_vmm_unmap(in->va, size));
		else
			CU_OK(peer_run(&w->peers[p], PEER_VMM_UNMAP, in->va,
				       size, 0, NULL));
		break;
	case ACT_KILL:
		cr_assert_eq(peer_kill(&w->peers[p]), 0);
		w->alive[p] = false;
		break;
	}
}

/* Every mapping still there has the object's contents. */
static void contents_kept(struct world *w)
{
	for (int i = 0; i < OBJS; i++) {
		struct obj *o = &w->o[i];
		for (int p = 0; p < PROCS; p++) {
			if (!w->alive[p] || !o->in[p].mapped)
				continue;
			if (p == 0)
				CU_OK(ipc_check(o->in[0].va, o->size, o->v));
			else
				CU_OK(peer_run(&w->peers[p], PEER_CHECK,
					       o->in[p].va, o->size, o->v, NULL));
		}
	}
}

Test(vmm_share, random_release_orders, .timeout = 30)
{
	struct act acts[OBJS * PROCS * 3 + PROCS];
	struct world w;

	simtest_init_shared();
	for (unsigned seed = 1; seed <= 8; seed++) {
		int n;

		srand(seed);
		setup(&w);
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
