/* check.c - the two counts and the trace of the differential test.
 *
 * The simulator's count: the shim opened the simulator by its absolute path
 * (VGPU_REAL_LIBCUDA); libc's dlopen of that path with RTLD_NOLOAD gives
 * the same object (the shim's dlopen would give the shim), and its
 * cuMemGetInfo_v2 reports the whole simulated device (total - free: what
 * every process holds there), not the slice. diff_sim_open checks both.
 * The ledger's: the ledger file mapped read-only and read through
 * include/vgpu.h, as an outside tool would.
 */
#include "diff.h"
#include "vgpu.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct diff_shared *diff_sh;
bool diff_verbose;

static CUresult (*sim_getinfo)(size_t *free, size_t *total);

/* ---- the trace ------------------------------------------------------------- */

static struct diff_line *ring_of(int proc, int thread)
{
	return &diff_sh->ring[(size_t)(proc * diff_sh->threads + thread) *
			      DIFF_RING];
}

static void vtrace(struct diff_thread *t, const char *fmt, va_list ap)
{
	unsigned i = atomic_fetch_add(
		&diff_sh->ring_next[t->proc * diff_sh->threads + t->thread], 1);
	struct diff_line *l = &ring_of(t->proc, t->thread)[i % DIFF_RING];

	l->step = t->step;
	vsnprintf(l->text, sizeof(l->text), fmt, ap);
	if (diff_verbose)
		fprintf(stderr, "step %d p%d.t%d: %s\n", t->step, t->proc,
			t->thread, l->text);
}

void diff_trace(struct diff_thread *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vtrace(t, fmt, ap);
	va_end(ap);
}

/* The first failure wins; the checker's further findings of the same
 * step are appended (it is alone then: the others wait at the barrier). */
static void vfail(int step, bool append, const char *fmt, va_list ap)
{
	size_t n = strlen(diff_sh->fail_msg);
	int no = 0;

	if (atomic_compare_exchange_strong(&diff_sh->failed, &no, 1)) {
		diff_sh->fail_step = step;
		vsnprintf(diff_sh->fail_msg, sizeof(diff_sh->fail_msg), fmt,
			  ap);
		return;
	}
	if (!append || diff_sh->fail_step != step ||
	    n + 4 >= sizeof(diff_sh->fail_msg))
		return;
	strcpy(diff_sh->fail_msg + n, "; ");
	vsnprintf(diff_sh->fail_msg + n + 2, sizeof(diff_sh->fail_msg) - n - 2,
		  fmt, ap);
}

void diff_fail(struct diff_thread *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(t->step, false, fmt, ap);
	va_end(ap);
}

static const char *cu_name(CUresult rc)
{
	const char *s = NULL;

	if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
		return "CUDA_ERROR_?";
	return s;
}

static CUresult vcu(struct diff_thread *t, CUresult rc, CUresult allowed,
		    const char *fmt, va_list ap)
{
	char call[160];

	vsnprintf(call, sizeof(call), fmt, ap);
	diff_trace(t, "%s -> %s", call, rc ? cu_name(rc) : "ok");
	if (rc != CUDA_SUCCESS && rc != allowed)
		diff_fail(t, "p%d.t%d: %s returned %s", t->proc, t->thread,
			  call, cu_name(rc));
	return rc;
}

CUresult diff_cu(struct diff_thread *t, CUresult rc, bool ok_oom,
		 const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rc = vcu(t, rc, ok_oom ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, fmt,
		 ap);
	va_end(ap);
	return rc;
}

CUresult diff_cu_allow(struct diff_thread *t, CUresult rc, CUresult allowed,
		       const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rc = vcu(t, rc, allowed, fmt, ap);
	va_end(ap);
	return rc;
}

/* The latest step any thread traced. */
static int last_traced(void)
{
	int nt = diff_sh->procs * diff_sh->threads, last = 0;

	for (int k = 0; k < nt; k++) {
		struct diff_line *r = ring_of(k / diff_sh->threads,
					      k % diff_sh->threads);
		unsigned n = atomic_load(&diff_sh->ring_next[k]);
		if (n && r[(n - 1) % DIFF_RING].step > last)
			last = r[(n - 1) % DIFF_RING].step;
	}
	return last;
}

/* Every thread's lines of steps first..last, in step order (last < 0:
 * the latest traced step). */
void diff_print_trace(int first, int last)
{
	int nt = diff_sh->procs * diff_sh->threads;

	if (last < 0) {
		last = last_traced();
		first = last + first;
		if (first < 0)
			first = 0;
	}
	for (int s = first; s <= last; s++) {
		for (int k = 0; k < nt; k++) {
			struct diff_line *r = ring_of(k / diff_sh->threads,
						      k % diff_sh->threads);
			unsigned n = atomic_load(&diff_sh->ring_next[k]);
			unsigned from = n > DIFF_RING ? n - DIFF_RING : 0;
			for (unsigned i = from; i < n; i++)
				if (r[i % DIFF_RING].step == s)
					printf("  step %d p%d.t%d: %s\n", s,
					       k / diff_sh->threads,
					       k % diff_sh->threads,
					       r[i % DIFF_RING].text);
		}
	}
}

