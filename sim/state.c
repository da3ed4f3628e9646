/* state.c - one simulated device's state, shared by every process using it.
 *
 * Each device is a file "<VGPU_SIM_STATE_DIR>/dev<N>.state" mapped shared. It
 * holds the device's capacity and usage, one slot per attached process, and
 * the execution engine: kernels take multiprocessors (SMs), all of them for
 * an ordinary context, k for a green context of k, and are admitted first
 * come first served (a ticket lock across all processes) while the SMs held
 * by running kernels fit in the device.
 *
 * Liveness: a process holds an open-file-description lock on its slot's byte
 * for as long as it lives, so the kernel releases it at death whatever the pid
 * namespace. Dead slots are reclaimed under the robust mutex, so a process
 * killed at any instruction returns its memory to the device.
 *
 * Shared objects (IPC): memory that several processes may hold is counted
 * once, in an entry of its own with a bitmap of the slots holding it, not in
 * any slot; it leaves `used` when the last holder lets go or dies (the
 * section "shared objects" below). Invariant, under the mutex: used = the
 * claimed slots' used + the live entries' size.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STATE_MAGIC 0x5441545350475656ull     /* "VVGPSTAT" */
#define STATE_VERSION 3u
#define STATE_SLOTS 256
#define STATE_RING 4096
#define LOCK_BASE (1ll << 40)                  /* slot lock bytes start here */
#define STALE_WAIT_NS 5000000ull               /* liveness check period */
#define ORPHAN_TICKET_NS 1000000000ull         /* a ticket nobody registered */
#define STATE_SHARED 512                       /* shared objects at a time */
#define HOLDER_WORDS (STATE_SLOTS / 64)

struct state_slot {
	_Atomic uint32_t claimed;
	int32_t pid;
	uint64_t used;
	_Atomic uint32_t sms;          /* held by this process's running kernels */
	_Atomic uint32_t first_ticket; /* next_ticket when claimed: older
					* tickets naming this slot were a dead
					* owner's */
};

/* A shared object (IPC): memory held by one or more processes, counted once.
 * An entry is free while id is 0; id is written last when it is made. */
struct state_shared {
	uint64_t id;                   /* unique in this file, never reused */
	uint64_t size;                 /* bytes counted in the file's used */
	uint64_t asked;                /* legacy IPC: the size cuMemAlloc got */
	uint64_t ino, fsdev;           /* the memfd's identity (fstat) */
	uint32_t kind;                 /* enum vsim_shared_kind */
	int32_t exporter_slot;         /* legacy IPC: -1 once it let go */
	int32_t exporter_pid;          /* where importers reopen the memfd: */
	int32_t exporter_fd;           /* /proc/<pid>/fd/<fd> */
	CUmemAllocationProp prop;      /* VMM: the exported handle's */
	uint64_t holders[HOLDER_WORDS];  /* bitmap of the slots holding it */
};

struct state_file {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	uint64_t capacity;
	uint64_t used;                 /* sum of claimed slots' used */
	pthread_mutex_t lock;          /* robust, process-shared */
	uint32_t sm_total;             /* the engine's SMs */
	_Atomic uint32_t slots_hi;     /* no slot at or above was ever claimed */
	_Atomic uint32_t next_ticket;
	_Atomic uint32_t serving;      /* futex word */
	_Atomic uint32_t sm_released;  /* futex word: bumped when SMs return */
	uint32_t pad;
	_Atomic uint64_t ring[STATE_RING];   /* ticket << 32 | slot */
	struct state_slot slots[STATE_SLOTS];
	/* Shared objects (the section "shared objects" below). */
	uint64_t shared_next_id;
	struct state_shared shared[STATE_SHARED];
};

/* This process's holds of one shared object (it may hold it several times:
 * an allocation and an import, two imported handles...). */
struct shared_hold {
	uint64_t id;
	int refs;
};

struct dev_state {
	int fd;
	struct state_file *sh;
	int slot;
	/* Shared objects this process holds; guarded by the state mutex. */
	struct shared_hold *holds;
	size_t nholds, holds_cap;
};

