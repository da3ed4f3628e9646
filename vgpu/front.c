/* front.c - what every front end does the same way (front.h): the options
 * at start, a device's place in the ledger, its terms followed, a lock's
 * timeout reported. No driver call: the front end asks its driver for the
 * device's key and memory and hands them over.
 */
#include "front.h"
#include "log.h"
#include "throttle.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

bool vgpu__compute_on;

static pthread_mutex_t terms_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t host_pid = -1;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_coarse_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		return mono_ns();
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the options ---------------------------------------------------------- */

bool vgpu_front_refuses(const struct vgpu_options *o)
{
	return o->on_error == VGPU_ON_ERROR_REFUSE && !o->disable;
}

/* The lines of err, then what the bad variables they name do: refuse the
 * GPU, or go on as if unset. */
static void report_bad(const struct vgpu_options *o, const char *err, int bad)
{
	vgpu_log_text(err);
	if (vgpu_front_refuses(o))
		vgpu_log(VGPU_LOG_ERROR,
			 "refusing the GPU: fix the variable%s above, "
			 "or set VGPU_ON_ERROR=warn to run as if %s "
			 "unset", bad > 1 ? "s" : "",
			 bad > 1 ? "they were" : "it was");
	else
		vgpu_log(VGPU_LOG_WARN,
			 "%s: going on as if the variable%s above "
			 "%s unset",
			 o->disable ? "limits are off (VGPU_DISABLE)"
				    : "VGPU_ON_ERROR=warn",
			 bad > 1 ? "s" : "", bad > 1 ? "were" : "was");
}

/* Each line of text as a warning, with tail appended. */
static void warn_lines(const char *text, const char *tail)
{
	for (const char *l = text; *l;) {
		size_t n = strcspn(l, "\n");

		vgpu_log(VGPU_LOG_WARN, "%.*s%s", (int)n, l, tail);
		l += n + (l[n] == '\n');
	}
}

/* Bad values and variables that name no option (VGPU_MEMROY_LIMIT) alike
 * are counted, so both refuse or warn by the rule. HAMi's names misspelt
 * (CUDA_DEVICE_MEMORY_LIMT) are only warned about: they are outside the
 * VGPU_ namespace. */
int vgpu_front_options_start(struct vgpu_options *o)
{
	char err[4096];
	int bad;

	bad = vgpu__options_load(o, (const char *const *)environ, err,
				 sizeof(err));
	vgpu_log_set_level(o->log_level);
	if (bad)
		report_bad(o, err, bad);
	if (vgpu__options_check_hami_names((const char *const *)environ, err,
					   sizeof(err)))
		warn_lines(err, "");
	if (o->verbose)
		vgpu__options_dump(o, 2);
	return bad;
}

int vgpu_front_check_devices(const struct vgpu_options *o, unsigned count)
{
	char err[4096];
	int n;

	n = vgpu__options_check_devices((const char *const *)environ, count,
					false, err, sizeof(err));
	if (n)
		report_bad(o, err, n);
	if (vgpu__options_check_devices((const char *const *)environ, count,
					true, err, sizeof(err)))
		warn_lines(err, " (ignored, as HAMi-core does)");
	return n;
}

/* ---- a device's terms ----------------------------------------------------- */

void vgpu_device_uuid_string(const unsigned char b[16], char *out, size_t len)
{
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
		 b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
}

bool vgpu_device_uuid_unique(const unsigned char *uuid)
{
	static const char placeholder[] = "GPU-XX";
	bool zero = true, tail = false;

	for (int i = 0; i < 16; i++) {
		zero = zero && !uuid[i];
		tail = tail || (i >= 6 && uuid[i]);
	}
	return !zero && (tail || memcmp(uuid, placeholder, 6) != 0);
}

bool vgpu_device_key(const unsigned char *uuid, const char *bus, char *out,
		     size_t len)
{
	size_t n;

	if (uuid && (!bus || vgpu_device_uuid_unique(uuid))) {
		vgpu_device_uuid_string(uuid, out, len);
		return true;
	}
	if (!bus)
		return false;
	snprintf(out, len, "PCI-%s", bus);
	for (n = 4; n < len && out[n]; n++)
		if (out[n] == ':' || out[n] == '.')
			out[n] = '-';
	return true;
}

static bool capped(unsigned share, int policy)
{
	return share > 0 && share < 100 && policy != VGPU_POLICY_OFF;
}

