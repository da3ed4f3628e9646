/* share.c - what share of the GPU's time a tenant's kernels really get.
 *
 *   share --kernel-us K --seconds S --style async|sync|graph|threads
 *         [--expect PCT --tolerance PTS [--under PTS]] [--window-ms MS]
 *         [--judge kernels|device]
 *
 * Launches vgpu_spin(K us) back to back for S seconds of wall time, then
 * waits for the device. async: launches are queued (the queue is kept
 * some launches deep with an event per batch); sync: launch, then
 * cuCtxSynchronize; graph: a graph of one kernel node, launched over and
 * over. Each kernel reports its own start and end (vgpu_spin's times
 * argument; a graph's kernels count their length, which the simulator
 * keeps exactly); threads: THREADS threads, each on a stream of its own,
 * launching as async does. The share is the kernel time inside the window
 * over the
 * window's wall time. Prints "achieved P.PP% ..." and, with --expect,
 * exits 1 when achieved is above expected by more than the tolerance, or
 * below it by more than --under (default: the tolerance).
 *
 * On the simulator it also prints the share by the device's own record
 * (vgpu_sim_record.h): the time this process's kernels held the device's
 * SMs inside the window, SM-weighted ("device P.PP%", and per window
 * "device-window START SHARE"). --judge device judges by that instead (it
 * fails where there is no record: on a real GPU).
 *
 * Runs under LD_PRELOAD=libvgpu.so with VGPU_COMPUTE_LIMIT set; each run
 * makes its own simulated device and ledger (VGPU_SIM_STATE_DIR,
 * VGPU_LEDGER_DIR) unless VGPU_SIM_STATE_DIR is set.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_kernels.h"
#include "cu_util.h"
#include "sim_record.h"

#define MAX_LAUNCHES 200000
#define DEPTH 8
#define THREADS 4

static int die(const char *what, CUresult r)
{
	return cu_report("share", what, r);
}

/* --style threads: each thread launches on its own stream, its queue kept
 * at most DEPTH deep, each launch's times in the next free pair. */
struct workers {
	CUcontext ctx;
	CUfunction spin;
	CUdeviceptr times;
	uint64_t ns, end;
	size_t n_max, next;		/* launches claimed (atomic) */
	CUresult err;
};

static void *worker(void *arg)
{
	struct workers *w = arg;
	CUstream s;
	CUevent batch[DEPTH];
	CUresult r;
	size_t mine = 0;

	if ((r = cuCtxSetCurrent(w->ctx)) ||
	    (r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)))
		goto out;
	for (int i = 0; i < DEPTH; i++)
		if ((r = cuEventCreate(&batch[i], CU_EVENT_DISABLE_TIMING)))
			goto out;
	while (now_ns() < w->end) {
		size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
		uint64_t ns = w->ns;
		CUdeviceptr t = w->times + i * 2 * sizeof(uint64_t);
		void *params[] = { &ns, &t };

		if (i >= w->n_max)
			break;
		if ((r = cuLaunchKernel(w->spin, 1, 1, 1, 1, 1, 1, 0, s,
					params, NULL)))
			goto out;
		mine++;
		cuEventSynchronize(batch[mine % DEPTH]);
		cuEventRecord(batch[mine % DEPTH], s);
	}
	r = cuStreamSynchronize(s);
out:
	if (r)
		__atomic_store_n(&w->err, r, __ATOMIC_RELAXED);
	return NULL;
}

static CUresult run_threads(struct workers *w, size_t *n)
{
	pthread_t th[THREADS];
	int started = 0;

	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&th[i], NULL, worker, w) == 0)
			started++;
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	*n = w->next < w->n_max ? w->next : w->n_max;
	if (started < THREADS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return w->err;
}

