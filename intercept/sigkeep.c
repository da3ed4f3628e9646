/* sigkeep.c - the SIGBUS guard kept in place (both shims).
 *
 * The ledger's guard (vgpu/ledger_guard.c) turns a fault in a truncated
 * ledger's mapping into zero pages, so a careless `truncate` kills no job.
 * Two things a program does would undo it:
 *
 *  - installing its own SIGBUS handler after the guard (Python's
 *    faulthandler.enable(), a crash reporter): that handler would get the
 *    fault and usually abort. sigaction(SIGBUS) and signal(SIGBUS) (and
 *    bsd_signal, ssignal, sysv_signal, __sysv_signal: what signal() is in
 *    a strict ISO C program) are caught here once the guard is on: the handler asked for becomes the
 *    one the guard chains to every fault outside a ledger, and the program
 *    reads back what it set; the kernel's handler stays the guard's.
 *  - blocking SIGBUS in a thread (a server that blocks every signal before
 *    starting its workers): the kernel then kills for a fault without
 *    running any handler. pthread_sigmask and sigprocmask are caught, and
 *    SIGBUS is taken out of any set that would block it; the library's
 *    constructor unblocks it in the thread that loads it (a mask inherited
 *    across exec), and threads created later inherit that.
 *
 * A thread whose mask these never saw (glibc's SIGEV_THREAD timer
 * threads block every signal; pthread_attr_setsigmask_np) has SIGBUS
 * unblocked at its first device look-up (vgpu_guard_thread, ledger.h).
 * A handler's sa_mask never holds SIGBUS (a SIGTERM handler with a full
 * mask that calls exit() gives slots back in a ledger).
 * Other ways are not caught: the raw system calls, a context switched to
 * with its own mask (setcontext, swapcontext) after that first look-up,
 * sigsuspend's, ppoll's and pselect's masks while they wait, sigblock,
 * sigsetmask, sighold, sigset. docs/ledger-abi.md says what is kept.
 *
 * The real functions are found with dlvsym(RTLD_NEXT) on first use. The
 * wrappers are uninstrumented and, until the guard is on, read memory
 * only with plain loads and call nothing intercepted: the sanitizers'
 * runtimes call sigaction and pthread_sigmask (through these, as the next
 * definition) before they are up (ThreadSanitizer crashed at start-up
 * entering an instrumented function from here).
 */
#include "dlsym_real.h"
#include "ledger.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef int (*mask_fn)(int, const sigset_t *, sigset_t *);
typedef void (*handler_fn)(int);
typedef handler_fn (*signal_fn)(int, handler_fn);

static sigaction_fn real_sigaction;
static signal_fn real_signal, real_bsd_signal, real_ssignal, real_sysv_signal;
static mask_fn real_pthread_sigmask, real_sigprocmask;

/* The C library's definitions, found once. */
VGPU_UNINSTRUMENTED static void *next(const char *name, const char *version)
{
	void *f = dlvsym(RTLD_NEXT, name, version);

	return f ? f : dlsym(RTLD_NEXT, name);
}

/* Two threads that find them unset both look them up and store the same
 * addresses; real_sigaction last, read with a plain load (volatile). */
VGPU_UNINSTRUMENTED static void find_real(void)
{
	sigaction_fn sa;

	if (*(sigaction_fn volatile *)&real_sigaction)
		return;
	real_signal = (signal_fn)next("signal", "GLIBC_2.2.5");
	real_bsd_signal = (signal_fn)next("bsd_signal", "GLIBC_2.2.5");
	real_ssignal = (signal_fn)next("ssignal", "GLIBC_2.2.5");
	real_sysv_signal = (signal_fn)next("__sysv_signal", "GLIBC_2.2.5");
	real_sigprocmask = (mask_fn)next("sigprocmask", "GLIBC_2.2.5");
	real_pthread_sigmask = (mask_fn)next("pthread_sigmask", "GLIBC_2.32");
	sa = (sigaction_fn)next("sigaction", "GLIBC_2.2.5");
	*(sigaction_fn volatile *)&vgpu__sigaction_real = sa;
	__asm__ volatile("" ::: "memory");
	*(sigaction_fn volatile *)&real_sigaction = sa;
}

