/* share.c - memory shared between processes, charged once.
 *
 * IPC handles (cuIpcGetMemHandle / cuIpcOpenMemHandle, hipIpc*) and VMM
 * handles exported as POSIX file descriptors (cuMemExportToShareableHandle
 * / cuMemImportFromShareableHandle, and HIP's) let other processes hold
 * memory one process allocated; the device keeps it while any of them
 * does. The ledger keeps one record per such memory
 * (vgpu/ledger_shares.c): the exporter pays, importers hold it for free,
 * and when the payer lets go or dies while others hold it, one of them
 * pays from then on.
 *
 * The memory's identity across processes, the record's key, is a hash of
 * the 64-byte IPC handle (the same bytes in every process), or of the
 * exported file's device and inode (the same open file in every process
 * it is passed to). A descriptor that is not a regular file (the shim
 * cannot tell one memory from another through it) is not recorded: its
 * importer is not charged, with a warning (docs/memory.md).
 *
 * Each shared object this process holds has an entry here, numbered in
 * its tracked entry (the pointer table's aux, the VMM handle's share), so
 * that whatever ends the object here (a free, a close, a release, its
 * context destroyed) lets go of the record through vgpu__share_gone. All
 * of it is rare: one mutex, held for a few stores, never across a driver
 * or ledger call.
 *
 * Nothing here knows the vendor: the hooks are each front end's
 * (intercept/ipc.c for CUDA, intercept/hip/ipc.c for HIP), and a device is
 * reached through the front end's vgpu__share_slot, _charge and _uncharge
 * (share.h).
 */
#include "share.h"
#include "ledger.h"
#include "log.h"
#include "options.h"
#include "track.h"
#include "vmm.h"

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SHARES 1024		/* fits the pointer table's aux (< 2048) */

struct share {
	bool used;
	int dev;
	int rec;		/* the ledger's record, -1: none */
	int kind;
	uint64_t key[2];
	uint64_t own;		/* bytes charged to this process as its own */
	uint64_t ptr;		/* an IPC pointer this process opened, or 0 */
	unsigned opens;		/* its IPC opens not closed */
	unsigned handles;	/* VMM handles of it here (imported again) */
};

static struct share tab[SHARES];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

/* Lets go of records the ledger could not take in time (a process stopped
 * holding its shares lock, or a tenant's lock): tried again at every
 * shared-memory call; the process's leave lets go of all of them anyway. */
#define RETRIES 64

static struct retry {
	int dev, rec;
	uint64_t key[2];
} retries[RETRIES];
static unsigned nretries;	/* under tab_lock */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void timed_out(const char *what)
{
	static uint64_t last;
	uint64_t now = mono_ns();

	if (now - __atomic_load_n(&last, __ATOMIC_RELAXED) < 10000000000ull)
		return;
	__atomic_store_n(&last, now, __ATOMIC_RELAXED);
	vgpu_log(VGPU_LOG_WARN, "%s: the ledger's record of memory shared "
		 "between processes could not be changed within a second (a "
		 "process of the GPU, stopped or stuck, holds its shares lock "
		 "or a tenant's lock): charged to this process meanwhile, "
		 "settled when the lock is free (at the latest when this "
		 "process leaves)", what);
}

static void drop_or_retry(int dev, struct vgpu_slot *slot, int rec,
			  const uint64_t key[2])
{
	if (vgpu_ledger_share_drop(slot, rec, key) != VGPU_LEDGER_ETIMEDOUT)
		return;
	timed_out("letting go of shared memory");
	pthread_mutex_lock(&tab_lock);
	if (nretries < RETRIES)
		retries[nretries++] = (struct retry){ dev, rec,
						      { key[0], key[1] } };
	pthread_mutex_unlock(&tab_lock);
}

static void retry_drops(void)
{
	struct retry r[RETRIES];
	unsigned n;

	if (!__atomic_load_n(&nretries, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&tab_lock);
	n = nretries;
	memcpy(r, retries, n * sizeof(r[0]));
	nretries = 0;
	pthread_mutex_unlock(&tab_lock);
	for (unsigned i = 0; i < n; i++) {
		struct vgpu_slot *slot = vgpu__share_slot(r[i].dev);

		if (slot)
			drop_or_retry(r[i].dev, slot, r[i].rec, r[i].key);
	}
}

/* ---- identities ------------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Two independent 64-bit hashes of n bytes (n a multiple of 8), tagged by
 * what kind of identity they are. */
static void hash_key(const void *p, size_t n, uint64_t tag, uint64_t key[2])
{
	uint64_t a = mix(tag), b = mix(tag + 0x9e3779b97f4a7c15ull), w;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, (const char *)p + i, 8);
		a = mix(a ^ w);
		b = mix(b + w * 0xff51afd7ed558ccdull);
	}
	key[0] = a;
	key[1] = b | 1;		/* never 0,0 */
}


