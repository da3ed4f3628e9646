/* state_shared.c - memory that several processes hold (legacy IPC, exported
 * VMM handles), counted once on the device, in an object of the state file
 * rather than in any process's slot.
 *
 * An object has a bitmap of the slots holding it. A process sets its bit at
 * its first hold of the object and clears it at its last (it counts its holds
 * in its dev_state, under vsim_shared_lock); a slot's bit means nothing once
 * the slot is not claimed (its owner died or left), and a new owner clears it
 * before it claims the slot. The object's bytes leave the device when no
 * claimed slot holds it.
 *
 * Its word, changed only by compare-and-swap, so that no process waits for
 * another and any process can finish what another left half done:
 *
 *   0                          free
 *   MAKING | claim << 8 | slot being made by that slot's claim; freed by
 *                              anyone once that claim is gone
 *   id | epoch << 47           live: its bytes count on the device
 *   DYING | id | epoch << 47   live, and being freed: whoever sees it looks
 *                              at the holders and decides, freeing it (0) or
 *                              keeping it (the next epoch)
 *
 * A process takes a hold by setting its bit, then reading the word: the
 * same id, not dying, and it holds the object (anyone who frees it decides,
 * after marking it dying, that it has no holder, and would see the bit). The
 * epoch makes every keeping decision a new word, so a process that saw the
 * object dying, decided on old holders and was stopped cannot free it later.
 */
#include "state_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define W_DYING (1ull << 63)
#define W_MAKING (1ull << 62)
#define W_EPOCH_SHIFT 47
#define W_EPOCH_MASK (((1ull << 15) - 1) << W_EPOCH_SHIFT)
#define W_ID_MASK ((1ull << W_EPOCH_SHIFT) - 1)

pthread_mutex_t vsim_shared_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t word_id(uint64_t w)
{
	return w & W_MAKING ? 0 : w & W_ID_MASK;
}

/* The word of o while live as id, kept once more (the next epoch). */
static uint64_t word_kept(uint64_t w)
{
	uint64_t epoch = ((w & W_EPOCH_MASK) + (1ull << W_EPOCH_SHIFT)) &
			 W_EPOCH_MASK;

	return (w & W_ID_MASK) | epoch;
}

static uint32_t shared_hi(struct state_file *sh)
{
	uint32_t hi = atomic_load(&sh->shared_hi);

	return hi < STATE_SHARED ? hi : STATE_SHARED;
}

static uint64_t bit_of(int slot)
{
	return 1ull << (slot % 64);
}

/* True when no claimed slot holds o. */
static bool holders_gone(struct state_file *sh, struct state_shared *o)
{
	for (int w = 0; w < HOLDER_WORDS; w++) {
		uint64_t bits = atomic_load(&o->holders[w]);

		while (bits) {
			int slot = w * 64 + __builtin_ctzll(bits);

			bits &= bits - 1;
			if (atomic_load(&sh->slots[slot].claimed))
				return false;
		}
	}
	return true;
}

/* o was seen live as w: frees it if no claimed slot holds it, and settles
 * a free begun by another (DYING) either way. */
static void settle(struct state_file *sh, struct state_shared *o, uint64_t w)
{
	const uint64_t id = word_id(w);

	for (;;) {
		if (!(w & W_DYING)) {
			if (!holders_gone(sh, o))
				return;
			if (atomic_compare_exchange_strong(&o->word, &w,
							   w | W_DYING))
				w |= W_DYING;
			else if (!w || word_id(w) != id)
				return;
			continue;
		}
		/* Looked at after the mark: a hold taken before it is seen. */
		if (atomic_compare_exchange_strong(&o->word, &w,
				holders_gone(sh, o) ? 0 : word_kept(w)) ||
		    !w || word_id(w) != id)
			return;
	}
}

uint64_t vsim_shared_total(struct state_file *sh)
{
	uint32_t hi = shared_hi(sh);
	uint64_t sum = 0;

	for (uint32_t i = 0; i < hi; i++) {
		struct state_shared *o = &sh->shared[i];

		if (word_id(atomic_load(&o->word)))
			sum += o->size;
	}
	return sum;
}

void vsim_shared_sweep(struct state_file *sh)
{
	uint32_t hi = shared_hi(sh);

	for (uint32_t i = 0; i < hi; i++) {
		struct state_shared *o = &sh->shared[i];
		uint64_t w = atomic_load(&o->word);
		uint32_t slot = (uint32_t)(w & 0xff);

		if (!w)
			continue;
		if (!(w & W_MAKING))
			settle(sh, o, w);
		else if (atomic_load(&sh->slots[slot].claimed) !=
			 (uint32_t)((w & ~W_MAKING) >> 8))
			atomic_compare_exchange_strong(&o->word, &w, 0);
	}
}

void vsim_shared_forget_slot(struct state_file *sh, int slot)
{
	uint32_t hi = shared_hi(sh);

	for (uint32_t i = 0; i < hi; i++)
		atomic_fetch_and(&sh->shared[i].holders[slot / 64],
				 ~bit_of(slot));
}

