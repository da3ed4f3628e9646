/* fuzz_ledger.c - libFuzzer target: attaching to a ledger file whose bytes
 * the input controls (vgpu_ledger_open, then the operations that read what
 * the file holds: peek, reclaim, join, reserve, release, leave).
 *
 * Input: byte 0 picks how the file is made, byte 1 which operations run
 * and with what, the rest is data:
 *   mode 0: the file is the data, verbatim (sizes, types, short headers);
 *   mode 1: the data overwrites the start of a valid ledger (the header);
 *   mode 2: the data is a list of patches applied to a valid ledger, each
 *           a 4-byte little-endian offset (modulo the file size), a length
 *           byte and that many bytes (tenant and slot records).
 * The valid ledger is made once, at start, by vgpu_ledger_open itself, so
 * the seeds (corpus/fuzz_ledger) stay a few bytes long.
 */
#include "ledger.h"
#include "ledger_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FUZZ_UUID	"GPU-fuzz-0"
#define FUZZ_TENANT	"fuzz"

enum { FUZZ_RAW, FUZZ_HEADER, FUZZ_PATCH, FUZZ_MODES };

/* Operation flags (byte 1). */
#define OP_RECLAIM	0x01
#define OP_JOIN		0x02
#define OP_SECOND	0x04	/* a second joiner, under a file-given name */
#define OP_LIMIT	0x08	/* join with a 1 MiB limit, not unlimited */
#define OP_KIND_SHIFT	4	/* the top nibble: the usage kind to use */

/* The ledger's contract: no call waits more than about a second
 * (VGPU_LEDGER_LOCK_TIMEOUT_NS); a call past this is a finding. */
#define FUZZ_CALL_MAX_NS	(3 * VGPU_LEDGER_LOCK_TIMEOUT_NS)

static char fuzz_dir[64];
static char fuzz_path[256];
static uint8_t *fuzz_template;	/* a valid ledger, VGPU_LEDGER_FILE_SIZE */
static uint8_t *fuzz_file;	/* the file being built */

static void fuzz_cleanup(void)
{
	unlink(fuzz_path);
	rmdir(fuzz_dir);
}

/* Makes the directory and the valid ledger all inputs start from. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");
	struct vgpu_ledger *l;
	char err[256];
	int fd;

	(void)argc;
	(void)argv;
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/vgpu-fuzz-XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp ? tmp : "/tmp");
	if (!mkdtemp(fuzz_dir) ||
	    vgpu_ledger_open(fuzz_dir, FUZZ_UUID, 80ull << 30, &l, err,
			     sizeof(err)) != 0) {
		fprintf(stderr, "fuzz_ledger: cannot make a ledger in %s: %s\n",
			fuzz_dir, err);
		exit(1);
	}
	snprintf(fuzz_path, sizeof(fuzz_path), "%s", vgpu_ledger_path(l));
	vgpu_ledger_close(l);
	fuzz_template = malloc(VGPU_LEDGER_FILE_SIZE);
	fuzz_file = malloc(VGPU_LEDGER_FILE_SIZE);
	fd = open(fuzz_path, O_RDONLY);
	if (!fuzz_template || !fuzz_file || fd < 0 ||
	    pread(fd, fuzz_template, VGPU_LEDGER_FILE_SIZE, 0) !=
		    (ssize_t)VGPU_LEDGER_FILE_SIZE) {
		fprintf(stderr, "fuzz_ledger: cannot read %s\n", fuzz_path);
		exit(1);
	}
	close(fd);
	atexit(fuzz_cleanup);
	return 0;
}

/* Builds the file's bytes from the input; returns their length. */
static size_t fuzz_build(int mode, const uint8_t *d, size_t n)
{
	size_t off, len;

	if (mode == FUZZ_RAW) {
		if (n > VGPU_LEDGER_FILE_SIZE + 64)
			n = VGPU_LEDGER_FILE_SIZE + 64;
		memset(fuzz_file, 0, VGPU_LEDGER_FILE_SIZE);
		memcpy(fuzz_file, d, n < VGPU_LEDGER_FILE_SIZE ?
		       n : VGPU_LEDGER_FILE_SIZE);
		return n;	/* past the buffer: zeros, see fuzz_write */
	}
	memcpy(fuzz_file, fuzz_template, VGPU_LEDGER_FILE_SIZE);
	if (mode == FUZZ_HEADER) {
		memcpy(fuzz_file, d, n < VGPU_LEDGER_FILE_SIZE ?
		       n : VGPU_LEDGER_FILE_SIZE);
		return VGPU_LEDGER_FILE_SIZE;
	}
	while (n >= 5) {
		off = ((size_t)d[0] | (size_t)d[1] << 8 | (size_t)d[2] << 16 |
		       (size_t)d[3] << 24) % VGPU_LEDGER_FILE_SIZE;
		len = d[4];
		d += 5;
		n -= 5;
		if (len > n)
			len = n;
		if (len > VGPU_LEDGER_FILE_SIZE - off)
			len = VGPU_LEDGER_FILE_SIZE - off;
		memcpy(fuzz_file + off, d, len);
		d += len;
		n -= len;
	}
	return VGPU_LEDGER_FILE_SIZE;
}

