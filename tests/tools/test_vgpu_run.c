/* test_vgpu_run.c - vgpu-run's decisions without a driver: the command
 * line, placement, LD_PRELOAD, the preload file, finding the library, and
 * reading reservations from a ledger made by the core's own ledger code.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vgpu-run.h"
#include "front.h"
#include "ledger.h"
#include "throttle.h"
#include "options.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

static char err[4096];
static struct vrun_args a;

/* vrun_parse_args on a NULL-terminated list after "vgpu-run". */
static int parse_v(const char *const *words)
{
	static char *argv[64];
	int argc = 0;

	argv[argc++] = "vgpu-run";
	while (*words)
		argv[argc++] = (char *)*words++;
	argv[argc] = NULL;
	return vrun_parse_args(argc, argv, &a, err, sizeof(err));
}
#define PARSE(...) parse_v((const char *const[]){ __VA_ARGS__, NULL })

/* ---- the command line --------------------------------------------------- */

Test(run_args, every_option_accepted)
{
	cr_assert_eq(PARSE("--memory", "4096m", "--compute", "30%",
			   "--policy", "ELASTIC", "--overcommit", "auto",
			   "--gpu", "auto", "--place", "binpack", "--tenant",
			   "team-a", "--sim", "--verbose", "--", "python",
			   "train.py", "--memory", "x"), 0, "%s", err);
	cr_assert_str_eq(a.memory, "4096m");
	cr_assert_str_eq(a.compute, "30%");
	cr_assert_str_eq(a.tenant, "team-a");
	cr_assert_eq(a.gpu_mode, VRUN_GPU_AUTO);
	cr_assert_eq(a.place, VRUN_PLACE_BINPACK);
	cr_assert(a.sim && a.verbose);
	cr_assert_str_eq(a.command[0], "python");
	cr_assert_str_eq(a.command[2], "--memory", "the command's own");
	cr_assert_null(a.command[4]);
}

Test(run_args, equals_form_and_no_double_dash)
{
	cr_assert_eq(PARSE("--memory=8GiB", "--gpu=GPU-5e1f0a", "nvidia-smi",
			   "-L"), 0, "%s", err);
	cr_assert_str_eq(a.memory, "8GiB");
	cr_assert_eq(a.gpu_mode, VRUN_GPU_UUID);
	cr_assert_str_eq(a.command[0], "nvidia-smi");
	cr_assert_str_eq(a.command[1], "-L");
}

Test(run_args, gpu_index)
{
	cr_assert_eq(PARSE("--gpu", "3", "true"), 0, "%s", err);
	cr_assert_eq(a.gpu_mode, VRUN_GPU_INDEX);
	cr_assert_eq(a.gpu_index, 3);
	cr_assert_eq(PARSE("true"), 0);
	cr_assert_eq(a.gpu_mode, VRUN_GPU_NONE, "no --gpu: left alone");
}

Test(run_args, library_values_accepted)
{
	cr_assert_eq(PARSE("--memory", "unlimited", "true"), 0, "%s", err);
	cr_assert_eq(PARSE("--memory", "8 gib", "true"), 0, "%s", err);
	cr_assert_eq(PARSE("--compute", "100", "true"), 0, "%s", err);
	cr_assert_eq(PARSE("--policy", "off", "true"), 0, "%s", err);
	cr_assert_eq(PARSE("--overcommit", "Managed", "true"), 0, "%s", err);
}

/* A bad value: 65, and a message naming the option, the value and what
 * was expected. */
static void bad_value(const char *opt, const char *value, const char *want)
{
	cr_assert_eq(PARSE(opt, value, "true"), VRUN_EXIT_VALUE,
		     "%s %s accepted", opt, value);
	cr_assert(strstr(err, opt), "%s", err);
	cr_assert(strstr(err, value), "%s", err);
	cr_assert(strstr(err, "expected"), "%s", err);
	cr_assert(strstr(err, want), "'%s' not in: %s", want, err);
}

