/* tsan_inflight.c - a process's tokens for launches in flight
 * (vgpu/inflight.c) under TSan: eight threads take, arm and give back
 * tokens while reading each other's ended launches in their holders'
 * place and asking when the first is due, and a ninth tears "contexts"
 * down (moves their epoch, then waits out the readers). Every launch is
 * paid exactly once: by its holder, by one reaper (its length), or, torn
 * down, at its estimate; and no event is read after its teardown. */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "inflight.h"
#include "tsan_check.h"

#define THREADS		8
#define LAUNCHES	20000
#define LEN		1000	/* what a reaper reads a launch as */
#define EST		300	/* what it was admitted with */

struct fevent {
	int done;		/* atomic */
	int gone;		/* atomic: its context was torn down */
};

static unsigned epoch;		/* the one context's teardowns */
static int stop;		/* atomic */
static long reads_after_teardown;	/* atomic */

static int query(struct vgpu_prim_event *e)
{
	struct fevent *f = (struct fevent *)e;

	if (__atomic_load_n(&f->gone, __ATOMIC_ACQUIRE))
		__atomic_add_fetch(&reads_after_teardown, 1, __ATOMIC_RELAXED);
	return __atomic_load_n(&f->done, __ATOMIC_ACQUIRE) ? VGPU_PRIM_DONE
							   : VGPU_PRIM_NOT_READY;
}

static bool read_fn(const struct vgpu_inflight_launch *l, uint64_t *ns,
		    bool *learn)
{
	if (query(l->end) != VGPU_PRIM_DONE)
		return false;
	*ns = LEN;
	*learn = true;
	return true;
}

struct arg {
	unsigned seed;
	long own, reaped_by_others, torn, reaps;
	struct fevent ev[2];
};

static void *launcher(void *p)
{
	struct arg *a = p;
	struct vgpu_inflight_mark m;

	for (int i = 0; i < LAUNCHES; i++) {
		struct fevent *e = &a->ev[i & 1];
		unsigned mine;
		uint64_t r;

		while (!vgpu_inflight_take(0, NULL, 0, &m)) {
			a->reaps += vgpu_inflight_reap(0, true, read_fn, NULL);
			if (rand_r(&a->seed) % 4 == 0)
				(void)vgpu_inflight_next_due(0);
			sched_yield();
		}
		/* Its events: recorded (not done), in the context now. */
		__atomic_store_n(&e->done, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->gone, 0, __ATOMIC_RELAXED);
		mine = __atomic_load_n(&epoch, __ATOMIC_SEQ_CST);
		vgpu_inflight_arm(0, &m, &(struct vgpu_inflight_launch){
			.start = (struct vgpu_prim_event *)e,
			.end = (struct vgpu_prim_event *)e,
			.epoch_word = &epoch, .epoch = mine,
			.estimate = EST, .issued = (uint64_t)i });
		/* It ends at once, or after others have had a look. */
		if (rand_r(&a->seed) % 2)
			__atomic_store_n(&e->done, 1, __ATOMIC_RELEASE);
		for (int k = rand_r(&a->seed) % 3; k > 0; k--)
			sched_yield();
		/* Its holder charges it as it runs, keeping reapers off. */
		if (rand_r(&a->seed) % 3 == 0 && vgpu_inflight_hold(0, &m))
			vgpu_inflight_unhold(0, &m, EST);
		__atomic_store_n(&e->done, 1, __ATOMIC_RELEASE);
		r = vgpu_inflight_release(0, &m);
		CHECK(m.tok == -1);
		if (r == UINT64_MAX)
			a->own++;
		else if (r == LEN)
			a->reaped_by_others++;
		else if (r == EST)
			a->torn++;
		else
			CHECK(!"a charge neither its length nor its estimate");
		/* Its events may be freed now: none may read them after. */
		vgpu_inflight_quiesce();
		__atomic_store_n(&e->gone, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void *teardowns(void *p)
{
	(void)p;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(&epoch, 1, __ATOMIC_SEQ_CST);
		vgpu_inflight_quiesce();
		for (int k = 0; k < 50; k++)
			sched_yield();
	}
	return NULL;
}

int main(void)
{
	static struct arg a[THREADS];
	long own = 0, others = 0, torn = 0, reaps = 0;
	pthread_t td;

	for (int i = 0; i < THREADS; i++)
		a[i].seed = 17u * (unsigned)i + 1;
	CHECK(pthread_create(&td, NULL, teardowns, NULL) == 0);
	tsan_run_threads(THREADS, launcher, a, sizeof(a[0]));
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	CHECK(pthread_join(td, NULL) == 0);
	for (int i = 0; i < THREADS; i++) {
		own += a[i].own;
		others += a[i].reaped_by_others;
		torn += a[i].torn;
		reaps += a[i].reaps;
	}
	/* Every launch given back once, each reaped one by exactly one. */
	CHECK(own + others + torn == (long)THREADS * LAUNCHES);
	CHECK(others + torn == reaps);
	CHECK(__atomic_load_n(&reads_after_teardown, __ATOMIC_RELAXED) == 0);
	for (int i = 0; i < VGPU_INFLIGHT_TOKENS; i++) {
		struct vgpu_inflight_mark m;

		CHECK(vgpu_inflight_take(0, NULL, 0, &m));	/* all free again */
	}
	printf("tsan-inflight: %d threads, %ld launches: %ld read by their "
	       "holders, %ld in their place, %ld torn down: ok\n", THREADS,
	       own + others + torn, own, others, torn);
	return 0;
}
