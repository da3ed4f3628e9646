/* test_hami.c - libvgpu in the environment the HAMi device plugin makes
 * (docs/kubernetes.md), on the simulated GPU.
 *
 * HAMi mounts the library at /usr/local/vgpu/libvgpu.so, preloads it
 * through /etc/ld.so.preload and sets CUDA_DEVICE_MEMORY_LIMIT_<i>,
 * CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE (a file in the
 * mounted directory) and friends; no VGPU_* variable. Writing
 * /etc/ld.so.preload needs root, so here the library is copied to
 * <dir>/usr/local/vgpu/libvgpu.so and preloaded with LD_PRELOAD, and the
 * simulated driver is found the way the real one is on a node: searched
 * for (here in LD_LIBRARY_PATH), not named.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtest.h"

static struct run_result r;

#define VGPU_DIR "usr/local/vgpu"
#define CACHE VGPU_DIR "/0b3e9c52-pod.cache"

static void copy_file(const char *from, const char *to)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The device plugin's environment and mounts for one container. */
static void hami_setup(void)
{
	runtest_setup("4GiB", 1);
	unsetenv("VGPU_LEDGER_DIR");	/* HAMi sets none of ours */
	cr_assert_eq(mkdir(runtest_path("usr"), 0755), 0);
	cr_assert_eq(mkdir(runtest_path("usr/local"), 0755), 0);
	cr_assert_eq(mkdir(runtest_path(VGPU_DIR), 0755), 0);
	copy_file(TEST_SHIM, runtest_path(VGPU_DIR "/libvgpu.so"));
	FILE *f = fopen(runtest_path(CACHE), "w");	/* HAMi's own file */
	cr_assert_not_null(f);
	fclose(f);
	setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "512m", 1);
	setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
	setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", runtest_path(CACHE), 1);
	setenv("LD_PRELOAD", runtest_path(VGPU_DIR "/libvgpu.so"), 1);
	setenv("LD_LIBRARY_PATH", TEST_SIM_DIR, 1);
}

TestSuite(hami, .init = hami_setup, .fini = runtest_cleanup, .timeout = 60);

/* The only active tenant of the ledger in HAMi's mounted directory. */
static const struct vgpu_ledger_tenant *the_tenant(const unsigned char *l)
{
	const struct vgpu_ledger_tenant *found = NULL;

	for (unsigned i = 0; i < VGPU_LEDGER_MAX_TENANTS; i++) {
		const struct vgpu_ledger_tenant *t = (const void *)(l +
			VGPU_LEDGER_TENANTS_OFFSET + (size_t)i * VGPU_LEDGER_TENANT_SIZE);

		if (t->state != VGPU_TENANT_ACTIVE)
			continue;
		cr_assert_null(found, "one tenant");
		found = t;
	}
	cr_assert_not_null(found);
	return found;
}

Test(hami, memory_limit_applies)
{
	struct stat st;

	RUN(&r, TEST_HELPER, "probe", "268435456", "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=536870912 devtotal=536870912"),
		  "cuMemGetInfo and cuDeviceTotalMem say 512 MiB: %s", r.out);
	/* 256 MiB of it is the context's (VGPU_CONTEXT_OVERHEAD's default):
	 * 256 MiB more fits, 512 MiB more is past the slice. */
	cr_assert(strstr(r.out, "free=268435456 a=0 b=2"), "%s", r.out);

	const unsigned char *l = runtest_ledger(runtest_path(VGPU_DIR), NULL);
	cr_assert_not_null(l, "the ledger is next to HAMi's cache file");
	runtest_unmap(l);
	cr_assert_eq(stat(runtest_path(CACHE), &st), 0);
	cr_assert_eq(st.st_size, 0, "HAMi's cache file is left alone");
	cr_assert_null(runtest_ledger(runtest_path("ledger"), NULL));
}

