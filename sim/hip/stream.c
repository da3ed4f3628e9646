/* stream.c - the simulated HIP runtime's streams and events.
 *
 * The driver's objects, handed out as HIP's handles: hipStream_t is the
 * CUstream (0 the null stream, hipStreamPerThread the driver's
 * CU_STREAM_PER_THREAD, the same value), hipEvent_t the CUevent. The flag
 * bits HIP shares with CUDA have the same values; HIP-only event flags
 * (release scopes) mean nothing on host memory and are dropped.
 */
#include "hip_sim.h"

#include <stdlib.h>

#define EVENT_CUDA_FLAGS (hipEventBlockingSync | hipEventDisableTiming | \
			  hipEventInterprocess)

VHIP_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *s,
						unsigned int flags)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!s || (flags & ~(unsigned)hipStreamNonBlocking))
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuStreamCreate((CUstream *)s, flags));
}

VHIP_EXPORT hipError_t hipStreamCreate(hipStream_t *s)
{
	return hipStreamCreateWithFlags(s, hipStreamDefault);
}

VHIP_EXPORT hipError_t hipStreamCreateWithPriority(hipStream_t *s,
						   unsigned int flags,
						   int priority)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!s || (flags & ~(unsigned)hipStreamNonBlocking))
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuStreamCreateWithPriority((CUstream *)s, flags,
						      priority));
}

VHIP_EXPORT hipError_t hipStreamDestroy(hipStream_t s)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!s)
		return vhip_error(hipErrorInvalidHandle);
	return vhip_result(cuStreamDestroy((CUstream)s));
}

VHIP_EXPORT hipError_t hipStreamSynchronize(hipStream_t s)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuStreamSynchronize((CUstream)s));
}

/* hipErrorNotReady is an answer, not an error: not the last error. */
VHIP_EXPORT hipError_t hipStreamSynchronize_spt(hipStream_t s)
{
	return hipStreamSynchronize(s ? s : hipStreamPerThread);
}

/* A callback, called as HIP calls it (its stream and HIP's error), from
 * the driver's. */
struct callback {
	hipStreamCallback_t fn;
	hipStream_t stream;
	void *data;
};

static void CUDA_CB callback_run(CUstream s, CUresult status, void *arg)
{
	struct callback c = *(struct callback *)arg;

	(void)s;
	free(arg);
	c.fn(c.stream, status == CUDA_SUCCESS ? hipSuccess : hipErrorUnknown,
	     c.data);
}

VHIP_EXPORT hipError_t hipStreamAddCallback(hipStream_t s,
					    hipStreamCallback_t fn,
					    void *data, unsigned int flags)
{
	struct callback *c;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!fn || flags)
		return vhip_error(hipErrorInvalidValue);
	if (!(c = malloc(sizeof(*c))))
		return vhip_error(hipErrorOutOfMemory);
	*c = (struct callback){ .fn = fn, .stream = s, .data = data };
	e = vhip_result(cuStreamAddCallback((CUstream)s, callback_run, c, 0));
	if (e != hipSuccess)
		free(c);
	return e;
}

VHIP_EXPORT hipError_t hipStreamQuery(hipStream_t s)
{
	hipError_t e = vhip_enter();
	CUresult rc;

	if (e != hipSuccess)
		return e;
	rc = cuStreamQuery((CUstream)s);
	return rc == CUDA_ERROR_NOT_READY ? hipErrorNotReady : vhip_result(rc);
}

VHIP_EXPORT hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t ev,
					  unsigned int flags)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuStreamWaitEvent((CUstream)s, (CUevent)ev, flags));
}

VHIP_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *ev,
					       unsigned int flags)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ev)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuEventCreate((CUevent *)ev,
					 flags & EVENT_CUDA_FLAGS));
}

VHIP_EXPORT hipError_t hipEventCreate(hipEvent_t *ev)
{
	return hipEventCreateWithFlags(ev, hipEventDefault);
}

VHIP_EXPORT hipError_t hipEventRecord(hipEvent_t ev, hipStream_t s)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuEventRecord((CUevent)ev, (CUstream)s));
}

VHIP_EXPORT hipError_t hipEventSynchronize(hipEvent_t ev)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuEventSynchronize((CUevent)ev));
}

VHIP_EXPORT hipError_t hipEventQuery(hipEvent_t ev)
{
	hipError_t e = vhip_enter();
	CUresult rc;

	if (e != hipSuccess)
		return e;
	rc = cuEventQuery((CUevent)ev);
	return rc == CUDA_ERROR_NOT_READY ? hipErrorNotReady : vhip_result(rc);
}

VHIP_EXPORT hipError_t hipEventElapsedTime(float *ms, hipEvent_t start,
					   hipEvent_t stop)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e :
	       vhip_result(cuEventElapsedTime(ms, (CUevent)start,
					      (CUevent)stop));
}

VHIP_EXPORT hipError_t hipEventDestroy(hipEvent_t ev)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ev)
		return vhip_error(hipErrorInvalidHandle);
	return vhip_result(cuEventDestroy((CUevent)ev));
}
