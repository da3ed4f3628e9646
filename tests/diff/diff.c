/* diff.c - the differential test's driver: options, processes, threads and
 * the lockstep of steps and checks (diff.h).
 *
 *   diff --seed N --steps N --threads N --procs N --tenants N
 *        --ops buf,pitch,...,share --overcommit off|host|managed
 *        --limit SIZE --device-mem SIZE --align N --trace-steps N
 *        --timeout S -v
 *
 * Processes are forked before CUDA is initialised; process p is tenant
 * diff-t<p % tenants>. Each thread's sequence comes from (seed, process,
 * thread); with one thread and one process a seed replays exactly, with
 * more the interleaving within a step is the scheduler's.
 */
#include "diff.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct diff_proc diff_proc;

static struct {
	uint64_t seed;
	int steps, threads, procs, tenants, trace_steps, timeout_s;
	unsigned families;
	const char *overcommit, *ops;
	uint64_t limit, device_mem, align;
} opt = { 1, 2000, 2, 1, 1, 30, 300, 0, "off", "all", 64ull << 20, 4ull << 30, 1 };

/* ---- random numbers -------------------------------------------------------- */

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t diff_rand(struct diff_thread *t)
{
	return splitmix(&t->rng);
}

uint64_t diff_below(struct diff_thread *t, uint64_t n)
{
	return diff_rand(t) % n;
}

bool diff_chance(struct diff_thread *t, unsigned percent)
{
	return diff_below(t, 100) < percent;
}

/* Log-uniform in [lo, hi]. */
static size_t log_uniform(struct diff_thread *t, size_t lo, size_t hi)
{
	int bits = 64 - __builtin_clzll(hi);
	size_t v;

	do {
		v = (size_t)(diff_rand(t) >> (64 - bits));
	} while (v < lo || v > hi);
	if (v > 16)
		v >>= diff_below(t, 3);
	return v < lo ? lo : v;
}

static size_t any_size(struct diff_thread *t)
{
	unsigned r = (unsigned)diff_below(t, 100);

	if (r < 40)
		return log_uniform(t, 1, 64 << 10);
	if (r < 80)
		return log_uniform(t, 64 << 10, 4 << 20);
	if (r < 95)
		return log_uniform(t, 4 << 20, 16 << 20);
	return (size_t)(diff_proc.limit / 4 +
			diff_below(t, diff_proc.limit - diff_proc.limit / 4));
}

/* --align rounds sizes up (4096: the simulator's page, so that its
 * rounding of buffers is out of the picture). */
size_t diff_align(void)
{
	return (size_t)opt.align;
}

size_t diff_size(struct diff_thread *t)
{
	size_t s = any_size(t);

	return (s + opt.align - 1) / opt.align * opt.align;
}

/* ---- the table ------------------------------------------------------------- */

struct diff_obj *diff_obj_new(struct diff_thread *t, int fam)
{
	struct diff_obj *o = calloc(1, sizeof(*o));

	if (!o) {
		diff_fail(t, "out of host memory");
		return NULL;
	}
	o->fam = fam;
	o->id = atomic_fetch_add(&diff_proc.next_id, 1);
	return o;
}

void diff_obj_put(struct diff_obj *o)
{
	pthread_mutex_lock(&diff_proc.lock);
	if (diff_proc.nobjs < (int)(sizeof(diff_proc.objs) /
				    sizeof(diff_proc.objs[0]))) {
		diff_proc.objs[diff_proc.nobjs++] = o;
		atomic_fetch_add(&diff_sh->objs[diff_proc.index], 1);
	}
	pthread_mutex_unlock(&diff_proc.lock);
}

struct diff_obj *diff_obj_take(struct diff_thread *t, int fam)
{
	struct diff_obj *o = NULL;
	int n = 0, pick;

