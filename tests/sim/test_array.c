/* test_array.c - CUDA arrays and mipmapped arrays: descriptors, the
 * documented shapes, the capacity they take (rows rounded up to 512 bytes,
 * the whole to pages), and their contents through cuMemcpyHtoA/AtoH.
 */
#include "simtest.h"

#include <string.h>

TestSuite(array, .init = simtest_clean_env, .fini = simtest_remove_state);

static size_t used(void)
{
	size_t free, total;

	CU_OK(cuMemGetInfo(&free, &total));
	return total - free;
}

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d,
				     CUarray_format f, unsigned ch,
				     unsigned flags)
{
	return (CUDA_ARRAY3D_DESCRIPTOR){ .Width = w, .Height = h, .Depth = d,
		.Format = f, .NumChannels = ch, .Flags = flags };
}

Test(array, create_2d_and_descriptor)
{
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 100, .Height = 30,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 2 }, got;
	CUDA_ARRAY3D_DESCRIPTOR got3;
	CUarray a;

	simtest_init();
	CU_OK(cuArrayCreate(&a, &d));
	CU_OK(cuArrayGetDescriptor(&got, a));
	cr_assert_eq(got.Width, 100);
	cr_assert_eq(got.Height, 30);
	cr_assert_eq(got.Format, CU_AD_FORMAT_FLOAT);
	cr_assert_eq(got.NumChannels, 2);
	CU_OK(cuArray3DGetDescriptor(&got3, a));
	cr_assert_eq(got3.Depth, 0);
	cr_assert_eq(got3.Flags, 0);
	CU_ASSERT(cuArrayGetDescriptor(NULL, a), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuArrayDestroy(a));
	CU_ASSERT(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuArrayGetDescriptor(&got, a), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuArrayDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
}

/* 100 float2 = 800 bytes a row, pitched to 1024; 30 rows = 30 KiB = 7.5
 * pages, so 8 pages. */
Test(array, capacity_follows_the_size_model)
{
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 100, .Height = 30,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 2 };
	CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(64, 64, 64, CU_AD_FORMAT_UNSIGNED_INT8,
					   4, 0);
	CUarray a, b;
	size_t base;

	simtest_init();
	base = used();
	CU_OK(cuArrayCreate(&a, &d));
	cr_assert_eq(used() - base, 8 * 4096, "used %zu", used() - base);
	/* 64 uchar4 = 256 bytes, pitched to 512; 64 * 64 rows: 2 MiB. */
	CU_OK(cuArray3DCreate(&b, &d3));
	cr_assert_eq(used() - base, 8 * 4096 + 2 * MIB);
	CU_OK(cuArrayDestroy(a));
	CU_OK(cuArrayDestroy(b));
	cr_assert_eq(used(), base);
}

