/* test_ledger.c - the ledger in one process: creating and attaching,
 * reserve and release at and past the limit, tenants and their limits,
 * slots, the views, leaving and fork. Files that are not ledgers are in
 * test_ledger_file.c, races and crashes in test_ledger_race.c. */
#include <sys/stat.h>
#include <sys/wait.h>

#include "ledger_test.h"

TestSuite(ledger, .init = ledger_dir_make, .fini = ledger_dir_remove);

static void expect_zero(struct vgpu_slot *s)
{
	int k;

	cr_expect_eq(vgpu_ledger_tenant_used(s), 0);
	for (k = 0; k < VGPU_USAGE_COUNT; k++) {
		cr_expect_eq(vgpu_ledger_tenant_usage(s, k), 0, "kind %d", k);
		cr_expect_eq(vgpu_ledger_slot_usage(s, k), 0, "kind %d", k);
	}
}

Test(ledger, creates_the_file_named_by_uuid_and_version)
{
	struct vgpu_ledger *l = ledger_open_ok();
	const struct vgpu_ledger_header *h = vgpu_ledger_header(l);
	char want[512];
	struct stat st;

	snprintf(want, sizeof(want), "%s/%s.v%d.ledger", test_dir, UUID,
		 VGPU_LEDGER_VERSION);
	cr_assert_str_eq(vgpu_ledger_path(l), want);
	cr_assert_eq(stat(want, &st), 0);
	cr_expect_eq(st.st_size, VGPU_LEDGER_FILE_SIZE);
	cr_expect_eq(st.st_mode & 0777, 0600);
	cr_expect_eq(memcmp(h, "VGPULEDG", 8), 0);
	cr_expect_eq(h->layout_version, VGPU_LEDGER_VERSION);
	cr_expect_eq(h->physical_bytes, 80 * GiB);
	cr_expect_str_eq(h->gpu_uuid, UUID);
	cr_expect_gt(h->created_ns, 0);
	cr_expect_eq(h->max_slots, VGPU_LEDGER_MAX_SLOTS);
	vgpu_ledger_close(l);
}

Test(ledger, creates_a_missing_directory_for_its_user)
{
	struct vgpu_ledger *l;
	char dir[512], err[1024];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s/a/b", test_dir);
	cr_assert_eq(vgpu_ledger_open(dir, UUID, GiB, &l, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(stat(dir, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0700);
	vgpu_ledger_close(l);
	snprintf(err, sizeof(err), "%s/%s.v%d.ledger", dir, UUID,
		 VGPU_LEDGER_VERSION);
	unlink(err);
	rmdir(dir);
	snprintf(dir, sizeof(dir), "%s/a", test_dir);
	rmdir(dir);
}

Test(ledger, a_second_open_attaches_to_the_same_records)
{
	struct vgpu_ledger *a = ledger_open_ok(), *b = ledger_open_ok();
	struct vgpu_slot *sa = ledger_join_ok(a, "team", GiB);
	struct vgpu_slot *sb = ledger_join_ok(b, "team", GiB);

	cr_assert_eq(vgpu_ledger_reserve(sa, VGPU_USAGE_BUFFER, 100 * MiB), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(sb), 100 * MiB);
	cr_expect_eq(vgpu_ledger_header(b)->created_ns,
		     vgpu_ledger_header(a)->created_ns);
	cr_expect_neq(vgpu_ledger_slot_record(sa), vgpu_ledger_slot_record(sb));
	vgpu_ledger_release(sa, VGPU_USAGE_BUFFER, 100 * MiB);
	expect_zero(sb);
	vgpu_ledger_close(a);
	vgpu_ledger_close(b);
}

Test(ledger, rejects_bad_uuids_and_tenant_names)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s;
	char err[256], longname[80];

	cr_expect_eq(vgpu_ledger_open(test_dir, "", 0, &l, err, sizeof(err)),
		     VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_open(test_dir, "../x", 0, &l, err,
				      sizeof(err)), VGPU_LEDGER_EINVAL);
	cr_expect(strstr(err, "'../x'"), "%s", err);
	cr_expect_null(l);
	l = ledger_open_ok();
	memset(longname, 'n', 64);
	longname[64] = '\0';
	cr_expect_eq(vgpu_ledger_join(l, longname, GiB, 1, 0, &s, err,
				      sizeof(err)), VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_join(l, "", GiB, 1, 0, &s, err, sizeof(err)),
		     VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_join(l, "a\nb", GiB, 1, 0, &s, err,
				      sizeof(err)), VGPU_LEDGER_EINVAL);
	cr_expect_null(s);
	vgpu_ledger_close(l);
}

Test(ledger, reserve_at_the_limit_succeeds_and_past_it_fails)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, GiB - 1), 0);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_ARRAY, 1), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(s), GiB);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_POOL, 1),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_VMM, UINT64_MAX),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_expect_eq(vgpu_ledger_slot_record(s)->failures, 2);
	cr_expect_eq(vgpu_ledger_slot_record(s)->allocs, 2);
	cr_expect_eq(vgpu_ledger_tenant_used(s), GiB);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, GiB - 1);
	vgpu_ledger_release(s, VGPU_USAGE_ARRAY, 1);
	cr_expect_eq(vgpu_ledger_slot_record(s)->frees, 2);
	expect_zero(s);
	vgpu_ledger_leave(s);
	vgpu_ledger_close(l);
}

