/* vgpu-top.h - vgpu-top's internal header: the snapshot of every ledger
 * in a directory, the rates computed from a history of snapshots, and the
 * output formats. Prototypes are grouped by the file that defines them.
 *
 * vgpu-top reads ledgers through include/vgpu.h only (mmap PROT_READ); it
 * never writes one and depends on nothing in vgpu/.
 */
#ifndef VGPU_TOP_H
#define VGPU_TOP_H

#include "vgpu.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#define TOP_SCHEMA_VERSION	1
#define TOP_PATH_MAX		4096

/* A slot's state, as seen from outside. */
enum top_state {
	TOP_ALIVE,		/* its owner holds the slot's lock */
	TOP_EXITED,		/* owner gone, usage still charged until reclaimed */
	TOP_REAPING,		/* a reclaimer holds it right now */
};

/* Rates over a window; `valid` false when there is no earlier sample. */
struct top_rates {
	bool valid;
	double window_s;	/* the span actually measured */
	double share_pct;	/* GPU time / wall time, percent */
	double launches_per_s;
	double wait_pct;	/* admission wait / wall time, percent */
};

struct top_proc {
	uint32_t slot;
	uint32_t generation;
	uint32_t tenant;	/* index of its tenant record */
	int32_t pid;		/* getpid() in its own pid namespace */
	int32_t host_pid;	/* its pid on the host; 0: not known */
	bool pid_here;		/* pid confirmed to name it in vgpu-top's
				 * pid namespace (top_snap_read) */
	uint64_t start_ns;	/* CLOCK_REALTIME at join */
	enum top_state state;
	uint64_t usage[VGPU_USAGE_COUNT];
	uint64_t used;		/* the device kinds' sum */
	uint64_t allocs, frees, failures;
	uint64_t launches, launches_throttled, wait_ns, gpu_time_ns;
	uint32_t flags;		/* VGPU_LEDGER_SLOT_*: can be suspended, is */
	struct top_rates r1, r10;
};

struct top_tenant {
	uint32_t index;
	char name[VGPU_LEDGER_NAME_MAX];
	uint64_t mem_limit;	/* VGPU_LEDGER_UNLIMITED: none */
	uint64_t used;
	uint64_t spill_limit;
	uint64_t usage[VGPU_USAGE_COUNT];
	uint32_t share_pct;	/* 0: no compute cap */
	uint32_t policy;
	uint64_t gpu_time_ns, wait_ns;
	uint64_t launches;	/* the sum over its slots in this snapshot */
	int procs, alive;
	struct top_rates r1, r10;
	/* The last change an administrator made (vgpu-ctl, docs/control.md):
	 * all zero while ctl_changes is 0. */
	uint64_t ctl_changes;	/* changes so far (a counter) */
	uint64_t ctl_ns;	/* CLOCK_REALTIME of the last */
	uint32_t ctl_uid;	/* its maker's real uid */
	int32_t ctl_pid;	/* its pid in its own namespace */
	int32_t ctl_host_pid;	/* its pid on the host; 0: the same */
	uint32_t ctl_fields;	/* VGPU_LEDGER_CTL_* it set */
	char ctl_user[64];	/* ctl_uid's user name; "": none found */
	bool suspended;		/* vgpu-ctl suspend in force */
	int procs_suspended;	/* its live processes that carried it out */
};

struct top_gpu {
	char path[TOP_PATH_MAX];
	char uuid[VGPU_LEDGER_UUID_MAX];
	uint64_t physical_bytes;
	uint64_t created_ns;
	uint64_t joins;
	uint64_t slices_bytes;	/* sum of the finite tenant limits */
	int unlimited_tenants;	/* tenants with no memory limit */
	uint64_t used, spilled;	/* over all tenants */
	uint64_t gpu_time_ns;	/* over all tenants */
	struct top_rates r1, r10;	/* share_pct: utilisation */
	struct top_tenant *tenants;
	int ntenants;
	struct top_proc *procs;
	int nprocs;
};

/* A file skipped: not a usable ledger. */
struct top_skip {
	char *path;
	char *reason;		/* what was found, what was expected */
};

struct top_snap {
	double t;		/* CLOCK_MONOTONIC, seconds */
	uint64_t realtime_ns;
	struct top_gpu *gpus;
	int ngpus;
	struct top_skip *skipped;
	int nskipped;
};

/* ---- vgpu-top-snap.c ------------------------------------------------------ */

/* Reads every <uuid>.v<N>.ledger in dir into s (sorted by UUID). Each file
 * that cannot be used is skipped: it goes into s->skipped and gets one line
 * on `problems` if not NULL (path, what was found, what was expected;
 * escaped). Returns 0, or -1 (with a message) when the directory cannot be
 * listed; a missing directory is empty. A live slot whose host pid is not
 * known has its pid checked in /proc (top_proc.pid_here).
 * Not thread-safe: a static memo of those checks, getpwuid(), strerror();
 * callers in several threads serialise it (vgpu-top-http.c's lock). */
int top_snap_read(struct top_snap *s, const char *dir, FILE *problems);
void top_snap_free(struct top_snap *s);
/* Checks one mapped file; 0, or -1 with why in msg. */
int top_ledger_check(const void *base, size_t size, char *msg, size_t len);

/* ---- vgpu-top-hist.c ------------------------------------------------------ */

/* A ring of recent snapshots, from which the rates over the last second
 * and the last ten are computed. */
