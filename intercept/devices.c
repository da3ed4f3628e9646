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

static bool capped(unsigned share, int policy)
{
	return share > 0 && share < 100 && policy != VGPU_POLICY_OFF;
}

/* Whether launches go through the throttle: a share that caps, or the
 * opportunistic class (with or without a share). */
static bool throttled(unsigned share, int policy)
{
	return capped(share, policy) || policy == VGPU_POLICY_OPPORTUNISTIC;
}

static const char *compute_text(unsigned share, int policy, char *buf,
				size_t len)
{
	if (policy == VGPU_POLICY_OPPORTUNISTIC && !capped(share, policy))
		snprintf(buf, len, "the opportunistic class (no share)");
	else if (policy == VGPU_POLICY_OPPORTUNISTIC)
		snprintf(buf, len, "the opportunistic class, at most %u%%",
			 share);
	else if (!capped(share, policy))
		snprintf(buf, len, "no compute limit");
	else
		snprintf(buf, len, "a compute share of %u%% (%s)", share,
			 policy == VGPU_POLICY_HARD ? "hard" : "elastic");
	return buf;
}

/* The compute terms the device runs under: this process's own when its
 * join set the tenant's terms, else the tenant's (like the memory limit),
 * with a warning when they differ from what this process asked for. */
static void compute_terms(struct vgpu_dev *dv, const struct vgpu_options *o,
			  int ordinal)
{
	const struct vgpu_ledger_tenant *ten =
		vgpu_ledger_tenant_record(dv->slot);
	unsigned share = vgpu__options_compute_limit(o, (unsigned)ordinal);
	unsigned have = __atomic_load_n(&ten->compute.share_pct,
					__ATOMIC_ACQUIRE);
	int policy = (int)__atomic_load_n(&ten->compute.policy,
					  __ATOMIC_ACQUIRE);
	char a[48], b[48];

	dv->share = share;
	dv->policy = o->compute_policy;
	if (vgpu_ledger_set_terms(dv->slot))
		return;
	if (throttled(share, dv->policy) != throttled(have, policy) ||
	    (throttled(have, policy) &&
	     ((capped(have, policy) && share != have) ||
	      dv->policy != policy)))
		vgpu_log(VGPU_LOG_WARN, "device %d: tenant '%s': pid %d asked "
			 "for %s; the tenant has %s, which applies (set by %s)",
			 ordinal, ten->name, (int)getpid(),
			 compute_text(share, dv->policy, a, sizeof(a)),
			 compute_text(have, policy, b, sizeof(b)),
			 __atomic_load_n(&ten->ctl_fields, __ATOMIC_ACQUIRE) &
					 (VGPU_LEDGER_CTL_COMPUTE |
					  VGPU_LEDGER_CTL_POLICY)
				 ? "vgpu-ctl"
				 : "the process that started the tenant");
	dv->share = capped(have, policy) ? have : 100;
	dv->policy = policy;
}

/* Opens the device's ledger and joins the tenant, asking for this
 * process's terms (the tenant's apply when it has them already). 0, or a
 * VGPU_LEDGER_E* code with err saying why. */
static int join(struct vgpu_dev *dv, const struct vgpu_options *o,
		const char *uuid, uint64_t physical, char *err, size_t errlen)
{
	unsigned d = (unsigned)dv->ordinal;
	unsigned share = vgpu__options_compute_limit(o, d);
	struct vgpu_ledger_terms want = {
		.mem_limit = vgpu__options_memory_limit(o, d),
		.compute = true,
		/* No cap is 0 in the ledger, as tools read it. */
		.share_pct = capped(share, o->compute_policy) ? share : 0,
		.policy = (uint32_t)o->compute_policy,
	};
	struct vgpu_ledger_access access = { .group = o->ledger_group };
	int r;

	r = vgpu_ledger_open_with(o->ledger_dir, uuid, physical, &access,
				  &dv->ledger, err, errlen);
	if (r != 0)
		return r;
	r = vgpu_ledger_join_terms(dv->ledger, o->tenant, &want,
				   (int32_t)getpid(), host_pid, &dv->slot,
				   err, errlen);
	if (r == VGPU_LEDGER_LIMIT_KEPT) {
		vgpu_log(VGPU_LOG_WARN, "device %d: %s", dv->ordinal, err);
		r = 0;
	}
	if (r != 0) {
		vgpu_ledger_close(dv->ledger);
		dv->ledger = NULL;
	}
	return r;
}

