/* vgpu-run-env.c - where libvgpu.so is, LD_PRELOAD with it, and the
 * preload file (/etc/ld.so.preload) listing it.
 */
#include "vgpu-run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The installation layout, from meson (tools/meson.build). */
#ifndef VRUN_PREFIX
#define VRUN_PREFIX "/usr/local"
#endif
#ifndef VRUN_BINDIR
#define VRUN_BINDIR "bin"
#endif
#ifndef VRUN_LIBDIR
#define VRUN_LIBDIR "lib"
#endif

#define SHIM_NAME "libvgpu.so"
#define SIM_NAME "libcuda.so.1"

static const char *base_name(const char *p, size_t n)
{
	const char *b = p;

	for (size_t i = 0; i < n; i++)
		if (p[i] == '/')
			b = p + i + 1;
	return b;
}

/* Whether the entry p[0..n) is lib, or another file named libvgpu.so. */
static bool is_shim_entry(const char *p, size_t n, const char *lib)
{
	const char *b = base_name(p, n);
	size_t bl = n - (size_t)(b - p);

	return (n == strlen(lib) && memcmp(p, lib, n) == 0) ||
	       (bl == strlen(SHIM_NAME) && memcmp(b, SHIM_NAME, bl) == 0);
}

/* ---- finding the library ------------------------------------------------ */

/* <exe's directory>/<up to the prefix>: the exe's directory with as many
 * components dropped as VRUN_BINDIR has. */
static void prefix_of(const char *exe, char *out, size_t len)
{
	const char *slash = strrchr(exe, '/');
	size_t n = slash ? (size_t)(slash - exe) : 0;
	int ups = 1;

	for (const char *p = VRUN_BINDIR; *p; p++)
		ups += *p == '/' && p[1] && p[1] != '/';
	snprintf(out, len, "%.*s", (int)n, exe);
	for (int i = 0; i < ups; i++) {
		char *s = strrchr(out, '/');
		if (!s) {
			snprintf(out, len, "/");
			return;
		}
		*s = '\0';
	}
	if (!out[0])
		snprintf(out, len, "/");
}

static bool usable(const char *path, char *out, size_t len)
{
	char real[PATH_MAX];
	struct stat st;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    access(path, R_OK) != 0 || !realpath(path, real) ||
	    strlen(real) >= len)
		return false;
	memcpy(out, real, strlen(real) + 1);
	return true;
}

int vrun_find_library(const char *exe, bool sim, char *out, size_t len,
		      char *err, size_t errlen)
{
	const char *var = sim ? "VGPU_SIM_LIBRARY" : "VGPU_LIBRARY";
	const char *forced = getenv(var);
	const char *file = sim ? "vgpu-sim/" SIM_NAME : SHIM_NAME;
	char cand[3][VRUN_PATH_MAX + 64], prefix[VRUN_PATH_MAX];
	const char *slash = strrchr(exe, '/');
	int dirlen = slash ? (int)(slash - exe) : 0;

	if (forced) {
		if (forced[0] == '/' && usable(forced, out, len))
			return 0;
		snprintf(err, errlen, "%s=\"%s\" is not a readable file; "
			 "expected the absolute path of %s", var, forced,
			 sim ? SIM_NAME : SHIM_NAME);
		return -1;
	}
	prefix_of(exe, prefix, sizeof(prefix));
	snprintf(cand[0], sizeof(cand[0]), "%.*s/../%s", dirlen, exe,
		 sim ? "sim/" SIM_NAME : "intercept/" SHIM_NAME);
	if (VRUN_LIBDIR[0] == '/')
		snprintf(cand[1], sizeof(cand[1]), "%s/%s", VRUN_LIBDIR, file);
	else
		snprintf(cand[1], sizeof(cand[1]), "%s/%s/%s", prefix,
			 VRUN_LIBDIR, file);
	snprintf(cand[2], sizeof(cand[2]), "%s/%s/%s", VRUN_PREFIX,
		 VRUN_LIBDIR, file);
	for (int i = 0; i < 3; i++)
		if (usable(cand[i], out, len))
			return 0;
	snprintf(err, errlen, "%s not found: looked for %s, %s and %s; set %s "
		 "to its path", sim ? "the simulated driver" : SHIM_NAME,
		 cand[0], cand[1], cand[2], var);
	return -1;
}

/* ---- LD_PRELOAD ----------------------------------------------------------- */

int vrun_merge_preload(const char *existing, const char *lib, char *out,
		       size_t len)
{
	size_t used = strlen(lib);
	const char *p = existing ? existing : "";

	if (used + 1 > len)
		return -1;
	memcpy(out, lib, used + 1);
	while (*p) {
		size_t n;

		p += strspn(p, " :");
		n = strcspn(p, " :");
		if (n == 0)
			break;
		if (!is_shim_entry(p, n, lib)) {
			if (used + 1 + n + 1 > len)
				return -1;
			out[used++] = ':';
			memcpy(out + used, p, n);
			used += n;
			out[used] = '\0';
		}
		p += n;
	}
	return 0;
}

