/* throttle.h - the compute share: a token bucket of GPU time per tenant and
 * GPU, kept in the tenant's compute block of the ledger and shared by all
 * the tenant's processes. docs/compute.md describes the design.
 *
 * Internal to the core (vgpu/). Pure accounting: no driver calls, no
 * sleeping, no system calls, no locks. The shim measures each launch's GPU
 * time (events) and does the sleeping; this decides and keeps the books.
 *
 * The protocol for every capped launch:
 *   while ((wait = vgpu_throttle_admit(s, now, estimate)) != 0)
 *           sleep `wait` ns holding nothing, then ask again with a new now;
 *   if it waited: vgpu_throttle_waited(s, total time waited);
 *   launch; later, once its GPU time is known:
 *   vgpu_throttle_settle(s, measured, estimate)   (exactly once per admit;
 *   a launch that failed settles with measured = 0, which refunds it).
 * A first reading of the GPU time may correct the charge before the final
 * one: vgpu_throttle_correct(s, estimate, first); then
 * vgpu_throttle_settle(s, measured, first).
 *
 * Clock: every now_ns is CLOCK_MONOTONIC in ns (one clock for all the
 * processes of a host); a tenant's callers must use the same clock. 0 is
 * never a valid time (it means "never" in active_ns).
 *
 * Threads and processes: every function may be called from any number of
 * threads and processes at once. Each step is a single atomic operation on
 * the ledger, so a process killed anywhere leaves the bucket usable (at
 * worst it loses one refill interval's tokens or keeps one charge).
 */
#ifndef VGPU_THROTTLE_H
#define VGPU_THROTTLE_H

#include <stdbool.h>
#include <stdint.h>

struct vgpu_slot;

/* The most GPU time the bucket holds (what an idle tenant may use at once
 * at full speed), and the largest estimate that has to fit in the bucket
 * before a launch goes: a longer launch goes on a full bucket and leaves
 * the rest as debt. */
#define VGPU_THROTTLE_BURST_NS		20000000ll	/* 20 ms */
/* Elastic: a tenant counts as active for this long after its last admitted
 * launch, or after the end of the wait it was last told. */
#define VGPU_THROTTLE_ACTIVE_NS		50000000ull	/* 50 ms */
/* The longest wait admit returns (the caller asks again after it). */
#define VGPU_THROTTLE_MAX_WAIT_NS	100000000ull	/* 100 ms */
/* Granularity of the active stamp on the admitted path. */
#define VGPU_THROTTLE_STAMP_NS		1000000ull	/* 1 ms */
/* Tokens accrue per this much wall time: share_pct ns every 100 ns. */
#define VGPU_THROTTLE_STEP_NS		100ull
/* A refill_ns or active_ns further ahead of now than this comes from
 * another boot (a ledger file kept on disk): the bucket restarts from now
 * and the stamp is ignored. Far larger than any wait admit returns, and
 * than a caller's `now` can be stale (read, then preempted): a caller
 * stopped longer than this with a `now` in hand moves the refill back and
 * so gives the tenant at most one burst. */
#define VGPU_THROTTLE_CLOCK_SKEW_NS	60000000000ull	/* 60 s */
/* Turns among a tenant's processes (throttle.c): a process that has
 * waited this long gets the next admission; a turn not claimed again for
 * TURN_NS is stale; the others are told to wait TURN_WAIT_NS at a time. */
#define VGPU_THROTTLE_STARVE_NS		50000000ull	/* 50 ms */
#define VGPU_THROTTLE_TURN_NS		100000000ull	/* 100 ms */
#define VGPU_THROTTLE_TURN_WAIT_NS	1000000ull	/* 1 ms */
/* Opportunistic: a launch waits while a guaranteed tenant that wants the
 * whole GPU (uncapped or elastic) was active within this window; a
 * guaranteed process publishes its activity while an opportunistic
 * tenant asked to launch within LINGER_NS (docs/compute.md). */
