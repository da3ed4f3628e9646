/* test_overcommit_gate.c - the gate that holds a process's launches and
 * copies while its ranges move (VGPU_OVERCOMMIT=host; intercept/control.c)
 * never holds the job up for good.
 *
 * - A capped tenant's launching thread cancelled at random moments of its
 *   launches: the gate is left open, the context still synchronises, and
 *   a later allocation past the slice moves ranges as usual, data
 *   intact.
 * - A thread that stays inside a copy (a signal handler that sleeps
 *   there: a debugger's stop, a profiler's sample): an allocation past the
 *   slice gives up moving after a bounded wait and spills instead, while
 *   that thread is still inside.
 * - Copies queued on a second context's stream into a range: a move of
 *   the range waits for them (every context is synchronised first).
 */
#include "shimtest.h"
#include "vgpu_kernels.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define TENANT "oc-gate"

static CUcontext ctx;
static CUfunction touch;

static void start(void)
{
	CUmodule mod;

	shimtest_env(TENANT, "64MiB");
	setenv("VGPU_OVERCOMMIT", "host", 1);
	ctx = simtest_init();
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&touch, mod, "vgpu_touch"),
		     CUDA_SUCCESS);
}

static uint64_t usage(int kind)
{
	struct ledger_view v;
	uint64_t b;

	ledger_view_must(&v, NULL);
	b = ledger_tenant_bytes(&v, TENANT, kind);
	ledger_view_close(&v);
	return b;
}

/* Writes pattern seed over p (a kernel), or checks it (the host). */
static void fill(CUdeviceptr p, size_t bytes, uint32_t seed)
{
	uint64_t n = bytes / 4;
	uint32_t expect = 0;
	CUdeviceptr none = 0;
	void *params[] = { &p, &n, &expect, &seed, &none };

	cr_assert_eq(cuLaunchKernel(touch, 8, 1, 1, 64, 1, 1, 0, NULL, params,
				    NULL), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
}

static void check(CUdeviceptr p, size_t bytes, uint32_t seed)
{
	uint32_t *buf = malloc(bytes);
	size_t bad = 0;

	cr_assert_not_null(buf);
	cr_assert_eq(cuMemcpyDtoH(buf, p, bytes), CUDA_SUCCESS);
	for (size_t i = 0; i < bytes / 4; i++)
		bad += buf[i] != vgpu_touch_pattern(seed, i);
	free(buf);
	cr_assert_eq(bad, 0, "%zu words differ from seed %u", bad, seed);
}

/* start() under a 10% compute cap; returns the seed of the run's random
 * moments (VGPU_TEST_SEED=n repeats a run), printed. */
static unsigned start_capped(void)
{
	const char *env = getenv("VGPU_TEST_SEED");
	unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0)
				    : (unsigned)time(NULL) ^ (unsigned)getpid();

	fprintf(stderr, "overcommit-gate: seed %u (VGPU_TEST_SEED=%u repeats "
		"it)\n", seed, seed);
	setenv("VGPU_COMPUTE_LIMIT", "10", 1);
	start();
	return seed;
}

/* ---- a launching thread cancelled in the throttle ----------------------- */

static void *launch_forever(void *arg)
{
	CUdeviceptr p = *(CUdeviceptr *)arg;
	uint64_t n = 4 * MIB / 4;
	uint32_t expect = 0, seed = 99;
	CUdeviceptr none = 0;
	void *params[] = { &p, &n, &expect, &seed, &none };

	cuCtxSetCurrent(ctx);
	for (;;)
		cuLaunchKernel(touch, 8, 1, 1, 64, 1, 1, 0, NULL, params,
			       NULL);
	return NULL;
}

/* Cancelled at random moments of its launches (seeded: VGPU_TEST_SEED=n
 * repeats a run): in the admission's wait, in the share's reads of its
 * earlier launches' events, in the driver's launch. Each time the context
 * still synchronises, from this thread and from the shim's own syncer (an
 * allocation past the slice moves ranges), and the data are intact. */
#define CANCEL_ROUNDS 12

