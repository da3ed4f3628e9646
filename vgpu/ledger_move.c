/* ledger_move.c - the ledger file was deleted, replaced or truncated while
 * this process used it: notice, and move this process's slots and charges
 * to the file the name points at now, so every process of the GPU ends up
 * in one file and the totals stay one.
 *
 * Noticing is on a slow path: reserve and release test a process-local
 * deadline (the coarse clock, read through the vDSO, no system call) and the
 * guard's broken mark (ledger_guard.c); when either says so, one thread
 * stats the name (vgpu__ledger_check).
 *
 * Moving happens in place: the new file is opened and joined through a
 * second handle, charged with what each slot holds (read from the old file
 * when it is intact, else from the process's own mirror of its slots'
 * usage), and then grafted into the old handle: its mapping is mapped over
 * the old one at the same address (MAP_FIXED) and its descriptor takes the
 * old descriptor's number (dup3), so every pointer into the ledger stays
 * valid, and closing the old descriptor releases the old slots' OFD locks
 * (processes still in the old file reclaim them as a dead process's).
 *
 * While it moves, the mover holds l->mu (joins, leaves, reclaims) and the
 * shares mutex, and closes the handle's gate (ledger_internal.h): it waits
 * until no thread of this process is between taking a slot's tenant lock
 * word and letting it go, and threads that come meanwhile wait for the
 * move to end. So no thread is inside a critical section of the file when
 * the file under the mapping changes, and a lock word taken is always let
 * go in the file it was taken in. The tenant lock words of the old file
 * are not taken: the gate excludes this process's threads, and other
 * processes never write this process's slot records.
 */
#include "ledger_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/membarrier.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define MAX_MOVE	8	/* slots one handle moves at once */

static bool mapping_intact(struct vgpu_ledger *l);

/* What the name holds now, compared with the file mapped. A file whose
 * magic is gone (zeroed or overwritten in place, at its size) is damaged
 * as a truncated one is: the move replaces it (ledger.c). */
static bool name_moved(struct vgpu_ledger *l)
{
	struct stat st;

	if (!mapping_intact(l))
		return true;
	if (stat(l->path, &st) != 0)
		return errno == ENOENT;	/* deleted; other errors: stay */
	return st.st_dev != l->dev || st.st_ino != l->ino ||
	       st.st_size != VGPU_LEDGER_FILE_SIZE;
}

#define GATE_WAIT_NS	(2 * VGPU_LEDGER_LOCK_TIMEOUT_NS)

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	nanosleep(&ts, NULL);
}

/* ---- the gate's seats (ledger_internal.h) -------------------------------- */

struct vgpu__gate_seat vgpu__gate_seats[VGPU__GATE_SEATS];
__thread struct vgpu__gate_seat *vgpu__gate_me;
static bool seats_on;		/* decided once, before any thread sits */
static pthread_once_t seats_once = PTHREAD_ONCE_INIT;
static pthread_key_t seat_key;

static int membarrier_cmd(int cmd)
{
	return (int)syscall(SYS_membarrier, cmd, 0, 0);
}

/* A thread that exits gives its seat back (a thread counted in l->gate
 * never had one). */
static void seat_free(void *p)
{
	struct vgpu__gate_seat *me = p;

	vgpu__gate_me = NULL;
	__atomic_store_n(&me->inside, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&me->taken, 0, __ATOMIC_RELEASE);
}

/* The descriptor and mapping of the file a move is joining (its handle
 * lives on the mover's stack), or -1 and NULL. A fork's child closes and
 * unmaps its copies: the OFD locks of the slots joined there belong to the
 * open file description, which either copy would keep open, so a parent
 * that dies would stay charged for as long as the child lives. Only the
 * mover writes them (l->mu). */
static int moving_fd = -1;
static void *moving_map;

/* The child of a fork has one thread, the one that forked: every other
 * seat is free, and membarrier's registration is the parent's, not the
 * child's (the kernel does not carry it over), so it is asked again. A
 * move the parent was making is the parent's: its new file's descriptor
 * is closed. */
