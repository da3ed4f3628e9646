/* state_internal.h - one simulated device's state file, shared by every
 * process using the device, and what state.c, state_shared.c and
 * state_engine.c share about it.
 *
 * The rule of the file: no process waits for another. Nothing in it is a
 * lock that a process could hold while stopped (SIGSTOP, a debugger, a
 * cgroup freezer) or die holding:
 *
 *   - the file is built complete under a temporary name and link()ed into
 *     place (state.c), so nobody waits for its set-up;
 *   - a slot is a process's: only its owner writes its fields, with atomic
 *     operations; its owner holds an open-file-description lock on the
 *     slot's byte for its life (never waited for: F_OFD_SETLK, F_OFD_GETLK),
 *     and any process may mark a dead owner's slot free with one
 *     compare-and-swap of `claimed`;
 *   - the memory in use is not stored: it is the claimed slots' `used` and
 *     the live shared objects' sizes, summed when needed, so that a slot
 *     going (its owner died or left) takes exactly its bytes with it;
 *     reserving is "add to one's own slot, then sum" (state.c);
 *   - a shared object's state is one word changed by compare-and-swap, and
 *     any process may finish another's half-done change (state_shared.c);
 *   - the engine's queue passes the turn of a dead, stopped or silent
 *     process on, and a kernel's hold of SMs ends at its deadline whatever
 *     its process does (state_engine.c).
 *
 * Sums are read slots first, shared objects second; writers that move
 * bytes between them publish the object before they take the bytes from
 * the slot. So a sum never misses bytes in use (it may count bytes being
 * moved twice, for an instant, or those of a reservation being decided).
 */
#ifndef VGPU_SIM_STATE_INTERNAL_H
#define VGPU_SIM_STATE_INTERNAL_H

#include "sim.h"

#define STATE_MAGIC 0x5441545350475656ull     /* "VVGPSTAT" */
#define STATE_VERSION 6u
#define STATE_SLOTS 256
#define STATE_RING 4096
#define STATE_SHARED 512                       /* shared objects at a time */
#define HOLDER_WORDS (STATE_SLOTS / 64)
#define STATE_HOLDS 2048                       /* kernels holding SMs at once */
#define STATE_RECORD 65536                     /* intervals kept (a power of 2) */

struct state_slot {
	_Atomic uint32_t claimed;      /* 0 free; else the claim's generation,
					* unique in the file */
	_Atomic int32_t pid;
	_Atomic uint64_t used;         /* bytes it holds, with those of its
					* reservations being decided */
	_Atomic uint64_t inflight;     /* those */
	_Atomic uint32_t first_ticket; /* next_ticket when claimed: older
					* tickets naming this slot were a dead
					* owner's */
	uint32_t pad;
	uint64_t pidns_ino, pidns_dev; /* its pid namespace: stop checks read
					* /proc only in the same one */
	_Atomic uint64_t busy_ns;      /* SM-weighted device time of its
					* kernels, added as it ends them */
	_Atomic uint64_t kernels;
};

/* A kernel's hold of SMs (state_engine.c). Its word is everything others
 * act on: 0 free; else a state in the low 2 bits and a value above. The
 * fields are written while it is reserved, before it holds anything, and
 * read relaxed (hold_read): a copy counts only if the word still says, at
 * the next compare-and-swap, what it said before the copy. */
struct state_hold {
	_Atomic uint64_t word;
	_Atomic uint64_t start_ns;     /* moved once, past the admission's
					* hand-off */
	_Atomic uint64_t ctx_id;
	_Atomic int32_t pid, tid;      /* the holder's process and thread */
	_Atomic uint32_t slot, sms;
};

/* One interval of the record: seq is its index + 1 once written, and 0
 * while it is written (a seqlock per entry). */
struct state_interval {
	_Atomic uint64_t seq;
	_Atomic uint64_t start_ns, end_ns, ctx_id;
	_Atomic int32_t pid;
	_Atomic uint32_t slot, sms;
	uint32_t pad;
};

/* A shared object (IPC): memory held by one or more processes, counted once
 * (state_shared.c). Its word says whether it is free, being made, live or
 * being freed; the other fields are written while it is made, before the
 * word says live, and do not change while it is. */
struct state_shared {
	_Atomic uint64_t word;
	uint64_t size;                 /* bytes counted on the device */
	uint64_t asked;                /* legacy IPC: the size cuMemAlloc got */
	uint64_t ino, fsdev;           /* the memfd's identity (fstat) */
	uint32_t kind;                 /* enum vsim_shared_kind */
	_Atomic int32_t exporter_slot; /* legacy IPC: -1 once it let go */
	uint32_t exporter_claim;       /* that slot's claim when it exported */
	int32_t exporter_pid;          /* where importers reopen the memfd: */
	int32_t exporter_fd;           /* /proc/<pid>/fd/<fd> */
	uint32_t pad;
	CUmemAllocationProp prop;      /* VMM: the exported handle's */
	_Atomic uint64_t holders[HOLDER_WORDS];  /* the slots holding it */
};

