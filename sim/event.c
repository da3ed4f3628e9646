/* event.c - events: markers in a stream that record when work before them
 * completed, in CLOCK_MONOTONIC nanoseconds.
 */
#include "sim.h"

#include <stdlib.h>

#define EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | \
		     CU_EVENT_INTERPROCESS)

static CUresult event_get(CUevent e)
{
	CUresult rc = vsim_check_init();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (e && (e->magic == VSIM_MAGIC_DEAD ||
		  (e->magic == VSIM_MAGIC_EVENT &&
		   e->generation != e->ctx->generation)))
		atomic_fetch_add(&vsim_g.stale_uses, 1);
	if (!e || e->magic != VSIM_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

/* For tests: how many calls were given a stale event or stream handle. */
VSIM_EXPORT unsigned long long vsim_stale_handle_uses(void)
{
	return (unsigned long long)atomic_load(&vsim_g.stale_uses);
}

void vsim_event_complete(struct CUevent_st *e, uint64_t seq, uint64_t now)
{
	pthread_mutex_lock(&e->lock);
	/* Only the latest record counts; an older one is superseded. */
	if (e->seq == seq) {
		e->time_ns = now;
		e->done = true;
	}
	pthread_mutex_unlock(&e->lock);
}

VSIM_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	struct CUctx_st *ctx;
	struct CUevent_st *e;
	CUresult rc = vsim_ctx_get(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ph || (flags & ~(unsigned)EVENT_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = VSIM_MAGIC_EVENT;
	e->flags = flags;
	e->ctx = ctx;
	e->generation = ctx->generation;
	pthread_mutex_init(&e->lock, NULL);
	*ph = e;
	return CUDA_SUCCESS;
}

/* The struct stays allocated (magic DEAD): a record still queued may run. */
VSIM_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	CUresult rc = event_get(e);

	if (rc != CUDA_SUCCESS)
		return rc;
	vsim_capture_event_forget(e);
	e->magic = VSIM_MAGIC_DEAD;
	vsim_graveyard_add(e);
	return CUDA_SUCCESS;
}

static CUresult event_record(CUevent e, CUstream h, unsigned flags, bool ptds)
{
	struct CUstream_st *s;
	struct vsim_op *op;
	uint64_t seq;
	CUresult rc = event_get(e);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = vsim_stream_resolve(h, ptds, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!vsim_ctx_same_space(s->ctx, e->ctx))
		return CUDA_ERROR_INVALID_HANDLE;
	/* Captured: the event keeps the stream's place in the capture. */
	if (vsim_capture_record(s, e, &rc))
		return rc;
	op = vsim_op_new(VSIM_OP_EVENT);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.event.event = e;
	/* Hold the event lock across submission so that the worker, which
	 * takes it to complete the record, sees this record's seq. */
	pthread_mutex_lock(&e->lock);
	rc = vsim_stream_submit(s, op, &seq);
	if (rc == CUDA_SUCCESS) {
		e->stream = s;
		e->seq = seq;
		e->recorded = true;
		e->done = false;
		vsim_capture_event_forget(e);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

VSIM_EXPORT CUresult cuEventRecord(CUevent e, CUstream h)
{
	return event_record(e, h, 0, false);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream h);
VSIM_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream h)
{
	return event_record(e, h, 0, true);
}

VSIM_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream h,
					    unsigned int flags)
{
	return event_record(e, h, flags, false);
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream h,
					     unsigned int flags);
VSIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h,
						 unsigned int flags)
{
	return event_record(e, h, flags, true);
}

/* An event never recorded counts as complete, as in the driver; one
 * recorded last in a capture stands for no work that runs. */
VSIM_EXPORT CUresult cuEventQuery(CUevent e)
{
	bool pending;
	CUresult rc = event_get(e);

	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_event_check(e);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&e->lock);
	pending = e->recorded && !e->done;
	pthread_mutex_unlock(&e->lock);
	return pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

VSIM_EXPORT CUresult cuEventSynchronize(CUevent e)
{
	struct CUstream_st *s;
	uint64_t seq;
	CUresult rc = event_get(e);

	if (rc == CUDA_SUCCESS)
		rc = vsim_capture_event_check(e);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&e->lock);
	s = e->recorded ? e->stream : NULL;
	seq = e->seq;
	pthread_mutex_unlock(&e->lock);
	if (s)
		vsim_stream_wait_seq(s, seq);
	vsim_pool_sync_release(e->ctx->device);
	return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
	uint64_t t0, t1;
	bool ready;
	CUresult rc = event_get(start);

	if (rc == CUDA_SUCCESS)
		rc = event_get(end);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&start->lock);
	pthread_mutex_lock(&end->lock);
	ready = start->done && end->done;
	rc = (start->recorded && end->recorded) ? CUDA_SUCCESS
						: CUDA_ERROR_INVALID_HANDLE;
	t0 = start->time_ns;
	t1 = end->time_ns;
	pthread_mutex_unlock(&end->lock);
	pthread_mutex_unlock(&start->lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ready)
		return CUDA_ERROR_NOT_READY;
	*ms = (float)((double)((int64_t)(t1 - t0)) / 1e6);
	return CUDA_SUCCESS;
}

#undef cuEventElapsedTime
CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent start, CUevent end);
VSIM_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
	return elapsed(ms, start, end);
}

VSIM_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
	return elapsed(ms, start, end);
}
