/* test_copy.c - copies and memsets: data intact both ways, on streams, 2D
 * and 3D with pitches, between contexts, and ranges leaving their
 * allocation refused.
 */
#include "simtest.h"

#include <stdlib.h>
#include <string.h>

TestSuite(copy, .init = simtest_clean_env, .fini = simtest_remove_state);

static unsigned char *pattern(size_t n, unsigned seed)
{
	unsigned char *p = malloc(n);

	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
	return p;
}

Test(copy, round_trip_htod_dtod_dtoh)
{
	const size_t n = 3 * MIB + 123;
	unsigned char *src = pattern(n, 1), *dst = calloc(1, n);
	CUdeviceptr a, b;

	simtest_init();
	CU_OK(cuMemAlloc(&a, n));
	CU_OK(cuMemAlloc(&b, n));
	CU_OK(cuMemcpyHtoD(a, src, n));
	CU_OK(cuMemcpyDtoD(b, a, n));
	CU_OK(cuMemsetD8(a, 0, n));
	CU_OK(cuMemcpyDtoH(dst, b, n));
	cr_assert_eq(memcmp(src, dst, n), 0);
	CU_OK(cuMemcpyDtoH(dst, a, n));
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(dst[i], 0);
	free(src);
	free(dst);
}

/* cuMemcpy with unified addressing: host and device pointers alike. */
Test(copy, unified_memcpy)
{
	const size_t n = 65536;
	unsigned char *src = pattern(n, 2), *dst = calloc(1, n);
	CUdeviceptr d;

	simtest_init();
	CU_OK(cuMemAlloc(&d, n));
	CU_OK(cuMemcpy(d, (CUdeviceptr)(uintptr_t)src, n));
	CU_OK(cuMemcpy((CUdeviceptr)(uintptr_t)dst, d, n));
	cr_assert_eq(memcmp(src, dst, n), 0);
	free(src);
	free(dst);
}

Test(copy, partial_ranges_at_offsets)
{
	unsigned char *src = pattern(4096, 3), dst[100];
	CUdeviceptr d;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 4096));
	CU_OK(cuMemcpyHtoD(d, src, 4096));
	CU_OK(cuMemcpyDtoH(dst, d + 3996, 100));
	cr_assert_eq(memcmp(dst, src + 3996, 100), 0);
	CU_OK(cuMemcpyHtoD(d + 1, src, 100));
	CU_OK(cuMemcpyDtoH(dst, d + 1, 100));
	cr_assert_eq(memcmp(dst, src, 100), 0);
	free(src);
}

Test(copy, async_on_streams)
{
	const size_t n = MIB;
	unsigned char *src = pattern(n, 4), *dst;
	CUdeviceptr a, b;
	CUstream s1, s2;

	simtest_init();
	CU_OK(cuMemAllocHost((void **)&dst, n));
	memset(dst, 0, n);
	CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamCreate(&s2, 0));
	CU_OK(cuMemAlloc(&a, n));
	CU_OK(cuMemAlloc(&b, n));
	CU_OK(cuMemcpyHtoDAsync(a, src, n, s1));
	CU_OK(cuMemcpyDtoDAsync(b, a, n, s1));
	CU_OK(cuMemcpyDtoHAsync(dst, b, n, s1));
	CU_OK(cuStreamSynchronize(s1));
	cr_assert_eq(memcmp(src, dst, n), 0);
	CU_OK(cuMemsetD32Async(a, 0x01020304, n / 4, s2));
	CU_OK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, a, n, s2));
	CU_OK(cuStreamSynchronize(s2));
	for (size_t i = 0; i < n; i += 4)
		cr_assert_eq(*(uint32_t *)(dst + i), 0x01020304);
	/* The NULL stream too. */
	CU_OK(cuMemcpyHtoDAsync(a, src, n, NULL));
	CU_OK(cuMemcpyDtoHAsync(dst, a, n, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(memcmp(src, dst, n), 0);
	free(src);
}

Test(copy, memsets)
{
	const size_t n = 4096;
	unsigned char buf[4096];
	uint16_t *h16 = (uint16_t *)buf;
	uint32_t *h32 = (uint32_t *)buf;
	CUdeviceptr d;

	simtest_init();
	CU_OK(cuMemAlloc(&d, n));
	CU_OK(cuMemsetD8(d, 0xee, n));
	CU_OK(cuMemsetD8(d + 10, 0x11, 5));
	CU_OK(cuMemcpyDtoH(buf, d, n));
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(buf[i], i >= 10 && i < 15 ? 0x11 : 0xee, "i=%zu", i);
	CU_OK(cuMemsetD16(d, 0xbeef, n / 2));
	CU_OK(cuMemcpyDtoH(buf, d, n));
	for (size_t i = 0; i < n / 2; i++)
		cr_assert_eq(h16[i], 0xbeef);
	CU_OK(cuMemsetD32(d + 8, 0xdeadbeef, 4));
	CU_OK(cuMemcpyDtoH(buf, d, n));
	for (size_t i = 0; i < n / 4; i++)
		cr_assert_eq(h32[i], i >= 2 && i < 6 ? 0xdeadbeef : 0xbeefbeef,
			     "i=%zu", i);
	/* Zero elements: nothing to do. */
	CU_OK(cuMemsetD32(d, 0, 0));
}

Test(copy, memset_misaligned)
{
	CUdeviceptr d;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 4096));
	CU_ASSERT(cuMemsetD16(d + 1, 0, 4), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemsetD32(d + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);
}

