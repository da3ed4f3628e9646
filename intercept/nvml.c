/* nvml.c - NVML's views of a GPU inside a slice.
 *
 * The memory info (_v1, _v2), the process lists (compute and graphics, all
 * versions) and the utilisation (the rates, the per-process samples) are
 * exported by libvgpu.so, so a program linked against libnvidia-ml.so.1
 * (nvidia-smi, monitoring agents) gets them in front of NVML's own once
 * libvgpu.so is preloaded; a program that dlopen()s NVML and looks them up
 * in that handle (pynvml, ctypes, PyTorch) gets them through the dlsym
 * catch at the end of this file. The real NVML answers first; then, for a
 * GPU this process has a slice of, total becomes the slice, used the
 * tenant's usage from the ledger, free what is left; the processes are the
 * tenant's with their charges; the utilisation is the sum of NVML's own
 * per-process samples of the tenant's processes.
 *
 * NVML indexes physical GPUs; the slice is set per CUDA ordinal. A GPU is
 * matched to its ordinal by UUID when this process already uses it through
 * CUDA, else through CUDA_VISIBLE_DEVICES (an index or a UUID prefix per
 * entry) or, when that is unset, by NVML's index. A process that never used
 * CUDA reads the tenant's usage from the ledger file without joining it.
 */
#include "devices.h"
#include "vgpu_nvml_types.h"

#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Processes listed at most (a ledger's slots are more; a tenant with more
 * is listed in part). */
#define VGPU_NVML_PROCS 256

/* The real NVML's functions: hooks.def's VGPU_NVML rows. */
static struct {
#define VGPU_HOOK(name, version, symbol, per_thread, ret, params)
#define VGPU_CALL(field, symbol, ret, params)
#define VGPU_NVML(field, symbol, ret, params) ret (*field) params;
#include "hooks.def"
#undef VGPU_NVML
} nvml;

