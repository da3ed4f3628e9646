/* vgpu-ctl.h - vgpu-ctl's parts, grouped by the file that defines them.
 *
 * vgpu-ctl changes a running tenant's terms in the ledger of each GPU it
 * runs on, and shows them (docs/control.md). The change itself is the
 * core's (vgpu/ledger_ctl.c); here are the command line, the choice of
 * ledgers and what is printed.
 */
#ifndef VGPU_CTL_H
#define VGPU_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"

/* Exit codes (docs/control.md): 64-68 as vgpu-run's, 69, 74, 75 and 77 as
 * sysexits.h's EX_UNAVAILABLE, EX_IOERR, EX_TEMPFAIL and EX_NOPERM. */
#define CTL_EXIT_USAGE		64	/* bad command line */
#define CTL_EXIT_VALUE		65	/* a bad option value or tenant name */
#define CTL_EXIT_NOTENANT	66	/* no ledger chosen has the tenant */
#define CTL_EXIT_NOGPU		67	/* no ledger, or --gpu names none */
#define CTL_EXIT_DRIVER		68	/* --gpu N: the driver is unusable */
#define CTL_EXIT_UNAVAILABLE	69	/* suspend: a process cannot be
					 * (no VGPU_CONTROL) */
#define CTL_EXIT_LEDGER		74	/* a ledger unusable (damaged, I/O) */
#define CTL_EXIT_TIMEOUT	75	/* the tenant's lock held too long, or
					 * suspend/resume not carried out by
					 * every process within --wait */
#define CTL_EXIT_PERM		77	/* this user may not write (read) it */

#define CTL_MAX_GPUS		64

enum ctl_cmd { CTL_SET, CTL_SHOW, CTL_SUSPEND, CTL_RESUME };

/* The command line, parsed; strings point into argv. */
struct ctl_args {
	int cmd;			/* enum ctl_cmd */
	const char *tenant;
	const char *gpu;		/* --gpu as given, or NULL: all */
	bool gpu_is_index;
	unsigned gpu_index;
	const char *dir;		/* --ledger-dir, $VGPU_LEDGER_DIR or
					 * /dev/shm/vgpu */
	struct vgpu_ledger_change change;	/* set: the fields given;
						 * suspend, resume: SUSPEND */
	unsigned wait_ms;		/* suspend, resume: --wait */
	bool help;
	const char *probe_driver;	/* internal: --probe-gpus DRIVER */
};

/* ---- vgpu-ctl-args.c: the command line ------------------------------------ */

/* Parses argv; values through the library's option parsers (as
 * VGPU_MEMORY_LIMIT, VGPU_COMPUTE_LIMIT, VGPU_COMPUTE_POLICY and
 * VGPU_HOST_SPILL_LIMIT are read). 0, or CTL_EXIT_USAGE / CTL_EXIT_VALUE
 * with one line in err naming the option, the value and what was
 * expected. */
int ctl_parse_args(int argc, char **argv, struct ctl_args *a, char *err,
		   size_t errlen);

extern const char ctl_usage[];

/* ---- vgpu-ctl-print.c: what is printed -------------------------------------- */

/* "1.5 GiB (1610612736 bytes)"-style sizes, "unlimited". */
void ctl_size(uint64_t bytes, char *buf, size_t len);

/* Of a tenant's live processes: those suspended now, those that cannot be
 * (started without VGPU_CONTROL). */
struct ctl_procs_seen {
	unsigned suspended, unwatched;
};

/* The record of `tenant` on GPU `uuid` (ledger `path`), `live` processes:
 * terms, usage, "over limit by", the suspension, the last change. */
void ctl_print_show(const char *uuid, const char *path,
		    const struct vgpu_ledger_tenant *t, unsigned live,
		    const struct ctl_procs_seen *seen);

/* How a suspend or resume ended on one GPU. */
enum ctl_outcome { CTL_DONE, CTL_PENDING, CTL_SUPERSEDED };

/* What a suspend (want) or resume did on one GPU: the record as the change
 * left it (*t), the processes as they answered (n of them), how it ended
 * (superseded: by change `by`, the other way). */
void ctl_print_suspend(const char *uuid, const struct vgpu_ledger_tenant *t,
		       bool want, const struct vgpu_ledger_ctlproc *p,
		       unsigned n, enum ctl_outcome how, uint64_t by,
		       unsigned wait_ms);

/* What a set did, from the record as it left it. */
void ctl_print_set(const char *uuid, const struct vgpu_ledger_tenant *t,
		   unsigned live);

#endif /* VGPU_CTL_H */
