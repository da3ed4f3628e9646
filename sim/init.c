/* init.c - the simulator's global state: cuInit, version, errors, fork, time.
 *
 * This file owns the fork handler and the destructor.
 */
#include "sim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

struct vsim_global vsim_g;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t grave_lock = PTHREAD_MUTEX_INITIALIZER;
static void **graves;
static size_t graves_len, graves_cap;

static const struct { int value; const char *name, *text; } errors[] = {
#include "errors_table.h"
};

void vsim_log(const char *fmt, ...)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "vgpu-sim[%d]: ", (int)getpid());
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(buf);
	buf[n++] = '\n';
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

void vsim_graveyard_add(void *p)
{
	pthread_mutex_lock(&grave_lock);
	if (graves_len == graves_cap) {
		size_t cap = graves_cap ? graves_cap * 2 : 64;
		void **g = realloc(graves, cap * sizeof(*g));
		if (!g)
			goto out;	/* it stays allocated, merely unreachable */
		graves = g;
		graves_cap = cap;
	}
	graves[graves_len++] = p;
out:
	pthread_mutex_unlock(&grave_lock);
}

uint64_t vsim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps to shortly before the deadline, then spins: nanosleep alone
 * overshoots by tens of microseconds. */
void vsim_busy_until(uint64_t deadline_ns)
{
	static _Thread_local bool slack_set;
	const uint64_t spin_ns = 60000;
	uint64_t now = vsim_now_ns();

	if (!slack_set) {
		prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
		slack_set = true;
	}
	if (deadline_ns > now + spin_ns) {
		uint64_t wake = deadline_ns - spin_ns;
		struct timespec ts = { (time_t)(wake / 1000000000ull),
				       (long)(wake % 1000000000ull) };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts,
				       NULL) == EINTR)
			;
	}
	while (vsim_now_ns() < deadline_ns)
		;
	vsim_host_late();
}

void vsim_host_late(void)
{
	uint64_t late = vsim_g.cfg.host_late_ns;
	struct timespec ts = { (time_t)(late / 1000000000ull),
			       (long)(late % 1000000000ull) };

	if (late)
		while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
			;
}

bool vsim_fail_now(enum vsim_fail_kind kind)
{
	uint64_t n = atomic_fetch_add(&vsim_g.fail_count[kind], 1) + 1;

	return vsim_fail_hit(&vsim_g.cfg.fail[kind], n);
}

CUresult vsim_check_init(void)
{
	if (!vsim_g.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	return vsim_g.init_result;
}

CUresult vsim_check_device(CUdevice dev)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dev < 0 || dev >= vsim_g.cfg.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

/* Set by the simulated HIP runtime before its cuInit. */
static bool hip_process;

/* A stable UUID per (name, ordinal): FNV-1a spread over 16 bytes. */
void vsim_device_uuid_make(const char *name, int ordinal, CUuuid *out)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	h = (h ^ (uint64_t)ordinal) * 0x100000001b3ull;
	for (int b = 0; b < 16; b++) {
		h = (h ^ (uint64_t)b) * 0x100000001b3ull;
		out->bytes[b] = (char)(h >> 24);
	}
}

/* Ordinal i is physical device phys (CUDA_VISIBLE_DEVICES). */
static void setup_device(int i, int phys)
{
	struct vsim_device *d = &vsim_g.dev[i];

	d->ordinal = i;
	d->physical = phys;
	vsim_device_uuid_make(vsim_g.cfg.name, phys, &d->uuid);
	snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "00000000:%02X:00.0",
		 0x10 + phys);
	pthread_mutex_init(&d->primary_lock, NULL);
}

/* Devices list[0..n) (physical) narrowed to those spec names (NULL: all),
 * in its order; an entry is an index into the list or a UUID, as for
 * CUDA_VISIBLE_DEVICES. Returns the new count. */
