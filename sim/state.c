/* state.c - one simulated device's state, shared by every process using it.
 *
 * Each device is a file "<VGPU_SIM_STATE_DIR>/dev<N>.state" mapped shared. It
 * holds the device's capacity and usage, one slot per attached process, the
 * execution engine, and the record of what ran. Kernels take multiprocessors
 * (SMs), all of them for an ordinary context, k for a green context of k, and
 * are admitted first come first served (a ticket lock across all processes)
 * while the SMs held by running kernels fit in the device.
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
 *
 * The engine and the record (the sections below) take no mutex: a kernel's
 * hold of SMs is an entry of the hold table whose one word says whether, and
 * until when, it holds them, so that any process can end a hold whose time
 * is up (its holder stopped, or late) without its holder's help.
 */
#include "sim.h"
#include "vgpu_sim_record.h"

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
#define STATE_VERSION 4u
#define STATE_SLOTS 256
#define STATE_RING 4096
#define LOCK_BASE (1ll << 40)                  /* slot lock bytes start here */
#define STALE_WAIT_NS 5000000ull               /* liveness check period */
#define ORPHAN_TICKET_NS 1000000000ull         /* a ticket nobody registered */
#define STATE_SHARED 512                       /* shared objects at a time */
#define HOLDER_WORDS (STATE_SLOTS / 64)
#define STATE_HOLDS 2048                       /* kernels holding SMs at once */
#define STATE_RECORD 65536                     /* intervals kept (a power of 2) */

struct state_slot {
	_Atomic uint32_t claimed;
	int32_t pid;
	uint64_t used;
	_Atomic uint32_t first_ticket; /* next_ticket when claimed: older
					* tickets naming this slot were a dead
					* owner's */
	uint32_t pad;
	uint64_t pidns_ino, pidns_dev; /* its pid namespace: stop checks read
					* /proc only in the same one */
	_Atomic uint64_t busy_ns;      /* SM-weighted device time of its
					* kernels, added as it ends them */
	_Atomic uint64_t kernels;
};

/* A kernel's hold of SMs (the engine, below). Its word is everything others
 * act on: 0 free; else a state in the low 2 bits and a value above. The
 * fields are written while it is reserved, before it holds anything, and
 * read relaxed (hold_read): a copy counts only if the word still says, at
 * the next compare-and-swap, what it said before the copy. */
struct state_hold {
	_Atomic uint64_t word;
	_Atomic uint64_t start_ns;     /* moved once, past the admission's
					* hand-off */
	_Atomic uint64_t ctx_id;
	_Atomic int32_t pid, tid;      /* the holder's process and thread */
	_Atomic uint32_t slot, sms;
};

/* One interval of the record: seq is its index + 1 once written, and 0
 * while it is written (a seqlock per entry). */