/* The section "shared objects", below; callers hold the state mutex. */
static void shared_sweep(struct state_file *sh);
static uint64_t shared_total(const struct state_file *sh);
static uint64_t shared_first_id(void);
static void holds_forget(struct dev_state *d);

static struct dev_state states[VSIM_MAX_DEVICES] = {
	[0 ... VSIM_MAX_DEVICES - 1] = { .fd = -1, .slot = -1 },
};
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

static int slot_lock_op(int fd, int slot, int cmd, short type)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET,
		.l_start = LOCK_BASE + slot, .l_len = 1,
	};
	if (fcntl(fd, cmd, &fl) != 0)
		return -1;
	return cmd == F_OFD_GETLK ? (fl.l_type != F_UNLCK) : 0;
}

/* True when another process holds slot's lock (it is alive). */
static bool slot_alive(const struct dev_state *d, int slot)
{
	if (slot == d->slot)
		return true;
	return slot_lock_op(d->fd, slot, F_OFD_GETLK, F_WRLCK) == 1;
}

/* Frees the slots of dead processes; caller holds the state mutex. */
static void reclaim_dead(struct dev_state *d)
{
	struct state_file *sh = d->sh;

	for (int i = 0; i < STATE_SLOTS; i++) {
		struct state_slot *s = &sh->slots[i];
		if (!atomic_load(&s->claimed) || slot_alive(d, i))
			continue;
		sh->used -= s->used < sh->used ? s->used : sh->used;
		s->used = 0;
		s->pid = 0;
		atomic_store(&s->sms, 0);
		atomic_store(&s->claimed, 0);
	}
	shared_sweep(sh);
}

static void recompute_used(struct state_file *sh)
{
	uint64_t sum = 0;

	for (int i = 0; i < STATE_SLOTS; i++)
		if (atomic_load(&sh->slots[i].claimed))
			sum += sh->slots[i].used;
	shared_sweep(sh);
	sh->used = sum + shared_total(sh);
}

static void state_lock(struct state_file *sh)
{
	int rc = pthread_mutex_lock(&sh->lock);

	if (rc == EOWNERDEAD) {
		/* The holder died inside; make the totals agree with the slots. */
		recompute_used(sh);
		pthread_mutex_consistent(&sh->lock);
	}
}

static void state_unlock(struct state_file *sh)
{
	pthread_mutex_unlock(&sh->lock);
}

static void init_file(struct state_file *sh, uint64_t capacity)
{
	pthread_mutexattr_t attr;

	memset(sh, 0, sizeof(*sh));
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&sh->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	sh->capacity = capacity;
	sh->shared_next_id = shared_first_id();
	sh->version = STATE_VERSION;
	sh->size = sizeof(*sh);
	sh->magic = STATE_MAGIC;
}

static int make_dir(const char *dir)
{
	if (mkdir(dir, 0700) == 0 || errno == EEXIST)
		return 0;
	vsim_log("cannot create VGPU_SIM_STATE_DIR %s: %s", dir, strerror(errno));
	return -1;
}

