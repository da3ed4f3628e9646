/* vgpu-run.h - vgpu-run's parts, grouped by the file that defines them.
 *
 * vgpu-run sets a job's slice in its environment, puts libvgpu.so in front
 * of the driver with LD_PRELOAD, optionally chooses its GPU, and execs it
 * (docs/vgpu-run.md). Everything that decides (arguments, placement, the
 * preload list, the preload file) is a function of its inputs, so that
 * tests/tools/test_vgpu_run.c checks it without a driver; the driver and
 * the ledger are read in vgpu-run-gpus.c only.
 */
#ifndef VGPU_RUN_H
#define VGPU_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vgpu.h"

/* Exit codes of vgpu-run itself; once the command runs, its own. */
#define VRUN_EXIT_USAGE		64	/* bad command line */
#define VRUN_EXIT_VALUE		65	/* a bad option value or variable */
#define VRUN_EXIT_NOFIT		66	/* --gpu auto: no GPU has room */
#define VRUN_EXIT_NOGPU		67	/* no GPU, or --gpu names none */
#define VRUN_EXIT_DRIVER	68	/* the driver cannot be loaded or used */
#define VRUN_EXIT_LIBRARY	69	/* libvgpu.so (or the simulator) missing */
#define VRUN_EXIT_PRELOAD	70	/* --install-preload cannot write */
#define VRUN_EXIT_NOEXEC	126	/* the command cannot be executed */
#define VRUN_EXIT_NOTFOUND	127	/* the command is not found */

#define VRUN_MAX_GPUS		64
#define VRUN_PATH_MAX		4096

enum vrun_place_mode {
	VRUN_PLACE_SPREAD,	/* the GPU with the fewest tasks */
	VRUN_PLACE_BINPACK,	/* the fullest GPU that still fits */
};

enum vrun_gpu_mode {
	VRUN_GPU_NONE,		/* not given: CUDA_VISIBLE_DEVICES untouched */
	VRUN_GPU_AUTO,
	VRUN_GPU_INDEX,
	VRUN_GPU_UUID,
};

/* The command line, parsed; strings point into argv. */
struct vrun_args {
	const char *memory;		/* --memory, or NULL */
	const char *compute;		/* --compute */
	const char *policy;		/* --policy */
	const char *overcommit;		/* --overcommit */
	const char *tenant;		/* --tenant */
	const char *gpu;		/* --gpu as given */
	int gpu_mode;			/* enum vrun_gpu_mode */
	unsigned gpu_index;		/* VRUN_GPU_INDEX */
	int place;			/* enum vrun_place_mode */
	bool place_given;
	bool sim;
	bool hip;			/* --hip: a HIP job */
	bool verbose;
	bool help;
	bool install_preload;
	const char *preload_file;	/* --install-preload's PATH, or NULL */
	const char *probe_driver;	/* internal: --probe-gpus DRIVER */
	const char *probe_hip_runtime;	/* internal: --probe-hip-gpus RT */
	const char *probe_hip_driver;	/* and --probe-hip-driver DRIVER */
	char **command;			/* NULL-terminated; NULL: none */
};

/* ---- vgpu-run-args.c: the command line -------------------------------- */

/* Parses argv (argv[0] is the program). Every value is checked with the
 * library's own parsers (vgpu/options.h), so vgpu-run accepts exactly what
 * libvgpu accepts. Returns 0, or VRUN_EXIT_USAGE / VRUN_EXIT_VALUE with one
 * line in err naming the option, the value and what was expected. */
int vrun_parse_args(int argc, char **argv, struct vrun_args *a,
		    char *err, size_t errlen);

/* The usage text, for --help and usage errors. */
extern const char vrun_usage[];

/* ---- vgpu-run-place.c: choosing a GPU ---------------------------------- */

/* Who lists a GPU: the front ends whose jobs can run on it. */
#define VRUN_FRONT_CUDA		1u	/* the CUDA driver: an NVIDIA GPU */
#define VRUN_FRONT_HIP		2u	/* the HIP runtime: AMD, Hygon */

