/* vgpu-top-export.c - a snapshot as one JSON document (schema in
 * docs/vgpu-top.md, versioned by "schema_version") or in Prometheus's text
 * exposition format (version 0.0.4).
 */
#include "vgpu-top.h"

#include <inttypes.h>
#include <string.h>

static const char *const kind_names[VGPU_USAGE_COUNT] = {
#define KIND_NAME_(NAME, name, value) [value] = #name,
	VGPU_USAGE_KIND_MAP(KIND_NAME_)
#undef KIND_NAME_
};

const char *top_state_name(enum top_state st)
{
	switch (st) {
	case TOP_ALIVE: return "alive";
	case TOP_EXITED: return "exited";
	case TOP_REAPING: return "reaping";
	}
	return "unknown";
}

/* The front end a process's slot flags name: libvgpu-hip.so sets HIP. */
const char *top_front_end(uint32_t flags)
{
	return flags & VGPU_LEDGER_SLOT_HIP ? "hip" : "cuda";
}

/* The policies a tenant's compute share can have: a state set, one
 * sample each (PROM_POLICY), 1 for the tenant's. */
#define PROM_POLICIES	4

const char *top_policy_name(uint32_t policy)
{
	static const char *const names[] = {
		"hard", "elastic", "off", "opportunistic"
	};

	return policy < PROM_POLICIES ? names[policy] : "unknown";
}

uint64_t top_over_limit(const struct top_tenant *t)
{
	if (t->mem_limit == VGPU_LEDGER_UNLIMITED || t->used <= t->mem_limit)
		return 0;
	return t->used - t->mem_limit;
}

int top_ctl_fields(uint32_t fields, bool suspended,
		   const char *names[TOP_CTL_FIELDS])
{
	static const struct {
		uint32_t bit;
		const char *name;
	} known[TOP_CTL_FIELDS] = {
		{ VGPU_LEDGER_CTL_MEMORY, "memory" },
		{ VGPU_LEDGER_CTL_COMPUTE, "compute" },
		{ VGPU_LEDGER_CTL_POLICY, "policy" },
		{ VGPU_LEDGER_CTL_SPILL, "host-spill" },
		{ VGPU_LEDGER_CTL_SUSPEND, "suspend" },
	};
	int n = 0;

	/* A resume said "suspension" once, as a suspend did (a hostile
	 * review): the change is named by the state it left. */
	for (int i = 0; i < TOP_CTL_FIELDS; i++)
		if (fields & known[i].bit)
			names[n++] = known[i].bit == VGPU_LEDGER_CTL_SUSPEND &&
				     !suspended ? "resume" : known[i].name;
	return n;
}

/* ---- JSON ------------------------------------------------------------------ */

/* A string, escaped (top_escape): always valid JSON, never a control
 * character in the output. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	top_put_escaped(f, s, TOP_ESC_JSON);
	fputc('"', f);
}

/* A limit: null when unlimited. */
static void json_limit(FILE *f, uint64_t v)
{
	if (v == VGPU_LEDGER_UNLIMITED)
		fputs("null", f);
	else
		fprintf(f, "%" PRIu64, v);
}

static void json_num(FILE *f, bool valid, double v)
{
	if (valid)
		fprintf(f, "%.3f", v);
	else
		fputs("null", f);
}

static void json_usage(FILE *f, const uint64_t *usage)
{
	fputs("{", f);
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		fprintf(f, "%s\"%s\": %" PRIu64, k ? ", " : "", kind_names[k],
			usage[k]);
	fputs("}", f);
}

