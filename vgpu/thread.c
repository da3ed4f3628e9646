/* thread.c - the library's own threads (the ledger's follower, the shim's
 * control thread and syncer): how they start, and what they must not do to
 * the job they live in.
 *
 * - They take none of the job's signals: every signal is blocked in them,
 *   except the synchronous faults (SIGBUS, SIGSEGV, SIGFPE, SIGILL,
 *   SIGTRAP, SIGSYS). A fault raised by a thread that blocks its signal
 *   kills the process whatever handler is installed, and the ledger's
 *   SIGBUS guard (ledger_guard.c) must catch a truncated file's fault in a
 *   follower's move as in any other thread.
 * - They run on the default stack: glibc carves a thread's static TLS
 *   (the program's and every library's it links) out of its stack, so a
 *   small fixed stack overflows in a program with much of it.
 * - They do not keep the process alive. A process ends when its last
 *   thread does; a job whose main thread called pthread_exit ends when its
 *   other threads have, and a thread of the library's must not keep it
 *   from ending. The follower asks vgpu_job_threads_gone on each pass, and
 *   ends the process as glibc would at the last thread's end (exit(0)).
 */
#include "thread.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MINE_MAX 8

static pid_t mine[MINE_MAX];	/* the library's threads' ids (atomic) */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
	/* The child has only the thread that forked. */
	for (int i = 0; i < MINE_MAX; i++)
		__atomic_store_n(&mine[i], 0, __ATOMIC_RELAXED);
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, fork_child);
}

int vgpu_thread_start(void *(*fn)(void *), void *arg)
{
	static const int faults[] = { SIGBUS, SIGSEGV, SIGFPE, SIGILL, SIGTRAP,
				      SIGSYS };
	sigset_t block, old;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_once(&atfork_once, register_atfork);
	sigfillset(&block);
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		sigdelset(&block, faults[i]);
	pthread_sigmask(SIG_SETMASK, &block, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* This thread's id as /proc shows it. /proc/thread-self names
 * "PID/task/TID" in the pid namespace /proc was mounted in, which need not
 * be the process's own (a container given the host's /proc): there
 * gettid's id would match no entry of /proc/self/task, and the library's
 * threads would count as the job's. gettid's when the link cannot be
 * read. */
static pid_t proc_tid(void)
{
	char buf[96];
	ssize_t n = readlink("/proc/thread-self", buf, sizeof(buf) - 1);
	const char *p;
	long v;

	if (n > 0) {
		buf[n] = '\0';
		p = strrchr(buf, '/');
		v = p ? strtol(p + 1, NULL, 10) : 0;
		if (v > 0)
			return (pid_t)v;
	}
	return (pid_t)syscall(SYS_gettid);
}

static __thread int my_entry = -1;	/* this thread's in mine[] */

void vgpu_thread_mine(bool yes)
{
	pid_t tid;

	if (!yes) {
		if (my_entry >= 0)
			__atomic_store_n(&mine[my_entry], 0, __ATOMIC_RELAXED);
		my_entry = -1;
		return;
	}
	tid = proc_tid();
	for (int i = 0; i < MINE_MAX && my_entry < 0; i++) {
		pid_t free_ = 0;

		if (__atomic_compare_exchange_n(&mine[i], &free_, tid, false,
						__ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			my_entry = i;
	}
}

static bool is_mine(pid_t tid)
{
	for (int i = 0; i < MINE_MAX; i++)
		if (__atomic_load_n(&mine[i], __ATOMIC_RELAXED) == tid)
			return true;
	return false;
}

/* The process's thread count (num_threads, field 20 of /proc/self/stat; a
 * group leader that called pthread_exit is counted until the group ends),
 * or -1. */
static long threads_counted(void)
{
	char buf[1024];
	const char *p;
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');	/* fields 3 on follow the name */
	for (int field = 2; p && field < 20; field++)
		p = strchr(p + 1, ' ');
	return p ? strtol(p + 1, NULL, 10) : -1;
}

/* Whether thread tid of this process is a zombie (ended) or gone. */
static bool ended(const char *tid)
{
	char path[64], buf[512];
	const char *state;
	ssize_t n;
	int fd;

	/* Only a thread shown gone is gone: any other failure (no
	 * descriptor left, no memory) counts it alive. */
	snprintf(path, sizeof(path), "/proc/self/task/%s/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0 && errno == ESRCH) {
		close(fd);
		return true;
	}
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	state = strrchr(buf, ')');
	return state && state[1] == ' ' && (state[2] == 'Z' || state[2] == 'X');
}

bool vgpu_job_threads_gone(void)
{
	long counted = threads_counted(), ours = 0;
	struct dirent *e;
	bool gone = true;
	DIR *d;

	for (int i = 0; i < MINE_MAX; i++)
		ours += __atomic_load_n(&mine[i], __ATOMIC_RELAXED) != 0;
	/* Cheap test first: one file read per call. Beyond the library's
	 * threads, only an ended group leader may be counted. */
	if (counted < 0 || counted > ours + 1)
		return false;
	d = opendir("/proc/self/task");
	if (!d)
		return false;
	while (gone && (e = readdir(d)) != NULL) {
		pid_t tid = (pid_t)atoi(e->d_name);

		if (tid > 0 && !is_mine(tid) && !ended(e->d_name))
			gone = false;
	}
	closedir(d);
	return gone;
}

static bool passed(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec &&
		now.tv_nsec >= deadline->tv_nsec);
}

bool vgpu_mutex_lock_by(pthread_mutex_t *mu, const struct timespec *deadline)
{
	struct timespec pause = { 0, 1000000L };

	for (;;) {
		if (pthread_mutex_trylock(mu) == 0)
			return true;
		if (passed(deadline))
			return false;
		nanosleep(&pause, NULL);
	}
}
