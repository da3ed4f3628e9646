/* test_hip.c - HIP programs built by hipcc on the simulated HIP device.
 *
 * hip_job (tests/hip/hip_job.hip) runs with build/sim/hip first in
 * LD_LIBRARY_PATH, no shim. This test process is a CUDA process on the
 * same simulated device (simtest_init_shared): it checks what the HIP
 * process did against the device's own count and record. VMM and IPC are
 * driven step by step in hip-peer processes (hip_peer.h), the device's
 * used memory read after each step.
 */
#include "simtest.h"
#include "hip_peer.h"

#include <hip/hip_runtime_api.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(hip, .init = simtest_clean_env, .fini = simtest_remove_state);

struct job {
	pid_t pid;
	FILE *in, *out;
};

static void job_start(struct job *j)
{
	int to[2], from[2];

	cr_assert_eq(pipe(to), 0);
	cr_assert_eq(pipe(from), 0);
	setenv("LD_LIBRARY_PATH", VHIP_LIB_PATH, 1);
	j->pid = fork();
	cr_assert_geq(j->pid, 0);
	if (j->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execl(VHIP_JOB, VHIP_JOB, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	j->in = fdopen(to[1], "w");
	j->out = fdopen(from[0], "r");
	cr_assert(j->in && j->out);
}

/* Sends one command; its reply line in buf. */
static void job_cmd(struct job *j, const char *cmd, char *buf, size_t len)
{
	fprintf(j->in, "%s\n", cmd);
	fflush(j->in);
	cr_assert_not_null(fgets(buf, (int)len, j->out), "%s: no reply", cmd);
}

/* Sends cmd and asserts the reply is exactly want. */
static void job_expect(struct job *j, const char *cmd, const char *want)
{
	char buf[256];

	job_cmd(j, cmd, buf, sizeof(buf));
	buf[strcspn(buf, "\n")] = 0;
	cr_assert_str_eq(buf, want, "%s", cmd);
}

static void job_end(struct job *j)
{
	int status;

	job_expect(j, "exit", "exit 0");
	fclose(j->in);
	fclose(j->out);
	cr_assert_eq(waitpid(j->pid, &status, 0), j->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void memgetinfo(struct job *j, size_t *fr, size_t *total)
{
	char buf[256];

	job_cmd(j, "memgetinfo", buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "memgetinfo 0 free=%zu total=%zu", fr, total),
		     2, "%s", buf);
}

Test(hip, copies_round_trip)
{
	struct job j;

	simtest_init_shared();
	job_start(&j);
	job_expect(&j, "alloc 1M", "alloc 0 id=0");
	job_expect(&j, "copy 0", "copy 0 bad=0");
	job_expect(&j, "alloc 65536 managed", "alloc 0 id=1");
	job_expect(&j, "copy 1", "copy 0 bad=0");
	job_expect(&j, "free 0", "free 0");
	job_expect(&j, "free 1", "free 0");
	job_end(&j);
}

Test(hip, touch_writes_the_pattern)
{
	struct job j;

	simtest_init_shared();
	job_start(&j);
	job_expect(&j, "alloc 1M", "alloc 0 id=0");
	job_expect(&j, "touch 0 7", "touch 0 bad=0");
	job_expect(&j, "touch 0 8", "touch 0 bad=0");
	job_expect(&j, "saxpy 4096", "saxpy 0 bad=0");
	job_expect(&j, "free 0", "free 0");
	job_end(&j);
}

Test(hip, every_allocation_path)
{
	static const char *const paths[] = { "malloc", "pitch", "3d",
		"managed", "ext", "async", "array", "host" };
	char cmd[64], want[64];
	struct job j;

	simtest_init_shared();
	job_start(&j);
	for (int i = 0; i < 8; i++) {
		snprintf(cmd, sizeof(cmd), "alloc 65536 %s", paths[i]);
		snprintf(want, sizeof(want), "alloc 0 id=%d", i);
		job_expect(&j, cmd, want);
	}
	for (int i = 0; i < 8; i++) {
		snprintf(cmd, sizeof(cmd), "free %d", i);
		job_expect(&j, cmd, "free 0");
	}
	job_expect(&j, "alloc 1G", "alloc 2 id=-1");   /* hipErrorOutOfMemory */
	job_expect(&j, "sync", "sync 0");
	job_end(&j);
}

/* The HIP process's kernels are the device's: in its record, as long as
 * asked, under the job's pid. */
Test(hip, spin_takes_device_time)
{
	struct simtest_record r;
	struct job j;
	char buf[256];
	int pid;

	simtest_init_shared();
	job_start(&j);
	job_cmd(&j, "pid", buf, sizeof(buf));
	cr_assert_eq(sscanf(buf, "pid 0 pid=%d", &pid), 1);
	job_cmd(&j, "spin 2000 4", buf, sizeof(buf));
	cr_assert_eq(strncmp(buf, "spin 0 ", 7), 0, "%s", buf);
	job_end(&j);
	simtest_record_read(&r, getenv("VGPU_SIM_STATE_DIR"));
	cr_assert_eq(simtest_record_count(&r, pid), 4);
	cr_assert_geq(simtest_record_busy(&r, pid, 0, UINT64_MAX),
		      4ull * 2000 * 1000);
	simtest_record_free(&r);
}

/* One device: the CUDA process sees the HIP process's memory, and the
 * reverse, in the same count. */
Test(hip, one_device_for_hip_and_cuda)
{
	size_t cu_free, cu_total, h_free, h_total, base;
	CUdeviceptr d;
	struct job j;

	simtest_init_shared();
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	job_start(&j);
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_total, cu_total);
	cr_assert_eq(h_free, cu_free);
	base = cu_free;

	job_expect(&j, "alloc 4M", "alloc 0 id=0");
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	cr_assert_eq(cu_free, base - 4 * MIB);

	CU_OK(cuMemAlloc(&d, 8 * MIB));
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_free, base - 12 * MIB);

	job_expect(&j, "free 0", "free 0");
	CU_OK(cuMemFree(d));
	memgetinfo(&j, &h_free, &h_total);
	cr_assert_eq(h_free, base);
	job_end(&j);
	CU_OK(cuMemGetInfo(&cu_free, &cu_total));
	cr_assert_eq(cu_free, base);
}

/* ---- VMM and IPC in hip-peer processes --------------------------------------- */

#define GRAN IPC_GRAN                 /* the simulated VMM granularity */
#define FD_TYPE hipMemHandleTypePosixFileDescriptor

#define HIP_ASSERT(call, want)                                                \
	do {                                                                  \
		int hip_got_ = (int)(call);                                   \
		int hip_want_ = (int)(want);                                  \
		cr_assert_eq(hip_got_, hip_want_, "%s: got %d, want %s (%d)", \
			     #call, hip_got_, #want, hip_want_);              \
	} while (0)
#define HIP_OK(call) HIP_ASSERT(call, hipSuccess)

/* The device's used memory, every process's. */
static uint64_t used(void)
{
	size_t free_b = 0, total = 0;

	CU_OK(cuMemGetInfo(&free_b, &total));
	return total - free_b;
}

static void hp_start(struct peer *p)
{
	cr_assert_eq(peer_start(p), 0, "hip-peer did not start");
}

static void hp_exit(struct peer *p)
{
	cr_assert_eq(peer_exit(p), 0, "hip-peer did not exit cleanly");
}

static hipError_t hp(struct peer *p, int op, uint64_t a, uint64_t b,
		     uint64_t c, uint64_t *out)
{
	return (hipError_t)peer_run(p, op, a, b, c, out);
}

/* A command with a structure in the message's handle bytes; the answer in
 * *m. */
static hipError_t hp_with(struct peer *p, struct peer_msg *m, const void *s,
			  size_t n)
{
	memcpy(m->handle.reserved, s, n);
	return (hipError_t)peer_do(p, m, -1, NULL);
}

static hipMemAllocationProp device_prop(hipMemAllocationHandleType t)
{
	return (hipMemAllocationProp){
		.type = hipMemAllocationTypePinned,
		.requestedHandleType = t,
		.location = { .type = hipMemLocationTypeDevice, .id = 0 },
	};
}

static hipError_t hp_create(struct peer *p, const hipMemAllocationProp *prop,
			    uint64_t bytes, uint64_t flags, uint64_t nulls,
			    uint64_t *h)
{
	struct peer_msg m = { .op = HPEER_CREATE, .a = bytes, .b = flags,
			      .c = nulls };
	hipError_t e = hp_with(p, &m, prop, sizeof(*prop));

	if (h)
		*h = m.a;
	return e;
}

static hipError_t hp_granularity(struct peer *p,
				 const hipMemAllocationProp *prop,
				 uint64_t option, uint64_t nulls, uint64_t *n)
{
	struct peer_msg m = { .op = HPEER_GRANULARITY, .b = option,
			      .c = nulls };
	hipError_t e = hp_with(p, &m, prop, sizeof(*prop));

	if (n)
		*n = m.a;
	return e;
}

static hipError_t hp_props(struct peer *p, uint64_t h,
			   hipMemAllocationProp *prop)
{
	struct peer_msg m = { .op = HPEER_PROPS, .a = h };
	hipError_t e = (hipError_t)peer_do(p, &m, -1, NULL);

	memcpy(prop, m.handle.reserved, sizeof(*prop));
	return e;
}

static hipError_t hp_set_access(struct peer *p, uint64_t va, uint64_t n,
				hipMemLocationType type, int id,
				hipMemAccessFlags flags)
{
	hipMemAccessDesc d = { .location = { .type = type, .id = id },
			       .flags = flags };
	struct peer_msg m = { .op = HPEER_SET_ACCESS, .a = va, .b = n };

	return hp_with(p, &m, &d, sizeof(d));
}

/* A new handle of n bytes in the peer, mapped read-write, filled with v. */
static void hp_create_map(struct peer *p, uint64_t n, unsigned char v,
			  uint64_t *h, uint64_t *va)
{
	HIP_OK(hp(p, PEER_VMM_CREATE, n, 0, 0, h));
	cr_assert_neq(*h, 0, "a live handle is never NULL");
	HIP_OK(hp(p, PEER_VMM_MAP, *h, n, 0, va));
	HIP_OK(hp(p, PEER_FILL, *va, n, v, NULL));
}

/* The handle is released while mapped: the mapping keeps the memory, and
 * its contents, until it is unmapped. */
Test(hip, vmm_create_map_release_keeps_until_unmap)
{
	struct peer a;
	uint64_t h, va;

	simtest_init_shared();
	hp_start(&a);
	cr_assert_eq(used(), 0);
	HIP_OK(hp(&a, PEER_VMM_CREATE, 2 * GRAN, 0, 0, &h));
	cr_assert_eq(used(), 2 * GRAN, "counted at hipMemCreate");
	HIP_OK(hp(&a, PEER_VMM_MAP, h, 2 * GRAN, 0, &va));
	cr_assert_eq(used(), 2 * GRAN, "a mapping adds nothing");
	HIP_OK(hp(&a, PEER_FILL, va, 2 * GRAN, 0x42, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL));
	cr_assert_eq(used(), 2 * GRAN, "the mapping holds the memory");
	HIP_OK(hp(&a, PEER_CHECK, va, 2 * GRAN, 0x42, NULL));
	HIP_ASSERT(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, 2 * GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
	cr_assert_eq(used(), 0);
}

/* hipMemRetainAllocationHandle gives the mapped memory's handle, the same
 * value as hipMemCreate's, with one more reference to release. */
Test(hip, vmm_retain_adds_a_reference)
{
	struct peer a;
	uint64_t h, va, r, r2;

	simtest_init_shared();
	hp_start(&a);
	hp_create_map(&a, GRAN, 0x17, &h, &va);
	HIP_OK(hp(&a, HPEER_RETAIN, va + 4096, 0, 0, &r));
	cr_assert_eq(r, h, "the retained handle is the handle");
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, GRAN, 0, NULL));
	cr_assert_eq(used(), GRAN);
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL));
	cr_assert_eq(used(), GRAN, "the retained reference holds it");
	/* Still a live handle: it maps again, with the same contents. */
	HIP_OK(hp(&a, PEER_VMM_MAP, r, GRAN, 0, &va));
	HIP_OK(hp(&a, PEER_CHECK, va, GRAN, 0x17, NULL));
	HIP_OK(hp(&a, HPEER_RETAIN, va, 0, 0, &r2));
	cr_assert_eq(r2, h);
	HIP_OK(hp(&a, PEER_VMM_RELEASE, r, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, r2, 0, 0, NULL));
	cr_assert_eq(used(), GRAN, "mapped");
	HIP_ASSERT(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	/* Nothing mapped there any more; and the arguments the runtime
	 * checks itself. */
	HIP_ASSERT(hp(&a, HPEER_RETAIN, va, 0, 0, &r), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_RETAIN, 0, 0, 0, &r), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_RETAIN, va, 0, HPEER_NULL_OUT, &r),
		   hipErrorInvalidValue);
	cr_assert_eq(used(), 0);
	hp_exit(&a);
}

