/* runtime.c - the simulated HIP runtime's init, devices and errors.
 *
 * HIP's runtime API keeps, per thread, a current device (0 until
 * hipSetDevice) and works in that device's primary context; here that is
 * the simulated driver's primary context, retained once per device and
 * made current on the thread when it is not. Errors are the driver's,
 * mapped to HIP's codes; the thread's last error is what hipGetLastError
 * returns (and clears).
 */
#include "hip_sim.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_rc = CUDA_ERROR_NOT_INITIALIZED;
static int device_count;

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[VHIP_MAX_DEVICES];

static _Thread_local int cur_device;
static _Thread_local hipError_t last_error;

static void init_driver(void)
{
	vsim_hip_process();
	init_rc = cuInit(0);
	if (init_rc == CUDA_SUCCESS)
		init_rc = cuDeviceGetCount(&device_count);
	if (device_count > VHIP_MAX_DEVICES)
		device_count = VHIP_MAX_DEVICES;
}

static CUresult primary_of(int dev, CUcontext *out)
{
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&ctx_lock);
	if (!primary[dev])
		rc = cuDevicePrimaryCtxRetain(&primary[dev], (CUdevice)dev);
	*out = primary[dev];
	pthread_mutex_unlock(&ctx_lock);
	return rc;
}

hipError_t vhip_enter(void)
{
	CUcontext want, have = NULL;
	CUresult rc;

	pthread_once(&init_once, init_driver);
	if (init_rc != CUDA_SUCCESS)
		return vhip_result(init_rc);
	if (cur_device >= device_count)
		return vhip_error(hipErrorInvalidDevice);
	rc = primary_of(cur_device, &want);
	if (rc == CUDA_SUCCESS)
		rc = cuCtxGetCurrent(&have);
	if (rc == CUDA_SUCCESS && have != want)
		rc = cuCtxSetCurrent(want);
	return vhip_result(rc);
}

int vhip_device(void)
{
	return cur_device;
}

CUcontext vhip_context(void)
{
	return primary[cur_device];
}

static hipError_t map_error(CUresult rc)
{
	switch (rc) {
	case CUDA_SUCCESS: return hipSuccess;
	case CUDA_ERROR_INVALID_VALUE: return hipErrorInvalidValue;
	case CUDA_ERROR_OUT_OF_MEMORY: return hipErrorOutOfMemory;
	case CUDA_ERROR_NOT_INITIALIZED: return hipErrorNotInitialized;
	case CUDA_ERROR_DEINITIALIZED: return hipErrorDeinitialized;
	case CUDA_ERROR_NO_DEVICE: return hipErrorNoDevice;
	case CUDA_ERROR_INVALID_DEVICE: return hipErrorInvalidDevice;
	case CUDA_ERROR_INVALID_IMAGE: return hipErrorInvalidImage;
	case CUDA_ERROR_INVALID_CONTEXT: return hipErrorInvalidContext;
	case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
		return hipErrorContextAlreadyCurrent;
	case CUDA_ERROR_MAP_FAILED: return hipErrorMapFailed;
	case CUDA_ERROR_UNMAP_FAILED: return hipErrorUnmapFailed;
	case CUDA_ERROR_ALREADY_MAPPED: return hipErrorAlreadyMapped;
	case CUDA_ERROR_NO_BINARY_FOR_GPU: return hipErrorNoBinaryForGpu;
	case CUDA_ERROR_NOT_MAPPED: return hipErrorNotMapped;
	case CUDA_ERROR_CONTEXT_ALREADY_IN_USE:
		return hipErrorContextAlreadyInUse;
	case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
		return hipErrorPeerAccessUnsupported;
	case CUDA_ERROR_INVALID_SOURCE: return hipErrorInvalidSource;
	case CUDA_ERROR_FILE_NOT_FOUND: return hipErrorFileNotFound;
	case CUDA_ERROR_OPERATING_SYSTEM: return hipErrorOperatingSystem;
	case CUDA_ERROR_INVALID_HANDLE: return hipErrorInvalidHandle;
	case CUDA_ERROR_ILLEGAL_STATE: return hipErrorIllegalState;
	case CUDA_ERROR_NOT_FOUND: return hipErrorNotFound;
	case CUDA_ERROR_NOT_READY: return hipErrorNotReady;
	case CUDA_ERROR_ILLEGAL_ADDRESS: return hipErrorIllegalAddress;
	case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
		return hipErrorLaunchOutOfResources;
	case CUDA_ERROR_LAUNCH_TIMEOUT: return hipErrorLaunchTimeOut;
	case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
		return hipErrorPeerAccessAlreadyEnabled;
	case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
		return hipErrorPeerAccessNotEnabled;
	case CUDA_ERROR_CONTEXT_IS_DESTROYED: return hipErrorContextIsDestroyed;
	case CUDA_ERROR_ASSERT: return hipErrorAssert;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return hipErrorHostMemoryAlreadyRegistered;
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return hipErrorHostMemoryNotRegistered;
	case CUDA_ERROR_LAUNCH_FAILED: return hipErrorLaunchFailure;
	case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
		return hipErrorCooperativeLaunchTooLarge;
	case CUDA_ERROR_NOT_SUPPORTED: return hipErrorNotSupported;
	case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
		return hipErrorStreamCaptureUnsupported;
	case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
		return hipErrorStreamCaptureInvalidated;
	case CUDA_ERROR_STREAM_CAPTURE_MERGE: return hipErrorStreamCaptureMerge;
	case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
		return hipErrorStreamCaptureUnmatched;
	case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
		return hipErrorStreamCaptureUnjoined;
	case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
		return hipErrorStreamCaptureIsolation;
	case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
		return hipErrorStreamCaptureImplicit;
	case CUDA_ERROR_CAPTURED_EVENT: return hipErrorCapturedEvent;
	case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
		return hipErrorStreamCaptureWrongThread;
	case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
		return hipErrorGraphExecUpdateFailure;
	default: return hipErrorUnknown;
	}
}

