/* test_ledger_file.c - files that are not usable ledgers: foreign,
 * truncated, empty (replaced, with a warning), of another layout version,
 * of another GPU, a directory in the file's place, a file in the
 * directory's place. Each refusal gets its exact error code and a message
 * naming the path, what was found and what was expected; none crashes or
 * waits. Then who may touch the ledger
 * (docs/ledger-abi.md, "Permissions"): the modes made, links refused,
 * directories and files of other users refused by owner, groups; the cases
 * with other users run children under setresuid and need root. */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ledger_test.h"

TestSuite(ledger_file, .init = ledger_dir_make, .fini = ledger_dir_remove);

static char path[1024];

static void ledger_path(void)
{
	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", test_dir, UUID,
		 VGPU_LEDGER_VERSION);
}

static void write_file(const void *data, size_t n, size_t size)
{
	int fd;

	ledger_path();
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0666);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	cr_assert_eq(pwrite(fd, data, n, 0), (ssize_t)n);
	close(fd);
}

/* A valid header, for the test to spoil one field of. */
static struct vgpu_ledger_header good_header(void)
{
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_ledger_header h = *vgpu_ledger_header(l);

	vgpu_ledger_close(l);
	ledger_path();
	unlink(path);
	return h;
}

static void expect_refused(int code, const char *msg1, const char *msg2)
{
	struct vgpu_ledger *l = (void *)1;
	char err[1024];
	int rc = vgpu_ledger_open(test_dir, UUID, GiB, &l, err, sizeof(err));

	cr_expect_eq(rc, code, "rc %d: %s", rc, err);
	cr_expect_null(l);
	cr_expect(strstr(err, msg1), "'%s' not in '%s'", msg1, err);
	if (msg2)
		cr_expect(strstr(err, msg2), "'%s' not in '%s'", msg2, err);
}

/* A damaged file at the name (overwritten, empty, truncated) is not refused
 * for ever: a job replaces it (by rename of a new file, as a move does) and
 * says so, naming the file and what was wrong (docs/ledger-abi.md, "When
 * the file is truncated, deleted or replaced"). */
static void expect_replaced(const char *msg)
{
	char log[4096] = "", tmpl[] = "/tmp/vgpu-ledger-log.XXXXXX";
	struct vgpu_ledger *l = NULL;
	struct vgpu_slot *s;
	struct stat before, after;
	char err[1024];
	int fd = mkstemp(tmpl), saved, rc;
	ssize_t n;

	cr_assert_geq(fd, 0);
	unlink(tmpl);
	cr_assert_eq(stat(path, &before), 0);
	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	rc = vgpu_ledger_open(test_dir, UUID, GiB, &l, err, sizeof(err));
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, log, sizeof(log) - 1, 0);
	close(fd);
	log[n > 0 ? n : 0] = '\0';
	cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
	cr_expect(strstr(log, path), "'%s' not in '%s'", path, log);
	cr_expect(strstr(log, msg), "'%s' not in '%s'", msg, log);
	cr_expect(strstr(log, "replacing it with a new, empty ledger"),
		  "%s", log);
	cr_assert_eq(stat(path, &after), 0);
	cr_expect_neq(after.st_ino, before.st_ino);
	cr_expect_eq(after.st_size, VGPU_LEDGER_FILE_SIZE);
	cr_expect_eq(after.st_mode & 07777, 0600);
	/* A usable ledger: a tenant joins and charges. */
	s = ledger_join_ok(l, "a", GiB);
	cr_expect_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, MiB), 0);
	vgpu_ledger_close(l);
}

Test(ledger_file, a_foreign_file_is_replaced)
{
	char junk[VGPU_LEDGER_FILE_SIZE];

	memset(junk, 'x', sizeof(junk));
	write_file(junk, sizeof(junk), sizeof(junk));
	expect_replaced("is not a libvgpu ledger: magic 0x7878787878787878, "
			"expected 0x4744454c55504756 (\"VGPULEDG\")");
}

Test(ledger_file, an_empty_file_is_replaced)
{
	write_file("", 0, 0);
	expect_replaced("is empty (0 bytes, expected 397312)");
}

Test(ledger_file, a_file_too_short_for_a_header_is_replaced)
{
	struct vgpu_ledger_header h;

	h = good_header();
	write_file(&h, 100, 100);
	expect_replaced("is truncated: too short for a header: 100, expected "
			"397312");
}

