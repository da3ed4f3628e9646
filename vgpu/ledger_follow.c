/* ledger_follow.c - a process that makes no driver call still follows its
 * ledger's name.
 *
 * A process notices that its ledger file was deleted, replaced or
 * truncated on its slow paths (reserve, release, poll: ledger_move.c). A
 * job that allocated and then waits on the host (a notebook between cells,
 * a server between requests) makes none of those calls, so its charges
 * would stay in a file no new process sees: a new job in the new file
 * would be given memory the idle one holds. The follower is one thread of
 * the library's own (thread.c: no signal of the job's but the faults, the
 * default stack), started at the first ledger joined, that makes the same
 * test every FOLLOW_NS for each handle registered, and moves. On each pass
 * it also ends the process when the job's own threads have all ended (a
 * main thread that called pthread_exit): it must not keep the job alive.
 *
 * A pass holds pass_mu; a handle is let go (vgpu_ledger_unfollow) under
 * it, so the thread never touches a handle being closed. A pass that
 * moves may wait for this process's threads to leave the ledger (at most
 * 2 s per handle, ledger_move.c); at exit the first handle let go sets
 * `leaving`, which ends a pass between two handles, and every handle is
 * let go by one deadline, UNFOLLOW_WAIT_S after the first, so the job's
 * exit is held up that long at most whatever the number of devices. A
 * fork's child has no thread: it starts its own when it joins a ledger
 * again.
 */
#include "ledger_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "thread.h"

#define FOLLOW_NS	250000000L	/* a pass this often */
#define FOLLOW_MAX	64		/* handles followed at once */
#define UNFOLLOW_WAIT_S	3		/* a handle's move ends within 2 s */

static pthread_mutex_t pass_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_ledger *followed[FOLLOW_MAX];	/* pass_mu */
static bool started;		/* the thread exists in this process
				 * (pass_mu) */
static bool start_failed;	/* said once (pass_mu) */
static bool leaving;		/* the process is leaving its ledgers
				 * (atomic) */
static struct timespec leave_by;	/* the deadline of every unfollow
					 * (set once, by the first) */
static pthread_once_t leave_once = PTHREAD_ONCE_INIT;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void *follow_main(void *arg)
{
	struct timespec pause = { 0, FOLLOW_NS };

	(void)arg;
	vgpu_thread_mine(true);
	for (;;) {
		nanosleep(&pause, NULL);
		if (__atomic_load_n(&leaving, __ATOMIC_ACQUIRE))
			continue;
		if (vgpu_job_threads_gone())
			exit(0);	/* as glibc at the last thread's end */
		pthread_mutex_lock(&pass_mu);
		for (int i = 0; i < FOLLOW_MAX &&
				!__atomic_load_n(&leaving, __ATOMIC_ACQUIRE);
		     i++)
			if (followed[i])
				vgpu_ledger_poll(followed[i]);
		pthread_mutex_unlock(&pass_mu);
	}
	return NULL;
}

static void fork_child(void)
{
	pthread_mutex_init(&pass_mu, NULL);
	memset(followed, 0, sizeof(followed));
	started = false;
	leaving = false;
	leave_once = (pthread_once_t)PTHREAD_ONCE_INIT;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, fork_child);
}

static void start_locked(void)
{
	int rc;

	pthread_once(&atfork_once, register_atfork);
	vgpu__gate_prepare();	/* while the library has no thread */
	rc = vgpu_thread_start(follow_main, NULL);
	if (rc == 0) {
		started = true;
	} else if (!start_failed) {
		start_failed = true;
		vgpu_log(1, "ledger: cannot start the thread that follows the "
			 "ledger file (%s); an idle process follows a deleted "
			 "or replaced file at its next allocation, free or "
			 "synchronisation instead", strerror(rc));
	}
}

bool vgpu_ledger_follow(struct vgpu_ledger *l)
{
	bool ok = false;

	if (!l)
		return false;
	pthread_mutex_lock(&pass_mu);
	for (int i = 0; i < FOLLOW_MAX && !ok; i++)
		ok = followed[i] == l;
	for (int i = 0; i < FOLLOW_MAX && !ok; i++) {
		if (!followed[i]) {
			followed[i] = l;
			ok = true;
		}
	}
	if (ok && !started)
		start_locked();
	ok = ok && started;
	pthread_mutex_unlock(&pass_mu);
	return ok;
}

static void set_leave_by(void)
{
	clock_gettime(CLOCK_MONOTONIC, &leave_by);
	leave_by.tv_sec += UNFOLLOW_WAIT_S;
}

bool vgpu_ledger_unfollow(struct vgpu_ledger *l)
{
	if (!l)
		return true;
	__atomic_store_n(&leaving, true, __ATOMIC_RELEASE);
	pthread_once(&leave_once, set_leave_by);
	if (!vgpu_mutex_lock_by(&pass_mu, &leave_by)) {
		vgpu_log(1, "ledger '%s': the thread following the file is "
			 "still moving %d s after this process began to "
			 "leave; its charges are left to the ledger's "
			 "reclaiming of dead processes", vgpu_ledger_path(l),
			 UNFOLLOW_WAIT_S);
		return false;
	}
	for (int i = 0; i < FOLLOW_MAX; i++)
		if (followed[i] == l)
			followed[i] = NULL;
	pthread_mutex_unlock(&pass_mu);
	return true;
}
