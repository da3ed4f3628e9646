/* vgpu.h - libvgpu's public header.
 *
 * What tools and outside readers may depend on: the version and the ledger's
 * ABI (the layout of the shared file <dir>/<gpu-uuid>.v<N>.ledger, one per
 * physical GPU). docs/ledger-abi.md describes every field, the locking and
 * the version policy. The stats layout joins it with the shim.
 *
 * Only fixed-width types, host byte order, natural alignment; every size and
 * offset is pinned below by a _Static_assert, so a reader in another language
 * can use the numbers as they are. Fields marked "under the tenant lock" may
 * be read at any time with a plain aligned 8-byte load (never torn); a set
 * of several fields read that way is not a consistent snapshot.
 */
#ifndef VGPU_H
#define VGPU_H

#include <stddef.h>
#include <stdint.h>

#define VGPU_VERSION_MAJOR 0
#define VGPU_VERSION_MINOR 1
#define VGPU_VERSION_PATCH 0
#define VGPU_VERSION_STRING "0.1.0"

/* ---- the ledger ---------------------------------------------------------- */

/* The layout version: in the file name and the header. A layout change
 * bumps it, so a new version uses a new file and never meets an old one.
 * 3: tenant records found and made lock-free by their key (no join lock). */
#define VGPU_LEDGER_VERSION	3
#define VGPU_LEDGER_MAGIC	UINT64_C(0x4744454C55504756)	/* "VGPULEDG" */
#define VGPU_LEDGER_SUFFIX	".ledger"

#define VGPU_LEDGER_MAX_TENANTS	128
#define VGPU_LEDGER_MAX_SLOTS	1024
#define VGPU_LEDGER_NAME_MAX	64	/* tenant name bytes, with the NUL */
#define VGPU_LEDGER_UUID_MAX	64	/* GPU UUID bytes, with the NUL */
#define VGPU_LEDGER_KIND_SLOTS	16	/* per-kind arrays: room for new kinds */

#define VGPU_LEDGER_HEADER_SIZE	512
#define VGPU_LEDGER_TENANT_SIZE	512
#define VGPU_LEDGER_SLOT_SIZE	256
#define VGPU_LEDGER_TENANTS_OFFSET 4096
#define VGPU_LEDGER_SLOTS_OFFSET \
	(VGPU_LEDGER_TENANTS_OFFSET + \
	 VGPU_LEDGER_MAX_TENANTS * VGPU_LEDGER_TENANT_SIZE)
#define VGPU_LEDGER_SHARES_OFFSET \
	(VGPU_LEDGER_SLOTS_OFFSET + VGPU_LEDGER_MAX_SLOTS * VGPU_LEDGER_SLOT_SIZE)
#define VGPU_LEDGER_SHARES_HEAD	64	/* struct vgpu_ledger_shares */
#define VGPU_LEDGER_SHARE_SIZE	128
#define VGPU_LEDGER_MAX_SHARES	511
#define VGPU_LEDGER_SHARE_HOLDERS 8
#define VGPU_LEDGER_FILE_SIZE	(VGPU_LEDGER_SHARES_OFFSET + 65536)

#define VGPU_LEDGER_UNLIMITED	UINT64_MAX	/* a limit that never refuses */

/* Usage kinds: X(NAME, name, value). Every kind but SPILLED is device
 * memory and counts against the tenant's memory limit; SPILLED is host
 * memory standing in for device memory (overcommit), with its own limit. */
#define VGPU_USAGE_KIND_MAP(X) \
	X(BUFFER, buffer, 0)		/* cuMemAlloc, pitch, async */ \
	X(ARRAY, array, 1)		/* arrays, mipmapped arrays */ \
	X(POOL, pool, 2)		/* what memory pools hold */ \
	X(VMM, vmm, 3)			/* cuMemCreate on the device */ \
	X(GRAPH, graph, 4)		/* graph memory nodes */ \
	X(MULTICAST, multicast, 5)	/* multicast objects */ \
	X(CONTEXT, context, 6)		/* context and module overhead */ \
	X(MANAGED, managed, 7)		/* cuMemAllocManaged */ \
	X(SPILLED, spilled, 8)		/* host memory, not device */

enum vgpu_usage_kind {
#define VGPU_USAGE_ENUM_(NAME, name, value) VGPU_USAGE_##NAME = value,
	VGPU_USAGE_KIND_MAP(VGPU_USAGE_ENUM_)
#undef VGPU_USAGE_ENUM_
	VGPU_USAGE_COUNT = 9
};

#define VGPU_USAGE_IS_DEVICE(kind) ((kind) != VGPU_USAGE_SPILLED)

