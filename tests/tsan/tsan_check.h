/* tsan_check.h - what the TSan drivers share: a failed check prints where
 * and exits 1 (these are plain programs: Criterion does not start under
 * TSan here, see docs/building.md#sanitizers). */
#ifndef TSAN_CHECK_H
#define TSAN_CHECK_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)							\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "%s:%d: check failed: %s\n",	\
				__FILE__, __LINE__, #cond);		\
			exit(1);					\
		}							\
	} while (0)

/* Runs fn(&args[i]) on n threads and joins them. */
static inline void tsan_run_threads(int n, void *(*fn)(void *), void *args,
				    size_t arg_size)
{
	pthread_t th[64];

	CHECK(n <= 64);
	for (int i = 0; i < n; i++)
		CHECK(pthread_create(&th[i], NULL, fn,
				     (char *)args + (size_t)i * arg_size) == 0);
	for (int i = 0; i < n; i++)
		CHECK(pthread_join(th[i], NULL) == 0);
}

#endif
