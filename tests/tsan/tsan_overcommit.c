/* tsan_overcommit.c - overcommit (VGPU_OVERCOMMIT=host) from several
 * threads under the shim on the simulated GPU, all of it built with TSan:
 * threads allocate past a 32 MiB slice (the least recently used ranges are
 * moved to the host), write and check their data, and free in an order
 * that races frees with the moves and promotions other threads make. At
 * the end the slice is as free as before. Environment:
 * tests/tsan/meson.build.
 *
 * The job's copies are kept apart from its allocation calls (copies run
 * together, allocation calls run together, never the two at once), as
 * docs/overcommit.md ("Threads") asks; moves and frees still race. */
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "tsan_check.h"

#define THREADS	6
#define ROUNDS	12
#define LIVE	2
#define MIB	((size_t)1 << 20)

#define CU(call) CHECK((call) == CUDA_SUCCESS)

static CUcontext ctx;

/* Copies and allocation calls apart: a count of each, one kind at a time. */
static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fence_cond = PTHREAD_COND_INITIALIZER;
static int fence_active[2];

static void fence_enter(int kind)
{
	pthread_mutex_lock(&fence_lock);
	while (fence_active[!kind])
		pthread_cond_wait(&fence_cond, &fence_lock);
	fence_active[kind]++;
	pthread_mutex_unlock(&fence_lock);
}

static void fence_leave(int kind)
{
	pthread_mutex_lock(&fence_lock);
	if (--fence_active[kind] == 0)
		pthread_cond_broadcast(&fence_cond);
	pthread_mutex_unlock(&fence_lock);
}

enum { ALLOCATING, COPYING };

struct buf {
	CUdeviceptr p;
	size_t bytes;
	uint32_t id;
};

static uint32_t pattern(uint32_t id, size_t word)
{
	return id * 0x9e3779b1u ^ (uint32_t)word * 0x85ebca6bu;
}

static void write_check(const struct buf *b, uint32_t *host, bool write)
{
	size_t n = b->bytes / 4;

	if (write)
		for (size_t i = 0; i < n; i++)
			host[i] = pattern(b->id, i);
	fence_enter(COPYING);
	if (write)
		CU(cuMemcpyHtoD(b->p, host, b->bytes));
	else
		CU(cuMemcpyDtoH(host, b->p, b->bytes));
	fence_leave(COPYING);
	for (size_t i = 0; !write && i < n; i++)
		CHECK(host[i] == pattern(b->id, i));
}

static void alloc_buf(struct buf *b, int me, int round)
{
	b->bytes = (2 + (size_t)((me + round) % 5)) * MIB;
	b->id = (uint32_t)(me << 16 | round);
	fence_enter(ALLOCATING);
	CU(cuMemAlloc(&b->p, b->bytes));
	fence_leave(ALLOCATING);
}

static void free_buf(const struct buf *b)
{
	fence_enter(ALLOCATING);
	CU(cuMemFree(b->p));
	fence_leave(ALLOCATING);
}

static void *worker(void *arg)
{
	int me = *(int *)arg;
	struct buf live[LIVE];
	uint32_t *host = malloc(7 * MIB);
	int n = 0;

	CHECK(host != NULL);
	CU(cuCtxSetCurrent(ctx));
	for (int r = 0; r < ROUNDS; r++) {
		if (n == LIVE) {
			/* The older or the newer, by turns. */
			int k = (me + r) % LIVE;

			write_check(&live[k], host, false);
			free_buf(&live[k]);
			live[k] = live[--n];
		}
		alloc_buf(&live[n], me, r);
		write_check(&live[n], host, true);
		n++;
	}
	while (n--) {
		write_check(&live[n], host, false);
		free_buf(&live[n]);
	}
	free(host);
	return NULL;
}

int main(void)
{
	size_t free0, free1, total;
	int ids[THREADS];

	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	CU(cuMemGetInfo(&free0, &total));
	CHECK(total == (size_t)32 << 20);	/* the slice: the shim is in */
	for (int i = 0; i < THREADS; i++)
		ids[i] = i;
	tsan_run_threads(THREADS, worker, ids, sizeof(ids[0]));
	CU(cuMemGetInfo(&free1, &total));
	CHECK(free1 == free0);
	CU(cuDevicePrimaryCtxRelease(0));
	printf("tsan-overcommit: %d threads, %d rounds of alloc past the "
	       "slice, check, free: ok\n", THREADS, ROUNDS);
	return 0;
}
