/* smi.c - ROCm SMI's view of a GPU inside a slice.
 *
 * rsmi_dev_memory_total_get and rsmi_dev_memory_usage_get (VRAM) are
 * exported by libvgpu-hip.so, so a program linked against
 * librocm_smi64.so.1 gets them in front of the library's own once the shim
 * is preloaded; a program that dlopen()s the library and looks them up in
 * that handle (rocm-smi, over ctypes) gets them through the dlsym catch at
 * the end of this file. The real function answers first; then, for a GPU
 * this process has a memory slice of (smaller than the GPU), total becomes
 * the slice and used the tenant's usage from the ledger.
 *
 * ROCm SMI numbers the physical GPUs; the slice is set per HIP ordinal and
 * the ledger is keyed by what the HIP runtime says of the device
 * (devices.c). The one name both share is the PCI bus id: an SMI device's
 * (rsmi_dev_pci_id_get) is looked for among the HIP runtime's devices
 * (hipDeviceGetPCIBusId), which gives the ordinal and, with the runtime's
 * UUID, the ledger's key. A process that has not loaded the HIP runtime
 * (rocm-smi itself) has it loaded here, privately, once; a GPU that HIP
 * does not show (HIP_VISIBLE_DEVICES) keeps the library's numbers. A
 * process that never joined the ledger reads its tenant's usage from the
 * file without joining it.
 */
#include "dlsym_real.h"
#include "hip.h"
#include "ledger.h"
#include "vgpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ROCm SMI's ABI, the little of it used here (rocm_smi.h, 5.x). */
typedef int vgpu_rsmi_status;
typedef int vgpu_rsmi_mem_type;
#define VGPU_RSMI_SUCCESS	0
#define VGPU_RSMI_NOT_FOUND	11
#define VGPU_RSMI_MEM_VRAM	0
/* The names ROCm SMI goes by: Debian's, then ROCm's and DTK's. */
static const char *const rsmi_names[] = {
	"librocm_smi64.so.1", "librocm_smi64.so.7", "librocm_smi64.so.6",
	"librocm_smi64.so.5", "librocm_smi64.so",
};

/* The real functions, as found in the handle a program looked the hooks
 * up in (its own dlopen, any name): the hooks call these (atomic). */
enum { RSMI_TOTAL, RSMI_USAGE, RSMI_PCI, RSMI_FNS };
static const char *const rsmi_fn_names[RSMI_FNS] = {
	"rsmi_dev_memory_total_get", "rsmi_dev_memory_usage_get",
	"rsmi_dev_pci_id_get",
};
static void *rsmi_seen[RSMI_FNS];

typedef vgpu_rsmi_status (*rsmi_mem_fn)(uint32_t, vgpu_rsmi_mem_type,
					uint64_t *);
typedef vgpu_rsmi_status (*rsmi_pci_fn)(uint32_t, uint64_t *);

/* ROCm SMI's own function: in the library a program opened and looked the
 * hooks up in (RTLD_LOCAL, any name), else after this library, else in a
 * loaded library of a known name. Looked up per call: queries are rare. */
static void *smi_real(const char *name)
{
	void *(*look)(void *, const char *) = vgpu__dlsym_real();
	void *f, *h;

	if (!look)
		return NULL;
	/* The library the program looked the hooks up in, first: it is
	 * the one it initialised. */
	for (int i = 0; i < RSMI_FNS; i++)
		if (strcmp(name, rsmi_fn_names[i]) == 0 &&
		    (f = __atomic_load_n(&rsmi_seen[i], __ATOMIC_ACQUIRE)))
			return f;
	f = look(RTLD_NEXT, name);
	if (f)
		return f;
	for (size_t i = 0; i < sizeof(rsmi_names) / sizeof(*rsmi_names); i++) {
		h = dlopen(rsmi_names[i], RTLD_NOW | RTLD_NOLOAD);
		if (!h)
			continue;
		f = look(h, name);
		dlclose(h);
		if (f)
			return f;
	}
	return NULL;
}

/* ---- an SMI device's HIP ordinal and ledger ------------------------------ */

struct smi_map {
	int state;			/* MAP_*, atomic */
	int ordinal;
	char key[VGPU_LEDGER_UUID_MAX];
};
enum { MAP_UNKNOWN, MAP_HIP, MAP_NONE };

