/* bench_overcommit.c - vgpu_touch over a working set larger than the slice.
 *
 *   bench_overcommit [-w BYTES] [-c CHUNK] [-r ROUNDS] [-n REPS]
 *                    [-p streaming|random] [-s STAGING] [-h]
 *
 * Allocates a working set of BYTES (default 256M) in buffers of CHUNK
 * (default 16M) with cuMemAlloc, so that under the shim with
 * VGPU_OVERCOMMIT the buffers past the slice spill to host memory. Each
 * buffer is written once (untimed); then REPS times (default 3) ROUNDS
 * rounds (default 4) of vgpu_touch over the buffers are timed, from the
 * first launch to the end of cuCtxSynchronize:
 *
 *   streaming  every buffer in allocation order, each round;
 *   random     as many touches per round, buffers drawn from a fixed
 *              pseudo-random sequence (the same in every run).
 *
 * vgpu_touch reads and writes the whole buffer, so "random" is random at
 * the granularity of a buffer, not of a word. Every touch checks the
 * pattern the previous touch of that buffer wrote (the seeds are chained)
 * and writes a new one; the mismatches are counted on the host.
 *
 * STAGING (default 0): a buffer allocated before the working set and freed
 * after it, as a job's set-up might use: in host mode its free lets the
 * shim promote spilled buffers back to the device.
 *
 * -h: the working set shrinks before the timed rounds: after the first
 * pattern, every other buffer (the 1st, 3rd, ...) is freed and the rounds
 * go over the rest.
 *
 * Prints "key value" lines: ms (median of the reps), ms_all, allocated,
 * spilled (buffers backed by host memory once the working set is
 * allocated: managed memory, or a host-located VMM handle), host (the same,
 * counted again after the staging free or the halving, as the timed rounds
 * see them, out of buffers, those left),
 * mismatches. Exits 3 if an allocation fails ("oom" line), 1 on any other
 * error or on mismatches.
 */
#include "vgpu_kernels.h"

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 15

struct bench {
	size_t bytes, chunk, staging;
	unsigned rounds, reps;
	int random, halve;
	unsigned nbuf;
	CUdeviceptr *buf;
	uint32_t *seed;		/* the seed each buffer last got */
	unsigned *order;	/* rounds * nbuf buffer indices */
	uint32_t next_seed;
	CUfunction touch;
	unsigned long long *mismatches;	/* page-locked host word */
};

#define CHECK(call)                                                        \
	do {                                                               \
		CUresult r_ = (call);                                      \
		if (r_ != CUDA_SUCCESS) {                                  \
			fprintf(stderr, "bench_overcommit: %s: %d\n",      \
				#call, (int)r_);                           \
			exit(1);                                           \
		}                                                          \
	} while (0)

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G': v <<= 10; /* fall through */
	case 'M': v <<= 10; /* fall through */
	case 'K': v <<= 10; break;
	case '\0': break;
	default:
		fprintf(stderr, "bench_overcommit: bad size %s\n", s);
		exit(2);
	}
	return (size_t)v;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_overcommit [-w BYTES] [-c CHUNK] "
		"[-r ROUNDS] [-n REPS] [-p streaming|random] [-s STAGING] "
		"[-h]\n");
	exit(2);
}

static void parse_args(struct bench *b, int argc, char **argv)
{
	int c;

	b->bytes = (size_t)256 << 20;
	b->chunk = (size_t)16 << 20;
	b->rounds = 4;
	b->reps = 3;
	while ((c = getopt(argc, argv, "w:c:r:n:p:s:h")) != -1) {
		switch (c) {
		case 'w': b->bytes = parse_size(optarg); break;
		case 'c': b->chunk = parse_size(optarg); break;
		case 'r': b->rounds = (unsigned)atoi(optarg); break;
		case 'n': b->reps = (unsigned)atoi(optarg); break;
		case 's': b->staging = parse_size(optarg); break;
		case 'h': b->halve = 1; break;
		case 'p':
			if (strcmp(optarg, "random") && strcmp(optarg, "streaming"))
				usage();
			b->random = strcmp(optarg, "random") == 0;
			break;
		default: usage();
		}
	}
	if (!b->chunk || b->chunk % 4 || b->bytes < b->chunk || !b->rounds ||
	    !b->reps || b->reps > MAX_REPS)
		usage();
	b->nbuf = (unsigned)(b->bytes / b->chunk);
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull +
	       (unsigned long long)ts.tv_nsec;
}

static void start(struct bench *b)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;

	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&mod, vgpu_kernels_fatbin));
	CHECK(cuModuleGetFunction(&b->touch, mod, "vgpu_touch"));
	CHECK(cuMemAllocHost((void **)&b->mismatches,
			     sizeof(*b->mismatches)));
	*b->mismatches = 0;
}

