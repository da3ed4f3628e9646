/* test_overcommit_threads.c - overcommit (VGPU_OVERCOMMIT=host) from many
 * threads at once: spilling, promotion, eviction and frees of the same
 * ranges race, and neither crash nor lose a byte.
 *
 * 32 threads share one context and a 256 MiB slice. Each allocates
 * buffers of random sizes (cuMemAlloc mostly, cuMemAllocAsync and
 * cuMemCreate sometimes), about twice the slice in all, fills them with a
 * pattern of their own (1 MiB at a time, by cuMemcpyHtoD, cuMemcpy3D(Async),
 * cuMemcpyPeer(Async) from a staging buffer or stream memory operations
 * (writes in a batch and alone, a wait), chosen at random), checks
 * some back the same ways and frees others in random order, while the
 * allocations
 * and frees of the other threads move their ranges to the host and back.
 * Every call returns CUDA_SUCCESS or the documented refusal (pools and VMM
 * handles do not spill: CUDA_ERROR_OUT_OF_MEMORY past the slice); every
 * byte reads back as written; at the end the tenant's usage is zero and
 * the simulator's memory is as free as before.
 *
 * The copies run while other threads' allocations and frees move the
 * ranges they copy to or from: the shim holds copies while a range moves
 * (docs/overcommit.md, "Threads"), so none is lost or faults.
 *
 * The seed is printed; VGPU_TEST_SEED=n repeats a run.
 */
#include "shimtest.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TENANT "oc-threads"
#define THREADS 32
#define ROUNDS 24
#define LIVE 3			/* buffers a thread holds at most */
#define CHUNK (1u << 20)	/* bytes per copy */
#define OOM CUDA_ERROR_OUT_OF_MEMORY

enum how { BY_ALLOC, BY_ASYNC };

struct buf {
	CUdeviceptr p;
	size_t bytes;
	uint32_t id;
	enum how how;
};

struct worker {
	int index;
	uint64_t rng;
	CUstream s;
	struct buf live[LIVE];
	int nlive;
	uint32_t next_id;
	uint32_t chunk[CHUNK / 4];
	CUdeviceptr staging;	/* CHUNK bytes: under the granularity, never moves */
	uint64_t copied_bytes;	/* written and checked */
};

static CUcontext ctx;
static unsigned seed;
static struct worker workers[THREADS];

/* ---- failures, recorded by any thread, asserted by the main one */

static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char fail_msg[256];
static int failures;

static void fail(const char *what, int thread, long a, long b)
{
	pthread_mutex_lock(&fail_lock);
	if (failures++ == 0)
		snprintf(fail_msg, sizeof(fail_msg), "thread %d: %s (%ld, %ld)",
			 thread, what, a, b);
	pthread_mutex_unlock(&fail_lock);
}

static bool failed(void)
{
	return __atomic_load_n(&failures, __ATOMIC_RELAXED) != 0;
}

/* ---- data */

