/* ledger_peek.c - a read-only look at one tenant of a ledger file, for
 * views that must not join (NVML's memory info in a process that never
 * used CUDA, such as nvidia-smi in a container).
 */
#include "ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

__attribute__((format(printf, 4, 5)))
static int say(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* The ledger of GPU gpu_uuid in dir: its path into buf. */
static void ledger_path(const char *dir, const char *gpu_uuid, char *buf,
			size_t len)
{
	snprintf(buf, len, "%s/%s.v%d%s", dir, gpu_uuid, VGPU_LEDGER_VERSION,
		 VGPU_LEDGER_SUFFIX);
}

int vgpu_ledger_open_view(const char *dir, const char *gpu_uuid)
{
	char d[4096], name[300];
	size_t n = strlen(dir);
	int dfd, fd, e;

	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n >= sizeof(d)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(d, dir, n);
	d[n] = '\0';
	snprintf(name, sizeof(name), "%s.v%d%s", gpu_uuid, VGPU_LEDGER_VERSION,
		 VGPU_LEDGER_SUFFIX);
	dfd = open(d, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	e = errno;
	close(dfd);
	errno = e;
	return fd;
}

/* Reads the file into base (VGPU_LEDGER_FILE_SIZE bytes) and checks it:
 * a regular file of the layout's size, magic and version. *stp (if not
 * NULL): the file's stat. */
static int read_checked(int fd, const char *path, unsigned char *base,
			struct stat *stp, char *err, size_t errlen)
{
	const struct vgpu_ledger_header *h = (const void *)base;
	struct stat st;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)VGPU_LEDGER_FILE_SIZE ||
	    pread(fd, base, VGPU_LEDGER_FILE_SIZE, 0) !=
		    (ssize_t)VGPU_LEDGER_FILE_SIZE ||
	    h->magic != VGPU_LEDGER_MAGIC ||
	    h->layout_version != VGPU_LEDGER_VERSION ||
	    h->file_size != VGPU_LEDGER_FILE_SIZE)
		return say(err, errlen, VGPU_LEDGER_EBADFILE, "'%s' is not a "
			   "usable ledger of layout version %d (wrong type, "
			   "size, magic or version)", path,
			   VGPU_LEDGER_VERSION);
	if (stp)
		*stp = st;
	return 0;
}

/* Whether slot i's byte is locked by a process (its owner is alive). */
static bool slot_alive(int fd, unsigned i)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = (off_t)VGPU_LEDGER_SLOTS_OFFSET +
				       (off_t)i * VGPU_LEDGER_SLOT_SIZE,
			    .l_len = 1 };

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return true;		/* cannot tell: counted */
	return fl.l_type != F_UNLCK;
}

/* The whole file, copied (not mapped: a file truncated meanwhile is then
 * a short read, not a SIGBUS), and checked; NULL with *rc set if not.
 * *stp (if not NULL): the file's stat. *fdp (if not NULL): the file, left
 * open for the slots' liveness (slot_alive), else closed. */
static unsigned char *peek_file_fd(const char *dir, const char *gpu_uuid,
				   const char *group, int *rc,
				   struct stat *stp, int *fdp, char *err,
				   size_t errlen)
{
	struct vgpu_ledger_access acc = { .group = group };
	unsigned char *base;
	char path[4200];
	struct stat st;
	int fd;

	ledger_path(dir, gpu_uuid, path, sizeof(path));
	fd = vgpu_ledger_open_view(dir, gpu_uuid);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		*rc = VGPU_LEDGER_ESYS;
		return NULL;
	}
	/* What a job would refuse to join is not shown as the slice. */
	if ((*rc = vgpu_ledger_trusted(&st, path, &acc, err, errlen))) {
		close(fd);
		return NULL;
	}
	base = malloc(VGPU_LEDGER_FILE_SIZE);
	*rc = !base ? VGPU_LEDGER_ENOMEM
		    : read_checked(fd, path, base, stp, NULL, 0);
	if (*rc || !fdp)
		close(fd);
	if (*rc) {
		free(base);
		return NULL;
	}
	if (fdp)
		*fdp = fd;
	return base;
}

/* The index of the active tenant `tenant` in a copied file, or -1. */
static int tenant_index(const unsigned char *base, const char *tenant)
{
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t =
			(const void *)(base + VGPU_LEDGER_TENANTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_TENANT_SIZE);

		if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) ==
			    VGPU_TENANT_ACTIVE &&
		    strncmp(t->name, tenant, sizeof(t->name)) == 0)
			return (int)i;
	}
	return -1;
}

