/* hipshim.h - helpers of the HIP shim's suites (test_hip_shim.c,
 * test_hip_compute.c).
 *
 * The test program is a CUDA process on the simulated driver (linked
 * directly, no shim): its own cuMemGetInfo is the device's count of what
 * every process holds, the judge of each slice. The jobs it drives are
 * hip_job (tests/hip/hip_job.hip) on the simulated libamdhip64.so.5 under
 * LD_PRELOAD=libvgpu-hip.so, one process each, through pipes; they share
 * the test's simulated device (VGPU_SIM_STATE_DIR) and ledger directory
 * (VGPU_LEDGER_DIR), both set by hs_setup. The ledger is read from the
 * outside (tests/intercept/shimtest.h's ledger_view).
 */
#ifndef VGPU_HIPSHIM_H
#define VGPU_HIPSHIM_H

#include "shimtest.h"

#include <stdio.h>
#include <sys/types.h>

/* A running hip_job. */
struct hjob {
	pid_t pid;
	FILE *in, *out;
};

/* A fresh simulated device of sim_memory (NULL: 1GiB) and ledger
 * directory; VGPU_TENANT=tenant, VGPU_MEMORY_LIMIT=limit (NULL: unset)
 * for the jobs; this process attached to the device. */
void hs_setup(const char *tenant, const char *limit, const char *sim_memory);
/* Removes both directories (a .fini). */
void hs_cleanup(void);

/* Starts hip_job under the shim; env: NULL or a NULL-terminated list of
 * "NAME=VALUE" set in the job over the test's own. With err, the job's
 * stderr goes to its stdout pipe too. */
void hjob_start(struct hjob *j, const char *const *env);
void hjob_start_err(struct hjob *j, const char *const *env, bool err);
/* Sends cmd (no newline). */
void hjob_send(struct hjob *j, const char *cmd);
/* Reads one reply line into buf (without its newline). */
void hjob_reply(struct hjob *j, char *buf, size_t len);
/* hjob_send then hjob_reply. */
void hjob_cmd(struct hjob *j, const char *cmd, char *buf, size_t len);
/* Asserts the reply to cmd is exactly want. */
void hjob_expect(struct hjob *j, const char *cmd, const char *want);
/* "alloc SIZE PATH": the HIP error code; *id the allocation's number
 * (-1 when refused). */
int hjob_alloc(struct hjob *j, unsigned long long size, const char *path,
	       int *id);
/* "exit", then waits for a clean exit. */
void hjob_end(struct hjob *j);
/* SIGKILL, and waits. */
void hjob_kill(struct hjob *j);
/* The job's pid by its "pid" command. */
int hjob_pid(struct hjob *j);

/* What the simulated device holds, every process together. */
uint64_t hs_device_used(void);
/* The active tenant's device total in the ledger (0: no such tenant, or
 * no ledger yet). */
uint64_t hs_tenant_used(const char *tenant);
/* A seed for the test's random choices, printed; HS_SEED overrides it. */
unsigned hs_seed(void);

#endif
