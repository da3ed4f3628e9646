/* test_shared_hostile.c - a hostile look at memory shared between processes
 * (issue 12, docs/memory.md "Memory shared between processes").
 *
 * The promise under attack: memory shared through CUDA IPC or VMM handles
 * exported as file descriptors is charged ONCE, to one tenant, for exactly
 * as long as the simulated device holds it: what all tenants are charged
 * together is never below what the device holds (an escape), never above
 * it once every process has settled, and everything returns to zero; the
 * shim never crashes or hangs the job.
 *
 * The judge is always the simulated device's own count
 * (shimtest_device_used, read by a worker that allocates nothing), never
 * the shim's numbers. The workers are processes driven over a socketpair,
 * as in test_shared.c. A worker ends with exit() when a test needs the
 * shim's normal leave (its destructor), with _exit() otherwise (which the
 * ledger sees as a death).
 *
 * Several tests put a process in a state a user can put it in: stopped
 * (SIGSTOP, a debugger, a frozen cgroup) while it holds the ledger's
 * shares lock or a tenant lock. They get there for real (a worker that
 * loops over the locked path is stopped at random moments until it is
 * caught inside the lock); where the tenant lock's few instructions are
 * not caught in time, its lock word is written to exactly what the stopped
 * holder would have left (its own slot and generation), which is the same
 * state.
 *
 * Tests marked ATTACK fail where the promise breaks (as of this writing);
 * those marked HOLDS pass and guard what was tried and held.
 */
#include "shimtest.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OBJ (64 * MIB)
#define LIMIT "512MiB"
#define LIMIT_BYTES (512 * MIB)

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "2GiB", 1);
	shimtest_env("t-a", LIMIT);
}

TestSuite(hostile, .init = setup, .fini = shimtest_cleanup, .timeout = 30);

enum op {
	OP_NOP, OP_ALLOC, OP_FREE, OP_IPC_GET, OP_IPC_OPEN, OP_IPC_CLOSE,
	OP_VMM_CREATE, OP_VMM_EXPORT, OP_VMM_IMPORT, OP_VMM_MAP, OP_VMM_UNMAP,
	OP_VMM_RELEASE, OP_USED, OP_CTX_RESET, OP_SPIN, OP_RACE_OPEN_CLOSE,
	OP_RACE_FIRST_OPEN, OP_FORK, OP_IMPORT_MANY, OP_RELEASE_MANY,
	OP_EXIT, OP_WRITE, OP_CHECK, OP_RACE_IMPORT_RELEASE, OP_SLOT,
	OP_CTX_CREATE, OP_CTX_DESTROY, OP_HANDOFF,
};

/* A page every worker shares (made before they are forked): two workers
 * hand one object's charge back and forth through it (OP_HANDOFF). */
struct handoff {
	volatile int turn;
	volatile int stop;
	volatile uint64_t moves;
};

static struct handoff *hand;

/* OP_SPIN's loops. */
enum spin { SPIN_IPC, SPIN_ALLOC };

struct msg {
	int op;
	int rc;
	uint64_t a, b, c;
	unsigned char data[64];
};

struct worker {
	pid_t pid;
	int sock;
	const char *tenant;
	bool raw;		/* calls the simulator itself: no shim */
};

/* ---- the worker's side -------------------------------------------------------- */

static int send_msg(int sock, const struct msg *m, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)m, sizeof(*m) };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		h.msg_control = cbuf;
		h.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&h);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &h, 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static int recv_msg(int sock, struct msg *m, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	*fd = -1;
	if (recvmsg(sock, &h, 0) != (ssize_t)sizeof(*m))
		return -1;
	for (c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

/* The driver entry points a worker calls: the shim's (the preloaded
 * libcuda.so.1 the program links), or, for a raw worker, the simulator's
 * own, found with libc's dlopen (the shim never sees them, never joins the
 * ledger: a process running without the shim). */
static struct api {
	CUresult (*init)(unsigned);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*set_current)(CUcontext);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free)(CUdeviceptr);
	CUresult (*ipc_get)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*ipc_open)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*ipc_close)(CUdeviceptr);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
			   const CUmemAllocationProp *, unsigned long long);
	CUresult (*export_fd)(void *, CUmemGenericAllocationHandle,
			      CUmemAllocationHandleType, unsigned long long);
	CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *,
			      CUmemAllocationHandleType);
	CUresult (*release)(CUmemGenericAllocationHandle);
} api;

static void api_shim(void)
{
	api = (struct api){
		.init = cuInit, .retain = cuDevicePrimaryCtxRetain,
		.set_current = cuCtxSetCurrent, .alloc = cuMemAlloc,
		.free = cuMemFree, .ipc_get = cuIpcGetMemHandle,
		.ipc_open = cuIpcOpenMemHandle, .ipc_close = cuIpcCloseMemHandle,
		.create = cuMemCreate, .export_fd = cuMemExportToShareableHandle,
		.import_fd = cuMemImportFromShareableHandle,
		.release = cuMemRelease,
	};
}

static int api_raw(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *(*open_fn)(const char *, int);
	void *h;

	if (!libc || !(open_fn = (void *(*)(const char *, int))dlsym(libc,
							"dlopen")))
		return -1;
	h = open_fn(SHIMTEST_SIM_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
#define RAW(field, name) \
	if (!(*(void **)&api.field = dlsym(h, name))) \
		return -1
	RAW(init, "cuInit");
	RAW(retain, "cuDevicePrimaryCtxRetain");
	RAW(set_current, "cuCtxSetCurrent");
	RAW(alloc, "cuMemAlloc_v2");
	RAW(free, "cuMemFree_v2");
	RAW(ipc_get, "cuIpcGetMemHandle");
	RAW(ipc_open, "cuIpcOpenMemHandle_v2");
	RAW(ipc_close, "cuIpcCloseMemHandle");
	RAW(create, "cuMemCreate");
	RAW(export_fd, "cuMemExportToShareableHandle");
	RAW(import_fd, "cuMemImportFromShareableHandle");
	RAW(release, "cuMemRelease");
#undef RAW
	if ((void *)api.alloc == (void *)cuMemAlloc)
		return -1;	/* the shim's own: not raw */
	return 0;
}

static CUmemAllocationProp vmm_prop(void)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

/* ---- races inside one worker ------------------------------------------------- */

struct race {
	pthread_barrier_t go;
	CUipcMemHandle h;
	CUdeviceptr p;		/* the pointer to close */
	CUdeviceptr got[2];
	CUresult rc[2];
	int iters;
	int mode;		/* 0: one closes while one opens; 1: both open */
	CUcontext ctx;
	int broken;		/* the round that broke (- : a hold too many) */
};

/* This process's holds in the ledger's share records (read by the worker
 * itself, to stop a race at the round that broke it). */
static int my_holds(void)
{
	static const char *map;
	const struct vgpu_ledger_slot *slots;
	const struct vgpu_ledger_share *rec;
	int n = 0, me = -1;

	if (!map) {
		char path[1024] = "";
		const char *dir = getenv("VGPU_LEDGER_DIR");
		struct dirent *de;
		DIR *d = dir ? opendir(dir) : NULL;
		int fd;

		while (d && (de = readdir(d)) != NULL)
			if (strstr(de->d_name, ".ledger") && de->d_name[0] != '.')
				snprintf(path, sizeof(path), "%s/%s", dir,
					 de->d_name);
		if (d)
			closedir(d);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		map = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED,
			   fd, 0);
		close(fd);
		if (map == MAP_FAILED) {
			map = NULL;
			return -1;
		}
	}
	slots = (const void *)(map + VGPU_LEDGER_SLOTS_OFFSET);
	rec = (const void *)(map + VGPU_LEDGER_SHARES_OFFSET +
			     VGPU_LEDGER_SHARES_HEAD);
	for (int i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (slots[i].state == 1 && slots[i].pid == getpid())
			me = i;
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++)
		for (int p = 0; p < VGPU_LEDGER_SHARE_HOLDERS; p++)
			if ((rec[i].key[0] || rec[i].key[1]) &&
			    rec[i].slot[p] == (uint32_t)me + 1)
				n += (int)rec[i].count[p];
	return n;
}