Test(overcommit_gate, a_cancelled_launcher_leaves_the_gate_open,
     .fini = shimtest_cleanup, .timeout = 90)
{
	CUdeviceptr b[3], scratch, more;
	unsigned seed;
	pthread_t t;
	void *res;

#ifdef __SANITIZE_ADDRESS__
	/* ASan cannot follow a cancelled thread's unwinding: it reports its
	 * own stack poisoning when the thread is destroyed (a stack overflow
	 * in sigaltstack). The plain build runs this test. */
	cr_skip_test("pthread_cancel under ASan");
#endif
	seed = start_capped();
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cuMemAlloc(&b[i], 16 * MIB), CUDA_SUCCESS);
		fill(b[i], 16 * MIB, 10 + (uint32_t)i);
	}
	cr_assert_eq(cuMemAlloc(&scratch, 4 * MIB), CUDA_SUCCESS);
	for (int round = 0; round < CANCEL_ROUNDS; round++) {
		/* 0 to 250 ms: at 10%, its launches wait for admission,
		 * and its first ones for their estimates. */
		useconds_t after = (useconds_t)(rand_r(&seed) % 250000u);

		cr_assert_eq(pthread_create(&t, NULL, launch_forever,
					    &scratch), 0);
		usleep(after);
		cr_assert_eq(pthread_cancel(t), 0);
		cr_assert_eq(pthread_join(t, &res), 0);
		cr_assert_eq(res, PTHREAD_CANCELED);
		cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS,
			     "round %d, cancelled after %u us", round,
			     (unsigned)after);
		/* Past the slice: the least recently used go to the host
		 * (every context synchronised by the syncer first). */
		cr_assert_eq(cuMemAlloc(&more, 32 * MIB), CUDA_SUCCESS);
		cr_expect_geq(usage(VGPU_USAGE_SPILLED), 16 * MIB,
			      "round %d, cancelled after %u us: nothing "
			      "moved", round, (unsigned)after);
		for (int i = 0; i < 3; i++)
			check(b[i], 16 * MIB, 10 + (uint32_t)i);
		cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	}
	cr_assert_eq(cuMemFree(scratch), CUDA_SUCCESS);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cuMemFree(b[i]), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 0);
}

/* ---- threads cancelled while they allocate and free ----------------------- */

static void free_held(void *arg)
{
	CUdeviceptr *p = arg;

	if (*p)
		cuMemFree(*p);
	*p = 0;
}

struct allocator {
	CUdeviceptr p;		/* held now, freed by the cleanup */
};

/* Allocates 8 MiB past a full slice (so a move makes room, or the range
 * spills), touches it with a capped kernel, frees it; again. */
static void *alloc_forever(void *arg)
{
	struct allocator *a = arg;
	uint64_t n = 8 * MIB / 4;
	uint32_t expect = 0, seed = 77;
	CUdeviceptr none = 0;
	void *params[] = { &a->p, &n, &expect, &seed, &none };

	cuCtxSetCurrent(ctx);
	for (;;) {
		pthread_cleanup_push(free_held, &a->p);
		if (cuMemAlloc(&a->p, 8 * MIB) == CUDA_SUCCESS) {
			cuLaunchKernel(touch, 8, 1, 1, 64, 1, 1, 0, NULL,
				       params, NULL);
			free_held(&a->p);
		}
		pthread_cleanup_pop(0);
		pthread_testcancel();
	}
	return NULL;
}

/* Cancelled at random moments (seeded) of allocations that move ranges
 * to the host and back, of frees that promote, of capped launches: the
 * movers are not cancelled inside a move (they hold the process's hold
 * and the move lock), so the process goes on: it synchronises,
 * allocates past the slice, the data are intact, and every byte is given
 * back, by the ledger's count and the device's. Before, a thread
 * cancelled inside a move's driver call left every launch held. */
#define ALLOCATORS 4

