/* test_stopped.c - no process of the simulated device waits for another
 * (docs/simulator.md, "Sharing between processes"): a process stopped
 * (SIGSTOP) at any instruction delays others' start-up, allocations, shared
 * memory and launches by a short while at most, never makes them fail, and
 * the device's count of memory is exact once it goes on or is killed.
 *
 * Each test forks a worker, in a process group of its own, that loops one
 * kind of operation of the simulator. Twenty times, the test lets it run for
 * a random while, stops its group, and does the same kind of operation
 * itself (or in a new process), timing each call; then it continues the
 * group, or (every fourth round) kills it and starts another. The random
 * moments come from STOPPED_SEED (default 1), printed when a test fails.
 *
 * One test per thing that was a lock across processes: the state file's
 * set-up (a flock), the memory in use and the process slots (a mutex), the
 * shared objects (the same mutex), the engine's queue (a ticket lock that
 * waits for its head).
 */
#include "simtest.h"
#include "state_internal.h"	/* the layout: to make odd queues */

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(stopped, .init = simtest_clean_env, .fini = simtest_remove_state);

#define ROUNDS 20
#define KILL_EVERY 4
#define SLOW_NS 1000000000ull     /* no call of the test's takes this long */
#define ROUND_NS 1000000000ull    /* nor all of a round's together */
#define RUN_MS 25                 /* the worker runs up to this between stops */
#define WATCHDOG_NS 5000000000ull /* a stop this long: the group goes on */
#define HANDLES 8
#define GRAN (2 * MIB)

enum kind { MEMORY, SHARED, LAUNCH, ATTACH };

/* What the test and its worker share (an anonymous shared mapping). */
struct ctl {
	_Atomic int quit;          /* 1: let go of everything; 2: exit */
	_Atomic int done;          /* the worker let go of everything */
	_Atomic int error;         /* a worker's call failed: its line */
	_Atomic unsigned long loops;
	_Atomic unsigned dirs;     /* ATTACH: directories made */
	char base[512];            /* ATTACH: where they are */
	CUipcMemHandle handles[HANDLES];  /* SHARED: the worker's exports */
	_Atomic unsigned nhandles;
};

static struct ctl *ctl;
static unsigned seed;

static void ctl_new(void)
{
	const char *s = getenv("STOPPED_SEED");

	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(ctl, MAP_FAILED);
	seed = s ? (unsigned)strtoul(s, NULL, 0) : 1;
}

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

/* In the worker: a call that failed ends it, telling the test where. */
static void worker_check(bool ok, int line)
{
	if (ok)
		return;
	atomic_store(&ctl->error, line);
	_exit(1);
}

/* ---- the worker's loops -------------------------------------------------- */

static void worker_context(void)
{
	CUcontext c;

	worker_check(cuInit(0) == CUDA_SUCCESS, __LINE__);
	worker_check(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS, __LINE__);
	worker_check(cuCtxSetCurrent(c) == CUDA_SUCCESS, __LINE__);
}

/* Allocations of 4 KiB to 4 MiB, up to four held, and the device's
 * free memory read between. */
static void loop_memory(unsigned *s)
{
	CUdeviceptr p[4] = { 0 };
	size_t fr, total;
	unsigned i;

	while (!atomic_load(&ctl->quit)) {
		i = rnd(s) % 4;
		if (p[i]) {
			worker_check(cuMemFree(p[i]) == CUDA_SUCCESS, __LINE__);
			p[i] = 0;
		} else {
			worker_check(cuMemAlloc(&p[i],
						4096 + rnd(s) % (4 * MIB))
				     == CUDA_SUCCESS, __LINE__);
		}
		worker_check(cuMemGetInfo(&fr, &total) == CUDA_SUCCESS,
			     __LINE__);
		atomic_fetch_add(&ctl->loops, 1);
	}
	for (i = 0; i < 4; i++)
		if (p[i])
			worker_check(cuMemFree(p[i]) == CUDA_SUCCESS, __LINE__);
}

