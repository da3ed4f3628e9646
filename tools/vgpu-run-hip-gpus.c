/* vgpu-run-hip-gpus.c - the AMD/Hygon GPUs for --gpu: listed through the
 * HIP runtime in a probe child (vgpu-run --probe-hip-gpus), keyed as
 * libvgpu-hip.so keys their ledgers (vgpu_device_key: the UUID, else the
 * PCI bus id); and the HIP_VISIBLE_DEVICES that gives a job the one
 * chosen (docs/vgpu-run.md, "Choosing a GPU").
 */
#include "vgpu-run.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "front.h"

/* The runtime's ABI, without its header: hipError_t is an int (0 success,
 * 100 hipErrorNoDevice), hipUUID 16 bytes, a device its ordinal. */
#define HIP_OK		0
#define HIP_NO_DEVICE	100

struct hip_uuid {
	unsigned char bytes[16];
};

struct runtime {
	int (*count)(int *);
	int (*uuid)(struct hip_uuid *, int);
	int (*bus)(char *, int, int);
	int (*total)(size_t *, int);
	const char *(*errname)(int);
};

static int hip_fail(const char *what, const struct runtime *r, int rc)
{
	const char *name = r->errname ? r->errname(rc) : NULL;

	printf(PROBE_ERROR "%s failed: %s (%d)\n", what, name ? name : "unknown",
	       rc);
	return 1;
}

/* driver, when given, is loaded first and globally: the simulated runtime
 * is made of the simulated driver, and its libcuda.so.1 must be that. */
static bool load_runtime(const char *path, const char *driver,
			 struct runtime *r)
{
	void *h;

	if (driver && !dlopen(driver, RTLD_NOW | RTLD_GLOBAL)) {
		printf(PROBE_ERROR "cannot load the driver of the HIP runtime %s: "
		       "%s\n", driver, dlerror());
		return false;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf(PROBE_ERROR "cannot load the HIP runtime %s: %s\n", path,
		       dlerror());
		return false;
	}
	*(void **)&r->count = dlsym(h, "hipGetDeviceCount");
	*(void **)&r->uuid = dlsym(h, "hipDeviceGetUuid");
	*(void **)&r->bus = dlsym(h, "hipDeviceGetPCIBusId");
	*(void **)&r->total = dlsym(h, "hipDeviceTotalMem");
	*(void **)&r->errname = dlsym(h, "hipGetErrorName");
	if (!r->count || !r->bus || !r->total) {
		printf(PROBE_ERROR "%s is not a HIP runtime (hipGetDeviceCount, "
		       "hipDeviceGetPCIBusId or hipDeviceTotalMem missing)\n",
		       path);
		return false;
	}
	return true;
}

int vrun_probe_hip_main(const char *runtime, const char *driver)
{
	char key[VGPU_LEDGER_UUID_MAX], bus[32] = "";
	struct runtime r = { 0 };
	int n = 0, rc;

	if (!load_runtime(runtime, driver, &r))
		return 1;
	rc = r.count(&n);
	if (rc == HIP_NO_DEVICE)
		return 0;
	if (rc != HIP_OK)
		return hip_fail("hipGetDeviceCount", &r, rc);
	for (int d = 0; d < n && d < VRUN_MAX_GPUS; d++) {
		struct hip_uuid u;
		bool named = r.uuid && r.uuid(&u, d) == HIP_OK;
		bool on_bus = false;
		size_t total;

		/* Keyed as libvgpu-hip.so keys it (vgpu_device_key). */
		if (!named || !vgpu_device_uuid_unique(u.bytes)) {
			rc = r.bus(bus, (int)sizeof(bus), d);
			on_bus = rc == HIP_OK;
			if (!named && !on_bus)
				return hip_fail("hipDeviceGetPCIBusId", &r, rc);
		}
		if ((rc = r.total(&total, d)) != HIP_OK)
			return hip_fail("hipDeviceTotalMem", &r, rc);
		vgpu_device_key(named ? u.bytes : NULL, on_bus ? bus : NULL, key,
				sizeof(key));
		printf(PROBE_GPU "%s %zu\n", key, total);
	}
	return 0;
}

int vrun_hip_visible(const char *hip_env, const char *cuda_env,
		     unsigned ordinal, char *out, size_t len)
{
	const char *list = hip_env ? hip_env : cuda_env;
	size_t n;

	if (!list)
		return snprintf(out, len, "%u", ordinal) < (int)len ? 0 : -1;
	for (unsigned i = 0; i < ordinal; i++) {
		list = strchr(list, ',');
		if (!list)
			return -1;
		list++;
	}
	while (*list == ' ' || *list == '\t')
		list++;
	n = strcspn(list, ",");
	while (n && (list[n - 1] == ' ' || list[n - 1] == '\t'))
		n--;
	if (n == 0 || n >= len)
		return -1;
	memcpy(out, list, n);
	out[n] = '\0';
	return 0;
}