#define VGPU_THROTTLE_OPP_WINDOW_NS	50000000ull	/* 50 ms */
#define VGPU_THROTTLE_OPP_LINGER_NS	1000000000ull	/* 1 s */
/* An opportunistic tenant's queued work, all its threads and processes
 * together (its estimates, tenant.opp_queue_ns), and how often it asks
 * again while a hard-capped neighbour runs. */
#define VGPU_THROTTLE_OPP_QUEUE_NS	4000000ull	/* 4 ms */
#define VGPU_THROTTLE_OPP_POLL_NS	500000ull	/* 0.5 ms */
/* A probe (vgpu_throttle_probe_begin) whose holder lives is retired after
 * this long unread (its kernel may run as long, or its holder stopped or
 * computes without reading it): charged this much, a kernel longer than
 * it escapes by the rest until read. Its holder's death is looked for
 * from PROBE_DEAD_NS on. */
#define VGPU_THROTTLE_PROBE_HOLD_NS	2000000000ull	/* 2 s */
#define VGPU_THROTTLE_PROBE_DEAD_NS	50000000ull	/* 50 ms */
/* A single charge or measurement larger than this is taken as this. */
#define VGPU_THROTTLE_MAX_CHARGE_NS	(1ull << 42)	/* ~73 minutes */

/* Sets the compute share of the slot's tenant on this GPU: share_pct
 * 1..99 caps it; 0 or 100 means no cap. policy: VGPU_POLICY_HARD (never
 * above the share), VGPU_POLICY_ELASTIC (the share is guaranteed; a tenant
 * alone on the GPU gets all of it), VGPU_POLICY_OFF (no cap) or
 * VGPU_POLICY_OPPORTUNISTIC (only time no guaranteed tenant wants; with a
 * share, never above it either), from vgpu/options.h. The most recent caller's settings apply to the whole
 * tenant; the shim passes the tenant's own terms (set by its first
 * process, as the memory limit is: vgpu_ledger_join_terms), so a later
 * process does not change them. When they differ from the tenant's
 * current ones, the bucket restarts empty at now_ns (so a cap applies from
 * the first launch); when they are the same (another process of the tenant
 * joining) the bucket is left as it is. Returns 0, or VGPU_LEDGER_EINVAL
 * for a share above 100 or an unknown policy, changing nothing. */
int vgpu_throttle_configure(struct vgpu_slot *s, unsigned share_pct,
			    int policy, uint64_t now_ns);

/* Admission of one launch at now_ns, whose GPU time is estimated at
 * estimate_ns (0: unknown). Returns 0: go now; the estimate has been
 * charged to the bucket and the slot's `launches` counted. Otherwise the
 * number of ns (1..VGPU_THROTTLE_MAX_WAIT_NS) to sleep, holding nothing,
 * before asking again; nothing was charged.
 * A launch goes when the bucket holds at least min(estimate, burst) (so a
 * known length never overdraws it); uncapped tenants always go.
 * Elastic: a launch that does not fit still goes when no other
 * guaranteed (not opportunistic) tenant of this GPU has been active within
 * VGPU_THROTTLE_ACTIVE_NS; then the bucket is set to 0, so no debt is kept
 * for lent time.
 * Opportunistic: stamps the GPU's opportunistic_ns, then waits (nothing
 * charged) while another tenant that is uncapped or elastic was active
 * within VGPU_THROTTLE_OPP_WINDOW_NS (the wait: until the last one's
 * window ends); else goes as an uncapped tenant, or, with a share, as a
 * hard one. Reads the other tenants' records (at most
 * VGPU_LEDGER_MAX_TENANTS) on every admission.
 * The go path is O(1): a few atomic operations on the tenant's block, no
 * system call; only the elastic not-fitting path reads the other tenants'
 * records (at most VGPU_LEDGER_MAX_TENANTS). */
uint64_t vgpu_throttle_admit(struct vgpu_slot *s, uint64_t now_ns,
			     uint64_t estimate_ns);