enum vgpu_ledger_tenant_state {
	VGPU_TENANT_FREE = 0,		/* record unused, or being made */
	VGPU_TENANT_ACTIVE = 1,
};

enum vgpu_ledger_slot_state {
	VGPU_SLOT_FREE = 0,		/* record unused */
	VGPU_SLOT_ACTIVE = 1,		/* owned; alive while its byte is locked */
};

/* At offset 0 of the file. Written once by the creator, read-only after,
 * except `joins` and `opportunistic_ns`. */
struct vgpu_ledger_header {
	uint64_t magic;			/* VGPU_LEDGER_MAGIC: "VGPULEDG" */
	uint32_t layout_version;	/* VGPU_LEDGER_VERSION */
	uint32_t header_size;		/* VGPU_LEDGER_HEADER_SIZE */
	uint64_t file_size;		/* VGPU_LEDGER_FILE_SIZE */
	uint64_t physical_bytes;	/* the GPU's memory */
	uint64_t created_ns;		/* CLOCK_REALTIME at creation */
	uint32_t max_tenants;		/* VGPU_LEDGER_MAX_TENANTS */
	uint32_t max_slots;		/* VGPU_LEDGER_MAX_SLOTS */
	uint32_t tenant_size;		/* VGPU_LEDGER_TENANT_SIZE */
	uint32_t slot_size;		/* VGPU_LEDGER_SLOT_SIZE */
	uint32_t tenants_offset;	/* VGPU_LEDGER_TENANTS_OFFSET */
	uint32_t slots_offset;		/* VGPU_LEDGER_SLOTS_OFFSET */
	uint32_t kind_count;		/* VGPU_USAGE_COUNT when created */
	uint32_t kind_slots;		/* VGPU_LEDGER_KIND_SLOTS */
	uint64_t joins;			/* processes joined so far (a counter) */
	char gpu_uuid[VGPU_LEDGER_UUID_MAX];	/* NUL-terminated */
	uint32_t shares_offset;		/* VGPU_LEDGER_SHARES_OFFSET */
	uint32_t max_shares;		/* VGPU_LEDGER_MAX_SHARES */
	uint32_t share_size;		/* VGPU_LEDGER_SHARE_SIZE */
	uint32_t share_holders;		/* VGPU_LEDGER_SHARE_HOLDERS */
	/* CLOCK_MONOTONIC of the last time an opportunistic tenant of this
	 * GPU asked to launch (coarse: moved by 1 ms or more); 0 never.
	 * Guaranteed tenants watch it (docs/compute.md). */
	uint64_t opportunistic_ns;
	uint64_t reserved[43];		/* zero */
};

/* vgpu_ledger_compute.policy: the values of VGPU_COMPUTE_POLICY. */
enum vgpu_ledger_policy {
	VGPU_LEDGER_POLICY_HARD = 0,		/* never above the share */
	VGPU_LEDGER_POLICY_ELASTIC = 1,		/* idle time lent out */
	VGPU_LEDGER_POLICY_OFF = 2,		/* not enforced */
	VGPU_LEDGER_POLICY_OPPORTUNISTIC = 3,	/* only time no guaranteed
						 * tenant wants */
};

/* The compute throttle's per-tenant state (vgpu/throttle.c, docs/compute.md):
 * every field is changed with single atomic operations, never under a lock. */
struct vgpu_ledger_compute {
	uint32_t share_pct;		/* 0: no compute limit; 1..100 */
	uint32_t policy;		/* enum vgpu_ledger_policy */
	uint32_t turn;			/* slot index + 1 of a starved waiter; 0 none */
	uint32_t flags;
	int64_t tokens_ns;		/* token bucket: GPU time available */
	uint64_t refill_ns;		/* CLOCK_MONOTONIC of the last refill */
	uint64_t gpu_time_ns;		/* GPU time used, total */
	uint64_t wait_ns;		/* time launches waited, total */
	uint64_t active_ns;		/* active until (CLOCK_MONOTONIC); 0 never */
	uint64_t turn_ns;		/* when `turn` was last claimed */
};

