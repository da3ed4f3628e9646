/* ops_share.c - the share family: memory shared between the test's
 * processes (docs/memory.md, "Memory shared between processes"), by CUDA
 * IPC and by VMM handles exported as POSIX file descriptors.
 *
 * An exporter makes memory (cuMemAlloc; cuMemCreate asking for descriptor
 * handles) and offers it to another process through a mailbox in shared
 * memory (struct diff_offer, DIFF_OFFERS slots per exporting process): the
 * IPC handle's bytes, or a descriptor from cuMemExportToShareableHandle
 * passed over the importer's socket (SCM_RIGHTS) before the offer is
 * posted. At the start of every step each process turns the offers made to
 * it in earlier steps into objects of its table; a later step imports one
 * (cuIpcOpenMemHandle, cuMemImportFromShareableHandle) or declines it,
 * which resolves it. The simulator wants the exporter to hold the memory
 * while it is opened, so an exporter lets go (cuMemFree, its last
 * cuMemRelease or cuMemUnmap) only after all its offers were resolved in
 * earlier steps; apart from that, any order: the importers' closes,
 * releases and unmaps and the exporter's free, in any steps, the same one
 * included.
 *
 * Also: cuIpcGetMemHandle again, at any address inside (the same bytes);
 * an IPC handle opened in its exporter (CUDA_ERROR_INVALID_CONTEXT); one
 * opened twice in a process (the same pointer, two closes), or again once
 * its exporter freed it (CUDA_ERROR_INVALID_HANDLE, unless the process has
 * it open still: then it works); a descriptor imported by its exporting
 * process itself, and one descriptor imported twice. With one process only
 * these run.
 *
 * Every decision reads what other processes did only through stamps of
 * earlier steps (a barrier lies between), never of the current one, so a
 * process's calls follow from the seed as in the other families. What
 * does not: an allocation in the step in which a charge moves to its
 * tenant (another process let go of memory this one holds) may be
 * refused or not, as when processes share a tenant.
 */
#include "diff.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum { R_EXPORT = 1, R_IMPORT, R_OFFER };

enum {
	S_MAPPED = 1u << 0,	/* VMM: the handle is mapped at ptr */
	S_ACCESS = 1u << 1,	/* VMM: ... and accessible */
	S_EXPORTED = 1u << 2,	/* IPC: cuIpcGetMemHandle gave its bytes */
	S_NOEXPORT = 1u << 3,	/* IPC: refused (an overcommitted buffer) */
	S_LET_GO = 1u << 4,	/* exporter: holds the memory no more */
};

#define MAX_SLOTS (64 * DIFF_OFFERS)

/* The process's: the lock of the tables below (and of IPC opens and
 * closes, so that an open knows whether the process has the memory open),
 * the descriptors received by slot (fd + 1, the offer's seq), the IPC
 * memory open here by exporter and object. */
static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { int fd1; unsigned seq; } rx[MAX_SLOTS];
static struct ipc_open {
	int from, id, opens;
	CUdeviceptr ptr;
} opened[MAX_SLOTS];

struct share_msg {
	int slot;
	unsigned seq;
};

static struct diff_offer *slot(int i)
{
	return &diff_sh->offers[i];
}

static int me(void)
{
	return diff_proc.index;
}

/* A stamp of a step before t's (-1: none). */
static bool before(int stamp, const struct diff_thread *t)
{
	return stamp >= 0 && stamp < t->step;
}

static void slack(size_t size, int sign)
{
	unsigned long long b = (size + 4095) & ~(size_t)4095;

	if (sign > 0)
		atomic_fetch_add(&diff_sh->share_slack[me()], b);
	else
		atomic_fetch_sub(&diff_sh->share_slack[me()], b);
}

static const char *kind_name(int kind)
{
	return kind == DIFF_SHARE_IPC ? "ipc" : "vmm";
}

/* ---- setup (before the fork) and descriptors ----------------------------- */

