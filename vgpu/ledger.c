/* ledger.c - the ledger file: opened from its directory's descriptor
 * (ledger_dir.c: who may touch it, the directory) with no link followed
 * and checked, its creation (built under a temporary name, then renamed
 * into place), attaching with validation, closing, forgetting after fork,
 * and the host pid helper.
 * Tenants and slots are in ledger_join.c, the locks in ledger_lock.c,
 * reserve and release in ledger_ops.c.
 */
#include "ledger_internal.h"
#include "log.h"

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

/* A new temporary file in dfd, ".<uuid>.tmp.<random>": never an existing
 * name (O_EXCL, and no link followed). Returns its descriptor or -1. */
static int make_temp(int dfd, const char *uuid, char *tmp, size_t len)
{
	static uint32_t seq;
	uint64_t r;
	int i, fd = -1;

	for (i = 0; i < 100 && fd < 0; i++) {
		r = vgpu__now_ns(CLOCK_MONOTONIC) ^
		    ((uint64_t)getpid() << 40) ^
		    ((uint64_t)__atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED)
		     << 20);
		snprintf(tmp, len, ".%s.tmp.%012llx", uuid,
			 (unsigned long long)(r & 0xffffffffffffull));
		fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				      O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	return fd;
}

/* Puts tmp at name unless name exists: rename(2) without replacing, or,
 * where the file system has no such rename, a link and an unlink (a
 * moment in which the file has two names). 0, or -1 with errno (EEXIST:
 * the race was lost). */
static int place(int dfd, const char *tmp, const char *name)
{
	if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
	if (linkat(dfd, tmp, dfd, name, 0) != 0)
		return -1;
	unlinkat(dfd, tmp, 0);
	return 0;
}

/* Builds a complete file under a temporary name in the ledger directory
 * (mode 0600, or 0660 given to the group, whatever the umask) and puts it
 * at `name`. Losing the race (EEXIST) is success: the winner's file is as
 * good. The records are the file's zeros. With `replace`, a file at `name`
 * is replaced (a damaged one, ledger_move.c). */
static int create_file(int dfd, const char *dir, const char *name,
		       const char *uuid, uint64_t physical_bytes,
		       const struct vgpu__trust *a, bool replace, char *err,
		       size_t errlen)
{
	struct vgpu_ledger_header h;
	char tmp[VGPU_LEDGER_UUID_MAX + 32], me[300];
	int fd, rc = 0;

	fd = make_temp(dfd, uuid, tmp, sizeof(tmp));
	if (fd < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot create a ledger in '%s': %s", dir,
			strerror(errno));
	if (a->shared && fchown(fd, (uid_t)-1, a->gid) != 0) {
		int e = errno;	/* user_text's look-up may change errno */

		vgpu__user_text(a->euid, me, sizeof(me));
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"cannot give a new ledger in '%s' to VGPU_LEDGER_GROUP "
			"%s: %s (is %s a member?)", dir, a->group,
			strerror(e), me);
		goto out_unlink;
	}
	fill_header(&h, uuid, physical_bytes);
	/* Every block allocated now: a full file system then refuses the
	 * ledger here, with a message, rather than a later store into a
	 * hole of the mapping killing the job with SIGBUS. */
	if (fchmod(fd, a->shared ? 0660 : 0600) != 0 ||
	    ftruncate(fd, VGPU_LEDGER_FILE_SIZE) != 0 ||
	    (errno = posix_fallocate(fd, 0, VGPU_LEDGER_FILE_SIZE)) != 0 ||
	    pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot write ledger '%s/%s': %s", dir, tmp,
			strerror(errno));
		goto out_unlink;
	}
	if ((replace ? renameat(dfd, tmp, dfd, name) : place(dfd, tmp, name))
	    == 0)
		goto out;
	if (errno != EEXIST)
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot put ledger '%s/%s' in place: %s", dir, name,
			strerror(errno));
out_unlink:
	unlinkat(dfd, tmp, 0);
out:
	close(fd);
	return rc;
}

/* ---- opening the file ----------------------------------------------------- */

/* An open file: a regular file (else validate says what it is) owned by a
 * trusted user, with one name, not writable by every user (one of ours is
 * made not to be; with a group, given to it). 0 when it is, 1 when it has
 * no name left (removed since it was opened: the caller opens the name
 * again), else a VGPU_LEDGER_E* code. */
