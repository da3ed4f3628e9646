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
#include <unistd.h>

/* Marks this library, so that it never loads itself as "the driver". */
VGPU_EXPORT const char vgpu_shim_version[] = VGPU_VERSION_STRING;

static struct vgpu_options opts;
static int bad_options;
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;

/* The core reads and reports them (vgpu/front.c); then the lifetime
 * starts and the hooks' flag is set. */
static void load_options(void)
{
	bad_options = vgpu_front_options_start(&opts);
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

/* Per-device variables that name a device the process does not have
 * (VGPU_MEMORY_LIMIT_1 with one GPU): known once the driver is up, so
 * checked by the first cuInit that succeeds, against the devices it
 * shows (after CUDA_VISIBLE_DEVICES, the index space of every option). */
static int absent_devices;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void check_devices(void)
{
	int count = 0, n;

	if (!vgpu__real.cuDeviceGetCount ||
	    vgpu__real.cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return;
	n = vgpu_front_check_devices(&opts, count > 0 ? (unsigned)count : 0);
	if (n)
		__atomic_store_n(&absent_devices, n, __ATOMIC_RELEASE);
}

bool vgpu__refused(void)
{
	vgpu__options();
	return (bad_options ||
		__atomic_load_n(&absent_devices, __ATOMIC_ACQUIRE)) &&
	       vgpu_front_refuses(&opts);
}

bool vgpu__refused_late(void)
{
	vgpu__options();
	return __atomic_load_n(&absent_devices, __ATOMIC_ACQUIRE) &&
	       vgpu_front_refuses(&opts);
}

bool vgpu__disabled(void)
{
	return vgpu__options()->disable;
}

CUresult cuInit(unsigned int Flags)
{
	CUresult r;

	if (vgpu__refused())
		return CUDA_ERROR_INVALID_VALUE;
	if (!vgpu__real_load() || !vgpu__real.cuInit)
		return CUDA_ERROR_NO_DEVICE;
	r = vgpu__real.cuInit(Flags);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_once(&devices_once, check_devices);
	if (vgpu__refused_late()) {
		/* The driver is up: what a refused cuInit leaves failing must
		 * fail now (forwarded calls; hooked ones see every device
		 * refused, devices.c). */
		vgpu__real_block();
		return CUDA_ERROR_INVALID_VALUE;
	}
	return r;
}

/* ---- the dlopen catch (the jump is in trampolines.S) ---- */

void *(*vgpu__real_dlopen)(const char *, int);

/* The names under which a program may open the driver: libcuda.so,
 * libcuda.so.1, libcuda.so.<driver version>, alone or after a directory.
 * Uninstrumented, with vgpu__dlopen_name (shim.h). */
VGPU_UNINSTRUMENTED static bool is_driver_name(const char *name)
{
	static const char want[] = "libcuda.so";
	const char *base = name;

	for (const char *p = name; *p; p++)
		if (*p == '/')
			base = p + 1;
	for (size_t i = 0; i < sizeof(want) - 1; i++)
		if (base[i] != want[i])
			return false;
	return base[10] == '\0' || base[10] == '.';
}

/* Whether name is "libcuda.so.1" exactly. */
VGPU_UNINSTRUMENTED static bool is_soname(const char *name)
{
	static const char want[] = "libcuda.so.1";

	for (size_t i = 0; i < sizeof(want); i++)
		if (name[i] != want[i])
			return false;
	return true;
}

/* Found without a once (dlopen may be called with the loader's lock held,
 * by a constructor, while another thread waits for that lock inside a
 * once): two threads that both find it unset store the same address. */
VGPU_UNINSTRUMENTED static void resolve_dlopen(void)
{
	void *f;

	if (__atomic_load_n(&vgpu__real_dlopen, __ATOMIC_ACQUIRE))
		return;
	f = dlsym(RTLD_NEXT, "dlopen");
	__atomic_store_n(&vgpu__real_dlopen, (void *(*)(const char *, int))f,
			 __ATOMIC_RELEASE);
}

VGPU_UNINSTRUMENTED const char *vgpu__dlopen_name(const char *name)
{
	resolve_dlopen();
	if (name && is_driver_name(name) && !is_soname(name))
		return "libcuda.so.1";
	return name;
}

void *vgpu__dlopen_real(const char *path, int flags)
{
	vgpu__dlopen_name(NULL);
	return vgpu__real_dlopen ? vgpu__real_dlopen(path, flags) : NULL;
}
