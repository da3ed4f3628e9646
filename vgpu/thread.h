/* thread.h - the library's own threads (thread.c). */
#ifndef VGPU_THREAD_H
#define VGPU_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

/* Starts fn(arg) on a detached thread with the default stack and every
 * signal blocked but the synchronous faults. 0 or an errno value. */
int vgpu_thread_start(void *(*fn)(void *), void *arg);
/* Called by a thread of the library's at its start (yes) and before it
 * ends (!yes): the job's threads are those not marked so. */
void vgpu_thread_mine(bool yes);
/* True when every thread of the job has ended (the main thread after
 * pthread_exit among them) and only the library's are left: then the
 * process would have ended without them. Reads /proc/self/stat (and,
 * only then, each thread's stat): call it on a slow path. */
bool vgpu_job_threads_gone(void);
/* Locks mu unless deadline (CLOCK_MONOTONIC) passes first: true when
 * locked. For exit paths that must not wait on a thread stuck in a
 * driver call; it polls (trylock every millisecond), so the
 * sanitizers see an ordinary lock, and the wall clock's steps do not
 * move the deadline. */
bool vgpu_mutex_lock_by(pthread_mutex_t *mu, const struct timespec *deadline);

#endif
