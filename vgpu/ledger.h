/* ledger.h - the ledger: the shared accounting file of one physical GPU.
 *
 * Internal to the core (vgpu/). The layout is public (include/vgpu.h,
 * docs/ledger-abi.md); this is the API the shim uses to keep it. Pure
 * accounting: no driver calls. The shim's protocol for every allocation is
 * reserve -> driver call -> release if the driver call failed; every free is
 * driver call -> release.
 *
 * Threads: a struct vgpu_ledger and its slots may be used by any number of
 * threads at once. reserve/release never allocate, never make a system call
 * unless contended or refused, and never wait more than about a second.
 *
 * Errors: functions that can fail return 0 or a negative VGPU_LEDGER_E*
 * code, and those that take an err buffer write a one-line message there
 * (always NUL-terminated when errlen > 0).
 */
#ifndef VGPU_LEDGER_H
#define VGPU_LEDGER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vgpu.h"

/* X(NAME, value, description) */
#define VGPU_LEDGER_ERRNO_MAP(X) \
	X(EOVERLIMIT, -1, "over the tenant's memory limit") \
	X(ETIMEDOUT, -2, "a ledger lock was not acquired within a second") \
	X(EINVAL, -3, "invalid argument") \
	X(ESYS, -4, "a system call failed") \
	X(EBADFILE, -5, "not a usable ledger file") \
	X(EFULL, -6, "the ledger has no free record") \
	X(ENOMEM, -7, "out of memory") \
	X(ENOENT, -8, "no such record") \
	X(EPERM, -9, "refused: a link, or a file or directory that someone " \
		     "not trusted owns or may write")

enum vgpu_ledger_error {
#define VGPU_LEDGER_ERR_ENUM_(NAME, value, text) VGPU_LEDGER_##NAME = value,
	VGPU_LEDGER_ERRNO_MAP(VGPU_LEDGER_ERR_ENUM_)
#undef VGPU_LEDGER_ERR_ENUM_
};

/* join's positive return: joined, but the tenant (which has a live process
 * or usage) keeps a limit other than the one asked for; err holds the
 * warning naming both. */
#define VGPU_LEDGER_LIMIT_KEPT 1

#define VGPU_LEDGER_LOCK_TIMEOUT_NS	1000000000ull	/* every bounded wait */

struct vgpu_ledger;	/* one mapped ledger file of one physical GPU */
struct vgpu_slot;	/* this process's slot in it */

/* ---- ledger.c: the file ------------------------------------------------- */

/* A short description of a VGPU_LEDGER_E* code ("unknown error" if none). */
const char *vgpu_ledger_strerror(int code);

/* Opens the ledger of GPU `gpu_uuid` in `dir`: the file
 * <dir>/<gpu_uuid>.v<VGPU_LEDGER_VERSION>.ledger, reached without following
 * a symbolic link at the directory or the file (openat from the directory's
 * checked descriptor, O_NOFOLLOW). Creates `dir` if missing (missing
 * parents mode 0755; the directory itself 0700, or 0770 and given to the
 * access's group). Creates the file if missing, mode 0600 (0660 and given to
 * the group), whatever the umask, completely built under a temporary name
 * and then renamed into place without replacing anything, so nobody ever
 * sees a half-made file; a process that loses the race attaches to the
 * winner's file. Trusted are the caller's euid, root and, with a group, its
 * members: an existing directory or file is refused with VGPU_LEDGER_EPERM
 * (err names the path, its owner and mode, and what to do) when it is a
 * symbolic link, owned by someone else (a group's files: its group must be
 * the access's group), a file with more than one name, a file every user
 * may write (one of the caller's own is made not to be), or a directory
 * others may write without the sticky bit (accepted when it is the
 * caller's, or group-writable by the access's group). docs/ledger-abi.md,
 * "Permissions", has the rules and why. An existing file is then attached
 * after checking its type, size, magic, layout version, layout constants
 * and GPU UUID; physical_bytes is recorded only at creation.
 * gpu_uuid: 1..63 characters of [A-Za-z0-9_-]. Returns 0 with *out set, or
 * VGPU_LEDGER_EINVAL (also: an unknown group), _EPERM, _ESYS (err names the
 * call, the path and errno's text), _EBADFILE (err names the path, what was
 * found and what was expected) or _ENOMEM. Never waits (but for a file
 * with two names, up to a millisecond: a creator's link and unlink). */
