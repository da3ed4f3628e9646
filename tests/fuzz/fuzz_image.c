/* fuzz_image.c - libFuzzer target: the simulator's module loader, the
 * cubin/fatbin/PTX parser behind cuModuleLoadData (sim/image.h).
 *
 * The input is the image, parsed with its size for an sm_90 device and,
 * when it is a fatbin, for sm_75 and sm_80 as well (other entries chosen).
 * Text that starts like no binary format is also parsed NUL-terminated
 * with size 0, as cuModuleLoadData receives PTX. A parsed image must
 * describe parameters that fit its parameter buffer: the launch path
 * copies each one there (sim/launch.c). Corpus: corpus/fuzz_image.
 */
#include "image.h"

#include <stdlib.h>
#include <string.h>

static void fuzz_check(const struct vsim_image *img)
{
	for (uint32_t i = 0; i < img->nkernels; i++) {
		const struct vsim_kernel_desc *k = &img->kernels[i];

		if (!k->name || vsim_image_find(img, k->name) < 0)
			abort();
		for (uint32_t p = 0; p < k->nparams; p++)
			if ((uint64_t)k->params[p].offset + k->params[p].size >
			    k->param_bytes)
				abort();
	}
	vsim_image_find(img, "");
}

static void fuzz_parse(const void *data, size_t size, int arch)
{
	struct vsim_image img;
	char err[256];

	if (vsim_image_parse(data, size, arch, &img, err, sizeof(err)) ==
	    CUDA_SUCCESS) {
		fuzz_check(&img);
		if (img.kind == VSIM_IMAGE_FATBIN && arch == 90) {
			vsim_image_free(&img);
			fuzz_parse(data, size, 75);
			fuzz_parse(data, size, 80);
			return;
		}
	}
	vsim_image_free(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;

	if (size == 0)
		return 0;
	fuzz_parse(data, size, 90);
	/* The first bytes of "\x7fELF" and of the two fatbin magics. */
	if (data[0] == 0x7f || data[0] == 0x50 || data[0] == 0xb1)
		return 0;
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	fuzz_parse(text, 0, 90);
	free(text);
	return 0;
}
