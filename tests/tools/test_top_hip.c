/* test_top_hip.c - vgpu-top with a CUDA tenant and a HIP tenant on one
 * simulated device: one ledger (the device's UUID is the key of both
 * front ends), both tenants listed with their usage, and each process
 * with its front end ("cuda": libvgpu.so, "hip": libvgpu-hip.so). The
 * CUDA job is tools-holder, the HIP job hip_job; when both exit the
 * ledger holds nothing.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/vgpu-top-hip-XXXXXX";
static char out[1 << 16];

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* The common part of both jobs' environments. */
static const char *sim_env(void)
{
	static char e[1024];

	snprintf(e, sizeof(e), "env VGPU_SIM_STATE_DIR=%s/state "
		 "VGPU_SIM_MEMORY=1GiB VGPU_LEDGER_DIR=%s/ledger "
		 "VGPU_CONTEXT_OVERHEAD=0", dir, dir);
	return e;
}

/* Waits until file path holds want; false after 30 s. */
static bool wait_for(const char *path, const char *want)
{
	for (int i = 0; i < 3000; i++) {
		FILE *f = fopen(path, "r");
		size_t n = 0;

		if (f) {
			n = fread(out, 1, sizeof(out) - 1, f);
			fclose(f);
		}
		out[n] = '\0';
		if (strstr(out, want))
			return true;
		usleep(10000);
	}
	return false;
}

static FILE *start(const char *cmd_fmt, const char *name, const char *want)
{
	char cmd[4096], path[256];
	FILE *job;

	snprintf(path, sizeof(path), "%s/%s.out", dir, name);
	snprintf(cmd, sizeof(cmd), cmd_fmt, sim_env(), path);
	job = popen(cmd, "w");
	cr_assert_not_null(job);
	cr_assert(wait_for(path, want), "%s: %s", name, out);
	return job;
}

static void top_json(void)
{
	char cmd[1024];
	FILE *f;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s --dir %s/ledger --json --interval 0",
		 VGPU_TOP, dir);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	cr_assert_eq(pclose(f), 0);
}

/* The text of tenant t's process object in the JSON (its first field is
 * "slot", its tenant after it), cut at the object's end. */
static const char *process_of(const char *t, char *buf, size_t len)
{
	char want[64];
	const char *p, *start;

	snprintf(want, sizeof(want), "\"tenant\": \"%s\",\n", t);
	for (p = out; (p = strstr(p, want)); p++) {
		start = p;
		while (start > out && strncmp(start, "\"slot\"", 6) != 0)
			start--;
		if (strstr(p, "\"front_end\"") &&
		    strstr(p, "\"front_end\"") < strchr(p, '}')) {
			size_t n = (size_t)(strchr(p, '}') - start);

			snprintf(buf, len, "%.*s", (int)n, start);
			return buf;
		}
	}
	return NULL;
}

Test(top_hip, cuda_and_hip_tenants_side_by_side, .init = setup,
     .fini = teardown, .timeout = 60)
{
	char fmt[2048], cuda[2048], hip[2048];
	FILE *c, *h;

	snprintf(fmt, sizeof(fmt), "%%s LD_PRELOAD=%s VGPU_REAL_LIBCUDA=%s "
		 "VGPU_TENANT=c1 VGPU_MEMORY_LIMIT=256MiB %s 50000000 > %%s",
		 SHIM, SIM_LIBCUDA, HOLDER);
	c = start(fmt, "cuda", "ready");
	snprintf(fmt, sizeof(fmt), "%%s LD_LIBRARY_PATH=%s LD_PRELOAD=%s "
		 "VGPU_TENANT=h1 VGPU_MEMORY_LIMIT=128MiB %s > %%s",
		 VHIP_LIB_PATH, HIP_SHIM, HIP_JOB);
	h = start(fmt, "hip", "");
	fprintf(h, "alloc 104857600 malloc\npid\n");
	fflush(h);
	snprintf(fmt, sizeof(fmt), "%s/hip.out", dir);
	cr_assert(wait_for(fmt, "pid"), "hip: %s", out);

	top_json();
	cr_assert_eq(strstr(out, "\"uuid\"") ?
		     strstr(strstr(out, "\"uuid\"") + 1, "\"uuid\"") : NULL,
		     NULL, "one ledger for both: %s", out);
	cr_assert_not_null(process_of("c1", cuda, sizeof(cuda)), "%s", out);
	cr_assert_not_null(process_of("h1", hip, sizeof(hip)), "%s", out);
	cr_expect(strstr(cuda, "\"front_end\": \"cuda\""), "%s", cuda);
	cr_expect(strstr(hip, "\"front_end\": \"hip\""), "%s", hip);
	cr_expect(strstr(hip, "\"memory_used_bytes\": 104857600,"), "%s", hip);
	/* 50 MB, rounded up to the simulated driver's granularity. */
	cr_expect(strstr(cuda, "\"memory_used_bytes\": 5000"), "%s", cuda);
	cr_expect(strstr(cuda, "\"state\": \"alive\""), "%s", cuda);
	cr_expect(strstr(hip, "\"state\": \"alive\""), "%s", hip);

	fprintf(h, "exit\n");
	cr_assert_eq(pclose(h), 0);
	cr_assert_eq(pclose(c), 0);
	top_json();
	cr_expect_null(strstr(out, "\"front_end\""), "no process left: %s",
		       out);
	cr_expect(strstr(out, "\"memory_used_bytes\": 0,"), "%s", out);
}
