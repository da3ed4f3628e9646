/* test_shared.c - memory shared between processes is charged once, to one
 * tenant, for exactly as long as the device keeps it.
 *
 * Worker processes (this process never touches CUDA, so that it can fork
 * them at any time), each of a tenant, export and import memory through CUDA IPC handles and VMM
 * handles exported as file descriptors (passed with SCM_RIGHTS), on
 * command. After every step the judge is the simulated device's own count
 * (shimtest_device_used, read by a worker that allocates nothing): what the tenants are charged together equals
 * what the device holds, the data one process wrote is what another reads,
 * and both counts end at zero, in every release order, when the exporter
 * is killed, and in seeded random orders.
 */
#include "shimtest.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define OBJ (64 * MIB)
#define LIMIT "512MiB"

static void setup(void)
{
	simtest_clean_env();
	setenv("VGPU_SIM_MEMORY", "2GiB", 1);
	shimtest_env("t-a", LIMIT);
}

TestSuite(shared, .init = setup, .fini = shimtest_cleanup);

enum op {
	OP_ALLOC, OP_FREE, OP_IPC_GET, OP_IPC_OPEN, OP_IPC_CLOSE, OP_WRITE,
	OP_CHECK, OP_VMM_CREATE, OP_VMM_EXPORT, OP_VMM_IMPORT, OP_VMM_MAP,
	OP_VMM_UNMAP, OP_VMM_RELEASE, OP_USED,
};

struct msg {
	int op;
	int rc;
	uint64_t a, b;
	unsigned char data[64];
};

