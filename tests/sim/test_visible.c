/* test_visible.c - CUDA_VISIBLE_DEVICES: indices and UUIDs (whole or a
 * unique prefix) choose and order the physical devices; the list ends at
 * the first entry naming no device; each ordinal is its physical device
 * (UUID, PCI bus id, state file).
 *
 * cuInit reads the variable once per process, so each case runs in a forked
 * child that reports what it sees through a pipe.
 */
#include "simtest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(visible, .init = simtest_clean_env, .fini = simtest_remove_state);

static void uuid_string(const CUuuid *u, char *out)
{
	const unsigned char *b = (const unsigned char *)u->bytes;

	sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		"%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
		b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* In the child: "ERR <n>" or "<count>" then " <physical>=<uuid>" per
 * ordinal (the physical device from the PCI bus id). */
static void report(int fd)
{
	char buf[1024], uuid[64];
	int n = 0, len, bus;
	CUresult rc = cuInit(0);
	CUuuid u;

	if (rc != CUDA_SUCCESS) {
		len = snprintf(buf, sizeof(buf), "ERR %d", (int)rc);
	} else {
		cuDeviceGetCount(&n);
		len = snprintf(buf, sizeof(buf), "%d", n);
		for (int i = 0; i < n; i++) {
			cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
			cuDeviceGetUuid(&u, i);
			uuid_string(&u, uuid);
			len += snprintf(buf + len, sizeof(buf) - (size_t)len,
					" %d=%s", bus - 0x10, uuid);
		}
	}
	if (write(fd, buf, (size_t)len) < 0)
		_exit(3);
}

/* What a process sees with CUDA_VISIBLE_DEVICES=cvd (NULL: unset). */
static void seen(const char *cvd, char *out, size_t len)
{
	int p[2], status;
	ssize_t n;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		if (cvd)
			setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
		report(p[1]);
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], out, len - 1);
	close(p[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	out[n > 0 ? n : 0] = '\0';
}

/* Physical device d's UUID string, from a process seeing all devices. */
static void physical_uuid(int d, char *out)
{
	char all[1024], key[8];
	const char *at;

	seen(NULL, all, sizeof(all));
	snprintf(key, sizeof(key), " %d=", d);
	at = strstr(all, key);
	cr_assert_not_null(at, "%s", all);
	memcpy(out, at + strlen(key), 40);
	out[40] = '\0';
}

static void expect(const char *cvd, const char *want_prefix)
{
	char got[1024];

	seen(cvd, got, sizeof(got));
	cr_assert_eq(strncmp(got, want_prefix, strlen(want_prefix)), 0,
		     "CUDA_VISIBLE_DEVICES=\"%s\": got \"%s\", want \"%s...\"",
		     cvd ? cvd : "(unset)", got, want_prefix);
}

static void three_devices(void)
{
	setenv("VGPU_SIM_DEVICES", "3", 1);
	simtest_env();
}

Test(visible, unset_shows_all)
{
	three_devices();
	expect(NULL, "3 0=GPU-");
}

Test(visible, index_form_orders)
{
	char want[256], u2[48], u0[48];

	three_devices();
	physical_uuid(2, u2);
	physical_uuid(0, u0);
	snprintf(want, sizeof(want), "2 2=%s 0=%s", u2, u0);
	expect("2,0", want);
	expect(" 2 , 0 ", want);
	expect("1", "1 1=");
}

Test(visible, invalid_entry_truncates)
{
	three_devices();
	expect("1,7,0", "1 1=");
	expect("1,1,0", "1 1=");
	expect("0,abc,1", "1 0=");
	expect("0,-1,1", "1 0=");
	expect("2,,1", "1 2=");
	expect("0,1x", "1 0=");
	expect("MIG-1234,0", "ERR 100");
	expect("9", "ERR 100");
	expect("", "ERR 100");
	expect("-1", "ERR 100");
}

Test(visible, uuid_forms)
{
	char u1[48], u2[48], cvd[256], want[256];

	three_devices();
	physical_uuid(1, u1);
	physical_uuid(2, u2);
	snprintf(cvd, sizeof(cvd), "%s,0", u1);
	snprintf(want, sizeof(want), "2 1=%s 0=", u1);
	expect(cvd, want);
	/* A prefix one device has, in any case. */
	snprintf(cvd, sizeof(cvd), "%.12s", u2);
	for (char *c = cvd + 4; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c = (char)(*c - 'a' + 'A');
	snprintf(want, sizeof(want), "1 2=%s", u2);
	expect(cvd, want);
	/* "GPU-" alone fits all three: ambiguous, so nothing is visible. */
	expect("GPU-", "ERR 100");
	expect("GPU-zzzz,0", "ERR 100");
	snprintf(cvd, sizeof(cvd), "%sff", u1);
	expect(cvd, "ERR 100");
}

/* Ordinal 0 under CUDA_VISIBLE_DEVICES=2 is physical device 2: its state
 * file, shared with a process seeing all devices. */
Test(visible, ordinal_uses_physical_state)
{
	CUdeviceptr p;
	size_t fr = 0, total = 0;
	char path[600];
	const char *dir;
	struct stat st;
	CUdevice d;
	int status;
	pid_t pid;

	setenv("VGPU_SIM_DEVICES", "3", 1);
	setenv("CUDA_VISIBLE_DEVICES", "2", 1);
	dir = simtest_env();
	simtest_init_shared();
	CU_ASSERT(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
	CU_OK(cuMemAlloc(&p, 5 * MIB));
	snprintf(path, sizeof(path), "%s/dev2.state", dir);
	cr_assert_eq(stat(path, &st), 0, "%s", path);
	snprintf(path, sizeof(path), "%s/dev0.state", dir);
	cr_assert_neq(stat(path, &st), 0, "%s exists", path);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		CUcontext ctx;
		unsetenv("CUDA_VISIBLE_DEVICES");
		if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 2) ||
		    cuCtxSetCurrent(ctx) || cuMemGetInfo(&fr, &total))
			_exit(1);
		_exit(fr == SIMTEST_MEMORY - 5 * MIB ? 0 : 2);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "child step %d", WEXITSTATUS(status));
	CU_OK(cuMemFree(p));
}
