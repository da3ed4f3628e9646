/* nvml.c - NVML's memory info reports the slice.
 *
 * nvmlDeviceGetMemoryInfo and _v2 are exported by libvgpu.so, so a program
 * linked against libnvidia-ml.so.1 (nvidia-smi, monitoring agents) gets
 * them in front of NVML's own once libvgpu.so is preloaded. The real NVML
 * answers first; then, for a GPU this process has a slice of, total becomes
 * the slice, used the tenant's usage from the ledger, free what is left.
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

static void load_nvml(void)
{
	void *h = vgpu__dlopen_real("libnvidia-ml.so.1",
				    RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		vgpu_log(VGPU_LOG_ERROR, "libnvidia-ml.so.1 not found: NVML "
			 "memory queries fail with NVML_ERROR_LIBRARY_NOT_FOUND");
		return;
	}
	for (size_t i = 0; i < sizeof(nvml_rows) / sizeof(nvml_rows[0]); i++)
		*(void **)((char *)&nvml + nvml_rows[i].offset) =
			dlsym(h, nvml_rows[i].symbol);
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