Test(run_args, bad_values)
{
	bad_value("--memory", "8GB", "unknown unit");
	bad_value("--memory", "1.5G", "whole number");
	bad_value("--memory", "-1", "negative");
	bad_value("--memory", "0", "at least 1 byte");
	bad_value("--memory", "99999999999999999999", "too large");
	bad_value("--compute", "0", "1 to 100");
	bad_value("--compute", "101", "1 to 100");
	bad_value("--compute", "thirty", "percentage");
	bad_value("--policy", "soft", "hard");
	bad_value("--overcommit", "swap", "managed");
	bad_value("--tenant", "a b", "printable");
	bad_value("--gpu", "first", "GPU index");
	bad_value("--gpu", "64", "GPU index");
	bad_value("--gpu", "1x", "GPU index");
	bad_value("--place", "random", "spread or binpack");
}

Test(run_args, usage_errors)
{
	cr_assert_eq(PARSE("--frobnicate", "true"), VRUN_EXIT_USAGE);
	cr_assert(strstr(err, "--frobnicate"), "%s", err);
	cr_assert_eq(PARSE("--memory"), VRUN_EXIT_USAGE);
	cr_assert(strstr(err, "needs a value"), "%s", err);
	cr_assert_eq(PARSE("--memory", "1GiB"), VRUN_EXIT_USAGE);
	cr_assert(strstr(err, "no command"), "%s", err);
	cr_assert_eq(PARSE("--place", "spread", "true"), VRUN_EXIT_USAGE);
	cr_assert(strstr(err, "--gpu auto"), "%s", err);
	cr_assert_eq(PARSE("--install-preload", "--", "true"),
		     VRUN_EXIT_USAGE);
}

Test(run_args, install_preload)
{
	cr_assert_eq(PARSE("--install-preload"), 0, "%s", err);
	cr_assert(a.install_preload);
	cr_assert_null(a.preload_file);
	cr_assert_eq(PARSE("--install-preload", "/tmp/x.preload"), 0);
	cr_assert_str_eq(a.preload_file, "/tmp/x.preload");
	cr_assert_eq(PARSE("--install-preload=relative"), VRUN_EXIT_VALUE);
	cr_assert_eq(PARSE("--help"), 0);
	cr_assert(a.help);
}

/* ---- placement ------------------------------------------------------------ */

static struct vrun_gpu gpu(unsigned index, uint64_t total, uint64_t reserved,
			   unsigned pct, unsigned tasks)
{
	struct vrun_gpu g = { .index = index, .total = total,
			      .reserved = reserved, .reserved_pct = pct,
			      .tasks = tasks };

	snprintf(g.uuid, sizeof(g.uuid), "GPU-%u", index);
	return g;
}

Test(run_place, spread_takes_fewest_tasks)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 2 * GIB, 20, 3),
		gpu(1, 16 * GIB, 8 * GIB, 60, 1),
		gpu(2, 16 * GIB, 0, 0, 2),
	};
	struct vrun_request r = { 4 * GIB, 30 };

	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), 1);
}

Test(run_place, binpack_takes_fullest_that_fits)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 2 * GIB, 20, 3),
		gpu(1, 16 * GIB, 10 * GIB, 60, 1),
		gpu(2, 16 * GIB, 13 * GIB, 10, 1),	/* 3 GiB left: too few */
		gpu(3, 16 * GIB, 0, 0, 0),
	};
	struct vrun_request r = { 4 * GIB, 30 };

	cr_assert_eq(vrun_place(g, 4, &r, VRUN_PLACE_BINPACK), 1);
	r.pct = 50;	/* GPU 1 has 40% left */
	cr_assert_eq(vrun_place(g, 4, &r, VRUN_PLACE_BINPACK), 0);
}

Test(run_place, binpack_ties_on_memory_go_to_less_compute)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 8 * GIB, 10, 1),
		gpu(1, 16 * GIB, 8 * GIB, 50, 1),
	};
	struct vrun_request r = { GIB, 10 };

	cr_assert_eq(vrun_place(g, 2, &r, VRUN_PLACE_BINPACK), 1);
}

