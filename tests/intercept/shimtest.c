/* shimtest.c - helpers of the shim's preload suite. */
#include "shimtest.h"

#include <dlfcn.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char ledger_dir[512];

const char *shimtest_env(const char *tenant, const char *limit)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || tmp[0] != '/')
		tmp = "/tmp";
	snprintf(ledger_dir, sizeof(ledger_dir), "%s/vgpu-shimtest-XXXXXX",
		 tmp);
	cr_assert_not_null(mkdtemp(ledger_dir), "mkdtemp %s", ledger_dir);
	cr_assert_eq(setenv("VGPU_LEDGER_DIR", ledger_dir, 1), 0);
	if (tenant)
		cr_assert_eq(setenv("VGPU_TENANT", tenant, 1), 0);
	if (limit)
		cr_assert_eq(setenv("VGPU_MEMORY_LIMIT", limit, 1), 0);
	setenv("VGPU_CONTEXT_OVERHEAD", "0", 0);
	setenv("VGPU_SIM_MEMORY", "1GiB", 0);
	simtest_env();
	return ledger_dir;
}

const char *shimtest_ledger_dir(void)
{
	return ledger_dir;
}

static void remove_tree(const char *dir)
{
	char path[1024];
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			remove_tree(path);
		else
			unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

void shimtest_cleanup(void)
{
	if (ledger_dir[0])
		remove_tree(ledger_dir);
	ledger_dir[0] = '\0';
	simtest_remove_state();
}

bool shimtest_have(const char *name, int version)
{
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;

	return cuGetProcAddress(name, &fn, version, 0, &st) == CUDA_SUCCESS &&
	       fn != NULL && st == CU_GET_PROC_ADDRESS_SUCCESS;
}

void shimtest_need(const char *name, int version)
{
	if (!shimtest_have(name, version))
		cr_skip_test("the simulated driver has no %s (version %d) yet",
			     name, version);
}

void shimtest_uuid(CUdevice d, char *out, size_t len)
{
	CUuuid u;
	const unsigned char *b = (const unsigned char *)u.bytes;

	CU_OK(cuDeviceGetUuid_v2(&u, d));
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
		 b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
}

/* ---- the ledger ------------------------------------------------------------ */

static bool find_only_ledger(const char *dir, char *path, size_t len)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int found = 0;

	if (!d)
		return false;
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (de->d_name[0] == '.' || n < 10 ||
		    strcmp(de->d_name + n - 10, ".v3.ledger") != 0)
			continue;
		snprintf(path, len, "%s/%s", dir, de->d_name);
		found++;
	}
	closedir(d);
	return found == 1;
}

