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
#include "overcommit.h"
#include "ledger.h"
#include "throttle.h"
#include "track.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct vgpu_dev devs[VGPU_MAX_DEVICES];
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* The device's slot, joined now (the core's vgpu_device_join), then
 * CUDA's own: overcommit, VGPU_CONTROL, the spatial mode. Called with
 * attach_lock held. */
static void attach(struct vgpu_dev *dv, int ordinal, const char *uuid,
		   uint64_t physical)
{
	const struct vgpu_options *o = vgpu__options();

	/* vgpu__refused: cuInit refused the GPU once the driver was up. */
	if (vgpu_device_join(&dv->core, o, ordinal, uuid, physical,
			     vgpu__refused()) != VGPU_DEVICE_JOINED)
		return;
	dv->overcommit = overcommit_mode(o, ordinal);
	dv->control = o->control;	/* before the spill limit */
	if (dv->overcommit != VGPU_OVERCOMMIT_OFF || dv->control)
		vgpu_ledger_set_spill_limit(dv->slot, o->host_spill_limit);
	dv->spatial = dv->share > 0 && dv->share < 100 &&
		      dv->policy != VGPU_POLICY_OFF &&
		      o->compute_mode == VGPU_MODE_SPATIAL;
	__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
	if (dv->control) {
		/* vgpu-ctl counts it as suspendable from now. */
		vgpu_ledger_slot_flags(dv->slot, VGPU_LEDGER_SLOT_CONTROL, 0);
		if (vgpu_ledger_suspended(dv->slot))
			vgpu_log(VGPU_LOG_WARN, "device %d: tenant %s is "
				 "suspended (vgpu-ctl): this process's "
				 "launches and allocations wait for vgpu-ctl "
				 "resume", ordinal, o->tenant);
		vgpu__control_start();
	} else if (vgpu_ledger_suspended(dv->slot)) {
		vgpu_log(VGPU_LOG_WARN, "device %d: tenant %s is suspended "
			 "(vgpu-ctl), but this process was started without "
			 "VGPU_CONTROL: it runs", ordinal, o->tenant);
	}
}

struct vgpu_dev *vgpu__dev_attach(CUdevice d)
{
	struct vgpu_dev *dv;
	char uuid[VGPU_LEDGER_UUID_MAX];
	CUuuid u;
	size_t total = 0;
	int cancel;

	vgpu_guard_thread();	/* before any touch of a ledger */
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
	vgpu_device_uuid_string((const unsigned char *)u.bytes, uuid,
				sizeof(uuid));
	/* Not cancelled while it holds attach_lock: joining the ledger
	 * opens, locks and logs (cancellation points), and a thread
	 * cancelled there would leave every later attach waiting. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&attach_lock);
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) == VGPU_DEV_NEW)
		attach(dv, d, uuid, total);
	pthread_mutex_unlock(&attach_lock);
	pthread_setcancelstate(cancel, NULL);
	return dv;
}

struct vgpu_dev *vgpu__dev_peek(int ordinal)
{
	vgpu_guard_thread();
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
	/* The exiting thread's launches are charged before the ledgers go. */
	vgpu__launch_process_exit();
	__atomic_store_n(&vgpu__leaving, true, __ATOMIC_RELEASE);
	for (int i = 0; i < VGPU_MAX_DEVICES; i++)
		vgpu_device_leave(&devs[i].core);
}

/* A limit lowered below what the tenant holds, host overcommit and no
 * control thread (which does it itself, control.c): at a synchronisation
 * of this thread, the least recently used ranges go to the host until the
 * tenant fits, the hooks of the other threads held meanwhile. */
static void fit_limit(struct vgpu_dev *dv)
{
	CUcontext cur = NULL;

	__atomic_store_n(&dv->fit_due, false, __ATOMIC_RELAXED);
	if (vgpu_ledger_tenant_used(dv->slot) <=
	    vgpu_ledger_tenant_limit(dv->slot))
		return;
	/* The gate not had (a thread stays inside a copy): the next
	 * synchronisation tries again. */
	if (vgpu__real.cuCtxGetCurrent &&
	    vgpu__real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
	    vgpu__move_ranges(dv, VGPU_MOVE_FIT, 0, NULL) < 0)
		__atomic_store_n(&dv->fit_due, true, __ATOMIC_RELAXED);
}

void vgpu__dev_watch_all(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = vgpu__dev_peek(i);

		if (dv && dv->slot)
			vgpu__dev_watch_terms(dv);
	}
}

bool vgpu__dev_any_capped(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = vgpu__dev_peek(i);

		if (dv && __atomic_load_n(&dv->capped, __ATOMIC_ACQUIRE))
			return true;
	}
	return false;
}

void vgpu__dev_poll_ledgers(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = vgpu__dev_peek(i);

		if (dv && dv->slot) {	/* a slot: a ledger joined */
			vgpu_ledger_poll(dv->ledger);
			vgpu__dev_watch_terms(dv);
			if (__atomic_load_n(&dv->fit_due, __ATOMIC_RELAXED))
				fit_limit(dv);
		}
	}
}

/* A limit now below use: host overcommit moves ranges out at the next
 * synchronisation (the control thread, if any, on its own). */
void vgpu__dev_fit_check(struct vgpu_dev *dv)
{
	if (dv->overcommit == VGPU_OVERCOMMIT_HOST && !dv->control &&
	    vgpu_ledger_tenant_used(dv->slot) >
		    vgpu_ledger_tenant_limit(dv->slot))
		__atomic_store_n(&dv->fit_due, true, __ATOMIC_RELAXED);
}

void vgpu__dev_fork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	vgpu_front_fork_child();
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		vgpu_device_forget(&devs[i].core);
		memset(&devs[i], 0, sizeof(devs[i]));
	}
}
