/* test_codeobj.c - sim/hip/codeobj.c on hipcc's output and on bad input.
 *
 * The offload bundle is found in hip_job's bytes by its magic (it is the
 * .hip_fatbin section's content).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codeobj.h"
#include "vgpu_kernels.h"

static unsigned char *job_bundle(size_t *size)
{
	static unsigned char buf[16 << 20];
	FILE *f = fopen(VHIP_JOB, "rb");
	size_t n;
	unsigned char *b;

	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	b = memmem(buf, n, "__CLANG_OFFLOAD_BUNDLE__", 24);
	cr_assert_not_null(b);
	*size = n - (size_t)(b - buf);
	return b;
}

Test(codeobj, workload_kernels_match_their_host_forms)
{
	static const struct vhip_arg touch[] = {
		{ 0, 8 }, { 8, 8 }, { 16, 4 }, { 20, 4 }, { 24, 8 } };
	static const char *const names[] = { "vgpu_spin", "vgpu_touch",
					     "vgpu_saxpy" };
	struct vhip_codeobj co;
	const struct vhip_kernel *k;
	char err[160];
	size_t size;
	unsigned char *b = job_bundle(&size);

	cr_assert_eq(vhip_codeobj_parse(b, size, "gfx90a", &co, err,
					sizeof(err)), 0, "%s", err);
	for (int i = 0; i < 3; i++) {
		k = vhip_codeobj_find(&co, names[i]);
		cr_assert_not_null(k, "%s", names[i]);
		cr_assert_eq(k->explicit_bytes,
			     vgpu_kernels_find(names[i])->params_size, "%s",
			     names[i]);
	}
	k = vhip_codeobj_find(&co, "vgpu_touch");
	cr_assert_eq(k->nargs, 5);
	cr_assert_arr_eq(k->args, touch, sizeof(touch));
	vhip_codeobj_free(&co);
}

/* Every prefix of the real metadata, and bytes flipped in it, is refused
 * or read without going past its end (run under ASan to catch that). */
Test(codeobj, truncated_and_corrupt_input)
{
	struct vhip_codeobj co;
	size_t size;
	unsigned char *b = job_bundle(&size), *copy;

	if (size > 32768)
		size = 32768;
	copy = malloc(size);
	cr_assert_not_null(copy);
	for (size_t n = 0; n < size; n += 97) {
		memcpy(copy, b, n);
		if (vhip_codeobj_parse(copy, n, "gfx90a", &co, NULL, 0) == 0)
			vhip_codeobj_free(&co);
	}
	for (size_t i = 0; i < size; i += 13) {
		memcpy(copy, b, size);
		copy[i] ^= 0xff;
		if (vhip_codeobj_parse(copy, size, "gfx90a", &co, NULL, 0) == 0)
			vhip_codeobj_free(&co);
	}
	cr_assert_eq(vhip_metadata_parse("\x81", 1, &co, NULL, 0), -1);
	cr_assert_eq(vhip_metadata_parse("\xdf\xff\xff\xff\xff", 5, &co,
					 NULL, 0), -1);
	free(copy);
}