static const struct {
	const char *symbol;
	size_t offset;
} nvml_rows[] = {
#define VGPU_NVML(field, symbol, ret, params) \
	{ #symbol, offsetof(__typeof__(nvml), field) },
#include "hooks.def"
#undef VGPU_NVML
#undef VGPU_CALL
#undef VGPU_HOOK
};
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

/* The real NVML's handle: what dlopen gives anyone who opens it. */
static void *nvml_handle;
/* This thread is loading it (NVML's constructors may look themselves up:
 * the dlsym catch must not wait for the load it is part of). */
static __thread bool nvml_loading;

static void load_nvml(void)
{
	void *h;

	nvml_loading = true;
	h = vgpu__dlopen_real("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	nvml_loading = false;
	if (!h) {
		vgpu_log(VGPU_LOG_ERROR, "libnvidia-ml.so.1 not found: NVML "
			 "memory queries fail with NVML_ERROR_LIBRARY_NOT_FOUND");
		return;
	}
	/* The real dlsym: ours would hand back these very hooks. */
	vgpu__dlsym_name(NULL, NULL);
	for (size_t i = 0; i < sizeof(nvml_rows) / sizeof(nvml_rows[0]); i++)
		*(void **)((char *)&nvml + nvml_rows[i].offset) =
			vgpu__real_dlsym(h, nvml_rows[i].symbol);
	__atomic_store_n(&nvml_handle, h, __ATOMIC_RELEASE);
}

/* The CUDA ordinal of NVML's device, or -1 if CUDA does not see it. */
static int ordinal_of(nvmlDevice_t dev, const char *uuid)
{
	const struct vgpu_dev *dv = vgpu__dev_by_uuid(uuid);
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	unsigned idx = 0;
	bool have_idx;
	int ord = 0;

	if (dv)
		return dv->ordinal;
	have_idx = nvml.index && nvml.index(dev, &idx) == NVML_SUCCESS;
	if (!v)
		return have_idx ? (int)idx : -1;
	while (*v) {
		size_t n = strcspn(v, ",");
		char *end;

		if (n > 0 && (v[0] == 'G' || v[0] == 'M')) {
			/* A UUID or a unique prefix of one. */
			if (strncmp(uuid, v, n) == 0)
				return ord;
		} else {
			unsigned long i = strtoul(v, &end, 10);
			if (end == v || (size_t)(end - v) != n)
				return -1;	/* the driver stops here too */
			if (have_idx && i == idx)
				return ord;
		}
		ord++;
		v += n + (v[n] ? 1 : 0);
	}
	return -1;
}

/* Rewrites total/free/used for the slice, if dev is in one. */
static void to_slice(nvmlDevice_t dev, unsigned long long *total,
		     unsigned long long *free, unsigned long long *used,
		     unsigned long long reserved)
{
	const struct vgpu_options *o = vgpu__options();
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	const struct vgpu_dev *dv;
	uint64_t limit, u = 0, l = 0;
	int ord;

	if (o->disable || !nvml.uuid ||
	    nvml.uuid(dev, uuid, sizeof(uuid)) != NVML_SUCCESS)
		return;
	ord = ordinal_of(dev, uuid);
	if (ord < 0)
		return;
	limit = vgpu__options_memory_limit(o, (unsigned)ord);
	dv = vgpu__dev_by_uuid(uuid);
	if (dv && dv->slot) {
		u = vgpu_ledger_tenant_used(dv->slot);
		limit = vgpu_ledger_tenant_limit(dv->slot);
	} else if (vgpu_ledger_peek_tenant(o->ledger_dir, uuid, o->tenant, &u,
					   &l) == 0) {
		limit = l < limit ? l : limit;
	}
	if (limit >= *total)
		return;
	*total = limit;
	*used = u < limit ? u : limit;
	*free = limit - *used > reserved ? limit - *used - reserved : 0;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
						 nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	nvmlReturn_t r;

	pthread_once(&nvml_once, load_nvml);
	if (!nvml.mem)
		return NVML_ERROR_LIBRARY_NOT_FOUND;
	r = nvml.mem(device, memory);
	if (r == NVML_SUCCESS && memory)
		to_slice(device, &memory->total, &memory->free, &memory->used,
			 0);
	return r;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
						    nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
					nvmlMemory_v2_t *memory)
{
	nvmlReturn_t r;

	pthread_once(&nvml_once, load_nvml);
	if (!nvml.mem_v2)
		return NVML_ERROR_LIBRARY_NOT_FOUND;
	r = nvml.mem_v2(device, memory);
	if (r == NVML_SUCCESS && memory)
		to_slice(device, &memory->total, &memory->free, &memory->used,
			 memory->reserved);
	return r;
}

/* ---- the process lists -------------------------------------------------- */

/* Whether dev is in a slice of this process's tenant (a memory limit or a
 * compute share on it): *uuid its UUID. */
static bool sliced(nvmlDevice_t dev, char *uuid, size_t len)
{
	const struct vgpu_options *o = vgpu__options();
	int ord;

	if (o->disable || !nvml.uuid ||
	    nvml.uuid(dev, uuid, (unsigned)len) != NVML_SUCCESS)
		return false;
	ord = ordinal_of(dev, uuid);
	return ord >= 0 &&
	       (vgpu__options_memory_limit(o, (unsigned)ord) !=
			VGPU_LEDGER_UNLIMITED ||
		vgpu__options_compute_limit(o, (unsigned)ord) < 100);
}

/* In a slice, the processes are the tenant's, each with what the ledger
 * charges it (its own pid namespace's pid, as the job sees itself), by
 * NVML's two calls; elsewhere NVML's own list. */
static nvmlReturn_t procs(nvmlDevice_t dev, unsigned *count, void *infos,
			  size_t each, bool graphics,
			  nvmlReturn_t (*real)(nvmlDevice_t, unsigned *,
					       void *))
{
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	unsigned n = 0;

	pthread_once(&nvml_once, load_nvml);
	if (!real)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	if (!count || !sliced(dev, uuid, sizeof(uuid)))
		return real(dev, count, infos);
	if (!graphics &&
	    vgpu_ledger_peek_procs(vgpu__options()->ledger_dir, uuid,
				   vgpu__options()->tenant, p, VGPU_NVML_PROCS,
				   &n) != 0)
		n = 0;
	if (n > VGPU_NVML_PROCS)
		n = VGPU_NVML_PROCS;
	if (n > *count || (n && !infos)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++) {
		char *at = (char *)infos + (size_t)i * each;

		if (each == sizeof(nvmlProcessInfo_v1_t))
			*(nvmlProcessInfo_v1_t *)at = (nvmlProcessInfo_v1_t){
				(unsigned)p[i].pid, p[i].device_bytes };
		else
			*(nvmlProcessInfo_v2_t *)at = (nvmlProcessInfo_v2_t){
				(unsigned)p[i].pid, p[i].device_bytes, ~0u,
				~0u };
	}
	*count = n;
	return NVML_SUCCESS;
}

#define PROCS_HOOK(sym, field, type, graphics)				\
VGPU_EXPORT nvmlReturn_t sym(nvmlDevice_t device, unsigned int *count,	\
			     type *infos);				\
nvmlReturn_t sym(nvmlDevice_t device, unsigned int *count, type *infos) \
{									\
	pthread_once(&nvml_once, load_nvml);				\
	return procs(device, count, infos, sizeof(type), graphics,	\
		     (nvmlReturn_t (*)(nvmlDevice_t, unsigned *,	\
				       void *))nvml.field);		\
}

PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses, compute,
	   nvmlProcessInfo_v1_t, false)
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, compute_v2,
	   nvmlProcessInfo_v2_t, false)
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, compute_v3,
	   nvmlProcessInfo_v2_t, false)