/* ---- the simulator's count ------------------------------------------------- */

/* The shim catches dlopen: any path that ends in libcuda.so.* opens the
 * shim itself. libc's own dlopen, found through libc's handle, does not. */
static void *real_dlopen(const char *path)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *(*open_fn)(const char *, int) = NULL;

	if (libc)
		open_fn = (void *(*)(const char *, int))dlsym(libc, "dlopen");
	if (!open_fn)
		return NULL;
	return open_fn(path, RTLD_NOW | RTLD_NOLOAD);
}

bool diff_sim_open(uint64_t limit)
{
	const char *path = getenv("VGPU_REAL_LIBCUDA");
	size_t sf, st, vf, vt;
	void *h;

	if (!path || path[0] != '/') {
		fprintf(stderr, "diff: VGPU_REAL_LIBCUDA must be the simulator's "
			"absolute path\n");
		return false;
	}
	h = real_dlopen(path);
	if (h)
		sim_getinfo = (CUresult (*)(size_t *, size_t *))dlsym(
			h, "cuMemGetInfo_v2");
	if (!sim_getinfo || (void *)sim_getinfo == (void *)cuMemGetInfo_v2) {
		fprintf(stderr, "diff: %s is not loaded apart from the shim "
			"(is LD_PRELOAD the shim?)\n", path);
		return false;
	}
	/* The shim answers with the slice; the simulator with its device. */
	if (sim_getinfo(&sf, &st) || cuMemGetInfo_v2(&vf, &vt) ||
	    vt != limit || st <= vt) {
		fprintf(stderr, "diff: the simulator's total %zu and the "
			"shim's %zu are not the device and the slice %llu\n",
			st, vt, (unsigned long long)limit);
		return false;
	}
	return true;
}

uint64_t diff_sim_used(void)
{
	size_t f = 0, total = 0;

	if (sim_getinfo(&f, &total) != CUDA_SUCCESS)
		return UINT64_MAX;
	return total - f;
}

/* ---- the ledger's count ---------------------------------------------------- */

static const uint8_t *ledger_map;