Test(array, out_of_capacity)
{
	/* 8192 x 8192 floats: a 32 KiB row pitch, 256 MiB in all. */
	CUDA_ARRAY_DESCRIPTOR big = { .Width = 8192, .Height = 8192,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	CUDA_ARRAY_DESCRIPTOR half = { .Width = 8192, .Height = 1024,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	CUarray a, b;
	CUdeviceptr p;
	size_t base;

	simtest_init();   /* a 64 MiB device */
	base = used();
	CU_ASSERT(cuArrayCreate(&a, &big), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(used(), base);
	CU_OK(cuArrayCreate(&a, &half));          /* 32 MiB */
	CU_ASSERT(cuMemAlloc(&p, 40 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuArrayCreate(&b, &half));          /* 64 MiB: full */
	CU_ASSERT(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuArrayDestroy(a));
	CU_OK(cuMemAlloc(&p, 16 * MIB));
	CU_OK(cuMemFree(p));
	CU_OK(cuArrayDestroy(b));
	cr_assert_eq(used(), base);
}

Test(array, fault_injection_counts_arrays)
{
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 16, .Height = 16,
		.Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1 };
	CUarray a;

	setenv("VGPU_SIM_FAIL", "alloc:2", 1);
	simtest_init();
	CU_OK(cuArrayCreate(&a, &d));
	CU_ASSERT(cuArrayCreate(&a, &d), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuArrayCreate(&a, &d));
}

Test(array, invalid_descriptors)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	CUDA_ARRAY_DESCRIPTOR d2 = { .Width = 0, .Height = 4,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	CUarray a;

	simtest_init();
	CU_ASSERT(cuArrayCreate(&a, &d2), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuArrayCreate(&a, NULL), CUDA_ERROR_INVALID_VALUE);
	d2.Width = 4;
	CU_ASSERT(cuArrayCreate(NULL, &d2), CUDA_ERROR_INVALID_VALUE);
	d2.NumChannels = 3;
	CU_ASSERT(cuArrayCreate(&a, &d2), CUDA_ERROR_INVALID_VALUE);
	d2.NumChannels = 1;
	d2.Format = (CUarray_format)0x55;
	CU_ASSERT(cuArrayCreate(&a, &d2), CUDA_ERROR_INVALID_VALUE);
	/* A format naming its channels needs that many. */
	d = desc3(8, 8, 0, CU_AD_FORMAT_UNORM_INT8X2, 4, 0);
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d.NumChannels = 2;
	CU_OK(cuArray3DCreate(&a, &d));
	/* Depth without height, unless layered. */
	d = desc3(8, 0, 4, CU_AD_FORMAT_FLOAT, 1, 0);
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d.Flags = CUDA_ARRAY3D_LAYERED;
	CU_OK(cuArray3DCreate(&a, &d));
	d = desc3(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	/* Cubemaps: square, six faces (a multiple of six when layered). */
	d = desc3(8, 8, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);
	CU_OK(cuArray3DCreate(&a, &d));
	d.Height = 4;
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d.Height = 8;
	d.Depth = 12;
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d.Flags |= CUDA_ARRAY3D_LAYERED;
	CU_OK(cuArray3DCreate(&a, &d));
	/* Unknown flags; flags not simulated. */
	d = desc3(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, 0x10000);
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d.Flags = CUDA_ARRAY3D_SPARSE;
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_NOT_SUPPORTED);
}

Test(array, limits_are_the_device_attributes)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	int w3, w1;
	CUarray a;

	simtest_init();
	CU_OK(cuDeviceGetAttribute(&w3, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 0));
	CU_OK(cuDeviceGetAttribute(&w1, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 0));
	cr_assert_eq(w3, 16384);
	cr_assert_eq(w1, 131072);
	d = desc3((size_t)w3 + 1, 1, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0);
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
	d = desc3((size_t)w1, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0);
	CU_OK(cuArray3DCreate(&a, &d));
	CU_OK(cuArrayDestroy(a));
	d.Width++;
	CU_ASSERT(cuArray3DCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
}

Test(array, contents_round_trip)
{
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 37, .Height = 11,
		.Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 1 };
	unsigned short in[37 * 11], out[37 * 11];
	CUarray a;

	simtest_init();
	for (unsigned i = 0; i < 37 * 11; i++)
		in[i] = (unsigned short)(i * 7919u);
	CU_OK(cuArrayCreate(&a, &d));
	CU_OK(cuMemcpyHtoA(a, 0, in, sizeof(in)));
	memset(out, 0, sizeof(out));
	CU_OK(cuMemcpyAtoH(out, a, 0, sizeof(out)));
	cr_assert_arr_eq(out, in, sizeof(in));
	CU_OK(cuMemcpyAtoH(out, a, 100, 10));
	cr_assert_arr_eq(out, (char *)in + 100, 10);
	CU_ASSERT(cuMemcpyHtoA(a, 1, in, sizeof(in)), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuMemcpyAtoH(out, a, sizeof(in) + 1, 0),
		  CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuArrayDestroy(a));
}

/* 64x64 uchar1: levels 64, 32, 16, 8, 4, 2, 1 wide. Each row pitches to
 * 512 bytes: 64*512 = 32 KiB, 16 KiB, 8 KiB, then 4, 2, 1, 1 pages' worth
 * rounded up to a page each: 8 + 4 + 2 + 1 + 1 + 1 + 1 = 18 pages. */
Test(array, mipmapped_levels_and_capacity)
{
	CUDA_ARRAY3D_DESCRIPTOR d = desc3(64, 64, 0, CU_AD_FORMAT_UNSIGNED_INT8,
					  1, 0), ld;
	CUmipmappedArray m;
	CUarray level;
	size_t base;

	simtest_init();
	base = used();
	CU_OK(cuMipmappedArrayCreate(&m, &d, 100));   /* clamped to 7 */
	cr_assert_eq(used() - base, 18 * 4096, "used %zu", used() - base);
	for (unsigned l = 0; l < 7; l++) {
		CU_OK(cuMipmappedArrayGetLevel(&level, m, l));
		CU_OK(cuArray3DGetDescriptor(&ld, level));
		cr_assert_eq(ld.Width, 64u >> l);
		cr_assert_eq(ld.Height, 64u >> l);
	}
	CU_ASSERT(cuMipmappedArrayGetLevel(&level, m, 7), CUDA_ERROR_INVALID_VALUE);
	CU_ASSERT(cuArrayDestroy(level), CUDA_ERROR_INVALID_HANDLE);
	CU_OK(cuMipmappedArrayDestroy(m));
	cr_assert_eq(used(), base);
	CU_ASSERT(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE);
	CU_ASSERT(cuArray3DGetDescriptor(&ld, level), CUDA_ERROR_INVALID_HANDLE);
}

Test(array, mipmapped_layers_do_not_shrink)
{
	CUDA_ARRAY3D_DESCRIPTOR d = desc3(16, 8, 5, CU_AD_FORMAT_FLOAT, 1,
					  CUDA_ARRAY3D_LAYERED), ld;
	CUmipmappedArray m;
	CUarray level;

	simtest_init();
	CU_OK(cuMipmappedArrayCreate(&m, &d, 0));    /* clamped to 1 */
	CU_ASSERT(cuMipmappedArrayGetLevel(&level, m, 1), CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuMipmappedArrayDestroy(m));
	CU_OK(cuMipmappedArrayCreate(&m, &d, 5));    /* clamped to 5 */
	CU_OK(cuMipmappedArrayGetLevel(&level, m, 4));
	CU_OK(cuArray3DGetDescriptor(&ld, level));
	cr_assert_eq(ld.Width, 1);
	cr_assert_eq(ld.Height, 1);
	cr_assert_eq(ld.Depth, 5);
	CU_OK(cuMipmappedArrayDestroy(m));
	d.Width = 0;
	CU_ASSERT(cuMipmappedArrayCreate(&m, &d, 1), CUDA_ERROR_INVALID_VALUE);
}

Test(array, needs_a_context)
{
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 4, .Height = 4,
		.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	CUarray a;

	CU_ASSERT(cuArrayCreate(&a, &d), CUDA_ERROR_NOT_INITIALIZED);
	simtest_init();
	CU_OK(cuCtxSetCurrent(NULL));
	CU_ASSERT(cuArrayCreate(&a, &d), CUDA_ERROR_INVALID_CONTEXT);
}