/* One tenant (VGPU_TENANT): a container, a user, a job. */
struct vgpu_ledger_tenant {
	uint32_t lock;			/* internal lock word, 0 when free */
	uint32_t state;			/* enum vgpu_ledger_tenant_state */
	uint64_t mem_limit;		/* device bytes; VGPU_LEDGER_UNLIMITED */
	uint64_t used;			/* device kinds' sum (under the lock) */
	uint64_t spill_limit;		/* host bytes for SPILLED */
	uint64_t limit_set_ns;		/* CLOCK_REALTIME of the last set */
	int32_t limit_set_pid;		/* pid (own namespace) that set it */
	uint32_t limit_changes;		/* times a joiner changed the limit */
	uint64_t turn_since_ns;		/* when compute.turn's holder began waiting */
	/* The record's key (docs/ledger-abi.md, "Joining"): 0 free; else the
	 * name's hash (FNV-1a, 0 read as 1) in the low 32 bits and, in the
	 * high 32, 0 once the record is ready or, while a process makes it,
	 * that process's owner word (as in `lock`). Changed by CAS only. */
	uint64_t key;
	char name[VGPU_LEDGER_NAME_MAX];	/* NUL-terminated */
	uint64_t usage[VGPU_LEDGER_KIND_SLOTS];	/* bytes per kind (lock) */
	struct vgpu_ledger_compute compute;
	/* The last change an administrator made (vgpu-ctl, docs/control.md),
	 * written under the tenant lock with ctl_changes last (release):
	 * all zero until the first. Zero in files made before these fields
	 * were named (they were reserved and zeroed). */
	uint64_t ctl_changes;		/* changes made so far */
	uint64_t ctl_ns;		/* CLOCK_REALTIME of the last, ns */
	uint32_t ctl_uid;		/* its maker's real uid */
	int32_t ctl_pid;		/* its pid (own namespace) */
	int32_t ctl_host_pid;		/* its pid on the host; 0: the same */
	uint32_t ctl_fields;		/* VGPU_LEDGER_CTL_* it set */
	/* 1 while an administrator has the tenant suspended (vgpu-ctl
	 * suspend; 0 after resume), set under the lock with a change. */
	uint32_t suspended;
	uint32_t reserved0;
	/* An opportunistic tenant's queued work ends here (CLOCK_MONOTONIC,
	 * ns; the throttle's model of it, all its processes together). */
	uint64_t opp_queue_ns;
	/* A launch with no estimate in any process of the tenant (a
	 * process's first, the probe) is in flight, not read yet (0: none):
	 * its holder slot's owner word in the high 32 bits (as in `lock`),
	 * the CLOCK_MONOTONIC milliseconds it went in the low 32. The
	 * tenant's other first launches wait for it while its holder lives,
	 * up to 2 s. Changed by compare-and-swap only. */
	uint64_t probe;
	/* The last probe retired unread (its holder died, or 2 s passed):
	 * 32 bits identifying its `probe` word in the high 32, and in the low
	 * 32 what its retirer charged the tenant for it, in us (the time
	 * since it went). Its own process, if it reads it after all, charges
	 * only the rest. */
	uint64_t probe_charged;
	/* What the tenant's last launch with an estimate needed in the bucket
	 * (its estimate, at most the burst; ns): a launch of no known length
	 * needs as much, so that it goes no nearer the launch before it than
	 * a known one would. Stored only when it changes. */
	uint64_t probe_need;
	/* CLOCK_MONOTONIC ns when the probe's process last showed that it
	 * watches its probe (at its start, then about every millisecond
	 * while it runs): one that stops showing it (a process stopped or
	 * frozen) holds the tenant's known launches no longer. */
	uint64_t probe_beat;
	/* The tenant's lanes (docs/compute.md, "Lanes"): a capped launch
	 * in flight holds one from its admission until its end is read, so
	 * that the tenant's processes together keep at most two launches of
	 * unknown length in flight. 0: free; else the holder slot's owner
	 * word (as in `lock`) in the high 32 bits and, in the low 32, the
	 * holder's tag (8 bits: which of its process's launches) over the
	 * CLOCK_MONOTONIC milliseconds (24 bits, wrapping) its process last
	 * showed that it watches the launch (taken over once that is 50 ms
	 * old). Changed by compare-and-swap only. */
	uint64_t lane[2];
	/* CLOCK_MONOTONIC ns when a process last waited for a lane: the
	 * holders then read their ended launches without waiting for the
	 * threads that made them. */
	uint64_t lane_want;
	/* Lanes given back so far (wrapping), a futex word the waiters of
	 * the tenant's processes sleep on; and how many sleep now. */
	uint32_t lane_seq;
	uint32_t lane_sleepers;
	uint64_t reserved[10];
};

/* Which terms a change set (vgpu_ledger_tenant.ctl_fields). */
#define VGPU_LEDGER_CTL_MEMORY	0x1u	/* mem_limit */
#define VGPU_LEDGER_CTL_COMPUTE	0x2u	/* compute.share_pct */
#define VGPU_LEDGER_CTL_POLICY	0x4u	/* compute.policy */
#define VGPU_LEDGER_CTL_SPILL	0x8u	/* spill_limit */
#define VGPU_LEDGER_CTL_SUSPEND	0x10u	/* suspended (suspend, resume) */

