/* ledger_dir.c - who may touch the ledger (the job's user, root, and the
 * group VGPU_LEDGER_GROUP names; docs/ledger-abi.md, "Permissions"), and
 * the directory: made with the right mode, or checked, opened with no
 * link followed on the way. ledger.c opens the file from its descriptor.
 */
#include "ledger_internal.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- who may touch the ledger ------------------------------------------- */

/* "alice (uid 1000)", or "uid 1000" when the name is not known. */
void vgpu__user_text(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *r = NULL;
	char tmp[2048];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &r) == 0 && r)
		snprintf(buf, len, "%s (uid %u)", r->pw_name, (unsigned)uid);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
}

static void group_text(gid_t gid, char *buf, size_t len)
{
	struct group gr, *r = NULL;
	char tmp[8192];

	if (getgrgid_r(gid, &gr, tmp, sizeof(tmp), &r) == 0 && r)
		snprintf(buf, len, "%s (gid %u)", r->gr_name, (unsigned)gid);
	else
		snprintf(buf, len, "gid %u", (unsigned)gid);
}

/* A group's number, or its name looked up (with a buffer grown on ERANGE:
 * groups with many members need more than a page). */
static int find_group(const char *name, gid_t *gid)
{
	struct group gr, *r = NULL;
	size_t len = 4096;
	char *buf, *end;
	unsigned long n;
	int rc;

	if (name[strspn(name, "0123456789")] == '\0') {
		errno = 0;
		n = strtoul(name, &end, 10);
		if (errno || n >= (gid_t)-1)
			return -1;
		*gid = (gid_t)n;
		return 0;
	}
	for (;;) {
		buf = malloc(len);
		if (!buf)
			return -1;
		rc = getgrnam_r(name, &gr, buf, len, &r);
		if (rc == 0 && r)
			*gid = r->gr_gid;
		free(buf);
		if (rc != ERANGE || len >= (1u << 20))
			return rc == 0 && r ? 0 : -1;
		len *= 4;
	}
}

int vgpu__trust_of(const struct vgpu_ledger_access *in, struct vgpu__trust *a,
		     char *err, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->euid = geteuid();
	a->control = in && in->control;
	if (!in || !in->group || !*in->group)
		return 0;
	if (find_group(in->group, &a->gid) != 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"VGPU_LEDGER_GROUP=%s: no such group here (in a "
			"container, give the group's number)", in->group);
	a->shared = true;
	if (in->group[strspn(in->group, "0123456789")] == '\0')
		snprintf(a->group, sizeof(a->group), "gid %u",
			 (unsigned)a->gid);
	else
		snprintf(a->group, sizeof(a->group), "%.60s (gid %u)",
			 in->group, (unsigned)a->gid);
	return 0;
}

bool vgpu__trusted_owner(const struct stat *st, const struct vgpu__trust *a)
{
	return st->st_uid == a->euid || st->st_uid == 0 ||
	       (a->shared && st->st_gid == a->gid);
}

/* "owned by alice (uid 1000), group staff (gid 50), mode 0777" */
void vgpu__owner_text(const struct stat *st, char *buf, size_t len)
{
	char u[300], g[300];

	vgpu__user_text(st->st_uid, u, sizeof(u));
	group_text(st->st_gid, g, sizeof(g));
	snprintf(buf, len, "owned by %s, group %s, mode %04o", u, g,
		 (unsigned)(st->st_mode & 07777));
}

/* The owner's refusal, for a directory or a file. */
int vgpu__not_ours(const char *what, const char *path, const struct stat *st,
		    const struct vgpu__trust *a, const char *fix, char *err,
		    size_t errlen)
{
	char own[700], whom[200];

	vgpu__owner_text(st, own, sizeof(own));
	if (a->euid)
		snprintf(whom, sizeof(whom), "you (uid %u)%sroot",
			 (unsigned)a->euid, a->shared ? ", " : " and ");
	else
		snprintf(whom, sizeof(whom), "root");
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
		"%s '%s' is refused: it is %s, and a ledger is trusted only "
		"to %s%s%s (its owner could change or replace it); %s",
		what, path, own, whom, a->shared ? " and group " : "",
		a->shared ? a->group : "", fix);
}

