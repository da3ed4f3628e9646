/* nvml_loader_lock.c - the shim's NVML never hangs a program that looks
 * NVML up from a library constructor while another thread makes its first
 * NVML call (nvml_loader_plugin.c sets that up while this program
 * dlopen()s it). The shim once loaded NVML under a pthread_once that the
 * dlsym catch also waited on: the constructor (holding the loader's lock)
 * waited for the once, the once's thread for the loader's lock. Run under
 * LD_PRELOAD=libvgpu.so with the simulated NVML; an alarm turns a hang
 * into a failure. Exits 0 when the lookup found the hook and the first
 * call came back.
 */
#include "vgpu_nvml_types.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char dir[] = "/tmp/vgpu-nvml-loader.XXXXXX", sub[64];
	void (*join)(void);
	int *looked_up, *returned;
	void *nvml, *plugin;

	if (argc != 2 || !mkdtemp(dir))
		return 2;
	snprintf(sub, sizeof(sub), "%s/ledger", dir);
	setenv("VGPU_LEDGER_DIR", sub, 1);
	setenv("VGPU_SIM_STATE_DIR", dir, 1);
	setenv("VGPU_MEMORY_LIMIT", "512MiB", 1);
	alarm(20);
	/* Loaded, but nothing looked up in it: the shim has not loaded
	 * it for itself yet. */
	nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!nvml) {
		printf("FAIL: the simulated NVML: %s\n", dlerror());
		return 1;
	}
	plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!plugin) {
		printf("FAIL: %s\n", dlerror());
		return 1;
	}
	join = (void (*)(void))dlsym(plugin, "plugin_join");
	looked_up = dlsym(plugin, "plugin_looked_up");
	returned = dlsym(plugin, "plugin_call_returned");
	if (!join || !looked_up || !returned) {
		printf("FAIL: the plugin's symbols\n");
		return 1;
	}
	join();
	printf("%s: dlsym in a constructor during the first NVML call: %s\n",
	       *looked_up ? "PASS" : "FAIL",
	       *looked_up ? "the hook" : "nothing");
	printf("%s: the first NVML call %s\n", *returned ? "PASS" : "FAIL",
	       *returned ? "came back" : "did not come back");
	return *looked_up && *returned ? 0 : 1;
}
