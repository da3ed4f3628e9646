/* init.c - the shim's start: options, cuInit, the dlopen catch, fork.
 *
 * The options are read on the first driver call, the real driver is
 * loaded on the first call that needs it; the order of the process's life
 * is lifetime.c's.
 */
#include "devices.h"
#include "shim.h"
#include "vgpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

/* Marks this library, so that it never loads itself as "the driver". */
VGPU_EXPORT const char vgpu_shim_version[] = VGPU_VERSION_STRING;

static struct vgpu_options opts;
static int bad_options;
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;

/* A bad option refuses the GPU, unless VGPU_ON_ERROR=warn or limits are
 * off altogether (VGPU_DISABLE): then it is only reported. */
static bool refuses(void)
{
	return opts.on_error == VGPU_ON_ERROR_REFUSE && !opts.disable;
}

static void load_options(void)
{
	char err[4096];

	bad_options = vgpu__options_load(&opts, vgpu__options_env, err,
					 sizeof(err));
	vgpu_log_set_level(opts.log_level);
	if (bad_options) {
		vgpu_log_text(err);
		if (refuses())
			vgpu_log(VGPU_LOG_ERROR,
				 "refusing the GPU: fix the variable%s above, "
				 "or set VGPU_ON_ERROR=warn to run with the "
				 "defaults in their place",
				 bad_options > 1 ? "s" : "");
		else
			vgpu_log(VGPU_LOG_WARN,
				 "%s: going on with the default%s in place "
				 "of the value%s above",
				 opts.disable ? "limits are off (VGPU_DISABLE)"
					      : "VGPU_ON_ERROR=warn",
				 bad_options > 1 ? "s" : "",
				 bad_options > 1 ? "s" : "");
	}
	if (opts.verbose)
		vgpu__options_dump(&opts, 2);
	vgpu__lifetime_started();
	/* After the core has its primitives: a hook that sees it set goes
	 * to the core. */
	for (unsigned d = 0; d < VGPU_MAX_DEVICES && !opts.disable &&
			     opts.compute_policy != VGPU_POLICY_OFF; d++)
		if (vgpu__options_compute_limit(&opts, d) < 100)
			vgpu__compute_on = true;
}

const struct vgpu_options *vgpu__options(void)
{
	pthread_once(&opts_once, load_options);
	return &opts;
}

bool vgpu__refused(void)
{
	vgpu__options();
	return bad_options && refuses();
}

bool vgpu__disabled(void)
{
	return vgpu__options()->disable;
}

CUresult cuInit(unsigned int Flags)
{
	if (vgpu__refused())
		return CUDA_ERROR_INVALID_VALUE;
	if (!vgpu__real_load() || !vgpu__real.cuInit)
		return CUDA_ERROR_NO_DEVICE;
	return vgpu__real.cuInit(Flags);
}

/* ---- the dlopen catch (the jump is in trampolines.S) ---- */

void *(*vgpu__real_dlopen)(const char *, int);

/* The names under which a program may open the driver: libcuda.so,
 * libcuda.so.1, libcuda.so.<driver version>, alone or after a directory. */
static bool is_driver_name(const char *name)
{
	const char *base = strrchr(name, '/');

	base = base ? base + 1 : name;
	return strncmp(base, "libcuda.so", 10) == 0 &&
	       (base[10] == '\0' || base[10] == '.');
}

static void resolve_dlopen(void)
{
	void *f = dlsym(RTLD_NEXT, "dlopen");

	__atomic_store_n(&vgpu__real_dlopen, (void *(*)(const char *, int))f,
			 __ATOMIC_RELEASE);
}


const char *vgpu__dlopen_name(const char *name)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, resolve_dlopen);
	if (name && is_driver_name(name) && strcmp(name, "libcuda.so.1") != 0)
		return "libcuda.so.1";
	return name;
}

void *vgpu__dlopen_real(const char *path, int flags)
{
	vgpu__dlopen_name(NULL);
	return vgpu__real_dlopen ? vgpu__real_dlopen(path, flags) : NULL;
}