/* The handle, the mapping and a retained handle, let go in each of the six
 * orders: the memory goes exactly at the last, beside memory held
 * throughout. */
Test(hip, vmm_every_release_order_frees_at_the_last)
{
	static const int orders[6][3] = {
		{ 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
		{ 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 },
	};
	struct peer a;
	uint64_t keep, keep_va, h, va, r;

	simtest_init_shared();
	hp_start(&a);
	hp_create_map(&a, GRAN, 0x01, &keep, &keep_va);
	for (int o = 0; o < 6; o++) {
		uint64_t n = (uint64_t)(o % 3 + 1) * GRAN;

		hp_create_map(&a, n, (unsigned char)(0x60 + o), &h, &va);
		HIP_OK(hp(&a, HPEER_RETAIN, va, 0, 0, &r));
		cr_assert_eq(used(), GRAN + n, "order %d: before", o);
		for (int s = 0; s < 3; s++) {
			switch (orders[o][s]) {
			case 0:
				HIP_OK(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL));
				break;
			case 1:
				HIP_OK(hp(&a, PEER_VMM_UNMAP, va, n, 0, NULL));
				break;
			case 2:
				HIP_OK(hp(&a, PEER_VMM_RELEASE, r, 0, 0, NULL));
				break;
			}
			cr_assert_eq(used(), GRAN + (s < 2 ? n : 0),
				     "order %d, step %d (%d)", o, s,
				     orders[o][s]);
		}
		HIP_ASSERT(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL),
			   hipErrorInvalidValue);
	}
	HIP_OK(hp(&a, PEER_CHECK, keep_va, GRAN, 0x01, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, keep, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_UNMAP, keep_va, GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
}

/* HIP's properties, granularity and handles through the driver's. */
Test(hip, vmm_properties_and_granularity)
{
	hipMemAllocationProp fd = device_prop(FD_TYPE);
	hipMemAllocationProp none = device_prop(hipMemHandleTypeNone);
	hipMemAllocationProp got;
	struct peer a;
	uint64_t n, h1, h2;

	simtest_init_shared();
	hp_start(&a);
	HIP_OK(hp_granularity(&a, &fd, hipMemAllocationGranularityMinimum, 0,
			      &n));
	cr_assert_eq(n, GRAN);
	HIP_OK(hp_granularity(&a, &none,
			      hipMemAllocationGranularityRecommended, 0, &n));
	cr_assert_eq(n, GRAN);
	HIP_OK(hp_create(&a, &fd, GRAN, 0, 0, &h1));
	HIP_OK(hp_create(&a, &none, 3 * GRAN, 0, 0, &h2));
	cr_assert(h1 && h2 && h1 != h2);
	cr_assert_eq(used(), 4 * GRAN);
	HIP_OK(hp_props(&a, h1, &got));
	cr_assert_eq(got.type, hipMemAllocationTypePinned);
	cr_assert_eq(got.location.type, hipMemLocationTypeDevice);
	cr_assert_eq(got.location.id, 0);
	cr_assert_eq(got.requestedHandleType, FD_TYPE);
	cr_assert_eq(got.compressionType, 0);
	cr_assert_eq(got.usage, 0);
	cr_assert_null(got.win32HandleMetaData);
	HIP_OK(hp_props(&a, h2, &got));
	cr_assert_eq(got.requestedHandleType, hipMemHandleTypeNone);
	cr_assert_eq(got.location.type, hipMemLocationTypeDevice);
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h1, 0, 0, NULL));
	HIP_ASSERT(hp_props(&a, h1, &got), hipErrorInvalidValue);
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h2, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
}