int vgpu_ledger_open(const char *dir, const char *gpu_uuid,
		     uint64_t physical_bytes, struct vgpu_ledger **out,
		     char *err, size_t errlen);

/* Who may share the ledgers a process creates (VGPU_LEDGER_GROUP). */
struct vgpu_ledger_access {
	const char *group;	/* a group's name or number: files 0660 and
				 * the directory 0770, given to it, and its
				 * members trusted; NULL or "": none */
	/* An administrator's tool (vgpu-ctl), not a job: nothing is created
	 * or replaced (a missing directory or file is VGPU_LEDGER_ENOENT, a
	 * damaged file _EBADFILE), the owners are not checked, and a file
	 * this user may not open for writing is VGPU_LEDGER_EPERM, err
	 * naming it, its owner and mode: whoever may write a ledger may
	 * change it, and that is the kernel's decision (docs/control.md). */
	bool control;
};

/* vgpu_ledger_open under `access` (NULL: no group). Resolves the group's
 * name (getgrnam_r: may ask NSS; call it at start-up, not on a hot path). */
int vgpu_ledger_open_with(const char *dir, const char *gpu_uuid,
			  uint64_t physical_bytes,
			  const struct vgpu_ledger_access *access,
			  struct vgpu_ledger **out, char *err, size_t errlen);

/* Whether a job with `access` (NULL: no group) would trust a ledger file
 * of stat *st found at path: owned by this user, root, or the named
 * group, and not writable by every user (a job that owns such a file
 * takes that write access away; a view only refuses it). 0, or
 * VGPU_LEDGER_EPERM (err naming the owner), _EINVAL (no such group).
 * May ask NSS for the group's name: not for a hot path. */
struct stat;
int vgpu_ledger_trusted(const struct stat *st, const char *path,
			const struct vgpu_ledger_access *access, char *err,
			size_t errlen);

/* The GPU's memory as the ledger's creator recorded it (0: not known). */
uint64_t vgpu_ledger_physical_bytes(const struct vgpu_ledger *l);

/* How many times `l` followed its name to another file: the file was
 * deleted, replaced or truncated while in use (ledger_move.c). */
uint64_t vgpu_ledger_moves(const struct vgpu_ledger *l);

/* Leaves every slot still joined through `l`, unmaps and closes the file.
 * NULL is ignored. */
void vgpu_ledger_close(struct vgpu_ledger *l);

/* At the process's exit: gives back what every slot joined through `l`
 * holds and frees the records, but unmaps, closes and frees nothing: the
 * job's other threads may still be inside the ledger (a reservation, a
 * wait at a move's gate) while the exit runs, and the kernel takes it all
 * back a moment later. NULL is ignored. A later reserve or charge on
 * those slots returns VGPU_LEDGER_ENOENT and a release does nothing: the
 * tenant's totals no longer count the process. */
void vgpu_ledger_exit(struct vgpu_ledger *l);

/* In a child after fork(), before anything else touches `l`: forgets `l`
 * and its slots without writing to the file (the parent still owns them),
 * closes the inherited descriptor (which does not release the parent's
 * locks) and frees the memory. The child then opens and joins afresh. */
void vgpu_ledger_forget_after_fork(struct vgpu_ledger *l);