static void *race_thread(void *arg, int me)
{
	struct race *r = arg;

	cuCtxSetCurrent(r->ctx);
	for (int i = 0; i < r->iters; i++) {
		pthread_barrier_wait(&r->go);
		if (r->mode == 0 && me == 0)
			r->rc[0] = cuIpcCloseMemHandle(r->p);
		else
			r->rc[me] = cuIpcOpenMemHandle(&r->got[me], r->h,
				CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		pthread_barrier_wait(&r->go);
		if (me == 0) {
			if (r->mode == 0) {
				r->p = r->got[1];
				/* One open is left in the driver: it must
				 * hold the memory in the ledger. */
				if (my_holds() < 1)
					r->broken = i + 1;
			} else {
				if (my_holds() < 1)
					r->broken = i + 1;
				/* Both opens gave one pointer, opened twice:
				 * close it twice. */
				cuIpcCloseMemHandle(r->got[0]);
				cuIpcCloseMemHandle(r->got[1]);
				if (my_holds() != 0)
					r->broken = -(i + 1);
			}
		}
		pthread_barrier_wait(&r->go);
		if (r->rc[0] || r->rc[1] || r->broken)
			break;
	}
	return NULL;
}

static void *race0(void *arg)
{
	return race_thread(arg, 0);
}

static void *race1(void *arg)
{
	return race_thread(arg, 1);
}

static int run_race(struct msg *m, int mode)
{
	struct race r = { .p = m->a, .iters = (int)m->b, .mode = mode };
	pthread_t t[2];

	memcpy(&r.h, m->data, sizeof(r.h));
	cuCtxGetCurrent(&r.ctx);
	pthread_barrier_init(&r.go, NULL, 2);
	pthread_create(&t[0], NULL, race0, &r);
	pthread_create(&t[1], NULL, race1, &r);
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	pthread_barrier_destroy(&r.go);
	m->a = r.p;
	m->c = (uint64_t)(int64_t)r.broken;
	return r.rc[0] ? (int)r.rc[0] : (int)r.rc[1];
}

/* One thread imports an fd while another releases what the first got:
 * a hostile program's use-after-release, done many times. */
struct import_race {
	int fd, iters;
	volatile CUmemGenericAllocationHandle h;
	volatile int phase;
	int stop;
	CUcontext ctx;
};

static void *import_releaser(void *arg)
{
	struct import_race *r = arg;

	cuCtxSetCurrent(r->ctx);
	for (;;) {
		CUmemGenericAllocationHandle h;

		while (__atomic_load_n(&r->phase, __ATOMIC_ACQUIRE) != 1)
			if (__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
				return NULL;
		while (!(h = __atomic_load_n(&r->h, __ATOMIC_ACQUIRE)))
			;
		cuMemRelease(h);
		__atomic_store_n(&r->phase, 2, __ATOMIC_RELEASE);
	}
}

/* Handles of OP_IMPORT_MANY. */
static CUmemGenericAllocationHandle many[2048];
static int nmany;

static int serve(int sock, const char *tenant, bool raw);

/* Runs one command; m->rc is the driver's answer (or -1). */
static int run_op(int sock, struct msg *m, int fd_in)
{
	CUmemAllocationProp p = vmm_prop();
	CUmemAccessDesc acc;
	CUdeviceptr d;
	CUmemGenericAllocationHandle h;
	CUipcMemHandle ih;
	CUcontext ctx;
	unsigned char buf[4096];
	uint64_t n;
	int fd = -1, st;
	pid_t pid;

	switch (m->op) {
	case OP_NOP:
		m->rc = 0;
		break;
	case OP_ALLOC:
		d = 0;
		m->rc = api.alloc(&d, m->a);
		m->a = d;
		break;
	case OP_FREE:
		m->rc = api.free(m->a);
		break;
	case OP_IPC_GET:	/* a: pointer, b: offset into it */
		memset(&ih, 0, sizeof(ih));
		m->rc = api.ipc_get(&ih, m->a + m->b);
		memcpy(m->data, &ih, sizeof(ih));
		break;
	case OP_IPC_OPEN:
		memcpy(&ih, m->data, sizeof(ih));
		d = 0;
		m->rc = api.ipc_open(&d, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		m->a = d;
		break;
	case OP_IPC_CLOSE:
		m->rc = api.ipc_close(m->a);
		break;
	case OP_WRITE:		/* a: pointer, b: byte */
		m->rc = cuMemsetD8(m->a, (unsigned char)m->b, 4096);
		break;
	case OP_CHECK:
		m->rc = cuMemcpyDtoH(buf, m->a, sizeof(buf));
		for (size_t i = 0; !m->rc && i < sizeof(buf); i++)
			if (buf[i] != (unsigned char)m->b)
				m->rc = -1;
		break;
	case OP_VMM_CREATE:
		m->rc = api.create(&h, m->a, &p, 0);
		m->a = h;
		break;
	case OP_VMM_EXPORT:
		m->rc = api.export_fd(&fd, m->a,
				      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				      0);
		break;
	case OP_VMM_IMPORT:	/* fd_in, or c: an fd of this process */
		h = 0;
		m->rc = api.import_fd(&h, (void *)(intptr_t)(fd_in >= 0 ? fd_in
						: (int)m->c),
				      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (fd_in >= 0 && !m->b)
			close(fd_in);
		else if (fd_in >= 0)
			m->c = (uint64_t)fd_in;		/* kept */
		m->a = h;
		break;
	case OP_VMM_MAP:	/* a: handle, b: size -> a: address */
		m->rc = cuMemAddressReserve(&d, m->b, 0, 0, 0);
		if (!m->rc)
			m->rc = cuMemMap(d, m->b, 0, m->a, 0);
		memset(&acc, 0, sizeof(acc));
		acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		if (!m->rc)
			m->rc = cuMemSetAccess(d, m->b, &acc, 1);
		m->a = d;
		break;
	case OP_VMM_UNMAP:	/* a: address, b: size */
		m->rc = cuMemUnmap(m->a, m->b);
		if (!m->rc)
			m->rc = cuMemAddressFree(m->a, m->b);
		break;
	case OP_VMM_RELEASE:
		m->rc = api.release(m->a);
		break;
	case OP_USED:		/* the simulator's own count, not the shim's */
		m->a = shimtest_device_used();
		m->rc = 0;
		break;
	case OP_CTX_RESET:	/* the primary context reset, made anew */
		m->rc = cuDevicePrimaryCtxReset(0);
		if (!m->rc)
			m->rc = cuDevicePrimaryCtxRetain(&ctx, 0);
		if (!m->rc)
			m->rc = cuCtxSetCurrent(ctx);
		break;
	case OP_CTX_CREATE:	/* a context of its own, made current */
		m->rc = cuCtxCreate(&ctx, NULL, 0, 0);
		m->a = (uint64_t)(uintptr_t)ctx;
		break;
	case OP_CTX_DESTROY:	/* a: the context; the primary made current */
		m->rc = cuCtxDestroy((CUcontext)(uintptr_t)m->a);
		if (!m->rc)
			m->rc = cuDevicePrimaryCtxRetain(&ctx, 0);
		if (!m->rc)
			m->rc = cuCtxSetCurrent(ctx);
		break;
	case OP_SPIN:		/* loops until the next message arrives */
		n = 0;
		m->rc = 0;
		for (;;) {
			struct pollfd pf = { sock, POLLIN, 0 };
			if (poll(&pf, 1, 0) != 0)
				break;
			if (m->b == SPIN_IPC) {
				if (cuMemAlloc(&d, 4096) == CUDA_SUCCESS) {
					cuIpcGetMemHandle(&ih, d);
					cuMemFree(d);
				}
			} else if (cuMemAlloc(&d, 4096) == CUDA_SUCCESS) {
				cuMemFree(d);
			}
			n++;
		}
		m->a = n;
		break;
	case OP_RACE_OPEN_CLOSE:	/* a: the pointer opened, b: rounds */
		m->rc = run_race(m, 0);
		break;
	case OP_RACE_FIRST_OPEN:	/* b: rounds */
		m->rc = run_race(m, 1);
		break;
	case OP_FORK: {	/* b: what the child does; returns its status */
		pid = fork();
		if (pid == 0) {
			if (m->b == 1) {
				/* A child that uses CUDA itself and imports
				 * the parent's fd, then exits normally. */
				if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0)
				    || cuCtxSetCurrent(ctx))
					_exit(3);
				if (fd_in >= 0 && cuMemImportFromShareableHandle(
					    &h, (void *)(intptr_t)fd_in,
					    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
					_exit(4);
				if (cuMemAlloc(&d, 4 * MIB))
					_exit(5);
				exit(0);
			}
			if (m->b == 2) {
				/* A child that touches nothing and exits
				 * normally (the shim's destructor runs). */
				exit(0);
			}
			/* Killed at once. */
			raise(SIGKILL);
			_exit(9);
		}
		if (fd_in >= 0)
			close(fd_in);
		waitpid(pid, &st, 0);
		m->rc = 0;
		m->a = (uint64_t)st;
		break;
	}
	case OP_IMPORT_MANY:	/* fd_in imported b times */
		m->rc = 0;
		for (uint64_t i = 0; i < m->b && nmany < 2048; i++) {
			m->rc = api.import_fd(&many[nmany], (void *)(intptr_t)fd_in,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
			if (m->rc)
				break;
			nmany++;
		}
		close(fd_in);
		m->a = (uint64_t)nmany;
		break;
	case OP_RELEASE_MANY:
		m->rc = 0;
		while (nmany > 0 && !m->rc)
			m->rc = api.release(many[--nmany]);
		break;
	case OP_RACE_IMPORT_RELEASE: {	/* fd_in, b rounds */
		struct import_race r = { .fd = fd_in, .iters = (int)m->b };
		pthread_t t;

		m->c = 0;
		cuCtxGetCurrent(&r.ctx);
		pthread_create(&t, NULL, import_releaser, &r);
		m->rc = 0;
		for (int i = 0; i < r.iters; i++) {
			__atomic_store_n(&r.h, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&r.phase, 1, __ATOMIC_RELEASE);
			/* The releaser spins on r.h: it is set inside the
			 * call's out-parameter write, before the shim
			 * records the handle. */
			m->rc = cuMemImportFromShareableHandle(
				(CUmemGenericAllocationHandle *)&r.h,
				(void *)(intptr_t)fd_in,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
			if (m->rc) {
				/* Let the releaser end. */
				__atomic_store_n(&r.h, 1, __ATOMIC_RELEASE);
			}
			while (__atomic_load_n(&r.phase, __ATOMIC_ACQUIRE) != 2)
				;
			if (m->rc)
				break;
			/* Released: this process holds nothing. */
			if (my_holds() != 0) {
				m->c = (uint64_t)i + 1;
				break;
			}
		}
		__atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		close(fd_in);
		break;
	}
	case OP_HANDOFF: {	/* a: my handle, b: me (0/1), fd_in: the fd */
		/* On my turn the other holds too: I let go (the payer's
		 * charge moves to it), import again, and pass the turn. */
		int me = (int)m->b;

		h = m->a;
		m->rc = 0;
		while (!hand->stop) {
			while (hand->turn != me && !hand->stop)
				sched_yield();
			if (hand->stop)
				break;
			if (cuMemRelease(h) || cuMemImportFromShareableHandle(&h,
					(void *)(intptr_t)fd_in,
					CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
				m->rc = -1;
				hand->stop = 1;
				break;
			}
			hand->moves++;
			hand->turn = !me;
		}
		close(fd_in);
		m->a = h;
		break;
	}
	case OP_SLOT:		/* this process's pid */
		m->a = (uint64_t)getpid();
		m->rc = 0;
		break;
	default:
		m->rc = -1;
	}
	return fd;
}

static int serve(int sock, const char *tenant, bool raw)
{
	CUcontext ctx;
	struct msg m;
	int fd, out;

	setenv("VGPU_TENANT", tenant, 1);
	if (raw ? api_raw() : (api_shim(), 0))
		return 2;
	if (api.init(0) || api.retain(&ctx, 0) || api.set_current(ctx))
		return 3;
	while (recv_msg(sock, &m, &fd) == 0) {
		if (m.op == OP_EXIT) {
			/* A normal exit: the shim's destructor leaves the
			 * ledger. */
			m.rc = 0;
			send_msg(sock, &m, -1);
			exit(0);
		}
		out = run_op(sock, &m, fd);
		if (send_msg(sock, &m, out) != 0)
			return 4;
		if (out >= 0)
			close(out);
	}
	return 0;
}

/* ---- the test's side ---------------------------------------------------------- */

static bool open_socks[1024];

static struct worker spawn_how(const char *tenant, bool raw, const char *err)
{
	struct worker w = { .tenant = tenant, .raw = raw };
	int sv[2];

	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	cr_assert_lt(sv[0], 1024);
	fflush(NULL);
	w.pid = fork();
	cr_assert_geq(w.pid, 0);
	if (w.pid == 0) {
		close(sv[0]);
		for (int fd = 0; fd < 1024; fd++)
			if (open_socks[fd])
				close(fd);
		if (err) {
			int e = open(err, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (e >= 0) {
				dup2(e, 2);
				close(e);
			}
		}
		_exit(serve(sv[1], tenant, raw));
	}
	close(sv[1]);
	w.sock = sv[0];
	open_socks[w.sock] = true;
	return w;
}

static struct worker spawn(const char *tenant)
{
	return spawn_how(tenant, false, NULL);
}

/* The worker's socket closed: it _exit()s (seen by the ledger as a
 * death, reclaimed when noticed). */
static void stop(struct worker *w)
{
	int status;

	if (w->pid <= 0)
		return;
	open_socks[w->sock] = false;
	close(w->sock);
	cr_assert_eq(waitpid(w->pid, &status, 0), w->pid);
	w->pid = 0;
}

/* A normal exit (the shim leaves the ledger); returns how long it took. */
static uint64_t leave(struct worker *w)
{
	struct msg m = { .op = OP_EXIT };
	uint64_t t0 = simtest_now_ns();
	int fd, status;

	cr_assert_eq(send_msg(w->sock, &m, -1), 0);
	recv_msg(w->sock, &m, &fd);
	cr_assert_eq(waitpid(w->pid, &status, 0), w->pid);
	open_socks[w->sock] = false;
	close(w->sock);
	w->pid = 0;
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "worker %s did not exit cleanly: status 0x%x%s", w->tenant,
		  status, WIFSIGNALED(status) ? " (killed by a signal)" : "");
	return simtest_now_ns() - t0;
}

static void kill_worker(struct worker *w)
{
	int status;

	kill(w->pid, SIGKILL);
	cr_assert_eq(waitpid(w->pid, &status, 0), w->pid);
	open_socks[w->sock] = false;
	close(w->sock);
	w->pid = 0;
}

/* Sends a command (with fd, or -1) and returns the reply; *fd_out gets a
 * descriptor sent back. The driver's answer is not checked. */
static struct msg try_fd(struct worker *w, int op, uint64_t a, uint64_t b,
			 const void *data, int fd, int *fd_out)
{
	struct msg m = { .op = op, .a = a, .b = b };
	int got;

	if (data)
		memcpy(m.data, data, sizeof(m.data));
	cr_assert_eq(send_msg(w->sock, &m, fd), 0);
	cr_assert_eq(recv_msg(w->sock, &m, &got), 0, "worker %s died (op %d)",
		     w->tenant, op);
	if (fd_out)
		*fd_out = got;
	else if (got >= 0)
		close(got);
	return m;
}

static struct msg call_fd(struct worker *w, int op, uint64_t a, uint64_t b,
			  const void *data, int fd, int *fd_out)
{
	struct msg m = try_fd(w, op, a, b, data, fd, fd_out);

	cr_assert_eq(m.rc, 0, "worker %s: op %d answered %d", w->tenant, op,
		     m.rc);
	return m;
}

static struct msg call(struct worker *w, int op, uint64_t a, uint64_t b)
{
	return call_fd(w, op, a, b, NULL, -1, NULL);
}

static struct msg try_call(struct worker *w, int op, uint64_t a, uint64_t b)
{
	return try_fd(w, op, a, b, NULL, -1, NULL);
}

/* ---- the ledger, from outside (read-write: a stopped process's state,
 * hand edits) ---------------------------------------------------------------- */

struct rw {
	int fd;
	char *map;
	struct vgpu_ledger_header *hdr;
	struct vgpu_ledger_tenant *tenants;
	struct vgpu_ledger_slot *slots;
	struct vgpu_ledger_shares *head;
	struct vgpu_ledger_share *rec;
};

static struct rw L;

static void rw_open(void)
{
	char path[1024] = "";
	struct dirent *de;
	DIR *d;

	if (L.map)
		return;
	d = opendir(shimtest_ledger_dir());
	cr_assert_not_null(d);
	while ((de = readdir(d)) != NULL)
		if (strstr(de->d_name, ".ledger") && de->d_name[0] != '.')
			snprintf(path, sizeof(path), "%s/%s",
				 shimtest_ledger_dir(), de->d_name);
	closedir(d);
	cr_assert(path[0], "no ledger yet");
	L.fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(L.fd, 0);
	L.map = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ | PROT_WRITE,
		     MAP_SHARED, L.fd, 0);
	cr_assert_neq(L.map, MAP_FAILED);
	L.hdr = (void *)L.map;
	L.tenants = (void *)(L.map + VGPU_LEDGER_TENANTS_OFFSET);
	L.slots = (void *)(L.map + VGPU_LEDGER_SLOTS_OFFSET);
	L.head = (void *)(L.map + VGPU_LEDGER_SHARES_OFFSET);
	L.rec = (void *)(L.map + VGPU_LEDGER_SHARES_OFFSET +
			 VGPU_LEDGER_SHARES_HEAD);
}

static void rw_close(void)
{
	if (!L.map)
		return;
	munmap(L.map, VGPU_LEDGER_FILE_SIZE);
	close(L.fd);
	memset(&L, 0, sizeof(L));
}

static int tenant_index(const char *name)
{
	rw_open();
	for (int i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++)
		if (L.tenants[i].state == 1 &&
		    strcmp(L.tenants[i].name, name) == 0)
			return i;
	return -1;
}

static uint64_t charged(const char *tenant)
{
	int t = tenant_index(tenant);

	return t < 0 ? 0 : __atomic_load_n(&L.tenants[t].used,
					   __ATOMIC_ACQUIRE);
}

/* Every tenant's device charge but the judge's (which holds nothing). */
static uint64_t charged_all(void)
{
	uint64_t sum = 0;

	rw_open();
	for (int i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++)
		if (L.tenants[i].state == 1)
			sum += __atomic_load_n(&L.tenants[i].used,
					       __ATOMIC_ACQUIRE);
	return sum;
}

/* The slot of pid, or -1. */
static int slot_of_pid(pid_t pid)
{
	rw_open();
	for (int i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (L.slots[i].state == 1 && L.slots[i].pid == pid)
			return i;
	return -1;
}

/* Whether some process holds the shares lock (the region's first byte). */
static bool shares_lock_held(void)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = VGPU_LEDGER_SHARES_OFFSET, .l_len = 1 };

	rw_open();
	cr_assert_eq(fcntl(L.fd, F_OFD_GETLK, &fl), 0, "F_OFD_GETLK: %s",
		     strerror(errno));
	return fl.l_type != F_UNLCK;
}

/* The records in use, and the first whose key is not 0,0. */
static int first_record(void)
{
	rw_open();
	for (int i = 0; i < VGPU_LEDGER_MAX_SHARES; i++)
		if (L.rec[i].key[0] || L.rec[i].key[1])
			return i;
	return -1;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static struct worker judge;

static uint64_t device_used(void)
{
	if (!judge.pid)
		judge = spawn("t-judge");
	return call(&judge, OP_USED, 0, 0).a;
}

/* The promise at one step: the tenants together pay exactly what the
 * device holds. */
static void expect_once(const char *step)
{
	uint64_t held = device_used(), paid = charged_all();

	cr_assert_eq(paid, held, "%s: the tenants are charged %llu MiB "
		     "together (t-a %llu, t-b %llu), the device holds %llu MiB%s",
		     step, (unsigned long long)(paid / MIB),
		     (unsigned long long)(charged("t-a") / MIB),
		     (unsigned long long)(charged("t-b") / MIB),
		     (unsigned long long)(held / MIB),
		     paid < held ? ": memory escaped its slices" :
				   ": charged for memory nobody holds");
}

/* Only the escape direction: never charged below what the device holds. */
static void expect_no_escape(const char *step)
{
	uint64_t held = device_used(), paid = charged_all();

	cr_assert_geq(paid, held, "%s: the tenants are charged %llu MiB "
		      "together (t-a %llu, t-b %llu), the device holds %llu "
		      "MiB: memory escaped its slices", step,
		      (unsigned long long)(paid / MIB),
		      (unsigned long long)(charged("t-a") / MIB),
		      (unsigned long long)(charged("t-b") / MIB),
		      (unsigned long long)(held / MIB));
}

/* A refused over-limit request of tenant `t` reclaims its dead slots. */
static void reclaim(const char *t)
{
	struct worker w = spawn(t);

	try_call(&w, OP_ALLOC, 4 * GIB, 0);
	stop(&w);
}

static void done(void)
{
	stop(&judge);
	rw_close();
}

/* ---- stopping a process inside a lock ---------------------------------------- */

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static bool stop_now(pid_t pid)
{
	int st;

	kill(pid, SIGSTOP);
	return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st);
}

static void cont(pid_t pid)
{
	kill(pid, SIGCONT);
}

/* Starts w looping over `spin`, then stops it at random moments until
 * held() says it stopped inside the lock (true), or gives up after
 * `tries` (false, w left running). */
static bool catch_in_lock(struct worker *w, int spin, bool (*held)(void *),
			  void *arg, int tries, uint64_t seed)
{
	struct msg m = { .op = OP_SPIN, .b = (uint64_t)spin };
	uint64_t x = seed | 1;

	cr_assert_eq(send_msg(w->sock, &m, -1), 0);
	sleep_us(20000);
	for (int i = 0; i < tries; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sleep_us((long)(x % 200));
		cr_assert(stop_now(w->pid));
		if (held(arg))
			return true;
		cont(w->pid);
	}
	return false;
}

/* Ends w's spin (continued first if stopped). */
static void end_spin(struct worker *w)
{
	struct msg m = { .op = OP_NOP };
	int fd;

	cont(w->pid);
	cr_assert_eq(send_msg(w->sock, &m, -1), 0);
	cr_assert_eq(recv_msg(w->sock, &m, &fd), 0);	/* the spin */
	cr_assert_eq(recv_msg(w->sock, &m, &fd), 0);	/* the nop */
}

static bool shares_held(void *arg)
{
	(void)arg;
	return shares_lock_held();
}

/* Holds the shares lock as a stopped process does: a worker looping
 * through exports is stopped inside it. */
static void stop_in_shares_lock(struct worker *s)
{
	cr_assert(catch_in_lock(s, SPIN_IPC, shares_held, NULL, 4000, 42),
		  "the spinning worker was never stopped inside the shares "
		  "lock");
}

struct tenant_arg {
	int t;
	pid_t pid;
};

static bool tenant_held(void *arg)
{
	struct tenant_arg *a = arg;
	uint32_t w = __atomic_load_n(&L.tenants[a->t].lock, __ATOMIC_ACQUIRE);
	int idx = (int)(w & 0x7ff) - 1;

	return w && idx >= 0 && idx < VGPU_LEDGER_MAX_SLOTS &&
	       L.slots[idx].pid == a->pid;
}

/* Stops worker s (of tenant name) holding its tenant's lock. A real stop
 * inside the lock is tried first; if the few instructions are not caught,
 * s is stopped anyway and the lock word written as s would have left it
 * (its slot and generation), which is the same state for everyone else.
 * Returns whether the stop was caught for real. */
static bool stop_in_tenant_lock(struct worker *s, const char *name)
{
	struct tenant_arg a = { tenant_index(name), s->pid };
	int slot;

	cr_assert_geq(a.t, 0);
	if (catch_in_lock(s, SPIN_ALLOC, tenant_held, &a, 3000, 7))
		return true;
	cr_assert(stop_now(s->pid));
	slot = slot_of_pid(s->pid);
	cr_assert_geq(slot, 0);
	__atomic_store_n(&L.tenants[a.t].lock,
			 (uint32_t)(slot + 1) |
				 ((L.slots[slot].generation & 0xFFFFF) << 11),
			 __ATOMIC_RELEASE);
	return false;
}

/* Continues s and, if the lock word was written for it, clears it as its
 * unlock would have. */
static void release_tenant_lock(struct worker *s, const char *name,
				bool real)
{
	if (!real)
		__atomic_store_n(&L.tenants[tenant_index(name)].lock, 0,
				 __ATOMIC_RELEASE);
	end_spin(s);
}

/* ============================================================================
 * Stopped lock holders
 * ========================================================================== */

/* ATTACK: an importer holds IPC memory; the exporter exits normally while
 * another process is stopped inside the ledger's shares lock. The leave
 * cannot take the shares lock (1 s), so it does not hand the charge over,
 * and then gives back its slot's usage anyway. The device still holds the
 * memory for the importer. */
Test(hostile, shares_lock_stopped_exporter_exits_escape)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), s = spawn("t-c");
	uint64_t pa, pb, took;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	expect_once("exported and opened");
	stop_in_shares_lock(&s);
	took = leave(&a);
	end_spin(&s);
	cr_log_info("the exporter's exit took %llu ms",
		    (unsigned long long)(took / 1000000));
	expect_once("the exporter exited while the shares lock was held "
		    "by a stopped process; t-b still holds the memory");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&b);
	stop(&s);
	done();
}

/* ATTACK: the same with a SIGKILLed exporter whose slot is reclaimed while
 * the shares lock is held by a stopped process: the reclaim gives the dead
 * slot's usage back without handing the charge to the live importer. */
Test(hostile, shares_lock_stopped_during_reclaim_escape)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), s = spawn("t-c");
	uint64_t h, hb, vb;
	int fd;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	hb = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	vb = call(&b, OP_VMM_MAP, hb, OBJ).a;
	expect_once("exported and imported");
	kill_worker(&a);
	stop_in_shares_lock(&s);
	reclaim("t-a");
	end_spin(&s);
	expect_once("the exporter's slot reclaimed while the shares lock was "
		    "held; t-b still holds the memory");
	call(&b, OP_VMM_UNMAP, vb, OBJ);
	call(&b, OP_VMM_RELEASE, hb, 0);
	expect_once("all released");
	stop(&b);
	stop(&s);
	done();
}