/* As vgpu_throttle_admit, for a caller, thread `thread` of its process (a
 * tag of 21 bits, 0 for all the same), that has been waiting waiting_ns
 * for this launch already: past VGPU_THROTTLE_STARVE_NS it takes the
 * tenant's turn, and the tenant's other processes and threads wait until
 * it is admitted (so a thread launching back to back cannot starve
 * another, of its process or another of its tenant). */
uint64_t vgpu_throttle_admit_waiting(struct vgpu_slot *s, uint32_t thread,
				     uint64_t now_ns,
				     uint64_t estimate_ns, uint64_t waiting_ns);

/* As vgpu_throttle_admit_waiting, for a launch admitted beside work of the
 * tenant whose length is not charged yet (held_ns of it so far: the
 * tenant's probe as it runs, vgpu_throttle_probe_running): it goes only
 * when the bucket holds held_ns more than it needs. A probe of 300 ms and
 * a 300 ms kernel admitted beside it ran in one second under a 30% cap
 * (four processes of one tenant starting at once: a window of 60%). */
uint64_t vgpu_throttle_admit_held(struct vgpu_slot *s, uint32_t thread,
				  uint64_t now_ns, uint64_t estimate_ns,
				  uint64_t waiting_ns, uint64_t held_ns);

/* Settles an admitted launch: measured_ns is the GPU time it really took
 * (0 if it never ran), estimate_ns exactly what admit was given for it.
 * Charges the difference to the bucket and adds measured_ns to the
 * tenant's compute.gpu_time_ns. */
void vgpu_throttle_settle(struct vgpu_slot *s, uint64_t measured_ns,
			  uint64_t estimate_ns);

/* Brings s's bucket up to now_ns (what accrued since its last refill,
 * up to the burst), as an admission that does not fit does: called before
 * a charge larger than what was admitted (vgpu_throttle_correct,
 * _settle). The refill is lazy, so a debt charged after a pause without
 * admissions was offset by the pause's whole accrual at the next refill:
 * a process's second long kernel after its first, read after 600 ms of
 * its tenant waiting, went at once (a hostile review's gated kernels).
 * One load when refilled lately. */
void vgpu_throttle_refill(struct vgpu_slot *s, uint64_t now_ns);

/* Moves an admitted launch's charge from charged_ns (what the bucket was
 * charged for it so far) to now_ns, counting nothing: a refund may not fill
 * the bucket past the burst. Settle it later with now_ns as its estimate. */
void vgpu_throttle_correct(struct vgpu_slot *s, uint64_t charged_ns,
			   uint64_t now_ns);

/* The tenant's probe: a launch with no estimate anywhere (a process's
 * first) is admitted on any bucket not in debt, so the tenant's first
 * launches go one at a time, across its processes, each charged its
 * measured length before the next goes (eight processes starting at once
 * otherwise ran eight kernels side by side under a 30% cap). At now_ns,
 * after its admission, s's process asks for it:
 *   TAKEN:   none is in flight; it is s's now, *probe its word, until
 *            vgpu_throttle_probe_end(s, *probe) once read;
 *   BUSY:    another is in flight; ask again later;
 *   RETIRED: the one in flight was not read while its holder lived and
 *            PROBE_HOLD_NS passed, or its holder died (seen from
 *            PROBE_DEAD_NS on): it is retired, and the tenant charged the
 *            time since it went (as if it ran all along); ask again after
 *            a new admission.
 * One load, a compare-and-swap to take or retire it, and past
 * PROBE_DEAD_NS a test of the holder's slot lock (a system call). */
enum {
	VGPU_THROTTLE_PROBE_BUSY,
	VGPU_THROTTLE_PROBE_TAKEN,
	VGPU_THROTTLE_PROBE_RETIRED,
};
int vgpu_throttle_probe_begin(struct vgpu_slot *s, uint64_t now_ns,
			      uint64_t *probe);