hipError_t vhip_error(hipError_t e)
{
	if (e != hipSuccess)
		last_error = e;
	return e;
}

hipError_t vhip_result(CUresult rc)
{
	return vhip_error(map_error(rc));
}

/* ---- init and devices ----------------------------------------------------- */

VHIP_EXPORT hipError_t hipInit(unsigned int flags)
{
	if (flags)
		return vhip_error(hipErrorInvalidValue);
	pthread_once(&init_once, init_driver);
	return vhip_result(init_rc);
}

VHIP_EXPORT hipError_t hipDriverGetVersion(int *version)
{
	if (!version)
		return vhip_error(hipErrorInvalidValue);
	*version = HIP_VERSION;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipRuntimeGetVersion(int *version)
{
	return hipDriverGetVersion(version);
}

VHIP_EXPORT hipError_t hipGetDeviceCount(int *count)
{
	if (!count)
		return vhip_error(hipErrorInvalidValue);
	pthread_once(&init_once, init_driver);
	*count = init_rc == CUDA_SUCCESS ? device_count : 0;
	if (init_rc != CUDA_SUCCESS)
		return vhip_result(init_rc);
	return device_count ? hipSuccess : vhip_error(hipErrorNoDevice);
}

VHIP_EXPORT hipError_t hipSetDevice(int dev)
{
	pthread_once(&init_once, init_driver);
	if (init_rc != CUDA_SUCCESS)
		return vhip_result(init_rc);
	if (dev < 0 || dev >= device_count)
		return vhip_error(hipErrorInvalidDevice);
	cur_device = dev;
	return vhip_enter();
}

VHIP_EXPORT hipError_t hipGetDevice(int *dev)
{
	if (!dev)
		return vhip_error(hipErrorInvalidValue);
	*dev = cur_device;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipDeviceGet(hipDevice_t *dev, int ordinal)
{
	hipError_t e = hipInit(0);

	if (e != hipSuccess)
		return e;
	if (!dev)
		return vhip_error(hipErrorInvalidValue);
	if (ordinal < 0 || ordinal >= device_count)
		return vhip_error(hipErrorInvalidDevice);
	*dev = ordinal;
	return hipSuccess;
}

VHIP_EXPORT hipError_t hipDeviceSynchronize(void)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuCtxSynchronize());
}

VHIP_EXPORT hipError_t hipDeviceReset(void)
{
	hipError_t e = vhip_enter();

	return e != hipSuccess ? e : vhip_result(cuCtxSynchronize());
}

/* ---- errors ------------------------------------------------------------------ */