static struct smi_map maps[VGPU_MAX_DEVICES];
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether HIP's bus id "dddd:bb:dd.f" names bdfid, ROCm SMI's
 * domain << 32 | bus << 8 | device << 3 | function. */
static bool same_bus(const char *bus, uint64_t bdfid)
{
	unsigned dom, b, dev, fn;

	if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dev, &fn) != 4)
		return false;
	return ((uint64_t)dom << 32 | (uint64_t)(b & 0xff) << 8 |
		(dev & 0x1f) << 3 | (fn & 0x7)) == bdfid;
}

/* The HIP device at bdfid, through the runtime (loaded if it is not). */
static bool find_hip(uint64_t bdfid, struct smi_map *m)
{
	void *(*look)(void *, const char *) = vgpu__dlsym_real();
	hipError_t (*count_of)(int *);
	hipError_t (*bus_of)(char *, int, int);
	hipError_t (*uuid_of)(hipUUID *, hipDevice_t);
	void *rt = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL);
	char bus[32];
	int n = 0;

	/* The runtime stays loaded: a HIP runtime is not unloaded safely. */
	if (!rt || !look)
		return false;
	*(void **)&count_of = look(rt, "hipGetDeviceCount");
	*(void **)&bus_of = look(rt, "hipDeviceGetPCIBusId");
	*(void **)&uuid_of = look(rt, "hipDeviceGetUuid");
	if (!count_of || !bus_of || count_of(&n) != hipSuccess)
		return false;
	for (int d = 0; d < n && d < VGPU_MAX_DEVICES; d++) {
		if (bus_of(bus, (int)sizeof(bus), d) != hipSuccess ||
		    !same_bus(bus, bdfid))
			continue;
		m->ordinal = d;
		return vgpu__hip_device_key(uuid_of, bus_of, d, m->key,
					    sizeof(m->key));
	}
	return false;
}

