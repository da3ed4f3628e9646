/* test_ledger_race.c - the ledger under concurrency and crashes: threads
 * with exact totals, two processes racing past a limit, a process dying
 * with the tenant lock held, and 16 processes SIGKILLed at random moments
 * (latency of the survivors, quota back, totals equal to what the living
 * hold); joining without a file-wide lock: processes stopped at random
 * moments of their joins while another tenant joins, two joiners of one new
 * name, a joiner of an idle tenant against one that wants its record, and a
 * stopped holder of a tenant's own lock. Children are fork()ed and share a
 * page of results with the test; every random choice is seeded. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* ---- joining without a file-wide lock ------------------------------------- */

static const struct vgpu_ledger_tenant *tenants_of(struct vgpu_ledger *l)
{
	return (const void *)((const char *)vgpu_ledger_header(l) +
			      VGPU_LEDGER_TENANTS_OFFSET);
}

/* Ready records (key's high half 0) named `name`. */
static int records_named(struct vgpu_ledger *l, const char *name)
{
	const struct vgpu_ledger_tenant *ten = tenants_of(l);
	int t, n = 0;

	for (t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		uint64_t k = __atomic_load_n(&ten[t].key, __ATOMIC_ACQUIRE);

		if (k && !(k >> 32) && strcmp(ten[t].name, name) == 0)
			n++;
	}
	return n;
}

/* No name has two ready records. */
static void expect_names_unique(struct vgpu_ledger *l)
{
	const struct vgpu_ledger_tenant *ten = tenants_of(l);

	for (int t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if (ten[t].key && !(ten[t].key >> 32))
			cr_expect_eq(records_named(l, ten[t].name), 1,
				     "tenant '%s' has %d records",
				     ten[t].name, records_named(l, ten[t].name));
}

/* Every tenant's totals are the sums of its active slots. */
static void expect_totals_exact(struct vgpu_ledger *l)
{
	const struct vgpu_ledger_tenant *ten = tenants_of(l);

	for (uint32_t t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		uint64_t sum[VGPU_USAGE_COUNT] = { 0 }, used = 0;

		if (ten[t].state != VGPU_TENANT_ACTIVE)
			continue;
		slots_sum(l, t, sum);
		for (int k = 0; k < VGPU_USAGE_COUNT; k++) {
			cr_expect_eq(ten[t].usage[k], sum[k],
				     "tenant '%s' kind %d: %llu, slots %llu",
				     ten[t].name, k,
				     (unsigned long long)ten[t].usage[k],
				     (unsigned long long)sum[k]);
			if (VGPU_USAGE_IS_DEVICE(k))
				used += sum[k];
		}
		cr_expect_eq(ten[t].used, used, "tenant '%s'", ten[t].name);
	}
}

/* Two racers and the test, round after round: only the racers spin at
 * the start (on two cores, a third spinner would keep them apart); the
 * test waits for both joins, checks, and lets them go on. */
struct rounds {
	struct barrier bar;
	int joined, checked;
};

static void racer_joined(struct rounds *r, int round)
{
	__atomic_add_fetch(&r->joined, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&r->checked, __ATOMIC_ACQUIRE) <= round)
		usleep(50);
}

static void test_wait_joins(struct rounds *r, int round)
{
	while (__atomic_load_n(&r->joined, __ATOMIC_ACQUIRE) < 2 * (round + 1))
		usleep(50);
}

static void test_checked(struct rounds *r, int round)
{
	__atomic_store_n(&r->checked, round + 1, __ATOMIC_RELEASE);
}

static int tenant_index(struct vgpu_slot *s, struct vgpu_ledger *l)
{
	return (int)(vgpu_ledger_tenant_record(s) - tenants_of(l));
}

/* In a forked child: its own handle on the test's ledger. */
static struct vgpu_ledger *child_open(struct vgpu_ledger *inherited)
{
	struct vgpu_ledger *l;
	char err[512];

	vgpu_ledger_forget_after_fork(inherited);
	if (vgpu_ledger_open(test_dir, UUID, 0, &l, err, sizeof(err))) {
		fprintf(stderr, "child %d: %s\n", getpid(), err);
		_exit(100);
	}
	return l;
}