/* The slow path's test that l's file is still the one under its name
 * (reserve and release make it too), for hooks other than allocations: a
 * job that allocates once and then only launches and synchronises must
 * still follow a deleted, replaced or truncated file, or its charges stay
 * in a file no new process sees. No system call unless a check is due
 * (ledger_move.c); l may be NULL. */
void vgpu_ledger_poll(struct vgpu_ledger *l);

/* A thread of the library's own follows l's name (ledger_follow.c): every
 * 250 ms it makes vgpu_ledger_poll's test and moves, so that a process that
 * makes no driver call (idle, or waiting on the host) still follows a
 * deleted, replaced or truncated file. The thread starts at the first call
 * in a process (a fork's child starts its own). Returns false when it could
 * not start (said once; the slow paths still follow); NULL is ignored. */
bool vgpu_ledger_follow(struct vgpu_ledger *l);
/* Before l is closed: the thread lets go of it, waiting for a pass in
 * progress at most 3 s. false: the pass did not end (a move waiting for
 * this process's threads); then l must not be closed. */
bool vgpu_ledger_unfollow(struct vgpu_ledger *l);

/* The file's path and its header (read-only for callers). */
const char *vgpu_ledger_path(const struct vgpu_ledger *l);
const struct vgpu_ledger_header *vgpu_ledger_header(const struct vgpu_ledger *l);

/* The pid of this process on the host (the first NSpid field of
 * /proc/self/status) when it differs from getpid(); 0 when it is the same
 * or not known. Reads a file: call it once, at start-up. */
int32_t vgpu_host_pid(void);

/* ---- ledger_peek.c: a read-only view ----------------------------------- */

/* Opens GPU gpu_uuid's ledger in dir read-only as the job would reach it:
 * the directory itself not through a symbolic link (O_NOFOLLOW on its last
 * component, its parents followed), the file from the directory's
 * descriptor, not a link, and O_NONBLOCK (a FIFO opens at once, to be
 * refused by its type, never waited on). The descriptor, or -1 with
 * errno (ELOOP or ENOTDIR: a link). No check of type or owner. */
int vgpu_ledger_open_view(const char *dir, const char *gpu_uuid);

/* Reads tenant `tenant`'s device usage (less what its dead processes
 * still hold until they are reclaimed), limit and compute share (if
 * share_pct is not NULL; 0: none) from the ledger of GPU `gpu_uuid` in
 * `dir` without joining or writing anything. A file it does not trust,
 * or a group that does not exist, is said in err (if not NULL; "" for
 * the other errors). Returns 0,
 * VGPU_LEDGER_ESYS (no such file, or not a regular file: a FIFO is
 * never waited on), _EBADFILE (not a ledger of this version), _EPERM (a
 * file a job with VGPU_LEDGER_GROUP `group` (NULL or "": none) would not
 * trust, vgpu_ledger_trusted: its figures are not believed) or _EINVAL
 * (no such tenant). */
int vgpu_ledger_peek_tenant(const char *dir, const char *gpu_uuid,
			    const char *group, const char *tenant,
			    uint64_t *used, uint64_t *limit,
			    uint32_t *share_pct, char *err, size_t errlen);

/* The processes of tenant `tenant` in that file (its active slots whose
 * process is alive: a dead one's is not listed), with the device
 * memory each is charged: the first max in out, all counted in *count.
 * A slot's pid is its owner's own namespace's: `here` is the pid that
 * names the owner in the caller's namespace, found by the owner's lock on
 * the slot as /proc/PID/fdinfo shows it (the recorded pid, else the host
 * pid, tried), so two containers' pid 1 are not both taken for the
 * caller's pid 1. Returns as vgpu_ledger_peek_tenant. */
struct vgpu_ledger_proc {
	int32_t pid;		/* in its own pid namespace */
	int32_t host_pid;	/* 0: not known */
	int32_t here;		/* the pid that names it in the caller's
				 * namespace; 0: none found (another
				 * namespace's process, or /proc unreadable) */
	uint64_t device_bytes;
};
int vgpu_ledger_peek_procs(const char *dir, const char *gpu_uuid,
			   const char *group, const char *tenant,
			   struct vgpu_ledger_proc *out, unsigned max,
			   unsigned *count);

