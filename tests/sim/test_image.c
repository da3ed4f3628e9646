/* test_image.c - sim/image.c: cubins, fatbins and PTX from nvcc 13.0.
 *
 * Inputs are under VSIM_TEST_DATA (tests/sim/data, see its README).
 * The expected layouts come from the kernel signatures in kernels.cu,
 * attrs.cu and reqntid.ptx.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/image.h"

#ifndef VSIM_TEST_DATA
#error "VSIM_TEST_DATA must name the folder of the test inputs"
#endif

struct blob {
	uint8_t *data;
	size_t size;
};

/* Reads a data file into an exact-size buffer plus a NUL (for PTX). */
static struct blob load(const char *name)
{
	char path[4096];
	struct blob b = { 0 };
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/%s", VSIM_TEST_DATA, name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_gt(n, 0);
	rewind(f);
	b.data = malloc((size_t)n + 1);
	cr_assert_not_null(b.data);
	cr_assert_eq(fread(b.data, 1, (size_t)n, f), (size_t)n);
	b.data[n] = 0;
	b.size = (size_t)n;
	fclose(f);
	return b;
}

static void parse_ok(const void *data, size_t size, int arch,
		     struct vsim_image *img)
{
	char err[256];
	CUresult rc = vsim_image_parse(data, size, arch, img, err, sizeof(err));

	cr_assert_eq(rc, CUDA_SUCCESS, "parse failed (%d): %s", rc, err);
	cr_assert_str_empty(err);
}

static const struct vsim_kernel_desc *kernel(const struct vsim_image *img,
					     const char *name)
{
	int i = vsim_image_find(img, name);

	cr_assert_geq(i, 0, "no kernel %s", name);
	return &img->kernels[i];
}

/* Asserts the parameters of kernel name: n (offset, size) pairs. */
static void expect_params(const struct vsim_image *img, const char *name,
			  uint32_t bytes, uint32_t n, const uint32_t *layout)
{
	const struct vsim_kernel_desc *k = kernel(img, name);

	cr_assert_eq(k->nparams, n, "%s: %u params", name, k->nparams);
	cr_assert_eq(k->param_bytes, bytes, "%s: %u bytes", name,
		     k->param_bytes);
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(k->params[i].offset, layout[2 * i],
			     "%s param %u offset %u", name, i,
			     k->params[i].offset);
		cr_assert_eq(k->params[i].size, layout[2 * i + 1],
			     "%s param %u size %u", name, i,
			     k->params[i].size);
	}
}

/* The layouts of kernels.cu, whatever the form of the image. */
static void expect_kernels_cu(const struct vsim_image *img)
{
	static const uint32_t k[] = { 0, 4, 8, 8, 16, 1, 32, 16, 48, 8 };
	static const uint32_t ws[] = { 0, 24, 24, 2, 26, 40, 72, 8 };
	static const uint32_t mg[] = { 0, 8, 8, 8 };

	cr_assert_eq(img->nkernels, 4);
	expect_params(img, "k", 56, 5, k);
	expect_params(img, "withstruct", 80, 4, ws);
	expect_params(img, "_Z7mangledPfy", 16, 2, mg);
	expect_params(img, "noparams", 0, 0, NULL);
	cr_assert_eq(kernel(img, "withstruct")->max_threads, 256);
	cr_assert_eq(kernel(img, "k")->max_threads, 1024);
	cr_assert_eq(kernel(img, "k")->max_dynamic_shared, 48 * 1024);
}