Test(run_place, ties_go_to_lowest_index)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 4 * GIB, 0, 2),
		gpu(1, 16 * GIB, 0, 0, 1),
		gpu(2, 16 * GIB, 0, 0, 1),
		gpu(3, 16 * GIB, 0, 0, 1),
	};
	struct vrun_request r = { GIB, 0 };

	cr_assert_eq(vrun_place(g, 4, &r, VRUN_PLACE_SPREAD), 1);
	cr_assert_eq(vrun_place(g, 4, &r, VRUN_PLACE_BINPACK), 0);
	g[0].reserved = 0;
	cr_assert_eq(vrun_place(g + 1, 3, &r, VRUN_PLACE_BINPACK), 0,
		     "index 1, at position 0");
}

Test(run_place, full_gpus_are_skipped)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 16 * GIB, 0, 0),	/* memory full */
		gpu(1, 16 * GIB, 0, 100, 0),		/* compute full */
		gpu(2, 16 * GIB, 15 * GIB, 90, 9),
	};
	struct vrun_request r = { GIB, 10 };

	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), 2);
	r.bytes = GIB + 1;
	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), -1);
	r.bytes = 1;
	r.pct = 11;
	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), -1);
}

Test(run_place, exact_fit)
{
	struct vrun_gpu g = gpu(0, 16 * GIB, 12 * GIB, 70, 5);
	struct vrun_request r = { 4 * GIB, 30 };

	cr_assert(vrun_fits(&g, &r));
	r.pct = 31;
	cr_assert_not(vrun_fits(&g, &r));
}

Test(run_place, unlimited_request_needs_a_whole_gpu)
{
	struct vrun_gpu g[] = {
		gpu(0, 16 * GIB, 1, 0, 1),
		gpu(1, 16 * GIB, 0, 40, 1),
		gpu(2, 16 * GIB, 0, 0, 7),
	};
	struct vrun_request r = { VGPU_LEDGER_UNLIMITED, 0 };

	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), 1,
		     "memory untouched, compute reserved elsewhere is fine");
	r.pct = 70;
	cr_assert_eq(vrun_place(g, 3, &r, VRUN_PLACE_SPREAD), 2);
}

Test(run_place, no_gpus)
{
	struct vrun_request r = { GIB, 0 };

	cr_assert_eq(vrun_place(NULL, 0, &r, VRUN_PLACE_SPREAD), -1);
}

Test(run_place, many_gpus)
{
	static struct vrun_gpu g[VRUN_MAX_GPUS];
	struct vrun_request r = { 2 * GIB, 25 };

	for (unsigned i = 0; i < VRUN_MAX_GPUS; i++)
		g[i] = gpu(i, 80 * GIB, (uint64_t)(i % 41) * 2 * GIB,
			   (i * 7) % 101, 1 + i % 5);
	int s = vrun_place(g, VRUN_MAX_GPUS, &r, VRUN_PLACE_SPREAD);
	int b = vrun_place(g, VRUN_MAX_GPUS, &r, VRUN_PLACE_BINPACK);

	/* Checked against a plain scan. */
	int want_s = -1, want_b = -1;
	for (unsigned i = 0; i < VRUN_MAX_GPUS; i++) {
		if (!vrun_fits(&g[i], &r))
			continue;
		if (want_s < 0 || g[i].tasks < g[want_s].tasks)
			want_s = (int)i;
		if (want_b < 0 ||
		    vrun_free_bytes(&g[i]) < vrun_free_bytes(&g[want_b]) ||
		    (vrun_free_bytes(&g[i]) == vrun_free_bytes(&g[want_b]) &&
		     vrun_free_pct(&g[i]) < vrun_free_pct(&g[want_b])))
			want_b = (int)i;
	}
	cr_assert_geq(want_s, 0);
	cr_assert_eq(s, want_s);
	cr_assert_eq(b, want_b);
	cr_assert_eq(g[s].tasks, 1);
}