void diff_share_setup(int procs)
{
	size_t n = (size_t)procs * DIFF_OFFERS;
	int sndbuf = 1 << 20;

	diff_sh->offers = mmap(NULL, n * sizeof(struct diff_offer),
			       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
	if (diff_sh->offers == MAP_FAILED) {
		perror("diff: mmap");
		exit(2);
	}
	for (size_t i = 0; i < n; i++)
		atomic_store(&diff_sh->offers[i].free_step, -1);
	for (int p = 0; p < procs; p++) {
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0,
			       diff_sh->share_sock[p]) != 0) {
			perror("diff: socketpair");
			exit(2);
		}
		setsockopt(diff_sh->share_sock[p][0], SOL_SOCKET, SO_SNDBUF,
			   &sndbuf, sizeof(sndbuf));
	}
}

static bool send_fd(int to, int idx, unsigned seq, int fd)
{
	struct share_msg m = { idx, seq };
	struct iovec iov = { &m, sizeof(m) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = u.buf, .msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	ssize_t r;

	memset(u.buf, 0, sizeof(u.buf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	do {
		r = sendmsg(diff_sh->share_sock[to][0], &mh,
			    MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (r < 0 && errno == EINTR);
	return r == (ssize_t)sizeof(m);
}

/* Everything the socket holds into rx; share_lock held. */
static void drain(void)
{
	for (;;) {
		struct share_msg m;
		struct iovec iov = { &m, sizeof(m) };
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = u.buf, .msg_controllen = sizeof(u.buf),
		};
		struct cmsghdr *c;
		int fd = -1;
		ssize_t r = recvmsg(diff_sh->share_sock[me()][1], &mh,
				    MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return;
		c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_level == SOL_SOCKET &&
		    c->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(c), sizeof(fd));
		if (r != (ssize_t)sizeof(m) || m.slot < 0 ||
		    m.slot >= MAX_SLOTS) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (rx[m.slot].fd1)
			close(rx[m.slot].fd1 - 1);
		rx[m.slot].fd1 = fd + 1;
		rx[m.slot].seq = m.seq;
	}
}

/* The descriptor of offer i, seq: taken out of rx, or -1. */
static int take_fd(int i, unsigned seq, bool *drained)
{
	int fd;

	if ((!rx[i].fd1 || rx[i].seq != seq) && !*drained) {
		drain();
		*drained = true;
	}
	if (!rx[i].fd1 || rx[i].seq != seq)
		return -1;
	fd = rx[i].fd1 - 1;
	rx[i].fd1 = 0;
	return fd;
}

/* ---- the mailbox --------------------------------------------------------- */

/* The step's side lets go of offer i; the last one frees the slot. Each
 * side stamps free_step first, so that it reads the step of the last. */
static void offer_unref(struct diff_thread *t, int i)
{
	atomic_store(&slot(i)->free_step, t->step);
	atomic_fetch_sub(&slot(i)->refs, 1);
}

/* Offers o's memory to another process (fd: a VMM descriptor, sent
 * first); false when no slot is free or the descriptor was not sent. */
static bool offer_post(struct diff_thread *t, struct diff_obj *o, int fd)
{
	int p = me(), idx = -1;
	int to = (int)diff_below(t, (uint64_t)diff_sh->procs - 1);
	struct diff_offer *of;

	if (to >= p)
		to++;
	pthread_mutex_lock(&share_lock);
	/* Free since an earlier step: the same for any timing. */
	for (int i = 0; i < DIFF_OFFERS && idx < 0; i++) {
		of = slot(p * DIFF_OFFERS + i);
		if (atomic_load(&of->refs) == 0 &&
		    atomic_load(&of->free_step) < t->step)
			idx = p * DIFF_OFFERS + i;
	}
	if (idx < 0) {
		pthread_mutex_unlock(&share_lock);
		diff_trace(t, "  no free offer slot for #%d", o->id);
		return false;
	}
	of = slot(idx);
	of->post_step = t->step;
	of->from = p;
	of->to = to;
	of->kind = o->sh.kind;
	of->obj_id = o->id;
	of->seq++;
	of->size = o->size;
	of->ipc = o->sh.ipc;
	atomic_store(&of->polled, 0);
	atomic_store(&of->resolved_step, -1);
	atomic_store(&of->freed_step, -1);
	if (fd >= 0 && !send_fd(to, idx, of->seq, fd)) {
		int e = errno;
		pthread_mutex_unlock(&share_lock);
		diff_trace(t, "  offer of #%d to p%d not sent: %s", o->id, to,
			   strerror(e));
		return false;
	}
	atomic_store(&of->refs, 2);
	pthread_mutex_unlock(&share_lock);
	o->sh.offers[o->sh.noffers++] = idx;
	diff_trace(t, "  offered #%d (%s, %zu bytes) to p%d: offer %d.%d",
		   o->id, kind_name(o->sh.kind), o->size, to, p,
		   idx % DIFF_OFFERS);
	return true;
}

/* Offers made to this process in earlier steps become objects, in the
 * order of their slots (which the seed decides). */
void diff_share_poll(struct diff_thread *t)
{
	int n = diff_sh->procs * DIFF_OFFERS;
	bool drained = false;

	pthread_mutex_lock(&share_lock);
	for (int i = 0; i < n; i++) {
		struct diff_offer *of = slot(i);
		struct diff_obj *o;

		/* refs first: the fields are the exporter's until then. */
		if (i / DIFF_OFFERS == me() || atomic_load(&of->refs) == 0 ||
		    of->to != me() || atomic_load(&of->polled) ||
		    of->post_step >= t->step)
			continue;
		atomic_store(&of->polled, 1);
		o = diff_obj_new(t, DIFF_F_SHARE);
		if (!o)
			break;
		o->sh.role = R_OFFER;
		o->sh.kind = of->kind;
		o->sh.offer = i;
		o->sh.from = of->from;
		o->sh.from_id = of->obj_id;
		o->sh.ipc = of->ipc;
		o->sh.fd = -1;
		o->size = of->size;
		if (of->kind == DIFF_SHARE_VMM) {
			o->sh.fd = take_fd(i, of->seq, &drained);
			if (o->sh.fd < 0)
				diff_fail(t, "p%d: the descriptor of offer %d.%d "
					  "did not arrive", me(), of->from,
					  i % DIFF_OFFERS);
		}
		diff_trace(t, "  offer %d.%d: p%d #%d (%s, %zu bytes) = #%d",
			   of->from, i % DIFF_OFFERS, of->from, of->obj_id,
			   kind_name(of->kind), of->size, o->id);
		diff_obj_put(o);
	}
	pthread_mutex_unlock(&share_lock);
}

/* ---- objects ------------------------------------------------------------- */

static struct diff_obj *new_obj(struct diff_thread *t, int role, int kind,
				size_t size)
{
	struct diff_obj *o = diff_obj_new(t, DIFF_F_SHARE);

	if (!o)
		return NULL;
	o->sh.role = role;
	o->sh.kind = kind;
	o->sh.fd = -1;
	o->sh.offer = -1;
	o->sh.from = me();
	o->sh.from_id = o->id;
	o->size = size;
	return o;
}

/* An exporter's offers not resolved before this step. */
static bool blocked(struct diff_thread *t, const struct diff_obj *o)
{
	for (int i = 0; i < o->sh.noffers; i++)
		if (!before(atomic_load(&slot(o->sh.offers[i])->resolved_step),
			    t))
			return true;
	return false;
}

/* The exporter holds its memory no more: its offers learn it. */
static void let_go(struct diff_thread *t, struct diff_obj *o)
{
	for (int i = 0; i < o->sh.noffers; i++) {
		atomic_store(&slot(o->sh.offers[i])->freed_step, t->step);
		offer_unref(t, o->sh.offers[i]);
	}
	o->sh.noffers = 0;
	o->state |= S_LET_GO;
}

static void drop(struct diff_thread *t, struct diff_obj *o)
{
	if (o->sh.fd >= 0)
		close(o->sh.fd);
	if (o->sh.offer >= 0)
		offer_unref(t, o->sh.offer);
	if (o->sh.role == R_IMPORT)
		slack(o->size, -1);
	diff_obj_drop(o);
}

/* One of the n transitions with ok[k] at random; -1 when none. */
static int pick(struct diff_thread *t, const bool *ok, int n)
{
	int c = 0, k, r;

	for (k = 0; k < n; k++)
		c += ok[k];
	if (c == 0)
		return -1;
	r = (int)diff_below(t, (uint64_t)c);
	for (k = 0; k < n && (!ok[k] || r-- > 0); k++)
		;
	return k;
}

void diff_share_make(struct diff_thread *t)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	};
	size_t size = diff_size(t);
	CUmemGenericAllocationHandle h;
	struct diff_obj *o;
	CUdeviceptr p = 0;

	if (diff_chance(t, 50)) {
		if (diff_cu(t, cuMemAlloc(&p, size), true,
			    "cuMemAlloc(%zu) to share", size) ||
		    !(o = new_obj(t, R_EXPORT, DIFF_SHARE_IPC, size)))
			return;
		o->ptr = p;
	} else {
		size = (size + DIFF_GRAN - 1) & ~(DIFF_GRAN - 1);
		if (diff_cu(t, cuMemCreate(&h, size, &prop, 0), true,
			    "cuMemCreate(%zu, posix fd)", size) ||
		    !(o = new_obj(t, R_EXPORT, DIFF_SHARE_VMM, size)))
			return;
		o->handle = h;
		o->handle_refs = 1;
	}
	diff_trace(t, "  = #%d", o->id);
	diff_obj_put(o);
}

/* ---- CUDA IPC ------------------------------------------------------------ */

static struct ipc_open *open_find(int from, int id)
{
	for (int i = 0; i < MAX_SLOTS; i++)
		if (opened[i].opens && opened[i].from == from &&
		    opened[i].id == id)
			return &opened[i];
	return NULL;
}

static struct ipc_open *open_new(int from, int id, CUdeviceptr p)
{
	for (int i = 0; i < MAX_SLOTS; i++)
		if (!opened[i].opens) {
			opened[i] = (struct ipc_open){ from, id, 0, p };
			return &opened[i];
		}
	return NULL;
}

/* Legacy IPC refuses overcommitted buffers (docs/overcommit.md): with
 * VGPU_OVERCOMMIT=managed a spilled one is managed memory, which the
 * driver refuses (CUDA_ERROR_INVALID_VALUE); with host, every buffer of
 * 2 MiB or more lives in a virtual-memory range, which the shim refuses
 * (CUDA_ERROR_NOT_SUPPORTED) once the process has spilled anything, and
 * the driver (CUDA_ERROR_INVALID_VALUE) before that. */
static bool ipc_refused(CUresult rc)
{
	const char *oc = getenv("VGPU_OVERCOMMIT");

	if (oc && strcmp(oc, "host") == 0)
		return rc == CUDA_ERROR_NOT_SUPPORTED ||
		       rc == CUDA_ERROR_INVALID_VALUE;
	if (oc && strcmp(oc, "managed") == 0)
		return rc == CUDA_ERROR_INVALID_VALUE;
	return false;
}

/* cuIpcGetMemHandle at any address inside the buffer: the same bytes as
 * at its base (the simulator's rule, as the driver's). */
static void ipc_get(struct diff_thread *t, struct diff_obj *o)
{
	bool again = o->state & S_EXPORTED;
	size_t off = (size_t)diff_below(t, o->size);
	CUipcMemHandle h;
	CUresult rc;

	memset(&h, 0, sizeof(h));
	rc = cuIpcGetMemHandle(&h, o->ptr + off);
	diff_cu_allow(t, rc, !again && ipc_refused(rc) ? rc : CUDA_SUCCESS,
		      "cuIpcGetMemHandle(#%d + %zu%s)", o->id, off,
		      again ? ", again" : "");
	if (rc != CUDA_SUCCESS) {
		o->state |= S_NOEXPORT;
		return;
	}
	if (again && memcmp(&h, &o->sh.ipc, sizeof(h)) != 0)
		diff_fail(t, "p%d.t%d: cuIpcGetMemHandle(#%d) gave other bytes "
			  "than before", t->proc, t->thread, o->id);
	o->sh.ipc = h;
	o->state |= S_EXPORTED;
}

/* cuIpcOpenMemHandle of o's handle. Works while the exporter holds the
 * memory (it does until the offer is resolved) or this process has it
 * open (the same pointer, one more reference); freed: the exporter let
 * go in an earlier step, so CUDA_ERROR_INVALID_HANDLE unless the process
 * has it open. */
static bool ipc_open(struct diff_thread *t, struct diff_obj *o, bool freed)
{
	struct ipc_open *e;
	CUdeviceptr p = 0;
	CUresult rc, want;

	pthread_mutex_lock(&share_lock);
	e = open_find(o->sh.from, o->sh.from_id);
	want = freed && !e ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
	rc = cuIpcOpenMemHandle(&p, o->sh.ipc,
				CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	diff_cu_allow(t, rc, want, "cuIpcOpenMemHandle(#%d: p%d #%d%s, %d "
		      "opens here) = 0x%llx", o->id, o->sh.from, o->sh.from_id,
		      freed ? ", exporter freed it" : "", e ? e->opens : 0,
		      (unsigned long long)p);
	if (rc == CUDA_SUCCESS && want != CUDA_SUCCESS)
		diff_fail(t, "p%d.t%d: cuIpcOpenMemHandle(#%d) opened memory "
			  "its exporter freed", t->proc, t->thread, o->id);
	if (rc == CUDA_SUCCESS && e && p != e->ptr)
		diff_fail(t, "p%d.t%d: cuIpcOpenMemHandle(#%d) gave 0x%llx, the "
			  "process has it open at 0x%llx", t->proc, t->thread,
			  o->id, (unsigned long long)p,
			  (unsigned long long)e->ptr);
	if (rc == CUDA_SUCCESS) {
		if (!e && !(e = open_new(o->sh.from, o->sh.from_id, p)))
			diff_fail(t, "p%d: the table of IPC opens is full",
				  t->proc);
		if (e)
			e->opens++;
		o->sh.opens++;
		o->ptr = p;
	}
	pthread_mutex_unlock(&share_lock);
	return rc == CUDA_SUCCESS;
}

static void ipc_close(struct diff_thread *t, struct diff_obj *o)
{
	struct ipc_open *e;

	pthread_mutex_lock(&share_lock);
	e = open_find(o->sh.from, o->sh.from_id);
	diff_cu(t, cuIpcCloseMemHandle(o->ptr), false,
		"cuIpcCloseMemHandle(#%d: p%d #%d, %d opens here)", o->id,
		o->sh.from, o->sh.from_id, e ? e->opens : 0);
	o->sh.opens--;
	if (e)
		e->opens--;
	pthread_mutex_unlock(&share_lock);
}

/* Transitions: 0 cuIpcGetMemHandle, 1 offer, 2 open in the exporter,
 * 3 cuMemFree (once the offers are resolved). */
static bool ipc_export_step(struct diff_thread *t, struct diff_obj *o)
{
	bool exported = o->state & S_EXPORTED;
	bool ok[4] = {
		!t->finishing && !(o->state & S_NOEXPORT),
		!t->finishing && exported && diff_sh->procs > 1 &&
			o->sh.noffers < 4,
		!t->finishing && exported,
		!blocked(t, o),
	};
	CUdeviceptr p = 0;
	CUresult rc;

	switch (pick(t, ok, 4)) {
	case 0:
		ipc_get(t, o);
		break;
	case 1:
		offer_post(t, o, -1);
		break;
	case 2:
		rc = cuIpcOpenMemHandle(&p, o->sh.ipc,
					CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		diff_cu_allow(t, rc, CUDA_ERROR_INVALID_CONTEXT,
			      "cuIpcOpenMemHandle(#%d) in its exporter", o->id);
		if (rc == CUDA_SUCCESS) {
			diff_fail(t, "p%d.t%d: cuIpcOpenMemHandle(#%d) worked "
				  "in its exporter", t->proc, t->thread, o->id);
			cuIpcCloseMemHandle(p);
		}
		break;
	case 3:
		diff_cu(t, cuMemFree(o->ptr), false, "cuMemFree(#%d%s)", o->id,
			exported ? ", exported" : "");
		let_go(t, o);
		drop(t, o);
		return true;
	default:
		break;		/* waiting for its offers */
	}
	return false;
}

/* Transitions: 0 open again, 1 close, 2 open again after the exporter
 * freed it, 3 done (all closed). */
static bool ipc_import_step(struct diff_thread *t, struct diff_obj *o)
{
	bool freed = before(atomic_load(&slot(o->sh.offer)->freed_step), t);
	bool ok[4] = {
		!t->finishing && o->sh.opens > 0 && o->sh.opens < 3,
		o->sh.opens > 0,
		!t->finishing && o->sh.opens == 0 && freed,
		o->sh.opens == 0,
	};

	switch (pick(t, ok, 4)) {
	case 0:
		ipc_open(t, o, freed);
		return false;
	case 1:
		ipc_close(t, o);
		return false;
	case 2:
		if (ipc_open(t, o, true))
			return false;
		break;
	default:
		break;
	}
	diff_trace(t, "  #%d closed (p%d #%d)", o->id, o->sh.from,
		   o->sh.from_id);
	drop(t, o);
	return true;
}

/* ---- VMM handles exported as descriptors --------------------------------- */

static void vmm_map(struct diff_thread *t, struct diff_obj *o)
{
	CUmemAccessDesc d = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};

	if (!o->ptr) {
		diff_cu(t, cuMemAddressReserve(&o->ptr, o->size, 0, 0, 0), false,
			"cuMemAddressReserve(#%d, %zu)", o->id, o->size);
		return;
	}
	if (diff_cu(t, cuMemMap(o->ptr, o->size, 0, o->handle, 0), false,
		    "cuMemMap(#%d)", o->id))
		return;
	o->state |= S_MAPPED;
	if (diff_chance(t, 50) &&
	    !diff_cu(t, cuMemSetAccess(o->ptr, o->size, &d, 1), false,
		     "cuMemSetAccess(#%d)", o->id))
		o->state |= S_ACCESS;
}

static void vmm_retain(struct diff_thread *t, struct diff_obj *o)
{
	CUmemGenericAllocationHandle h = 0;
	void *at = (void *)(uintptr_t)(o->ptr + diff_below(t, o->size));

	if (diff_cu(t, cuMemRetainAllocationHandle(&h, at), false,
		    "cuMemRetainAllocationHandle(#%d)", o->id))
		return;
	if (h != o->handle)
		diff_fail(t, "cuMemRetainAllocationHandle(#%d) gave another "
			  "handle", o->id);
	o->handle_refs++;
}

/* A descriptor of o's memory; -1 when the export failed. */
static int vmm_export(struct diff_thread *t, struct diff_obj *o)
{
	int fd = -1;
	CUresult rc = cuMemExportToShareableHandle(
		&fd, o->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

	if (diff_cu(t, rc, false, "cuMemExportToShareableHandle(#%d)", o->id))
		return -1;
	return fd;
}

/* cuMemImportFromShareableHandle(fd) into o (a handle, one reference);
 * the memory is held (by the exporter, or by this process), so it must
 * work, and cost this process nothing. */
static bool vmm_import(struct diff_thread *t, struct diff_obj *o, int fd,
		       const char *what)
{
	CUmemGenericAllocationHandle h = 0;

	slack(o->size, 1);
	if (diff_cu(t, cuMemImportFromShareableHandle(
			       &h, (void *)(intptr_t)fd,
			       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), false,
		    "cuMemImportFromShareableHandle(#%d: p%d #%d, %zu%s)",
		    o->id, o->sh.from, o->sh.from_id, o->size, what)) {
		slack(o->size, -1);
		return false;
	}
	o->handle = h;
	o->handle_refs = 1;
	o->sh.role = R_IMPORT;
	return true;
}

/* Another handle of o's memory in this process: a descriptor exported
 * here (o the exporter) or o's descriptor imported again. */
static void vmm_import_here(struct diff_thread *t, struct diff_obj *o)
{
	bool exp = o->sh.role == R_EXPORT;
	int fd = exp ? vmm_export(t, o) : o->sh.fd;
	struct diff_obj *n;

	if (fd < 0)
		return;
	n = new_obj(t, R_OFFER, DIFF_SHARE_VMM, o->size);
	if (n) {
		n->sh.from = o->sh.from;
		n->sh.from_id = o->sh.from_id;
	}
	if (!n || !vmm_import(t, n, fd, exp ? ", in its exporter"
					     : ", its descriptor again")) {
		if (n)
			diff_obj_drop(n);
		if (exp)
			close(fd);
		return;
	}
	/* Keep a descriptor to import once more, or close it now. */
	if (diff_chance(t, 50)) {
		if (exp)
			n->sh.fd = fd;
		else
			o->sh.fd = -1, n->sh.fd = fd;
	} else if (exp) {
		close(fd);
	}
	diff_trace(t, "  = #%d", n->id);
	diff_obj_put(n);
}

/* Transitions: 0 reserve, map (and set access), 1 set access, 2 retain,
 * 3 release, 4 unmap, 5 free the range; an exporter also 6 export and
 * offer, 7 export and import here; an importer with a descriptor 8
 * imports it again. An exporter with offers not resolved keeps the memory
 * (a handle or a mapping). */
static bool vmm_step(struct diff_thread *t, struct diff_obj *o)
{
	bool exp = o->sh.role == R_EXPORT, mapped = o->state & S_MAPPED;
	int refs = o->handle_refs;
	bool blk = exp && blocked(t, o);
	bool ok[9] = {
		!t->finishing && !mapped && refs > 0,
		!t->finishing && mapped && !(o->state & S_ACCESS),
		!t->finishing && mapped,
		refs > 0 && !(blk && refs == 1 && !mapped),
		mapped && !(blk && refs == 0),
		o->ptr && !mapped,
		!t->finishing && exp && refs > 0 && diff_sh->procs > 1 &&
			o->sh.noffers < 4,
		!t->finishing && exp && refs > 0,
		!t->finishing && !exp && o->sh.fd >= 0 && (refs > 0 || mapped),
	};
	CUmemAccessDesc d = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, diff_proc.dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	int fd;

	switch (pick(t, ok, 9)) {
	case 0:
		vmm_map(t, o);
		break;
	case 1:
		if (!diff_cu(t, cuMemSetAccess(o->ptr, o->size, &d, 1), false,
			     "cuMemSetAccess(#%d)", o->id))
			o->state |= S_ACCESS;
		break;
	case 2:
		vmm_retain(t, o);
		break;
	case 3:
		diff_cu(t, cuMemRelease(o->handle), false,
			"cuMemRelease(#%d, %s, %d refs, %s)", o->id,
			mapped ? "mapped" : "unmapped", refs,
			exp ? "exporter" : "importer");
		o->handle_refs--;
		break;
	case 4:
		diff_cu(t, cuMemUnmap(o->ptr, o->size), false,
			"cuMemUnmap(#%d, %d refs, %s)", o->id, refs,
			exp ? "exporter" : "importer");
		o->state &= ~(S_MAPPED | S_ACCESS);
		break;
	case 5:
		diff_cu(t, cuMemAddressFree(o->ptr, o->size), false,
			"cuMemAddressFree(#%d)", o->id);
		o->ptr = 0;
		break;
	case 6:
		fd = vmm_export(t, o);
		if (fd >= 0) {
			offer_post(t, o, fd);
			close(fd);
		}
		break;
	case 7:
	case 8:
		vmm_import_here(t, o);
		break;
	default:
		return false;	/* waiting for its offers */
	}
	if (exp && !(o->state & S_LET_GO) && o->handle_refs == 0 &&
	    !(o->state & S_MAPPED))
		let_go(t, o);
	if (o->handle_refs > 0 || o->ptr)
		return false;
	drop(t, o);
	return true;
}

/* ---- offers received ----------------------------------------------------- */

/* Import (the exporter holds the memory: it must work), or decline. */
static bool offer_step(struct diff_thread *t, struct diff_obj *o)
{
	struct diff_offer *of = slot(o->sh.offer);
	bool ok;

	if (t->finishing || diff_chance(t, 15)) {
		diff_trace(t, "  declined offer %d.%d (#%d)", o->sh.from,
			   o->sh.offer % DIFF_OFFERS, o->id);
		atomic_store(&of->resolved_step, t->step);
		drop(t, o);
		return true;
	}
	if (o->sh.kind == DIFF_SHARE_IPC) {
		slack(o->size, 1);
		ok = ipc_open(t, o, false);
		if (ok)
			o->sh.role = R_IMPORT;
		else
			slack(o->size, -1);
	} else {
		ok = vmm_import(t, o, o->sh.fd, "");
		if (ok && diff_chance(t, 50)) {
			close(o->sh.fd);
			o->sh.fd = -1;
		}
	}
	atomic_store(&of->resolved_step, t->step);
	if (ok)
		return false;
	drop(t, o);
	return true;
}

bool diff_share_step(struct diff_thread *t, struct diff_obj *o)
{
	if (o->sh.role == R_OFFER)
		return offer_step(t, o);
	if (o->sh.kind == DIFF_SHARE_VMM)
		return vmm_step(t, o);
	if (o->sh.role == R_EXPORT)
		return ipc_export_step(t, o);
	return ipc_import_step(t, o);
}
