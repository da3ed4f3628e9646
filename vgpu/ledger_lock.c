/* ledger_lock.c - the ledger's locks: the slot locks (open-file-description
 * locks, released by the kernel when their owner dies, whatever its pid
 * namespace), the shares lock, and the tenant lock word (a futex word
 * naming its owner's slot, taken from a dead owner after a liveness test of
 * that slot's OFD lock). There is no file-wide join lock (ledger_join.c).
 *
 * Every wait is bounded by a deadline (VGPU_LEDGER_LOCK_TIMEOUT_NS from the
 * start of the call, or 0: try once), and nothing sleeps while holding a
 * tenant lock.
 */
#include "ledger_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPINS			64
#define SLEEP_MAX_NS		2000000u	/* one futex wait at most */
#define LIVENESS_AFTER_NS	1000000u	/* wait this long, then test */

/* ---- OFD locks ------------------------------------------------------------- */

static int ofd_lock(int fd, short type, off_t start, int cmd, struct flock *fl)
{
	*fl = (struct flock){ .l_type = type, .l_whence = SEEK_SET,
			      .l_start = start, .l_len = 1 };
	return fcntl(fd, cmd, fl);
}

static off_t slot_byte(uint32_t index)
{
	return (off_t)VGPU_LEDGER_SLOTS_OFFSET +
	       (off_t)index * VGPU_LEDGER_SLOT_SIZE;
}

