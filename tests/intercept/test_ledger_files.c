/* test_ledger_files.c - a ledger file the shim cannot use as it is. A
 * damaged one (empty, truncated, overwritten: the wrong size or no magic)
 * is replaced by a new ledger, with a warning naming the file and what was
 * wrong, and the job runs under its limit. Another layout version's, a
 * directory in its place, another GPU's: the device is refused with a
 * message naming the file and what is wrong with it
 * (CUDA_ERROR_INVALID_DEVICE on context creation), unless
 * VGPU_ON_ERROR=warn, which goes on without a limit; the file is left as it
 * was. No crash, no hang.
 *
 * Each case runs in a forked child (shimtest_run_child, 30 s deadline).
 */
#include "shimtest.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void setup(void)
{
	simtest_clean_env();
	shimtest_env("t-files", "16MiB");
}

TestSuite(ledger_files, .init = setup, .fini = shimtest_cleanup);

enum shape {
	EMPTY, TRUNCATED, HEADER_ONLY, OTHER_VERSION, OTHER_MAGIC, TEXT,
	DIRECTORY, OTHER_GPU, SHAPES
};

struct shape_case {
	const char *what;
	const char *needle;	/* in the message */
	bool replaced;		/* damaged: a new ledger takes its place */
};

static const struct shape_case shapes[SHAPES] = {
	[EMPTY] = { "empty", "is empty", true },
	[TRUNCATED] = { "truncated in its header", "truncated", true },
	[HEADER_ONLY] = { "a header and no records", "truncated", true },
	[OTHER_VERSION] = { "layout version 99", "layout version 99", false },
	[OTHER_MAGIC] = { "another magic", "not a libvgpu ledger", true },
	[TEXT] = { "text", "not a libvgpu ledger", true },
	[DIRECTORY] = { "a directory", "ledger", false },
	[OTHER_GPU] = { "another GPU's", "belongs to GPU", false },
};

static void header(struct vgpu_ledger_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = VGPU_LEDGER_MAGIC;
	h->layout_version = VGPU_LEDGER_VERSION;
	h->header_size = VGPU_LEDGER_HEADER_SIZE;
	h->file_size = VGPU_LEDGER_FILE_SIZE;
	h->max_tenants = VGPU_LEDGER_MAX_TENANTS;
	h->max_slots = VGPU_LEDGER_MAX_SLOTS;
	h->tenant_size = VGPU_LEDGER_TENANT_SIZE;
	h->slot_size = VGPU_LEDGER_SLOT_SIZE;
	h->tenants_offset = VGPU_LEDGER_TENANTS_OFFSET;
	h->slots_offset = VGPU_LEDGER_SLOTS_OFFSET;
	h->shares_offset = VGPU_LEDGER_SHARES_OFFSET;
	h->max_shares = VGPU_LEDGER_MAX_SHARES;
	h->share_size = VGPU_LEDGER_SHARE_SIZE;
	h->share_holders = VGPU_LEDGER_SHARE_HOLDERS;
	h->kind_count = VGPU_USAGE_COUNT;
	h->kind_slots = VGPU_LEDGER_KIND_SLOTS;
}

static void write_file(const char *path, const void *buf, size_t n,
		       size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, buf, n), (ssize_t)n);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* Puts a bad ledger of the given shape where device 0's would be. */
