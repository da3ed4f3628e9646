/* vgpu-ctl-print.c - what vgpu-ctl prints: a tenant's record (show) and
 * what a change did (set). Reads only the copy of the record it is given.
 */
#include "vgpu-ctl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "options.h"

void ctl_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes == VGPU_LEDGER_UNLIMITED || bytes == 0 ||
	    (bytes % 1024 == 0 && bytes >= 1024)) {
		vgpu__format_size(buf, len, bytes);
		if (bytes == 0 || bytes == VGPU_LEDGER_UNLIMITED ||
		    strspn(buf, "0123456789") < strlen(buf))
			return;
	}
	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s (%llu bytes)", v, units[u],
			 (unsigned long long)bytes);
}

/* A name read from the file, for the terminal: printable ASCII as it is,
 * every other byte as \xHH (a hand-edited file cannot drive the
 * terminal; vgpu-top escapes the same way). At most 63 bytes of name. */
static const char *shown(const char *name, char *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (size_t i = 0; i < 63 && name[i] && o + 5 < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			buf[o++] = (char)c;
		} else {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[c >> 4];
			buf[o++] = hex[c & 15];
		}
	}
	buf[o] = '\0';
	return buf;
}

static const char *policy_name(uint32_t policy)
{
	const char *n = vgpu__option_value_name(VGPU_OPT_COMPUTE_POLICY,
						(int)policy);

	return n ? n : "unknown";
}

static void compute_text(const struct vgpu_ledger_tenant *t, char *buf,
			 size_t len)
{
	uint32_t share = t->compute.share_pct, policy = t->compute.policy;

	if ((share == 0 || share >= 100) &&
	    policy == VGPU_POLICY_OPPORTUNISTIC)
		snprintf(buf, len, "no share; only time no guaranteed tenant "
			 "wants (opportunistic)");
	else if (share == 0 || share >= 100 || policy == VGPU_POLICY_OFF)
		snprintf(buf, len, "none (policy %s)", policy_name(policy));
	else
		snprintf(buf, len, "%u%% (%s)", share, policy_name(policy));
}

/* "2025-01-31 12:00:00.123 UTC" */
static void when_text(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;

	if (!ns || !gmtime_r(&s, &tm)) {
		snprintf(buf, len, "never");
		return;
	}
	strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(buf + strlen(buf), len - strlen(buf), ".%03u UTC",
		 (unsigned)(ns / 1000000u % 1000u));
}

static void fields_text(const struct vgpu_ledger_tenant *t, char *buf,
			size_t len)
{
	uint32_t f = t->ctl_fields;

	snprintf(buf, len, "%s%s%s%s%s",
		 f & VGPU_LEDGER_CTL_MEMORY ? " memory" : "",
		 f & VGPU_LEDGER_CTL_COMPUTE ? " compute" : "",
		 f & VGPU_LEDGER_CTL_POLICY ? " policy" : "",
		 f & VGPU_LEDGER_CTL_SPILL ? " host-spill" : "",
		 !(f & VGPU_LEDGER_CTL_SUSPEND) ? ""
		 : t->suspended ? " suspend" : " resume");
	if (!buf[0])
		snprintf(buf, len, " nothing");
}

static void who_text(const struct vgpu_ledger_tenant *t, char *buf,
		     size_t len)
{
	if (t->ctl_host_pid)
		snprintf(buf, len, "uid %u pid %d (host pid %d)", t->ctl_uid,
			 t->ctl_pid, t->ctl_host_pid);
	else
		snprintf(buf, len, "uid %u pid %d", t->ctl_uid, t->ctl_pid);
}

/* Bytes over the memory limit, 0 when within it. */
static uint64_t over_by(const struct vgpu_ledger_tenant *t)
{
	return t->mem_limit != VGPU_LEDGER_UNLIMITED && t->used > t->mem_limit
	       ? t->used - t->mem_limit : 0;
}

static void print_last_change(const struct vgpu_ledger_tenant *t)
{
	char when[64], who[96], what[64];

	if (!t->ctl_changes) {
		printf("  changes          none (the terms its first process "
		       "set)\n");
		return;
	}
	when_text(t->ctl_ns, when, sizeof(when));
	who_text(t, who, sizeof(who));
	fields_text(t, what, sizeof(what));
	printf("  changes          %llu; the last at %s by %s:%s\n",
	       (unsigned long long)t->ctl_changes, when, who, what);
}