static int fuzz_write(size_t len)
{
	size_t body = len < VGPU_LEDGER_FILE_SIZE ? len : VGPU_LEDGER_FILE_SIZE;
	int fd = open(fuzz_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		      0666);

	if (fd < 0)
		return -1;
	if (write(fd, fuzz_file, body) != (ssize_t)body ||
	    ftruncate(fd, (off_t)len) != 0) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The name in tenant record 0 of the file, cut to a valid C string. */
static void fuzz_file_tenant(char *name)
{
	const struct vgpu_ledger_tenant *t = (const void *)
		(fuzz_file + VGPU_LEDGER_TENANTS_OFFSET);

	memcpy(name, t->name, VGPU_LEDGER_NAME_MAX);
	name[VGPU_LEDGER_NAME_MAX - 1] = '\0';
}

static uint64_t fuzz_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Aborts when the call that started at t0 waited too long. */
static void fuzz_bounded(uint64_t t0, const char *call)
{
	uint64_t ns = fuzz_now() - t0;

	if (ns > FUZZ_CALL_MAX_NS) {
		fprintf(stderr, "fuzz_ledger: %s took %llu ms\n", call,
			(unsigned long long)(ns / 1000000));
		abort();
	}
}

/* Stops at the first timeout: that call kept the bound (a file can name
 * a lock owner that looks alive), the next ones would wait as long. */
static void fuzz_slot_ops(struct vgpu_slot *s, int kind)
{
	uint64_t t0 = fuzz_now();
	int rc = vgpu_ledger_reserve(s, kind, 4096);

	fuzz_bounded(t0, "reserve");
	if (rc == VGPU_LEDGER_ETIMEDOUT)
		return;
	vgpu_ledger_reserve(s, kind, UINT64_MAX / 2);
	vgpu_ledger_charge(s, kind, 1 << 20);
	vgpu_ledger_release(s, kind, 4096);
	vgpu_ledger_set_spill_limit(s, 1 << 20);
	vgpu_ledger_reserve(s, VGPU_USAGE_SPILLED, 8192);
	vgpu_ledger_tenant_used(s);
	vgpu_ledger_tenant_limit(s);
	vgpu_ledger_tenant_usage(s, kind);
	vgpu_ledger_slot_usage(s, kind);
}

static void fuzz_ops(struct vgpu_ledger *l, unsigned ops, const char *other)
{
	int kind = (int)(ops >> OP_KIND_SHIFT) % VGPU_USAGE_COUNT;
	uint64_t limit = ops & OP_LIMIT ? 1 << 20 : VGPU_LEDGER_UNLIMITED;
	struct vgpu_slot *s = NULL, *s2 = NULL;
	uint64_t t0 = fuzz_now();
	char err[512];
	int rc;

	if (ops & OP_RECLAIM) {
		vgpu_ledger_reclaim(l);
		fuzz_bounded(t0, "reclaim");
	}
	if (!(ops & OP_JOIN))
		return;
	t0 = fuzz_now();
	rc = vgpu_ledger_join(l, FUZZ_TENANT, limit, getpid(), 0, &s, err,
			      sizeof(err));
	fuzz_bounded(t0, "join");
	if (rc < 0)
		return;
	fuzz_slot_ops(s, kind);
	if (ops & OP_SECOND &&
	    vgpu_ledger_join(l, other, limit / 2, getpid(), 0, &s2, err,
			     sizeof(err)) >= 0) {
		fuzz_slot_ops(s2, kind);
		vgpu_ledger_leave(s2);
	}
	t0 = fuzz_now();
	vgpu_ledger_leave(s);
	fuzz_bounded(t0, "leave");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vgpu_ledger *l;
	uint64_t used, limit;
	uint32_t share;
	char err[512], other[VGPU_LEDGER_NAME_MAX];
	size_t len;

	if (size < 2)
		return 0;
	len = fuzz_build(data[0] % FUZZ_MODES, data + 2, size - 2);
	if (fuzz_write(len) != 0)
		return 0;
	fuzz_file_tenant(other);
	vgpu_ledger_peek_tenant(fuzz_dir, FUZZ_UUID, NULL, FUZZ_TENANT, &used,
				&limit, &share, err, sizeof(err));
	vgpu_ledger_peek_tenant(fuzz_dir, FUZZ_UUID, NULL, other, &used,
				&limit, NULL, NULL, 0);
	if (vgpu_ledger_open(fuzz_dir, FUZZ_UUID, 1 << 30, &l, err,
			     sizeof(err)) == 0) {
		vgpu_ledger_header(l);
		fuzz_ops(l, data[1], other);
		vgpu_ledger_close(l);
	}
	return 0;
}