/* A process slot's flags (vgpu_ledger_slot.flags). */
#define VGPU_LEDGER_SLOT_CONTROL	0x1u	/* watches for suspension */
#define VGPU_LEDGER_SLOT_SUSPENDED	0x2u	/* holds its launches, memory
						 * moved to the host */
#define VGPU_LEDGER_SLOT_HIP		0x4u	/* joined by libvgpu-hip.so
						 * (HIP); clear: libvgpu.so */

/* One process's share of one GPU. */
struct vgpu_ledger_slot {
	uint32_t state;			/* enum vgpu_ledger_slot_state */
	uint32_t tenant;		/* index into the tenants */
	uint32_t generation;		/* bumped at each claim */
	int32_t pid;			/* getpid() of the owner */
	int32_t host_pid;		/* pid on the host; 0: not known */
	uint32_t flags;			/* VGPU_LEDGER_SLOT_* (atomic) */
	uint64_t start_ns;		/* CLOCK_REALTIME at join */
	uint64_t allocs;		/* successful reservations */
	uint64_t frees;			/* releases */
	uint64_t failures;		/* reservations refused over a limit */
	/* The tenant's ctl_changes whose suspension state this process
	 * has carried out (flags' SUSPENDED says which): written by
	 * processes watching for suspension (VGPU_LEDGER_SLOT_CONTROL). */
	uint64_t ctl_acked;
	uint64_t usage[VGPU_LEDGER_KIND_SLOTS];	/* bytes per kind (lock) */
	uint64_t launches;		/* reserved for the launch counters */
	uint64_t launches_throttled;
	uint64_t launch_wait_ns;
	uint64_t gpu_time_ns;		/* GPU time its launches were charged */
	uint64_t reserved[4];
};

/* The GPU's recent kernel completions, in the unused bytes between the
 * header and the tenants (offset VGPU_LEDGER_TIMELINE_OFFSET): the compute
 * throttle charges a launch only for the part of its measured interval that
 * no launch completing before it (of any tenant) covers, since one GPU runs
 * one context's kernels at a time. A ring, written lock-free. */
#define VGPU_LEDGER_TIMELINE_OFFSET	512
#define VGPU_LEDGER_TIMELINE_ENTRIES	384

struct vgpu_ledger_timeline {
	uint64_t head;			/* completions recorded (atomic) */
	uint64_t newest_ns;		/* the latest end recorded (atomic) */
	uint64_t late;			/* ends recorded after a later one
					 * (atomic): a reader's result stands
					 * while this does not change */
	uint64_t reserved[5];
	uint64_t end_ns[VGPU_LEDGER_TIMELINE_ENTRIES];	/* CLOCK_MONOTONIC */
};

/* Memory shared between processes (CUDA IPC, exported VMM handles), at
 * VGPU_LEDGER_SHARES_OFFSET: charged once, to one holder's slot (the payer:
 * the exporter first), whoever else holds it; when the payer lets go or
 * dies while others hold it, the charge moves to one of them
 * (docs/memory.md). Changed under the shares lock, an OFD lock on the
 * region's first byte. */
struct vgpu_ledger_shares {
	uint32_t in_use;		/* records with a key (under the lock) */
	uint32_t reserved0;
	uint64_t moves;			/* charges moved to another holder */
	uint64_t reserved[6];
};

struct vgpu_ledger_share {
	uint64_t key[2];		/* the memory's identity; 0,0: free */
	uint64_t bytes;			/* charged to the payer */
	uint32_t kind;			/* the usage kind charged */
	uint32_t payer;			/* holders[] index + 1; 0: none */
	uint32_t slot[VGPU_LEDGER_SHARE_HOLDERS];	/* index + 1; 0 free */
	uint32_t gen[VGPU_LEDGER_SHARE_HOLDERS];	/* the slot's generation */
	uint32_t count[VGPU_LEDGER_SHARE_HOLDERS];	/* its holds */
};

/* ---- the layout, pinned -------------------------------------------------- */

#define VGPU_LEDGER_PIN_(type, field, off, size) \
	_Static_assert(offsetof(type, field) == (off), \
		       #type "." #field " offset"); \
	_Static_assert(sizeof(((type *)0)->field) == (size), \
		       #type "." #field " size")

_Static_assert(sizeof(struct vgpu_ledger_header) == VGPU_LEDGER_HEADER_SIZE,
	       "header size");
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, magic, 0, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, layout_version, 8, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, header_size, 12, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, file_size, 16, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, physical_bytes, 24, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, created_ns, 32, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, max_tenants, 40, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, max_slots, 44, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, tenant_size, 48, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, slot_size, 52, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, tenants_offset, 56, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, slots_offset, 60, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, kind_count, 64, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, kind_slots, 68, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, joins, 72, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, gpu_uuid, 80, 64);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, shares_offset, 144, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, max_shares, 148, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, share_size, 152, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, share_holders, 156, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, opportunistic_ns, 160, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_header, reserved, 168, 344);

