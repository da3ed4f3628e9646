/* record.c - each process's share of a simulated device, by the device's
 * own record (vgpu_sim_record.h), per window.
 *
 *   sim-record STATE_DIR [--device N] [--window-ms MS] [--from NS --to NS]
 *              [--intervals]
 *
 * Reads <STATE_DIR>/dev<N>.state (N 0 by default) without attaching, and
 * prints, for the time from --from (default: the first interval's start)
 * to --to (default: the last interval's end):
 *
 *   record INTERVALS lost LOST whole-from NS sms SM_TOTAL span NS
 *   pid PID busy NS kernels K share PCT first NS last NS
 *                         (SM-weighted, over the span; its first interval's
 *                         start and last one's end, in the whole record)
 *   interval START_NS END_NS PID SMS         (with --intervals: each one
 *                         the record holds, in the order it was appended)
 *   window START_MS PID PCT                  (each whole window, each pid)
 *
 * START_MS is CLOCK_MONOTONIC in ms, as share --window-ms prints it. Windows
 * before the record's whole-from time are marked "incomplete" instead of a
 * share. Run it without the shim (LD_PRELOAD): it calls the simulator.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu_sim_record.h"

#define MAX_PIDS 256

struct span {
	uint64_t from, to;
};

/* SM-weighted time of pid's intervals inside s. */
static uint64_t busy(const struct vsim_interval *iv, long n, uint32_t sms,
		     int32_t pid, struct span s)
{
	uint64_t sum = 0;

	for (long i = 0; i < n; i++) {
		uint64_t a = iv[i].start_ns > s.from ? iv[i].start_ns : s.from;
		uint64_t b = iv[i].end_ns < s.to ? iv[i].end_ns : s.to;

		if (iv[i].pid == pid && b > a)
			sum += (b - a) * iv[i].sms / sms;
	}
	return sum;
}

/* The distinct pids of the record, in order of their first interval. */
static int pids_of(const struct vsim_interval *iv, long n, int32_t *out)
{
	int np = 0;

	for (long i = 0; i < n; i++) {
		bool seen = false;

		for (int j = 0; j < np && !seen; j++)
			seen = out[j] == iv[i].pid;
		if (!seen && np < MAX_PIDS)
			out[np++] = iv[i].pid;
	}
	return np;
}

static long kernels_of(const struct vsim_interval *iv, long n, int32_t pid)
{
	long k = 0;

	for (long i = 0; i < n; i++)
		k += iv[i].pid == pid;
	return k;
}

/* The first start and last end of pid's intervals. */
static struct span span_of(const struct vsim_interval *iv, long n,
			   int32_t pid)
{
	struct span s = { UINT64_MAX, 0 };

	for (long i = 0; i < n; i++) {
		if (iv[i].pid != pid)
			continue;
		if (iv[i].start_ns < s.from)
			s.from = iv[i].start_ns;
		if (iv[i].end_ns > s.to)
			s.to = iv[i].end_ns;
	}
	return s;
}

static void print_windows(const struct vsim_interval *iv, long n,
			  const struct vsim_record_info *info,
			  const int32_t *pids, int np, struct span all,
			  uint64_t w)
{
	for (uint64_t ws = all.from; ws + w <= all.to; ws += w) {
		struct span s = { ws, ws + w };

		for (int j = 0; j < np; j++) {
			if (info->lost_end_ns > ws) {
				printf("window %.0f %d incomplete\n",
				       (double)ws / 1e6, (int)pids[j]);
				continue;
			}
			printf("window %.0f %d %.2f\n", (double)ws / 1e6,
			       (int)pids[j], 100.0 * (double)busy(iv, n,
				       info->sm_total, pids[j], s) / (double)w);
		}
	}
}

static bool parse_ns(const char *s, uint64_t *out)
{
	*out = strtoull(s, NULL, 10);
	return true;
}

int main(int argc, char **argv)
{
	struct vsim_record_info info;
	struct vsim_interval *iv;
	struct span all = { UINT64_MAX, 0 };
	int32_t pids[MAX_PIDS];
	double window_ms = 1000;
	bool from_given = false, to_given = false, dump = false;
	int device = 0, np;
	long n;

	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: sim-record STATE_DIR [--device N] "
			"[--window-ms MS] [--from NS --to NS] [--intervals]\n");
		return 2;
	}
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--intervals"))
			dump = true;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--intervals"))
			i--;
		else if (!strcmp(argv[i], "--device"))
			device = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--window-ms"))
			window_ms = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--from"))
			from_given = parse_ns(argv[i + 1], &all.from);
		else if (!strcmp(argv[i], "--to"))
			to_given = parse_ns(argv[i + 1], &all.to);
	}
	if (vsim_record_read(argv[1], device, NULL, 0, &info) < 0) {
		fprintf(stderr, "sim-record: no device %d state in %s\n",
			device, argv[1]);
		return 2;
	}
	iv = calloc((size_t)(info.recorded - info.lost) + 1, sizeof(*iv));
	if (!iv)
		return 2;
	n = vsim_record_read(argv[1], device, iv,
			     (size_t)(info.recorded - info.lost), &info);
	if (n < 0 || !info.sm_total)
		return 2;
	for (long i = 0; i < n; i++) {
		if (!from_given && iv[i].start_ns < all.from)
			all.from = iv[i].start_ns;
		if (!to_given && iv[i].end_ns > all.to)
			all.to = iv[i].end_ns;
	}
	printf("record %ld lost %llu whole-from %llu sms %u span %llu\n", n,
	       (unsigned long long)info.lost,
	       (unsigned long long)info.lost_end_ns, info.sm_total,
	       (unsigned long long)(all.to > all.from ? all.to - all.from
						      : 0));
	np = pids_of(iv, n, pids);
	for (int j = 0; n && j < np && all.to > all.from; j++) {
		uint64_t b = busy(iv, n, info.sm_total, pids[j], all);
		struct span own = span_of(iv, n, pids[j]);

		printf("pid %d busy %llu kernels %ld share %.2f first %llu "
		       "last %llu\n", (int)pids[j], (unsigned long long)b,
		       kernels_of(iv, n, pids[j]),
		       100.0 * (double)b / (double)(all.to - all.from),
		       (unsigned long long)own.from,
		       (unsigned long long)own.to);
	}
	for (long i = 0; dump && i < n; i++)
		printf("interval %llu %llu %d %u\n",
		       (unsigned long long)iv[i].start_ns,
		       (unsigned long long)iv[i].end_ns, (int)iv[i].pid,
		       iv[i].sms);
	if (window_ms > 0 && n)
		print_windows(iv, n, &info, pids, np, all,
			      (uint64_t)(window_ms * 1e6));
	free(iv);
	return 0;
}