/* The rate fields of a record: "<name>_1s" and "<name>_10s". */
static void json_rates(FILE *f, const char *ind, const struct top_rates *r1,
		       const struct top_rates *r10)
{
	fprintf(f, ",\n%s\"compute_share_achieved_pct_1s\": ", ind);
	json_num(f, r1->valid, r1->share_pct);
	fprintf(f, ",\n%s\"compute_share_achieved_pct_10s\": ", ind);
	json_num(f, r10->valid, r10->share_pct);
	fprintf(f, ",\n%s\"launches_per_s_1s\": ", ind);
	json_num(f, r1->valid, r1->launches_per_s);
	fprintf(f, ",\n%s\"launches_per_s_10s\": ", ind);
	json_num(f, r10->valid, r10->launches_per_s);
	fprintf(f, ",\n%s\"admission_wait_pct_1s\": ", ind);
	json_num(f, r1->valid, r1->wait_pct);
	fprintf(f, ",\n%s\"admission_wait_pct_10s\": ", ind);
	json_num(f, r10->valid, r10->wait_pct);
}

/* The last change an administrator made: null when none was. */
static void json_last_change(FILE *f, const char *in,
			     const struct top_tenant *t)
{
	const char *names[TOP_CTL_FIELDS];
	int n;

	fprintf(f, ",\n%s\"last_change\": ", in);
	if (!t->ctl_changes) {
		fputs("null", f);
		return;
	}
	fprintf(f, "{\"time_unix_ns\": %" PRIu64 ", \"uid\": %" PRIu32
		", \"user\": ", t->ctl_ns, t->ctl_uid);
	if (t->ctl_user[0])
		json_str(f, t->ctl_user);
	else
		fputs("null", f);
	fprintf(f, ", \"pid\": %" PRId32 ", \"host_pid\": ", t->ctl_pid);
	if (t->ctl_host_pid)
		fprintf(f, "%" PRId32, t->ctl_host_pid);
	else
		fputs("null", f);
	fputs(", \"fields\": [", f);
	n = top_ctl_fields(t->ctl_fields, t->suspended, names);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s\"%s\"", i ? ", " : "", names[i]);
	fputs("]}", f);
}

static void json_tenant(FILE *f, const struct top_tenant *t)
{
	const char *in = "          ";

	fprintf(f, "        {\n%s\"index\": %" PRIu32 ",\n%s\"name\": ", in,
		t->index, in);
	json_str(f, t->name);
	fprintf(f, ",\n%s\"memory_limit_bytes\": ", in);
	json_limit(f, t->mem_limit);
	fprintf(f, ",\n%s\"memory_used_bytes\": %" PRIu64, in, t->used);
	fprintf(f, ",\n%s\"over_limit_bytes\": %" PRIu64, in,
		top_over_limit(t));
	fprintf(f, ",\n%s\"spilled_bytes\": %" PRIu64, in,
		t->usage[VGPU_USAGE_SPILLED]);
	fprintf(f, ",\n%s\"spill_limit_bytes\": ", in);
	json_limit(f, t->spill_limit);
	fprintf(f, ",\n%s\"usage_bytes\": ", in);
	json_usage(f, t->usage);
	fprintf(f, ",\n%s\"compute_share_target_pct\": %" PRIu32, in,
		t->share_pct);
	fprintf(f, ",\n%s\"compute_policy\": \"%s\"", in,
		top_policy_name(t->policy));
	fprintf(f, ",\n%s\"gpu_time_ns\": %" PRIu64, in, t->gpu_time_ns);
	fprintf(f, ",\n%s\"admission_wait_ns\": %" PRIu64, in, t->wait_ns);
	fprintf(f, ",\n%s\"launches\": %" PRIu64, in, t->launches);
	fprintf(f, ",\n%s\"processes\": %d", in, t->procs);
	fprintf(f, ",\n%s\"processes_alive\": %d", in, t->alive);
	json_rates(f, in, &t->r1, &t->r10);
	fprintf(f, ",\n%s\"suspended\": %s", in,
		t->suspended ? "true" : "false");
	fprintf(f, ",\n%s\"processes_suspended\": %d", in,
		t->procs_suspended);
	fprintf(f, ",\n%s\"control_changes\": %" PRIu64, in, t->ctl_changes);
	json_last_change(f, in, t);
	fprintf(f, "\n        }");
}