static CUmemAllocationProp fd_prop(void)
{
	return (CUmemAllocationProp){
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	};
}

/* One VMM handle exported as a file descriptor and released. */
static CUresult vmm_export_once(void)
{
	CUmemAllocationProp prop = fd_prop();
	CUmemGenericAllocationHandle h;
	CUresult rc;
	int fd = -1;

	rc = cuMemCreate(&h, GRAN, &prop, 0);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = cuMemExportToShareableHandle(&fd, h, prop.requestedHandleTypes, 0);
	if (fd >= 0)
		close(fd);
	cuMemRelease(h);
	return rc;
}

/* A VMM handle exported once; then imported from its descriptor and
 * released, again and again (the shared object's holds, little else). */
static void vmm_reimport(int fd, int times)
{
	CUmemGenericAllocationHandle h;

	for (int i = 0; i < times; i++) {
		worker_check(cuMemImportFromShareableHandle(&h,
				(void *)(uintptr_t)fd,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
			     CUDA_SUCCESS, __LINE__);
		worker_check(cuMemRelease(h) == CUDA_SUCCESS, __LINE__);
	}
}

/* Legacy IPC exports (published for the test to open), freed two exports
 * later; a VMM handle exported and released; another imported anew. */
static void loop_shared(unsigned *s)
{
	CUmemAllocationProp prop = fd_prop();
	CUmemGenericAllocationHandle kept;
	CUdeviceptr p[2] = { 0 };
	unsigned n = 0;
	int fd = -1;

	worker_check(cuMemCreate(&kept, GRAN, &prop, 0) == CUDA_SUCCESS,
		     __LINE__);
	worker_check(cuMemExportToShareableHandle(&fd, kept,
			prop.requestedHandleTypes, 0) == CUDA_SUCCESS,
		     __LINE__);
	while (!atomic_load(&ctl->quit)) {
		unsigned i = n % 2;
		CUipcMemHandle h;

		if (p[i])
			worker_check(cuMemFree(p[i]) == CUDA_SUCCESS, __LINE__);
		worker_check(cuMemAlloc(&p[i], 65536 + rnd(s) % 65536) ==
			     CUDA_SUCCESS, __LINE__);
		worker_check(cuIpcGetMemHandle(&h, p[i]) == CUDA_SUCCESS,
			     __LINE__);
		ctl->handles[n % HANDLES] = h;
		atomic_store(&ctl->nhandles, ++n);
		worker_check(vmm_export_once() == CUDA_SUCCESS, __LINE__);
		vmm_reimport(fd, 16);
		atomic_fetch_add(&ctl->loops, 1);
	}
	for (unsigned i = 0; i < 2; i++)
		if (p[i])
			worker_check(cuMemFree(p[i]) == CUDA_SUCCESS, __LINE__);
	worker_check(cuMemRelease(kept) == CUDA_SUCCESS, __LINE__);
	close(fd);
}

/* A kernel with no host form: a no-op of VGPU_SIM_KERNEL_NS. */
static const char nop_ptx[] =
	".version 8.0\n"
	".target sm_80\n"
	".address_size 64\n"
	".visible .entry stopped_nop()\n"
	"{ ret; }\n";

static CUfunction nop_kernel(void)
{
	CUmodule m;
	CUfunction f;

	if (cuModuleLoadData(&m, nop_ptx) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&f, m, "stopped_nop") != CUDA_SUCCESS)
		return NULL;
	return f;
}

static CUresult launch_once(CUfunction f)
{
	CUresult rc = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);

	return rc != CUDA_SUCCESS ? rc : cuCtxSynchronize();
}

static void loop_launch(void)
{
	CUfunction f = nop_kernel();

	worker_check(f != NULL, __LINE__);
	while (!atomic_load(&ctl->quit)) {
		worker_check(launch_once(f) == CUDA_SUCCESS, __LINE__);
		atomic_fetch_add(&ctl->loops, 1);
	}
}

