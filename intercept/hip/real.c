/* real.c - libvgpu-hip.so's start and life: the options read on the first
 * hook, the real runtime's functions found, the fork handler, the exit of
 * threads and of the process.
 *
 * The order of the process's life, as intercept/lifetime.c has it for
 * CUDA: nothing runs at load; the first hook reads the options (the core
 * reports them, vgpu/front.c), hands the core the primitives, finds the
 * real functions and arms the fork handler; each device joins its ledger
 * on first use (devices.c); a thread's first measured launch arms its exit
 * handler; in a forked child the tables, the launch state and then the
 * devices are forgotten (the parent's); at exit the exiting thread's
 * launches are settled and every ledger is left.
 */
#include "hip.h"
#include "share.h"
#include "vmm.h"
#include "pool.h"
#include "track.h"
#include "vgpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

/* Marks this library. */
__attribute__((visibility("default")))
const char vgpu_hip_shim_version[] = VGPU_VERSION_STRING;

struct vgpu_hip_real vgpu__hip;

static struct vgpu_options opts;
static int bad_options;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static bool exit_key_ok, started;
static __thread bool tls_watched;

static const struct {
	const char *name, *node;
	size_t offset;
} rows[] = {
#define VGPU_HIP_HOOK_CXX(node, name, symbol, params) \
	{ #symbol, #node, offsetof(struct vgpu_hip_real, name) },
#define VGPU_HIP_HOOK(node, name, params) \
	VGPU_HIP_HOOK_CXX(node, name, name, params)
#define VGPU_HIP_CALL VGPU_HIP_HOOK
#include "hooks.def"
#undef VGPU_HIP_HOOK
#undef VGPU_HIP_HOOK_CXX
#undef VGPU_HIP_CALL
};

/* The versioned symbol after this library first; then the runtime's
 * default version; then the runtime opened by a library loaded privately
 * (RTLD_LOCAL), if it is loaded at all. */
static void load_real(void)
{
	void *rt = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_NOLOAD);

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		void *f = dlvsym(RTLD_NEXT, rows[i].name, rows[i].node);

		if (!f)
			f = dlsym(RTLD_NEXT, rows[i].name);
		if (!f && rt)
			f = dlsym(rt, rows[i].name);
		*(void **)((char *)&vgpu__hip + rows[i].offset) = f;
	}
	if (!vgpu__hip.hipMalloc)
		vgpu_log(VGPU_LOG_ERROR, "libvgpu-hip.so: the HIP runtime "
			 "(libamdhip64.so.5) is not loaded after it");
}

static void thread_exit(void *arg)
{
	(void)arg;
	vgpu__hip_launch_thread_exit();
}

static void child_after_fork(void)
{
	vgpu__track_forget();
	vgpu__vmm_fork_child();
	vgpu__share_fork_child();
	vgpu_pools_fork_child();
	vgpu__hip_launch_fork_child();
	vgpu__hip_dev_fork_child();
	tls_watched = false;
}

static void start(void)
{
	bad_options = vgpu_front_options_start(&opts);
	vgpu_account_use(&vgpu__hip_prim);
	vgpu_pools_use(&vgpu__hip_pool_ops);
	vgpu_measure_use(&vgpu__hip_prim);
	load_real();
	exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0;
	pthread_atfork(NULL, NULL, child_after_fork);
	for (unsigned d = 0; d < VGPU_MAX_DEVICES && !opts.disable &&
			     opts.compute_policy != VGPU_POLICY_OFF; d++)
		if (vgpu__options_compute_limit(&opts, d) < 100)
			__atomic_store_n(&vgpu__compute_on, true,
					 __ATOMIC_RELEASE);
	__atomic_store_n(&started, true, __ATOMIC_RELEASE);
}

void vgpu__hip_start(void)
{
	pthread_once(&start_once, start);
}

const struct vgpu_options *vgpu__hip_options(void)
{
	vgpu__hip_start();
	return &opts;
}

bool vgpu__hip_refused(void)
{
	vgpu__hip_start();
	return bad_options && vgpu_front_refuses(&opts);
}

void vgpu__hip_watch_thread(void)
{
	if (tls_watched || !exit_key_ok)
		return;
	tls_watched = true;
	pthread_setspecific(exit_key, &tls_watched);
}

/* The watch on a probe stopped (a pass that does not end in time leaves
 * the ledgers as a killed process does), the exiting thread's launches,
 * then every ledger left. */
__attribute__((destructor)) static void process_exit(void)
{
	if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
		return;
	vgpu__bus_open_slow();	/* as libvgpu.so's (lifetime.c) */
	if (!vgpu_measure_watch_stop())
		return;
	vgpu__hip_launch_process_exit();
	vgpu__hip_dev_leave_all();
}