Test(overcommit_gate, cancelled_allocators_leave_the_process_usable,
     .fini = shimtest_cleanup, .timeout = 120)
{
	struct allocator a[ALLOCATORS];
	pthread_t t[ALLOCATORS];
	CUdeviceptr b[3], more;
	uint64_t base;
	unsigned seed;
	void *res;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("pthread_cancel under ASan");
#endif
	seed = start_capped();
	base = shimtest_device_used();
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cuMemAlloc(&b[i], 16 * MIB), CUDA_SUCCESS);
		fill(b[i], 16 * MIB, 20 + (uint32_t)i);
	}
	for (int round = 0; round < 6; round++) {
		useconds_t after = (useconds_t)(rand_r(&seed) % 400000u);

		for (int i = 0; i < ALLOCATORS; i++) {
			a[i].p = 0;
			cr_assert_eq(pthread_create(&t[i], NULL, alloc_forever,
						    &a[i]), 0);
		}
		usleep(after);
		for (int i = 0; i < ALLOCATORS; i++) {
			usleep((useconds_t)(rand_r(&seed) % 20000u));
			cr_assert_eq(pthread_cancel(t[i]), 0);
		}
		for (int i = 0; i < ALLOCATORS; i++) {
			cr_assert_eq(pthread_join(t[i], &res), 0);
			cr_assert_eq(res, PTHREAD_CANCELED);
		}
		cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS,
			     "round %d, cancelled after %u us", round,
			     (unsigned)after);
		cr_assert_eq(cuMemAlloc(&more, 48 * MIB), CUDA_SUCCESS,
			     "round %d", round);
		for (int i = 0; i < 3; i++)
			check(b[i], 16 * MIB, 20 + (uint32_t)i);
		cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	}
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cuMemFree(b[i]), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 0);
	cr_expect_eq(shimtest_device_used(), base,
		     "the device holds %llu bytes, %llu before",
		     (unsigned long long)shimtest_device_used(),
		     (unsigned long long)base);
}

/* ---- a thread cancelled while the shim attaches the device -------------- */

static void *attach_cancelled(void *arg)
{
	CUcontext c;

	(void)arg;
	pthread_cancel(pthread_self());	/* acts at its first point */
	cuInit(0);
	cuDevicePrimaryCtxRetain(&c, 0);
	pthread_testcancel();
	return NULL;
}

/* The first driver calls of a process, from a thread with a cancel
 * pending: the shim's attach (the ledger joined: opens, locks, logs) and
 * the simulator's start-up hold locks across cancellation points. They
 * are not cancelled there, so the main thread's own attach goes on.
 * Before, it waited for good on the lock the thread ended holding. */