/* SMI device dv's HIP device, found once; NULL if HIP does not show it. */
static const struct smi_map *map_of(uint32_t dv)
{
	rsmi_pci_fn pci;
	struct smi_map m = { MAP_NONE, -1, "" };
	uint64_t bdfid;

	if (dv >= VGPU_MAX_DEVICES)
		return NULL;
	switch (__atomic_load_n(&maps[dv].state, __ATOMIC_ACQUIRE)) {
	case MAP_HIP:
		return &maps[dv];
	case MAP_NONE:
		return NULL;
	}
	*(void **)&pci = smi_real("rsmi_dev_pci_id_get");
	if (!pci || pci(dv, &bdfid) != VGPU_RSMI_SUCCESS)
		return NULL;	/* asked again next time */
	if (find_hip(bdfid, &m))
		m.state = MAP_HIP;
	pthread_mutex_lock(&map_lock);
	if (__atomic_load_n(&maps[dv].state, __ATOMIC_ACQUIRE) ==
	    MAP_UNKNOWN) {
		maps[dv].ordinal = m.ordinal;
		memcpy(maps[dv].key, m.key, sizeof(m.key));
		__atomic_store_n(&maps[dv].state, m.state, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&map_lock);
	return m.state == MAP_HIP ? &maps[dv] : NULL;
}

/* The memory slice of SMI device dv: the tenant's terms in the ledger when
 * it has them, else this process's options; false: no slice. */
static bool slice_of(uint32_t dv, uint64_t *limit, uint64_t *used)
{
	const struct smi_map *m = map_of(dv);
	const struct vgpu_options *o;
	const struct vgpu_hip_dev *hd;
	uint64_t u = 0, l = 0;

	if (!m)
		return false;
	o = vgpu__hip_options();
	if (o->disable)
		return false;
	*limit = vgpu__options_memory_limit(o, (unsigned)m->ordinal);
	*used = 0;
	hd = vgpu__hip_dev_peek(m->ordinal);
	if (hd && hd->slot && strcmp(hd->uuid, m->key) == 0) {
		*used = vgpu_ledger_tenant_used(hd->slot);
		*limit = vgpu_ledger_tenant_limit(hd->slot);
	} else if (vgpu_ledger_peek_tenant(o->ledger_dir, m->key,
					   o->ledger_group, o->tenant,
					   &u, &l, NULL, NULL, 0) == 0) {
		*used = u;
		*limit = l;
	}
	return *limit != VGPU_LEDGER_UNLIMITED;
}

/* ---- the hooks ------------------------------------------------------------ */

__attribute__((visibility("default")))
vgpu_rsmi_status rsmi_dev_memory_total_get(uint32_t dv,
					   vgpu_rsmi_mem_type type,
					   uint64_t *total);
vgpu_rsmi_status rsmi_dev_memory_total_get(uint32_t dv,
					   vgpu_rsmi_mem_type type,
					   uint64_t *total)
{
	rsmi_mem_fn real;
	uint64_t limit, used;
	vgpu_rsmi_status r;

	*(void **)&real = smi_real("rsmi_dev_memory_total_get");
	if (!real)
		return VGPU_RSMI_NOT_FOUND;
	r = real(dv, type, total);
	if (r == VGPU_RSMI_SUCCESS && type == VGPU_RSMI_MEM_VRAM && total &&
	    slice_of(dv, &limit, &used) && limit < *total)
		*total = limit;
	return r;
}

__attribute__((visibility("default")))
vgpu_rsmi_status rsmi_dev_memory_usage_get(uint32_t dv,
					   vgpu_rsmi_mem_type type,
					   uint64_t *usage);
vgpu_rsmi_status rsmi_dev_memory_usage_get(uint32_t dv,
					   vgpu_rsmi_mem_type type,
					   uint64_t *usage)
{
	rsmi_mem_fn real, real_total;
	uint64_t limit, used, total;
	vgpu_rsmi_status r;

	*(void **)&real = smi_real("rsmi_dev_memory_usage_get");
	*(void **)&real_total = smi_real("rsmi_dev_memory_total_get");
	if (!real)
		return VGPU_RSMI_NOT_FOUND;
	r = real(dv, type, usage);
	if (r == VGPU_RSMI_SUCCESS && type == VGPU_RSMI_MEM_VRAM && usage &&
	    real_total && real_total(dv, type, &total) == VGPU_RSMI_SUCCESS &&
	    slice_of(dv, &limit, &used) && limit < total)
		*usage = used < limit ? used : limit;
	return r;
}

/* ---- the dlsym catch (the jump is in dlsym.S) ---------------------------- */

/* rocm-smi (ctypes) dlopens librocm_smi64.so.1 and looks its functions up
 * in that handle, which finds the library's own, not these. A lookup of
 * one of the hooked names in the loaded ROCm SMI's handle gets the hook,
 * if that library has the name; every other lookup returns NULL here and
 * dlsym.S jumps to the real dlsym (RTLD_NEXT keeps meaning the caller's).
 * It never loads the library, and waits on nothing: dlsym may be called
 * with the loader's lock held. */
static __attribute__((noinline)) void *rsmi_catch(void *handle,
						  const char *name)
{
	void *(*look)(void *, const char *) = vgpu__real_dlsym;
	void *hook = NULL, *real;

	if (strcmp(name, "rsmi_dev_memory_total_get") == 0)
		hook = (void *)rsmi_dev_memory_total_get;
	else if (strcmp(name, "rsmi_dev_memory_usage_get") == 0)
		hook = (void *)rsmi_dev_memory_usage_get;
	if (!hook)
		return NULL;
	/* A handle in which the name is ROCm SMI's own (whatever the
	 * library's name): its functions are kept for the hooks. */
	real = look(handle, name);
	if (!real || real == hook)
		return NULL;
	for (int i = 0; i < RSMI_FNS; i++) {
		void *f = look(handle, rsmi_fn_names[i]);

		if (f)
			__atomic_store_n(&rsmi_seen[i], f, __ATOMIC_RELEASE);
	}
	return hook;
}

/* Every dlsym of the process comes here first, the sanitizers' start-up's
 * included: uninstrumented up to the name's prefix, which no sanitizer
 * looks up (dlsym_real.h). */
VGPU_UNINSTRUMENTED void *vgpu__hip_dlsym_name(void *handle,
					       const char *name)
{
	if (!vgpu__dlsym_real() ||
	    !vgpu__name_starts(name, "rsmi_dev_memory_") ||
	    handle == RTLD_DEFAULT || handle == RTLD_NEXT)
		return NULL;
	return rsmi_catch(handle, name);
}