Test(ledger_file, a_truncated_file_is_replaced)
{
	struct vgpu_ledger_header h;

	h = good_header();
	write_file(&h, sizeof(h), 70000);
	expect_replaced("is truncated or padded: size 70000, expected 397312");
}

/* A replacer stopped while it holds a damaged file's replacement lock (a
 * byte past the layout) holds up the next job: a second at most in all,
 * however many GPUs' ledgers it damaged, and the job is not refused. */
Test(ledger_file, a_stopped_replacer_costs_one_wait_for_every_gpu,
     .timeout = 20)
{
	static const char *const uuids[] = { "GPU-stopped-0", "GPU-stopped-1",
					     "GPU-stopped-2" };
	char p[3][1024], err[1024], c;
	struct vgpu_ledger *l;
	struct timespec t0, t1;
	int ack[2], fd;
	pid_t pid;

	for (int i = 0; i < 3; i++) {
		snprintf(p[i], sizeof(p[i]), "%s/%s.v%d.ledger", test_dir,
			 uuids[i], VGPU_LEDGER_VERSION);
		fd = open(p[i], O_CREAT | O_TRUNC | O_WRONLY, 0600);
		cr_assert_geq(fd, 0);
		cr_assert_eq(ftruncate(fd, 4096), 0);	/* damaged */
		close(fd);
	}
	cr_assert_eq(pipe(ack), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {		/* holds every replacement lock, then stops */
		for (int i = 0; i < 3; i++) {
			struct flock fl = { .l_type = F_WRLCK,
					    .l_whence = SEEK_SET,
					    .l_start = VGPU_LEDGER_FILE_SIZE,
					    .l_len = 1 };

			fd = open(p[i], O_RDWR);
			if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
				_exit(1);
		}
		if (write(ack[1], "k", 1) != 1)
			_exit(1);
		raise(SIGSTOP);
		_exit(0);
	}
	cr_assert_eq(read(ack[0], &c, 1), 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(vgpu_ledger_open(test_dir, uuids[i], GiB, &l, err,
					      sizeof(err)), 0, "%s", err);
		vgpu_ledger_close(l);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ack[0]);
	close(ack[1]);
	/* One wait of a second for the first; the others only try. */
	cr_expect_lt((t1.tv_sec - t0.tv_sec) * 1000000000L +
		     (t1.tv_nsec - t0.tv_nsec), 1800000000L,
		     "three stopped replacements held this process up over "
		     "1.8 s");
	for (int i = 0; i < 3; i++) {
		struct stat st;

		cr_assert_eq(stat(p[i], &st), 0);
		cr_expect_eq(st.st_size, VGPU_LEDGER_FILE_SIZE, "%s replaced",
			     p[i]);
	}
}

Test(ledger_file, another_layout_version_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	h.layout_version = 7;
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "has layout version 7, expected 3");
}

Test(ledger_file, a_wrong_size_field_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	h.file_size = 4096;
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "header gives a size of 4096, expected 397312");
}

Test(ledger_file, other_layout_constants_are_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	h.max_slots = 2048;
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "layout constants differ from version 3's");
}

Test(ledger_file, another_gpus_file_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	snprintf(h.gpu_uuid, sizeof(h.gpu_uuid), "GPU-other");
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "belongs to GPU 'GPU-other', expected '" UUID "'");
}

Test(ledger_file, an_unterminated_uuid_does_not_overrun)
{
	struct vgpu_ledger_header h;

	h = good_header();
	memset(h.gpu_uuid, 'G', sizeof(h.gpu_uuid));
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path, "belongs to GPU 'GGG");
}

Test(ledger_file, a_directory_in_its_place_is_refused)
{
	ledger_path();
	cr_assert_eq(mkdir(path, 0755), 0);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "is a directory, expected a ledger file");
}