	pthread_mutex_lock(&diff_proc.lock);
	for (int i = 0; i < diff_proc.nobjs; i++)
		n += fam < 0 || diff_proc.objs[i]->fam == fam;
	pick = n ? (int)diff_below(t, (uint64_t)n) : -1;
	for (int i = 0; pick >= 0 && i < diff_proc.nobjs; i++) {
		if (fam >= 0 && diff_proc.objs[i]->fam != fam)
			continue;
		if (pick-- > 0)
			continue;
		o = diff_proc.objs[i];
		diff_proc.objs[i] = diff_proc.objs[--diff_proc.nobjs];
		atomic_fetch_sub(&diff_sh->objs[diff_proc.index], 1);
		break;
	}
	pthread_mutex_unlock(&diff_proc.lock);
	return o;
}

void diff_obj_drop(struct diff_obj *o)
{
	free(o);
}

int diff_obj_count(int fam)
{
	int n = 0;

	pthread_mutex_lock(&diff_proc.lock);
	for (int i = 0; i < diff_proc.nobjs; i++)
		n += diff_proc.objs[i]->fam == fam;
	pthread_mutex_unlock(&diff_proc.lock);
	return n;
}

void diff_restore_ctx(struct diff_thread *t)
{
	CUcontext cur = NULL;

	if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == diff_proc.primary)
		return;
	diff_cu(t, cuCtxSetCurrent(diff_proc.primary), false,
		"cuCtxSetCurrent(primary)");
}

/* ---- one step -------------------------------------------------------------- */

static int pick_family(struct diff_thread *t)
{
	int fams[DIFF_F_COUNT], n = 0;

	for (int f = 0; f < DIFF_F_COUNT; f++)
		if (diff_proc.families & (1u << f))
			fams[n++] = f;
	return fams[diff_below(t, (uint64_t)n)];
}

static void one_step(struct diff_thread *t)
{
	const struct diff_family_ops *ops;
	struct diff_obj *o;
	int fam, n;

	for (fam = 0; fam < DIFF_F_COUNT; fam++)
		if ((diff_proc.families & (1u << fam)) &&
		    diff_families[fam].poll)
			diff_families[fam].poll(t);
	if (t->step >= opt.steps) {
		t->finishing = true;
		o = diff_obj_take(t, -1);
		if (o && !diff_families[o->fam].step(t, o))
			diff_obj_put(o);
		return;
	}
	fam = pick_family(t);
	ops = &diff_families[fam];
	n = diff_obj_count(fam);
	if (diff_chance(t, n == 0 ? 100 : n < 4 ? 55 : n < 16 ? 35 : 10) ||
	    (o = diff_obj_take(t, fam)) == NULL) {
		ops->make(t);
		return;
	}
	if (!ops->step(t, o))
		diff_obj_put(o);
}

/* ---- threads --------------------------------------------------------------- */

static void barrier(void)
{
	pthread_barrier_wait(&diff_sh->barrier);
}

static bool is_checker(const struct diff_thread *t)
{
	return t->proc == 0 && t->thread == 0;
}

/* After the last step, everything the process made is gone: pools
 * trimmed, graph memory trimmed, work finished. */
static void cleanup(struct diff_thread *t)
{
	diff_cu(t, cuCtxSynchronize(), false, "cuCtxSynchronize()");
	if (diff_proc.default_pool)
		diff_cu(t, cuMemPoolTrimTo(diff_proc.default_pool, 0), false,
			"cuMemPoolTrimTo(default, 0)");
	diff_cu(t, cuDeviceGraphMemTrim(diff_proc.dev), false,
		"cuDeviceGraphMemTrim()");
}

static void *thread_main(void *arg)
{
	struct diff_thread *t = arg;

	diff_cu(t, cuCtxSetCurrent(diff_proc.primary), false,
		"cuCtxSetCurrent(primary)");
	for (t->step = 0;; t->step++) {
		one_step(t);
		diff_restore_ctx(t);
		barrier();
		/* Only the checker decides, between the two barriers, so
		 * that every thread leaves at the same step: a failure a
		 * thread records in its next step must not make another
		 * leave this one (the rest would wait at a barrier). */
		if (is_checker(t)) {
			diff_check(t->step, false, opt.overcommit);
			int left = 0;
			for (int p = 0; p < opt.procs; p++)
				left += atomic_load(&diff_sh->objs[p]);
			if ((t->step + 1 >= opt.steps && left == 0) ||
			    atomic_load(&diff_sh->failed))
				atomic_store(&diff_sh->done, 1);
		}
		barrier();
		if (atomic_load(&diff_sh->done))
			break;
	}
	if (atomic_load(&diff_sh->failed))
		return NULL;
	t->step++;
	if (t->thread == 0)
		cleanup(t);
	barrier();
	if (is_checker(t))
		diff_check(t->step, true, opt.overcommit);
	barrier();
	return NULL;
}