/* What a retirer charged for probe (its word), in ns (0: not retired, or
 * another retirement since): its own process counts it as charged
 * already, when it reads it. */
uint64_t vgpu_throttle_probe_charged(struct vgpu_slot *s, uint64_t probe);
/* The probe was read: the next may go (nothing if it was retired
 * meanwhile). */
void vgpu_throttle_probe_end(struct vgpu_slot *s, uint64_t probe);
/* What a launch of no known length (estimate 0) needs in the bucket, as
 * held_ns of vgpu_throttle_admit_held: what the tenant's last launch with
 * an estimate needed (the tenant record's probe_need, at most the burst;
 * 0 before any). Going on a bucket at 0, a process's first 100 ms kernel
 * went 66 ms nearer the known one before it than a known one would (a
 * window of 33.3% under 30%); waiting for the whole burst instead kept
 * every new process of a busy tenant 66 ms at 30%, and left the burst it
 * waited for to be spent after it (windows 2 points over). One load. */
uint64_t vgpu_throttle_unknown_need(const struct vgpu_slot *s);

/* How long the tenant's probe has been in flight at now_ns (whole ms,
 * rounded up), if less than limit_ns and, from PROBE_DEAD_NS on, its
 * process showed within PROBE_DEAD_NS that it watches it
 * (vgpu_throttle_probe_beat); else 0, as when there is none. Loads only.
 * *mine: the probe is s's process's. */
uint64_t vgpu_throttle_probe_running(struct vgpu_slot *s, uint64_t now_ns,
				     uint64_t limit_ns, bool *mine);

/* s's process watches the tenant's probe, its own, at now_ns: stored
 * (the tenant record's probe_beat) at most every BEAT_NS. A process
 * stopped with its probe in flight (SIGSTOP) held the tenant's other
 * processes for the whole second of the hold's limit. */
#define VGPU_THROTTLE_BEAT_NS	1000000ull	/* 1 ms */
void vgpu_throttle_probe_beat(struct vgpu_slot *s, uint64_t now_ns);
/* Whether the tenant's probe in flight is s's process's (one load). */
bool vgpu_throttle_probe_mine(const struct vgpu_slot *s);

/* The tenant's lanes (docs/compute.md, "Lanes"): a capped launch holds
 * one of VGPU_THROTTLE_LANES from its admission until its end is read, so
 * that the tenant's processes together keep as many launches of unknown
 * length in flight as one process does. Eight processes that each ran
 * 20 us kernels and then two of 100 ms at one moment had sixteen long
 * kernels admitted on the short estimate: a 1-second window of 57% under
 * a 30% cap. A holder process shows that it watches its lanes (its watch
 * thread, vgpu_throttle_lane_beat); one not shown for LANE_STALE_NS (the
 * process dead or stopped, or its launch waiting for something) is taken
 * over by the next process that wants one. */
#define VGPU_THROTTLE_LANES		2
#define VGPU_THROTTLE_LANE_STALE_NS	50000000ull	/* 50 ms */
/* A launch that has not started this long after it was made is shown as
 * watched no longer: it waits for something (maybe for another process
 * of the tenant, which may wait for a lane). Shown while it was under
 * 25 ms, eight processes that each queued a host function sleeping
 * 150 ms before their two long kernels had their lanes taken over and
 * ran seven long kernels back to back (a hostile review). */
#define VGPU_THROTTLE_LANE_UNSTARTED_NS	1000000000ull	/* 1 s */
/* How long a wish for a lane (vgpu_throttle_lane_want) keeps the holders
 * reading their ended launches from their watch threads. */
#define VGPU_THROTTLE_LANE_WANT_NS	10000000ull	/* 10 ms */
/* CLOCK_MONOTONIC_COARSE's tick, at most (a giver reads that clock). */
#define VGPU_THROTTLE_COARSE_NS		10000000ull	/* 10 ms */