/* At exit the slots are given back while the job's other threads may
 * still charge or give back (the hooks checked the device a moment
 * before): neither may touch the tenant's totals, which no longer count
 * the process, nor the free record. Another process's charge stays. */
Test(ledger, a_charge_or_release_racing_the_exit_touches_nothing)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_ledger *other = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	struct vgpu_slot *o = ledger_join_ok(other, "team", GiB);
	const struct vgpu_ledger_slot *rec = vgpu_ledger_slot_record(s);

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 100 * MiB), 0);
	cr_assert_eq(vgpu_ledger_reserve(o, VGPU_USAGE_BUFFER, 30 * MiB), 0);
	cr_assert_eq(vgpu_ledger_tenant_used(o), 130 * MiB);
	vgpu_ledger_exit(l);
	cr_assert_eq(vgpu_ledger_tenant_used(o), 30 * MiB);
	cr_assert_eq(rec->state, VGPU_SLOT_FREE);

	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 10 * MiB),
		     VGPU_LEDGER_ENOENT);
	cr_expect_eq(vgpu_ledger_charge(s, VGPU_USAGE_ARRAY, 10 * MiB),
		     VGPU_LEDGER_ENOENT);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 100 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(o), 30 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_usage(o, VGPU_USAGE_BUFFER), 30 * MiB);
	cr_expect_eq(rec->usage[VGPU_USAGE_BUFFER], 0);
	cr_expect_eq(rec->state, VGPU_SLOT_FREE);
	/* The other process's own charge still counts and goes. */
	cr_expect_eq(vgpu_ledger_reserve(o, VGPU_USAGE_BUFFER, GiB - 30 * MiB),
		     0);
	vgpu_ledger_release(o, VGPU_USAGE_BUFFER, GiB);
	expect_zero(o);
	vgpu_ledger_leave(o);
	vgpu_ledger_close(other);
}

Test(ledger, every_device_kind_counts_and_spilled_does_not)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", 9 * MiB);
	int k;

	for (k = 0; k < VGPU_USAGE_COUNT; k++)
		cr_assert_eq(vgpu_ledger_reserve(s, k, MiB), 0, "kind %d", k);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 8 * MiB);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, 100 * GiB), 0);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 2 * MiB),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_expect_eq(vgpu_ledger_tenant_usage(s, VGPU_USAGE_SPILLED),
		     100 * GiB + MiB);
	cr_assert_eq(vgpu_ledger_set_spill_limit(s, 101 * GiB), 0);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, GiB),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, GiB - MiB), 0);
	for (k = 0; k < VGPU_USAGE_COUNT; k++)
		vgpu_ledger_release(s, k, vgpu_ledger_slot_usage(s, k));
	expect_zero(s);
	vgpu_ledger_close(l);
}

Test(ledger, bad_kinds_and_zero_bytes)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);

	cr_expect_eq(vgpu_ledger_reserve(s, -1, 1), VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_COUNT, 1),
		     VGPU_LEDGER_EINVAL);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 0), 0);
	vgpu_ledger_release(s, VGPU_USAGE_COUNT, 1);
	vgpu_ledger_release(s, -5, 1);
	expect_zero(s);
	cr_expect_eq(vgpu_ledger_slot_record(s)->allocs, 0);
	vgpu_ledger_close(l);
}

