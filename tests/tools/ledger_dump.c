/* ledger_dump.c - prints a ledger file through include/vgpu.h's structures,
 * one record a line, for the vgpu-top tests to check its output against:
 *
 *   gpu UUID PHYSICAL_BYTES JOINS
 *   tenant INDEX NAME MEM_LIMIT USED SPILL_LIMIT SHARE_PCT POLICY
 *          GPU_TIME_NS WAIT_NS USAGE[0..COUNT-1]
 *   slot INDEX TENANT PID GENERATION LAUNCHES THROTTLED WAIT_NS
 *        GPU_TIME_NS USAGE[0..COUNT-1]
 *
 * Only active tenants and slots. Exits 1 if the file is not a ledger.
 *
 *   tools-ledger-dump --layout
 *
 * prints where the fields the tests rewrite lie, in bytes:
 *
 *   layout UUID TENANTS TENANT_SIZE NAME SLOTS SLOT_SIZE PID HOST_PID
 *          TENANT_USED TENANT_USAGE SLOT_USAGE
 */
#include "vgpu.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void usage_line(const uint64_t *u)
{
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		printf(" %" PRIu64, u[k]);
	printf("\n");
}

static int layout(void)
{
	printf("layout %zu %d %d %zu %d %d %zu %zu %zu %zu %zu\n",
	       offsetof(struct vgpu_ledger_header, gpu_uuid),
	       VGPU_LEDGER_TENANTS_OFFSET, VGPU_LEDGER_TENANT_SIZE,
	       offsetof(struct vgpu_ledger_tenant, name),
	       VGPU_LEDGER_SLOTS_OFFSET, VGPU_LEDGER_SLOT_SIZE,
	       offsetof(struct vgpu_ledger_slot, pid),
	       offsetof(struct vgpu_ledger_slot, host_pid),
	       offsetof(struct vgpu_ledger_tenant, used),
	       offsetof(struct vgpu_ledger_tenant, usage),
	       offsetof(struct vgpu_ledger_slot, usage));
	return 0;
}

int main(int argc, char **argv)
{
	const unsigned char *base;
	const struct vgpu_ledger_header *h;
	int fd;

	if (argc > 1 && strcmp(argv[1], "--layout") == 0)
		return layout();
	fd = argc > 1 ? open(argv[1], O_RDONLY) : -1;

	if (fd < 0)
		return 1;
	base = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return 1;
	h = (const void *)base;
	if (h->magic != VGPU_LEDGER_MAGIC ||
	    h->layout_version != VGPU_LEDGER_VERSION)
		return 1;
	printf("gpu %s %" PRIu64 " %" PRIu64 "\n", h->gpu_uuid,
	       h->physical_bytes, h->joins);
	for (int i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t = (const void *)(base +
			VGPU_LEDGER_TENANTS_OFFSET + i * VGPU_LEDGER_TENANT_SIZE);

		if (t->state != VGPU_TENANT_ACTIVE)
			continue;
		printf("tenant %d %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %u %"
		       PRIu64 " %" PRIu64, i, t->name, t->mem_limit, t->used,
		       t->spill_limit, t->compute.share_pct, t->compute.policy,
		       t->compute.gpu_time_ns, t->compute.wait_ns);
		usage_line(t->usage);
	}
	for (int i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s = (const void *)(base +
			VGPU_LEDGER_SLOTS_OFFSET + i * VGPU_LEDGER_SLOT_SIZE);

		if (s->state != VGPU_SLOT_ACTIVE)
			continue;
		printf("slot %d %u %d %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %"
		       PRIu64, i, s->tenant, s->pid, s->generation, s->launches,
		       s->launches_throttled, s->launch_wait_ns,
		       s->gpu_time_ns);
		usage_line(s->usage);
	}
	close(fd);
	return 0;
}
