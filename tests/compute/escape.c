/* escape.c - launch patterns that once escaped a hard compute cap (issue
 * 13), each judged by the kernels' own start and end stamps.
 *
 *   escape --style S --seconds N --cap PCT [--tolerance PTS] [--long-ms L]
 *
 * Styles:
 *   thread       each launch (1 ms) from a new thread that exits without a
 *                synchronising call;
 *   scratch-ctx  a scratch context created and destroyed before each
 *                launch (1 ms, queued asynchronously);
 *   kernel       a CUkernel (cuLibraryGetKernel) launched on an explicit
 *                stream with no current context (1 ms);
 *   threads8     8 threads launching 100 ms kernels back to back;
 *   destroy-bad  a function's 20 us kernels, then, over and over, a new
 *                thread launching two 100 ms ones, asking to destroy
 *                contexts the driver refuses (NULL, a bogus handle) and
 *                exiting unsynchronised (a refused destroy once tore
 *                every context's launches down: 99.5% under 30%);
 *   switch       8 threads that switch one function from 20 us kernels to
 *                100 ms ones at once: each launches 40 short ones (asking
 *                cuStreamQuery after each), all meet, each launches 2
 *                long ones (--long-ms, 100 by default) in the first round
 *                only, all meet, over and over (a thread of each
 *                pair of rounds may be told to wait on its share);
 *   mixed        40 kernels of 20 us, then 15 of 100 ms, over and over;
 *   switch-procs 8 processes of one tenant, each launching 20 us
 *                kernels (synchronised) until a common moment, then 2 of
 *                100 ms of the same function at once, then synchronising
 *                and exiting; judged not by windows (each process's
 *                switch overruns its estimate, a known limit,
 *                docs/compute.md) but by the device's record: no more
 *                than the tenant's two lanes of long kernels back to back
 *                (16 before the lanes);
 *   first-procs  4 processes of one tenant starting together, each with a
 *                kernel of --long-ms (its first: its length unknown) and
 *                then more of them, synchronised (a known kernel went
 *                beside the next process's first: 40% with 100 ms);
 *   lazy-probe   a process launching 1 ms kernels (synchronised), and
 *                beside it, 0.5 s in, one that launches its first 1 ms
 *                kernel and then works on the host for 1.5 s before it
 *                synchronises; the busy one must also get at least the
 *                cap less 3 points (the first kernel held it until read:
 *                a second at a time, 24% of 30);
 *   stopped-probe the same, but the second process stops itself
 *                (SIGSTOP) right after its first 10 ms kernel, and is
 *                continued 1.5 s later (it held the busy one a second:
 *                21.9% of 30);
 *   green        two green contexts of half the SMs each, a thread on each
 *                launching 1 ms kernels side by side (each runs twice as
 *                long on half the device: a kernel counts half its time,
 *                and the run must also get at least the cap less 3 points);
 *   graph        1000 kernels of 1 ms captured and thrown away, then 8
 *                captured into a graph replayed back to back (captures run
 *                nothing and must not be charged: the run gets at least
 *                the cap less 3 points).
 * Judged by the simulated device's record of what ran (SM-weighted: a
 * kernel on half the SMs counts half its time), or, where there is none,
 * by the kernels' own stamps (weighted the same way for green contexts).
 * Prints the share over the run and the largest share of any 1-second
 * window (stepped by 100 ms), and exits 1 when a window is more than the
 * tolerance (default 2 points: the bucket's burst, 20 ms of GPU time that
 * an idle moment saves, over the 1-second window; docs/compute.md) above
 * the cap, or the run as a whole is
 * more than that plus one longest kernel over the run's length (a kernel
 * admitted near the end on a full bucket runs into debt the run does not
 * last long enough to repay), or when the run delivered less than a third
 * of the cap (the kernels did not run).
 *
 * Runs under LD_PRELOAD=libvgpu.so with VGPU_COMPUTE_LIMIT=PCT and
 * VGPU_COMPUTE_POLICY=hard; makes its own simulated device and ledger.
 */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cu_util.h"
#include "sim_record.h"
#include "vgpu_kernels.h"

#define MAX_KERNELS 200000

static CUcontext ctx;
static CUfunction spin;
static CUdeviceptr times;
static size_t next_slot;	/* kernels launched (their stamp slots) */
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t end_ns;
static uint64_t longest_ns;	/* the style's longest kernel */
static double weight = 1;	/* the device's share a kernel holds */
static CUcontext green_ctx[2];