static const char *tenant_name(const struct top_gpu *g, uint32_t index)
{
	for (int i = 0; i < g->ntenants; i++)
		if (g->tenants[i].index == index)
			return g->tenants[i].name;
	return "";
}

static void json_proc(FILE *f, const struct top_gpu *g,
		      const struct top_proc *p)
{
	const char *in = "          ";
	int32_t shown;
	enum top_pidns ns = top_pid_view(p, &shown);

	fprintf(f, "        {\n%s\"slot\": %" PRIu32 ",\n%s\"generation\": %"
		PRIu32 ",\n%s\"pid\": %" PRId32 ",\n%s\"host_pid\": ", in,
		p->slot, in, p->generation, in, p->pid, in);
	if (p->host_pid)
		fprintf(f, "%" PRId32, p->host_pid);
	else
		fputs("null", f);
	fprintf(f, ",\n%s\"pid_namespace\": \"%s\"", in, top_pidns_name(ns));
	fprintf(f, ",\n%s\"tenant\": ", in);
	json_str(f, tenant_name(g, p->tenant));
	fprintf(f, ",\n%s\"tenant_index\": %" PRIu32, in, p->tenant);
	fprintf(f, ",\n%s\"front_end\": \"%s\"", in,
		top_front_end(p->flags));
	fprintf(f, ",\n%s\"state\": \"%s\"", in, top_state_name(p->state));
	fprintf(f, ",\n%s\"started_unix_ns\": %" PRIu64, in, p->start_ns);
	fprintf(f, ",\n%s\"memory_used_bytes\": %" PRIu64, in, p->used);
	fprintf(f, ",\n%s\"spilled_bytes\": %" PRIu64, in,
		p->usage[VGPU_USAGE_SPILLED]);
	fprintf(f, ",\n%s\"usage_bytes\": ", in);
	json_usage(f, p->usage);
	fprintf(f, ",\n%s\"allocs\": %" PRIu64 ",\n%s\"frees\": %" PRIu64
		",\n%s\"failures\": %" PRIu64, in, p->allocs, in, p->frees,
		in, p->failures);
	fprintf(f, ",\n%s\"launches\": %" PRIu64 ",\n%s\"launches_throttled\": %"
		PRIu64, in, p->launches, in, p->launches_throttled);
	fprintf(f, ",\n%s\"admission_wait_ns\": %" PRIu64, in, p->wait_ns);
	fprintf(f, ",\n%s\"gpu_time_ns\": %" PRIu64, in, p->gpu_time_ns);
	fprintf(f, ",\n%s\"can_be_suspended\": %s", in,
		p->flags & VGPU_LEDGER_SLOT_CONTROL ? "true" : "false");
	fprintf(f, ",\n%s\"suspended\": %s", in,
		p->flags & VGPU_LEDGER_SLOT_SUSPENDED ? "true" : "false");
	json_rates(f, in, &p->r1, &p->r10);
	fprintf(f, "\n        }");
}