struct state_file {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	_Atomic uint64_t capacity;
	_Atomic uint32_t sm_total;     /* the engine's SMs */
	_Atomic uint32_t slots_hi;     /* no slot at or above was ever claimed */
	_Atomic uint32_t claims;       /* the last claim's generation */
	_Atomic uint32_t shared_hi;    /* no object at or above was ever made */
	_Atomic uint32_t next_ticket;
	_Atomic uint32_t serving;      /* futex word */
	_Atomic uint32_t sm_released;  /* futex word: bumped when SMs return */
	_Atomic uint32_t holds_hi;     /* no hold at or above was ever used */
	_Atomic uint64_t head_beat;    /* the head of the queue's last sign of
					* life (CLOCK_MONOTONIC) */
	_Atomic uint64_t ring[STATE_RING];   /* ticket << 32 | slot */
	struct state_slot slots[STATE_SLOTS];
	/* Shared objects (state_shared.c). */
	_Atomic uint64_t shared_next_id;
	struct state_shared shared[STATE_SHARED];
	/* The engine's holds and the record (state_engine.c). */
	struct state_hold holds[STATE_HOLDS];
	_Atomic uint64_t rec_next;     /* intervals ever recorded */
	_Atomic uint64_t rec_lost_end; /* latest end of one overwritten */
	_Atomic uint64_t last_end;     /* latest end of any hold ended (or
					* about to be): no kernel starts
					* before it on the device's clock */
	struct state_interval record[STATE_RECORD];
};

/* This process's holds of one shared object (it may hold it several times:
 * an allocation and an import, two imported handles...). */
struct shared_hold {
	uint64_t id;
	int refs;
};

/* A device as this process sees it: its mapping, its slot (-1 when it only
 * reads the file), the shared objects it holds (guarded by
 * vsim_shared_lock, process-private). */
struct dev_state {
	int fd;
	struct state_file *sh;
	int slot;
	uint32_t claim;
	struct shared_hold *holds;
	size_t nholds, holds_cap;
};

/* Raises a high-water mark to at least v. */
static inline void vsim_raise_to(_Atomic uint32_t *hi, uint32_t v)
{
	uint32_t was = atomic_load(hi);

	while (was < v && !atomic_compare_exchange_weak(hi, &was, v))
		;
}

/* ---- state.c ------------------------------------------------------------- */

extern struct dev_state vsim_states[VSIM_MAX_DEVICES];
/* True when slot's owner lives (this process, or another holding the
 * slot's lock). One system call. */
bool vsim_slot_alive(const struct dev_state *d, int slot);
/* Marks the slots of dead processes free (their memory leaves the device)
 * and frees the shared objects nobody holds any more. */
void vsim_reclaim_dead(struct dev_state *d);
/* Maps <dir>/dev<ordinal>.state into d without claiming a slot: 0; -1 when
 * it cannot be opened (errno says why); 1 when it is no state file of this
 * version. */
int vsim_state_peek_open(const char *dir, int ordinal, struct dev_state *d);
void vsim_state_peek_close(struct dev_state *d);

/* ---- state_shared.c ------------------------------------------------------ */

/* Guards every dev_state's holds in this process (never another's). */
extern pthread_mutex_t vsim_shared_lock;
/* Bytes of the live shared objects. */
uint64_t vsim_shared_total(struct state_file *sh);
/* Frees the objects no live process holds; forgets those being made by
 * processes gone. */
void vsim_shared_sweep(struct state_file *sh);
/* Clears slot's holds of every object (its previous owner's), before the
 * slot is claimed anew. */
void vsim_shared_forget_slot(struct state_file *sh, int slot);
/* Lets go of every object this process holds on d (its exit). */
void vsim_shared_detach(struct dev_state *d);
/* The process no longer uses d's file (exit, or a forked child's copy). */
void vsim_shared_forget(struct dev_state *d);
/* The first id of a new file's objects. */
uint64_t vsim_shared_first_id(void);

/* ---- state_engine.c ------------------------------------------------------ */

/* This process's pid namespace (0, 0 when unknown). */
void vsim_pidns_self(uint64_t *ino, uint64_t *dev);
/* A forked child forgets the forking thread's cached thread id. */
void vsim_engine_forget(void);

#endif
