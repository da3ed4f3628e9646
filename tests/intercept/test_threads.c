/* test_threads.c - a thread that launched under a compute share gives back
 * what the shim made to measure its launches (events and a calibration
 * stream per context) when it exits, and leaves them alone when a context
 * was torn down meanwhile (docs/compute.md).
 *
 * On the simulator every stream runs a worker thread, so a stream left
 * behind is a thread left behind: /proc/self/task counts them.
 */
#include "shimtest.h"
#include "vgpu_kernels.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static CUfunction spin;

static unsigned long long stale_uses(void);

static int tasks(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The task count once it has come down to at most want (a stopped
 * stream's worker ends on its own), or after 5 s; want < 0: once it has
 * not changed for 50 ms. */
static int tasks_settled(int want)
{
	struct timespec ts = { 0, 10000000 };
	int n = tasks(), same = 0;

	for (int i = 0; i < 500; i++) {
		if (want >= 0 ? n <= want : same == 5)
			break;
		nanosleep(&ts, NULL);
		int m = tasks();

		same = m == n ? same + 1 : 0;
		n = m;
	}
	return n;
}

struct job {
	CUcontext ctx;
	pthread_barrier_t *launched;	/* NULL: exit at once */
	pthread_barrier_t *go;
	CUresult r;
};

/* One vgpu_spin of 20 us on stream s. */
static CUresult spin_20us(CUstream s)
{
	unsigned long long ns = 20000;
	CUdeviceptr none = 0;
	void *params[] = { &ns, &none };

	return cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static void *launcher(void *arg)
{
	struct job *j = arg;

	j->r = cuCtxSetCurrent(j->ctx);
	for (int i = 0; i < 3 && j->r == CUDA_SUCCESS; i++)
		j->r = spin_20us(NULL);
	if (j->r == CUDA_SUCCESS)
		j->r = cuCtxSynchronize();
	if (j->launched) {
		pthread_barrier_wait(j->launched);
		pthread_barrier_wait(j->go);
	}
	return NULL;
}

static void run_launchers(CUcontext ctx, int n)
{
	for (int i = 0; i < n; i++) {
		struct job j = { .ctx = ctx };
		pthread_t t;

		cr_assert_eq(pthread_create(&t, NULL, launcher, &j), 0);
		cr_assert_eq(pthread_join(t, NULL), 0);
		cr_assert_eq(j.r, CUDA_SUCCESS, "launcher %d: %d", i, j.r);
	}
}

static CUcontext start(void)
{
	CUcontext ctx;
	CUmodule mod;

	shimtest_env("threads", NULL);
	setenv("VGPU_COMPUTE_LIMIT", "50", 1);
	ctx = simtest_init_shared();
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&spin, mod, "vgpu_spin"),
		     CUDA_SUCCESS);
	return ctx;
}

/* The tenant was charged n launches of 20 us of GPU time, each at least
 * 18 us: a launch is charged its events' interval less what ends placed
 * on the host's clock cut from it (up to a microsecond or so on a loaded
 * machine: 33 launches read 637.6 us once, 20 us each asked). What this
 * guards against, a thread's launches forgotten at its exit or at a
 * context's release, leaves several 20 us short at once. */
static void expect_charged(unsigned n)
{
	struct ledger_view v;
	const struct vgpu_ledger_tenant *t;

	ledger_view_must(&v, NULL);
	t = ledger_tenant(&v, "threads");
	cr_assert_not_null(t);
	cr_expect_geq(t->compute.gpu_time_ns, (uint64_t)n * 18000,
		      "GPU time charged %llu ns for %u launches of 20 us",
		      (unsigned long long)t->compute.gpu_time_ns, n);
	ledger_view_close(&v);
}

TestSuite(threads, .fini = shimtest_cleanup);

Test(threads, a_capped_thread_that_exits_gives_its_stream_and_events_back)
{
	CUcontext ctx = start();
	int before;

	run_launchers(ctx, 1);	/* whatever a first launcher starts for good */
	before = tasks_settled(-1);
	run_launchers(ctx, 20);
	int after = tasks_settled(before);

	cr_expect_eq(after, before, "20 launcher threads that exited left %d "
		     "threads (streams) behind", after - before);
	expect_charged(21 * 3);	/* and their launches were charged */
}

Test(threads, a_thread_exiting_after_its_context_was_destroyed_leaves_it_be)
{
	CUcontext primary = start(), mine;
	CUdevice dev;
	pthread_barrier_t launched, go;
	struct job j;
	pthread_t t;

	cr_assert_eq(cuCtxGetDevice(&dev), CUDA_SUCCESS);
	cr_assert_eq(cuCtxCreate(&mine, NULL, 0, dev), CUDA_SUCCESS);
	CUmodule mod;
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&spin, mod, "vgpu_spin"),
		     CUDA_SUCCESS);
	pthread_barrier_init(&launched, NULL, 2);
	pthread_barrier_init(&go, NULL, 2);
	j = (struct job){ .ctx = mine, .launched = &launched, .go = &go };
	cr_assert_eq(pthread_create(&t, NULL, launcher, &j), 0);
	pthread_barrier_wait(&launched);
	cr_assert_eq(j.r, CUDA_SUCCESS);
	/* Destroyed while the thread still holds state made in it. (The
	 * simulator also refuses to make a destroyed context current, which
	 * alone would keep the thread off it.) */
	cr_assert_eq(cuCtxDestroy(mine), CUDA_SUCCESS);
	unsigned long long before = stale_uses();

	pthread_barrier_wait(&go);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_expect_eq(stale_uses(), before, "the exiting thread made %llu calls "
		     "on the destroyed context's events or streams",
		     stale_uses() - before);
	/* The process goes on: launches on the primary context work. */
	cr_assert_eq(cuCtxSetCurrent(primary), CUDA_SUCCESS);
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&spin, mod, "vgpu_spin"),
		     CUDA_SUCCESS);
	run_launchers(primary, 2);
}

