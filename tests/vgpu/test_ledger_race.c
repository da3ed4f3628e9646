/* test_ledger_race.c - the ledger under concurrency and crashes: threads
 * with exact totals, two processes racing past a limit, a process dying
 * with the tenant lock held, and 16 processes SIGKILLed at random moments
 * (latency of the survivors, quota back, totals equal to what the living
 * hold). Children are fork()ed and share a page of results with the test. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "ledger_test.h"

TestSuite(ledger_race, .init = ledger_dir_make, .fini = ledger_dir_remove);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *shared_page(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

/* In a forked child: a ledger and a slot of its own, as the shim does. */
static struct vgpu_slot *child_join(struct vgpu_ledger *inherited,
				    const char *tenant, uint64_t limit)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s;
	char err[512];

	vgpu_ledger_forget_after_fork(inherited);
	if (vgpu_ledger_open(test_dir, UUID, 0, &l, err, sizeof(err)) ||
	    vgpu_ledger_join(l, tenant, limit, getpid(), 0, &s, err,
			     sizeof(err)) < 0) {
		fprintf(stderr, "child %d: %s\n", getpid(), err);
		_exit(100);
	}
	return s;
}

static void expect_exit_zero(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child %d: status %#x", (int)pid, status);
}

/* ---- threads ------------------------------------------------------------ */

/* The one-second bound on any call, as promised; under a sanitizer the
 * same steps run several times slower (scripts/sanitize.sh leaves the
 * timing suites out for that reason), so only a hang is caught there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CALL_BOUND_NS	5000000000ull
#else
#define CALL_BOUND_NS	1000000000ull
#endif

#define THREADS	8
#define PAIRS	100000

struct thread_arg {
	struct vgpu_slot *s;
	int *holders, *max_holders;
	int refused;
};

static void note_holders(struct thread_arg *a, int delta)
{
	int h = __atomic_add_fetch(a->holders, delta, __ATOMIC_SEQ_CST);
	int m = __atomic_load_n(a->max_holders, __ATOMIC_RELAXED);

	while (h > m && !__atomic_compare_exchange_n(a->max_holders, &m, h,
			false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Holds up to 3 MiB at a time under a 4 MiB limit shared by 8 threads:
 * refusals are frequent; `holders` counts grants held, never above 4. */
static void *thread_loop(void *p)
{
	struct thread_arg *a = p;
	int held[3], n = 0, i, rc;

	for (i = 0; i < PAIRS; i++) {
		int kind = i % VGPU_USAGE_SPILLED;

		rc = vgpu_ledger_reserve(a->s, kind, MiB);
		if (rc == 0) {
			note_holders(a, 1);
			held[n++] = kind;
		} else {
			a->refused++;
		}
		if (n == 3 || (rc != 0 && n > 0)) {
			while (n > 0) {
				note_holders(a, -1);
				vgpu_ledger_release(a->s, held[--n], MiB);
			}
		}
		if (i % 1024 == 0)
			sched_yield();
	}
	while (n > 0) {
		note_holders(a, -1);
		vgpu_ledger_release(a->s, held[--n], MiB);
	}
	return NULL;
}

Test(ledger_race, threads_keep_exact_totals_and_the_limit)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s[2] = { ledger_join_ok(l, "team", 4 * MiB),
				   ledger_join_ok(l, "team", 4 * MiB) };
	struct thread_arg a[THREADS];
	pthread_t th[THREADS];
	int holders = 0, max_holders = 0, refused = 0, i;
	uint64_t allocs;

	for (i = 0; i < THREADS; i++) {
		a[i] = (struct thread_arg){ s[i % 2], &holders, &max_holders,
					    0 };
		cr_assert_eq(pthread_create(&th[i], NULL, thread_loop, &a[i]),
			     0);
	}
	for (i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		refused += a[i].refused;
	}
	cr_log_info("refused %d of %d, at most %d held at once", refused,
		    THREADS * PAIRS, max_holders);
	cr_expect_leq(max_holders, 4);
	cr_expect_gt(refused, 0);
	cr_expect_eq(vgpu_ledger_tenant_used(s[0]), 0);
	for (i = 0; i < VGPU_USAGE_COUNT; i++)
		cr_expect_eq(vgpu_ledger_tenant_usage(s[0], i), 0);
	allocs = vgpu_ledger_slot_record(s[0])->allocs +
		 vgpu_ledger_slot_record(s[1])->allocs;
	cr_expect_eq(allocs, (uint64_t)THREADS * PAIRS - (uint64_t)refused);
	cr_expect_eq(vgpu_ledger_slot_record(s[0])->frees +
		     vgpu_ledger_slot_record(s[1])->frees, allocs);
	vgpu_ledger_close(l);
}