Test(ledger, release_never_underflows)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = ledger_join_ok(l, "team", GiB);
	struct vgpu_slot *b = ledger_join_ok(l, "team", GiB);

	vgpu_ledger_release(a, VGPU_USAGE_BUFFER, MiB);
	expect_zero(a);
	cr_assert_eq(vgpu_ledger_reserve(a, VGPU_USAGE_BUFFER, 10 * MiB), 0);
	cr_assert_eq(vgpu_ledger_reserve(b, VGPU_USAGE_BUFFER, 10 * MiB), 0);
	/* b gives back more than it holds: only its own 10 MiB go. */
	vgpu_ledger_release(b, VGPU_USAGE_BUFFER, 15 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_used(a), 10 * MiB);
	cr_expect_eq(vgpu_ledger_slot_usage(b, VGPU_USAGE_BUFFER), 0);
	vgpu_ledger_release(a, VGPU_USAGE_BUFFER, UINT64_MAX);
	expect_zero(a);
	expect_zero(b);
	vgpu_ledger_close(l);
}

Test(ledger, tenants_are_separate)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = ledger_join_ok(l, "alpha", GiB);
	struct vgpu_slot *b = ledger_join_ok(l, "beta", GiB);

	cr_assert_eq(vgpu_ledger_reserve(a, VGPU_USAGE_BUFFER, GiB), 0);
	cr_assert_eq(vgpu_ledger_reserve(b, VGPU_USAGE_BUFFER, GiB), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(a), GiB);
	cr_expect_str_eq(vgpu_ledger_tenant_record(b)->name, "beta");
	vgpu_ledger_leave(a);
	cr_expect_eq(vgpu_ledger_tenant_used(b), GiB);
	vgpu_ledger_leave(b);
	vgpu_ledger_close(l);
}

static int join_rc(struct vgpu_ledger *l, const char *tenant, uint64_t limit,
		   int32_t pid, struct vgpu_slot **s, char *err, size_t len)
{
	return vgpu_ledger_join(l, tenant, limit, pid, 0, s, err, len);
}

Test(ledger, a_later_joiner_runs_under_the_tenants_limit_with_a_warning)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a, *b, *c, *d;
	char err[512];

	cr_assert_eq(join_rc(l, "team", GiB, 4241, &a, err, sizeof(err)), 0);
	cr_expect(vgpu_ledger_set_terms(a));
	cr_assert_eq(join_rc(l, "team", 4 * GiB, 4242, &b, err, sizeof(err)),
		     VGPU_LEDGER_LIMIT_KEPT);
	cr_expect(!vgpu_ledger_set_terms(b));
	cr_expect(strstr(err, "tenant 'team': pid 4242 asked for a memory "
		  "limit of 4 GiB, but the tenant's memory limit, 1 GiB (set "
		  "by pid 4241), applies"), "%s", err);
	cr_assert_eq(join_rc(l, "team", VGPU_LEDGER_UNLIMITED, 4243, &c, err,
			     sizeof(err)), VGPU_LEDGER_LIMIT_KEPT);
	cr_expect(strstr(err, "asked for no memory limit, but the tenant's "
		  "memory limit, 1 GiB (set"), "%s", err);
	cr_assert_eq(join_rc(l, "team", GiB, 4244, &d, err, sizeof(err)), 0);
	cr_expect_str_eq(err, "");
	cr_expect_eq(vgpu_ledger_tenant_limit(a), GiB);
	cr_expect_eq(vgpu_ledger_tenant_record(a)->limit_set_pid, 4241);
	cr_expect_eq(vgpu_ledger_tenant_record(a)->limit_changes, 2);
	/* Neither the unlimited one nor the 4 GiB one goes past 1 GiB. */
	cr_assert_eq(vgpu_ledger_reserve(c, VGPU_USAGE_BUFFER, 600 * MiB), 0);
	cr_expect_eq(vgpu_ledger_reserve(b, VGPU_USAGE_BUFFER, 600 * MiB),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_expect_eq(vgpu_ledger_reserve(c, VGPU_USAGE_BUFFER, 600 * MiB),
		     VGPU_LEDGER_EOVERLIMIT);
	cr_assert_eq(vgpu_ledger_reserve(b, VGPU_USAGE_BUFFER, 424 * MiB), 0);
	vgpu_ledger_release(b, VGPU_USAGE_BUFFER, 424 * MiB);
	vgpu_ledger_release(c, VGPU_USAGE_BUFFER, 600 * MiB);
	vgpu_ledger_leave(a);
	/* The first one gone: the others keep its limit all the same. */
	cr_expect_eq(vgpu_ledger_tenant_limit(b), GiB);
	vgpu_ledger_leave(b);
	vgpu_ledger_leave(c);
	vgpu_ledger_leave(d);
	/* Nobody left and nothing held: the next joiner sets the limit. */
	c = ledger_join_ok(l, "team", 512 * MiB);
	cr_expect(vgpu_ledger_set_terms(c));
	cr_expect_eq(vgpu_ledger_tenant_limit(c), 512 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_record(c)->limit_set_pid, getpid());
	expect_zero(c);
	vgpu_ledger_close(l);
}

