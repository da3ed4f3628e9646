/* stub_linked.c - a driver-API program built as any CUDA program is: against
 * cuda.h, linked with the toolkit's stub libcuda.so (-lcuda). Run with the
 * simulator's directory on LD_LIBRARY_PATH, it must run on the simulator.
 *
 * Usage: sim-stub-linked [OWN_CUBIN]. Allocates 1 MiB blocks until
 * CUDA_ERROR_OUT_OF_MEMORY, round-trips data, and with a cubin given loads
 * it, launches its user_scale kernel and times it with events. Exits 0 when
 * every step did what the driver API documents, 1 otherwise.
 *
 * Environment (set by meson): VGPU_SIM_MEMORY, VGPU_SIM_KERNEL_NS. The
 * program makes its own VGPU_SIM_STATE_DIR, so that it shares no device.
 */
#include <cuda.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1u << 20)

static char state_dir[256];

static void remove_state(void)
{
	char path[512];
	struct dirent *de;
	DIR *d = opendir(state_dir);

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, "dev", 3) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", state_dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(state_dir);
}

static int check(CUresult rc, CUresult want, const char *what, int line)
{
	const char *got_name = "?", *want_name = "?";

	if (rc == want)
		return 0;
	cuGetErrorName(rc, &got_name);
	cuGetErrorName(want, &want_name);
	fprintf(stderr, "stub_linked.c:%d: %s: %s, want %s\n", line, what,
		got_name ? got_name : "?", want_name ? want_name : "?");
	return 1;
}

#define CHECK(call, want) \
	do { if (check((call), (want), #call, __LINE__)) return 1; } while (0)
#define OK(call) CHECK(call, CUDA_SUCCESS)
#define FAIL_IF(cond, ...) \
	do { if (cond) { fprintf(stderr, __VA_ARGS__); return 1; } } while (0)

static int fill_until_oom(void)
{
	static CUdeviceptr blocks[1 << 14];
	size_t total, free_b, n = 0;
	CUresult rc;

	OK(cuDeviceTotalMem(&total, 0));
	while ((rc = cuMemAlloc(&blocks[n], MIB)) == CUDA_SUCCESS)
		FAIL_IF(++n == sizeof(blocks) / sizeof(blocks[0]),
			"no CUDA_ERROR_OUT_OF_MEMORY after %zu MiB\n", n);
	CHECK(rc, CUDA_ERROR_OUT_OF_MEMORY);
	FAIL_IF(n != total / MIB, "%zu MiB allocated of %zu MiB\n", n,
		total / MIB);
	OK(cuMemGetInfo(&free_b, &total));
	FAIL_IF(free_b != 0, "%zu bytes free when full\n", free_b);
	for (size_t i = 0; i < n; i++)
		OK(cuMemFree(blocks[i]));
	OK(cuMemGetInfo(&free_b, &total));
	FAIL_IF(free_b != total, "%zu of %zu bytes free after freeing\n",
		free_b, total);
	printf("allocated %zu MiB of %zu MiB, then CUDA_ERROR_OUT_OF_MEMORY\n",
	       n, total / MIB);
	return 0;
}

static int round_trip(void)
{
	static unsigned char in[MIB], out[MIB];
	CUdeviceptr a, b;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 7 + (i >> 12));
	OK(cuMemAlloc(&a, sizeof(in)));
	OK(cuMemAlloc(&b, sizeof(in)));
	OK(cuMemcpyHtoD(a, in, sizeof(in)));
	OK(cuMemcpyDtoD(b, a, sizeof(in)));
	OK(cuMemcpyDtoH(out, b, sizeof(out)));
	FAIL_IF(memcmp(in, out, sizeof(in)) != 0, "data changed in a round trip\n");
	OK(cuMemFree(a));
	OK(cuMemFree(b));
	printf("1 MiB round trip host -> device -> device -> host intact\n");
	return 0;
}

static int launch_timed(const char *cubin)
{
	const char *env = getenv("VGPU_SIM_KERNEL_NS");
	float want_ms = env ? (float)atof(env) / 1e6f : 0.0f, ms = -1.0f;
	CUdeviceptr p;
	float scale = 2.0f;
	int n = 256;
	void *params[] = { &p, &scale, &n };
	CUmodule m;
	CUfunction f;
	CUevent start, end;

	OK(cuModuleLoad(&m, cubin));
	OK(cuModuleGetFunction(&f, m, "user_scale"));
	OK(cuMemAlloc(&p, n * sizeof(float)));
	OK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	OK(cuEventCreate(&end, CU_EVENT_DEFAULT));
	OK(cuEventRecord(start, NULL));
	OK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	OK(cuEventRecord(end, NULL));
	OK(cuEventSynchronize(end));
	OK(cuEventElapsedTime(&ms, start, end));
	FAIL_IF(ms < want_ms, "kernel took %.3f ms, want at least %.3f ms\n",
		(double)ms, (double)want_ms);
	OK(cuEventDestroy(start));
	OK(cuEventDestroy(end));
	OK(cuMemFree(p));
	OK(cuModuleUnload(m));
	printf("user_scale ran for %.3f ms (VGPU_SIM_KERNEL_NS %s)\n", (double)ms,
	       env ? env : "unset");
	return 0;
}

static int run(const char *cubin)
{
	char name[256];
	CUdevice dev;
	CUcontext ctx;
	int count = 0;

	OK(cuInit(0));
	OK(cuDeviceGetCount(&count));
	FAIL_IF(count < 1, "no device\n");
	OK(cuDeviceGet(&dev, 0));
	OK(cuDeviceGetName(name, sizeof(name), dev));
	printf("device 0: %s\n", name);
	FAIL_IF(strstr(name, "simulated") == NULL,
		"not the simulator: is LD_LIBRARY_PATH set?\n");
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	if (fill_until_oom() || round_trip())
		return 1;
	if (cubin && launch_timed(cubin))
		return 1;
	OK(cuCtxDestroy(ctx));
	return 0;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	int rc;

	snprintf(state_dir, sizeof(state_dir), "%s/vgpu-stub-XXXXXX",
		 tmp && tmp[0] == '/' ? tmp : "/tmp");
	if (!mkdtemp(state_dir) || setenv("VGPU_SIM_STATE_DIR", state_dir, 1)) {
		perror("state directory");
		return 1;
	}
	rc = run(argc > 1 ? argv[1] : NULL);
	remove_state();
	printf("%s\n", rc ? "FAILED" : "ok");
	return rc;
}