Test(run_place, describe)
{
	struct vrun_gpu g = gpu(1, 16 * GIB, 12 * GIB + 512 * MIB, 70, 2);
	char line[256];

	vrun_describe_gpu(&g, line, sizeof(line));
	cr_assert_str_eq(line, "GPU 1 (GPU-1): 3.5 GiB of 16 GiB memory free, "
			 "30% compute free, 2 tasks");
	g.reserved = 64 * GIB;	/* more than the GPU: nothing free */
	vrun_describe_gpu(&g, line, sizeof(line));
	cr_assert(strstr(line, ": 0 B of 16 GiB"), "%s", line);
	/* A GPU whose ledger was refused is not "0 B free": it is not
	 * considered, and the reason was said above. */
	g.unread = true;
	vrun_describe_gpu(&g, line, sizeof(line));
	cr_assert_str_eq(line, "GPU 1 (GPU-1): 16 GiB, not considered: its "
			 "ledger could not be used (above)");
}

/* ---- LD_PRELOAD ----------------------------------------------------------- */

static const char *merge(const char *existing)
{
	static char out[512];

	cr_assert_eq(vrun_merge_preload(existing, "/opt/lib/libvgpu.so", out,
					sizeof(out)), 0);
	return out;
}

Test(run_env, preload_merged)
{
	cr_assert_str_eq(merge(NULL), "/opt/lib/libvgpu.so");
	cr_assert_str_eq(merge(""), "/opt/lib/libvgpu.so");
	cr_assert_str_eq(merge("/a/libx.so"), "/opt/lib/libvgpu.so:/a/libx.so");
	cr_assert_str_eq(merge("/a/libx.so /b/liby.so"),
			 "/opt/lib/libvgpu.so:/a/libx.so:/b/liby.so");
	cr_assert_str_eq(merge(":/a/libx.so::/opt/lib/libvgpu.so: "),
			 "/opt/lib/libvgpu.so:/a/libx.so", "no duplicate");
	cr_assert_str_eq(merge("/usr/local/vgpu/libvgpu.so:/a/libx.so"),
			 "/opt/lib/libvgpu.so:/a/libx.so",
			 "another libvgpu.so replaced");
	cr_assert_str_eq(merge("/a/libvgpu.so.bak"),
			 "/opt/lib/libvgpu.so:/a/libvgpu.so.bak");
}

Test(run_env, preload_too_long)
{
	char out[16];

	cr_assert_eq(vrun_merge_preload("/a/b", "/opt/lib/libvgpu.so", out,
					sizeof(out)), -1);
}

/* ---- the preload file ------------------------------------------------------ */