Test(overcommit_gate, a_thread_cancelled_at_its_first_call_leaves_attach_open,
     .fini = shimtest_cleanup, .timeout = 60)
{
	CUcontext c;
	CUdeviceptr p;
	pthread_t t;
	void *res;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("pthread_cancel under ASan");
#endif
	shimtest_env(TENANT, "64MiB");
	simtest_env();
	cr_assert_eq(pthread_create(&t, NULL, attach_cancelled, NULL), 0);
	cr_assert_eq(pthread_join(t, &res), 0);
	cr_assert_eq(res, PTHREAD_CANCELED);
	cr_assert_eq(cuInit(0), CUDA_SUCCESS);
	cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&p, 4 * MIB), CUDA_SUCCESS);
	cr_expect_geq(usage(VGPU_USAGE_BUFFER), 4 * MIB);
	cr_assert_eq(cuMemFree(p), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_assert_eq(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

/* ---- a thread that stays inside a copy ------------------------------------ */

static volatile sig_atomic_t handler_done;

static void stay(int sig)
{
	(void)sig;
	sleep(4);
	handler_done = 1;
}

static void slow_host(void *arg)
{
	(void)arg;
	usleep(300 * 1000);
}

static void *copy_behind_host_fn(void *arg)
{
	static char h[1 << 20];
	CUdeviceptr p = *(CUdeviceptr *)arg;
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	cuCtxSetCurrent(ctx);
	cuLaunchHostFunc(NULL, slow_host, NULL);
	/* Inside the copy's hook for 300 ms, then the handler's 4 s. */
	cuMemcpyHtoD(p, h, sizeof(h));
	return NULL;
}

Test(overcommit_gate, a_thread_inside_a_copy_does_not_hold_moves,
     .fini = shimtest_cleanup, .timeout = 60)
{
	CUdeviceptr b[3], more;
	sigset_t s;
	pthread_t t;
	CUresult r;

	start();
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	signal(SIGUSR1, stay);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(cuMemAlloc(&b[i], 16 * MIB), CUDA_SUCCESS);
		fill(b[i], 16 * MIB, 20 + (uint32_t)i);
	}
	cr_assert_eq(pthread_create(&t, NULL, copy_behind_host_fn, &b[2]), 0);
	usleep(100 * 1000);
	cr_assert_eq(pthread_kill(t, SIGUSR1), 0);	/* inside the copy */
	usleep(20 * 1000);
	/* No move while that thread is inside: the new allocation spills
	 * after the gate's bounded wait, before the thread comes out. */
	r = cuMemAlloc(&more, 32 * MIB);
	cr_expect_eq(handler_done, 0, "the allocation waited for the thread");
	cr_assert_eq(r, CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 32 * MIB);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
	check(b[0], 16 * MIB, 20);
	check(b[1], 16 * MIB, 21);
	cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(cuMemFree(b[i]), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 0);
}

/* ---- work queued on another context ------------------------------------- */

static void hold_stream(void *arg)
{
	usleep((useconds_t)(uintptr_t)arg);
}

/* The range the copies go to, and what they copy. */
#define RANGE (32 * MIB)

static CUcontext other;		/* the second context's test */
static CUdeviceptr staging;
static const uint32_t *pattern;

/* Queues the copies of r on s: peer copies of the staging buffer from
 * the second context, or copies of the host pattern. */
typedef void queue_fn(CUdeviceptr r, CUstream s);

static void queue_peer(CUdeviceptr r, CUstream s)
{
	for (size_t off = 0; off < RANGE; off += MIB)
		cr_assert_eq(cuMemcpyPeerAsync(r + off, ctx, staging, other,
					       MIB, s), CUDA_SUCCESS);
}

static void queue_host(CUdeviceptr r, CUstream s)
{
	for (size_t off = 0; off < RANGE; off += MIB)
		cr_assert_eq(cuMemcpyHtoDAsync(r + off,
					       (const char *)pattern + off,
					       MIB, s), CUDA_SUCCESS);
}

/* One trial: copies queued into a fresh range behind a host function
 * that holds s for hold_us, then an allocation past the slice (32 + 48
 * MiB under 64: the range moves to the host); every word of the range
 * must read back as pattern, whose first `period` bytes repeat over it. */
static void queued_copies_land(CUstream s, int trial, unsigned hold_us,
			       queue_fn *queue, size_t period, uint32_t *back)
{
	CUdeviceptr r, more;
	size_t bad = 0;

	cr_assert_eq(cuMemAlloc(&r, RANGE), CUDA_SUCCESS);
	cr_assert_eq(cuMemsetD32(r, 0, RANGE / 4), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
	cr_assert_eq(cuLaunchHostFunc(s, hold_stream,
				      (void *)(uintptr_t)hold_us),
		     CUDA_SUCCESS);
	queue(r, s);
	cr_assert_eq(cuMemAlloc(&more, 48 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
	cr_assert_eq(cuMemcpyDtoH(back, r, RANGE), CUDA_SUCCESS);
	for (size_t i = 0; i < RANGE / 4; i++)
		bad += back[i] != pattern[i % (period / 4)];
	cr_assert_eq(bad, 0, "trial %d: %zu words of the range lost", trial,
		     bad);
	cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(r), CUDA_SUCCESS);
}

/* Peer copies into a range, queued on a stream of a second context behind
 * a host function that holds the stream: an allocation of the first
 * context past the slice moves the range meanwhile. The gate holds only
 * calls, so the move must first finish what every context has queued;
 * else the copies land in the old backing (lost) or fault on the
 * simulator. Each trial's range reads back as the copies wrote it. */
Test(overcommit_gate, work_queued_on_another_context_is_finished_first,
     .fini = shimtest_cleanup, .timeout = 60)
{
	uint32_t *pat = malloc(MIB), *back = malloc(RANGE);
	CUdevice dev;
	CUstream s;

	start();
	cr_assert(pat && back);
	pattern = pat;
	cr_assert_eq(cuCtxGetDevice(&dev), CUDA_SUCCESS);
	cr_assert_eq(cuCtxCreate(&other, NULL, 0, dev), CUDA_SUCCESS);
	cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	/* Under the granularity: a plain allocation, never moved. */
	cr_assert_eq(cuMemAlloc(&staging, MIB), CUDA_SUCCESS);
	for (int trial = 0; trial < 6; trial++) {
		for (size_t i = 0; i < MIB / 4; i++)
			pat[i] = 0x5eed0000u + (uint32_t)trial * 7919u +
				 (uint32_t)i;
		cr_assert_eq(cuMemcpyHtoD(staging, pat, MIB), CUDA_SUCCESS);
		cr_assert_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
		queued_copies_land(s, trial, 500 + (unsigned)trial * 700,
				   queue_peer, MIB, back);
		cr_assert_eq(cuCtxSetCurrent(other), CUDA_SUCCESS);
	}
	cr_assert_eq(cuStreamDestroy(s), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(staging), CUDA_SUCCESS);
	cr_assert_eq(cuCtxDestroy(other), CUDA_SUCCESS);
	free(pat);
	free(back);
	cr_assert_eq(usage(VGPU_USAGE_BUFFER), 0);
}

/* The same through a green context's stream: a move reaches the green
 * context's work through its context (cuCtxFromGreenCtx), not by pushing
 * the green handle, which is no context. */
Test(overcommit_gate, work_queued_on_a_green_context_is_finished_first,
     .fini = shimtest_cleanup, .timeout = 60)
{
	uint32_t *pat = malloc(RANGE), *back = malloc(RANGE);
	CUdevResource all, part, rest;
	CUdevResourceDesc desc;
	unsigned groups = 1;
	CUgreenCtx g;
	CUstream s;

	start();
	cr_assert(pat && back);
	pattern = pat;
	shimtest_need("cuGreenCtxCreate", 12040);
	cr_assert_eq(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM),
		     CUDA_SUCCESS);
	cr_assert_eq(cuDevSmResourceSplitByCount(&part, &groups, &all, &rest,
						 0,
						 all.sm.minSmPartitionSize),
		     CUDA_SUCCESS);
	cr_assert_eq(cuDevResourceGenerateDesc(&desc, &part, 1), CUDA_SUCCESS);
	cr_assert_eq(cuGreenCtxCreate(&g, desc, 0,
				      CU_GREEN_CTX_DEFAULT_STREAM),
		     CUDA_SUCCESS);
	cr_assert_eq(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0),
		     CUDA_SUCCESS);
	for (int trial = 0; trial < 4; trial++) {
		for (size_t i = 0; i < RANGE / 4; i++)
			pat[i] = 0x94ee0000u + (uint32_t)trial * 104729u +
				 (uint32_t)i;
		queued_copies_land(s, trial, 500 + (unsigned)trial * 900,
				   queue_host, RANGE, back);
	}
	cr_assert_eq(cuStreamDestroy(s), CUDA_SUCCESS);
	cr_assert_eq(cuGreenCtxDestroy(g), CUDA_SUCCESS);
	free(pat);
	free(back);
	cr_assert_eq(usage(VGPU_USAGE_BUFFER), 0);
}

/* ---- work that waits for the job itself --------------------------------- */

static pthread_mutex_t flag_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flag_cv = PTHREAD_COND_INITIALIZER;
static bool flag_up;

/* A host function that holds its stream until the job raises the flag
 * (as a stream waiting on a value the host writes would). */
static void wait_for_flag(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&flag_mu);
	while (!flag_up)
		pthread_cond_wait(&flag_cv, &flag_mu);
	pthread_mutex_unlock(&flag_mu);
}

