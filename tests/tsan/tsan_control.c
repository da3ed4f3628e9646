/* tsan_control.c - suspension (VGPU_CONTROL) under TSan: threads allocate,
 * fill by memset and by copy, read back and free, while the main thread
 * suspends and resumes the tenant with vgpu-ctl ($TSAN_CTL). The control
 * thread's moves, the gate the copies and allocations pass and the
 * acknowledgements race with them; TSan turns a data race into a failure,
 * and every buffer must read back what was written. Environment:
 * tests/tsan/meson.build.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tsan_check.h"

#define THREADS	3
#define CYCLES	4
#define WORDS	((size_t)1 << 20)	/* 4 MiB: a movable range */

#define CU(call) CHECK((call) == CUDA_SUCCESS)

static CUcontext ctx;
static atomic_bool done;

struct worker {
	unsigned id;
	unsigned long rounds;
	uint32_t host[WORDS];
};

static void *work(void *arg)
{
	struct worker *w = arg;

	CU(cuCtxSetCurrent(ctx));
	for (uint32_t k = 1; !atomic_load(&done); k++) {
		uint32_t v = w->id << 24 | (k & 0xffffff);
		CUdeviceptr p;

		CU(cuMemAlloc(&p, WORDS * 4));
		CU(cuMemsetD32(p, v, WORDS));
		CU(cuMemcpyDtoH(w->host, p, WORDS * 4));
		for (size_t i = 0; i < WORDS; i += 4099)
			CHECK(w->host[i] == v);
		w->host[7] = ~v;
		CU(cuMemcpyHtoD(p + 7 * 4, &w->host[7], 4));
		CU(cuMemcpyDtoH(w->host, p, 64));
		CHECK(w->host[7] == ~v && w->host[8] == v);
		CU(cuMemFree(p));
		w->rounds++;
	}
	return NULL;
}

static void ctl(const char *what)
{
	const char *bin = getenv("TSAN_CTL");
	char cmd[4200];

	CHECK(bin);
	snprintf(cmd, sizeof(cmd), "env -u LD_PRELOAD %s %s tsan --wait 30 "
		 ">/dev/null", bin,
		 what);
	CHECK(system(cmd) == 0);
}

static void pause_ms(long ms)
{
	struct timespec ts = { 0, ms * 1000000L };

	nanosleep(&ts, NULL);
}

int main(void)
{
	static struct worker w[THREADS];
	pthread_t th[THREADS];

	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	for (unsigned i = 0; i < THREADS; i++) {
		w[i].id = i + 1;
		CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
	}
	for (int c = 0; c < CYCLES; c++) {
		pause_ms(100);
		ctl("suspend");
		pause_ms(50);
		ctl("resume");
	}
	atomic_store(&done, true);
	for (unsigned i = 0; i < THREADS; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK(w[i].rounds > 0);
	}
	CU(cuDevicePrimaryCtxRelease(0));
	printf("tsan-control: %d suspend/resume cycles, %lu+%lu+%lu rounds\n",
	       CYCLES, w[0].rounds, w[1].rounds, w[2].rounds);
	return 0;
}