static void sleep_ns(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

/* A process-wide lock on one byte of the file, waited for in growing
 * sleeps up to the deadline (0, or one passed: tried once). */
static int byte_lock(struct vgpu_ledger *l, off_t at, uint64_t deadline)
{
	struct flock fl;
	long pause = 20000;

	while (ofd_lock(l->fd, F_WRLCK, at, F_OFD_SETLK, &fl) != 0) {
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return VGPU_LEDGER_ESYS;
		if (vgpu__now_ns(CLOCK_MONOTONIC) >= deadline)
			return VGPU_LEDGER_ETIMEDOUT;
		sleep_ns(pause);
		if (pause < 1000000)
			pause *= 2;
	}
	return 0;
}

/* OFD locks exclude other processes only (every thread of this one shares
 * the open file description): shares_mu excludes this one's threads (its
 * holders are bounded; with deadline 0 it is only tried). Once a wait has
 * run out (a process holding it is stopped), it is only tried until it is
 * had again: such a holder costs this process one wait, not one each. */
int vgpu__shares_lock_until(struct vgpu_ledger *l, uint64_t deadline)
{
	int rc;

	if (__atomic_load_n(&l->shares_stuck, __ATOMIC_RELAXED))
		deadline = 0;
	if (deadline == 0) {
		if (pthread_mutex_trylock(&l->shares_mu) != 0)
			return VGPU_LEDGER_ETIMEDOUT;
	} else {
		pthread_mutex_lock(&l->shares_mu);
	}
	rc = byte_lock(l, VGPU_LEDGER_SHARES_OFFSET, deadline);
	if (rc)
		pthread_mutex_unlock(&l->shares_mu);
	if (rc == VGPU_LEDGER_ETIMEDOUT && deadline)
		__atomic_store_n(&l->shares_stuck, 1, __ATOMIC_RELAXED);
	else if (rc == 0)
		__atomic_store_n(&l->shares_stuck, 0, __ATOMIC_RELAXED);
	return rc;
}

int vgpu__shares_lock(struct vgpu_ledger *l)
{
	return vgpu__shares_lock_until(l, vgpu__deadline());
}

void vgpu__shares_unlock(struct vgpu_ledger *l)
{
	struct flock fl;

	ofd_lock(l->fd, F_UNLCK, VGPU_LEDGER_SHARES_OFFSET, F_OFD_SETLK, &fl);
	pthread_mutex_unlock(&l->shares_mu);
}

bool vgpu__slot_owned(const struct vgpu_ledger *l, uint32_t index)
{
	return __atomic_load_n(&l->owned[index / 64], __ATOMIC_ACQUIRE) &
	       (UINT64_C(1) << (index % 64));
}

bool vgpu__slot_trylock(struct vgpu_ledger *l, uint32_t index)
{
	uint64_t bit = UINT64_C(1) << (index % 64);
	struct flock fl;

	/* The bit excludes this process's other threads: to the kernel, all
	 * of them are one owner, and all would be granted the lock. */
	if (__atomic_fetch_or(&l->owned[index / 64], bit, __ATOMIC_ACQ_REL) &
	    bit)
		return false;
	if (ofd_lock(l->fd, F_WRLCK, slot_byte(index), F_OFD_SETLK, &fl) == 0)
		return true;
	__atomic_fetch_and(&l->owned[index / 64], ~bit, __ATOMIC_RELEASE);
	return false;
}

void vgpu__slot_unlock(struct vgpu_ledger *l, uint32_t index)
{
	uint64_t bit = UINT64_C(1) << (index % 64);
	struct flock fl;

	__atomic_fetch_and(&l->owned[index / 64], ~bit, __ATOMIC_RELEASE);
	ofd_lock(l->fd, F_UNLCK, slot_byte(index), F_OFD_SETLK, &fl);
}

/* Slots this process holds, in the same generation, are alive. */
bool vgpu__owner_dead(struct vgpu_ledger *l, uint32_t word)
{
	uint32_t idx = (word & VGPU__OWNER_IDX_MASK) - 1;
	uint32_t gen = (word >> VGPU__OWNER_IDX_BITS) & VGPU__OWNER_GEN_MASK;
	struct flock fl;

	/* A mapping the guard replaced is this process's own memory: every
	 * word in it was put there by one of its threads, alive. */
	if (vgpu__guard_broken(l->guard))
		return false;
	if (idx >= VGPU_LEDGER_MAX_SLOTS)
		return true;			/* garbage: nobody owns it */
	if ((__atomic_load_n(&l->slots[idx].generation, __ATOMIC_ACQUIRE) &
	     VGPU__OWNER_GEN_MASK) != gen)
		return true;
	if (vgpu__slot_owned(l, idx))
		return false;
	if (ofd_lock(l->fd, F_WRLCK, slot_byte(idx), F_OFD_GETLK, &fl) != 0)
		return false;			/* cannot tell: wait on */
	return fl.l_type == F_UNLCK;
}

bool vgpu__slot_dead(struct vgpu_ledger *l, uint32_t index, uint32_t gen)
{
	return vgpu__owner_dead(l, vgpu__owner_word(index, gen));
}

int vgpu__word_holder(const struct vgpu_ledger *l, uint32_t word,
		      int32_t *pid, int32_t *host_pid)
{
	uint32_t w = word & ~VGPU__LOCK_WAITERS;
	uint32_t idx = (w & VGPU__OWNER_IDX_MASK) - 1;
	uint32_t gen = (w >> VGPU__OWNER_IDX_BITS) & VGPU__OWNER_GEN_MASK;
	const struct vgpu_ledger_slot *r;

	if (w == 0 || idx >= VGPU_LEDGER_MAX_SLOTS)
		return VGPU_LEDGER_EINVAL;
	r = &l->slots[idx];
	*pid = __atomic_load_n(&r->pid, __ATOMIC_RELAXED);
	*host_pid = __atomic_load_n(&r->host_pid, __ATOMIC_RELAXED);
	/* Read after the pids: a slot claimed again meanwhile shows here. */
	if ((__atomic_load_n(&r->generation, __ATOMIC_ACQUIRE) &
	     VGPU__OWNER_GEN_MASK) != gen)
		return VGPU_LEDGER_EINVAL;
	return 0;
}

int vgpu_ledger_lock_holder(const struct vgpu_slot *s, int32_t *pid,
			    int32_t *host_pid)
{
	return vgpu__word_holder(s->l, __atomic_load_n(&s->ten->lock,
						       __ATOMIC_RELAXED),
				 pid, host_pid);
}

/* ---- the tenant lock ---------------------------------------------------------- */

static void futex_wait(uint32_t *word, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };

	syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

void vgpu__tenant_wake(struct vgpu_ledger_tenant *ten)
{
	syscall(SYS_futex, &ten->lock, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Spins a little (not when only trying), then sleeps on the word in short
 * waits; each time the same owner has held it for LIVENESS_AFTER_NS (at
 * once when only trying), tests whether that owner is alive, and takes the
 * lock from a dead one (then repairs the totals). Once it has waited, it
 * takes the lock with the waiters bit set, so that its unlock wakes
 * whoever may still sleep. Gives up when *watch no longer reads expect. */
int vgpu__tenant_lock_until(struct vgpu_ledger *l, uint32_t t, uint32_t owner,
			    uint64_t deadline, const uint64_t *watch,
			    uint64_t expect)
{
	uint32_t *w = &l->tenants[t].lock;
	uint64_t seen_since = 0, now;
	uint32_t v, seen = 0;
	int i, tries = 0;

	for (i = 0; i < SPINS; i++) {
		v = 0;
		if (__atomic_compare_exchange_n(w, &v, owner, false,
				__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 0;
		if (deadline == 0)
			break;
		__builtin_ia32_pause();
	}
	for (;;) {
		if (watch && __atomic_load_n(watch, __ATOMIC_SEQ_CST) != expect)
			return VGPU__LOCK_CHANGED;
		if (deadline == 0 && ++tries > SPINS)
			return VGPU_LEDGER_ETIMEDOUT;
		v = __atomic_load_n(w, __ATOMIC_RELAXED);
		if (v == 0) {
			if (__atomic_compare_exchange_n(w, &v,
					owner | VGPU__LOCK_WAITERS, false,
					__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				return 0;
			continue;
		}
		now = vgpu__now_ns(CLOCK_MONOTONIC);
		if ((v & ~VGPU__LOCK_WAITERS) != seen) {
			seen = v & ~VGPU__LOCK_WAITERS;
			seen_since = now;
		}
		if ((deadline == 0 || now - seen_since >= LIVENESS_AFTER_NS) &&
		    vgpu__owner_dead(l, v)) {
			if (__atomic_compare_exchange_n(w, &v,
					owner | VGPU__LOCK_WAITERS, false,
					__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				vgpu__tenant_recompute(l, t);
				return 0;
			}
			continue;
		}
		if (now >= deadline)
			return VGPU_LEDGER_ETIMEDOUT;
		if (!(v & VGPU__LOCK_WAITERS) &&
		    !__atomic_compare_exchange_n(w, &v, v | VGPU__LOCK_WAITERS,
				false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			continue;
		futex_wait(w, v | VGPU__LOCK_WAITERS, SLEEP_MAX_NS / 4);
	}
}

int vgpu__tenant_lock_slow(struct vgpu_ledger *l, uint32_t t, uint32_t owner)
{
	return vgpu__tenant_lock_until(l, t, owner, vgpu__deadline(), NULL, 0);
}

/* The dead owner may have stopped anywhere in a few instructions that
 * change a slot's usage and the tenant's totals: the slots are the truth. */
void vgpu__tenant_recompute(struct vgpu_ledger *l, uint32_t t)
{
	uint64_t sum[VGPU_USAGE_COUNT] = { 0 }, used = 0;
	struct vgpu_ledger_tenant *ten = &l->tenants[t];
	uint32_t i;
	int k;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		struct vgpu_ledger_slot *r = &l->slots[i];

		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    __atomic_load_n(&r->tenant, __ATOMIC_RELAXED) != t)
			continue;
		for (k = 0; k < VGPU_USAGE_COUNT; k++)
			sum[k] += vgpu__ld(&r->usage[k]);
	}
	for (k = 0; k < VGPU_USAGE_COUNT; k++) {
		vgpu__st(&ten->usage[k], sum[k]);
		if (VGPU_USAGE_IS_DEVICE(k))
			used += sum[k];
	}
	vgpu__st(&ten->used, used);
}