static void json_gpu(FILE *f, const struct top_gpu *g)
{
	const char *in = "      ";

	fprintf(f, "    {\n%s\"uuid\": ", in);
	json_str(f, g->uuid);
	fprintf(f, ",\n%s\"path\": ", in);
	json_str(f, g->path);
	fprintf(f, ",\n%s\"layout_version\": %d", in, VGPU_LEDGER_VERSION);
	fprintf(f, ",\n%s\"created_unix_ns\": %" PRIu64, in, g->created_ns);
	fprintf(f, ",\n%s\"joins\": %" PRIu64, in, g->joins);
	fprintf(f, ",\n%s\"physical_bytes\": %" PRIu64, in, g->physical_bytes);
	fprintf(f, ",\n%s\"slices_bytes\": %" PRIu64, in, g->slices_bytes);
	fprintf(f, ",\n%s\"unlimited_tenants\": %d", in, g->unlimited_tenants);
	fprintf(f, ",\n%s\"memory_used_bytes\": %" PRIu64, in, g->used);
	fprintf(f, ",\n%s\"spilled_bytes\": %" PRIu64, in, g->spilled);
	fprintf(f, ",\n%s\"gpu_time_ns\": %" PRIu64, in, g->gpu_time_ns);
	fprintf(f, ",\n%s\"utilization_pct_1s\": ", in);
	json_num(f, g->r1.valid, g->r1.share_pct);
	fprintf(f, ",\n%s\"utilization_pct_10s\": ", in);
	json_num(f, g->r10.valid, g->r10.share_pct);
	fprintf(f, ",\n%s\"launches_per_s_1s\": ", in);
	json_num(f, g->r1.valid, g->r1.launches_per_s);
	fprintf(f, ",\n%s\"launches_per_s_10s\": ", in);
	json_num(f, g->r10.valid, g->r10.launches_per_s);
	fprintf(f, ",\n%s\"tenants\": [", in);
	for (int i = 0; i < g->ntenants; i++) {
		fputs(i ? ",\n" : "\n", f);
		json_tenant(f, &g->tenants[i]);
	}
	fprintf(f, "%s],\n%s\"processes\": [", g->ntenants ? "\n      " : "",
		in);
	for (int i = 0; i < g->nprocs; i++) {
		fputs(i ? ",\n" : "\n", f);
		json_proc(f, g, &g->procs[i]);
	}
	fprintf(f, "%s]\n    }", g->nprocs ? "\n      " : "");
}

/* The windows the rates were measured over: from any record with rates. */
static void json_windows(FILE *f, const struct top_snap *s)
{
	const struct top_rates *r1 = NULL, *r10 = NULL;

	for (int i = 0; i < s->ngpus && !r1; i++)
		if (s->gpus[i].r1.valid) {
			r1 = &s->gpus[i].r1;
			r10 = &s->gpus[i].r10;
		}
	fputs("  \"window_1s_s\": ", f);
	json_num(f, r1 != NULL, r1 ? r1->window_s : 0);
	fputs(",\n  \"window_10s_s\": ", f);
	json_num(f, r10 && r10->valid, r10 ? r10->window_s : 0);
	fputs(",\n", f);
}

void top_print_json(FILE *f, const struct top_snap *s, const char *dir,
		    double interval_s)
{
	fprintf(f, "{\n  \"schema_version\": %d,\n  \"vgpu_version\": \"%s\",\n"
		"  \"ledger_layout_version\": %d,\n  \"ledger_dir\": ",
		TOP_SCHEMA_VERSION, VGPU_VERSION_STRING, VGPU_LEDGER_VERSION);
	json_str(f, dir);
	fprintf(f, ",\n  \"time_unix_ns\": %" PRIu64 ",\n  \"interval_s\": %.3f,\n",
		s->realtime_ns, interval_s);
	json_windows(f, s);
	fputs("  \"skipped_files\": [", f);
	for (int i = 0; i < s->nskipped; i++) {
		fputs(i ? ",\n    {\"path\": " : "\n    {\"path\": ", f);
		json_str(f, s->skipped[i].path);
		fputs(", \"reason\": ", f);
		json_str(f, s->skipped[i].reason);
		fputs("}", f);
	}
	fprintf(f, "%s],\n", s->nskipped ? "\n  " : "");
	fputs("  \"gpus\": [", f);
	for (int i = 0; i < s->ngpus; i++) {
		fputs(i ? ",\n" : "\n", f);
		json_gpu(f, &s->gpus[i]);
	}
	fprintf(f, "%s]\n}\n", s->ngpus ? "\n  " : "");
}

/* ---- Prometheus ---------------------------------------------------------- */

enum prom_level { PROM_GPU, PROM_TENANT, PROM_KIND, PROM_POLICY, PROM_PROC };


struct prom_metric {
	const char *name, *type, *help;
	enum prom_level level;
	/* Formats the value into buf; false: no sample for this record. */
	bool (*value)(const void *rec, int kind, char *buf, size_t len);
};

static bool fmt_u64(uint64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64, v);
	return true;
}