Test(ledger_file, a_file_in_the_directorys_place_is_refused)
{
	struct vgpu_ledger *l;
	char dir[512], err[1024];
	int fd;

	snprintf(dir, sizeof(dir), "%s/notadir", test_dir);
	fd = open(dir, O_CREAT | O_WRONLY, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_expect_eq(vgpu_ledger_open(dir, UUID, GiB, &l, err, sizeof(err)),
		     VGPU_LEDGER_ESYS);
	cr_expect(strstr(err, "notadir' is not a directory"), "%s", err);
}

Test(ledger_file, a_file_of_another_version_is_left_alone)
{
	char old[512], junk[64] = "an older layout";
	struct vgpu_ledger *l;
	int fd;

	snprintf(old, sizeof(old), "%s/%s.v0.ledger", test_dir, UUID);
	fd = open(old, O_CREAT | O_WRONLY, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	l = ledger_open_ok();
	cr_expect_neq(strcmp(vgpu_ledger_path(l), old), 0);
	vgpu_ledger_close(l);
}

Test(ledger_file, a_small_error_buffer_is_still_terminated)
{
	struct vgpu_ledger *l;
	char err[8];

	ledger_path();
	cr_assert_eq(mkdir(path, 0700), 0);
	memset(err, 'z', sizeof(err));
	cr_expect_eq(vgpu_ledger_open(test_dir, UUID, GiB, &l, err,
				      sizeof(err)), VGPU_LEDGER_EBADFILE);
	cr_expect_eq(err[7], '\0');
	cr_expect_eq(vgpu_ledger_open(test_dir, UUID, GiB, &l, NULL, 0),
		     VGPU_LEDGER_EBADFILE);
}

/* ---- who may touch the ledger ------------------------------------------ */

#define OTHER_UID	65534	/* nobody */
#define THIRD_UID	65533
#define TEST_GID	4242	/* a group of no user but the tests' */

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: it makes files of other users "
			     "(chown) and runs children as them (setresuid)");
}

static char sub[600];

/* <test_dir>/name, with test_dir reachable by the children. */
static const char *subdir(const char *name)
{
	cr_assert_eq(chmod(test_dir, 0755), 0);
	snprintf(sub, sizeof(sub), "%s/%s", test_dir, name);
	return sub;
}

static const char *file_in(const char *dir)
{
	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", dir, UUID,
		 VGPU_LEDGER_VERSION);
	return path;
}

static int open_in(const char *dir, const char *group, char *err,
		   size_t errlen)
{
	struct vgpu_ledger_access acc = { .group = group };
	struct vgpu_ledger *l = NULL;
	int rc = vgpu_ledger_open_with(dir, UUID, GiB, &acc, &l, err, errlen);

	if (rc == 0)
		vgpu_ledger_close(l);
	else
		cr_expect_null(l);
	return rc;
}

/* What a child's open said. */
struct outcome {
	int rc;
	char err[1024];
};

/* Opens the ledger in dir in a child running as uid (gid uid), with
 * TEST_GID as its one supplementary group when `member`. */
static struct outcome open_as(uid_t uid, bool member, const char *dir,
			      const char *group)
{
	struct outcome *o = mmap(NULL, sizeof(*o), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0), r;
	gid_t g = TEST_GID;
	int status;
	pid_t pid;

	cr_assert_neq(o, MAP_FAILED);
	o->rc = 99;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgroups(member ? 1 : 0, &g) != 0 ||
		    setresgid(uid, uid, uid) != 0 ||
		    setresuid(uid, uid, uid) != 0)
			_exit(1);
		o->rc = open_in(dir, group, o->err, sizeof(o->err));
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	r = *o;
	munmap(o, sizeof(*o));
	return r;
}

static void expect_has(const char *err, const char *what)
{
	cr_expect(strstr(err, what), "'%s' not in '%s'", what, err);
}

static struct stat stat_of(const char *p)
{
	struct stat st;

	cr_assert_eq(lstat(p, &st), 0, "%s", p);
	return st;
}

Test(ledger_file, made_private_whatever_the_umask)
{
	static const mode_t masks[] = { 0, 022, 077, 0777 };
	char dir[600], err[1024];
	mode_t old;

	for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/u%o", test_dir, masks[i]);
		old = umask(masks[i]);
		cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), 0, "%s",
			     err);
		umask(old);
		cr_expect_eq(stat_of(dir).st_mode & 07777, 0700, "%s", dir);
		cr_expect_eq(stat_of(file_in(dir)).st_mode & 07777, 0600,
			     "%s", path);
		cr_expect_eq(stat_of(path).st_uid, geteuid());
		unlink(path);
		rmdir(dir);
	}
}