/* The device memory slot s is charged. */
static uint64_t slot_device_bytes(const struct vgpu_ledger_slot *s)
{
	uint64_t bytes = 0;

	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		if (VGPU_USAGE_IS_DEVICE(k))
			bytes += s->usage[k];
	return bytes;
}

static const struct vgpu_ledger_slot *slot_at(const unsigned char *base,
					      unsigned i)
{
	return (const void *)(base + VGPU_LEDGER_SLOTS_OFFSET +
			      (size_t)i * VGPU_LEDGER_SLOT_SIZE);
}

/* The bytes of the shared memory that slot k pays for and a live process
 * of another slot still holds (docs/memory.md: charged once, to the
 * payer, until the charge moves). */
static uint64_t shared_kept(const unsigned char *base, int fd, unsigned k)
{
	const struct vgpu_ledger_shares *h =
		(const void *)(base + VGPU_LEDGER_SHARES_OFFSET);
	uint64_t bytes = 0;

	if (!h->in_use)
		return 0;
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SHARES; i++) {
		const struct vgpu_ledger_share *r =
			(const void *)(base + VGPU_LEDGER_SHARES_OFFSET +
				       VGPU_LEDGER_SHARES_HEAD +
				       (size_t)i * VGPU_LEDGER_SHARE_SIZE);
		bool held = false;

		if ((!r->key[0] && !r->key[1]) || !r->payer ||
		    r->payer > VGPU_LEDGER_SHARE_HOLDERS ||
		    r->slot[r->payer - 1] != k + 1)
			continue;
		for (unsigned p = 0; p < VGPU_LEDGER_SHARE_HOLDERS && !held;
		     p++) {
			uint32_t o = r->slot[p];

			held = p + 1 != r->payer && r->count[p] && o &&
			       o <= VGPU_LEDGER_MAX_SLOTS &&
			       slot_at(base, o - 1)->state ==
				       VGPU_SLOT_ACTIVE &&
			       slot_at(base, o - 1)->generation == r->gen[p] &&
			       slot_alive(fd, o - 1);
		}
		if (held)
			bytes += r->bytes;
	}
	return bytes;
}

int vgpu_ledger_peek_tenant(const char *dir, const char *gpu_uuid,
			    const char *group, const char *tenant,
			    uint64_t *used, uint64_t *limit,
			    uint32_t *share_pct, char *err, size_t errlen)
{
	const struct vgpu_ledger_tenant *t;
	unsigned char *base;
	uint64_t dead = 0, kept;
	int rc, i, fd;

	if (!dir || !gpu_uuid || !tenant || !used || !limit)
		return VGPU_LEDGER_EINVAL;
	if (err && errlen)
		err[0] = '\0';
	base = peek_file_fd(dir, gpu_uuid, group, &rc, NULL, &fd, err, errlen);
	if (!base)
		return rc;
	i = tenant_index(base, tenant);
	if (i < 0) {
		close(fd);
		free(base);
		return VGPU_LEDGER_EINVAL;	/* no such tenant */
	}
	t = (const void *)(base + VGPU_LEDGER_TENANTS_OFFSET +
			   (size_t)i * VGPU_LEDGER_TENANT_SIZE);
	/* What dead processes still hold until some process reclaims them
	 * is not the tenant's: a killed holder's 264 MiB stayed in a
	 * monitor's view, which no NVML call ever reclaims (a hostile
	 * review). But memory such a process paid for that a live process
	 * still holds stays on the device, and charged (shared_kept). */
	for (unsigned k = 0; k < VGPU_LEDGER_MAX_SLOTS; k++) {
		const struct vgpu_ledger_slot *sl = slot_at(base, k);
		uint64_t b;

		if (sl->state != VGPU_SLOT_ACTIVE || sl->tenant != (uint32_t)i ||
		    slot_alive(fd, k))
			continue;
		b = slot_device_bytes(sl);
		kept = shared_kept(base, fd, k);
		dead += b - (kept < b ? kept : b);
	}
	close(fd);
	*used = __atomic_load_n(&t->used, __ATOMIC_RELAXED);
	*used -= dead < *used ? dead : *used;
	*limit = __atomic_load_n(&t->mem_limit, __ATOMIC_RELAXED);
	if (share_pct)
		*share_pct = __atomic_load_n(&t->compute.share_pct,
					     __ATOMIC_RELAXED);
	free(base);
	return 0;
}

/* Whether process pid holds an OFD lock on byte `at` of the file (dev,
 * ino): a "lock:" line of one of its /proc/PID/fdinfo files, whose
 * fields after the lock's kind are the pid (-1 for an OFD lock), the
 * file as MAJOR:MINOR:INODE (hexadecimal device numbers) and the first
 * and last byte. */