static bool ledger_open(void)
{
	const char *dir = getenv("VGPU_LEDGER_DIR");
	char path[1024];
	struct dirent *de;
	DIR *d;
	int fd = -1;

	if (ledger_map)
		return true;
	d = dir ? opendir(dir) : NULL;
	while (d && fd < 0 && (de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (n < 10 || strcmp(de->d_name + n - 10, ".v3.ledger") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (d)
		closedir(d);
	if (fd < 0)
		return false;
	ledger_map = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED,
			  fd, 0);
	close(fd);
	if (ledger_map == MAP_FAILED)
		ledger_map = NULL;
	return ledger_map != NULL;
}

void diff_ledger_close(void)
{
	if (ledger_map)
		munmap((void *)ledger_map, VGPU_LEDGER_FILE_SIZE);
	ledger_map = NULL;
}

static const struct vgpu_ledger_tenant *tenant(int i)
{
	const struct vgpu_ledger_tenant *all = (const void *)(
		ledger_map + VGPU_LEDGER_TENANTS_OFFSET);
	char name[32];

	snprintf(name, sizeof(name), "diff-t%d", i);
	for (int k = 0; k < VGPU_LEDGER_MAX_TENANTS; k++)
		if (__atomic_load_n(&all[k].state, __ATOMIC_ACQUIRE) ==
			    VGPU_TENANT_ACTIVE &&
		    strncmp(all[k].name, name, sizeof(all[k].name)) == 0)
			return &all[k];
	return NULL;
}

static uint64_t tenant_usage(int i, int kind)
{
	const struct vgpu_ledger_tenant *t = tenant(i);

	if (!t)
		return 0;
	if (kind == VGPU_USAGE_COUNT)
		return __atomic_load_n(&t->used, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&t->usage[kind], __ATOMIC_ACQUIRE);
}

/* The records of memory shared between processes (the share family):
 * how many are in use, and how often a charge moved. */
static uint32_t shares_in_use(uint64_t *moves)
{
	const struct vgpu_ledger_shares *h = (const void *)(
		ledger_map + VGPU_LEDGER_SHARES_OFFSET);

	if (moves)
		*moves = __atomic_load_n(&h->moves, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&h->in_use, __ATOMIC_ACQUIRE);
}

/* ---- the checks ------------------------------------------------------------ */

static char *kinds_text(int i, char *buf, size_t len)
{
	static const char *names[] = {
#define DIFF_KIND_NAME_(NAME, name, value) #name,
		VGPU_USAGE_KIND_MAP(DIFF_KIND_NAME_)
#undef DIFF_KIND_NAME_
	};
	size_t n = 0;

	buf[0] = '\0';
	for (int k = 0; k < VGPU_USAGE_COUNT && n < len; k++)
		if (tenant_usage(i, k))
			n += snprintf(buf + n, len - n, " %s=%llu", names[k],
				      (unsigned long long)tenant_usage(i, k));
	return buf;
}

/* Pools may overshoot the slice by their granularity (docs/memory.md):
 * one chunk per pool holding memory, the default pools included. */
static uint64_t pool_slack(int tenant_index)
{
	uint64_t n = 0;

	for (int p = tenant_index; p < diff_sh->procs; p += diff_sh->tenants)
		n += (uint64_t)atomic_load(&diff_sh->pools_live[p]);
	return n * DIFF_GRAN;
}

/* Memory shared between processes: when its payer lets go, its charge
 * moves to a holder, whose tenant then pays even past its slice
 * (docs/memory.md). Bounded by what the tenant's processes imported. */
static uint64_t share_slack(int tenant_index)
{
	uint64_t n = 0;

	for (int p = tenant_index; p < diff_sh->procs; p += diff_sh->tenants)
		n += atomic_load(&diff_sh->share_slack[p]);
	return n;
}

static void fail_at(int step, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(step, true, fmt, ap);
	va_end(ap);
}

void diff_check(int step, bool zero, const char *overcommit)
{
	uint64_t sim, sum = 0, spilled = 0;
	bool managed = strcmp(overcommit, "managed") == 0;
	char kinds[256];

	if (!ledger_open()) {
		fail_at(step, "no ledger file in VGPU_LEDGER_DIR");
		return;
	}
	for (int i = 0; i < diff_sh->tenants; i++) {
		uint64_t used = tenant_usage(i, VGPU_USAGE_COUNT);
		uint64_t limit = diff_proc.limit + pool_slack(i) +
				 share_slack(i);
		sum += used;
		spilled += tenant_usage(i, VGPU_USAGE_SPILLED);
		if (used > limit)
			fail_at(step, "over the slice: tenant diff-t%d is "
				"charged %llu > limit %llu (+ pool slack, + %llu "
				"imported)%s", i, (unsigned long long)used,
				(unsigned long long)diff_proc.limit,
				(unsigned long long)share_slack(i),
				kinds_text(i, kinds, sizeof(kinds)));
		if (zero && (used || tenant_usage(i, VGPU_USAGE_SPILLED)))
			fail_at(step, "left charged at the end: tenant "
				"diff-t%d:%s", i,
				kinds_text(i, kinds, sizeof(kinds)));
	}
	/* The device is read after the ledger: between the barriers only
	 * the streams' workers run, and they only free (the device first,
	 * the ledger after it, as the shim's host functions do), so a
	 * device read first could see memory the ledger has given back
	 * since, a false escape (seeds 1 and 193 showed it 1 run in 30). */
	sim = diff_sim_used();
	if (diff_verbose) {
		uint64_t moves;
		uint32_t shares = shares_in_use(&moves);
		fprintf(stderr, "step %d check: device %llu, ledger %llu, "
			"spilled %llu, shared records %u (%llu moves)\n", step,
			(unsigned long long)sim, (unsigned long long)sum,
			(unsigned long long)spilled, shares,
			(unsigned long long)moves);
	}
	/* Managed overcommit: the simulator counts managed memory on the
	 * device in full, the ledger as spilled (docs/overcommit.md). */
	if (managed)
		sum += spilled;
	if (sim > sum)
		fail_at(step, "escape: the device holds %llu bytes, the ledger "
			"charges %llu (%llu not charged)%s; tenant 0:%s",
			(unsigned long long)sim, (unsigned long long)sum,
			(unsigned long long)(sim - sum),
			managed ? " (spilled included)" : "",
			kinds_text(0, kinds, sizeof(kinds)));
	if (zero && sim)
		fail_at(step, "left on the device at the end: %llu bytes",
			(unsigned long long)sim);
	if (zero && shares_in_use(NULL))
		fail_at(step, "left in the ledger at the end: %u records of "
			"shared memory", shares_in_use(NULL));
}

bool diff_check_exited(void)
{
	char kinds[256];
	bool ok = true;

	if (!ledger_open())
		return true;
	for (int i = 0; i < diff_sh->tenants; i++) {
		if (!tenant_usage(i, VGPU_USAGE_COUNT) &&
		    !tenant_usage(i, VGPU_USAGE_SPILLED))
			continue;
		printf("FAIL: tenant diff-t%d still charged after its processes "
		       "exited:%s\n", i, kinds_text(i, kinds, sizeof(kinds)));
		ok = false;
	}
	return ok;
}