static bool fmt_limit(uint64_t v, char *buf, size_t len)
{
	if (v == VGPU_LEDGER_UNLIMITED) {
		snprintf(buf, len, "+Inf");
		return true;
	}
	return fmt_u64(v, buf, len);
}

static bool fmt_seconds(uint64_t ns, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u,
		 ns % 1000000000u);
	return true;
}

#define GPU_(r) ((const struct top_gpu *)(r))
#define TEN_(r) ((const struct top_tenant *)(r))
#define PROC_(r) ((const struct top_proc *)(r))

static bool g_physical(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(GPU_(r)->physical_bytes, b, n); }
static bool g_slices(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(GPU_(r)->slices_bytes, b, n); }
static bool g_unlimited(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64((uint64_t)GPU_(r)->unlimited_tenants, b, n); }
static bool g_used(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(GPU_(r)->used, b, n); }
static bool g_joins(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(GPU_(r)->joins, b, n); }
static bool t_used(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(TEN_(r)->used, b, n); }
static bool t_limit(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_limit(TEN_(r)->mem_limit, b, n); }
static bool t_spilled(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(TEN_(r)->usage[VGPU_USAGE_SPILLED], b, n); }
static bool t_spill_limit(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_limit(TEN_(r)->spill_limit, b, n); }
static bool t_kind(const void *r, int k, char *b, size_t n)
{ return fmt_u64(TEN_(r)->usage[k], b, n); }
static bool t_share(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(TEN_(r)->share_pct, b, n); }
static bool t_gpu_time(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_seconds(TEN_(r)->gpu_time_ns, b, n); }
static bool t_wait(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_seconds(TEN_(r)->wait_ns, b, n); }
static bool t_policy(const void *r, int k, char *b, size_t n)
{ return fmt_u64(TEN_(r)->policy == (uint32_t)k, b, n); }
static bool t_over(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(top_over_limit(TEN_(r)), b, n); }
static bool t_ctl_changes(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(TEN_(r)->ctl_changes, b, n); }
static bool t_ctl_time(const void *r, int k, char *b, size_t n)
{
	(void)k;
	return TEN_(r)->ctl_changes && fmt_seconds(TEN_(r)->ctl_ns, b, n);
}
static bool t_suspended(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(TEN_(r)->suspended, b, n); }
static bool t_procs(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64((uint64_t)TEN_(r)->procs, b, n); }
static bool t_alive(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64((uint64_t)TEN_(r)->alive, b, n); }
static bool p_used(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(PROC_(r)->used, b, n); }
static bool p_spilled(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(PROC_(r)->usage[VGPU_USAGE_SPILLED], b, n); }
static bool p_launches(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(PROC_(r)->launches, b, n); }
static bool p_throttled(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(PROC_(r)->launches_throttled, b, n); }
static bool p_wait(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_seconds(PROC_(r)->wait_ns, b, n); }
static bool p_gpu_time(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_seconds(PROC_(r)->gpu_time_ns, b, n); }
static bool p_alive(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_u64(PROC_(r)->state == TOP_ALIVE, b, n); }
static bool p_suspended(const void *r, int k, char *b, size_t n)
{
	(void)k;
	return fmt_u64((PROC_(r)->flags & VGPU_LEDGER_SLOT_SUSPENDED) != 0, b,
		       n);
}
static bool p_start(const void *r, int k, char *b, size_t n)
{ (void)k; return fmt_seconds(PROC_(r)->start_ns, b, n); }