Test(image, cubin_kernels_and_names)
{
	struct blob b = load("kernels_sm80.cubin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 80, &img);
	cr_assert_eq(img.kind, VSIM_IMAGE_CUBIN);
	cr_assert_eq(img.arch, 80);
	cr_assert_eq(img.ptx_version, 0);
	cr_assert_eq(img.nkernels, 4);
	cr_assert_geq(vsim_image_find(&img, "_Z7mangledPfy"), 0);
	cr_assert_eq(vsim_image_find(&img, "mangled"), -1);
	cr_assert_eq(vsim_image_find(&img, "_Z6helperi"), -1,
		     "a __device__ function is not a kernel");
	vsim_image_free(&img);
	free(b.data);
}

Test(image, cubin_param_layout)
{
	struct blob b = load("kernels_sm80.cubin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 90, &img);
	expect_kernels_cu(&img);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, cubin_resources)
{
	struct blob b = load("kernels_sm80.cubin");
	struct vsim_image img;
	const struct vsim_kernel_desc *k;

	parse_ok(b.data, b.size, 80, &img);
	k = kernel(&img, "withstruct");
	cr_assert_eq(k->num_regs, 13);
	cr_assert_eq(k->shared_bytes, 256);
	cr_assert_eq(k->local_bytes, 0);
	cr_assert_eq(k->const_bytes, 0);
	cr_assert_eq(kernel(&img, "k")->num_regs, 8);
	cr_assert_eq(kernel(&img, "noparams")->num_regs, 4);
	cr_assert_eq(kernel(&img, "noparams")->shared_bytes, 0);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, cubin_large_params_and_attributes)
{
	static const uint32_t large[] = { 0, 1, 4, 5000, 5008, 8 };
	struct blob b = load("attrs_sm90.cubin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 90, &img);
	cr_assert_eq(img.arch, 90);
	cr_assert_eq(img.nkernels, 4);
	expect_params(&img, "large", 5016, 3, large);
	cr_assert_eq(kernel(&img, "bounded")->max_threads, 128);
	cr_assert_eq(kernel(&img, "bounded")->const_bytes, 400);
	cr_assert_eq(kernel(&img, "framed")->local_bytes, 1024);
	cr_assert_eq(kernel(&img, "framed")->num_regs, 32);
	/* sm_90's .nv.shared section holds 1 KiB reserved on top */
	cr_assert_eq(kernel(&img, "shared400")->shared_bytes, 400 + 1024);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, cubin_reqntid_and_pointee_alignment)
{
	static const uint32_t rq[] = { 0, 1, 8, 8, 16, 2 };
	struct blob b = load("reqntid_sm80.cubin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 80, &img);
	expect_params(&img, "rq", 18, 3, rq);
	cr_assert_eq(kernel(&img, "rq")->max_threads, 128);
	cr_assert_eq(kernel(&img, "rq")->local_bytes, 24);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, cubin_newer_than_device)
{
	struct blob b = load("kernels_sm80.cubin");
	struct vsim_image img;
	char err[256];

	cr_assert_eq(vsim_image_parse(b.data, b.size, 75, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_NO_BINARY_FOR_GPU);
	cr_assert_str_not_empty(err);
	cr_assert_eq(img.nkernels, 0);
	cr_assert_null(img.kernels);
	free(b.data);
}

Test(image, ptx_param_layout)
{
	struct blob b = load("kernels_sm80.ptx");
	struct vsim_image img;

	parse_ok(b.data, b.size, 80, &img);
	cr_assert_eq(img.kind, VSIM_IMAGE_PTX);
	cr_assert_eq(img.arch, 80);
	cr_assert_eq(img.ptx_version, 90);
	expect_kernels_cu(&img);
	cr_assert_eq(kernel(&img, "withstruct")->shared_bytes, 256);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, ptx_pointer_qualifiers_reqntid_and_local)
{
	static const uint32_t rq[] = { 0, 1, 8, 8, 16, 2 };
	struct blob b = load("reqntid.ptx");
	struct vsim_image img;

	parse_ok(b.data, b.size, 80, &img);
	expect_params(&img, "rq", 18, 3, rq);
	cr_assert_eq(kernel(&img, "rq")->max_threads, 128);
	cr_assert_eq(kernel(&img, "rq")->local_bytes, 24);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, ptx_handwritten_forms)
{
	static const char ptx[] =
		"// leading comment\n/* block */ .version 8.5\n"
		".target sm_90a, debug\n.address_size 64\n"
		".func (.param .b32 r) helper(.param .b32 x) { ret; }\n"
		".entry bare\n{\n\tret;\n}\n"
		".visible .entry vec(.param .v2 .f32 a, .param .b8 b[3],\n"
		"\t.param .align 16 .b8 c[2][4], .param .f64 d)\n"
		".maxntid 32, 4\n{\n\t.shared .align 8 .b8 s1[10];\n"
		"\t.shared .b32 s2;\n\tld.shared.u32 %r1, [s2];\n}\n";
	static const uint32_t vec[] = { 0, 8, 8, 3, 16, 8, 24, 8 };
	struct vsim_image img;

	parse_ok(ptx, 0, 90, &img);
	cr_assert_eq(img.ptx_version, 85);
	cr_assert_eq(img.arch, 90);
	cr_assert_eq(img.nkernels, 2, "helper is a .func, not a kernel");
	expect_params(&img, "bare", 0, 0, NULL);
	expect_params(&img, "vec", 32, 4, vec);
	cr_assert_eq(kernel(&img, "vec")->max_threads, 128);
	cr_assert_eq(kernel(&img, "vec")->shared_bytes, 16);
	vsim_image_free(&img);
}

/* Parses text as PTX and expects INVALID_IMAGE with a message. */
static void expect_invalid_ptx(const char *text)
{
	struct vsim_image img;
	char err[256] = "unset";
	CUresult rc = vsim_image_parse(text, strlen(text), 90, &img, err,
				       sizeof(err));

	cr_assert_eq(rc, CUDA_ERROR_INVALID_IMAGE, "accepted: %s", text);
	cr_assert_str_not_empty(err);
	cr_assert_eq(img.nkernels, 0);
}

Test(image, ptx_rejects_malformed)
{
	expect_invalid_ptx(".target sm_80\n.entry k() { }");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .u32 a { }");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .q32 a) { }");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .u32 a)(.param .u32 b) {}");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .u32) { }");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .align 3 .b8 a[4]) {}");
	expect_invalid_ptx(".version 9.0\n.entry k(.param .b8 a[40000]) {}");
	expect_invalid_ptx(".version 9.0\n.entry k() { {");
	expect_invalid_ptx(".version 9.x\n");
	expect_invalid_ptx(".version 9.0\n.entry (");
	expect_invalid_ptx("hello, world");
}

Test(image, fatbin_picks_highest_cubin_not_above_device)
{
	static const int dev[] = { 90, 89, 86, 80, 75, 120 };
	static const int want[] = { 90, 86, 86, 80, 75, 90 };
	struct blob b = load("kernels.fatbin");

	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		struct vsim_image img;

		parse_ok(b.data, b.size, dev[i], &img);
		cr_assert_eq(img.kind, VSIM_IMAGE_FATBIN);
		cr_assert_eq(img.arch, want[i], "device sm_%d got sm_%d",
			     dev[i], img.arch);
		cr_assert_eq(img.ptx_version, 0, "a cubin was used");
		expect_kernels_cu(&img);
		vsim_image_free(&img);
	}
	free(b.data);
}

