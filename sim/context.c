/* context.c - primary and created contexts, and each thread's context stack.
 *
 * Context structs are never freed: a destroyed context keeps its memory with
 * magic VSIM_MAGIC_DEAD, so a stale handle is refused instead of crashing.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local struct CUctx_st *ctx_stack[VSIM_MAX_CTX_STACK];
static _Thread_local int ctx_depth;
static atomic_ullong next_ctx_id = 1;

struct CUctx_st *vsim_ctx_current(void)
{
	return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

bool vsim_ctx_valid(struct CUctx_st *ctx)
{
	return ctx && ctx->magic == VSIM_MAGIC_CTX && ctx->active;
}

CUresult vsim_ctx_get(struct CUctx_st **out)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	ctx = vsim_ctx_current();
	/* Destroyed by another thread while current here (structs are never
	 * freed, so reading it is safe). */
	if (ctx && ctx->magic == VSIM_MAGIC_DEAD)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if (!vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

/* A green context shares its device's primary context's modules and events
 * (cuCtxFromGreenCtx: "a normal primary context but with the resources of
 * the specified green context"). */
static const struct CUctx_st *ctx_space(const struct CUctx_st *ctx)
{
	return ctx->green ? vsim_g.dev[ctx->device].primary : ctx;
}

bool vsim_ctx_same_space(const struct CUctx_st *a, const struct CUctx_st *b)
{
	return a == b || ctx_space(a) == ctx_space(b);
}

void vsim_ctx_fork_child(void)
{
	memset(ctx_stack, 0, sizeof(ctx_stack));
	ctx_depth = 0;
}

/* Sets up ctx (new or reused primary) as live, with its NULL stream. */
static void ctx_activate(struct CUctx_st *ctx, int dev, unsigned flags,
			 bool primary)
{
	ctx->magic = VSIM_MAGIC_CTX;
	ctx->device = dev;
	ctx->flags = flags;
	ctx->primary = primary;
	ctx->id = atomic_fetch_add(&next_ctx_id, 1);
	ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
	ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 32;
	ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->exec_lock, NULL);
	ctx->streams = NULL;
	ctx->legacy = NULL;
	ctx->active = true;
	ctx->legacy = vsim_stream_new(ctx, 0, 0);
	ctx->legacy->legacy = true;
}

/* Waits for all work, frees memory and streams: what destroy and the last
 * primary release do. */
static void ctx_teardown(struct CUctx_st *ctx)
{
	vsim_ctx_drain(ctx);
	vsim_ctx_streams_destroy(ctx);
	vsim_mem_free_ctx(ctx);
	ctx->active = false;
	ctx->generation++;
}

CUresult vsim_ctx_new(int dev, unsigned flags, struct CUctx_st **out)
{
	struct CUctx_st *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_activate(ctx, dev, flags, false);
	*out = ctx;
	return CUDA_SUCCESS;
}

void vsim_ctx_destroy(struct CUctx_st *ctx, bool keep_memory)
{
	vsim_ctx_drain(ctx);
	vsim_ctx_streams_destroy(ctx);
	if (!keep_memory)
		vsim_mem_free_ctx(ctx);
	ctx->active = false;
	ctx->generation++;
	ctx->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(ctx);
	/* Current to this thread: popped. Elsewhere it is refused from now. */
	if (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == ctx)
		ctx_depth--;
}

static CUresult ctx_create(struct CUctx_st **pctx, unsigned flags, CUdevice dev)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_depth >= VSIM_MAX_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = vsim_ctx_new(dev, flags, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	ctx_stack[ctx_depth++] = ctx;
	*pctx = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
VSIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
				    CUdevice dev)
{
	return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
				int numParams, unsigned int flags, CUdevice dev);
VSIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
				    int numParams, unsigned int flags,
				    CUdevice dev)
{
	if (params && numParams > 0)
		return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
	return ctx_create(pctx, flags, dev);
}

VSIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
				    unsigned int flags, CUdevice dev)
{
	if (params && (params->execAffinityParams || params->cigParams))
		return CUDA_ERROR_NOT_SUPPORTED;
	return ctx_create(pctx, flags, dev);
}

VSIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	/* A green context's goes with cuGreenCtxDestroy. */
	if (!vsim_ctx_valid(ctx) || ctx->primary || ctx->green)
		return CUDA_ERROR_INVALID_CONTEXT;
	vsim_ctx_destroy(ctx, false);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth >= VSIM_MAX_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ctx) {
		if (ctx_depth > 0)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == 0)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = vsim_ctx_current();
	return CUDA_SUCCESS;
}

/* ctx NULL: the current context. */
static CUresult ctx_or_current(CUcontext ctx, struct CUctx_st **out)
{
	CUresult rc;

	if (!ctx)
		return vsim_ctx_get(out);
	rc = vsim_check_init();
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	CUresult rc = ctx_or_current(ctx, &ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = ctx->device;
	return CUDA_SUCCESS;
}

/* Potentially unsafe while captures go on (capture.c's modes). */
VSIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	CUresult rc = ctx_or_current(ctx, &ctx);

	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_unsafe_call();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = vsim_ctx_drain(ctx);
	vsim_pool_sync_release(ctx->device);
	return rc;
}

/* The pre-13.0 forms: the _v2 forms on the current context. */
VSIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	return cuCtxGetDevice_v2(device, NULL);
}

VSIM_EXPORT CUresult cuCtxSynchronize(void)
{
	return cuCtxSynchronize_v2(NULL);
}

VSIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUresult rc = ctx_or_current(ctx, &ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = ctx->flags;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	ctx->flags = flags;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	CUresult rc = ctx_or_current(ctx, &ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = ctx->id;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value || (unsigned)limit >= CU_LIMIT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*value = ctx->limits[limit];
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)limit >= CU_LIMIT_MAX)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	ctx->limits[limit] = value;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	*config = ctx->cache_config;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	ctx->cache_config = config;
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	struct CUctx_st *ctx;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

/* ---- primary contexts ---------------------------------------------------- */

VSIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	struct vsim_device *d;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	d = &vsim_g.dev[dev];
	pthread_mutex_lock(&d->primary_lock);
	if (!d->primary)
		d->primary = calloc(1, sizeof(*d->primary));
	if (!d->primary) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (!d->primary->active)
		ctx_activate(d->primary, dev, d->primary_flags, true);
	d->primary_refs++;
	*pctx = d->primary;
out:
	pthread_mutex_unlock(&d->primary_lock);
	return rc;
}

VSIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	struct vsim_device *d;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	d = &vsim_g.dev[dev];
	pthread_mutex_lock(&d->primary_lock);
	if (d->primary_refs == 0) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
	} else if (--d->primary_refs == 0 && d->primary->active) {
		ctx_teardown(d->primary);
	}
	pthread_mutex_unlock(&d->primary_lock);
	return rc;
}

VSIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	struct vsim_device *d;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	d = &vsim_g.dev[dev];
	pthread_mutex_lock(&d->primary_lock);
	if (d->primary && d->primary->active)
		ctx_teardown(d->primary);
	/* Retains stand: their owners release them later, as cuda.h allows. */
	d->primary_flags = 0;
	pthread_mutex_unlock(&d->primary_lock);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags,
						int *active)
{
	struct vsim_device *d;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	d = &vsim_g.dev[dev];
	pthread_mutex_lock(&d->primary_lock);
	*flags = d->primary_flags;
	*active = d->primary && d->primary->active;
	pthread_mutex_unlock(&d->primary_lock);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev,
						   unsigned int flags)
{
	struct vsim_device *d;
	CUresult rc = vsim_check_device(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	d = &vsim_g.dev[dev];
	pthread_mutex_lock(&d->primary_lock);
	d->primary_flags = flags;
	if (d->primary && d->primary->active)
		d->primary->flags = flags;
	pthread_mutex_unlock(&d->primary_lock);
	return CUDA_SUCCESS;
}
