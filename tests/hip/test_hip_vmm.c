/* test_hip_vmm.c - libvgpu-hip.so's virtual-memory handles on the simulated
 * HIP device, judged by the device's own count of what it holds (this
 * process's cuMemGetInfo on the same device, hipshim.h) and the ledger.
 *
 * The runtime keeps a handle's memory while the handle, a retained handle
 * or a mapping of it lives (hipMemRelease of a mapped handle frees
 * nothing): the charge must last exactly as long, in every order of
 * release, unmap and retain, and the slice must hold against the pattern
 * of PyTorch's expandable segments (create, map, release at once).
 */
#include "hipshim.h"

#include <stdlib.h>
#include <string.h>

#define LIMIT (64 * MIB)
#define GRAN (2 * MIB)		/* the simulated device's VMM granularity */

static void setup(void)
{
	hs_setup("h1", "64MiB", NULL);
}

TestSuite(hip_vmm, .init = setup, .fini = hs_cleanup);

/* The device and the ledger both hold exactly want more than base. */
static void counts(uint64_t base, uint64_t want, const char *when)
{
	uint64_t dev = hs_device_used() - base, led = hs_tenant_used("h1");

	cr_assert_eq(dev, want, "%s: the device holds %llu more, want %llu",
		     when, (unsigned long long)dev, (unsigned long long)want);
	cr_assert_eq(led, want, "%s: the ledger holds %llu, want %llu", when,
		     (unsigned long long)led, (unsigned long long)want);
}

/* "vmm create SIZE": the HIP error, *id the handle's number. */
static int create(struct hjob *j, unsigned long long size, int *id)
{
	char cmd[64], buf[128];
	int rc, n = -1;

	snprintf(cmd, sizeof(cmd), "vmm create %llu", size);
	hjob_cmd(j, cmd, buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "vmm %d id=%d", &rc, &n), 2, "%s", buf);
	if (id)
		*id = n;
	return rc;
}

/* "vmm OP ID" answered "vmm 0" (retain: "vmm 0 same=1"). */
static void op(struct hjob *j, const char *what, int id)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "vmm %s %d", what, id);
	hjob_expect(j, cmd, strcmp(what, "retain") == 0 ? "vmm 0 same=1"
							: "vmm 0");
}

/* PyTorch's expandable segments: each segment is created, mapped and its
 * handle released at once. The mapped memory stays on the device, so the
 * slice must refuse the fifth 16 MiB segment of a 64 MiB slice (without
 * the mapping's reference, six rounds held 96 MiB under a charge of 0).
 * The data written into each mapping reads back; unmapping gives each
 * segment back. */
Test(hip_vmm, release_while_mapped_holds_the_slice)
{
	uint64_t base = hs_device_used();
	struct hjob j;
	int ids[6];

	hjob_start(&j, NULL);
	for (int i = 0; i < 6; i++) {
		int rc = create(&j, 16 * MIB, &ids[i]);

		if (i >= 4) {
			cr_assert_eq(rc, 2, "segment %d past the slice", i);
			counts(base, LIMIT, "the slice full");
			continue;
		}
		cr_assert_eq(rc, 0, "segment %d", i);
		op(&j, "map", ids[i]);
		op(&j, "release", ids[i]);
		counts(base, (uint64_t)(i + 1) * 16 * MIB, "mapped, released");
	}
	cr_assert_eq(hjob_alloc(&j, 1, "malloc", NULL), 2);
	for (int i = 0; i < 4; i++) {
		char cmd[64];

		snprintf(cmd, sizeof(cmd), "vmm touch %d %d", ids[i], i + 5);
		hjob_expect(&j, cmd, "vmm 0 bad=0");
	}
	for (int i = 0; i < 4; i++) {
		op(&j, "unmap", ids[i]);
		counts(base, (uint64_t)(3 - i) * 16 * MIB, "unmapped");
	}
	cr_assert_eq(create(&j, LIMIT, &ids[0]), 0, "the whole slice again");
	op(&j, "release", ids[0]);
	counts(base, 0, "released unmapped");
	hjob_end(&j);
}

/* The four references of one handle (its own, two mappings, a retained
 * one) let go in each of the 24 orders: the memory and its charge stay
 * until the last goes, then both are gone. */