/* Opens and maps the file, initialising it if it is new or not ours. */
static int open_file(struct dev_state *d, int ordinal)
{
	char path[4200];
	struct stat st;
	void *map;
	int fd;

	if (make_dir(vsim_g.cfg.state_dir) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/dev%d.state", vsim_g.cfg.state_dir,
		 vsim_g.dev[ordinal].physical);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		vsim_log("cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0)
		goto out_close;
	if ((size_t)st.st_size != sizeof(struct state_file) &&
	    ftruncate(fd, sizeof(struct state_file)) != 0)
		goto out_close;
	map = mmap(NULL, sizeof(struct state_file), PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		goto out_close;
	d->sh = map;
	if (d->sh->magic != STATE_MAGIC || d->sh->version != STATE_VERSION ||
	    d->sh->size != sizeof(struct state_file)) {
		if (st.st_size != 0)
			vsim_log("%s: not a version %u state file; starting it anew",
				 path, STATE_VERSION);
		init_file(d->sh, vsim_g.cfg.memory);
	}
	flock(fd, LOCK_UN);
	d->fd = fd;
	return 0;
out_close:
	vsim_log("cannot set up %s: %s", path, strerror(errno));
	close(fd);
	return -1;
}

/* Claims a free or dead slot; caller holds the state mutex. */
static int claim_slot(struct dev_state *d)
{
	struct state_file *sh = d->sh;

	reclaim_dead(d);
	for (int i = 0; i < STATE_SLOTS; i++) {
		if (atomic_load(&sh->slots[i].claimed))
			continue;
		if (slot_lock_op(d->fd, i, F_OFD_SETLK, F_WRLCK) != 0)
			continue;
		sh->slots[i].used = 0;
		sh->slots[i].pid = (int32_t)getpid();
		atomic_store(&sh->slots[i].first_ticket,
			     atomic_load(&sh->next_ticket));
		atomic_store(&sh->slots[i].sms, 0);
		atomic_store(&sh->slots[i].claimed, 1);
		if (atomic_load(&sh->slots_hi) < (uint32_t)i + 1)
			atomic_store(&sh->slots_hi, (uint32_t)i + 1);
		return i;
	}
	return -1;
}

/* Agrees on the capacity and the engine's SM count: the first live
 * process's VGPU_SIM_MEMORY and VGPU_SIM_SM_COUNT win. */
static void settle_capacity(struct dev_state *d, int ordinal)
{
	struct state_file *sh = d->sh;
	bool others = false;

	for (int i = 0; i < STATE_SLOTS; i++)
		if (i != d->slot && atomic_load(&sh->slots[i].claimed))
			others = true;
	if (!others) {
		sh->capacity = vsim_g.cfg.memory;
		sh->sm_total = (uint32_t)vsim_g.cfg.sm_count;
		return;
	}
	if (sh->capacity != vsim_g.cfg.memory)
		vsim_log("device %d is in use with %llu bytes of memory; "
			 "VGPU_SIM_MEMORY=%llu is ignored", ordinal,
			 (unsigned long long)sh->capacity,
			 (unsigned long long)vsim_g.cfg.memory);
	if (sh->sm_total != (uint32_t)vsim_g.cfg.sm_count)
		vsim_log("device %d is in use with %u multiprocessors; its "
			 "kernels share those, not VGPU_SIM_SM_COUNT=%d",
			 ordinal, sh->sm_total, vsim_g.cfg.sm_count);
}

CUresult vsim_state_attach(int ordinal)
{
	struct dev_state *d = &states[ordinal];
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&attach_lock);
	if (d->sh)
		goto out;
	if (open_file(d, ordinal) != 0) {
		rc = CUDA_ERROR_OPERATING_SYSTEM;
		goto out;
	}
	state_lock(d->sh);
	d->slot = claim_slot(d);
	if (d->slot >= 0)
		settle_capacity(d, ordinal);
	state_unlock(d->sh);
	if (d->slot < 0) {
		vsim_log("device %d: all %d process slots are taken", ordinal,
			 STATE_SLOTS);
		munmap(d->sh, sizeof(struct state_file));
		close(d->fd);
		d->sh = NULL;
		d->fd = -1;
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
out:
	pthread_mutex_unlock(&attach_lock);
	return rc;
}

/* Returns this process's memory and slot (normal exit). */
void vsim_state_detach_all(void)
{
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		struct dev_state *d = &states[i];
		if (!d->sh)
			continue;
		state_lock(d->sh);
		struct state_slot *s = &d->sh->slots[d->slot];
		d->sh->used -= s->used < d->sh->used ? s->used : d->sh->used;
		s->used = 0;
		atomic_store(&s->sms, 0);
		atomic_store(&s->claimed, 0);
		shared_sweep(d->sh);	/* this process's holds go with its slot */
		state_unlock(d->sh);
		slot_lock_op(d->fd, d->slot, F_OFD_SETLK, F_UNLCK);
		munmap(d->sh, sizeof(struct state_file));
		close(d->fd);
		holds_forget(d);
		*d = (struct dev_state){ .fd = -1, .slot = -1 };
	}
}

/* In a forked child: forget the parent's mappings without touching them. The
 * parent keeps its slot (its locks live on its open file description). */
void vsim_state_forget(void)
{
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		struct dev_state *d = &states[i];
		if (!d->sh)
			continue;
		munmap(d->sh, sizeof(struct state_file));
		close(d->fd);
		holds_forget(d);
		*d = (struct dev_state){ .fd = -1, .slot = -1 };
	}
	pthread_mutex_init(&attach_lock, NULL);
}

