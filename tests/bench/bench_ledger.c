/* bench_ledger.c - the ledger's allocation path: median nanoseconds per
 * vgpu_ledger_reserve + vgpu_ledger_release pair, uncontended, with 1, 16
 * and 256 process slots registered in the file. Run by hand
 * (`meson test --benchmark -C build` or build/tests/bench/bench-ledger);
 * the target (docs/ledger-abi.md) is about 40 ns, flat in the slot count. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"

#define PAIRS	1000000
#define RUNS	11

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One run: ns per pair over PAIRS pairs. */
static double run(struct vgpu_slot *s)
{
	uint64_t t0 = now_ns();
	int i;

	for (i = 0; i < PAIRS; i++) {
		if (vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 4096) != 0)
			abort();
		vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 4096);
	}
	return (double)(now_ns() - t0) / PAIRS;
}

/* The median of RUNS runs with `slots` slots registered (ours included). */
static double bench(const char *dir, int slots, double *min)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = NULL, *other;
	double ns[RUNS];
	char err[512];
	int i;

	if (vgpu_ledger_open(dir, "GPU-bench", UINT64_C(80) << 30, &l, err,
			     sizeof(err))) {
		fprintf(stderr, "bench-ledger: %s\n", err);
		exit(1);
	}
	for (i = 0; i < slots; i++)
		if (vgpu_ledger_join(l, "bench", VGPU_LEDGER_UNLIMITED,
				     getpid(), 0, i ? &other : &s, err,
				     sizeof(err)) < 0) {
			fprintf(stderr, "bench-ledger: %s\n", err);
			exit(1);
		}
	run(s);					/* warm up */
	for (i = 0; i < RUNS; i++)
		ns[i] = run(s);
	qsort(ns, RUNS, sizeof(ns[0]), cmp_double);
	*min = ns[0];
	vgpu_ledger_close(l);
	return ns[RUNS / 2];
}

int main(void)
{
	static const int counts[] = { 1, 16, 256 };
	char dir[] = "/tmp/vgpu-bench-ledger.XXXXXX", path[256];
	double median, min;
	size_t i;

	if (!mkdtemp(dir)) {
		perror("bench-ledger: mkdtemp");
		return 1;
	}
	printf("ledger: reserve + release pair, %d pairs x %d runs\n",
	       PAIRS, RUNS);
	printf("%-10s %12s %12s\n", "slots", "median ns", "min ns");
	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		median = bench(dir, counts[i], &min);
		printf("%-10d %12.1f %12.1f\n", counts[i], median, min);
	}
	snprintf(path, sizeof(path), "%s/GPU-bench.v%d.ledger", dir,
		 VGPU_LEDGER_VERSION);
	unlink(path);
	rmdir(dir);
	return 0;
}