static char tmpdir[256];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/vgpu-run-test-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	cr_assert_eq(system(cmd), 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static const char *read_text(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	cr_assert_not_null(f, "%s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

Test(run_preload_file, created_then_idempotent, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char file[300];
	struct stat st;

	snprintf(file, sizeof(file), "%s/ld.so.preload", tmpdir);
	cr_assert_eq(vrun_install_preload(file, "/usr/local/vgpu/libvgpu.so",
					  err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(read_text(file), "/usr/local/vgpu/libvgpu.so\n");
	cr_assert_eq(stat(file, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0644);
	cr_assert_eq(vrun_install_preload(file, "/usr/local/vgpu/libvgpu.so",
					  err, sizeof(err)), 1);
	cr_assert_str_eq(read_text(file), "/usr/local/vgpu/libvgpu.so\n");
}

Test(run_preload_file, other_lines_kept, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char file[300];

	snprintf(file, sizeof(file), "%s/ld.so.preload", tmpdir);
	write_text(file, "# preloads\n/lib/libfoo.so\n/lib/libbar.so");
	cr_assert_eq(vrun_install_preload(file, "/opt/libvgpu.so", err,
					  sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(read_text(file), "# preloads\n/lib/libfoo.so\n"
			 "/lib/libbar.so\n/opt/libvgpu.so\n");
	write_text(file, "/lib/libfoo.so /opt/libvgpu.so\n");
	cr_assert_eq(vrun_install_preload(file, "/opt/libvgpu.so", err,
					  sizeof(err)), 1, "on a shared line");
}

Test(run_preload_file, moved_library_replaced, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char file[300];

	snprintf(file, sizeof(file), "%s/ld.so.preload", tmpdir);
	write_text(file, "/lib/libfoo.so\n/usr/local/vgpu/libvgpu.so\n");
	chmod(file, 0600);
	cr_assert_eq(vrun_install_preload(file, "/opt/libvgpu.so", err,
					  sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(read_text(file), "/lib/libfoo.so\n/opt/libvgpu.so\n");
	struct stat st;
	cr_assert_eq(stat(file, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600, "the mode is kept");
}

Test(run_preload_file, unwritable_is_an_error, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char file[300];

	snprintf(file, sizeof(file), "%s/missing/ld.so.preload", tmpdir);
	cr_assert_eq(vrun_install_preload(file, "/opt/libvgpu.so", err,
					  sizeof(err)), -1);
	cr_assert(strstr(err, "cannot write"), "%s", err);
	cr_assert(strstr(err, file), "%s", err);
}

/* ---- finding the library ---------------------------------------------------- */

static void touch(const char *path)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\" && : > '%s'",
		 path, path);
	cr_assert_eq(system(cmd), 0);
}

Test(run_find, build_tree_then_install, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char exe[300], want[600], out[VRUN_PATH_MAX];

	unsetenv("VGPU_LIBRARY");
	unsetenv("VGPU_SIM_LIBRARY");
	snprintf(exe, sizeof(exe), "%s/tools/vgpu-run", tmpdir);
	touch(exe);
	cr_assert_eq(vrun_find_library(exe, false, out, sizeof(out), err,
				       sizeof(err)), -1);
	cr_assert(strstr(err, "VGPU_LIBRARY"), "%s", err);
	snprintf(want, sizeof(want), "%s/intercept/libvgpu.so", tmpdir);
	touch(want);
	cr_assert_eq(vrun_find_library(exe, false, out, sizeof(out), err,
				       sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(out, want);

	snprintf(exe, sizeof(exe), "%s/inst/%s/vgpu-run", tmpdir, VRUN_BINDIR);
	snprintf(want, sizeof(want), "%s/inst/%s/vgpu-sim/libcuda.so.1",
		 tmpdir, VRUN_LIBDIR);
	touch(want);
	cr_assert_eq(vrun_find_library(exe, true, out, sizeof(out), err,
				       sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(out, want);
}

Test(run_find, override, .init = make_tmpdir, .fini = remove_tmpdir)
{
	char lib[300], out[VRUN_PATH_MAX];

	snprintf(lib, sizeof(lib), "%s/x/libvgpu.so", tmpdir);
	touch(lib);
	setenv("VGPU_LIBRARY", lib, 1);
	cr_assert_eq(vrun_find_library("/nowhere/vgpu-run", false, out,
				       sizeof(out), err, sizeof(err)), 0);
	cr_assert_str_eq(out, lib);
	setenv("VGPU_LIBRARY", "libvgpu.so", 1);
	cr_assert_eq(vrun_find_library("/nowhere/vgpu-run", false, out,
				       sizeof(out), err, sizeof(err)), -1);
	cr_assert(strstr(err, "VGPU_LIBRARY=\"libvgpu.so\""), "%s", err);
}

/* ---- reservations from a ledger --------------------------------------------- */

#define UUID "GPU-00000000-1111-2222-3333-444444444444"

static struct vrun_gpu ledger_gpu(void)
{
	struct vrun_gpu g = gpu(0, 16 * GIB, 0, 0, 0);

	snprintf(g.uuid, sizeof(g.uuid), UUID);
	return g;
}

static struct vgpu_slot *join(struct vgpu_ledger *l, const char *tenant,
			      uint64_t limit, unsigned share)
{
	struct vgpu_slot *s = NULL;

	cr_assert_geq(vgpu_ledger_join(l, tenant, limit, getpid(), 0, &s, err,
				       sizeof(err)), 0, "%s", err);
	if (share)
		cr_assert_eq(vgpu_throttle_configure(s, share, VGPU_POLICY_HARD,
						     1), 0);
	return s;
}

Test(run_ledger, live_tenants_reserve, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();

	cr_assert_eq(vgpu_ledger_open(tmpdir, UUID, 16 * GIB, &l, err,
				      sizeof(err)), 0, "%s", err);
	join(l, "a", 4 * GIB, 30);
	join(l, "a", 4 * GIB, 30);	/* a second process of a */
	join(l, "b", 2 * GIB, 0);
	join(l, "c", 1 * GIB, 25);

	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(g.tasks, 4);
	cr_assert_eq(g.reserved, 7 * GIB);
	cr_assert_eq(g.reserved_pct, 55);

	g = ledger_gpu();	/* the job's own tenant does not count */
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "a", &g, err,
				      sizeof(err)), 0);
	cr_assert_eq(g.tasks, 4);
	cr_assert_eq(g.reserved, 3 * GIB);
	cr_assert_eq(g.reserved_pct, 25);
	vgpu_ledger_close(l);
}

Test(run_ledger, unlimited_tenant_takes_the_gpu, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();

	cr_assert_eq(vgpu_ledger_open(tmpdir, UUID, 16 * GIB, &l, err,
				      sizeof(err)), 0, "%s", err);
	join(l, "a", 4 * GIB, 0);
	join(l, "greedy", VGPU_LEDGER_UNLIMITED, 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), 0);
	cr_assert_eq(g.reserved, 16 * GIB);
	cr_assert_eq(vrun_free_bytes(&g), 0);
	vgpu_ledger_close(l);
}

Test(run_ledger, dead_processes_reserve_nothing, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* Joins and dies without leaving. */
		if (vgpu_ledger_open(tmpdir, UUID, 16 * GIB, &l, err,
				     sizeof(err)) != 0)
			_exit(1);
		struct vgpu_slot *s;
		_exit(vgpu_ledger_join(l, "dead", 8 * GIB, getpid(), 0, &s,
				       err, sizeof(err)) < 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), 0);
	cr_assert_eq(g.tasks, 0);
	cr_assert_eq(g.reserved, 0);
}

Test(run_ledger, missing_file_is_empty, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vrun_gpu g = ledger_gpu();

	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), 0);
	cr_assert_eq(g.tasks + g.reserved + g.reserved_pct, 0);
}

Test(run_ledger, bad_files_refused, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	char path[400];
	struct vrun_gpu g = ledger_gpu();
	int fd;

	snprintf(path, sizeof(path), "%s/%s.v3.ledger", tmpdir, UUID);
	write_text(path, "short");
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), -1);
	cr_assert(strstr(err, "wrong size"), "%s", err);
	fd = open(path, O_WRONLY | O_TRUNC);
	cr_assert_eq(ftruncate(fd, VGPU_LEDGER_FILE_SIZE), 0);
	close(fd);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), -1);
	cr_assert(strstr(err, "magic"), "%s", err);
	cr_assert(strstr(err, path), "%s", err);
	cr_assert_eq(g.reserved + g.tasks, 0, "g unchanged");
}

/* Scans as OTHER_UID in a child when root (else as itself, the file's
 * mode taken away): -1, and a message naming the file, who owns it and
 * its mode. */
Test(run_ledger, an_unreadable_ledger_is_skipped_by_name,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
	struct result { int rc; char err[1024]; struct vrun_gpu g; } *r;
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();
	char path[400];
	int status;
	pid_t pid;

	cr_assert_eq(vgpu_ledger_open(tmpdir, UUID, 16 * GIB, &l, err,
				      sizeof(err)), 0, "%s", err);
	join(l, "a", 4 * GIB, 30);
	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", tmpdir, UUID,
		 VGPU_LEDGER_VERSION);
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r, MAP_FAILED);
	cr_assert_eq(chmod(tmpdir, 0755), 0);
	if (geteuid() != 0)
		cr_assert_eq(chmod(path, 0), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (geteuid() == 0 && (setgroups(0, NULL) != 0 ||
				       setresgid(65534, 65534, 65534) != 0 ||
				       setresuid(65534, 65534, 65534) != 0))
			_exit(1);
		r->g = g;
		r->rc = vrun_scan_ledger(tmpdir, NULL, "me", &r->g, r->err,
					 sizeof(r->err));
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_expect_eq(r->rc, -1);
	cr_expect(strstr(r->err, "skipped the ledger"), "%s", r->err);
	cr_expect(strstr(r->err, path), "%s", r->err);
	cr_expect(strstr(r->err, "permission denied"), "%s", r->err);
	cr_expect(strstr(r->err, geteuid() ? "mode 0000" : "mode 0600"), "%s",
		  r->err);
	cr_expect(strstr(r->err, "VGPU_LEDGER_GROUP"), "%s", r->err);
	cr_expect_eq(r->g.reserved + r->g.tasks, 0, "g unchanged");
	munmap(r, sizeof(*r));
	vgpu_ledger_close(l);
}

Test(run_ledger, a_symlink_is_skipped, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vrun_gpu g = ledger_gpu();
	char path[400];

	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", tmpdir, UUID,
		 VGPU_LEDGER_VERSION);
	cr_assert_eq(symlink("/etc/passwd", path), 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), -1);
	cr_expect(strstr(err, "a symbolic link, never followed"), "%s", err);
	cr_expect(strstr(err, path), "%s", err);
}