/* ATTACK: the importer's tenant lock is held by a stopped process of its
 * tenant when the exporter frees: the hand-over (move) cannot take the
 * importer's tenant lock, the record is freed anyway with the charge left
 * on the exporter's slot, and when the exporter ends that charge goes. */
Test(hostile, tenant_lock_stopped_during_handover_escape)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), s = spawn("t-b");
	uint64_t pa, pb, t0;
	struct msg m;
	bool real;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	expect_once("exported and opened");
	real = stop_in_tenant_lock(&s, "t-b");
	cr_log_info("t-b's lock held by a stopped process (%s)",
		    real ? "caught inside it" : "lock word written");
	t0 = simtest_now_ns();
	call(&a, OP_FREE, pa, 0);
	cr_log_info("the exporter's free took %llu ms",
		    (unsigned long long)((simtest_now_ns() - t0) / 1000000));
	release_tenant_lock(&s, "t-b", real);
	expect_no_escape("the exporter freed while t-b's lock was held");
	leave(&a);
	expect_once("then the exporter exited; t-b still holds the memory");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&b);
	stop(&s);
	done();
}

/* ATTACK: a SIGKILL inside the hand-over itself. Two importers (t-a and
 * t-b) pass one VMM object's charge back and forth (each lets go while the
 * other holds it, so each let-go moves the charge). One of them is stopped
 * at random moments until it is caught inside move(), holding the tenant
 * locks, with the bytes already taken from its slot and not yet added to
 * the other's; it is then SIGKILLed there. The lock's next taker repairs
 * the tenant totals from the slots, which no longer have the bytes, and
 * the reclaim of the dead slot moves nothing: the memory, still held by
 * the survivor, escapes. (docs/ledger-abi.md: "A holder that dies anywhere
 * inside the few instructions can only break it for the repair to
 * restore".) */