/* A stream held until the job raises a flag, and then the same thread
 * allocates past the slice before raising it: a move would wait for that
 * stream forever (cuCtxSynchronize has no bound), so the shim's wait
 * gives up (ctxsync.c) and the allocation spills to the host instead.
 * Before, the job hung here. The range behind the held stream and the
 * spilled allocation keep their data, and the totals go back to zero. */
Test(overcommit_gate, a_stream_waiting_for_the_job_does_not_hang_a_move,
     .fini = shimtest_cleanup, .timeout = 60)
{
	CUdeviceptr a, b, more;
	CUstream s;

	start();
	cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&a, 32 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemAlloc(&b, 16 * MIB), CUDA_SUCCESS);
	fill(a, 32 * MIB, 7);
	fill(b, 16 * MIB, 8);
	cr_assert_eq(cuLaunchHostFunc(s, wait_for_flag, NULL), CUDA_SUCCESS);
	/* 32 + 16 + 32 MiB under 64: room is made, or the 32 spill. */
	cr_assert_eq(cuMemAlloc(&more, 32 * MIB), CUDA_SUCCESS);
	cr_assert_gt(usage(VGPU_USAGE_SPILLED), 0,
		     "nothing spilled: the move did not give up");
	pthread_mutex_lock(&flag_mu);
	flag_up = true;
	pthread_cond_broadcast(&flag_cv);
	pthread_mutex_unlock(&flag_mu);
	cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
	fill(more, 32 * MIB, 9);
	check(a, 32 * MIB, 7);
	check(b, 16 * MIB, 8);
	check(more, 32 * MIB, 9);
	cr_assert_leq(shimtest_device_used(), 64 * MIB,
		      "the device holds %llu MiB",
		      (unsigned long long)(shimtest_device_used() / MIB));
	cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
	cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
	cr_assert_eq(cuStreamDestroy(s), CUDA_SUCCESS);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 0);
}