static void die(const char *what, CUresult r)
{
	exit(cu_report("escape", what, r));
}

static size_t take_slot(void)
{
	size_t i;

	pthread_mutex_lock(&slot_lock);
	i = next_slot < MAX_KERNELS ? next_slot++ : MAX_KERNELS;
	pthread_mutex_unlock(&slot_lock);
	return i;
}

/* Launches vgpu_spin(ns) on stream s with its stamps in a slot of its own;
 * false when the slots ran out. */
static bool launch(CUfunction f, uint64_t ns, CUstream s)
{
	size_t i = take_slot();
	if (ns > longest_ns)
		longest_ns = ns;
	CUdeviceptr t = times + i * 2 * sizeof(uint64_t);
	void *params[] = { &ns, &t };
	CUresult r;

	if (i == MAX_KERNELS)
		return false;
	if ((r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL)))
		die("launch", r);
	return true;
}

static void *one_launch(void *arg)
{
	(void)arg;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return NULL;
	launch(spin, 1000000, NULL);
	return NULL;	/* exits without synchronising */
}

static void *long_launches(void *arg)
{
	(void)arg;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return NULL;
	while (now_ns() < end_ns && launch(spin, 100000000, NULL))
		cuStreamQuery(NULL);
	cuCtxSynchronize();
	return NULL;
}

/* --style destroy-bad: a thread that launches two 100 ms kernels of a
 * function known to be short, asks the driver to destroy a context it
 * refuses (NULL, and a handle that is no context), and exits. */
static CUstream bad_stream;

static void *destroy_bad(void *arg)
{
	(void)arg;
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return NULL;
	for (int i = 0; i < 2; i++)
		if (!launch(spin, 100000000, bad_stream))
			return NULL;
	if (cuCtxDestroy(NULL) == CUDA_SUCCESS ||
	    cuCtxDestroy((CUcontext)&bad_stream) == CUDA_SUCCESS)
		die("a refused destroy succeeded", CUDA_ERROR_UNKNOWN);
	return NULL;	/* exits without synchronising */
}

static pthread_barrier_t meet;
static uint64_t long_ms = 100;	/* switch: the long kernels' length */
static bool stop_all;	/* under the barrier's meetings */

static void *switching(void *arg)
{
	CUstream s;
	bool ok;
	int round = 0;

	(void)arg;
	ok = cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
	     cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
	if (!ok)
		__atomic_store_n(&stop_all, true, __ATOMIC_RELAXED);
	for (;;) {
		for (int i = 0; i < 40 && ok; i++) {
			ok = launch(spin, 20000, s);
			cuStreamQuery(s);
		}
		pthread_barrier_wait(&meet);
		/* One switch: a function switching back and forth gets a
		 * pair of long kernels on the short estimate at each switch,
		 * a known limit (docs/compute.md, "Known limits"). */
		for (int i = 0; i < 2 && ok && round == 0; i++)
			ok = launch(spin, long_ms * 1000000, s);
		round++;
		if (!ok)
			__atomic_store_n(&stop_all, true, __ATOMIC_RELAXED);
		/* One decides for all whether to go on. */
		if (pthread_barrier_wait(&meet) ==
		    PTHREAD_BARRIER_SERIAL_THREAD && now_ns() >= end_ns)
			__atomic_store_n(&stop_all, true, __ATOMIC_RELAXED);
		pthread_barrier_wait(&meet);
		if (__atomic_load_n(&stop_all, __ATOMIC_RELAXED))
			break;
	}
	if (cuStreamSynchronize(s) == CUDA_SUCCESS)
		cuStreamDestroy(s);
	return NULL;
}

static void *green_launches(void *arg)
{
	CUcontext g = arg;

	if (cuCtxSetCurrent(g) != CUDA_SUCCESS)
		return NULL;
	for (unsigned n = 0; now_ns() < end_ns; n++) {
		if (!launch(spin, 1000000, NULL))
			break;
		if (n % 8 == 7)
			cuStreamSynchronize(NULL);
	}
	cuCtxSynchronize();
	return NULL;
}

/* Two green contexts of about half the device's SMs each (groups are
 * multiples of 8 SMs). */