struct worker {
	pid_t pid;
	int sock;
	const char *tenant;
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

static CUmemAllocationProp vmm_prop(void)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

/* Runs one command; m->rc is the driver's answer (or -1). */
static int run_op(struct msg *m, int fd_in)
{
	CUmemAllocationProp p = vmm_prop();
	CUmemAccessDesc acc;
	CUdeviceptr d;
	CUmemGenericAllocationHandle h;
	CUipcMemHandle ih;
	unsigned char buf[4096];
	int fd = -1;

	switch (m->op) {
	case OP_ALLOC:
		m->rc = cuMemAlloc(&d, m->a);
		m->a = d;
		break;
	case OP_FREE:
		m->rc = cuMemFree(m->a);
		break;
	case OP_IPC_GET:
		m->rc = cuIpcGetMemHandle(&ih, m->a);
		memcpy(m->data, &ih, sizeof(ih));
		break;
	case OP_IPC_OPEN:
		memcpy(&ih, m->data, sizeof(ih));
		m->rc = cuIpcOpenMemHandle(&d, ih,
					   CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		m->a = d;
		break;
	case OP_IPC_CLOSE:
		m->rc = cuIpcCloseMemHandle(m->a);
		break;
	case OP_WRITE:		/* a: pointer, b: byte */
		m->rc = cuMemsetD8(m->a, (unsigned char)m->b, OBJ);
		break;
	case OP_CHECK:		/* the first and last pages hold byte b */
		m->rc = cuMemcpyDtoH(buf, m->a, sizeof(buf));
		for (size_t i = 0; !m->rc && i < sizeof(buf); i++)
			if (buf[i] != (unsigned char)m->b)
				m->rc = -1;
		if (!m->rc)
			m->rc = cuMemcpyDtoH(buf, m->a + OBJ - sizeof(buf),
					     sizeof(buf));
		for (size_t i = 0; !m->rc && i < sizeof(buf); i++)
			if (buf[i] != (unsigned char)m->b)
				m->rc = -1;
		break;
	case OP_VMM_CREATE:
		m->rc = cuMemCreate(&h, m->a, &p, 0);
		m->a = h;
		break;
	case OP_VMM_EXPORT:
		m->rc = cuMemExportToShareableHandle(
			&fd, m->a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		break;
	case OP_VMM_IMPORT:
		m->rc = cuMemImportFromShareableHandle(
			&h, (void *)(intptr_t)fd_in,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		close(fd_in);
		m->a = h;
		break;
	case OP_VMM_MAP:	/* a: handle -> a: address */
		m->rc = cuMemAddressReserve(&d, OBJ, 0, 0, 0);
		if (!m->rc)
			m->rc = cuMemMap(d, OBJ, 0, m->a, 0);
		memset(&acc, 0, sizeof(acc));
		acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		if (!m->rc)
			m->rc = cuMemSetAccess(d, OBJ, &acc, 1);
		m->a = d;
		break;
	case OP_VMM_UNMAP:
		m->rc = cuMemUnmap(m->a, OBJ);
		if (!m->rc)
			m->rc = cuMemAddressFree(m->a, OBJ);
		break;
	case OP_VMM_RELEASE:
		m->rc = cuMemRelease(m->a);
		break;
	case OP_USED:		/* the simulator's own count, not the shim's */
		m->a = shimtest_device_used();
		m->rc = 0;
		break;
	default:
		m->rc = -1;
	}
	return fd;
}

static int serve(int sock, const char *tenant)
{
	CUcontext ctx;
	struct msg m;
	int fd, out;

	setenv("VGPU_TENANT", tenant, 1);
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
	    cuCtxSetCurrent(ctx))
		return 3;
	while (recv_msg(sock, &m, &fd) == 0) {
		out = run_op(&m, fd);
		if (send_msg(sock, &m, out) != 0)
			return 4;
		if (out >= 0)
			close(out);
	}
	return 0;
}

/* ---- the test's side ---------------------------------------------------------- */

/* The test's ends of the workers' sockets: a worker closes the others',
 * so that each sees the end of its own when the test closes it. */
static bool open_socks[1024];

static struct worker spawn(const char *tenant)
{
	struct worker w = { .tenant = tenant };
	int sv[2];

	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	cr_assert_lt(sv[0], 1024);
	w.pid = fork();
	cr_assert_geq(w.pid, 0);
	if (w.pid == 0) {
		close(sv[0]);
		for (int fd = 0; fd < 1024; fd++)
			if (open_socks[fd])
				close(fd);
		_exit(serve(sv[1], tenant));
	}
	close(sv[1]);
	w.sock = sv[0];
	open_socks[w.sock] = true;
	return w;
}

static void stop(struct worker *w)
{
	int status;

	if (w->pid <= 0)
		return;
	open_socks[w->sock] = false;
	close(w->sock);
	cr_assert_eq(waitpid(w->pid, &status, 0), w->pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "worker %s: status 0x%x", w->tenant, status);
	w->pid = 0;
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

/* Sends a command (with fd, or -1) and returns the reply; asserts that the
 * driver said CUDA_SUCCESS. *fd_out gets a descriptor sent back. */
static struct msg call_fd(struct worker *w, int op, uint64_t a, uint64_t b,
			  const void *data, int fd, int *fd_out)
{
	struct msg m = { .op = op, .a = a, .b = b };
	int got;

	if (data)
		memcpy(m.data, data, sizeof(m.data));
	cr_assert_eq(send_msg(w->sock, &m, fd), 0);
	cr_assert_eq(recv_msg(w->sock, &m, &got), 0, "worker %s died",
		     w->tenant);
	cr_assert_eq(m.rc, 0, "worker %s: op %d answered %d", w->tenant, op,
		     m.rc);
	if (fd_out)
		*fd_out = got;
	else if (got >= 0)
		close(got);
	return m;
}

static struct msg call(struct worker *w, int op, uint64_t a, uint64_t b)
{
	return call_fd(w, op, a, b, NULL, -1, NULL);
}

static struct ledger_view v;
static bool viewing;
static struct worker judge;

static uint64_t device_used(void)
{
	if (!judge.pid)
		judge = spawn("t-judge");
	return call(&judge, OP_USED, 0, 0).a;
}

static uint64_t charged(const char *tenant)
{
	return ledger_tenant(&v, tenant) ?
		       ledger_tenant_bytes(&v, tenant, VGPU_USAGE_COUNT) : 0;
}

/* The promise after a step: charged once, exactly what the device holds;
 * `a` and `b` what tenants t-a and t-b pay. */
static void expect(const char *step, uint64_t a, uint64_t b)
{
	uint64_t held = device_used();

	if (!viewing) {
		ledger_view_must(&v, NULL);
		viewing = true;
	}
	cr_assert_eq(charged("t-a") + charged("t-b"), held,
		     "%s: the tenants are charged %llu + %llu MiB, the device "
		     "holds %llu MiB", step,
		     (unsigned long long)(charged("t-a") / MIB),
		     (unsigned long long)(charged("t-b") / MIB),
		     (unsigned long long)(held / MIB));
	cr_assert_eq(charged("t-a"), a, "%s: t-a pays %llu MiB, expected %llu",
		     step, (unsigned long long)(charged("t-a") / MIB),
		     (unsigned long long)(a / MIB));
	cr_assert_eq(charged("t-b"), b, "%s: t-b pays %llu MiB, expected %llu",
		     step, (unsigned long long)(charged("t-b") / MIB),
		     (unsigned long long)(b / MIB));
}

static void done(void)
{
	stop(&judge);
	if (viewing) {
		ledger_view_close(&v);
		viewing = false;
	}
}

/* Legacy IPC: A exports, B opens (twice), the data crosses, and the
 * release orders move the charge as the device keeps the memory. */
static void ipc_case(bool exporter_first)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	struct msg m;
	uint64_t pa, pb;

	pa = call(&a, OP_ALLOC, OBJ, 0).a;
	call(&a, OP_WRITE, pa, 0x5a);
	m = call(&a, OP_IPC_GET, pa, 0);
	expect("allocated and exported", OBJ, 0);
	pb = call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	cr_assert_eq(call_fd(&b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a, pb,
		     "a second open gives the same pointer");
	expect("opened twice by t-b", OBJ, 0);
	call(&b, OP_CHECK, pb, 0x5a);
	call(&b, OP_WRITE, pb, 0x3c);
	call(&a, OP_CHECK, pa, 0x3c);
	call(&b, OP_IPC_CLOSE, pb, 0);
	expect("closed once of two", OBJ, 0);
	if (exporter_first) {
		call(&a, OP_FREE, pa, 0);
		expect("the exporter freed it, t-b holds it", 0, OBJ);
		call(&b, OP_CHECK, pb, 0x3c);
		call(&b, OP_IPC_CLOSE, pb, 0);
	} else {
		call(&b, OP_IPC_CLOSE, pb, 0);
		expect("t-b closed it", OBJ, 0);
		call(&a, OP_FREE, pa, 0);
	}
	expect("all gone", 0, 0);
	stop(&a);
	stop(&b);
	done();
}

Test(shared, ipc_exporter_frees_first)
{
	ipc_case(true);
}

Test(shared, ipc_importer_closes_first)
{
	ipc_case(false);
}

/* VMM handles exported as descriptors: B imports, maps and reads; the
 * handles and mappings of both go in the order given. */
static void vmm_case(bool exporter_first, bool release_mapped)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	uint64_t ha, hb, va, vb;
	int fd;

	ha = call(&a, OP_VMM_CREATE, OBJ, 0).a;
	va = call(&a, OP_VMM_MAP, ha, 0).a;
	call(&a, OP_WRITE, va, 0x77);
	call_fd(&a, OP_VMM_EXPORT, ha, 0, NULL, -1, &fd);
	cr_assert_geq(fd, 0, "no descriptor came back");
	expect("created, mapped, exported", OBJ, 0);
	hb = call_fd(&b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	close(fd);
	vb = call(&b, OP_VMM_MAP, hb, 0).a;
	expect("imported and mapped by t-b", OBJ, 0);
	call(&b, OP_CHECK, vb, 0x77);
	if (release_mapped)
		call(&b, OP_VMM_RELEASE, hb, 0);
	if (exporter_first) {
		call(&a, OP_VMM_RELEASE, ha, 0);
		expect("the exporter released its handle, still mapped", OBJ, 0);
		call(&a, OP_VMM_UNMAP, va, 0);
		expect("the exporter let go, t-b holds it", 0, OBJ);
		call(&b, OP_CHECK, vb, 0x77);
		call(&b, OP_VMM_UNMAP, vb, 0);
		if (!release_mapped)
			call(&b, OP_VMM_RELEASE, hb, 0);
	} else {
		call(&b, OP_VMM_UNMAP, vb, 0);
		if (!release_mapped)
			call(&b, OP_VMM_RELEASE, hb, 0);
		expect("t-b let go", OBJ, 0);
		call(&a, OP_VMM_UNMAP, va, 0);
		call(&a, OP_VMM_RELEASE, ha, 0);
	}
	expect("all gone", 0, 0);
	stop(&a);
	stop(&b);
	done();
}

Test(shared, vmm_exporter_lets_go_first)
{
	vmm_case(true, false);
}

Test(shared, vmm_importer_lets_go_first)
{
	vmm_case(false, false);
}

Test(shared, vmm_importer_releases_its_handle_while_mapped)
{
	vmm_case(true, true);
}

/* What share_both made: t-a's IPC buffer (OBJ) and VMM handle, as t-a
 * and t-b hold them. */
struct shared_pair {
	uint64_t pa, h;		/* the exporter's */
	uint64_t pb, hb, vb;	/* the importer's: IPC pointer, handle, map */
};

/* a allocates OBJ bytes (written with pattern) and exports them by CUDA
 * IPC, makes a VMM handle of vmm bytes and exports it as a descriptor; b
 * opens the first and imports and maps the second. */
static void share_both(struct worker *a, struct worker *b, uint64_t vmm,
		       uint64_t pattern, struct shared_pair *sh)
{
	struct msg m;
	int fd;

	sh->pa = call(a, OP_ALLOC, OBJ, 0).a;
	call(a, OP_WRITE, sh->pa, pattern);
	m = call(a, OP_IPC_GET, sh->pa, 0);
	sh->h = call(a, OP_VMM_CREATE, vmm, 0).a;
	call_fd(a, OP_VMM_EXPORT, sh->h, 0, NULL, -1, &fd);
	sh->pb = call_fd(b, OP_IPC_OPEN, 0, 0, m.data, -1, NULL).a;
	sh->hb = call_fd(b, OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
	sh->vb = call(b, OP_VMM_MAP, sh->hb, 0).a;
	close(fd);
}

/* b lets go of what share_both gave it: the IPC memory, the mapping,
 * the handle. */
static void let_go_imports(struct worker *b, const struct shared_pair *sh)
{
	call(b, OP_IPC_CLOSE, sh->pb, 0);
	call(b, OP_VMM_UNMAP, sh->vb, 0);
	call(b, OP_VMM_RELEASE, sh->hb, 0);
}

/* w's allocation of bytes: the driver's answer (not asserted). */
static CUresult try_alloc(struct worker *w, uint64_t bytes)
{
	struct msg r = { .op = OP_ALLOC, .a = bytes };
	int fd;

	cr_assert_eq(send_msg(w->sock, &r, -1), 0);
	cr_assert_eq(recv_msg(w->sock, &r, &fd), 0, "worker %s died",
		     w->tenant);
	return (CUresult)r.rc;
}

/* What a monitor of tenant sees as used (NVML's memory info in a process
 * that never used CUDA: the ledger read without joining). */
struct nvml_mem {
	unsigned long long total, free, used;
};

static uint64_t monitor_used(const char *tenant)
{
	int pfd[2];
	uint64_t used = UINT64_MAX;
	pid_t pid;
	int status;

	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		int (*init)(void) = h ? (int (*)(void))dlsym(h, "nvmlInit_v2")
				      : NULL;
		int (*get)(unsigned, void **) =
			h ? (int (*)(unsigned, void **))dlsym(
				    h, "nvmlDeviceGetHandleByIndex_v2")
			  : NULL;
		int (*mem)(void *, struct nvml_mem *) =
			h ? (int (*)(void *, struct nvml_mem *))dlsym(
				    h, "nvmlDeviceGetMemoryInfo")
			  : NULL;
		struct nvml_mem m;
		void *d;

		setenv("VGPU_TENANT", tenant, 1);
		if (init && get && mem && !init() && !get(0, &d) &&
		    !mem(d, &m))
			used = m.used;
		_exit(write(pfd[1], &used, sizeof(used)) == sizeof(used)
		      ? 0 : 1);
	}
	close(pfd[1]);
	cr_assert_eq(read(pfd[0], &used, sizeof(used)), (ssize_t)sizeof(used));
	close(pfd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return used;
}

/* The exporter is killed while the importer holds the memory: once its
 * death is noticed (here: a refused allocation of its tenant reclaims its
 * slot), the importer's tenant pays, and letting go gives it back. */
Test(shared, the_exporter_killed_hands_the_charge_to_the_importer)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), c;
	struct shared_pair sh;
	struct msg r;

	share_both(&a, &b, OBJ, 0x11, &sh);
	expect("both exported and imported", 2 * OBJ, 0);
	kill_worker(&a);
	/* Still on the device, and charged to t-a, while t-b holds it: a
	 * monitor of t-a counts it (it left out all a dead process held,
	 * memory live holders keep included). */
	cr_assert_eq(monitor_used("t-a"), 2 * OBJ, "t-a's monitor: %llu MiB",
		     (unsigned long long)(monitor_used("t-a") / MIB));
	/* A process of t-a asking for the whole slice is refused while the
	 * dead exporter's slot counts, reclaims it, and gets it. */
	c = spawn("t-a");
	r = call(&c, OP_ALLOC, 512 * MIB, 0);
	expect("the exporter's death noticed", 512 * MIB, 2 * OBJ);
	call(&c, OP_FREE, r.a, 0);
	call(&b, OP_CHECK, sh.pb, 0x11);
	call(&b, OP_IPC_CLOSE, sh.pb, 0);
	expect("t-b closed the IPC memory", 0, OBJ);
	call(&b, OP_VMM_UNMAP, sh.vb, 0);
	expect("t-b unmapped, its handle holds it", 0, OBJ);
	call(&b, OP_VMM_RELEASE, sh.hb, 0);
	expect("all gone", 0, 0);
	stop(&b);
	stop(&c);
	done();
}

/* The exporter is killed and the importer's tenant allocates next: its
 * reservation finds the payer gone and takes the charge over first, so
 * the importer's tenant cannot allocate its whole slice besides what it
 * holds (it could: 704 MiB on the device for a 512 MiB slice, a hostile
 * review). */
Test(shared, the_exporter_killed_the_importer_pays_at_its_next_allocation)
{
	struct worker a = spawn("t-a"), b = spawn("t-b");
	struct shared_pair sh;
	uint64_t got;
	CUresult r;

	share_both(&a, &b, OBJ, 0x22, &sh);
	expect("both exported and imported", 2 * OBJ, 0);
	kill_worker(&a);
	/* 448 MiB more would put t-b at 576 MiB with what it holds. */
	r = try_alloc(&b, 512 * MIB - OBJ);
	cr_assert_eq(r, CUDA_ERROR_OUT_OF_MEMORY, "t-b got 448 MiB more "
		     "besides the 128 MiB it holds of the dead exporter's "
		     "(answer %d)", r);
	expect("the dead exporter's charge moved to t-b", 0, 2 * OBJ);
	got = call(&b, OP_ALLOC, 512 * MIB - 2 * OBJ, 0).a;
	expect("t-b's slice full", 0, 512 * MIB);
	call(&b, OP_CHECK, sh.pb, 0x22);
	call(&b, OP_FREE, got, 0);
	let_go_imports(&b, &sh);
	expect("all gone", 0, 0);
	stop(&b);
	done();
}

/* Removes (or truncates) every ledger file of the test's directory: its
 * processes move to a new file at their next look (ledger_move.c). */
static void remove_ledgers(bool truncate_them)
{
	char path[1024];
	struct dirent *e;
	DIR *d = opendir(shimtest_ledger_dir());

	if (viewing) {
		ledger_view_close(&v);
		viewing = false;
	}
	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".ledger")) {
			snprintf(path, sizeof(path), "%s/%s",
				 shimtest_ledger_dir(), e->d_name);
			cr_assert_eq(truncate_them ? truncate(path, 0)
						   : unlink(path), 0, "%s",
				     path);
		}
	closedir(d);
}

/* The ledger file is deleted while memory is shared: the records stay in
 * the old file, so the importer, moving, is charged what it imported
 * (charged twice while the exporter holds it too), and when the exporter
 * has let go and left, the importer cannot take its whole slice besides
 * (it could: 912 MiB on the device under 512, a hostile review). */
static void ledger_gone_while_shared(bool truncate_it)
{
	struct worker a = spawn("t-a"), b = spawn("t-b"), c;
	struct timespec pause = { 0, 300 * 1000000L };
	struct shared_pair sh;
	uint64_t got, more = 512 * MIB - 5 * OBJ + MIB;
	CUresult r;

	share_both(&a, &b, 4 * OBJ, 0x33, &sh);
	expect("both exported and imported", 5 * OBJ, 0);
	remove_ledgers(truncate_it);
	nanosleep(&pause, NULL);
	/* An allocation of each looks at the name and moves. */
	call(&a, OP_FREE, call(&a, OP_ALLOC, MIB, 0).a, 0);
	call(&b, OP_FREE, call(&b, OP_ALLOC, MIB, 0).a, 0);
	ledger_view_must(&v, NULL);
	viewing = true;
	cr_assert_eq(charged("t-a"), 5 * OBJ, "t-a pays %llu MiB",
		     (unsigned long long)(charged("t-a") / MIB));
	cr_assert_eq(charged("t-b"), 5 * OBJ, "t-b pays %llu MiB",
		     (unsigned long long)(charged("t-b") / MIB));
	/* The exporter lets go and leaves; the importer keeps both. */
	call(&a, OP_VMM_RELEASE, sh.h, 0);
	call(&a, OP_FREE, sh.pa, 0);
	stop(&a);
	/* The exporter's slot keeps its charge until reclaimed (the worker
	 * leaves by _exit, as a killed process would): an over-charge of
	 * t-a, not the point here. t-b pays for what it holds. */
	cr_assert_eq(charged("t-b"), 5 * OBJ, "t-b pays %llu MiB",
		     (unsigned long long)(charged("t-b") / MIB));
	cr_assert_eq(device_used(), 5 * OBJ);
	r = try_alloc(&b, more);
	cr_assert_eq(r, CUDA_ERROR_OUT_OF_MEMORY, "t-b got %llu MiB more "
		     "besides the %llu it holds (answer %d)",
		     (unsigned long long)(more / MIB),
		     (unsigned long long)(5 * OBJ / MIB), r);
	got = call(&b, OP_ALLOC, 512 * MIB - 5 * OBJ, 0).a;
	cr_assert_eq(charged("t-b"), 512 * MIB, "t-b's slice full");
	call(&b, OP_CHECK, sh.pb, 0x33);
	call(&b, OP_FREE, got, 0);
	let_go_imports(&b, &sh);
	cr_assert_eq(charged("t-b"), 0, "t-b let go of everything: %llu MiB",
		     (unsigned long long)(charged("t-b") / MIB));
	/* A process of t-a reclaims the exporter's slot. */
	c = spawn("t-a");
	got = call(&c, OP_ALLOC, 512 * MIB, 0).a;
	call(&c, OP_FREE, got, 0);
	expect("all gone", 0, 0);
	stop(&b);
	stop(&c);
	done();
}

Test(shared, the_ledger_deleted_the_importer_pays_what_it_holds)
{
	ledger_gone_while_shared(false);
}

/* Truncated: the old file's records are lost; the importer is charged
 * what it kept of its imports. */
Test(shared, the_ledger_truncated_the_importer_pays_what_it_holds)
{
	ledger_gone_while_shared(true);
}

/* ---- seeded random orders ------------------------------------------------------ */

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct ref {
	int who, op;
	uint64_t arg;
};

/* One IPC object and one VMM object of A, each held by B and C (tenant
 * t-b) in one of their forms; every reference is dropped in a random
 * order, and after each drop the tenants together pay what the device
 * holds. */
static void random_order(uint64_t seed)
{
	struct worker w[3] = { spawn("t-a"), spawn("t-b"), spawn("t-b") };
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
	struct ref refs[16];
	struct msg m;
	int n = 0, fd;
	uint64_t p, h, va, hh;
	char step[96];

	p = call(&w[0], OP_ALLOC, OBJ, 0).a;
	m = call(&w[0], OP_IPC_GET, p, 0);
	refs[n++] = (struct ref){ 0, OP_FREE, p };
	h = call(&w[0], OP_VMM_CREATE, OBJ, 0).a;
	refs[n++] = (struct ref){ 0, OP_VMM_RELEASE, h };
	va = call(&w[0], OP_VMM_MAP, h, 0).a;
	refs[n++] = (struct ref){ 0, OP_VMM_UNMAP, va };
	for (int i = 1; i < 3; i++) {
		refs[n++] = (struct ref){ i, OP_IPC_CLOSE,
			call_fd(&w[i], OP_IPC_OPEN, 0, 0, m.data, -1,
				NULL).a };
		call_fd(&w[0], OP_VMM_EXPORT, h, 0, NULL, -1, &fd);
		hh = call_fd(&w[i], OP_VMM_IMPORT, 0, 0, NULL, fd, NULL).a;
		close(fd);
		refs[n++] = (struct ref){ i, OP_VMM_RELEASE, hh };
		if (rnd(&x) % 2)
			refs[n++] = (struct ref){ i, OP_VMM_UNMAP,
				call(&w[i], OP_VMM_MAP, hh, 0).a };
	}
	for (int left = n; left > 0; left--) {
		int k = (int)(rnd(&x) % (uint64_t)left);
		uint64_t held, paid;

		call(&w[refs[k].who], refs[k].op, refs[k].arg, 0);
		snprintf(step, sizeof(step), "seed %llu: op %d by worker %d",
			 (unsigned long long)seed, refs[k].op, refs[k].who);
		refs[k] = refs[left - 1];
		if (!viewing) {
			ledger_view_must(&v, NULL);
			viewing = true;
		}
		held = device_used();
		paid = charged("t-a") + charged("t-b");
		cr_assert_eq(paid, held, "%s: charged %llu MiB, the device "
			     "holds %llu MiB", step,
			     (unsigned long long)(paid / MIB),
			     (unsigned long long)(held / MIB));
	}
	expect("all gone", 0, 0);
	for (int i = 0; i < 3; i++)
		stop(&w[i]);
	done();
}

Test(shared, random_release_orders, .timeout = 60)
{
	for (uint64_t seed = 1; seed <= 12; seed++)
		random_order(seed);
}