VHIP_EXPORT hipError_t hipGetLastError(void)
{
	hipError_t e = last_error;

	last_error = hipSuccess;
	return e;
}

VHIP_EXPORT hipError_t hipPeekAtLastError(void)
{
	return last_error;
}

#define VHIP_ERROR_NAMES(X) \
	X(hipSuccess, "no error") \
	X(hipErrorInvalidValue, "invalid argument") \
	X(hipErrorOutOfMemory, "out of memory") \
	X(hipErrorNotInitialized, "initialization error") \
	X(hipErrorDeinitialized, "driver shutting down") \
	X(hipErrorInvalidConfiguration, "invalid configuration argument") \
	X(hipErrorInvalidPitchValue, "invalid pitch argument") \
	X(hipErrorInvalidSymbol, "invalid device symbol") \
	X(hipErrorInvalidDevicePointer, "invalid device pointer") \
	X(hipErrorInvalidMemcpyDirection, "invalid copy direction for memcpy") \
	X(hipErrorInvalidDeviceFunction, "invalid device function") \
	X(hipErrorNoDevice, "no ROCm-capable device is detected") \
	X(hipErrorInvalidDevice, "invalid device ordinal") \
	X(hipErrorInvalidImage, "device kernel image is invalid") \
	X(hipErrorInvalidContext, "invalid device context") \
	X(hipErrorContextAlreadyCurrent, "context is already current context") \
	X(hipErrorMapFailed, "mapping of buffer object failed") \
	X(hipErrorUnmapFailed, "unmapping of buffer object failed") \
	X(hipErrorAlreadyMapped, "resource already mapped") \
	X(hipErrorNoBinaryForGpu, "no kernel image is available for execution on the device") \
	X(hipErrorNotMapped, "resource not mapped") \
	X(hipErrorContextAlreadyInUse, "context already in use") \
	X(hipErrorPeerAccessUnsupported, "peer access is not supported between these two devices") \
	X(hipErrorInvalidSource, "device kernel image is invalid") \
	X(hipErrorFileNotFound, "file not found") \
	X(hipErrorOperatingSystem, "OS call failed or operation not supported on this OS") \
	X(hipErrorInvalidHandle, "invalid resource handle") \
	X(hipErrorIllegalState, "the operation cannot be performed in the present state") \
	X(hipErrorNotFound, "named symbol not found") \
	X(hipErrorNotReady, "device not ready") \
	X(hipErrorIllegalAddress, "an illegal memory access was encountered") \
	X(hipErrorLaunchOutOfResources, "too many resources requested for launch") \
	X(hipErrorLaunchTimeOut, "the launch timed out and was terminated") \
	X(hipErrorPeerAccessAlreadyEnabled, "peer access is already enabled") \
	X(hipErrorPeerAccessNotEnabled, "peer access has not been enabled") \
	X(hipErrorContextIsDestroyed, "context is destroyed") \
	X(hipErrorAssert, "device-side assert triggered") \
	X(hipErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
	X(hipErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
	X(hipErrorLaunchFailure, "unspecified launch failure") \
	X(hipErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch") \
	X(hipErrorNotSupported, "operation not supported") \
	X(hipErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing") \
	X(hipErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
	X(hipErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences") \
	X(hipErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began") \
	X(hipErrorStreamCaptureUnjoined, "capturing stream has unjoined work") \
	X(hipErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream") \
	X(hipErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
	X(hipErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
	X(hipErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
	X(hipErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
	X(hipErrorUnknown, "unknown error")

struct error_name {
	hipError_t code;
	const char *name, *text;
};

#define VHIP_ERROR_ROW(code, text) { code, #code, text },
static const struct error_name error_names[] = {
	VHIP_ERROR_NAMES(VHIP_ERROR_ROW)
};

static const struct error_name *error_find(hipError_t e)
{
	for (size_t i = 0; i < sizeof(error_names) / sizeof(*error_names); i++)
		if (error_names[i].code == e)
			return &error_names[i];
	return NULL;
}

VHIP_EXPORT const char *hipGetErrorName(hipError_t e)
{
	const struct error_name *n = error_find(e);

	return n ? n->name : "hipErrorUnknown";
}

VHIP_EXPORT const char *hipGetErrorString(hipError_t e)
{
	const struct error_name *n = error_find(e);

	return n ? n->text : "unknown error";
}