/* The identity and size of the memory behind an exported descriptor;
 * false when it is not a regular file (nothing tells memories apart). */
static bool fd_key(int fd, uint64_t key[2], uint64_t *size)
{
	struct stat st;
	uint64_t id[2];

	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	id[0] = (uint64_t)st.st_dev;
	id[1] = (uint64_t)st.st_ino;
	hash_key(id, sizeof(id), 2, key);
	*size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
	return true;
}

/* ---- the table --------------------------------------------------------------- */

/* A new entry's number (index + 1), or 0 when the table is full. */
static unsigned entry_new(const struct share *s)
{
	unsigned i;

	pthread_mutex_lock(&tab_lock);
	for (i = 0; i < SHARES && tab[i].used; i++)
		;
	if (i < SHARES) {
		tab[i] = *s;
		tab[i].used = true;
	}
	pthread_mutex_unlock(&tab_lock);
	return i < SHARES ? i + 1 : 0;
}

/* Entry n (if still the one for key) now has record rec and pays own. */
static void entry_set(unsigned n, const uint64_t key[2], int rec, uint64_t own)
{
	pthread_mutex_lock(&tab_lock);
	if (tab[n - 1].used && tab[n - 1].key[0] == key[0] &&
	    tab[n - 1].key[1] == key[1]) {
		tab[n - 1].rec = rec;
		tab[n - 1].own = own;
	}
	pthread_mutex_unlock(&tab_lock);
}

static void entry_free(unsigned n)
{
	pthread_mutex_lock(&tab_lock);
	memset(&tab[n - 1], 0, sizeof(tab[0]));
	pthread_mutex_unlock(&tab_lock);
}

void vgpu__share_gone(unsigned share)
{
	struct vgpu_slot *slot;
	struct share s;

	if (share == 0 || share > SHARES)
		return;
	pthread_mutex_lock(&tab_lock);
	if (tab[share - 1].handles > 1) {	/* another handle of it lives */
		tab[share - 1].handles--;
		pthread_mutex_unlock(&tab_lock);
		return;
	}
	s = tab[share - 1];
	memset(&tab[share - 1], 0, sizeof(tab[0]));
	pthread_mutex_unlock(&tab_lock);
	slot = s.used ? vgpu__share_slot(s.dev) : NULL;
	if (!slot)
		return;
	if (s.rec >= 0)
		drop_or_retry(s.dev, slot, s.rec, s.key);
	if (s.own)
		vgpu__share_uncharge(s.dev, s.kind, s.own);
}

void vgpu__share_fork_child(void)
{
	pthread_mutex_init(&tab_lock, NULL);
	memset(tab, 0, sizeof(tab));
	nretries = 0;
}

/* ---- the ledger's side ------------------------------------------------------- */

/* bytes of kind are charged to this process for memory it shares: record
 * them under key (*rec), or keep them as its own (*own) when the ledger
 * has no room; a record another process pays for already takes them
 * back. */
static void export_charged(int dev, struct vgpu_slot *slot,
			   const uint64_t key[2], int kind, uint64_t bytes,
			   int *rec, uint64_t *own)
{
	bool elsewhere = false;
	int rc = vgpu_ledger_share_export(slot, key, kind, bytes, &elsewhere);

	*rec = rc >= 0 ? rc : -1;
	*own = rc >= 0 ? 0 : bytes;
	if (rc >= 0 && elsewhere)
		vgpu__share_uncharge(dev, kind, bytes);
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		timed_out("recording shared memory");
}

/* This process now holds memory another process made: held for free when
 * the ledger has it, else charged (and recorded, so that later importers
 * are not). 0, or the front end's error when that charge is refused. */
static int import_charge(int dev, struct vgpu_slot *slot,
			 const uint64_t key[2], int kind, uint64_t bytes,
			 int *rec, uint64_t *own)
{
	int rc = vgpu_ledger_share_hold(slot, key), r;

	*rec = rc >= 0 ? rc : -1;
	*own = 0;
	if (rc >= 0)
		return 0;
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		timed_out("importing shared memory");
	if ((r = vgpu__share_charge(dev, kind, bytes)) != 0)
		return r;
	if (rc == VGPU_LEDGER_ENOENT)
		export_charged(dev, slot, key, kind, bytes, rec, own);
	else
		*own = bytes;	/* no room for a holder: charged as its own */
	return 0;
}

