/* ledger_guard.c - a truncated ledger file must not kill the job: the
 * SIGBUS guard of the ledgers' mappings.
 *
 * A store or load into a shared mapping past the end of its file raises
 * SIGBUS, and the default action kills the process. Anyone who may write
 * the file (its owner, root) can truncate it under every job mapping it.
 * The guard is a SIGBUS handler that acts only on faults inside a mapping
 * it knows: it maps anonymous zero pages over the whole mapping (mmap is
 * async-signal-safe), puts back the tenant lock words this process holds
 * (so its threads still exclude each other on the new memory), marks the
 * mapping broken and returns, so the faulting instruction runs again on
 * memory that cannot fault. One thread maps; another that faults meanwhile
 * waits for it. Every other SIGBUS
 * goes to the handler that was installed before the guard (or to the
 * default action, which then kills as it would have). The broken mark is
 * read on the ledger's slow path (vgpu__ledger_check), which moves the
 * process's charges to the file the name points at (ledger_move.c).
 *
 * The guard is installed once, by the first ledger mapped. In the shims
 * (intercept/sigkeep.c) a program's later sigaction(SIGBUS) or signal()
 * does not replace it: the handler asked for becomes the one the guard
 * chains to (vgpu__guard_swap), and SIGBUS is never blocked in a thread,
 * where the kernel would kill for a fault without running any handler
 * (docs/ledger-abi.md).
 */
#include "ledger_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>

#define GUARDS 32

enum { INTACT, MAPPING, BROKEN };

struct guard {
	uintptr_t base;			/* 0: free (atomic) */
	const uint32_t *held;		/* tenant lock words held, by index */
	uint32_t state;			/* INTACT, MAPPING, BROKEN (atomic) */
	int32_t mapper;			/* the thread that maps (MAPPING) */
};

static struct guard guards[GUARDS];
uint32_t vgpu__guard_faults;
/* The handler the guard chains to: befores[cur]. A program's
 * sigaction(SIGBUS) once the guard is on writes a slot of its own (the
 * next of the ring) and swaps cur to it, with no lock: it may be called
 * from a signal handler that interrupted another (POSIX allows it), and a
 * lock held by the interrupted code would never be let go. A slot is
 * reused BEFORES calls later, long after any reader copied it. */
#define BEFORES 16
static struct sigaction befores[BEFORES];
static uint32_t cur;
static uint32_t next_slot;
uint32_t vgpu__guard_state;		/* 0, 1: installing, 2: done */
#define installed vgpu__guard_state

int (*vgpu__sigaction_real)(int, const struct sigaction *,
			    struct sigaction *);

/* The kernel's sigaction: the shims export a sigaction of their own
 * (sigkeep.c), which sets this to the one it wraps. */
static int real_sigaction(int sig, const struct sigaction *act,
			  struct sigaction *old)
{
	int (*f)(int, const struct sigaction *, struct sigaction *) =
		__atomic_load_n(&vgpu__sigaction_real, __ATOMIC_ACQUIRE);

	return f ? f(sig, act, old) : sigaction(sig, act, old);
}

__thread bool vgpu__bus_open;

void vgpu__bus_open_slow(void)
{
	sigset_t bus;

	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
	vgpu__bus_open = true;
}

void vgpu__guard_swap(const struct sigaction *act, struct sigaction *old)
{
	uint32_t mine, was;

	if (!act) {
		if (old)
			*old = befores[__atomic_load_n(&cur,
						       __ATOMIC_ACQUIRE)];
		return;
	}
	mine = __atomic_add_fetch(&next_slot, 1, __ATOMIC_RELAXED) % BEFORES;
	befores[mine] = *act;
	was = __atomic_exchange_n(&cur, mine, __ATOMIC_ACQ_REL);
	if (old)
		*old = befores[was];
}

/* What would have happened without the guard. */
static void on_bus(int sig, siginfo_t *si, void *uc);
static struct sigaction guard_sa;	/* the guard's own disposition */

/* Blocks set in this thread for the rest of the handler (the kernel puts
 * the interrupted mask back at its return): by the system call, since the
 * shims' pthread_sigmask never blocks SIGBUS. */
static void block_now(const sigset_t *set)
{
	syscall(SYS_rt_sigprocmask, SIG_BLOCK, set, NULL, _NSIG / 8);
}

/* A SIGBUS no instruction will raise again: sent (kill, sigqueue), or a
 * memory error reported for action later (BUS_MCEERR_AO). */
static bool not_again(const siginfo_t *si)
{
	return si->si_code <= 0 || si->si_code == BUS_MCEERR_AO;
}

