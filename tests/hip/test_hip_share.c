/* test_hip_share.c - memory shared between HIP processes under
 * libvgpu-hip.so, judged by the simulated device's own count (this
 * process's cuMemGetInfo) and the ledger's tenant totals.
 *
 * The runtime keeps IPC memory (hipIpcGetMemHandle / hipIpcOpenMemHandle)
 * and exported VMM handles (hipMemExportToShareableHandle /
 * hipMemImportFromShareableHandle) while any process holds them: the
 * exporter pays, an importer holds it for free, and when the exporter lets
 * go first the importer's tenant pays from then on (docs/memory.md). After
 * every step the tenants' charges add up to what the device holds: an
 * exporter that frees first never gets its slice back while the memory is
 * still on the device.
 *
 * The processes are hip-peer (tests/hip/hip_peer.c, the simulator's
 * memory-sharing peer in HIP calls) under LD_PRELOAD=libvgpu-hip.so, one
 * tenant each as VGPU_TENANT says when it starts.
 */
#include "hipshim.h"
#include "ipc_common.h"

#include <hip/hip_runtime_api.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIMIT (64 * MIB)

static void setup(void)
{
	hs_setup("a", "64MiB", NULL);
}

TestSuite(hip_share, .init = setup, .fini = hs_cleanup);

/* A hip-peer of tenant under the shim. */
static void start(struct peer *p, const char *tenant)
{
	setenv("VGPU_TENANT", tenant, 1);
	setenv("LD_PRELOAD", HIP_SHIM, 1);
	cr_assert_eq(peer_start(p), 0, "hip-peer of %s did not start", tenant);
	unsetenv("LD_PRELOAD");
}

static int run(struct peer *p, int op, uint64_t a, uint64_t b, uint64_t c,
	       uint64_t *out)
{
	return (int)peer_run(p, op, a, b, c, out);
}

/* The device holds base + want, and tenants a and b are charged ta and tb. */
static void counts(uint64_t base, uint64_t want, uint64_t ta, uint64_t tb,
		   const char *when)
{
	uint64_t dev = hs_device_used() - base;

	cr_assert_eq(dev, want, "%s: the device holds %llu more, want %llu",
		     when, (unsigned long long)dev, (unsigned long long)want);
	cr_assert_eq(hs_tenant_used("a"), ta, "%s: tenant a is charged %llu, "
		     "want %llu", when, (unsigned long long)hs_tenant_used("a"),
		     (unsigned long long)ta);
	cr_assert_eq(hs_tenant_used("b"), tb, "%s: tenant b is charged %llu, "
		     "want %llu", when, (unsigned long long)hs_tenant_used("b"),
		     (unsigned long long)tb);
}

/* a allocates bytes (*p its pointer) and exports them by IPC; b opens
 * them: b's pointer. */
static uint64_t export_open(struct peer *a, struct peer *b, uint64_t bytes,
			    uint64_t *p)
{
	struct peer_msg m = { .op = PEER_IPC_GET };

	cr_assert_eq(run(a, PEER_ALLOC, bytes, 0, 0, p), 0);
	m.a = *p;
	cr_assert_eq(peer_do(a, &m, -1, NULL), 0);
	m.op = PEER_IPC_OPEN;
	m.b = 0;
	cr_assert_eq(peer_do(b, &m, -1, NULL), 0);
	return m.a;
}

/* Tenant a's process exports 48 MiB by IPC, tenant b's opens it: a pays.
 * a frees first: the memory stays on the device and b pays from then on,
 * so a's slice has room again only for what the device really freed. */
Test(hip_share, ipc_importer_pays_after_the_exporter_frees)
{
	uint64_t base = hs_device_used(), p, q, r;
	struct peer a, b;

	start(&a, "a");
	start(&b, "b");
	q = export_open(&a, &b, 48 * MIB, &p);
	cr_assert_eq(run(&a, PEER_FILL, p, 48 * MIB, 0x5a, NULL), 0);
	counts(base, 48 * MIB, 48 * MIB, 0, "exported, opened");
	cr_assert_eq(run(&b, PEER_CHECK, q, 48 * MIB, 0x5a, NULL), 0);

	cr_assert_eq(run(&a, PEER_FREE, p, 0, 0, NULL), 0);
	counts(base, 48 * MIB, 0, 48 * MIB, "the exporter freed first");
	cr_assert_eq(run(&b, PEER_CHECK, q, 48 * MIB, 0x5a, NULL), 0,
		     "the importer's data");
	/* a's whole slice, and b's with 16 MiB of room. */
	cr_assert_eq(run(&a, PEER_ALLOC, LIMIT, 0, 0, &r), 0);
	cr_assert_eq(run(&b, PEER_ALLOC, 16 * MIB + 4096, 0, 0, NULL), 2,
		     "tenant b holds 48 of its 64 MiB");
	counts(base, 48 * MIB + LIMIT, LIMIT, 48 * MIB, "a allocated again");

	cr_assert_eq(run(&b, PEER_IPC_CLOSE, q, 0, 0, NULL), 0);
	counts(base, LIMIT, LIMIT, 0, "the importer closed");
	cr_assert_eq(run(&a, PEER_FREE, r, 0, 0, NULL), 0);
	counts(base, 0, 0, 0, "all freed");
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(peer_exit(&b), 0);
}

