/* simtest.c - shared helpers of the simulator's Criterion suite. */
#include "simtest.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char state_dir[512];

const char *simtest_err(CUresult rc)
{
	const char *name = NULL;

	if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name)
		return "(unknown CUresult)";
	return name;
}

extern char **environ;

void simtest_clean_env(void)
{
	char name[256];
	int again = 1;

	/* The simulator honours it as the driver does (test_visible.c). */
	unsetenv("CUDA_VISIBLE_DEVICES");
	/* unsetenv changes environ: start over after each removal. */
	while (again) {
		again = 0;
		for (char **e = environ; *e; e++) {
			size_t n = strcspn(*e, "=");
			if (strncmp(*e, "VGPU_SIM_", 9) != 0 || n >= sizeof(name) ||
			    strncmp(*e, "VGPU_SIM_STATE_DIR=", 19) == 0)
				continue;
			memcpy(name, *e, n);
			name[n] = '\0';
			unsetenv(name);
			again = 1;
			break;
		}
	}
}

const char *simtest_env(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || tmp[0] != '/')
		tmp = "/tmp";
	snprintf(state_dir, sizeof(state_dir), "%s/vgpu-simtest-XXXXXX", tmp);
	cr_assert_not_null(mkdtemp(state_dir), "mkdtemp %s", state_dir);
	cr_assert_eq(setenv("VGPU_SIM_STATE_DIR", state_dir, 1), 0);
	setenv("VGPU_SIM_MEMORY", "64MiB", 0);
	setenv("VGPU_SIM_KERNEL_NS", "100000", 0);
	return state_dir;
}

void simtest_remove_state(void)
{
	char path[1024];
	struct dirent *de;
	DIR *d;

	if (!state_dir[0])
		return;
	d = opendir(state_dir);
	if (d) {
		while ((de = readdir(d)) != NULL) {
			if (strncmp(de->d_name, "dev", 3) != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", state_dir,
				 de->d_name);
			unlink(path);
		}
		closedir(d);
	}
	rmdir(state_dir);
	state_dir[0] = '\0';
}

static CUcontext init_primary(void)
{
	CUcontext ctx = NULL;

	CU_OK(cuInit(0));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	return ctx;
}

CUcontext simtest_init(void)
{
	CUcontext ctx;

	simtest_env();
	ctx = init_primary();
	simtest_remove_state();
	return ctx;
}

CUcontext simtest_init_shared(void)
{
	simtest_env();
	return init_primary();
}

/* ---- gates ----------------------------------------------------------------- */

struct simtest_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int open;
	int reached;
};

struct simtest_gate *simtest_gate_new(void)
{
	struct simtest_gate *g = calloc(1, sizeof(*g));

	cr_assert_not_null(g);
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	return g;
}

static void CUDA_CB gate_wait(void *arg)
{
	struct simtest_gate *g = arg;

	pthread_mutex_lock(&g->lock);
	g->reached = 1;
	pthread_cond_broadcast(&g->cond);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

void simtest_gate_queue(struct simtest_gate *g, CUstream s)
{
	CU_OK(cuLaunchHostFunc(s, gate_wait, g));
}

void simtest_gate_open(struct simtest_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = 1;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

int simtest_gate_reached(struct simtest_gate *g)
{
	int r;

	pthread_mutex_lock(&g->lock);
	r = g->reached;
	pthread_mutex_unlock(&g->lock);
	return r;
}

/* ---- ordered logs ---------------------------------------------------------- */

struct log_item {
	struct simtest_log *log;
	int value;
};

static void CUDA_CB log_append(void *arg)
{
	struct log_item *it = arg;
	int i = atomic_fetch_add(&it->log->n, 1);

	if (i < (int)(sizeof(it->log->entries) / sizeof(it->log->entries[0])))
		it->log->entries[i] = it->value;
	free(it);
}

void simtest_log_queue(struct simtest_log *log, CUstream s, int value)
{
	struct log_item *it = malloc(sizeof(*it));

	cr_assert_not_null(it);
	it->log = log;
	it->value = value;
	CU_OK(cuLaunchHostFunc(s, log_append, it));
}

int simtest_log_count(struct simtest_log *log)
{
	return atomic_load(&log->n);
}

/* ---- the own kernel -------------------------------------------------------- */

#ifdef SIMTEST_KERNELS
CUfunction simtest_own_kernel(void)
{
	CUmodule m;
	CUfunction f;

	CU_OK(cuModuleLoad(&m, SIMTEST_OWN_CUBIN));
	CU_OK(cuModuleGetFunction(&f, m, "user_scale"));
	return f;
}

void simtest_launch_own(CUfunction f, CUstream s)
{
	CUdeviceptr p = 0;
	float scale = 2.0f;
	int n = 0;
	void *params[] = { &p, &scale, &n };

	CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
}
#endif

/* ---- time ------------------------------------------------------------------ */

uint64_t simtest_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void simtest_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* ---- stderr capture -------------------------------------------------------- */

static int saved_stderr = -1;
static FILE *captured;

void simtest_stderr_begin(void)
{
	captured = tmpfile();
	cr_assert_not_null(captured);
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	cr_assert_geq(saved_stderr, 0);
	cr_assert_geq(dup2(fileno(captured), STDERR_FILENO), 0);
}

void simtest_stderr_end(char *buf, size_t len)
{
	size_t n;

	fflush(stderr);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	saved_stderr = -1;
	rewind(captured);
	n = fread(buf, 1, len - 1, captured);
	buf[n] = '\0';
	fclose(captured);
	captured = NULL;
}
