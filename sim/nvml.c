/* nvml.c - libnvidia-ml.so.1 of the simulated GPU: NVML's device and memory
 * queries, answered from the same shared device state as the simulated
 * libcuda (state.c).
 *
 * The library links the simulator's objects but exports only nvml* (its
 * version script, nvml.map); its copy of the simulator's globals is private
 * and never runs cuInit. It reads the VGPU_SIM_* variables at the first
 * nvmlInit, peeks at each device's state file for every memory query
 * without claiming a process slot, and numbers devices physically:
 * CUDA_VISIBLE_DEVICES does not apply to NVML, as with NVIDIA's.
 */
#include "sim.h"
#include "vgpu_nvml_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vgpu_sim_record.h"

/* The driver of CUDA 13.0 (VSIM_DRIVER_VERSION). */
#define NVML_SIM_DRIVER_VERSION "580.65.06"
#define DEVICE_MAGIC 0x4e564d31u
/* Processes listed at most (a device's process slots). */
#define VSIM_NVML_PROCS 256
/* The sample period of the utilisation queries (NVML's is 1/6 s to 1 s,
 * depending on the product). */
#define VSIM_NVML_SAMPLE_NS 1000000000ull

struct nvmlDevice_st {
	uint32_t magic;
	unsigned index;
};

static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_refs;
static struct vsim_config cfg;
static struct nvmlDevice_st devices[VSIM_MAX_DEVICES];

static const char *const error_strings[] = {
	[NVML_SUCCESS] = "Success",
	[NVML_ERROR_UNINITIALIZED] = "Uninitialized",
	[NVML_ERROR_INVALID_ARGUMENT] = "Invalid Argument",
	[NVML_ERROR_NOT_SUPPORTED] = "Not Supported",
	[NVML_ERROR_NO_PERMISSION] = "Insufficient Permissions",
	[NVML_ERROR_ALREADY_INITIALIZED] = "Already Initialized",
	[NVML_ERROR_NOT_FOUND] = "Not Found",
	[NVML_ERROR_INSUFFICIENT_SIZE] = "Insufficient Size",
	[NVML_ERROR_INSUFFICIENT_POWER] = "Insufficient External Power",
	[NVML_ERROR_DRIVER_NOT_LOADED] = "Driver Not Loaded",
	[NVML_ERROR_TIMEOUT] = "Timeout",
	[NVML_ERROR_IRQ_ISSUE] = "Interrupt Request Issue",
	[NVML_ERROR_LIBRARY_NOT_FOUND] = "NVML Shared Library Not Found",
	[NVML_ERROR_FUNCTION_NOT_FOUND] = "Function Not Found",
	[NVML_ERROR_CORRUPTED_INFOROM] = "Corrupted infoROM",
	[NVML_ERROR_GPU_IS_LOST] = "GPU is lost",
	[NVML_ERROR_RESET_REQUIRED] = "GPU requires restart",
	[NVML_ERROR_OPERATING_SYSTEM] = "The operating system has blocked the request",
	[NVML_ERROR_LIB_RM_VERSION_MISMATCH] = "RM has detected an NVML/RM version mismatch",
	[NVML_ERROR_IN_USE] = "In use by another client",
	[NVML_ERROR_MEMORY] = "Insufficient Memory",
	[NVML_ERROR_NO_DATA] = "No data",
	[NVML_ERROR_VGPU_ECC_NOT_ENABLED] = "The requested vGPU operation is not available because ECC is enabled",
	[NVML_ERROR_INSUFFICIENT_RESOURCES] = "Ran out of critical resources, other than memory",
	[NVML_ERROR_FREQ_NOT_SUPPORTED] = "The requested frequency is not supported",
	[NVML_ERROR_ARGUMENT_VERSION_MISMATCH] = "The provided version is invalid or unsupported",
	[NVML_ERROR_DEPRECATED] = "The requested functionality has been deprecated",
	[NVML_ERROR_NOT_READY] = "The system is not ready for the request",
	[NVML_ERROR_GPU_NOT_FOUND] = "The GPU was not found",
	[NVML_ERROR_INVALID_STATE] = "The resource is in an invalid state",
};

