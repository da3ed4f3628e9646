/* track.c - see track.h.
 *
 * Each table is 2^bits entries of {key, value}. A key is claimed by a
 * compare-and-swap from EMPTY or TOMB; a removal swaps it to TOMB. Lookups
 * stop at EMPTY. Keys are unique while live (the driver never hands out a
 * pointer or handle twice), so insert may take the first TOMB it meets.
 * A free removes its key before calling the driver and puts it back if the
 * driver refused, so an address the driver reuses at once never meets a
 * stale entry.
 */
#include "track.h"
#include "log.h"
#include "options.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define EMPTY	UINT64_C(0)
#define TOMB	UINT64_C(1)
#define MAX_PROBE 4096

struct entry {
	uint64_t key;
	uint64_t val;
};

/* No count of live entries is kept: an atomic add in every insert and
 * remove cost more than the rest of the table's work (a count is a scan,
 * for tests). */
struct table {
	struct entry *e;
	unsigned bits;
};

static struct table tables[VGPU_TRACK_TABLES] = {
	[VGPU_TRACK_PTR] = { NULL, 20 },	/* 16 MiB of address space */
	[VGPU_TRACK_HANDLE] = { NULL, 16 },
};
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool ready;

static void map_tables(void)
{
	for (int i = 0; i < VGPU_TRACK_TABLES; i++) {
		size_t len = sizeof(struct entry) << tables[i].bits;
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (p == MAP_FAILED) {
			vgpu_log(VGPU_LOG_ERROR, "cannot map the allocation "
				 "table (%zu bytes)", len);
			return;
		}
		tables[i].e = p;
	}
	ready = true;
}

bool vgpu__track_init(void)
{
	pthread_once(&once, map_tables);
	return ready;
}

static inline uint64_t pack(const struct vgpu_tracked *t)
{
	return t->bytes | (uint64_t)(t->kind & 31) << 42 |
	       (uint64_t)(t->dev & 63) << 47 | (uint64_t)(t->aux & 2047) << 53;
}

static inline void unpack(uint64_t v, struct vgpu_tracked *t)
{
	t->bytes = v & VGPU_TRACK_MAX_BYTES;
	t->kind = (unsigned)(v >> 42) & 31;
	t->dev = (unsigned)(v >> 47) & 63;
	t->aux = (unsigned)(v >> 53) & 2047;
}

/* Keeps neighbours together: device pointers handed out one after another
 * land in neighbouring entries (a cache line holds four), where a
 * multiplicative hash would send each to a cold line of the table. Pointers
 * inside one 4 KiB page share a start and probe on linearly. */
static inline size_t slot_of(const struct table *tb, uint64_t key)
{
	return (size_t)((key >> 12) ^ (key >> 36)) &
	       (((size_t)1 << tb->bits) - 1);
}

/* Puts key in the first free entry of its chain (EMPTY or TOMB). With
 * stale, the chain is walked to its end first, and a live entry for key
 * met on the way is taken out into *stale (true returned in *had): one
 * walk for both. Taken by another thread between the walk and the swap,
 * the entry is looked for again. */
static bool put(struct table *tb, uint64_t key, uint64_t v,
		struct vgpu_tracked *stale, bool *had)
{
	size_t mask = ((size_t)1 << tb->bits) - 1;