/* ---- processes ------------------------------------------------------------- */

static int proc_init(struct diff_thread *t)
{
	CUresult rc;

	if ((rc = cuInit(0)) || (rc = cuDeviceGet(&diff_proc.dev, 0)) ||
	    (rc = cuDevicePrimaryCtxRetain(&diff_proc.primary, 0)) ||
	    (rc = cuCtxSetCurrent(diff_proc.primary))) {
		fprintf(stderr, "diff: process %d: CUDA setup failed (%d)\n",
			t->proc, (int)rc);
		return -1;
	}
	if (!diff_sim_open(opt.limit))
		return -1;
	for (int i = 0; i < 2; i++)
		diff_cu(t, cuStreamCreate(&diff_proc.streams[i],
					  CU_STREAM_NON_BLOCKING), false,
			"cuStreamCreate");
	for (int f = 0; f < DIFF_F_COUNT; f++) {
		if (!(diff_proc.families & (1u << f)) ||
		    diff_families[f].available())
			continue;
		diff_proc.families &= ~(1u << f);
		if (t->proc == 0)
			printf("diff: family %s skipped: the driver lacks it\n",
			       diff_families[f].name);
	}
	if (!diff_proc.families) {
		atomic_store(&diff_sh->skipped, 1);
		return -1;
	}
	if (cuDeviceGetDefaultMemPool(&diff_proc.default_pool, 0))
		diff_proc.default_pool = NULL;
	/* The default pool may overshoot the slice by a chunk. */
	atomic_store(&diff_sh->pools_live[t->proc], 1);
	return 0;
}

static void proc_exit(void)
{
	for (int i = 0; i < 2; i++)
		if (diff_proc.streams[i])
			cuStreamDestroy(diff_proc.streams[i]);
	cuDevicePrimaryCtxRelease(0);
}

static int proc_main(int index)
{
	struct diff_thread *ts = calloc((size_t)opt.threads, sizeof(*ts));
	pthread_t *tid = calloc((size_t)opt.threads, sizeof(*tid));
	char tenant[32];
	bool ok;

	snprintf(tenant, sizeof(tenant), "diff-t%d", index % opt.tenants);
	setenv("VGPU_TENANT", tenant, 1);
	diff_proc.index = index;
	diff_proc.families = opt.families;
	diff_proc.limit = opt.limit;
	diff_proc.pools_live = &diff_sh->pools_live[index];
	pthread_mutex_init(&diff_proc.lock, NULL);
	for (int i = 0; i < opt.threads; i++) {
		uint64_t x = opt.seed * 0x100000001b3ull + (uint64_t)index *
			     131 + (uint64_t)i;
		ts[i] = (struct diff_thread){ .proc = index, .thread = i };
		ts[i].rng = splitmix(&x);
	}
	ok = proc_init(&ts[0]) == 0;
	if (!ok && !atomic_load(&diff_sh->skipped))
		diff_fail(&ts[0], "process %d could not start", index);
	pthread_barrier_wait(&diff_sh->start);
	if (atomic_load(&diff_sh->skipped))
		return 0;
	if (!ok || atomic_load(&diff_sh->failed))
		return 1;
	for (int i = 1; i < opt.threads; i++)
		pthread_create(&tid[i], NULL, thread_main, &ts[i]);
	thread_main(&ts[0]);
	for (int i = 1; i < opt.threads; i++)
		pthread_join(tid[i], NULL);
	if (atomic_load(&diff_sh->failed))
		return 1;
	proc_exit();
	return 0;
}

