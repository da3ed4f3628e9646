/* vgpu_sim_record.h - the simulated GPU's record of what ran, for tests.
 *
 * The simulator (sim/state.c) records in each device's shared state the time
 * every kernel held the device's multiprocessors (SMs), whichever process
 * ran it: a ring of the latest intervals, and per process a running total.
 * It is the device's truth, against which tests judge a throttle: not what a
 * tenant measured, nor a kernel's nominal length (docs/simulator.md, "The
 * record").
 *
 * The readers are exported by the simulated libcuda.so.1 beside the CUDA
 * entry points (as vsim_stale_handle_uses is), so tests linked with it call
 * them directly, and others reach them with dlsym. They are not CUDA.
 */
#ifndef VGPU_SIM_RECORD_H
#define VGPU_SIM_RECORD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel's time on the device: it held `sms` of the device's SMs from
 * start_ns to end_ns (CLOCK_MONOTONIC, the host's clock). Its device time,
 * SM-weighted, is (end_ns - start_ns) * sms / sm_total. */
struct vsim_interval {
	uint64_t start_ns, end_ns;
	uint64_t ctx_id;             /* its context's id (cuCtxGetId) */
	int32_t pid;                 /* its process (getpid() there) */
	uint32_t slot;               /* its process's slot in the device */
	uint32_t sms;
	uint32_t pad;
};

struct vsim_record_info {
	uint32_t sm_total;           /* the device's SMs */
	uint32_t torn;               /* intervals skipped: being written, or
				      * overwritten while copied */
	uint64_t recorded;           /* intervals ever recorded on the device */
	uint64_t lost;               /* of those, fallen out of the ring */
	uint64_t lost_end_ns;        /* the latest end among the lost: the
				      * record is whole only from here on */
};

/* A process's running total: SM-weighted device time of its kernels since it
 * attached, each added when its own process ends it (a kernel of a stopped
 * process when it resumes; a killed process's last one never). */
struct vsim_slot_time {
	int32_t pid;
	uint32_t slot;
	uint64_t busy_ns;
	uint64_t kernels;
};

/*
 * Copies the newest intervals of a device, at most max, oldest first, into
 * out, and returns how many (or -1 when there is no such device state). dir
 * NULL: device ordinal `device` of this process (it must have called
 * cuInit); else the state file <dir>/dev<device>.state, read without
 * attaching (device is then the physical number). Holds whose time is up
 * (a stopped or killed process's) are ended first, so the record says what
 * ran up to now. Kernels still running are not in it. info, when not NULL,
 * gets the device's totals; info->lost_end_ns > t means the intervals
 * before t are incomplete.
 */
long vsim_record_read(const char *dir, int device, struct vsim_interval *out,
		      size_t max, struct vsim_record_info *info);

/* Copies the live processes' totals of a device (dir and device as above),
 * at most max, and returns how many (or -1). */
long vsim_record_slots(const char *dir, int device, struct vsim_slot_time *out,
		       size_t max);

#ifdef __cplusplus
}
#endif

#endif