/* 2D memsets fill width elements of each row and leave the padding. */
Test(copy, memsets_2d)
{
	const size_t pitch = 64, h = 5;
	unsigned char buf[64 * 5];
	CUdeviceptr d;

	simtest_init();
	CU_OK(cuMemAlloc(&d, pitch * h));
	CU_OK(cuMemsetD8(d, 0, pitch * h));
	CU_OK(cuMemsetD2D8(d, pitch, 0x7f, 10, h));
	CU_OK(cuMemcpyDtoH(buf, d, sizeof(buf)));
	for (size_t r = 0; r < h; r++)
		for (size_t c = 0; c < pitch; c++)
			cr_assert_eq(buf[r * pitch + c], c < 10 ? 0x7f : 0,
				     "row %zu col %zu", r, c);
	CU_OK(cuMemsetD2D16(d, pitch, 0x1234, 8, h));
	CU_OK(cuMemsetD2D32(d + 32, pitch, 0xcafef00d, 4, h));
	CU_OK(cuMemcpyDtoH(buf, d, sizeof(buf)));
	for (size_t r = 0; r < h; r++) {
		uint16_t v16;
		uint32_t v32;
		for (size_t c = 0; c < 8; c++) {
			memcpy(&v16, buf + r * pitch + 2 * c, 2);
			cr_assert_eq(v16, 0x1234);
		}
		for (size_t c = 0; c < 4; c++) {
			memcpy(&v32, buf + r * pitch + 32 + 4 * c, 4);
			cr_assert_eq(v32, 0xcafef00d);
		}
		cr_assert_eq(buf[r * pitch + 16], 0, "gap between the two sets");
		cr_assert_eq(buf[r * pitch + 48], 0, "padding after the row");
	}
	/* A pitch narrower than the row is refused. */
	CU_ASSERT(cuMemsetD2D32(d, 8, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);
	/* The last row past the allocation is refused. */
	CU_ASSERT(cuMemsetD2D8(d, pitch, 0, 10, h + 1), CUDA_ERROR_INVALID_VALUE);
}

/* A host image of w x h bytes into a pitched allocation and back, through
 * an offset (x, y) on the device side. */
Test(copy, memcpy_2d_with_pitch)
{
	enum { W = 100, H = 7, X = 4, Y = 2 };
	unsigned char *src = pattern(W * H, 5), out[W * H];
	CUdeviceptr d;
	size_t pitch;
	CUDA_MEMCPY2D c;

	simtest_init();
	CU_OK(cuMemAllocPitch(&d, &pitch, W + X, H + Y, 4));
	CU_OK(cuMemsetD8(d, 0xaa, pitch * (H + Y)));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.srcPitch = W;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d;
	c.dstPitch = pitch;
	c.dstXInBytes = X;
	c.dstY = Y;
	c.WidthInBytes = W;
	c.Height = H;
	CU_OK(cuMemcpy2D(&c));

	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = d;
	c.srcPitch = pitch;
	c.srcXInBytes = X;
	c.srcY = Y;
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = out;
	c.dstPitch = W;
	c.WidthInBytes = W;
	c.Height = H;
	memset(out, 0, sizeof(out));
	CU_OK(cuMemcpy2D(&c));
	cr_assert_eq(memcmp(src, out, sizeof(out)), 0);

	/* Row Y-1 was not written; nor were the X bytes before each row. */
	unsigned char row[512];
	cr_assert_leq(pitch, sizeof(row));
	CU_OK(cuMemcpyDtoH(row, d + (Y - 1) * pitch, pitch));
	for (size_t i = 0; i < pitch; i++)
		cr_assert_eq(row[i], 0xaa);
	CU_OK(cuMemcpyDtoH(row, d + Y * pitch, X));
	for (size_t i = 0; i < X; i++)
		cr_assert_eq(row[i], 0xaa);

	/* Asynchronous, the same copy again. */
	memset(out, 0, sizeof(out));
	CU_OK(cuMemcpy2DAsync(&c, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(memcmp(src, out, sizeof(out)), 0);
	free(src);
}

Test(copy, memcpy_2d_out_of_range)
{
	unsigned char host[64 * 8];
	CUdeviceptr d;
	CUDA_MEMCPY2D c;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 64 * 8));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = host;
	c.srcPitch = 64;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d;
	c.dstPitch = 64;
	c.WidthInBytes = 64;
	c.Height = 8;
	CU_OK(cuMemcpy2D(&c));
	c.Height = 9;
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.Height = 8;
	c.dstY = 1;
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.dstY = 0;
	c.dstXInBytes = 1;
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.dstXInBytes = 0;
	c.srcPitch = 32;   /* narrower than a row */
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);
}

