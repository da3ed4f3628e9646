/* cu_util.h - what the compute test programs (share, escape, churn) share:
 * the host's clock and the report of a driver error. */
#ifndef CU_UTIL_H
#define CU_UTIL_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns: the clock the shim and the simulator use. */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Prints "PROG: WHAT: ERROR_NAME" on stderr; returns 2 (the exit status
 * of a program that could not run its test). */
static inline int cu_report(const char *prog, const char *what, CUresult r)
{
	const char *s = NULL;

	cuGetErrorName(r, &s);
	fprintf(stderr, "%s: %s: %s\n", prog, what, s ? s : "?");
	return 2;
}

#endif
