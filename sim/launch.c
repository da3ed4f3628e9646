/* launch.c - kernel launches, in every form the driver offers.
 *
 * A launch packs its parameters (kernelParams or the extra buffer) into one
 * buffer laid out as the kernel's image says, and queues it on the stream.
 * The worker runs it holding its context's multiprocessors in the device's
 * engine: the whole device for an ordinary context, so one such kernel at a
 * time runs on a device across all processes; k of N for a green context,
 * so kernels of green contexts whose SMs fit in the device together run side
 * by side, each N/k times slower than on the whole device. A kernel that
 * touched host-backed memory then waits out its bus time (bus.c).
 */
#include "sim.h"
#include "vgpu_kernels.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BLOCK_THREADS 1024

static CUresult check_dims(const struct CUfunc_st *f, const unsigned grid[3],
			   const unsigned block[3], unsigned shared)
{
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];

	if (!grid[0] || !grid[1] || !grid[2] || !threads)
		return CUDA_ERROR_INVALID_VALUE;
	if (grid[1] > 65535 || grid[2] > 65535 || grid[0] > 2147483647u)
		return CUDA_ERROR_INVALID_VALUE;
	if (block[0] > 1024 || block[1] > 1024 || block[2] > 64 ||
	    threads > MAX_BLOCK_THREADS ||
	    threads > (uint64_t)f->desc->max_threads)
		return CUDA_ERROR_INVALID_VALUE;
	if (shared > (unsigned)f->attrs_max_dynamic_shared)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* Reads the extra array: a buffer pointer and its size, then END. */
static CUresult extra_buffer(void **extra, const void **buf, size_t *size)
{
	const void *p = NULL;
	size_t *sz = NULL;

	for (unsigned i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (i >= 64)
			return CUDA_ERROR_INVALID_VALUE;
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			p = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			sz = extra[i + 1];
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (!p || !sz)
		return CUDA_ERROR_INVALID_VALUE;
	*buf = p;
	*size = *sz;
	return CUDA_SUCCESS;
}

static CUresult pack_params(struct vsim_launch *l, void **params, void **extra)
{
	const struct vsim_kernel_desc *d = l->func->desc;
	const void *buf;
	size_t size;
	CUresult rc;

	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (extra) {
		rc = extra_buffer(extra, &buf, &size);
		if (rc != CUDA_SUCCESS)
			return rc;
		if (size != d->param_bytes)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(l->params, buf, size);
		return CUDA_SUCCESS;
	}
	if (d->nparams && !params)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; i < d->nparams; i++) {
		if (!params[i])
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(l->params + d->params[i].offset, params[i],
		       d->params[i].size);
	}
	return CUDA_SUCCESS;
}

struct launch_args {
	CUfunction f;
	unsigned grid[3], block[3];
	unsigned shared;
	CUstream stream;
	void **params, **extra;
};

/* Kernel names already reported as having no host form (hashes; 0 free).
 * Once it is full, further names go unreported: a message per launch would
 * flood stderr. */
#define UNKNOWN_SEEN 256
static uint64_t unknown_seen[UNKNOWN_SEEN];

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h ? h : 1;
}

