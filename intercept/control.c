/* control.c - a tenant suspended and resumed by an administrator
 * (vgpu-ctl suspend/resume, docs/control.md), and a lowered memory limit
 * met by moving memory to the host.
 *
 * Only with VGPU_CONTROL: then the process's allocations of at least the
 * mapping granularity are movable ranges (overcommit.c), and a thread of
 * the shim's own, the control thread, started at the first device's
 * attach, looks at the tenant's record of each attached device every
 * CONTROL_POLL_MS. It does all the work, so a process that makes no driver
 * call at all is suspended as quickly as a busy one:
 *
 *   suspend  hold the process's launches (the gate, below), wait for
 *            those already inside to return, synchronise each context
 *            that owns a range, move every range of the device to the
 *            host at the same address, mark the slot SUSPENDED;
 *   resume   move the ranges back while they fit the slice and the
 *            device has room, clear SUSPENDED, let the launches go. Ranges
 *            left on the host that fit the slice (the device had no room,
 *            or a lowered limit was raised again) are brought back under
 *            a brief hold, at most once a second while the device refuses;
 *   fit      a tenant over its (lowered) limit: the least recently used
 *            ranges go to the host until it fits, under a brief hold.
 *
 * After each state it acknowledges the change it carried out in its slot
 * (ctl_acked), which vgpu-ctl waits for.
 *
 * The gate. Launch, copy and memset hooks pass through it whenever the
 * process has movable ranges or a control thread (vgpu__gate_on): one
 * atomic increment, a load of `hold`, one decrement. hold counts what
 * holds the process: a suspension, and whoever moves ranges (this thread,
 * or any thread of the job that makes room or promotes with host
 * overcommit, overcommit.c), between vgpu__moves_begin and _end. A mover
 * adds to hold, then waits for the count inside to reach zero: a hook that
 * entered before has left, one that comes after sees hold and waits
 * (sequentially consistent on both sides, so one of the two always sees
 * the other). Movers take turns (move_mu). A thread that must move ranges
 * while inside the gate (a graph launch that allocates or frees) steps out
 * first and back in after, waiting as any launch does. Allocations of
 * device memory wait at their charge while hold is set
 * (vgpu__control_wait), unless the thread is inside the gate or moving.
 */
#include "control.h"
#include "overcommit.h"
#include "thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CONTROL_POLL_MS 50
/* A resume the device had no room for is tried again this often. */
#define RETRY_NS 1000000000ull

bool vgpu__gate_on;

static unsigned in_gate;	/* hooks inside the gate (atomic) */
static unsigned hold;		/* hooks and allocations wait (atomic) */
static bool suspend_held;	/* a suspension's part of hold (hold_mu;
				 * read atomically) */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t move_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int gate_depth;
static __thread int move_depth;		/* this thread moves ranges */
static __thread bool stepped_out;	/* of the gate, to move */
static __thread bool is_control_thread;

/* Held by the control thread for a pass, never while it sleeps; the exit
 * path takes it before the ledgers are left. */
static pthread_mutex_t pass_mu = PTHREAD_MUTEX_INITIALIZER;
static bool started;		/* the thread exists (in this process) */
static bool stopping;		/* the process is leaving (atomic) */

struct dev_ctl {
	bool suspended;		/* this process carried out a suspension */
	uint64_t retry_ns;	/* ranges on the host that fit the slice are
				 * brought back from then on */
};
static struct dev_ctl devctl[VGPU_MAX_DEVICES];

/* ---- the gate ------------------------------------------------------------- */

/* Waits while the process is held. Not a cancellation point: a thread
 * cancelled here would leave hold_mu locked. */
static void wait_unheld(void)
{
	int cancel;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&hold_mu);
	while (__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		struct timespec until;

		/* Timed: a hold set and cleared between the load and the
		 * wait is never missed for long. hold_cv waits on the wall
		 * clock (its default). */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 100 * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&hold_cv, &hold_mu, &until);
	}
	pthread_mutex_unlock(&hold_mu);
	pthread_setcancelstate(cancel, NULL);
}

