/* replay.c - the CUDA runtime's path into the driver, replayed.
 *
 * libcudart reaches the driver with dlopen("libcuda.so.1"),
 * dlsym(handle, "cuGetProcAddress_v2") and the function that returns; every
 * other entry point, cuInit included, comes through that function. This
 * program makes the same calls for every request recorded from the CUDA 13
 * runtime (../shared/data/cudart13-getprocaddress-requests.tsv) and checks
 * each answer against two independent lists: the simulated driver's own
 * table (sim/entries.def: what exists, at which version, under which
 * symbol) and the shim's hooks (intercept/hooks.def):
 *   - a request the driver cannot answer gets CUDA_ERROR_NOT_FOUND;
 *   - a hooked function comes back as the shim's hook of exactly the ABI
 *     the driver would have handed out (the same symbol name, in libvgpu);
 *   - anything else is the driver's own function, untouched.
 *
 * usage: replay REQUESTS.tsv   (under LD_PRELOAD=libvgpu.so, with
 *        VGPU_REAL_LIBCUDA pointing at the simulated driver)
 */

#include <cuda.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct drv_entry {
	const char *name;
	int version;
	const char *symbol;
	int per_thread;
};

static const struct drv_entry driver[] = {
#define VSIM_ENTRY(name, version, symbol, per_thread) \
	{ #name, version, #symbol, per_thread },
#include "entries.def"
#undef VSIM_ENTRY
};

static const char *const hooked[] = {
#define VGPU_HOOK(name, version, symbol, per_thread, ret, params) #symbol,
#include "hooks.def"
#undef VGPU_HOOK
};

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *);

/* The symbol the driver hands out for (name, version, flags), or NULL. */
static const char *expected_symbol(const char *name, int version,
				   unsigned long long flags)
{
	const struct drv_entry *best = NULL;

	for (int pass = 0; pass < 2 && !best; pass++) {
		int want_pt = pass == 0 ? 1 : 0;
		if (pass == 0 &&
		    !(flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
			continue;
		for (size_t i = 0; i < sizeof(driver) / sizeof(driver[0]); i++)
			if (strcmp(driver[i].name, name) == 0 &&
			    driver[i].per_thread == want_pt &&
			    driver[i].version <= version &&
			    (!best || driver[i].version > best->version))
				best = &driver[i];
	}
	return best ? best->symbol : NULL;
}

static bool is_hooked(const char *symbol)
{
	for (size_t i = 0; i < sizeof(hooked) / sizeof(hooked[0]); i++)
		if (strcmp(hooked[i], symbol) == 0)
			return true;
	return false;
}

static bool same_file(const char *a, const char *b)
{
	char ra[4096], rb[4096];

	return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int main(int argc, char **argv)
{
	const char *real = getenv("VGPU_REAL_LIBCUDA");
	char line[512], shim[4096];
	unsigned n = 0, hooks = 0, own = 0, missing = 0, bad = 0;
	Dl_info di;
	FILE *f;
	void *h;
	gpa_fn gpa;

	if (argc != 2 || !real) {
		fprintf(stderr, "usage: VGPU_REAL_LIBCUDA=... replay FILE\n");
		return 2;
	}
	h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h || !dlsym(h, "vgpu_shim_version")) {
		fprintf(stderr, "replay: dlopen(libcuda.so.1) is not the shim "
			"(%s)\n", h ? "no vgpu_shim_version" : dlerror());
		return 1;
	}
	gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
	if (!gpa || !dladdr((void *)gpa, &di) ||
	    strcmp(di.dli_sname, "cuGetProcAddress_v2") != 0) {
		fprintf(stderr, "replay: no cuGetProcAddress_v2 in the shim\n");
		return 1;
	}
	snprintf(shim, sizeof(shim), "%s", di.dli_fname);
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		char name[256] = "";
		int version;
		unsigned long long flags;
		CUdriverProcAddressQueryResult st;
		void *p = (void *)1;
		const char *want;
		CUresult r;

		if (line[0] == '#')
			continue;
		if (sscanf(line, "%255[^\t]\t%d\t%llu", name, &version,
			   &flags) != 3 &&
		    sscanf(line, "\t%d\t%llu", &version, &flags) != 2)
			continue;
		n++;
		want = expected_symbol(name, version, flags);
		r = gpa(name, &p, version, flags, &st);
		if (!want) {
			if (r != CUDA_ERROR_NOT_FOUND || p != NULL ||
			    st == CU_GET_PROC_ADDRESS_SUCCESS) {
				printf("MISMATCH %s@%d/%llu: expected NOT_FOUND, "
				       "got %d %p\n", name, version, flags, r, p);
				bad++;
			}
			missing++;
			continue;
		}
		if (r != CUDA_SUCCESS || !p || st != CU_GET_PROC_ADDRESS_SUCCESS ||
		    !dladdr(p, &di) || !di.dli_sname) {
			printf("MISMATCH %s@%d/%llu: expected %s, got %d %p\n",
			       name, version, flags, want, r, p);
			bad++;
			continue;
		}
		bool hook = is_hooked(want);
		const char *from = hook ? shim : real;
		if (strcmp(di.dli_sname, want) != 0 ||
		    !same_file(di.dli_fname, from)) {
			printf("MISMATCH %s@%d/%llu: expected %s from %s, got %s "
			       "from %s\n", name, version, flags, want, from,
			       di.dli_sname, di.dli_fname);
			bad++;
			continue;
		}
		hook ? hooks++ : own++;
	}
	fclose(f);
	printf("replayed %u requests: %u hooks, %u driver functions, %u not "
	       "found, %u mismatches\n", n, hooks, own, missing, bad);
	return bad || n < 400 ? 1 : 0;
}
