/* copies.c - the copy and memset hooks: passed through untouched, but in a
 * process with movable ranges (host overcommit) or a control thread
 * (VGPU_CONTROL) they take the launch gate (control.c), so none runs while
 * a thread moves the memory they may touch to or from the host: a copy
 * during the swap of a range's backing would fail or be lost. While the
 * process is suspended they wait, as launches do. Otherwise: one flag test
 * and the driver's call.
 *
 * Every copy and memset the driver exports is hooked, in every ABI and
 * per-thread stream form: between host, device and arrays, 2D and 3D,
 * between contexts (peer) and in batches; so are the stream memory
 * operations (a value written or waited for, alone or in a batch). A driver without one of them
 * (an older one, or the simulator) answers CUDA_ERROR_NOT_FOUND for it,
 * as the forwarders do.
 */
#include "devices.h"

/* A function the driver lacks, or no driver yet. */
static CUresult missing(void)
{
	return vgpu__real_path()[0] ? CUDA_ERROR_NOT_FOUND
				    : CUDA_ERROR_NOT_INITIALIZED;
}

#define GATED(sym, params, args)					\
	CUresult sym params						\
	{								\
		CUresult r;						\
									\
		if (!vgpu__real.sym)					\
			return missing();				\
		if (__builtin_expect(!__atomic_load_n(&vgpu__gate_on, \
						      __ATOMIC_RELAXED), 1)) \
			return vgpu__real.sym args;			\
		vgpu__gate_enter();					\
		r = vgpu__real.sym args;				\
		vgpu__gate_leave();					\
		return r;						\
	}

GATED(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),
      (dst, src, ByteCount))
GATED(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),
      (dst, src, ByteCount))
GATED(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy),
      (pCopy))
GATED(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *pCopy),
      (pCopy))
GATED(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy),
      (pCopy))
GATED(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *pCopy),
      (pCopy))
GATED(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
      (dst, src, ByteCount, hStream))
GATED(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
      (dst, src, ByteCount, hStream))
GATED(cuMemcpyAtoH_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstHost, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
      (dstDevice, srcDevice, ByteCount))
GATED(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
      (dstDevice, srcDevice, ByteCount))
GATED(cuMemcpyDtoDAsync_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
      (dstDevice, srcDevice, ByteCount, hStream))
GATED(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
      (dstDevice, srcDevice, ByteCount, hStream))
GATED(cuMemcpyDtoH_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
      (dstHost, srcDevice, ByteCount))
GATED(cuMemcpyDtoH_v2_ptds, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
      (dstHost, srcDevice, ByteCount))
GATED(cuMemcpyDtoHAsync_v2, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
      (dstHost, srcDevice, ByteCount, hStream))
GATED(cuMemcpyDtoHAsync_v2_ptsz, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
      (dstHost, srcDevice, ByteCount, hStream))
GATED(cuMemcpyHtoA_v2, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
      (dstArray, dstOffset, srcHost, ByteCount))
GATED(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
      (dstDevice, srcHost, ByteCount))
GATED(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
      (dstDevice, srcHost, ByteCount))
GATED(cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
      (dstDevice, srcHost, ByteCount, hStream))
GATED(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
      (dstDevice, srcHost, ByteCount, hStream))
GATED(cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N),
      (dstDevice, us, N))
GATED(cuMemsetD16_v2_ptds, (CUdeviceptr dstDevice, unsigned short us, size_t N),
      (dstDevice, us, N))
GATED(cuMemsetD16Async, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
      (dstDevice, us, N, hStream))
GATED(cuMemsetD16Async_ptsz, (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
      (dstDevice, us, N, hStream))
GATED(cuMemsetD2D16_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
      (dstDevice, dstPitch, us, Width, Height))
GATED(cuMemsetD2D16_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
      (dstDevice, dstPitch, us, Width, Height))
GATED(cuMemsetD2D16Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, us, Width, Height, hStream))
GATED(cuMemsetD2D16Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, us, Width, Height, hStream))
GATED(cuMemsetD2D32_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
      (dstDevice, dstPitch, ui, Width, Height))
GATED(cuMemsetD2D32_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
      (dstDevice, dstPitch, ui, Width, Height))
GATED(cuMemsetD2D32Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, ui, Width, Height, hStream))
GATED(cuMemsetD2D32Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, ui, Width, Height, hStream))
GATED(cuMemsetD2D8_v2, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
      (dstDevice, dstPitch, uc, Width, Height))