int vgpu_ledger_trusted(const struct stat *st, const char *path,
			const struct vgpu_ledger_access *access, char *err,
			size_t errlen)
{
	struct vgpu__trust a;
	char own[700];
	int rc;

	if ((rc = vgpu__trust_of(access, &a, err, errlen)))
		return rc;
	if (a.control)
		return 0;
	if (!vgpu__trusted_owner(st, &a))
		return vgpu__not_ours("ledger", path, st, &a,
			"a job of this user would refuse it too", err, errlen);
	if (st->st_mode & S_IWOTH) {
		vgpu__owner_text(st, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger '%s' is %s: not believed, every user may "
			"write it", path, own);
	}
	return 0;
}

/* ---- the directory -------------------------------------------------------- */

/* An existing directory: owned by a trusted user; if others may write it
 * (and so rename or delete the ledger), it is sticky, ours, or writable
 * only by the ledger group beyond its owner. */
static int check_dir(const char *dir, const struct stat *st,
		     const struct vgpu__trust *a, char *err, size_t errlen)
{
	mode_t m = st->st_mode;
	char own[700];
	bool mine = st->st_uid == a->euid;

	if (a->control)
		return 0;	/* the file's write access decides */
	if (!vgpu__trusted_owner(st, a))
		return vgpu__not_ours("ledger directory", dir, st, a,
			"remove it when no job uses it, or set "
			"VGPU_LEDGER_DIR to a directory of your own or "
			"one root made (mode 1777)", err, errlen);
	/* Files made here take a setgid directory's group: where every user
	 * may create files and that group is the ledger group, anyone could
	 * make a file that the group's members trust. */
	if (a->shared && (m & S_ISGID) && (m & S_IWOTH) &&
	    st->st_gid == a->gid) {
		vgpu__owner_text(st, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger directory '%s' is %s: refused with "
			"VGPU_LEDGER_GROUP=%s, every user may create files "
			"in it and, setgid, they would be that group's, "
			"trusted by its members; take away the world's "
			"write access (chmod o-w)", dir, own, a->group);
	}
	if (mine || (m & S_ISVTX))
		return 0;
	if ((m & S_IWOTH) ||
	    ((m & S_IWGRP) && !(a->shared && st->st_gid == a->gid))) {
		vgpu__owner_text(st, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger directory '%s' is %s: refused, %s may write "
			"it without the sticky bit and so replace the "
			"ledger; make it sticky (chmod +t), or take away "
			"that write access%s", dir, own,
			(m & S_IWOTH) ? "every user" : "its group",
			(m & S_IWOTH) ? "" : ", or name its group in "
			"VGPU_LEDGER_GROUP");
	}
	return 0;
}

/* mkdir -p of the parents, mode 0755 (before the umask): they are the
 * administrator's path to the ledger directory. */
static void make_parents(char *buf)
{
	size_t i, n = strlen(buf);

	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		mkdir(buf, 0755);
		buf[i] = i == n ? '\0' : '/';
	}
}

/* Gives a directory this process just made its mode and group, whatever
 * the umask. */
static int settle_new_dir(int pfd, const char *name, const char *dir,
			  const struct vgpu__trust *a, char *err, size_t errlen)
{
	const int how = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(pfd, name, how), e;
	char me[300];

	/* A umask that took the owner's read away: only a non-root caller
	 * gets here, and its chmod reaches only what it owns. */
	if (fd < 0 && errno == EACCES && fchmodat(pfd, name, 0700, 0) == 0)
		fd = openat(pfd, name, how);
	if (fd >= 0 && (!a->shared || fchown(fd, (uid_t)-1, a->gid) == 0) &&
	    fchmod(fd, a->shared ? 0770 : 0700) == 0) {
		close(fd);
		return 0;
	}
	e = errno;
	if (fd >= 0)
		close(fd);
	vgpu__user_text(a->euid, me, sizeof(me));
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
		"cannot set the mode%s of the new ledger directory '%s': "
		"%s%s%s%s", a->shared ? " and group" : "", dir, strerror(e),
		a->shared ? " (is " : "", a->shared ? me : "",
		a->shared ? " a member of VGPU_LEDGER_GROUP's group?)" : "");
}