/* ---- two processes, one limit ------------------------------------------- */

#define ROUNDS 1000

struct barrier {
	int count, phase;
};

static void barrier_wait(struct barrier *b, int n)
{
	int phase = __atomic_load_n(&b->phase, __ATOMIC_ACQUIRE), spins = 0;

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == n) {
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&b->phase, phase + 1, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(&b->phase, __ATOMIC_ACQUIRE) == phase)
		if (++spins % 4096 == 0)
			sched_yield();
		else
			__builtin_ia32_pause();
}

struct race {
	struct barrier bar;
	char won[2][ROUNDS];
};

Test(ledger_race, two_processes_never_both_pass_the_limit)
{
	struct race *r = shared_page(sizeof(struct race));
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	int i, round, both = 0, none = 0, won0 = 0;
	pid_t pid[2];

	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			struct vgpu_slot *cs = child_join(l, "team", GiB);
			unsigned seed = (unsigned)getpid();

			for (round = 0; round < ROUNDS; round++) {
				int rc, spin = rand_r(&seed) % 64;

				barrier_wait(&r->bar, 2);
				while (spin--)	/* who comes first varies */
					__builtin_ia32_pause();
				rc = vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER,
							 600 * MiB);
				r->won[i][round] = rc == 0;
				barrier_wait(&r->bar, 2);
				if (rc == 0)
					vgpu_ledger_release(cs,
						VGPU_USAGE_BUFFER, 600 * MiB);
				barrier_wait(&r->bar, 2);
			}
			_exit(0);
		}
	}
	for (i = 0; i < 2; i++)
		expect_exit_zero(pid[i]);
	for (round = 0; round < ROUNDS; round++) {
		both += r->won[0][round] && r->won[1][round];
		none += !r->won[0][round] && !r->won[1][round];
		won0 += r->won[0][round];
	}
	cr_log_info("child 0 won %d rounds, child 1 %d", won0, ROUNDS - won0);
	cr_expect_eq(both, 0, "both won %d of %d rounds", both, ROUNDS);
	cr_expect_eq(none, 0, "neither won %d of %d rounds", none, ROUNDS);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_ledger_close(l);
}

/* ---- death ------------------------------------------------------------------ */

/* A child reserves `bytes`, optionally takes the tenant lock, and waits to
 * be killed. Returns after it is dead. */
static void child_dies_holding(struct vgpu_ledger *l, uint64_t bytes,
			       bool in_lock, int *ready)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		struct vgpu_slot *cs = child_join(l, "team", GiB);

		if (vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER, bytes))
			_exit(101);
		if (in_lock && vgpu__ledger_lock(cs))
			_exit(102);
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
		for (;;)
			pause();
	}
	while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE))
		sched_yield();
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status), "status %#x", status);
}

Test(ledger_race, a_dead_processes_quota_comes_back_within_50ms)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	uint64_t t0, dt;

	child_dies_holding(l, GiB, false, ready);
	cr_expect_eq(vgpu_ledger_tenant_used(s), GiB);
	t0 = now_ns();
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, GiB), 0);
	dt = now_ns() - t0;
	cr_expect_lt(dt, 50000000u, "took %llu ns", (unsigned long long)dt);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_ledger_close(l);
}

Test(ledger_race, a_process_dying_with_the_lock_blocks_nobody)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	uint64_t t0, dt;

	child_dies_holding(l, 700 * MiB, true, ready);
	t0 = now_ns();
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 300 * MiB), 0);
	dt = now_ns() - t0;
	cr_expect_lt(dt, 50000000u, "lock taken back in %llu ns",
		     (unsigned long long)dt);
	/* The dead one's 700 MiB are still charged until refused... */
	cr_expect_eq(vgpu_ledger_tenant_used(s), 1000 * MiB);
	/* ...and come back on the first refusal. */
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 700 * MiB), 0);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	cr_expect_eq(vgpu_ledger_tenant_record(s)->lock, 0);
	vgpu_ledger_close(l);
}