/* SIGBUS's bit in a sigset_t (glibc: bit n - 1 of the first word), read
 * and cleared by hand: the sanitizers intercept the sigset functions. */
#define BUS_WORD(set)	(((unsigned long *)(set))[0])
#define BUS_BIT		(1ul << (SIGBUS - 1))

/* A mask set as the caller asked, less SIGBUS where it would block it. */
VGPU_UNINSTRUMENTED static const sigset_t *keep_bus(int how,
						    const sigset_t *set,
						    sigset_t *copy)
{
	if (!set || how == SIG_UNBLOCK || !(BUS_WORD(set) & BUS_BIT))
		return set;
	*copy = *set;
	BUS_WORD(copy) &= ~BUS_BIT;
	return copy;
}

/* The guard is on: a plain load (an atomic one may be instrumented). */
VGPU_UNINSTRUMENTED static int guard_on(void)
{
	return *(volatile uint32_t *)&vgpu__guard_state == 2;
}

/* After a call that reached the kernel for SIGBUS: if the guard came on
 * meanwhile (another thread installed it), the call may have replaced it
 * or read it back as the old handler; the guard is put back and the
 * program given its own handler, not the guard's. Only with the guard on,
 * long after the sanitizers are up. */
VGPU_UNINSTRUMENTED static void after_bus_call(bool set, struct sigaction *old)
{
	if (!guard_on())
		return;
	if (old && vgpu__guard_is(old))
		vgpu__guard_swap(NULL, old);
	if (set)
		vgpu__guard_fixup();
}

VGPU_UNINSTRUMENTED EXPORT int sigaction(int sig, const struct sigaction *act,
					 struct sigaction *old)
{
	struct sigaction copy;
	int rc;

	find_real();
	if (sig == SIGBUS && guard_on()) {
		vgpu__guard_swap(act, old);
		return 0;
	}
	if (!real_sigaction) {
		errno = ENOSYS;
		return -1;
	}
	/* No handler runs with SIGBUS blocked (a SIGTERM handler with a
	 * full sa_mask that calls exit(), which gives ledger slots back). */
	if (act && (BUS_WORD(&act->sa_mask) & BUS_BIT)) {
		copy = *act;
		BUS_WORD(&copy.sa_mask) &= ~BUS_BIT;
		act = &copy;
	}
	rc = real_sigaction(sig, act, old);
	if (sig == SIGBUS && rc == 0)
		after_bus_call(act != NULL, old);
	return rc;
}

/* signal(sig, h) for SIGBUS with the guard on, as glibc would set it:
 * flags and whether SIGBUS is blocked while h runs. The old handler. */
VGPU_UNINSTRUMENTED static handler_fn record_bus(handler_fn h, int flags,
						 bool self)
{
	struct sigaction sa, old;

	if (h == SIG_ERR) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = h;
	sa.sa_flags = flags;
	if (self)
		BUS_WORD(&sa.sa_mask) |= BUS_BIT;
	vgpu__guard_swap(&sa, &old);
	return old.sa_handler;
}

/* A signal()-like call passed on: the guard's handler never handed back
 * as the old one (after_bus_call). */
VGPU_UNINSTRUMENTED static handler_fn pass_bus(signal_fn real, int sig,
					       handler_fn h)
{
	handler_fn was;
	struct sigaction old;

	if (!real) {
		errno = ENOSYS;
		return SIG_ERR;
	}
	was = real(sig, h);
	if (sig != SIGBUS || was == SIG_ERR || !guard_on())
		return was;
	memset(&old, 0, sizeof(old));
	old.sa_handler = was;
	old.sa_flags = SA_SIGINFO;	/* as the guard's is */
	if (vgpu__guard_is(&old)) {
		vgpu__guard_swap(NULL, &old);
		was = old.sa_handler;
	}
	vgpu__guard_fixup();
	return was;
}