/* A random head start of up to max_us, so that either racer may come
 * first, or both at once. */
static void spin_a_little(unsigned *seed, unsigned max_us)
{
	uint64_t until = now_ns() + (uint64_t)(rand_r(seed) % max_us) * 1000;

	while (now_ns() < until)
		__builtin_ia32_pause();
}

/* (a) A process group of another tenant joins and leaves in a loop
 * (names from a set larger than the ledger's tenant records, so records are
 * made, found and reused all the time) and is stopped at a random moment,
 * 20 times, while this tenant starts jobs: every join, reserve, release and
 * leave of this tenant succeeds, none slower than a second. The group is
 * then resumed or killed where it stopped; at the end the totals are exact
 * and no name has two records. */
#define STOP_ROUNDS	20
#define STOPPERS	4
#define STOP_NAMES	150
#define STOP_JOBS	6

static void stopper(struct vgpu_ledger *inherited, unsigned seed)
{
	struct vgpu_ledger *l = child_open(inherited);
	struct vgpu_slot *s;
	char name[32], err[512];

	for (;;) {
		snprintf(name, sizeof(name), "a-%u",
			 rand_r(&seed) % STOP_NAMES);
		if (vgpu_ledger_join(l, name, GiB, getpid(), 0, &s, err,
				     sizeof(err)) < 0)
			continue;	/* its own tenant's wait: allowed */
		if (vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB) == 0 &&
		    rand_r(&seed) % 2)
			vgpu_ledger_release(s, VGPU_USAGE_BUFFER, MiB);
		vgpu_ledger_leave(s);
	}
}

static pid_t stoppers_start(struct vgpu_ledger *l, pid_t *pid, unsigned seed)
{
	pid_t group = 0;

	for (int w = 0; w < STOPPERS; w++) {
		pid[w] = fork();
		cr_assert_geq(pid[w], 0);
		if (pid[w] == 0) {
			setpgid(0, group);
			stopper(l, seed * 31 + (unsigned)w);
		}
		setpgid(pid[w], group);	/* whichever runs first */
		if (!group)
			group = pid[w];
	}
	return group;
}

/* One job of this tenant: join, hold, give back, leave; its time. */
static uint64_t job(struct vgpu_ledger *l, const char *name, int *failures,
		    char *why, size_t len)
{
	uint64_t t0 = now_ns();
	struct vgpu_slot *s;
	int rc;

	rc = vgpu_ledger_join(l, name, GiB, getpid(), 0, &s, why, len);
	if (rc < 0) {
		(*failures)++;
		return now_ns() - t0;
	}
	if (vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 64 * MiB) != 0) {
		snprintf(why, len, "tenant '%s': reserve refused", name);
		(*failures)++;
	} else {
		vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 64 * MiB);
	}
	vgpu_ledger_leave(s);
	return now_ns() - t0;
}