struct inflight_arg {
	int ta, tb, slot_p, slot_q;
};

static bool in_flight(void *arg)
{
	struct inflight_arg *a = arg;
	uint32_t wa = L.tenants[a->ta].lock & 0x7ff;
	uint32_t wb = L.tenants[a->tb].lock & 0x7ff;
	uint64_t sum = L.slots[a->slot_p].usage[VGPU_USAGE_VMM] +
		       L.slots[a->slot_q].usage[VGPU_USAGE_VMM];

	return (wa == (uint32_t)a->slot_p + 1 ||
		wb == (uint32_t)a->slot_p + 1) && sum < OBJ;
}

Test(hostile, sigkill_inside_handover_escape)
{
	struct worker e, p, q;
	struct inflight_arg arg;
	struct msg mp = { .op = OP_HANDOFF, .b = 0 };
	struct msg mq = { .op = OP_HANDOFF, .b = 1 };
	uint64_t h, hp, hq;
	bool caught;
	int fd, got;

	hand = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(hand, MAP_FAILED);
	e = spawn("t-c");
	p = spawn("t-a");
	q = spawn("t-b");
	h = call(&e, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&e, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	hp = call_fd(&p, OP_VMM_IMPORT, 0, 1, NULL, fd, NULL).a;
	hq = call_fd(&q, OP_VMM_IMPORT, 0, 1, NULL, fd, NULL).a;
	call(&e, OP_VMM_RELEASE, h, 0);
	expect_once("two importers hold it, the exporter let go");
	arg = (struct inflight_arg){ tenant_index("t-a"), tenant_index("t-b"),
				     slot_of_pid(p.pid), slot_of_pid(q.pid) };
	cr_assert(arg.ta >= 0 && arg.tb >= 0 && arg.slot_p >= 0 &&
		  arg.slot_q >= 0);
	hand->turn = 0;
	mp.a = hp;
	mq.a = hq;
	cr_assert_eq(send_msg(p.sock, &mp, fd), 0);
	cr_assert_eq(send_msg(q.sock, &mq, fd), 0);
	close(fd);
	sleep_us(20000);
	caught = false;
	for (uint64_t x = 12345, end = simtest_now_ns() + 6000000000ull;
	     !caught && simtest_now_ns() < end;) {
		sleep_us((long)(rnd(&x) % 50));
		cr_assert(stop_now(p.pid));
		caught = in_flight(&arg);
		if (!caught)
			cont(p.pid);
	}
	cr_log_info("%llu hand-overs; %s", (unsigned long long)hand->moves,
		    caught ? "caught inside move(): SIGKILL" : "never caught");
	kill(p.pid, SIGKILL);
	hand->stop = 1;
	{
		int st;
		waitpid(p.pid, &st, 0);
		open_socks[p.sock] = false;
		close(p.sock);
		p.pid = 0;
	}
	cr_assert_eq(recv_msg(q.sock, &mq, &got), 0);
	hq = mq.a;
	reclaim("t-a");
	expect_no_escape("the importer killed inside the hand-over; the "
			 "other still holds the memory");
	call(&q, OP_VMM_RELEASE, hq, 0);
	expect_no_escape("all released");
	stop(&e);
	stop(&q);
	done();
	/* Caught or not (the charge is now added to the new payer before
	 * it is taken from the old, so the state this looks for no longer
	 * exists), nothing escaped above. */
	cr_log_info("caught inside move(): %s", caught ? "yes" : "no");
}

/* ATTACK: the importer closes while the shares lock is held by a stopped
 * process: its drop cannot be made then (it is kept to be tried again at
 * its next shared-memory call, and its leave makes it anyway), so when the
 * exporter frees meanwhile the charge moves to the importer, which holds
 * nothing: over, never under, until the importer's process lets go. */
Test(hostile, shares_lock_stopped_importer_close_leaves_phantom_charge)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), s = spawn("t-c");
	uint64_t pa, pb;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	stop_in_shares_lock(&s);
	call(&b, OP_IPC_CLOSE, pb, 0);
	end_spin(&s);
	expect_once("t-b closed while the shares lock was held");
	call(&a, OP_FREE, pa, 0);
	expect_no_escape("then the exporter freed: nobody holds it");
	stop(&b);
	reclaim("t-b");	/* the worker ends with _exit: its slot is reclaimed */
	expect_once("t-b's process ended");
	stop(&a);
	stop(&s);
	done();
}