static bool holds_byte(int32_t pid, dev_t dev, ino_t ino, uint64_t at)
{
	char path[64], buf[4096];
	struct dirent *e;
	bool found = false;
	DIR *d;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/fdinfo", (int)pid);
	d = opendir(path);
	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		char *line, *save = NULL;
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		for (line = strtok_r(buf, "\n", &save); line && !found;
		     line = strtok_r(NULL, "\n", &save)) {
			unsigned maj, min;
			unsigned long long in, first, last;
			char kind[16], end[32];

			if (strncmp(line, "lock:", 5) != 0 ||
			    sscanf(line, "lock: %*d: %15s %*s %*s %*d "
				   "%x:%x:%llu %llu %31s", kind, &maj, &min,
				   &in, &first, end) != 6 ||
			    strcmp(kind, "OFDLCK") != 0)
				continue;
			last = strcmp(end, "EOF") == 0 ? UINT64_MAX
						       : strtoull(end, NULL, 10);
			found = in == (unsigned long long)ino &&
				maj == major(dev) && min == minor(dev) &&
				first <= at && at <= last;
		}
	}
	closedir(d);
	return found;
}

int vgpu_ledger_peek_procs(const char *dir, const char *gpu_uuid,
			   const char *group, const char *tenant,
			   struct vgpu_ledger_proc *out, unsigned max,
			   unsigned *count)
{
	unsigned char *base;
	struct stat st;
	unsigned n = 0;
	int rc, ti, fd;

	if (!dir || !gpu_uuid || !tenant || !count || (max && !out))
		return VGPU_LEDGER_EINVAL;
	base = peek_file_fd(dir, gpu_uuid, group, &rc, &st, &fd, NULL, 0);
	if (!base)
		return rc;
	ti = tenant_index(base, tenant);
	if (ti < 0) {
		close(fd);
		free(base);
		*count = 0;
		return VGPU_LEDGER_EINVAL;
	}
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s = slot_at(base, i);
		uint64_t bytes = slot_device_bytes(s);

		/* A dead process is not listed (it was, with pid 0, until
		 * some process reclaimed its slot). */
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) !=
			    VGPU_SLOT_ACTIVE ||
		    s->tenant != (uint32_t)ti || !slot_alive(fd, i))
			continue;
		if (n < max) {
			uint64_t at = VGPU_LEDGER_SLOTS_OFFSET +
				      (uint64_t)i * VGPU_LEDGER_SLOT_SIZE;

			out[n] = (struct vgpu_ledger_proc){
				.pid = s->pid, .host_pid = s->host_pid,
				.device_bytes = bytes };
			if (holds_byte(s->pid, st.st_dev, st.st_ino, at))
				out[n].here = s->pid;
			else if (holds_byte(s->host_pid, st.st_dev,
					    st.st_ino, at))
				out[n].here = s->host_pid;
		}
		n++;
	}
	close(fd);
	free(base);
	*count = n;
	return 0;
}

/* ---- a tenant's whole record, for vgpu-ctl show ------------------------- */


/* "owned by alice (uid 1000), mode 0600" of path, or "" if not known. */
static void owner_of(const char *path, char *buf, size_t len)
{
	struct passwd pw, *r = NULL;
	char tmp[2048];
	struct stat st;

	buf[0] = '\0';
	if (stat(path, &st) != 0)
		return;
	if (getpwuid_r(st.st_uid, &pw, tmp, sizeof(tmp), &r) == 0 && r)
		snprintf(buf, len, "owned by %s (uid %u), mode %04o",
			 r->pw_name, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777));
	else
		snprintf(buf, len, "owned by uid %u, mode %04o",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
}

static int open_refused(const char *path, char *err, size_t errlen)
{
	int e = errno;
	char own[400];

	if (e == ENOENT)
		return say(err, errlen, VGPU_LEDGER_ENOENT, "no ledger '%s' "
			   "(no job has used this GPU through libvgpu with "
			   "this ledger directory)", path);
	if (e == EACCES || e == EPERM) {
		owner_of(path, own, sizeof(own));
		return say(err, errlen, VGPU_LEDGER_EPERM, "ledger '%s'%s%s%s "
			   "cannot be read by uid %u: %s", path,
			   *own ? " (" : "", own, *own ? ")" : "",
			   (unsigned)getuid(), strerror(e));
	}
	if (e == ELOOP)		/* O_NOFOLLOW met a link: as the open refuses it */
		return say(err, errlen, VGPU_LEDGER_EPERM, "ledger '%s' is a "
			   "symbolic link: refused (a ledger is a regular "
			   "file; links are not followed)", path);
	return say(err, errlen, VGPU_LEDGER_ESYS, "cannot open ledger '%s': "
		   "%s", path, strerror(e));
}