bool ledger_view_open(struct ledger_view *v, const char *dir,
		      const char *uuid)
{
	char path[1024];
	struct stat st;
	void *m;
	int fd;

	memset(v, 0, sizeof(*v));
	if (uuid)
		snprintf(path, sizeof(path), "%s/%s.v%d%s", dir, uuid,
			 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	else if (!find_only_ledger(dir, path, sizeof(path)))
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (fstat(fd, &st) != 0 || st.st_size != VGPU_LEDGER_FILE_SIZE) {
		close(fd);
		return false;
	}
	m = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return false;
	v->map = m;
	v->hdr = m;
	v->tenants = (const void *)((const char *)m +
				    VGPU_LEDGER_TENANTS_OFFSET);
	v->slots = (const void *)((const char *)m + VGPU_LEDGER_SLOTS_OFFSET);
	if (v->hdr->magic != VGPU_LEDGER_MAGIC ||
	    v->hdr->layout_version != VGPU_LEDGER_VERSION) {
		ledger_view_close(v);
		return false;
	}
	return true;
}

void ledger_view_must(struct ledger_view *v, const char *uuid)
{
	cr_assert(ledger_view_open(v, ledger_dir, uuid),
		  "no readable ledger%s%s in %s", uuid ? " of " : "",
		  uuid ? uuid : "", ledger_dir);
}

void ledger_view_close(struct ledger_view *v)
{
	if (v->map)
		munmap(v->map, VGPU_LEDGER_FILE_SIZE);
	memset(v, 0, sizeof(*v));
}

static uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static uint32_t ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static int tenant_index(const struct ledger_view *v, const char *name)
{
	for (int i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t = &v->tenants[i];
		if (ld32(&t->state) == VGPU_TENANT_ACTIVE &&
		    strncmp(t->name, name, sizeof(t->name)) == 0)
			return i;
	}
	return -1;
}

const struct vgpu_ledger_tenant *ledger_tenant(const struct ledger_view *v,
					       const char *name)
{
	int i = tenant_index(v, name);

	return i < 0 ? NULL : &v->tenants[i];
}

uint64_t ledger_tenant_bytes(const struct ledger_view *v, const char *name,
			     int kind)
{
	const struct vgpu_ledger_tenant *t = ledger_tenant(v, name);

	cr_assert_not_null(t, "no tenant '%s' in the ledger", name);
	return kind == VGPU_USAGE_COUNT ? ld64(&t->used) : ld64(&t->usage[kind]);
}

int ledger_active_slots(const struct ledger_view *v, const char *name)
{
	int ti = tenant_index(v, name), n = 0;

	for (int i = 0; ti >= 0 && i < VGPU_LEDGER_MAX_SLOTS; i++)
		if (ld32(&v->slots[i].state) == VGPU_SLOT_ACTIVE &&
		    ld32(&v->slots[i].tenant) == (uint32_t)ti)
			n++;
	return n;
}

uint64_t ledger_slots_bytes(const struct ledger_view *v, const char *name,
			    int kind)
{
	int ti = tenant_index(v, name);
	uint64_t sum = 0;

	for (int i = 0; ti >= 0 && i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s = &v->slots[i];
		if (ld32(&s->state) != VGPU_SLOT_ACTIVE ||
		    ld32(&s->tenant) != (uint32_t)ti)
			continue;
		for (int k = 0; k < VGPU_USAGE_COUNT; k++)
			if (k == kind || (kind == VGPU_USAGE_COUNT &&
					  VGPU_USAGE_IS_DEVICE(k)))
				sum += ld64(&s->usage[k]);
	}
	return sum;
}

const struct vgpu_ledger_slot *ledger_slot_of(const struct ledger_view *v,
					      const char *name, pid_t pid)
{
	int ti = tenant_index(v, name);

	for (int i = 0; ti >= 0 && i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s = &v->slots[i];
		if (ld32(&s->state) == VGPU_SLOT_ACTIVE &&
		    ld32(&s->tenant) == (uint32_t)ti &&
		    __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == pid)
			return s;
	}
	return NULL;
}

void ledger_assert_zero(const struct ledger_view *v, const char *name)
{
	cr_assert_eq(ledger_tenant_bytes(v, name, VGPU_USAGE_COUNT), 0,
		     "tenant %s still uses %llu bytes", name,
		     (unsigned long long)ledger_tenant_bytes(v, name,
							     VGPU_USAGE_COUNT));
	for (int k = 0; k < VGPU_USAGE_COUNT; k++) {
		cr_assert_eq(ledger_tenant_bytes(v, name, k), 0,
			     "tenant %s: kind %d holds %llu bytes", name, k,
			     (unsigned long long)ledger_tenant_bytes(v, name, k));
		cr_assert_eq(ledger_slots_bytes(v, name, k), 0,
			     "tenant %s's slots: kind %d holds %llu bytes",
			     name, k,
			     (unsigned long long)ledger_slots_bytes(v, name, k));
	}
}

/* ---- child processes ------------------------------------------------------- */

int shimtest_run_child(int (*fn)(void *), void *arg, char *out, size_t len)
{
	uint64_t deadline = simtest_now_ns() + 30ull * 1000000000ull;
	size_t got = 0;
	int fds[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[1]);
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc);
	}
	close(fds[1]);
	for (;;) {
		struct pollfd p = { fds[0], POLLIN, 0 };
		char tmp[512];
		uint64_t now = simtest_now_ns();
		ssize_t n;

		if (now >= deadline) {
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&p, 1, (int)((deadline - now) / 1000000) + 1) <= 0)
			continue;
		n = read(fds[0], tmp, sizeof(tmp));
		if (n <= 0)
			break;
		if (got + 1 < len) {
			size_t c = (size_t)n < len - 1 - got ? (size_t)n
							     : len - 1 - got;
			memcpy(out + got, tmp, c);
			got += c;
		}
	}
	out[got] = '\0';
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(simtest_now_ns() < deadline, "the child hung (killed after "
		  "30 s); its output: %s", out);
	return WIFEXITED(status) ? WEXITSTATUS(status)
				 : 128 + WTERMSIG(status);
}

/* The shim catches dlopen: a path ending in libcuda.so.* opens the shim
 * itself, and so does a plain dlopen of the simulator's path (the two
 * share the SONAME libcuda.so.1). libc's own dlopen, found through libc's
 * handle, with the exact path of the loaded file, is the simulator. */
uint64_t shimtest_device_used(void)
{
	static CUresult (*info)(size_t *, size_t *);
	size_t free = 0, total = 0;

	if (!info) {
		void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
		void *(*open_fn)(const char *, int);
		void *h;

		cr_assert_not_null(libc);
		open_fn = (void *(*)(const char *, int))dlsym(libc, "dlopen");
		cr_assert_not_null(open_fn);
		h = open_fn(SHIMTEST_SIM_LIBCUDA, RTLD_NOW | RTLD_NOLOAD);
		cr_assert_not_null(h, "the simulator is not loaded");
		info = (CUresult (*)(size_t *, size_t *))dlsym(h,
							       "cuMemGetInfo_v2");
		cr_assert_not_null(info);
		cr_assert_neq((void *)info, (void *)cuMemGetInfo_v2,
			      "the simulator's cuMemGetInfo is the shim's");
	}
	cr_assert_eq(info(&free, &total), CUDA_SUCCESS);
	return total - free;
}
