/* simtest_record.c - the suite's reader of the device's record
 * (vgpu_sim_record.h), apart from simtest.c: it calls the simulator's
 * exports, which tests/intercept, linking simtest.c but reaching the
 * simulator only through the shim, do not link.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the device's record --------------------------------------------------- */

void simtest_record_read(struct simtest_record *r, const char *dir)
{
	size_t max;

	memset(r, 0, sizeof(*r));
	cr_assert_geq(vsim_record_read(dir, 0, NULL, 0, &r->info), 0,
		      "no device state to read");
	max = (size_t)(r->info.recorded - r->info.lost);
	r->iv = calloc(max ? max : 1, sizeof(*r->iv));
	cr_assert_not_null(r->iv);
	r->n = vsim_record_read(dir, 0, r->iv, max, &r->info);
	cr_assert_geq(r->n, 0);
	cr_assert_eq(r->info.torn, 0, "%u intervals torn", r->info.torn);
}

void simtest_record_free(struct simtest_record *r)
{
	free(r->iv);
	memset(r, 0, sizeof(*r));
}

uint64_t simtest_record_busy(const struct simtest_record *r, int32_t pid,
			     uint64_t from, uint64_t to)
{
	uint64_t sum = 0;

	cr_assert_leq(r->info.lost_end_ns, from, "the record lost intervals "
		      "up to %llu, after %llu",
		      (unsigned long long)r->info.lost_end_ns,
		      (unsigned long long)from);
	for (long i = 0; i < r->n; i++) {
		const struct vsim_interval *v = &r->iv[i];
		uint64_t a = v->start_ns > from ? v->start_ns : from;
		uint64_t b = v->end_ns < to ? v->end_ns : to;

		if ((pid && v->pid != pid) || b <= a)
			continue;
		sum += (b - a) * v->sms / r->info.sm_total;
	}
	return sum;
}

long simtest_record_count(const struct simtest_record *r, int32_t pid)
{
	long n = 0;

	for (long i = 0; i < r->n; i++)
		n += !pid || r->iv[i].pid == pid;
	return n;
}

/* Interval edges for the sweep: ends before starts at one instant (an
 * interval is [start, end)). */
struct edge {
	uint64_t t;
	int64_t sms;
};

static int edge_cmp(const void *a, const void *b)
{
	const struct edge *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return (x->sms > y->sms) - (x->sms < y->sms);
}

void simtest_record_assert_fits(const struct simtest_record *r)
{
	struct edge *e = calloc((size_t)r->n * 2 + 1, sizeof(*e));
	int64_t held = 0;

	cr_assert_not_null(e);
	for (long i = 0; i < r->n; i++) {
		cr_assert_leq(r->iv[i].start_ns, r->iv[i].end_ns);
		e[2 * i] = (struct edge){ r->iv[i].start_ns, r->iv[i].sms };
		e[2 * i + 1] = (struct edge){ r->iv[i].end_ns,
					      -(int64_t)r->iv[i].sms };
	}
	qsort(e, (size_t)r->n * 2, sizeof(*e), edge_cmp);
	for (long i = 0; i < r->n * 2; i++) {
		held += e[i].sms;
		cr_assert_leq(held, (int64_t)r->info.sm_total,
			      "%lld SMs of %u held at %llu", (long long)held,
			      r->info.sm_total, (unsigned long long)e[i].t);
	}
	free(e);
}

struct vsim_slot_time simtest_record_own(void)
{
	struct vsim_slot_time t[256];
	long n = vsim_record_slots(NULL, 0, t, 256);

	cr_assert_gt(n, 0);
	for (long i = 0; i < n; i++)
		if (t[i].pid == getpid())
			return t[i];
	cr_assert_fail("no slot of this process");
	return t[0];
}