/* Launches recorded in the GPU's timeline (the ledger), read from outside. */
static uint64_t timeline_ends(void)
{
	struct ledger_view v;
	uint64_t n;

	ledger_view_must(&v, NULL);
	n = ((const struct vgpu_ledger_timeline *)((const char *)v.hdr +
		VGPU_LEDGER_TIMELINE_OFFSET))->head;
	ledger_view_close(&v);
	return n;
}

/* A launch's end goes into the timeline when the thread synchronises, by
 * any of the driver's calls, not at its next launch: other processes'
 * charges need it within 20 ms of its end (docs/compute.md). */
Test(threads, a_launch_is_in_the_timeline_once_its_thread_synchronises)
{
	CUstream s;
	CUevent e;

	start();
	cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	cr_assert_eq(cuEventCreate(&e, CU_EVENT_DEFAULT), CUDA_SUCCESS);
	for (int how = 0; how < 4; how++) {
		cr_assert_eq(spin_20us(s), CUDA_SUCCESS);
		/* (The launch recorded the one before it, if not yet.) */
		uint64_t before = timeline_ends();

		switch (how) {
		case 0:
			cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
			break;
		case 1:
			cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
			break;
		case 2:
			cr_assert_eq(cuEventRecord(e, s), CUDA_SUCCESS);
			cr_assert_eq(cuEventSynchronize(e), CUDA_SUCCESS);
			break;
		case 3: {
			CUcontext ctx;

			cr_assert_eq(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
			cr_assert_eq(cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
			break;
		}
		}
		cr_expect_eq(timeline_ends(), before + 1,
			     "synchronised by way %d: %llu ends recorded, "
			     "%llu before", how,
			     (unsigned long long)timeline_ends(),
			     (unsigned long long)before);
	}
}

/* The simulator's count of calls given a destroyed event or stream, or one
 * whose context was torn down after it was made. */
static unsigned long long stale_uses(void)
{
	/* The shim answers dlopen of any path ending in libcuda.so*: reach the
	 * loaded simulator by another name for the same file. */
	char link[4096];
	void *h;
	unsigned long long (*f)(void);

	snprintf(link, sizeof(link), "%s/sim-probe.so", shimtest_ledger_dir());
	if (symlink(SHIMTEST_SIM_LIBCUDA, link) != 0)
		cr_assert_eq(errno, EEXIST);
	h = dlopen(link, RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(h, "the simulator is not loaded");
	f = (unsigned long long (*)(void))dlsym(h, "vsim_stale_handle_uses");
	cr_assert_not_null(f);
	dlclose(h);
	return f();
}

static void launch_sync(void)
{
	cr_assert_eq(spin_20us(NULL), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
}

/* After a reset the primary context keeps its handle but not its events
 * and streams: the thread's launch state is dropped, not used. */
Test(threads, a_reset_context_s_old_launch_state_is_never_used)
{
	CUcontext ctx = start();
	CUdevice dev;
	CUmodule mod;

	cr_assert_eq(cuCtxGetDevice(&dev), CUDA_SUCCESS);
	for (int i = 0; i < 3; i++)
		launch_sync();
	unsigned long long before = stale_uses();
	uint64_t ends = timeline_ends();

	cr_assert_eq(cuDevicePrimaryCtxReset(dev), CUDA_SUCCESS);
	/* Made again on a retain: the same handle (as the driver does). */
	CUcontext again;

	cr_assert_eq(cuDevicePrimaryCtxRetain(&again, dev), CUDA_SUCCESS);
	cr_assert_eq(again, ctx);
	cr_assert_eq(cuCtxSetCurrent(again), CUDA_SUCCESS);
	cr_assert_eq(cuModuleLoadData(&mod, vgpu_kernels_fatbin), CUDA_SUCCESS);
	cr_assert_eq(cuModuleGetFunction(&spin, mod, "vgpu_spin"),
		     CUDA_SUCCESS);
	for (int i = 0; i < 3; i++)
		launch_sync();
	cr_expect_eq(stale_uses(), before, "%llu calls on the old context's "
		     "events or streams", stale_uses() - before);
	cr_expect_eq(timeline_ends(), ends + 3, "launches after the reset: "
		     "%llu ends recorded", (unsigned long long)(timeline_ends() -
							ends));
}

/* A retain and release that leave the context alive do not make exiting
 * threads leave their streams behind, nor lose their launches' charges. */
Test(threads, a_release_that_keeps_the_context_changes_nothing)
{
	CUcontext ctx = start();
	CUdevice dev;
	int before;

	cr_assert_eq(cuCtxGetDevice(&dev), CUDA_SUCCESS);
	run_launchers(ctx, 1);
	before = tasks_settled(-1);
	for (int i = 0; i < 10; i++) {
		pthread_barrier_t launched, go;
		struct job j = { .ctx = ctx, .launched = &launched, .go = &go };
		CUcontext again;
		pthread_t t;

		pthread_barrier_init(&launched, NULL, 2);
		pthread_barrier_init(&go, NULL, 2);
		cr_assert_eq(pthread_create(&t, NULL, launcher, &j), 0);
		pthread_barrier_wait(&launched);
		cr_assert_eq(cuDevicePrimaryCtxRetain(&again, dev),
			     CUDA_SUCCESS);
		cr_assert_eq(cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
		pthread_barrier_wait(&go);
		cr_assert_eq(pthread_join(t, NULL), 0);
		cr_assert_eq(j.r, CUDA_SUCCESS);
	}
	int after = tasks_settled(before);

	cr_expect_eq(after, before, "10 threads left %d threads (streams) "
		     "behind", after - before);
	expect_charged(11 * 3);
}