/* Into the gate, waiting while the process is held. */
static void gate_in(void)
{
	for (;;) {
		__atomic_add_fetch(&in_gate, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&hold, __ATOMIC_SEQ_CST))
			return;
		__atomic_sub_fetch(&in_gate, 1, __ATOMIC_SEQ_CST);
		wait_unheld();
	}
}

/* Inside the gate a thread is not cancelled (a cancellation point in the
 * driver's call would leave it counted inside for good): a cancel waits
 * for the gate's leave. */
static __thread int gate_cancel;

void vgpu__gate_enter(void)
{
	if (gate_depth++ || is_control_thread)
		return;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &gate_cancel);
	gate_in();
}

void vgpu__gate_leave(void)
{
	if (--gate_depth || is_control_thread)
		return;
	__atomic_sub_fetch(&in_gate, 1, __ATOMIC_SEQ_CST);
	pthread_setcancelstate(gate_cancel, NULL);
}

void vgpu__gate_use(void)
{
	if (!__atomic_load_n(&vgpu__gate_on, __ATOMIC_RELAXED))
		__atomic_store_n(&vgpu__gate_on, true, __ATOMIC_SEQ_CST);
}

void vgpu__control_wait(void)
{
	if (gate_depth || move_depth || is_control_thread ||
	    !__atomic_load_n(&hold, __ATOMIC_SEQ_CST))
		return;
	wait_unheld();
}

/* hold += d under hold_mu; the waiters go when it reaches zero. */
static void hold_add(int d)
{
	pthread_mutex_lock(&hold_mu);
	if (__atomic_add_fetch(&hold, (unsigned)d, __ATOMIC_SEQ_CST) == 0)
		pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
}

/* The suspension's hold, on or off. */
static void suspend_hold(bool on)
{
	pthread_mutex_lock(&hold_mu);
	if (on != suspend_held) {
		__atomic_store_n(&suspend_held, on, __ATOMIC_RELEASE);
		if (__atomic_add_fetch(&hold, on ? 1u : -1u,
				       __ATOMIC_SEQ_CST) == 0)
			pthread_cond_broadcast(&hold_cv);
	}
	pthread_mutex_unlock(&hold_mu);
}

bool vgpu__control_thread(void)
{
	return is_control_thread;
}

bool vgpu__control_suspended(void)
{
	return __atomic_load_n(&suspend_held, __ATOMIC_ACQUIRE);
}

/* Back to where vgpu__moves_begin found this thread. */
/* A mover is not cancelled: it holds move_mu and the process's hold
 * across the driver's calls of the move (each may be a cancellation point
 * in the driver) and its own waits; a cancel takes effect after its
 * vgpu__moves_end. */
static __thread int move_cancel;

static void moves_undo(void)
{
	hold_add(-1);
	pthread_mutex_unlock(&move_mu);
	if (stepped_out) {
		stepped_out = false;
		gate_in();
	}
	pthread_setcancelstate(move_cancel, NULL);
}

