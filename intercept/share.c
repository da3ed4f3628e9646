/* share.c - memory shared between processes, charged once.
 *
 * CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) and VMM handles
 * exported as POSIX file descriptors (cuMemExportToShareableHandle /
 * cuMemImportFromShareableHandle) let other processes hold memory one
 * process allocated; the device keeps it while any of them does. The
 * ledger keeps one record per such memory (vgpu/ledger_shares.c): the
 * exporter pays, importers hold it for free, and when the payer lets go
 * or dies while others hold it, one of them pays from then on.
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
 */
#include "devices.h"
#include "overcommit.h"
#include "share.h"
#include "track.h"
#include "vmm.h"

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#define SHARES 1024		/* fits the pointer table's aux (< 2048) */

struct share {
	bool used;
	int dev;
	int rec;		/* the ledger's record, -1: none */
	int kind;
	uint64_t key[2];
	uint64_t own;		/* bytes charged to this process as its own */
	uint64_t ptr;		/* an IPC pointer this process opened, or 0 */
	unsigned opens;		/* its cuIpcOpenMemHandle calls not closed */
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

static void timed_out(const char *what)
{
	static uint64_t last;
	uint64_t now = vgpu__mono_ns();

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

static void drop_or_retry(struct vgpu_dev *dv, int rec, const uint64_t key[2])
{
	if (vgpu_ledger_share_drop(dv->slot, rec, key) !=
	    VGPU_LEDGER_ETIMEDOUT)
		return;
	timed_out("letting go of shared memory");
	pthread_mutex_lock(&tab_lock);
	if (nretries < RETRIES)
		retries[nretries++] = (struct retry){ dv->ordinal, rec,
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
		struct vgpu_dev *dv = vgpu__dev_peek(r[i].dev);

		if (dv && dv->slot)
			drop_or_retry(dv, r[i].rec, r[i].key);
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

static void ipc_key(const CUipcMemHandle *h, uint64_t key[2])
{
	hash_key(h->reserved, sizeof(h->reserved), 1, key);
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
	struct vgpu_dev *dv;
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
	dv = s.used ? vgpu__dev_peek(s.dev) : NULL;
	if (!dv || !dv->slot)
		return;
	if (s.rec >= 0)
		drop_or_retry(dv, s.rec, s.key);
	if (s.own)
		vgpu__uncharge(dv, s.kind, s.own);
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
static void export_charged(struct vgpu_dev *dv, const uint64_t key[2],
			   int kind, uint64_t bytes, int *rec, uint64_t *own)
{
	bool elsewhere = false;
	int rc = vgpu_ledger_share_export(dv->slot, key, kind, bytes,
					  &elsewhere);

	*rec = rc >= 0 ? rc : -1;
	*own = rc >= 0 ? 0 : bytes;
	if (rc >= 0 && elsewhere)
		vgpu__uncharge(dv, kind, bytes);
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		timed_out("recording shared memory");
}

/* This process now holds memory another process made: held for free when
 * the ledger has it, else charged (and recorded, so that later importers
 * are not). CUDA_ERROR_OUT_OF_MEMORY (or _TIMEOUT) when that charge is
 * refused. */
static CUresult import_charge(struct vgpu_dev *dv, const uint64_t key[2],
			      int kind, uint64_t bytes, int *rec,
			      uint64_t *own)
{
	int rc = vgpu_ledger_share_hold(dv->slot, key);
	CUresult r;

	*rec = rc >= 0 ? rc : -1;
	*own = 0;
	if (rc >= 0)
		return CUDA_SUCCESS;
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		timed_out("importing shared memory");
	if ((r = vgpu__charge(dv, kind, bytes)) != CUDA_SUCCESS)
		return r;
	if (rc == VGPU_LEDGER_ENOENT)
		export_charged(dv, key, kind, bytes, rec, own);
	else
		*own = bytes;	/* no room for a holder: charged as its own */
	return CUDA_SUCCESS;
}

static void import_refused(const char *what, uint64_t bytes, CUresult r)
{
	vgpu_log(VGPU_LOG_ERROR, "%s: the imported memory (%llu bytes) could "
		 "not be held as another process's (not recorded in this "
		 "GPU's ledger, or its record could not be reached in time), "
		 "and charging it to this process was refused: %s", what,
		 (unsigned long long)bytes,
		 r == CUDA_ERROR_TIMEOUT ? "the tenant's lock timed out"
					 : "it does not fit the tenant's slice "
					   "(VGPU_MEMORY_LIMIT)");
}

/* ---- legacy IPC ---------------------------------------------------------------- */

/* Legacy IPC handles do not work on VMM memory (the driver's rule): a
 * spilled (or promoted) allocation is refused with a message. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct vgpu_tracked t;
	struct vgpu_dev *dv;
	uint64_t key[2], own;
	unsigned n;
	int rec;
	CUresult r;

	if (vgpu__spilled_range(dptr)) {
		vgpu_log(VGPU_LOG_ERROR, "cuIpcGetMemHandle(0x%llx): the "
			 "allocation was overcommitted (VGPU_OVERCOMMIT=host) "
			 "and lives in a virtual-memory range, which legacy IPC "
			 "handles cannot share; use cuMemExportToShareableHandle "
			 "or VGPU_OVERCOMMIT=managed", (unsigned long long)dptr);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!vgpu__real.cuIpcGetMemHandle)
		return CUDA_ERROR_NOT_FOUND;
	r = vgpu__real.cuIpcGetMemHandle(pHandle, dptr);
	if (r != CUDA_SUCCESS || !pHandle)
		return r;
	retry_drops();
	/* The handle is the whole allocation's, whatever pointer into it
	 * was given. */
	if (vgpu__real.cuMemGetAddressRange_v2) {
		CUdeviceptr base;
		size_t size;

		if (vgpu__real.cuMemGetAddressRange_v2(&base, &size, dptr) ==
		    CUDA_SUCCESS)
			dptr = base;
	}
	if (!vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t))
		return r;
	/* Recorded once per allocation (asking again gives the same handle);
	 * only cuMemAlloc memory the shim charged. */
	dv = vgpu__dev_peek((int)t.dev);
	if (t.kind == VGPU_USAGE_BUFFER && !t.aux && dv && dv->slot) {
		ipc_key(pHandle, key);
		n = entry_new(&(struct share){ .dev = (int)t.dev, .rec = -1,
					       .kind = VGPU_USAGE_BUFFER,
					       .key = { key[0], key[1] } });
		if (n) {
			export_charged(dv, key, VGPU_USAGE_BUFFER, t.bytes,
				       &rec, &own);
			entry_set(n, key, rec, own);
			t.aux = n;
			t.bytes = own;
		}
	}
	vgpu__track_keep(VGPU_TRACK_PTR, dptr, &t);
	return r;
}

/* The entry of IPC pointer p this process opened, counting one more open
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

static CUresult ipc_open(CUresult (*real)(CUdeviceptr *, CUipcMemHandle,
					  unsigned int),
			 CUdeviceptr *pdptr, CUipcMemHandle handle,
			 unsigned int flags)
{
	struct vgpu_dev *dv = vgpu__dev_current();
	uint64_t key[2], own, bytes;
	CUdeviceptr base;
	size_t size;
	unsigned n;
	int rec;
	CUresult r, c;

	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	r = real(pdptr, handle, flags);
	if (r != CUDA_SUCCESS || !pdptr || !dv || !dv->slot)
		return r;
	retry_drops();
	/* Opened before by this process: the driver counts one more
	 * reference to the same pointer, and so does the entry. */
	if (opened(*pdptr))
		return r;
	if (!vgpu__real.cuMemGetAddressRange_v2 ||
	    vgpu__real.cuMemGetAddressRange_v2(&base, &size, *pdptr) !=
		    CUDA_SUCCESS)
		return r;
	bytes = vgpu__alloc_size(size);
	ipc_key(&handle, key);
	c = import_charge(dv, key, VGPU_USAGE_BUFFER, bytes, &rec, &own);
	if (c != CUDA_SUCCESS) {
		import_refused("cuIpcOpenMemHandle", bytes, c);
		if (vgpu__real.cuIpcCloseMemHandle)
			vgpu__real.cuIpcCloseMemHandle(*pdptr);
		return c;
	}
	n = entry_new(&(struct share){ .dev = dv->ordinal, .rec = rec,
				       .kind = VGPU_USAGE_BUFFER,
				       .key = { key[0], key[1] }, .own = own,
				       .ptr = *pdptr, .opens = 1 });
	if (!n) {
		table_full();
		return r;	/* held (or charged) until the process ends */
	}
	vgpu__track_keep(VGPU_TRACK_PTR, *pdptr,
			 &(struct vgpu_tracked){ .bytes = own,
						 .kind = VGPU_USAGE_BUFFER,
						 .dev = (unsigned)dv->ordinal,
						 .aux = n });
	return r;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
			    unsigned int Flags)
{
	return ipc_open(vgpu__real.cuIpcOpenMemHandle, pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
			       unsigned int Flags)
{
	return ipc_open(vgpu__real.cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	struct vgpu_tracked t;
	unsigned n;
	CUresult r;

	if (!vgpu__real.cuIpcCloseMemHandle)
		return CUDA_ERROR_NOT_FOUND;
	r = vgpu__real.cuIpcCloseMemHandle(dptr);
	if (r != CUDA_SUCCESS)
		return r;
	n = closed(dptr);
	if (!n || n > SHARES)
		return r;	/* not ours, or opened more often than closed */
	/* The pointer's tracked entry is this entry's, unless an open racing
	 * this close has made its own already: that one stays. */
	if (vgpu__track_remove(VGPU_TRACK_PTR, dptr, &t) && t.aux != n)
		vgpu__track_insert(VGPU_TRACK_PTR, dptr, &t);
	vgpu__share_gone(n);
	return r;
}

/* ---- VMM handles exported as file descriptors ---------------------------------- */

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

CUresult cuMemExportToShareableHandle(void *shareableHandle,
				      CUmemGenericAllocationHandle handle,
				      CUmemAllocationHandleType handleType,
				      unsigned long long flags)
{
	struct vgpu_dev *dv;
	uint64_t key[2], size, gen, bytes, own;
	unsigned n;
	int dev, rec;
	CUresult r;

	if (!vgpu__real.cuMemExportToShareableHandle)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemExportToShareableHandle(shareableHandle, handle,
						    handleType, flags);
	if (r == CUDA_SUCCESS)
		retry_drops();
	if (r != CUDA_SUCCESS || !shareableHandle ||
	    handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !fd_key(*(int *)shareableHandle, key, &size))
		return r;
	vgpu__vmm_bytes(handle, &gen);
	/* A handle the shim charged, recorded once (exports after the
	 * first give descriptors of the same memory). */
	if (!gen || !vgpu__vmm_share(handle, gen, 0, &dev, &bytes) ||
	    !(dv = vgpu__dev_peek(dev)) || !dv->slot)
		return r;
	/* The handle's charge is this process's own until the record
	 * takes it: a release racing this gives it back as its own. */
	n = entry_new(&(struct share){ .dev = dev, .rec = -1,
				       .kind = VGPU_USAGE_VMM,
				       .key = { key[0], key[1] }, .own = bytes,
				       .handles = 1 });
	if (!n)
		return r;
	if (!vgpu__vmm_share(handle, gen, n, &dev, &bytes)) {
		entry_free(n);
		return r;
	}
	export_charged(dv, key, VGPU_USAGE_VMM, bytes, &rec, &own);
	entry_set(n, key, rec, own);
	return r;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
					void *osHandle,
					CUmemAllocationHandleType shHandleType)
{
	static bool warned;
	CUmemAllocationProp prop;
	struct vgpu_dev *dv;
	uint64_t key[2], size = 0, gen, own, bytes;
	unsigned n;
	int rec, dev;
	CUresult r, c;

	if (!vgpu__real.cuMemImportFromShareableHandle)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = vgpu__real.cuMemImportFromShareableHandle(handle, osHandle,
						      shHandleType);
	if (r != CUDA_SUCCESS || !handle ||
	    shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return r;
	memset(&prop, 0, sizeof(prop));
	if (!vgpu__real.cuMemGetAllocationPropertiesFromHandle ||
	    vgpu__real.cuMemGetAllocationPropertiesFromHandle(&prop, *handle)
		    != CUDA_SUCCESS ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return r;	/* host memory: no device's */
	dv = vgpu__dev_attach(prop.location.id);
	if (!dv || !dv->slot)
		return r;
	if (!fd_key((int)(intptr_t)osHandle, key, &size) || size == 0) {
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			vgpu_log(VGPU_LOG_WARN, "cuMemImportFromShareableHandle: "
				 "the descriptor does not tell which memory it "
				 "is (not a regular file), so imported memory "
				 "is charged to its exporter only "
				 "(docs/memory.md)");
		return r;
	}
	retry_drops();
	/* Memory this process holds already (imported before, or its own
	 * export): one more handle of the same entry, nothing to record. */
	if ((n = vmm_entry_of(dv->ordinal, key)) != 0) {
		gen = vgpu__vmm_add(*handle, dv->ordinal, VGPU_USAGE_VMM, 0);
		if (!gen || !vgpu__vmm_share(*handle, gen, n, &dev, &bytes))
			vgpu__share_gone(n);
		return r;
	}
	n = entry_new(&(struct share){ .dev = dv->ordinal, .rec = -1,
				       .kind = VGPU_USAGE_VMM,
				       .key = { key[0], key[1] },
				       .handles = 1 });
	if (!n) {
		/* No entry to let go of a hold with: charged as its own,
		 * given back with the handle (counted twice, never lost). */
		table_full();
		if ((c = vgpu__charge(dv, VGPU_USAGE_VMM, size)) != CUDA_SUCCESS)
			goto refused;
		vgpu__vmm_add(*handle, dv->ordinal, VGPU_USAGE_VMM, size);
		return r;
	}
	c = import_charge(dv, key, VGPU_USAGE_VMM, size, &rec, &own);
	if (c != CUDA_SUCCESS) {
		entry_free(n);
		goto refused;
	}
	entry_set(n, key, rec, own);
	/* The handle's entry holds no charge of its own: the share entry
	 * has it (own), whoever lets go first. */
	gen = vgpu__vmm_add(*handle, dv->ordinal, VGPU_USAGE_VMM, 0);
	if (!gen || !vgpu__vmm_share(*handle, gen, n, &dev, &bytes)) {
		/* The handle is not tracked (its table is full, or another
		 * thread released it meanwhile): let go of the record now. */
		vgpu__share_gone(n);
	}
	return r;
refused:
	import_refused("cuMemImportFromShareableHandle", size, c);
	if (vgpu__real.cuMemRelease)
		vgpu__real.cuMemRelease(*handle);
	return c;
}
