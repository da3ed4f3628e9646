/* vmm.c - the virtual memory API's physical memory, charged for as long as
 * the driver keeps it.
 *
 * The driver's rule (cuMemRelease, cuMemUnmap): the memory of a handle made
 * by cuMemCreate (or a multicast object) is freed when the last reference to
 * it goes, and both the handle and every mapping of it are references;
 * cuMemRetainAllocationHandle adds one more handle reference. So a handle
 * released while still mapped keeps its memory (PyTorch's expandable
 * segments do exactly that), and the charge must stay with it.
 *
 * Each charged handle has an entry with a count of those references; each
 * mapping of a charged handle has an entry keyed by its address. The
 * charge is given back when the count reaches zero. A reference is counted
 * before the driver is asked to make it (and taken back if it refused), and
 * given up only after the driver dropped it, so the charge never falls
 * below what the driver holds.
 *
 * The tables are fixed open-addressing hashes under one mutex, held for a
 * few loads and stores, never across a driver call. Handles and mappings
 * the shim did not charge (host memory, handles made before the shim
 * attached, overcommit's own ranges) are not in them and pass untouched.
 */
#include "devices.h"
#include "vmm.h"

#include <pthread.h>
#include <string.h>

#define VMM_SLOTS	(1u << 16)	/* per table; a power of two */
#define TOMB		UINT64_MAX

struct vmm_handle {
	uint64_t key;		/* the handle; 0 empty, TOMB deleted */
	uint64_t bytes;
	int dev;
	int kind;		/* VGPU_USAGE_VMM or _MULTICAST */
	unsigned refs;		/* handle references + mappings */
};

struct vmm_map {
	uint64_t key;		/* the mapped address; 0 empty, TOMB deleted */
	uint64_t size;
	uint64_t handle;
};

static struct vmm_handle handles[VMM_SLOTS];
static struct vmm_map maps[VMM_SLOTS];
static unsigned nhandles, nmaps;	/* live entries, under vmm_lock */
static bool used;			/* anything ever entered */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (unsigned)key & (VMM_SLOTS - 1);
}

/* Deletes the entry at i of a table of n-byte entries whose first field
 * is the key: a tombstone, unless the next entry is empty, in which case
 * it and the tombstones before it become empty (probes stop there). */
static uint64_t *key_at(void *table, size_t n, unsigned i)
{
	return (uint64_t *)((char *)table + (size_t)(i & (VMM_SLOTS - 1)) * n);
}

static void bury(void *table, size_t n, unsigned i)
{
	if (*key_at(table, n, i + 1) != 0) {
		*key_at(table, n, i) = TOMB;
		return;
	}
	*key_at(table, n, i) = 0;
	for (i--; *key_at(table, n, i) == TOMB; i--)
		*key_at(table, n, i) = 0;
}

/* The index of key in a table of n-byte entries whose first field is the
 * key, or -1; vmm_lock held. */
static long find(void *table, size_t n, uint64_t key)
{
	unsigned i = slot_of(key);

	for (unsigned k = 0; k < VMM_SLOTS; k++, i++) {
		uint64_t at = *key_at(table, n, i);

		if (at == key)
			return (long)(i & (VMM_SLOTS - 1));
		if (at == 0)
			return -1;
	}
	return -1;
}

/* The index of a free entry for key (not in the table), taken, or -1 when
 * the table is full; *live counts the table's entries. */
static long add(void *table, size_t n, unsigned *live, uint64_t key)
{
	unsigned i = slot_of(key);

	if (*live >= VMM_SLOTS - VMM_SLOTS / 8)
		return -1;
	while (*key_at(table, n, i) != 0 && *key_at(table, n, i) != TOMB)
		i++;
	*key_at(table, n, i) = key;
	(*live)++;
	used = true;
	return (long)(i & (VMM_SLOTS - 1));
}

static struct vmm_handle *handle_find(uint64_t key)
{
	long i = find(handles, sizeof(handles[0]), key);

	return i < 0 ? NULL : &handles[i];
}

static struct vmm_handle *handle_new(uint64_t key)
{
	long i = add(handles, sizeof(handles[0]), &nhandles, key);

	return i < 0 ? NULL : &handles[i];
}

static struct vmm_map *map_find(uint64_t key)
{
	long i = find(maps, sizeof(maps[0]), key);

	return i < 0 ? NULL : &maps[i];
}

static struct vmm_map *map_new(uint64_t key)
{
	long i = add(maps, sizeof(maps[0]), &nmaps, key);

	return i < 0 ? NULL : &maps[i];
}

/* Drops one reference of h; vmm_lock held. Fills *gone with the charge to
 * give back when that was the last one. */