/* A FIFO planted under the name: refused at once, not waited on for a
 * writer (the timeout fails the test rather than hanging it). */
Test(run_ledger, a_fifo_is_skipped_at_once, .init = make_tmpdir,
     .fini = remove_tmpdir, .timeout = 20)
{
	struct vrun_gpu g = ledger_gpu();
	char path[400];

	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", tmpdir, UUID,
		 VGPU_LEDGER_VERSION);
	cr_assert_eq(mkfifo(path, 0644), 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), -1);
	cr_expect(strstr(err, "not a file"), "%s", err);
	cr_expect(strstr(err, path), "%s", err);
	cr_expect_eq(g.reserved + g.tasks, 0, "g unchanged");
}

/* A link in the ledger directory's place is not followed, as the job
 * would not follow it. */
Test(run_ledger, a_linked_directory_is_skipped, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();
	char real[400], link_path[400];

	snprintf(real, sizeof(real), "%s/real", tmpdir);
	snprintf(link_path, sizeof(link_path), "%s/link", tmpdir);
	cr_assert_eq(mkdir(real, 0700), 0);
	cr_assert_eq(vgpu_ledger_open(real, UUID, 16 * GIB, &l, err,
				      sizeof(err)), 0, "%s", err);
	join(l, "a", 4 * GIB, 30);
	cr_assert_eq(symlink(real, link_path), 0);
	cr_assert_eq(vrun_scan_ledger(link_path, NULL, "me", &g, err,
				      sizeof(err)),
		     -1);
	cr_expect(strstr(err, "symbolic link"), "%s", err);
	cr_expect_eq(g.reserved + g.tasks, 0, "g unchanged");
	cr_assert_eq(vrun_scan_ledger(real, NULL, "me", &g, err,
				      sizeof(err)), 0,
		     "%s", err);
	cr_expect_eq(g.reserved, 4 * GIB);
	vgpu_ledger_close(l);
}