static void seats_fork_child(void)
{
	if (moving_map) {
		munmap(moving_map, VGPU_LEDGER_FILE_SIZE);
		moving_map = NULL;
	}
	if (moving_fd >= 0) {
		close(moving_fd);	/* leaves the parent's locks alone */
		moving_fd = -1;
	}
	for (int i = 0; i < VGPU__GATE_SEATS; i++)
		if (&vgpu__gate_seats[i] != vgpu__gate_me) {
			vgpu__gate_seats[i].inside = 0;
			vgpu__gate_seats[i].taken = 0;
		}
	if (seats_on &&
	    membarrier_cmd(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
		seats_on = false;	/* one thread: no one sits now */
		if (vgpu__gate_me)
			seat_free(vgpu__gate_me);
	}
}

static void seats_init(void)
{
	int cmds = membarrier_cmd(MEMBARRIER_CMD_QUERY);

	seats_on = cmds > 0 &&
		   (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
		   pthread_key_create(&seat_key, seat_free) == 0 &&
		   membarrier_cmd(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) ==
			   0;
	pthread_atfork(NULL, NULL, seats_fork_child);
}

/* Before the library starts a thread of its own (the follower): the
 * registration for membarrier is cheap in a process of one thread, and
 * with more than one the kernel waits a grace period (10-17 ms measured
 * here), which every start-up paid while the first thread to sit made
 * it with the follower already running. A job that has threads of its
 * own before its first driver call pays it either way. */
void vgpu__gate_prepare(void)
{
	pthread_once(&seats_once, seats_init);
}

struct vgpu__gate_seat *vgpu__gate_sit(void)
{
	pthread_once(&seats_once, seats_init);
	if (!seats_on)
		return NULL;
	for (int i = 0; i < VGPU__GATE_SEATS; i++) {
		struct vgpu__gate_seat *st = &vgpu__gate_seats[i];
		uint32_t free_ = 0;

		if (__atomic_load_n(&st->taken, __ATOMIC_RELAXED) ||
		    !__atomic_compare_exchange_n(&st->taken, &free_, 1, false,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			continue;
		if (pthread_setspecific(seat_key, st) != 0) {
			__atomic_store_n(&st->taken, 0, __ATOMIC_RELEASE);
			return NULL;
		}
		vgpu__gate_me = st;
		return st;
	}
	return NULL;	/* every seat taken: this thread counts in l->gate */
}

/* Whether a thread other than the calling one sits inside, or is counted
 * in l->gate. */
static bool gate_busy(struct vgpu_ledger *l)
{
	if (__atomic_load_n(&l->gate, __ATOMIC_ACQUIRE) != VGPU__GATE_MOVER)
		return true;
	if (!seats_on)
		return false;
	for (int i = 0; i < VGPU__GATE_SEATS; i++)
		if (__atomic_load_n(&vgpu__gate_seats[i].taken,
				    __ATOMIC_RELAXED) &&
		    __atomic_load_n(&vgpu__gate_seats[i].inside,
				    __ATOMIC_ACQUIRE))
			return true;
	return false;
}

/* Closes the gate: 0 once no thread is inside, or VGPU_LEDGER_ETIMEDOUT
 * (gate open again) when one stayed in for GATE_WAIT_NS (a thread waits
 * for a tenant lock for VGPU_LEDGER_LOCK_TIMEOUT_NS at most), or
 * VGPU_LEDGER_ESYS when the barrier the seats need failed. */
static int gate_close(struct vgpu_ledger *l)
{
	uint64_t until = 0;

	pthread_once(&seats_once, seats_init);
	__atomic_fetch_or(&l->gate, VGPU__GATE_MOVER, __ATOMIC_SEQ_CST);
	if (seats_on &&
	    membarrier_cmd(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
		__atomic_fetch_and(&l->gate, ~VGPU__GATE_MOVER,
				   __ATOMIC_RELEASE);
		return VGPU_LEDGER_ESYS;
	}
	for (int i = 0; gate_busy(l); i++) {
		if (i < 64)
			continue;
		if (!until)
			until = vgpu__now_ns(CLOCK_MONOTONIC) + GATE_WAIT_NS;
		else if (vgpu__now_ns(CLOCK_MONOTONIC) >= until) {
			__atomic_fetch_and(&l->gate, ~VGPU__GATE_MOVER,
					   __ATOMIC_RELEASE);
			return VGPU_LEDGER_ETIMEDOUT;
		}
		sleep_us(50);
	}
	return 0;
}

static void gate_open(struct vgpu_ledger *l)
{
	__atomic_fetch_and(&l->gate, ~VGPU__GATE_MOVER, __ATOMIC_RELEASE);
}

int vgpu__gate_wait(struct vgpu_ledger *l)
{
	uint64_t until = vgpu__now_ns(CLOCK_MONOTONIC) + GATE_WAIT_NS +
			 VGPU_LEDGER_LOCK_TIMEOUT_NS;

	for (;;) {
		if (!(__atomic_load_n(&l->gate, __ATOMIC_ACQUIRE) &
		      VGPU__GATE_MOVER)) {
			struct vgpu__gate_seat *me = vgpu__gate_me;

			if (me) {
				__atomic_store_n(&me->inside, me->inside + 1,
						 __ATOMIC_RELAXED);
				__atomic_signal_fence(__ATOMIC_SEQ_CST);
				if (!(__atomic_load_n(&l->gate,
						      __ATOMIC_ACQUIRE) &
				      VGPU__GATE_MOVER))
					return 0;
				__atomic_store_n(&me->inside, me->inside - 1,
						 __ATOMIC_RELEASE);
			} else {
				if (!(__atomic_add_fetch(&l->gate, 1,
						__ATOMIC_ACQ_REL) &
				      VGPU__GATE_MOVER))
					return 0;
				__atomic_sub_fetch(&l->gate, 1,
						   __ATOMIC_RELEASE);
			}
		}
		if (vgpu__now_ns(CLOCK_MONOTONIC) >= until)
			return VGPU_LEDGER_ETIMEDOUT;
		sleep_us(100);
	}
}

/* Makes n's file l's, in place; n keeps nothing. */
static void graft(struct vgpu_ledger *l, struct vgpu_ledger *n,
		  struct vgpu_slot **v, struct vgpu_slot **nv, int count)
{
	if (mmap(l->map, VGPU_LEDGER_FILE_SIZE, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED, n->fd, 0) == MAP_FAILED)
		vgpu_log(0, "ledger '%s': cannot map the new "
			 "file over the old: %s", l->path, strerror(errno));
	dup3(n->fd, l->fd, O_CLOEXEC);
	for (int w = 0; w < VGPU__OWNED_WORDS; w++)
		__atomic_store_n(&l->owned[w],
				 __atomic_load_n(&n->owned[w], __ATOMIC_ACQUIRE),
				 __ATOMIC_RELEASE);
	l->dev = n->dev;
	l->ino = n->ino;
	memset(l->held, 0, sizeof(l->held));	/* none: the gate is closed */
	for (int i = 0; i < count; i++) {
		v[i]->index = nv[i]->index;
		v[i]->tenant_index = nv[i]->tenant_index;
		v[i]->owner = nv[i]->owner;
		v[i]->setter = nv[i]->setter;
		v[i]->rec = &l->slots[nv[i]->index];
		v[i]->ten = &l->tenants[nv[i]->tenant_index];
	}
	vgpu__guard_mended(l->guard);
	__atomic_fetch_add(&l->moves, 1, __ATOMIC_RELAXED);
}

/* Frees n and its slot structures without writing to its file: the slots
 * now belong to l. */
static void drop_handle(struct vgpu_ledger *n)
{
	struct vgpu_slot *s, *next;

	for (s = n->joined; s; s = next) {
		next = s->next;
		free(s);
	}
	n->joined = NULL;
	vgpu__ledger_free(n);
}

/* Whether the mapping still shows the file as written: not replaced by
 * the guard (truncated), its magic there (not zeroed in place). */
static bool mapping_intact(struct vgpu_ledger *l)
{
	return !vgpu__guard_broken(l->guard) &&
	       __atomic_load_n(&l->hdr->magic, __ATOMIC_RELAXED) ==
	       VGPU_LEDGER_MAGIC;
}

/* What slot s holds, to charge in the new file: the old file's record
 * while it is intact, else the process's own count. A truncation while
 * the record is read replaces the mapping with zeros: read again. */
static void holds(struct vgpu_ledger *l, struct vgpu_slot *s, uint64_t *have)
{
	struct stat st;
	int k;

	if (mapping_intact(l) && fstat(l->fd, &st) == 0 &&
	    st.st_size == VGPU_LEDGER_FILE_SIZE) {
		for (k = 0; k < VGPU_USAGE_COUNT; k++)
			have[k] = vgpu__ld(&s->rec->usage[k]);
		if (mapping_intact(l))
			return;
	}
	for (k = 0; k < VGPU_USAGE_COUNT; k++)
		have[k] = __atomic_load_n(&s->mine[k], __ATOMIC_RELAXED);
}

/* Why slot ns's charge in the new file timed out: who holds its lock. */
static void held_up(struct vgpu_ledger *n, struct vgpu_slot *ns, char *err,
		    size_t errlen)
{
	int32_t pid = 0, hpid = 0;
	char who[64];

	if (vgpu_ledger_lock_holder(ns, &pid, &hpid) != 0)
		snprintf(who, sizeof(who), "a process that has let go since");
	else if (hpid)
		snprintf(who, sizeof(who), "pid %d (host pid %d)", pid, hpid);
	else
		snprintf(who, sizeof(who), "pid %d", pid);
	vgpu__ledger_err(err, errlen, VGPU_LEDGER_ETIMEDOUT, "ledger '%s': "
		"tenant '%s': cannot charge what this process holds in the "
		"new file: %s held the tenant's lock for over %llu ms "
		"(stopped?)", n->path, ns->name, who,
		(unsigned long long)(VGPU_LEDGER_LOCK_TIMEOUT_NS / 1000000u));
}

/* Under l->mu and the shares mutex, the gate closed. Every failure says
 * what failed in err. */
static int move_locked(struct vgpu_ledger *l, struct vgpu_slot **v, int count,
		       char *err, size_t errlen)
{
	struct vgpu_slot *nv[MAX_MOVE];
	struct vgpu__import imports[MAX_MOVE][VGPU__IMPORTS_KEPT];
	unsigned nimports[MAX_MOVE] = { 0 };
	struct vgpu_ledger *n;
	uint64_t have[VGPU_USAGE_COUNT];
	int rc, i, k;

	rc = vgpu__ledger_reopen(l, &n, err, errlen);
	if (rc)
		return rc;
	__atomic_store_n(&moving_map, n->map, __ATOMIC_RELAXED);
	__atomic_store_n(&moving_fd, n->fd, __ATOMIC_RELAXED);
	for (i = 0; i < count; i++) {
		if (errlen)
			err[0] = '\0';
		rc = vgpu_ledger_join_terms(n, v[i]->name, &v[i]->terms,
					    v[i]->pid, v[i]->host_pid, &nv[i],
					    err, errlen);
		if (rc < 0) {
			if (errlen && !err[0])
				vgpu__ledger_err(err, errlen, rc, "ledger '%s':"
					" tenant '%s': cannot join the new file:"
					" %s", l->path, v[i]->name,
					vgpu_ledger_strerror(rc));
			goto out_close;
		}
		holds(l, v[i], have);
		/* What it imported: charged to it there (the records stay
		 * in the old file, or are lost with it; ledger_shares.c). */
		if (mapping_intact(l))
			nimports[i] = vgpu__shares_imports_of(l, v[i], have,
							      imports[i]);
		else
			nimports[i] = vgpu__shares_imports_kept(v[i], have,
								imports[i]);
		for (k = 0; k < VGPU_USAGE_COUNT; k++) {
			rc = vgpu_ledger_charge(nv[i], k, have[k]);
			if (rc)
				goto out_charge;
		}
	}
	graft(l, n, v, nv, count);
	for (i = 0; i < count; i++)
		vgpu__shares_carried(v[i], imports[i], nimports[i]);
	__atomic_store_n(&moving_fd, -1, __ATOMIC_RELAXED);
	__atomic_store_n(&moving_map, NULL, __ATOMIC_RELAXED);
	drop_handle(n);
	return 0;
out_charge:
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		held_up(n, nv[i], err, errlen);
	else
		vgpu__ledger_err(err, errlen, rc, "ledger '%s': tenant '%s': "
			"cannot charge its %llu bytes of usage kind %d in the "
			"new file: %s", l->path, v[i]->name,
			(unsigned long long)have[k], k,
			vgpu_ledger_strerror(rc));
out_close:
	__atomic_store_n(&moving_fd, -1, __ATOMIC_RELAXED);
	__atomic_store_n(&moving_map, NULL, __ATOMIC_RELAXED);
	vgpu_ledger_close(n);	/* leaves what it joined */
	return rc;
}

int vgpu__ledger_move(struct vgpu_ledger *l, char *err, size_t errlen)
{
	struct vgpu_slot *v[MAX_MOVE], *s;
	bool broken;
	int count = 0, rc;

	pthread_mutex_lock(&l->mu);
	pthread_mutex_lock(&l->shares_mu);
	for (s = l->joined; s; s = s->next) {
		if (count == MAX_MOVE) {
			rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
				"ledger '%s': more than %d slots to move",
				l->path, MAX_MOVE);
			goto out_unlock;
		}
		v[count++] = s;
	}
	if ((rc = gate_close(l)) == VGPU_LEDGER_ESYS) {
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"ledger '%s': membarrier(MEMBARRIER_CMD_PRIVATE_"
			"EXPEDITED) failed (errno %d), so this process's threads "
			"cannot be shown to be out of the ledger", l->path,
			errno);
		goto out_unlock;
	}
	if (rc) {
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ETIMEDOUT,
			"ledger '%s': a thread of this process stayed inside "
			"the ledger for over %llu ms (waiting for a tenant lock "
			"another process holds?)", l->path,
			(unsigned long long)(GATE_WAIT_NS / 1000000u));
		goto out_unlock;
	}
	broken = !mapping_intact(l);		/* for the message */
	rc = move_locked(l, v, count, err, errlen);
	gate_open(l);
	if (rc == 0)
		vgpu_log(1, "ledger '%s' was %s while in use; "
			 "this process's charges moved to the file the name "
			 "points at now", l->path,
			 broken ? "truncated or overwritten"
				: "deleted or replaced");
out_unlock:
	pthread_mutex_unlock(&l->shares_mu);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

int vgpu__ledger_check(struct vgpu_ledger *l)
{
	uint64_t now = vgpu__coarse_ns();
	int rc = VGPU__CHECK_OK;
	uint32_t idle = 0;
	char err[512] = "";
	int cancel = -1;

	if (!__atomic_compare_exchange_n(&l->checking, &idle, 1, false,
					 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return VGPU__CHECK_BUSY;	/* another thread is at it */
	if (now < __atomic_load_n(&l->next_check_ns, __ATOMIC_RELAXED) &&
	    !vgpu__guard_broken(l->guard))
		goto out;
	if (now < l->retry_ns) {		/* failed just now */
		rc = VGPU__CHECK_FAILED;
		goto out;
	}
	__atomic_store_n(&l->next_check_ns, now + VGPU__CHECK_EVERY_NS,
			 __ATOMIC_RELAXED);
	/* Not cancelled from here: a move holds l->mu, the shares mutex,
	 * the gate and `checking` across opens, sleeps and logs, and a job's
	 * thread cancelled there would leave them held for good. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	if (!name_moved(l))
		goto out;
	rc = vgpu__ledger_move(l, err, sizeof(err));
	if (rc == 0)
		goto out;
	if (!err[0])	/* every failure should say; never an empty line */
		snprintf(err, sizeof(err), "ledger '%.400s': moving to the file "
			 "the name points at now failed: %s", l->path,
			 vgpu_ledger_strerror(rc));
	/* Tried again at the next check; said every 100th time. */
	rc = VGPU__CHECK_FAILED;
	l->retry_ns = now + VGPU__CHECK_EVERY_NS;
	if (l->move_failures++ % 100 == 0)
		vgpu_log(0, "%s; this process stays in its old file for now",
			 err);
out:
	__atomic_store_n(&l->checking, 0, __ATOMIC_RELEASE);
	if (cancel >= 0)
		pthread_setcancelstate(cancel, NULL);
	return rc;
}

uint64_t vgpu_ledger_moves(const struct vgpu_ledger *l)
{
	return __atomic_load_n(&l->moves, __ATOMIC_RELAXED);
}
