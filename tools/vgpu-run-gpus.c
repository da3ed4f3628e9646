/* vgpu-run-gpus.c - what --gpu needs to know: the GPUs, from the CUDA
 * driver and the HIP runtime, and what is reserved on each, from the
 * ledger.
 *
 * The driver is asked in a child process (vgpu-run --probe-gpus), and the
 * HIP runtime in another (--probe-hip-gpus, vgpu-run-hip-gpus.c), so that
 * the process that execs the command has never loaded either. The ledger is
 * read through include/vgpu.h, never written, and believed only when the
 * job would trust it (vgpu_ledger_trusted).
 */
#include "vgpu-run.h"
#include "ledger.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the probe child ---------------------------------------------------- */

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*count_fn)(int *);
typedef CUresult (*get_fn)(CUdevice *, int);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*total_fn)(size_t *, CUdevice);
typedef CUresult (*errname_fn)(CUresult, const char **);

struct driver {
	init_fn init;
	count_fn count;
	get_fn get;
	uuid_fn uuid;
	total_fn total;
	errname_fn errname;
};

static int probe_fail(const char *what, const struct driver *d, CUresult rc)
{
	const char *name = NULL;

	if (d->errname)
		d->errname(rc, &name);
	printf(PROBE_ERROR "%s failed: %s (%d)\n", what, name ? name : "unknown",
	       (int)rc);
	return 1;
}

static bool load_driver(const char *path, struct driver *d)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		printf(PROBE_ERROR "cannot load the CUDA driver %s: %s\n", path,
		       dlerror());
		return false;
	}
	d->init = (init_fn)dlsym(h, "cuInit");
	d->count = (count_fn)dlsym(h, "cuDeviceGetCount");
	d->get = (get_fn)dlsym(h, "cuDeviceGet");
	d->uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid_v2");
	if (!d->uuid)
		d->uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid");
	d->total = (total_fn)dlsym(h, "cuDeviceTotalMem_v2");
	d->errname = (errname_fn)dlsym(h, "cuGetErrorName");
	if (!d->init || !d->count || !d->get || !d->uuid || !d->total) {
		printf(PROBE_ERROR "%s is not a CUDA driver (cuInit, cuDeviceGetCount,"
		       " cuDeviceGetUuid or cuDeviceTotalMem_v2 missing)\n",
		       path);
		return false;
	}
	return true;
}

int vrun_probe_main(const char *path)
{
	struct driver d = { 0 };
	CUresult rc;
	int n = 0;

	if (!load_driver(path, &d))
		return 1;
	rc = d.init(0);
	if (rc == CUDA_ERROR_NO_DEVICE)
		return 0;
	if (rc != CUDA_SUCCESS)
		return probe_fail("cuInit", &d, rc);
	if ((rc = d.count(&n)) != CUDA_SUCCESS)
		return probe_fail("cuDeviceGetCount", &d, rc);
	for (int i = 0; i < n && i < VRUN_MAX_GPUS; i++) {
		const unsigned char *b;
		CUdevice dev;
		CUuuid u;
		size_t total;

		if ((rc = d.get(&dev, i)) != CUDA_SUCCESS)
			return probe_fail("cuDeviceGet", &d, rc);
		if ((rc = d.uuid(&u, dev)) != CUDA_SUCCESS)
			return probe_fail("cuDeviceGetUuid", &d, rc);
		if ((rc = d.total(&total, dev)) != CUDA_SUCCESS)
			return probe_fail("cuDeviceTotalMem", &d, rc);
		b = (const unsigned char *)u.bytes;
		printf(PROBE_GPU "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		       "%02x%02x%02x%02x%02x%02x %zu\n", b[0], b[1], b[2], b[3],
		       b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		       b[13], b[14], b[15], total);
	}
	return 0;
}

/* ---- the parent: start the probe, read its lines ------------------------ */

static void probe_child(int wfd, const char *self, char **argv)
{
	if (dup2(wfd, STDOUT_FILENO) < 0)
		_exit(127);
	/* A libvgpu preloaded by /etc/ld.so.preload passes calls through. */
	setenv("VGPU_DISABLE", "1", 1);
	unsetenv("LD_PRELOAD");
	execv(self, argv);
	printf(PROBE_ERROR "cannot run %s %s: %s\n", self, argv[1], strerror(errno));
	fflush(stdout);
	_exit(127);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)(t.tv_sec - t0->tv_sec) * 1000 +
	       (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Reads the probe's output until it ends, the probe has exited (a process
 * it left behind may hold the pipe open) or VRUN_PROBE_TIMEOUT_MS passed
 * (then the probe is killed). Returns whether the probe is reaped. */
