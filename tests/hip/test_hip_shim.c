/* test_hip_shim.c - libvgpu-hip.so on the simulated HIP device: issue 17's
 * acceptance. Each test drives hip_job processes under the shim
 * (hipshim.h) and judges by ground truth: the simulated device's own count
 * of what it holds (this process's cuMemGetInfo on the same device) and
 * the ledger's records, read from the outside.
 *   - every allocation path filled exactly to the slice, one unit more
 *     refused with hipErrorOutOfMemory (2), data intact near the limit,
 *     frees in random and in every order back to zero;
 *   - the views (hipMemGetInfo, hipDeviceTotalMem, totalGlobalMem);
 *   - processes of one tenant racing for the slice's last bytes, and two
 *     tenants racing on a nearly full device;
 *   - a process killed holding memory: its charge reclaimed;
 *   - bad and misspelt options named;
 *   - one ledger for a CUDA tenant and a HIP tenant, seen by vgpu-top.
 * Random choices print their seed (HS_SEED repeats a run).
 */
#include "hipshim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define LIMIT (64 * MIB)
#define UNIT 4096ull		/* the shim's and the device's page */
#define ARRAY_ROW (16 * KIB)	/* hip_job's array rows: 4096 floats */
#define POOL_CHUNK (2 * MIB)	/* the simulated pool's growth (sim/pool.c) */

static void setup(void)
{
	hs_setup("h1", "64MiB", NULL);
}

TestSuite(hip_shim, .init = setup, .fini = hs_cleanup);

static unsigned long long round_up(unsigned long long n, unsigned long long u)
{
	return (n + u - 1) / u * u;
}

/* The path's unit of charge, as hip_job asks: an array is rows of 16 KiB
 * (a size past one row is cut to whole rows); a stream-ordered
 * allocation is charged what its pool holds, whole chunks of 2 MiB; every
 * other path whole pages. */
static unsigned long long unit_of(const char *path)
{
	return !strcmp(path, "array") || !strcmp(path, "arraydestroy")
		       ? ARRAY_ROW
	       : !strcmp(path, "async") ? POOL_CHUNK : UNIT;
}

/* A random size charged exactly units * unit: arrays and pool blocks
 * whole units (a pool block short of its chunks leaves room the next
 * one may take), others up to a page less (the shim and the device round
 * it up). */
static unsigned long long odd_size(const char *path, unsigned long long units,
				   unsigned *seed)
{
	unsigned long long u = unit_of(path), n = units * u;

	if (u == UNIT)
		n -= (unsigned long long)rand_r(seed) % u;
	return n;
}

/* Splits the slice into k random whole-unit parts. */
static int split(unsigned long long total_units, unsigned long long *parts,
		 int max, unsigned *seed)
{
	int k = 1 + rand_r(seed) % max;
	unsigned long long left = total_units;

	for (int i = 0; i < k - 1; i++) {
		unsigned long long most = left - (unsigned long long)(k - 1 - i);

		parts[i] = 1 + (unsigned long long)rand_r(seed) % (most / 2 + 1);
		left -= parts[i];
	}
	parts[k - 1] = left;
	return k;
}

/* The ledger and the device (what it holds more than at base) both hold
 * exactly want. */
static void assert_counts(uint64_t base, uint64_t want, const char *when)
{
	uint64_t dev = hs_device_used() - base;

	cr_assert_eq(hs_tenant_used("h1"), want, "%s: the ledger holds %llu, "
		     "want %llu", when,
		     (unsigned long long)hs_tenant_used("h1"),
		     (unsigned long long)want);
	cr_assert_eq(dev, want, "%s: the device holds %llu more, want %llu",
		     when, (unsigned long long)dev, (unsigned long long)want);
}

/* Fills the slice exactly through path in random parts of odd sizes:
 * the last part one unit too big is refused, then fits; one unit more is
 * refused. Data written near the limit reads back; the parts are freed in
 * random order, each giving back exactly its charge, to zero. */