/* Ids start from the wall clock, so that a handle kept across a restart of
 * the state file is unlikely to name an object of the new one. */
uint64_t vsim_shared_first_id(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) |
		1) & W_ID_MASK;
}

static uint64_t next_id(struct state_file *sh)
{
	uint64_t id;

	do
		id = atomic_fetch_add(&sh->shared_next_id, 1) & W_ID_MASK;
	while (id == 0);
	return id;
}

/* The live object called id, or NULL. */
static struct state_shared *find(struct state_file *sh, uint64_t id)
{
	uint32_t hi = shared_hi(sh);

	for (uint32_t i = 0; id && i < hi; i++)
		if (word_id(atomic_load(&sh->shared[i].word)) == id)
			return &sh->shared[i];
	return NULL;
}

/* ---- this process's holds ------------------------------------------------ */

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

void vsim_shared_forget(struct dev_state *d)
{
	free(d->holds);
	d->holds = NULL;
	d->nholds = d->holds_cap = 0;
}

/* Lets go of this process's last hold of o: the bit, and the object if
 * nobody else holds it. */
static void let_go(struct dev_state *d, struct state_shared *o)
{
	int32_t me = d->slot;
	uint64_t w;

	atomic_compare_exchange_strong(&o->exporter_slot, &me, -1);
	atomic_fetch_and(&o->holders[d->slot / 64], ~bit_of(d->slot));
	w = atomic_load(&o->word);
	if (word_id(w))
		settle(d->sh, o, w);
}

/* Takes a hold of o, seen live as id: the bit, then the word. False when o
 * was freed first (then the bit goes, unless this process holds what o is
 * now). Caller holds vsim_shared_lock. */
static bool take(struct dev_state *d, struct state_shared *o, uint64_t id)
{
	_Atomic uint64_t *word = &o->holders[d->slot / 64];
	uint64_t w;

	atomic_fetch_or(word, bit_of(d->slot));
	for (;;) {
		w = atomic_load(&o->word);
		if (word_id(w) != id)
			break;
		if (!(w & W_DYING))
			return true;
		settle(d->sh, o, w);	/* it sees this bit: kept */
	}
	if (!word_id(w) || !hold_find(d, word_id(w)))
		atomic_fetch_and(word, ~bit_of(d->slot));
	return false;
}

/* ---- the calls ----------------------------------------------------------- */

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

/* A free entry, marked as being made by this process's slot. */
static struct state_shared *make_entry(struct dev_state *d)
{
	struct state_file *sh = d->sh;
	uint64_t mark = W_MAKING | (uint64_t)d->claim << 8 | (uint32_t)d->slot;

	for (uint32_t i = 0; i < STATE_SHARED; i++) {
		uint64_t w = 0;

		if (atomic_load(&sh->shared[i].word) ||
		    !atomic_compare_exchange_strong(&sh->shared[i].word, &w,
						    mark))
			continue;
		/* Before it counts: a sum that reads the bound reads it. */
		vsim_raise_to(&sh->shared_hi, i + 1);
		return &sh->shared[i];
	}
	return NULL;
}

static void fill(struct dev_state *d, struct state_shared *o,
		 const struct vsim_shared_desc *desc, const struct stat *st)
{
	o->size = desc->size;
	o->asked = desc->asked;
	o->ino = (uint64_t)st->st_ino;
	o->fsdev = (uint64_t)st->st_dev;
	o->kind = (uint32_t)desc->kind;
	atomic_store(&o->exporter_slot, d->slot);
	o->exporter_claim = d->claim;
	o->exporter_pid = (int32_t)getpid();
	o->exporter_fd = desc->fd;
	o->prop = desc->prop;
	o->prop.win32HandleMetaData = NULL;	/* a pointer of this process */
	for (int w = 0; w < HOLDER_WORDS; w++)
		atomic_store(&o->holders[w], 0);
	atomic_store(&o->holders[d->slot / 64], bit_of(d->slot));
}

/* vsim_shared_lock is held across open, close and logging: not
 * cancelled meanwhile (sim.h). */
static __thread int shared_cancel;

static void shared_lock(void)
{
	int c = vsim_nocancel_begin();

	pthread_mutex_lock(&vsim_shared_lock);
	shared_cancel = c;
}

static void shared_unlock(void)
{
	int c = shared_cancel;

	pthread_mutex_unlock(&vsim_shared_lock);
	vsim_nocancel_end(c);
}