Test(image, fatbin_falls_back_to_ptx)
{
	struct blob b = load("kernels.fatbin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 70, &img);
	cr_assert_eq(img.kind, VSIM_IMAGE_FATBIN);
	cr_assert_eq(img.ptx_version, 90, "the PTX was used");
	cr_assert_eq(img.arch, 90);
	expect_kernels_cu(&img);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, fatbin_without_fitting_code)
{
	struct blob b = load("kernels_noptx.fatbin");
	struct vsim_image img;
	char err[256];

	cr_assert_eq(vsim_image_parse(b.data, b.size, 75, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_NO_BINARY_FOR_GPU);
	cr_assert_str_not_empty(err);
	cr_assert_eq(img.nkernels, 0);
	free(b.data);
}

Test(image, fatbin_arch_specific_cubin_only_on_its_sm)
{
	struct blob b = load("kernels_noptx.fatbin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 90, &img);
	cr_assert_eq(img.arch, 90, "sm_90a runs on sm_90");
	vsim_image_free(&img);
	parse_ok(b.data, b.size, 100, &img);
	cr_assert_eq(img.arch, 80, "sm_90a does not run on sm_100");
	expect_kernels_cu(&img);
	vsim_image_free(&img);
	free(b.data);
}

Test(image, fatbin_compressed_is_not_supported)
{
	struct blob b = load("kernels_compressed.fatbin");
	struct vsim_image img;
	char err[256];

	cr_assert_eq(vsim_image_parse(b.data, b.size, 90, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_NOT_SUPPORTED);
	cr_assert_not_null(strstr(err, "sm_80"), "%s", err);
	cr_assert_not_null(strstr(err, "--no-compress"), "%s", err);
	cr_assert_eq(img.nkernels, 0);
	free(b.data);
}

Test(image, size_zero_is_derived)
{
	static const char *const files[] = {
		"kernels_sm80.cubin", "kernels_sm80.ptx", "kernels.fatbin",
	};

	for (size_t i = 0; i < 3; i++) {
		struct blob b = load(files[i]);
		struct vsim_image img;

		parse_ok(b.data, 0, 90, &img);
		expect_kernels_cu(&img);
		vsim_image_free(&img);
		free(b.data);
	}
}

Test(image, size_larger_than_image)
{
	struct blob b = load("kernels.fatbin");
	uint8_t *big = calloc(1, b.size + 100);
	struct vsim_image img;

	memcpy(big, b.data, b.size);
	parse_ok(big, b.size + 100, 90, &img);
	expect_kernels_cu(&img);
	vsim_image_free(&img);
	free(big);
	free(b.data);
}

struct wrapper {
	uint32_t magic;
	uint32_t version;
	const void *data;
	void *unused;
};

Test(image, fatbin_wrapper_is_followed)
{
	struct blob b = load("kernels.fatbin");
	struct wrapper w = { 0x466243b1u, 1, NULL, NULL };
	struct vsim_image img;
	char err[256];

	w.data = b.data;
	parse_ok(&w, 0, 80, &img);
	cr_assert_eq(img.kind, VSIM_IMAGE_FATBIN);
	cr_assert_eq(img.arch, 80);
	expect_kernels_cu(&img);
	vsim_image_free(&img);
	cr_assert_eq(vsim_image_parse(&w, sizeof(w), 80, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_INVALID_IMAGE, "a sized wrapper is refused");
	w.data = "not a fatbin";
	cr_assert_eq(vsim_image_parse(&w, 0, 80, &img, err, sizeof(err)),
		     CUDA_ERROR_INVALID_IMAGE);
	free(b.data);
}

Test(image, find_and_free)
{
	struct blob b = load("kernels_sm80.cubin");
	struct vsim_image img;

	parse_ok(b.data, b.size, 80, &img);
	cr_assert_str_eq(img.kernels[vsim_image_find(&img, "k")].name, "k");
	cr_assert_eq(vsim_image_find(&img, "nope"), -1);
	cr_assert_eq(vsim_image_find(&img, NULL), -1);
	cr_assert_eq(vsim_image_find(NULL, "k"), -1);
	vsim_image_free(&img);
	cr_assert_eq(img.nkernels, 0);
	cr_assert_null(img.kernels);
	vsim_image_free(&img);
	vsim_image_free(NULL);
	free(b.data);
}

Test(image, rejects_bad_arguments_and_garbage)
{
	static const uint8_t junk[] = { 0x7f, 'E', 'L', 'F', 2, 1, 1, 0 };
	struct vsim_image img;
	char err[64];

	cr_assert_eq(vsim_image_parse(NULL, 10, 80, &img, err, sizeof(err)),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(vsim_image_parse(junk, 8, 80, NULL, err, sizeof(err)),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(vsim_image_parse(junk, 8, 80, &img, NULL, 0),
		     CUDA_ERROR_INVALID_IMAGE);
	for (size_t n = 1; n <= sizeof(junk); n++)
		cr_assert_eq(vsim_image_parse(junk, n, 80, &img, err,
					      sizeof(err)),
			     CUDA_ERROR_INVALID_IMAGE);
	cr_assert_str_not_empty(err);
	cr_assert_eq(vsim_image_parse("", 0, 80, &img, err, sizeof(err)),
		     CUDA_ERROR_INVALID_IMAGE);
}

/* Overwrites the first KPARAM_INFO record's ordinal in a cubin copy. */
Test(image, cubin_bad_ordinal_is_invalid)
{
	static const uint8_t kparam[] = { 0x04, 0x17, 0x0c, 0x00 };
	struct blob b = load("kernels_sm80.cubin");
	uint8_t *rec = memmem(b.data, b.size, kparam, sizeof(kparam));
	struct vsim_image img;
	char err[256];

	cr_assert_not_null(rec);
	rec[8] = 99;
	cr_assert_eq(vsim_image_parse(b.data, b.size, 80, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_INVALID_IMAGE);
	cr_assert_not_null(strstr(err, "ordinal"), "%s", err);
	rec[8] = 0;
	rec[2] = 0xff;		/* blob longer than the section */
	cr_assert_eq(vsim_image_parse(b.data, b.size, 80, &img, err,
				      sizeof(err)),
		     CUDA_ERROR_INVALID_IMAGE);
	free(b.data);
}

/* --- robustness: no crash, no leak, only the documented results ------- */

static const char *const all_inputs[] = {
	"kernels_sm80.cubin", "kernels_sm80.ptx", "kernels.fatbin",
	"kernels_noptx.fatbin", "kernels_compressed.fatbin",
	"attrs_sm90.cubin", "reqntid_sm80.cubin", "reqntid.ptx",
};

#define NINPUTS (sizeof(all_inputs) / sizeof(all_inputs[0]))

/* Parses a copy of data[0..n) in a buffer of exactly n bytes, so that
 * any read past it is caught by the sanitizers. */
static void parse_any(const uint8_t *data, size_t n, int arch)
{
	uint8_t *copy = malloc(n ? n : 1);
	struct vsim_image img;
	char err[256];
	CUresult rc;

	memcpy(copy, data, n);
	rc = vsim_image_parse(copy, n, arch, &img, err, sizeof(err));
	if (rc == CUDA_SUCCESS) {
		for (uint32_t i = 0; i < img.nkernels; i++)
			cr_assert_not_null(img.kernels[i].name);
		vsim_image_free(&img);
	} else {
		cr_assert(rc == CUDA_ERROR_INVALID_IMAGE ||
			  rc == CUDA_ERROR_NO_BINARY_FOR_GPU ||
			  rc == CUDA_ERROR_NOT_SUPPORTED, "result %d", rc);
		cr_assert_str_not_empty(err);
		cr_assert_eq(img.nkernels, 0);
		cr_assert_null(img.kernels);
	}
	free(copy);
}

Test(image, truncations_never_crash, .timeout = 300)
{
	for (size_t f = 0; f < NINPUTS; f++) {
		struct blob b = load(all_inputs[f]);

		for (size_t n = 1; n < b.size; n++)
			parse_any(b.data, n, 90);
		free(b.data);
	}
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Changes 1 to 8 bytes of buf: random values, bit flips, 0x00, 0xff. */
static void mutate(uint8_t *buf, size_t n, uint64_t *rng)
{
	size_t count = 1 + rng_next(rng) % 8;

	for (size_t i = 0; i < count; i++) {
		size_t at = rng_next(rng) % n;
		uint64_t r = rng_next(rng);

		switch (r % 4) {
		case 0: buf[at] = (uint8_t)(r >> 8); break;
		case 1: buf[at] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
		case 2: buf[at] = 0; break;
		default: buf[at] = 0xff; break;
		}
	}
}

Test(image, byte_flips_never_crash, .timeout = 300)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	for (size_t f = 0; f < NINPUTS; f++) {
		struct blob b = load(all_inputs[f]);
		uint8_t *buf = malloc(b.size);

		for (int i = 0; i < 3000; i++) {
			memcpy(buf, b.data, b.size);
			mutate(buf, b.size, &rng);
			parse_any(buf, b.size, (int)(70 + rng_next(&rng) % 40));
		}
		free(buf);
		free(b.data);
	}
}

Test(image, random_bytes_never_crash)
{
	static const uint32_t magics[] = {
		0x464c457fu, 0xba55ed50u, 0x466243b1u, 0x7265762eu,
	};
	uint64_t rng = 12345;
	uint8_t buf[512];

	for (int i = 0; i < 20000; i++) {
		size_t n = 1 + rng_next(&rng) % sizeof(buf);

		for (size_t j = 0; j < n; j++)
			buf[j] = (uint8_t)rng_next(&rng);
		if (n >= 4)
			memcpy(buf, &magics[i % 4], 4);
		parse_any(buf, n, 90);
	}
}