/* A slice larger than the device is accepted (the device's size is what
 * the job can get, and what the views show), but said once: a limit of
 * 64GiB on a 2 GiB GPU is more likely a mistake than a choice. */
static void warn_oversize(const struct vgpu_options *o, int ordinal,
			  const char *uuid, uint64_t physical)
{
	uint64_t limit = vgpu__options_memory_limit(o, (unsigned)ordinal);
	char a[32], b[32];

	if (limit == VGPU_LEDGER_UNLIMITED || limit <= physical)
		return;
	vgpu__format_size(a, sizeof(a), limit);
	vgpu__format_size(b, sizeof(b), physical);
	vgpu_log(VGPU_LOG_WARN, "device %d (%s): the memory limit, %s "
		 "(VGPU_MEMORY_LIMIT or VGPU_MEMORY_LIMIT_%d), is larger than "
		 "the device's %s; the device's size applies", ordinal, uuid,
		 a, ordinal, b);
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
	if (vgpu__refused()) {
		/* cuInit refused the GPU once the driver was up. */
		__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
		return;
	}
	if (o->disable) {
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return;
	}
	if (host_pid < 0)
		host_pid = vgpu_host_pid();
	err[0] = '\0';
	r = join(dv, o, uuid, physical, err, sizeof(err));
	if (r == 0) {
		dv->overcommit = overcommit_mode(o, ordinal);
		dv->control = o->control;	/* before the spill limit */
		if (dv->overcommit != VGPU_OVERCOMMIT_OFF || dv->control)
			vgpu_ledger_set_spill_limit(dv->slot,
						    o->host_spill_limit);
		compute_terms(dv, o, ordinal);
		dv->gpu = (struct vgpu_measure_gpu){ .ordinal = ordinal,
			.ledger = dv->ledger, .slot = dv->slot };
		dv->ctl_seen = vgpu_ledger_ctl_changes(dv->slot);
		dv->capped = throttled(dv->share, dv->policy);
		dv->spatial = capped(dv->share, dv->policy) &&
			      o->compute_mode == VGPU_MODE_SPATIAL;
		if (dv->capped) {
			vgpu_throttle_configure(dv->slot,
				capped(dv->share, dv->policy) ? dv->share : 0,
				dv->policy, vgpu__mono_ns());
			/* The tenant's share binds a process that asked for
			 * none (its options left the hooks' flag off). */
			__atomic_store_n(&vgpu__compute_on, true,
					 __ATOMIC_RELEASE);
		}
		vgpu_log(VGPU_LOG_INFO, "device %d (%s): tenant %s, ledger %s",
			 ordinal, uuid, o->tenant,
			 vgpu_ledger_path(dv->ledger));
		warn_oversize(o, ordinal, uuid, physical);
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		if (dv->control) {
			/* vgpu-ctl counts it as suspendable from now. */
			vgpu_ledger_slot_flags(dv->slot,
					       VGPU_LEDGER_SLOT_CONTROL, 0);
			if (vgpu_ledger_suspended(dv->slot))
				vgpu_log(VGPU_LOG_WARN, "device %d: tenant %s "
					 "is suspended (vgpu-ctl): this "
					 "process's launches and allocations "
					 "wait for vgpu-ctl resume", ordinal,
					 o->tenant);
			vgpu__control_start();
		} else if (vgpu_ledger_suspended(dv->slot)) {
			vgpu_log(VGPU_LOG_WARN, "device %d: tenant %s is "
				 "suspended (vgpu-ctl), but this process was "
				 "started without VGPU_CONTROL: it runs",
				 ordinal, o->tenant);
		}
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

/* ---- a tenant lock not had in time ---------------------------------------- */

/* Per device: when the timeout was last logged, and how many since were
 * not (every allocation of the tenant can repeat it, for as long as the
 * holder stays stopped). */
static uint64_t timeout_logged_ns[VGPU_MAX_DEVICES];
static unsigned timeout_quiet[VGPU_MAX_DEVICES];

#define TIMEOUT_LOG_EVERY_NS	10000000000ull	/* 10 s */

CUresult vgpu__charge_timeout(struct vgpu_dev *dv)
{
	const struct vgpu_ledger_tenant *ten =
		vgpu_ledger_tenant_record(dv->slot);
	uint64_t now = vgpu__mono_ns(), last;
	int32_t pid = 0, hpid = 0;
	char who[64], quiet[48] = "";
	int d = dv->ordinal;
	unsigned n;

	last = __atomic_load_n(&timeout_logged_ns[d], __ATOMIC_RELAXED);
	if ((last && now - last < TIMEOUT_LOG_EVERY_NS) ||
	    !__atomic_compare_exchange_n(&timeout_logged_ns[d], &last, now,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&timeout_quiet[d], 1, __ATOMIC_RELAXED);
		return CUDA_ERROR_TIMEOUT;
	}
	if (vgpu_ledger_lock_holder(dv->slot, &pid, &hpid) != 0)
		snprintf(who, sizeof(who), "a holder that has let go since");
	else if (hpid)
		snprintf(who, sizeof(who), "pid %d (host pid %d)", pid, hpid);
	else
		snprintf(who, sizeof(who), "pid %d", pid);
	n = __atomic_exchange_n(&timeout_quiet[d], 0, __ATOMIC_RELAXED);
	if (n)
		snprintf(quiet, sizeof(quiet), " (and %u more since the last "
			 "message)", n);
	vgpu_log(VGPU_LOG_ERROR, "device %d: tenant '%s': its ledger lock was "
		 "held for over %llu ms by %s (stopped or stuck?); the "
		 "allocation returns CUDA_ERROR_TIMEOUT%s", d, ten->name,
		 (unsigned long long)(VGPU_LEDGER_LOCK_TIMEOUT_NS / 1000000u),
		 who, quiet);
	return CUDA_ERROR_TIMEOUT;
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
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = &devs[i];

		if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) !=
			    VGPU_DEV_READY || !dv->ledger)
			continue;
		__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
		vgpu_ledger_close(dv->ledger);	/* leaves its slots */
	}
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
	if (vgpu__real.cuCtxGetCurrent &&
	    vgpu__real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
		vgpu__move_ranges(dv, VGPU_MOVE_FIT, 0, NULL);
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

/* ---- terms changed by vgpu-ctl -------------------------------------------- */

static pthread_mutex_t terms_lock = PTHREAD_MUTEX_INITIALIZER;

/* The tenant's compute terms now, for this device. The throttle reads the
 * share and policy live, so a capped device needs nothing but the flags;
 * an uncapped one (its process started with no share) is turned on here:
 * its launches go to the throttle from the next one. A device turned off
 * keeps being measured (its admissions go at once). Spatial mode is not
 * started here: a share set live is a time share. */
static void terms_read(struct vgpu_dev *dv)
{
	const struct vgpu_ledger_tenant *ten =
		vgpu_ledger_tenant_record(dv->slot);
	unsigned share = __atomic_load_n(&ten->compute.share_pct,
					 __ATOMIC_ACQUIRE);
	int policy = (int)__atomic_load_n(&ten->compute.policy,
					  __ATOMIC_ACQUIRE);
	bool cap = throttled(share, policy);
	char buf[48];

	if (cap == __atomic_load_n(&dv->capped, __ATOMIC_RELAXED) &&
	    (!cap || (share == dv->share && policy == dv->policy)))
		return;
	dv->share = capped(share, policy) ? share : 100;
	dv->policy = policy;
	if (cap)	/* the device first: the hooks test the flag first */
		__atomic_store_n(&vgpu__compute_on, true, __ATOMIC_RELEASE);
	__atomic_store_n(&dv->capped, cap, __ATOMIC_RELEASE);
	vgpu_log(VGPU_LOG_INFO, "device %d: tenant '%s': %s, set by uid %u "
		 "pid %d (vgpu-ctl)", dv->ordinal, ten->name,
		 compute_text(share, policy, buf, sizeof(buf)),
		 (unsigned)__atomic_load_n(&ten->ctl_uid, __ATOMIC_RELAXED),
		 (int)__atomic_load_n(&ten->ctl_pid, __ATOMIC_RELAXED));
}

void vgpu__dev_terms_changed(struct vgpu_dev *dv)
{
	pthread_mutex_lock(&terms_lock);
	/* ctl_changes first (acquire), then the terms it covers. */
	__atomic_store_n(&dv->ctl_seen, vgpu_ledger_ctl_changes(dv->slot),
			 __ATOMIC_RELAXED);
	terms_read(dv);
	pthread_mutex_unlock(&terms_lock);
	/* A limit now below use: host overcommit moves ranges out at the
	 * next synchronisation (the control thread, if any, on its own). */
	if (dv->overcommit == VGPU_OVERCOMMIT_HOST && !dv->control &&
	    vgpu_ledger_tenant_used(dv->slot) >
		    vgpu_ledger_tenant_limit(dv->slot))
		__atomic_store_n(&dv->fit_due, true, __ATOMIC_RELAXED);
}

/* ---- an opportunistic tenant on the GPU ----------------------------------- */

/* A device not capped publishes nothing at its launches (one flag test
 * and the driver's call) until an opportunistic tenant asks for its GPU:
 * then its launches go to the core, which stamps the tenant active
 * (prim.c's `announced`, vgpu/measure.c), and the opportunistic tenant
 * yields. Stops once none has asked for VGPU_THROTTLE_OPP_LINGER_NS; the
 * hooks' flag stays on (a launch then costs the core's look-up of its
 * context and device). A capped device's admissions stamp it already. */
void vgpu__dev_opportunistic(struct vgpu_dev *dv)
{
	bool on;

	__atomic_store_n(&dv->opp_seen, vgpu_throttle_opportunistic_ns(dv->slot),
			 __ATOMIC_RELAXED);
	on = !__atomic_load_n(&dv->capped, __ATOMIC_ACQUIRE) &&
	     vgpu_throttle_opportunistic_near(dv->slot, vgpu__mono_coarse_ns());
	if (on == __atomic_load_n(&dv->announcing, __ATOMIC_RELAXED))
		return;
	if (on)		/* the flag first: the hooks test it first */
		__atomic_store_n(&vgpu__compute_on, true, __ATOMIC_RELEASE);
	__atomic_store_n(&dv->announcing, on, __ATOMIC_RELEASE);
	vgpu_log(VGPU_LOG_INFO, "device %d: %s", dv->ordinal, on
		 ? "an opportunistic tenant shares the GPU: launches are "
		   "announced to it"
		 : "no opportunistic tenant for a second: launches no "
		   "longer announced");
}

void vgpu__dev_fork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	pthread_mutex_init(&terms_lock, NULL);
	host_pid = -1;
	memset(timeout_logged_ns, 0, sizeof(timeout_logged_ns));
	memset(timeout_quiet, 0, sizeof(timeout_quiet));
	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		struct vgpu_dev *dv = &devs[i];

		if (dv->ledger)
			vgpu_ledger_forget_after_fork(dv->ledger);
		memset(dv, 0, sizeof(*dv));
	}
}