/* ---- options --------------------------------------------------------------- */

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'G': case 'g': return v << 30;
	case 'M': case 'm': return v << 20;
	case 'K': case 'k': return v << 10;
	default: return v;
	}
}

static bool parse_families(const char *list)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	opt.families = 0;
	for (char *w = strtok_r(buf, ",", &save); w;
	     w = strtok_r(NULL, ",", &save)) {
		int f = 0;
		if (strcmp(w, "all") == 0) {
			opt.families = (1u << DIFF_F_COUNT) - 1;
			continue;
		}
		while (f < DIFF_F_COUNT && strcmp(w, diff_families[f].name))
			f++;
		if (f == DIFF_F_COUNT) {
			fprintf(stderr, "diff: unknown op family '%s'\n", w);
			return false;
		}
		opt.families |= 1u << f;
	}
	return opt.families != 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: diff [--seed N] [--steps N] [--threads N] "
		"[--procs N] [--tenants N] [--ops all|LIST] [--overcommit "
		"off|host|managed] [--limit SIZE] [--device-mem SIZE] "
		"[--align N] [--trace-steps N] [--timeout S] [-v]\n"
		"families:");
	for (int f = 0; f < DIFF_F_COUNT; f++)
		fprintf(stderr, " %s", diff_families[f].name);
	fprintf(stderr, "\n");
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	opt.families = (1u << DIFF_F_COUNT) - 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-v") == 0) {
			diff_verbose = true;
			continue;
		}
		if (!v || strncmp(a, "--", 2) != 0)
			usage();
		i++;
		if (!strcmp(a, "--seed")) opt.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--steps")) opt.steps = atoi(v);
		else if (!strcmp(a, "--threads")) opt.threads = atoi(v);
		else if (!strcmp(a, "--procs")) opt.procs = atoi(v);
		else if (!strcmp(a, "--tenants")) opt.tenants = atoi(v);
		else if (!strcmp(a, "--ops")) {
			opt.ops = v;
			if (!parse_families(v))
				usage();
		}
		else if (!strcmp(a, "--overcommit")) opt.overcommit = v;
		else if (!strcmp(a, "--limit")) opt.limit = parse_size(v);
		else if (!strcmp(a, "--device-mem")) opt.device_mem = parse_size(v);
		else if (!strcmp(a, "--align")) opt.align = parse_size(v);
		else if (!strcmp(a, "--trace-steps")) opt.trace_steps = atoi(v);
		else if (!strcmp(a, "--timeout")) opt.timeout_s = atoi(v);
		else usage();
	}
	if (opt.threads < 1 || opt.threads > 64 || opt.procs < 1 ||
	    opt.procs > 64 || opt.tenants < 1 || opt.tenants > opt.procs ||
	    opt.steps < 1 || opt.limit < (8ull << 20) || opt.align < 1)
		usage();
}

/* ---- the parent ------------------------------------------------------------ */

static char ledger_dir[256], state_dir[256];

static void make_dirs(void)
{
	const char *tmp = getenv("TMPDIR");
	char v[64];

	if (!tmp || tmp[0] != '/')
		tmp = "/tmp";
	snprintf(ledger_dir, sizeof(ledger_dir), "%s/vgpu-diff-XXXXXX", tmp);
	snprintf(state_dir, sizeof(state_dir), "%s/vgpu-diff-sim-XXXXXX", tmp);
	if (!mkdtemp(ledger_dir) || !mkdtemp(state_dir)) {
		perror("diff: mkdtemp");
		exit(2);
	}
	setenv("VGPU_LEDGER_DIR", ledger_dir, 1);
	setenv("VGPU_SIM_STATE_DIR", state_dir, 1);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)opt.limit);
	setenv("VGPU_MEMORY_LIMIT", v, 1);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)opt.device_mem);
	setenv("VGPU_SIM_MEMORY", v, 1);
	setenv("VGPU_OVERCOMMIT", opt.overcommit, 1);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 0);
	setenv("VGPU_SIM_KERNEL_NS", "1000", 0);
}

static void remove_dirs(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", ledger_dir, state_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "diff: could not remove %s\n", ledger_dir);
}

