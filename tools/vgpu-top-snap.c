/* vgpu-top-snap.c - one snapshot of every ledger in a directory.
 *
 * Each file is checked from its header (read with pread, before anything is
 * mapped) as the library checks it when attaching (docs/ledger-abi.md), then
 * mapped PROT_READ and copied field by field with plain aligned loads. A
 * slot's liveness is its owner's OFD lock on the slot's first byte, tested
 * with F_OFD_GETLK (which needs no write access to the file). A live slot's
 * pid, which is its own pid namespace's, is confirmed to name the same
 * process in vgpu-top's through /proc: the process there holds the slot's
 * lock (pid_here).
 */
#include "vgpu-top.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static uint32_t ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* ---- checking a file --------------------------------------------------------- */

#define CHECK_U32(field, want) \
	{ #field, offsetof(struct vgpu_ledger_header, field), (want) }

static const struct {
	const char *name;
	size_t off;
	uint32_t want;
} layout_fields[] = {
	CHECK_U32(max_tenants, VGPU_LEDGER_MAX_TENANTS),
	CHECK_U32(max_slots, VGPU_LEDGER_MAX_SLOTS),
	CHECK_U32(tenant_size, VGPU_LEDGER_TENANT_SIZE),
	CHECK_U32(slot_size, VGPU_LEDGER_SLOT_SIZE),
	CHECK_U32(tenants_offset, VGPU_LEDGER_TENANTS_OFFSET),
	CHECK_U32(slots_offset, VGPU_LEDGER_SLOTS_OFFSET),
	CHECK_U32(kind_slots, VGPU_LEDGER_KIND_SLOTS),
};

/* The header's identity: magic, version, sizes, layout constants. */
static int check_header(const struct vgpu_ledger_header *h, char *msg,
			size_t len)
{
	uint32_t v;

	if (h->magic != VGPU_LEDGER_MAGIC) {
		snprintf(msg, len, "magic 0x%016" PRIx64 ", expected 0x%016"
			 PRIx64 " (\"VGPULEDG\"): not a libvgpu ledger",
			 h->magic, VGPU_LEDGER_MAGIC);
		return -1;
	}
	if (h->layout_version != VGPU_LEDGER_VERSION) {
		snprintf(msg, len, "layout version %" PRIu32 ", expected %d "
			 "(this vgpu-top reads version %d only)",
			 h->layout_version, VGPU_LEDGER_VERSION,
			 VGPU_LEDGER_VERSION);
		return -1;
	}
	if (h->header_size != VGPU_LEDGER_HEADER_SIZE ||
	    h->file_size != VGPU_LEDGER_FILE_SIZE) {
		snprintf(msg, len, "header size %" PRIu32 " and file size %"
			 PRIu64 " in its header, expected %d and %d",
			 h->header_size, h->file_size, VGPU_LEDGER_HEADER_SIZE,
			 VGPU_LEDGER_FILE_SIZE);
		return -1;
	}
	for (size_t i = 0; i < sizeof(layout_fields) / sizeof(*layout_fields);
	     i++) {
		memcpy(&v, (const char *)h + layout_fields[i].off, sizeof(v));
		if (v != layout_fields[i].want) {
			snprintf(msg, len, "%s %" PRIu32 ", expected %" PRIu32,
				 layout_fields[i].name, v,
				 layout_fields[i].want);
			return -1;
		}
	}
	if (h->kind_count > VGPU_LEDGER_KIND_SLOTS) {
		snprintf(msg, len, "kind count %" PRIu32 ", expected at most "
			 "%d", h->kind_count, VGPU_LEDGER_KIND_SLOTS);
		return -1;
	}
	if (!memchr(h->gpu_uuid, '\0', sizeof(h->gpu_uuid))) {
		snprintf(msg, len, "a GPU UUID of %zu bytes with no end, "
			 "expected a NUL-terminated UUID",
			 sizeof(h->gpu_uuid));
		return -1;
	}
	return 0;
}

int top_ledger_check(const void *base, size_t size, char *msg, size_t len)
{
	if (size == 0) {
		snprintf(msg, len, "an empty file, expected a ledger of %d "
			 "bytes", VGPU_LEDGER_FILE_SIZE);
		return -1;
	}
	if (size < VGPU_LEDGER_HEADER_SIZE) {
		snprintf(msg, len, "%zu bytes, too short for a ledger header "
			 "(%d bytes; a ledger is %d)", size,
			 VGPU_LEDGER_HEADER_SIZE, VGPU_LEDGER_FILE_SIZE);
		return -1;
	}
	if (check_header(base, msg, len) != 0)
		return -1;
	if (size != VGPU_LEDGER_FILE_SIZE) {
		snprintf(msg, len, "%zu bytes, expected %d (%s)", size,
			 VGPU_LEDGER_FILE_SIZE,
			 size < VGPU_LEDGER_FILE_SIZE ? "truncated" : "padded");
		return -1;
	}
	return 0;
}

/* Opens path and checks its header; returns the descriptor, or -1 with
 * msg filled. */
static int open_checked(const char *path, char *msg, size_t len)
{
	struct vgpu_ledger_header h;
	struct passwd *pw;
	struct stat st;
	ssize_t got;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == EACCES && lstat(path, &st) == 0) {
		pw = getpwuid(st.st_uid);
		snprintf(msg, len, "cannot be opened for reading (permission "
			 "denied: owned by %s%suid %u%s, mode %04o); ledgers "
			 "are shared by a group named in VGPU_LEDGER_GROUP",
			 pw ? pw->pw_name : "", pw ? " (" : "",
			 (unsigned)st.st_uid, pw ? ")" : "",
			 (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (fd < 0) {
		snprintf(msg, len, "cannot be opened for reading (%s), "
			 "expected a readable ledger file", strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		snprintf(msg, len, "cannot be examined (%s)", strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(msg, len, "%s, expected a regular file",
			 S_ISDIR(st.st_mode) ? "a directory" :
			 "not a regular file");
		goto fail;
	}
	memset(&h, 0, sizeof(h));
	got = pread(fd, &h, sizeof(h), 0);
	if (got < 0) {
		snprintf(msg, len, "cannot be read (%s)", strerror(errno));
		goto fail;
	}
	/* got is the file's size when that is under a header's. */
	if (top_ledger_check(&h, got < (ssize_t)sizeof(h) ? (size_t)got :
			     (size_t)st.st_size, msg, len) != 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

/* ---- reading one ledger ------------------------------------------------------ */

/* Whether someone holds slot i's byte: its owner, or a reclaimer. */
static bool slot_locked(int fd, uint32_t i, bool *known)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = (off_t)VGPU_LEDGER_SLOTS_OFFSET +
				       (off_t)i * VGPU_LEDGER_SLOT_SIZE,
			    .l_len = 1 };

	*known = fcntl(fd, F_OFD_GETLK, &fl) == 0;
	return *known && fl.l_type != F_UNLCK;
}

/* Sums of counters stop at 2^64 - 1: a damaged counter never wraps a
 * total round to a small, plausible number. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* The name of uid, or "" when it has none here (another user database,
 * a container's own). */
static void user_name(uint32_t uid, char *buf, size_t len)
{
	struct passwd pw, *found = NULL;
	char db[1024];

	buf[0] = '\0';
	if (getpwuid_r((uid_t)uid, &pw, db, sizeof(db), &found) == 0 && found)
		snprintf(buf, len, "%s", found->pw_name);
}

/* The audit of the last change (vgpu-ctl): ctl_changes is written last,
 * so it is read first. */
static void read_ctl(struct top_tenant *t, const struct vgpu_ledger_tenant *r)
{
	t->ctl_changes = __atomic_load_n(&r->ctl_changes, __ATOMIC_ACQUIRE);
	if (!t->ctl_changes)
		return;
	t->ctl_ns = ld64(&r->ctl_ns);
	t->ctl_uid = ld32(&r->ctl_uid);
	t->ctl_pid = (int32_t)ld32((const uint32_t *)&r->ctl_pid);
	t->ctl_host_pid = (int32_t)ld32((const uint32_t *)&r->ctl_host_pid);
	t->ctl_fields = ld32(&r->ctl_fields);
	user_name(t->ctl_uid, t->ctl_user, sizeof(t->ctl_user));
}

static void read_tenant(struct top_tenant *t, uint32_t index,
			const struct vgpu_ledger_tenant *r)
{
	memset(t, 0, sizeof(*t));
	t->index = index;
	memcpy(t->name, r->name, sizeof(t->name));
	t->name[sizeof(t->name) - 1] = '\0';
	t->mem_limit = ld64(&r->mem_limit);
	t->used = ld64(&r->used);
	t->spill_limit = ld64(&r->spill_limit);
	for (int k = 0; k < VGPU_USAGE_COUNT; k++)
		t->usage[k] = ld64(&r->usage[k]);
	t->share_pct = ld32(&r->compute.share_pct);
	t->policy = ld32(&r->compute.policy);
	t->gpu_time_ns = ld64(&r->compute.gpu_time_ns);
	t->wait_ns = ld64(&r->compute.wait_ns);
	t->suspended = ld32(&r->suspended) != 0;
	read_ctl(t, r);
}

static void read_slot(struct top_proc *p, uint32_t index,
		      const struct vgpu_ledger_slot *r)
{
	memset(p, 0, sizeof(*p));
	p->slot = index;
	p->generation = ld32(&r->generation);
	p->tenant = ld32(&r->tenant);
	p->pid = (int32_t)ld32((const uint32_t *)&r->pid);
	p->host_pid = (int32_t)ld32((const uint32_t *)&r->host_pid);
	p->start_ns = ld64(&r->start_ns);
	p->allocs = ld64(&r->allocs);
	p->frees = ld64(&r->frees);
	p->failures = ld64(&r->failures);
	for (int k = 0; k < VGPU_USAGE_COUNT; k++) {
		p->usage[k] = ld64(&r->usage[k]);
		if (VGPU_USAGE_IS_DEVICE(k))
			p->used = add_sat(p->used, p->usage[k]);
	}
	p->launches = ld64(&r->launches);
	p->launches_throttled = ld64(&r->launches_throttled);
	p->wait_ns = ld64(&r->launch_wait_ns);
	p->gpu_time_ns = ld64(&r->gpu_time_ns);
	p->flags = ld32(&r->flags);
}

/* ---- pids --------------------------------------------------------------------- */

/* Whether /proc/<pid>/status's NSpid ends in pid: the process that pid
 * names here is pid in its own namespace too (no NSpid: an old kernel,
 * no namespaces to tell apart). */
static bool same_pid_inside(int32_t pid)
{
	char path[64], line[512], *last;
	bool ok = true;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRId32 "/status", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		last = strrchr(line, '\t');
		last = last ? last + 1 : line + 6;
		ok = strtol(last, NULL, 10) == pid;
		break;
	}
	fclose(f);
	return ok;
}

/* Whether a file description of process pid holds the OFD lock on byte
 * `at` of the file (dev, ino), as /proc/<pid>/fdinfo lists its locks
 * ("lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1234 397312 397312"). The
 * owner of a slot holds its first byte: a process of vgpu-top's
 * namespace that merely has the same pid and maps the same ledger (a job
 * of another tenant) does not. */
static bool holds_lock(int32_t pid, dev_t dev, ino_t ino, off_t at)
{
	char path[64], line[256];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%" PRId32 "/fdinfo", pid);
	d = opendir(path);
	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		char fpath[320];
		FILE *f;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(fpath, sizeof(fpath), "%s/%s", path, e->d_name);
		f = fopen(fpath, "re");
		if (!f)
			continue;
		while (!found && fgets(line, sizeof(line), f)) {
			unsigned maj, min;
			unsigned long long in;
			long long start;

			found = strncmp(line, "lock:", 5) == 0 &&
				strstr(line, "OFDLCK") &&
				strstr(line, "WRITE") &&
				sscanf(strstr(line, "WRITE") + 5,
				       " %*d %x:%x:%llu %lld", &maj, &min, &in,
				       &start) == 4 &&
				in == (unsigned long long)ino &&
				maj == major(dev) && min == minor(dev) &&
				start == (long long)at;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

/* What pid_here found for a slot's owner: one owner, one answer. */
struct pid_memo {
	dev_t dev;
	ino_t ino;
	uint32_t slot, generation;
	int32_t pid;
	uint64_t start_ns;
	bool here, valid;
};

#define PID_MEMOS 512

/*
 * Whether slot p of the ledger (dev, ino), alive, is the process that
 * p->pid names in vgpu-top's pid namespace: that process holds the slot's
 * lock on the ledger (holds_lock) and is p->pid in its own namespace too.
 * A process of another namespace whose pid happens to name some process
 * here is not, even one that maps the same ledger (another job of the
 * GPU: small pids in containers collide often). Not confirmed when /proc
 * cannot tell (no such pid, or its files not readable: another user's
 * process, without privilege).
 */
/* Whether /proc is vgpu-top's own pid namespace's: /proc/self names this
 * process's pid. vgpu-top started in a new pid namespace with the host's
 * /proc (unshare -p -f without --mount-proc) reads other processes' files
 * there, whose pids are not its namespace's. */
static bool proc_is_ours(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);

	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strtol(buf, NULL, 10) == (long)getpid();
}

static bool pid_here(const struct top_proc *p, dev_t dev, ino_t ino)
{
	static struct pid_memo memo[PID_MEMOS];
	struct pid_memo *m = &memo[((uint64_t)ino * 31 + p->slot) % PID_MEMOS];

	if (!proc_is_ours())
		return false;

	if (m->valid && m->dev == dev && m->ino == ino && m->slot == p->slot &&
	    m->generation == p->generation && m->pid == p->pid &&
	    m->start_ns == p->start_ns)
		return m->here;
	*m = (struct pid_memo){ dev, ino, p->slot, p->generation, p->pid,
				p->start_ns, false, true };
	m->here = p->pid > 0 && same_pid_inside(p->pid) &&
		  holds_lock(p->pid, dev, ino,
			     (off_t)VGPU_LEDGER_SLOTS_OFFSET +
			     (off_t)p->slot * VGPU_LEDGER_SLOT_SIZE);
	return m->here;
}

static struct top_tenant *find_tenant(struct top_gpu *g, uint32_t index)
{
	for (int i = 0; i < g->ntenants; i++)
		if (g->tenants[i].index == index)
			return &g->tenants[i];
	return NULL;
}

static void read_slots(struct top_gpu *g, const unsigned char *base, int fd,
		       const struct stat *st)
{
	const struct vgpu_ledger_slot *slots =
		(const void *)(base + VGPU_LEDGER_SLOTS_OFFSET);
	struct top_tenant *t;
	bool known;

	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_SLOTS; i++) {
		struct top_proc *p = &g->procs[g->nprocs];

		if (ld32(&slots[i].state) != VGPU_SLOT_ACTIVE)
			continue;
		read_slot(p, i, &slots[i]);
		p->state = slot_locked(fd, i, &known) || !known ?
			   TOP_ALIVE : TOP_EXITED;
		if (ld32(&slots[i].state) != VGPU_SLOT_ACTIVE)
			continue;	/* left while we looked */
		if (p->state == TOP_ALIVE && p->host_pid == 0)
			p->pid_here = pid_here(p, st->st_dev, st->st_ino);
		t = find_tenant(g, p->tenant);
		if (t) {
			t->procs++;
			t->alive += p->state == TOP_ALIVE;
			t->procs_suspended += p->state == TOP_ALIVE &&
				(p->flags & VGPU_LEDGER_SLOT_SUSPENDED);
			t->launches = add_sat(t->launches, p->launches);
		}
		g->nprocs++;
	}
}

static void read_gpu(struct top_gpu *g, const unsigned char *base, int fd,
		     const struct stat *st)
{
	const struct vgpu_ledger_header *h = (const void *)base;
	const struct vgpu_ledger_tenant *tens =
		(const void *)(base + VGPU_LEDGER_TENANTS_OFFSET);

	memcpy(g->uuid, h->gpu_uuid, sizeof(g->uuid));
	g->uuid[sizeof(g->uuid) - 1] = '\0';
	g->physical_bytes = h->physical_bytes;
	g->created_ns = h->created_ns;
	g->joins = ld64(&h->joins);
	for (uint32_t i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		struct top_tenant *t = &g->tenants[g->ntenants];

		if (ld32(&tens[i].state) != VGPU_TENANT_ACTIVE)
			continue;
		read_tenant(t, i, &tens[i]);
		if (t->mem_limit == VGPU_LEDGER_UNLIMITED)
			g->unlimited_tenants++;
		else
			g->slices_bytes = add_sat(g->slices_bytes,
						  t->mem_limit);
		g->used = add_sat(g->used, t->used);
		g->spilled = add_sat(g->spilled,
				     t->usage[VGPU_USAGE_SPILLED]);
		g->gpu_time_ns = add_sat(g->gpu_time_ns, t->gpu_time_ns);
		g->ntenants++;
	}
	read_slots(g, base, fd, st);
}

/* The whole file, read into memory: NULL with msg set when it cannot be
 * read or is shorter than a ledger (truncated while read). */
static void *read_copy(int fd, char *msg, size_t len)
{
	unsigned char *buf = malloc(VGPU_LEDGER_FILE_SIZE);
	size_t have = 0;
	ssize_t n;

	if (!buf) {
		snprintf(msg, len, "out of memory reading it");
		return NULL;
	}
	while (have < VGPU_LEDGER_FILE_SIZE) {
		n = pread(fd, buf + have, VGPU_LEDGER_FILE_SIZE - have,
			  (off_t)have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	if (have == VGPU_LEDGER_FILE_SIZE)
		return buf;
	if (n < 0)
		snprintf(msg, len, "cannot be read (%s)", strerror(errno));
	else
		snprintf(msg, len, "is %zu bytes, shorter than a ledger "
			 "(truncated while read)", have);
	free(buf);
	return NULL;
}

/* Gives back the room of records not in use (snapshots are kept). */
static void shrink(struct top_gpu *g)
{
	void *t = realloc(g->tenants, (size_t)(g->ntenants ? g->ntenants : 1) *
				      sizeof(*g->tenants));
	void *p = realloc(g->procs, (size_t)(g->nprocs ? g->nprocs : 1) *
				    sizeof(*g->procs));

	if (t)
		g->tenants = t;
	if (p)
		g->procs = p;
}

/* The file's name must be the UUID in its header. */
static int check_name(const struct top_gpu *g, const char *name, char *msg,
		      size_t len)
{
	size_t n = strlen(g->uuid);

	if (strncmp(name, g->uuid, n) == 0 && name[n] == '.')
		return 0;
	snprintf(msg, len, "GPU UUID '%s' in its header, expected the UUID "
		 "of its name", g->uuid);
	return -1;
}

/* Reads path into g; -1 with msg filled when it is not a usable ledger. */
static int read_file(struct top_gpu *g, const char *path, char *msg,
		     size_t len)
{
	struct stat st;
	void *base;
	int fd = open_checked(path, msg, len);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0) {
		snprintf(msg, len, "cannot be examined (%s)", strerror(errno));
		close(fd);
		return -1;
	}
	/* A copy, not a mapping: a file truncated meanwhile is then a short
	 * read, not a SIGBUS (docs/ledger-abi.md). */
	base = read_copy(fd, msg, len);
	if (!base) {
		close(fd);
		return -1;
	}
	g->tenants = calloc(VGPU_LEDGER_MAX_TENANTS, sizeof(*g->tenants));
	g->procs = calloc(VGPU_LEDGER_MAX_SLOTS, sizeof(*g->procs));
	if (!g->tenants || !g->procs) {
		snprintf(msg, len, "out of memory reading it");
		free(base);
		close(fd);
		return -1;
	}
	snprintf(g->path, sizeof(g->path), "%s", path);
	read_gpu(g, base, fd, &st);
	free(base);
	close(fd);
	shrink(g);
	return 0;
}

/* ---- the directory ------------------------------------------------------------- */

/* Whether name looks like a ledger ("<uuid>.v<N>.ledger", not a dot file);
 * *version gets N (-1 if the name has none). */
static bool ledger_name(const char *name, long *version)
{
	size_t n = strlen(name), sl = strlen(VGPU_LEDGER_SUFFIX);
	const char *v;
	char *end;

	*version = -1;
	if (name[0] == '.' || n <= sl ||
	    strcmp(name + n - sl, VGPU_LEDGER_SUFFIX) != 0)
		return false;
	for (v = name + n - sl; v > name && v[-1] != '.'; v--)
		;
	if (v > name + 1 && v[0] == 'v') {
		*version = strtol(v + 1, &end, 10);
		if (end != name + n - sl || end == v + 1)
			*version = -1;
	}
	return true;
}

static int cmp_gpu(const void *a, const void *b)
{
	return strcmp(((const struct top_gpu *)a)->uuid,
		      ((const struct top_gpu *)b)->uuid);
}

/* Records a skipped file, and says so on `problems`. */
static void skip(struct top_snap *s, const char *path, const char *why,
		 FILE *problems)
{
	struct top_skip *n = realloc(s->skipped, (size_t)(s->nskipped + 1) *
						 sizeof(*n));

	if (problems) {
		fputs("vgpu-top: skipping '", problems);
		top_put_escaped(problems, path, TOP_ESC_TEXT);
		fputs("': ", problems);
		top_put_escaped(problems, why, TOP_ESC_TEXT);
		fputc('\n', problems);
	}
	if (!n)
		return;
	s->skipped = n;
	n[s->nskipped].path = strdup(path);
	n[s->nskipped].reason = strdup(why);
	if (n[s->nskipped].path && n[s->nskipped].reason)
		s->nskipped++;
	else {
		free(n[s->nskipped].path);
		free(n[s->nskipped].reason);
	}
}

static void add_file(struct top_snap *s, const char *dir, const char *name,
		     FILE *problems)
{
	char path[TOP_PATH_MAX], msg[512];
	struct top_gpu *g = &s->gpus[s->ngpus];
	long version;

	if (!ledger_name(name, &version))
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (version != VGPU_LEDGER_VERSION) {
		if (version < 0)
			snprintf(msg, sizeof(msg), "its name has no layout "
				 "version, expected <uuid>.v%d.ledger",
				 VGPU_LEDGER_VERSION);
		else
			snprintf(msg, sizeof(msg), "its name has layout "
				 "version %ld, expected %d (this vgpu-top "
				 "reads version %d only)", version,
				 VGPU_LEDGER_VERSION, VGPU_LEDGER_VERSION);
		skip(s, path, msg, problems);
		return;
	}
	memset(g, 0, sizeof(*g));
	if (read_file(g, path, msg, sizeof(msg)) != 0 ||
	    check_name(g, name, msg, sizeof(msg)) != 0) {
		free(g->tenants);
		free(g->procs);
		skip(s, path, msg, problems);
		return;
	}
	s->ngpus++;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int top_snap_read(struct top_snap *s, const char *dir, FILE *problems)
{
	struct timespec rt;
	struct dirent *e;
	int cap = 0;
	DIR *d;

	memset(s, 0, sizeof(*s));
	s->t = mono_s();
	clock_gettime(CLOCK_REALTIME, &rt);
	s->realtime_ns = (uint64_t)rt.tv_sec * 1000000000u +
			 (uint64_t)rt.tv_nsec;
	d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		if (problems) {
			fputs("vgpu-top: cannot list the ledger directory '",
			      problems);
			top_put_escaped(problems, dir, TOP_ESC_TEXT);
			fprintf(problems, "': %s\n", strerror(errno));
		}
		return -1;
	}
	while ((e = readdir(d))) {
		if (s->ngpus == cap) {
			struct top_gpu *n;

			cap = cap ? cap * 2 : 8;
			n = realloc(s->gpus, (size_t)cap * sizeof(*n));
			if (!n)
				break;
			s->gpus = n;
		}
		add_file(s, dir, e->d_name, problems);
	}
	closedir(d);
	if (s->ngpus > 1)
		qsort(s->gpus, (size_t)s->ngpus, sizeof(*s->gpus), cmp_gpu);
	return 0;
}

void top_snap_free(struct top_snap *s)
{
	for (int i = 0; i < s->ngpus; i++) {
		free(s->gpus[i].tenants);
		free(s->gpus[i].procs);
	}
	free(s->gpus);
	for (int i = 0; i < s->nskipped; i++) {
		free(s->skipped[i].path);
		free(s->skipped[i].reason);
	}
	free(s->skipped);
	memset(s, 0, sizeof(*s));
}