int main(int argc, char **argv)
{
	double kernel_us = 1000, seconds = 3, expect = -1, tol = 2, window_ms = 0;
	double under = -1;
	const char *style = "async", *judge = "kernels";
	char dir[] = "/tmp/vgpu-share.XXXXXX";
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction spin;
	CUdeviceptr times;
	CUresult r;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--kernel-us"))
			kernel_us = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--style"))
			style = argv[i + 1];
		else if (!strcmp(argv[i], "--expect"))
			expect = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--tolerance"))
			tol = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--under"))
			under = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--window-ms"))
			window_ms = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--judge"))
			judge = argv[i + 1];
	}
	/* A device and a ledger of its own, unless the caller shares them. */
	if (!getenv("VGPU_SIM_STATE_DIR") && mkdtemp(dir)) {
		char ledger[64];

		setenv("VGPU_SIM_STATE_DIR", dir, 1);
		snprintf(ledger, sizeof(ledger), "%s/ledger", dir);
		if (!getenv("VGPU_LEDGER_DIR"))
			setenv("VGPU_LEDGER_DIR", ledger, 1);
	}
	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) ||
	    (r = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
	    (r = cuCtxSetCurrent(ctx)))
		return die("start", r);
	if ((r = cuModuleLoadData(&mod, vgpu_kernels_fatbin)) ||
	    (r = cuModuleGetFunction(&spin, mod, "vgpu_spin")))
		return die("module", r);
	size_t n_max = (size_t)(seconds * 1e6 / kernel_us) + 64;
	if (n_max > MAX_LAUNCHES)
		n_max = MAX_LAUNCHES;
	if ((r = cuMemAlloc(&times, n_max * 2 * sizeof(uint64_t))) ||
	    (r = cuMemsetD8(times, 0, n_max * 2 * sizeof(uint64_t))))
		return die("times", r);

	struct { uint64_t ns; CUdeviceptr times; } p = {
		(uint64_t)(kernel_us * 1e3), 0 };
	void *params[] = { &p.ns, &p.times };
	CUevent batch[DEPTH];
	CUgraph graph = NULL;
	CUgraphExec exec = NULL;
	CUgraphNode node;
	bool use_graph = !strcmp(style, "graph");
	CUdeviceptr nulltimes = 0;
	bool sync = !strcmp(style, "sync");

	for (int i = 0; i < DEPTH; i++)
		if ((r = cuEventCreate(&batch[i], CU_EVENT_DISABLE_TIMING)))
			return die("event", r);
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	size_t n = 0;
	if (!strcmp(style, "threads")) {
		struct workers w = { .ctx = ctx, .spin = spin, .times = times,
				     .ns = p.ns, .end = end, .n_max = n_max };

		if ((r = run_threads(&w, &n)))
			return die("threads", r);
		end = t0;	/* no more launches below */
	}
	while (now_ns() < end && n < n_max) {
		p.times = times + n * 2 * sizeof(uint64_t);
		if (use_graph) {
			/* One graph of one kernel node, launched over and
			 * over; its kernels keep no times (counted below). */
			if (!exec) {
				void *gp[] = { &p.ns, &nulltimes };
				CUDA_KERNEL_NODE_PARAMS kp = {
					.func = spin, .gridDimX = 1,
					.gridDimY = 1, .gridDimZ = 1,
					.blockDimX = 1, .blockDimY = 1,
					.blockDimZ = 1, .kernelParams = gp };
				if ((r = cuGraphCreate(&graph, 0)) ||
				    (r = cuGraphAddKernelNode(&node, graph,
							      NULL, 0, &kp)) ||
				    (r = cuGraphInstantiate(&exec, graph, 0)))
					return die("graph", r);
			}
			r = cuGraphLaunch(exec, NULL);
		} else {
			r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL,
					   params, NULL);
		}
		if (r)
			return die("launch", r);
		n++;
		if (sync) {
			if ((r = cuCtxSynchronize()))
				return die("sync", r);
		} else {
			/* Keep the queue at most DEPTH deep. */
			CUevent e = batch[n % DEPTH];
			cuEventSynchronize(e);
			cuEventRecord(e, NULL);
		}
	}
	if ((r = cuCtxSynchronize()))
		return die("final sync", r);
	uint64_t t1 = now_ns();

	uint64_t *t = calloc(n * 2, sizeof(uint64_t));
	if (!t || (r = cuMemcpyDtoH(t, times, n * 2 * sizeof(uint64_t))))
		return die("read times", r);
	/* Kernel time inside [t0, t1]: each kernel's own times; a graph's
	 * kernels are counted at their length (the simulator's are exact). */
	uint64_t busy = use_graph ? n * p.ns : 0;
	for (size_t i = 0; !use_graph && i < n; i++) {
		uint64_t a = t[2 * i], b = t[2 * i + 1];
		if (a < t0)
			a = t0;
		if (b > t1)
			b = t1;
		if (b > a)
			busy += b - a;
	}
	/* Per window, with --window-ms: "window START_MS SHARE". The start
	 * is CLOCK_MONOTONIC in ms, to line up runs of several processes. */
	uint64_t w = (uint64_t)(window_ms * 1e6);
	for (uint64_t ws = t0; w && !use_graph && ws + w <= t1; ws += w) {
		uint64_t wb = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t a = t[2 * i], b = t[2 * i + 1];
			if (a < ws)
				a = ws;
			if (b > ws + w)
				b = ws + w;
			if (b > a)
				wb += b - a;
		}
		printf("window %.0f %.2f\n", (double)ws / 1e6,
		       100.0 * (double)wb / (double)w);
	}
	double achieved = 100.0 * (double)busy / (double)(t1 - t0);
	/* Throughput: the kernels' nominal length over the wall time (what a
	 * share of SMs gives, where each kernel runs longer). */
	double throughput = 100.0 * (double)n * (double)p.ns / (double)(t1 - t0);
	printf("achieved %.2f%% style %s kernel %.0f us: %zu launches, "
	       "%.3f s of kernel time in %.3f s, throughput %.2f%%\n",
	       achieved, style, kernel_us, n, (double)busy / 1e9,
	       (double)(t1 - t0) / 1e9, throughput);
	/* The device's truth, where there is one (the simulator). */
	struct record rec = { 0 };
	double device = -1;
	if (record_load(&rec)) {
		if (rec.info.lost_end_ns > t0)
			printf("device: the record lost intervals of the window "
			       "(%llu of %llu)\n",
			       (unsigned long long)rec.info.lost,
			       (unsigned long long)rec.info.recorded);
		else
			device = 100.0 * (double)record_busy(&rec, t0, t1) /
				 (double)(t1 - t0);
		for (uint64_t ws = t0; w && device >= 0 && ws + w <= t1; ws += w)
			printf("device-window %.0f %.2f\n", (double)ws / 1e6,
			       100.0 * (double)record_busy(&rec, ws, ws + w) /
			       (double)w);
	}
	if (device >= 0)
		printf("device %.2f%% of the window by the device's record\n",
		       device);
	if (getenv("SHARE_CHECK_THROUGHPUT"))
		achieved = throughput;
	if (!strcmp(judge, "device")) {
		if (device < 0) {
			printf("share: no record of the device to judge by\n");
			return 2;
		}
		achieved = device;
	}
	if (under < 0)
		under = tol;
	if (expect >= 0 &&
	    (achieved - expect > tol || expect - achieved > under)) {
		printf("share: expected %.1f%% + %.1f - %.1f (judged by %s)\n",
		       expect, tol, under, judge);
		return 1;
	}
	free(rec.iv);
	return 0;
}