static void import_refused(const char *what, uint64_t bytes)
{
	vgpu_log(VGPU_LOG_ERROR, "%s: the imported memory (%llu bytes) could "
		 "not be held as another process's (not recorded in this "
		 "GPU's ledger, or its record could not be reached in time), "
		 "and charging it to this process was refused (it does not "
		 "fit the tenant's slice, VGPU_MEMORY_LIMIT, or the tenant's "
		 "lock timed out, which is logged before this)", what,
		 (unsigned long long)bytes);
}

/* ---- what the hooks call ------------------------------------------------------ */

/* An entry of IPC pointer p this process opened, counting one more open
 * if found: its number, or 0. */
static unsigned opened(uint64_t p)
{
	unsigned n = 0;

	pthread_mutex_lock(&tab_lock);
	for (unsigned i = 0; i < SHARES; i++)
		if (tab[i].used && tab[i].ptr == p && tab[i].opens) {
			tab[i].opens++;
			n = i + 1;
			break;
		}
	pthread_mutex_unlock(&tab_lock);
	return n;
}

/* One close of IPC pointer p: the entry it closed for the last time (its
 * number: the caller lets go of it), SHARES + 1 while opens remain, or 0
 * when p has none. An entry closed for the last time is no longer found
 * by opened(): an open racing this close gets an entry of its own. */
static unsigned closed(uint64_t p)
{
	unsigned n = 0;

	pthread_mutex_lock(&tab_lock);
	for (unsigned i = 0; i < SHARES; i++)
		if (tab[i].used && tab[i].ptr == p && tab[i].opens) {
			n = --tab[i].opens ? SHARES + 1 : i + 1;
			break;
		}
	pthread_mutex_unlock(&tab_lock);
	return n;
}

static void table_full(void)
{
	static bool warned;

	if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		vgpu_log(VGPU_LOG_WARN, "the table of memory shared with other "
			 "processes is full (%d entries): what this process "
			 "imports from now on is charged to it as its own", SHARES);
}

void vgpu__share_ipc_exported(const void *handle, size_t len,
			      struct vgpu_tracked *t)
{
	struct vgpu_slot *slot;
	uint64_t key[2], own;
	unsigned n;
	int rec;

	retry_drops();
	/* Recorded once per allocation (asking again gives the same handle);
	 * only plain buffers the shim charged. */
	if (t->kind != VGPU_USAGE_BUFFER || t->aux ||
	    !(slot = vgpu__share_slot((int)t->dev)))
		return;
	hash_key(handle, len, 1, key);
	n = entry_new(&(struct share){ .dev = (int)t->dev, .rec = -1,
				       .kind = VGPU_USAGE_BUFFER,
				       .key = { key[0], key[1] } });
	if (!n)
		return;
	export_charged((int)t->dev, slot, key, VGPU_USAGE_BUFFER, t->bytes,
		       &rec, &own);
	entry_set(n, key, rec, own);
	t->aux = n;
	t->bytes = own;
}

int vgpu__share_ipc_opened(int dev, uint64_t p, const void *handle,
			   size_t len, uint64_t bytes, const char *what)
{
	struct vgpu_slot *slot = vgpu__share_slot(dev);
	uint64_t key[2], own;
	unsigned n;
	int rec, c;

	if (!slot)
		return 0;
	retry_drops();
	/* Opened before by this process: the runtime counts one more
	 * reference to the same pointer, and so does the entry. */
	if (opened(p))
		return 0;
	hash_key(handle, len, 1, key);
	c = import_charge(dev, slot, key, VGPU_USAGE_BUFFER, bytes, &rec,
			  &own);
	if (c != 0) {
		import_refused(what, bytes);
		return c;
	}
	n = entry_new(&(struct share){ .dev = dev, .rec = rec,
				       .kind = VGPU_USAGE_BUFFER,
				       .key = { key[0], key[1] }, .own = own,
				       .ptr = p, .opens = 1 });
	if (!n) {
		table_full();
		return 0;	/* held (or charged) until the process ends */
	}
	vgpu__track_keep(VGPU_TRACK_PTR, p,
			 &(struct vgpu_tracked){ .bytes = own,
						 .kind = VGPU_USAGE_BUFFER,
						 .dev = (unsigned)dev,
						 .aux = n });
	return 0;
}