static void make_green(void)
{
	CUdevResource all, half[2];
	CUdevResourceDesc desc;
	CUgreenCtx g;
	CUdevice dev;
	unsigned n = 2;
	CUresult r;

	if ((r = cuDeviceGet(&dev, 0)) ||
	    (r = cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM)) ||
	    (r = cuDevSmResourceSplitByCount(half, &n, &all, NULL, 0,
					     all.sm.smCount / 2 / 8 * 8)))
		die("SM split", r);
	if (n != 2)
		die("SM split: not two groups", CUDA_ERROR_UNKNOWN);
	weight = (double)half[0].sm.smCount / all.sm.smCount;
	for (int i = 0; i < 2; i++)
		if ((r = cuDevResourceGenerateDesc(&desc, &half[i], 1)) ||
		    (r = cuGreenCtxCreate(&g, desc, dev,
					  CU_GREEN_CTX_DEFAULT_STREAM)) ||
		    (r = cuCtxFromGreenCtx(&green_ctx[i], g)))
			die("green context", r);
}

static void run(const char *style)
{
	CUresult r;

	if (!strcmp(style, "thread")) {
		while (now_ns() < end_ns) {
			pthread_t t;

			if (pthread_create(&t, NULL, one_launch, NULL) ||
			    pthread_join(t, NULL))
				die("thread", CUDA_ERROR_UNKNOWN);
		}
	} else if (!strcmp(style, "scratch-ctx")) {
		for (unsigned n = 0; now_ns() < end_ns; n++) {
			CUcontext scratch;
			CUdevice dev;

			if ((r = cuDeviceGet(&dev, 0)) ||
			    (r = cuCtxCreate(&scratch, NULL, 0, dev)) ||
			    (r = cuCtxDestroy(scratch)) ||
			    (r = cuCtxSetCurrent(ctx)))
				die("scratch context", r);
			if (!launch(spin, 1000000, NULL))
				break;
			if (n % 8 == 7)	/* keep the queue short */
				cuStreamSynchronize(NULL);
		}
	} else if (!strcmp(style, "kernel")) {
		CUlibrary lib;
		CUkernel k;
		CUstream s;
		CUcontext none = NULL;

		if ((r = cuLibraryLoadData(&lib, vgpu_kernels_fatbin, NULL,
					   NULL, 0, NULL, NULL, 0)) ||
		    (r = cuLibraryGetKernel(&k, lib, "vgpu_spin")) ||
		    (r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) ||
		    (r = cuCtxSetCurrent(none)))
			die("library", r);
		for (unsigned n = 0; now_ns() < end_ns; n++) {
			if (!launch((CUfunction)k, 1000000, s))
				break;
			if (n % 8 == 7)
				cuStreamSynchronize(s);
		}
		cuStreamSynchronize(s);
		cuCtxSetCurrent(ctx);
	} else if (!strcmp(style, "destroy-bad")) {
		pthread_t t;

		if (cuStreamCreate(&bad_stream, CU_STREAM_NON_BLOCKING))
			die("stream", CUDA_ERROR_UNKNOWN);
		for (int i = 0; i < 50; i++) {	/* the function is short */
			launch(spin, 20000, bad_stream);
			cuStreamSynchronize(bad_stream);
		}
		while (now_ns() < end_ns) {
			if (pthread_create(&t, NULL, destroy_bad, NULL))
				die("thread", CUDA_ERROR_UNKNOWN);
			pthread_join(t, NULL);
			usleep(200000);
		}
		cuStreamSynchronize(bad_stream);
	} else if (!strcmp(style, "threads8")) {
		pthread_t t[8];

		for (int i = 0; i < 8; i++)
			if (pthread_create(&t[i], NULL, long_launches, NULL))
				die("thread", CUDA_ERROR_UNKNOWN);
		for (int i = 0; i < 8; i++)
			pthread_join(t[i], NULL);
	} else if (!strcmp(style, "switch")) {
		pthread_t t[8];

		pthread_barrier_init(&meet, NULL, 8);
		for (int i = 0; i < 8; i++)
			if (pthread_create(&t[i], NULL, switching, NULL))
				die("thread", CUDA_ERROR_UNKNOWN);
		for (int i = 0; i < 8; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&meet);
	} else if (!strcmp(style, "green")) {
		pthread_t t[2];

		for (int i = 0; i < 2; i++)
			if (pthread_create(&t[i], NULL, green_launches,
					   green_ctx[i]))
				die("thread", CUDA_ERROR_UNKNOWN);
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
	} else if (!strcmp(style, "mixed")) {
		while (now_ns() < end_ns) {
			for (int i = 0; i < 40; i++)
				launch(spin, 20000, NULL);
			for (int i = 0; i < 15 && now_ns() < end_ns; i++)
				if (!launch(spin, 100000000, NULL))
					break;
			cuStreamSynchronize(NULL);
		}
	} else if (!strcmp(style, "graph")) {
		/* 1000 kernels of 1 ms captured under the cap and thrown
		 * away: nothing runs while captured, so nothing may wait or
		 * be charged (a second of charge would leave the run a fifth
		 * of its cap). Then 8 captured and the graph replayed back to
		 * back. */
		CUgraphExec x;
		CUstream s;
		CUgraph g;

		if ((r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)))
			die("stream", r);
		for (int round = 0; round < 2; round++) {
			if ((r = cuStreamBeginCapture(s,
					CU_STREAM_CAPTURE_MODE_RELAXED)))
				die("begin capture", r);
			for (int i = 0; i < (round ? 8 : 1000); i++)
				launch(spin, 1000000, s);
			if ((r = cuStreamEndCapture(s, &g)))
				die("end capture", r);
			if (!round && (r = cuGraphDestroy(g)))
				die("graph destroy", r);
		}
		if ((r = cuGraphInstantiateWithFlags(&x, g, 0)))
			die("instantiate", r);
		for (unsigned n = 0; now_ns() < end_ns; n++) {
			if ((r = cuGraphLaunch(x, s)))
				die("graph launch", r);
			if (n % 2 == 1)
				cuStreamSynchronize(s);
		}
		if ((r = cuStreamSynchronize(s)) ||
		    (r = cuGraphExecDestroy(x)) || (r = cuGraphDestroy(g)) ||
		    (r = cuStreamDestroy(s)))
			die("graph teardown", r);
	} else {
		fprintf(stderr, "escape: unknown style '%s'\n", style);
		exit(2);
	}
	if ((r = cuCtxSetCurrent(ctx)) || (r = cuCtxSynchronize()))
		die("final sync", r);
}