/* Another user's ledger (a job of this user would refuse it) is not
 * believed: the GPU is not considered, the owner named. */
Test(run_ledger, another_users_ledger_is_not_believed, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
	struct vgpu_ledger *l;
	struct vrun_gpu g = ledger_gpu();
	char path[400];

	if (geteuid() != 0)
		cr_skip_test("needs root: it gives a file to another user");
	cr_assert_eq(vgpu_ledger_open(tmpdir, UUID, 16 * GIB, &l, err,
				      sizeof(err)), 0, "%s", err);
	join(l, "a", 4 * GIB, 30);
	snprintf(path, sizeof(path), "%s/%s.v%d.ledger", tmpdir, UUID,
		 VGPU_LEDGER_VERSION);
	cr_assert_eq(chown(path, 65534, 65534), 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), -1);
	cr_expect(strstr(err, path), "%s", err);
	cr_expect(strstr(err, "uid 65534"), "%s", err);
	cr_expect(strstr(err, "would refuse it"), "%s", err);
	cr_expect_eq(g.reserved + g.tasks, 0, "g unchanged");
	/* Given back to root, it is read again. */
	cr_assert_eq(chown(path, 0, 0), 0);
	cr_assert_eq(vrun_scan_ledger(tmpdir, NULL, "me", &g, err,
				      sizeof(err)), 0,
		     "%s", err);
	cr_expect_eq(g.reserved, 4 * GIB);
	vgpu_ledger_close(l);
}