static void chain(int sig, siginfo_t *si, void *uc)
{
	struct sigaction dfl, before =
		befores[__atomic_load_n(&cur, __ATOMIC_ACQUIRE)];
	sigset_t mask;

	/* The guard itself, handed back by a program that read it while it
	 * was being installed (install()) and restored it: no handler. */
	if ((before.sa_flags & SA_SIGINFO) && before.sa_sigaction == on_bus)
		before.sa_handler = SIG_DFL;

	/* SIG_DFL and SIG_IGN are values of the handler whatever the
	 * flags say (sa_handler and sa_sigaction share their storage). */
	if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
		if (before.sa_flags & SA_RESETHAND) {	/* once, as asked */
			memset(&dfl, 0, sizeof(dfl));
			dfl.sa_handler = SIG_DFL;
			vgpu__guard_swap(&dfl, NULL);
		}
		/* The program's mask while its handler runs, as the kernel
		 * would have set it: its sa_mask, and SIGBUS itself unless
		 * SA_NODEFER; a fault's handler keeps SIGBUS open (a fault
		 * on a blocked SIGBUS kills with no handler). */
		mask = before.sa_mask;
		if (!(before.sa_flags & SA_NODEFER))
			sigaddset(&mask, SIGBUS);
		if (!not_again(si))
			sigdelset(&mask, SIGBUS);
		block_now(&mask);
		if (before.sa_flags & SA_SIGINFO)
			before.sa_sigaction(sig, si, uc);
		else
			before.sa_handler(sig);
		return;
	}
	/* Ignoring a fault is not possible: the kernel kills for it as for
	 * the default. A SIGBUS sent by kill() was ignored, and stays so. */
	if (before.sa_handler == SIG_IGN && not_again(si))
		return;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	real_sigaction(SIGBUS, &dfl, NULL);
	if (not_again(si)) {
		raise(SIGBUS);
		/* Still here: a process the signal cannot kill (a pid
		 * namespace's init, from inside it). The guard goes back. */
		real_sigaction(SIGBUS, &guard_sa, NULL);
	}
	/* A fault: returning runs the instruction again, now to its death. */
}

/* The fault is in guard g's mapping: map anonymous memory over it, unless
 * another thread is doing so (then its mapping serves this fault too).
 * Whatever the state says: a fault in the range is always this guard's.
 * BROKEN does not mean the memory there is the anonymous one: the fault
 * may have hit the file before another thread's replacement, or a move
 * (ledger_move.c) may have grafted a new file there since, itself
 * truncated before the move marked it mended; INTACT may be a move's
 * mending that came after the fault. Mapping again costs at most one more
 * move; handing the fault on would kill the job (the default action).
 * Returns false only when mmap failed (the fault then kills, as without a
 * guard). */