static struct record rec;
static bool have_rec;

/* Kernel time inside [a, b): the device's record, else the stamps. */
static uint64_t busy(const uint64_t *t, size_t n, uint64_t a, uint64_t b)
{
	if (have_rec)
		return record_busy(&rec, a, b);
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t s = t[2 * i] > a ? t[2 * i] : a;
		uint64_t e = t[2 * i + 1] < b ? t[2 * i + 1] : b;

		if (t[2 * i + 1] && e > s)
			sum += e - s;
	}
	return (uint64_t)((double)sum * weight);
}

/* In a child process: its context, the kernel and its stamps. */
static void child_start(void)
{
	CUdevice dev;
	CUmodule mod;
	CUresult r;

	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (r = cuCtxSetCurrent(ctx)) ||
	    (r = cuModuleLoadData(&mod, vgpu_kernels_fatbin)) ||
	    (r = cuModuleGetFunction(&spin, mod, "vgpu_spin")) ||
	    (r = cuMemAlloc(&times, 4096 * 2 * sizeof(uint64_t))))
		die("child start", r);
}

/* Kernels of ns, each synchronised, until the clock passes end. */
static void child_loop(uint64_t ns, uint64_t end)
{
	CUresult r;

	while (now_ns() < end && next_slot < 4000) {
		launch(spin, ns, NULL);
		if ((r = cuCtxSynchronize()))
			die("child sync", r);
	}
}

/* switch-procs, in each child: 20 us kernels until the clock passes
 * `at`, then two of 100 ms, then a synchronisation. */
static void switch_child(uint64_t at)
{
	CUresult r;

	child_start();
	while (now_ns() < at && next_slot < 4000) {
		launch(spin, 20000, NULL);
		cuCtxSynchronize();
	}
	launch(spin, 100000000, NULL);
	launch(spin, 100000000, NULL);
	if ((r = cuCtxSynchronize()))
		die("child sync", r);
	exit(0);
}

/* A style of several processes, in each: its index, the run's start and
 * its planned end. Exits. */
typedef void procs_child_fn(int i, uint64_t t0, uint64_t end);

