/* state.c - one simulated device's state, shared by every process using it:
 * the file, the process slots, the memory in use.
 *
 * Each device is a file "<VGPU_SIM_STATE_DIR>/dev<N>.state" mapped shared
 * (its layout and the rules of its use: state_internal.h). It holds the
 * device's capacity, one slot per attached process, the shared objects
 * (state_shared.c), the execution engine and the record (state_engine.c).
 *
 * The file is built complete under a temporary name and linked into place,
 * so a process attaching never waits for another's set-up. A file of
 * another version, or damaged, is replaced by rename; the processes that
 * find the same such file take turns on its flock (waiting 1 s at most: no
 * state file of this version is in use there yet).
 *
 * Liveness: a process holds an open-file-description lock on its slot's byte
 * for as long as it lives, so the kernel releases it at death whatever the pid
 * namespace. Any process that finds a claimed slot's lock free marks the slot
 * free (one compare-and-swap of its claim), and its memory leaves the device's
 * sum with it: a process killed at any instruction returns its memory; one
 * stopped at any instruction keeps what it holds, and delays nobody.
 *
 * Memory: the device's use is the sum of the claimed slots' `used` and of the
 * live shared objects. A reservation adds its bytes to the process's own slot
 * (and to its `inflight`), then sums: over the capacity, it takes them back.
 * Of two reservations racing, the later sum sees the other's bytes, so the
 * device is never overcommitted; a reservation that failed only because of
 * others being decided tries again (vsim_state_reserve).
 */
#include "state_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_BASE (1ll << 40)                  /* slot lock bytes start here */
#define REPLACE_WAIT_NS 1000000000ull          /* another replacing the file */
#define RESERVE_RACE_NS 20000000ull            /* retrying past others' bytes */
#define OPEN_TRIES 8