/* ---- HIP GPUs: the ledger key, HIP_VISIBLE_DEVICES --------------------- */

Test(hip_gpus, key_is_the_uuid_else_the_bus_id)
{
	const unsigned char u[16] = { 0x88, 0x8d, 0x40, 0x5d, 1, 2, 3, 4, 5,
				      6, 7, 8, 9, 10, 11, 12 };
	char key[VGPU_LEDGER_UUID_MAX];

	cr_assert(vgpu_device_key(u, "0000:03:00.0", key, sizeof(key)));
	cr_assert_str_eq(key, "GPU-888d405d-0102-0304-0506-0708090a0b0c");
	cr_assert(vgpu_device_key(NULL, "0000:03:00.0", key, sizeof(key)));
	cr_assert_str_eq(key, "PCI-0000-03-00-0");
	cr_assert_not(vgpu_device_key(NULL, NULL, key, sizeof(key)));
}

/* ROCm's text for a device without a unique id is the same on every such
 * device, and all-zero bytes name none: keyed by the bus id when there is
 * one, so that two such GPUs never share a ledger. */
Test(hip_gpus, a_uuid_naming_no_one_device_gives_way_to_the_bus_id)
{
	const unsigned char xx[16] = { 'G', 'P', 'U', '-', 'X', 'X' };
	const unsigned char zero[16] = { 0 };
	const unsigned char real[16] = { 'G', 'P', 'U', '-', 'X', 'X', '1' };
	char key[VGPU_LEDGER_UUID_MAX];

	cr_assert_not(vgpu_device_uuid_unique(xx));
	cr_assert_not(vgpu_device_uuid_unique(zero));
	cr_assert(vgpu_device_uuid_unique(real));
	cr_assert(vgpu_device_key(xx, "0000:03:00.0", key, sizeof(key)));
	cr_assert_str_eq(key, "PCI-0000-03-00-0");
	cr_assert(vgpu_device_key(zero, "0000:43:00.0", key, sizeof(key)));
	cr_assert_str_eq(key, "PCI-0000-43-00-0");
	/* With no bus id, the UUID is all there is. */
	cr_assert(vgpu_device_key(xx, NULL, key, sizeof(key)));
	cr_assert_eq(strncmp(key, "GPU-", 4), 0, "%s", key);
}

Test(hip_gpus, visible_devices_composed_with_the_callers)
{
	char v[16];

	cr_assert_eq(vrun_hip_visible(NULL, NULL, 3, v, sizeof(v)), 0);
	cr_assert_str_eq(v, "3", "relative to ROCR_VISIBLE_DEVICES, kept");
	cr_assert_eq(vrun_hip_visible("2, 5 ,7", NULL, 1, v, sizeof(v)), 0);
	cr_assert_str_eq(v, "5", "the caller's entry");
	cr_assert_eq(vrun_hip_visible(NULL, "4,1", 1, v, sizeof(v)), 0);
	cr_assert_str_eq(v, "1", "CUDA_VISIBLE_DEVICES, read by HIP");
	cr_assert_eq(vrun_hip_visible("6", "4,1", 0, v, sizeof(v)), 0);
	cr_assert_str_eq(v, "6", "HIP's own wins");
	cr_assert_eq(vrun_hip_visible("2,5", NULL, 2, v, sizeof(v)), -1);
	cr_assert_eq(vrun_hip_visible("2,,5", NULL, 1, v, sizeof(v)), -1);
	cr_assert_eq(vrun_hip_visible("12345678901234567", NULL, 0, v,
				      sizeof(v)), -1, "out is short");
}