bool vgpu__moves_begin(unsigned wait_ms)
{
	struct timespec pause = { 0, 200000 };
	uint64_t until;

	if (move_depth++)
		return true;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &move_cancel);
	if (gate_depth && !is_control_thread) {
		stepped_out = true;
		__atomic_sub_fetch(&in_gate, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_lock(&move_mu);
	hold_add(1);
	until = vgpu__mono_ns() + (uint64_t)wait_ms * 1000000ull;
	while (__atomic_load_n(&in_gate, __ATOMIC_SEQ_CST) &&
	       !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) {
		if (vgpu__mono_ns() >= until) {
			/* A thread stays inside (stopped, or its call waits
			 * on something of ours): no move now. */
			move_depth--;
			moves_undo();
			return false;
		}
		nanosleep(&pause, NULL);
	}
	return true;
}

void vgpu__moves_end(void)
{
	if (--move_depth)
		return;
	moves_undo();
}

static bool any_suspended(void)
{
	for (int i = 0; i < VGPU_MAX_DEVICES; i++)
		if (devctl[i].suspended)
			return true;
	return false;
}

/* ---- one device ------------------------------------------------------------ */

static void size_text(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(buf, len, "%.2f GiB", (double)b / (1ull << 30));
	else
		snprintf(buf, len, "%.1f MiB", (double)b / (1ull << 20));
}

static void suspend(struct vgpu_dev *dv, struct dev_ctl *c)
{
	uint64_t failed, left = 0;
	char a[32], b[32];

	/* Held from now on; what is inside the gate leaves first. A thread
	 * that stays inside (stopped in a copy) puts the suspension off to
	 * the next pass; vgpu-ctl sees no acknowledgement meanwhile. */
	suspend_hold(true);
	if (!vgpu__moves_begin(VGPU_MOVE_WAIT_MS)) {
		vgpu_log(VGPU_LOG_DEBUG, "device %d: suspension put off: a "
			 "thread stays inside a launch or a copy",
			 dv->ordinal);
		return;
	}
	if (vgpu__move_ranges(dv, VGPU_MOVE_SUSPEND, 0, &failed) < 0) {
		/* Queued work not done in time: put off to a later look. */
		vgpu__moves_end();
		suspend_hold(false);
		vgpu_log(VGPU_LOG_DEBUG, "device %d: suspension put off: work "
			 "queued on a context was not done in time",
			 dv->ordinal);
		return;
	}
	vgpu__moves_end();
	c->suspended = true;
	vgpu_ledger_slot_flags(dv->slot, VGPU_LEDGER_SLOT_SUSPENDED, 0);
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		if (VGPU_USAGE_IS_DEVICE(k))
			left += vgpu_ledger_slot_usage(dv->slot, k);
	size_text(vgpu__resident_movable(dv->ordinal, false), a, sizeof(a));
	size_text(left, b, sizeof(b));
	vgpu_log(failed ? VGPU_LOG_WARN : VGPU_LOG_INFO, "device %d: "
		 "suspended by vgpu-ctl: launches held, %s on the host, %s "
		 "still charged on the device%s", dv->ordinal, a, b,
		 failed ? " (some ranges could not be moved: the spill "
		 "limit or host memory)" : "");
}

static void resume(struct vgpu_dev *dv, struct dev_ctl *c)
{
	uint64_t failed;

	if (vgpu__move_ranges(dv, VGPU_MOVE_RESUME, 0, &failed) < 0)
		failed = vgpu__resident_movable(dv->ordinal, false);
	c->suspended = false;
	c->retry_ns = failed ? vgpu__mono_ns() + RETRY_NS : 0;
	vgpu_ledger_slot_flags(dv->slot, 0, VGPU_LEDGER_SLOT_SUSPENDED);
	if (failed) {
		char a[32];

		size_text(failed, a, sizeof(a));
		vgpu_log(VGPU_LOG_WARN, "device %d: resumed by vgpu-ctl; %s "
			 "stays on the host until the device has room (tried "
			 "again every second)", dv->ordinal, a);
	} else {
		vgpu_log(VGPU_LOG_INFO, "device %d: resumed by vgpu-ctl",
			 dv->ordinal);
	}
}

/* Whether the tenant holds more than its limit with ranges that could go. */
static bool over_limit(struct vgpu_dev *dv)
{
	return vgpu_ledger_tenant_used(dv->slot) >
		       vgpu_ledger_tenant_limit(dv->slot) &&
	       vgpu__resident_movable(dv->ordinal, true);
}

static void pass_device(struct vgpu_dev *dv, struct dev_ctl *c)
{
	uint64_t changes = vgpu_ledger_ctl_changes(dv->slot);
	bool want = vgpu_ledger_suspended(dv->slot);
	uint32_t flags = vgpu_ledger_slot_flags_get(dv->slot);

	/* Set once, and again after the ledger file moved. */
	if (!(flags & VGPU_LEDGER_SLOT_CONTROL))
		vgpu_ledger_slot_flags(dv->slot, VGPU_LEDGER_SLOT_CONTROL, 0);
	vgpu__dev_watch_terms(dv);	/* an idle process's share too */
	if (want && !c->suspended) {
		suspend(dv, c);
	} else if (!want && c->suspended) {
		resume(dv, c);
	} else if (want && vgpu__resident_movable(dv->ordinal, true)) {
		/* Made while suspended (an allocation already past the
		 * gate): out too. */
		vgpu__move_ranges(dv, VGPU_MOVE_SUSPEND, 0, NULL);
	} else if (!want && vgpu__mono_ns() >= c->retry_ns &&
		   vgpu__host_range_fits(dv)) {
		/* Left on the host by a resume the device had no room for,
		 * or by a lowered limit since raised: back, at most once a
		 * second while the device refuses. */
		uint64_t failed;

		if (vgpu__move_ranges(dv, VGPU_MOVE_RESUME, 0, &failed) < 0)
			failed = 1;
		c->retry_ns = failed ? vgpu__mono_ns() + RETRY_NS : 0;
	}
	if (!want && over_limit(dv))
		vgpu__move_ranges(dv, VGPU_MOVE_FIT, 0, NULL);
	if (c->suspended == want &&
	    __atomic_load_n(&vgpu_ledger_slot_record(dv->slot)->ctl_acked,
			    __ATOMIC_RELAXED) != changes)
		vgpu_ledger_slot_ack(dv->slot, changes);
}

static void *control_main(void *arg)
{
	struct timespec pause = { 0, CONTROL_POLL_MS * 1000000L };

	(void)arg;
	vgpu_thread_mine(true);
	is_control_thread = true;
	while (!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&pass_mu);
		for (int i = 0; i < VGPU_MAX_DEVICES &&
				!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
		     i++) {
			struct vgpu_dev *dv = vgpu__dev_peek(i);

			if (dv && dv->slot && dv->control)
				pass_device(dv, &devctl[i]);
		}
		suspend_hold(any_suspended());
		pthread_mutex_unlock(&pass_mu);
		nanosleep(&pause, NULL);
	}
	return NULL;
}