static bool read_probe(int fd, pid_t pid, char *buf, size_t len,
		       int *status)
{
	struct timespec t0;
	size_t got = 0;
	bool reaped = false, ended = false;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!ended && ms_since(&t0) <= VRUN_PROBE_TIMEOUT_MS) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ready = poll(&p, 1, 100);
		ssize_t r;

		if (ready > 0) {
			r = got + 1 < len ? read(fd, buf + got, len - 1 - got)
					  : 0;
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				ended = true;	/* the end, an error, full */
			else
				got += (size_t)r;
			continue;
		}
		if (reaped)
			break;	/* exited, and nothing more came in 100 ms */
		reaped = waitpid(pid, status, WNOHANG) == pid;
	}
	while (!reaped && ms_since(&t0) <= VRUN_PROBE_TIMEOUT_MS) {
		reaped = waitpid(pid, status, WNOHANG) == pid;
		if (!reaped)
			poll(NULL, 0, 5);
	}
	buf[got] = '\0';
	return reaped;
}

static int parse_lines(char *out, struct vrun_gpu *gpus, size_t max,
		       char *err, size_t errlen)
{
	size_t n = 0;

	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char uuid[VGPU_LEDGER_UUID_MAX];
		uint64_t total;

		/* Only the probe's own lines: the driver or runtime it loads
		 * may write to the same output. */
		if (strncmp(line, PROBE_ERROR, strlen(PROBE_ERROR)) == 0) {
			snprintf(err, errlen, "%s", line + strlen(PROBE_ERROR));
			return -VRUN_EXIT_DRIVER;
		}
		if (strncmp(line, PROBE_GPU, strlen(PROBE_GPU)) != 0 ||
		    n == max || sscanf(line + strlen(PROBE_GPU), "%63s %" SCNu64,
				       uuid, &total) != 2 ||
		    (strncasecmp(uuid, "GPU-", 4) != 0 &&
		     strncasecmp(uuid, "PCI-", 4) != 0))
			continue;
		memset(&gpus[n], 0, sizeof(gpus[n]));
		gpus[n].index = (unsigned)n;
		snprintf(gpus[n].uuid, sizeof(gpus[n].uuid), "%s", uuid);
		gpus[n].total = total;
		n++;
	}
	return (int)n;
}

/* Runs `self argv[1] argv[2]...` and reads its GPUs, ordinals in order;
 * `what` names what it asks in a failure. */
static int run_probe(const char *self, char **argv, const char *what,
		     struct vrun_gpu *gpus, size_t max, char *err,
		     size_t errlen)
{
	static char out[VRUN_MAX_GPUS * 96 + 4096];
	int fds[2], status;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -VRUN_EXIT_DRIVER;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -VRUN_EXIT_DRIVER;
	}
	if (pid == 0)
		probe_child(fds[1], self, argv);
	close(fds[1]);
	if (!read_probe(fds[0], pid, out, sizeof(out), &status)) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		close(fds[0]);
		snprintf(err, errlen, "listing the GPUs through %s failed: "
			 "no answer in %d s (the probe was killed)", what,
			 VRUN_PROBE_TIMEOUT_MS / 1000);
		return -VRUN_EXIT_DRIVER;
	}
	close(fds[0]);
	int n = parse_lines(out, gpus, max, err, errlen);
	if (n >= 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		snprintf(err, errlen, "listing the GPUs through %s failed "
			 "(the probe %s %d)", what,
			 WIFSIGNALED(status) ? "was killed by signal"
					     : "exited with",
			 WIFSIGNALED(status) ? WTERMSIG(status)
					     : WEXITSTATUS(status));
		return -VRUN_EXIT_DRIVER;
	}
	return n;
}

int vrun_list_gpus(const char *self, const char *driver,
		   struct vrun_gpu *gpus, size_t max, char *err, size_t errlen)
{
	char *argv[] = { "vgpu-run", "--probe-gpus", (char *)driver, NULL };
	int n = run_probe(self, argv, driver, gpus, max, err, errlen);

	for (int i = 0; i < n; i++) {
		gpus[i].fronts = VRUN_FRONT_CUDA;
		gpus[i].cuda_index = (unsigned)i;
	}
	return n;
}

