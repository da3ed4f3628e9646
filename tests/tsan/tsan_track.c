/* tsan_track.c - the shim's allocation table (intercept/track.c) under
 * TSan: threads insert and remove keys of their own, side by side in the
 * same tables (probes cross each other's entries); at the end both tables are empty. */
#include <stdint.h>

#include "track.h"
#include "tsan_check.h"

#define THREADS	8
#define KEYS	4096
#define ROUNDS	8

struct arg {
	int id;
	uint64_t removed;
};

static uint64_t key_of(int id, int i)
{
	/* Neighbouring device pointers, one per 4 KiB page, 16 MiB of them per
	 * thread: each thread's run of entries stays within the probe limit,
	 * and the threads' runs meet at their ends. */
	return UINT64_C(0x7f0000000000) + ((uint64_t)id << 24) +
	       (uint64_t)i * 4096;
}

static void *insert_remove(void *p)
{
	struct arg *a = p;
	int table = a->id % VGPU_TRACK_TABLES;

	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < KEYS; i++) {
			struct vgpu_tracked t = { (uint64_t)i + 1, 1,
						  (unsigned)a->id, 0 };

			CHECK(vgpu__track_insert(table, key_of(a->id, i), &t));
		}
		for (int i = 0; i < KEYS; i++) {
			struct vgpu_tracked t;

			CHECK(vgpu__track_remove(table, key_of(a->id, i), &t));
			CHECK(t.bytes == (uint64_t)i + 1 &&
			      t.dev == (unsigned)a->id);
			a->removed++;
		}
	}
	return NULL;
}

int main(void)
{
	struct arg a[THREADS];
	uint64_t removed = 0;

	CHECK(vgpu__track_init());
	for (int i = 0; i < THREADS; i++)
		a[i] = (struct arg){ i, 0 };
	tsan_run_threads(THREADS, insert_remove, a, sizeof(a[0]));
	for (int i = 0; i < THREADS; i++)
		removed += a[i].removed;
	CHECK(removed == (uint64_t)THREADS * KEYS * ROUNDS);
	for (int t = 0; t < VGPU_TRACK_TABLES; t++)
		CHECK(vgpu__track_count(t) == 0);
	printf("tsan-track: %d threads, %llu inserts and removes: ok\n",
	       THREADS, (unsigned long long)removed);
	return 0;
}