/* <base>/<n> */
static void dir_name(char *out, size_t len, unsigned n)
{
	snprintf(out, len, "%s/%u", ctl->base, n);
}

/* A process that sets up a new device (a new state directory) and uses it:
 * its start-up, caught now and then by the stops. */
static int attach_new(unsigned n)
{
	char dir[600];
	CUdeviceptr p;
	CUcontext c;

	dir_name(dir, sizeof(dir), n);
	setenv("VGPU_SIM_STATE_DIR", dir, 1);
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) ||
	    cuCtxSetCurrent(c) || cuMemAlloc(&p, MIB) || cuMemFree(p))
		return 1;
	return 0;
}

static void loop_attach(void)
{
	while (!atomic_load(&ctl->quit)) {
		unsigned n = atomic_fetch_add(&ctl->dirs, 1) + 1;
		int status;
		pid_t pid = fork();

		worker_check(pid >= 0, __LINE__);
		if (pid == 0)
			_exit(attach_new(n));
		worker_check(waitpid(pid, &status, 0) == pid, __LINE__);
		worker_check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			     __LINE__);
		atomic_fetch_add(&ctl->loops, 1);
	}
}

static void worker(enum kind k, unsigned s)
{
	if (k != ATTACH)
		worker_context();
	atomic_fetch_add(&ctl->loops, 1);	/* set up */
	if (k == MEMORY)
		loop_memory(&s);
	else if (k == SHARED)
		loop_shared(&s);
	else if (k == LAUNCH)
		loop_launch();
	else
		loop_attach();
	atomic_store(&ctl->done, 1);
	while (atomic_load(&ctl->quit) < 2)
		simtest_sleep_ms(1);
	_exit(0);
}

/* Starts a worker in a process group of its own, once it is set up. */
static pid_t worker_start(enum kind k, unsigned round)
{
	unsigned long loops = atomic_load(&ctl->loops);
	pid_t pid;

	atomic_store(&ctl->quit, 0);
	atomic_store(&ctl->done, 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* the test failed */
		worker(k, seed * 7919u + round);
	}
	setpgid(pid, pid);
	while (atomic_load(&ctl->loops) == loops && !atomic_load(&ctl->error))
		simtest_sleep_ms(1);
	cr_assert_eq(atomic_load(&ctl->error), 0,
		     "the worker failed at line %d (seed %u)",
		     atomic_load(&ctl->error), seed);
	return pid;
}

/* The watchdog: a group stopped for WATCHDOG_NS is continued, so that a
 * call waiting for it ends (and fails the test by its time) rather than
 * hanging the test. */
static _Atomic pid_t watch_group;
static _Atomic int watch_signal;
static _Atomic uint64_t watch_since;

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		pid_t g = atomic_load(&watch_group);

		if (g && simtest_now_ns() - atomic_load(&watch_since) >
			 WATCHDOG_NS)
			kill(-g, atomic_load(&watch_signal));
		simtest_sleep_ms(10);
	}
	return NULL;
}

/* From now on, sends sig to group after WATCHDOG_NS (group 0: nothing). */
static void watch_with(pid_t group, int sig)
{
	static pthread_t thread;

	if (!thread)
		cr_assert_eq(pthread_create(&thread, NULL, watchdog, NULL), 0);
	atomic_store(&watch_signal, sig);
	atomic_store(&watch_since, simtest_now_ns());
	atomic_store(&watch_group, group);
}

static void watch(pid_t group)
{
	watch_with(group, SIGCONT);
}

/* Stops the worker's group, and waits until the worker is stopped. */
static void worker_stop(pid_t pid)
{
	int status;

	watch(pid);
	cr_assert_eq(kill(-pid, SIGSTOP), 0);
	cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
	cr_assert(WIFSTOPPED(status), "the worker ended (status %d, seed %u)",
		  status, seed);
	simtest_sleep_ms(1);	/* the rest of its group */
}

