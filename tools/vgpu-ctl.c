/* vgpu-ctl - change or show a running tenant's slice of a GPU
 * (docs/control.md).
 *
 *   vgpu-ctl set TENANT [--gpu N|UUID] [--memory SIZE] [--compute PCT]
 *                       [--policy P] [--host-spill SIZE] [--ledger-dir DIR]
 *   vgpu-ctl show TENANT [--gpu N|UUID] [--ledger-dir DIR]
 *   vgpu-ctl suspend|resume TENANT [--gpu N|UUID] [--wait S] [--ledger-dir D]
 *
 * The GPUs are the ledger files of the directory (one per physical GPU);
 * --gpu N asks the driver which GPU device N is, in a child process, as
 * vgpu-run does. set opens each ledger for writing through the core's
 * checked open (an administrator's open: nothing created, the kernel's
 * write permission decides) and changes the tenant there under its lock
 * (vgpu/ledger_ctl.c); show reads a copy of the file. suspend and resume
 * are changes too (the tenant's `suspended`), carried out by each process's
 * control thread (intercept/control.c): they then read copies of the file
 * until every process that watches has acknowledged the change. Failures
 * exit with the CTL_EXIT_* codes (vgpu-ctl.h).
 */
#include "vgpu-ctl.h"
#include "vgpu-run.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define ERR_MAX 8192

struct targets {
	char uuid[CTL_MAX_GPUS][VGPU_LEDGER_UUID_MAX];
	int n;
	bool chosen;		/* --gpu named it: a missing tenant is an error */
};