static void switch_child_of(int i, uint64_t t0, uint64_t end)
{
	(void)i;
	(void)end;
	switch_child(t0 + 1500000000ull);
}

static void first_child(int i, uint64_t t0, uint64_t end)
{
	(void)i;
	(void)t0;
	child_start();
	child_loop(long_ms * 1000000, end);
	exit(0);
}

/* lazy-probe, stopped-probe: process 0 is busy throughout; process 1
 * comes 0.5 s in, launches its first kernel and leaves it unread for
 * 1.5 s, working on the host, or stopped (the parent continues it). */
static void probe_child(int i, uint64_t end, uint64_t first_ns, bool stop)
{
	struct timespec host = { 1, 500000000 }, first = { 0, 500000000 };
	CUresult r;

	if (i == 0) {
		child_start();
		child_loop(1000000, end);
		exit(0);
	}
	nanosleep(&first, NULL);
	child_start();
	launch(spin, first_ns, NULL);
	if (stop)
		raise(SIGSTOP);
	else
		nanosleep(&host, NULL);		/* no driver call */
	if ((r = cuCtxSynchronize()))
		die("child sync", r);
	exit(0);
}

static void lazy_child(int i, uint64_t t0, uint64_t end)
{
	(void)t0;
	probe_child(i, end, 1000000, false);
}

static void stopped_child(int i, uint64_t t0, uint64_t end)
{
	(void)t0;
	probe_child(i, end, 10000000, true);
}

/* The most kernels of 50 ms or more in the record that ran one right
 * after another (each starting within 5 ms of the one before's end):
 * those admitted together before the first's length was known. */
static long longest_run(const struct record *r)
{
	uint64_t prev_end = 0;
	long run = 0, most = 0;

	/* In the order they started (the record's is the order they ended,
	 * the same for kernels one after another). */
	for (long i = 0; i < r->n; i++) {
		const struct vsim_interval *v = &r->iv[i];

		if (v->end_ns - v->start_ns < 50000000ull)
			continue;
		run = prev_end && v->start_ns <= prev_end + 5000000ull ? run + 1
								       : 1;
		prev_end = v->end_ns;
		if (run > most)
			most = run;
	}
	return most;
}

/* A style of n processes of the tenant, in the parent: the children
 * (continued 2 s in, if cont: one may stop itself), then the record:
 * every 1-second window within tol of the cap, and process `busy` (its
 * index; -1: none) at least the cap less 3 points over the run. With
 * `lanes` (switch-procs), no windows (a known limit: each switch of a
 * process overruns its estimate, docs/compute.md), but no more than
 * `lanes` long kernels run back to back: the tenant's processes together
 * keep no more launches of unknown length in flight than that. */
