/* sim_record.h - the simulated device's record of what ran, read from a
 * test program that may run under the shim (tests/compute): share.c and
 * escape.c judge a throttle by it. On a real driver there is none.
 */
#ifndef VGPU_TEST_SIM_RECORD_H
#define VGPU_TEST_SIM_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu_sim_record.h"

/* This process's device's intervals, as the device recorded them. */
struct record {
	struct vsim_interval *iv;
	long n;
	struct vsim_record_info info;
};

/* Reads the record of this process's device 0; false when there is none
 * (a real driver, or the simulator could not be reached). */
bool record_load(struct record *r);
/* SM-weighted device time of this process's kernels inside [from, to). */
uint64_t record_busy(const struct record *r, uint64_t from, uint64_t to);
/* The same for the kernels of process pid, or of every process (pid 0). */
uint64_t record_busy_of(const struct record *r, int32_t pid, uint64_t from,
			uint64_t to);

#endif