Test(ledger_file, a_group_gets_0660_files_in_a_0770_directory)
{
	char dir[600], err[1024];
	struct group *gr;

	need_root();
	snprintf(dir, sizeof(dir), "%s/g", test_dir);
	cr_assert_eq(open_in(dir, "4242", err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(stat_of(dir).st_mode & 07777, 0770);
	cr_expect_eq(stat_of(dir).st_gid, TEST_GID);
	cr_expect_eq(stat_of(file_in(dir)).st_mode & 07777, 0660);
	cr_expect_eq(stat_of(path).st_gid, TEST_GID);
	/* By name: a group that is not root's own. */
	setgrent();
	while ((gr = getgrent()) && gr->gr_gid == getegid())
		;
	endgrent();
	if (!gr)
		return;
	snprintf(dir, sizeof(dir), "%s/byname", test_dir);
	cr_assert_eq(open_in(dir, gr->gr_name, err, sizeof(err)), 0, "%s",
		     err);
	cr_expect_eq(stat_of(file_in(dir)).st_gid, gr->gr_gid);
}

Test(ledger_file, an_unknown_group_is_refused)
{
	char err[1024];

	cr_expect_eq(open_in(test_dir, "no-such-group-here", err, sizeof(err)),
		     VGPU_LEDGER_EINVAL);
	expect_has(err, "VGPU_LEDGER_GROUP=no-such-group-here: no such group");
}

/* Creating a file for a group the user is not in fails with the real cause
 * (it once said strerror(0), "Success"). */
Test(ledger_file, a_group_the_user_is_not_in_says_why)
{
	struct outcome o;
	const char *dir;

	need_root();
	dir = subdir("mine");
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
	o = open_as(OTHER_UID, false, dir, "4242");
	cr_expect_eq(o.rc, VGPU_LEDGER_EPERM, "%s", o.err);
	expect_has(o.err, "to VGPU_LEDGER_GROUP gid 4242: Operation not "
		   "permitted (is ");
	expect_has(o.err, "uid 65534");
	cr_expect(!strstr(o.err, "Success"), "%s", o.err);
}

/* The same with a directory the job makes: refused, and not left behind
 * half made (its group not set) for the next job to refuse. */
Test(ledger_file, a_new_directory_whose_group_cannot_be_set_is_not_left)
{
	struct outcome o;
	char dir[600];
	const char *parent;
	struct stat st;

	need_root();
	parent = subdir("parent");
	cr_assert_eq(mkdir(parent, 0700), 0);
	cr_assert_eq(chown(parent, OTHER_UID, OTHER_UID), 0);
	snprintf(dir, sizeof(dir), "%s/new", parent);
	o = open_as(OTHER_UID, false, dir, "4242");
	cr_expect_neq(o.rc, 0, "%s", o.err);
	expect_has(o.err, "cannot set the mode and group of the new ledger "
		   "directory");
	cr_expect_neq(stat(dir, &st), 0, "%s was left behind", dir);
}

Test(ledger_file, a_symlink_in_the_files_place_is_refused_untouched)
{
	char target[600], buf[16] = "";
	struct stat st;
	int fd;

	snprintf(target, sizeof(target), "%s/target", test_dir);
	fd = open(target, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "secret", 6), 6);
	close(fd);
	ledger_path();
	cr_assert_eq(symlink(target, path), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "is a symbolic link (made by ");
	st = stat_of(target);
	cr_expect_eq(st.st_size, 6);
	cr_expect_eq(st.st_mode & 07777, 0600);
	fd = open(target, O_RDONLY);
	cr_expect_eq(read(fd, buf, sizeof(buf)), 6);
	close(fd);
	cr_expect_str_eq(buf, "secret");
	/* A dangling link: nothing is made where it points. */
	cr_assert_eq(unlink(target), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "is a symbolic link");
	cr_expect_neq(access(target, F_OK), 0);
}

Test(ledger_file, a_symlink_to_another_ledger_is_not_joined)
{
	char other[600], target[1100], err[1024];
	struct vgpu_ledger_header before;
	struct vgpu_ledger *l;

	snprintf(other, sizeof(other), "%s/private", test_dir);
	cr_assert_eq(vgpu_ledger_open(other, UUID, 8 * GiB, &l, err,
				      sizeof(err)), 0, "%s", err);
	before = *vgpu_ledger_header(l);
	vgpu_ledger_close(l);
	snprintf(target, sizeof(target), "%s", file_in(other));
	ledger_path();
	cr_assert_eq(symlink(target, path), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "symbolic link");
	cr_assert_eq(vgpu_ledger_open(other, UUID, 8 * GiB, &l, err,
				      sizeof(err)), 0, "%s", err);
	cr_expect_eq(memcmp(vgpu_ledger_header(l), &before, sizeof(before)), 0);
	vgpu_ledger_close(l);
	unlink(target);
	rmdir(other);
}

Test(ledger_file, a_symlink_in_the_directorys_place_is_refused)
{
	char real[600], link[600], slash[620], err[1024];
	struct vgpu_ledger *l;

	snprintf(real, sizeof(real), "%s/real", test_dir);
	snprintf(link, sizeof(link), "%s/link", test_dir);
	snprintf(slash, sizeof(slash), "%s/", link);
	cr_assert_eq(mkdir(real, 0700), 0);
	cr_assert_eq(symlink(real, link), 0);
	cr_expect_eq(vgpu_ledger_open(link, UUID, GiB, &l, err, sizeof(err)),
		     VGPU_LEDGER_EPERM);
	expect_has(err, "ledger directory '");
	expect_has(err, "/link' is a symbolic link (made by ");
	cr_expect_eq(vgpu_ledger_open(slash, UUID, GiB, &l, err, sizeof(err)),
		     VGPU_LEDGER_EPERM, "%s", err);
	cr_expect_neq(access(file_in(real), F_OK), 0, "nothing made in it");
	rmdir(real);
}

Test(ledger_file, a_directory_of_another_user_is_refused)
{
	const char *dir;
	char err[1024];

	need_root();
	dir = subdir("theirs");
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
	cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), VGPU_LEDGER_EPERM);
	expect_has(err, dir);
	expect_has(err, "uid 65534");
	expect_has(err, "mode 0755");
	expect_has(err, "VGPU_LEDGER_DIR");
	/* Sticky and open to all changes nothing: its owner is not ours. */
	cr_assert_eq(chmod(dir, 01777), 0);
	cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), VGPU_LEDGER_EPERM);
	expect_has(err, "uid 65534");
	cr_expect_neq(access(file_in(dir), F_OK), 0, "nothing made in it");
}