/* Each call's invalid arguments, and nothing counted after any. */
Test(hip, vmm_invalid_arguments)
{
	hipMemAllocationProp p, fd = device_prop(FD_TYPE);
	struct peer a;
	uint64_t h, va, r;

	simtest_init_shared();
	hp_start(&a);
	HIP_ASSERT(hp_create(&a, &fd, GRAN, 0, HPEER_NULL_OUT, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_create(&a, &fd, GRAN, 0, HPEER_NULL_PROP, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_create(&a, &fd, 0, 0, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp_create(&a, &fd, GRAN, 1, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp_create(&a, &fd, GRAN + 4096, 0, 0, NULL),
		   hipErrorInvalidValue);
	p = fd;
	p.type = hipMemAllocationTypeInvalid;
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorInvalidValue);
	p = fd;
	p.location.type = hipMemLocationTypeInvalid;
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorInvalidValue);
	p = fd;
	p.location.id = 1;                     /* one device */
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp_granularity(&a, &p, hipMemAllocationGranularityMinimum,
				  0, NULL), hipErrorInvalidValue);
	p.location.id = -1;
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorInvalidValue);
	p = fd;
	p.requestedHandleType = (hipMemAllocationHandleType)8;
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorInvalidValue);
	p.requestedHandleType = hipMemHandleTypeWin32;
	HIP_ASSERT(hp_create(&a, &p, GRAN, 0, 0, NULL), hipErrorNotSupported);
	HIP_ASSERT(hp_granularity(&a, &fd, 2, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp_granularity(&a, &fd, hipMemAllocationGranularityMinimum,
				  HPEER_NULL_OUT, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp_granularity(&a, &fd, hipMemAllocationGranularityMinimum,
				  HPEER_NULL_PROP, NULL), hipErrorInvalidValue);
	cr_assert_eq(used(), 0);
	/* Handles that are not (any more). */
	HIP_ASSERT(hp(&a, PEER_VMM_RELEASE, 0, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, PEER_VMM_RELEASE, 0x1234, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_props(&a, 0, &p), hipErrorInvalidValue);
	HIP_ASSERT(hp_props(&a, 0x1234, &p), hipErrorInvalidValue);
	/* Ranges: reserved, mapped, accessible. */
	HIP_ASSERT(hp(&a, HPEER_RESERVE, 0, 0, 0, &va), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_RESERVE, GRAN, 0, 1, &va),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_RESERVE, GRAN, 3, 0, &va),
		   hipErrorInvalidValue);
	HIP_OK(hp(&a, HPEER_RESERVE, 2 * GRAN, 0, 0, &va));
	cr_assert_neq(va, 0);
	HIP_OK(hp(&a, PEER_VMM_CREATE, GRAN, 0, 0, &h));
	HIP_ASSERT(hp(&a, HPEER_MAP, va, GRAN, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_MAP, 0, GRAN, h, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_MAP, va, 0, h, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_MAP, va, 2 * GRAN, h, NULL),
		   hipErrorInvalidValue);      /* larger than the handle */
	HIP_ASSERT(hp_set_access(&a, va, GRAN, hipMemLocationTypeDevice, 0,
				 hipMemAccessFlagsProtReadWrite),
		   hipErrorInvalidValue);      /* nothing mapped */
	HIP_ASSERT(hp(&a, HPEER_UNMAP, va, GRAN, 0, NULL),
		   hipErrorInvalidValue);
	HIP_OK(hp(&a, HPEER_MAP, va + GRAN, GRAN, h, NULL));
	HIP_ASSERT(hp(&a, HPEER_MAP, va + GRAN, GRAN, h, NULL),
		   hipErrorInvalidValue);      /* mapped already */
	HIP_ASSERT(hp_set_access(&a, va + GRAN, GRAN, hipMemLocationTypeDevice,
				 1, hipMemAccessFlagsProtReadWrite),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_set_access(&a, va + GRAN, GRAN,
				 hipMemLocationTypeInvalid, 0,
				 hipMemAccessFlagsProtReadWrite),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_set_access(&a, va + GRAN, GRAN, hipMemLocationTypeDevice,
				 0, (hipMemAccessFlags)2), hipErrorInvalidValue);
	HIP_ASSERT(hp_set_access(&a, 0, GRAN, hipMemLocationTypeDevice, 0,
				 hipMemAccessFlagsProtReadWrite),
		   hipErrorInvalidValue);
	HIP_OK(hp_set_access(&a, va + GRAN, GRAN, hipMemLocationTypeDevice, 0,
			     hipMemAccessFlagsProtReadWrite));
	HIP_OK(hp(&a, HPEER_RETAIN, va + GRAN, 0, 0, &r));
	cr_assert_eq(r, h);
	HIP_ASSERT(hp(&a, HPEER_ADDRESS_FREE, va, 2 * GRAN, 0, NULL),
		   hipErrorInvalidValue);      /* still mapped */
	HIP_ASSERT(hp(&a, HPEER_ADDRESS_FREE, 0, 2 * GRAN, 0, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_ADDRESS_FREE, va, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_UNMAP, 0, GRAN, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, HPEER_UNMAP, va + GRAN, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_OK(hp(&a, HPEER_UNMAP, va + GRAN, GRAN, 0, NULL));
	HIP_OK(hp(&a, HPEER_ADDRESS_FREE, va, 2 * GRAN, 0, NULL));
	HIP_ASSERT(hp(&a, HPEER_ADDRESS_FREE, va, 2 * GRAN, 0, NULL),
		   hipErrorInvalidValue);
	cr_assert_eq(used(), GRAN, "two references left");
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, r, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
}

/* ---- VMM handles shared as file descriptors ---------------------------------- */

/* The exporting peer makes n bytes filled with v and exports an fd. */
static int hp_create_export(struct peer *p, uint64_t n, unsigned char v,
			    uint64_t *h, uint64_t *va)
{
	struct peer_msg m = { .op = PEER_VMM_EXPORT, .b = FD_TYPE };
	int fd = -1;

	hp_create_map(p, n, v, h, va);
	m.a = *h;
	HIP_OK(peer_do(p, &m, -1, &fd));
	cr_assert_geq(fd, 0);
	return fd;
}

static hipError_t hp_import(struct peer *p, int fd, uint64_t type,
			    uint64_t *h)
{
	struct peer_msg m = { .op = PEER_VMM_IMPORT, .b = type };
	hipError_t e = (hipError_t)peer_do(p, &m, fd, NULL);

	*h = m.a;
	return e;
}

static hipError_t hp_export(struct peer *p, uint64_t h, uint64_t type,
			    uint64_t flags, int *fd)
{
	struct peer_msg m = { .op = PEER_VMM_EXPORT, .a = h, .b = type,
			      .c = flags };

	*fd = -1;
	return (hipError_t)peer_do(p, &m, -1, fd);
}

/* One memory in two processes: writes seen both ways; the exporter lets go
 * of everything first and the importer's handle and mapping keep it,
 * counted once, until the importer's last reference. */
Test(hip, vmm_fd_shared_across_processes)
{
	struct peer a, b;
	uint64_t ha, va, hb, vb;
	int fd;

	simtest_init_shared();
	hp_start(&a);
	hp_start(&b);
	fd = hp_create_export(&a, 3 * GRAN, 0x5a, &ha, &va);
	HIP_OK(hp_import(&b, fd, FD_TYPE, &hb));
	cr_assert_neq(hb, 0);
	HIP_OK(hp(&b, PEER_VMM_MAP, hb, 3 * GRAN, 0, &vb));
	cr_assert_eq(used(), 3 * GRAN, "one memory, counted once");
	HIP_OK(hp(&b, PEER_CHECK, vb, 3 * GRAN, 0x5a, NULL));
	HIP_OK(hp(&b, PEER_FILL, vb + GRAN, GRAN, 0xa5, NULL));
	HIP_OK(hp(&a, PEER_CHECK, va + GRAN, GRAN, 0xa5, NULL));
	HIP_OK(hp(&a, PEER_CHECK, va, GRAN, 0x5a, NULL));
	/* The exporter lets go of its handle and its mapping. */
	HIP_OK(hp(&a, PEER_VMM_RELEASE, ha, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, 3 * GRAN, 0, NULL));
	cr_assert_eq(used(), 3 * GRAN, "the importer's memory went");
	HIP_OK(hp(&b, PEER_CHECK, vb + GRAN, GRAN, 0xa5, NULL));
	/* The importer's handle released, its mapping holds the memory. */
	HIP_OK(hp(&b, PEER_VMM_RELEASE, hb, 0, 0, NULL));
	cr_assert_eq(used(), 3 * GRAN, "still mapped");
	HIP_OK(hp(&b, PEER_CHECK, vb, GRAN, 0x5a, NULL));
	HIP_OK(hp(&b, PEER_VMM_UNMAP, vb, 3 * GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	/* Nobody holds it: the fd imports nowhere. */
	HIP_ASSERT(hp_import(&b, fd, FD_TYPE, &hb), hipErrorInvalidValue);
	close(fd);
	hp_exit(&a);
	hp_exit(&b);
	cr_assert_eq(used(), 0);
}

/* The importer lets go first; the exporter's retained handle and mapping
 * keep the memory; an importer that ends without letting go gives its
 * holds back. */
Test(hip, vmm_fd_importer_lets_go_first)
{
	struct peer a, b;
	uint64_t ha, va, hb, vb, r;
	int fd;

	simtest_init_shared();
	hp_start(&a);
	hp_start(&b);
	fd = hp_create_export(&a, GRAN, 0x71, &ha, &va);
	HIP_OK(hp_import(&b, fd, FD_TYPE, &hb));
	HIP_OK(hp(&b, PEER_VMM_MAP, hb, GRAN, 0, &vb));
	HIP_OK(hp(&b, PEER_VMM_UNMAP, vb, GRAN, 0, NULL));
	HIP_OK(hp(&b, PEER_VMM_RELEASE, hb, 0, 0, NULL));
	cr_assert_eq(used(), GRAN);
	HIP_OK(hp(&a, HPEER_RETAIN, va, 0, 0, &r));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, ha, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_CHECK, va, GRAN, 0x71, NULL));
	/* Imported again, then the importer exits holding it. */
	HIP_OK(hp_import(&b, fd, FD_TYPE, &hb));
	HIP_OK(hp(&b, PEER_VMM_MAP, hb, GRAN, 0, &vb));
	HIP_OK(hp(&b, PEER_CHECK, vb, GRAN, 0x71, NULL));
	hp_exit(&b);
	cr_assert_eq(used(), GRAN);
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, GRAN, 0, NULL));
	cr_assert_eq(used(), GRAN, "the retained handle");
	HIP_OK(hp(&a, PEER_VMM_RELEASE, r, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	close(fd);
	hp_exit(&a);
}

Test(hip, vmm_fd_invalid_arguments)
{
	hipMemAllocationProp none = device_prop(hipMemHandleTypeNone);
	struct peer a;
	uint64_t h, plain, got;
	int fd;

	simtest_init_shared();
	hp_start(&a);
	HIP_OK(hp(&a, PEER_VMM_CREATE, GRAN, 0, 0, &h));
	HIP_OK(hp_create(&a, &none, GRAN, 0, 0, &plain));
	/* Not created exportable; a type other than an fd; flags; none. */
	HIP_ASSERT(hp_export(&a, plain, FD_TYPE, 0, &fd), hipErrorInvalidValue);
	HIP_ASSERT(hp_export(&a, h, hipMemHandleTypeWin32, 0, &fd),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_export(&a, h, hipMemHandleTypeNone, 0, &fd),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_export(&a, h, FD_TYPE, 1, &fd), hipErrorInvalidValue);
	HIP_ASSERT(hp_export(&a, 0, FD_TYPE, 0, &fd), hipErrorInvalidValue);
	HIP_ASSERT(hp_export(&a, 0x1234, FD_TYPE, 0, &fd),
		   hipErrorInvalidValue);
	cr_assert_eq(fd, -1);
	HIP_OK(hp_export(&a, h, FD_TYPE, 0, &fd));
	cr_assert_geq(fd, 0);
	/* NULL (fd 0), a closed fd, another type, not the driver's fd. */
	HIP_ASSERT(hp_import(&a, -1, FD_TYPE, &got), hipErrorInvalidValue);
	{
		struct peer_msg m = { .op = PEER_VMM_IMPORT, .b = FD_TYPE,
				      .c = 1000 };
		HIP_ASSERT(peer_do(&a, &m, -1, NULL), hipErrorInvalidValue);
	}
	HIP_ASSERT(hp_import(&a, fd, hipMemHandleTypeWin32, &got),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_import(&a, STDERR_FILENO, FD_TYPE, &got),
		   hipErrorInvalidValue);
	cr_assert_eq(used(), 2 * GRAN);
	HIP_OK(hp(&a, PEER_VMM_RELEASE, h, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, plain, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	HIP_ASSERT(hp_import(&a, fd, FD_TYPE, &got), hipErrorInvalidValue);
	close(fd);
	hp_exit(&a);
}

/* ---- IPC ------------------------------------------------------------------------ */

static hipError_t hp_ipc_get(struct peer *p, uint64_t ptr, CUipcMemHandle *h)
{
	struct peer_msg m = { .op = PEER_IPC_GET, .a = ptr };
	hipError_t e = (hipError_t)peer_do(p, &m, -1, NULL);

	*h = m.handle;
	return e;
}

static hipError_t hp_ipc_open(struct peer *p, const CUipcMemHandle *h,
			      uint64_t flags, uint64_t *ptr)
{
	struct peer_msg m = { .op = PEER_IPC_OPEN, .handle = *h, .b = flags };
	hipError_t e = (hipError_t)peer_do(p, &m, -1, NULL);

	*ptr = m.a;
	return e;
}

/* The exporter frees first: the importer keeps the memory, counted once,
 * and its contents, until it closes it. */
Test(hip, ipc_importer_keeps_memory_after_exporter_frees)
{
	const uint64_t n = 5 * MIB;
	struct peer a, b;
	CUipcMemHandle h, h2;
	uint64_t pa, pb, pb2;

	simtest_init_shared();
	hp_start(&a);
	hp_start(&b);
	HIP_OK(hp(&a, PEER_ALLOC, n, 0, 0, &pa));
	HIP_OK(hp(&a, PEER_FILL, pa, n, 0x44, NULL));
	HIP_OK(hp_ipc_get(&a, pa + MIB, &h));
	HIP_OK(hp_ipc_get(&a, pa, &h2));
	cr_assert_arr_eq(h.reserved, h2.reserved, sizeof(h.reserved),
			 "any pointer into it names the allocation");
	cr_assert_eq(used(), n);
	HIP_OK(hp_ipc_open(&b, &h, 0, &pb));
	cr_assert_neq(pb, 0);
	cr_assert_eq(used(), n, "counted once");
	HIP_OK(hp(&b, PEER_CHECK, pb, n, 0x44, NULL));
	HIP_OK(hp(&b, PEER_FILL, pb + MIB, MIB, 0x45, NULL));
	HIP_OK(hp(&a, PEER_CHECK, pa + MIB, MIB, 0x45, NULL));
	/* Opened twice in one process: the same pointer, two closes. */
	HIP_OK(hp_ipc_open(&b, &h, 1, &pb2));
	cr_assert_eq(pb2, pb);
	HIP_OK(hp(&b, PEER_IPC_CLOSE, pb, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_FREE, pa, 0, 0, NULL));
	cr_assert_eq(used(), n, "the importer's memory went");
	HIP_OK(hp(&b, PEER_CHECK, pb, MIB, 0x44, NULL));
	HIP_OK(hp(&b, PEER_CHECK, pb + MIB, MIB, 0x45, NULL));
	HIP_OK(hp(&b, PEER_FILL, pb, n, 0x46, NULL));
	HIP_OK(hp(&b, PEER_CHECK, pb, n, 0x46, NULL));
	HIP_OK(hp(&b, PEER_IPC_CLOSE, pb, 0, 0, NULL));
	cr_assert_eq(used(), 0);
	HIP_ASSERT(hp(&b, PEER_IPC_CLOSE, pb, 0, 0, NULL),
		   hipErrorInvalidValue);
	HIP_ASSERT(hp_ipc_open(&b, &h, 0, &pb), hipErrorInvalidHandle);
	hp_exit(&a);
	hp_exit(&b);
	cr_assert_eq(used(), 0);
}

/* The importer closes first: nothing changes until the exporter frees;
 * a CUDA process (this one) opens a HIP process's handle as its own. */
Test(hip, ipc_importer_closes_first_and_cuda_opens)
{
	const uint64_t n = 3 * MIB;
	struct peer a, b;
	CUipcMemHandle h;
	CUdeviceptr q;
	uint64_t pa, pb;

	simtest_init_shared();
	hp_start(&a);
	hp_start(&b);
	HIP_OK(hp(&a, PEER_ALLOC, n, 0, 0, &pa));
	HIP_OK(hp(&a, PEER_FILL, pa, n, 0x21, NULL));
	HIP_OK(hp_ipc_get(&a, pa, &h));
	HIP_OK(hp_ipc_open(&b, &h, 0, &pb));
	HIP_OK(hp(&b, PEER_IPC_CLOSE, pb, 0, 0, NULL));
	cr_assert_eq(used(), n);
	HIP_OK(hp(&a, PEER_CHECK, pa, n, 0x21, NULL));
	CU_OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CU_OK(ipc_check(q, n, 0x21));
	HIP_OK(hp(&a, PEER_FREE, pa, 0, 0, NULL));
	cr_assert_eq(used(), n, "the CUDA process holds it");
	CU_OK(ipc_check(q, n, 0x21));
	CU_OK(cuIpcCloseMemHandle(q));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
	hp_exit(&b);
}

Test(hip, ipc_invalid_arguments)
{
	struct peer a, b;
	CUipcMemHandle h, bad;
	uint64_t pa, va, vh, q = 0;

	simtest_init_shared();
	hp_start(&a);
	hp_start(&b);
	HIP_OK(hp(&a, PEER_ALLOC, MIB, 0, 0, &pa));
	HIP_ASSERT(hp_ipc_get(&a, 0, &h), hipErrorInvalidValue);
	HIP_ASSERT(hp_ipc_get(&a, 0x1000, &h), hipErrorInvalidValue);
	/* VMM memory is shared by fd, not IPC. */
	hp_create_map(&a, GRAN, 0, &vh, &va);
	HIP_ASSERT(hp_ipc_get(&a, va, &h), hipErrorInvalidValue);
	HIP_OK(hp_ipc_get(&a, pa, &h));
	/* The exporter may not open its own; bytes no driver made; flags. */
	HIP_ASSERT(hp_ipc_open(&a, &h, 0, &q), hipErrorInvalidContext);
	memset(&bad, 0, sizeof(bad));
	HIP_ASSERT(hp_ipc_open(&b, &bad, 0, &q), hipErrorInvalidHandle);
	bad = h;
	bad.reserved[20] ^= 1;
	HIP_ASSERT(hp_ipc_open(&b, &bad, 0, &q), hipErrorInvalidHandle);
	HIP_ASSERT(hp_ipc_open(&b, &h, 2, &q), hipErrorInvalidValue);
	cr_assert_eq(q, 0);
	HIP_ASSERT(hp(&b, PEER_IPC_CLOSE, 0, 0, 0, NULL), hipErrorInvalidValue);
	HIP_ASSERT(hp(&a, PEER_IPC_CLOSE, pa, 0, 0, NULL),
		   hipErrorInvalidValue);      /* not opened: allocated */
	cr_assert_eq(used(), MIB + GRAN);
	HIP_OK(hp(&a, PEER_FREE, pa, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_RELEASE, vh, 0, 0, NULL));
	HIP_OK(hp(&a, PEER_VMM_UNMAP, va, GRAN, 0, NULL));
	cr_assert_eq(used(), 0);
	hp_exit(&a);
	hp_exit(&b);
}