/* Whether p is backed by host memory: managed memory (the shim's managed
 * spill advises it to the host), or a VMM range on a host-located handle
 * (its host spill). */
static int on_host(CUdeviceptr p)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	unsigned managed = 0;
	int host;

	if (cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
				  p) == CUDA_SUCCESS && managed)
		return 1;
	if (cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p) !=
	    CUDA_SUCCESS)
		return 0;
	memset(&prop, 0, sizeof(prop));
	CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
	host = prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE;
	CHECK(cuMemRelease(h));
	return host;
}

static unsigned count_on_host(const struct bench *b)
{
	unsigned n = 0;

	for (unsigned i = 0; i < b->nbuf; i++)
		n += (unsigned)on_host(b->buf[i]);
	return n;
}

static void alloc_set(struct bench *b)
{
	b->buf = calloc(b->nbuf, sizeof(*b->buf));
	b->seed = calloc(b->nbuf, sizeof(*b->seed));
	if (!b->buf || !b->seed)
		exit(1);
	for (unsigned i = 0; i < b->nbuf; i++) {
		if (cuMemAlloc(&b->buf[i], b->chunk) != CUDA_SUCCESS) {
			printf("oom %zu\n", (size_t)i * b->chunk);
			exit(3);
		}
	}
}

/* Frees buffers 0, 2, 4, ...; keeps the rest, in order. */
static void halve(struct bench *b)
{
	unsigned k = 0;

	for (unsigned i = 0; i < b->nbuf; i++) {
		if (i % 2 == 0) {
			CHECK(cuMemFree(b->buf[i]));
			continue;
		}
		b->buf[k] = b->buf[i];
		b->seed[k++] = b->seed[i];
	}
	b->nbuf = k;
}

static void make_order(struct bench *b)
{
	uint64_t x = 0x2545f4914f6cdd1dull;
	size_t n = (size_t)b->rounds * b->nbuf;

	b->order = malloc(n * sizeof(*b->order));
	if (!b->order)
		exit(1);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b->order[i] = b->random ? (unsigned)(x % b->nbuf)
					: (unsigned)(i % b->nbuf);
	}
}

/* One vgpu_touch of buffer i: checks its last seed (if any), writes the
 * next. Asynchronous. */
static void touch(struct bench *b, unsigned i)
{
	uint64_t n = b->chunk / 4;
	uint32_t expect = b->seed[i];
	uint32_t write = ++b->next_seed;
	CUdeviceptr mm = expect ? (CUdeviceptr)(uintptr_t)b->mismatches : 0;
	void *params[] = { &b->buf[i], &n, &expect, &write, &mm };

	CHECK(cuLaunchKernel(b->touch, 1, 1, 1, 1, 1, 1, 0, NULL, params,
			     NULL));
	b->seed[i] = write;
}

static double timed_rounds(struct bench *b)
{
	unsigned long long t0 = now_ns();

	for (size_t k = 0; k < (size_t)b->rounds * b->nbuf; k++)
		touch(b, b->order[k]);
	CHECK(cuCtxSynchronize());
	return (double)(now_ns() - t0) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct bench b;
	CUdeviceptr staging = 0;
	double ms[MAX_REPS];
	unsigned allocated, spilled, host;

	memset(&b, 0, sizeof(b));
	parse_args(&b, argc, argv);
	start(&b);
	if (b.staging && cuMemAlloc(&staging, b.staging) != CUDA_SUCCESS) {
		printf("oom 0\n");
		return 3;
	}
	alloc_set(&b);
	allocated = b.nbuf;
	spilled = count_on_host(&b);
	if (staging)
		CHECK(cuMemFree(staging));
	host = count_on_host(&b);
	for (unsigned i = 0; i < b.nbuf; i++)	/* the first pattern */
		touch(&b, i);
	CHECK(cuCtxSynchronize());
	if (b.halve) {
		halve(&b);
		host = count_on_host(&b);
	}
	make_order(&b);
	for (unsigned r = 0; r < b.reps; r++)
		ms[r] = timed_rounds(&b);
	qsort(ms, b.reps, sizeof(ms[0]), cmp_double);
	printf("ms %.1f\nms_all", ms[b.reps / 2]);
	for (unsigned r = 0; r < b.reps; r++)
		printf(" %.1f", ms[r]);
	printf("\nallocated %u\nspilled %u\nbuffers %u\nhost %u\n"
	       "mismatches %llu\n", allocated, spilled, b.nbuf, host,
	       *b.mismatches);
	for (unsigned i = b.nbuf; i-- > 0;)	/* spilled first: no promotion */
		CHECK(cuMemFree(b.buf[i]));
	return *b.mismatches ? 1 : 0;
}