/* Only a trusted file is replaced: another user's damaged file is refused
 * and left as it is. */
Test(ledger_file, a_damaged_file_of_another_user_is_left_alone)
{
	struct stat before, after;

	need_root();
	write_file("", 0, 0);
	cr_assert_eq(chown(path, OTHER_UID, OTHER_UID), 0);
	cr_assert_eq(stat(path, &before), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "uid 65534");
	cr_assert_eq(stat(path, &after), 0);
	cr_expect_eq(after.st_ino, before.st_ino);
	cr_expect_eq(after.st_size, 0);
}

Test(ledger_file, a_file_of_another_user_is_refused)
{
	char err[1024];

	need_root();
	vgpu_ledger_close(ledger_open_ok());
	ledger_path();
	cr_assert_eq(chown(path, OTHER_UID, OTHER_UID), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "uid 65534");
	expect_refused(VGPU_LEDGER_EPERM, "VGPU_LEDGER_GROUP", NULL);
	/* A file of the ledger group's is shared by its members. */
	cr_assert_eq(chown(path, OTHER_UID, TEST_GID), 0);
	cr_assert_eq(chmod(path, 0660), 0);
	cr_expect_eq(open_in(test_dir, "4242", err, sizeof(err)), 0, "%s",
		     err);
}

/* The read-only view (NVML's, ROCm SMI's) believes what a job would join,
 * nothing else: another user's file is _EPERM, its figures unread; a
 * FIFO in the file's place is refused at once, never waited on. */