/* ATTACK: an import while the shares lock is held by a stopped process:
 * the importer cannot find the record and is charged the memory as its
 * own, on top of the exporter: charged twice (the documented cost of a
 * stuck shares lock: over, never under), until the importer lets go. */
Test(hostile, shares_lock_stopped_import_charged_twice)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), s = spawn("t-c");
	uint64_t pa, pb, t0;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	stop_in_shares_lock(&s);
	t0 = simtest_now_ns();
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	cr_log_info("the open took %llu ms",
		    (unsigned long long)((simtest_now_ns() - t0) / 1000000));
	end_spin(&s);
	expect_no_escape("t-b opened while the shares lock was held");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("t-b closed");
	call(&a, OP_FREE, pa, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	stop(&s);
	done();
}

/* ATTACK: as above, with the importer's slice already full: charging it
 * as its own does not fit, so the import is refused (documented), and the
 * message must not claim the memory is recorded by no process (it is; the
 * shares lock was not had). */
Test(hostile, shares_lock_stopped_import_refused_with_wrong_message)
{
	char err[512], text[4096] = "";
	struct worker a = spawn("t-a"), b, s = spawn("t-c");
	uint64_t pa, fill;
	struct msg m, r;
	FILE *f;

	snprintf(err, sizeof(err), "%s/b.err", shimtest_ledger_dir());
	b = spawn_how("t-b", false, err);
	fill = call(&b, OP_ALLOC, LIMIT_BYTES, 0).a;
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	stop_in_shares_lock(&s);
	r = try_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL);
	end_spin(&s);
	f = fopen(err, "r");
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = 0;
		fclose(f);
	}
	cr_log_info("t-b's open answered %d; its stderr: %s", r.rc, text);
	cr_expect(r.rc == 0 || r.rc == CUDA_ERROR_OUT_OF_MEMORY,
		  "an import during a stuck shares lock answered %d", r.rc);
	cr_expect(r.rc == 0 || strstr(text, "could not be held"),
		  "a refused import said: %s", text);
	cr_expect_null(strstr(text, "recorded by no process"),
		       "misleading message: %s", text);
	if (r.rc == 0)
		call(&b, OP_IPC_CLOSE, r.a, 0);
	call(&b, OP_FREE, fill, 0);
	call(&a, OP_FREE, pa, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	stop(&s);
	done();
}

/* ATTACK: whatever a shares-lock timeout costs (above), nobody is told:
 * the exporter's free while the lock is held by a stopped process takes a
 * second, answers CUDA_SUCCESS and logs nothing. */
Test(hostile, shares_lock_timeout_is_silent)
{
	char err[512], text[4096] = "";
	struct worker a, b = spawn("t-b"), s = spawn("t-c");
	uint64_t pa, pb;
	struct msg m;
	FILE *f;

	snprintf(err, sizeof(err), "%s/a.err", shimtest_ledger_dir());
	a = spawn_how("t-a", false, err);
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	stop_in_shares_lock(&s);
	call(&a, OP_FREE, pa, 0);
	end_spin(&s);
	f = fopen(err, "r");
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = 0;
		fclose(f);
	}
	cr_expect_neq(text[0], 0, "the exporter's free could not hand the "
		      "charge over (shares lock timed out) and said nothing");
	call(&b, OP_IPC_CLOSE, pb, 0);
	stop(&a);
	stop(&b);
	stop(&s);
	done();
}

/* HOLDS: an importer exports the handle it imported again, and a third
 * process imports that: one record, one charge. */
Test(hostile, importer_reexports)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), c = spawn("t-b");
	uint64_t h, hb, hc;
	int fd;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	hb = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	call_fd(&b, OP_VMM_EXPORT, hb, 0, NULL, -1, &fd);
	hc = call_fd(&c, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	expect_once("re-exported by the importer and imported again");
	call(&a, OP_VMM_RELEASE, h, 0);
	expect_once("the exporter released");
	call(&b, OP_VMM_RELEASE, hb, 0);
	expect_once("the first importer released");
	call(&c, OP_VMM_RELEASE, hc, 0);
	expect_once("all released");
	stop(&a);
	stop(&b);
	stop(&c);
	done();
}

/* What a process sees when another process of its tenant is stopped
 * holding the tenant lock: its allocation must end in bounded time with
 * CUDA_ERROR_TIMEOUT and a message naming the holder (docs). */
Test(hostile, tenant_lock_stopped_allocation_times_out_with_message)
{
	char err[512];
	struct worker s = spawn("t-a"), b;
	char text[4096] = "";
	uint64_t t0, took;
	struct msg m;
	bool real;
	FILE *f;

	snprintf(err, sizeof(err), "%s/b.err", shimtest_ledger_dir());
	b = spawn_how("t-a", false, err);
	call(&b, OP_NOP, 0, 0);
	real = stop_in_tenant_lock(&s, "t-a");
	t0 = simtest_now_ns();
	m = try_call(&b, OP_ALLOC, MIB, 0);
	took = simtest_now_ns() - t0;
	release_tenant_lock(&s, "t-a", real);
	f = fopen(err, "r");
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = 0;
		fclose(f);
	}
	cr_assert_eq(m.rc, CUDA_ERROR_TIMEOUT, "the allocation answered %d",
		     m.rc);
	cr_assert_lt(took, 3000000000ull, "the allocation took %llu ms",
		     (unsigned long long)(took / 1000000));
	cr_assert(strstr(text, "CUDA_ERROR_TIMEOUT"), "no message: '%s'", text);
	stop(&b);
	stop(&s);
	done();
}