static int find_key(const struct vrun_gpu *gpus, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (strcasecmp(gpus[i].uuid, key) == 0)
			return i;
	return -1;
}

/* The HIP runtime's devices added to gpus[0..n): one the CUDA driver
 * listed under the same key gains the HIP front end, others follow. */
static int merge_hip(struct vrun_gpu *gpus, int n, size_t max,
		     const struct vrun_gpu *hip, int nh)
{
	for (int i = 0; i < nh; i++) {
		int at = find_key(gpus, n, hip[i].uuid);

		if (at < 0 && (size_t)n == max)
			break;
		if (at < 0) {
			at = n++;
			gpus[at] = hip[i];
			gpus[at].index = (unsigned)at;
			gpus[at].fronts = 0;
		}
		gpus[at].fronts |= VRUN_FRONT_HIP;
		gpus[at].hip_index = (unsigned)i;
	}
	return n;
}

int vrun_list_all_gpus(const char *self, const struct vrun_probe *p,
		       struct vrun_gpu *gpus, size_t max, char *err,
		       size_t errlen)
{
	static struct vrun_gpu hip[VRUN_MAX_GPUS];
	char *argv[] = { "vgpu-run", "--probe-hip-gpus",
			 (char *)p->hip_runtime, "--probe-hip-driver",
			 (char *)p->hip_driver, NULL };
	char cerr[VRUN_PATH_MAX + 512], herr[VRUN_PATH_MAX + 512];
	int nc, nh;

	if (!p->hip_driver)
		argv[3] = NULL;
	cerr[0] = herr[0] = '\0';
	nc = vrun_list_gpus(self, p->driver, gpus, max, cerr, sizeof(cerr));
	nh = run_probe(self, argv, p->hip_runtime, hip, VRUN_MAX_GPUS, herr,
		       sizeof(herr));
	err[0] = '\0';
	if (nc < 0 && nh < 0) {
		snprintf(err, errlen, "cannot list the GPUs, neither through "
			 "the CUDA driver (%s) nor through the HIP runtime "
			 "(%s)", cerr, herr);
		return -VRUN_EXIT_DRIVER;
	}
	if (nc < 0 || nh < 0)
		snprintf(err, errlen, "%s", nc < 0 ? cerr : herr);
	return merge_hip(gpus, nc < 0 ? 0 : nc, max, hip, nh < 0 ? 0 : nh);
}

/* ---- the ledger ---------------------------------------------------------- */

/* Whether slot i's byte is locked: its owner is alive. */
static bool slot_alive(int fd, unsigned i)
{
	struct flock fl = {
		.l_type = F_WRLCK,
		.l_whence = SEEK_SET,
		.l_start = (off_t)VGPU_LEDGER_SLOTS_OFFSET +
			   (off_t)i * VGPU_LEDGER_SLOT_SIZE,
		.l_len = 1,
	};

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return true;	/* cannot tell: count it, the safe side */
	return fl.l_type != F_UNLCK;
}

static const char *check_header(const struct vgpu_ledger_header *h)
{
	if (h->magic != VGPU_LEDGER_MAGIC)
		return "no ledger magic";
	if (h->layout_version != VGPU_LEDGER_VERSION)
		return "another layout version";
	if (h->file_size != VGPU_LEDGER_FILE_SIZE ||
	    h->max_tenants != VGPU_LEDGER_MAX_TENANTS ||
	    h->max_slots != VGPU_LEDGER_MAX_SLOTS ||
	    h->tenants_offset != VGPU_LEDGER_TENANTS_OFFSET ||
	    h->slots_offset != VGPU_LEDGER_SLOTS_OFFSET)
		return "an unexpected layout";
	return NULL;
}