/* ---- the preload file ----------------------------------------------------- */

#define PRELOAD_FILE_MAX (64 * 1024)

/* What the line p[0..n) is: 2 it lists lib, 1 it is only another
 * libvgpu.so, 0 anything else. */
static int line_kind(const char *p, size_t n, const char *lib)
{
	size_t i = 0, entries = 0, shims = 0;

	if (n && p[0] == '#')
		return 0;
	while (i < n) {
		size_t k;

		while (i < n && strchr(" \t:", p[i]))
			i++;
		for (k = i; k < n && !strchr(" \t:", p[k]); k++)
			;
		if (k == i)
			break;
		entries++;
		if (k - i == strlen(lib) && memcmp(p + i, lib, k - i) == 0)
			return 2;
		shims += is_shim_entry(p + i, k - i, lib);
		i = k;
	}
	return entries == 1 && shims == 1 ? 1 : 0;
}

static int read_file(const char *file, char *buf, size_t cap, mode_t *mode,
		     char *err, size_t errlen)
{
	struct stat st;
	ssize_t r;
	size_t got = 0;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	buf[0] = '\0';
	*mode = 0644;
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(err, errlen, "cannot read %s: %s", file,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*mode = st.st_mode & 07777;
	while ((r = read(fd, buf + got, cap - 1 - got)) > 0)
		got += (size_t)r;
	close(fd);
	buf[got] = '\0';
	if (r < 0 || got + 1 >= cap) {
		snprintf(err, errlen, "cannot read %s: %s", file,
			 r < 0 ? strerror(errno) : "larger than 64 KiB");
		return -1;
	}
	return 0;
}

/* Builds the new contents of the file in out; returns 1 if it already
 * lists lib. */
static int edit_preload(const char *old, const char *lib, char *out,
			size_t cap)
{
	bool replaced = false;
	size_t used = 0;
	const char *p = old;

	out[0] = '\0';
	while (*p) {
		size_t n = strcspn(p, "\n");
		int kind = line_kind(p, n, lib);

		if (kind == 2)
			return 1;
		if (kind == 1 && !replaced) {
			used += (size_t)snprintf(out + used, cap - used, "%s\n",
						 lib);
			replaced = true;
		} else {
			used += (size_t)snprintf(out + used, cap - used,
						 "%.*s\n", (int)n, p);
		}
		p += n + (p[n] == '\n');
		if (used >= cap)
			return -1;
	}
	if (!replaced)
		used += (size_t)snprintf(out + used, cap - used, "%s\n", lib);
	return used >= cap ? -1 : 0;
}

static int write_all(int fd, const char *text)
{
	size_t len = strlen(text), done = 0;

	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

static void write_error(const char *file, char *err, size_t errlen)
{
	snprintf(err, errlen, "cannot write %s: %s%s", file, strerror(errno),
		 errno == EACCES || errno == EPERM || errno == EROFS
		 ? " (run it as root, e.g. in the image's Dockerfile)" : "");
}

/* A file that cannot be replaced (a bind mount) is rewritten. */
static int write_in_place(const char *file, const char *text, char *err,
			  size_t errlen)
{
	int fd = open(file, O_WRONLY | O_TRUNC | O_CLOEXEC);

	if (fd < 0 || write_all(fd, text) != 0 || close(fd) != 0) {
		write_error(file, err, errlen);
		return -1;
	}
	return 0;
}

static int write_atomically(const char *file, const char *text, mode_t mode,
			    char *err, size_t errlen)
{
	char tmp[VRUN_PATH_MAX + 32];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.vgpu-run.XXXXXX", file);
	fd = mkstemp(tmp);
	if (fd < 0 && access(file, W_OK) == 0)	/* a file we may write in a
						   directory we may not */
		return write_in_place(file, text, err, errlen);
	if (fd < 0)
		goto fail;
	if (write_all(fd, text) != 0)
		goto fail_unlink;
	if (fchmod(fd, mode) != 0 || fsync(fd) != 0 || close(fd) != 0) {
		fd = -1;
		goto fail_unlink;
	}
	fd = -1;
	if (rename(tmp, file) == 0)
		return 0;
	if (errno == EBUSY || errno == EXDEV) {
		unlink(tmp);	/* a mount point (a bind-mounted file) */
		return write_in_place(file, text, err, errlen);
	}
	goto fail_unlink;
fail_unlink:
	{
		int e = errno;
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		errno = e;
	}
fail:
	write_error(file, err, errlen);
	return -1;
}

int vrun_install_preload(const char *file, const char *lib, char *err,
			 size_t errlen)
{
	static char old[PRELOAD_FILE_MAX], text[PRELOAD_FILE_MAX + VRUN_PATH_MAX];
	mode_t mode;
	int rc;

	if (read_file(file, old, sizeof(old), &mode, err, errlen) != 0)
		return -1;
	rc = edit_preload(old, lib, text, sizeof(text));
	if (rc == 1)
		return 1;
	if (rc < 0) {
		snprintf(err, errlen, "%s: too large", file);
		return -1;
	}
	return write_atomically(file, text, mode, err, errlen);
}