struct dev_state vsim_states[VSIM_MAX_DEVICES] = {
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

bool vsim_slot_alive(const struct dev_state *d, int slot)
{
	if (slot == d->slot)
		return true;
	return slot_lock_op(d->fd, slot, F_OFD_GETLK, F_WRLCK) == 1;
}

static uint32_t slots_hi(struct state_file *sh)
{
	uint32_t hi = atomic_load(&sh->slots_hi);

	return hi < STATE_SLOTS ? hi : STATE_SLOTS;
}

void vsim_reclaim_dead(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint32_t hi = slots_hi(sh);

	for (uint32_t i = 0; i < hi; i++) {
		struct state_slot *s = &sh->slots[i];
		uint32_t claim = atomic_load(&s->claimed);

		/* Only that claim: a new owner who locked the slot meanwhile
		 * has replaced it. */
		if (claim && !vsim_slot_alive(d, (int)i))
			atomic_compare_exchange_strong(&s->claimed, &claim, 0);
	}
	vsim_shared_sweep(sh);
}

/* ---- the file ------------------------------------------------------------ */

/* Sets up a new file's zero pages (the record's are left untouched). */
static void init_file(struct state_file *sh)
{
	atomic_store(&sh->capacity, vsim_g.cfg.memory);
	atomic_store(&sh->sm_total, (uint32_t)vsim_g.cfg.sm_count);
	atomic_store(&sh->shared_next_id, vsim_shared_first_id());
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

/* Builds a complete file under a temporary name beside path and links it to
 * path (losing the race, EEXIST, is success: the winner's file is as good),
 * or renames it over path when `replace`. */
static int build_file(const char *path, bool replace)
{
	char tmp[4200];
	void *map;
	int fd, rc = -1;

	snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		goto out_log;
	if (ftruncate(fd, sizeof(struct state_file)) != 0)
		goto out_unlink;
	map = mmap(NULL, sizeof(struct state_file), PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		goto out_unlink;
	init_file(map);
	munmap(map, sizeof(struct state_file));
	if (replace ? rename(tmp, path) == 0 :
		      link(tmp, path) == 0 || errno == EEXIST)
		rc = 0;
out_unlink:
	if (rc != 0 || !replace)
		unlink(tmp);
	close(fd);
out_log:
	if (rc != 0)
		vsim_log("cannot create %s: %s", path, strerror(errno));
	return rc;
}

/* Maps fd if it is a state file of this version: 0; 1 when it is not; -1
 * when it cannot be mapped. */
static int map_file(int fd, struct state_file **out)
{
	struct state_file *sh;
	struct stat st;

	if (fstat(fd, &st) != 0)
		return -1;
	if ((size_t)st.st_size != sizeof(*sh))
		return 1;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED)
		return -1;
	if (sh->magic != STATE_MAGIC || sh->version != STATE_VERSION ||
	    sh->size != sizeof(*sh)) {
		munmap(sh, sizeof(*sh));
		return 1;
	}
	*out = sh;
	return 0;
}

/* The file fd, at path, is no state file of this version: replaces it with a
 * new one, unless another process did so first. Those that found the same
 * file take turns on its flock. */
static int replace_file(int fd, const char *path)
{
	uint64_t deadline = vsim_now_ns() + REPLACE_WAIT_NS;
	struct stat was, now;
	int rc = 0;

	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK || vsim_now_ns() > deadline) {
			vsim_log("%s: not a version %u state file, and cannot "
				 "replace it: %s", path, STATE_VERSION,
				 errno == EWOULDBLOCK ? "another process is at "
				 "it" : strerror(errno));
			return -1;
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (fstat(fd, &was) == 0 && stat(path, &now) == 0 &&
	    was.st_ino == now.st_ino && was.st_dev == now.st_dev) {
		if (was.st_size != 0)
			vsim_log("%s: not a version %u state file; starting it "
				 "anew", path, STATE_VERSION);
		rc = build_file(path, true);
	}
	flock(fd, LOCK_UN);
	return rc;
}

/* Opens and maps the device's file, making it if there is none. */
static int open_file(struct dev_state *d, int ordinal)
{
	char path[4200];

	if (make_dir(vsim_g.cfg.state_dir) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/dev%d.state", vsim_g.cfg.state_dir,
		 vsim_g.dev[ordinal].physical);
	for (int i = 0; i < OPEN_TRIES; i++) {
		int fd = open(path, O_RDWR | O_CLOEXEC), rc;

		if (fd < 0) {
			if (errno != ENOENT || build_file(path, false) != 0)
				break;
			continue;
		}
		rc = map_file(fd, &d->sh);
		if (rc == 0) {
			d->fd = fd;
			return 0;
		}
		if (rc > 0)
			rc = replace_file(fd, path);
		close(fd);
		if (rc != 0)
			break;
	}
	vsim_log("cannot set up %s: %s", path, strerror(errno));
	return -1;
}

/* ---- slots --------------------------------------------------------------- */

static uint32_t new_claim(struct state_file *sh)
{
	uint32_t c;

	do
		c = atomic_fetch_add(&sh->claims, 1) + 1;
	while (c == 0);
	return c;
}

/* Slot i, whose lock this process now holds, becomes its own: whatever a
 * previous owner left in it is cleared before the claim says it is taken. */
static void take_slot(struct dev_state *d, int i)
{
	struct state_file *sh = d->sh;
	struct state_slot *s = &sh->slots[i];
	uint32_t was = atomic_load(&s->claimed);

	vsim_shared_forget_slot(sh, i);
	atomic_store(&s->used, 0);
	atomic_store(&s->inflight, 0);
	atomic_store(&s->pid, (int32_t)getpid());
	vsim_pidns_self(&s->pidns_ino, &s->pidns_dev);
	atomic_store(&s->first_ticket, atomic_load(&sh->next_ticket));
	atomic_store(&s->busy_ns, 0);
	atomic_store(&s->kernels, 0);
	d->claim = new_claim(sh);
	/* Before any of its bytes: a sum reading the bound reads the slot. */
	vsim_raise_to(&sh->slots_hi, (uint32_t)i + 1);
	while (!atomic_compare_exchange_weak(&s->claimed, &was, d->claim))
		;
}

/* Claims a free or dead slot. */
static int claim_slot(struct dev_state *d)
{
	struct state_file *sh = d->sh;

	vsim_reclaim_dead(d);
	for (int i = 0; i < STATE_SLOTS; i++) {
		if (atomic_load(&sh->slots[i].claimed))
			continue;
		if (slot_lock_op(d->fd, i, F_OFD_SETLK, F_WRLCK) != 0)
			continue;
		take_slot(d, i);
		return i;
	}
	return -1;
}

/* Agrees on the capacity and the engine's SM count: the first live
 * process's VGPU_SIM_MEMORY and VGPU_SIM_SM_COUNT win. (Two first ones
 * attaching at once see each other, and keep the file's.) */
static void settle_capacity(struct dev_state *d, int ordinal)
{
	struct state_file *sh = d->sh;
	uint32_t hi = slots_hi(sh), sms;
	uint64_t cap;
	bool others = false;

	for (uint32_t i = 0; i < hi; i++)
		if ((int)i != d->slot && atomic_load(&sh->slots[i].claimed))
			others = true;
	if (!others) {
		atomic_store(&sh->capacity, vsim_g.cfg.memory);
		atomic_store(&sh->sm_total, (uint32_t)vsim_g.cfg.sm_count);
		return;
	}
	cap = atomic_load(&sh->capacity);
	sms = atomic_load(&sh->sm_total);
	if (cap != vsim_g.cfg.memory)
		vsim_log("device %d is in use with %llu bytes of memory; "
			 "VGPU_SIM_MEMORY=%llu is ignored", ordinal,
			 (unsigned long long)cap,
			 (unsigned long long)vsim_g.cfg.memory);
	if (sms != (uint32_t)vsim_g.cfg.sm_count)
		vsim_log("device %d is in use with %u multiprocessors; its "
			 "kernels share those, not VGPU_SIM_SM_COUNT=%d",
			 ordinal, sms, vsim_g.cfg.sm_count);
}

CUresult vsim_state_attach(int ordinal)
{
	struct dev_state *d = &vsim_states[ordinal];
	CUresult rc = CUDA_SUCCESS;
	int cancel = vsim_nocancel_begin();

	pthread_mutex_lock(&attach_lock);
	if (d->sh)
		goto out;
	if (open_file(d, ordinal) != 0) {
		rc = CUDA_ERROR_OPERATING_SYSTEM;
		goto out;
	}
	d->slot = claim_slot(d);
	if (d->slot >= 0) {
		settle_capacity(d, ordinal);
		goto out;
	}
	vsim_log("device %d: all %d process slots are taken", ordinal,
		 STATE_SLOTS);
	munmap(d->sh, sizeof(struct state_file));
	close(d->fd);
	*d = (struct dev_state){ .fd = -1, .slot = -1 };
	rc = CUDA_ERROR_OUT_OF_MEMORY;
out:
	pthread_mutex_unlock(&attach_lock);
	vsim_nocancel_end(cancel);
	return rc;
}

/* Returns this process's memory (normal exit). The mapping, the
 * descriptor, the slot's lock and d stay: the job's other threads may
 * still be inside a call while exit runs the destructors, and the kernel
 * takes them back a moment later. */
void vsim_state_detach_all(void)
{
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		struct dev_state *d = &vsim_states[i];
		struct state_slot *s;
		uint32_t claim;

		if (!d->sh)
			continue;
		vsim_shared_detach(d);
		s = &d->sh->slots[d->slot];
		claim = d->claim;
		/* Its bytes leave the device's sum with the claim. */
		atomic_compare_exchange_strong(&s->claimed, &claim, 0);
		/* The slot's lock stays until the process is gone: no other
		 * process takes the slot while a late call may still write
		 * it. */
	}
}

/* In a forked child: forget the parent's mappings without touching them. The
 * parent keeps its slot (its locks live on its open file description). */
void vsim_state_forget(void)
{
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		struct dev_state *d = &vsim_states[i];
		if (!d->sh)
			continue;
		munmap(d->sh, sizeof(struct state_file));
		close(d->fd);
		vsim_shared_forget(d);
		*d = (struct dev_state){ .fd = -1, .slot = -1 };
	}
	vsim_engine_forget();
	pthread_mutex_init(&attach_lock, NULL);
	pthread_mutex_init(&vsim_shared_lock, NULL);
}