Test(ledger, an_unlimited_tenant_stays_unlimited_for_a_later_joiner)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = ledger_join_ok(l, "team", VGPU_LEDGER_UNLIMITED);
	struct vgpu_slot *b;
	char err[512];

	cr_assert_eq(join_rc(l, "team", GiB, 7, &b, err, sizeof(err)),
		     VGPU_LEDGER_LIMIT_KEPT);
	cr_expect(strstr(err, "asked for a memory limit of 1 GiB, but the "
		  "tenant's memory limit, none (set"), "%s", err);
	cr_expect_eq(vgpu_ledger_tenant_limit(b), VGPU_LEDGER_UNLIMITED);
	cr_expect_eq(vgpu_ledger_reserve(b, VGPU_USAGE_BUFFER, 2 * GiB), 0);
	vgpu_ledger_release(b, VGPU_USAGE_BUFFER, 2 * GiB);
	vgpu_ledger_leave(a);
	vgpu_ledger_leave(b);
	vgpu_ledger_close(l);
}

/* A tenant whose only process died holding memory: the joiner reclaims the
 * dead slot first, finds the tenant idle and sets its own limit. */
Test(ledger, a_tenant_whose_processes_died_takes_the_next_joiners_limit)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s;
	char err[512];
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		struct vgpu_ledger *cl;
		struct vgpu_slot *cs;

		vgpu_ledger_forget_after_fork(l);
		if (vgpu_ledger_open(test_dir, UUID, 0, &cl, err, sizeof(err))
		    || vgpu_ledger_join(cl, "team", GiB, getpid(), 0, &cs, err,
					sizeof(err)) < 0 ||
		    vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER, 300 * MiB))
			_exit(10);
		_exit(0);	/* dies without leaving */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_eq(status, 0);
	cr_assert_eq(join_rc(l, "team", 2 * GiB, 9, &s, err, sizeof(err)), 0,
		     "%s", err);
	cr_expect(vgpu_ledger_set_terms(s));
	cr_expect_eq(vgpu_ledger_tenant_limit(s), 2 * GiB);
	expect_zero(s);
	vgpu_ledger_close(l);
}

/* Compute terms travel with the memory limit: written by the setter only;
 * a change zeroes the bucket's refill so that configure restarts it. */
Test(ledger, compute_terms_are_set_by_the_setter_only)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_ledger_terms want = { GiB, true, 30, 1 };
	const struct vgpu_ledger_compute *c;
	struct vgpu_slot *a, *b;
	char err[512];

	cr_assert_eq(vgpu_ledger_join_terms(l, "team", &want, 1, 0, &a, err,
					    sizeof(err)), 0, "%s", err);
	c = &vgpu_ledger_tenant_record(a)->compute;
	cr_expect_eq(c->share_pct, 30);
	cr_expect_eq(c->policy, 1);
	cr_expect_eq(c->refill_ns, 0);
	want = (struct vgpu_ledger_terms){ GiB, true, 70, 0 };
	cr_assert_eq(vgpu_ledger_join_terms(l, "team", &want, 2, 0, &b, err,
					    sizeof(err)), 0, "%s", err);
	cr_expect_eq(c->share_pct, 30);
	cr_expect_eq(c->policy, 1);
	vgpu_ledger_leave(a);
	vgpu_ledger_leave(b);
	cr_assert_eq(vgpu_ledger_join_terms(l, "team", &want, 3, 0, &b, err,
					    sizeof(err)), 0, "%s", err);
	cr_expect_eq(c->share_pct, 70);
	cr_expect_eq(c->policy, 0);
	cr_expect_eq(vgpu_ledger_join_terms(l, "team", NULL, 3, 0, &a, err,
					    sizeof(err)), VGPU_LEDGER_EINVAL);
	expect_zero(b);
	vgpu_ledger_close(l);
}