static uint64_t next_rand(struct worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static uint32_t pattern(uint32_t id, size_t word)
{
	uint32_t x = id * 0x9e3779b1u ^ (uint32_t)word * 0x85ebca6bu;

	return x ^ x >> 15;
}

static void fill_chunk(struct worker *w, const struct buf *b, size_t off,
		       size_t n)
{
	for (size_t i = 0; i < n / 4; i++)
		w->chunk[i] = pattern(b->id, off / 4 + i);
}

/* n bytes of w->chunk to the device at d, the first 256 of them by stream
 * memory operations: a batch of 32-bit writes, 64-bit writes, and a wait
 * for the first word, behind a memset that clears them. */
static CUresult memop_chunk(struct worker *w, CUdeviceptr d, size_t n)
{
	CUstreamBatchMemOpParams ops[32];
	CUresult r;

	if ((r = cuMemcpyHtoD(d, w->chunk, n)) != CUDA_SUCCESS ||
	    (r = cuMemsetD32Async(d, 0, 64, w->s)) != CUDA_SUCCESS)
		return r;
	memset(ops, 0, sizeof(ops));
	for (int i = 0; i < 32; i++) {
		ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
		ops[i].writeValue.address = d + 4 * (CUdeviceptr)i;
		ops[i].writeValue.value = w->chunk[i];
	}
	if ((r = cuStreamBatchMemOp(w->s, 32, ops, 0)) != CUDA_SUCCESS)
		return r;
	for (int i = 32; i < 64; i += 2) {
		uint64_t v;

		memcpy(&v, &w->chunk[i], sizeof(v));
		if ((r = cuStreamWriteValue64(w->s, d + 4 * (CUdeviceptr)i, v,
					      0)) != CUDA_SUCCESS)
			return r;
	}
	if ((r = cuStreamWaitValue32(w->s, d, w->chunk[0],
				     CU_STREAM_WAIT_VALUE_EQ)) != CUDA_SUCCESS)
		return r;
	return cuStreamSynchronize(w->s);
}

/* n bytes between w->chunk and the device at d, to it (in) or from it,
 * by a way chosen at random: every copy the shim holds during a move. */
static CUresult copy_chunk(struct worker *w, CUdeviceptr d, size_t n, bool in)
{
	unsigned way = 1 + (unsigned)(next_rand(w) % 6);
	CUDA_MEMCPY3D c;
	CUresult r;

	if (way == 6 && in && n >= 256 && n % 8 == 0)
		return memop_chunk(w, d, n);
	if (way == 6 || (way <= 2 && n % 4096))
		return in ? cuMemcpyHtoD(d, w->chunk, n)
			  : cuMemcpyDtoH(w->chunk, d, n);
	if (way <= 2) {		/* 3D: slices of 2 rows of 1 KiB */
		memset(&c, 0, sizeof(c));
		c.WidthInBytes = 1024;
		c.Height = 2;
		c.Depth = n / 2048;
		c.srcMemoryType = in ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		c.dstMemoryType = in ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		c.srcHost = w->chunk;
		c.dstHost = w->chunk;
		c.srcDevice = d;
		c.dstDevice = d;
		c.srcPitch = c.dstPitch = 1024;
		c.srcHeight = c.dstHeight = 2;
		if (way == 1)
			return cuMemcpy3D(&c);
		r = cuMemcpy3DAsync(&c, w->s);
		return r == CUDA_SUCCESS ? cuStreamSynchronize(w->s) : r;
	}
	/* Peer, through the staging buffer. */
	if (in && (r = cuMemcpyHtoD(w->staging, w->chunk, n)) != CUDA_SUCCESS)
		return r;
	if (way <= 4) {
		r = in ? cuMemcpyPeer(d, ctx, w->staging, ctx, n)
		       : cuMemcpyPeer(w->staging, ctx, d, ctx, n);
	} else {
		r = in ? cuMemcpyPeerAsync(d, ctx, w->staging, ctx, n, w->s)
		       : cuMemcpyPeerAsync(w->staging, ctx, d, ctx, n, w->s);
		if (r == CUDA_SUCCESS)
			r = cuStreamSynchronize(w->s);
	}
	if (!in && r == CUDA_SUCCESS)
		r = cuMemcpyDtoH(w->chunk, w->staging, n);
	return r;
}

static bool write_buf(struct worker *w, const struct buf *b)
{
	CUresult r = CUDA_SUCCESS;

	for (size_t off = 0; off < b->bytes && r == CUDA_SUCCESS;
	     off += CHUNK) {
		size_t n = b->bytes - off < CHUNK ? b->bytes - off : CHUNK;

		fill_chunk(w, b, off, n);
		r = copy_chunk(w, b->p + off, n, true);
	}
	if (r != CUDA_SUCCESS)
		fail("a copy to the device", w->index, (long)r, (long)b->bytes);
	w->copied_bytes += b->bytes;
	return r == CUDA_SUCCESS;
}

static bool check_buf(struct worker *w, const struct buf *b)
{
	CUresult r = CUDA_SUCCESS;
	size_t bad = 0, first = 0;

	for (size_t off = 0; off < b->bytes && r == CUDA_SUCCESS;
	     off += CHUNK) {
		size_t n = b->bytes - off < CHUNK ? b->bytes - off : CHUNK;

		r = copy_chunk(w, b->p + off, n, false);
		for (size_t i = 0; r == CUDA_SUCCESS && i < n / 4; i++)
			if (w->chunk[i] != pattern(b->id, off / 4 + i) &&
			    bad++ == 0)
				first = off + 4 * i;
	}
	if (r != CUDA_SUCCESS)
		fail("a copy from the device", w->index, (long)r, (long)b->bytes);
	else if (bad)
		fail("words differ (count, first offset)", w->index, (long)bad,
		     (long)first);
	w->copied_bytes += b->bytes;
	return r == CUDA_SUCCESS && !bad;
}

/* ---- allocation calls */

/* 2-8 MiB (movable) mostly, sometimes under the 2 MiB granularity (plain,
 * never moves); whole words. */
static size_t random_size(struct worker *w)
{
	if (next_rand(w) % 8 == 0)
		return (size_t)(1 + next_rand(w) % 1000) * 1024;
	return ((size_t)2 << 20) + (next_rand(w) % (6u << 20)) / 4 * 4;
}

static CUresult alloc_buf(struct worker *w, struct buf *b)
{
	unsigned kind = (unsigned)(next_rand(w) % 10);
	CUresult r;

	b->bytes = random_size(w);
	b->id = (uint32_t)w->index << 16 | w->next_id++;
	b->how = kind < 8 ? BY_ALLOC : BY_ASYNC;
	if (b->how == BY_ALLOC) {
		r = cuMemAlloc(&b->p, b->bytes);
	} else {
		r = cuMemAllocAsync(&b->p, b->bytes, w->s);
		if (r == CUDA_SUCCESS)
			r = cuStreamSynchronize(w->s);
	}
	if (r != CUDA_SUCCESS && !(r == OOM && b->how == BY_ASYNC))
		fail(b->how == BY_ALLOC ? "cuMemAlloc" : "cuMemAllocAsync",
		     w->index, (long)r, (long)b->bytes);
	return r;
}

static void free_buf(struct worker *w, const struct buf *b)
{
	CUresult r;

	if (b->how == BY_ALLOC) {
		r = cuMemFree(b->p);
	} else {
		r = cuMemFreeAsync(b->p, w->s);
		if (r == CUDA_SUCCESS)
			r = cuStreamSynchronize(w->s);
	}
	if (r != CUDA_SUCCESS)
		fail("free", w->index, (long)r, (long)b->how);
}

/* A VMM handle, created and released: charged to the slice meanwhile, it
 * never spills (OOM past the slice). */
static void vmm_handle(struct worker *w)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUresult r;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	r = cuMemCreate(&h, (size_t)2 << 20, &prop, 0);
	if (r == CUDA_SUCCESS)
		r = cuMemRelease(h);
	if (r != CUDA_SUCCESS && r != OOM)
		fail("cuMemCreate/cuMemRelease", w->index, (long)r, 0);
}