/* A live process that holds the tenant lock and is stopped (SIGSTOP):
 * the others' reservations time out after the bound, with ETIMEDOUT and
 * not EOVERLIMIT, and the lock word names the holder's pid. */
Test(ledger_race, a_stopped_holder_times_out_others_and_is_named)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	int32_t pid = 0, hpid = -1;
	uint64_t t0, dt;
	int status;
	pid_t child = fork();

	if (child == 0) {
		struct vgpu_slot *cs = child_join(l, "team", GiB);

		if (vgpu__ledger_lock(cs))
			_exit(102);
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
		raise(SIGSTOP);
		for (;;)
			pause();
	}
	while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(waitpid(child, &status, WUNTRACED), child);
	cr_assert(WIFSTOPPED(status), "status %#x", status);
	cr_expect_eq(vgpu_ledger_lock_holder(s, &pid, &hpid), 0);
	cr_expect_eq(pid, child);
	cr_expect_eq(hpid, 0);
	t0 = now_ns();
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB),
		     VGPU_LEDGER_ETIMEDOUT);
	dt = now_ns() - t0;
	cr_expect_geq(dt, VGPU_LEDGER_LOCK_TIMEOUT_NS);
	cr_expect_lt(dt, 3 * VGPU_LEDGER_LOCK_TIMEOUT_NS, "%llu ns",
		     (unsigned long long)dt);
	cr_expect_eq(vgpu_ledger_slot_record(s)->failures, 0);
	kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, GiB), 0);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	cr_expect_eq(vgpu_ledger_lock_holder(s, &pid, &hpid),
		     VGPU_LEDGER_EINVAL);
	vgpu_ledger_close(l);
}

Test(ledger_race, reclaim_returns_every_dead_slot)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	int i;

	for (i = 0; i < 3; i++) {
		*ready = 0;
		child_dies_holding(l, 100 * MiB, i == 1, ready);
	}
	cr_expect_eq(vgpu_ledger_tenant_used(s), 300 * MiB);
	cr_expect_eq(vgpu_ledger_reclaim(l), 3);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	cr_expect_eq(vgpu_ledger_reclaim(l), 0);
	vgpu_ledger_close(l);
}

/* ---- 16 processes, killed at random ----------------------------------------- */

#define WORKERS		16
#define CHAOS_NS	3000000000ull
#define CHAOS_LIMIT	(256 * MiB)

struct chaos {
	int stop;			/* 1: park, 2: leave and exit */
	int die_in_lock[WORKERS];	/* take the tenant lock and die */
	int parked[WORKERS];
	uint64_t max_ns[WORKERS];	/* slowest reserve or release */
	uint64_t ops[WORKERS];
	uint64_t timeouts[WORKERS];
	uint64_t held[WORKERS][VGPU_USAGE_COUNT];
};

struct holding {
	int kind;
	uint64_t bytes;
};

static void chaos_op(struct chaos *c, int w, struct vgpu_slot *s,
		     struct holding *h, int *n, unsigned *seed)
{
	uint64_t t0 = now_ns(), dt;
	int rc = 0, j;

	if (*n < 8 && (*n == 0 || rand_r(seed) % 2)) {
		h[*n].kind = rand_r(seed) % VGPU_USAGE_SPILLED;
		h[*n].bytes = (1 + rand_r(seed) % 8) * MiB;
		rc = vgpu_ledger_reserve(s, h[*n].kind, h[*n].bytes);
		if (rc == 0)
			(*n)++;
	} else {
		j = rand_r(seed) % *n;
		vgpu_ledger_release(s, h[j].kind, h[j].bytes);
		h[j] = h[--*n];
	}
	dt = now_ns() - t0;
	if (dt > c->max_ns[w])
		c->max_ns[w] = dt;
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		c->timeouts[w]++;
	c->ops[w]++;
}

static void chaos_worker(struct chaos *c, int w, struct vgpu_ledger *l)
{
	struct vgpu_slot *s = child_join(l, "team", CHAOS_LIMIT);
	struct holding h[8];
	unsigned seed = (unsigned)getpid();
	int n = 0, j;

	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		if (__atomic_load_n(&c->die_in_lock[w], __ATOMIC_ACQUIRE)) {
			vgpu__ledger_lock(s);
			raise(SIGKILL);
		}
		chaos_op(c, w, s, h, &n, &seed);
	}
	for (j = 0; j < n; j++)
		c->held[w][h[j].kind] += h[j].bytes;
	__atomic_store_n(&c->parked[w], 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) != 2)
		usleep(1000);
	vgpu_ledger_leave(s);
	_exit(0);
}