static void worker_kill(pid_t pid)
{
	int status;

	kill(-pid, SIGKILL);
	kill(-pid, SIGCONT);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
}

/* The worker lets go of everything, then exits. */
static void worker_end(pid_t pid, void (*check)(void))
{
	int status;

	atomic_store(&ctl->quit, 1);
	while (!atomic_load(&ctl->done) && !atomic_load(&ctl->error))
		simtest_sleep_ms(1);
	cr_assert_eq(atomic_load(&ctl->error), 0,
		     "the worker failed at line %d (seed %u)",
		     atomic_load(&ctl->error), seed);
	if (check)
		check();
	atomic_store(&ctl->quit, 2);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the worker's exit: status %d (seed %u)", status, seed);
}

/* ---- the test's side ----------------------------------------------------- */

struct timing {
	uint64_t round_ns, slowest_ns;
	int slowest_line;
};

static uint64_t t_begin;

static void timed_start(void)
{
	t_begin = simtest_now_ns();
}

static void timed_end(struct timing *t, int line)
{
	uint64_t dt = simtest_now_ns() - t_begin;

	t->round_ns += dt;
	if (dt > t->slowest_ns) {
		t->slowest_ns = dt;
		t->slowest_line = line;
	}
}

#define TIMED(t, call)                                                        \
	do {                                                                  \
		timed_start();                                                \
		CU_OK(call);                                                  \
		timed_end((t), __LINE__);                                     \
	} while (0)

static void timing_check(const struct timing *t, int round)
{
	cr_assert_lt(t->slowest_ns, SLOW_NS,
		     "round %d: the call at line %d took %llu ms (seed %u)",
		     round, t->slowest_line,
		     (unsigned long long)(t->slowest_ns / 1000000), seed);
	cr_assert_lt(t->round_ns, ROUND_NS,
		     "round %d: the calls took %llu ms together (seed %u)",
		     round, (unsigned long long)(t->round_ns / 1000000), seed);
}

/* What every process together holds on device 0. */
static uint64_t used(void)
{
	size_t fr = 0, total = 0;

	CU_OK(cuMemGetInfo(&fr, &total));
	return total - fr;
}

static void used_zero(void)
{
	cr_assert_eq(used(), 0, "the device counts %llu bytes (seed %u)",
		     (unsigned long long)used(), seed);
}

/* The rounds: run, stop, probe, continue or kill. `probe` runs while the
 * worker is stopped; `after_kill` once it is killed (before the next). */
static void rounds(enum kind k, void (*probe)(struct timing *),
		   void (*after_kill)(void), void (*at_end)(void))
{
	uint64_t slowest = 0, worst_round = 0;
	unsigned s = seed;
	pid_t pid = worker_start(k, 0);

	for (int r = 0; r < ROUNDS; r++) {
		struct timing t = { 0 };

		simtest_sleep_ms(1 + rnd(&s) % RUN_MS);
		worker_stop(pid);
		probe(&t);
		watch(0);
		timing_check(&t, r);
		if (t.slowest_ns > slowest)
			slowest = t.slowest_ns;
		if (t.round_ns > worst_round)
			worst_round = t.round_ns;
		if (r % KILL_EVERY == KILL_EVERY - 1) {
			worker_kill(pid);
			if (after_kill)
				after_kill();
			pid = worker_start(k, (unsigned)r + 1);
		} else {
			cr_assert_eq(kill(-pid, SIGCONT), 0);
		}
	}
	worker_end(pid, at_end);
	if (at_end)
		at_end();
	cr_log_info("seed %u: slowest call %llu us, slowest round %llu us",
		    seed, (unsigned long long)(slowest / 1000),
		    (unsigned long long)(worst_round / 1000));
}

/* ---- memory: the state mutex that was ------------------------------------ */