/* Both processes of tenant a: the memory counts once, and after the
 * exporter's free it still counts against the tenant's slice (the
 * importer pays): 32 MiB more than the slice's room is refused. */
Test(hip_share, ipc_within_one_tenant_counts_once)
{
	uint64_t base = hs_device_used(), p, q;
	struct peer a, a2;

	start(&a, "a");
	start(&a2, "a");
	q = export_open(&a, &a2, 40 * MIB, &p);
	counts(base, 40 * MIB, 40 * MIB, 0, "opened in the same tenant");
	cr_assert_eq(run(&a, PEER_FREE, p, 0, 0, NULL), 0);
	counts(base, 40 * MIB, 40 * MIB, 0, "the exporter freed first");
	cr_assert_eq(run(&a, PEER_ALLOC, 32 * MIB, 0, 0, NULL), 2,
		     "40 MiB still held by the importer");
	cr_assert_eq(run(&a, PEER_ALLOC, 24 * MIB, 0, 0, &p), 0);
	counts(base, LIMIT, LIMIT, 0, "the slice full");
	cr_assert_eq(run(&a2, PEER_IPC_CLOSE, q, 0, 0, NULL), 0);
	cr_assert_eq(run(&a, PEER_FREE, p, 0, 0, NULL), 0);
	counts(base, 0, 0, 0, "all let go");
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(peer_exit(&a2), 0);
}

/* The importer, paying after the exporter's free, killed: the device
 * frees the memory, and its tenant's slice is whole again. */
Test(hip_share, ipc_holders_killed)
{
	uint64_t base = hs_device_used(), p;
	struct peer a, b;

	start(&a, "a");
	start(&b, "b");
	export_open(&a, &b, 20 * MIB, &p);
	cr_assert_eq(run(&a, PEER_FREE, p, 0, 0, NULL), 0);
	counts(base, 20 * MIB, 0, 20 * MIB, "the importer pays");
	cr_assert_eq(peer_kill(&b), 0);
	/* The device frees the dead importer's memory; the ledger reclaims
	 * its charge at the tenant's next charge (or view). */
	start(&b, "b");
	cr_assert_eq(run(&b, PEER_ALLOC, LIMIT, 0, 0, &p), 0,
		     "the dead importer's charge reclaimed");
	counts(base, LIMIT, 0, LIMIT, "b's slice whole again");
	cr_assert_eq(run(&b, PEER_FREE, p, 0, 0, NULL), 0);
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(peer_exit(&b), 0);
	counts(base, 0, 0, 0, "all let go");
}

/* A VMM handle exported as a descriptor and imported by another tenant's
 * process, mapped there; the exporter releases and unmaps first: the
 * importer's tenant pays, and the data reads back. */
Test(hip_share, vmm_fd_importer_pays_after_the_exporter_lets_go)
{
	uint64_t base = hs_device_used(), h, va, h2, va2;
	struct peer a, b;
	struct peer_msg m = { 0 };
	int fd = -1;

	start(&a, "a");
	start(&b, "b");
	cr_assert_eq(run(&a, PEER_VMM_CREATE, 32 * MIB, 0, 0, &h), 0);
	cr_assert_eq(run(&a, PEER_VMM_MAP, h, 32 * MIB, 0, &va), 0);
	cr_assert_eq(run(&a, PEER_FILL, va, 32 * MIB, 0x3c, NULL), 0);
	m.op = PEER_VMM_EXPORT;
	m.a = h;
	m.b = hipMemHandleTypePosixFileDescriptor;
	cr_assert_eq(peer_do(&a, &m, -1, &fd), 0);
	cr_assert_geq(fd, 0, "no descriptor came back");
	memset(&m, 0, sizeof(m));
	m.op = PEER_VMM_IMPORT;
	m.b = hipMemHandleTypePosixFileDescriptor;
	cr_assert_eq(peer_do(&b, &m, fd, NULL), 0);
	close(fd);
	h2 = m.a;
	cr_assert_eq(run(&b, PEER_VMM_MAP, h2, 32 * MIB, 0, &va2), 0);
	counts(base, 32 * MIB, 32 * MIB, 0, "exported, imported, mapped");

	cr_assert_eq(run(&a, PEER_VMM_UNMAP, va, 32 * MIB, 0, NULL), 0);
	cr_assert_eq(run(&a, PEER_VMM_RELEASE, h, 0, 0, NULL), 0);
	counts(base, 32 * MIB, 0, 32 * MIB, "the exporter let go first");
	cr_assert_eq(run(&b, PEER_CHECK, va2, 32 * MIB, 0x3c, NULL), 0);
	cr_assert_eq(run(&b, PEER_VMM_RELEASE, h2, 0, 0, NULL), 0);
	counts(base, 32 * MIB, 0, 32 * MIB, "mapped after its release");
	cr_assert_eq(run(&b, PEER_VMM_UNMAP, va2, 32 * MIB, 0, NULL), 0);
	counts(base, 0, 0, 0, "the last mapping gone");
	cr_assert_eq(peer_exit(&a), 0);
	cr_assert_eq(peer_exit(&b), 0);
}
