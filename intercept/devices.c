/* devices.c - each CUDA device's place in the ledger.
 *
 * Devices are CUDA ordinals (after CUDA_VISIBLE_DEVICES, which the driver
 * applies): the one index space of every option, view and hook. Each is
 * tied to the ledger of its physical GPU (by UUID) on first use: the file
 * is opened, the tenant joined, a slot claimed. The ready state is read
 * with one atomic load on the hot path; attaching takes a mutex, never held
 * across a driver call.
 */
#include "devices.h"
#include "ledger.h"
#include "throttle.h"
#include "track.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct vgpu_dev devs[VGPU_MAX_DEVICES];
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t host_pid = -1;

static void uuid_string(const CUuuid *u, char *out, size_t len)
{
	const unsigned char *b = (const unsigned char *)u->bytes;

	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
		 b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
}

/* VGPU_OVERCOMMIT for this device; auto: host paging where the driver can
 * map host memory for the device, else managed memory, else off. */
static int overcommit_mode(const struct vgpu_options *o, int ordinal)
{
	int host = 0, managed = 0;

	if (o->overcommit != VGPU_OVERCOMMIT_AUTO)
		return o->overcommit;
	if (vgpu__real.cuDeviceGetAttribute) {
		vgpu__real.cuDeviceGetAttribute(&host,
			CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
			ordinal);
		vgpu__real.cuDeviceGetAttribute(&managed,
			CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, ordinal);
	}
	int mode = host ? VGPU_OVERCOMMIT_HOST
			: managed ? VGPU_OVERCOMMIT_MANAGED : VGPU_OVERCOMMIT_OFF;
	vgpu_log(VGPU_LOG_INFO, "device %d: VGPU_OVERCOMMIT=auto: %s", ordinal,
		 mode == VGPU_OVERCOMMIT_HOST ? "host"
		 : mode == VGPU_OVERCOMMIT_MANAGED ? "managed" : "off (the "
		 "driver has neither host-located VMM nor managed memory)");
	return mode;
}

/* The device's ledger slot, joined now. Called with attach_lock held. */
static void attach(struct vgpu_dev *dv, int ordinal, const char *uuid,
		   uint64_t physical)
{
	const struct vgpu_options *o = vgpu__options();
	char err[512];
	int r;

	dv->physical = physical;
	snprintf(dv->uuid, sizeof(dv->uuid), "%s", uuid);
	dv->ordinal = ordinal;
	if (o->disable) {
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return;
	}
	if (host_pid < 0)
		host_pid = vgpu_host_pid();
	err[0] = '\0';
	r = vgpu_ledger_open(o->ledger_dir, uuid, physical, &dv->ledger, err,
			     sizeof(err));
	if (r == 0) {
		r = vgpu_ledger_join(dv->ledger, o->tenant,
				     vgpu__options_memory_limit(o, (unsigned)ordinal),
				     (int32_t)getpid(), host_pid, &dv->slot,
				     err, sizeof(err));
		if (r == VGPU_LEDGER_LIMIT_CHANGED) {
			vgpu_log(VGPU_LOG_WARN, "device %d: %s", ordinal, err);
			r = 0;
		}
		if (r != 0) {
			vgpu_ledger_close(dv->ledger);
			dv->ledger = NULL;
		}
	}
	if (r == 0) {
		dv->overcommit = overcommit_mode(o, ordinal);
		if (dv->overcommit != VGPU_OVERCOMMIT_OFF)
			vgpu_ledger_set_spill_limit(dv->slot,
						    o->host_spill_limit);
		dv->share = vgpu__options_compute_limit(o, (unsigned)ordinal);
		dv->policy = o->compute_policy;
		dv->capped = dv->share < 100 && dv->policy != VGPU_POLICY_OFF;
		dv->spatial = dv->capped &&
			      o->compute_mode == VGPU_MODE_SPATIAL;
		if (dv->capped)
			vgpu_throttle_configure(dv->slot, dv->share, dv->policy,
						vgpu__mono_ns());
		vgpu_log(VGPU_LOG_INFO, "device %d (%s): tenant %s, ledger %s",
			 ordinal, uuid, o->tenant,
			 vgpu_ledger_path(dv->ledger));
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return;
	}
	if (o->on_error == VGPU_ON_ERROR_WARN) {
		vgpu_log(VGPU_LOG_WARN, "device %d: %s; VGPU_ON_ERROR=warn: "
			 "going on without a limit on it", ordinal, err);
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return;
	}
	vgpu_log(VGPU_LOG_ERROR, "device %d: %s; refusing the device (set "
		 "VGPU_ON_ERROR=warn to use it without a limit)", ordinal, err);
	__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
}

struct vgpu_dev *vgpu__dev_attach(CUdevice d)
{
	struct vgpu_dev *dv;
	char uuid[VGPU_LEDGER_UUID_MAX];
	CUuuid u;
	size_t total = 0;

	if (d < 0 || d >= VGPU_MAX_DEVICES)
		return NULL;
	dv = &devs[d];
	/* The allocation path: one load once the device is attached. */
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) != VGPU_DEV_NEW)
		return dv;
	if (!vgpu__track_init())
		return NULL;
	/* Driver calls first, then the lock. */
	if (!vgpu__real.cuDeviceGetUuid_v2 || !vgpu__real.cuDeviceTotalMem_v2 ||
	    vgpu__real.cuDeviceGetUuid_v2(&u, d) != CUDA_SUCCESS ||
	    vgpu__real.cuDeviceTotalMem_v2(&total, d) != CUDA_SUCCESS)
		return NULL;
	uuid_string(&u, uuid, sizeof(uuid));
	pthread_mutex_lock(&attach_lock);
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) == VGPU_DEV_NEW)
		attach(dv, d, uuid, total);
	pthread_mutex_unlock(&attach_lock);
	return dv;
}

struct vgpu_dev *vgpu__dev_peek(int ordinal)
{
	if (ordinal < 0 || ordinal >= VGPU_MAX_DEVICES)
		return NULL;
	return __atomic_load_n(&devs[ordinal].state, __ATOMIC_ACQUIRE) ==
	       VGPU_DEV_READY ? &devs[ordinal] : NULL;
}

struct vgpu_dev *vgpu__dev_by_uuid(const char *uuid)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = vgpu__dev_peek(i);
		if (dv && strcmp(dv->uuid, uuid) == 0)
			return dv;
	}
	return NULL;
}

/* At exit: each slot given back now, not when the next process notices
 * its owner is gone (a process killed never gets here; its usage is
 * reclaimed as before). */
bool vgpu__leaving;

void vgpu__dev_leave_all(void)
{
	__atomic_store_n(&vgpu__leaving, true, __ATOMIC_RELEASE);
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = &devs[i];

		if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) !=
			    VGPU_DEV_READY || !dv->ledger)
			continue;
		__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
		vgpu_ledger_close(dv->ledger);	/* leaves its slots */
	}
}

void vgpu__dev_fork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	host_pid = -1;
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = &devs[i];

		if (dv->ledger)
			vgpu_ledger_forget_after_fork(dv->ledger);
		memset(dv, 0, sizeof(*dv));
	}
}