struct state_interval {
	_Atomic uint64_t seq;
	_Atomic uint64_t start_ns, end_ns, ctx_id;
	_Atomic int32_t pid;
	_Atomic uint32_t slot, sms;
	uint32_t pad;
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
	_Atomic uint32_t holds_hi;     /* no hold at or above was ever used */
	_Atomic uint64_t ring[STATE_RING];   /* ticket << 32 | slot */
	struct state_slot slots[STATE_SLOTS];
	/* Shared objects (the section "shared objects" below). */
	uint64_t shared_next_id;
	struct state_shared shared[STATE_SHARED];
	/* The engine's holds and the record (the last sections below). */
	struct state_hold holds[STATE_HOLDS];
	_Atomic uint64_t rec_next;     /* intervals ever recorded */
	_Atomic uint64_t rec_lost_end; /* latest end of one overwritten */
	struct state_interval record[STATE_RECORD];
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
/* The section "the execution engine", below. */
static void pidns_self(uint64_t *ino, uint64_t *dev);
/* The calling thread's id (thread_id), cached: one system call per thread.
 * A forked child's copy of the forking thread's is cleared in
 * vsim_state_forget. */
static _Thread_local int32_t tid_cache;

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

/* Sets up a file that is new (all zero, as ftruncate made it: the record's
 * pages are left untouched until used) or not ours. */
static void init_file(struct state_file *sh, uint64_t capacity, bool zero)
{
	pthread_mutexattr_t attr;

	if (!zero)
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
		init_file(d->sh, vsim_g.cfg.memory, st.st_size == 0);
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
		pidns_self(&sh->slots[i].pidns_ino, &sh->slots[i].pidns_dev);
		atomic_store(&sh->slots[i].first_ticket,
			     atomic_load(&sh->next_ticket));
		atomic_store(&sh->slots[i].busy_ns, 0);
		atomic_store(&sh->slots[i].kernels, 0);
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
	tid_cache = 0;
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

/* Maps <dir>/dev<ordinal>.state into d without claiming a slot: 0; -1 when
 * it cannot be opened (errno says why); 1 when it is no state file of this
 * version (yet). */
static int peek_open(const char *dir, int ordinal, struct dev_state *d)
{
	char path[4200];
	struct stat st;
	void *map;

	*d = (struct dev_state){ .fd = -1, .slot = -1 };
	snprintf(path, sizeof(path), "%s/dev%d.state", dir, ordinal);
	d->fd = open(path, O_RDWR | O_CLOEXEC);
	if (d->fd < 0)
		return -1;
	flock(d->fd, LOCK_SH);	/* a first attacher initialises under LOCK_EX */
	if (fstat(d->fd, &st) != 0 || (size_t)st.st_size != sizeof(*d->sh))
		goto out_close;
	map = mmap(NULL, sizeof(*d->sh), PROT_READ | PROT_WRITE, MAP_SHARED,
		   d->fd, 0);
	if (map == MAP_FAILED)
		goto out_close;
	d->sh = map;
	if (d->sh->magic == STATE_MAGIC && d->sh->version == STATE_VERSION &&
	    d->sh->size == sizeof(*d->sh))
		return 0;
	munmap(map, sizeof(*d->sh));
	d->sh = NULL;
out_close:
	close(d->fd);	/* drops the shared flock too */
	d->fd = -1;
	return 1;
}

static void peek_close(struct dev_state *d)
{
	munmap(d->sh, sizeof(*d->sh));
	close(d->fd);
}

/* Reads a device's capacity and the memory of every live process without
 * claiming a slot (NVML). A device with no state file, or one not yet set
 * up, reads as `fallback` bytes with none in use. */
CUresult vsim_state_peek(const char *dir, int ordinal, uint64_t fallback,
			 uint64_t *capacity, uint64_t *used)
{
	struct dev_state d;
	int rc;

	*capacity = fallback;
	*used = 0;
	rc = peek_open(dir, ordinal, &d);
	if (rc != 0)
		return rc > 0 || errno == ENOENT ? CUDA_SUCCESS :
		       CUDA_ERROR_OPERATING_SYSTEM;
	state_lock(d.sh);
	reclaim_dead(&d);
	*capacity = d.sh->capacity;
	*used = d.sh->used;
	state_unlock(d.sh);
	peek_close(&d);
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

/* ---- the execution engine --------------------------------------------------
 *
 * A kernel is admitted at the head of the ticket queue once the SMs it needs
 * are free, and holds them in an entry of the hold table, whose word is:
 *
 *   0                   free
 *   RESERVED | owner    taken by the head of the queue, holding nothing yet
 *   OPEN | start        holding; its end is not known: its host form computes
 *   TIMED | deadline    holding until deadline: its host form waits till then
 *   ENDED | end         its SMs were given back at end; the holder frees it
 *                       (anyone, once the holder is dead)
 *
 * The stop rule: a hold's SMs are free from its deadline on, whatever its
 * host thread does, as a real GPU does not stop with the process. Any
 * process that finds a TIMED hold past its deadline ends it there; an OPEN
 * hold whose thread is stopped (SIGSTOP, a debugger) is ended when found so;
 * a dead holder's hold is ended at its deadline or when found dead, whichever
 * comes first (a driver tears a dead process's context down). Each end is one
 * compare-and-swap of the word and appends the hold's interval to the record,
 * so a hold ends once: a late holder's own release finds it ENDED and only
 * frees the entry.
 *
 * Only the head of the queue reserves entries and admits kernels; others only
 * end holds. So the SMs held can only fall between the head's count and its
 * admission.
 */

enum hold_state {
	HOLD_RESERVED = 0,
	HOLD_OPEN = 1,
	HOLD_TIMED = 2,
	HOLD_ENDED = 3,
};

#define HOLD_VALUE_MAX ((1ull << 62) - 1)
#define NO_HOLD UINT32_MAX

static uint64_t hold_word(enum hold_state st, uint64_t value)
{
	if (value > HOLD_VALUE_MAX)
		value = HOLD_VALUE_MAX;
	return value << 2 | (uint64_t)st;
}

static enum hold_state hold_state(uint64_t w)
{
	return (enum hold_state)(w & 3);
}

static uint64_t hold_value(uint64_t w)
{
	return w >> 2;
}

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

static int32_t thread_id(void)
{
	if (!tid_cache)
		tid_cache = (int32_t)syscall(SYS_gettid);
	return tid_cache;
}

static void pidns_self(uint64_t *ino, uint64_t *dev)
{
	struct stat st;

	*ino = *dev = 0;
	if (stat("/proc/self/ns/pid", &st) == 0) {
		*ino = (uint64_t)st.st_ino;
		*dev = (uint64_t)st.st_dev;
	}
}

/* True when thread tid of slot s's process is stopped (SIGSTOP and its
 * kin, or a debugger). Only within our pid namespace, where its ids mean
 * the same; anything unknown reads as running. */
static bool thread_stopped(const struct state_slot *s, int32_t pid,
			   int32_t tid)
{
	char path[64], buf[256], *p;
	uint64_t ino, dev;
	ssize_t n;
	int fd;

	pidns_self(&ino, &dev);
	if (!ino || ino != s->pidns_ino || dev != s->pidns_dev)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid,
		 (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');	/* the command name may hold anything */
	return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* True while the process that took a hold as (slot, pid) is alive. */
static bool owner_alive(const struct dev_state *d, uint32_t slot, int32_t pid)
{
	const struct state_slot *s;

	if (slot >= STATE_SLOTS)
		return false;
	s = &d->sh->slots[slot];
	if (!atomic_load(&s->claimed) || s->pid != pid)
		return false;
	return slot_alive(d, (int)slot);
}

/* True when slot's process is stopped (its main thread: SIGSTOP stops them
 * all), read as thread_stopped does. */
static bool process_stopped(const struct dev_state *d, uint32_t slot)
{
	const struct state_slot *s = &d->sh->slots[slot];

	return atomic_load(&s->claimed) && s->pid > 0 &&
	       thread_stopped(s, s->pid, s->pid);
}

/* The ticket being served belongs to a dead or stopped process, or was
 * never registered: pass it on so the engine never stays stuck. A stopped
 * process finds its ticket passed when it goes on, and queues again. */
static void skip_stale(struct dev_state *d, uint32_t s, uint64_t stuck_ns)
{
	struct state_file *sh = d->sh;
	uint64_t entry = atomic_load(&sh->ring[s % STATE_RING]);
	uint32_t slot = (uint32_t)entry % STATE_SLOTS;
	bool stale;

	if ((uint32_t)(entry >> 32) == s)
		stale = !slot_alive(d, slot) ||
			(int32_t)(s - atomic_load(
				&sh->slots[slot].first_ticket)) < 0 ||
			process_stopped(d, slot);
	else
		stale = stuck_ns >= ORPHAN_TICKET_NS;
	if (stale && atomic_compare_exchange_strong(&sh->serving, &s, s + 1))
		futex_wake_all(&sh->serving);
}

/* Waits for the turn of ticket t, passing on those of dead and stopped
 * processes. False when t itself was passed on (this process was stopped
 * meanwhile). */
static bool wait_turn(struct dev_state *d, uint32_t t)
{
	struct state_file *sh = d->sh;
	uint32_t seen = atomic_load(&sh->serving), s;
	uint64_t since = vsim_now_ns();

	while ((s = atomic_load(&sh->serving)) != t) {
		if ((int32_t)(s - t) > 0)
			return false;
		if (s != seen) {
			seen = s;
			since = vsim_now_ns();
		}
		if (futex_wait(&sh->serving, s, STALE_WAIT_NS) != 0 &&
		    errno == ETIMEDOUT)
			skip_stale(d, s, vsim_now_ns() - since);
	}
	return true;
}

static uint32_t holds_hi(const struct state_file *sh)
{
	uint32_t hi = atomic_load(&sh->holds_hi);

	return hi < STATE_HOLDS ? hi : STATE_HOLDS;
}

/* A hold's fields, copied out. */
struct hold_info {
	uint64_t start_ns, ctx_id;
	int32_t pid, tid;
	uint32_t slot, sms;
};

static void hold_read(const struct state_hold *h, struct hold_info *out)
{
	const memory_order rx = memory_order_relaxed;

	*out = (struct hold_info){
		.start_ns = atomic_load_explicit(&h->start_ns, rx),
		.ctx_id = atomic_load_explicit(&h->ctx_id, rx),
		.pid = atomic_load_explicit(&h->pid, rx),
		.tid = atomic_load_explicit(&h->tid, rx),
		.slot = atomic_load_explicit(&h->slot, rx),
		.sms = atomic_load_explicit(&h->sms, rx),
	};
}

static void hold_write(struct state_hold *h, const struct hold_info *in)
{
	const memory_order rx = memory_order_relaxed;

	atomic_store_explicit(&h->start_ns, in->start_ns, rx);
	atomic_store_explicit(&h->ctx_id, in->ctx_id, rx);
	atomic_store_explicit(&h->pid, in->pid, rx);
	atomic_store_explicit(&h->tid, in->tid, rx);
	atomic_store_explicit(&h->slot, in->slot, rx);
	atomic_store_explicit(&h->sms, in->sms, rx);
}

/* The section "the record", below. */
static void record_append(struct state_file *sh, const struct hold_info *h,
			  uint64_t end);

/* Ends hold h, last seen holding as w, at `end`: its SMs are free, its
 * interval is recorded, waiters are told. False when its word changed
 * first (its holder, or another process, got there before). The fields are
 * read before the swap: once ENDED, the holder may free the entry. */
static bool hold_end(struct state_file *sh, struct state_hold *h, uint64_t w,
		     uint64_t end)
{
	struct hold_info copy;

	hold_read(h, &copy);
	/* An OPEN hold's start is its word's: its holder moves it there. */
	if (hold_state(w) == HOLD_OPEN)
		copy.start_ns = hold_value(w);
	if (end < copy.start_ns)
		end = copy.start_ns;
	if (!atomic_compare_exchange_strong(&h->word, &w,
					    hold_word(HOLD_ENDED, end)))
		return false;
	record_append(sh, &copy, end);
	atomic_fetch_add(&sh->sm_released, 1);
	futex_wake_all(&sh->sm_released);
	return true;
}

/* SMs held now. Holds past their deadline are ended on the way (at their
 * deadline). *next: the earliest deadline of those still holding, or
 * UINT64_MAX. */
static uint32_t holds_count(struct state_file *sh, uint64_t *next)
{
	uint32_t hi = holds_hi(sh), sum = 0;
	uint64_t now = vsim_now_ns();

	*next = UINT64_MAX;
	for (uint32_t i = 0; i < hi; i++) {
		struct state_hold *h = &sh->holds[i];
		uint64_t w = atomic_load(&h->word);

		while (w && hold_state(w) == HOLD_TIMED &&
		       hold_value(w) <= now &&
		       !hold_end(sh, h, w, hold_value(w)))
			w = atomic_load(&h->word);
		if (!w || hold_state(w) == HOLD_RESERVED ||
		    hold_state(w) == HOLD_ENDED)
			continue;
		sum += atomic_load_explicit(&h->sms, memory_order_relaxed);
		if (hold_state(w) == HOLD_TIMED && hold_value(w) < *next)
			*next = hold_value(w);
	}
	return sum;
}

/* Ends the holds of dead processes (at their deadline, or now if that is
 * sooner) and frees their entries; ends the OPEN holds of stopped threads
 * now. System calls per hold: run every few milliseconds of waiting. */
static void holds_check(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint32_t hi = holds_hi(sh);

	for (uint32_t i = 0; i < hi; i++) {
		struct state_hold *h = &sh->holds[i];
		uint64_t w = atomic_load(&h->word), now = vsim_now_ns(), end;
		enum hold_state st = hold_state(w);
		struct hold_info f;
		uint32_t slot;
		int32_t pid;

		if (!w)
			continue;
		hold_read(h, &f);
		slot = f.slot;
		pid = f.pid;
		if (st == HOLD_RESERVED) {
			slot = (uint32_t)(hold_value(w) & 0xffff);
			pid = (int32_t)(hold_value(w) >> 16);
		}
		if (!owner_alive(d, slot, pid)) {
			if (st == HOLD_OPEN || st == HOLD_TIMED) {
				end = st == HOLD_TIMED && hold_value(w) < now ?
				      hold_value(w) : now;
				if (!hold_end(sh, h, w, end))
					continue;	/* next time */
				w = hold_word(HOLD_ENDED, end);
			}
			atomic_compare_exchange_strong(&h->word, &w, 0);
			continue;
		}
		if (st == HOLD_OPEN && thread_stopped(&sh->slots[slot], pid,
						      f.tid))
			hold_end(sh, h, w, now);
	}
}

/* A free entry reserved for this process's next hold, or NO_HOLD when the
 * table is full. */
static uint32_t hold_reserve(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint64_t owner = (uint64_t)(uint32_t)sh->slots[d->slot].pid << 16 |
			 (uint32_t)d->slot;

	for (uint32_t i = 0; i < STATE_HOLDS; i++) {
		uint64_t w = 0;

		if (atomic_load(&sh->holds[i].word) ||
		    !atomic_compare_exchange_strong(&sh->holds[i].word, &w,
				hold_word(HOLD_RESERVED, owner)))
			continue;
		if (atomic_load(&sh->holds_hi) < i + 1)
			atomic_store(&sh->holds_hi, i + 1);
		return i;
	}
	return NO_HOLD;
}

/* At the head of the queue (ticket t): waits until `need` SMs are free,
 * checking every few milliseconds for dead and stopped holders, and waking
 * at the earliest deadline. Returns the entry reserved for the hold, with
 * the SMs free; NO_HOLD when t was passed on meanwhile. */
static uint32_t wait_sms(struct dev_state *d, uint32_t t, uint32_t need)
{
	struct state_file *sh = d->sh;
	uint32_t entry = NO_HOLD;
	uint64_t checked = vsim_now_ns();

	for (;;) {
		uint32_t gen = atomic_load(&sh->sm_released);
		uint64_t next, now, wait = STALE_WAIT_NS;

		if (atomic_load(&sh->serving) != t) {
			if (entry != NO_HOLD)
				atomic_store(&sh->holds[entry].word, 0);
			return NO_HOLD;
		}
		if (entry == NO_HOLD)
			entry = hold_reserve(d);
		if (holds_count(sh, &next) + need <= sh->sm_total &&
		    entry != NO_HOLD)
			return entry;
		now = vsim_now_ns();
		if (now - checked >= STALE_WAIT_NS) {
			holds_check(d);
			checked = now;
			continue;
		}
		if (next > now && next - now < wait)
			wait = next - now;
		futex_wait(&sh->sm_released, gen, wait);
	}
}

void vsim_engine_acquire(int ordinal, unsigned sms, unsigned long long ctx_id,
			 struct vsim_hold *out)
{
	struct dev_state *d = &states[ordinal];
	struct state_file *sh = d->sh;
	struct state_hold *h;
	uint32_t t, need, i;
	uint64_t start, w;

	*out = (struct vsim_hold){ .ordinal = ordinal, .index = NO_HOLD };
	if (!sh) {
		out->start_ns = vsim_now_ns();
		return;
	}
	need = (sms == 0 || sms > sh->sm_total) ? sh->sm_total : sms;
	for (;;) {
		t = atomic_fetch_add(&sh->next_ticket, 1);
		atomic_store(&sh->ring[t % STATE_RING],
			     ((uint64_t)t << 32) | (uint32_t)d->slot);
		if (!wait_turn(d, t))
			continue;
		i = wait_sms(d, t, need);
		if (i == NO_HOLD)
			continue;
		h = &sh->holds[i];
		/* Stamped after the count that found the SMs free: after the
		 * end of whatever held them before. vsim_engine_start moves
		 * it on. */
		start = vsim_now_ns();
		hold_write(h, &(struct hold_info){
			.start_ns = start, .ctx_id = ctx_id,
			.pid = sh->slots[d->slot].pid, .tid = thread_id(),
			.slot = (uint32_t)d->slot, .sms = need,
		});
		w = hold_word(HOLD_OPEN, start);
		atomic_store(&h->word, w);
		/* Admitted, unless the turn was passed on since the count
		 * (this process was stopped there): then the hold goes back
		 * unused, and the kernel queues again. */
		if (atomic_compare_exchange_strong(&sh->serving, &t, t + 1))
			break;
		if (!atomic_compare_exchange_strong(&h->word, &w, 0))
			atomic_store(&h->word, 0);	/* ended: ours to free */
		atomic_fetch_add(&sh->sm_released, 1);
		futex_wake_all(&sh->sm_released);
	}
	/* The next in line may start while this kernel runs. */
	futex_wake_all(&sh->serving);
	*out = (struct vsim_hold){ .ordinal = ordinal, .index = i,
				   .sms = need, .start_ns = start };
}

static struct state_hold *hold_of(const struct vsim_hold *hh)
{
	struct state_file *sh = states[hh->ordinal].sh;

	return sh && hh->index != NO_HOLD ? &sh->holds[hh->index] : NULL;
}

void vsim_engine_start(struct vsim_hold *hh, uint64_t nominal_ns)
{
	struct state_hold *h = hold_of(hh);
	uint64_t now = vsim_now_ns(), w;

	if (!h) {
		hh->start_ns = now;
		return;
	}
	/* The start is in an OPEN hold's word: one swap moves it, or finds
	 * the hold ended already (the thread stopped since its admission). */
	w = hold_word(HOLD_OPEN, hh->start_ns);
	if (!atomic_compare_exchange_strong(&h->word, &w,
					    hold_word(HOLD_OPEN, now)))
		return;
	hh->start_ns = now;
	atomic_store_explicit(&h->start_ns, now, memory_order_relaxed);
	w = hold_word(HOLD_OPEN, now);
	if (nominal_ns)
		atomic_compare_exchange_strong(&h->word, &w,
			hold_word(HOLD_TIMED, now + nominal_ns));
}

void vsim_engine_until(const struct vsim_hold *hh, uint64_t deadline_ns)
{
	struct state_hold *h = hold_of(hh);
	uint64_t w = h ? atomic_load(&h->word) : 0;
	uint64_t want = hold_word(HOLD_TIMED, deadline_ns);

	while (w && w != want && (hold_state(w) == HOLD_OPEN ||
				  hold_state(w) == HOLD_TIMED) &&
	       !atomic_compare_exchange_weak(&h->word, &w, want))
		;
	vsim_busy_until(deadline_ns);
}

void vsim_engine_release(const struct vsim_hold *hh)
{
	struct state_file *sh = states[hh->ordinal].sh;
	struct state_hold *h = hold_of(hh);
	struct state_slot *s;
	uint64_t w, end, busy;

	if (!h)
		return;
	for (;;) {
		uint64_t now = vsim_now_ns();

		w = atomic_load(&h->word);
		if (!w || hold_state(w) == HOLD_RESERVED)
			return;		/* not ours any more: never happens */
		if (hold_state(w) == HOLD_ENDED)
			break;
		end = hold_state(w) == HOLD_TIMED && hold_value(w) < now ?
		      hold_value(w) : now;
		hold_end(sh, h, w, end);
	}
	end = hold_value(w);
	/* Its own process adds its time: a slot is never counted into by a
	 * process that might outlive the slot's owner. */
	s = &sh->slots[states[hh->ordinal].slot];
	busy = sh->sm_total && end > hh->start_ns ?
	       (end - hh->start_ns) * hh->sms / sh->sm_total : 0;
	atomic_fetch_add(&s->busy_ns, busy);
	atomic_fetch_add(&s->kernels, 1);
	/* Only if still ours: never another kernel's entry. */
	atomic_compare_exchange_strong(&h->word, &w, 0);
}

/* ---- the record ------------------------------------------------------------
 *
 * Every hold's interval, appended when it ends, to a ring of STATE_RECORD
 * entries (65536: 6.5 s of back-to-back 100 us kernels). A writer takes an
 * index with one fetch-add and writes the entry as a seqlock; a reader copies
 * an entry and keeps it only if its seq was index + 1 before and after.
 * Overflow: the oldest entries are overwritten, and the latest end among
 * them is kept (rec_lost_end), so a reader knows from when on its copy is
 * whole. An interval is appended at or after its end, so every interval
 * that reaches past rec_lost_end is still there.
 */

static void lost_end_raise(struct state_file *sh, uint64_t end)
{
	uint64_t was = atomic_load(&sh->rec_lost_end);

	while (was < end &&
	       !atomic_compare_exchange_weak(&sh->rec_lost_end, &was, end))
		;
}

static void record_append(struct state_file *sh, const struct hold_info *h,
			  uint64_t end)
{
	uint64_t i = atomic_fetch_add(&sh->rec_next, 1);
	struct state_interval *r = &sh->record[i % STATE_RECORD];
	const memory_order rx = memory_order_relaxed, rl = memory_order_release;

	if (i >= STATE_RECORD)
		lost_end_raise(sh, atomic_load_explicit(&r->end_ns, rx));
	/* Release stores (and acquire loads in record_copy), not fences,
	 * which ThreadSanitizer does not follow: a reader that sees any field
	 * of this write sees seq 0 or later when it looks again. */
	atomic_store_explicit(&r->seq, 0, rx);
	atomic_store_explicit(&r->start_ns, h->start_ns, rl);
	atomic_store_explicit(&r->end_ns, end, rl);
	atomic_store_explicit(&r->ctx_id, h->ctx_id, rl);
	atomic_store_explicit(&r->pid, h->pid, rl);
	atomic_store_explicit(&r->slot, h->slot, rl);
	atomic_store_explicit(&r->sms, h->sms, rl);
	atomic_store_explicit(&r->seq, i + 1, rl);
}

/* Copies interval i; false when it is being written or was overwritten. */
static bool record_copy(struct state_file *sh, uint64_t i,
			struct vsim_interval *out)
{
	struct state_interval *r = &sh->record[i % STATE_RECORD];
	const memory_order aq = memory_order_acquire;
	uint64_t seq = atomic_load_explicit(&r->seq, aq);

	if (seq != i + 1)
		return false;
	*out = (struct vsim_interval){
		.start_ns = atomic_load_explicit(&r->start_ns, aq),
		.end_ns = atomic_load_explicit(&r->end_ns, aq),
		.ctx_id = atomic_load_explicit(&r->ctx_id, aq),
		.pid = atomic_load_explicit(&r->pid, aq),
		.slot = atomic_load_explicit(&r->slot, aq),
		.sms = atomic_load_explicit(&r->sms, aq),
	};
	return atomic_load_explicit(&r->seq, memory_order_relaxed) == seq;
}

/* The device state a reader names: this process's ordinal, or a file. */
static struct dev_state *reader_open(const char *dir, int device,
				     struct dev_state *tmp)
{
	if (!dir)
		return device >= 0 && device < VSIM_MAX_DEVICES &&
		       states[device].sh ? &states[device] : NULL;
	return peek_open(dir, device, tmp) == 0 ? tmp : NULL;
}

VSIM_EXPORT long vsim_record_read(const char *dir, int device,
				  struct vsim_interval *out, size_t max,
				  struct vsim_record_info *info)
{
	struct dev_state tmp, *d = reader_open(dir, device, &tmp);
	struct vsim_record_info in = { 0 };
	uint64_t next, first, i;
	long n = 0;

	if (!d)
		return -1;
	/* Up to now: end the holds whose time is up. */
	holds_count(d->sh, &next);
	holds_check(d);
	in.sm_total = d->sh->sm_total;
	in.recorded = atomic_load(&d->sh->rec_next);
	in.lost = in.recorded > STATE_RECORD ? in.recorded - STATE_RECORD : 0;
	in.lost_end_ns = atomic_load(&d->sh->rec_lost_end);
	first = in.recorded - (max < in.recorded - in.lost ?
			       max : in.recorded - in.lost);
	for (i = first; i < in.recorded; i++) {
		if (record_copy(d->sh, i, &out[n]))
			n++;
		else
			in.torn++;
	}
	if (info)
		*info = in;
	if (d == &tmp)
		peek_close(d);
	return n;
}

VSIM_EXPORT long vsim_record_slots(const char *dir, int device,
				   struct vsim_slot_time *out, size_t max)
{
	struct dev_state tmp, *d = reader_open(dir, device, &tmp);
	uint32_t hi;
	long n = 0;

	if (!d)
		return -1;
	hi = atomic_load(&d->sh->slots_hi);
	for (uint32_t i = 0; i < hi && i < STATE_SLOTS && (size_t)n < max; i++) {
		const struct state_slot *s = &d->sh->slots[i];

		if (!atomic_load(&s->claimed))
			continue;
		out[n++] = (struct vsim_slot_time){
			.pid = s->pid, .slot = i,
			.busy_ns = atomic_load(&s->busy_ns),
			.kernels = atomic_load(&s->kernels),
		};
	}
	if (d == &tmp)
		peek_close(d);
	return n;
}
