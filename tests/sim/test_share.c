/* test_share.c - one simulated device shared by processes: processes on
 * one VGPU_SIM_STATE_DIR see one memory and one execution engine, and a
 * killed process gives its memory back.
 *
 * The other processes are forked children that call cuInit themselves (the
 * simulator starts a forked child with no driver state). They report by
 * exit status: Criterion assertions belong to the test's own process.
 */
#include "simtest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(share, .init = simtest_clean_env, .fini = simtest_remove_state);

/* Runs fn in a forked child; its return value is the exit status. */
static pid_t spawn(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

static int exit_status(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child ended by signal %d",
		  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return WEXITSTATUS(status);
}

/* The child exited 0; otherwise its status names the step that failed. */
static void succeeded(pid_t pid)
{
	int st = exit_status(pid);

	cr_assert_eq(st, 0, "the child failed at its step %d", st);
}

/* In a child: cuInit and device 0's primary context. */
static int child_init(void)
{
	CUcontext ctx;

	if (cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return -1;
	return 0;
}

static size_t free_now(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	cr_assert_eq(total, SIMTEST_MEMORY);
	return free_b;
}

/* The parent holds 48 of 64 MiB: the child sees 16 free, cannot have 32,
 * can have 16. */
static int second_process(void *arg)
{
	CUdeviceptr p;
	size_t free_b, total;

	(void)arg;
	if (child_init() != 0)
		return 10;
	if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS)
		return 11;
	if (total != SIMTEST_MEMORY || free_b != 16 * MIB)
		return 12;
	if (cuMemAlloc(&p, 32 * MIB) != CUDA_ERROR_OUT_OF_MEMORY)
		return 13;
	if (cuMemAlloc(&p, 16 * MIB) != CUDA_SUCCESS)
		return 14;
	if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS || free_b != 0)
		return 15;
	return 0;   /* exits holding 16 MiB */
}

Test(share, second_process_sees_first_process_memory)
{
	CUdeviceptr p;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&p, 48 * MIB));
	succeeded(spawn(second_process, NULL));
	/* The child's memory came back when it exited. */
	cr_assert_eq(free_now(), 16 * MIB);
	CU_OK(cuMemFree(p));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* A process of its own (SIMTEST_SHARE_CHILD, started with exec) holds
 * 32 MiB, then ends normally, returning from main without freeing. */
Test(share, exited_process_memory_returns)
{
	int to_child[2], from_child[2];
	char c = 0;
	pid_t pid;

	simtest_init_shared();
	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(from_child), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(to_child[0], STDIN_FILENO);
		dup2(from_child[1], STDOUT_FILENO);
		close(to_child[1]);
		close(from_child[0]);
		execl(SIMTEST_SHARE_CHILD, SIMTEST_SHARE_CHILD, "32", (char *)NULL);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	cr_assert_eq(read(from_child[0], &c, 1), 1, "the child failed to start");
	cr_assert_eq(c, 'r');
	cr_assert_eq(free_now(), SIMTEST_MEMORY - 32 * MIB);
	close(to_child[1]);
	succeeded(pid);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* Holds 48 MiB, says so on the pipe, and waits to be killed. */
static int holder(void *arg)
{
	int *fds = arg;
	CUdeviceptr p;
	char c = 'r';

	close(fds[0]);
	if (child_init() != 0 || cuMemAlloc(&p, 48 * MIB) != CUDA_SUCCESS)
		c = 'x';
	if (write(fds[1], &c, 1) != 1)
		return 1;
	for (;;)
		pause();
}

Test(share, killed_process_memory_returns)
{
	CUdeviceptr p;
	int fds[2];
	char c = 0;
	pid_t pid;
	int status;

	simtest_init_shared();
	cr_assert_eq(pipe(fds), 0);
	pid = spawn(holder, fds);
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1);
	cr_assert_eq(c, 'r', "the holder could not allocate");
	cr_assert_eq(free_now(), 16 * MIB);
	CU_ASSERT(cuMemAlloc(&p, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
	CU_OK(cuMemAlloc(&p, 48 * MIB));
	cr_assert_eq(free_now(), 16 * MIB);
}

/* Without asking first: the allocation itself finds the dead process. */
Test(share, killed_process_memory_returns_to_alloc)
{
	CUdeviceptr p;
	int fds[2];
	char c = 0;
	pid_t pid;

	simtest_init_shared();
	cr_assert_eq(pipe(fds), 0);
	pid = spawn(holder, fds);
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1);
	cr_assert_eq(c, 'r');
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	CU_OK(cuMemAlloc(&p, 64 * MIB));
}

/* A forked child starts with no driver state: not initialised, and after
 * cuInit no context current; the parent's memory counts against it. */
static int fresh_child(void *arg)
{
	CUcontext ctx = (CUcontext)1;
	size_t free_b, total;
	int n;

	(void)arg;
	if (cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED)
		return 10;
	if (cuInit(0) != CUDA_SUCCESS)
		return 11;
	if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx != NULL)
		return 12;
	if (child_init() != 0)
		return 13;
	if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS ||
	    free_b != SIMTEST_MEMORY - 8 * MIB)
		return 14;
	return 0;
}

/* The parent's allocations are not the child's: the child cannot free
 * them, and trying does not disturb its own accounting. */
static int not_my_memory(void *arg)
{
	CUdeviceptr parents = *(CUdeviceptr *)arg, mine, base;
	size_t free_b, total;
	unsigned type;

	if (child_init() != 0 || cuMemAlloc(&mine, 16 * MIB) != CUDA_SUCCESS)
		return 10;
	if (cuMemGetAddressRange(&base, NULL, parents) != CUDA_ERROR_NOT_FOUND)
		return 11;
	if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				  parents) != CUDA_ERROR_INVALID_VALUE)
		return 12;
	if (cuMemFree(parents) != CUDA_ERROR_INVALID_VALUE)
		return 13;
	if (cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS ||
	    free_b != SIMTEST_MEMORY - 8 * MIB - 16 * MIB)
		return 14;
	return 0;
}

