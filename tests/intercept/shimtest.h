/* shimtest.h - helpers of the shim's preload suite (tests/intercept/).
 *
 * Every test program here runs under LD_PRELOAD=libvgpu.so with
 * VGPU_REAL_LIBCUDA pointing at the simulated driver (meson.build). Criterion
 * runs each Test in a fresh process, so a test sets its options with
 * setenv() before its first CUDA call: shimtest_env() gives it a ledger
 * directory and a simulator state directory of its own.
 *
 * The ledger is checked from the outside: ledger_view maps the ledger file
 * read-only and reads it through include/vgpu.h's structures only, as any
 * outside tool would.
 */
#ifndef VGPU_SHIMTEST_H
#define VGPU_SHIMTEST_H

#include "simtest.h"
#include "vgpu.h"

#include <stdbool.h>
#include <sys/types.h>

#define KIB (1ull << 10)
#define GIB (1ull << 30)

/* Sets VGPU_LEDGER_DIR to a new empty directory, VGPU_TENANT to tenant,
 * VGPU_MEMORY_LIMIT to limit (NULL: leaves it unset),
 * VGPU_CONTEXT_OVERHEAD=0 unless already set, and a fresh simulator state
 * directory (simtest_env; VGPU_SIM_MEMORY=1GiB unless already set).
 * Returns the ledger directory. */
const char *shimtest_env(const char *tenant, const char *limit);
/* The ledger directory of shimtest_env. */
const char *shimtest_ledger_dir(void);
/* Removes the ledger directory and its files (a .fini). */
void shimtest_cleanup(void);

/* Whether the simulated driver has (name, version): the shim's
 * cuGetProcAddress_v2 answers with the driver's own decision. */
bool shimtest_have(const char *name, int version);
/* cr_skip_test()s with a message unless the driver has it. */
void shimtest_need(const char *name, int version);

/* What the simulated device holds (its own cuMemGetInfo_v2: total minus
 * free), all processes together: the judge of every slice. Asserts the
 * simulator (SHIMTEST_SIM_LIBCUDA) is loaded apart from the shim. */
uint64_t shimtest_device_used(void);

/* "GPU-xxxxxxxx-..." of device d, as the shim names its ledger. */
void shimtest_uuid(CUdevice d, char *out, size_t len);

/* ---- the ledger, read from outside --------------------------------------- */

struct ledger_view {
	void *map;
	const struct vgpu_ledger_header *hdr;
	const struct vgpu_ledger_tenant *tenants;
	const struct vgpu_ledger_slot *slots;
};

/* Maps <dir>/<uuid>.v3.ledger read-only (uuid NULL: the only ledger file
 * in dir); false if there is none or it is not a ledger of this version. */
bool ledger_view_open(struct ledger_view *v, const char *dir,
		      const char *uuid);
/* As ledger_view_open on shimtest_ledger_dir(), asserting success. */
void ledger_view_must(struct ledger_view *v, const char *uuid);
void ledger_view_close(struct ledger_view *v);

/* The active tenant called name, or NULL. */
const struct vgpu_ledger_tenant *ledger_tenant(const struct ledger_view *v,
					       const char *name);
/* The tenant's usage of kind (VGPU_USAGE_COUNT: its device total, `used`);
 * asserts the tenant exists. */
uint64_t ledger_tenant_bytes(const struct ledger_view *v, const char *name,
			     int kind);
/* The tenant's active slots, and the sum of their usage of kind
 * (VGPU_USAGE_COUNT: every device kind). */
int ledger_active_slots(const struct ledger_view *v, const char *name);
uint64_t ledger_slots_bytes(const struct ledger_view *v, const char *name,
			    int kind);
/* The active slot of pid in tenant name, or NULL. */
const struct vgpu_ledger_slot *ledger_slot_of(const struct ledger_view *v,
					      const char *name, pid_t pid);
/* Asserts the tenant's total and every kind's usage, tenant and slots
 * alike, are zero. */
void ledger_assert_zero(const struct ledger_view *v, const char *name);

/* ---- child processes ----------------------------------------------------- */

/* Runs fn(arg) in a forked child with its stderr (and stdout) captured into
 * out (NUL-terminated); returns the child's exit status (exit code, or
 * 128 + signal). The child must not have touched CUDA's parent state. */
int shimtest_run_child(int (*fn)(void *), void *arg, char *out, size_t len);

#endif