/* ============================================================================
 * Contexts
 * ========================================================================== */

/* HOLDS: the importer opened one IPC handle twice (the driver counts two
 * references), then its primary context is reset: the driver drops the
 * mapping with every reference; no hold may stay behind (the exporter's
 * free must then leave nobody charged). */
Test(hostile, ctx_reset_after_double_open)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL);
	call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL);
	expect_once("opened twice by t-b");
	call(&b, OP_CTX_RESET, 0, 0);
	expect_once("t-b's context reset");
	call(&a, OP_FREE, pa, 0);
	expect_once("the exporter freed: nobody holds the memory");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: the exporter's context is reset while an importer holds the
 * memory: the charge must move to the importer. */
Test(hostile, ctx_reset_of_exporter_moves_charge)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	call(&a, OP_CTX_RESET, 0, 0);
	expect_once("the exporter's context reset, t-b holds it");
	cr_assert_eq(charged("t-b"), OBJ);
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: contexts of their own (cuCtxCreate) destroyed while memory made
 * or opened in them is shared: the exporter's (IPC memory exported many
 * times), then the importer's. VMM memory is not a context's. */
Test(hostile, ctx_destroy_of_exporter_and_importer)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t ca, cb, pa, h, hb;
	struct msg m;
	int fd;

	ca = call(&a, OP_CTX_CREATE, 0, 0).a;
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	for (int i = 0; i < 20; i++)
		m = call(&a, OP_IPC_GET, pa, 0);
	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	cb = call(&b, OP_CTX_CREATE, 0, 0).a;
	call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL);
	hb = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	expect_once("made and opened in contexts of their own");
	call(&a, OP_CTX_DESTROY, ca, 0);
	expect_once("the exporter's context destroyed");
	call(&b, OP_CTX_DESTROY, cb, 0);
	expect_once("the importer's context destroyed");
	call(&a, OP_VMM_RELEASE, h, 0);
	call(&b, OP_VMM_RELEASE, hb, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * Threads of one process
 * ========================================================================== */

/* HOLDS (in 20000 rounds): in the importer, one thread closes its IPC
 * pointer while another opens the same handle again (each round leaves one
 * open in the driver). By reading share.c, an open whose opened(+1) lands
 * between the close's opened(-1) and vgpu__share_gone would ride on the
 * entry the close then throws away (held in the driver, no hold in the
 * ledger); the worker checks its hold after every round and stops at the
 * first that breaks. Not hit here: the window is a few instructions behind
 * a mutex. */
Test(hostile, threads_close_and_reopen_race, .timeout = 60)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb;
	struct msg m, r;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	/* The worker stops at the first round after which it holds the
	 * memory in the driver but not in the ledger. */
	r = call_fd(&b, OP_RACE_OPEN_CLOSE, pb, 20000, m.data, -1, NULL);
	pb = r.a;
	cr_log_info("race: %s at round %lld", r.c ? "broke" : "never broke",
		    (long long)(int64_t)r.c);
	expect_once("after the races, t-b holds one open");
	call(&a, OP_FREE, pa, 0);
	expect_once("the exporter freed; t-b still holds the memory (one "
		    "open left after a close/open race)");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS (in 3000 rounds): two threads of the importer open one IPC handle
 * for the first time at once (the driver counts two references to one
 * pointer: share.c makes two entries and two pointer-table entries for
 * it), then it is closed twice. Each round must hold while open and leave
 * nothing held once closed. */
Test(hostile, threads_first_open_race, .timeout = 60)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb;
	struct msg m, r;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	r = call_fd(&b, OP_RACE_FIRST_OPEN, 0, 3000, m.data, -1, NULL);
	cr_log_info("race: %s at round %lld", r.c ? "broke" : "never broke",
		    (long long)(int64_t)r.c);
	expect_once("after the races t-b holds nothing");
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	call(&a, OP_FREE, pa, 0);
	expect_once("t-b opened once more, the exporter freed");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&a);
	stop(&b);
	done();
}

/* ATTACK: one thread imports a VMM fd while another releases the handle
 * the moment the driver hands it out (before the shim has recorded it):
 * a use-after-release race of a hostile program, many rounds. When it is
 * over the importer holds nothing. */
Test(hostile, threads_import_release_race)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	struct msg r;
	uint64_t h;
	int fd;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	r = call_fd(&b, OP_RACE_IMPORT_RELEASE, 0, 300, NULL, fd, NULL);
	close(fd);
	cr_log_info("a hold left behind after round %llu (0: never)",
		    (unsigned long long)r.c);
	/* A release of a handle another thread has not got back yet from
	 * its import is not followed (docs/memory.md): over, never under. */
	expect_no_escape("after the races t-b holds nothing");
	call(&a, OP_VMM_RELEASE, h, 0);
	expect_no_escape("the exporter released");
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * Odd but legal uses
 * ========================================================================== */

/* ATTACK: the IPC handle is taken from a pointer inside the allocation (the
 * driver names the whole allocation by any pointer into it). The shim
 * records nothing, so the importer is charged the memory as if its
 * exporter ran without the shim: charged twice. */
Test(hostile, ipc_handle_of_interior_pointer_charged_twice)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb;
	struct msg m;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 4096);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	expect_once("exported by an inner pointer, opened by t-b");
	call(&a, OP_FREE, pa, 0);
	expect_once("the exporter freed");
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect_once("all closed");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: one fd imported twice by one process, and by the exporter
 * itself; the same handle exported many times. */