CUresult vsim_state_reserve(int ordinal, uint64_t bytes)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	CUresult rc = CUDA_SUCCESS;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	state_lock(sh);
	if (bytes > sh->capacity || sh->used > sh->capacity - bytes) {
		reclaim_dead(d);
		if (bytes > sh->capacity || sh->used > sh->capacity - bytes) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
	}
	sh->used += bytes;
	sh->slots[d->slot].used += bytes;
out:
	state_unlock(sh);
	return rc;
}

void vsim_state_release(int ordinal, uint64_t bytes)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	struct state_slot *s;

	if (!sh)
		return;
	state_lock(sh);
	s = &sh->slots[d->slot];
	if (bytes > s->used)
		bytes = s->used;
	s->used -= bytes;
	sh->used -= bytes < sh->used ? bytes : sh->used;
	state_unlock(sh);
}

uint64_t vsim_state_used(int ordinal)
{
	struct state_file *sh = states[ordinal].sh;
	uint64_t used;

	if (!sh)
		return 0;
	state_lock(sh);
	reclaim_dead(&states[ordinal]);
	used = sh->used;
	state_unlock(sh);
	return used;
}

uint64_t vsim_state_capacity(int ordinal)
{
	struct state_file *sh = states[ordinal].sh;

	return sh ? sh->capacity : vsim_g.cfg.memory;
}

/* Reads a device's capacity and the memory of every live process without
 * claiming a slot (NVML). A device with no state file, or one not yet set
 * up, reads as `fallback` bytes with none in use. */
CUresult vsim_state_peek(const char *dir, int ordinal, uint64_t fallback,
			 uint64_t *capacity, uint64_t *used)
{
	struct dev_state d = { .fd = -1, .slot = -1 };
	char path[4200];
	struct stat st;
	void *map;

	*capacity = fallback;
	*used = 0;
	snprintf(path, sizeof(path), "%s/dev%d.state", dir, ordinal);
	d.fd = open(path, O_RDWR | O_CLOEXEC);
	if (d.fd < 0)
		return errno == ENOENT ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
	flock(d.fd, LOCK_SH);	/* a first attacher initialises under LOCK_EX */
	if (fstat(d.fd, &st) != 0 || (size_t)st.st_size != sizeof(*d.sh))
		goto out_close;
	map = mmap(NULL, sizeof(*d.sh), PROT_READ | PROT_WRITE, MAP_SHARED,
		   d.fd, 0);
	if (map == MAP_FAILED)
		goto out_close;
	d.sh = map;
	if (d.sh->magic == STATE_MAGIC && d.sh->version == STATE_VERSION &&
	    d.sh->size == sizeof(*d.sh)) {
		state_lock(d.sh);
		reclaim_dead(&d);
		*capacity = d.sh->capacity;
		*used = d.sh->used;
		state_unlock(d.sh);
	}
	munmap(map, sizeof(*d.sh));
out_close:
	close(d.fd);	/* drops the shared flock too */
	return CUDA_SUCCESS;
}

/* ---- shared objects --------------------------------------------------------
 *
 * One entry per object some process exported (ipc.c, vmm.c): its size,
 * counted once in `used`, and a bitmap of the slots holding it. A process
 * sets its bit at its first hold of the object and clears it at its last
 * (it counts its holds in dev_state.holds); shared_sweep clears the bits of
 * dead and detached processes with their slots. The last bit to go frees
 * the entry and its bytes. All of it runs under the state mutex; these are
 * rare calls, so the table is searched linearly.
 */

static void holder_set(struct state_shared *o, int slot)
{
	o->holders[slot / 64] |= 1ull << (slot % 64);
}

static void holder_clear(struct state_shared *o, int slot)
{
	o->holders[slot / 64] &= ~(1ull << (slot % 64));
	if (o->exporter_slot == slot)
		o->exporter_slot = -1;
}