/* ---- one thread */

static void drop_live(struct worker *w, int i, bool check)
{
	struct buf b = w->live[i];

	w->live[i] = w->live[--w->nlive];
	if (check)
		check_buf(w, &b);
	free_buf(w, &b);
}

static void round_of(struct worker *w)
{
	unsigned act = (unsigned)(next_rand(w) % 16);

	if (act == 0) {
		vmm_handle(w);
	} else if (w->nlive < LIVE && act < 9) {
		struct buf *b = &w->live[w->nlive];

		if (alloc_buf(w, b) == CUDA_SUCCESS) {
			w->nlive++;
			write_buf(w, b);
		}
	} else if (w->nlive && act < 13) {
		check_buf(w, &w->live[next_rand(w) % (unsigned)w->nlive]);
	} else if (w->nlive) {
		/* Freed in random order, checked first or not. */
		drop_live(w, (int)(next_rand(w) % (unsigned)w->nlive),
			  act & 1);
	}
}

static void *run(void *arg)
{
	struct worker *w = arg;
	CUresult r = cuCtxSetCurrent(ctx);

	if (r == CUDA_SUCCESS)
		r = cuStreamCreate(&w->s, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS)
		r = cuMemAlloc(&w->staging, CHUNK);
	if (r != CUDA_SUCCESS) {
		fail("setup", w->index, (long)r, 0);
		return NULL;
	}
	for (int i = 0; i < ROUNDS && !failed(); i++)
		round_of(w);
	while (w->nlive)
		drop_live(w, 0, true);
	r = cuMemFree(w->staging);
	if (r == CUDA_SUCCESS)
		r = cuStreamDestroy(w->s);
	if (r != CUDA_SUCCESS)
		fail("cuMemFree/cuStreamDestroy", w->index, (long)r, 0);
	return NULL;
}

/* ---- the main thread */

/* What the simulated device holds, by its own count, not the shim's. */
static uint64_t sim_used(void)
{
	return shimtest_device_used();
}

static void start(void)
{
	const char *s = getenv("VGPU_TEST_SEED");

	seed = s && *s ? (unsigned)strtoul(s, NULL, 0)
		       : (unsigned)time(NULL) ^ (unsigned)getpid();
	fprintf(stderr, "overcommit-threads: seed %u (VGPU_TEST_SEED=%u "
		"repeats it)\n", seed, seed);
	shimtest_env(TENANT, "256MiB");
	setenv("VGPU_OVERCOMMIT", "host", 1);
	ctx = simtest_init();
	shimtest_need("cuMemAllocAsync", 11020);
	shimtest_need("cuMemCreate", 10020);
	shimtest_need("cuMemcpy3D", 3020);
	shimtest_need("cuMemcpyPeer", 4000);
	shimtest_need("cuStreamBatchMemOp", 11070);
}

Test(overcommit_threads, alloc_free_spill_promote_lose_nothing,
     .fini = shimtest_cleanup, .timeout = 100)
{
	pthread_t th[THREADS];
	struct ledger_view v;
	CUmemoryPool pool;
	uint64_t bytes = 0;
	uint64_t used0;

	start();
	used0 = sim_used();
	for (int i = 0; i < THREADS; i++) {
		workers[i].index = i;
		workers[i].rng = ((uint64_t)seed << 32 | (unsigned)i) *
				 0x9e3779b97f4a7c15ull | 1;
		cr_assert_eq(pthread_create(&th[i], NULL, run, &workers[i]),
			     0);
	}
	for (int i = 0; i < THREADS; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		bytes += workers[i].copied_bytes;
	}
	cr_assert_eq(failures, 0, "%d failure(s), the first: %s (seed %u)",
		     failures, fail_msg, seed);
	cr_log_info("seed %u: %llu MiB written and checked", seed,
		    (unsigned long long)(bytes >> 20));

	/* Pools keep freed memory until trimmed; then nothing is held. */
	cr_assert_eq(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
	cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
	size_t f, t;
	cr_assert_eq(cuMemGetInfo(&f, &t), CUDA_SUCCESS);	/* settles */
	ledger_view_must(&v, NULL);
	ledger_assert_zero(&v, TENANT);
	ledger_view_close(&v);
	cr_assert_eq(sim_used(), used0, "the simulator's memory is released");
}