Test(share, forked_child_does_not_own_parent_memory)
{
	CUdeviceptr p;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&p, 8 * MIB));
	succeeded(spawn(not_my_memory, &p));
	CU_OK(cuMemFree(p));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

Test(share, forked_child_starts_fresh)
{
	CUdeviceptr p;

	simtest_init_shared();
	CU_OK(cuMemAlloc(&p, 8 * MIB));
	succeeded(spawn(fresh_child, NULL));
	/* The parent is untouched. */
	CU_OK(cuMemFree(p));
	cr_assert_eq(free_now(), SIMTEST_MEMORY);
}

/* The device's size is set by the first process; a later one asking for a
 * different VGPU_SIM_MEMORY gets the device as it is. */
static int other_size(void *arg)
{
	size_t total = 0;

	(void)arg;
	setenv("VGPU_SIM_MEMORY", "128MiB", 1);
	if (child_init() != 0)
		return 10;
	if (cuDeviceTotalMem(&total, 0) != CUDA_SUCCESS)
		return 11;
	return total == SIMTEST_MEMORY ? 0 : 12;
}

Test(share, first_process_sets_capacity)
{
	simtest_init_shared();
	succeeded(spawn(other_size, NULL));
}

/* ---- one kernel at a time across processes -------------------------------- */

#ifdef SIMTEST_KERNELS
#define KERNELS 5
#define KERNEL_MS 20

struct runner {
	int ready[2], go[2];
};

/* Loads the own kernel, reports ready, waits for go, runs KERNELS launches
 * of KERNEL_MS each. */
static int kernel_runner(void *arg)
{
	struct runner *r = arg;
	CUdeviceptr p = 0;
	float scale = 1.0f;
	int n = 0;
	void *params[] = { &p, &scale, &n };
	CUmodule m;
	CUfunction f;
	char c = 'r';

	if (child_init() != 0 ||
	    cuModuleLoad(&m, SIMTEST_OWN_CUBIN) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&f, m, "user_scale") != CUDA_SUCCESS)
		c = 'x';
	if (write(r->ready[1], &c, 1) != 1 || c != 'r')
		return 10;
	if (read(r->go[0], &c, 1) != 1)
		return 11;
	for (int i = 0; i < KERNELS; i++)
		if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params,
				   NULL) != CUDA_SUCCESS)
			return 12;
	return cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 13;
}

/* Starts a kernel of 10 s, says so, and waits to be killed mid-kernel. */
static int long_kernel(void *arg)
{
	int *fds = arg;
	CUdeviceptr p = 0;
	float scale = 1.0f;
	int n = 0;
	void *params[] = { &p, &scale, &n };
	CUmodule m;
	CUfunction f;
	char c = 'r';

	close(fds[0]);
	setenv("VGPU_SIM_KERNEL_NS", "10000000000", 1);
	if (child_init() != 0 ||
	    cuModuleLoad(&m, SIMTEST_OWN_CUBIN) != CUDA_SUCCESS ||
	    cuModuleGetFunction(&f, m, "user_scale") != CUDA_SUCCESS ||
	    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) !=
		    CUDA_SUCCESS)
		c = 'x';
	if (write(fds[1], &c, 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* A process killed while its kernel holds the device does not keep it. */
Test(share, killed_process_releases_engine, .timeout = 20)
{
	CUfunction f;
	int fds[2];
	char c = 0;
	pid_t pid;
	uint64_t t0, took;

	setenv("VGPU_SIM_KERNEL_NS", "1000000", 1);
	simtest_init_shared();
	f = simtest_own_kernel();
	cr_assert_eq(pipe(fds), 0);
	pid = spawn(long_kernel, fds);
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1);
	cr_assert_eq(c, 'r', "the child could not launch");
	simtest_sleep_ms(50);   /* let its kernel take the device */
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	t0 = simtest_now_ns();
	simtest_launch_own(f, NULL);
	CU_OK(cuCtxSynchronize());
	took = simtest_now_ns() - t0;
	/* Far below the dead kernel's 10 s. */
	cr_assert_lt(took, 5000000000ull, "%llu ms",
		     (unsigned long long)(took / 1000000));
}

Test(share, kernels_of_two_processes_do_not_overlap)
{
	const uint64_t sum_ns = 2ull * KERNELS * KERNEL_MS * 1000000ull;
	struct runner r;
	pid_t a, b;
	uint64_t t0, wall;
	char c[2];

	setenv("VGPU_SIM_KERNEL_NS", "20000000", 1);
	simtest_env();
	cr_assert_eq(pipe(r.ready), 0);
	cr_assert_eq(pipe(r.go), 0);
	a = spawn(kernel_runner, &r);
	b = spawn(kernel_runner, &r);
	cr_assert_eq(read(r.ready[0], &c[0], 1), 1);
	cr_assert_eq(read(r.ready[0], &c[1], 1), 1);
	cr_assert(c[0] == 'r' && c[1] == 'r', "a runner failed to set up");
	t0 = simtest_now_ns();
	cr_assert_eq(write(r.go[1], "gg", 2), 2);
	succeeded(a);
	succeeded(b);
	wall = simtest_now_ns() - t0;
	/* Overlapping, they would take about half of this. */
	cr_assert_geq(wall, sum_ns * 9 / 10, "%llu ms for %llu ms of kernels",
		      (unsigned long long)(wall / 1000000),
		      (unsigned long long)(sum_ns / 1000000));
}
#endif
