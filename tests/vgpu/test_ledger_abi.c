/* test_ledger_abi.c - the ledger's layout pinned against literal numbers,
 * as a reader in another language sees it: a change to any size or offset
 * fails here, and must come with a new VGPU_LEDGER_VERSION and an update
 * of docs/ledger-abi.md. */
#include <stddef.h>

#include <criterion/criterion.h>

#include "vgpu.h"

#define PIN(type, field, off, size) do { \
	cr_expect_eq(offsetof(struct type, field), (off), \
		     #type "." #field " offset"); \
	cr_expect_eq(sizeof(((struct type *)0)->field), (size), \
		     #type "." #field " size"); \
} while (0)

Test(ledger_abi, constants)
{
	cr_expect_eq(VGPU_LEDGER_VERSION, 3);
	cr_expect_eq(VGPU_LEDGER_MAGIC, 0x4744454C55504756ull);
	cr_expect_eq(VGPU_LEDGER_MAX_TENANTS, 128);
	cr_expect_eq(VGPU_LEDGER_MAX_SLOTS, 1024);
	cr_expect_eq(VGPU_LEDGER_KIND_SLOTS, 16);
	cr_expect_eq(VGPU_LEDGER_TENANTS_OFFSET, 4096);
	cr_expect_eq(VGPU_LEDGER_SLOTS_OFFSET, 69632);
	cr_expect_eq(VGPU_LEDGER_FILE_SIZE, 397312);
	cr_expect_eq(VGPU_LEDGER_UNLIMITED, UINT64_MAX);
}

Test(ledger_abi, usage_kinds)
{
	cr_expect_eq(VGPU_USAGE_BUFFER, 0);
	cr_expect_eq(VGPU_USAGE_ARRAY, 1);
	cr_expect_eq(VGPU_USAGE_POOL, 2);
	cr_expect_eq(VGPU_USAGE_VMM, 3);
	cr_expect_eq(VGPU_USAGE_GRAPH, 4);
	cr_expect_eq(VGPU_USAGE_MULTICAST, 5);
	cr_expect_eq(VGPU_USAGE_CONTEXT, 6);
	cr_expect_eq(VGPU_USAGE_MANAGED, 7);
	cr_expect_eq(VGPU_USAGE_SPILLED, 8);
	cr_expect_eq(VGPU_USAGE_COUNT, 9);
	cr_expect_eq(VGPU_TENANT_ACTIVE, 1);
	cr_expect_eq(VGPU_SLOT_ACTIVE, 1);
}

Test(ledger_abi, header)
{
	cr_expect_eq(sizeof(struct vgpu_ledger_header), 512);
	PIN(vgpu_ledger_header, magic, 0, 8);
	PIN(vgpu_ledger_header, layout_version, 8, 4);
	PIN(vgpu_ledger_header, header_size, 12, 4);
	PIN(vgpu_ledger_header, file_size, 16, 8);
	PIN(vgpu_ledger_header, physical_bytes, 24, 8);
	PIN(vgpu_ledger_header, created_ns, 32, 8);
	PIN(vgpu_ledger_header, max_tenants, 40, 4);
	PIN(vgpu_ledger_header, max_slots, 44, 4);
	PIN(vgpu_ledger_header, tenant_size, 48, 4);
	PIN(vgpu_ledger_header, slot_size, 52, 4);
	PIN(vgpu_ledger_header, tenants_offset, 56, 4);
	PIN(vgpu_ledger_header, slots_offset, 60, 4);
	PIN(vgpu_ledger_header, kind_count, 64, 4);
	PIN(vgpu_ledger_header, kind_slots, 68, 4);
	PIN(vgpu_ledger_header, joins, 72, 8);
	PIN(vgpu_ledger_header, gpu_uuid, 80, 64);
	PIN(vgpu_ledger_header, shares_offset, 144, 4);
	PIN(vgpu_ledger_header, max_shares, 148, 4);
	PIN(vgpu_ledger_header, share_size, 152, 4);
	PIN(vgpu_ledger_header, share_holders, 156, 4);
	PIN(vgpu_ledger_header, opportunistic_ns, 160, 8);
	PIN(vgpu_ledger_header, reserved, 168, 344);
}

Test(ledger_abi, shares)
{
	cr_expect_eq(VGPU_LEDGER_SHARES_OFFSET, 331776);
	cr_expect_eq(sizeof(struct vgpu_ledger_shares), 64);
	cr_expect_eq(sizeof(struct vgpu_ledger_share), 128);
	cr_expect_eq(VGPU_LEDGER_MAX_SHARES, 511);
	PIN(vgpu_ledger_shares, in_use, 0, 4);
	PIN(vgpu_ledger_shares, moves, 8, 8);
	PIN(vgpu_ledger_share, key, 0, 16);
	PIN(vgpu_ledger_share, bytes, 16, 8);
	PIN(vgpu_ledger_share, kind, 24, 4);
	PIN(vgpu_ledger_share, payer, 28, 4);
	PIN(vgpu_ledger_share, slot, 32, 32);
	PIN(vgpu_ledger_share, gen, 64, 32);
	PIN(vgpu_ledger_share, count, 96, 32);
}

Test(ledger_abi, tenant)
{
	cr_expect_eq(sizeof(struct vgpu_ledger_tenant), 512);
	PIN(vgpu_ledger_tenant, lock, 0, 4);
	PIN(vgpu_ledger_tenant, state, 4, 4);
	PIN(vgpu_ledger_tenant, mem_limit, 8, 8);
	PIN(vgpu_ledger_tenant, used, 16, 8);
	PIN(vgpu_ledger_tenant, spill_limit, 24, 8);
	PIN(vgpu_ledger_tenant, limit_set_ns, 32, 8);
	PIN(vgpu_ledger_tenant, limit_set_pid, 40, 4);
	PIN(vgpu_ledger_tenant, limit_changes, 44, 4);
	PIN(vgpu_ledger_tenant, turn_since_ns, 48, 8);
	PIN(vgpu_ledger_tenant, key, 56, 8);
	PIN(vgpu_ledger_tenant, name, 64, 64);
	PIN(vgpu_ledger_tenant, usage, 128, 128);
	PIN(vgpu_ledger_tenant, compute, 256, 64);
	PIN(vgpu_ledger_tenant, ctl_changes, 320, 8);
	PIN(vgpu_ledger_tenant, ctl_ns, 328, 8);
	PIN(vgpu_ledger_tenant, ctl_uid, 336, 4);
	PIN(vgpu_ledger_tenant, ctl_pid, 340, 4);
	PIN(vgpu_ledger_tenant, ctl_host_pid, 344, 4);
	PIN(vgpu_ledger_tenant, ctl_fields, 348, 4);
	PIN(vgpu_ledger_tenant, suspended, 352, 4);
	PIN(vgpu_ledger_tenant, reserved0, 356, 4);
	PIN(vgpu_ledger_tenant, opp_queue_ns, 360, 8);
	PIN(vgpu_ledger_tenant, probe, 368, 8);
	PIN(vgpu_ledger_tenant, probe_charged, 376, 8);
	PIN(vgpu_ledger_tenant, probe_need, 384, 8);
	PIN(vgpu_ledger_tenant, probe_beat, 392, 8);
	PIN(vgpu_ledger_tenant, lane, 400, 16);
	PIN(vgpu_ledger_tenant, lane_want, 416, 8);
	PIN(vgpu_ledger_tenant, lane_seq, 424, 4);
	PIN(vgpu_ledger_tenant, lane_sleepers, 428, 4);
	PIN(vgpu_ledger_tenant, reserved, 432, 80);
}

Test(ledger_abi, compute)
{
	cr_expect_eq(sizeof(struct vgpu_ledger_compute), 64);
	PIN(vgpu_ledger_compute, share_pct, 0, 4);
	PIN(vgpu_ledger_compute, policy, 4, 4);
	PIN(vgpu_ledger_compute, turn, 8, 4);
	PIN(vgpu_ledger_compute, flags, 12, 4);
	PIN(vgpu_ledger_compute, tokens_ns, 16, 8);
	PIN(vgpu_ledger_compute, refill_ns, 24, 8);
	PIN(vgpu_ledger_compute, gpu_time_ns, 32, 8);
	PIN(vgpu_ledger_compute, wait_ns, 40, 8);
	PIN(vgpu_ledger_compute, active_ns, 48, 8);
	PIN(vgpu_ledger_compute, turn_ns, 56, 8);
}

Test(ledger_abi, slot)
{
	cr_expect_eq(sizeof(struct vgpu_ledger_slot), 256);
	PIN(vgpu_ledger_slot, state, 0, 4);
	PIN(vgpu_ledger_slot, tenant, 4, 4);
	PIN(vgpu_ledger_slot, generation, 8, 4);
	PIN(vgpu_ledger_slot, pid, 12, 4);
	PIN(vgpu_ledger_slot, host_pid, 16, 4);
	PIN(vgpu_ledger_slot, flags, 20, 4);
	PIN(vgpu_ledger_slot, start_ns, 24, 8);
	PIN(vgpu_ledger_slot, allocs, 32, 8);
	PIN(vgpu_ledger_slot, frees, 40, 8);
	PIN(vgpu_ledger_slot, failures, 48, 8);
	PIN(vgpu_ledger_slot, ctl_acked, 56, 8);
	PIN(vgpu_ledger_slot, usage, 64, 128);
	PIN(vgpu_ledger_slot, launches, 192, 8);
	PIN(vgpu_ledger_slot, launches_throttled, 200, 8);
	PIN(vgpu_ledger_slot, launch_wait_ns, 208, 8);
	PIN(vgpu_ledger_slot, gpu_time_ns, 216, 8);
	PIN(vgpu_ledger_slot, reserved, 224, 32);
}

/* The GPU's timeline of kernel ends, between the header and the tenants
 * (docs/ledger-abi.md, "Timeline"). */
Test(ledger_abi, timeline)
{
	cr_expect_eq(VGPU_LEDGER_TIMELINE_OFFSET, 512);
	cr_expect_eq(VGPU_LEDGER_TIMELINE_ENTRIES, 384);
	PIN(vgpu_ledger_timeline, head, 0, 8);
	PIN(vgpu_ledger_timeline, newest_ns, 8, 8);
	PIN(vgpu_ledger_timeline, late, 16, 8);
	PIN(vgpu_ledger_timeline, reserved, 24, 40);
	PIN(vgpu_ledger_timeline, end_ns, 64, 3072);
}

/* The bits of vgpu_ledger_tenant.ctl_fields, as readers decode them. */
Test(ledger_abi, ctl_fields)
{
	cr_expect_eq(VGPU_LEDGER_CTL_MEMORY, 0x1u);
	cr_expect_eq(VGPU_LEDGER_CTL_COMPUTE, 0x2u);
	cr_expect_eq(VGPU_LEDGER_CTL_POLICY, 0x4u);
	cr_expect_eq(VGPU_LEDGER_CTL_SPILL, 0x8u);
	cr_expect_eq(VGPU_LEDGER_CTL_SUSPEND, 0x10u);
}

/* The bits of vgpu_ledger_slot.flags. */
Test(ledger_abi, slot_flags)
{
	cr_expect_eq(VGPU_LEDGER_SLOT_CONTROL, 0x1u);
	cr_expect_eq(VGPU_LEDGER_SLOT_SUSPENDED, 0x2u);
	cr_expect_eq(VGPU_LEDGER_SLOT_HIP, 0x4u);
}