Test(hip_vmm, every_order_of_release_unmap_and_retain)
{
	static const char *const steps[4] = { "release", "unmap", "unmap",
					      "drop" };
	uint64_t base = hs_device_used();
	struct hjob j;
	int orders = 0;

	hjob_start(&j, NULL);
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			for (int c = 0; c < 4; c++) {
				int d = 6 - a - b - c, order[4] = { a, b, c, d };
				int id;

				if (a == b || a == c || b == c || d < 0 ||
				    d > 3 || d == a || d == b || d == c)
					continue;
				orders++;
				cr_assert_eq(create(&j, 6 * MIB, &id), 0);
				op(&j, "map", id);
				op(&j, "map", id);
				op(&j, "retain", id);
				counts(base, 6 * MIB, "four references");
				for (int s = 0; s < 4; s++) {
					op(&j, steps[order[s]], id);
					counts(base, s < 3 ? 6 * MIB : 0,
					       steps[order[s]]);
				}
			}
	cr_assert_eq(orders, 24);
	hjob_end(&j);
}

/* A model of the handles a job holds: random steps (seeded, HS_SEED
 * repeats a run) over create, map, unmap, release, retain and drop, on up
 * to eight handles; after each, the device and the ledger hold exactly
 * the sizes of the handles with a reference left, and a create past the
 * slice is refused with hipErrorOutOfMemory. */
struct model {
	bool live;
	int id;
	unsigned long long size;
	int own, maps, retained;
};

static int refs(const struct model *m)
{
	return m->own + m->maps + m->retained;
}

Test(hip_vmm, random_steps_follow_the_references)
{
	unsigned seed = hs_seed();
	uint64_t base = hs_device_used(), held = 0;
	struct model m[8] = { { 0 } };
	struct hjob j;
	int refused = 0, freed = 0;

	hjob_start(&j, NULL);
	for (int step = 0; step < 400; step++) {
		struct model *h = &m[rand_r(&seed) % 8];
		int what = rand_r(&seed) % 6;
		char when[64];

		snprintf(when, sizeof(when), "step %d (seed %u)", step, seed);
		if (!h->live) {
			unsigned long long size =
				(1 + rand_r(&seed) % 12) * GRAN;
			int rc = create(&j, size, &h->id);

			cr_assert_eq(rc, held + size <= LIMIT ? 0 : 2,
				     "%s: create %llu with %llu held", when,
				     size, (unsigned long long)held);
			if (rc == 0) {
				*h = (struct model){ true, h->id, size, 1, 0,
						     0 };
				held += size;
			} else {
				refused++;
			}
		} else if (what == 0 && h->maps < 4 && h->own) {
			op(&j, "map", h->id);
			h->maps++;
		} else if (what == 1 && h->maps) {
			op(&j, "unmap", h->id);
			h->maps--;
		} else if (what == 2 && h->own) {
			op(&j, "release", h->id);
			h->own = 0;
		} else if (what == 3 && h->maps && h->retained < 3) {
			op(&j, "retain", h->id);
			h->retained++;
		} else if (what == 4 && h->retained) {
			op(&j, "drop", h->id);
			h->retained--;
		}
		if (h->live && refs(h) == 0) {
			h->live = false;
			held -= h->size;
			freed++;
		}
		counts(base, held, when);
	}
	cr_assert_gt(refused, 0, "the slice was never reached");
	cr_assert_gt(freed, 10);
	/* Everything let go: back to zero. */
	for (int i = 0; i < 8; i++) {
		while (m[i].live && m[i].maps) {
			op(&j, "unmap", m[i].id);
			m[i].maps--;
		}
		while (m[i].live && m[i].retained) {
			op(&j, "drop", m[i].id);
			m[i].retained--;
		}
		if (m[i].live && m[i].own)
			op(&j, "release", m[i].id);
	}
	counts(base, 0, "all let go");
	hjob_end(&j);
}

/* A process killed holding mapped memory whose handles it released: the
 * device frees it, and the tenant's next process gets the whole slice. */
Test(hip_vmm, killed_with_mappings_reclaimed)
{
	uint64_t base = hs_device_used();
	struct hjob a, b;
	int id;

	hjob_start(&a, NULL);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(create(&a, 16 * MIB, &id), 0);
		op(&a, "map", id);
		op(&a, "release", id);
	}
	counts(base, LIMIT, "held by mappings");
	hjob_kill(&a);

	hjob_start(&b, NULL);
	cr_assert_eq(create(&b, LIMIT, &id), 0, "the whole slice again");
	counts(base, LIMIT, "taken again");
	op(&b, "release", id);
	counts(base, 0, "released");
	hjob_end(&b);
}