static int fail(int code, const char *msg)
{
	fprintf(stderr, "vgpu-ctl: %s\n", msg);
	return code;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The GPUs with a ledger of this layout version in dir. */
static int list_ledgers(const char *dir, struct targets *t)
{
	char suffix[32], err[ERR_MAX];
	struct dirent *e;
	DIR *d = opendir(dir);

	t->n = 0;
	if (!d) {
		snprintf(err, sizeof(err), "cannot read the ledger directory "
			 "'%s': %s%s", dir, strerror(errno), errno == ENOENT ?
			 " (no job has used a GPU through libvgpu with it)" :
			 "");
		return fail(errno == EACCES ? CTL_EXIT_PERM : CTL_EXIT_NOGPU,
			    err);
	}
	snprintf(suffix, sizeof(suffix), ".v%d%s", VGPU_LEDGER_VERSION,
		 VGPU_LEDGER_SUFFIX);
	while ((e = readdir(d)) != NULL && t->n < CTL_MAX_GPUS) {
		size_t n = strlen(e->d_name), s = strlen(suffix);

		if (e->d_name[0] == '.' || n <= s || n - s >= VGPU_LEDGER_UUID_MAX ||
		    strcmp(e->d_name + n - s, suffix) != 0)
			continue;
		snprintf(t->uuid[t->n++], VGPU_LEDGER_UUID_MAX, "%.*s",
			 (int)(n - s), e->d_name);
	}
	closedir(d);
	qsort(t->uuid, (size_t)t->n, sizeof(t->uuid[0]), by_name);
	if (t->n == 0) {
		snprintf(err, sizeof(err), "no ledger in '%s' (no job has used "
			 "a GPU through libvgpu with this ledger directory)",
			 dir);
		return fail(CTL_EXIT_NOGPU, err);
	}
	return 0;
}

/* Keeps only the ledger whose UUID is want (or starts so, uniquely). */
static int keep_uuid(struct targets *t, const char *want, const char *dir,
		     const char *as_given)
{
	char err[ERR_MAX];
	int found = -1;

	for (int i = 0; i < t->n && found != -2; i++) {
		if (strcasecmp(t->uuid[i], want) == 0) {
			found = i;
			break;
		}
		if (strncasecmp(t->uuid[i], want, strlen(want)) == 0)
			found = found == -1 ? i : -2;
	}
	if (found < 0) {
		snprintf(err, sizeof(err), "--gpu %s: %s in '%s'", as_given,
			 found == -2 ? "more than one GPU's ledger has a UUID "
			 "starting so" : "no ledger of a GPU with that UUID",
			 dir);
		return fail(CTL_EXIT_NOGPU, err);
	}
	memmove(t->uuid[0], t->uuid[found], sizeof(t->uuid[0]));
	t->n = 1;
	t->chosen = true;
	return 0;
}

/* --gpu N: the driver says which GPU device N is. */
static int keep_index(struct targets *t, const struct ctl_args *a)
{
	static struct vrun_gpu g[VRUN_MAX_GPUS];
	const char *drv = getenv("VGPU_REAL_LIBCUDA");
	char self[VRUN_PATH_MAX], err[ERR_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int n;

	if (len <= 0)
		return fail(CTL_EXIT_DRIVER, "cannot read /proc/self/exe");
	self[len] = '\0';
	n = vrun_list_gpus(self, drv && *drv ? drv : "libcuda.so.1", g,
			   VRUN_MAX_GPUS, err, sizeof(err));
	if (n < 0)
		return fail(CTL_EXIT_DRIVER, err);
	if (a->gpu_index >= (unsigned)n) {
		snprintf(err, sizeof(err), "--gpu %s: no such GPU; the driver "
			 "shows %d", a->gpu, n);
		return fail(CTL_EXIT_NOGPU, err);
	}
	return keep_uuid(t, g[a->gpu_index].uuid, a->dir, a->gpu);
}

static int choose(const struct ctl_args *a, struct targets *t)
{
	int rc = list_ledgers(a->dir, t);

	if (rc || !a->gpu)
		return rc;
	if (a->gpu_is_index)
		return keep_index(t, a);
	return keep_uuid(t, a->gpu, a->dir, a->gpu);
}

/* A ledger error as an exit code. */
static int code_of(int rc)
{
	switch (rc) {
	case VGPU_LEDGER_EPERM:
		return CTL_EXIT_PERM;
	case VGPU_LEDGER_ETIMEDOUT:
		return CTL_EXIT_TIMEOUT;
	case VGPU_LEDGER_ENOENT:
		return CTL_EXIT_NOTENANT;
	case VGPU_LEDGER_EINVAL:
		return CTL_EXIT_VALUE;
	default:
		return CTL_EXIT_LEDGER;
	}
}

/* a's change made in uuid's ledger, the record as it left it in *after:
 * 0 done, 1 the tenant is not there (and --gpu did not name it), or an
 * exit code (said). */
static int change(const struct ctl_args *a, const char *uuid, bool chosen,
		  struct vgpu_ledger_tenant *after)
{
	struct vgpu_ledger_access access = { .control = true };
	static char err[ERR_MAX];
	struct vgpu_ledger *l;
	uint64_t phys;
	int rc;

	rc = vgpu_ledger_open_with(a->dir, uuid, 0, &access, &l, err,
				   sizeof(err));
	if (rc)
		return fail(rc == VGPU_LEDGER_ENOENT ? CTL_EXIT_NOGPU :
			    code_of(rc), err);
	rc = vgpu_ledger_ctl_set(l, a->tenant, &a->change, after, err,
				 sizeof(err));
	phys = vgpu_ledger_physical_bytes(l);
	vgpu_ledger_close(l);
	/* Said as VGPU_MEMORY_LIMIT's is (a hostile review: 4 GiB on a
	 * 2 GiB GPU went without a word). */
	if (rc == 0 && (a->change.fields & VGPU_LEDGER_CTL_MEMORY) && phys &&
	    a->change.mem_limit != VGPU_LEDGER_UNLIMITED &&
	    a->change.mem_limit > phys) {
		char want[32], have[32];

		ctl_size(a->change.mem_limit, want, sizeof(want));
		ctl_size(phys, have, sizeof(have));
		fprintf(stderr, "vgpu-ctl: note: --memory %s is more than GPU "
			"%s has (%s): the GPU's memory, not the slice, is "
			"what bounds the tenant there\n", want, uuid, have);
	}
	if (rc == VGPU_LEDGER_ENOENT && !chosen)
		return 1;
	return rc ? fail(code_of(rc), err) : 0;
}

/* One GPU: 0 done, 1 the tenant is not there, or an exit code. */
static int set_one(const struct ctl_args *a, const char *uuid, bool chosen)
{
	struct vgpu_ledger_tenant after, now;
	unsigned live = 1;
	int rc;

	rc = change(a, uuid, chosen, &after);
	if (rc)
		return rc;
	if (vgpu_ledger_peek_record(a->dir, uuid, a->tenant, &now, &live,
				    NULL, 0) != 0)
		live = 1;	/* not known: no note */
	ctl_print_set(uuid, &after, live);
	return 0;
}

/* Whether every live process that watches has carried out change `seq`
 * (suspended as want says); *unwatched: those that do not watch. */
static bool answered(const struct vgpu_ledger_ctlproc *p, unsigned n,
		     uint64_t seq, bool want, unsigned *unwatched)
{
	bool all = true;

	*unwatched = 0;
	for (unsigned i = 0; i < n; i++) {
		if (!(p[i].flags & VGPU_LEDGER_SLOT_CONTROL))
			++*unwatched;
		else if (p[i].ctl_acked < seq ||
			 !(p[i].flags & VGPU_LEDGER_SLOT_SUSPENDED) != !want)
			all = false;
	}
	return all;
}

/* suspend or resume on one GPU: the change, then the wait for the
 * processes' answers (copies of the file every 20 ms). */
static int suspend_one(const struct ctl_args *a, const char *uuid,
		       bool chosen)
{
	static struct vgpu_ledger_ctlproc procs[VGPU_LEDGER_MAX_SLOTS];
	struct timespec pause = { 0, 20 * 1000000L };
	struct vgpu_ledger_tenant after, now;
	static char err[ERR_MAX];
	bool want = a->cmd == CTL_SUSPEND, done = false;
	unsigned n = 0, unwatched = 0;
	uint64_t superseded = 0;
	int rc;

	rc = change(a, uuid, chosen, &after);
	if (rc)
		return rc;
	for (unsigned waited = 0;; waited += 20) {
		rc = vgpu_ledger_peek_control(a->dir, uuid, a->tenant, &now,
					      procs, VGPU_LEDGER_MAX_SLOTS, &n,
					      err, sizeof(err));
		if (rc)
			return fail(code_of(rc), err);
		done = answered(procs, n, after.ctl_changes, want, &unwatched);
		/* Another suspend or resume after this one, the other way:
		 * this one is over (its answer may never come). */
		if (now.ctl_changes > after.ctl_changes &&
		    !now.suspended != !want)
			superseded = now.ctl_changes;
		if (done || superseded || waited >= a->wait_ms)
			break;
		nanosleep(&pause, NULL);
	}
	ctl_print_suspend(uuid, &after, want, procs, n,
			  done ? CTL_DONE : superseded ? CTL_SUPERSEDED
			  : CTL_PENDING, superseded, a->wait_ms);
	if (!done && !superseded && a->wait_ms)
		return CTL_EXIT_TIMEOUT;
	return want && unwatched && !superseded ? CTL_EXIT_UNAVAILABLE : 0;
}

static int show_one(const struct ctl_args *a, const char *uuid, bool chosen)
{
	static struct vgpu_ledger_ctlproc procs[VGPU_LEDGER_MAX_SLOTS];
	static char err[ERR_MAX], path[VRUN_PATH_MAX + 128];
	struct ctl_procs_seen seen = { 0 };
	struct vgpu_ledger_tenant t;
	unsigned live = 0;
	int rc;

	rc = vgpu_ledger_peek_control(a->dir, uuid, a->tenant, &t, procs,
				      VGPU_LEDGER_MAX_SLOTS, &live, err,
				      sizeof(err));
	if (rc == VGPU_LEDGER_ENOENT && !chosen)
		return 1;
	if (rc)
		return fail(code_of(rc), err);
	for (unsigned i = 0; i < live && i < VGPU_LEDGER_MAX_SLOTS; i++) {
		if (!(procs[i].flags & VGPU_LEDGER_SLOT_CONTROL))
			seen.unwatched++;
		else if (procs[i].flags & VGPU_LEDGER_SLOT_SUSPENDED)
			seen.suspended++;
	}
	snprintf(path, sizeof(path), "%s/%s.v%d%s", a->dir, uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	ctl_print_show(uuid, path, &t, live, &seen);
	return 0;
}

/* Every chosen GPU; the first failure's code, else 66 when none has the
 * tenant. */
static int run(const struct ctl_args *a)
{
	static struct targets t;
	int rc = choose(a, &t), first = 0, found = 0;
	char err[ERR_MAX];

	if (rc)
		return rc;
	for (int i = 0; i < t.n; i++) {
		rc = a->cmd == CTL_SET ? set_one(a, t.uuid[i], t.chosen)
		     : a->cmd == CTL_SHOW ? show_one(a, t.uuid[i], t.chosen)
		     : suspend_one(a, t.uuid[i], t.chosen);
		if (rc == 0)
			found++;
		else if (rc != 1 && !first)
			first = rc;
	}
	if (first || found)
		return first;
	snprintf(err, sizeof(err), "no ledger in '%s' has tenant '%s' (%d "
		 "GPU%s looked at)", a->dir, a->tenant, t.n,
		 t.n == 1 ? "" : "s");
	return fail(CTL_EXIT_NOTENANT, err);
}

int main(int argc, char **argv)
{
	struct ctl_args a;
	char err[2048];
	int rc;

	rc = ctl_parse_args(argc, argv, &a, err, sizeof(err));
	if (rc)
		return fail(rc, err);
	if (a.help) {
		fputs(ctl_usage, stdout);
		return 0;
	}
	if (a.probe_driver)
		return vrun_probe_main(a.probe_driver);
	a.change.uid = (uint32_t)getuid();
	a.change.pid = (int32_t)getpid();
	a.change.host_pid = vgpu_host_pid();
	return run(&a);
}
