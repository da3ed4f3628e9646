/* test_context.c - primary and created contexts, and each thread's stack of
 * current contexts.
 */
#include "simtest.h"

#include <pthread.h>
#include <stdlib.h>

TestSuite(context, .init = simtest_clean_env, .fini = simtest_remove_state);

/* cuInit only: no context current. */
static void init_bare(void)
{
	simtest_env();
	CU_OK(cuInit(0));
	simtest_remove_state();
}

static CUcontext current(void)
{
	CUcontext c = (CUcontext)(uintptr_t)1;

	CU_OK(cuCtxGetCurrent(&c));
	return c;
}

Test(context, primary_retain_release_state)
{
	CUcontext a = NULL, b = NULL;
	unsigned flags = 99;
	int active = -1;

	init_bare();
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 0);
	cr_assert_eq(flags, 0);
	CU_OK(cuDevicePrimaryCtxRetain(&a, 0));
	cr_assert_not_null(a);
	/* Unlike cuCtxCreate, retaining does not make it current. */
	cr_assert_null(current());
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 1);
	CU_OK(cuDevicePrimaryCtxRetain(&b, 0));
	cr_assert_eq(a, b, "one primary context per device");
	CU_OK(cuDevicePrimaryCtxRelease(0));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 1, "still retained once");
	CU_OK(cuDevicePrimaryCtxRelease(0));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 0);
	CU_ASSERT(cuDevicePrimaryCtxGetState(0, NULL, &active),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(context, primary_release_unretained)
{
	init_bare();
	CU_ASSERT(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
}

Test(context, primary_flags)
{
	CUcontext ctx;
	unsigned flags = 0;
	int active;

	init_bare();
	CU_OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(flags, CU_CTX_SCHED_BLOCKING_SYNC);
	cr_assert_eq(active, 0);
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuCtxGetFlags(&flags));
	cr_assert_eq(flags & CU_CTX_SCHED_MASK, CU_CTX_SCHED_BLOCKING_SYNC);
}

/* Reset destroys the primary context's resources (its memory) at once. */
Test(context, primary_reset_frees_memory)
{
	CUcontext ctx;
	CUdeviceptr p;
	size_t free_b, total;
	int active;
	unsigned flags;

	ctx = simtest_init();
	CU_OK(cuMemAlloc(&p, 8 * MIB));
	CU_OK(cuDevicePrimaryCtxReset(0));
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 0);
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(free_b, total);
}

/* "Resetting the primary context does not release it ... it is safe for
 * other modules to call cuDevicePrimaryCtxRelease() even after resetting
 * the device." A module's release after the reset must not take down the
 * context another module retained since. */
Test(context, primary_reset_keeps_retains)
{
	CUcontext a, b;
	CUdeviceptr p;
	unsigned flags;
	int active;

	init_bare();
	CU_OK(cuDevicePrimaryCtxRetain(&a, 0));      /* module A */
	CU_OK(cuDevicePrimaryCtxReset(0));
	CU_OK(cuDevicePrimaryCtxRetain(&b, 0));      /* module B */
	CU_OK(cuCtxSetCurrent(b));
	CU_OK(cuMemAlloc(&p, MIB));
	CU_OK(cuDevicePrimaryCtxRelease(0));         /* A lets go */
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 1, "B's context went with A's release");
	CU_OK(cuMemsetD8(p, 0, MIB));
	CU_OK(cuDevicePrimaryCtxRelease(0));         /* B lets go */
	CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	cr_assert_eq(active, 0);
	CU_ASSERT(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
}

Test(context, create_makes_current_and_destroy_pops)
{
	CUcontext ctx = NULL;
	CUdevice dev = -1;

	init_bare();
	CU_OK(cuCtxCreate(&ctx, NULL, 0, 0));
	cr_assert_not_null(ctx);
	cr_assert_eq(current(), ctx);
	CU_OK(cuCtxGetDevice(&dev));
	cr_assert_eq(dev, 0);
	CU_OK(cuCtxDestroy(ctx));
	cr_assert_null(current());
	CU_ASSERT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
}

Test(context, create_on_second_device)
{
	CUcontext ctx;
	CUdevice dev = -1;

	setenv("VGPU_SIM_DEVICES", "2", 1);
	init_bare();
	CU_OK(cuCtxCreate(&ctx, NULL, 0, 1));
	CU_OK(cuCtxGetDevice(&dev));
	cr_assert_eq(dev, 1);
	dev = -1;
	CU_OK(cuCtxGetDevice_v2(&dev, ctx));
	cr_assert_eq(dev, 1);
	CU_OK(cuCtxDestroy(ctx));
}

Test(context, create_flags_kept)
{
	CUcontext ctx;
	unsigned flags = 0;

	init_bare();
	CU_OK(cuCtxCreate(&ctx, NULL, CU_CTX_SCHED_SPIN, 0));
	CU_OK(cuCtxGetFlags(&flags));
	cr_assert_eq(flags & CU_CTX_SCHED_MASK, CU_CTX_SCHED_SPIN);
	CU_OK(cuCtxDestroy(ctx));
}

