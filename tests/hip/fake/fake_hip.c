/* fake_hip.c - a tiny libamdhip64.so.5 for the HIP front end's tests
 * until the simulated runtime exists: one device of 1 GiB over malloc,
 * its used bytes in the process (read by the job as ground truth). Only
 * what tests/hip's job calls.
 */
#include <hip/hip_runtime_api.h>

/* The build hides symbols by default; a runtime exports its API. */
#pragma GCC visibility push(default)

#include <stdlib.h>
#include <string.h>

#define FAKE_TOTAL (1ull << 30)

static size_t used;

struct block {
	size_t size;
	max_align_t data[];
};

static hipError_t take(void **p, size_t size)
{
	struct block *b;

	if (!p)
		return hipErrorInvalidValue;
	if (size > FAKE_TOTAL - used)
		return hipErrorOutOfMemory;
	b = malloc(sizeof(*b) + 1);
	if (!b)
		return hipErrorOutOfMemory;
	b->size = size;
	used += size;
	*p = b->data;
	return hipSuccess;
}

hipError_t hipMalloc(void **p, size_t size)
{
	return take(p, size);
}

hipError_t hipMallocManaged(void **p, size_t size, unsigned int flags)
{
	(void)flags;
	return take(p, size);
}

hipError_t hipMallocPitch(void **p, size_t *pitch, size_t w, size_t h)
{
	*pitch = (w + 511) & ~(size_t)511;
	return take(p, *pitch * h);
}

hipError_t hipFree(void *p)
{
	struct block *b;

	if (!p)
		return hipSuccess;
	b = (struct block *)((char *)p - offsetof(struct block, data));
	used -= b->size;
	free(b);
	return hipSuccess;
}

hipError_t hipMemGetInfo(size_t *free_, size_t *total)
{
	*free_ = FAKE_TOTAL - used;
	*total = FAKE_TOTAL;
	return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t d)
{
	if (d != 0)
		return hipErrorInvalidDevice;
	*bytes = FAKE_TOTAL;
	return hipSuccess;
}

hipError_t hipGetDevice(int *d)
{
	*d = 0;
	return hipSuccess;
}

hipError_t hipGetDeviceCount(int *n)
{
	*n = 1;
	return hipSuccess;
}

hipError_t hipDeviceGetUuid(hipUUID *u, hipDevice_t d)
{
	static const char id[16] = "fake-hip-device";

	if (d != 0)
		return hipErrorInvalidDevice;
	memcpy(u->bytes, id, sizeof(id));
	return hipSuccess;
}

/* The job's ground truth: what the fake device holds. */
size_t fake_hip_used(void)
{
	return used;
}