	for (;;) {
		size_t i = slot_of(tb, key), at = SIZE_MAX;
		uint64_t at_k = EMPTY;

		for (unsigned n = 0; n < MAX_PROBE; n++, i = (i + 1) & mask) {
			struct entry *e = &tb->e[i];
			uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);

			if (stale && k == key) {
				uint64_t old = __atomic_load_n(&e->val,
							       __ATOMIC_ACQUIRE);

				if (__atomic_compare_exchange_n(&e->key, &k,
						TOMB, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
					unpack(old, stale);
					*had = true;
					k = TOMB;
				}
			}
			if ((k == EMPTY || k == TOMB) && at == SIZE_MAX) {
				at = i;
				at_k = k;
			}
			if (k == EMPTY || (!stale && at != SIZE_MAX))
				break;
		}
		if (at == SIZE_MAX)
			return false;
		if (__atomic_compare_exchange_n(&tb->e[at].key, &at_k, key,
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			__atomic_store_n(&tb->e[at].val, v, __ATOMIC_RELEASE);
			return true;
		}
	}
}

static bool fits(uint64_t key, const struct vgpu_tracked *t)
{
	return ready && key > TOMB && t->bytes <= VGPU_TRACK_MAX_BYTES &&
	       t->kind <= 31 && t->dev <= 63 && t->aux <= 2047;
}

bool vgpu__track_insert(int table, uint64_t key, const struct vgpu_tracked *t)
{
	return fits(key, t) && put(&tables[table], key, pack(t), NULL, NULL);
}

bool vgpu__track_remove(int table, uint64_t key, struct vgpu_tracked *t)
{
	struct table *tb = &tables[table];
	size_t mask = ((size_t)1 << tb->bits) - 1;
	size_t i = slot_of(tb, key);

	if (!ready || key <= TOMB)
		return false;
	for (unsigned n = 0; n < MAX_PROBE; n++, i = (i + 1) & mask) {
		struct entry *e = &tb->e[i];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);

		if (k == EMPTY)
			return false;
		if (k != key)
			continue;
		uint64_t v = __atomic_load_n(&e->val, __ATOMIC_ACQUIRE);
		if (!__atomic_compare_exchange_n(&e->key, &k, TOMB, false,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			return false;	/* another thread freed it first */
		unpack(v, t);
		return true;
	}
	return false;
}

void vgpu__track_sweep(int table, unsigned dev,
		       bool (*gone)(uint64_t key, const struct vgpu_tracked *t),
		       void (*drop)(const struct vgpu_tracked *t))
{
	struct table *tb = &tables[table];
	size_t n = (size_t)1 << tb->bits;

	if (!ready)
		return;
	for (size_t i = 0; i < n; i++) {
		struct entry *e = &tb->e[i];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		struct vgpu_tracked t;

		if (k <= TOMB)
			continue;
		unpack(__atomic_load_n(&e->val, __ATOMIC_ACQUIRE), &t);
		if (t.dev != dev || !gone(k, &t))
			continue;
		if (__atomic_compare_exchange_n(&e->key, &k, TOMB, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			drop(&t);
	}
}

void vgpu__track_forget(void)
{
	for (int i = 0; i < VGPU_TRACK_TABLES; i++) {
		if (!tables[i].e)
			continue;
		size_t len = sizeof(struct entry) << tables[i].bits;
		/* Gives the pages back: the child starts from zeroes. */
		madvise(tables[i].e, len, MADV_DONTNEED);
	}
}

uint64_t vgpu__track_count(int table)
{
	const struct table *tb = &tables[table];
	size_t n = (size_t)1 << tb->bits;
	uint64_t live = 0;

	for (size_t i = 0; ready && i < n; i++)
		live += __atomic_load_n(&tb->e[i].key, __ATOMIC_ACQUIRE) > TOMB;
	return live;
}

void vgpu__track_charged(int table, uint64_t key, int kind, int dev,
			 uint64_t bytes, unsigned aux)
{
	struct vgpu_tracked t = { bytes, (unsigned)kind, (unsigned)dev, aux };

	vgpu__track_keep(table, key, &t);
}

bool vgpu__track_charged_fresh(int table, uint64_t key, int kind, int dev,
			       uint64_t bytes, unsigned aux,
			       struct vgpu_tracked *stale)
{
	struct vgpu_tracked t = { bytes, (unsigned)kind, (unsigned)dev, aux };
	bool had = false;

	if (!fits(key, &t) ||
	    !put(&tables[table], key, pack(&t), stale, &had)) {
		/* Not kept (warned), or no table: a stale entry stays too,
		 * over-charging, as an entry that does not fit does. */
		vgpu__track_keep(table, key, &t);
		return false;
	}
	return had;
}

void vgpu__track_keep(int table, uint64_t key, const struct vgpu_tracked *t)
{
	/* Never forgotten silently: the charge stays until exit. */
	if (!vgpu__track_insert(table, key, t))
		vgpu_log(VGPU_LOG_WARN, "the %s table is full: %llu bytes stay "
			 "charged after they are given back",
			 table == VGPU_TRACK_PTR ? "allocation" : "handle",
			 (unsigned long long)t->bytes);
}