/* Extents whose arithmetic overflows are refused, never wrapped around
 * into a small range that passes the check. */
Test(copy, memcpy_2d_overflowing_extent)
{
	CUdeviceptr a, b;
	CUDA_MEMCPY2D c;

	simtest_init();
	CU_OK(cuMemAlloc(&a, 4096));
	CU_OK(cuMemAlloc(&b, 4096));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = a;
	c.srcPitch = 64;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = b;
	c.dstPitch = 64;
	c.WidthInBytes = 64;
	/* (Height - 1) * 64 + 64 is 2^64: zero, if it wraps. */
	c.Height = ((size_t)1 << 58) + 1;
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.Height = 1;
	c.srcY = (size_t)1 << 58;    /* y * pitch wraps to 0 */
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.srcY = 0;
	c.srcXInBytes = SIZE_MAX - 63;   /* base + x wraps below base */
	CU_ASSERT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
	c.srcXInBytes = 0;
	CU_OK(cuMemcpy2D(&c));
}

/* A box of W x H x D bytes from a host volume to a device volume of other
 * pitches and heights, at an offset, and back: every byte where it
 * belongs, nothing written around it. */
Test(copy, memcpy_3d_boxes)
{
	enum { W = 40, H = 5, D = 3, X = 3, Y = 2, Z = 1, P = 64, R = 9 };
	const size_t dev_bytes = (size_t)P * R * (D + Z);
	unsigned char *src = pattern(W * H * D, 9), out[W * H * D];
	unsigned char *all = malloc(dev_bytes);
	CUdeviceptr d;
	CUDA_MEMCPY3D c;

	simtest_init();
	cr_assert_not_null(all);
	CU_OK(cuMemAlloc(&d, dev_bytes));
	CU_OK(cuMemsetD8(d, 0xaa, dev_bytes));
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.srcPitch = W;
	c.srcHeight = H;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = d;
	c.dstPitch = P;
	c.dstHeight = R;
	c.dstXInBytes = X;
	c.dstY = Y;
	c.dstZ = Z;
	c.WidthInBytes = W;
	c.Height = H;
	c.Depth = D;
	CU_OK(cuMemcpy3D(&c));
	CU_OK(cuMemcpyDtoH(all, d, dev_bytes));
	for (size_t z = 0; z < D + Z; z++)
		for (size_t y = 0; y < R; y++)
			for (size_t x = 0; x < P; x++) {
				unsigned char v = all[(z * R + y) * P + x];
				bool in = z >= Z && y >= Y && y < Y + H &&
					  x >= X && x < X + W;

				cr_assert_eq(v, in ? src[((z - Z) * H + y - Y) *
							 W + x - X] : 0xaa,
					     "byte (%zu, %zu, %zu)", x, y, z);
			}

	/* Back, asynchronously. */
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = d;
	c.srcPitch = P;
	c.srcHeight = R;
	c.srcXInBytes = X;
	c.srcY = Y;
	c.srcZ = Z;
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = out;
	c.dstPitch = W;
	c.dstHeight = H;
	c.WidthInBytes = W;
	c.Height = H;
	c.Depth = D;
	memset(out, 0, sizeof(out));
	CU_OK(cuMemcpy3DAsync(&c, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_assert_eq(memcmp(src, out, sizeof(out)), 0);

	/* One slice too deep, a height under the box's: refused. */
	c.Depth = D + 1;
	CU_ASSERT(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
	c.Depth = D;
	c.srcHeight = H - 1;
	CU_ASSERT(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
	c.srcHeight = R;
	c.srcLOD = 1;
	CU_ASSERT(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpy3D(NULL), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(d));
	free(all);
	free(src);
}

/* A peer copy between two contexts' memory, synchronous and on a stream. */
Test(copy, peer_between_contexts)
{
	const size_t n = MIB + 17;
	unsigned char *src = pattern(n, 11), *dst = calloc(1, n);
	CUcontext a, b;
	CUdevice dev;
	CUdeviceptr pa, pb;

	a = simtest_init();
	CU_OK(cuDeviceGet(&dev, 0));
	CU_OK(cuMemAlloc(&pa, n));
	CU_OK(cuMemcpyHtoD(pa, src, n));
	CU_OK(cuCtxCreate(&b, NULL, 0, dev));
	CU_OK(cuMemAlloc(&pb, n));
	CU_OK(cuMemcpyPeer(pb, b, pa, a, n));
	CU_OK(cuMemcpyDtoH(dst, pb, n));
	cr_assert_eq(memcmp(src, dst, n), 0);
	CU_OK(cuMemsetD8(pa, 0, n));
	CU_OK(cuMemcpyPeerAsync(pa, a, pb, b, n, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	memset(dst, 0, n);
	CU_OK(cuMemcpyDtoH(dst, pa, n));
	cr_assert_eq(memcmp(src, dst, n), 0);
	CU_ASSERT(cuMemcpyPeer(pb, NULL, pa, a, n), CUDA_ERROR_INVALID_CONTEXT);
	CU_ASSERT(cuMemcpyPeer(pb, b, pa, a, n + 1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMemFree(pb));
	CU_OK(cuCtxDestroy(b));
	/* A destroyed context is no context. */
	CU_ASSERT(cuMemcpyPeer(pa, a, pa + 1, b, 1), CUDA_ERROR_INVALID_CONTEXT);
	CU_OK(cuMemFree(pa));
	free(src);
	free(dst);
}

Test(copy, out_of_range)
{
	unsigned char buf[8192];
	CUdeviceptr d, e;
	int on_stack;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 4096));
	CU_OK(cuMemAlloc(&e, 4096));
	CU_ASSERT(cuMemcpyHtoD(d, buf, 4097), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyHtoD(d + 4000, buf, 97), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoH(buf, d + 1, 4096), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoH(buf, d + 4096, 1), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoD(e, d, 8192), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoD(e + 1, d, 4096), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)&on_stack, buf, 4),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoH(buf, 0, 4), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyHtoD(d, NULL, 4), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyHtoDAsync(d, buf, 4097, NULL), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyDtoHAsync(buf, d + 4095, 2, NULL),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpy(d + 4095, (CUdeviceptr)(uintptr_t)buf, 2),
		  CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemsetD8(d, 0, 4097), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemsetD32(d + 4092, 0, 2), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemsetD8((CUdeviceptr)(uintptr_t)&on_stack, 0, 1),
		  CUDA_ERROR_INVALID_VALUE);
	/* A freed allocation is unknown. */
	CU_OK(cuMemFree(e));
	CU_ASSERT(cuMemcpyHtoD(e, buf, 1), CUDA_ERROR_INVALID_VALUE);
	/* Zero bytes is nothing to check. */
	CU_OK(cuMemcpyHtoD(d, buf, 0));
}

Test(copy, stream_handle_checked)
{
	unsigned char buf[16];
	CUdeviceptr d;
	CUstream s;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 16));
	CU_OK(cuStreamCreate(&s, 0));
	CU_OK(cuStreamDestroy(s));
	CU_ASSERT(cuMemcpyHtoDAsync(d, buf, 16, s), CUDA_ERROR_INVALID_HANDLE);
}