static int check_file(int fd, const char *path, const struct vgpu__trust *a,
		      char *err, size_t errlen)
{
	char own[700];
	struct stat st;
	mode_t m;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || a->control)
		return 0;
	if (!vgpu__trusted_owner(&st, a))
		return vgpu__not_ours("ledger", path, &st, a,
			"remove it when no job uses it, or share ledgers "
			"with a group named in VGPU_LEDGER_GROUP", err, errlen);
	/* A creator whose file system has no RENAME_NOREPLACE links its
	 * file and unlinks the temporary name: a moment with two names. */
	for (int i = 0; st.st_nlink > 1 && i < 20; i++) {
		nanosleep(&(struct timespec){ .tv_nsec = 50000 }, NULL);
		if (fstat(fd, &st) != 0)
			break;
	}
	if (st.st_nlink == 0)
		return 1;	/* removed since it was opened: open again */
	if (st.st_nlink != 1) {
		vgpu__owner_text(&st, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger '%s' (%s) has %lu names: refused, a ledger "
			"has one (another name could be a file that is not "
			"meant to be shared); remove it when no job uses it",
			path, own, (unsigned long)st.st_nlink);
	}
	if (st.st_uid == a->euid) {
		m = st.st_mode & 07777 & ~(mode_t)S_IWOTH;
		if (a->shared && st.st_gid != a->gid &&
		    fchown(fd, (uid_t)-1, a->gid) == 0)
			m |= 0060;
		if (m != (st.st_mode & 07777) && fchmod(fd, m) == 0)
			st.st_mode = (st.st_mode & ~(mode_t)07777) | m;
	}
	if (st.st_mode & S_IWOTH) {
		vgpu__owner_text(&st, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger '%s' is %s: refused, every user may write it "
			"(and truncating it would stop every job using it); "
			"its owner can take that away (chmod o-w), or remove "
			"it when no job uses it", path, own);
	}
	return 0;
}

/* Why `name` could not be opened (errno e). */
static int open_refused(int dfd, const char *name, const char *path, int e,
			const struct vgpu__trust *a, char *err, size_t errlen)
{
	char own[700] = "";
	struct stat st;

	if (e == ELOOP) {
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			vgpu__user_text(st.st_uid, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger '%s' is a symbolic link%s%s%s: refused, a "
			"ledger is never reached through a link (it could lead "
			"to a file its maker could not write); remove the link",
			path, *own ? " (made by " : "", own, *own ? ")" : "");
	}
	if (e == EISDIR)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' is a directory, expected a ledger file",
			path);
	if ((e != EACCES && e != EPERM) ||
	    (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
	     fstat(dfd, &st) != 0))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot open ledger '%s': %s", path, strerror(e));
	vgpu__owner_text(&st, own, sizeof(own));
	if (a->control)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger '%s' (%s%s) may not be changed by uid %u: %s; "
			"only a user who may write it (its owner, root, or "
			"with mode 0660 its group's members) may change its "
			"tenants", path, S_ISDIR(st.st_mode) ?
			"its directory is " : "", own, (unsigned)getuid(),
			strerror(e));
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
		"cannot open ledger '%s' (%s%s): %s; %s", path,
		S_ISDIR(st.st_mode) ? "its directory is " : "", own,
		strerror(e), a->shared ? "with VGPU_LEDGER_GROUP, a ledger is "
		"shared by its group, mode 0660: its owner or root can set "
		"them (chgrp, chmod), or remove it when no job uses it" :
		"share ledgers with a group named in VGPU_LEDGER_GROUP, or "
		"use a VGPU_LEDGER_DIR of your own");
}

/* Opens (creating it if missing) and checks the ledger `name` in dfd:
 * its descriptor, or a VGPU_LEDGER_E* code. */
static int open_file(int dfd, const char *dir, const char *name,
		     const char *path, const char *uuid,
		     uint64_t physical_bytes, const struct vgpu__trust *a,
		     char *err, size_t errlen)
{
	int fd, rc, tries;

	for (tries = 0; tries < 20; tries++) {
		fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) {
			rc = check_file(fd, path, a, err, errlen);
			if (rc)
				close(fd);
			if (rc == 1)
				continue;	/* removed meanwhile */
			return rc ? rc : fd;
		}
		if (errno != ENOENT)
			return open_refused(dfd, name, path, errno, a, err,
					    errlen);
		if (a->control)
			return vgpu__ledger_err(err, errlen,
				VGPU_LEDGER_ENOENT, "no ledger '%s' (no job has "
				"used this GPU through libvgpu with this "
				"ledger directory)", path);
		rc = create_file(dfd, dir, name, uuid, physical_bytes, a,
				 false, err, errlen);
		if (rc)
			return rc;
	}
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
		"ledger '%s' was removed as soon as opened or made, %d times",
		path, tries);
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
	ssize_t n;

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
	n = pread(fd, &h, sizeof(h), 0);
	if (n < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot read ledger '%s': %s", path, strerror(errno));
	if (n != (ssize_t)sizeof(h))	/* truncated since the fstat */
		return bad(err, errlen, path,
			"is truncated: too short for a header:", (uint64_t)n,
			VGPU_LEDGER_FILE_SIZE);
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
	if (strcmp(h.gpu_uuid, uuid) != 0) {
		/* Quoted in a message for a terminal: no control bytes. */
		for (char *c = h.gpu_uuid; *c; c++)
			if ((unsigned char)*c < 0x20 ||
			    (unsigned char)*c >= 0x7f)
				*c = '?';
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EBADFILE,
			"ledger '%s' belongs to GPU '%s', expected '%s'",
			path, h.gpu_uuid, uuid);
	}
	return 0;
}