struct top_hist {
	struct top_snap *ring;
	int cap, count, head;	/* head: the next to write */
};

int top_hist_init(struct top_hist *h, int cap);
void top_hist_free(struct top_hist *h);
/* Fills s's rates from the history, then takes s into it (s is moved;
 * the caller must not free it). Returns the stored copy. */
const struct top_snap *top_hist_push(struct top_hist *h, struct top_snap *s);
/* Marks slots whose generation moved while the owner stayed the same
 * (a reclaimer holds them) as TOP_REAPING. Done by top_hist_push. */

/* ---- vgpu-top-text.c ------------------------------------------------------ */

enum top_sort { TOP_SORT_MEMORY, TOP_SORT_COMPUTE, TOP_SORT_PID,
		TOP_SORT_TENANT };

struct top_view {
	enum top_sort sort;
	const char *filter;	/* substring of tenant name or pid; NULL */
	bool color;		/* ANSI attributes */
	int width, height;	/* 0: unlimited */
};

/* "1.5 GiB" and the like, into buf. */
/* A usage, or a sum of them: never "unlimited", a word that belongs to
 * limits. One of TOP_DAMAGED_BYTES or more, which no memory holds (a
 * damaged or hand-edited ledger, or a sum that stopped at 2^64 - 1), is
 * marked with a '!' after its unit. */
#define TOP_DAMAGED_BYTES	(UINT64_C(1) << 63)
const char *top_bytes(uint64_t b, char *buf, size_t len);
/* A limit: "unlimited" for VGPU_LEDGER_UNLIMITED. */
const char *top_limit(uint64_t b, char *buf, size_t len);

/* How a string read from a file (a tenant name, a GPU UUID, a path) is
 * written out: never a control character. TEXT (terminal, Prometheus
 * labels): \xNN, and a backslash as \\. JSON (a string's inside): \u00NN,
 * and \" and \\. Escaped: bytes below 0x20, 0x7f, the C1 controls
 * (U+0080 to U+009F, as UTF-8) and every byte that is not part of valid
 * UTF-8; other UTF-8 characters are kept. */
enum top_esc { TOP_ESC_TEXT, TOP_ESC_JSON };

/* s escaped into buf (len > 0): as much as fits, never an escape or a
 * character cut in two. Returns buf. */
const char *top_escape(const char *s, enum top_esc how, char *buf,
		       size_t len);
/* s escaped, written to f. */
void top_put_escaped(FILE *f, const char *s, enum top_esc how);

/* Where a process's pid belongs. */
enum top_pidns {
	TOP_PIDNS_SAME,		/* vgpu-top's namespace: pid names it here */
	TOP_PIDNS_OTHER,	/* another; its host pid is known */
	TOP_PIDNS_UNKNOWN,	/* pid is its own namespace's, not confirmed
				 * here, and no host pid is known */
};

/* p's namespace, and in *shown the pid to show for it: pid (SAME), the
 * host pid (OTHER), or 0 (UNKNOWN). */
enum top_pidns top_pid_view(const struct top_proc *p, int32_t *shown);
const char *top_pidns_name(enum top_pidns ns);

/* One frame of text: the GPUs, their tenants and processes. */
void top_print_text(FILE *f, const struct top_snap *s,
		    const struct top_view *v);

/* ---- vgpu-top-export.c ---------------------------------------------------- */

const char *top_state_name(enum top_state st);
/* "hip" or "cuda": the front end of a process (its slot's flags). */
const char *top_front_end(uint32_t flags);
const char *top_policy_name(uint32_t policy);
/* The device bytes t holds past its memory limit; 0 within it or with no
 * limit. */
uint64_t top_over_limit(const struct top_tenant *t);
/* The names of the terms a change set (VGPU_LEDGER_CTL_* in fields, as
 * vgpu-ctl names them: "memory", "compute", "policy", "host-spill", and
 * "suspend" or "resume" by suspended, the state it left), into names
 * (room for TOP_CTL_FIELDS); returns how many. Bits this vgpu-top does
 * not know are left out. */
#define TOP_CTL_FIELDS	5
int top_ctl_fields(uint32_t fields, bool suspended,
		   const char *names[TOP_CTL_FIELDS]);
void top_print_json(FILE *f, const struct top_snap *s, const char *dir,
		    double interval_s);
void top_print_prometheus(FILE *f, const struct top_snap *s);

/* ---- vgpu-top-http.c ------------------------------------------------------ */

/* Where --listen serves. */
struct top_listen {
	const char *spec;	/* as given: "127.0.0.1:9400" */
	bool any;		/* ":PORT": every address, IPv6 and IPv4 */
	struct sockaddr_storage addr;	/* else the address (and port) */
	socklen_t addr_len;
	uint16_t port;		/* 0: any free port */
};

/* Parses "IPv4:PORT", "[IPv6]:PORT" or ":PORT" (numeric addresses only;
 * port 0 to 65535, 0 meaning any free port). 0, or -1 with a message
 * naming spec and what is wrong with it in msg. Pure. */
int top_listen_parse(const char *spec, struct top_listen *l, char *msg,
		     size_t len);
/* Serves GET/HEAD /metrics (a fresh read of dir each time, printed by
 * top_print_prometheus) until SIGINT or SIGTERM; prints the address it
 * listens on to stderr. Returns the exit status: 0 when stopped by a
 * signal, 1 when it cannot listen. */
int top_serve(const char *dir, const struct top_listen *l);

#endif
