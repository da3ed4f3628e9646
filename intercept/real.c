/* real.c - finding and loading the real driver without finding the shim.
 *
 * libvgpu.so answers to the name libcuda.so.1, so the real driver is opened
 * by absolute path: VGPU_REAL_LIBCUDA when set, else the first libcuda.so.1
 * that is not this library, looked for in LD_LIBRARY_PATH, the loader cache
 * (/etc/ld.so.cache) and the usual driver directories. It is loaded on the
 * first call that needs it, never in a process that does not use CUDA.
 */
#include "hooks.h"
#include "shim.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char loaded_path[VGPU_PATH_MAX];
static struct stat self_st;
static bool have_self;

static CUresult fwd_missing(void)
{
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult fwd_no_driver(void)
{
	return CUDA_ERROR_NOT_INITIALIZED;
}

/* ---- with no driver ------------------------------------------------------------ */

/* What a driver answers before cuInit, answered here when there is no
 * driver to ask: a client formatting cuInit's CUDA_ERROR_NO_DEVICE got
 * CUDA_ERROR_NOT_INITIALIZED and no name, and cuda-core said "function
 * cuGetErrorName is not found" (a hostile review). The string is the
 * name: the driver's own sentences are not in the header. */
static CUresult no_driver_error_name(CUresult error, const char **str)
{
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < vgpu__errname_count; i++)
		if (vgpu__errnames[i].value == (int)error) {
			*str = vgpu__errnames[i].name;
			return CUDA_SUCCESS;
		}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/* No driver installed: version 0, as the runtime's cudaDriverGetVersion
 * documents it. */
static CUresult no_driver_version(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 0;
	return CUDA_SUCCESS;
}

static const struct {
	const char *name;
	void *fn;
} no_driver_answers[] = {
	{ "cuDriverGetVersion", (void *)no_driver_version },
	{ "cuGetErrorName", (void *)no_driver_error_name },
	{ "cuGetErrorString", (void *)no_driver_error_name },
};

static void *no_driver_answer(const char *symbol)
{
	for (size_t i = 0; i < sizeof(no_driver_answers) /
			       sizeof(no_driver_answers[0]); i++)
		if (strcmp(symbol, no_driver_answers[i].name) == 0)
			return no_driver_answers[i].fn;
	return NULL;
}

static bool fwd_known(const char *symbol)
{
	size_t lo = 0, hi = vgpu__fwd_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(vgpu__fwd_names[mid], symbol);

		if (c == 0)
			return true;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* cuGetProcAddress names functions by their base name: "cuMemAlloc",
 * never "cuMemAlloc_v2" or a per-thread "_ptsz"/"_ptds" export, which a
 * driver does not find. */
static bool base_name(const char *symbol)
{
	size_t n = strlen(symbol);
	const char *u = strrchr(symbol, '_');

	if (!u)
		return true;
	if (!strcmp(u, "_ptsz") || !strcmp(u, "_ptds"))
		return false;
	if (u[1] != 'v' || !u[2])
		return true;
	return strspn(u + 2, "0123456789") != n - (size_t)(u + 2 - symbol);
}

void *vgpu__no_driver_fn(const char *symbol)
{
	char v[128];
	void *fn = no_driver_answer(symbol);

	if (fn)
		return fn;
	if (!base_name(symbol))
		return NULL;
	if (fwd_known(symbol))
		return (void *)fwd_no_driver;
	/* cuGetProcAddress asks by the base name; the driver may export
	 * only later ABIs of it. */
	for (int k = 2; k <= 4; k++) {
		snprintf(v, sizeof(v), "%s_v%d", symbol, k);
		if (fwd_known(v))
			return (void *)fwd_no_driver;
	}
	return NULL;
}

const char *vgpu__real_path(void)
{
	return loaded_path;
}

static bool is_self(const char *path)
{
	struct stat st;

	return have_self && stat(path, &st) == 0 && st.st_dev == self_st.st_dev &&
	       st.st_ino == self_st.st_ino;
}

/* dlopen()s path if it is a driver and not this library. */
static void *try_path(const char *path)
{
	void *h;

	if (!path[0] || is_self(path) || access(path, R_OK) != 0)
		return NULL;
	h = vgpu__dlopen_real(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		vgpu_log(VGPU_LOG_DEBUG, "cannot load %s: %s", path, dlerror());
		return NULL;
	}
	/* A copy of the shim under another name is not a driver. */
	if (dlsym(h, "vgpu_shim_version") || !dlsym(h, "cuInit")) {
		dlclose(h);
		return NULL;
	}
	snprintf(loaded_path, sizeof(loaded_path), "%s", path);
	return h;
}

/* The file name searched for: libcuda.so.1, or VGPU_REAL_LIBCUDA's bare
 * name. */
static const char *wanted = "libcuda.so.1";

static void *try_dir(const char *dir, size_t len)
{
	char path[VGPU_PATH_MAX];

	if (len == 0 || len + strlen(wanted) + 2 > sizeof(path))
		return NULL;
	snprintf(path, sizeof(path), "%.*s/%s", (int)len, dir, wanted);
	return try_path(path);
}

/*
 * The loader cache, format "glibc-ld.so.cache1.1": a header of 48 bytes
 * (magic, nlibs, string table length, flags, extension offset), then nlibs
 * entries of 24 bytes (flags, key, value, osversion, hwcap) whose key and
 * value are offsets of strings from the start of the file.
 */
#define CACHE_MAGIC "glibc-ld.so.cache1.1"

static void *try_cache(void)
{
	struct stat st;
	const char *base;
	void *h = NULL;
	uint32_t nlibs;
	int fd;

	fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || st.st_size < 48 || st.st_size > (1 << 26)) {
		close(fd);
		return NULL;
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return NULL;
	/* The new format may follow an old-format block; find its magic. */
	const char *hdr = memmem(base, (size_t)st.st_size, CACHE_MAGIC,
				 strlen(CACHE_MAGIC));
	if (!hdr || (size_t)(hdr - base) + 48 > (size_t)st.st_size)
		goto out;
	memcpy(&nlibs, hdr + 20, sizeof(nlibs));
	size_t end = (size_t)(hdr - base) + 48 + (size_t)nlibs * 24;
	if (nlibs > (1u << 20) || end > (size_t)st.st_size)
		goto out;
	for (uint32_t i = 0; i < nlibs && !h; i++) {
		const char *e = hdr + 48 + (size_t)i * 24;
		uint32_t key, value;

		memcpy(&key, e + 4, 4);
		memcpy(&value, e + 8, 4);
		/* Offsets count from the new header in this format. */
		if ((size_t)(hdr - base) + key >= (size_t)st.st_size ||
		    (size_t)(hdr - base) + value >= (size_t)st.st_size)
			continue;
		const char *k = hdr + key, *v = hdr + value;
		size_t room = (size_t)st.st_size - (size_t)(v - base);
		if (strcmp(k, wanted) == 0 &&
		    strnlen(v, room) < room)
			h = try_path(v);
	}
out:
	munmap((void *)base, (size_t)st.st_size);
	return h;
}

static void *find_driver(const char *forced)
{
	static const char *const dirs[] = {
		"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/lib/wsl/lib",
	};
	const char *p;
	void *h;

	if (forced[0] && !strchr(forced, '/')) {
		wanted = forced;	/* a bare name: searched for below */
	} else if (forced[0]) {
		h = try_path(forced);
		if (!h)
			vgpu_log(VGPU_LOG_ERROR,
				 "VGPU_REAL_LIBCUDA=%s: cannot load a CUDA "
				 "driver from it (%s)", forced,
				 is_self(forced) ? "it is libvgpu itself"
						 : "missing or not a driver");
		return h;
	}
	p = getenv("LD_LIBRARY_PATH");
	while (p && *p) {
		size_t n = strcspn(p, ":;");
		if ((h = try_dir(p, n)))
			return h;
		p += n + (p[n] ? 1 : 0);
	}
	if ((h = try_cache()))
		return h;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if ((h = try_dir(dirs[i], strlen(dirs[i]))))
			return h;
	vgpu_log(VGPU_LOG_ERROR, "no CUDA driver (%s) found in "
		 "LD_LIBRARY_PATH, /etc/ld.so.cache or the usual directories; "
		 "set VGPU_REAL_LIBCUDA to its path", wanted);
	return NULL;
}

static void load(void)
{
	const struct vgpu_options *o = vgpu__options();
	Dl_info self;
	void *h;

	if (dladdr((void *)vgpu__real_load, &self) && self.dli_fname &&
	    stat(self.dli_fname, &self_st) == 0)
		have_self = true;
	h = find_driver(o->real_libcuda);
	for (size_t i = 0; i < vgpu__fwd_count; i++) {
		void *f = h ? dlsym(h, vgpu__fwd_names[i])
			    : no_driver_answer(vgpu__fwd_names[i]);
		if (!f)
			f = h ? (void *)fwd_missing : (void *)fwd_no_driver;
		__atomic_store_n(&vgpu__fwd_table[i], f, __ATOMIC_RELEASE);
	}
	/* With no driver every hook's driver function answers
	 * CUDA_ERROR_NOT_INITIALIZED: the hooks' fast paths call it without
	 * a test (an uncapped launch), and cuGetProcAddress hands the hooks
	 * out (procaddr.c): a launch there jumped to address 0 (a hostile
	 * review). */
	for (size_t i = 0; i < vgpu__hook_count; i++)
		*vgpu__hook_entries[i].real =
			h ? dlsym(h, vgpu__hook_entries[i].symbol)
			  : (void *)fwd_no_driver;
	for (size_t i = 0; i < vgpu__call_count; i++)
		*vgpu__call_entries[i].real =
			h ? dlsym(h, vgpu__call_entries[i].symbol) : NULL;
	if (h)
		vgpu_log(VGPU_LOG_INFO, "real driver: %s", loaded_path);
	loaded = h != NULL;
}

void vgpu__real_block(void)
{
	for (size_t i = 0; i < vgpu__fwd_count; i++) {
		void *f = no_driver_answer(vgpu__fwd_names[i]);

		__atomic_store_n(&vgpu__fwd_table[i],
				 f ? f : (void *)fwd_no_driver,
				 __ATOMIC_RELEASE);
	}
}

bool vgpu__real_load(void)
{
	pthread_once(&load_once, load);
	return loaded;
}