static void edge(const char *path)
{
	unsigned seed = hs_seed();
	unsigned long long u = unit_of(path), parts[8];
	int k = split(LIMIT / u, parts, 8, &seed), ids[8], order[8];
	uint64_t base = hs_device_used(), held = 0;
	bool buffer = unit_of(path) != ARRAY_ROW;
	char cmd[64], want[64];
	struct hjob j;

	hjob_start(&j, NULL);
	for (int i = 0; i < k; i++) {
		unsigned long long n = odd_size(path, parts[i], &seed);

		if (i == k - 1)
			cr_assert_eq(hjob_alloc(&j, parts[i] * u + u, path,
						NULL), 2, "%s: the last part "
				     "and one unit more", path);
		cr_assert_eq(hjob_alloc(&j, n, path, &ids[i]), 0,
			     "%s: part %d of %d, %llu bytes", path, i, k, n);
		held += parts[i] * u;
		assert_counts(base, held, path);
	}
	cr_assert_eq(held, LIMIT);
	cr_assert_eq(hjob_alloc(&j, 1, path, NULL), 2, "%s: one byte past",
		     path);
	cr_assert_eq(hjob_alloc(&j, 1, "malloc", NULL), 2);
	hjob_expect(&j, "memgetinfo", "memgetinfo 0 free=0 total=67108864");
	assert_counts(base, LIMIT, path);

	/* Data intact at the limit: each buffer written by a kernel and read
	 * back. */
	for (int i = 0; buffer && i < k; i++) {
		snprintf(cmd, sizeof(cmd), "touch %d %d", ids[i], i + 3);
		hjob_expect(&j, cmd, "touch 0 bad=0");
	}

	for (int i = 0; i < k; i++)
		order[i] = i;
	for (int i = k - 1; i > 0; i--) {
		int r = rand_r(&seed) % (i + 1), t = order[i];

		order[i] = order[r];
		order[r] = t;
	}
	for (int i = 0; i < k; i++) {
		int p = order[i];

		/* A copy takes a scratch buffer of its size: each part
		 * whose scratch fits is copied round before its free. */
		if (buffer && held + parts[p] * u <= LIMIT) {
			snprintf(cmd, sizeof(cmd), "copy %d", ids[p]);
			hjob_expect(&j, cmd, "copy 0 bad=0");
		}
		snprintf(cmd, sizeof(cmd), "free %d", ids[p]);
		hjob_expect(&j, cmd, "free 0");
		held -= parts[p] * u;
		assert_counts(base, held, path);
	}
	snprintf(want, sizeof(want), "memgetinfo 0 free=%llu total=%llu",
		 (unsigned long long)LIMIT, (unsigned long long)LIMIT);
	hjob_expect(&j, "memgetinfo", want);
	hjob_end(&j);
	cr_assert_eq(hs_device_used(), base);
}

Test(hip_shim, edge_malloc) { edge("malloc"); }
Test(hip_shim, edge_pitch) { edge("pitch"); }
Test(hip_shim, edge_3d) { edge("3d"); }
Test(hip_shim, edge_managed) { edge("managed"); }
Test(hip_shim, edge_ext) { edge("ext"); }
Test(hip_shim, edge_async) { edge("async"); }
Test(hip_shim, edge_array) { edge("array"); }
Test(hip_shim, edge_mempitch) { edge("mempitch"); }
Test(hip_shim, edge_arraydestroy) { edge("arraydestroy"); }

/* Three allocations of three paths, freed in each of the six orders:
 * every free gives back its own charge. */