Test(ledger, leave_returns_the_slots_usage)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *a = ledger_join_ok(l, "team", GiB);
	struct vgpu_slot *b = ledger_join_ok(l, "team", GiB);
	const struct vgpu_ledger_slot *ra = vgpu_ledger_slot_record(a);

	cr_assert_eq(vgpu_ledger_reserve(a, VGPU_USAGE_BUFFER, 300 * MiB), 0);
	cr_assert_eq(vgpu_ledger_reserve(a, VGPU_USAGE_SPILLED, 5 * MiB), 0);
	cr_assert_eq(vgpu_ledger_reserve(b, VGPU_USAGE_CONTEXT, 10 * MiB), 0);
	cr_expect_eq(ra->state, VGPU_SLOT_ACTIVE);
	cr_expect_eq(ra->pid, getpid());
	vgpu_ledger_leave(a);
	cr_expect_eq(ra->state, VGPU_SLOT_FREE);
	cr_expect_eq(vgpu_ledger_tenant_used(b), 10 * MiB);
	cr_expect_eq(vgpu_ledger_tenant_usage(b, VGPU_USAGE_SPILLED), 0);
	vgpu_ledger_leave(b);
	vgpu_ledger_close(l);
}

Test(ledger, slots_are_reused_and_full_is_a_clear_error)
{
	static struct vgpu_slot *s[VGPU_LEDGER_MAX_SLOTS];
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *x;
	char err[512];
	int i;

	for (i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++)
		s[i] = ledger_join_ok(l, "team", GiB);
	cr_assert_eq(vgpu_ledger_join(l, "team", GiB, 1, 0, &x, err,
				      sizeof(err)), VGPU_LEDGER_EFULL);
	cr_expect(strstr(err, "all 1024 process slots are in use"), "%s", err);
	cr_expect(strstr(err, vgpu_ledger_path(l)), "%s", err);
	vgpu_ledger_leave(s[7]);
	x = ledger_join_ok(l, "team", GiB);
	cr_expect_eq(vgpu_ledger_slot_record(x),
		     &((const struct vgpu_ledger_slot *)((const char *)
		       vgpu_ledger_header(l) + VGPU_LEDGER_SLOTS_OFFSET))[7]);
	vgpu_ledger_close(l);
}

Test(ledger, tenant_records_of_idle_tenants_are_reused)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s[VGPU_LEDGER_MAX_TENANTS], *x;
	char name[32], err[512];
	int i;

	for (i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		snprintf(name, sizeof(name), "tenant-%d", i);
		s[i] = ledger_join_ok(l, name, GiB);
	}
	cr_assert_eq(vgpu_ledger_join(l, "one-more", GiB, 1, 0, &x, err,
				      sizeof(err)), VGPU_LEDGER_EFULL);
	cr_expect(strstr(err, "all 128 tenant records are in use"), "%s", err);
	cr_assert_eq(vgpu_ledger_reserve(s[3], VGPU_USAGE_BUFFER, MiB), 0);
	vgpu_ledger_leave(s[3]);	/* its usage goes: idle */
	x = ledger_join_ok(l, "one-more", 2 * GiB);
	cr_expect_str_eq(vgpu_ledger_tenant_record(x)->name, "one-more");
	cr_expect_eq(vgpu_ledger_tenant_limit(x), 2 * GiB);
	expect_zero(x);
	vgpu_ledger_close(l);
}

