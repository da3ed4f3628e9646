/* runtest.h - helpers of vgpu-run's end-to-end tests (test_vgpu_run_exec.c,
 * test_hami.c): a private directory per test, programs run with their
 * output captured, holders started and stopped, ledgers read from outside.
 *
 * Paths of the programs come from meson (tests/tools/meson.build).
 */
#ifndef VGPU_RUNTEST_H
#define VGPU_RUNTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "vgpu.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* The test's directory, and the environment of a job on the simulated
 * GPU: VGPU_LEDGER_DIR=<dir>/ledger, VGPU_SIM_STATE_DIR=<dir>/sim,
 * VGPU_SIM_MEMORY=<sim_memory> and VGPU_SIM_DEVICES=<devices>; every other
 * VGPU_* and HAMi variable removed. A .init; runtest_cleanup is the .fini. */
void runtest_setup(const char *sim_memory, int devices);
void runtest_cleanup(void);
const char *runtest_dir(void);
/* "<runtest_dir()>/<name>", in a static buffer of its own (8 rotate). */
char *runtest_path(const char *name);

struct run_result {
	int status;		/* as waitpid gives it */
	pid_t pid;
	char out[16384];	/* stdout, NUL-terminated */
	char err[16384];	/* stderr */
};

/* Runs argv (NULL-terminated) to completion, output captured. */
void runtest_run(char *const argv[], struct run_result *r);
#define RUN(r, ...) runtest_run((char *const[]){ __VA_ARGS__, NULL }, (r))

/* Whether r exited with code, or was killed by sig. */
bool runtest_exited(const struct run_result *r, int code);
bool runtest_killed(const struct run_result *r, int sig);

/* A running job that holds its GPU until stopped (tools-holder). */
struct holder {
	pid_t pid;
	int in;			/* its stdin: closing it stops it */
};
/* Starts argv and waits for its "ready" line (asserting it comes). */
void runtest_hold(struct holder *h, char *const argv[]);
#define HOLD(h, ...) runtest_hold((h), (char *const[]){ __VA_ARGS__, NULL })
/* Stops it; asserts it exits 0. */
void runtest_release(struct holder *h);

/* Maps <dir>/<uuid>.v3.ledger read-only, or the only ledger in dir if uuid
 * is NULL; NULL if there is none. runtest_unmap undoes it. */
const unsigned char *runtest_ledger(const char *dir, const char *uuid);
void runtest_unmap(const unsigned char *base);
/* The active tenant record called name, or NULL. */
const struct vgpu_ledger_tenant *runtest_tenant(const unsigned char *base,
						const char *name);

#endif /* VGPU_RUNTEST_H */