/* Whether the open ledger fd is damaged beyond use by anyone: the wrong
 * size or no magic (truncated, overwritten). Another GPU's or version's
 * file is not damaged. */
static bool damaged(int fd)
{
	uint64_t magic = 0;
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_size != VGPU_LEDGER_FILE_SIZE ||
		pread(fd, &magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
		magic != VGPU_LEDGER_MAGIC);
}

/* The byte of a damaged file its replacers lock, past the layout. */
#define REPLACE_BYTE	((off_t)VGPU_LEDGER_FILE_SIZE)

/* Replaces fd, the damaged ledger `name` in dfd, checked (check_file: a
 * trusted owner), with a new file by rename, one replacer at a time: each
 * locks a byte of the damaged file, and replaces it only if the name still
 * leads to it, so that processes that found the same damage all end up in
 * one new file (the first replacer's). 0, or a code with err. */
/* Set once a wait for a replacement lock ran out (its holder stopped):
 * later replacements in this process, of any GPU's ledger, only try the
 * lock until one is had, so a stopped replacer costs one wait in all. */
static uint32_t replace_stuck;

static int replace_damaged(int dfd, int fd, const char *dir, const char *name,
			   const char *path, const char *uuid,
			   uint64_t physical_bytes, const struct vgpu__trust *a,
			   char *err, size_t errlen)
{
	uint64_t until = vgpu__now_ns(CLOCK_MONOTONIC) +
			 (__atomic_load_n(&replace_stuck, __ATOMIC_RELAXED)
			  ? 0 : VGPU_LEDGER_LOCK_TIMEOUT_NS);
	struct stat mine, now;
	bool locked = true;
	struct flock fl;
	int rc = 0;

	for (;;) {
		fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET,
				     .l_start = REPLACE_BYTE, .l_len = 1 };
		if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
			__atomic_store_n(&replace_stuck, 0, __ATOMIC_RELAXED);
			break;
		}
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
				"cannot replace the damaged ledger '%s': its "
				"replacement lock: %s", path, strerror(errno));
		if (vgpu__now_ns(CLOCK_MONOTONIC) >= until) {
			/* Its holder is stopped (or very slow): replace
			 * without it rather than refuse the GPU. Should the
			 * holder replace the file too, the processes in this
			 * replacement follow the name to its (ledger_move.c):
			 * two files for a moment, one in the end. */
			if (!__atomic_exchange_n(&replace_stuck, 1,
						 __ATOMIC_RELAXED))
				vgpu_log(1, "ledger '%s': its replacement lock "
					 "held for over a second by another "
					 "process; replacing it without", path);
			else
				vgpu_log(1, "ledger '%s': its replacement lock "
					 "held by another process (one that "
					 "held another's for over a second "
					 "here); replacing it without", path);
			locked = false;
			break;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 200000 }, NULL);
	}
	if (fstat(fd, &mine) == 0 &&
	    fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
	    now.st_dev == mine.st_dev && now.st_ino == mine.st_ino)
		rc = create_file(dfd, dir, name, uuid, physical_bytes, a,
				 true, err, errlen);
	/* else: replaced (or removed) by another meanwhile: open that */
	if (locked) {
		fl.l_type = F_UNLCK;
		fcntl(fd, F_OFD_SETLK, &fl);
	}
	return rc;
}

/* Opens (or creates) the file `name` in the checked directory dfd and
 * maps it. A damaged file (truncated, overwritten) of a trusted owner is
 * replaced, with a warning: the way a move replaces it (ledger_move.c), so
 * that a damaged file does not keep refusing every new job. */