Test(context, create_bad_arguments)
{
	CUcontext ctx;

	init_bare();
	CU_ASSERT(cuCtxCreate(NULL, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuCtxCreate(&ctx, NULL, 0, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_ASSERT(cuCtxCreate(&ctx, NULL, 0, -1), CUDA_ERROR_INVALID_DEVICE);
}

Test(context, destroyed_handle_refused)
{
	CUcontext ctx;

	init_bare();
	CU_OK(cuCtxCreate(&ctx, NULL, 0, 0));
	CU_OK(cuCtxDestroy(ctx));
	CU_ASSERT(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
	cr_assert_null(current());
}

Test(context, primary_cannot_be_destroyed)
{
	CUcontext ctx = simtest_init();

	CU_ASSERT(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
	cr_assert_eq(current(), ctx);
}

Test(context, push_pop_stack)
{
	CUcontext a, b, popped = NULL;

	init_bare();
	CU_OK(cuCtxCreate(&a, NULL, 0, 0));
	CU_OK(cuCtxCreate(&b, NULL, 0, 0));
	cr_assert_neq(a, b);
	cr_assert_eq(current(), b);
	CU_OK(cuCtxPopCurrent(&popped));
	cr_assert_eq(popped, b);
	cr_assert_eq(current(), a);
	CU_OK(cuCtxPushCurrent(b));
	cr_assert_eq(current(), b);
	CU_OK(cuCtxPushCurrent(a));
	cr_assert_eq(current(), a);
	CU_OK(cuCtxPopCurrent(&popped));
	cr_assert_eq(popped, a);
	CU_OK(cuCtxPopCurrent(&popped));
	cr_assert_eq(popped, b);
	CU_OK(cuCtxPopCurrent(NULL));
	cr_assert_null(current());
	CU_ASSERT(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxPushCurrent(NULL), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuCtxDestroy(a));
	CU_OK(cuCtxDestroy(b));
}

/* cuCtxSetCurrent replaces the top of the stack; NULL pops it. */
Test(context, set_current_replaces_top)
{
	CUcontext a, b, popped;

	init_bare();
	CU_OK(cuCtxCreate(&a, NULL, 0, 0));
	CU_OK(cuCtxCreate(&b, NULL, 0, 0));
	CU_OK(cuCtxSetCurrent(a));
	cr_assert_eq(current(), a);
	CU_OK(cuCtxPopCurrent(&popped));
	cr_assert_eq(popped, a);
	cr_assert_eq(current(), a, "b was replaced, a is below");
	CU_OK(cuCtxSetCurrent(NULL));
	cr_assert_null(current());
	CU_OK(cuCtxSetCurrent(NULL));
	cr_assert_null(current());
}

struct other_thread {
	CUcontext ctx;       /* in: pushed by the thread when not NULL */
	CUcontext seen;
	CUresult get_device;
	CUdevice dev;
};

static void *other_thread_main(void *arg)
{
	struct other_thread *t = arg;

	if (cuCtxGetCurrent(&t->seen) != CUDA_SUCCESS)
		t->seen = (CUcontext)(uintptr_t)1;
	t->get_device = cuCtxGetDevice(&t->dev);
	if (t->ctx && cuCtxPushCurrent(t->ctx) == CUDA_SUCCESS)
		cuCtxGetCurrent(&t->seen);
	return NULL;
}

static void run_other_thread(struct other_thread *t)
{
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, other_thread_main, t), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
}

Test(context, other_thread_has_no_context)
{
	struct other_thread t = { 0 };
	CUcontext ctx = simtest_init();

	run_other_thread(&t);
	cr_assert_null(t.seen);
	CU_ASSERT(t.get_device, CUDA_ERROR_INVALID_CONTEXT);
	/* A thread's push is its own. */
	t = (struct other_thread){ .ctx = ctx };
	CU_OK(cuCtxPopCurrent(NULL));
	run_other_thread(&t);
	cr_assert_eq(t.seen, ctx);
	cr_assert_null(current());
}

Test(context, get_device_without_context)
{
	CUdevice dev;
	unsigned flags;
	size_t v;

	init_bare();
	CU_ASSERT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxGetFlags(&flags), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE),
		  CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuMemGetInfo(&v, &v), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuMemAlloc(&(CUdeviceptr){ 0 }, 16), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuCtxGetDevice(NULL), CUDA_ERROR_INVALID_CONTEXT);
}

/* cuCtxDestroy: "If ctx is current to other threads, then ctx will remain
 * current to those threads, and attempting to access ctx from those threads
 * will result in the error CUDA_ERROR_CONTEXT_IS_DESTROYED." */
struct bystander {
	CUcontext ctx;
	pthread_barrier_t pushed, destroyed;
	CUcontext seen;
	CUresult get_device, sync;
};

static void *bystander_main(void *arg)
{
	struct bystander *b = arg;
	CUdevice dev;

	cuCtxPushCurrent(b->ctx);
	pthread_barrier_wait(&b->pushed);
	pthread_barrier_wait(&b->destroyed);
	cuCtxGetCurrent(&b->seen);
	b->get_device = cuCtxGetDevice(&dev);
	b->sync = cuCtxSynchronize();
	return NULL;
}

Test(context, destroyed_elsewhere_reports_destroyed)
{
	struct bystander b = { 0 };
	pthread_t th;

	init_bare();
	CU_OK(cuCtxCreate(&b.ctx, NULL, 0, 0));
	pthread_barrier_init(&b.pushed, NULL, 2);
	pthread_barrier_init(&b.destroyed, NULL, 2);
	cr_assert_eq(pthread_create(&th, NULL, bystander_main, &b), 0);
	pthread_barrier_wait(&b.pushed);
	CU_OK(cuCtxDestroy(b.ctx));
	cr_assert_null(current());
	pthread_barrier_wait(&b.destroyed);
	pthread_join(th, NULL);
	cr_assert_eq(b.seen, b.ctx, "it remains current to the other thread");
	CU_ASSERT(b.get_device, CUDA_ERROR_CONTEXT_IS_DESTROYED);
	CU_ASSERT(b.sync, CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

Test(context, ids_and_api_version)
{
	CUcontext a, b;
	unsigned long long ia = 0, ib = 0, cur = 0;
	unsigned v = 0;

	init_bare();
	CU_OK(cuCtxCreate(&a, NULL, 0, 0));
	CU_OK(cuCtxCreate(&b, NULL, 0, 0));
	CU_OK(cuCtxGetId(a, &ia));
	CU_OK(cuCtxGetId(b, &ib));
	CU_OK(cuCtxGetId(NULL, &cur));
	cr_assert_neq(ia, ib);
	cr_assert_eq(cur, ib);
	CU_OK(cuCtxGetApiVersion(a, &v));
	cr_assert_eq(v, 3020);
	CU_ASSERT(cuCtxGetId(a, NULL), CUDA_ERROR_INVALID_VALUE);
}

Test(context, limits)
{
	size_t v = 0;

	simtest_init();
	CU_OK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
	cr_assert_gt(v, 0);
	CU_OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
	CU_OK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
	cr_assert_eq(v, 4096);
	CU_OK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
	cr_assert_gt(v, 0);
	CU_ASSERT(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuCtxSetLimit(CU_LIMIT_MAX, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
}

Test(context, cache_config)
{
	CUfunc_cache c = CU_FUNC_CACHE_PREFER_L1;

	simtest_init();
	CU_OK(cuCtxGetCacheConfig(&c));
	cr_assert_eq(c, CU_FUNC_CACHE_PREFER_NONE);
	CU_OK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
	CU_OK(cuCtxGetCacheConfig(&c));
	cr_assert_eq(c, CU_FUNC_CACHE_PREFER_SHARED);
}

Test(context, stream_priority_range)
{
	int least = 99, greatest = 99;

	simtest_init();
	CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
	cr_assert_eq(least, 0);
	cr_assert_lt(greatest, least);
}

static void *open_later(void *arg)
{
	simtest_sleep_ms(30);
	simtest_gate_open(arg);
	return NULL;
}

Test(context, synchronize_waits_for_every_stream)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	CUstream s;
	pthread_t th;

	simtest_init();
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	simtest_gate_queue(g, s);
	simtest_log_queue(&log, s, 1);
	simtest_log_queue(&log, NULL, 2);
	cr_assert_eq(pthread_create(&th, NULL, open_later, g), 0);
	CU_OK(cuCtxSynchronize());
	cr_assert_eq(simtest_log_count(&log), 2);
	pthread_join(th, NULL);
}

/* Destroying a context frees its memory and waits for its work. */
Test(context, destroy_frees_memory_and_drains)
{
	struct simtest_gate *g;
	struct simtest_log log = { 0 };
	CUcontext primary, ctx;
	CUdeviceptr p;
	CUstream s;
	size_t free_b, total;
	pthread_t th;

	primary = simtest_init();
	CU_OK(cuCtxCreate(&ctx, NULL, 0, 0));
	CU_OK(cuMemAlloc(&p, 16 * MIB));
	CU_OK(cuMemAlloc(&p, 4 * MIB));
	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(free_b, total - 20 * MIB);
	g = simtest_gate_new();
	CU_OK(cuStreamCreate(&s, 0));
	simtest_gate_queue(g, s);
	simtest_log_queue(&log, s, 1);
	cr_assert_eq(pthread_create(&th, NULL, open_later, g), 0);
	CU_OK(cuCtxDestroy(ctx));
	cr_assert_eq(simtest_log_count(&log), 1);
	pthread_join(th, NULL);
	cr_assert_eq(current(), primary);
	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(free_b, total);
}
