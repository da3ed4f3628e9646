/* ledger_test.h - helpers shared by the ledger's suites: a fresh ledger
 * directory per test, and removing it afterwards. */
#ifndef LEDGER_TEST_H
#define LEDGER_TEST_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ledger.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define UUID "GPU-0a1b2c3d-test"

static char test_dir[256];

static inline void ledger_dir_make(void)
{
	snprintf(test_dir, sizeof(test_dir), "/tmp/vgpu-ledger-test.XXXXXX");
	cr_assert_not_null(mkdtemp(test_dir));
}

static inline void ledger_dir_remove(void)
{
	char path[512];
	struct dirent *e;
	DIR *d = opendir(test_dir);

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", test_dir,
				 e->d_name);
			if (unlink(path) != 0)
				rmdir(path);
		}
	closedir(d);
	rmdir(test_dir);
}

/* Opens the test ledger and joins `tenant` with `limit`. */
static inline struct vgpu_ledger *ledger_open_ok(void)
{
	struct vgpu_ledger *l;
	char err[512];
	int rc = vgpu_ledger_open(test_dir, UUID, 80 * GiB, &l, err,
				  sizeof(err));

	cr_assert_eq(rc, 0, "open: %d %s", rc, err);
	return l;
}

/* Leaves s, which must hold nothing, and closes l. */
static inline void ledger_leave_empty(struct vgpu_ledger *l,
				      struct vgpu_slot *s)
{
	cr_assert_eq(vgpu_ledger_tenant_used(s), 0, "%llu bytes left",
		     (unsigned long long)vgpu_ledger_tenant_used(s));
	vgpu_ledger_leave(s);
	vgpu_ledger_close(l);
}

static inline struct vgpu_slot *ledger_join_ok(struct vgpu_ledger *l,
					       const char *tenant,
					       uint64_t limit)
{
	struct vgpu_slot *s;
	char err[512];
	int rc = vgpu_ledger_join(l, tenant, limit, getpid(), 0, &s, err,
				  sizeof(err));

	cr_assert_geq(rc, 0, "join: %d %s", rc, err);
	return s;
}

#endif