GATED(cuMemsetD2D8_v2_ptds, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
      (dstDevice, dstPitch, uc, Width, Height))
GATED(cuMemsetD2D8Async, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, uc, Width, Height, hStream))
GATED(cuMemsetD2D8Async_ptsz, (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height, CUstream hStream),
      (dstDevice, dstPitch, uc, Width, Height, hStream))
GATED(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N),
      (dstDevice, ui, N))
GATED(cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N),
      (dstDevice, ui, N))
GATED(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
      (dstDevice, ui, N, hStream))
GATED(cuMemsetD32Async_ptsz, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
      (dstDevice, ui, N, hStream))
GATED(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N),
      (dstDevice, uc, N))
GATED(cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N),
      (dstDevice, uc, N))
GATED(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
      (dstDevice, uc, N, hStream))
GATED(cuMemsetD8Async_ptsz, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
      (dstDevice, uc, N, hStream))

/* ---- 3D, array, peer and batched copies ---- */

GATED(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy),
      (pCopy))
GATED(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *pCopy),
      (pCopy))
GATED(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpy3DBatchAsync, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, CUstream hStream),
      (numOps, opList, failIdx, flags, hStream))
GATED(cuMemcpy3DBatchAsync_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, CUstream hStream),
      (numOps, opList, failIdx, flags, hStream))
GATED(cuMemcpy3DBatchAsync_v2, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream),
      (numOps, opList, flags, hStream))
GATED(cuMemcpy3DBatchAsync_v2_ptsz, (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream),
      (numOps, opList, flags, hStream))
GATED(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy),
      (pCopy))
GATED(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *pCopy),
      (pCopy))
GATED(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),
      (pCopy, hStream))
GATED(cuMemcpyAtoA_v2, (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstArray, dstOffset, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyAtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstArray, dstOffset, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyAtoD_v2, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstDevice, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyAtoD_v2_ptds, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstDevice, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyAtoH_v2_ptds, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),
      (dstHost, srcArray, srcOffset, ByteCount))
GATED(cuMemcpyAtoHAsync_v2, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),
      (dstHost, srcArray, srcOffset, ByteCount, hStream))
GATED(cuMemcpyAtoHAsync_v2_ptsz, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),
      (dstHost, srcArray, srcOffset, ByteCount, hStream))
GATED(cuMemcpyBatchAsync, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream),
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))
GATED(cuMemcpyBatchAsync_ptsz, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream),
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))
GATED(cuMemcpyBatchAsync_v2, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
GATED(cuMemcpyBatchAsync_v2_ptsz, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
GATED(cuMemcpyDtoA_v2, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
      (dstArray, dstOffset, srcDevice, ByteCount))
GATED(cuMemcpyDtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
      (dstArray, dstOffset, srcDevice, ByteCount))
GATED(cuMemcpyHtoA_v2_ptds, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
      (dstArray, dstOffset, srcHost, ByteCount))
GATED(cuMemcpyHtoAAsync_v2, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream),
      (dstArray, dstOffset, srcHost, ByteCount, hStream))
GATED(cuMemcpyHtoAAsync_v2_ptsz, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream),
      (dstArray, dstOffset, srcHost, ByteCount, hStream))
GATED(cuMemcpyPeer, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount),
      (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
GATED(cuMemcpyPeer_ptds, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount),
      (dstDevice, dstContext, srcDevice, srcContext, ByteCount))
GATED(cuMemcpyPeerAsync, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream),
      (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))
GATED(cuMemcpyPeerAsync_ptsz, (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream),
      (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream))

/* Stream memory operations write and read device memory from a stream, as
 * a memset does. */
GATED(cuStreamWaitValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue32_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue32_v2, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue32_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue64, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue64_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWaitValue64_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue32, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue32_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue32_v2, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue32_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue64, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue64_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamWriteValue64_v2_ptsz, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
      (stream, addr, value, flags))
GATED(cuStreamBatchMemOp, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags),
      (stream, count, paramArray, flags))
GATED(cuStreamBatchMemOp_ptsz, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags),
      (stream, count, paramArray, flags))
GATED(cuStreamBatchMemOp_v2, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags),
      (stream, count, paramArray, flags))
GATED(cuStreamBatchMemOp_v2_ptsz, (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int flags),
      (stream, count, paramArray, flags))