Test(ledger_file, a_view_believes_only_what_a_job_would_join, .timeout = 20)
{
	struct vgpu_ledger *l;
	struct vgpu_slot *s = NULL;
	uint64_t used = 7, limit = 7;
	char err[1024];

	need_root();
	l = ledger_open_ok();
	cr_assert_eq(vgpu_ledger_join(l, "t", GiB, getpid(), 0, &s, NULL, 0),
		     0);
	cr_assert_eq(vgpu_ledger_reserve(s, VGPU_USAGE_BUFFER, 4096), 0);
	cr_assert_eq(vgpu_ledger_peek_tenant(test_dir, UUID, NULL, "t", &used,
					     &limit, NULL, NULL, 0), 0);
	cr_expect_eq(used, 4096);
	cr_expect_eq(limit, GiB);
	ledger_path();
	cr_assert_eq(chown(path, OTHER_UID, OTHER_UID), 0);
	used = limit = 7;
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID, NULL, "t", &used,
					     &limit, NULL, err, sizeof(err)),
		     VGPU_LEDGER_EPERM);
	cr_expect_eq(used + limit, 14, "nothing read");
	cr_expect(strstr(err, path) && strstr(err, "is refused"), "%s", err);
	/* A group that does not exist: said, nothing read. */
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID,
					     "no-such-group-vgpu", "t", &used,
					     &limit, NULL, err, sizeof(err)),
		     VGPU_LEDGER_EINVAL);
	cr_expect(strstr(err, "no-such-group-vgpu"), "%s", err);
	cr_expect_eq(used + limit, 14, "nothing read");
	/* Its group named: shared by the group's members. */
	cr_assert_eq(chown(path, OTHER_UID, TEST_GID), 0);
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID, "4242", "t",
					     &used, &limit, NULL, NULL, 0), 0);
	cr_expect_eq(used, 4096);
	cr_assert_eq(chown(path, 0, 0), 0);
	cr_assert_eq(chmod(path, 0666), 0);
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID, NULL, "t", &used,
					     &limit, NULL, NULL, 0), VGPU_LEDGER_EPERM,
		     "every user may write it");
	vgpu_ledger_release(s, VGPU_USAGE_BUFFER, 4096);
	vgpu_ledger_leave(s);
	vgpu_ledger_close(l);
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(mkfifo(path, 0644), 0);
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID, NULL, "t", &used,
					     &limit, NULL, NULL, 0), VGPU_LEDGER_ESYS);
}