Test(hip_shim, frees_in_every_order)
{
	static const char *const paths[3] = { "pitch", "array", "managed" };
	static const unsigned long long size[3] = { 1000000, 20 * MIB,
						    43 * MIB };
	static const int perm[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
					{ 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
	uint64_t base = hs_device_used();
	unsigned long long charge[3];
	struct hjob j;
	int ids[3];

	/* pitch: 1,000,000 wide is a 1,000,448 pitch, 245 pages. */
	charge[0] = round_up(round_up(size[0], 512), UNIT);
	charge[1] = size[1];
	charge[2] = size[2];
	hjob_start(&j, NULL);
	for (int p = 0; p < 6; p++) {
		uint64_t held = 0;
		char cmd[32];

		for (int i = 0; i < 3; i++) {
			cr_assert_eq(hjob_alloc(&j, size[i], paths[i],
						&ids[i]), 0);
			held += charge[i];
		}
		assert_counts(base, held, "three held");
		for (int i = 0; i < 3; i++) {
			int a = perm[p][i];

			snprintf(cmd, sizeof(cmd), "free %d", ids[a]);
			hjob_expect(&j, cmd, "free 0");
			held -= charge[a];
			assert_counts(base, held, paths[a]);
		}
	}
	hjob_end(&j);
}

/* Arrays are charged what the device holds, however narrow (a 1-byte-wide
 * row takes 512 bytes), and a channel description whose widths do not add
 * up is charged at least what the runtime makes of it: the slice holds on
 * the device's count. */
Test(hip_shim, narrow_and_odd_arrays_charged_what_the_device_holds)
{
	uint64_t base = hs_device_used();
	struct hjob j;
	int a, b, c, d;

	hjob_start(&j, NULL);
	/* 16384 rows of one byte: 8 MiB on the device. */
	cr_assert_eq(hjob_alloc(&j, 16384, "narrow", &a), 0);
	assert_counts(base, 8 * MIB, "narrow");
	/* 1024 x 256 of a (32, -31) description: 1 MiB on the simulated
	 * device, charged as two 4-byte channels, 2 MiB (over, never
	 * under: it was 0 once). */
	cr_assert_eq(hjob_alloc(&j, 1 * MIB, "odd", &b), 0);
	cr_assert_eq(hs_device_used() - base, 9 * MIB);
	cr_assert_eq(hs_tenant_used("h1"), 10 * MIB);
	/* The rest of the slice (two arrays of 27 MiB: 55,296 rows is
	 * within the device's 65,536), then nothing more. */
	cr_assert_eq(hjob_alloc(&j, 54 * 1024, "narrow", &c), 0);
	cr_assert_eq(hjob_alloc(&j, 54 * 1024, "narrow", &d), 0);
	cr_assert_eq(hs_tenant_used("h1"), 64 * MIB);
	cr_assert_eq(hjob_alloc(&j, 1, "narrow", NULL), 2);
	cr_assert_leq(hs_device_used() - base, 64 * MIB);
	for (int i = 0; i < 4; i++) {
		int ids[4] = { a, b, c, d };
		char cmd[32];

		snprintf(cmd, sizeof(cmd), "free %d", ids[i]);
		hjob_expect(&j, cmd, "free 0");
	}
	assert_counts(base, 0, "freed");
	hjob_end(&j);
}

/* "pool reserved": what the job's pool holds, by the runtime. */
static uint64_t pool_reserved(struct hjob *j, const char *which)
{
	unsigned long long v = 0;
	char cmd[32], buf[64];

	snprintf(cmd, sizeof(cmd), "pool reserved %s", which);
	hjob_cmd(j, cmd, buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "pool 0 bytes=%llu", &v), 1, "%s", buf);
	return v;
}

/* Allocates size through path, or asserts it is refused (want 2). */
static int take(struct hjob *j, unsigned long long size, const char *path,
		int want)
{
	int id;

	cr_assert_eq(hjob_alloc(j, size, path, &id), want, "%s %llu", path,
		     size);
	return id;
}

static void give(struct hjob *j, int id)
{
	char cmd[32];

	snprintf(cmd, sizeof(cmd), "free %d", id);
	hjob_expect(j, cmd, "free 0");
}

/* A pool with a release threshold keeps its memory after the frees: the
 * ledger charges what it holds (the device's count, at every step), the
 * idle part is trimmed at the slice's edge, and what its live blocks hold
 * and the rest together past the slice are refused with
 * hipErrorOutOfMemory. Trimmed and destroyed, back to zero. */
Test(hip_shim, pool_idle_memory_charged)
{
	uint64_t base = hs_device_used();
	struct hjob j;
	int a, b;

	hjob_start(&j, NULL);
	hjob_expect(&j, "pool create 1G", "pool 0");
	/* Rounds of alloc and free: the pool keeps 40 MiB, reused. */
	for (int round = 0; round < 3; round++) {
		a = take(&j, 20 * MIB, "pool", 0);
		b = take(&j, 20 * MIB, "pool", 0);
		assert_counts(base, 40 * MIB, "two blocks");
		give(&j, round % 2 ? a : b);
		give(&j, round % 2 ? b : a);
		assert_counts(base, 40 * MIB, "kept after the frees");
		cr_assert_eq(pool_reserved(&j, ""), 40 * MIB);
	}
	/* 30 MiB does not fit the idle chunks of 20 MiB: 40 + 30 MiB is
	 * past the slice, so the idle memory is trimmed at the edge. */
	a = take(&j, 30 * MIB, "pool", 0);
	assert_counts(base, 30 * MIB, "idle chunks trimmed");
	take(&j, 30 * MIB, "malloc", 0);
	assert_counts(base, 60 * MIB, "a buffer beside");
	b = take(&j, 4 * MIB, "pool", 0);
	assert_counts(base, LIMIT, "full");
	/* Freed, B's 4 MiB stays in the pool: charged until the edge. */
	give(&j, b);
	assert_counts(base, LIMIT, "b idle");
	b = take(&j, 4 * KIB, "malloc", 0);
	assert_counts(base, 60 * MIB + 4 * KIB, "b trimmed");
	/* Live 30 MiB + 30 MiB + 4 KiB: 4 MiB more is past the slice. */
	take(&j, 4 * MIB, "pool", 2);
	take(&j, 4 * MIB - 4 * KIB, "malloc", 0);
	take(&j, 1, "malloc", 2);
	cr_assert_leq(hs_device_used() - base, LIMIT);
	hjob_end(&j);
	cr_assert_eq(hs_device_used(), base);
	cr_assert_eq(hs_tenant_used("h1"), 0);
}

/* A pool's memory lives while the pool or any allocation from it lives:
 * destroyed with a block live, it keeps its charge until the free; a
 * trim gives back the idle part; in any order, back to zero. */
Test(hip_shim, pool_destroyed_and_trimmed_back_to_zero)
{
	uint64_t base = hs_device_used();
	struct hjob j;
	int a, b;

	hjob_start(&j, NULL);
	hjob_expect(&j, "pool create 1G", "pool 0");
	a = take(&j, 10 * MIB, "pool", 0);
	b = take(&j, 6 * MIB, "pool", 0);
	give(&j, b);
	assert_counts(base, 16 * MIB, "b idle");
	hjob_expect(&j, "pool trim", "pool 0");
	assert_counts(base, 10 * MIB, "trimmed");
	hjob_expect(&j, "pool destroy", "pool 0");
	assert_counts(base, 10 * MIB, "destroyed, a live");
	give(&j, a);
	assert_counts(base, 0, "a freed");

	/* The device's own pool with a threshold: kept, then trimmed at the
	 * edge by a buffer that needs the room. */
	hjob_expect(&j, "pool default 1G", "pool 0");
	a = take(&j, 40 * MIB, "async", 0);
	give(&j, a);
	assert_counts(base, 40 * MIB, "default pool keeps it");
	cr_assert_eq(pool_reserved(&j, "default"), 40 * MIB);
	a = take(&j, 64 * MIB, "malloc", 0);
	assert_counts(base, LIMIT, "trimmed for a buffer");
	give(&j, a);
	assert_counts(base, 0, "freed");
	hjob_end(&j);
	cr_assert_eq(hs_device_used(), base);
}

/* Mipmapped arrays are charged the sum of their levels, as the device
 * holds them: hip_job's mipmap of H rows (even) is 16 KiB a row at level 0
 * and 8 KiB a row of H/2 at level 1, 20 KiB a row. Filled to 16 KiB short
 * of the slice by both entries (hipMallocMipmappedArray,
 * hipMipmappedArrayCreate), one past refused, the rest taken by a buffer;
 * freed in random order, to zero. */
Test(hip_shim, mipmapped_arrays_at_the_edge)
{
	static const char *const paths[3] = { "mipmap", "mipmapdrv",
					      "malloc" };
	const unsigned long long charge[3] = { 2000 * 20 * KIB,
					       1276 * 20 * KIB, 16 * KIB };
	uint64_t base = hs_device_used(), held = 0;
	unsigned seed = hs_seed();
	struct hjob j;
	int ids[3], order[3] = { 0, 1, 2 };

	hjob_start(&j, NULL);
	cr_assert_eq(hjob_alloc(&j, 2000 * 16 * KIB, "mipmap", &ids[0]), 0);
	held += charge[0];
	assert_counts(base, held, "mipmap");
	/* Two rows more than fit: 40 KiB past the slice's last 16 KiB. */
	cr_assert_eq(hjob_alloc(&j, 1278 * 16 * KIB, "mipmapdrv", NULL), 2);
	cr_assert_eq(hjob_alloc(&j, 1276 * 16 * KIB, "mipmapdrv", &ids[1]),
		     0);
	held += charge[1];
	assert_counts(base, held, "mipmapdrv");
	cr_assert_eq(hjob_alloc(&j, 2 * 16 * KIB, "mipmap", NULL), 2);
	cr_assert_eq(hjob_alloc(&j, 16 * KIB, "malloc", &ids[2]), 0);
	held += charge[2];
	cr_assert_eq(held, LIMIT);
	cr_assert_eq(hjob_alloc(&j, 1, "malloc", NULL), 2);
	assert_counts(base, LIMIT, "full");
	for (int i = 2; i > 0; i--) {
		int r = rand_r(&seed) % (i + 1), t = order[i];

		order[i] = order[r];
		order[r] = t;
	}
	for (int i = 0; i < 3; i++) {
		int p = order[i];
		char cmd[32];

		snprintf(cmd, sizeof(cmd), "free %d", ids[p]);
		hjob_expect(&j, cmd, "free 0");
		held -= charge[p];
		assert_counts(base, held, paths[p]);
	}
	hjob_end(&j);
	cr_assert_eq(hs_device_used(), base);
}

/* Every view says the slice: hipMemGetInfo, hipDeviceTotalMem and
 * hipGetDeviceProperties' totalGlobalMem. */
Test(hip_shim, views_show_the_slice)
{
	struct hjob j;
	char buf[256];

	hjob_start(&j, NULL);
	hjob_expect(&j, "totalmem", "totalmem 0 bytes=67108864");
	hjob_cmd(&j, "device", buf, sizeof(buf));
	cr_assert_eq(strncmp(buf, "device 0 count=1 mem=67108864 ", 30), 0,
		     "%s", buf);
	hjob_expect(&j, "memgetinfo", "memgetinfo 0 free=67108864 "
		    "total=67108864");
	hjob_expect(&j, "alloc 1000", "alloc 0 id=0");
	hjob_expect(&j, "memgetinfo", "memgetinfo 0 free=67104768 "
		    "total=67108864");
	hjob_expect(&j, "totalmem", "totalmem 0 bytes=67108864");
	hjob_expect(&j, "free 0", "free 0");
	hjob_end(&j);
}

/* Without a limit the views are the device's. */
Test(hip_shim, views_without_a_limit)
{
	struct hjob j;

	unsetenv("VGPU_MEMORY_LIMIT");
	hjob_start(&j, NULL);
	hjob_expect(&j, "totalmem", "totalmem 0 bytes=1073741824");
	hjob_expect(&j, "memgetinfo", "memgetinfo 0 free=1073741824 "
		    "total=1073741824");
	hjob_end(&j);
}

/* ---- races --------------------------------------------------------------- */

#define RACERS 8

/* Sends every job cmd at once, then counts the successes; ids[i] the
 * allocation of job i (-1: refused, with hipErrorOutOfMemory). */
static int release(struct hjob *j, int n, const char *cmd, int *ids)
{
	int wins = 0;

	for (int i = 0; i < n; i++)
		fprintf(j[i].in, "%s\n", cmd);
	for (int i = 0; i < n; i++)
		fflush(j[i].in);
	for (int i = 0; i < n; i++) {
		char buf[128];
		int rc;

		hjob_reply(&j[i], buf, sizeof(buf));
		cr_assert_eq(sscanf(buf, "alloc %d id=%d", &rc, &ids[i]), 2,
			     "%s", buf);
		cr_assert(rc == 0 || rc == 2, "%s: %s", cmd, buf);
		wins += rc == 0;
	}
	return wins;
}

/* Eight processes of one tenant ask at once for X bytes where only k fit
 * (k from 0 to 3, X random): exactly k win, and the ledger and the device
 * agree on what is held. Rounds with fresh X and k. */
Test(hip_shim, race_for_the_last_bytes)
{
	unsigned seed = hs_seed();
	uint64_t base = hs_device_used();
	struct hjob holder, j[RACERS];
	int ids[RACERS];

	hjob_start(&holder, NULL);
	for (int i = 0; i < RACERS; i++)
		hjob_start(&j[i], NULL);
	for (int i = 0; i < RACERS; i++)
		(void)hjob_pid(&j[i]);
	for (int round = 0; round < 6; round++) {
		unsigned long long x = (1 + rand_r(&seed) % 1024) * UNIT;
		int k = rand_r(&seed) % 4, hid, wins;
		unsigned long long room = k * x + rand_r(&seed) % x / UNIT *
						  UNIT;
		char cmd[64];

		cr_assert_eq(hjob_alloc(&holder, LIMIT - room, "malloc", &hid),
			     0);
		snprintf(cmd, sizeof(cmd), "alloc %llu", x - rand_r(&seed) %
			 UNIT);
		wins = release(j, RACERS, cmd, ids);
		cr_assert_eq(wins, k, "round %d: %d of %d won %llu bytes "
			     "with room for %d", round, wins, RACERS, x, k);
		assert_counts(base, LIMIT - room + k * x, "after the race");
		for (int i = 0; i < RACERS; i++) {
			if (ids[i] < 0)
				continue;
			snprintf(cmd, sizeof(cmd), "free %d", ids[i]);
			hjob_expect(&j[i], cmd, "free 0");
		}
		snprintf(cmd, sizeof(cmd), "free %d", hid);
		hjob_expect(&holder, cmd, "free 0");
		assert_counts(base, 0, "after the frees");
	}
	for (int i = 0; i < RACERS; i++)
		hjob_end(&j[i]);
	hjob_end(&holder);
}

/* Two tenants of a 64 MiB slice each on a 96 MiB device, four processes
 * each, all asking at once. For 40 MiB each: one of each tenant wins (its
 * slice holds one, the device two). For 64 MiB each: the device holds
 * one, so exactly one process wins; the others are refused, the tenant
 * whose process the device refused is rolled back to zero. */
static void setup_small(void)
{
	hs_setup("ta", "64MiB", "96MiB");
}

TestSuite(hip_shim_small, .init = setup_small, .fini = hs_cleanup);

Test(hip_shim_small, two_tenants_on_a_full_device)
{
	const char *ta[] = { "VGPU_TENANT=ta", NULL };
	const char *tb[] = { "VGPU_TENANT=tb", NULL };
	struct hjob j[8];
	int ids[8];
	uint64_t base;

	base = hs_device_used();
	for (int i = 0; i < 8; i++)
		hjob_start(&j[i], i % 2 ? tb : ta);
	for (int i = 0; i < 8; i++)
		(void)hjob_pid(&j[i]);
	for (int round = 0; round < 6; round++) {
		bool big = round % 2;
		int wins = release(j, 8, big ? "alloc 64M" : "alloc 40M", ids);
		int won[2] = { 0, 0 };
		char cmd[32];

		for (int i = 0; i < 8; i++)
			won[i % 2] += ids[i] >= 0;
		cr_log_info("round %d (%s): ta %d, tb %d won", round,
			    big ? "64M" : "40M", won[0], won[1]);
		if (big) {
			cr_assert_eq(wins, 1, "round %d: %d won", round, wins);
			cr_assert_eq(hs_tenant_used(won[0] ? "ta" : "tb"),
				     64 * MIB);
			cr_assert_eq(hs_tenant_used(won[0] ? "tb" : "ta"), 0);
			cr_assert_eq(hs_device_used() - base, 64 * MIB);
		} else {
			cr_assert(won[0] == 1 && won[1] == 1, "round %d: ta "
				  "%d, tb %d won", round, won[0], won[1]);
			cr_assert_eq(hs_tenant_used("ta"), 40 * MIB);
			cr_assert_eq(hs_tenant_used("tb"), 40 * MIB);
			cr_assert_eq(hs_device_used() - base, 80 * MIB);
		}
		for (int i = 0; i < 8; i++) {
			if (ids[i] < 0)
				continue;
			snprintf(cmd, sizeof(cmd), "free %d", ids[i]);
			hjob_expect(&j[i], cmd, "free 0");
		}
		cr_assert_eq(hs_tenant_used("ta") + hs_tenant_used("tb"), 0);
		cr_assert_eq(hs_device_used(), base);
	}
	for (int i = 0; i < 8; i++)
		hjob_end(&j[i]);
}

/* ---- a process killed ---------------------------------------------------- */

/* A process killed holding the whole slice: the next process of the
 * tenant gets the whole slice at once (the dead one's charge reclaimed
 * at its charge), and the device's count follows. */
Test(hip_shim, killed_holder_reclaimed)
{
	uint64_t base = hs_device_used();
	struct hjob a, b;

	hjob_start(&a, NULL);
	cr_assert_eq(hjob_alloc(&a, 40 * MIB, "malloc", NULL), 0);
	cr_assert_eq(hjob_alloc(&a, 24 * MIB, "managed", NULL), 0);
	assert_counts(base, LIMIT, "held");
	hjob_kill(&a);

	hjob_start(&b, NULL);
	cr_assert_eq(hjob_alloc(&b, LIMIT, "malloc", NULL), 0);
	assert_counts(base, LIMIT, "taken again");
	cr_assert_eq(hjob_alloc(&b, 1, "malloc", NULL), 2);
	hjob_expect(&b, "free 0", "free 0");
	assert_counts(base, 0, "freed");
	hjob_end(&b);
}

/* ---- options --------------------------------------------------------------- */

/* Runs one job with env, stderr with stdout, the commands cmds; its
 * output in out. */
static void run_err(const char *const *env, const char *const *cmds,
		    char *out, size_t len)
{
	struct hjob j;
	size_t n = 0;

	hjob_start_err(&j, env, true);
	for (int i = 0; cmds[i]; i++)
		hjob_send(&j, cmds[i]);
	hjob_send(&j, "exit");
	fclose(j.in);
	j.in = NULL;
	n = fread(out, 1, len - 1, j.out);
	out[n] = 0;
	fclose(j.out);
	cr_assert_eq(waitpid(j.pid, NULL, 0), j.pid);
}

/* A bad value is refused, named; the device is then not handed out. */
static void refused(const char *setting, const char *name)
{
	const char *env[] = { setting, NULL };
	const char *cmds[] = { "alloc 4096", NULL };
	char out[8192];

	run_err(env, cmds, out, sizeof(out));
	cr_assert_not_null(strstr(out, name), "%s: %s", setting, out);
	cr_assert_not_null(strstr(out, "alloc 101 id=-1"), "%s: %s", setting,
			   out);
	cr_assert_eq(hs_device_used(), 0);
}

Test(hip_shim, bad_memory_limit_refused)
{
	refused("VGPU_MEMORY_LIMIT=12XB", "VGPU_MEMORY_LIMIT");
}

Test(hip_shim, negative_memory_limit_refused)
{
	refused("VGPU_MEMORY_LIMIT=-5GiB", "VGPU_MEMORY_LIMIT");
}

Test(hip_shim, bad_compute_limit_refused)
{
	refused("VGPU_COMPUTE_LIMIT=abc", "VGPU_COMPUTE_LIMIT");
}

Test(hip_shim, compute_limit_past_100_refused)
{
	refused("VGPU_COMPUTE_LIMIT=150", "VGPU_COMPUTE_LIMIT");
}

/* A misspelt VGPU_ variable is named, with the option it resembles, and
 * refused as a bad value is (docs/configuration.md): a misspelt limit
 * would otherwise leave the job with no limit. */
Test(hip_shim, misspelt_variable_named)
{
	refused("VGPU_MEMORY_LIMT=1GiB", "VGPU_MEMORY_LIMT is not a known "
		"option; did you mean VGPU_MEMORY_LIMIT?");
}

/* The job's hipMalloc@hip_4.2 binds to the shim, not the runtime. */
Test(hip_shim, versioned_names_bind)
{
	const char *env[] = { "LD_DEBUG=bindings", NULL };
	const char *cmds[] = { "alloc 4096", "free 0", NULL };
	static char out[1 << 20];

	run_err(env, cmds, out, sizeof(out));
	cr_assert_not_null(strstr(out, "libvgpu-hip.so [0]: normal symbol "
				  "`hipMalloc' [hip_4.2]"), "%.2000s", out);
}

/* ---- one ledger for both front ends ---------------------------------------- */

/* Starts the CUDA job (tests/tools/ctl_job.c) under libvgpu.so as tenant
 * cu1 on the same simulated device and ledger directory. */
static void cuda_job_start(struct hjob *j)
{
	int to[2], from[2];
	char buf[64];

	cr_assert_eq(pipe(to), 0);
	cr_assert_eq(pipe(from), 0);
	j->pid = fork();
	cr_assert_geq(j->pid, 0);
	if (j->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		setenv("LD_PRELOAD", CUDA_SHIM, 1);
		setenv("VGPU_REAL_LIBCUDA", SHIMTEST_SIM_LIBCUDA, 1);
		setenv("VGPU_TENANT", "cu1", 1);
		setenv("VGPU_MEMORY_LIMIT", "32MiB", 1);
		execl(CUDA_JOB, CUDA_JOB, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	j->in = fdopen(to[1], "w");
	j->out = fdopen(from[0], "r");
	cr_assert(j->in && j->out);
	hjob_reply(j, buf, sizeof(buf));
	cr_assert_eq(strncmp(buf, "ready ", 6), 0, "%s", buf);
}

/* A CUDA tenant and a HIP tenant on one device share one ledger: each
 * with its usage, the device holding both, vgpu-top listing both. */
Test(hip_shim, one_ledger_for_cuda_and_hip)
{
	uint64_t base = hs_device_used();
	struct hjob cu, hip;
	char cmd[512], buf[128];
	static char top[1 << 16];
	struct ledger_view v;
	FILE *f;
	size_t n;
	int st;

	cuda_job_start(&cu);
	hjob_cmd(&cu, "alloc 8388608", buf, sizeof(buf));
	cr_assert_str_eq(buf, "ok 0");
	hjob_start(&hip, NULL);
	cr_assert_eq(hjob_alloc(&hip, 10 * MIB, "malloc", NULL), 0);

	ledger_view_must(&v, NULL);	/* one ledger file: the device's */
	ledger_view_close(&v);
	cr_assert_eq(hs_tenant_used("cu1"), 8 * MIB);
	cr_assert_eq(hs_tenant_used("h1"), 10 * MIB);
	cr_assert_eq(hs_device_used() - base, 18 * MIB);
	/* The CUDA tenant's slice is its own: 24 MiB more is past it. */
	hjob_cmd(&cu, "alloc 25165825", buf, sizeof(buf));
	cr_assert_str_eq(buf, "fail 2");	/* CUDA_ERROR_OUT_OF_MEMORY */

	snprintf(cmd, sizeof(cmd), "%s --json --interval 0 --dir %s", VGPU_TOP,
		 shimtest_ledger_dir());
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(top, 1, sizeof(top) - 1, f);
	top[n] = 0;
	cr_assert_eq(pclose(f), 0, "%s: %s", cmd, top);
	cr_assert_not_null(strstr(top, "\"cu1\""), "%s", top);
	cr_assert_not_null(strstr(top, "\"h1\""), "%s", top);

	hjob_end(&hip);
	fclose(cu.in);		/* EOF: the CUDA job frees and exits */
	fclose(cu.out);
	cr_assert_eq(waitpid(cu.pid, &st, 0), cu.pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cr_assert_eq(hs_device_used(), base);
}
