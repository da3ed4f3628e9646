/* green.c - green contexts: contexts limited to part of a device's SMs.
 *
 * Resources are SM counts. A device offers all of its N SMs
 * (VGPU_SIM_SM_COUNT); cuDevSmResourceSplitByCount cuts groups of equal size
 * out of a resource, as a compute capability 9.0 device does: at least 8
 * SMs and a multiple of 8 (2 and 2 with
 * CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING), the rest in `remaining`.
 * A descriptor adds up resources of one split; a green context of k SMs is a
 * context whose kernels take k of the device's SMs in the engine (state.c)
 * and run N/k times longer (launch.c). Green contexts own counts, not sets:
 * kernels of green contexts run side by side while their counts fit in N,
 * in any process (real green contexts of different processes may share
 * SMs; counts model the partitions a tenant's share asks for).
 *
 * VGPU_SIM_GREEN_CONTEXTS=0 makes every entry point here
 * CUDA_ERROR_NOT_SUPPORTED (but cuStreamGetCtx_v2, a stream query).
 *
 * Handles are never freed: a destroyed green context keeps its memory with
 * magic VSIM_MAGIC_DEAD, so a stale handle is refused.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define SM_GRANULE 8            /* sm_90: groups of at least 8, multiples of 8 */
#define SM_GRANULE_LOOSE 2      /* ..._IGNORE_SM_COSCHEDULING: pairs (a TPC) */
#define SPLIT_FLAGS (CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | \
		     CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)
#define TAG_MAGIC 0x56475253u   /* "VGRS" */
#define GROUP_REMAINING UINT32_MAX

struct CUgreenCtx_st {
	uint32_t magic;
	int device;
	CUdevSmResource sm;
	struct CUctx_st *ctx;          /* what cuCtxFromGreenCtx returns */
	unsigned long long id;
};

struct CUdevResourceDesc_st {
	uint32_t magic;
	int device;
	CUdevSmResource sm;
};

/* What the simulator keeps in a CUdevResource's internal padding: where it
 * came from, so descriptors and splits can be checked. */
struct res_tag {
	uint32_t magic;
	int32_t device;
	uint64_t split;                /* the split that made it; 0: none */
	uint32_t group;                /* its index there, or GROUP_REMAINING */
};

_Static_assert(sizeof(struct res_tag) <= sizeof(((CUdevResource *)0)->_internal_padding),
	       "the tag fits in a CUdevResource's padding");

static atomic_ullong next_split = 1;
static atomic_ullong next_green_id = 1;

static CUresult green_check(void)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	return vsim_g.cfg.green_contexts ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

/* The largest of granule, granule/2, ... 1 that divides count: a
 * resource's smCount is a multiple of its smCoscheduledAlignment. */
static unsigned alignment_of(unsigned count, unsigned granule)
{
	unsigned a = granule;

	while (a > 1 && count % a != 0)
		a /= 2;
	return a;
}

static void resource_make(CUdevResource *r, int device, unsigned count,
			  unsigned granule, uint64_t split, uint32_t group)
{
	struct res_tag tag = {
		.magic = TAG_MAGIC, .device = device, .split = split,
		.group = group,
	};

	memset(r, 0, sizeof(*r));
	r->type = CU_DEV_RESOURCE_TYPE_SM;
	r->sm.smCount = count;
	r->sm.minSmPartitionSize = granule;
	r->sm.smCoscheduledAlignment = alignment_of(count, granule);
	memcpy(r->_internal_padding, &tag, sizeof(tag));
}

/* An SM resource this API made: CUDA_SUCCESS with its tag, or the error
 * for it. */