/* A copy of tenant `tenant`'s record in that file (read as the views
 * above are, never written), and in *live the number of its processes
 * alive now (their slots' locks tested; a dead one's slot not yet
 * reclaimed is not counted). Returns 0; VGPU_LEDGER_ENOENT (no such file,
 * or no such tenant); _EPERM (this user may not read it); _EBADFILE (not
 * a ledger of this version); _ESYS; _ENOMEM; err says which, naming the
 * path (and for _EPERM its owner and mode). */
int vgpu_ledger_peek_record(const char *dir, const char *gpu_uuid,
			    const char *tenant, struct vgpu_ledger_tenant *out,
			    unsigned *live, char *err, size_t errlen);

/* A live process of a tenant as vgpu-ctl suspend and resume see it. */
struct vgpu_ledger_ctlproc {
	int32_t pid;		/* in its own pid namespace */
	int32_t host_pid;	/* 0: not known */
	uint32_t flags;		/* VGPU_LEDGER_SLOT_* */
	uint64_t ctl_acked;	/* the change its suspension state carries out */
	uint64_t device_bytes;	/* device kinds */
	uint64_t host_bytes;	/* SPILLED: moved to or made on the host */
};

/* A copy of tenant's record in *rec and its live processes (their slots'
 * locks tested) in out (the first max; *count: all), read as
 * vgpu_ledger_peek_record reads; same returns. */
int vgpu_ledger_peek_control(const char *dir, const char *gpu_uuid,
			     const char *tenant,
			     struct vgpu_ledger_tenant *rec,
			     struct vgpu_ledger_ctlproc *out, unsigned max,
			     unsigned *count, char *err, size_t errlen);

/* ---- ledger_join.c: tenants and slots ---------------------------------- */

/* What a joiner asks of its tenant. A tenant's terms are set by the
 * joiner that creates it, or that finds it with no live process and no
 * usage (the "setter"); every later joiner runs under the terms already
 * there, whatever it asked for. */
struct vgpu_ledger_terms {
	uint64_t mem_limit;	/* device bytes; VGPU_LEDGER_UNLIMITED: none */
	bool compute;		/* set share_pct and policy too */
	uint32_t share_pct;	/* compute.share_pct: 0 or 100: no cap */
	uint32_t policy;	/* compute.policy */
};

/* Joins tenant `tenant` (1..63 bytes, no control characters): finds its
 * record or creates it (reusing the record of a tenant with no live process
 * and no usage when all are taken), reclaims the tenant's dead slots, and
 * claims a free process slot, or one whose owner died (its usage reclaimed
 * first). A setter (see struct vgpu_ledger_terms) writes `want` into the
 * tenant: the memory limit, its time and pid, and with want->compute the
 * compute share and policy (the bucket then restarts at the next
 * vgpu_throttle_configure). pid is getpid(), host_pid vgpu_host_pid().
 * Takes no file-wide lock: waits only for its own tenant (a process making
 * its record, or holding its lock when no live process is in it), about a
 * second at most in all. Returns 0 with
 * *out set; VGPU_LEDGER_LIMIT_KEPT with *out set and a warning in err
 * (want->mem_limit differs from the tenant's, which applies); or
 * VGPU_LEDGER_EFULL when no tenant record or no slot is free (err says
 * which and how many are in use), _ETIMEDOUT (err names the process
 * waited for, by pid), _EINVAL, _ESYS or _ENOMEM. */
int vgpu_ledger_join_terms(struct vgpu_ledger *l, const char *tenant,
			   const struct vgpu_ledger_terms *want, int32_t pid,
			   int32_t host_pid, struct vgpu_slot **out,
			   char *err, size_t errlen);