/* Takes a lane of s's tenant at now_ns for one launch, tag naming it
 * among its process's (its token: 0..255): the lane's index, or -1 when
 * every lane is held by a process that showed within LANE_STALE_NS that
 * it watches it. A load per lane and a compare-and-swap. */
int vgpu_throttle_lane_take(struct vgpu_slot *s, unsigned tag,
			    uint64_t now_ns);
/* s's process's launch `tag` holds lane no longer (nothing if it was
 * taken over): a sleeper of the tenant woken (vgpu_throttle_lane_sleep;
 * a system call only when one sleeps). */
void vgpu_throttle_lane_give(struct vgpu_slot *s, int lane, unsigned tag);
/* s's process watches its launch `tag` on lane at now_ns: shown in the
 * lane's word (false: the lane is no longer that launch's, it was taken
 * over). */
bool vgpu_throttle_lane_beat(struct vgpu_slot *s, int lane, unsigned tag,
			     uint64_t now_ns);
/* A launch of s's process waits for a lane at now_ns (stored at most once
 * a millisecond); and whether one did within LANE_WANT_NS of now_ns (a
 * time far ahead of now_ns, garbage, does not count and is replaced). */
void vgpu_throttle_lane_want(struct vgpu_slot *s, uint64_t now_ns);
bool vgpu_throttle_lane_wanted(const struct vgpu_slot *s, uint64_t now_ns);
/* The count of s's tenant's lanes given back (read before trying to take
 * one), and a sleep of at most ns until it moves from seq (a futex in the
 * ledger's mapping, shared by the tenant's processes). */
uint32_t vgpu_throttle_lane_seq(const struct vgpu_slot *s);
void vgpu_throttle_lane_sleep(struct vgpu_slot *s, uint32_t seq, uint64_t ns);

/* Whether s's tenant is elastic and no other tenant of the GPU has been
 * active lately: its launches are lent the GPU rather than admitted
 * against its share. Reads the other tenants' records (at most
 * VGPU_LEDGER_MAX_TENANTS) only for an elastic tenant. */
bool vgpu_throttle_lent(struct vgpu_slot *s, uint64_t now_ns);

/* Whether another guaranteed (not opportunistic) tenant of s's GPU was
 * active within VGPU_THROTTLE_ACTIVE_NS: one whose kernels s's may have
 * waited behind. Reads the other tenants' records (at most
 * VGPU_LEDGER_MAX_TENANTS). */
bool vgpu_throttle_contended(struct vgpu_slot *s, uint64_t now_ns);

/* The opportunistic class (docs/compute.md). */

/* Whether s's tenant is opportunistic (one load). */
bool vgpu_throttle_opportunistic(const struct vgpu_slot *s);

/* The GPU's opportunistic_ns (one load): it moves while an opportunistic
 * tenant of the GPU asks to launch, so a process compares it with the
 * value it last saw to know that one is about, without a clock read. */
uint64_t vgpu_throttle_opportunistic_ns(const struct vgpu_slot *s);

/* Whether an opportunistic tenant of s's GPU asked to launch within
 * VGPU_THROTTLE_OPP_LINGER_NS of now_ns. */
bool vgpu_throttle_opportunistic_near(const struct vgpu_slot *s,
				      uint64_t now_ns);

/* A launch of s's tenant that is not measured (an uncapped tenant) made
 * at now_ns: the tenant is stamped active, so that opportunistic tenants
 * yield to it. One load; a store at most once per VGPU_THROTTLE_STAMP_NS.
 * now_ns may be a coarse clock (a few ms behind). */
void vgpu_throttle_announce(struct vgpu_slot *s, uint64_t now_ns);

/* Accounts one launch that was told to wait, and the wall time it waited
 * in all: the tenant's compute.wait_ns, the slot's launch_wait_ns and
 * launches_throttled. */
void vgpu_throttle_waited(struct vgpu_slot *s, uint64_t wait_ns);

#endif
