/* rsmi_probe.c - a ROCm SMI client for tests/hip/test_rsmi.c: prints each
 * device's VRAM total and usage, one line each:
 *   dev INDEX total BYTES used BYTES
 * Linked against librocm_smi64.so.1, or with "dlopen" as its argument
 * opening it (or the library named by a second argument) and looking the
 * functions up in its handle (as rocm-smi's ctypes does). Exit status: 0, or 1 with a message on a failed call.
 */
#include <dlfcn.h>
#include <rocm_smi/rocm_smi.h>
#include <stdio.h>
#include <string.h>

struct smi {
	rsmi_status_t (*init)(uint64_t);
	rsmi_status_t (*count)(uint32_t *);
	rsmi_status_t (*total)(uint32_t, rsmi_memory_type_t, uint64_t *);
	rsmi_status_t (*usage)(uint32_t, rsmi_memory_type_t, uint64_t *);
	rsmi_status_t (*shut_down)(void);
};

static int open_smi(struct smi *s, bool by_dlopen, const char *lib)
{
	void *h;

	if (!by_dlopen) {
		*s = (struct smi){ rsmi_init, rsmi_num_monitor_devices,
				   rsmi_dev_memory_total_get,
				   rsmi_dev_memory_usage_get, rsmi_shut_down };
		return 0;
	}
	h = dlopen(lib ? lib : "librocm_smi64.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "rsmi_probe: %s\n", dlerror());
		return 1;
	}
	*(void **)&s->init = dlsym(h, "rsmi_init");
	*(void **)&s->count = dlsym(h, "rsmi_num_monitor_devices");
	*(void **)&s->total = dlsym(h, "rsmi_dev_memory_total_get");
	*(void **)&s->usage = dlsym(h, "rsmi_dev_memory_usage_get");
	*(void **)&s->shut_down = dlsym(h, "rsmi_shut_down");
	return !s->init || !s->count || !s->total || !s->usage ||
	       !s->shut_down;
}

int main(int argc, char **argv)
{
	struct smi s;
	uint32_t n = 0;
	uint64_t total, used;

	if (open_smi(&s, argc > 1 && strcmp(argv[1], "dlopen") == 0,
		     argc > 2 ? argv[2] : NULL) ||
	    s.init(0) != RSMI_STATUS_SUCCESS ||
	    s.count(&n) != RSMI_STATUS_SUCCESS) {
		fprintf(stderr, "rsmi_probe: no ROCm SMI\n");
		return 1;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (s.total(i, RSMI_MEM_TYPE_VRAM, &total) !=
			    RSMI_STATUS_SUCCESS ||
		    s.usage(i, RSMI_MEM_TYPE_VRAM, &used) !=
			    RSMI_STATUS_SUCCESS) {
			fprintf(stderr, "rsmi_probe: device %u fails\n", i);
			return 1;
		}
		printf("dev %u total %llu used %llu\n", i,
		       (unsigned long long)total, (unsigned long long)used);
	}
	s.shut_down();
	return 0;
}