/* Sums the live tenants' reservations of the mapped file into g. */
static void add_reservations(int fd, const unsigned char *base,
			     const char *tenant, struct vrun_gpu *g)
{
	static bool live[VGPU_LEDGER_MAX_TENANTS];
	uint64_t bytes = 0;
	unsigned pct = 0;

	memset(live, 0, sizeof(live));
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s = (const void *)(base +
			VGPU_LEDGER_SLOTS_OFFSET + (size_t)i * VGPU_LEDGER_SLOT_SIZE);
		uint32_t t = __atomic_load_n(&s->tenant, __ATOMIC_RELAXED);

		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE || !slot_alive(fd, i))
			continue;
		g->tasks++;
		if (t < VGPU_LEDGER_MAX_TENANTS)
			live[t] = true;
	}
	for (unsigned t = 0; t < VGPU_LEDGER_MAX_TENANTS; t++) {
		const struct vgpu_ledger_tenant *r = (const void *)(base +
			VGPU_LEDGER_TENANTS_OFFSET + (size_t)t * VGPU_LEDGER_TENANT_SIZE);
		uint64_t lim = __atomic_load_n(&r->mem_limit, __ATOMIC_RELAXED);
		uint32_t share = __atomic_load_n(&r->compute.share_pct,
						 __ATOMIC_RELAXED);

		if (!live[t] || strncmp(r->name, tenant, sizeof(r->name)) == 0)
			continue;
		bytes += lim >= g->total - bytes ? g->total - bytes : lim;
		pct += share <= 100 ? share : 100;
	}
	g->reserved += bytes;
	if (g->reserved > g->total)
		g->reserved = g->total;
	g->reserved_pct = g->reserved_pct + pct > 100 ? 100
						      : g->reserved_pct + pct;
}

/* Why the ledger at path cannot be read (errno e): a link (never
 * followed), or a file (or directory) this user may not read, with its
 * owner and mode. */
static void unreadable(const char *path, int e, char *err, size_t errlen)
{
	char dir[VRUN_PATH_MAX + 128], *slash;
	struct passwd *pw;
	struct stat st;
	const char *what = "the ledger";

	if (e == ELOOP) {
		snprintf(err, errlen, "skipped the ledger %s: a symbolic link, "
			 "never followed", path);
		return;
	}
	if (e == ENOTDIR) {
		snprintf(err, errlen, "skipped the ledger %s: its directory is "
			 "a symbolic link (never followed) or not a directory",
			 path);
		return;
	}
	if (e != EACCES || lstat(path, &st) != 0) {
		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		if (slash && slash > dir)
			*slash = '\0';
		if (e != EACCES || stat(dir, &st) != 0) {
			snprintf(err, errlen, "skipped the ledger %s: %s",
				 path, strerror(e));
			return;
		}
		what = "its directory";
	}
	pw = getpwuid(st.st_uid);
	snprintf(err, errlen, "skipped the ledger %s: permission denied (%s "
		 "is owned by %s%suid %u%s, mode %04o): this user's jobs could "
		 "not use it either; see VGPU_LEDGER_GROUP", path, what,
		 pw ? pw->pw_name : "", pw ? " (" : "", (unsigned)st.st_uid,
		 pw ? ")" : "", (unsigned)(st.st_mode & 07777));
}

int vrun_scan_ledger(const char *dir, const char *group, const char *tenant,
		     struct vrun_gpu *g, char *err, size_t errlen)
{
	char path[VRUN_PATH_MAX + 128];
	struct vgpu_ledger_access acc = { .group = group };
	const char *why = NULL;
	struct stat st;
	void *base;
	int fd;

	snprintf(path, sizeof(path), "%s/%s.v%d%s", dir, g->uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	/* Not through a link, the directory's included; a FIFO is refused
	 * below, not waited on for a writer. */
	fd = vgpu_ledger_open_view(dir, g->uuid);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0) {
		unreadable(path, errno, err, errlen);
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)VGPU_LEDGER_FILE_SIZE) {
		snprintf(err, errlen, "%s is not a ledger: %s", path,
			 S_ISREG(st.st_mode) ? "wrong size" : "not a file");
		close(fd);
		return -1;
	}
	/* A file this user's jobs would refuse (another user's) says nothing
	 * true about where they fit. */
	if (vgpu_ledger_trusted(&st, path, &acc, err, errlen) != 0) {
		close(fd);
		return -1;
	}
	/* A copy, not a mapping: a file truncated meanwhile is then a short
	 * read, not a SIGBUS (docs/ledger-abi.md). */
	base = malloc(VGPU_LEDGER_FILE_SIZE);
	if (!base || pread(fd, base, VGPU_LEDGER_FILE_SIZE, 0) !=
			     (ssize_t)VGPU_LEDGER_FILE_SIZE) {
		snprintf(err, errlen, "cannot read %s: %s", path,
			 base ? "shorter than a ledger (truncated while read)"
			      : "out of memory");
		free(base);
		close(fd);
		return -1;
	}
	if ((why = check_header(base)) != NULL)
		snprintf(err, errlen, "%s is not a version %d ledger: %s", path,
			 VGPU_LEDGER_VERSION, why);
	else
		add_reservations(fd, base, tenant, g);
	free(base);
	close(fd);
	return why ? -1 : 0;
}
