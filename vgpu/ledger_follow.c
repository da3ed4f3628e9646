/* ledger_follow.c - a process that makes no driver call still follows its
 * ledger's name.
 *
 * A process notices that its ledger file was deleted, replaced or
 * truncated on its slow paths (reserve, release, poll: ledger_move.c). A
 * job that allocated and then waits on the host (a notebook between cells,
 * a server between requests) makes none of those calls, so its charges
 * would stay in a file no new process sees: a new job in the new file
 * would be given memory the idle one holds. The follower is one thread of
 * the library's own, started at the first ledger joined, that makes the
 * same test every FOLLOW_NS for each handle registered, and moves.
 *
 * A pass holds pass_mu; a handle is let go (vgpu_ledger_unfollow) under
 * it, so the thread never touches a handle being closed. A pass that
 * moves may wait for this process's threads to leave the ledger (at most
 * 2 s, ledger_move.c); letting go waits UNFOLLOW_WAIT_S for it, never
 * longer, so the job's exit is never held up for long. The thread takes
 * no signal of the job's. A fork's child has no thread: it starts its own
 * when it joins a ledger again.
 */
#include "ledger_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "log.h"

#define FOLLOW_NS	250000000L	/* a pass this often */
#define FOLLOW_MAX	64		/* handles followed at once */
#define UNFOLLOW_WAIT_S	3		/* a pass's move ends within 2 s */

static pthread_mutex_t pass_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_ledger *followed[FOLLOW_MAX];	/* pass_mu */
static bool started;		/* the thread exists in this process
				 * (pass_mu) */
static bool start_failed;	/* said once (pass_mu) */

static void *follow_main(void *arg)
{
	struct timespec pause = { 0, FOLLOW_NS };

	(void)arg;
	for (;;) {
		nanosleep(&pause, NULL);
		pthread_mutex_lock(&pass_mu);
		for (int i = 0; i < FOLLOW_MAX; i++)
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
}

static void start_locked(void)
{
	static bool atfork_done;
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (!atfork_done) {
		pthread_atfork(NULL, NULL, fork_child);
		atfork_done = true;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	rc = pthread_create(&t, &attr, follow_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) {
		started = true;
	} else if (!start_failed) {
		start_failed = true;
		vgpu_log(1, "ledger: cannot start the thread that "
			 "follows the ledger file (%s); an idle process follows "
			 "a deleted or replaced file at its next allocation, "
			 "free or synchronisation instead", strerror(rc));
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

bool vgpu_ledger_unfollow(struct vgpu_ledger *l)
{
	struct timespec until;

	if (!l)
		return true;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += UNFOLLOW_WAIT_S;
	if (pthread_mutex_timedlock(&pass_mu, &until) != 0) {
		vgpu_log(1, "ledger '%s': the thread following "
			 "the file is still moving after %d s; this process's "
			 "charges are left to the ledger's reclaiming of dead "
			 "processes", vgpu_ledger_path(l), UNFOLLOW_WAIT_S);
		return false;
	}
	for (int i = 0; i < FOLLOW_MAX; i++)
		if (followed[i] == l)
			followed[i] = NULL;
	pthread_mutex_unlock(&pass_mu);
	return true;
}