/* One of the signal() family: SIGBUS with the guard on recorded with the
 * family's flags (and SIGBUS blocked in its handler when self), anything
 * else passed to the C library's *real (read once found). */
VGPU_UNINSTRUMENTED static handler_fn signal_like(signal_fn *real, int flags,
						  bool self, int sig,
						  handler_fn h)
{
	find_real();
	if (sig == SIGBUS && guard_on())
		return record_bus(h, flags, self);
	return pass_bus(*real, sig, h);
}

/* glibc's signal(), bsd_signal() and ssignal(): BSD semantics
 * (SA_RESTART, the signal blocked while its handler runs). */
VGPU_UNINSTRUMENTED EXPORT handler_fn signal(int sig, handler_fn h)
{
	return signal_like(&real_signal, SA_RESTART, true, sig, h);
}

VGPU_UNINSTRUMENTED EXPORT handler_fn bsd_signal(int sig, handler_fn h)
{
	return signal_like(&real_bsd_signal, SA_RESTART, true, sig, h);
}

VGPU_UNINSTRUMENTED EXPORT handler_fn ssignal(int sig, handler_fn h)
{
	return signal_like(&real_ssignal, SA_RESTART, true, sig, h);
}

/* System V semantics: what signal() is in a program built for strict ISO
 * or POSIX C (glibc's <signal.h> then redirects it to __sysv_signal): the
 * handler runs once (SA_RESETHAND), unmasked (SA_NODEFER). */
VGPU_UNINSTRUMENTED EXPORT handler_fn __sysv_signal(int sig, handler_fn h)
{
	return signal_like(&real_sysv_signal, SA_RESETHAND | SA_NODEFER, false,
			   sig, h);
}

VGPU_UNINSTRUMENTED EXPORT handler_fn sysv_signal(int sig, handler_fn h)
{
	return __sysv_signal(sig, h);
}

VGPU_UNINSTRUMENTED static int thread_mask(int how, const sigset_t *set,
					   sigset_t *old)
{
	sigset_t copy;

	find_real();
	if (!real_pthread_sigmask)
		return ENOSYS;
	return real_pthread_sigmask(how, keep_bus(how, set, &copy), old);
}

VGPU_UNINSTRUMENTED EXPORT int pthread_sigmask(int how, const sigset_t *set,
					       sigset_t *old)
{
	return thread_mask(how, set, old);
}

#ifdef VGPU_SIGKEEP_VERSIONED
/* libvgpu-hip.so exports under glibc's version nodes (its map): a program
 * built before glibc 2.32 refers to pthread_sigmask@GLIBC_2.2.5, which
 * libpthread then had. libvgpu.so's unversioned definition answers any. */
VGPU_UNINSTRUMENTED EXPORT int vgpu__pthread_sigmask_old(int how,
							  const sigset_t *set,
							  sigset_t *old)
{
	return thread_mask(how, set, old);
}
__asm__(".symver vgpu__pthread_sigmask_old, pthread_sigmask@GLIBC_2.2.5");
#endif

VGPU_UNINSTRUMENTED EXPORT int sigprocmask(int how, const sigset_t *set,
					   sigset_t *old)
{
	sigset_t copy;

	find_real();
	if (!real_sigprocmask) {
		errno = ENOSYS;
		return -1;
	}
	return real_sigprocmask(how, keep_bus(how, set, &copy), old);
}

/* At load: the real functions, and SIGBUS unblocked in the loading thread
 * (a mask inherited across exec: threads created from here inherit it). */
VGPU_UNINSTRUMENTED __attribute__((constructor)) static void sigkeep_init(void)
{
	sigset_t bus;

	find_real();
	memset(&bus, 0, sizeof(bus));
	BUS_WORD(&bus) |= BUS_BIT;
	if (real_pthread_sigmask)
		real_pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
}