static bool holders_none(const struct state_shared *o)
{
	for (int w = 0; w < HOLDER_WORDS; w++)
		if (o->holders[w])
			return false;
	return true;
}

/* Ids start from the wall clock, so that a handle kept across a restart of
 * the state file does not name an object of the new one. */
static uint64_t shared_first_id(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) | 1;
}

/* Nobody holds o any more: its bytes leave the device. */
static void shared_free(struct state_file *sh, struct state_shared *o)
{
	sh->used -= o->size < sh->used ? o->size : sh->used;
	memset(o, 0, sizeof(*o));
}

/* Clears the bits of slots no process claims (dead or detached), and frees
 * the objects left without a holder. */
static void shared_sweep(struct state_file *sh)
{
	for (int i = 0; i < STATE_SHARED; i++) {
		struct state_shared *o = &sh->shared[i];
		if (!o->id)
			continue;
		for (int w = 0; w < HOLDER_WORDS; w++) {
			uint64_t bits = o->holders[w];
			while (bits) {
				int slot = w * 64 + __builtin_ctzll(bits);
				bits &= bits - 1;
				if (!atomic_load(&sh->slots[slot].claimed))
					holder_clear(o, slot);
			}
		}
		if (holders_none(o))
			shared_free(sh, o);
	}
}

static uint64_t shared_total(const struct state_file *sh)
{
	uint64_t sum = 0;

	for (int i = 0; i < STATE_SHARED; i++)
		if (sh->shared[i].id)
			sum += sh->shared[i].size;
	return sum;
}

static struct state_shared *shared_find(struct state_file *sh, uint64_t id)
{
	for (int i = 0; id && i < STATE_SHARED; i++)
		if (sh->shared[i].id == id)
			return &sh->shared[i];
	return NULL;
}

static struct state_shared *shared_unused(struct state_file *sh)
{
	for (int i = 0; i < STATE_SHARED; i++)
		if (!sh->shared[i].id)
			return &sh->shared[i];
	return NULL;
}

static struct shared_hold *hold_find(struct dev_state *d, uint64_t id)
{
	for (size_t i = 0; i < d->nholds; i++)
		if (d->holds[i].id == id)
			return &d->holds[i];
	return NULL;
}

/* One more hold of id by this process; 0, or -1 out of memory. */
static int hold_add(struct dev_state *d, uint64_t id)
{
	struct shared_hold *h = hold_find(d, id);

	if (h) {
		h->refs++;
		return 0;
	}
	if (d->nholds == d->holds_cap) {
		size_t cap = d->holds_cap ? d->holds_cap * 2 : 16;
		h = realloc(d->holds, cap * sizeof(*h));
		if (!h)
			return -1;
		d->holds = h;
		d->holds_cap = cap;
	}
	d->holds[d->nholds++] = (struct shared_hold){ .id = id, .refs = 1 };
	return 0;
}

/* One hold fewer; true when it was this process's last hold of id. */
static bool hold_remove(struct dev_state *d, uint64_t id)
{
	struct shared_hold *h = hold_find(d, id);

	if (!h || --h->refs > 0)
		return false;
	*h = d->holds[--d->nholds];
	return true;
}

/* The process no longer uses the file (exit, or a forked child's copy). */
static void holds_forget(struct dev_state *d)
{
	free(d->holds);
	d->holds = NULL;
	d->nholds = d->holds_cap = 0;
}