static pid_t chaos_spawn(struct chaos *c, int w, struct vgpu_ledger *l)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		chaos_worker(c, w, l);
	return pid;
}

/* The totals the file holds: per kind, over the tenant's active slots. */
static void slots_sum(struct vgpu_ledger *l, uint32_t t, uint64_t *sum)
{
	const struct vgpu_ledger_slot *r = (const void *)
		((const char *)vgpu_ledger_header(l) + VGPU_LEDGER_SLOTS_OFFSET);
	int i, k;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (r[i].state == VGPU_SLOT_ACTIVE && r[i].tenant == t)
			for (k = 0; k < VGPU_USAGE_COUNT; k++)
				sum[k] += r[i].usage[k];
}

static int chaos_kill(struct chaos *c, pid_t *pid, unsigned *seed, int kills)
{
	int w = rand_r(seed) % WORKERS;

	if (kills % 3 == 0)
		__atomic_store_n(&c->die_in_lock[w], 1, __ATOMIC_RELEASE);
	else
		kill(pid[w], SIGKILL);
	waitpid(pid[w], NULL, 0);
	__atomic_store_n(&c->die_in_lock[w], 0, __ATOMIC_RELEASE);
	return w;
}

Test(ledger_race, sixteen_processes_killed_at_random, .timeout = 30)
{
	struct chaos *c = shared_page(sizeof(struct chaos));
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", CHAOS_LIMIT);
	const struct vgpu_ledger_tenant *ten = vgpu_ledger_tenant_record(s);
	uint64_t held[VGPU_USAGE_COUNT] = { 0 }, sum[VGPU_USAGE_COUNT] = { 0 };
	uint64_t end, max_ns = 0, ops = 0, timeouts = 0;
	unsigned seed = 12345;
	pid_t pid[WORKERS];
	int w, k, kills = 0;

	for (w = 0; w < WORKERS; w++)
		pid[w] = chaos_spawn(c, w, l);
	/* At least CHAOS_NS, and on until 30 kills however slow the machine
	 * (a sanitizer build, a loaded CI host), within the test's timeout. */
	end = now_ns() + CHAOS_NS;
	while (now_ns() < end ||
	       (kills <= 30 && now_ns() < end + 4 * CHAOS_NS)) {
		usleep(2000 + rand_r(&seed) % 20000);
		w = chaos_kill(c, pid, &seed, kills++);
		pid[w] = chaos_spawn(c, w, l);
	}
	__atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
	for (w = 0; w < WORKERS; w++)
		while (!__atomic_load_n(&c->parked[w], __ATOMIC_ACQUIRE))
			usleep(1000);
	vgpu_ledger_reclaim(l);
	for (w = 0; w < WORKERS; w++) {
		for (k = 0; k < VGPU_USAGE_COUNT; k++)
			held[k] += c->held[w][k];
		max_ns = c->max_ns[w] > max_ns ? c->max_ns[w] : max_ns;
		ops += c->ops[w];
		timeouts += c->timeouts[w];
	}
	slots_sum(l, vgpu_ledger_slot_record(s)->tenant, sum);
	cr_log_info("%d kills (%d in the lock), %llu operations, slowest "
		    "%.3f ms", kills, (kills + 2) / 3, (unsigned long long)ops,
		    max_ns / 1e6);
	cr_expect_lt(max_ns, CALL_BOUND_NS, "a call waited %llu ns",
		     (unsigned long long)max_ns);
	cr_expect_eq(timeouts, 0);
	cr_expect_gt(kills, 20);
	for (k = 0; k < VGPU_USAGE_COUNT; k++) {
		cr_expect_eq(ten->usage[k], held[k], "kind %d: %llu vs %llu",
			     k, (unsigned long long)ten->usage[k],
			     (unsigned long long)held[k]);
		cr_expect_eq(sum[k], held[k], "kind %d", k);
	}
	cr_expect_leq(ten->used, CHAOS_LIMIT);
	__atomic_store_n(&c->stop, 2, __ATOMIC_RELEASE);
	for (w = 0; w < WORKERS; w++)
		expect_exit_zero(pid[w]);
	cr_expect_eq(ten->used, 0);
	cr_expect_eq(ten->lock, 0);
	vgpu_ledger_close(l);
}