/* ---- memory -------------------------------------------------------------- */

struct totals {
	uint64_t used;           /* every claimed slot's and live object's */
	uint64_t inflight;       /* of which reservations being decided */
};

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* The device's memory in use: slots first, then shared objects. */
static void totals(struct state_file *sh, struct totals *t)
{
	uint32_t hi = slots_hi(sh);

	*t = (struct totals){ 0 };
	for (uint32_t i = 0; i < hi; i++) {
		struct state_slot *s = &sh->slots[i];

		if (!atomic_load(&s->claimed))
			continue;
		t->inflight = add_sat(t->inflight, atomic_load(&s->inflight));
		t->used = add_sat(t->used, atomic_load(&s->used));
	}
	t->used = add_sat(t->used, vsim_shared_total(sh));
}

/* Takes up to `bytes` from a slot's count (never below zero). */
static void slot_sub(_Atomic uint64_t *v, uint64_t bytes)
{
	uint64_t was = atomic_load(v);

	while (!atomic_compare_exchange_weak(v, &was,
					     was - (bytes < was ? bytes : was)))
		;
}

/* A short pause between tries, longer as they fail (up to ~0.1 ms). */
static void backoff(unsigned tries)
{
	static _Thread_local unsigned seed;
	struct timespec ts = { 0, 0 };

	if (tries < 4) {
		sched_yield();
		return;
	}
	if (!seed)
		seed = (unsigned)vsim_now_ns() | 1;
	seed = seed * 1103515245u + 12345u;
	ts.tv_nsec = (long)(1000 + (seed >> 8) %
			    (tries < 10 ? 10000u : 100000u));
	nanosleep(&ts, NULL);
}

/* Adds bytes to the slot, then sums: in, or taken back. *race: it did not
 * fit only because of other reservations being decided. */