static void probe_memory(struct timing *t)
{
	CUdeviceptr p[8];
	size_t fr, total;

	for (int i = 0; i < 8; i++)
		TIMED(t, cuMemAlloc(&p[i], (size_t)(i + 1) * 256 * 1024));
	TIMED(t, cuMemGetInfo(&fr, &total));
	for (int i = 0; i < 8; i++)
		TIMED(t, cuMemFree(p[i]));
}

Test(stopped, memory, .timeout = 60)
{
	ctl_new();
	setenv("VGPU_SIM_MEMORY", "1GiB", 1);
	simtest_init_shared();
	rounds(MEMORY, probe_memory, used_zero, used_zero);
}

/* ---- shared objects: the same mutex -------------------------------------- */

static void probe_shared(struct timing *t)
{
	unsigned n = atomic_load(&ctl->nhandles);
	CUipcMemHandle h;
	CUdeviceptr p, q;
	CUresult rc;

	TIMED(t, cuMemAlloc(&p, MIB));
	TIMED(t, cuIpcGetMemHandle(&h, p));
	TIMED(t, vmm_export_once());
	/* The worker's latest export: its exporter may have freed it (or be
	 * stopped half-way through writing it here). */
	if (n > 0) {
		h = ctl->handles[(n - 1) % HANDLES];
		timed_start();
		rc = cuIpcOpenMemHandle(&q, h,
					CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		timed_end(t, __LINE__);
		cr_assert(rc == CUDA_SUCCESS || rc == CUDA_ERROR_INVALID_HANDLE,
			  "cuIpcOpenMemHandle: %s (seed %u)", simtest_err(rc),
			  seed);
		if (rc == CUDA_SUCCESS)
			TIMED(t, cuIpcCloseMemHandle(q));
	}
	TIMED(t, cuMemFree(p));
}

Test(stopped, shared, .timeout = 60)
{
	ctl_new();
	setenv("VGPU_SIM_MEMORY", "1GiB", 1);
	simtest_init_shared();
	rounds(SHARED, probe_shared, used_zero, used_zero);
}

/* ---- the engine's queue -------------------------------------------------- */

static CUfunction probe_fn;

static void probe_launch(struct timing *t)
{
	for (int i = 0; i < 10; i++)
		TIMED(t, launch_once(probe_fn));
}

Test(stopped, launch, .timeout = 60)
{
	ctl_new();
	simtest_init_shared();
	probe_fn = nop_kernel();
	cr_assert_not_null(probe_fn);
	rounds(LAUNCH, probe_launch, NULL, used_zero);
}

/* ---- the state file's set-up: the flock that was ------------------------- */

/* A new process attaches to the worker's latest device, in its set-up or
 * just set up, allocates and frees; it reports the time and what the
 * device counts after its free. */
struct attach_report {
	uint64_t ns, used_after;
	int failed;
};

static struct attach_report attach_probe(unsigned n)
{
	struct attach_report rep = { 0 };
	uint64_t t0 = simtest_now_ns();
	int fds[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char dir[600];
		size_t fr = 0, total = 0;
		CUdeviceptr p;
		CUcontext c;

		close(fds[0]);
		dir_name(dir, sizeof(dir), n);
		setenv("VGPU_SIM_STATE_DIR", dir, 1);
		rep.failed = cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) ||
			     cuCtxSetCurrent(c) || cuMemAlloc(&p, MIB) ||
			     cuMemFree(p) || cuMemGetInfo(&fr, &total);
		rep.used_after = total - fr;
		_exit(write(fds[1], &rep, sizeof(rep)) == sizeof(rep) ? 0 : 1);
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &rep, sizeof(rep)), sizeof(rep));
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	rep.ns = simtest_now_ns() - t0;
	return rep;
}

static void probe_attach(struct timing *t)
{
	unsigned n = atomic_load(&ctl->dirs);
	struct attach_report rep = attach_probe(n);

	cr_assert_eq(rep.failed, 0, "a new process on the device %u failed "
		     "(seed %u)", n, seed);
	/* What the stopped process holds, if it was stopped holding it. */
	cr_assert(rep.used_after == 0 || rep.used_after == MIB,
		  "device %u counts %llu bytes (seed %u)", n,
		  (unsigned long long)rep.used_after, seed);
	t->round_ns += rep.ns;
	t->slowest_ns = rep.ns;
	t->slowest_line = __LINE__;
}