Test(ledger_race, processes_stopped_while_joining_hold_up_no_other_tenant,
     .timeout = 60)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *hold = ledger_join_ok(l, "b-hold", GiB);
	unsigned seed = 2024;
	uint64_t dt, max_ns = 0;
	int failures = 0, jobs = 0, status;
	char name[32], why[512] = "";
	pid_t pid[STOPPERS], group;

	cr_assert_eq(vgpu_ledger_reserve(hold, VGPU_USAGE_ARRAY, 7 * MiB), 0);
	for (int round = 0; round < STOP_ROUNDS; round++) {
		group = stoppers_start(l, pid, seed + (unsigned)round);
		usleep(1000 + rand_r(&seed) % 20000);
		kill(-group, SIGSTOP);
		for (int w = 0; w < STOPPERS; w++) {
			cr_assert_eq(waitpid(pid[w], &status, WUNTRACED),
				     pid[w]);
			cr_assert(WIFSTOPPED(status), "status %#x", status);
		}
		/* This tenant's jobs: an existing tenant, a new one each
		 * round (a record made or reused), and the held one. */
		for (int j = 0; j < STOP_JOBS; j++) {
			if (j % 3 == 0)
				snprintf(name, sizeof(name), "b");
			else if (j % 3 == 1)
				snprintf(name, sizeof(name), "b-%d-%d", round,
					 j);
			else
				snprintf(name, sizeof(name), "b-hold");
			dt = job(l, name, &failures, why, sizeof(why));
			max_ns = dt > max_ns ? dt : max_ns;
			jobs++;
		}
		/* Resumed (and killed later, where it then is) or killed
		 * where it stopped. */
		if (round % 2) {
			kill(-group, SIGCONT);
			usleep(rand_r(&seed) % 5000);
		}
		kill(-group, SIGKILL);
		for (int w = 0; w < STOPPERS; w++)
			waitpid(pid[w], NULL, 0);
		if (failures > 2)
			break;	/* said below, without 20 seconds' waits */
	}
	cr_log_info("%d jobs of another tenant, slowest %.3f ms", jobs,
		    max_ns / 1e6);
	cr_expect_eq(failures, 0, "%d of %d jobs failed; last: %s", failures,
		     jobs, why);
	cr_expect_lt(max_ns, CALL_BOUND_NS, "a job took %llu ns",
		     (unsigned long long)max_ns);
	vgpu_ledger_reclaim(l);
	expect_totals_exact(l);
	expect_names_unique(l);
	cr_expect_eq(vgpu_ledger_tenant_usage(hold, VGPU_USAGE_ARRAY), 7 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(hold), 7 * MiB);
	vgpu_ledger_close(l);
}

/* (b) Two processes join the same new name at once, round after round
 * (a fresh record at first, an idle one reused once all 128 are taken):
 * both join one record, and exactly one of them sets its terms. */
#define NAME_ROUNDS	600

struct name_race {
	struct rounds step;
	int rc[2], tenant[2], setter[2];
	char err[2][256];
};

static void name_racer(struct name_race *r, int i, struct vgpu_ledger *in)
{
	struct vgpu_ledger *l = child_open(in);
	unsigned seed = 77u + (unsigned)i;
	struct vgpu_slot *s;
	char name[32];

	for (int round = 0; round < NAME_ROUNDS; round++) {
		snprintf(name, sizeof(name), "new-%d", round);
		barrier_wait(&r->step.bar, 2);
		spin_a_little(&seed, 8);
		r->rc[i] = vgpu_ledger_join(l, name, (uint64_t)(i + 1) * GiB,
					    getpid(), 0, &s, r->err[i],
					    sizeof(r->err[i]));
		r->tenant[i] = r->rc[i] >= 0 ? tenant_index(s, l) : -1;
		r->setter[i] = r->rc[i] >= 0 && vgpu_ledger_set_terms(s);
		racer_joined(&r->step, round);
		if (r->rc[i] >= 0)
			vgpu_ledger_leave(s);
	}
	_exit(0);
}

Test(ledger_race, two_joiners_of_a_new_name_make_one_record, .timeout = 60)
{
	struct name_race *r = shared_page(sizeof(struct name_race));
	struct vgpu_ledger *l = ledger_open_ok();
	int bad = 0, reused = 0;
	char name[32];
	pid_t pid[2];

	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0)
			name_racer(r, i, l);
	}
	for (int round = 0; round < NAME_ROUNDS; round++) {
		snprintf(name, sizeof(name), "new-%d", round);
		test_wait_joins(&r->step, round);
		reused += round >= VGPU_LEDGER_MAX_TENANTS;
		if (r->rc[0] < 0 || r->rc[1] < 0 ||
		    r->tenant[0] != r->tenant[1] ||
		    r->setter[0] + r->setter[1] != 1 ||
		    records_named(l, name) != 1) {
			cr_log_error("round %d: rc %d %d (%s | %s), records "
				     "%d %d, setters %d %d, %d named", round,
				     r->rc[0], r->rc[1], r->err[0], r->err[1],
				     r->tenant[0], r->tenant[1], r->setter[0],
				     r->setter[1], records_named(l, name));
			bad++;
		}
		test_checked(&r->step, round);
	}
	for (int i = 0; i < 2; i++)
		expect_exit_zero(pid[i]);
	cr_log_info("%d rounds, %d of them reusing an idle record",
		    NAME_ROUNDS, reused);
	cr_expect_eq(bad, 0, "%d of %d rounds went wrong", bad, NAME_ROUNDS);
	expect_names_unique(l);
	vgpu_ledger_close(l);
}