static void describe(const struct state_shared *o, int ordinal,
		     struct vsim_shared_desc *out)
{
	*out = (struct vsim_shared_desc){
		.kind = (enum vsim_shared_kind)o->kind, .size = o->size,
		.asked = o->asked, .fd = -1, .prop = o->prop,
	};
	if (out->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		out->prop.location.id = ordinal;
}

CUresult vsim_shared_create(int ordinal, const struct vsim_shared_desc *desc,
			    uint64_t *id)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	struct state_shared *o;
	struct state_slot *s;
	struct stat st;
	uint64_t moved;
	CUresult rc = CUDA_SUCCESS;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (fstat(desc->fd, &st) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	state_lock(sh);
	o = shared_unused(sh);
	if (!o) {
		reclaim_dead(d);
		o = shared_unused(sh);
	}
	if (!o || hold_add(d, sh->shared_next_id) != 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*o = (struct state_shared){
		.size = desc->size, .asked = desc->asked,
		.ino = st.st_ino, .fsdev = st.st_dev, .kind = desc->kind,
		.exporter_slot = d->slot, .exporter_pid = (int32_t)getpid(),
		.exporter_fd = desc->fd, .prop = desc->prop,
	};
	o->prop.win32HandleMetaData = NULL;	/* a pointer of this process */
	holder_set(o, d->slot);
	/* The bytes move from this process's slot to the object. */
	s = &sh->slots[d->slot];
	moved = desc->size < s->used ? desc->size : s->used;
	s->used -= moved;
	sh->used += desc->size - moved;
	o->id = *id = sh->shared_next_id++;
	if (sh->shared_next_id == 0)
		sh->shared_next_id = 1;
out:
	state_unlock(sh);
	return rc;
}

void vsim_shared_drop(int ordinal, uint64_t id)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	struct state_shared *o;

	if (!sh)
		return;
	state_lock(sh);
	if (!hold_remove(d, id))
		goto out;
	o = shared_find(sh, id);
	if (!o)
		goto out;
	holder_clear(o, d->slot);
	if (holders_none(o))
		shared_free(sh, o);
	else
		reclaim_dead(d);	/* the others may be dead: find out now */
out:
	state_unlock(sh);
}

/* Opens the exporter's memfd anew through /proc. The exporter keeps that fd
 * open while it holds the object, which the caller checked under the mutex;
 * the inode is compared all the same (another pid namespace, a pid reused). */
static CUresult reopen(const struct state_shared *o, int *out)
{
	char path[64];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)o->exporter_pid,
		 (int)o->exporter_fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_MAP_FAILED;
	if (fstat(fd, &st) != 0 || st.st_ino != o->ino || st.st_dev != o->fsdev) {
		close(fd);
		return CUDA_ERROR_MAP_FAILED;
	}
	*out = fd;
	return CUDA_SUCCESS;
}

CUresult vsim_shared_open(int ordinal, uint64_t id, int *fd,
			  struct vsim_shared_desc *out)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	struct state_shared *o;
	CUresult rc;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	state_lock(sh);
	reclaim_dead(d);	/* a dead exporter's objects open no more */
	o = shared_find(sh, id);
	if (!o || o->kind != VSIM_SHARED_IPC || o->exporter_slot < 0) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (o->exporter_slot == d->slot) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
		goto out;
	}
	rc = reopen(o, fd);
	if (rc != CUDA_SUCCESS)
		goto out;
	if (hold_add(d, id) != 0) {
		close(*fd);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	holder_set(o, d->slot);
	describe(o, ordinal, out);
out:
	state_unlock(sh);
	return rc;
}

/* Takes a hold of device d's VMM object whose memfd is (ino, fsdev); 1 when
 * there is one, 0 when not, -1 out of memory. */
static int import_on(struct dev_state *d, const struct stat *st, uint64_t *id,
		     struct state_shared *copy)
{
	struct state_file *sh = d->sh;
	int found = 0;

	state_lock(sh);
	reclaim_dead(d);
	for (int i = 0; i < STATE_SHARED && !found; i++) {
		struct state_shared *o = &sh->shared[i];
		if (!o->id || o->kind != VSIM_SHARED_VMM ||
		    o->ino != (uint64_t)st->st_ino ||
		    o->fsdev != (uint64_t)st->st_dev)
			continue;
		found = hold_add(d, o->id) == 0 ? 1 : -1;
		if (found == 1) {
			holder_set(o, d->slot);
			*id = o->id;
			*copy = *o;
		}
	}
	state_unlock(sh);
	return found;
}