static unsigned live_slots(int fd, const unsigned char *base, unsigned t)
{
	unsigned n = 0;

	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s =
			(const void *)(base + VGPU_LEDGER_SLOTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_SLOT_SIZE);

		if (s->state == VGPU_SLOT_ACTIVE && s->tenant == t &&
		    slot_alive(fd, i))
			n++;
	}
	return n;
}


/* The file of dir's GPU read into *base (malloc'd) with tenant's index in
 * *t; *fd stays open for the locks' tests. 0, or an error said in err. */
static int read_tenant(const char *dir, const char *gpu_uuid,
		       const char *tenant, int *fd, unsigned char **base,
		       int *t, char *err, size_t errlen)
{
	char path[4200];
	int rc;

	ledger_path(dir, gpu_uuid, path, sizeof(path));
	*base = NULL;
	*fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (*fd < 0)
		return open_refused(path, err, errlen);
	*base = malloc(VGPU_LEDGER_FILE_SIZE);
	if (!*base) {
		rc = say(err, errlen, VGPU_LEDGER_ENOMEM, "out of memory");
		goto fail;
	}
	rc = read_checked(*fd, path, *base, NULL, err, errlen);
	if (rc)
		goto fail;
	*t = tenant_index(*base, tenant);
	if (*t >= 0)
		return 0;
	rc = say(err, errlen, VGPU_LEDGER_ENOENT, "ledger '%s' has no tenant "
		 "'%s'", path, tenant);
fail:
	free(*base);
	*base = NULL;
	close(*fd);
	return rc;
}

int vgpu_ledger_peek_record(const char *dir, const char *gpu_uuid,
			    const char *tenant, struct vgpu_ledger_tenant *out,
			    unsigned *live, char *err, size_t errlen)
{
	unsigned char *base;
	int fd, rc, t;

	if (!dir || !gpu_uuid || !tenant || !out || !live)
		return say(err, errlen, VGPU_LEDGER_EINVAL, "bad arguments");
	rc = read_tenant(dir, gpu_uuid, tenant, &fd, &base, &t, err, errlen);
	if (rc)
		return rc;
	memcpy(out, base + VGPU_LEDGER_TENANTS_OFFSET +
	       (size_t)t * VGPU_LEDGER_TENANT_SIZE, sizeof(*out));
	*live = live_slots(fd, base, (unsigned)t);
	free(base);
	close(fd);
	return 0;
}

int vgpu_ledger_peek_control(const char *dir, const char *gpu_uuid,
			     const char *tenant,
			     struct vgpu_ledger_tenant *rec,
			     struct vgpu_ledger_ctlproc *out, unsigned max,
			     unsigned *count, char *err, size_t errlen)
{
	unsigned char *base;
	unsigned n = 0;
	int fd, rc, t;

	if (!dir || !gpu_uuid || !tenant || !rec || !count || (max && !out))
		return say(err, errlen, VGPU_LEDGER_EINVAL, "bad arguments");
	rc = read_tenant(dir, gpu_uuid, tenant, &fd, &base, &t, err, errlen);
	if (rc)
		return rc;
	memcpy(rec, base + VGPU_LEDGER_TENANTS_OFFSET +
	       (size_t)t * VGPU_LEDGER_TENANT_SIZE, sizeof(*rec));
	for (unsigned i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		const struct vgpu_ledger_slot *s =
			(const void *)(base + VGPU_LEDGER_SLOTS_OFFSET +
				       (size_t)i * VGPU_LEDGER_SLOT_SIZE);
		uint64_t dev = 0;

		if (s->state != VGPU_SLOT_ACTIVE || s->tenant != (uint32_t)t ||
		    !slot_alive(fd, i))
			continue;
		for (int k = 0; k < VGPU_USAGE_COUNT; k++)
			if (VGPU_USAGE_IS_DEVICE(k))
				dev += s->usage[k];
		if (n < max)
			out[n] = (struct vgpu_ledger_ctlproc){
				.pid = s->pid, .host_pid = s->host_pid,
				.flags = s->flags, .ctl_acked = s->ctl_acked,
				.device_bytes = dev,
				.host_bytes = s->usage[VGPU_USAGE_SPILLED] };
		n++;
	}
	*count = n;
	free(base);
	close(fd);
	return 0;
}