static bool initialized(void)
{
	bool yes;

	pthread_mutex_lock(&nvml_lock);
	yes = init_refs > 0;
	pthread_mutex_unlock(&nvml_lock);
	return yes;
}

/* The device behind a handle, or NULL when it is not one of ours. */
static const struct nvmlDevice_st *device_of(nvmlDevice_t h)
{
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)devices;

	if (p < base || p >= base + sizeof(devices) ||
	    (p - base) % sizeof(devices[0]) != 0)
		return NULL;
	if (h->magic != DEVICE_MAGIC || h->index >= (unsigned)cfg.devices)
		return NULL;
	return h;
}

/* Common entry checks of the device queries. */
static nvmlReturn_t check_device(nvmlDevice_t h, const void *out,
				 const struct nvmlDevice_st **d)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	*d = device_of(h);
	if (!*d || !out)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned len, const char *src)
{
	size_t n = strlen(src);

	if (n + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, n + 1);
	return NVML_SUCCESS;
}

/* The UUIDs are made at init, as the simulated libcuda makes them. */
static void uuid_string(unsigned index, char *out, size_t len)
{
	vsim_device_uuid_string((int)index, out, len);
}

/* Reads the configuration as the simulated libcuda's cuInit does. */
static nvmlReturn_t init_first(void)
{
	char err[512];

	if (vsim_config_from_env(&cfg, err, sizeof(err)) != 0) {
		vsim_log("%s", err);
		return NVML_ERROR_UNKNOWN;
	}
	for (int i = 0; i < VSIM_MAX_DEVICES; i++) {
		devices[i] = (struct nvmlDevice_st){ DEVICE_MAGIC, (unsigned)i };
		vsim_device_uuid_make(cfg.name, i, &vsim_g.dev[i].uuid);
	}
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	if (flags & ~(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&nvml_lock);
	if (init_refs == 0)
		rc = init_first();
	if (rc == NVML_SUCCESS)
		init_refs++;
	pthread_mutex_unlock(&nvml_lock);
	return rc;
}

VSIM_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

/* Each successful init is matched by one shutdown; the last one ends it. */
VSIM_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t rc = NVML_SUCCESS;

	pthread_mutex_lock(&nvml_lock);
	if (init_refs == 0)
		rc = NVML_ERROR_UNINITIALIZED;
	else
		init_refs--;
	pthread_mutex_unlock(&nvml_lock);
	return rc;
}

VSIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	if ((unsigned)result < sizeof(error_strings) / sizeof(error_strings[0]) &&
	    error_strings[result])
		return error_strings[result];
	return "Unknown Error";
}

VSIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version,
						     unsigned int length)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_string(version, length, NVML_SIM_DRIVER_VERSION);
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned)cfg.devices;
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
							nvmlDevice_t *device)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= (unsigned)cfg.devices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid,
						    nvmlDevice_t *device)
{
	char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < (unsigned)cfg.devices; i++) {
		uuid_string(i, s, sizeof(s));
		if (strcmp(s, uuid) == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
					    unsigned int length)
{
	const struct nvmlDevice_st *d;
	char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	nvmlReturn_t rc = check_device(device, uuid, &d);

	if (rc != NVML_SUCCESS)
		return rc;
	uuid_string(d->index, s, sizeof(s));
	return copy_string(uuid, length, s);
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
					    unsigned int length)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t rc = check_device(device, name, &d);

	if (rc != NVML_SUCCESS)
		return rc;
	return copy_string(name, length, cfg.name);
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device,
					     unsigned int *index)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t rc = check_device(device, index, &d);

	if (rc != NVML_SUCCESS)
		return rc;
	*index = d->index;
	return NVML_SUCCESS;
}