/* (c) The ledger's tenant records all taken, one of them idle: a joiner of
 * the idle tenant and a joiner of a new name, who wants that record, race.
 * Exactly one joins (the other is told the ledger is full), the record is
 * the winner's, and the loser left nothing behind. */
#define REUSE_ROUNDS	200

struct reuse_race {
	struct rounds step;
	char name[2][32];	/* [0] the idle tenant's, [1] a new one */
	int rc[2], tenant[2];
	char err[2][256];
};

static void reuse_racer(struct reuse_race *r, int i, struct vgpu_ledger *in)
{
	struct vgpu_ledger *l = child_open(in);
	unsigned seed = 991u + (unsigned)i;
	struct vgpu_slot *s;

	for (int round = 0; round < REUSE_ROUNDS; round++) {
		barrier_wait(&r->step.bar, 2);
		spin_a_little(&seed, 40);
		r->rc[i] = vgpu_ledger_join(l, r->name[i], GiB, getpid(), 0,
					    &s, r->err[i], sizeof(r->err[i]));
		r->tenant[i] = r->rc[i] >= 0 ? tenant_index(s, l) : -1;
		racer_joined(&r->step, round);
		if (r->rc[i] >= 0)
			vgpu_ledger_leave(s);
	}
	_exit(0);
}

Test(ledger_race, a_new_name_and_an_idle_tenants_joiner_race_for_its_record,
     .timeout = 60)
{
	struct reuse_race *r = shared_page(sizeof(struct reuse_race));
	struct vgpu_ledger *l = ledger_open_ok();
	int bad = 0, won[2] = { 0, 0 }, w;
	char name[32];
	pid_t pid[2];

	for (int t = 0; t < VGPU_LEDGER_MAX_TENANTS - 1; t++) {
		snprintf(name, sizeof(name), "live-%d", t);
		ledger_join_ok(l, name, GiB);	/* left by the close */
	}
	vgpu_ledger_leave(ledger_join_ok(l, "idle", GiB));
	snprintf(r->name[0], sizeof(r->name[0]), "idle");
	snprintf(r->name[1], sizeof(r->name[1]), "new-0");
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0)
			reuse_racer(r, i, l);
	}
	for (int round = 0; round < REUSE_ROUNDS; round++) {
		test_wait_joins(&r->step, round);
		w = r->rc[0] >= 0 ? 0 : 1;
		if ((r->rc[0] >= 0) == (r->rc[1] >= 0) ||
		    r->rc[!w] != VGPU_LEDGER_EFULL ||
		    strcmp(tenants_of(l)[r->tenant[w]].name, r->name[w]) ||
		    records_named(l, r->name[w]) != 1 ||
		    records_named(l, r->name[!w]) != 0) {
			cr_log_error("round %d: '%s' %d (%s), '%s' %d (%s)",
				     round, r->name[0], r->rc[0], r->err[0],
				     r->name[1], r->rc[1], r->err[1]);
			bad++;
		} else {
			won[w]++;
		}
		/* The record, idle again, is the next round's idle tenant. */
		if (w == 1)
			memcpy(r->name[0], r->name[1], sizeof(r->name[0]));
		snprintf(r->name[1], sizeof(r->name[1]), "new-%d", round + 1);
		test_checked(&r->step, round);
	}
	for (int i = 0; i < 2; i++)
		expect_exit_zero(pid[i]);
	cr_log_info("the idle tenant's joiner won %d rounds, the new name %d",
		    won[0], won[1]);
	cr_expect_eq(bad, 0, "%d of %d rounds went wrong", bad, REUSE_ROUNDS);
	cr_expect_gt(won[0] + won[1], 0);
	expect_names_unique(l);
	vgpu_ledger_close(l);
}

/* (d) A process stopped holding a tenant's lock. Other tenants, found or
 * made, join at once either way. */

/* Takes tenant `name`'s lock word, through the layout, as the process of
 * slot s would (docs/ledger-abi.md): (index + 1) | generation << 11. */