/* Why `name` in pfd could not be opened as a directory. */
static int dir_refused(int pfd, const char *name, const char *dir, int e,
		       char *err, size_t errlen)
{
	struct stat st;

	char own[300];

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode)) {
		vgpu__user_text(st.st_uid, own, sizeof(own));
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EPERM,
			"ledger directory '%s' is a symbolic link (made by "
			"%s): refused, the ledger is never reached through a "
			"link (it could lead where its maker could not "
			"write); set VGPU_LEDGER_DIR to the real directory",
			dir, own);
	}
	if (e == ENOTDIR)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"ledger directory '%s' is not a directory", dir);
	return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
		"cannot open the ledger directory '%s': %s", dir,
		strerror(e));
}

/* Opens `dir` (made if missing) as an O_PATH descriptor, reached without
 * following a link at its last component, and checks it. `buf` holds dir
 * without trailing slashes; its last component is opened from its
 * parent's descriptor. Returns the descriptor or a VGPU_LEDGER_E* code. */
static int open_dir(char *buf, const char *dir, const struct vgpu__trust *a,
		    char *err, size_t errlen)
{
	const int how = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	char *slash = strrchr(buf, '/');
	const char *name = slash[1] ? slash + 1 : ".";
	struct stat st;
	int pfd, dfd, rc = 0;

	*slash = '\0';
	pfd = open(slash == buf ? "/" : buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0 && errno == ENOENT && !a->control) {
		make_parents(buf);
		pfd = open(slash == buf ? "/" : buf,
			   O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	*slash = '/';
	if (pfd < 0)
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot reach or create '%.*s', the parent of the "
			"ledger directory '%s': %s", (int)(slash - buf) +
			(slash == buf), buf, dir, strerror(errno));
	dfd = openat(pfd, name, how);
	if (dfd < 0 && errno == ENOENT && a->control)
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ENOENT,
			"no ledger directory '%s' (no job has used a GPU "
			"through libvgpu with it)", dir);
	else if (dfd < 0 && errno == ENOENT) {
		if (mkdirat(pfd, name, a->shared ? 0770 : 0700) == 0) {
			rc = settle_new_dir(pfd, name, dir, a, err, errlen);
			/* Not left half made (of the wrong group, for the
			 * next job to refuse): still empty, it goes. */
			if (rc)
				unlinkat(pfd, name, AT_REMOVEDIR);
		} else if (errno != EEXIST)
			rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
				"cannot create ledger directory '%s': %s",
				dir, strerror(errno));
		dfd = rc ? -1 : openat(pfd, name, how);
	}
	if (dfd < 0 && !rc)
		rc = dir_refused(pfd, name, dir, errno, err, errlen);
	close(pfd);
	if (!rc && fstat(dfd, &st) != 0)
		rc = vgpu__ledger_err(err, errlen, VGPU_LEDGER_ESYS,
			"cannot stat ledger directory '%s': %s", dir,
			strerror(errno));
	if (!rc)
		rc = check_dir(dir, &st, a, err, errlen);
	if (rc && dfd >= 0)
		close(dfd);
	return rc ? rc : dfd;
}

/* The ledger directory's descriptor (see open_dir), or a code. */
int vgpu__ledger_dir(const char *dir, const struct vgpu__trust *a, char *err,
		      size_t errlen)
{
	char buf[sizeof(((struct vgpu_ledger *)0)->path)];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(buf) - 80 || dir[0] != '/')
		return vgpu__ledger_err(err, errlen, VGPU_LEDGER_EINVAL,
			"ledger directory '%s': empty, too long or not "
			"absolute", dir);
	memcpy(buf, dir, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	return open_dir(buf, dir, a, err, errlen);
}