void vgpu__control_start(void)
{
	static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
	int rc;

	pthread_mutex_lock(&start_mu);
	if (started) {
		pthread_mutex_unlock(&start_mu);
		return;
	}
	/* The thread takes no signal of the job's but the faults. */
	if ((rc = vgpu_thread_start(control_main, NULL)) == 0) {
		started = true;
		vgpu__gate_use();
	} else {
		vgpu_log(VGPU_LOG_ERROR, "VGPU_CONTROL: cannot start the "
			 "control thread (%s); this process cannot be "
			 "suspended", strerror(rc));
	}
	pthread_mutex_unlock(&start_mu);
}

bool vgpu__control_stopping(void)
{
	return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

bool vgpu__control_exit(void)
{
	struct timespec until;
	bool ok;

	if (!started)
		return true;
	__atomic_store_n(&stopping, true, __ATOMIC_RELEASE);
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 2;
	/* A pass in progress ends first: it stops between two moves (one
	 * range's move, 256 MiB, takes a third of a second on the simulated
	 * bus). One stuck in a driver call is not waited for past 2 s: the
	 * ledgers are not left then, and the others reclaim this process's
	 * charges when it is gone. */
	ok = vgpu_mutex_lock_by(&pass_mu, &until);
	if (!ok)
		vgpu_log(VGPU_LOG_WARN, "exit: the control thread is still "
			 "moving memory after 2 s; this process's charges are "
			 "left to the ledger's reclaiming of dead processes");
	return ok;
}

void vgpu__control_fork_child(void)
{
	/* The thread is the parent's: the child starts its own when it
	 * attaches a device again. */
	pthread_mutex_init(&hold_mu, NULL);
	pthread_cond_init(&hold_cv, NULL);
	pthread_mutex_init(&pass_mu, NULL);
	pthread_mutex_init(&move_mu, NULL);
	__atomic_store_n(&hold, 0, __ATOMIC_RELAXED);
	suspend_held = false;
	__atomic_store_n(&in_gate, 0, __ATOMIC_RELAXED);
	gate_depth = 0;
	move_depth = 0;
	stepped_out = false;
	started = false;
	/* The child's movable ranges are gone (overcommit.c): no gate until
	 * it makes some, or starts its control thread. */
	__atomic_store_n(&vgpu__gate_on, false, __ATOMIC_RELAXED);
	memset(devctl, 0, sizeof(devctl));
}
