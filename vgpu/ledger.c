/* ledger.c - the ledger file: its name, its creation (built under a
 * temporary name, then link()ed into place), attaching with validation,
 * closing, forgetting after fork, and the host pid helper.
 * Tenants and slots are in ledger_join.c, the locks in ledger_lock.c,
 * reserve and release in ledger_ops.c.
 */
#include "ledger_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define UUID_OK_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" \
		      "0123456789-_"

int vgpu__ledger_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

uint64_t vgpu__now_ns(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *vgpu_ledger_strerror(int code)
{
	switch (code) {
#define VGPU_LEDGER_ERR_CASE_(NAME, value, text) \
	case value: return text;
	VGPU_LEDGER_ERRNO_MAP(VGPU_LEDGER_ERR_CASE_)
#undef VGPU_LEDGER_ERR_CASE_
	case 0:
		return "success";
	}
	return "unknown error";
}

/* ---- the directory -------------------------------------------------------- */

/* mkdir -p; the last component, when created here, gets mode 01777. */
static int make_dir(const char *dir, char *err, size_t errlen)
{
	char buf[sizeof(((struct vgpu_ledger *)0)->path)];
	struct stat st;
	size_t i, n = strlen(dir);

	if (n == 0 || n >= sizeof(buf) - 80)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"ledger directory '%s': empty or too long", dir);
	if (stat(dir, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 :
			vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
				"ledger directory '%s' is not a directory", dir);
	memcpy(buf, dir, n + 1);
	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, i == n ? 01777 : 0755) != 0 && errno != EEXIST)
			return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
				"cannot create ledger directory '%s': %s",
				buf, strerror(errno));
		if (i == n)
			chmod(buf, 01777);	/* past the umask; best effort */
		buf[i] = dir[i];
	}
	return 0;
}

/* ---- creating the file ---------------------------------------------------- */

static void fill_header(struct vgpu_ledger_header *h, const char *uuid,
			uint64_t physical_bytes)
{
	memset(h, 0, sizeof(*h));
	h->magic = VGPU_LEDGER_MAGIC;
	h->layout_version = VGPU_LEDGER_VERSION;
	h->header_size = VGPU_LEDGER_HEADER_SIZE;
	h->file_size = VGPU_LEDGER_FILE_SIZE;
	h->physical_bytes = physical_bytes;
	h->created_ns = vgpu__now_ns(CLOCK_REALTIME);
	h->max_tenants = VGPU_LEDGER_MAX_TENANTS;
	h->max_slots = VGPU_LEDGER_MAX_SLOTS;
	h->tenant_size = VGPU_LEDGER_TENANT_SIZE;
	h->slot_size = VGPU_LEDGER_SLOT_SIZE;
	h->tenants_offset = VGPU_LEDGER_TENANTS_OFFSET;
	h->slots_offset = VGPU_LEDGER_SLOTS_OFFSET;
	h->kind_count = VGPU_USAGE_COUNT;
	h->kind_slots = VGPU_LEDGER_KIND_SLOTS;
	h->shares_offset = VGPU_LEDGER_SHARES_OFFSET;
	h->max_shares = VGPU_LEDGER_MAX_SHARES;
	h->share_size = VGPU_LEDGER_SHARE_SIZE;
	h->share_holders = VGPU_LEDGER_SHARE_HOLDERS;
	snprintf(h->gpu_uuid, sizeof(h->gpu_uuid), "%s", uuid);
}

/* Builds a complete file under a temporary name in the same directory and
 * links it to `path`. Losing the race (EEXIST) is success: the winner's file
 * is as good. The records are the file's zeros. */
static int create_file(const char *dir, const char *path, const char *uuid,
		       uint64_t physical_bytes, char *err, size_t errlen)
{
	struct vgpu_ledger_header h;
	char tmp[sizeof(((struct vgpu_ledger *)0)->path)];
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.XXXXXX", dir, uuid);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot create a ledger in '%s': %s", dir,
			strerror(errno));
	fill_header(&h, uuid, physical_bytes);
	/* Every block allocated now: a full file system then refuses the
	 * ledger here, with a message, rather than a later store into a
	 * hole of the mapping killing the job with SIGBUS. */
	if (fchmod(fd, 0666) != 0 ||
	    ftruncate(fd, VGPU_LEDGER_FILE_SIZE) != 0 ||
	    (errno = posix_fallocate(fd, 0, VGPU_LEDGER_FILE_SIZE)) != 0 ||
	    pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot write ledger '%s': %s", tmp, strerror(errno));
		goto out_unlink;
	}
	if (link(tmp, path) != 0 && errno != EEXIST)
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot link ledger '%s': %s", path, strerror(errno));
out_unlink:
	unlink(tmp);
	close(fd);
	return rc;
}