/* vgpu_ledger_join_terms with a memory limit only (compute left as is). */
int vgpu_ledger_join(struct vgpu_ledger *l, const char *tenant,
		     uint64_t mem_limit, int32_t pid, int32_t host_pid,
		     struct vgpu_slot **out, char *err, size_t errlen);

/* Whether s's join set its tenant's terms (it was the setter). */
bool vgpu_ledger_set_terms(const struct vgpu_slot *s);

/* Gives the slot's usage back to its tenant, frees the slot and `s`.
 * If the tenant lock cannot be had within a second, the slot is released
 * as if its owner had died and the next reclaim returns its usage. */
void vgpu_ledger_leave(struct vgpu_slot *s);

/* Reclaims the slots of dead processes in the whole file (any tenant):
 * returns how many were reclaimed. Makes one system call per live slot. */
int vgpu_ledger_reclaim(struct vgpu_ledger *l);

/* The host memory `s`'s tenant may use for VGPU_USAGE_SPILLED
 * (default: unlimited). Returns 0 or VGPU_LEDGER_ETIMEDOUT. */
int vgpu_ledger_set_spill_limit(struct vgpu_slot *s, uint64_t bytes);

/* ---- ledger_guard.c: the SIGBUS guard, as the shims keep it ----------------
 * (a truncated file kills nobody: docs/ledger-abi.md) */

/* The guard's state (0, 1: installing, 2: on, 3: could not be
 * installed). On, a program's SIGBUS handler is kept by vgpu__guard_swap,
 * not given to the kernel. Read with a plain load by code that runs
 * before the sanitizers are up (sigkeep.c). */
extern uint32_t vgpu__guard_state;
/* With the guard on: puts it back if the kernel holds another SIGBUS
 * handler (set by a program's call that raced the install), taking that
 * one as the handler to chain to. */
void vgpu__guard_fixup(void);
/* Whether sa is the guard's own disposition (a program that read it while
 * it was installed is given its recorded handler instead). */
bool vgpu__guard_is(const struct sigaction *sa);
/* Records act (if not NULL) as the handler the guard chains to, and
 * returns the one it replaces in old (if not NULL): a program's
 * sigaction(SIGBUS) once the guard is on. Lock-free and async-signal-safe
 * (a signal handler may call sigaction). */
void vgpu__guard_swap(const struct sigaction *act, struct sigaction *old);
/* This thread lets SIGBUS through: the first time a thread asks, SIGBUS
 * is unblocked in it (one system call), for threads whose mask the shims'
 * wrappers never saw: glibc's SIGEV_THREAD timer and notification
 * threads (every signal blocked), pthread_attr_setsigmask_np, a mask
 * inherited from such a thread. The front ends ask at every device look-up,
 * before any touch of a ledger. */
extern __thread bool vgpu__bus_open;
void vgpu__bus_open_slow(void);
static inline void vgpu_guard_thread(void)
{
	if (__builtin_expect(!vgpu__bus_open, 0))
		vgpu__bus_open_slow();
}
/* The sigaction the guard installs and resets with: set by a shim that
 * exports its own (intercept/sigkeep.c); NULL: the C library's. */
extern int (*vgpu__sigaction_real)(int, const struct sigaction *,
				   struct sigaction *);

/* ---- ledger_ops.c: reserve and release --------------------------------- */

/* Atomically checks that `bytes` of `kind` fit under the tenant's limit
 * (the memory limit for device kinds, the spill limit for SPILLED) and
 * charges them to the tenant and the slot. O(1), no system call when
 * uncontended. When refused, reclaims the tenant's dead slots (a system
 * call per slot of the tenant) and tries once more. Returns 0,
 * VGPU_LEDGER_EOVERLIMIT (counted in the slot's failures),
 * VGPU_LEDGER_ETIMEDOUT, VGPU_LEDGER_EINVAL (bad kind) or
 * VGPU_LEDGER_ENOENT (the slot was given back at exit). bytes == 0
 * always succeeds. */