static void *map_zeros(uintptr_t base)
{
	return mmap((void *)base, VGPU_LEDGER_FILE_SIZE,
		    PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* The tenant lock words this process holds, put back into the zeros. */
static void put_held(const struct guard *g, uintptr_t base)
{
	struct vgpu_ledger_tenant *ten =
		(void *)(base + VGPU_LEDGER_TENANTS_OFFSET);

	for (int t = 0; g->held && t < VGPU_LEDGER_MAX_TENANTS; t++)
		ten[t].lock = __atomic_load_n(&g->held[t], __ATOMIC_ACQUIRE);
}

static bool replace(struct guard *g, uintptr_t base)
{
	int32_t me = (int32_t)syscall(SYS_gettid);
	uint32_t st;

	for (;;) {
		st = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
		if (st == MAPPING &&
		    __atomic_load_n(&g->mapper, __ATOMIC_ACQUIRE) == me) {
			/* This thread faulted again inside its own
			 * replacement (a move grafted a file over it,
			 * truncated too): zeros again, and the outer frame
			 * goes on; waiting would be waiting for itself. */
			if (map_zeros(base) == MAP_FAILED)
				return false;
			put_held(g, base);
			return true;
		}
		if (st == MAPPING) {
			while (__atomic_load_n(&g->state, __ATOMIC_ACQUIRE) ==
			       MAPPING)
				;
			return true;	/* another thread replaced it */
		}
		if (__atomic_compare_exchange_n(&g->state, &st, MAPPING, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			break;
	}
	__atomic_store_n(&g->mapper, me, __ATOMIC_RELEASE);
	if (map_zeros(base) == MAP_FAILED) {
		__atomic_store_n(&g->mapper, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&g->state, st, __ATOMIC_RELEASE);
		return false;
	}
	put_held(g, base);
	/* Counted once per broken mapping: mended takes one back. */
	if (st == INTACT)
		__atomic_fetch_add(&vgpu__guard_faults, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g->mapper, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->state, BROKEN, __ATOMIC_RELEASE);
	return true;
}

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr, base;
	int saved = errno;

	if (si->si_code > 0) {
		for (int i = 0; i < GUARDS; i++) {
			base = __atomic_load_n(&guards[i].base,
					       __ATOMIC_ACQUIRE);
			if (!base || a < base ||
			    a - base >= VGPU_LEDGER_FILE_SIZE)
				continue;
			if (!replace(&guards[i], base))
				break;
			errno = saved;
			return;
		}
	}
	errno = saved;
	chain(sig, si, uc);
}

/* Puts the guard back where the kernel holds another SIGBUS handler (a
 * program's, set in the instant the guard was installed), taking that
 * one as the handler to chain to. */
void vgpu__guard_fixup(void)
{
	for (int i = 0; i < 4; i++) {
		struct sigaction now;

		if (real_sigaction(SIGBUS, NULL, &now) != 0 ||
		    ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_bus))
			return;
		vgpu__guard_swap(&now, NULL);
		real_sigaction(SIGBUS, &guard_sa, NULL);
	}
}

bool vgpu__guard_is(const struct sigaction *sa)
{
	return sa && (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_bus;
}

static void forked_child(void)
{
	uint32_t installing = 1;

	/* Forked while another thread installed: that thread is not here. */
	__atomic_compare_exchange_n(&installed, &installing, 0, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, forked_child);
}

static void install(void)
{
	static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
	uint32_t want = 0, st;

	st = __atomic_load_n(&installed, __ATOMIC_ACQUIRE);
	if (st == 2 || st == 3)
		return;
	if (!__atomic_compare_exchange_n(&installed, &want, 1, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		while ((st = __atomic_load_n(&installed, __ATOMIC_ACQUIRE)) ==
		       1)
			;
		return;
	}
	pthread_once(&atfork_once, register_atfork);
	memset(&guard_sa, 0, sizeof(guard_sa));
	guard_sa.sa_sigaction = on_bus;
	guard_sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER;
	sigemptyset(&guard_sa.sa_mask);
	/* What was there, read first, so that a fault elsewhere that the
	 * guard takes at once finds it; then the guard. */
	if (real_sigaction(SIGBUS, NULL, &befores[0]) != 0 ||
	    real_sigaction(SIGBUS, &guard_sa, NULL) != 0) {
		/* Not installed (seccomp?): the wrappers pass every call on,
		 * and a truncation kills, as without the library. */
		__atomic_store_n(&installed, 3, __ATOMIC_SEQ_CST);
		return;
	}
	__atomic_store_n(&installed, 2, __ATOMIC_SEQ_CST);
	/* A program's sigaction(SIGBUS) from the read above on went to the
	 * kernel (the wrapper saw the guard off) and may have replaced the
	 * guard; the wrapper, finding the guard on after its call, does the
	 * same (sigkeep.c). */
	vgpu__guard_fixup();
}

int vgpu__guard_add(void *base, const uint32_t *held)
{
	install();
	for (int i = 0; i < GUARDS; i++) {
		uintptr_t free_ = 0;

		if (__atomic_load_n(&guards[i].base, __ATOMIC_RELAXED))
			continue;
		if (!__atomic_compare_exchange_n(&guards[i].base, &free_, 1,
				false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;	/* being taken by another thread */
		guards[i].held = held;
		__atomic_store_n(&guards[i].state, INTACT, __ATOMIC_RELAXED);
		__atomic_store_n(&guards[i].base, (uintptr_t)base,
				 __ATOMIC_RELEASE);
		return i;
	}
	return -1;	/* unguarded: a truncation kills, as before */
}

void vgpu__guard_remove(int g)
{
	if (g < 0 || g >= GUARDS)
		return;
	vgpu__guard_mended(g);
	__atomic_store_n(&guards[g].base, 0, __ATOMIC_RELEASE);
}

bool vgpu__guard_broken(int g)
{
	return g >= 0 && g < GUARDS &&
	       __atomic_load_n(&guards[g].state, __ATOMIC_ACQUIRE) == BROKEN;
}

void vgpu__guard_mended(int g)
{
	uint32_t st = BROKEN;

	if (g >= 0 && g < GUARDS &&
	    __atomic_compare_exchange_n(&guards[g].state, &st, INTACT, false,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		__atomic_fetch_sub(&vgpu__guard_faults, 1, __ATOMIC_RELEASE);
}