/* The device's capacity and the memory all its processes use. */
static nvmlReturn_t read_memory(const struct nvmlDevice_st *d,
				uint64_t *total, uint64_t *used)
{
	if (vsim_state_peek(cfg.state_dir, (int)d->index, cfg.memory, total,
			    used) != CUDA_SUCCESS)
		return NVML_ERROR_UNKNOWN;
	if (*used > *total)
		*used = *total;
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
						  nvmlMemory_t *memory)
{
	const struct nvmlDevice_st *d;
	uint64_t total, used;
	nvmlReturn_t rc = check_device(device, memory, &d);

	if (rc == NVML_SUCCESS)
		rc = read_memory(d, &total, &used);
	if (rc != NVML_SUCCESS)
		return rc;
	memory->total = total;
	memory->used = used;
	memory->free = total - used;
	return NVML_SUCCESS;
}

/* No memory is reserved for the (simulated) driver and firmware. */
VSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
						     nvmlMemory_v2_t *memory)
{
	const struct nvmlDevice_st *d;
	uint64_t total, used;
	nvmlReturn_t rc = check_device(device, memory, &d);

	if (rc != NVML_SUCCESS)
		return rc;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	rc = read_memory(d, &total, &used);
	if (rc != NVML_SUCCESS)
		return rc;
	memory->total = total;
	memory->reserved = 0;
	memory->used = used;
	memory->free = total - used;
	return NVML_SUCCESS;
}

/* ---- unversioned names ------------------------------------------------------ */

/* The real library still exports the first versions, which older programs
 * (and HAMi-core) call by name; they behave as the current ones here. */
VSIM_EXPORT nvmlReturn_t nvmlInit(void)
{
	return nvmlInitWithFlags(0);
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
	return nvmlDeviceGetCount_v2(count);
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
						     nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* The CUDA version of the (simulated) driver, as cuDriverGetVersion says. */
VSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	*version = VSIM_DRIVER_VERSION;
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	return nvmlSystemGetCudaDriverVersion(version);
}

/* ---- processes ------------------------------------------------------------ */

/* The processes with a context on d, from its state file: each is a
 * compute process; a simulated device runs no graphics. NVML's contract:
 * *count in is the room in infos; out, the entries written, or with
 * NVML_ERROR_INSUFFICIENT_SIZE the room needed (infos may be NULL to ask). */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned *count,
			      void *infos, size_t each, bool graphics)
{
	struct vsim_proc_use p[VSIM_NVML_PROCS];
	const struct nvmlDevice_st *d;
	nvmlReturn_t rc = check_device(device, count, &d);
	long n;

	if (rc != NVML_SUCCESS)
		return rc;
	n = graphics ? 0 : vsim_state_procs(cfg.state_dir, (int)d->index, p,
					    VSIM_NVML_PROCS);
	if (n < 0)
		return NVML_ERROR_UNKNOWN;
	if (n > VSIM_NVML_PROCS)
		n = VSIM_NVML_PROCS;
	if ((unsigned long)n > *count || (n && !infos)) {
		*count = (unsigned)n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (long i = 0; i < n; i++) {
		char *at = (char *)infos + (size_t)i * each;

		if (each == sizeof(nvmlProcessInfo_v1_t)) {
			*(nvmlProcessInfo_v1_t *)at = (nvmlProcessInfo_v1_t){
				(unsigned)p[i].pid, p[i].used };
		} else {
			*(nvmlProcessInfo_v2_t *)at = (nvmlProcessInfo_v2_t){
				(unsigned)p[i].pid, p[i].used, ~0u, ~0u };
		}
	}
	*count = (unsigned)n;
	return NVML_SUCCESS;
}

#define PROCESS_QUERIES(kind, graphics)					\
VSIM_EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses(		\
	nvmlDevice_t device, unsigned int *count,			\
	nvmlProcessInfo_v1_t *infos)					\
{									\
	return processes(device, count, infos, sizeof(*infos), graphics); \
}									\
VSIM_EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v2(	\
	nvmlDevice_t device, unsigned int *count,			\
	nvmlProcessInfo_v2_t *infos)					\
{									\
	return processes(device, count, infos, sizeof(*infos), graphics); \
}									\
VSIM_EXPORT nvmlReturn_t nvmlDeviceGet##kind##RunningProcesses_v3(	\
	nvmlDevice_t device, unsigned int *count,			\
	nvmlProcessInfo_v2_t *infos)					\
{									\
	return processes(device, count, infos, sizeof(*infos), graphics); \
}