int vgpu_ledger_reserve(struct vgpu_slot *s, int kind, uint64_t bytes);

/* Charges `bytes` of `kind` without checking the limit: for memory the
 * driver already handed out beyond what reserve admitted. Returns 0,
 * VGPU_LEDGER_ETIMEDOUT, VGPU_LEDGER_EINVAL or VGPU_LEDGER_ENOENT (given
 * back at exit). */
int vgpu_ledger_charge(struct vgpu_slot *s, int kind, uint64_t bytes);

/* Gives back `bytes` of `kind`: at most what the slot holds of that kind,
 * so the counters never underflow. O(1), no system call when uncontended.
 * If the tenant lock cannot be had within a second, the release is kept in
 * the process and applied at the slot's next reserve or release. */
void vgpu_ledger_release(struct vgpu_slot *s, int kind, uint64_t bytes);

/* Views (lock-free reads; each value is consistent, not the set). */
uint64_t vgpu_ledger_tenant_used(const struct vgpu_slot *s);	/* device */
uint64_t vgpu_ledger_tenant_limit(const struct vgpu_slot *s);
uint64_t vgpu_ledger_tenant_usage(const struct vgpu_slot *s, int kind);
uint64_t vgpu_ledger_slot_usage(const struct vgpu_slot *s, int kind);
const struct vgpu_ledger_slot *vgpu_ledger_slot_record(const struct vgpu_slot *s);
const struct vgpu_ledger_tenant *vgpu_ledger_tenant_record(const struct vgpu_slot *s);

/* Who holds s's tenant lock now, from the lock word (which names the
 * holder's slot and generation): the holder's pid in its own namespace
 * and its host pid (0: the same namespace, or not known). Returns 0, or
 * VGPU_LEDGER_EINVAL when the lock is free or its slot has moved on. A
 * snapshot that may be stale at once: for messages. */
int vgpu_ledger_lock_holder(const struct vgpu_slot *s, int32_t *pid,
			    int32_t *host_pid);

/* For tests only: take and drop the slot's tenant lock directly (a test
 * child dies holding it). vgpu__ledger_lock returns 0, _ETIMEDOUT, or
 * _ENOENT for a slot given back at exit. */
/* ---- ledger_shares.c: memory shared between processes ---------------------
 * Keys identify one piece of memory across processes (never 0,0); records
 * are indices into the file's shares. */

/* s has charged `bytes` of device `kind` for memory it exports (or imports
 * from a process that recorded nothing), identified by key: s becomes its
 * payer and holder. If it has a record already, s only holds it and
 * *paid_elsewhere is set: the caller gives its own charge back. The
 * record's index, or VGPU_LEDGER_EFULL (no free record or holder entry:
 * the caller's charge stays its own), ETIMEDOUT, EINVAL. */
int vgpu_ledger_share_export(struct vgpu_slot *s, const uint64_t key[2],
			     int kind, uint64_t bytes, bool *paid_elsewhere);
/* s holds memory another process recorded: the record's index (s is
 * charged nothing), VGPU_LEDGER_ENOENT (none: the caller charges and
 * exports), EFULL (the caller charges it as its own), ETIMEDOUT. */
int vgpu_ledger_share_hold(struct vgpu_slot *s, const uint64_t key[2]);
/* s lets go of one hold of record idx (its key checked): the payer's last
 * hold moves the charge to another live holder, or gives it back when
 * none is left. 0; VGPU_LEDGER_ETIMEDOUT when the shares lock or a
 * tenant's lock was not taken in time (the hold, or the payer's charge,
 * stays: call again later; leaving the ledger tries it too). */
int vgpu_ledger_share_drop(struct vgpu_slot *s, int idx, const uint64_t key[2]);
/* Record idx's charged bytes and the payer's pid (views, tests). */
uint64_t vgpu_ledger_share_payer(const struct vgpu_slot *s, int idx,
				 int32_t *pid);

