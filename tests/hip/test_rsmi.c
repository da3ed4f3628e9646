/* test_rsmi.c - ROCm SMI's memory view on the simulated device
 * (sim/hip/smi.c), without and with libvgpu-hip.so: the device's numbers
 * without the shim; the slice's total and the tenant's usage with it, in
 * a process that uses no HIP at all (as rocm-smi), for a program linked
 * against librocm_smi64.so.1 and for one that dlopens it. A HIP job
 * (hip_job) holds the tenant's memory; at its exit the usage is 0 again.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024)

static char dir[] = "/tmp/vgpu-rsmi-test-XXXXXX";
static char env[2048];
static FILE *job;

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
	snprintf(env, sizeof(env), "env VGPU_SIM_STATE_DIR=%s/state "
		 "VGPU_SIM_MEMORY=1GiB LD_LIBRARY_PATH=%s VGPU_LEDGER_DIR=%s "
		 "VGPU_TENANT=h1", dir, VHIP_LIB_PATH, dir);
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Starts hip_job under the shim in a 128 MiB slice holding bytes (0:
 * nothing), and waits for its answer. */
static void job_start(unsigned long long bytes)
{
	char cmd[4096], path[256], line[256] = "";

	snprintf(path, sizeof(path), "%s/job.out", dir);
	snprintf(cmd, sizeof(cmd), "%s LD_PRELOAD=%s VGPU_MEMORY_LIMIT=128MiB "
		 "%s > %s", env, HIP_SHIM, HIP_JOB, path);
	job = popen(cmd, "w");
	cr_assert_not_null(job);
	fprintf(job, bytes ? "alloc %llu malloc\npid\n" : "pid\n", bytes);
	fflush(job);
	for (int i = 0; i < 3000 && !strstr(line, "pid"); i++) {
		FILE *f = fopen(path, "r");

		line[0] = '\0';
		if (f) {
			size_t n = fread(line, 1, sizeof(line) - 1, f);

			line[n] = '\0';
			fclose(f);
		}
		usleep(10000);
	}
	cr_assert(strstr(line, bytes ? "alloc 0" : "pid"), "job: %s", line);
}

static void job_exit(void)
{
	fprintf(job, "exit\n");
	cr_assert_eq(pclose(job), 0);
}

/* rsmi_probe (args: "" or "dlopen") with the shim and slice in with; its
 * device 0's total and usage. */
static void probe(const char *with, const char *args, uint64_t *total,
		  uint64_t *used)
{
	char cmd[4096], out[512];
	unsigned long long t, u;
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s %s %s %s", env, with, RSMI_PROBE, args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s: %s", cmd, out);
	cr_assert_eq(sscanf(out, "dev 0 total %llu used %llu", &t, &u), 2,
		     "%s", out);
	*total = t;
	*used = u;
}

static const char *shim(const char *limit)
{
	static char with[1024];

	snprintf(with, sizeof(with), "LD_PRELOAD=%s VGPU_MEMORY_LIMIT=%s",
		 HIP_SHIM, limit);
	return with;
}

TestSuite(rsmi, .init = setup, .fini = teardown, .timeout = 60);

Test(rsmi, without_the_shim_the_device)
{
	uint64_t total, used;

	probe("", "", &total, &used);
	cr_expect_eq(total, 1024 * MiB);
	cr_expect_eq(used, 0);
	job_start(100 * MiB);
	probe("", "", &total, &used);
	cr_expect_eq(total, 1024 * MiB);
	cr_expect_eq(used, 100 * MiB);
	probe("", "dlopen", &total, &used);
	cr_expect_eq(total, 1024 * MiB);
	cr_expect_eq(used, 100 * MiB);
	job_exit();
}

Test(rsmi, linked_sees_the_slice)
{
	uint64_t total, used;

	probe(shim("128MiB"), "", &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 0);
	job_start(100 * MiB);
	probe(shim("128MiB"), "", &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 100 * MiB);
	job_exit();
	probe(shim("128MiB"), "", &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 0, "the job's memory given back");
}

Test(rsmi, dlopen_sees_the_slice)
{
	uint64_t total, used;

	job_start(100 * MiB);
	probe(shim("128MiB"), "dlopen", &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 100 * MiB);
	job_exit();
	probe(shim("128MiB"), "dlopen", &total, &used);
	cr_expect_eq(used, 0);
}

/* ROCm's and DTK's ROCm SMI go by other names than Debian's (a SONAME
 * librocm_smi64.so.5, here opened by path): its handle is caught too. */
Test(rsmi, dlopen_by_another_name_sees_the_slice)
{
	uint64_t total, used;

	job_start(100 * MiB);
	probe(shim("128MiB"), "dlopen " RSMI_ROCM_LIB, &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 100 * MiB);
	job_exit();
}

/* The tenant's terms are the ledger's: a later process's own limit does
 * not change what it sees while the tenant has one. */
Test(rsmi, the_tenants_terms_win)
{
	uint64_t total, used;

	job_start(64 * MiB);
	probe(shim("512MiB"), "", &total, &used);
	cr_expect_eq(total, 128 * MiB);
	cr_expect_eq(used, 64 * MiB);
	job_exit();
}

/* No slice, or one larger than the device: the device's numbers. */
Test(rsmi, no_slice_the_device)
{
	uint64_t total, used;

	probe(shim("unlimited"), "", &total, &used);
	cr_expect_eq(total, 1024 * MiB);
	probe(shim("2GiB"), "dlopen", &total, &used);
	cr_expect_eq(total, 1024 * MiB);
	cr_expect_eq(used, 0);
}