/* Killed: the device it was setting up or using counts nothing. */
static void attach_after_kill(void)
{
	unsigned n = atomic_load(&ctl->dirs);
	struct attach_report rep = attach_probe(n);

	cr_assert_eq(rep.failed, 0, "device %u (seed %u)", n, seed);
	cr_assert_eq(rep.used_after, 0, "device %u counts %llu bytes "
		     "(seed %u)", n, (unsigned long long)rep.used_after, seed);
}

/* The devices' directories under the state directory (its .fini removes
 * only the state directory's own files). */
static void attach_cleanup(void)
{
	char dir[600], path[700];

	for (unsigned n = 1; ctl && n <= atomic_load(&ctl->dirs); n++) {
		dir_name(dir, sizeof(dir), n);
		snprintf(path, sizeof(path), "%s/dev0.state", dir);
		unlink(path);
		rmdir(dir);
	}
}

Test(stopped, attach, .fini = attach_cleanup, .timeout = 60)
{
	const char *base;

	ctl_new();
	base = simtest_env();
	snprintf(ctl->base, sizeof(ctl->base), "%s", base);
	rounds(ATTACH, probe_attach, attach_after_kill, NULL);
	/* Every device of the run counts nothing, its processes gone. */
	for (unsigned n = 1; n <= atomic_load(&ctl->dirs); n++) {
		struct attach_report rep = attach_probe(n);

		cr_assert_eq(rep.failed, 0, "device %u (seed %u)", n, seed);
		cr_assert_eq(rep.used_after, 0, "device %u (seed %u)", n, seed);
	}
}

/* ---- the engine's queue: a turn nobody takes ----------------------------- */

/* The device file of this test, mapped (state_internal.h: the layout). */
static struct state_file *map_state(void)
{
	char path[700];
	struct state_file *sh;
	int fd;

	snprintf(path, sizeof(path), "%s/dev0.state",
		 getenv("VGPU_SIM_STATE_DIR"));
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0, "%s", path);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(sh, MAP_FAILED);
	return sh;
}

/* Times a launch (with its synchronisation) behind the queue as it is. */
static uint64_t launch_ns(CUfunction f)
{
	uint64_t t0 = simtest_now_ns();

	CU_OK(launch_once(f));
	return simtest_now_ns() - t0;
}

/* A process stopped between taking its ticket and saying whose it is (two
 * instructions): nobody registers the turn; it is passed on after a short
 * silence, not a second. */
Test(stopped, orphan_ticket, .timeout = 60)
{
	struct state_file *sh;
	CUfunction f;
	uint64_t ns;

	simtest_init_shared();
	f = nop_kernel();
	cr_assert_not_null(f);
	CU_OK(launch_once(f));
	sh = map_state();
	atomic_fetch_add(&sh->next_ticket, 1);
	ns = launch_ns(f);
	cr_log_info("behind an orphan ticket: %llu us",
		    (unsigned long long)(ns / 1000));
	cr_assert_lt(ns, 500000000ull, "the launch took %llu ms",
		     (unsigned long long)(ns / 1000000));
	CU_OK(launch_once(f));
	munmap(sh, sizeof(*sh));
}

/* A live process stopped at the head of the queue where its state cannot be
 * read (another pid namespace: made so here by changing its slot's): its
 * turn is passed on after a short silence; it is not waited for. */