bool vgpu_device_throttled(unsigned share, int policy)
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
static void compute_terms(struct vgpu_device *dv, const struct vgpu_options *o,
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
	if (vgpu_device_throttled(share, dv->policy) !=
		    vgpu_device_throttled(have, policy) ||
	    (vgpu_device_throttled(have, policy) &&
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
static int join(struct vgpu_device *dv, const struct vgpu_options *o,
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

/* Joined: the terms read, the throttle configured. */
static void joined(struct vgpu_device *dv, const struct vgpu_options *o,
		   int ordinal, const char *uuid, uint64_t physical)
{
	compute_terms(dv, o, ordinal);
	dv->gpu = (struct vgpu_measure_gpu){ .ordinal = ordinal,
		.ledger = dv->ledger, .slot = dv->slot };
	dv->ctl_seen = vgpu_ledger_ctl_changes(dv->slot);
	dv->capped = vgpu_device_throttled(dv->share, dv->policy);
	if (dv->capped) {
		vgpu_throttle_configure(dv->slot,
			capped(dv->share, dv->policy) ? dv->share : 0,
			dv->policy, mono_ns());
		/* The tenant's share binds a process that asked for none
		 * (its options left the hooks' flag off). */
		__atomic_store_n(&vgpu__compute_on, true, __ATOMIC_RELEASE);
	}
	vgpu_log(VGPU_LOG_INFO, "device %d (%s): tenant %s, ledger %s",
		 ordinal, uuid, o->tenant, vgpu_ledger_path(dv->ledger));
	warn_oversize(o, ordinal, uuid, physical);
	/* An idle process follows a deleted or replaced file too. */
	vgpu_ledger_follow(dv->ledger);
}

int vgpu_device_join(struct vgpu_device *dv, const struct vgpu_options *o,
		     int ordinal, const char *uuid, uint64_t physical,
		     bool refused)
{
	char err[512];

	dv->physical = physical;
	snprintf(dv->uuid, sizeof(dv->uuid), "%s", uuid);
	dv->ordinal = ordinal;
	if (refused) {
		__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
		return VGPU_DEVICE_REFUSED;
	}
	if (o->disable) {
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return VGPU_DEVICE_UNACCOUNTED;
	}
	if (host_pid < 0)
		host_pid = vgpu_host_pid();
	err[0] = '\0';
	if (join(dv, o, uuid, physical, err, sizeof(err)) == 0) {
		joined(dv, o, ordinal, uuid, physical);
		return VGPU_DEVICE_JOINED;
	}
	if (o->on_error == VGPU_ON_ERROR_WARN) {
		vgpu_log(VGPU_LOG_WARN, "device %d: %s; VGPU_ON_ERROR=warn: "
			 "going on without a limit on it", ordinal, err);
		__atomic_store_n(&dv->state, VGPU_DEV_READY, __ATOMIC_RELEASE);
		return VGPU_DEVICE_UNACCOUNTED;
	}
	vgpu_log(VGPU_LOG_ERROR, "device %d: %s; refusing the device (set "
		 "VGPU_ON_ERROR=warn to use it without a limit)", ordinal, err);
	__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
	return VGPU_DEVICE_REFUSED;
}

/* ---- terms changed by vgpu-ctl -------------------------------------------- */

/* The tenant's compute terms now, for this device. The throttle reads the
 * share and policy live, so a capped device needs nothing but the flags;
 * an uncapped one (its process started with no share) is turned on here:
 * its launches go to the throttle from the next one. A device turned off
 * keeps being measured (its admissions go at once). Spatial mode is not
 * started here: a share set live is a time share. */
static void terms_read(struct vgpu_device *dv)
{
	const struct vgpu_ledger_tenant *ten =
		vgpu_ledger_tenant_record(dv->slot);
	unsigned share = __atomic_load_n(&ten->compute.share_pct,
					 __ATOMIC_ACQUIRE);
	int policy = (int)__atomic_load_n(&ten->compute.policy,
					  __ATOMIC_ACQUIRE);
	bool cap = vgpu_device_throttled(share, policy);
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

void vgpu_device_terms_changed(struct vgpu_device *dv)
{
	int cancel;

	/* Not cancelled while it holds terms_lock: terms_read logs. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&terms_lock);
	/* ctl_changes first (acquire), then the terms it covers. */
	__atomic_store_n(&dv->ctl_seen, vgpu_ledger_ctl_changes(dv->slot),
			 __ATOMIC_RELAXED);
	terms_read(dv);
	pthread_mutex_unlock(&terms_lock);
	pthread_setcancelstate(cancel, NULL);
}

/* A device not capped publishes nothing at its launches (one flag test
 * and the driver's call) until an opportunistic tenant asks for its GPU:
 * then its launches go to the core, which stamps the tenant active (the
 * front end's `announced` primitive, measure.c), and the opportunistic
 * tenant yields. Stops once none has asked for
 * VGPU_THROTTLE_OPP_LINGER_NS; the hooks' flag stays on (a launch then
 * costs the core's look-up of its context and device). A capped device's
 * admissions stamp it already. */
void vgpu_device_opportunistic(struct vgpu_device *dv)
{
	bool on;

	__atomic_store_n(&dv->opp_seen, vgpu_throttle_opportunistic_ns(dv->slot),
			 __ATOMIC_RELAXED);
	on = !__atomic_load_n(&dv->capped, __ATOMIC_ACQUIRE) &&
	     vgpu_throttle_opportunistic_near(dv->slot, mono_coarse_ns());
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

/* ---- a tenant lock not had in time ---------------------------------------- */

/* Per device: when the timeout was last logged, and how many since were
 * not (every allocation of the tenant can repeat it, for as long as the
 * holder stays stopped). */
static uint64_t timeout_logged_ns[VGPU_MAX_DEVICES];
static unsigned timeout_quiet[VGPU_MAX_DEVICES];

#define TIMEOUT_LOG_EVERY_NS	10000000000ull	/* 10 s */

void vgpu_device_timeout(struct vgpu_device *dv, const char *error)
{
	const struct vgpu_ledger_tenant *ten =
		vgpu_ledger_tenant_record(dv->slot);
	uint64_t now = mono_ns(), last;
	int32_t pid = 0, hpid = 0;
	char who[64], quiet[48] = "";
	int d = dv->ordinal;
	unsigned n;

	last = __atomic_load_n(&timeout_logged_ns[d], __ATOMIC_RELAXED);
	if ((last && now - last < TIMEOUT_LOG_EVERY_NS) ||
	    !__atomic_compare_exchange_n(&timeout_logged_ns[d], &last, now,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&timeout_quiet[d], 1, __ATOMIC_RELAXED);
		return;
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
		 "allocation returns %s%s", d, ten->name,
		 (unsigned long long)(VGPU_LEDGER_LOCK_TIMEOUT_NS / 1000000u),
		 who, error, quiet);
}

/* ---- the views ------------------------------------------------------------ */

void vgpu_device_mem_view(const struct vgpu_device *dv, size_t *free,
			  size_t *total)
{
	uint64_t limit, used, f;

	if (!dv || !dv->slot)
		return;
	limit = vgpu_ledger_tenant_limit(dv->slot);
	if (limit >= *total)
		return;
	used = vgpu_ledger_tenant_used(dv->slot);
	f = used < limit ? limit - used : 0;
	*total = (size_t)limit;
	if (f < *free)
		*free = (size_t)f;
}

void vgpu_device_total_view(const struct vgpu_device *dv,
			    const struct vgpu_options *o, int ordinal,
			    size_t *bytes)
{
	uint64_t limit;

	if (o->disable)
		return;
	limit = dv && dv->slot ? vgpu_ledger_tenant_limit(dv->slot)
			       : vgpu__options_memory_limit(o,
							    (unsigned)ordinal);
	if (limit < *bytes)
		*bytes = (size_t)limit;
}

/* ---- the host ------------------------------------------------------------- */

uint64_t vgpu_host_now(void)
{
	return mono_ns();
}

uint64_t vgpu_host_now_coarse(void)
{
	return mono_coarse_ns();
}

void vgpu_host_sleep(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };

	if (!ns)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

void vgpu_host_wait_on(uint32_t *word, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };

	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

/* ---- exit and fork -------------------------------------------------------- */

void vgpu_device_leave(struct vgpu_device *dv)
{
	if (__atomic_load_n(&dv->state, __ATOMIC_ACQUIRE) != VGPU_DEV_READY ||
	    !dv->ledger)
		return;
	__atomic_store_n(&dv->state, VGPU_DEV_FAILED, __ATOMIC_RELEASE);
	/* A follower's move that does not end: the slots are reclaimed as
	 * a dead process's once this one is gone. */
	if (vgpu_ledger_unfollow(dv->ledger))
		vgpu_ledger_exit(dv->ledger);	/* leaves its slots */
}

void vgpu_front_fork_child(void)
{
	pthread_mutex_init(&terms_lock, NULL);
	host_pid = -1;
	memset(timeout_logged_ns, 0, sizeof(timeout_logged_ns));
	memset(timeout_quiet, 0, sizeof(timeout_quiet));
}

void vgpu_device_forget(struct vgpu_device *dv)
{
	if (dv->ledger)
		vgpu_ledger_forget_after_fork(dv->ledger);
	memset(dv, 0, sizeof(*dv));
}
