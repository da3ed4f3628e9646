/* test_ledger_ctl.c - an administrator's changes (vgpu/ledger_ctl.c): the
 * memory limit lowered below use and raised, the compute share and its
 * bucket, the audit, a missing tenant, bad changes, a stopped and a dead
 * lock holder, the administrator's open (nothing created, write access
 * decides) and the read-only copy of a record. */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "ledger_test.h"
#include "ledger_internal.h"
#include "options.h"

TestSuite(ledger_ctl, .init = ledger_dir_make, .fini = ledger_dir_remove);

static uint64_t now_ns(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct vgpu_ledger *ctl_open(char *err, size_t errlen, int *rc)
{
	struct vgpu_ledger_access a = { .control = true };
	struct vgpu_ledger *l = NULL;

	*rc = vgpu_ledger_open_with(test_dir, UUID, 0, &a, &l, err, errlen);
	return l;
}

static struct vgpu_ledger_change change(uint32_t fields)
{
	return (struct vgpu_ledger_change){ .fields = fields, .uid = 4321,
		.pid = 777, .host_pid = 0, .policy = VGPU_POLICY_HARD };
}

static int set(struct vgpu_ledger *l, const char *tenant,
	       const struct vgpu_ledger_change *c,
	       struct vgpu_ledger_tenant *after)
{
	char err[1024];
	int rc = vgpu_ledger_ctl_set(l, tenant, c, after, err, sizeof(err));

	cr_log_info("ctl_set: %d %s", rc, err);
	return rc;
}

static unsigned active_slots(const struct vgpu_ledger *l)
{
	unsigned n = 0;

	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		n += l->slots[i].state == VGPU_SLOT_ACTIVE;
	return n;
}

Test(ledger_ctl, a_lower_limit_refuses_until_usage_is_below_it)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_MEMORY);
	struct vgpu_ledger_tenant after;
	uint64_t t0 = now_ns(CLOCK_REALTIME);
	const struct vgpu_ledger_tenant *ten = vgpu_ledger_tenant_record(s);

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 600 * MiB), 0);
	c.mem_limit = 512 * MiB;
	cr_assert_eq(set(l, "team", &c, &after), 0);
	cr_expect_eq(after.mem_limit, 512 * MiB);
	cr_expect_eq(after.used, 600 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 512 * MiB);
	/* Over the limit: nothing taken away, nothing new admitted. */
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 1),
		     VGPU_LEDGER_EOVERLIMIT);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 88 * MiB);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 1),
		     VGPU_LEDGER_EOVERLIMIT, "at the limit exactly");
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 112 * MiB);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 100 * MiB), 0);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 13 * MiB),
		     VGPU_LEDGER_EOVERLIMIT);
	/* Raised: more fits at once. */
	c.mem_limit = 2 * GiB;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, GiB), 0);
	/* The audit, and the limit's own setter fields. */
	cr_expect_eq(ten->ctl_changes, 2);
	cr_expect_eq(ten->ctl_uid, 4321);
	cr_expect_eq(ten->ctl_pid, 777);
	cr_expect_eq(ten->ctl_fields, VGPU_LEDGER_CTL_MEMORY);
	cr_expect_geq(ten->ctl_ns, t0);
	cr_expect_leq(ten->ctl_ns, now_ns(CLOCK_REALTIME));
	cr_expect_eq(ten->limit_set_pid, 777);
	cr_expect_eq(ten->limit_set_ns, ten->ctl_ns);
	cr_expect_eq(vgpu_ledger_ctl_changes(s), 2);
	cr_expect_eq(ten->lock, 0);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 2 * GiB);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, a_share_that_starts_to_cap_restarts_the_bucket)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_tenant *ten =
		(struct vgpu_ledger_tenant *)vgpu_ledger_tenant_record(s);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_COMPUTE);
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	cr_assert_eq(ten->compute.share_pct, 0);
	ten->compute.tokens_ns = 5000000;	/* what an uncapped one left */
	c.share_pct = 30;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(ten->compute.share_pct, 30);
	cr_expect_eq(ten->compute.policy, VGPU_POLICY_HARD);
	cr_expect_eq(ten->compute.tokens_ns, 0);
	cr_expect_geq(ten->compute.refill_ns, t0);
	cr_expect_leq(ten->compute.refill_ns, now_ns(CLOCK_MONOTONIC));
	/* Capped to capped: the bucket is kept. */
	ten->compute.tokens_ns = 1234;
	c.share_pct = 60;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(ten->compute.share_pct, 60);
	cr_expect_eq(ten->compute.tokens_ns, 1234);
	/* 100 is no cap, stored as 0; a policy alone. */
	c.share_pct = 100;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(ten->compute.share_pct, 0);
	c = change(VGPU_LEDGER_CTL_POLICY | VGPU_LEDGER_CTL_COMPUTE);
	c.share_pct = 40;
	c.policy = VGPU_POLICY_ELASTIC;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(ten->compute.share_pct, 40);
	cr_expect_eq(ten->compute.policy, VGPU_POLICY_ELASTIC);
	cr_expect_eq(ten->ctl_fields,
		     VGPU_LEDGER_CTL_POLICY | VGPU_LEDGER_CTL_COMPUTE);
	cr_expect_eq(ten->ctl_changes, 4);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, the_spill_limit)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_SPILL);

	c.spill_limit = 64 * MiB;
	cr_assert_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, 65 * MiB),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, 64 * MiB), 0);
	vgpu_ledger_release(s, VGPU_USAGE_SPILLED, 64 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), GiB, "memory untouched");
	vgpu_ledger_close(l);
}