Test(hostile, same_fd_twice_self_import_many_exports)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t h, hb1, hb2, ha2, va;
	int fd, fd2;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	va = call(&a, OP_VMM_MAP, h, OBJ).a;
	for (int i = 0; i < 20; i++) {
		call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd2);
		close(fd2);
	}
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	expect_once("exported 21 times");
	hb1 = call_fd(&b, OP_VMM_IMPORT, 0, 1, NULL, fd, NULL).a;
	hb2 = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	ha2 = call_fd(&a, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	expect_once("imported twice by t-b and once by the exporter");
	call(&a, OP_VMM_RELEASE, h, 0);
	call(&a, OP_VMM_UNMAP, va, OBJ);
	expect_once("the exporter's first handle and mapping gone");
	call(&a, OP_VMM_RELEASE, ha2, 0);
	expect_once("the exporter's own import released");
	cr_assert_eq(charged("t-b"), OBJ);
	call(&b, OP_VMM_RELEASE, hb1, 0);
	expect_once("t-b released one");
	call(&b, OP_VMM_RELEASE, hb2, 0);
	expect_once("all released");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: cuMemFree on an imported IPC pointer is refused by the driver
 * and changes nothing; garbage and stale handles and descriptors are
 * refused cleanly. */
Test(hostile, bad_input)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	unsigned char junk[64];
	uint64_t pa, pb, p2;
	struct msg m, m2, r;
	int devnull, pfd[2];

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	r = try_call(&b, OP_FREE, pb, 0);
	cr_assert_neq(r.rc, 0, "cuMemFree of an IPC pointer succeeded");
	expect_once("a cuMemFree of the imported pointer refused");
	/* Garbage bytes, and the real bytes with one bit flipped. */
	for (int i = 0; i < 64; i++)
		junk[i] = (unsigned char)(i * 37 + 11);
	r = try_fd(&b, OP_IPC_OPEN, 0, 0, junk, -1, NULL);
	cr_assert_neq(r.rc, 0);
	memcpy(junk, m.data, 64);
	junk[8] ^= 0x40;
	r = try_fd(&b, OP_IPC_OPEN, 0, 0, junk, -1, NULL);
	cr_assert_neq(r.rc, 0);
	r = try_call(&b, OP_IPC_CLOSE, 0x1000, 0);
	cr_assert_neq(r.rc, 0);
	r = try_call(&a, OP_IPC_CLOSE, pa, 0);
	cr_assert_neq(r.rc, 0, "the exporter closed its own allocation");
	/* Descriptors that are no memory. */
	devnull = open("/dev/null", O_RDWR);
	r = try_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, devnull, NULL);
	cr_assert_neq(r.rc, 0);
	close(devnull);
	cr_assert_eq(pipe(pfd), 0);
	r = try_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, pfd[0], NULL);
	cr_assert_neq(r.rc, 0);
	close(pfd[0]);
	close(pfd[1]);
	devnull = open(shimtest_ledger_dir(), O_RDONLY);
	r = try_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, devnull, NULL);
	cr_assert_neq(r.rc, 0);
	close(devnull);
	r = try_call(&b, OP_VMM_IMPORT, 0, 0);	/* fd 0 of the worker */
	cr_assert_neq(r.rc, 0);
	expect_once("garbage refused");
	/* A stale handle: the memory is gone. */
	p2 = call(&a, OP_ALLOC, OBJ, 0).a;
	m2 = call(&a, OP_IPC_GET, p2, 0);
	call(&a, OP_FREE, p2, 0);
	r = try_fd(&b, OP_IPC_OPEN, 0, 0, m2.data, -1, NULL);
	cr_assert_neq(r.rc, 0, "a stale handle opened");
	expect_once("a stale handle refused");
	call(&b, OP_IPC_CLOSE, pb, 0);
	call(&a, OP_FREE, pa, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: an importer whose slice is full holds exported memory for free;
 * when the exporter frees, the charge moves to it past its limit (the
 * documented hand-over), and its next allocation is refused. */
Test(hostile, importer_with_full_slice)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb, fill;
	struct msg m, r;

	fill = call(&b, OP_ALLOC, LIMIT_BYTES, 0).a;
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	expect_once("t-b, full, opened the memory");
	call(&a, OP_FREE, pa, 0);
	expect_once("the exporter freed: t-b pays, past its limit");
	cr_assert_eq(charged("t-b"), LIMIT_BYTES + OBJ);
	r = try_call(&b, OP_ALLOC, MIB, 0);
	cr_assert_eq(r.rc, CUDA_ERROR_OUT_OF_MEMORY);
	call(&b, OP_IPC_CLOSE, pb, 0);
	call(&b, OP_FREE, fill, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * Exporters the ledger does not know
 * ========================================================================== */

/* HOLDS: the exporter runs without the shim; two importers (with it) race
 * to open the memory nobody recorded; one pays, once; the charge moves
 * between them and is gone when both let go. */
static void raw_race(bool vmm)
{
	struct worker a = spawn_how("t-raw", true, NULL);
	struct worker b = spawn("t-b"), c = spawn("t-a");
	struct msg m = { 0 }, mb = { 0 }, mc = { 0 };
	uint64_t pa = 0, h = 0, hb, hc;
	int fd = -1, got;

	if (vmm) {
		h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
		call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
		mb.op = mc.op = OP_VMM_IMPORT;
	} else {
		pa = call(&a, OP_ALLOC, OBJ, 0).a;
		m = call(&a, OP_IPC_GET, pa, 0);
		mb.op = mc.op = OP_IPC_OPEN;
		memcpy(mb.data, m.data, 64);
		memcpy(mc.data, m.data, 64);
	}
	/* Both asked before either answers. */
	cr_assert_eq(send_msg(b.sock, &mb, fd), 0);
	cr_assert_eq(send_msg(c.sock, &mc, fd), 0);
	cr_assert_eq(recv_msg(b.sock, &mb, &got), 0);
	cr_assert_eq(recv_msg(c.sock, &mc, &got), 0);
	if (fd >= 0)
		close(fd);
	cr_assert_eq(mb.rc, 0);
	cr_assert_eq(mc.rc, 0);
	hb = mb.a;
	hc = mc.a;
	expect_once("two importers raced on unrecorded memory");
	if (vmm)
		call(&a, OP_VMM_RELEASE, h, 0);
	else
		call(&a, OP_FREE, pa, 0);
	expect_once("the unknown exporter let go");
	call(&b, vmm ? OP_VMM_RELEASE : OP_IPC_CLOSE, hb, 0);
	expect_once("one importer let go");
	call(&c, vmm ? OP_VMM_RELEASE : OP_IPC_CLOSE, hc, 0);
	expect_once("all let go");
	stop(&a);
	stop(&b);
	stop(&c);
	done();
}

Test(hostile, unknown_exporter_ipc_racing_importers)
{
	for (int i = 0; i < 5; i++)
		raw_race(false);
}

Test(hostile, unknown_exporter_vmm_racing_importers)
{
	for (int i = 0; i < 5; i++)
		raw_race(true);
}

/* HOLDS: memory of an unknown exporter that does not fit the importer's
 * slice is refused with a message and the import undone. */
Test(hostile, unknown_exporter_import_over_slice)
{
	char err[512], text[4096] = "";
	struct worker a = spawn_how("t-raw", true, NULL), b;
	uint64_t pa, fill;
	struct msg m, r;
	FILE *f;

	snprintf(err, sizeof(err), "%s/b.err", shimtest_ledger_dir());
	b = spawn_how("t-b", false, err);
	fill = call(&b, OP_ALLOC, LIMIT_BYTES - OBJ / 2, 0).a;
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	r = try_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL);
	cr_assert_eq(r.rc, CUDA_ERROR_OUT_OF_MEMORY);
	f = fopen(err, "r");
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = 0;
		fclose(f);
	}
	cr_assert(strstr(text, "cuIpcOpenMemHandle"), "message: '%s'", text);
	call(&a, OP_FREE, pa, 0);
	expect_once("refused and undone");
	call(&b, OP_FREE, fill, 0);
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * Limits of the records
 * ========================================================================== */

/* HOLDS: twelve importers of one object (past the 8 holder entries), in
 * two tenants; the exporter lets go first, then the importers in an order
 * that makes the over-the-limit ones last. */
Test(hostile, twelve_importers)
{
	struct worker a = spawn("t-a"), w[12];
	uint64_t h, hw[12];
	int fd;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	for (int i = 0; i < 12; i++) {
		w[i] = spawn(i % 2 ? "t-a" : "t-b");
		hw[i] = call_fd(&w[i], OP_VMM_IMPORT, 0, 1, NULL, fd, NULL).a;
	}
	close(fd);
	expect_no_escape("twelve importers");
	call(&a, OP_VMM_RELEASE, h, 0);
	expect_no_escape("the exporter released");
	for (int i = 0; i < 12; i++) {
		call(&w[i], OP_VMM_RELEASE, hw[i], 0);
		expect_no_escape("an importer released");
	}
	expect_once("all released");
	stop(&a);
	for (int i = 0; i < 12; i++)
		stop(&w[i]);
	done();
}

/* HOLDS: 512 shared objects (past the ledger's 511 records), each opened
 * by an importer; the exporter frees them all, then the importer closes
 * them all. */
Test(hostile, five_hundred_twelve_objects, .timeout = 60)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	static uint64_t pa[512], pb[512];
	struct msg m;

	for (int i = 0; i < 512; i++) {
		pa[i] = call(&a, OP_ALLOC, 512 * KIB, 0).a;
		m = call(&a, OP_IPC_GET, pa[i], 0);
		pb[i] = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	}
	expect_no_escape("512 objects exported and opened");
	cr_assert_eq(L.head->in_use, VGPU_LEDGER_MAX_SHARES,
		     "the records were not all used: %u", L.head->in_use);
	for (int i = 0; i < 512; i++)
		call(&a, OP_FREE, pa[i], 0);
	expect_no_escape("the exporter freed them");
	for (int i = 0; i < 512; i++)
		call(&b, OP_IPC_CLOSE, pb[i], 0);
	expect_once("all closed");
	stop(&a);
	stop(&b);
	done();
}

/* ATTACK: one fd imported 1100 times by one process (past its 1024 local
 * entries): every handle is then released, and the exporter lets go. */
Test(hostile, eleven_hundred_imports_in_one_process)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t h;
	int fd;

	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	cr_assert_eq(call_fd(&b, OP_IMPORT_MANY, 0, 1100, NULL, fd, NULL).a,
		     1100);
	close(fd);
	expect_no_escape("imported 1100 times");
	call(&b, OP_RELEASE_MANY, 0, 0);
	expect_once("t-b released all of them");
	call(&a, OP_VMM_RELEASE, h, 0);
	expect_once("the exporter released: nobody holds it");
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * fork
 * ========================================================================== */

/* HOLDS: an importer forks children that exit normally (the shim's
 * destructor in the child) or are killed, and a child that imports the
 * parent's fd itself and exits without releasing it. */
Test(hostile, fork_children_of_importer)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t pa, pb, h, hb;
	struct msg m;
	int fd, fd2;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	m = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	h = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	call_fd(&a, OP_VMM_EXPORT, h, 0, NULL, -1, &fd2);
	hb = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	expect_once("exported and imported");
	cr_assert_eq(call(&b, OP_FORK, 0, 2).a, 0);
	expect_once("a child of t-b exited normally");
	call(&b, OP_FORK, 0, 0);
	expect_once("a child of t-b was killed");
	m = call_fd(&b, OP_FORK, 0, 1, NULL, fd2, NULL);
	close(fd2);
	cr_assert_eq(m.a, 0, "the child's status 0x%llx",
		     (unsigned long long)m.a);
	expect_once("a child of t-b imported and exited");
	call(&a, OP_FREE, pa, 0);
	call(&a, OP_VMM_RELEASE, h, 0);
	expect_once("the exporter let go");
	call(&b, OP_IPC_CLOSE, pb, 0);
	call(&b, OP_VMM_RELEASE, hb, 0);
	expect_once("all gone");
	stop(&a);
	stop(&b);
	done();
}

/* ============================================================================
 * Kills at random moments
 * ========================================================================== */

/* HOLDS: an exporter (t-a) and two importers (t-b) hold IPC and VMM
 * memory; all three are then sent work at once (an export, an import, a
 * close) and one of them (seeded) is SIGKILLed a random few microseconds
 * later, possibly inside its export, import or close; after the dead slot
 * is reclaimed, the tenants pay what the device holds, and every survivor
 * letting go brings both to zero. */