static bool try_reserve(struct state_file *sh, struct state_slot *s,
			uint64_t bytes, bool *race)
{
	uint64_t cap = atomic_load(&sh->capacity);
	struct totals t;

	atomic_fetch_add(&s->inflight, bytes);
	atomic_fetch_add(&s->used, bytes);
	totals(sh, &t);
	if (t.used <= cap) {
		atomic_fetch_sub(&s->inflight, bytes);
		return true;
	}
	slot_sub(&s->used, bytes);
	slot_sub(&s->inflight, bytes);
	/* The sum counted ours and the others' in flight; without theirs? */
	*race = t.used - (t.inflight < t.used ? t.inflight : t.used) <=
		cap - bytes;
	return false;
}

CUresult vsim_state_reserve(int ordinal, uint64_t bytes)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct state_file *sh = d->sh;
	uint64_t since = 0;
	bool reclaimed = false;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (bytes > atomic_load(&sh->capacity))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned tries = 0;; tries++) {
		bool race = false;

		if (try_reserve(sh, &sh->slots[d->slot], bytes, &race))
			return CUDA_SUCCESS;
		if (race) {
			if (!since)
				since = vsim_now_ns();
			if (vsim_now_ns() - since < RESERVE_RACE_NS) {
				backoff(tries);
				continue;
			}
		}
		if (reclaimed)
			return CUDA_ERROR_OUT_OF_MEMORY;
		vsim_reclaim_dead(d);
		reclaimed = true;
	}
}

void vsim_state_release(int ordinal, uint64_t bytes)
{
	struct dev_state *d = &vsim_states[ordinal];

	if (d->sh)
		slot_sub(&d->sh->slots[d->slot].used, bytes);
}

uint64_t vsim_state_used(int ordinal)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct totals t;

	if (!d->sh)
		return 0;
	vsim_reclaim_dead(d);
	totals(d->sh, &t);
	return t.used;
}

uint64_t vsim_state_capacity(int ordinal)
{
	struct state_file *sh = vsim_states[ordinal].sh;

	return sh ? atomic_load(&sh->capacity) : vsim_g.cfg.memory;
}

int vsim_state_peek_open(const char *dir, int ordinal, struct dev_state *d)
{
	char path[4200];
	int rc;

	*d = (struct dev_state){ .fd = -1, .slot = -1 };
	snprintf(path, sizeof(path), "%s/dev%d.state", dir, ordinal);
	d->fd = open(path, O_RDWR | O_CLOEXEC);
	if (d->fd < 0)
		return -1;
	rc = map_file(d->fd, &d->sh);
	if (rc == 0)
		return 0;
	close(d->fd);
	*d = (struct dev_state){ .fd = -1, .slot = -1 };
	return 1;
}

void vsim_state_peek_close(struct dev_state *d)
{
	munmap(d->sh, sizeof(*d->sh));
	close(d->fd);
}

long vsim_state_procs(const char *dir, int ordinal, struct vsim_proc_use *out,
		      size_t max)
{
	struct dev_state d;
	uint32_t hi;
	long n = 0;
	int rc = vsim_state_peek_open(dir, ordinal, &d);

	if (rc != 0)
		return rc > 0 || errno == ENOENT ? 0 : -1;
	vsim_reclaim_dead(&d);
	hi = slots_hi(d.sh);
	for (uint32_t i = 0; i < hi; i++) {
		struct state_slot *s = &d.sh->slots[i];

		if (!atomic_load(&s->claimed))
			continue;
		if ((size_t)n < max)
			out[n] = (struct vsim_proc_use){
				.pid = atomic_load(&s->pid),
				.used = atomic_load(&s->used),
			};
		n++;
	}
	vsim_state_peek_close(&d);
	return n;
}

/* Reads a device's capacity and the memory of every live process without
 * claiming a slot (NVML). A device with no state file, or one not of this
 * version, reads as `fallback` bytes with none in use. */
CUresult vsim_state_peek(const char *dir, int ordinal, uint64_t fallback,
			 uint64_t *capacity, uint64_t *used)
{
	struct dev_state d;
	struct totals t;
	int rc;

	*capacity = fallback;
	*used = 0;
	rc = vsim_state_peek_open(dir, ordinal, &d);
	if (rc != 0)
		return rc > 0 || errno == ENOENT ? CUDA_SUCCESS :
		       CUDA_ERROR_OPERATING_SYSTEM;
	vsim_reclaim_dead(&d);
	totals(d.sh, &t);
	*capacity = atomic_load(&d.sh->capacity);
	*used = t.used;
	vsim_state_peek_close(&d);
	return CUDA_SUCCESS;
}