static int narrow(const char *spec, int *list, int n)
{
	char uuids[VSIM_MAX_DEVICES][VSIM_UUID_STRLEN];
	int pos[VSIM_MAX_DEVICES], was[VSIM_MAX_DEVICES], m;

	if (!spec)
		return n;
	for (int i = 0; i < n; i++) {
		CUuuid u;
		vsim_device_uuid_make(vsim_g.cfg.name, list[i], &u);
		vsim_uuid_format(&u, uuids[i]);
		was[i] = list[i];
	}
	m = vsim_visible_parse(spec, n, uuids, pos, VSIM_MAX_DEVICES);
	for (int i = 0; i < m; i++)
		list[i] = was[pos[i]];
	return m;
}

/* The physical devices visible, in ordinal order; returns their count.
 * With VGPU_SIM_HIP_DEVICES=N the last N devices are AMD ones: the HIP
 * runtime's process sees only those, narrowed by ROCR_VISIBLE_DEVICES
 * then HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES, as AMD's HIP);
 * a CUDA process sees the others, narrowed by CUDA_VISIBLE_DEVICES. */
static int visible_devices(int *phys)
{
	int n = vsim_g.cfg.devices, amd = vsim_g.cfg.hip_devices, m = 0;
	const char *hip = getenv("HIP_VISIBLE_DEVICES");

	for (int i = 0; i < n; i++)
		if (amd == 0 || (i >= n - amd) == hip_process)
			phys[m++] = i;
	if (!hip_process)
		return narrow(getenv("CUDA_VISIBLE_DEVICES"), phys, m);
	m = narrow(getenv("ROCR_VISIBLE_DEVICES"), phys, m);
	return narrow(hip ? hip : getenv("CUDA_VISIBLE_DEVICES"), phys, m);
}

VSIM_EXPORT void vsim_hip_process(void)
{
	hip_process = true;
}

static void fork_child(void)
{
	/* The child starts with no driver state, as if freshly loaded: it
	 * may call cuInit again and gets slots of its own. */
	vsim_state_forget();
	vsim_ctx_fork_child();
	vsim_mem_fork_child();
	vsim_graph_fork_child();
	vsim_capture_fork_child();
	vsim_pool_fork_child();
	vsim_vmm_fork_child();
	vsim_managed_fork_child();
	memset(&vsim_g, 0, sizeof(vsim_g));
	pthread_mutex_init(&init_lock, NULL);
}

static CUresult init_once(void)
{
	char err[512];

	if (vsim_config_from_env(&vsim_g.cfg, err, sizeof(err)) != 0) {
		vsim_log("%s", err);
		return CUDA_ERROR_INVALID_VALUE;
	}
	int phys[VSIM_MAX_DEVICES];

	vsim_g.cfg.devices = visible_devices(phys);
	if (vsim_g.cfg.devices == 0)
		return CUDA_ERROR_NO_DEVICE;
	for (int i = 0; i < vsim_g.cfg.devices; i++) {
		setup_device(i, phys[i]);
		if (vsim_state_attach(i) != CUDA_SUCCESS)
			return CUDA_ERROR_OPERATING_SYSTEM;
	}
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuInit(unsigned int flags)
{
	static bool atfork_done;
	CUresult rc;
	int cancel;

	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	cancel = vsim_nocancel_begin();
	pthread_mutex_lock(&init_lock);
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, fork_child);
		atfork_done = true;
	}
	if (!vsim_g.initialized) {
		vsim_g.init_result = init_once();
		vsim_g.initialized = true;
	}
	rc = vsim_g.init_result;
	pthread_mutex_unlock(&init_lock);
	vsim_nocancel_end(cancel);
	return rc;
}

__attribute__((destructor)) static void vsim_fini(void)
{
	if (vsim_g.initialized)
		vsim_state_detach_all();
}

VSIM_EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = VSIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

/* The name (which == 0) or the description of an error code. */
static CUresult error_text(CUresult error, int which, const char **str)
{
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].value == (int)error) {
			*str = which == 0 ? errors[i].name : errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

VSIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
	return error_text(error, 0, str);
}

VSIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
	return error_text(error, 1, str);
}

VSIM_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	(void)id;
	if (table)
		*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
