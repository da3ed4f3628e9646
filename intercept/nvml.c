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
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Processes listed at most (a ledger's slots are more; a tenant with more
 * is listed in part). */
#define VGPU_NVML_PROCS 256
/* Utilisation samples read on the stack; more: from the heap. */
#define UTIL_SAMPLES 256

/* The real NVML's functions: hooks.def's VGPU_NVML rows. */
struct nvml_fns {
#define VGPU_HOOK(name, version, symbol, per_thread, ret, params)
#define VGPU_CALL(field, symbol, ret, params)
#define VGPU_NVML(field, symbol, ret, params) ret (*field) params;
#include "hooks.def"
#undef VGPU_NVML
};

static const struct {
	const char *symbol;
	size_t offset;
} nvml_rows[] = {
#define VGPU_NVML(field, symbol, ret, params) \
	{ #symbol, offsetof(struct nvml_fns, field) },
#include "hooks.def"
#undef VGPU_NVML
#undef VGPU_CALL
#undef VGPU_HOOK
};

/* Loading NVML never waits on another thread: a thread holding the
 * loader's lock (a library's constructor) may call these hooks or dlsym
 * while another thread is inside dlopen waiting for that lock, so no
 * pthread_once (nor any lock) may be held around a loader call. Each
 * thread that finds the table unpublished loads NVML itself (dlopen counts
 * references) into its own copy; the first to finish publishes its copy
 * (state EMPTY -> WRITING -> READY), the others use theirs for the call. */
enum { NVML_EMPTY, NVML_WRITING, NVML_READY, NVML_MISSING };
static struct nvml_fns nvml_pub;
static int nvml_state;

static const struct nvml_fns *nvml_get(struct nvml_fns *mine)
{
	int st = __atomic_load_n(&nvml_state, __ATOMIC_ACQUIRE);
	void *(*real_dlsym)(void *, const char *);
	void *h;

	if (st == NVML_READY)
		return &nvml_pub;
	memset(mine, 0, sizeof(*mine));
	if (st == NVML_MISSING)
		return mine;
	h = vgpu__dlopen_real("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		st = NVML_EMPTY;
		if (__atomic_compare_exchange_n(&nvml_state, &st, NVML_MISSING,
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			vgpu_log(VGPU_LOG_ERROR,
				 "libnvidia-ml.so.1 not found: NVML memory "
				 "queries fail with "
				 "NVML_ERROR_LIBRARY_NOT_FOUND");
		return mine;
	}
	/* The real dlsym: ours would hand back these very hooks. */
	real_dlsym = vgpu__dlsym_real();
	for (size_t i = 0; i < sizeof(nvml_rows) / sizeof(nvml_rows[0]); i++)
		*(void **)((char *)mine + nvml_rows[i].offset) =
			real_dlsym ? real_dlsym(h, nvml_rows[i].symbol) : NULL;
	st = NVML_EMPTY;
	if (__atomic_compare_exchange_n(&nvml_state, &st, NVML_WRITING, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* The published copy keeps this reference to NVML. */
		nvml_pub = *mine;
		__atomic_store_n(&nvml_state, NVML_READY, __ATOMIC_RELEASE);
		return &nvml_pub;
	}
	/* Another thread published (or is publishing) the same library,
	 * loaded for good: this thread's reference goes, its copy stays
	 * valid. */
	dlclose(h);
	return mine;
}

/* The CUDA ordinal of NVML's device, or -1 if CUDA does not see it. */
static int ordinal_of(const struct nvml_fns *nv, nvmlDevice_t dev,
		      const char *uuid)
{
	const struct vgpu_dev *dv = vgpu__dev_by_uuid(uuid);
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	unsigned idx = 0;
	bool have_idx;
	int ord = 0;

	if (dv)
		return dv->ordinal;
	have_idx = nv->index && nv->index(dev, &idx) == NVML_SUCCESS;
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

/* The slice this process's tenant has of NVML's device, if any. */
struct slice {
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	uint64_t limit;		/* device bytes; VGPU_LEDGER_UNLIMITED: none */
	uint64_t used;		/* the tenant's charge */
};

/* Whether dev is in a slice (a memory limit or a compute share on it), in
 * the terms the ledger holds for the tenant when it has them (a later
 * process runs under the tenant's terms, whatever its own options say),
 * else in this process's options. Every view here asks this one
 * question, so the memory view and the process lists always agree. */
static bool said_unread;	/* atomic */

static bool slice_of(const struct nvml_fns *nv, nvmlDevice_t dev,
		     struct slice *s)
{
	const struct vgpu_options *o = vgpu__options();
	char err[768];
	const struct vgpu_ledger_tenant *t;
	const struct vgpu_dev *dv;
	uint64_t u = 0, l = 0;
	uint32_t share;
	bool capped;
	int ord;

	err[0] = '\0';
	if (o->disable || !nv->uuid ||
	    nv->uuid(dev, s->uuid, sizeof(s->uuid)) != NVML_SUCCESS)
		return false;
	s->uuid[sizeof(s->uuid) - 1] = '\0';
	ord = ordinal_of(nv, dev, s->uuid);
	if (ord < 0)
		return false;
	s->limit = vgpu__options_memory_limit(o, (unsigned)ord);
	s->used = 0;
	capped = vgpu__options_compute_limit(o, (unsigned)ord) < 100;
	dv = vgpu__dev_by_uuid(s->uuid);
	if (dv && dv->slot) {
		s->used = vgpu_ledger_tenant_used(dv->slot);
		s->limit = vgpu_ledger_tenant_limit(dv->slot);
		t = vgpu_ledger_tenant_record(dv->slot);
		share = t ? __atomic_load_n(&t->compute.share_pct,
					    __ATOMIC_RELAXED)
			  : 0;
		capped = share > 0 && share < 100;
	} else if (vgpu_ledger_peek_tenant(o->ledger_dir, s->uuid,
					   o->ledger_group, o->tenant,
					   &u, &l, &share, err,
					   sizeof(err)) == 0) {
		/* The tenant's terms, as for a process that joined: a
		 * monitor started without the job's VGPU_COMPUTE_LIMIT saw
		 * the whole device, other tenants' processes included (a
		 * hostile review). */
		s->used = u;
		s->limit = l;
		capped = share > 0 && share < 100;
	} else if (err[0] &&
		   !__atomic_exchange_n(&said_unread, true, __ATOMIC_RELAXED)) {
		/* A view that cannot read its ledger (a group that does not
		 * exist, a file it does not trust) showed this process's own
		 * terms without a word (a hostile review). */
		vgpu_log(VGPU_LOG_WARN, "NVML views: %s; they show this "
			 "process's own limits instead", err);
	}
	return s->limit != VGPU_LEDGER_UNLIMITED || capped;
}

/* Rewrites total/free/used for the slice, if dev is in one smaller than
 * the device (a larger slice, or a compute share alone, leaves NVML's
 * numbers: the device is what bounds the job). */
static void to_slice(const struct nvml_fns *nv, nvmlDevice_t dev,
		     unsigned long long *total, unsigned long long *free,
		     unsigned long long *used, unsigned long long reserved)
{
	struct slice s;

	if (!slice_of(nv, dev, &s) || s.limit >= *total)
		return;
	*total = s.limit;
	*used = s.used < s.limit ? s.used : s.limit;
	*free = s.limit - *used > reserved ? s.limit - *used - reserved : 0;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
						 nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct nvml_fns mine;
	const struct nvml_fns *nv = nvml_get(&mine);
	nvmlReturn_t r;

	if (!nv->mem)
		return NVML_ERROR_LIBRARY_NOT_FOUND;
	r = nv->mem(device, memory);
	if (r == NVML_SUCCESS && memory)
		to_slice(nv, device, &memory->total, &memory->free,
			 &memory->used, 0);
	return r;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
						    nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
					nvmlMemory_v2_t *memory)
{
	struct nvml_fns mine;
	const struct nvml_fns *nv = nvml_get(&mine);
	nvmlReturn_t r;

	if (!nv->mem_v2)
		return NVML_ERROR_LIBRARY_NOT_FOUND;
	r = nv->mem_v2(device, memory);
	if (r == NVML_SUCCESS && memory)
		to_slice(nv, device, &memory->total, &memory->free,
			 &memory->used, memory->reserved);
	return r;
}

/* ---- the process lists -------------------------------------------------- */

/* The tenant's processes on the GPU `uuid`, from its ledger: their count,
 * 0 when none (or no ledger). */
static unsigned tenant_procs(const char *uuid, struct vgpu_ledger_proc *p)
{
	const struct vgpu_options *o = vgpu__options();
	unsigned n = 0;

	if (vgpu_ledger_peek_procs(o->ledger_dir, uuid, o->ledger_group,
				   o->tenant, p, VGPU_NVML_PROCS, &n) != 0)
		return 0;
	return n < VGPU_NVML_PROCS ? n : VGPU_NVML_PROCS;
}

/* In a slice, the processes are the tenant's, each with what the ledger
 * charges it, by NVML's two calls; elsewhere NVML's own list. Each is
 * named by the pid that names it in this process's pid namespace (its
 * own, as the job sees itself, or its host pid seen from the host); one
 * no pid here names (another container's) is listed with pid 0, so that
 * two containers' pid 1 do not both show as this namespace's pid 1. */
static nvmlReturn_t procs(const struct nvml_fns *nv, nvmlDevice_t dev,
			  unsigned *count, void *infos, size_t each,
			  bool graphics,
			  nvmlReturn_t (*real)(nvmlDevice_t, unsigned *,
					       void *))
{
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	struct slice s;
	unsigned n = 0;

	if (!real)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	if (!count || !slice_of(nv, dev, &s))
		return real(dev, count, infos);
	if (!graphics)
		n = tenant_procs(s.uuid, p);
	if (n > *count || (n && !infos)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++) {
		char *at = (char *)infos + (size_t)i * each;

		if (each == sizeof(nvmlProcessInfo_v1_t))
			*(nvmlProcessInfo_v1_t *)at = (nvmlProcessInfo_v1_t){
				(unsigned)p[i].here, p[i].device_bytes };
		else
			*(nvmlProcessInfo_v2_t *)at = (nvmlProcessInfo_v2_t){
				(unsigned)p[i].here, p[i].device_bytes, ~0u,
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
	struct nvml_fns mine;						\
	const struct nvml_fns *nv = nvml_get(&mine);			\
									\
	return procs(nv, device, count, infos, sizeof(type), graphics,	\
		     (nvmlReturn_t (*)(nvmlDevice_t, unsigned *,	\
				       void *))nv->field);		\
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
		if ((unsigned)(p[i].host_pid ? p[i].host_pid : p[i].pid) == pid ||
		    (p[i].here && (unsigned)p[i].here == pid))
			return true;
	return false;
}


/* The tenant's share of the device over the last sample period: the sum
 * of NVML's own per-process samples (SM and memory) of the tenant's
 * processes, at most 100. No sample in the period: the tenant was idle. */
static nvmlReturn_t tenant_util(const struct nvml_fns *nv, nvmlDevice_t dev,
				const char *uuid, nvmlUtilization_t *util)
{
	nvmlProcessUtilizationSample_t s[VGPU_NVML_PROCS];
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	unsigned ns = VGPU_NVML_PROCS, np, gpu = 0, mem = 0;
	nvmlReturn_t r;

	if (!nv->proc_util)
		return NVML_ERROR_NOT_SUPPORTED;
	np = tenant_procs(uuid, p);
	r = nv->proc_util(dev, s, &ns, now_us() - VGPU_NVML_UTIL_PERIOD_US);
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
	struct nvml_fns mine;
	const struct nvml_fns *nv = nvml_get(&mine);
	struct slice s;
	nvmlReturn_t r;

	if (!nv->util)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	/* NVML checks the device and its support first. */
	r = nv->util(device, utilization);
	if (r != NVML_SUCCESS || !slice_of(nv, device, &s))
		return r;
	return tenant_util(nv, device, s.uuid, utilization);
}

/* In a slice, only the tenant's processes' samples (in NVML's order). */
VGPU_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
	nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
	unsigned int *count, unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetProcessUtilization(
	nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
	unsigned int *count, unsigned long long lastSeenTimeStamp)
{
	struct vgpu_ledger_proc p[VGPU_NVML_PROCS];
	struct nvml_fns mine;
	const struct nvml_fns *nv = nvml_get(&mine);
	unsigned kept = 0, np;
	struct slice s;
	nvmlReturn_t r;

	nvmlProcessUtilizationSample_t mine_s[UTIL_SAMPLES], *all = mine_s;
	unsigned n = UTIL_SAMPLES;

	if (!nv->proc_util)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	if (!count || !slice_of(nv, device, &s))
		return nv->proc_util(device, utilization, count,
				     lastSeenTimeStamp);
	/* In a slice the samples are read whole and filtered before the
	 * caller's buffer is looked at: the sizing call (no buffer, or one
	 * too small) answered with the device's count, every tenant's
	 * processes, not the tenant's (a hostile review). */
	r = nv->proc_util(device, all, &n, lastSeenTimeStamp);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE && n > UTIL_SAMPLES &&
	    (all = calloc(n, sizeof(*all))))
		r = nv->proc_util(device, all, &n, lastSeenTimeStamp);
	if (r != NVML_SUCCESS) {
		if (all != mine_s)
			free(all);
		return r == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_ERROR_UNKNOWN
							 : r;
	}
	np = tenant_procs(s.uuid, p);
	for (unsigned i = 0; i < n; i++)
		if (tenant_pid(p, np, all[i].pid))
			all[kept++] = all[i];
	if (!utilization || *count < kept) {
		r = kept ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND;
	} else {
		memcpy(utilization, all, kept * sizeof(*all));
		r = kept ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
	}
	*count = kept;
	if (all != mine_s)
		free(all);
	return r;
}

/* ---- the dlsym catch (the jump is in trampolines.S) ---------------------- */

/* pynvml, nvitop, gpustat and PyTorch dlopen libnvidia-ml.so.1 and look
 * its functions up in that handle (ctypes likewise), which finds NVML's
 * own, not the ones this library exports in front of them. dlsym is caught
 * here: a name of the NVML functions hooked here, looked up in the real
 * NVML's handle, gets the hook if that NVML has the function; everything
 * else goes to the real dlsym unchanged (by a tail jump, so RTLD_NEXT keeps
 * meaning the caller's). Nothing here waits on another thread: dlsym is
 * called with the loader's lock held (constructors), so a wait here for a
 * thread that waits for that lock would hang the program. */
static const struct {
	const char *name;
	void *hook;
} nvml_hooks[] = {
#define NVML_HOOK(sym) { #sym, (void *)sym }
	NVML_HOOK(nvmlDeviceGetMemoryInfo),
	NVML_HOOK(nvmlDeviceGetMemoryInfo_v2),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses_v2),
	NVML_HOOK(nvmlDeviceGetComputeRunningProcesses_v3),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v2),
	NVML_HOOK(nvmlDeviceGetGraphicsRunningProcesses_v3),
	NVML_HOOK(nvmlDeviceGetUtilizationRates),
	NVML_HOOK(nvmlDeviceGetProcessUtilization),
#undef NVML_HOOK
};

/* A lookup of an "nvml" name in some handle: the hook if the handle is the
 * loaded NVML's and it has the name, else NULL. */
static __attribute__((noinline)) void *nvml_catch(void *handle,
						  const char *name)
{
	void *(*real_dlsym)(void *, const char *) = vgpu__real_dlsym;
	size_t i, n = sizeof(nvml_hooks) / sizeof(nvml_hooks[0]);
	void *loaded;

	for (i = 0; i < n && strcmp(name, nvml_hooks[i].name) != 0; i++)
		;
	if (i == n)
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
	/* A function this NVML lacks stays missing, as without the shim. */
	return real_dlsym(handle, name) ? nvml_hooks[i].hook : NULL;
}

/* Every dlsym of the process comes here first, the sanitizers' start-up's
 * included: uninstrumented up to the name's first four bytes, which no
 * sanitizer looks up. */
VGPU_UNINSTRUMENTED void *vgpu__dlsym_name(void *handle, const char *name)
{
	if (!vgpu__dlsym_real() || !vgpu__name_starts(name, "nvml") ||
	    handle == RTLD_DEFAULT || handle == RTLD_NEXT)
		return NULL;
	return nvml_catch(handle, name);
}