/* ---- stream memory operations during a move ----------------------------- */

#define WORDS 4096		/* words written, 4 KiB apart */

static CUdeviceptr target;
static volatile bool writer_stop;
static uint32_t last_written[WORDS];

/* Writes value k + 1 to word i of target (every 4 KiB) by stream memory
 * operations, round after round, until told to stop: alone, and in a
 * batch of 16. */
static void *memop_writer(void *arg)
{
	CUstreamBatchMemOpParams ops[16];
	CUstream s;
	uint32_t k = 0;

	(void)arg;
	cuCtxSetCurrent(ctx);
	if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		return (void *)1;
	memset(ops, 0, sizeof(ops));
	while (!writer_stop) {
		for (int i = 0; i < WORDS; i += 16) {
			k++;
			for (int j = 0; j < 16; j++) {
				ops[j].writeValue.operation =
					CU_STREAM_MEM_OP_WRITE_VALUE_32;
				ops[j].writeValue.address =
					target + 4096 * (CUdeviceptr)(i + j);
				ops[j].writeValue.value = k;
				last_written[i + j] = k;
			}
			if (i % 32 ? cuStreamBatchMemOp(s, 16, ops, 0)
				   : cuStreamWriteValue32(s,
					ops[0].writeValue.address, k, 0) ||
				     cuStreamBatchMemOp(s, 15, ops + 1, 0))
				return (void *)2;
		}
		if (cuStreamSynchronize(s) != CUDA_SUCCESS)
			return (void *)3;
	}
	cuStreamDestroy(s);
	return NULL;
}

/* A thread writes a range by stream memory operations while allocations
 * of another move it to the host and back: the shim holds the operations
 * while a range moves, as it holds copies, so every word reads back as the
 * last value written to it (a write during the swap of its backing would
 * land in the old one and be lost). */
Test(overcommit_gate, stream_memory_operations_wait_for_a_move,
     .fini = shimtest_cleanup, .timeout = 60)
{
	uint32_t *back = malloc(16 * MIB);
	size_t bad = 0;
	pthread_t t;
	void *rc;

	start();
	shimtest_need("cuStreamBatchMemOp", 11070);
	cr_assert_not_null(back);
	cr_assert_eq(cuMemAlloc(&target, 16 * MIB), CUDA_SUCCESS);
	cr_assert_eq(cuMemsetD32(target, 0, 4 * MIB), CUDA_SUCCESS);
	writer_stop = false;
	cr_assert_eq(pthread_create(&t, NULL, memop_writer, NULL), 0);
	for (int round = 0; round < 12; round++) {
		CUdeviceptr more;

		/* 16 + 56 MiB under 64: the target moves to the host; the
		 * free brings it back. */
		cr_assert_eq(cuMemAlloc(&more, 56 * MIB), CUDA_SUCCESS);
		cr_assert_eq(cuMemFree(more), CUDA_SUCCESS);
	}
	writer_stop = true;
	cr_assert_eq(pthread_join(t, &rc), 0);
	cr_assert_null(rc, "the writer failed (%p)", rc);
	cr_assert_eq(cuMemcpyDtoH(back, target, 16 * MIB), CUDA_SUCCESS);
	for (int i = 0; i < WORDS; i++)
		bad += back[i * 1024] != last_written[i];
	cr_assert_eq(bad, 0, "%zu of %d words lost", bad, WORDS);
	cr_assert_eq(cuMemFree(target), CUDA_SUCCESS);
	free(back);
	cr_expect_eq(usage(VGPU_USAGE_BUFFER), 0);
	cr_expect_eq(usage(VGPU_USAGE_SPILLED), 0);
}