/* One GPU as placement sees it. */
struct vrun_gpu {
	unsigned index;			/* in vgpu-run's list (--gpu INDEX) */
	char uuid[VGPU_LEDGER_UUID_MAX];	/* "GPU-...", or HIP's "PCI-..." */
	unsigned fronts;		/* VRUN_FRONT_*: both on the simulator */
	unsigned cuda_index;		/* CUDA ordinal, with VRUN_FRONT_CUDA */
	unsigned hip_index;		/* HIP ordinal, with VRUN_FRONT_HIP */
	uint64_t total;			/* device memory, bytes */
	uint64_t reserved;		/* live tenants' limits, at most total */
	unsigned reserved_pct;		/* live tenants' shares, at most 100 */
	unsigned tasks;			/* live processes */
	bool unread;			/* its ledger refused or unreadable:
					 * not considered (all reserved) */
};

/* What the job asks for. */
struct vrun_request {
	uint64_t bytes;			/* VGPU_LEDGER_UNLIMITED: the whole GPU */
	unsigned pct;			/* 0: no compute share reserved */
};

uint64_t vrun_free_bytes(const struct vrun_gpu *g);
unsigned vrun_free_pct(const struct vrun_gpu *g);
bool vrun_fits(const struct vrun_gpu *g, const struct vrun_request *r);

/* The position in gpus[0..n) of the GPU to run on, or -1 if none fits.
 * Spread: the fewest tasks; binpack: the least unreserved memory, then
 * the least unreserved compute. Ties: the lowest index. */
int vrun_place(const struct vrun_gpu *gpus, size_t n,
	       const struct vrun_request *r, int mode);

/* "GPU 1 (GPU-...): 3.5 GiB of 16 GiB free, 70% compute free, 2 tasks" */
void vrun_describe_gpu(const struct vrun_gpu *g, char *buf, size_t len);

/* "2 GiB", "1.5 GiB", "512 MiB", "unlimited" */
void vrun_human_size(uint64_t bytes, char *buf, size_t len);

/* ---- vgpu-run-gpus.c: the driver and the ledger ------------------------ */

/* Lists the GPUs the driver at `driver` (a path, or a bare name searched
 * for as dlopen does) shows, in a child process that execs `self` with
 * --probe-gpus, so the driver is never loaded into the process that execs
 * the command, and with VGPU_DISABLE=1 so that a libvgpu preloaded
 * through /etc/ld.so.preload reports the physical GPUs. Returns the number
 * of GPUs (0 or more), or -VRUN_EXIT_DRIVER with err set. */
int vrun_list_gpus(const char *self, const char *driver,
		   struct vrun_gpu *gpus, size_t max, char *err, size_t errlen);

/* Where the GPUs are listed from: the CUDA driver (a path or a bare
 * name), the HIP runtime, and the driver to load before the runtime (the
 * simulated one, with --sim; else NULL). */
struct vrun_probe {
	const char *driver;
	const char *hip_runtime;
	const char *hip_driver;
};

/* Every GPU: the CUDA driver's first, in its order (fronts CUDA), then
 * the HIP runtime's not listed already (fronts HIP); one listed by both
 * under one key (the simulator) is one GPU of both. Each in its own probe
 * child, as vrun_list_gpus. One of the two failing is not an error: its
 * reason is left in err (else err is ""). Returns the number of GPUs, or
 * -VRUN_EXIT_DRIVER when both fail, err naming both. */
int vrun_list_all_gpus(const char *self, const struct vrun_probe *p,
		       struct vrun_gpu *gpus, size_t max, char *err,
		       size_t errlen);

/* The --probe-gpus child: writes one line per GPU, "<uuid> <bytes>", to
 * stdout, or "error <text>"; returns its exit status. */
int vrun_probe_main(const char *driver);

/* Adds the ledger's reservations to g: every tenant with a live process
 * (a locked slot byte), except `tenant` itself (the job's own tenant,
 * whose limit the job replaces), reserves its memory limit (unlimited: the
 * whole GPU) and its compute share; every live process is a task. A
 * missing file reserves nothing. Reads only; returns 0, or -1 with err
 * set for a file that is not a ledger of this version, or that this user
 * may not read or is a link (err: "skipped the ledger <path>: ...", its
 * owner and mode), or that a job with VGPU_LEDGER_GROUP `group` (NULL or
 * "": none) would not trust (vgpu_ledger_trusted); g unchanged. */