Test(ledger, a_forked_child_forgets_and_joins_afresh)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	int status;
	pid_t pid;

	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 600 * MiB), 0);
	pid = fork();
	if (pid == 0) {
		struct vgpu_ledger *cl;
		struct vgpu_slot *cs;
		char err[256];
		int ok;

		vgpu_ledger_forget_after_fork(l);
		if (vgpu_ledger_open(test_dir, UUID, 0, &cl, err, sizeof(err))
		    || vgpu_ledger_join(cl, "team", GiB, getpid(), 0, &cs, err,
					sizeof(err)) < 0)
			_exit(10);
		/* The parent's slot is alive: its 600 MiB are not reclaimed. */
		ok = vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER, 600 * MiB) ==
			     VGPU_LEDGER_EOVERLIMIT &&
		     vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER, 400 * MiB) == 0;
		vgpu_ledger_close(cl);
		_exit(ok ? 0 : 11);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child status %#x", status);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 600 * MiB);
	cr_expect_eq(vgpu_ledger_slot_record(s)->state, VGPU_SLOT_ACTIVE);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 600 * MiB);
	expect_zero(s);
	vgpu_ledger_close(l);
}

Test(ledger, a_dead_processes_slot_is_reclaimed_on_refusal)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = ledger_join_ok(l, "team", GiB);
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		struct vgpu_ledger *cl;
		struct vgpu_slot *cs;
		char err[256];

		vgpu_ledger_forget_after_fork(l);
		if (vgpu_ledger_open(test_dir, UUID, 0, &cl, err, sizeof(err))
		    || vgpu_ledger_join(cl, "team", GiB, getpid(), 0, &cs, err,
					sizeof(err)) < 0 ||
		    vgpu_ledger_reserve(cs, VGPU_USAGE_BUFFER, 700 * MiB))
			_exit(10);
		_exit(0);	/* dies without leaving */
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_eq(status, 0);
	cr_expect_eq(vgpu_ledger_tenant_used(s), 700 * MiB);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, GiB), 0);
	cr_expect_eq(vgpu_ledger_tenant_used(s), GiB);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, GiB);
	expect_zero(s);
	vgpu_ledger_close(l);
}

Test(ledger, host_pid_is_zero_or_another_pid)
{
	int32_t h = vgpu_host_pid();

	cr_expect(h == 0 || (h > 0 && h != getpid()), "%d", h);
}

Test(ledger, strerror_names_every_code)
{
	cr_expect_str_eq(vgpu_ledger_strerror(VGPU_LEDGER_EOVERLIMIT),
			 "over the tenant's memory limit");
	cr_expect_str_eq(vgpu_ledger_strerror(0), "success");
	cr_expect_str_eq(vgpu_ledger_strerror(-99), "unknown error");
}

/* A tenant's lock word that names the next generation of a free slot (a
 * damaged file, found by fuzzing): whoever claims the slot must not see its
 * own word as a live owner and wait a second on every call. */
Test(ledger, a_stale_lock_word_naming_a_free_slot_is_not_its_next_owner)
{
	struct vgpu_ledger *l = ledger_open_ok(), *l2;
	struct vgpu_slot *s;
	char err[512];

	cr_assert_eq(vgpu_ledger_join(l, "stale", 64 * MiB, 1, 0, &s, err,
				      sizeof(err)), 0, "%s", err);
	const struct vgpu_ledger_slot *rec = vgpu_ledger_slot_record(s);
	uint32_t index = (uint32_t)(rec - (const struct vgpu_ledger_slot *)
		((const char *)vgpu_ledger_header(l) + VGPU_LEDGER_SLOTS_OFFSET));
	uint32_t next_gen = rec->generation + 1;
	struct vgpu_ledger_tenant *ten = (struct vgpu_ledger_tenant *)
		vgpu_ledger_tenant_record(s);
	vgpu_ledger_leave(s);
	/* The word the slot's next owner would write: (index + 1) | gen << 11. */
	__atomic_store_n(&ten->lock, (index + 1) | (next_gen << 11),
			 __ATOMIC_RELEASE);

	cr_assert_eq(vgpu_ledger_open(test_dir, UUID, 80 * GiB, &l2, err,
				      sizeof(err)), 0, "%s", err);
	cr_assert_eq(vgpu_ledger_join(l2, "stale", 64 * MiB, 2, 0, &s, err,
				      sizeof(err)), 0, "%s", err);
	/* Before the fix: VGPU_LEDGER_ETIMEDOUT after a second's wait. */
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB), 0,
		     "the stale word is taken over, not waited on");
	cr_assert_eq(vgpu_ledger_slot_usage(s, VGPU_USAGE_BUFFER), MiB);
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, MiB);
	cr_assert_eq(vgpu_ledger_tenant_used(s), 0);
	vgpu_ledger_close(l2);
	vgpu_ledger_close(l);
}