static void make_bad(enum shape s, const char *path, const char *uuid)
{
	static char text[VGPU_LEDGER_FILE_SIZE];
	struct vgpu_ledger_header h;

	header(&h);
	snprintf(h.gpu_uuid, sizeof(h.gpu_uuid), "%.63s", uuid);
	switch (s) {
	case EMPTY:
		write_file(path, "", 0, 0);
		break;
	case TRUNCATED:
		write_file(path, &h, 100, 100);
		break;
	case HEADER_ONLY:
		write_file(path, &h, sizeof(h), 8192);
		break;
	case OTHER_VERSION:
		h.layout_version = 99;
		write_file(path, &h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
		break;
	case OTHER_MAGIC:
		memcpy(&h.magic, "HAMICACH", 8);
		write_file(path, &h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
		break;
	case TEXT:
		for (size_t i = 0; i < sizeof(text); i++)
			text[i] = "not a ledger, just text\n"[i % 24];
		write_file(path, text, sizeof(text), sizeof(text));
		break;
	case DIRECTORY:
		cr_assert_eq(mkdir(path, 0755), 0);
		break;
	case OTHER_GPU:
		snprintf(h.gpu_uuid, sizeof(h.gpu_uuid), "GPU-someone-else");
		write_file(path, &h, sizeof(h), VGPU_LEDGER_FILE_SIZE);
		break;
	case SHAPES:
		break;
	}
}

static int print_uuid(void *arg)
{
	char u[64];

	(void)arg;
	if (cuInit(0) != CUDA_SUCCESS)
		return 2;
	shimtest_uuid(0, u, sizeof(u));
	printf("%s", u);
	return 0;
}

/* A context, another one, and allocations of 32 MiB and 1 byte, each
 * printed "name=CUresult". */
static int use_device(void *arg)
{
	CUcontext ctx, c2;
	CUdeviceptr x;
	CUresult r;

	if (arg)
		setenv("VGPU_ON_ERROR", "warn", 1);
	if (cuInit(0) != CUDA_SUCCESS)
		return 2;
	r = cuDevicePrimaryCtxRetain(&ctx, 0);
	printf("retain=%d\n", (int)r);
	printf("create=%d\n", (int)cuCtxCreate(&c2, NULL, 0, 0));
	if (r == CUDA_SUCCESS) {
		cuCtxSetCurrent(ctx);
		printf("alloc32=%d\n", (int)cuMemAlloc(&x, 32 * MIB));
		printf("alloc1=%d\n", (int)cuMemAlloc(&x, 1));
	}
	return 0;
}

static void file_id(const char *path, struct stat *st, char *sum, size_t n)
{
	int fd;

	memset(sum, 0, n);
	cr_assert_eq(lstat(path, st), 0, "%s is gone", path);
	if (!S_ISREG(st->st_mode))
		return;
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_geq(read(fd, sum, n), 0);
	close(fd);
}

static void run_shapes(bool warn)
{
	static char out[8192], before[VGPU_LEDGER_FILE_SIZE],
		after[VGPU_LEDGER_FILE_SIZE];
	char uuid[128], path[1024];
	struct stat st0, st1;

	cr_assert_eq(shimtest_run_child(print_uuid, NULL, uuid, sizeof(uuid)),
		     0, "%s", uuid);
	snprintf(path, sizeof(path), "%s/%s.v%d%s", shimtest_ledger_dir(),
		 uuid, VGPU_LEDGER_VERSION, VGPU_LEDGER_SUFFIX);
	for (int s = 0; s < SHAPES; s++) {
		const struct shape_case *c = &shapes[s];

		make_bad((enum shape)s, path, uuid);
		file_id(path, &st0, before, sizeof(before));
		int rc = shimtest_run_child(use_device, warn ? "warn" : NULL,
					    out, sizeof(out));
		cr_assert_eq(rc, 0, "%s: status %d: %s", c->what, rc, out);
		cr_assert_not_null(strstr(out, path), "%s: the message does not "
				   "name %s: %s", c->what, path, out);
		cr_assert_not_null(strstr(out, c->needle), "%s: no \"%s\" in: "
				   "%s", c->what, c->needle, out);
		if (c->replaced) {
			/* A new ledger, and the 16 MiB slice holds in it. */
			cr_assert_not_null(strstr(out, "replacing it with a new"),
					   "%s: %s", c->what, out);
			cr_assert_not_null(strstr(out, "retain=0\ncreate=0\n"
						  "alloc32=2\nalloc1=0\n"),
					   "%s: %s", c->what, out);
			file_id(path, &st1, after, sizeof(after));
			cr_assert(S_ISREG(st1.st_mode), "%s", c->what);
			cr_assert_neq(st0.st_ino, st1.st_ino, "%s: not replaced",
				      c->what);
			cr_assert_eq(st1.st_size, VGPU_LEDGER_FILE_SIZE, "%s",
				     c->what);
			unlink(path);
			continue;
		}
		if (warn)
			cr_assert_not_null(strstr(out, "retain=0\ncreate=0\n"
						  "alloc32=0\nalloc1=0\n"),
					   "%s, warn: %s", c->what, out);
		else
			cr_assert_not_null(strstr(out, "retain=101\n"
						  "create=101\n"),
					   "%s: not refused: %s", c->what, out);
		file_id(path, &st1, after, sizeof(after));
		cr_assert_eq(st0.st_size, st1.st_size, "%s: resized", c->what);
		cr_assert_eq(st0.st_ino, st1.st_ino, "%s: replaced", c->what);
		cr_assert_arr_eq(before, after, sizeof(before), "%s: rewritten",
				 c->what);
		if (S_ISDIR(st1.st_mode))
			rmdir(path);
		else
			unlink(path);
	}
}

Test(ledger_files, bad_files_refuse_the_device)
{
	run_shapes(false);
}

Test(ledger_files, bad_files_with_on_error_warn_go_on_unlimited)
{
	run_shapes(true);
}