/* ---- attaching ------------------------------------------------------------ */

static int bad(char *err, size_t errlen, const char *path, const char *what,
	       uint64_t found, uint64_t expected)
{
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
		"ledger '%s': %s %llu, expected %llu", path, what,
		(unsigned long long)found, (unsigned long long)expected);
}

/* Checks an open file: type, size, then the header field by field. */
static int validate(int fd, const char *path, const char *uuid,
		    char *err, size_t errlen)
{
	struct vgpu_ledger_header h;
	struct stat st;

	if (fstat(fd, &st) != 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot stat ledger '%s': %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' is not a regular file", path);
	if (st.st_size == 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' is empty (0 bytes, expected %u)",
			path, (unsigned)VGPU_LEDGER_FILE_SIZE);
	if ((uint64_t)st.st_size < sizeof(h))
		return bad(err, errlen, path,
			"is truncated: too short for a header:",
			(uint64_t)st.st_size, VGPU_LEDGER_FILE_SIZE);
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot read ledger '%s': %s", path, strerror(errno));
	if (memcmp(&h.magic, "VGPULEDG", 8) != 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' is not a libvgpu ledger: magic "
			"0x%016llx, expected 0x%016llx (\"VGPULEDG\")", path,
			(unsigned long long)h.magic,
			(unsigned long long)VGPU_LEDGER_MAGIC);
	if (h.layout_version != VGPU_LEDGER_VERSION)
		return bad(err, errlen, path, "has layout version",
			   h.layout_version, VGPU_LEDGER_VERSION);
	if (h.file_size != VGPU_LEDGER_FILE_SIZE)
		return bad(err, errlen, path, "header gives a size of",
			   h.file_size, VGPU_LEDGER_FILE_SIZE);
	if ((uint64_t)st.st_size != VGPU_LEDGER_FILE_SIZE)
		return bad(err, errlen, path, "is truncated or padded: size",
			   (uint64_t)st.st_size, VGPU_LEDGER_FILE_SIZE);
	if (h.header_size != VGPU_LEDGER_HEADER_SIZE ||
	    h.max_tenants != VGPU_LEDGER_MAX_TENANTS ||
	    h.max_slots != VGPU_LEDGER_MAX_SLOTS ||
	    h.tenant_size != VGPU_LEDGER_TENANT_SIZE ||
	    h.slot_size != VGPU_LEDGER_SLOT_SIZE ||
	    h.tenants_offset != VGPU_LEDGER_TENANTS_OFFSET ||
	    h.slots_offset != VGPU_LEDGER_SLOTS_OFFSET ||
	    h.kind_slots != VGPU_LEDGER_KIND_SLOTS ||
	    h.shares_offset != VGPU_LEDGER_SHARES_OFFSET ||
	    h.max_shares != VGPU_LEDGER_MAX_SHARES ||
	    h.share_size != VGPU_LEDGER_SHARE_SIZE ||
	    h.share_holders != VGPU_LEDGER_SHARE_HOLDERS)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s': layout constants differ from version %d's"
			" (header %u, %u tenants of %u, %u slots of %u, %u "
			"shares of %u)", path, VGPU_LEDGER_VERSION,
			h.header_size, h.max_tenants, h.tenant_size,
			h.max_slots, h.slot_size, h.max_shares, h.share_size);
	h.gpu_uuid[sizeof(h.gpu_uuid) - 1] = '\0';
	if (strcmp(h.gpu_uuid, uuid) != 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' belongs to GPU '%s', expected '%s'",
			path, h.gpu_uuid, uuid);
	return 0;
}