Test(stopped, silent_head, .timeout = 60)
{
	struct vsim_slot_time slots[8];
	struct state_file *sh;
	CUfunction f;
	uint32_t t, slot = UINT32_MAX;
	uint64_t ns;
	long n;
	pid_t pid;

	ctl_new();
	simtest_init_shared();
	f = nop_kernel();
	cr_assert_not_null(f);
	pid = worker_start(MEMORY, 0);	/* any process with a slot */
	worker_stop(pid);
	n = vsim_record_slots(NULL, 0, slots, 8);
	for (long i = 0; i < n; i++)
		if (slots[i].pid == pid)
			slot = slots[i].slot;
	cr_assert_neq(slot, UINT32_MAX, "the worker has no slot");
	sh = map_state();
	sh->slots[slot].pidns_ino ^= 1;
	t = atomic_fetch_add(&sh->next_ticket, 1);
	atomic_store(&sh->ring[t % STATE_RING], (uint64_t)t << 32 | slot);
	watch_with(pid, SIGKILL);	/* without the rule: dead, at last */
	ns = launch_ns(f);
	watch(0);
	cr_log_info("behind a silent head: %llu us",
		    (unsigned long long)(ns / 1000));
	cr_assert_lt(ns, 500000000ull, "the launch took %llu ms",
		     (unsigned long long)(ns / 1000000));
	worker_kill(pid);
	munmap(sh, sizeof(*sh));
}

/* ---- the state file's set-up, by many at once ---------------------------- */

#define RACERS 6

/* RACERS processes start on one device at once, each allocating 1 MiB;
 * each reads what the device counts once all have: the same file for all
 * (RACERS MiB), however the file was found. */
static void attach_race(void)
{
	pid_t pids[RACERS];
	int go[2], check[2], ready[2], out[2], fin[2];
	uint64_t seen;
	char c = 0;

	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(check), 0);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(fin), 0);
	for (int i = 0; i < RACERS; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			size_t fr = 0, total = 0;
			CUdeviceptr p;
			CUcontext ctx;

			if (read(go[0], &c, 1) != 1 || cuInit(0) ||
			    cuDevicePrimaryCtxRetain(&ctx, 0) ||
			    cuCtxSetCurrent(ctx) || cuMemAlloc(&p, MIB))
				_exit(1);
			if (write(ready[1], "r", 1) != 1 ||
			    read(check[0], &c, 1) != 1 ||
			    cuMemGetInfo(&fr, &total))
				_exit(1);
			seen = total - fr;
			if (write(out[1], &seen, sizeof(seen)) != sizeof(seen))
				_exit(1);
			close(fin[1]);
			/* Alive until all have read: a racer gone early
			 * takes its memory with it. */
			_exit(read(fin[0], &c, 1) == 0 ? 0 : 1);
		}
	}
	close(ready[1]);	/* a racer that fails: read() says so */
	close(out[1]);
	close(fin[0]);
	cr_assert_eq(write(go[1], "gggggggggggggggg", RACERS), RACERS);
	for (int i = 0; i < RACERS; i++)
		cr_assert_eq(read(ready[0], &c, 1), 1, "a racer failed");
	cr_assert_eq(write(check[1], "cccccccccccccccc", RACERS), RACERS);
	for (int i = 0; i < RACERS; i++) {
		cr_assert_eq(read(out[0], &seen, sizeof(seen)), sizeof(seen),
			     "a racer failed");
		cr_assert_eq(seen, RACERS * MIB, "a racer sees %llu bytes",
			     (unsigned long long)seen);
	}
	close(fin[1]);
	for (int i = 0; i < RACERS; i++) {
		int status;

		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

Test(stopped, setup_race_new, .timeout = 60)
{
	simtest_env();
	attach_race();
}

/* A file of another version (or damaged) is replaced once, by one of
 * them, not once each. */
Test(stopped, setup_race_replaced, .timeout = 60)
{
	char path[700], junk[4096];
	int fd;

	simtest_env();
	snprintf(path, sizeof(path), "%s/dev0.state",
		 getenv("VGPU_SIM_STATE_DIR"));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	memset(junk, 0x5a, sizeof(junk));
	cr_assert_eq(write(fd, junk, sizeof(junk)), sizeof(junk));
	close(fd);
	attach_race();
}