static bool take_lock_of(struct vgpu_ledger *l, struct vgpu_slot *s,
			 const char *name)
{
	struct vgpu_ledger_tenant *ten = (void *)tenants_of(l);
	const struct vgpu_ledger_slot *r = vgpu_ledger_slot_record(s);
	const struct vgpu_ledger_slot *base = (const void *)
		((const char *)vgpu_ledger_header(l) + VGPU_LEDGER_SLOTS_OFFSET);
	uint32_t word = (uint32_t)(r - base + 1) |
			(r->generation & 0xFFFFFu) << 11, free_word = 0;

	for (int t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++)
		if (ten[t].state == VGPU_TENANT_ACTIVE &&
		    strcmp(ten[t].name, name) == 0)
			return __atomic_compare_exchange_n(&ten[t].lock,
				&free_word, word, false, __ATOMIC_ACQUIRE,
				__ATOMIC_RELAXED);
	return false;
}

/* A child joins `tenant`, takes the lock of tenant `locked`, and stops. */
static pid_t stopped_holder(struct vgpu_ledger *l, const char *tenant,
			    const char *locked, int *ready)
{
	int status;
	pid_t child = fork();

	cr_assert_geq(child, 0);
	if (child == 0) {
		struct vgpu_ledger *cl = child_open(l);
		struct vgpu_slot *cs;
		char err[512];

		if (vgpu_ledger_join(cl, tenant, GiB, getpid(), 0, &cs, err,
				     sizeof(err)) < 0)
			_exit(101);
		if (!take_lock_of(cl, cs, locked))
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
	return child;
}

/* Other tenants, an existing one and a new one, join, reserve and leave
 * at once. */
static void others_unaffected(struct vgpu_ledger *l, const char *fresh)
{
	uint64_t t0 = now_ns(), dt;
	struct vgpu_slot *s = ledger_join_ok(l, "other", GiB);

	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB), 0);
	vgpu_ledger_leave(s);
	vgpu_ledger_leave(ledger_join_ok(l, fresh, GiB));
	dt = now_ns() - t0;
	cr_expect_lt(dt, 100000000u, "other tenants took %llu ns",
		     (unsigned long long)dt);
}

/* (d1) The holder is a live process of the tenant: a joiner of the tenant
 * is not its setter, so it joins at once, taking no lock; its reservation
 * times out after the bound, the holder named by pid. */
Test(ledger_race, a_stopped_holder_of_its_tenants_lock_is_named_by_pid)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s, *other = ledger_join_ok(l, "other", GiB);
	int32_t pid = 0, hpid = -1;
	uint64_t t0, dt;
	pid_t child = stopped_holder(l, "team", "team", ready);
	int status;

	t0 = now_ns();
	s = ledger_join_ok(l, "team", GiB);
	dt = now_ns() - t0;
	cr_expect_lt(dt, 100000000u, "the join took %llu ns",
		     (unsigned long long)dt);
	cr_expect(!vgpu_ledger_set_terms(s));
	t0 = now_ns();
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB),
		     VGPU_LEDGER_ETIMEDOUT);
	dt = now_ns() - t0;
	cr_expect_geq(dt, VGPU_LEDGER_LOCK_TIMEOUT_NS * 9 / 10);
	cr_expect_lt(dt, 2 * VGPU_LEDGER_LOCK_TIMEOUT_NS);
	cr_expect_eq(vgpu_ledger_lock_holder(s, &pid, &hpid), 0);
	cr_expect_eq(pid, child);
	others_unaffected(l, "newcomer-1");
	kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB), 0);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_ledger_leave(s);
	vgpu_ledger_leave(other);
	vgpu_ledger_close(l);
}

/* (d2) The tenant has no live process (a new job of it would set its
 * terms) and its lock is held by a stopped process: the join waits for the
 * lock, fails within about a second, and names the holder by pid. */