Test(hami, compute_share_applies)
{
	struct holder h;
	const unsigned char *l;
	const struct vgpu_ledger_tenant *t;

	HOLD(&h, TEST_HOLDER, "0");
	l = runtest_ledger(runtest_path(VGPU_DIR), NULL);
	cr_assert_not_null(l);
	t = the_tenant(l);
	cr_assert_eq(t->mem_limit, 512 * MIB);
	cr_assert_eq(t->compute.share_pct, 30);
	cr_assert_eq(t->compute.policy, 0, "unset policy: hard");
	runtest_unmap(l);
	runtest_release(&h);
}

Test(hami, policy_default_is_elastic)
{
	struct holder h;
	const unsigned char *l;

	setenv("GPU_CORE_UTILIZATION_POLICY", "default", 1);
	HOLD(&h, TEST_HOLDER, "0");
	l = runtest_ledger(runtest_path(VGPU_DIR), NULL);
	cr_assert_not_null(l);
	cr_assert_eq(the_tenant(l)->compute.share_pct, 30);
	cr_assert_eq(the_tenant(l)->compute.policy, 1, "elastic");
	runtest_unmap(l);
	runtest_release(&h);
}

Test(hami, oversubscribe_spills)
{
	setenv("CUDA_OVERSUBSCRIBE", "true", 1);
	RUN(&r, TEST_HELPER, "probe", "268435456", "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=536870912"), "%s", r.out);
	cr_assert(strstr(r.out, "a=0 b=0"), "past the slice, spilled: %s",
		  r.out);
}

Test(hami, disable_control)
{
	setenv("CUDA_DISABLE_CONTROL", "true", 1);
	RUN(&r, TEST_HELPER, "probe", "268435456", "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=4294967296"), "the whole GPU: %s",
		  r.out);
}

Test(hami, zero_means_no_limit)
{
	setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "0", 1);
	setenv("CUDA_DEVICE_SM_LIMIT", "0", 1);
	RUN(&r, TEST_HELPER, "probe", "268435456", "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=4294967296"), "%s", r.out);
}

Test(hami, bad_value_refuses_the_device)
{
	setenv("CUDA_DEVICE_SM_LIMIT", "30 percent", 1);
	RUN(&r, TEST_HELPER, "join");
	cr_assert(runtest_exited(&r, 2), "no device: %#x %s", r.status,
		  r.out);
	cr_assert(strstr(r.err, "CUDA_DEVICE_SM_LIMIT=\"30 percent\""), "%s",
		  r.err);
}

/* vgpu-run as the image's ENTRYPOINT, in the same container: it adds
 * nothing HAMi has not set, and the limits are the same. */
Test(hami, vgpu_run_entrypoint)
{
	char lib[PATH_MAX];

	cr_assert_not_null(realpath(runtest_path(VGPU_DIR "/libvgpu.so"), lib));
	setenv("VGPU_LIBRARY", lib, 1);
	setenv("LD_PRELOAD", lib, 1);
	RUN(&r, TEST_VGPU_RUN, "--", "/bin/sh", "-c",
	    "printf %s \"$LD_PRELOAD\"");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert_str_eq(r.out, lib, "the preload once");
	RUN(&r, TEST_VGPU_RUN, "--", TEST_HELPER, "probe", "268435456",
	    "536870912");
	cr_assert(runtest_exited(&r, 0), "%s", r.err);
	cr_assert(strstr(r.out, "total=536870912"), "%s", r.out);
	cr_assert(strstr(r.out, "a=0 b=2"), "%s", r.out);

	setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "512 MB", 1);
	RUN(&r, TEST_VGPU_RUN, "--", TEST_HELPER, "join");
	cr_assert(runtest_exited(&r, 65), "checked before the job starts");
	cr_assert(strstr(r.err, "vgpu-run: CUDA_DEVICE_MEMORY_LIMIT_0=\"512 "
			 "MB\""), "%s", r.err);
}