static CUresult resource_read(const CUdevResource *r, struct res_tag *tag)
{
	if (r->type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	memcpy(tag, r->_internal_padding, sizeof(*tag));
	if (tag->magic != TAG_MAGIC || tag->device < 0 ||
	    tag->device >= vsim_g.cfg.devices ||
	    r->sm.smCount > (unsigned)vsim_g.cfg.sm_count)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* A live green context: CUDA_ERROR_INVALID_CONTEXT, or
 * CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed one. */
static CUresult green_get(CUgreenCtx g)
{
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!g)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (g->magic == VSIM_MAGIC_DEAD)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	return g->magic == VSIM_MAGIC_GREEN ? CUDA_SUCCESS
					    : CUDA_ERROR_INVALID_CONTEXT;
}

/* The resource of a whole device, or of a green context. */
static void resource_of(CUdevResource *r, int device, const CUgreenCtx g)
{
	resource_make(r, device, g ? g->sm.smCount : (unsigned)vsim_g.cfg.sm_count,
		      SM_GRANULE, 0, 0);
}

/* ---- resources -------------------------------------------------------------- */

VSIM_EXPORT CUresult cuDeviceGetDevResource(CUdevice device,
					    CUdevResource *resource,
					    CUdevResourceType type)
{
	CUresult rc = green_check();

	if (rc == CUDA_SUCCESS)
		rc = vsim_check_device(device);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	resource_of(resource, device, NULL);
	return CUDA_SUCCESS;
}

/* hCtx NULL: the current context. */
VSIM_EXPORT CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource,
					 CUdevResourceType type)
{
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hCtx) {
		rc = vsim_ctx_get(&hCtx);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	if (!vsim_ctx_valid(hCtx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	resource_of(resource, hCtx->device, hCtx->green);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx,
					      CUdevResource *resource,
					      CUdevResourceType type)
{
	CUresult rc = green_get(hCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!resource)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	resource_of(resource, hCtx->device, hCtx);
	return CUDA_SUCCESS;
}

/* The group size of a split: minCount, at least one granule, rounded up
 * to a whole number of granules. */
static unsigned group_size(unsigned min_count, unsigned granule)
{
	unsigned n = min_count < granule ? granule : min_count;

	return (n + granule - 1) / granule * granule;
}

VSIM_EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource *result,
						 unsigned int *nbGroups,
						 const CUdevResource *input,
						 CUdevResource *remaining,
						 unsigned int useFlags,
						 unsigned int minCount)
{
	struct res_tag tag;
	unsigned granule, size, groups;
	uint64_t split;
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!nbGroups || !input || (useFlags & ~(unsigned)SPLIT_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	rc = resource_read(input, &tag);
	if (rc != CUDA_SUCCESS)
		return rc;
	/* "The output results cannot be split again without first creating a
	 * descriptor and a green context with that descriptor." */
	if (tag.split != 0)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	if (minCount > input->sm.smCount || (result && *nbGroups == 0))
		return CUDA_ERROR_INVALID_VALUE;
	granule = (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING)
			  ? SM_GRANULE_LOOSE : SM_GRANULE;
	size = group_size(minCount, granule);
	groups = input->sm.smCount / size;
	if (groups == 0)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	if (result && *nbGroups < groups)
		groups = *nbGroups;
	split = atomic_fetch_add(&next_split, 1);
	for (unsigned i = 0; result && i < groups; i++)
		resource_make(&result[i], tag.device, size, granule, split, i);
	if (remaining)
		resource_make(remaining, tag.device,
			      input->sm.smCount - groups * size, granule, split,
			      GROUP_REMAINING);
	*nbGroups = groups;
	return CUDA_SUCCESS;
}

/* Resources that may make one descriptor: of one device and, when more
 * than one, distinct outputs of one split. Adds up their SMs. */
static CUresult resources_check(const CUdevResource *res, unsigned n,
				int *device, unsigned *sms)
{
	struct res_tag first = { 0 }, tag;
	CUresult rc;

	*sms = 0;
	for (unsigned i = 0; i < n; i++) {
		rc = resource_read(&res[i], &tag);
		if (rc != CUDA_SUCCESS)
			return rc;
		if (i == 0)
			first = tag;
		if (tag.device != first.device)
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		if (n > 1 && (tag.split == 0 || tag.split != first.split))
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		for (unsigned j = 0; j < i; j++) {
			struct res_tag other;
			memcpy(&other, res[j]._internal_padding, sizeof(other));
			if (other.group == tag.group)
				return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		}
		*sms += res[i].sm.smCount;
	}
	*device = first.device;
	if (*sms == 0 || *sms > (unsigned)vsim_g.cfg.sm_count)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	return CUDA_SUCCESS;
}

/* Descriptors have no destroy call: they stay for the process's life. */
VSIM_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc,
					       CUdevResource *resources,
					       unsigned int nbResources)
{
	struct CUdevResourceDesc_st *d;
	unsigned sms;
	int device;
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phDesc || !resources || nbResources == 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = resources_check(resources, nbResources, &device, &sms);
	if (rc != CUDA_SUCCESS)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->magic = VSIM_MAGIC_RESDESC;
	d->device = device;
	d->sm.smCount = sms;
	d->sm.minSmPartitionSize = resources[0].sm.minSmPartitionSize;
	d->sm.smCoscheduledAlignment =
		alignment_of(sms, resources[0].sm.minSmPartitionSize);
	vsim_graveyard_add(d);
	*phDesc = d;
	return CUDA_SUCCESS;
}

/* ---- green contexts ----------------------------------------------------------- */

VSIM_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc,
				      CUdevice dev, unsigned int flags)
{
	struct CUgreenCtx_st *g;
	CUcontext primary = NULL;
	CUresult rc = green_check();

	if (rc == CUDA_SUCCESS)
		rc = vsim_check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phCtx || !desc || desc->magic != VSIM_MAGIC_RESDESC ||
	    desc->device != dev || flags != CU_GREEN_CTX_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* "This API will retain the primary context on device dev." */
	rc = cuDevicePrimaryCtxRetain(&primary, dev);
	if (rc == CUDA_SUCCESS)
		rc = vsim_ctx_new(dev, primary->flags, &g->ctx);
	if (rc != CUDA_SUCCESS) {
		if (primary)
			cuDevicePrimaryCtxRelease_v2(dev);
		free(g);
		return rc;
	}
	g->magic = VSIM_MAGIC_GREEN;
	g->device = dev;
	g->sm = desc->sm;
	g->id = atomic_fetch_add(&next_green_id, 1);
	g->ctx->green = g;
	g->ctx->sm_count = desc->sm.smCount;
	*phCtx = g;
	return CUDA_SUCCESS;
}

