/* tsan_ledger.c - the ledger under TSan: 8 threads on two slots of one
 * tenant reserve and release under a limit they keep hitting, then every
 * total is back at zero. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger.h"
#include "tsan_check.h"

#define MiB	(UINT64_C(1) << 20)
#define THREADS	8
#define PAIRS	20000

struct arg {
	struct vgpu_slot *s;
	int refused;
};

static void *reserve_release(void *p)
{
	struct arg *a = p;
	int held[6], n = 0;	/* up to 6 MiB: past the 4 MiB limit alone */

	for (int i = 0; i < PAIRS; i++) {
		int kind = i % VGPU_USAGE_SPILLED;

		if (vgpu_ledger_reserve(a->s, kind, MiB) == 0)
			held[n++] = kind;
		else
			a->refused++;
		if (n == 6 || (a->refused && n > 0 && i % 7 == 0))
			while (n > 0)
				vgpu_ledger_release(a->s, held[--n], MiB);
	}
	while (n > 0)
		vgpu_ledger_release(a->s, held[--n], MiB);
	return NULL;
}

int main(void)
{
	char dir[] = "/tmp/vgpu-tsan-ledger.XXXXXX", err[512], cmd[600];
	struct vgpu_ledger *l;
	struct vgpu_slot *s[2];
	struct arg a[THREADS];
	int refused = 0;

	CHECK(mkdtemp(dir) != NULL);
	CHECK(vgpu_ledger_open(dir, "GPU-tsan", UINT64_C(80) << 30, &l, err,
			       sizeof(err)) == 0);
	for (int i = 0; i < 2; i++)
		CHECK(vgpu_ledger_join(l, "team", 4 * MiB, getpid(), 0, &s[i],
				       err, sizeof(err)) >= 0);
	for (int i = 0; i < THREADS; i++)
		a[i] = (struct arg){ s[i % 2], 0 };
	tsan_run_threads(THREADS, reserve_release, a, sizeof(a[0]));
	for (int i = 0; i < THREADS; i++)
		refused += a[i].refused;
	CHECK(refused > 0);
	CHECK(vgpu_ledger_tenant_used(s[0]) == 0);
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		CHECK(vgpu_ledger_tenant_usage(s[0], k) == 0);
	vgpu_ledger_leave(s[0]);
	vgpu_ledger_leave(s[1]);
	vgpu_ledger_close(l);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
	printf("tsan-ledger: %d threads, %d pairs each, %d refused: ok\n",
	       THREADS, PAIRS, refused);
	return 0;
}
