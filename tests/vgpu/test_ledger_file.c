/* test_ledger_file.c - files that are not usable ledgers: foreign,
 * truncated, empty, of another layout version, of another GPU, a directory
 * in the file's place, a file in the directory's place. Each gets its exact
 * error code and a message naming the path, what was found and what was
 * expected; none crashes or waits. */
#include <fcntl.h>
#include <sys/stat.h>

#include "ledger_test.h"

TestSuite(ledger_file, .init = ledger_dir_make, .fini = ledger_dir_remove);

static char path[512];

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

Test(ledger_file, a_foreign_file_is_refused)
{
	char junk[VGPU_LEDGER_FILE_SIZE];

	memset(junk, 'x', sizeof(junk));
	write_file(junk, sizeof(junk), sizeof(junk));
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		"is not a libvgpu ledger: magic 0x7878787878787878, expected "
		"0x4744454c55504756 (\"VGPULEDG\")");
}

Test(ledger_file, an_empty_file_is_refused)
{
	write_file("", 0, 0);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "is empty (0 bytes, expected 397312)");
}

Test(ledger_file, a_file_too_short_for_a_header_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	write_file(&h, 100, 100);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		"is truncated: too short for a header: 100, expected 397312");
}

Test(ledger_file, a_truncated_file_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	write_file(&h, sizeof(h), 70000);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "is truncated or padded: size 70000, expected 397312");
}

Test(ledger_file, another_layout_version_is_refused)
{
	struct vgpu_ledger_header h;

	h = good_header();
	h.layout_version = 7;
	write_file(&h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
	expect_refused(VGPU_LEDGER_EBADFILE, path,
		       "has layout version 7, expected 2");
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
		       "layout constants differ from version 2's");
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

	write_file("", 0, 0);
	memset(err, 'z', sizeof(err));
	cr_expect_eq(vgpu_ledger_open(test_dir, UUID, GiB, &l, err,
				      sizeof(err)), VGPU_LEDGER_EBADFILE);
	cr_expect_eq(err[7], '\0');
	cr_expect_eq(vgpu_ledger_open(test_dir, UUID, GiB, &l, NULL, 0),
		     VGPU_LEDGER_EBADFILE);
}