static void kill_round(uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	struct worker w[3] = { spawn("t-a"), spawn("t-b"), spawn("t-b") };
	struct msg m, q[3];
	uint64_t h, hb = 0, pw[3] = { 0 }, hw1 = 0;
	int victim = (int)(rnd(&x) % 3), fd, got;
	bool closed2 = false;
	char step[80];

	pw[0] = call(&w[0], OP_ALLOC, OBJ, 0).a;
	m = call(&w[0], OP_IPC_GET, pw[0], 0);
	pw[1] = call_fd(&w[1], OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	pw[2] = call_fd(&w[2], OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	h = call(&w[0], OP_VMM_CREATE, OBJ, 0).a;
	call_fd(&w[0], OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
	hb = call_fd(&w[2], OP_VMM_IMPORT, 0, 1, NULL, fd, NULL).a;
	expect_once("set up");
	/* All three busy at once. */
	q[0] = (struct msg){ .op = OP_VMM_EXPORT, .a = h };
	q[1] = (struct msg){ .op = OP_VMM_IMPORT };
	q[2] = (struct msg){ .op = OP_IPC_CLOSE, .a = pw[2] };
	cr_assert_eq(send_msg(w[0].sock, &q[0], -1), 0);
	cr_assert_eq(send_msg(w[1].sock, &q[1], fd), 0);
	cr_assert_eq(send_msg(w[2].sock, &q[2], -1), 0);
	close(fd);
	sleep_us((long)(rnd(&x) % 400));
	kill_worker(&w[victim]);
	for (int i = 0; i < 3; i++) {
		if (i == victim)
			continue;
		cr_assert_eq(recv_msg(w[i].sock, &q[i], &got), 0);
		if (got >= 0)
			close(got);
		if (i == 1 && q[1].rc == 0)
			hw1 = q[1].a;
		if (i == 2 && q[2].rc == 0)
			closed2 = true;
	}
	reclaim(victim == 0 ? "t-a" : "t-b");
	snprintf(step, sizeof(step), "seed %llu: worker %d killed",
		 (unsigned long long)seed, victim);
	expect_once(step);
	for (int i = 0; i < 3; i++) {
		if (!w[i].pid)
			continue;
		if (i == 0) {
			call(&w[0], OP_FREE, pw[0], 0);
			call(&w[0], OP_VMM_RELEASE, h, 0);
		} else if (i == 1) {
			call(&w[1], OP_IPC_CLOSE, pw[1], 0);
			if (hw1)
				call(&w[1], OP_VMM_RELEASE, hw1, 0);
		} else {
			if (!closed2)
				call(&w[2], OP_IPC_CLOSE, pw[2], 0);
			call(&w[2], OP_VMM_RELEASE, hb, 0);
		}
		snprintf(step, sizeof(step), "seed %llu: worker %d let go",
			 (unsigned long long)seed, i);
		expect_once(step);
	}
	for (int i = 0; i < 3; i++)
		stop(&w[i]);
	done();
}

Test(hostile, random_kills, .timeout = 60)
{
	for (uint64_t seed = 1; seed <= 9; seed++)
		kill_round(seed);
}

/* ============================================================================
 * A hand-edited ledger
 * ========================================================================== */

/* Makes one recorded object of a's and returns its record, b holding it. */
static int recorded(struct worker *a, struct worker *b, uint64_t *pa,
		    uint64_t *pb)
{
	struct msg m;

	*pa = call(a, OP_ALLOC, OBJ, 0).a;
	m = call(a, OP_IPC_GET, *pa, 0);
	*pb = call_fd(b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	return first_record();
}

/* ATTACK: a corrupt record's kind (a usage kind past the 16 of the usage
 * arrays): the exporter's free must not crash. */
Test(hostile, corrupt_record_kind_does_not_crash)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	struct msg m = { .op = OP_FREE };
	uint64_t pa, pb;
	int i, fd, st;

	i = recorded(&a, &b, &pa, &pb);
	cr_assert_geq(i, 0);
	L.rec[i].kind = 0x40000000u;
	call(&b, OP_IPC_CLOSE, pb, 0);
	m.a = pa;
	cr_assert_eq(send_msg(a.sock, &m, -1), 0);
	if (recv_msg(a.sock, &m, &fd) != 0) {
		cr_assert_eq(waitpid(a.pid, &st, 0), a.pid);
		a.pid = 0;
		cr_assert_fail("the exporter's cuMemFree crashed on a record "
			       "whose kind is 0x40000000: %s %d",
			       WIFSIGNALED(st) ? "signal" : "exit status",
			       WIFSIGNALED(st) ? WTERMSIG(st) :
						 WEXITSTATUS(st));
	}
	cr_assert_eq(m.rc, 0);
	stop(&a);
	stop(&b);
	done();
}

/* HOLDS: corrupt indices and counts (a payer past the holders, slots past
 * the slots, huge counts, zero generation, in_use near UINT32_MAX) in a
 * record the processes use, and a duplicate of its key: no crash, no hang
 * (the numbers themselves are not judged: the ledger is no security
 * boundary, docs/ledger-abi.md). */
Test(hostile, corrupt_record_indices_do_not_crash)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), c;
	uint64_t pa, pb, t0;
	struct msg r;
	int i;

	i = recorded(&a, &b, &pa, &pb);
	cr_assert_geq(i, 0);
	L.rec[i + 1] = L.rec[i];	/* a duplicate key */
	L.rec[i].payer = 0xffffffffu;
	for (int p = 2; p < VGPU_LEDGER_SHARE_HOLDERS; p++) {
		L.rec[i].slot[p] = 0x7fffffffu;
		L.rec[i].gen[p] = 0;
		L.rec[i].count[p] = 0xffffffffu;
	}
	L.rec[i + 1].payer = 7;
	L.rec[i + 1].slot[6] = 0;
	L.rec[i + 1].count[0] = 0xffffffffu;
	L.head->in_use = 0xfffffff0u;
	t0 = simtest_now_ns();
	r = try_call(&b, OP_IPC_CLOSE, pb, 0);
	cr_assert_eq(r.rc, 0);
	r = try_call(&a, OP_FREE, pa, 0);
	cr_assert_eq(r.rc, 0);
	/* New traffic on top of the garbage. */
	c = spawn("t-b");
	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	r = call(&a, OP_IPC_GET, pa, 0);
	pb = call_fd(&c, OP_IPC_OPEN, 0, 0, r.data, -1, NULL).a;
	call(&a, OP_FREE, pa, 0);
	call(&c, OP_IPC_CLOSE, pb, 0);
	leave(&a);
	leave(&b);
	leave(&c);
	cr_assert_lt(simtest_now_ns() - t0, 5000000000ull);
	done();
}

/* HOLDS: all 511 records filled with seeded garbage (valid kinds) whose
 * holder entries name the live processes' own slots and generations, with
 * random payers, counts and sizes: the frees and exits of those processes
 * walk them all and must not crash or hang (the numbers are not judged). */
Test(hostile, corrupt_records_everywhere_exit_cleanly)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), c = spawn("t-b");
	uint32_t sl[3], gen[3];
	uint64_t pa, pb, t0, x = 99;
	int i;

	i = recorded(&a, &b, &pa, &pb);
	cr_assert_geq(i, 0);
	/* c joins the ledger as it starts: wait for its slot (bounded). */
	for (int n = 0; n < 5000 && slot_of_pid(c.pid) < 0; n++)
		sleep_us(1000);
	cr_assert_geq(slot_of_pid(a.pid), 0);
	cr_assert_geq(slot_of_pid(b.pid), 0);
	cr_assert_geq(slot_of_pid(c.pid), 0, "worker c never joined the ledger");
	sl[0] = (uint32_t)slot_of_pid(a.pid) + 1;
	sl[1] = (uint32_t)slot_of_pid(b.pid) + 1;
	sl[2] = (uint32_t)slot_of_pid(c.pid) + 1;
	for (int k = 0; k < 3; k++)
		gen[k] = L.slots[sl[k] - 1].generation;
	for (int k = 0; k < VGPU_LEDGER_MAX_SHARES; k++) {
		if (k == i)
			continue;
		L.rec[k].key[0] = rnd(&x) | 1;
		L.rec[k].key[1] = rnd(&x);
		L.rec[k].bytes = rnd(&x) % 3 ? rnd(&x) : UINT64_MAX;
		L.rec[k].kind = (uint32_t)(rnd(&x) % VGPU_USAGE_COUNT);
		L.rec[k].payer = (uint32_t)(rnd(&x) % 12);
		for (int p = 0; p < VGPU_LEDGER_SHARE_HOLDERS; p++) {
			int w = (int)(rnd(&x) % 5);
			L.rec[k].slot[p] = w < 3 ? sl[w] : (uint32_t)rnd(&x);
			L.rec[k].gen[p] = w < 3 ? gen[w] : (uint32_t)rnd(&x);
			L.rec[k].count[p] = (uint32_t)rnd(&x);
		}
	}
	L.head->in_use = VGPU_LEDGER_MAX_SHARES;
	t0 = simtest_now_ns();
	call(&b, OP_IPC_CLOSE, pb, 0);
	call(&a, OP_FREE, pa, 0);
	leave(&a);
	leave(&b);
	leave(&c);
	cr_assert_lt(simtest_now_ns() - t0, 5000000000ull);
	done();
}