int vgpu__ledger_lock(struct vgpu_slot *s);
void vgpu__ledger_unlock(struct vgpu_slot *s);

/* ---- ledger_ctl.c: an administrator's changes (vgpu-ctl) ------------------
 * docs/control.md. A tenant's terms are set by its first process (join);
 * these change them while its processes run. The memory and spill limits
 * are read by every reservation, the compute share and policy by every
 * capped admission; the shim re-reads the terms of an uncapped device when
 * the tenant's ctl_changes moves (vgpu_ledger_ctl_changes). */

/* What a change sets, and who makes it (the audit). */
struct vgpu_ledger_change {
	uint32_t fields;	/* VGPU_LEDGER_CTL_*: which of these apply */
	uint64_t mem_limit;	/* device bytes; VGPU_LEDGER_UNLIMITED: none */
	uint32_t share_pct;	/* 1..99 caps; 0 or 100: no cap (stored 0) */
	uint32_t policy;	/* enum vgpu_compute_policy (options.h) */
	uint64_t spill_limit;	/* host bytes for SPILLED */
	uint32_t suspend;	/* 1 suspend, 0 resume (VGPU_LEDGER_CTL_SUSPEND) */
	uint32_t uid;		/* the maker's real uid */
	int32_t pid;		/* getpid() */
	int32_t host_pid;	/* vgpu_host_pid() */
};

/* Sets c's fields in tenant `tenant`'s record of l (a handle opened with
 * vgpu_ledger_access.control), under the tenant's lock, and records the
 * change: ctl_ns, ctl_uid, ctl_pid, ctl_host_pid, ctl_fields, then
 * ctl_changes + 1 (release). A new memory limit also sets limit_set_ns and
 * limit_set_pid. A compute share that now caps a tenant that was not
 * capped restarts its bucket empty at now (as vgpu_throttle_configure
 * does); between two caps the bucket is kept. Nothing else changes: a
 * limit below what the tenant holds takes nothing away (its reservations
 * are refused until its usage is below it).
 * The lock is taken as a slot of l that is claimed for the call and never
 * joins a tenant, so a vgpu-ctl that dies holding it is a dead holder like
 * any other. Waits for the lock at most VGPU_LEDGER_LOCK_TIMEOUT_NS.
 * `after` (may be NULL): the record as the change left it, copied under
 * the lock. Returns 0; VGPU_LEDGER_ENOENT (no such tenant in l);
 * _ETIMEDOUT (err names the holder: "... held for over 1000 ms by pid N
 * ..."); _EFULL (no slot free to take the lock with); _EINVAL (a bad
 * name, no field, a share above 100, an unknown policy). */
int vgpu_ledger_ctl_set(struct vgpu_ledger *l, const char *tenant,
			const struct vgpu_ledger_change *c,
			struct vgpu_ledger_tenant *after, char *err,
			size_t errlen);

/* s's tenant's ctl_changes (acquire): when it moves, the terms changed.
 * One load; for the shim's checks at synchronisations and allocations. */
uint64_t vgpu_ledger_ctl_changes(const struct vgpu_slot *s);

/* Whether s's tenant is suspended now (acquire). */
bool vgpu_ledger_suspended(const struct vgpu_slot *s);

/* s's slot's flags: `set` bits set, `clear` bits cleared (release). */
void vgpu_ledger_slot_flags(struct vgpu_slot *s, uint32_t set, uint32_t clear);
/* s's process has carried out its tenant's suspension state as of change
 * `changes` (ctl_changes): stored after the flags (release), so a reader
 * that loads ctl_acked first sees the flags that answer it. */
void vgpu_ledger_slot_ack(struct vgpu_slot *s, uint64_t changes);
/* s's slot's flags now. */
uint32_t vgpu_ledger_slot_flags_get(const struct vgpu_slot *s);

#endif
