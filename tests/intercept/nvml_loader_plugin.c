/* nvml_loader_plugin.c - a library whose constructor, run with the
 * loader's lock held, starts a thread that makes the process's first call
 * of a hooked NVML function (so the shim loads NVML: a dlopen that waits
 * for this lock), waits until that thread is surely blocked, then looks an
 * NVML function up with dlsym in NVML's handle (the shim's dlsym catch).
 * A catch that waited for the load would hang here for good
 * (nvml_loader_lock.c runs it under an alarm).
 */
#include "vgpu_nvml_types.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_t *);

/* Read by the test after dlopen returns. */
__attribute__((visibility("default"))) int plugin_looked_up;
__attribute__((visibility("default"))) int plugin_call_returned;
static pthread_t worker;
static int started;
static mem_fn hook;

/* No device: NVML is not even initialised. What it answers does not
 * matter, only that the call comes back. */
static void *first_call(void *arg)
{
	nvmlMemory_t m;

	(void)arg;
	(void)hook(NULL, &m);
	__atomic_store_n(&plugin_call_returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

__attribute__((visibility("default"))) void plugin_join(void)
{
	if (started)
		pthread_join(worker, NULL);
}

__attribute__((constructor)) static void plugin_init(void)
{
	struct timespec pause = { 0, 200 * 1000 * 1000 };
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);

	/* Nothing here looks a name up in NVML's handle before the worker
	 * has started: the first such lookup is the one under test. */
	if (!nvml)
		return;
	/* The shim's export, in front of NVML's in the global scope. */
	hook = (mem_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo");
	if (!hook)
		return;
	started = pthread_create(&worker, NULL, first_call, NULL) == 0;
	nanosleep(&pause, NULL);
	plugin_looked_up = dlsym(nvml, "nvmlDeviceGetMemoryInfo") != NULL;
	dlclose(nvml);
}