static void map_shared(void)
{
	size_t lines = (size_t)opt.procs * (size_t)opt.threads * DIFF_RING;
	size_t size = sizeof(*diff_sh) + lines * sizeof(struct diff_line);
	pthread_barrierattr_t a;

	diff_sh = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (diff_sh == MAP_FAILED) {
		perror("diff: mmap");
		exit(2);
	}
	diff_sh->procs = opt.procs;
	diff_sh->threads = opt.threads;
	diff_sh->tenants = opt.tenants;
	diff_sh->steps = opt.steps;
	pthread_barrierattr_init(&a);
	pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_barrier_init(&diff_sh->barrier, &a,
			     (unsigned)(opt.procs * opt.threads));
	pthread_barrier_init(&diff_sh->start, &a, (unsigned)opt.procs);
	if (opt.families & (1u << DIFF_F_SHARE))
		diff_share_setup(opt.procs);
}

/* Waits for the workers; a crash or the timeout kills the rest. */
static bool wait_workers(pid_t *pids)
{
	time_t end = time(NULL) + opt.timeout_s;
	int left = opt.procs, status;
	bool ok = true;

	while (left > 0) {
		pid_t p = waitpid(-1, &status, WNOHANG);
		if (p > 0) {
			left--;
			if (WIFSIGNALED(status) || (WIFEXITED(status) &&
			    WEXITSTATUS(status) && !atomic_load(&diff_sh->failed))) {
				printf("FAIL: a worker died (status 0x%x)\n",
				       status);
				ok = false;
				for (int i = 0; i < opt.procs; i++)
					kill(pids[i], SIGKILL);
			}
			continue;
		}
		if (time(NULL) > end) {
			printf("FAIL: timeout after %d s\n", opt.timeout_s);
			for (int i = 0; i < opt.procs; i++)
				kill(pids[i], SIGKILL);
			ok = false;
			end = time(NULL) + 3600;
		}
		usleep(2000);
	}
	return ok;
}

static void report_failure(void)
{
	int last = diff_sh->fail_step;
	int first = last - opt.trace_steps + 1;

	printf("FAIL: seed %llu, step %d: %s\n", (unsigned long long)opt.seed,
	       last, diff_sh->fail_msg);
	printf("trace (steps %d-%d; replay: --seed %llu --steps %d --threads "
	       "%d --procs %d --tenants %d --overcommit %s --align %llu "
	       "--limit %llu --device-mem %llu --ops %s):\n",
	       first < 0 ? 0 : first, last, (unsigned long long)opt.seed,
	       opt.steps, opt.threads, opt.procs, opt.tenants, opt.overcommit,
	       (unsigned long long)opt.align, (unsigned long long)opt.limit,
	       (unsigned long long)opt.device_mem, opt.ops);
	diff_print_trace(first < 0 ? 0 : first, last);
}

int main(int argc, char **argv)
{
	pid_t pids[64];
	bool ok;

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv);
	make_dirs();
	map_shared();
	printf("diff: seed %llu, %d steps, %d threads x %d processes, %d "
	       "tenants, overcommit %s\n", (unsigned long long)opt.seed,
	       opt.steps, opt.threads, opt.procs, opt.tenants, opt.overcommit);
	for (int i = 0; i < opt.procs; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			/* A worker never outlives the run. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			exit(proc_main(i));
		}
	}
	ok = wait_workers(pids);
	if (ok && atomic_load(&diff_sh->skipped)) {
		printf("diff: seed %llu skipped: no family to run\n",
		       (unsigned long long)opt.seed);
		remove_dirs();
		return 77;
	}
	if (atomic_load(&diff_sh->failed)) {
		report_failure();
		ok = false;
	} else if (ok) {
		ok = diff_check_exited();
	}
	if (!ok && !atomic_load(&diff_sh->failed))
		diff_print_trace(-opt.trace_steps, -1);
	diff_ledger_close();
	remove_dirs();
	printf("diff: seed %llu %s\n", (unsigned long long)opt.seed,
	       ok ? "passed" : "FAILED");
	return ok ? 0 : 1;
}
