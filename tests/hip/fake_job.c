/* fake_job.c - a HIP program for the front end's tests, linked against
 * the fake runtime (tests/hip/fake): runs the commands of its arguments
 * and prints one line each, the HIP error code first.
 *   alloc SIZE | managed SIZE | pitch W H   allocate (kept, in order)
 *   free                                   free the last one kept
 *   memgetinfo                             "rc free total"
 *   totalmem                               "rc bytes"
 *   used                                   "0 bytes" the device holds
 */
#include <hip/hip_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t fake_hip_used(void);

int main(int argc, char **argv)
{
	void *kept[64];
	int n = 0;

	for (int i = 1; i < argc; i++) {
		const char *c = argv[i];
		void *p = NULL;
		size_t a, b, pitch;
		hipError_t r;

		if (!strcmp(c, "alloc") || !strcmp(c, "managed")) {
			a = strtoull(argv[++i], NULL, 0);
			r = !strcmp(c, "alloc") ? hipMalloc(&p, a)
				: hipMallocManaged(&p, a, hipMemAttachGlobal);
			if (r == hipSuccess && n < 64)
				kept[n++] = p;
			printf("%d\n", (int)r);
		} else if (!strcmp(c, "pitch")) {
			a = strtoull(argv[++i], NULL, 0);
			b = strtoull(argv[++i], NULL, 0);
			r = hipMallocPitch(&p, &pitch, a, b);
			if (r == hipSuccess && n < 64)
				kept[n++] = p;
			printf("%d\n", (int)r);
		} else if (!strcmp(c, "free")) {
			printf("%d\n", n ? (int)hipFree(kept[--n]) : -1);
		} else if (!strcmp(c, "memgetinfo")) {
			r = hipMemGetInfo(&a, &b);
			printf("%d %zu %zu\n", (int)r, a, b);
		} else if (!strcmp(c, "totalmem")) {
			r = hipDeviceTotalMem(&a, 0);
			printf("%d %zu\n", (int)r, a);
		} else if (!strcmp(c, "used")) {
			printf("0 %zu\n", fake_hip_used());
		}
	}
	return 0;
}
