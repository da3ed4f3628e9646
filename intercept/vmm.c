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
 * Threads race between their driver calls and these tables: the driver
 * may hand out a handle value again, or map an address again, before the
 * thread that released or unmapped the old one has told the table. So
 * every handle entry has a generation, and a reference is given up only to
 * the generation it was taken from; a handle value the driver hands out
 * while the table still has it is stale (the driver freed it), and its
 * charge is given back then. An unmap marks its mappings with a ticket
 * before the driver is asked, and removes only those marked entries after;
 * a mapping made at an address whose entry is still there (marked or not)
 * finds it stale too.
 *
 * The tables are fixed open-addressing hashes under one mutex, held for a
 * few loads and stores, never across a driver call. Nothing here knows the
 * vendor: both front ends link it, and a charge is given back through the
 * front end's vgpu__share_uncharge (share.h). Handles and mappings
 * the shim did not charge (host memory, handles made before the shim
 * attached, overcommit's own ranges) are not in them and pass untouched.
 */
#include "vmm.h"
#include "ledger.h"
#include "share.h"
#include "log.h"
#include "options.h"

#include <pthread.h>
#include <string.h>

#define VMM_SLOTS	(1u << 16)	/* per table; a power of two */
#define TOMB		UINT64_MAX

struct vmm_handle {
	uint64_t key;		/* the handle; 0 empty, TOMB deleted */
	uint64_t bytes;		/* charged on each device of devs */
	uint64_t devs;		/* bit d: charged on device d */
	uint64_t gen;		/* this entry's generation, never 0 */
	int dev;
	int kind;		/* VGPU_USAGE_VMM or _MULTICAST */
	unsigned refs;		/* handle references + mappings */
	unsigned share;		/* shared with other processes (share.c) */
};

struct vmm_map {
	uint64_t key;		/* the mapped address; 0 empty, TOMB deleted */
	uint64_t size;
	uint64_t handle;
	uint64_t hgen;		/* the handle entry's generation */
	uint64_t unmapping;	/* the ticket of an unmap in flight, or 0 */
};

/* A multicast object's binding of a memory handle (a reference to it),
 * until unbound or the object goes. Few: searched by looking at all. */
struct vmm_bind {
	uint64_t mc;		/* the multicast handle; 0: a free entry */
	uint64_t mc_gen;
	int dev;
	uint64_t offset, size;	/* in the multicast object */
	uint64_t handle, hgen;	/* the memory bound */
};

#define VMM_BINDS 4096

static struct vmm_handle handles[VMM_SLOTS];
static struct vmm_bind binds[VMM_BINDS];
static struct vmm_map maps[VMM_SLOTS];
static unsigned nhandles, nmaps;	/* live entries, under vmm_lock */
static bool used;			/* anything ever entered */
static uint64_t next_gen;		/* generations and tickets */
static uint64_t maps_lo = UINT64_MAX, maps_hi;	/* bounds of the mappings */
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

/* A handle's last reference went (vmm_lock held: the ledger's lock is
 * taken inside it, never the other way round): memory other processes may
 * still hold is left to the ledger's share record, which decides who pays
 * from now on (share.c); else each device's charge is given back. */
static void give_back(const struct vmm_handle *gone)
{
	if (gone->share) {
		vgpu__share_gone(gone->share);
		return;
	}
	for (int d = 0; d < 64; d++)
		if (gone->devs & (UINT64_C(1) << d))
			vgpu__share_uncharge(d, gone->kind, gone->bytes);
}

static void unref_locked(uint64_t key, uint64_t gen);

/* Multicast object (key, gen) is gone: the driver dropped its bindings,
 * and with them their references. vmm_lock held. */
static void unbind_all(uint64_t key, uint64_t gen)
{
	for (int i = 0; i < VMM_BINDS; i++) {
		if (binds[i].mc != key || binds[i].mc_gen != gen)
			continue;
		binds[i].mc = 0;
		unref_locked(binds[i].handle, binds[i].hgen);
	}
}

/* Drops one reference of (key, gen); the last gives the charge back.
 * vmm_lock held (the ledger's lock is taken inside it: nothing takes them
 * the other way round). */
static void unref_locked(uint64_t key, uint64_t gen)
{
	struct vmm_handle *h = handle_find(key);

	struct vmm_handle gone;

	if (!h || h->gen != gen || --h->refs > 0)
		return;
	gone = *h;
	bury(handles, sizeof(*h), (unsigned)(h - handles));
	nhandles--;
	give_back(&gone);
	if (gone.kind == VGPU_USAGE_MULTICAST)
		unbind_all(gone.key, gone.gen);
}

uint64_t vgpu__vmm_add(uint64_t handle, int dev, int kind, uint64_t bytes)
{
	struct vmm_handle *h;
	uint64_t gen = 0;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	if (h) {
		/* The driver handed the value out again: the old object is
		 * gone, whatever references the table still counts. */
		give_back(h);
		if (h->kind == VGPU_USAGE_MULTICAST)
			unbind_all(h->key, h->gen);
	} else {
		h = handle_new(handle);
	}
	if (h) {
		h->bytes = bytes;
		h->dev = dev >= 0 && dev < 64 ? dev : -1;
		h->devs = h->dev >= 0 ? UINT64_C(1) << dev : 0;
		h->kind = kind;
		h->refs = 1;
		h->share = 0;
		h->gen = gen = ++next_gen;
	}
	pthread_mutex_unlock(&vmm_lock);
	if (!h)
		vgpu_log(VGPU_LOG_WARN, "the virtual-memory handle table is "
			 "full: %llu bytes stay charged after their release",
			 (unsigned long long)bytes);
	return gen;
}

bool vgpu__vmm_add_device(uint64_t handle, uint64_t gen, int dev,
			  uint64_t *bytes)
{
	struct vmm_handle *h;
	bool ok;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	ok = h && h->gen == gen && dev >= 0 && dev < 64 &&
	     !(h->devs & (UINT64_C(1) << dev));
	if (ok)
		h->devs |= UINT64_C(1) << dev;
	if (h && h->gen == gen)
		*bytes = h->bytes;
	pthread_mutex_unlock(&vmm_lock);
	return ok;
}

bool vgpu__vmm_share(uint64_t handle, uint64_t gen, unsigned share,
		     int *dev, uint64_t *bytes)
{
	struct vmm_handle *h;
	bool ok;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	ok = h && h->gen == gen && !h->share && h->kind == VGPU_USAGE_VMM;
	if (ok && share)
		h->share = share;
	if (ok) {
		*dev = h->dev;
		*bytes = h->bytes;
	}
	pthread_mutex_unlock(&vmm_lock);
	return ok;
}

uint64_t vgpu__vmm_bytes(uint64_t handle, uint64_t *gen)
{
	struct vmm_handle *h;
	uint64_t bytes = 0;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	*gen = h ? h->gen : 0;
	if (h)
		bytes = h->bytes;
	pthread_mutex_unlock(&vmm_lock);
	return bytes;
}

/* The live mapping that contains va, or NULL; vmm_lock held. By its
 * start first, else by looking at every entry (an address inside). */
static struct vmm_map *map_containing(uint64_t va)
{
	struct vmm_map *m = map_find(va);

	if (m || va < maps_lo || va >= maps_hi)
		return m;
	for (unsigned i = 0; i < VMM_SLOTS && nmaps; i++) {
		uint64_t k = maps[i].key;

		if (k != 0 && k != TOMB && k <= va && va - k < maps[i].size)
			return &maps[i];
	}
	return NULL;
}

uint64_t vgpu__vmm_ref_mapped(uint64_t va, uint64_t *handle)
{
	struct vmm_map *m;
	struct vmm_handle *h;
	uint64_t gen = 0;

	pthread_mutex_lock(&vmm_lock);
	m = map_containing(va);
	h = m && !m->unmapping ? handle_find(m->handle) : NULL;
	if (h && h->gen == m->hgen) {
		h->refs++;
		gen = h->gen;
		*handle = m->handle;
	}
	pthread_mutex_unlock(&vmm_lock);
	return gen;
}

void vgpu__vmm_bound(uint64_t mc, uint64_t offset, uint64_t size,
		     uint64_t handle, uint64_t gen)
{
	struct vmm_handle *m, *h;
	int i;

	if (!gen)
		return;
	pthread_mutex_lock(&vmm_lock);
	m = handle_find(mc);
	h = handle_find(handle);
	for (i = 0; m && h && i < VMM_BINDS && binds[i].mc; i++)
		;
	if (m && h && i < VMM_BINDS) {
		/* Bound for the device the memory is on. */
		binds[i] = (struct vmm_bind){ mc, m->gen, h->dev, offset,
					      size, handle, gen };
		used = true;
	}
	pthread_mutex_unlock(&vmm_lock);
	/* Not remembered (an object the shim does not know, or the table
	 * full): the reference stays until the process ends (over, never
	 * under). */
}

void vgpu__vmm_unbound(uint64_t mc, int dev, uint64_t offset, uint64_t size)
{
	pthread_mutex_lock(&vmm_lock);
	for (int i = 0; i < VMM_BINDS; i++) {
		struct vmm_bind *b = &binds[i];

		if (b->mc != mc || b->dev != dev || b->offset < offset ||
		    b->offset - offset >= size)
			continue;
		b->mc = 0;
		unref_locked(b->handle, b->hgen);
	}
	pthread_mutex_unlock(&vmm_lock);
}

uint64_t vgpu__vmm_gen(uint64_t handle)
{
	struct vmm_handle *h;
	uint64_t gen;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	gen = h ? h->gen : 0;
	pthread_mutex_unlock(&vmm_lock);
	return gen;
}

uint64_t vgpu__vmm_ref(uint64_t handle)
{
	struct vmm_handle *h;
	uint64_t gen = 0;

	pthread_mutex_lock(&vmm_lock);
	h = handle_find(handle);
	if (h) {
		h->refs++;
		gen = h->gen;
	}
	pthread_mutex_unlock(&vmm_lock);
	return gen;
}

void vgpu__vmm_unref(uint64_t handle, uint64_t gen)
{
	if (!gen)
		return;
	pthread_mutex_lock(&vmm_lock);
	unref_locked(handle, gen);
	pthread_mutex_unlock(&vmm_lock);
}

/* Removes mapping m and gives up its reference; vmm_lock held. */
static void unmap_locked(struct vmm_map *m)
{
	uint64_t handle = m->handle, gen = m->hgen;

	bury(maps, sizeof(*m), (unsigned)(m - maps));
	if (--nmaps == 0) {
		maps_lo = UINT64_MAX;
		maps_hi = 0;
	}
	unref_locked(handle, gen);
}

void vgpu__vmm_mapped(uint64_t va, uint64_t size, uint64_t handle,
		      uint64_t gen)
{
	struct vmm_map *m;

	if (!gen)
		return;
	pthread_mutex_lock(&vmm_lock);
	m = map_find(va);
	if (m)		/* the driver mapped over it: it was unmapped */
		unmap_locked(m);
	m = map_new(va);
	if (m) {
		if (va < maps_lo)
			maps_lo = va;
		if (va + size > maps_hi)
			maps_hi = va + size;
		m->size = size;
		m->handle = handle;
		m->hgen = gen;
		m->unmapping = 0;
	}
	pthread_mutex_unlock(&vmm_lock);
	/* Not remembered: the mapping's reference is never given up, so the
	 * charge stays until the process ends (over, never under). */
	if (!m)
		vgpu_log(VGPU_LOG_WARN, "the virtual-memory mapping table is "
			 "full: a mapping of 0x%llx stays charged after it is "
			 "unmapped", (unsigned long long)va);
}

/* What an unmap does to each of its mappings. */
enum step { MARK, REMOVE, UNMARK };

static void step_one(struct vmm_map *m, enum step step, uint64_t ticket)
{
	if (step == MARK && m->unmapping == 0)
		m->unmapping = ticket;
	else if (step == REMOVE && m->unmapping && m->unmapping <= ticket)
		unmap_locked(m);	/* marked before this unmap began */
	else if (step == UNMARK && m->unmapping == ticket)
		m->unmapping = 0;
}

/* Applies step to every mapping that starts in [va, va + size): walked by
 * address (mappings are usually contiguous), then, past a hole, found by
 * looking at every entry. vmm_lock held. */
static void each_in_range(uint64_t va, uint64_t size, enum step step,
			  uint64_t ticket)
{
	uint64_t at = va;
	struct vmm_map *m;

	while (at - va < size && (m = map_find(at)) != NULL) {
		uint64_t n = m->size;

		step_one(m, step, ticket);
		if (n == 0)
			break;
		at += n;
	}
	/* Past a hole: no mapping can start there outside the bounds. */
	if (at - va >= size || at >= maps_hi ||
	    (size <= UINT64_MAX - va && va + size <= maps_lo))
		return;
	for (unsigned i = 0; i < VMM_SLOTS; i++) {
		uint64_t k = maps[i].key;

		if (k != 0 && k != TOMB && k >= at && k - va < size)
			step_one(&maps[i], step, ticket);
	}
}

uint64_t vgpu__vmm_unmap_begin(uint64_t va, uint64_t size)
{
	uint64_t ticket = 0;

	pthread_mutex_lock(&vmm_lock);
	if (nmaps) {
		ticket = ++next_gen;
		each_in_range(va, size, MARK, ticket);
	}
	pthread_mutex_unlock(&vmm_lock);
	return ticket;
}

void vgpu__vmm_unmap_end(uint64_t va, uint64_t size, uint64_t ticket,
			 bool unmapped)
{
	if (!ticket)
		return;
	pthread_mutex_lock(&vmm_lock);
	each_in_range(va, size, unmapped ? REMOVE : UNMARK, ticket);
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
		memset(binds, 0, sizeof(binds));
	}
	used = false;
	nhandles = 0;
	nmaps = 0;
	maps_lo = UINT64_MAX;
	maps_hi = 0;
}