static int attach(struct vgpu_ledger *l, int dfd, const char *dir,
		  const char *name, const char *uuid, uint64_t physical_bytes,
		  const struct vgpu__trust *a, char *err, size_t errlen)
{
	char why[sizeof(l->path) + 200];
	struct stat st;
	int rc;

	for (int tries = 0;; tries++) {
		rc = open_file(dfd, dir, name, l->path, uuid, physical_bytes,
			       a, err, errlen);
		if (rc < 0)
			return rc;
		l->fd = rc;
		rc = validate(l->fd, l->path, uuid, why, sizeof(why));
		if (rc && (rc != VGPU_LEDGER_EBADFILE || tries == 3 ||
			   a->control || !damaged(l->fd)))
			return vgpu__ledger_err(err, errlen, rc, "%s", why);
		if (!rc)
			break;
		/* check_file accepted it: ours, root's or the group's. */
		vgpu_log(1, "%s: replacing it with a new, empty ledger (what "
			 "it recorded is lost; jobs still using it move to the "
			 "new one)", why);
		rc = replace_damaged(dfd, l->fd, dir, name, l->path, uuid,
				     physical_bytes, a, err, errlen);
		close(l->fd);
		l->fd = -1;
		if (rc)
			return rc;
	}
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
	l->guard = vgpu__guard_add(l->map, l->held);
	__atomic_store_n(&l->next_check_ns,
			 vgpu__coarse_ns() + VGPU__CHECK_EVERY_NS,
			 __ATOMIC_RELAXED);
	if (fstat(l->fd, &st) == 0) {
		l->dev = st.st_dev;
		l->ino = st.st_ino;
	}
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
	vgpu__guard_remove(l->guard);
	if (l->map)
		munmap(l->map, VGPU_LEDGER_FILE_SIZE);
	if (l->fd >= 0)
		close(l->fd);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->shares_mu);
	free(l);
}

int vgpu_ledger_open_with(const char *dir, const char *gpu_uuid,
			  uint64_t physical_bytes,
			  const struct vgpu_ledger_access *access,
			  struct vgpu_ledger **out, char *err, size_t errlen)
{
	char name[VGPU_LEDGER_UUID_MAX + 32];
	struct vgpu_ledger *l;
	struct vgpu__trust a;
	int dfd, rc;

	*out = NULL;
	if (!dir || !uuid_ok(gpu_uuid))
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"GPU UUID '%s': expected 1..%d characters of "
			"[A-Za-z0-9_-]", gpu_uuid ? gpu_uuid : "(null)",
			VGPU_LEDGER_UUID_MAX - 1);
	rc = vgpu__trust_of(access, &a, err, errlen);
	if (rc)
		return rc;
	dfd = vgpu__ledger_dir(dir, &a, err, errlen);
	if (dfd < 0)
		return dfd;
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(dfd);
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ENOMEM,
			"out of memory opening a ledger");
	}
	l->fd = -1;
	l->guard = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->shares_mu, NULL);
	/* What a move needs to open or make the file again. */
	l->physical_bytes = physical_bytes;
	snprintf(l->uuid, sizeof(l->uuid), "%s", gpu_uuid);
	snprintf(l->group, sizeof(l->group), "%s",
		 access && access->group ? access->group : "");
	snprintf(name, sizeof(name), "%s.v%d%s", gpu_uuid,
		 VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	snprintf(l->path, sizeof(l->path), "%s/%s", dir, name);
	rc = attach(l, dfd, dir, name, gpu_uuid, physical_bytes, &a, err,
		    errlen);
	close(dfd);
	if (rc) {
		free_handle(l);
		return rc;
	}
	*out = l;
	return 0;
}

int vgpu_ledger_open(const char *dir, const char *gpu_uuid,
		     uint64_t physical_bytes, struct vgpu_ledger **out,
		     char *err, size_t errlen)
{
	return vgpu_ledger_open_with(dir, gpu_uuid, physical_bytes, NULL, out,
				     err, errlen);
}

void vgpu__ledger_free(struct vgpu_ledger *l)
{
	free_handle(l);
}

int vgpu__ledger_reopen(struct vgpu_ledger *l, struct vgpu_ledger **out,
			char *err, size_t errlen)
{
	struct vgpu_ledger_access access = { .group = l->group };
	char dir[sizeof(l->path)];
	const char *name;

	name = strrchr(l->path, '/');
	if (!name)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"ledger '%s': no directory", l->path);
	snprintf(dir, sizeof(dir), "%.*s", (int)(name - l->path), l->path);
	/* Opening replaces a damaged file (attach). */
	return vgpu_ledger_open_with(dir, l->uuid, l->physical_bytes, &access,
				     out, err, errlen);
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

uint64_t vgpu_ledger_physical_bytes(const struct vgpu_ledger *l)
{
	return l && l->hdr ? __atomic_load_n(&l->hdr->physical_bytes,
					     __ATOMIC_RELAXED)
			   : 0;
}