/* Waits for the green context's work and ends its streams; memory
 * allocated in it is the primary context's and stays. */
VSIM_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
	CUresult rc = green_get(hCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_ctx_destroy(hCtx->ctx, true);
	hCtx->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(hCtx);
	cuDevicePrimaryCtxRelease_v2(hCtx->device);
	return CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
	CUresult rc = green_get(hCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pContext)
		return CUDA_ERROR_INVALID_VALUE;
	*pContext = hCtx->ctx;
	return CUDA_SUCCESS;
}

/* greenCtx NULL: the current context's green context. */
VSIM_EXPORT CUresult cuGreenCtxGetId(CUgreenCtx greenCtx,
				     unsigned long long *greenCtxId)
{
	struct CUctx_st *ctx;
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!greenCtx) {
		rc = vsim_ctx_get(&ctx);
		if (rc != CUDA_SUCCESS)
			return rc;
		if (!ctx->green)
			return CUDA_ERROR_INVALID_CONTEXT;
		greenCtx = ctx->green;
	}
	rc = green_get(greenCtx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!greenCtxId)
		return CUDA_ERROR_INVALID_VALUE;
	*greenCtxId = greenCtx->id;
	return CUDA_SUCCESS;
}

/* ---- streams and events --------------------------------------------------------- */