PROCS_HOOK(nvmlDeviceGetGraphicsRunningProcesses, graphics,
	   nvmlProcessInfo_v1_t, true)
PROCS_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v2, graphics_v2,
	   nvmlProcessInfo_v2_t, true)
PROCS_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v3, graphics_v3,
	   nvmlProcessInfo_v2_t, true)

/* ---- utilisation ---------------------------------------------------------- */

/* How far back the tenant's share is read: NVML keeps per-process samples
 * of about a sixth of a second, and a monitor polls about once a second. */
#define VGPU_NVML_UTIL_PERIOD_US 1000000ull

/* The CPU clock NVML stamps its samples with, in microseconds. */
static unsigned long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ull +
	       (unsigned long long)ts.tv_nsec / 1000ull;
}

/* Whether NVML's pid (the host's) is one of the tenant's processes. */
static bool tenant_pid(const struct vgpu_ledger_proc *p, unsigned n,
		       unsigned pid)
{
	for (unsigned i = 0; i < n; i++)
		if ((unsigned)(p[i].host_pid ? p[i].host_pid : p[i].pid) == pid)
			return true;
	return false;
}

/* The tenant's processes on the GPU `uuid`, from its ledger: their count,
 * 0 when none (or no ledger). */
static unsigned tenant_procs(const char *uuid, struct vgpu_ledger_proc *p)
{
	const struct vgpu_options *o = vgpu__options();
	unsigned n = 0;

	if (vgpu_ledger_peek_procs(o->ledger_dir, uuid, o->tenant, p,
				   VGPU_NVML_PROCS, &n) != 0)
		return 0;
	return n < VGPU_NVML_PROCS ? n : VGPU_NVML_PROCS;
}

/* The tenant's share of the device over the last sample period: the sum
 * of NVML's own per-process samples (SM and memory) of the tenant's
 * processes, at most 100. No sample in the period: the tenant was idle. */