CUresult vsim_shared_create(int ordinal, const struct vsim_shared_desc *desc,
			    uint64_t *id)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct state_file *sh = d->sh;
	struct state_shared *o;
	struct state_slot *s;
	struct stat st;
	uint64_t moved, was, oid;
	CUresult rc = CUDA_SUCCESS;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (fstat(desc->fd, &st) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	shared_lock();
	o = make_entry(d);
	if (!o) {
		vsim_reclaim_dead(d);
		o = make_entry(d);
	}
	oid = o ? next_id(sh) : 0;
	if (!o || hold_add(d, oid) != 0) {
		if (o)
			atomic_store(&o->word, 0);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	fill(d, o, desc, &st);
	atomic_store(&o->word, oid);
	*id = oid;
	/* Then the bytes leave this process's slot (counted twice meanwhile,
	 * never missed). */
	s = &sh->slots[d->slot];
	was = atomic_load(&s->used);
	do
		moved = desc->size < was ? desc->size : was;
	while (!atomic_compare_exchange_weak(&s->used, &was, was - moved));
out:
	shared_unlock();
	return rc;
}

void vsim_shared_drop(int ordinal, uint64_t id)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct state_shared *o;

	if (!d->sh)
		return;
	shared_lock();
	if (!hold_remove(d, id))
		goto out;
	o = find(d->sh, id);
	if (!o)
		goto out;
	let_go(d, o);
	if (word_id(atomic_load(&o->word)) == id)
		vsim_reclaim_dead(d);	/* the others may be dead: find out now */
out:
	shared_unlock();
}

void vsim_shared_detach(struct dev_state *d)
{
	shared_lock();
	for (size_t i = 0; i < d->nholds; i++) {
		struct state_shared *o = find(d->sh, d->holds[i].id);

		if (o)
			let_go(d, o);
	}
	d->nholds = 0;
	shared_unlock();
}

/* Opens the exporter's memfd anew through /proc. The exporter keeps that fd
 * open while it holds the object, which the caller checked; the inode is
 * compared all the same (another pid namespace, a pid reused). */
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

/* The exporter of a legacy IPC object still holds it. */
static bool exporter_holds(struct state_file *sh, const struct state_shared *o)
{
	int32_t slot = atomic_load(&o->exporter_slot);

	return slot >= 0 && slot < STATE_SLOTS &&
	       atomic_load(&sh->slots[slot].claimed) == o->exporter_claim &&
	       (atomic_load(&o->holders[slot / 64]) & bit_of(slot));
}

CUresult vsim_shared_open(int ordinal, uint64_t id, int *fd,
			  struct vsim_shared_desc *out)
{
	struct dev_state *d = &vsim_states[ordinal];
	struct state_file *sh = d->sh;
	struct state_shared *o;
	bool held;
	CUresult rc;

	if (!sh)
		return CUDA_ERROR_NOT_INITIALIZED;
	shared_lock();
	vsim_reclaim_dead(d);	/* a dead exporter's objects open no more */
	o = find(sh, id);
	if (!o || o->kind != VSIM_SHARED_IPC || !exporter_holds(sh, o)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (atomic_load(&o->exporter_slot) == d->slot) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
		goto out;
	}
	rc = reopen(o, fd);
	if (rc != CUDA_SUCCESS)
		goto out;
	held = hold_find(d, id) != NULL;
	if (!take(d, o, id)) {
		close(*fd);
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if (hold_add(d, id) != 0) {
		close(*fd);
		if (!held)
			let_go(d, o);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	describe(o, ordinal, out);
out:
	shared_unlock();
	return rc;
}

/* Takes a hold of device d's VMM object whose memfd is (ino, fsdev); 1 when
 * there is one, 0 when not, -1 out of memory. */
static int import_on(struct dev_state *d, const struct stat *st, uint64_t *id,
		     int ordinal, struct vsim_shared_desc *out)
{
	struct state_file *sh = d->sh;
	uint32_t hi;

	vsim_reclaim_dead(d);
	hi = atomic_load(&sh->shared_hi);
	for (uint32_t i = 0; i < hi && i < STATE_SHARED; i++) {
		struct state_shared *o = &sh->shared[i];
		uint64_t oid = word_id(atomic_load(&o->word));
		bool held;

		if (!oid || o->kind != VSIM_SHARED_VMM ||
		    o->ino != (uint64_t)st->st_ino ||
		    o->fsdev != (uint64_t)st->st_dev)
			continue;
		held = hold_find(d, oid) != NULL;
		if (!take(d, o, oid))
			continue;
		if (hold_add(d, oid) != 0) {
			if (!held)
				let_go(d, o);
			return -1;
		}
		*id = oid;
		describe(o, ordinal, out);
		return 1;
	}
	return 0;
}

CUresult vsim_shared_import(int fd, int *ordinal, uint64_t *id,
			    struct vsim_shared_desc *out)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	struct stat st;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return CUDA_ERROR_INVALID_VALUE;
	shared_lock();
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		int found;

		if (!vsim_states[i].sh)
			continue;
		found = import_on(&vsim_states[i], &st, id, i, out);
		if (found != 0) {
			rc = found < 0 ? CUDA_ERROR_OUT_OF_MEMORY :
			     CUDA_SUCCESS;
			*ordinal = i;
			break;
		}
	}
	shared_unlock();
	return rc;
}