/* "flags: CU_STREAM_NON_BLOCKING must be specified." */
VSIM_EXPORT CUresult cuGreenCtxStreamCreate(CUstream *phStream,
					    CUgreenCtx greenCtx,
					    unsigned int flags, int priority)
{
	CUresult rc = green_get(greenCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phStream || flags != CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	rc = cuCtxPushCurrent_v2(greenCtx->ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = cuStreamCreateWithPriority(phStream, flags, priority);
	cuCtxPopCurrent_v2(NULL);
	return rc;
}

/* A wait on every stream of ctx with work not yet done; caller holds
 * nothing. NULL when out of memory. */
static struct vsim_op *op_after_all(struct CUctx_st *ctx, enum vsim_op_kind kind)
{
	struct vsim_op *op = vsim_op_new(kind);
	unsigned n = 0;

	if (!op)
		return NULL;
	pthread_mutex_lock(&ctx->lock);
	for (struct CUstream_st *t = ctx->streams; t; t = t->next)
		n++;
	op->deps = calloc(n ? n : 1, sizeof(*op->deps));
	for (struct CUstream_st *t = ctx->streams; op->deps && t; t = t->next) {
		pthread_mutex_lock(&t->lock);
		if (t->magic == VSIM_MAGIC_STREAM && t->submitted > t->completed)
			op->deps[op->ndeps++] = (struct vsim_dep){ t, t->submitted };
		pthread_mutex_unlock(&t->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!op->deps) {
		free(op);
		return NULL;
	}
	return op;
}

/* Captures all the green context's work so far: a record on its NULL
 * stream that waits for each of its streams. */
VSIM_EXPORT CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	uint64_t seq;
	CUresult rc = green_get(hCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hEvent || hEvent->magic != VSIM_MAGIC_EVENT ||
	    !vsim_ctx_same_space(hEvent->ctx, hCtx->ctx))
		return CUDA_ERROR_INVALID_HANDLE;
	s = hCtx->ctx->legacy;
	op = op_after_all(hCtx->ctx, VSIM_OP_EVENT);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.event.event = hEvent;
	/* As cuEventRecord: the worker completing the record sees its seq. */
	pthread_mutex_lock(&hEvent->lock);
	rc = vsim_stream_submit(s, op, &seq);
	if (rc == CUDA_SUCCESS) {
		hEvent->stream = s;
		hEvent->seq = seq;
		hEvent->recorded = true;
		hEvent->done = false;
		vsim_capture_event_forget(hEvent);
	}
	pthread_mutex_unlock(&hEvent->lock);
	return rc;
}

/* Work submitted later to the green context's NULL stream, and so to its
 * blocking streams, waits for the event. */
VSIM_EXPORT CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent)
{
	CUresult rc = green_get(hCtx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!hEvent || hEvent->magic != VSIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	return cuStreamWaitEvent(hCtx->ctx->legacy, hEvent, 0);
}

VSIM_EXPORT CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx)
{
	struct CUstream_st *s;
	CUresult rc = green_check();

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = vsim_stream_resolve(hStream, false, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!phCtx)
		return CUDA_ERROR_INVALID_VALUE;
	*phCtx = s->ctx->green;
	return CUDA_SUCCESS;
}

/* A green context's stream: its device's primary context and the green
 * context. The per-thread stream does not exist in a green context. */
VSIM_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx,
				       CUgreenCtx *pGreenCtx)
{
	struct CUctx_st *cur;
	struct CUstream_st *s;
	CUresult rc;

	if (hStream == CU_STREAM_PER_THREAD && vsim_ctx_get(&cur) == CUDA_SUCCESS &&
	    cur->green)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = vsim_stream_resolve(hStream, false, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pCtx || !pGreenCtx)
		return CUDA_ERROR_INVALID_VALUE;
	*pGreenCtx = s->ctx->green;
	*pCtx = s->ctx->green ? vsim_g.dev[s->ctx->device].primary : s->ctx;
	return CUDA_SUCCESS;
}