/* The call's borrowed slot is gone after it, and never was a tenant's. */
Test(ledger_ctl, leaves_no_slot_and_joins_nothing)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_MEMORY);
	uint64_t joins = vgpu_ledger_header(l)->joins;
	char err[1024];
	int rc;
	struct vgpu_ledger *cl = ctl_open(err, sizeof(err), &rc);

	cr_assert_eq(rc, 0, "%s", err);
	c.mem_limit = 3 * GiB;
	cr_assert_eq(set(cl, "team", &c, NULL), 0);
	cr_expect_eq(active_slots(l), 1);
	cr_expect_eq(vgpu_ledger_header(l)->joins, joins);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 3 * GiB);
	vgpu_ledger_close(cl);
	cr_expect_eq(vgpu_ledger_reclaim(l), 0);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, a_missing_tenant_and_bad_changes_are_refused)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_COMPUTE);
	char err[1024];

	c.share_pct = 50;
	cr_expect_eq(vgpu_ledger_ctl_set(l, "other", &c, NULL, err,
					 sizeof(err)), VGPU_LEDGER_ENOENT);
	cr_expect(strstr(err, "has no tenant 'other'"), "%s", err);
	c.share_pct = 101;
	cr_expect_eq(vgpu_ledger_ctl_set(l, "team", &c, NULL, err,
					 sizeof(err)), VGPU_LEDGER_EINVAL);
	c = change(VGPU_LEDGER_CTL_POLICY);
	c.policy = 7;
	cr_expect_eq(vgpu_ledger_ctl_set(l, "team", &c, NULL, err,
					 sizeof(err)), VGPU_LEDGER_EINVAL);
	c = change(0);
	cr_expect_eq(vgpu_ledger_ctl_set(l, "team", &c, NULL, err,
					 sizeof(err)), VGPU_LEDGER_EINVAL);
	c = change(VGPU_LEDGER_CTL_MEMORY);
	cr_expect_eq(vgpu_ledger_ctl_set(l, "", &c, NULL, err, sizeof(err)),
		     VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_tenant_record(s)->ctl_changes, 0);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), GiB);
	vgpu_ledger_close(l);
}

static void *shared_page(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

/* A forked process of the tenant that takes its lock, then stops or dies. */
static pid_t child_holding(struct vgpu_ledger *l, bool die)
{
	int *ready = shared_page();
	pid_t child = fork();

	if (child == 0) {
		struct vgpu_ledger *cl;
		struct vgpu_slot *cs;
		char err[512];

		vgpu_ledger_forget_after_fork(l);
		if (vgpu_ledger_open(test_dir, UUID, 0, &cl, err, sizeof(err)) ||
		    vgpu_ledger_join(cl, "team", GiB, getpid(), 0, &cs, err,
				     sizeof(err)) < 0 ||
		    vgpu__ledger_lock(cs))
			_exit(100);
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
		if (die)
			_exit(0);
		raise(SIGSTOP);
		for (;;)
			pause();
	}
	while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE))
		sched_yield();
	return child;
}