static int procs(const char *style, procs_child_fn *child, int n, int busy,
		 bool cont, double seconds, double cap, double tol, long lanes)
{
	uint64_t t0 = now_ns(), t1;
	uint64_t end = t0 + (uint64_t)(seconds * 1e9);
	struct timespec cont_at = { 2, 0 };
	struct record rec1;
	double all, worst = 0, got = -1;
	pid_t busy_pid = 0, pids[8];

	for (int i = 0; i < n && i < 8; i++) {
		pid_t p = fork();

		if (p == 0)
			child(i, t0, end);
		if (p < 0)
			die("fork", CUDA_ERROR_UNKNOWN);
		if (i == busy)
			busy_pid = p;
		pids[i] = p;
	}
	if (cont) {
		nanosleep(&cont_at, NULL);
		for (int i = 0; i < n && i < 8; i++)
			kill(pids[i], SIGCONT);
	}
	while (wait(NULL) > 0)
		;
	t1 = now_ns();
	/* The record is read through the simulator, loaded here now. */
	cuInit(0);
	if (!record_load(&rec1))
		die("no record of the device", CUDA_ERROR_UNKNOWN);
	all = 100.0 * (double)record_busy_of(&rec1, 0, t0, t1) /
	      (double)(t1 - t0);
	for (uint64_t w = t0; w + 1000000000ull <= t1; w += 100000000ull) {
		double x = 100.0 * (double)record_busy_of(&rec1, 0, w,
							w + 1000000000ull) /
			   1e9;
		if (x > worst)
			worst = x;
	}
	if (busy_pid)
		got = 100.0 * (double)record_busy_of(&rec1, busy_pid, t0, t1) /
		      (double)(t1 - t0);
	printf("escape %s: %.2f%% over %.2f s, the busiest 1-second window "
	       "%.2f%%", style, all, (double)(t1 - t0) / 1e9, worst);
	if (busy_pid)
		printf(", the busy process %.2f%%", got);
	if (lanes) {
		long run = longest_run(&rec1);

		printf(", long kernels back to back: %ld (at most %ld)\n",
		       run, lanes);
		return run > lanes ? 1 : 0;
	}
	printf("; cap %.0f%%\n", cap);
	return worst > cap + tol || (busy_pid && got < cap - 3) ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *style = "thread";
	double seconds = 4, cap = 30, tol = 2;
	char dir[] = "/tmp/vgpu-escape.XXXXXX";
	CUdevice dev;
	CUmodule mod;
	CUresult r;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--style"))
			style = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--cap"))
			cap = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--tolerance"))
			tol = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--long-ms"))
			long_ms = strtoull(argv[i + 1], NULL, 10);
	}
	if (!getenv("VGPU_SIM_STATE_DIR") && mkdtemp(dir)) {
		char ledger[64];

		setenv("VGPU_SIM_STATE_DIR", dir, 1);
		snprintf(ledger, sizeof(ledger), "%s/ledger", dir);
		setenv("VGPU_LEDGER_DIR", ledger, 1);
	}
	if (!strcmp(style, "switch-procs"))
		return procs(style, switch_child_of, 8, -1, false, seconds, cap,
			     tol, 2);
	if (!strcmp(style, "first-procs"))
		return procs(style, first_child, 4, -1, false, seconds, cap, tol, 0);
	if (!strcmp(style, "lazy-probe"))
		return procs(style, lazy_child, 2, 0, false, seconds, cap, tol, 0);
	if (!strcmp(style, "stopped-probe"))
		return procs(style, stopped_child, 2, 0, true, seconds, cap, tol, 0);
	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (r = cuCtxSetCurrent(ctx)))
		die("start", r);
	if ((r = cuModuleLoadData(&mod, vgpu_kernels_fatbin)) ||
	    (r = cuModuleGetFunction(&spin, mod, "vgpu_spin")))
		die("module", r);
	if ((r = cuMemAlloc(&times, MAX_KERNELS * 2 * sizeof(uint64_t))) ||
	    (r = cuMemsetD8(times, 0, MAX_KERNELS * 2 * sizeof(uint64_t))))
		die("times", r);

	if (!strcmp(style, "green"))
		make_green();
	uint64_t t0 = now_ns();
	end_ns = t0 + (uint64_t)(seconds * 1e9);
	run(style);
	uint64_t t1 = now_ns();
	size_t n = next_slot;
	uint64_t *t = calloc(n * 2 + 2, sizeof(uint64_t));

	if (!t || (r = cuMemcpyDtoH(t, times, n * 2 * sizeof(uint64_t))))
		die("read times", r);
	have_rec = record_load(&rec);
	double all = 100.0 * (double)busy(t, n, t0, t1) / (double)(t1 - t0);
	double worst = 0;
	uint64_t worst_at = t0;

	for (uint64_t w = t0; w + 1000000000ull <= t1; w += 100000000ull) {
		double x = 100.0 * (double)busy(t, n, w, w + 1000000000ull) / 1e9;
		if (x > worst) {
			worst = x;
			worst_at = w;
		}
	}
	printf("escape %s: %zu kernels, %.2f%% over %.2f s, the busiest "
	       "1-second window %.2f%% (at +%.1f s); cap %.0f%%; judged by "
	       "%s\n", style, n, all, (double)(t1 - t0) / 1e9, worst,
	       (double)(worst_at - t0) / 1e9, cap,
	       have_rec ? "the device's record" : "the kernels' stamps");
	double tail = 100.0 * (double)longest_ns / (double)(t1 - t0);

	if (worst > cap + tol || all > cap + tol + tail) {
		printf("escape: above the cap by more than %.1f point(s) in a "
		       "window, or %.1f over the run\n", tol, tol + tail);
		return 1;
	}
	if ((weight < 1 || !strcmp(style, "graph")) && all < cap - 3) {
		printf("escape: more than 3 points under the cap\n");
		return 1;
	}
	if (all < cap / 3) {
		printf("escape: under a third of the cap: the kernels did not "
		       "run\n");
		return 1;
	}
	return 0;
}