int vrun_scan_ledger(const char *dir, const char *group, const char *tenant,
		     struct vrun_gpu *g, char *err, size_t errlen);

/* ---- vgpu-run-hip-gpus.c: AMD/Hygon GPUs -------------------------------- */

/* The --probe-hip-gpus child: loads `driver` (if not NULL) then the HIP
 * runtime at `runtime`, writes one line per device, "<key> <bytes>" (the
 * ledger's key, as libvgpu-hip.so makes it), or "error <text>"; returns
 * its exit status. */
int vrun_probe_hip_main(const char *runtime, const char *driver);

/* HIP_VISIBLE_DEVICES that makes HIP ordinal `ordinal` (as the runtime
 * numbers devices under hip_env, HIP_VISIBLE_DEVICES, else cuda_env,
 * CUDA_VISIBLE_DEVICES, which HIP reads when its own is unset; either
 * NULL when unset) the job's only device: that list's entry, or with
 * neither the ordinal (relative to ROCR_VISIBLE_DEVICES, which stays).
 * Returns 0, or -1 when the list has no such entry or out is short. */
int vrun_hip_visible(const char *hip_env, const char *cuda_env,
		     unsigned ordinal, char *out, size_t len);

/* ---- vgpu-run-env.c: the library, LD_PRELOAD, the preload file --------- */

/* Finds libvgpu.so (sim false) or the simulator's libcuda.so.1 (sim true)
 * for the program at `exe` (its /proc/self/exe): $VGPU_LIBRARY (or
 * $VGPU_SIM_LIBRARY), then the build tree (<exe dir>/../intercept,
 * ../sim), then the installation (<prefix>/<libdir>, <libdir>/vgpu-sim,
 * where <prefix> is <exe dir>/..). Returns 0 with an absolute path in out,
 * or -1 with err listing where it looked. */
int vrun_find_library(const char *exe, bool sim, char *out, size_t len,
		      char *err, size_t errlen);

/* LD_PRELOAD `existing` (NULL or "" for none; entries separated by spaces
 * or colons) with `lib` first and no other libvgpu.so (an entry equal to
 * lib or named libvgpu.so): "lib:rest". Returns 0, -1 if out is short. */
int vrun_merge_preload(const char *existing, const char *lib, char *out,
		       size_t len);

/* Makes `file` (/etc/ld.so.preload) list `lib`: unchanged if it does;
 * else a line naming another libvgpu.so is replaced, or lib is appended;
 * every other line is kept. Written to a temporary file and renamed into
 * place. Returns 0 (changed), 1 (already there), or -1 with err set. */
int vrun_install_preload(const char *file, const char *lib, char *err,
			 size_t errlen);

/* ---- vgpu-run-hip.c: HIP jobs ---------------------------------------- */

/* Whether cmd (as execvp finds it) is an ELF program that needs the HIP
 * runtime (a DT_NEEDED libamdhip64.so.N). */
bool vrun_is_hip_program(const char *cmd);

/* Finds libvgpu-hip.so beside `shim` (libvgpu.so's path, found by
 * vrun_find_library): $VGPU_HIP_LIBRARY, then <shim dir>/hip/ (the build
 * tree), then <shim dir>/ (the installation). Returns 0 with the path in
 * out, or -1 with err listing where it looked. */
int vrun_find_hip_library(const char *shim, char *out, size_t len,
			  char *err, size_t errlen);

/* The probe children's lines (vgpu-run --probe-gpus, --probe-hip-gpus):
 * marked, since the driver or runtime they load may print too; a probe
 * that does not finish in VRUN_PROBE_TIMEOUT_MS is killed. */
#define PROBE_GPU "vgpu-probe-gpu "
#define PROBE_ERROR "vgpu-probe-error "
#define VRUN_PROBE_TIMEOUT_MS 20000

#endif /* VGPU_RUN_H */