/* True the first time `name` is seen (while the table has room). */
static bool unknown_first(const char *name)
{
	uint64_t h = name_hash(name);

	for (unsigned i = 0; i < UNKNOWN_SEEN; i++) {
		uint64_t was = 0;

		if (__atomic_compare_exchange_n(&unknown_seen[i], &was, h,
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return true;
		if (was == h)
			return false;
	}
	return false;
}

/* Says once per kernel name that it has no host form: what it does here
 * is not what it does on a GPU (it computes nothing). */
static void unknown_kernel(const char *name)
{
	if (!unknown_first(name))
		return;
	if (vsim_g.cfg.unknown_kernel_fail)
		vsim_log("kernel %s has no host form in the simulator: its "
			 "launches return CUDA_ERROR_NOT_SUPPORTED "
			 "(VGPU_SIM_UNKNOWN_KERNEL=fail)", name);
	else
		vsim_log("kernel %s has no host form in the simulator: it "
			 "computes nothing and waits out VGPU_SIM_KERNEL_NS "
			 "(%llu ns) (VGPU_SIM_UNKNOWN_KERNEL=fail refuses it)",
			 name, (unsigned long long)vsim_g.cfg.kernel_ns);
}

CUresult vsim_launch_prepare(CUfunction fh, struct CUctx_st *ctx,
			     const unsigned grid[3], const unsigned block[3],
			     unsigned shared, void **params, void **extra,
			     struct vsim_launch **out)
{
	struct CUfunc_st *f;
	struct vsim_launch *l;
	CUresult rc = vsim_func_resolve_in(fh, ctx, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_ctx_same_space(f->module->ctx, ctx))
		return CUDA_ERROR_INVALID_HANDLE;
	rc = check_dims(f, grid, block, shared);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!f->impl) {
		unknown_kernel(f->desc->name);
		if (vsim_g.cfg.unknown_kernel_fail)
			return CUDA_ERROR_NOT_SUPPORTED;
	}
	l = calloc(1, sizeof(*l) + f->desc->param_bytes);
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->func = f;
	l->ctx = ctx;
	memcpy(l->grid, grid, sizeof(l->grid));
	memcpy(l->block, block, sizeof(l->block));
	l->shared_bytes = shared;
	l->params_size = f->desc->param_bytes;
	rc = pack_params(l, params, extra);
	if (rc != CUDA_SUCCESS) {
		free(l);
		return rc;
	}
	*out = l;
	return CUDA_SUCCESS;
}

static CUresult launch(const struct launch_args *a, bool ptsz)
{
	struct CUstream_st *s;
	struct vsim_launch *l;
	struct vsim_op *op;
	CUresult rc = vsim_stream_resolve(a->stream, ptsz, &s);

	/* A CUkernel runs in the stream's context, whatever is current. */
	if (rc == CUDA_SUCCESS)
		rc = vsim_launch_prepare(a->f, s->ctx, a->grid, a->block,
					 a->shared, a->params, a->extra, &l);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (vsim_fail_now(VSIM_FAIL_LAUNCH)) {
		free(l);
		return CUDA_ERROR_LAUNCH_FAILED;
	}
	op = vsim_op_new(VSIM_OP_KERNEL);
	if (!op) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	op->u.kernel.launch = l;
	return vsim_stream_submit(s, op, NULL);
}

/* The kernel running on this worker thread (one at a time): its hold of
 * the engine, for the host form's waits, and, on k of the device's N SMs,
 * the slowdown N/k: its waits (busy_until) last N/k times longer, and so
 * does the time it computes, made up for once it returns. */
static _Thread_local struct {
	struct vsim_hold *hold;
	uint64_t num, den;        /* N, k */
	uint64_t phase;           /* when its host form began computing */
	uint64_t computed;        /* real time computed before its waits */
	uint64_t deadline;        /* its last wait's end; 0: none yet */
	uint64_t lag;             /* CLOCK_MONOTONIC - the device's clock */
} cur;

/* The device's clock, as the kernel running on this thread sees it: the
 * host clock less how late this thread is (docs/simulator.md, "The
 * device's clock"). */
static uint64_t device_now(void)
{
	return vsim_now_ns() - cur.lag;
}

/* The device's clock as the host form reads it (now_ns): after a wait, no
 * later than the wait's deadline until the next wait. The hold ends at the
 * last wait's deadline (held_wait), and the next kernel may start there; a
 * thread preempted between its wake-up and its read must not stamp an end
 * inside the next kernel's time. */
static uint64_t kernel_now(void)
{
	uint64_t now = device_now();

	return cur.deadline && now > cur.deadline ? cur.deadline : now;
}

/* After a wait until deadline_ns (on either clock: the device's is never
 * ahead), the device's clock reads the deadline, and the thread's lateness
 * is what it overslept. */
static void caught_up(uint64_t deadline_ns)
{
	uint64_t now = vsim_now_ns();

	cur.lag = now > deadline_ns ? now - deadline_ns : 0;
}

static uint64_t slowed(uint64_t ns)
{
	if (ns > UINT64_MAX / cur.num)
		return UINT64_MAX / 2;
	return ns * cur.num / cur.den;
}

/* A host form's wait: the kernel holds its SMs until the deadline, then no
 * longer, whatever this thread does (docs/simulator.md, the stop rule):
 * what a host form computes after its last wait is not the device's
 * time. */
static void held_wait(uint64_t now, uint64_t deadline_ns)
{
	cur.computed += now - cur.phase;
	cur.deadline = deadline_ns;
	vsim_engine_until(cur.hold, deadline_ns);
	caught_up(deadline_ns);
	cur.phase = device_now();
}

static void held_busy_until(uint64_t deadline_ns)
{
	uint64_t now = device_now();

	if (deadline_ns > now)
		held_wait(now, deadline_ns);
}

static void slowed_busy_until(uint64_t deadline_ns)
{
	uint64_t now = device_now();

	if (deadline_ns > now)
		held_wait(now, now + slowed(deadline_ns - now));
}

/* Runs the host form, then waits out the bus time of the host-backed
 * memory it touched (bus.c), not stretched in a green context: the bus is
 * not the SMs'. In a green context the time it computed (before its waits)
 * is made up N/k times, after its last wait or its return. A kernel with
 * no host form waits out its nominal time. */
static void run_body(const struct vsim_launch *l, struct vsim_hold *h,
		     bool slowed_down)
{
	const struct vgpu_kernel_impl *impl = l->func->impl;
	struct vgpu_kernel_launch kl = {
		.shared_bytes = l->shared_bytes,
		.params = l->params,
		.params_size = l->params_size,
		.now_ns = kernel_now,
		.busy_until = slowed_down ? slowed_busy_until : held_busy_until,
		.touched = vsim_g.cfg.bus_bandwidth ? vsim_bus_touched : NULL,
	};
	uint64_t end, bus, start;

	cur.hold = h;
	cur.lag = 0;
	if (!impl) {
		uint64_t nominal = slowed(vsim_g.cfg.kernel_ns);

		start = vsim_engine_start(h, vsim_stream_clock, nominal);
		vsim_engine_until(h, start + nominal);
		caught_up(start + nominal);
		return;
	}
	memcpy(kl.grid, l->grid, sizeof(kl.grid));
	memcpy(kl.block, l->block, sizeof(kl.block));
	cur.computed = 0;
	cur.deadline = 0;
	vsim_bus_begin();
	start = vsim_engine_start(h, vsim_stream_clock, 0);
	cur.lag = vsim_now_ns() - start;
	cur.phase = start;
	impl->fn(&kl);
	bus = vsim_bus_end();
	if (cur.deadline) {
		end = cur.deadline;
	} else {
		end = device_now();
		cur.computed += end - cur.phase;
	}
	if (slowed_down)
		end += slowed(cur.computed) - cur.computed;
	if (end + bus > (cur.deadline ? cur.deadline : device_now())) {
		vsim_engine_until(h, end + bus);
		caught_up(end + bus);
	}
}

void vsim_launch_run(int device, const struct vsim_launch *l)
{
	struct CUctx_st *ctx = l->ctx;
	unsigned total = (unsigned)vsim_g.cfg.sm_count;
	unsigned want = ctx && ctx->sm_count < total ? ctx->sm_count : 0;
	unsigned long long ctx_id = ctx ? ctx->id : 0;
	struct vsim_hold h;

	cur.num = total;
	cur.den = want ? want : total;
	if (!want) {
		vsim_engine_acquire(device, 0, ctx_id, &h);
		run_body(l, &h, false);
		vsim_stream_clock = vsim_engine_release(&h, cur.lag);
		return;
	}
	/* The kernels of one green context share its SMs. */
	pthread_mutex_lock(&ctx->exec_lock);
	vsim_engine_acquire(device, want, ctx_id, &h);
	run_body(l, &h, true);
	vsim_stream_clock = vsim_engine_release(&h, cur.lag);
	pthread_mutex_unlock(&ctx->exec_lock);
}

static CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy,
			      unsigned gz, unsigned bx, unsigned by, unsigned bz,
			      unsigned shared, CUstream h, void **params,
			      void **extra, bool ptsz)
{
	struct launch_args a = {
		.f = f, .grid = { gx, gy, gz }, .block = { bx, by, bz },
		.shared = shared, .stream = h, .params = params, .extra = extra,
	};

	return launch(&a, ptsz);
}

VSIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx,
				    unsigned int gy, unsigned int gz,
				    unsigned int bx, unsigned int by,
				    unsigned int bz, unsigned int shared,
				    CUstream h, void **params, void **extra)
{
	return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, h, params, extra,
			     false);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx,
				     unsigned int gy, unsigned int gz,
				     unsigned int bx, unsigned int by,
				     unsigned int bz, unsigned int shared,
				     CUstream h, void **params, void **extra);
VSIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx,
					 unsigned int gy, unsigned int gz,
					 unsigned int bx, unsigned int by,
					 unsigned int bz, unsigned int shared,
					 CUstream h, void **params, void **extra)
{
	return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, h, params, extra,
			     true);
}

VSIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx,
					       unsigned int gy, unsigned int gz,
					       unsigned int bx, unsigned int by,
					       unsigned int bz,
					       unsigned int shared, CUstream h,
					       void **params)
{
	return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, h, params, NULL,
			     false);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx,
						unsigned int gy, unsigned int gz,
						unsigned int bx, unsigned int by,
						unsigned int bz,
						unsigned int shared, CUstream h,
						void **params);
VSIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f,
						    unsigned int gx,
						    unsigned int gy,
						    unsigned int gz,
						    unsigned int bx,
						    unsigned int by,
						    unsigned int bz,
						    unsigned int shared,
						    CUstream h, void **params)
{
	return launch_kernel(f, gx, gy, gz, bx, by, bz, shared, h, params, NULL,
			     true);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params,
			  void **extra, bool ptsz)
{
	if (!c || (c->numAttrs && !c->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	return launch_kernel(f, c->gridDimX, c->gridDimY, c->gridDimZ,
			     c->blockDimX, c->blockDimY, c->blockDimZ,
			     c->sharedMemBytes, c->hStream, params, extra, ptsz);
}

VSIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config,
				      CUfunction f, void **params, void **extra)
{
	return launch_ex(config, f, params, extra, false);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
				       CUfunction f, void **params,
				       void **extra);
VSIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config,
					   CUfunction f, void **params,
					   void **extra)
{
	return launch_ex(config, f, params, extra, true);
}
