/* lifetime.c - the process's life as the shim sees it, in one place.
 *
 * Nothing runs when the library is loaded: no constructor, no signal
 * handler, no thread. What happens after that, in order:
 *
 * 1. once-init, on the first driver call: the options are read
 *    (init.c's vgpu__options, a pthread_once), which hands the core its
 *    primitives (prim.c) before any launch can reach it (vgpu__compute_on
 *    is set after, or later when vgpu-ctl gives a device a share) and registers the fork handler below; the real driver
 *    is loaded on the first call that needs it (real.c's vgpu__real_load,
 *    another pthread_once); each device joins its ledger on first use
 *    (devices.c's vgpu__dev_attach).
 * 1b. with VGPU_CONTROL, the first device's attach starts the control
 *    thread (control.c): the shim's one thread, signals blocked.
 * 2. a thread's first capped launch in a context arms its exit handler (a
 *    pthread key, vgpu__lifetime_watch_thread, the core's thread_watch
 *    primitive).
 * 3. fork: nothing is done in the parent (no lock of the shim is held
 *    across a driver call, and the child never uses one the parent held:
 *    it makes its own afresh). In the child, before it returns from fork:
 *    the allocation and handle tables, the VMM references and the pools
 *    are forgotten (they are the parent's to give back), then the launch
 *    state, the overcommit ranges and, last, the devices (their ledger
 *    slots are the parent's; the child joins again on its first call).
 *    The order matters only in that the devices go last: the others may
 *    look a device up while they forget.
 * 4. thread exit: the thread's capped launches are charged and its
 *    measuring events given back (launch.c, vgpu/measure.c), unless the
 *    process is leaving.
 * 5. exit (a library destructor): the control thread (VGPU_CONTROL,
 *    control.c) and the watch on a probe (vgpu/measure.c) are stopped after their
 *    passes; then every ledger is left, its slots given back; from then
 *    on thread-exit handlers do nothing (vgpu__leaving). A pass that does
 *    not end in time leaves the ledgers as a killed process does.
 *    A process killed by a signal never gets here: the others reclaim its
 *    usage when they notice (the ledger's per-slot locks).
 */
#include "devices.h"
#include "overcommit.h"
#include "share.h"
#include "track.h"
#include "vmm.h"

#include <pthread.h>

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool exit_key_ok;
static __thread bool tls_watched;
static bool used_cuda;

static void child_after_fork(void)
{
	vgpu__track_forget();
	vgpu__vmm_fork_child();
	vgpu__share_fork_child();
	vgpu_pools_fork_child();
	vgpu__launch_fork_child();
	vgpu__overcommit_fork_child();
	vgpu__control_fork_child();
	vgpu__dev_fork_child();
}

void vgpu__lifetime_started(void)
{
	vgpu_account_use(&vgpu__prim);
	vgpu_pools_use(&vgpu__pool_ops);
	vgpu_measure_use(&vgpu__prim);
	pthread_atfork(NULL, NULL, child_after_fork);
	__atomic_store_n(&used_cuda, true, __ATOMIC_RELEASE);
}

static void thread_exit(void *arg)
{
	(void)arg;
	if (!__atomic_load_n(&vgpu__leaving, __ATOMIC_ACQUIRE))
		vgpu__launch_thread_exit();
}

static void make_exit_key(void)
{
	exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0;
}

void vgpu__lifetime_watch_thread(void)
{
	if (tls_watched)
		return;
	tls_watched = true;
	pthread_once(&exit_once, make_exit_key);
	if (exit_key_ok)
		pthread_setspecific(exit_key, &tls_watched);
}

__attribute__((destructor)) static void at_exit(void)
{
	if (!__atomic_load_n(&used_cuda, __ATOMIC_ACQUIRE))
		return;
	/* exit() may run in a signal handler whose mask held SIGBUS, or in a
	 * thread that never looked a device up: the slots given back below
	 * are in a ledger's mapping. */
	vgpu__bus_open_slow();
	if (vgpu__control_exit() && vgpu_measure_watch_stop())
		vgpu__dev_leave_all();
}
