/* copies.c - the copy and memset hooks: passed through untouched, but in a
 * process with movable ranges (host overcommit) or a control thread
 * (VGPU_CONTROL) they take the launch gate (control.c), so none runs while
 * a thread moves the memory they may touch to or from the host: a copy
 * during the swap of a range's backing would fail or be lost. While the
 * process is suspended they wait, as launches do. Otherwise: one flag test
 * and the driver's call.
 *
 * The ABIs hooked are those of sim/entries.def (the synchronous and
 * asynchronous copies between host and device and within the device,
 * 2D copies, every memset, and their per-thread stream forms). 3D, peer,
 * array and batched copies pass the gate by (docs/control.md).
 */
#include "devices.h"

#define GATED(sym, params, args)					\
	CUresult sym params						\
	{								\
		CUresult r;						\
									\
		if (!vgpu__real.sym)					\
			return CUDA_ERROR_NOT_INITIALIZED;		\
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