_Static_assert(sizeof(struct vgpu_ledger_shares) == VGPU_LEDGER_SHARES_HEAD,
	       "shares head size");
_Static_assert(sizeof(struct vgpu_ledger_share) == VGPU_LEDGER_SHARE_SIZE,
	       "share size");
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, key, 0, 16);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, bytes, 16, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, kind, 24, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, payer, 28, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, slot, 32, 32);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, gen, 64, 32);
VGPU_LEDGER_PIN_(struct vgpu_ledger_share, count, 96, 32);

_Static_assert(sizeof(struct vgpu_ledger_compute) == 64, "compute size");
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, share_pct, 0, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, policy, 4, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, turn, 8, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, flags, 12, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, tokens_ns, 16, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, refill_ns, 24, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, gpu_time_ns, 32, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, wait_ns, 40, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, active_ns, 48, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_compute, turn_ns, 56, 8);

_Static_assert(sizeof(struct vgpu_ledger_tenant) == VGPU_LEDGER_TENANT_SIZE,
	       "tenant size");
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, lock, 0, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, state, 4, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, mem_limit, 8, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, used, 16, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, spill_limit, 24, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, limit_set_ns, 32, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, limit_set_pid, 40, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, limit_changes, 44, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, turn_since_ns, 48, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, key, 56, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, name, 64, 64);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, usage, 128, 128);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, compute, 256, 64);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_changes, 320, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_ns, 328, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_uid, 336, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_pid, 340, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_host_pid, 344, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, ctl_fields, 348, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, suspended, 352, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, reserved0, 356, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, opp_queue_ns, 360, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, probe, 368, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, probe_charged, 376, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, probe_need, 384, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, probe_beat, 392, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, lane, 400, 16);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, lane_want, 416, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, lane_seq, 424, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, lane_sleepers, 428, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_tenant, reserved, 432, 80);

_Static_assert(sizeof(struct vgpu_ledger_slot) == VGPU_LEDGER_SLOT_SIZE,
	       "slot size");
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, state, 0, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, tenant, 4, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, generation, 8, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, pid, 12, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, host_pid, 16, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, flags, 20, 4);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, start_ns, 24, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, allocs, 32, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, frees, 40, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, failures, 48, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, ctl_acked, 56, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, usage, 64, 128);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, launches, 192, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, launches_throttled, 200, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, launch_wait_ns, 208, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, gpu_time_ns, 216, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_slot, reserved, 224, 32);

_Static_assert(VGPU_LEDGER_HEADER_SIZE <= VGPU_LEDGER_TENANTS_OFFSET,
	       "header fits before the tenants");
_Static_assert(sizeof(struct vgpu_ledger_timeline) == 3136, "timeline size");
_Static_assert(VGPU_LEDGER_TIMELINE_OFFSET >= VGPU_LEDGER_HEADER_SIZE &&
	       VGPU_LEDGER_TIMELINE_OFFSET +
	       sizeof(struct vgpu_ledger_timeline) <= VGPU_LEDGER_TENANTS_OFFSET,
	       "the timeline fits between the header and the tenants");
VGPU_LEDGER_PIN_(struct vgpu_ledger_timeline, head, 0, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_timeline, newest_ns, 8, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_timeline, late, 16, 8);
VGPU_LEDGER_PIN_(struct vgpu_ledger_timeline, end_ns, 64, 3072);
_Static_assert(VGPU_LEDGER_SLOTS_OFFSET == 69632, "slots offset");
_Static_assert(VGPU_LEDGER_SHARES_OFFSET == 331776, "shares offset");
_Static_assert(VGPU_LEDGER_SHARES_HEAD + VGPU_LEDGER_MAX_SHARES *
	       VGPU_LEDGER_SHARE_SIZE <= 65536, "shares fit");
_Static_assert(VGPU_LEDGER_FILE_SIZE == 397312, "file size");
_Static_assert(VGPU_USAGE_COUNT <= VGPU_LEDGER_KIND_SLOTS, "kinds fit");
_Static_assert(VGPU_USAGE_SPILLED == VGPU_USAGE_COUNT - 1, "kinds dense");

#endif
