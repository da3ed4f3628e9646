/* simtest.h - shared helpers of the simulator's Criterion suite.
 *
 * Criterion runs each Test in a forked child, and the simulator reads its
 * environment at cuInit, so a test sets VGPU_SIM_* with setenv() and then
 * calls simtest_init(): every test gets a device of its own, in a fresh
 * state directory, that no other test (or test binary) shares.
 */
#ifndef VGPU_SIMTEST_H
#define VGPU_SIMTEST_H

#include <cuda.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "vgpu_sim_record.h"

/* The memory of a test device, unless a test sets VGPU_SIM_MEMORY. */
#define SIMTEST_MEMORY (64ull << 20)
#define MIB (1ull << 20)

/* Name of a CUresult for messages ("CUDA_ERROR_..."), never NULL. */
const char *simtest_err(CUresult rc);

#define CU_ASSERT(call, want)                                                 \
	do {                                                                  \
		CUresult cu_got_ = (call);                                    \
		CUresult cu_want_ = (want);                                   \
		cr_assert_eq(cu_got_, cu_want_, "%s: got %s (%d), want %s",  \
			     #call, simtest_err(cu_got_), (int)cu_got_,       \
			     simtest_err(cu_want_));                          \
	} while (0)
#define CU_OK(call) CU_ASSERT(call, CUDA_SUCCESS)

/* Unsets every VGPU_SIM_* variable but the state directory, and
 * CUDA_VISIBLE_DEVICES (the suite's TestSuite .init): a test starts from
 * the simulator's defaults whatever the caller's environment. */
void simtest_clean_env(void);
/* Points VGPU_SIM_STATE_DIR at a new empty directory and sets the defaults
 * of the suite (VGPU_SIM_MEMORY=64MiB, VGPU_SIM_KERNEL_NS=100000) unless the
 * test set them already. Returns the directory. */
const char *simtest_env(void);
/* Removes the state directory made by simtest_env (its dev*.state files). */
void simtest_remove_state(void);
/* simtest_env, cuInit, and device 0's primary context made current. The
 * state directory is removed at once: this process keeps its mapping, and
 * nobody else can open it. */
CUcontext simtest_init(void);
/* As simtest_init, but keeps the state directory so that other processes
 * (forked children calling cuInit) share the device; .fini removes it. */
CUcontext simtest_init_shared(void);

/* A gate: a host function on a stream that blocks the stream until opened.
 * Deterministic "work in flight" without timing. */
struct simtest_gate;
struct simtest_gate *simtest_gate_new(void);
/* Queues the blocking host function on stream s. */
void simtest_gate_queue(struct simtest_gate *g, CUstream s);
void simtest_gate_open(struct simtest_gate *g);
/* True once the gate's host function has started running. */
int simtest_gate_reached(struct simtest_gate *g);

/* An ordered log that host functions append to. */
struct simtest_log {
	int entries[64];
	_Atomic int n;
};
/* Queues a host function on s that appends value to log. */
void simtest_log_queue(struct simtest_log *log, CUstream s, int value);
int simtest_log_count(struct simtest_log *log);

#ifdef SIMTEST_KERNELS
/* user_scale(float *p, float s, int n) from the own cubin (SIMTEST_OWN_CUBIN):
 * no host form, so it runs as a no-op of VGPU_SIM_KERNEL_NS. The module is
 * loaded into the current context. */
CUfunction simtest_own_kernel(void);
/* Launches it on s with harmless arguments. */
void simtest_launch_own(CUfunction f, CUstream s);
#endif

/* The device's record of what ran (vgpu_sim_record.h; simtest_record.c,
 * which only the simulator's own suite links): every interval it
 * still holds, oldest first. dir NULL: this process's device 0; else the
 * state directory's device 0, read without attaching. Asserts that nothing
 * was torn. */
struct simtest_record {
	struct vsim_interval *iv;
	long n;
	struct vsim_record_info info;
};
void simtest_record_read(struct simtest_record *r, const char *dir);
void simtest_record_free(struct simtest_record *r);
/* SM-weighted device time of pid's kernels (pid 0: everyone's) inside
 * [from, to): each interval's overlap with it times sms / sm_total. Asserts
 * that the record is whole from `from` on (nothing lost that reached it). */
uint64_t simtest_record_busy(const struct simtest_record *r, int32_t pid,
			     uint64_t from, uint64_t to);
/* How many intervals pid has (pid 0: all of them). */
long simtest_record_count(const struct simtest_record *r, int32_t pid);
/* Asserts that at no instant the intervals hold more SMs than the device
 * has: no two kernels of the whole device overlapped. */
void simtest_record_assert_fits(const struct simtest_record *r);
/* This process's total (vsim_record_slots) on device 0. */
struct vsim_slot_time simtest_record_own(void);

uint64_t simtest_now_ns(void);
void simtest_sleep_ms(unsigned ms);

/* Captures what the calling process writes to file descriptor 2 while
 * between begin and end into buf (NUL-terminated). */
void simtest_stderr_begin(void);
void simtest_stderr_end(char *buf, size_t len);

#endif