static nvmlReturn_t tenant_util(nvmlDevice_t dev, const char *uuid,
				nvmlUtilization_t *util)
{
	nvmlProcessUtilizationSample_t s[VGPU_NVML_PROCS];
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	unsigned ns = VGPU_NVML_PROCS, np, gpu = 0, mem = 0;
	nvmlReturn_t r;

	if (!nvml.proc_util)
		return NVML_ERROR_NOT_SUPPORTED;
	np = tenant_procs(uuid, p);
	r = nvml.proc_util(dev, s, &ns, now_us() - VGPU_NVML_UTIL_PERIOD_US);
	if (r == NVML_ERROR_NOT_FOUND)
		ns = 0;
	else if (r != NVML_SUCCESS)
		return r;
	for (unsigned i = 0; i < ns && i < VGPU_NVML_PROCS; i++)
		if (tenant_pid(p, np, s[i].pid)) {
			gpu += s[i].smUtil;
			mem += s[i].memUtil;
		}
	util->gpu = gpu < 100 ? gpu : 100;
	util->memory = mem < 100 ? mem : 100;
	return NVML_SUCCESS;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(
	nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
					   nvmlUtilization_t *utilization)
{
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	nvmlReturn_t r;

	pthread_once(&nvml_once, load_nvml);
	if (!nvml.util)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	/* NVML checks the device and its support first. */
	r = nvml.util(device, utilization);
	if (r != NVML_SUCCESS || !sliced(device, uuid, sizeof(uuid)))
		return r;
	return tenant_util(device, uuid, utilization);
}

/* In a slice, only the tenant's processes' samples (in NVML's order). */
VGPU_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
	nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
	unsigned int *count, unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetProcessUtilization(
	nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
	unsigned int *count, unsigned long long lastSeenTimeStamp)
{
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	unsigned kept = 0, np;
	nvmlReturn_t r;

	pthread_once(&nvml_once, load_nvml);
	if (!nvml.proc_util)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	r = nvml.proc_util(device, utilization, count, lastSeenTimeStamp);
	if (r != NVML_SUCCESS || !utilization || !count ||
	    !sliced(device, uuid, sizeof(uuid)))
		return r;
	np = tenant_procs(uuid, p);
	for (unsigned i = 0; i < *count; i++)
		if (tenant_pid(p, np, utilization[i].pid))
			utilization[kept++] = utilization[i];
	*count = kept;
	return kept ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* ---- the dlsym catch (the jump is in trampolines.S) ---------------------- */

/* pynvml, nvitop, gpustat and PyTorch dlopen libnvidia-ml.so.1 and look
 * its functions up in that handle (ctypes likewise), which finds NVML's
 * own, not the ones this library exports in front of them. dlsym is caught
 * here: a name of the NVML functions hooked here, looked up in the real
 * NVML's handle, gets the hook; everything else goes to the real dlsym
 * unchanged (by a tail jump, so RTLD_NEXT keeps meaning the caller's). */
static const struct {
	const char *name;
	void *hook;
	size_t real;	/* the offset of NVML's own in `nvml` */
} nvml_hooks[] = {
#define NVML_HOOK(sym, field) \
	{ #sym, (void *)sym, offsetof(__typeof__(nvml), field) }
	NVML_HOOK(nvmlDeviceGetMemoryInfo, mem),
	NVML_HOOK(nvmlDeviceGetMemoryInfo_v2, mem_v2),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses, compute),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, compute_v2),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, compute_v3),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses, graphics),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v2, graphics_v2),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v3, graphics_v3),
	NVML_HOOK(nvmlDeviceGetUtilizationRates, util),
	NVML_HOOK(nvmlDeviceGetProcessUtilization, proc_util),
#undef NVML_HOOK
};

void *(*vgpu__real_dlsym)(void *, const char *);

static void resolve_dlsym(void)
{
	void *f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");

	if (!f)
		f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n(&vgpu__real_dlsym, (void *(*)(void *, const char *))f,
			 __ATOMIC_RELEASE);
}

void *vgpu__dlsym_name(void *handle, const char *name)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	void *loaded;

	pthread_once(&once, resolve_dlsym);
	if (!name || name[0] != 'n' || strncmp(name, "nvml", 4) != 0 ||
	    handle == RTLD_DEFAULT || handle == RTLD_NEXT || nvml_loading)
		return NULL;
	/* Only an NVML already loaded can be the one asked: the catch never
	 * loads it (nor says it is missing) for a lookup in another
	 * library. */
	loaded = vgpu__dlopen_real("libnvidia-ml.so.1",
				   RTLD_NOW | RTLD_NOLOAD);
	if (!loaded)
		return NULL;
	dlclose(loaded);
	if (handle != loaded)
		return NULL;
	pthread_once(&nvml_once, load_nvml);
	if (handle != __atomic_load_n(&nvml_handle, __ATOMIC_ACQUIRE))
		return NULL;
	/* A function this NVML lacks stays missing, as without the shim. */
	for (size_t i = 0; i < sizeof(nvml_hooks) / sizeof(nvml_hooks[0]); i++)
		if (strcmp(name, nvml_hooks[i].name) == 0)
			return *(void **)((char *)&nvml + nvml_hooks[i].real)
				       ? nvml_hooks[i].hook
				       : NULL;
	return NULL;
}