Test(ledger_race, a_would_be_setter_names_a_stopped_holder_of_the_lock)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s, *other = ledger_join_ok(l, "other", GiB);
	char err[512], pid_text[32];
	uint64_t t0, dt;
	pid_t child;
	int rc, status;

	vgpu_ledger_leave(ledger_join_ok(l, "solo", GiB));	/* idle */
	child = stopped_holder(l, "elsewhere", "solo", ready);
	t0 = now_ns();
	rc = vgpu_ledger_join(l, "solo", 2 * GiB, getpid(), 0, &s, err,
			      sizeof(err));
	dt = now_ns() - t0;
	cr_expect_eq(rc, VGPU_LEDGER_ETIMEDOUT, "%d: %s", rc, err);
	snprintf(pid_text, sizeof(pid_text), "pid %d ", (int)child);
	cr_expect(strstr(err, pid_text) && strstr(err, "tenant 'solo'"),
		  "the holder is named: %s", err);
	cr_expect_geq(dt, VGPU_LEDGER_LOCK_TIMEOUT_NS * 9 / 10);
	cr_expect_lt(dt, 2 * VGPU_LEDGER_LOCK_TIMEOUT_NS, "%llu ns",
		     (unsigned long long)dt);
	others_unaffected(l, "newcomer-2");
	kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	/* The dead holder's word is taken over: the next joiner sets. */
	s = ledger_join_ok(l, "solo", 2 * GiB);
	cr_expect(vgpu_ledger_set_terms(s));
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 2 * GiB);
	vgpu_ledger_leave(s);
	vgpu_ledger_leave(other);
	vgpu_ledger_close(l);
}

/* A process stopped holding the shares lock (taken through the layout: an
 * OFD lock on the shares region's first byte): shared memory's operations
 * of others time out, the first after the bound and the next ones at once
 * (charged to the process meanwhile, by the shim), until it is free again;
 * joins, allocations and leaves that hold no shared memory never take it. */
Test(ledger_race, a_stopped_shares_lock_holder_costs_one_wait)
{
	int *ready = shared_page(4096);
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB), *o;
	const uint64_t key[2] = { 7, 11 };
	uint64_t t0, dt;
	bool elsewhere;
	int status, rc;
	pid_t child = fork();

	cr_assert_geq(child, 0);
	if (child == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = VGPU_LEDGER_SHARES_OFFSET,
				    .l_len = 1 };
		int fd = open(vgpu_ledger_path(l), O_RDWR | O_CLOEXEC);

		if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
			_exit(101);
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
		raise(SIGSTOP);
		for (;;)
			pause();
	}
	while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(waitpid(child, &status, WUNTRACED), child);
	cr_assert(WIFSTOPPED(status), "status %#x", status);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 4 * MiB), 0);
	t0 = now_ns();
	rc = vgpu_ledger_share_export(s, key, VGPU_USAGE_BUFFER, 4 * MiB,
				      &elsewhere);
	dt = now_ns() - t0;
	cr_expect_eq(rc, VGPU_LEDGER_ETIMEDOUT);
	cr_expect_geq(dt, VGPU_LEDGER_LOCK_TIMEOUT_NS * 9 / 10);
	t0 = now_ns();
	cr_expect_eq(vgpu_ledger_share_hold(s, key), VGPU_LEDGER_ENOENT);
	rc = vgpu_ledger_share_export(s, key, VGPU_USAGE_BUFFER, 4 * MiB,
				      &elsewhere);
	dt = now_ns() - t0;
	cr_expect_eq(rc, VGPU_LEDGER_ETIMEDOUT);
	cr_expect_lt(dt, 50000000u, "the second wait took %llu ns",
		     (unsigned long long)dt);
	t0 = now_ns();
	o = ledger_join_ok(l, "other", GiB);
	cr_expect_eq(vgpu_ledger_reserve(o, VGPU_USAGE_BUFFER, MiB), 0);
	vgpu_ledger_release(o, VGPU_USAGE_BUFFER, MiB);
	vgpu_ledger_leave(o);
	dt = now_ns() - t0;
	cr_expect_lt(dt, 100000000u, "another tenant took %llu ns",
		     (unsigned long long)dt);
	kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	rc = vgpu_ledger_share_export(s, key, VGPU_USAGE_BUFFER, 4 * MiB,
				      &elsewhere);
	cr_assert_geq(rc, 0, "%d", rc);
	cr_expect_eq(vgpu_ledger_share_drop(s, rc, key), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0, "the drop gave it back");
	vgpu_ledger_leave(s);
	vgpu_ledger_close(l);
}