static int attach(struct vgpu_ledger *l, const char *uuid, char *err,
		  size_t errlen)
{
	int rc;

	l->fd = open(l->path, O_RDWR | O_CLOEXEC);
	if (l->fd < 0 && errno == EISDIR)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' is a directory, expected a ledger file",
			l->path);
	if (l->fd < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot open ledger '%s': %s", l->path,
			strerror(errno));
	rc = validate(l->fd, l->path, uuid, err, errlen);
	if (rc)
		return rc;
	l->map = mmap(NULL, VGPU_LEDGER_FILE_SIZE, PROT_READ | PROT_WRITE,
		      MAP_SHARED, l->fd, 0);
	if (l->map == MAP_FAILED) {
		l->map = NULL;
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot map ledger '%s': %s", l->path,
			strerror(errno));
	}
	l->hdr = l->map;
	l->tenants = (void *)((char *)l->map + VGPU_LEDGER_TENANTS_OFFSET);
	l->slots = (void *)((char *)l->map + VGPU_LEDGER_SLOTS_OFFSET);
	l->shares = (void *)((char *)l->map + VGPU_LEDGER_SHARES_OFFSET);
	l->share = (void *)((char *)l->shares + VGPU_LEDGER_SHARES_HEAD);
	return 0;
}

static bool uuid_ok(const char *uuid)
{
	size_t n = uuid ? strlen(uuid) : 0;

	return n > 0 && n < VGPU_LEDGER_UUID_MAX &&
	       strspn(uuid, UUID_OK_CHARS) == n;
}

static void free_handle(struct vgpu_ledger *l)
{
	if (l->map)
		munmap(l->map, VGPU_LEDGER_FILE_SIZE);
	if (l->fd >= 0)
		close(l->fd);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->shares_mu);
	free(l);
}

int vgpu_ledger_open(const char *dir, const char *gpu_uuid,
		     uint64_t physical_bytes, struct vgpu_ledger **out,
		     char *err, size_t errlen)
{
	struct vgpu_ledger *l;
	struct stat st;
	int rc;

	*out = NULL;
	if (!dir || !uuid_ok(gpu_uuid))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"GPU UUID '%s': expected 1..%d characters of "
			"[A-Za-z0-9_-]", gpu_uuid ? gpu_uuid : "(null)",
			VGPU_LEDGER_UUID_MAX - 1);
	rc = make_dir(dir, err, errlen);
	if (rc)
		return rc;
	l = calloc(1, sizeof(*l));
	if (!l)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ENOMEM,
			"out of memory opening a ledger");
	l->fd = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->shares_mu, NULL);
	snprintf(l->path, sizeof(l->path), "%s/%s.v%d%s", dir, gpu_uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	rc = 0;
	if (lstat(l->path, &st) != 0 && errno == ENOENT)
		rc = create_file(dir, l->path, gpu_uuid, physical_bytes,
				 err, errlen);
	if (rc == 0)
		rc = attach(l, gpu_uuid, err, errlen);
	if (rc) {
		free_handle(l);
		return rc;
	}
	*out = l;
	return 0;
}

void vgpu_ledger_close(struct vgpu_ledger *l)
{
	if (!l)
		return;
	while (l->joined)
		vgpu_ledger_leave(l->joined);
	free_handle(l);
}

void vgpu_ledger_forget_after_fork(struct vgpu_ledger *l)
{
	struct vgpu_slot *s, *next;

	if (!l)
		return;
	for (s = l->joined; s; s = next) {
		next = s->next;
		free(s);
	}
	/* Closing our reference to the open file description leaves the
	 * parent's OFD locks in place; unlocking would release them. */
	free_handle(l);
}

const char *vgpu_ledger_path(const struct vgpu_ledger *l)
{
	return l->path;
}

const struct vgpu_ledger_header *vgpu_ledger_header(const struct vgpu_ledger *l)
{
	return l->hdr;
}

/* ---- the host pid ----------------------------------------------------------- */

int32_t vgpu_host_pid(void)
{
	char buf[4096];
	const char *p;
	ssize_t n;
	long first;
	int fd;

	fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strstr(buf, "\nNSpid:");
	if (!p)
		return 0;
	first = strtol(p + 7, NULL, 10);
	if (first <= 0 || first > INT32_MAX || first == (long)getpid())
		return 0;
	return (int32_t)first;
}