static const struct prom_metric metrics[] = {
	{ "vgpu_gpu_memory_bytes", "gauge", "Physical memory of the GPU.",
	  PROM_GPU, g_physical },
	{ "vgpu_gpu_slices_bytes", "gauge",
	  "Sum of the tenants' memory limits (unlimited tenants not counted).",
	  PROM_GPU, g_slices },
	{ "vgpu_gpu_unlimited_tenants", "gauge",
	  "Tenants with no memory limit.", PROM_GPU, g_unlimited },
	{ "vgpu_gpu_memory_used_bytes", "gauge",
	  "Device memory charged to all tenants of the GPU.", PROM_GPU, g_used },
	{ "vgpu_ledger_joins_total", "counter",
	  "Processes that joined the GPU's ledger since it was created.",
	  PROM_GPU, g_joins },
	{ "vgpu_memory_used_bytes", "gauge",
	  "Device memory charged to the tenant.", PROM_TENANT, t_used },
	{ "vgpu_memory_limit_bytes", "gauge",
	  "The tenant's device memory limit (+Inf: none).", PROM_TENANT,
	  t_limit },
	{ "vgpu_spilled_bytes", "gauge",
	  "Host memory standing in for device memory (overcommit).",
	  PROM_TENANT, t_spilled },
	{ "vgpu_spill_limit_bytes", "gauge",
	  "The tenant's limit of spilled bytes (+Inf: none).", PROM_TENANT,
	  t_spill_limit },
	{ "vgpu_memory_usage_bytes", "gauge",
	  "Memory charged to the tenant, per usage kind.", PROM_KIND, t_kind },
	{ "vgpu_compute_share_target_percent", "gauge",
	  "The tenant's compute share (0 or 100: no cap).", PROM_TENANT,
	  t_share },
	{ "vgpu_tenant_compute_policy", "gauge",
	  "1 for the tenant's compute policy, 0 for the others.", PROM_POLICY,
	  t_policy },
	{ "vgpu_tenant_over_limit_bytes", "gauge",
	  "Device memory the tenant holds past its memory limit (a limit "
	  "lowered below use); 0 within it.", PROM_TENANT, t_over },
	{ "vgpu_tenant_control_changes_total", "counter",
	  "Changes an administrator made to the tenant's terms (vgpu-ctl).",
	  PROM_TENANT, t_ctl_changes },
	{ "vgpu_tenant_suspended", "gauge",
	  "1 while the tenant is suspended (vgpu-ctl suspend), else 0.",
	  PROM_TENANT, t_suspended },
	{ "vgpu_tenant_control_last_change_time_seconds", "gauge",
	  "When the last change to the tenant's terms was made (Unix time; "
	  "no sample before the first).", PROM_TENANT, t_ctl_time },
	{ "vgpu_gpu_time_seconds_total", "counter",
	  "GPU time of the tenant's launches, measured by the compute "
	  "throttle (capped tenants).", PROM_TENANT, t_gpu_time },
	{ "vgpu_admission_wait_seconds_total", "counter",
	  "Wall time the tenant's launches waited for admission.",
	  PROM_TENANT, t_wait },
	{ "vgpu_tenant_processes", "gauge",
	  "Process slots of the tenant (alive or not).", PROM_TENANT, t_procs },
	{ "vgpu_tenant_processes_alive", "gauge",
	  "Process slots of the tenant whose owner is alive.", PROM_TENANT,
	  t_alive },
	{ "vgpu_process_memory_used_bytes", "gauge",
	  "Device memory charged to the process.", PROM_PROC, p_used },
	{ "vgpu_process_spilled_bytes", "gauge",
	  "Spilled host memory of the process.", PROM_PROC, p_spilled },
	{ "vgpu_process_suspended", "gauge",
	  "1 while the process holds its launches with its memory moved to "
	  "the host (it carried out a suspension), else 0.", PROM_PROC,
	  p_suspended },
	{ "vgpu_process_launches_total", "counter",
	  "Launches admitted by the compute throttle.", PROM_PROC, p_launches },
	{ "vgpu_process_launches_throttled_total", "counter",
	  "Launches that had to wait for admission.", PROM_PROC, p_throttled },
	{ "vgpu_process_admission_wait_seconds_total", "counter",
	  "Wall time the process's launches waited for admission.", PROM_PROC,
	  p_wait },
	{ "vgpu_process_gpu_time_seconds_total", "counter",
	  "GPU time the process's launches were charged.", PROM_PROC,
	  p_gpu_time },
	{ "vgpu_process_alive", "gauge",
	  "1 while the process's slot is held by its owner, else 0 (exited, "
	  "being reaped).", PROM_PROC, p_alive },
	{ "vgpu_process_start_time_seconds", "gauge",
	  "When the process joined the ledger (Unix time).", PROM_PROC,
	  p_start },
};