Test(ledger_ctl, a_stopped_holder_times_out_named_and_changes_nothing)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_MEMORY);
	char err[1024], want[64];
	pid_t child = child_holding(l, false);
	uint64_t t0, dt;
	int status, rc;

	cr_assert_eq(waitpid(child, &status, WUNTRACED), child);
	cr_assert(WIFSTOPPED(status));
	c.mem_limit = 2 * GiB;
	t0 = now_ns(CLOCK_MONOTONIC);
	rc = vgpu_ledger_ctl_set(l, "team", &c, NULL, err, sizeof(err));
	dt = now_ns(CLOCK_MONOTONIC) - t0;
	cr_expect_eq(rc, VGPU_LEDGER_ETIMEDOUT, "%s", err);
	snprintf(want, sizeof(want), "by pid %d (stopped?)", (int)child);
	cr_expect(strstr(err, want), "%s", err);
	cr_expect(strstr(err, "nothing was changed"), "%s", err);
	cr_expect_geq(dt, VGPU_LEDGER_LOCK_TIMEOUT_NS);
	cr_expect_lt(dt, 3 * VGPU_LEDGER_LOCK_TIMEOUT_NS);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), GiB);
	cr_expect_eq(vgpu_ledger_tenant_record(s)->ctl_changes, 0);
	kill(child, SIGKILL);
	cr_assert_eq(waitpid(child, &status, 0), child);
	/* Its holder dead: the lock is taken over. */
	cr_expect_eq(vgpu_ledger_ctl_set(l, "team", &c, NULL, err,
					 sizeof(err)), 0, "%s", err);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 2 * GiB);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, a_dead_holder_is_taken_over)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_change c = change(VGPU_LEDGER_CTL_MEMORY);
	pid_t child = child_holding(l, true);
	int status;

	cr_assert_eq(waitpid(child, &status, 0), child);
	c.mem_limit = 256 * MiB;
	cr_expect_eq(set(l, "team", &c, NULL), 0);
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 256 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_record(s)->lock, 0);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, the_administrators_open_creates_nothing)
{
	char err[1024], path[512];
	struct stat st;
	int rc;

	cr_expect_null(ctl_open(err, sizeof(err), &rc));
	cr_expect_eq(rc, VGPU_LEDGER_ENOENT, "%s", err);
	cr_expect(strstr(err, "no ledger '"), "%s", err);
	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", test_dir, UUID,
		 VGPU_LEDGER_VERSION);
	cr_expect_neq(stat(path, &st), 0, "not created");
	snprintf(path, sizeof(path), "%s/none", test_dir);
	{
		struct vgpu_ledger_access a = { .control = true };
		struct vgpu_ledger *l = NULL;

		rc = vgpu_ledger_open_with(path, UUID, 0, &a, &l, err,
					   sizeof(err));
		cr_expect_eq(rc, VGPU_LEDGER_ENOENT, "%s", err);
		cr_expect(strstr(err, "no ledger directory"), "%s", err);
		cr_expect_neq(stat(path, &st), 0, "not created");
	}
}

/* Another user (nobody) may not open root's 0600 ledger for writing: a
 * refusal naming the file, its owner and mode. Needs root to switch. */
Test(ledger_ctl, another_user_is_refused_naming_the_owner)
{
	struct vgpu_ledger *l;
	int *rc_seen = shared_page(), status;
	char *msg = (char *)(rc_seen + 1);
	pid_t child;

	if (geteuid() != 0) {
		cr_skip_test("needs root to act as another user");
		return;
	}
	l = ledger_open_ok();
	cr_assert_eq(chmod(test_dir, 0755), 0);
	child = fork();
	if (child == 0) {
		int rc;

		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534,
								 65534))
			_exit(100);
		ctl_open(msg, 4000, &rc);
		*rc_seen = rc;
		_exit(0);
	}
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_expect_eq(*rc_seen, VGPU_LEDGER_EPERM, "%s", msg);
	cr_expect(strstr(msg, vgpu_ledger_path(l)), "%s", msg);
	cr_expect(strstr(msg, "owned by root (uid 0)"), "%s", msg);
	cr_expect(strstr(msg, "mode 0600"), "%s", msg);
	cr_expect(strstr(msg, "may not be changed by uid 65534"), "%s", msg);
	vgpu_ledger_close(l);
}

Test(ledger_ctl, peek_record_copies_and_counts_the_living)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_ledger_tenant t;
	unsigned live = 9;
	char err[1024];

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 5 * MiB), 0);
	cr_assert_eq(vgpu_ledger_peek_record(test_dir, UUID, "team", &t, &live,
					     err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(t.name, "team");
	cr_expect_eq(t.used, 5 * MiB);
	cr_expect_eq(t.mem_limit, GiB);
	/* Our own slot: its byte is locked through another open file
	 * description than the peek's, so it reads as alive. */
	cr_expect_eq(live, 1);
	cr_expect_eq(vgpu_ledger_peek_record(test_dir, UUID, "nobody", &t,
					     &live, err, sizeof(err)),
		     VGPU_LEDGER_ENOENT);
	cr_expect(strstr(err, "has no tenant 'nobody'"), "%s", err);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 5 * MiB);
	vgpu_ledger_close(l);
}