void ctl_print_show(const char *uuid, const char *path,
		    const struct vgpu_ledger_tenant *t, unsigned live,
		    const struct ctl_procs_seen *seen)
{
	char a[64], b[64], when[64], nm[256];
	uint64_t over = over_by(t);

	printf("tenant '%s' on %s\n", shown(t->name, nm, sizeof(nm)), uuid);
	printf("  ledger           %s\n", path);
	printf("  processes        %u live\n", live);
	ctl_size(t->mem_limit, a, sizeof(a));
	when_text(t->limit_set_ns, when, sizeof(when));
	printf("  memory limit     %s (set by pid %d at %s)\n", a,
	       t->limit_set_pid, when);
	ctl_size(t->used, a, sizeof(a));
	printf("  memory used      %s\n", a);
	if (over) {
		ctl_size(over, a, sizeof(a));
		printf("  over limit by    %s: new allocations are refused "
		       "until usage is below the limit\n", a);
	}
	compute_text(t, a, sizeof(a));
	printf("  compute share    %s\n", a);
	if (t->suspended)
		printf("  state            suspended: %u of %u live processes "
		       "carried it out, %u cannot be suspended (vgpu-ctl "
		       "resume lets them go on)\n", seen->suspended, live,
		       seen->unwatched);
	else
		printf("  state            running%s\n", seen->suspended ?
		       " (a resume not yet carried out by every process)" :
		       "");
	ctl_size(t->spill_limit, a, sizeof(a));
	ctl_size(t->usage[VGPU_USAGE_SPILLED], b, sizeof(b));
	printf("  host spill       limit %s, spilled %s\n", a, b);
	print_last_change(t);
}

void ctl_print_set(const char *uuid, const struct vgpu_ledger_tenant *t,
		   unsigned live)
{
	uint32_t f = t->ctl_fields;
	char a[64], b[64], nm[256];
	uint64_t over = over_by(t);

	printf("vgpu-ctl: tenant '%s' on %s:", shown(t->name, nm, sizeof(nm)),
	       uuid);
	if (f & VGPU_LEDGER_CTL_MEMORY) {
		ctl_size(t->mem_limit, a, sizeof(a));
		printf(" memory limit %s;", a);
	}
	if (f & (VGPU_LEDGER_CTL_COMPUTE | VGPU_LEDGER_CTL_POLICY)) {
		compute_text(t, a, sizeof(a));
		printf(" compute share %s;", a);
	}
	if (f & VGPU_LEDGER_CTL_SPILL) {
		ctl_size(t->spill_limit, a, sizeof(a));
		printf(" host spill limit %s;", a);
	}
	printf(" change %llu\n", (unsigned long long)t->ctl_changes);
	if (over) {
		ctl_size(t->used, a, sizeof(a));
		ctl_size(over, b, sizeof(b));
		printf("vgpu-ctl: tenant '%s' on %s holds %s: over limit by "
		       "%s; its new allocations are refused until its usage "
		       "is below the limit (with host overcommit or "
		       "VGPU_CONTROL, its least recently used movable ranges "
		       "go to the host first)\n", nm, uuid, a, b);
	}
	if (!live)
		printf("vgpu-ctl: note: tenant '%s' has no live process on "
		       "%s: the next process to start it sets its terms "
		       "anew\n", shown(t->name, nm, sizeof(nm)), uuid);
}

void ctl_print_suspend(const char *uuid, const struct vgpu_ledger_tenant *t,
		       bool want, const struct vgpu_ledger_ctlproc *p,
		       unsigned n, enum ctl_outcome how, uint64_t by,
		       unsigned wait_ms)
{
	const char *verb = want ? "suspended" : "resumed";
	char nm[256], a[64], b[64];
	unsigned watchers = 0;

	for (unsigned i = 0; i < n && i < VGPU_LEDGER_MAX_SLOTS; i++)
		watchers += !!(p[i].flags & VGPU_LEDGER_SLOT_CONTROL);
	shown(t->name, nm, sizeof(nm));
	/* "suspended" read the same when no process could carry it out (a
	 * hostile review): then the change is only recorded. */
	printf("vgpu-ctl: tenant '%s' on %s: %s (change %llu)", nm, uuid,
	       how == CTL_DONE && !watchers
	       ? (want ? "suspend recorded, carried out by no process"
		       : "resume recorded, carried out by no process")
	       : how == CTL_DONE ? verb : want ? "suspend asked"
	       : "resume asked", (unsigned long long)t->ctl_changes);
	if (how == CTL_SUPERSEDED)
		printf("; superseded by change %llu (a %s) before every process "
		       "answered", (unsigned long long)by,
		       want ? "resume" : "suspend");
	else if (how == CTL_PENDING && wait_ms)
		printf("; not every process answered within %u s: the change "
		       "stays made, they carry it out when they can",
		       wait_ms / 1000u);
	else if (how == CTL_PENDING)
		printf("; not waited for (--wait 0)");
	printf("\n");
	for (unsigned i = 0; i < n && i < VGPU_LEDGER_MAX_SLOTS; i++) {
		bool watches = p[i].flags & VGPU_LEDGER_SLOT_CONTROL;
		bool is = p[i].flags & VGPU_LEDGER_SLOT_SUSPENDED;

		ctl_size(p[i].device_bytes, a, sizeof(a));
		ctl_size(p[i].host_bytes, b, sizeof(b));
		if (!watches)
			printf("  pid %d: started without VGPU_CONTROL: "
			       "cannot be suspended; its launches go on, %s "
			       "on the device\n", p[i].pid, a);
		else
			printf("  pid %d: %s; %s on the device, %s on the "
			       "host\n", p[i].pid,
			       p[i].ctl_acked >= t->ctl_changes && is == want
			       ? verb : "not yet", a, b);
	}
	if (!n)
		printf("  no live process of the tenant on this GPU\n");
}