static bool unref(struct vmm_handle *h, struct vmm_handle *gone)
{
	if (--h->refs > 0)
		return false;
	*gone = *h;
	bury(handles, sizeof(*h), (unsigned)(h - handles));
	nhandles--;
	return true;
}

static void give_back(const struct vmm_handle *gone)
{
	vgpu__uncharge(vgpu__dev_peek(gone->dev), gone->kind, gone->bytes);
}

bool vgpu__vmm_add(uint64_t handle, struct vgpu_dev *dv, int kind,
		   uint64_t bytes)
{
	struct vmm_handle *h;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	if (!h)
		h = handle_new(handle);
	if (h) {
		h->bytes = bytes;
		h->dev = dv->ordinal;
		h->kind = kind;
		h->refs = 1;
	}
	pthread_mutex_unlock(&vmm_lock);
	if (!h)
		vgpu_log(VGPU_LOG_WARN, "the virtual-memory handle table is "
			 "full: %llu bytes stay charged after their release",
			 (unsigned long long)bytes);
	return h != NULL;
}

bool vgpu__vmm_ref(uint64_t handle)
{
	struct vmm_handle *h;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	if (h)
		h->refs++;
	pthread_mutex_unlock(&vmm_lock);
	return h != NULL;
}

void vgpu__vmm_unref(uint64_t handle)
{
	struct vmm_handle *h, gone;
	bool last = false;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	if (h)
		last = unref(h, &gone);
	pthread_mutex_unlock(&vmm_lock);
	if (last)
		give_back(&gone);
}

void vgpu__vmm_mapped(uint64_t va, uint64_t size, uint64_t handle)
{
	struct vmm_map *m;

	pthread_mutex_lock(&vmm_lock);
	m = map_find(va);
	if (!m)
		m = map_new(va);
	if (m) {
		m->size = size;
		m->handle = handle;
	}
	pthread_mutex_unlock(&vmm_lock);
	/* Not remembered: the mapping's reference is never given up, so the
	 * charge stays until the process ends (over, never under). */
	if (!m)
		vgpu_log(VGPU_LOG_WARN, "the virtual-memory mapping table is "
			 "full: a mapping of 0x%llx stays charged after it is "
			 "unmapped", (unsigned long long)va);
}

/* Removes the mapping at va and drops its handle's reference; vmm_lock
 * held. Returns its size (0: no mapping the shim counted starts at va). */
static uint64_t unmap_one(uint64_t va, struct vmm_handle *gone, bool *last)
{
	struct vmm_map *m = map_find(va);
	struct vmm_handle *h;
	uint64_t size;

	*last = false;
	if (!m)
		return 0;
	size = m->size;
	h = handle_find(m->handle);
	bury(maps, sizeof(*m), (unsigned)(m - maps));
	nmaps--;
	if (h)
		*last = unref(h, gone);
	return size;
}

/* Mappings inside [va, va + size) that do not start where the previous
 * one ended (a hole in the range): found by looking at every entry. */
static void unmap_scan(uint64_t va, uint64_t size)
{
	struct vmm_handle gone;
	bool last;

	for (unsigned i = 0; i < VMM_SLOTS; i++) {
		uint64_t k = maps[i].key;

		if (k == 0 || k == TOMB || k < va || k - va >= size)
			continue;
		unmap_one(k, &gone, &last);
		if (last) {
			pthread_mutex_unlock(&vmm_lock);
			give_back(&gone);
			pthread_mutex_lock(&vmm_lock);
		}
	}
}

void vgpu__vmm_unmapped(uint64_t va, uint64_t size)
{
	struct vmm_handle gone;
	uint64_t at = va, n;
	bool last;

	pthread_mutex_lock(&vmm_lock);
	if (nmaps == 0)
		goto out;
	/* Mappings are usually contiguous: walk them by address. */
	while (at - va < size) {
		n = unmap_one(at, &gone, &last);
		if (last) {
			pthread_mutex_unlock(&vmm_lock);
			give_back(&gone);
			pthread_mutex_lock(&vmm_lock);
		}
		if (n == 0)
			break;
		at += n;
	}
	if (at - va < size)
		unmap_scan(at, size - (at - va));
out:
	pthread_mutex_unlock(&vmm_lock);
}

uint64_t vgpu__vmm_count(void)
{
	unsigned n;

	pthread_mutex_lock(&vmm_lock);
	n = nhandles;
	pthread_mutex_unlock(&vmm_lock);
	return n;
}

void vgpu__vmm_fork_child(void)
{
	pthread_mutex_init(&vmm_lock, NULL);
	/* The parent's handles are not the child's to release. */
	if (used) {
		memset(handles, 0, sizeof(handles));
		memset(maps, 0, sizeof(maps));
	}
	used = false;
	nhandles = 0;
	nmaps = 0;
}