/* A label value: escaped for a terminal (top_escape), then as the format
 * wants. */
static void prom_label(FILE *f, const char *name, const char *value,
		       bool first)
{
	char buf[4 * VGPU_LEDGER_UUID_MAX];
	const char *v = top_escape(value, TOP_ESC_TEXT, buf, sizeof(buf));

	fprintf(f, "%s%s=\"", first ? "" : ",", name);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
	fputc('"', f);
}

static void prom_sample(FILE *f, const struct prom_metric *m,
			const struct top_gpu *g, const void *rec, int kind)
{
	char val[64], num[32];

	if (!m->value(rec, kind, val, sizeof(val)))
		return;
	fprintf(f, "%s{", m->name);
	prom_label(f, "gpu", g->uuid, true);
	if (m->level == PROM_TENANT || m->level == PROM_KIND ||
	    m->level == PROM_POLICY)
		prom_label(f, "tenant", TEN_(rec)->name, false);
	if (m->level == PROM_KIND)
		prom_label(f, "kind", kind_names[kind], false);
	if (m->level == PROM_POLICY)
		prom_label(f, "policy", top_policy_name((uint32_t)kind), false);
	if (m->level == PROM_PROC) {
		const struct top_proc *p = rec;

		prom_label(f, "tenant", tenant_name(g, p->tenant), false);
		snprintf(num, sizeof(num), "%" PRId32, p->pid);
		prom_label(f, "pid", num, false);
		if (p->host_pid > 0 && p->host_pid != p->pid) {
			snprintf(num, sizeof(num), "%" PRId32, p->host_pid);
			prom_label(f, "host_pid", num, false);
		}
		snprintf(num, sizeof(num), "%" PRIu32, p->slot);
		prom_label(f, "slot", num, false);
	}
	fprintf(f, "} %s\n", val);
}

static void prom_family(FILE *f, const struct prom_metric *m,
			const struct top_snap *s)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
		m->type);
	for (int i = 0; i < s->ngpus; i++) {
		const struct top_gpu *g = &s->gpus[i];

		if (m->level == PROM_GPU)
			prom_sample(f, m, g, g, 0);
		for (int j = 0; m->level == PROM_TENANT && j < g->ntenants; j++)
			prom_sample(f, m, g, &g->tenants[j], 0);
		for (int j = 0; m->level == PROM_KIND && j < g->ntenants; j++)
			for (int k = 0; k < VGPU_USAGE_COUNT; k++)
				prom_sample(f, m, g, &g->tenants[j], k);
		for (int j = 0; m->level == PROM_POLICY && j < g->ntenants; j++)
			for (int k = 0; k < PROM_POLICIES; k++)
				prom_sample(f, m, g, &g->tenants[j], k);
		for (int j = 0; m->level == PROM_PROC && j < g->nprocs; j++)
			prom_sample(f, m, g, &g->procs[j], 0);
	}
}

void top_print_prometheus(FILE *f, const struct top_snap *s)
{
	fputs("# HELP vgpu_top_ledgers Usable ledger files read.\n"
	      "# TYPE vgpu_top_ledgers gauge\n", f);
	fprintf(f, "vgpu_top_ledgers %d\n", s->ngpus);
	fputs("# HELP vgpu_top_skipped_files Files named like ledgers that "
	      "could not be used.\n# TYPE vgpu_top_skipped_files gauge\n", f);
	fprintf(f, "vgpu_top_skipped_files %d\n", s->nskipped);
	for (size_t i = 0; i < sizeof(metrics) / sizeof(*metrics); i++)
		prom_family(f, &metrics[i], s);
}