PROCESS_QUERIES(Compute, false)
PROCESS_QUERIES(Graphics, true)

/* ---- utilisation ---------------------------------------------------------- */

/* The device's record over the last VSIM_NVML_SAMPLE_NS: each kernel's
 * SM-weighted time inside the window, summed per pid (pid 0: all), in
 * percent of the window (at most 100). Memory traffic is not simulated. */
static nvmlReturn_t busy_percent(const struct nvmlDevice_st *d, int32_t pid,
				 uint64_t now, unsigned *pct)
{
	const size_t max = 16384;
	struct vsim_interval *iv = malloc(max * sizeof(*iv));
	struct vsim_record_info info;
	uint64_t from = now - VSIM_NVML_SAMPLE_NS;
	double busy = 0;
	long n;

	if (!iv)
		return NVML_ERROR_MEMORY;
	n = vsim_record_read(cfg.state_dir, (int)d->index, iv, max, &info);
	for (long i = 0; i < n && info.sm_total; i++) {
		uint64_t s = iv[i].start_ns > from ? iv[i].start_ns : from;
		uint64_t e = iv[i].end_ns < now ? iv[i].end_ns : now;

		if (e > s && (!pid || iv[i].pid == pid))
			busy += (double)(e - s) * iv[i].sms / info.sm_total;
	}
	free(iv);
	busy = busy * 100 / (double)VSIM_NVML_SAMPLE_NS;
	*pct = busy >= 100 ? 100 : (unsigned)(busy + 0.5);
	return NVML_SUCCESS;
}

VSIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(
	nvmlDevice_t device, nvmlUtilization_t *util)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t rc = check_device(device, util, &d);

	if (rc != NVML_SUCCESS)
		return rc;
	util->memory = 0;
	return busy_percent(d, 0, vsim_now_ns(), &util->gpu);
}

/* One sample per process with a context, over the last sample period, if
 * lastSeen (CPU microseconds) is older than now; none: NVML_ERROR_NOT_FOUND,
 * as the real library answers when it has no samples since lastSeen. */
VSIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
	nvmlDevice_t device, nvmlProcessUtilizationSample_t *samples,
	unsigned int *count, unsigned long long lastSeen)
{
	struct vsim_proc_use p[VSIM_NVML_PROCS];
	const struct nvmlDevice_st *d;
	nvmlReturn_t rc = check_device(device, count, &d);
	uint64_t now = vsim_now_ns();
	struct timespec ts;
	unsigned long long stamp;
	long n;

	if (rc != NVML_SUCCESS)
		return rc;
	clock_gettime(CLOCK_REALTIME, &ts);
	stamp = (unsigned long long)ts.tv_sec * 1000000ull +
		(unsigned long long)ts.tv_nsec / 1000;
	n = vsim_state_procs(cfg.state_dir, (int)d->index, p, VSIM_NVML_PROCS);
	if (n < 0)
		return NVML_ERROR_UNKNOWN;
	if (n > VSIM_NVML_PROCS)
		n = VSIM_NVML_PROCS;
	if (n == 0 || lastSeen >= stamp)
		return NVML_ERROR_NOT_FOUND;
	if (!samples || *count < (unsigned)n) {
		*count = (unsigned)n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (long i = 0; i < n; i++) {
		samples[i] = (nvmlProcessUtilizationSample_t){
			.pid = (unsigned)p[i].pid, .timeStamp = stamp };
		rc = busy_percent(d, p[i].pid, now, &samples[i].smUtil);
		if (rc != NVML_SUCCESS)
			return rc;
	}
	*count = (unsigned)n;
	return NVML_SUCCESS;
}