void vgpu__share_ipc_closed(uint64_t p)
{
	struct vgpu_tracked t;
	unsigned n = closed(p);

	if (!n || n > SHARES)
		return;	/* not ours, or opened more often than closed */
	/* The pointer's tracked entry is this entry's, unless an open racing
	 * this close has made its own already: that one stays. */
	if (vgpu__track_remove(VGPU_TRACK_PTR, p, &t) && t.aux != n)
		vgpu__track_insert(VGPU_TRACK_PTR, p, &t);
	vgpu__share_gone(n);
}

/* The entry of VMM memory key on device dev this process holds, counting
 * one more handle of it: its number, or 0. */
static unsigned vmm_entry_of(int dev, const uint64_t key[2])
{
	unsigned n = 0;

	pthread_mutex_lock(&tab_lock);
	for (unsigned i = 0; i < SHARES; i++)
		if (tab[i].used && tab[i].kind == VGPU_USAGE_VMM &&
		    tab[i].dev == dev && tab[i].key[0] == key[0] &&
		    tab[i].key[1] == key[1] && tab[i].handles) {
			tab[i].handles++;
			n = i + 1;
			break;
		}
	pthread_mutex_unlock(&tab_lock);
	return n;
}

void vgpu__share_vmm_exported(uint64_t handle, int fd)
{
	struct vgpu_slot *slot;
	uint64_t key[2], size, gen, bytes, own;
	unsigned n;
	int dev, rec;

	retry_drops();
	if (!fd_key(fd, key, &size))
		return;
	vgpu__vmm_bytes(handle, &gen);
	/* A handle the shim charged, recorded once (exports after the
	 * first give descriptors of the same memory). */
	if (!gen || !vgpu__vmm_share(handle, gen, 0, &dev, &bytes) ||
	    !(slot = vgpu__share_slot(dev)))
		return;
	/* The handle's charge is this process's own until the record
	 * takes it: a release racing this gives it back as its own. */
	n = entry_new(&(struct share){ .dev = dev, .rec = -1,
				       .kind = VGPU_USAGE_VMM,
				       .key = { key[0], key[1] }, .own = bytes,
				       .handles = 1 });
	if (!n)
		return;
	if (!vgpu__vmm_share(handle, gen, n, &dev, &bytes)) {
		entry_free(n);
		return;
	}
	export_charged(dev, slot, key, VGPU_USAGE_VMM, bytes, &rec, &own);
	entry_set(n, key, rec, own);
}

int vgpu__share_vmm_imported(int dev, uint64_t handle, int fd,
			     const char *what)
{
	static bool warned;
	struct vgpu_slot *slot = vgpu__share_slot(dev);
	uint64_t key[2], size = 0, gen, own, bytes;
	unsigned n;
	int rec, other, c;

	if (!slot)
		return 0;
	if (!fd_key(fd, key, &size) || size == 0) {
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			vgpu_log(VGPU_LOG_WARN, "%s: the descriptor does not "
				 "tell which memory it is (not a regular "
				 "file), so imported memory is charged to its "
				 "exporter only (docs/memory.md)", what);
		return 0;
	}
	retry_drops();
	/* Memory this process holds already (imported before, or its own
	 * export): one more handle of the same entry, nothing to record. */
	if ((n = vmm_entry_of(dev, key)) != 0) {
		gen = vgpu__vmm_add(handle, dev, VGPU_USAGE_VMM, 0);
		if (!gen || !vgpu__vmm_share(handle, gen, n, &other, &bytes))
			vgpu__share_gone(n);
		return 0;
	}
	n = entry_new(&(struct share){ .dev = dev, .rec = -1,
				       .kind = VGPU_USAGE_VMM,
				       .key = { key[0], key[1] },
				       .handles = 1 });
	if (!n) {
		/* No entry to let go of a hold with: charged as its own,
		 * given back with the handle (counted twice, never lost). */
		table_full();
		if ((c = vgpu__share_charge(dev, VGPU_USAGE_VMM, size)) != 0)
			goto refused;
		vgpu__vmm_add(handle, dev, VGPU_USAGE_VMM, size);
		return 0;
	}
	c = import_charge(dev, slot, key, VGPU_USAGE_VMM, size, &rec, &own);
	if (c != 0) {
		entry_free(n);
		goto refused;
	}
	entry_set(n, key, rec, own);
	/* The handle's entry holds no charge of its own: the share entry
	 * has it (own), whoever lets go first. */
	gen = vgpu__vmm_add(handle, dev, VGPU_USAGE_VMM, 0);
	if (!gen || !vgpu__vmm_share(handle, gen, n, &other, &bytes)) {
		/* The handle is not tracked (its table is full, or another
		 * thread released it meanwhile): let go of the record now. */
		vgpu__share_gone(n);
	}
	return 0;
refused:
	import_refused(what, size);
	return c;
}