Test(ledger_file, root_in_a_container_uses_its_files)
{
	char dir[600], err[1024];
	int fd;

	need_root();
	/* HAMi's device plugin makes the directory 0777, not sticky. */
	snprintf(dir, sizeof(dir), "%s/usr/local/vgpu", test_dir);
	cr_assert_eq(open_in(dir, NULL, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(chmod(dir, 0777), 0);
	cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(stat_of(file_in(dir)).st_uid, 0);
	/* One made 0666 by an older libvgpu loses the world's write. */
	cr_assert_eq(chmod(path, 0666), 0);
	cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(stat_of(path).st_mode & 07777, 0664);
	fd = open(path, O_RDONLY);
	cr_expect_geq(fd, 0);
	close(fd);
}

Test(ledger_file, a_second_name_is_refused)
{
	char other[600];

	vgpu_ledger_close(ledger_open_ok());
	ledger_path();
	snprintf(other, sizeof(other), "%s/elsewhere", test_dir);
	cr_assert_eq(link(path, other), 0);
	expect_refused(VGPU_LEDGER_EPERM, path, "has 2 names");
}

/* A sticky, setgid directory that every user may write, of the ledger
 * group: a non-member could make a file of the group there, which the
 * members would trust. Refused, with the group named; the same directory
 * without the world's write is shared. */
Test(ledger_file, a_world_writable_setgid_group_directory_is_refused)
{
	const char *dir;
	char err[1024];

	need_root();
	dir = subdir("grp");
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chown(dir, 0, TEST_GID), 0);
	cr_assert_eq(chmod(dir, 03777), 0);
	cr_expect_eq(open_in(dir, "4242", err, sizeof(err)),
		     VGPU_LEDGER_EPERM, "%s", err);
	expect_has(err, dir);
	expect_has(err, "VGPU_LEDGER_GROUP=gid 4242");
	expect_has(err, "chmod o-w");
	cr_expect_neq(access(file_in(dir), F_OK), 0, "nothing made");
	cr_assert_eq(chmod(dir, 02770), 0);
	cr_expect_eq(open_in(dir, "4242", err, sizeof(err)), 0, "%s", err);
}

/* The read-only view reaches the file as a job does: a link in the
 * directory's place is not followed, so what it points at is not shown. */
Test(ledger_file, a_view_does_not_follow_a_linked_directory)
{
	char link_path[700];
	struct vgpu_ledger *l = ledger_open_ok();
	struct vgpu_slot *s = NULL;
	uint64_t used = 7, limit = 7;

	cr_assert_eq(vgpu_ledger_join(l, "t", GiB, getpid(), 0, &s, NULL, 0),
		     0);
	snprintf(link_path, sizeof(link_path), "%s/linked", test_dir);
	cr_assert_eq(symlink(test_dir, link_path), 0);
	cr_expect_eq(vgpu_ledger_peek_tenant(test_dir, UUID, NULL, "t", &used,
					     &limit, NULL, NULL, 0), 0);
	cr_expect_eq(limit, GiB);
	used = limit = 7;
	cr_expect_eq(vgpu_ledger_peek_tenant(link_path, UUID, NULL, "t", &used,
					     &limit, NULL, NULL, 0), VGPU_LEDGER_ESYS);
	cr_expect_eq(used + limit, 14, "nothing read");
	vgpu_ledger_leave(s);
	vgpu_ledger_close(l);
}

Test(ledger_file, others_need_the_sticky_bit_to_share_a_directory)
{
	struct outcome o;
	const char *dir;
	char err[1024];

	need_root();
	dir = subdir("all");
	cr_assert_eq(mkdir(dir, 0777), 0);
	cr_assert_eq(chmod(dir, 0777), 0);
	o = open_as(OTHER_UID, false, dir, NULL);
	cr_expect_eq(o.rc, VGPU_LEDGER_EPERM, "%s", o.err);
	expect_has(o.err, "every user may write it without the sticky bit");
	expect_has(o.err, "chmod +t");
	cr_assert_eq(chmod(dir, 01777), 0);
	o = open_as(OTHER_UID, false, dir, NULL);
	cr_expect_eq(o.rc, 0, "%s", o.err);
	cr_expect_eq(stat_of(file_in(dir)).st_uid, OTHER_UID);
	cr_expect_eq(stat_of(path).st_mode & 07777, 0600);
	/* Another user, root included, cannot join that user's file. */
	o = open_as(THIRD_UID, false, dir, NULL);
	cr_expect_eq(o.rc, VGPU_LEDGER_ESYS, "%s", o.err);
	expect_has(o.err, "Permission denied");
	expect_has(o.err, "uid 65534");
	expect_has(o.err, "VGPU_LEDGER_GROUP");
	cr_expect_eq(open_in(dir, NULL, err, sizeof(err)), VGPU_LEDGER_EPERM);
	expect_has(err, "uid 65534");
}

Test(ledger_file, a_group_shares_ledgers_between_its_users)
{
	struct outcome o;
	const char *dir;
	char err[1024];

	need_root();
	dir = subdir("team");
	cr_assert_eq(chmod(test_dir, 01777), 0);	/* for its maker */
	o = open_as(OTHER_UID, true, dir, "4242");
	cr_assert_eq(o.rc, 0, "%s", o.err);
	cr_expect_eq(stat_of(dir).st_uid, OTHER_UID);
	cr_expect_eq(stat_of(dir).st_mode & 07777, 0770);
	cr_expect_eq(stat_of(file_in(dir)).st_gid, TEST_GID);
	o = open_as(THIRD_UID, true, dir, "4242");
	cr_expect_eq(o.rc, 0, "%s", o.err);
	cr_expect_eq(open_in(dir, "4242", err, sizeof(err)), 0, "%s", err);
	/* Without the option, the other member's directory is refused. */
	o = open_as(THIRD_UID, true, dir, NULL);
	cr_expect_eq(o.rc, VGPU_LEDGER_EPERM, "%s", o.err);
	expect_has(o.err, "uid 65534");
	/* Not a member: no way in, and a file cannot be given to it. */
	o = open_as(THIRD_UID, false, dir, "4242");
	cr_expect_eq(o.rc, VGPU_LEDGER_ESYS, "%s", o.err);
	expect_has(o.err, "Permission denied");
	o = open_as(THIRD_UID, false, test_dir, "4242");
	cr_expect_eq(o.rc, VGPU_LEDGER_EPERM, "%s", o.err);
	expect_has(o.err, "a member?");
}

Test(ledger_file, a_file_every_user_may_write_is_refused)
{
	struct outcome o;
	const char *dir;
	char err[1024];

	need_root();
	dir = subdir("ww");
	cr_assert_eq(open_in(dir, NULL, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(chmod(dir, 01777), 0);
	cr_assert_eq(chmod(file_in(dir), 0666), 0);
	o = open_as(OTHER_UID, false, dir, NULL);
	cr_expect_eq(o.rc, VGPU_LEDGER_EPERM, "%s", o.err);
	expect_has(o.err, "every user may write it");
	expect_has(o.err, "chmod o-w");
	cr_expect_eq(stat_of(path).st_mode & 07777, 0666, "not its to fix");
}