CUresult vsim_shared_import(int fd, int *ordinal, uint64_t *id,
			    struct vsim_shared_desc *out)
{
	struct state_shared copy;
	struct stat st;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		int found;
		if (!states[i].sh)
			continue;
		found = import_on(&states[i], &st, id, &copy);
		if (found < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (found > 0) {
			*ordinal = i;
			describe(&copy, i, out);
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- the execution engine ------------------------------------------------- */

static long futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts,
		       NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The ticket being served belongs to a dead process, or was never
 * registered: pass it on so the engine never stays stuck. */
static void skip_stale(struct dev_state *d, uint32_t s, uint64_t stuck_ns)
{
	struct state_file *sh = d->sh;
	uint64_t entry = atomic_load(&sh->ring[s % STATE_RING]);
	uint32_t slot = (uint32_t)entry % STATE_SLOTS;
	bool stale;

	if ((uint32_t)(entry >> 32) == s)
		stale = !slot_alive(d, slot) ||
			(int32_t)(s - atomic_load(
				&sh->slots[slot].first_ticket)) < 0;
	else
		stale = stuck_ns >= ORPHAN_TICKET_NS;
	if (stale && atomic_compare_exchange_strong(&sh->serving, &s, s + 1))
		futex_wake_all(&sh->serving);
}

/* SMs held by running kernels. Only the head of the queue admits kernels
 * (adds to its own slot), others only give SMs back, so the sum can only
 * fall between this count and the head's admission. */
static uint32_t sms_held(const struct state_file *sh)
{
	uint32_t hi = atomic_load(&sh->slots_hi), sum = 0;

	if (hi > STATE_SLOTS)
		hi = STATE_SLOTS;
	for (uint32_t i = 0; i < hi; i++)
		sum += atomic_load(&sh->slots[i].sms);
	return sum;
}

/* SMs held by dead processes (killed mid-kernel) go back. Called by the
 * head: no one else adds to a slot meanwhile, so a slot claimed anew
 * (alive) is never cleared. */
static void reclaim_dead_sms(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint32_t hi = atomic_load(&sh->slots_hi);

	if (hi > STATE_SLOTS)
		hi = STATE_SLOTS;
	for (uint32_t i = 0; i < hi; i++)
		if (atomic_load(&sh->slots[i].sms) && !slot_alive(d, (int)i))
			atomic_store(&sh->slots[i].sms, 0);
}

/* Waits for the turn of ticket t, passing on those of dead processes. */
static void wait_turn(struct dev_state *d, uint32_t t)
{
	struct state_file *sh = d->sh;
	uint32_t seen = atomic_load(&sh->serving), s;
	uint64_t since = vsim_now_ns();

	while ((s = atomic_load(&sh->serving)) != t) {
		if (s != seen) {
			seen = s;
			since = vsim_now_ns();
		}
		if (futex_wait(&sh->serving, s, STALE_WAIT_NS) != 0 &&
		    errno == ETIMEDOUT)
			skip_stale(d, s, vsim_now_ns() - since);
	}
}

/* At the head of the queue: waits until `need` SMs are free, takes them. */
static void wait_sms(struct dev_state *d, uint32_t need)
{
	struct state_file *sh = d->sh;

	for (;;) {
		uint32_t gen = atomic_load(&sh->sm_released);
		if (sms_held(sh) + need <= sh->sm_total)
			break;
		if (futex_wait(&sh->sm_released, gen, STALE_WAIT_NS) != 0 &&
		    errno == ETIMEDOUT)
			reclaim_dead_sms(d);
	}
	atomic_fetch_add(&sh->slots[d->slot].sms, need);
}

unsigned vsim_engine_acquire(int ordinal, unsigned sms)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	uint32_t t, need;

	if (!sh)
		return 0;
	need = (sms == 0 || sms > sh->sm_total) ? sh->sm_total : sms;
	t = atomic_fetch_add(&sh->next_ticket, 1);
	atomic_store(&sh->ring[t % STATE_RING],
		     ((uint64_t)t << 32) | (uint32_t)d->slot);
	wait_turn(d, t);
	wait_sms(d, need);
	/* Admitted: the next in line may start while this kernel runs. */
	atomic_fetch_add(&sh->serving, 1);
	futex_wake_all(&sh->serving);
	return need;
}

void vsim_engine_release(int ordinal, unsigned sms)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;

	if (!sh)
		return;
	atomic_fetch_sub(&sh->slots[d->slot].sms, sms);
	atomic_fetch_add(&sh->sm_released, 1);
	futex_wake_all(&sh->sm_released);
}
