/* tsan_throttle.c - the compute throttle under TSan: two tenants (a hard
 * 30% and an elastic 50%), four threads each, admitting, settling and
 * accounting waits on one ledger at once; then eight threads recording
 * ends in the GPU's timeline out of order, the newest end kept exact. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "options.h"
#include "throttle.h"
#include "timeline.h"
#include "tsan_check.h"

#define THREADS		8
#define LAUNCHES	2000

struct arg {
	struct vgpu_slot *s;
	int admitted, waited;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define ENDS		20000

struct ends {
	struct vgpu_ledger *l;
	unsigned seed;
	uint64_t max;
};

/* Ends near a common clock, each thread's out of order with the others'
 * and now and then with its own. */
static void *record_ends(void *p)
{
	struct ends *e = p;

	for (int i = 0; i < ENDS; i++) {
		uint64_t end = 1000000000ull + (uint64_t)i * 100 +
			       rand_r(&e->seed) % 5000;

		vgpu_timeline_record(e->l, end);
		if (end > e->max)
			e->max = end;
	}
	return NULL;
}

static void *admit_settle(void *p)
{
	struct arg *a = p;

	while (a->admitted < LAUNCHES) {
		uint64_t wait = vgpu_throttle_admit(a->s, now_ns(), 20000);

		if (wait == 0) {
			vgpu_throttle_settle(a->s, 15000 + a->admitted % 10000,
					     20000);
			a->admitted++;
		} else {
			struct timespec ts = { 0, (long)(wait < 200000 ?
							 wait : 200000) };

			nanosleep(&ts, NULL);
			vgpu_throttle_waited(a->s, (uint64_t)ts.tv_nsec);
			a->waited++;
		}
	}
	return NULL;
}

int main(void)
{
	char dir[] = "/tmp/vgpu-tsan-throttle.XXXXXX", err[512], cmd[600];
	struct vgpu_ledger *l;
	struct vgpu_slot *s[2];
	struct arg a[THREADS];
	int waited = 0;

	CHECK(mkdtemp(dir) != NULL);
	CHECK(vgpu_ledger_open(dir, "GPU-tsan", UINT64_C(80) << 30, &l, err,
			       sizeof(err)) == 0);
	CHECK(vgpu_ledger_join(l, "hard", 0, getpid(), 0, &s[0], err,
			       sizeof(err)) >= 0);
	CHECK(vgpu_ledger_join(l, "elastic", 0, getpid(), 0, &s[1], err,
			       sizeof(err)) >= 0);
	CHECK(vgpu_throttle_configure(s[0], 30, VGPU_POLICY_HARD,
				      now_ns()) == 0);
	CHECK(vgpu_throttle_configure(s[1], 50, VGPU_POLICY_ELASTIC,
				      now_ns()) == 0);
	for (int i = 0; i < THREADS; i++)
		a[i] = (struct arg){ s[i % 2], 0, 0 };
	tsan_run_threads(THREADS, admit_settle, a, sizeof(a[0]));
	for (int i = 0; i < THREADS; i++)
		waited += a[i].waited;
	CHECK(waited > 0);
	{
		struct ends e[THREADS];
		const struct vgpu_ledger_timeline *tl = (const void *)(
			(const char *)vgpu_ledger_header(l) +
			VGPU_LEDGER_TIMELINE_OFFSET);
		uint64_t max = 0;

		for (int i = 0; i < THREADS; i++)
			e[i] = (struct ends){ l, (unsigned)i + 1, 0 };
		tsan_run_threads(THREADS, record_ends, e, sizeof(e[0]));
		for (int i = 0; i < THREADS; i++)
			max = e[i].max > max ? e[i].max : max;
		CHECK(__atomic_load_n(&tl->newest_ns, __ATOMIC_ACQUIRE) ==
		      max);
		CHECK(vgpu_timeline_late(l) > 0);
		CHECK(vgpu_timeline_late(l) < (uint64_t)THREADS * ENDS);
	}
	vgpu_ledger_leave(s[0]);
	vgpu_ledger_leave(s[1]);
	vgpu_ledger_close(l);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
	printf("tsan-throttle: %d threads, %d launches each, %d waits: ok\n",
	       THREADS, LAUNCHES, waited);
	return 0;
}
