/* vgpu-run - run a command in a slice of a GPU (docs/vgpu-run.md).
 *
 *   vgpu-run [--memory SIZE] [--compute PCT] [--policy P] [--overcommit M]
 *            [--gpu auto|INDEX|UUID] [--place spread|binpack]
 *            [--tenant NAME] [--sim] [--verbose] [--] COMMAND [ARGS...]
 *   vgpu-run --install-preload [PATH]
 *
 * Everything is checked first: the command line, the library, the whole
 * environment as libvgpu will read it, and the GPU. Then the environment
 * is set and the command exec'd, so its signals and exit status are its
 * own. vgpu-run's own failures exit with the VRUN_EXIT_* codes.
 */
#include "vgpu-run.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "options.h"

#define ERR_MAX 8192

static bool verbose;

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "vgpu-run: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Each line of a message, prefixed. */
static void print_lines(const char *text)
{
	while (*text) {
		size_t n = strcspn(text, "\n");

		fprintf(stderr, "vgpu-run: %.*s\n", (int)n, text);
		text += n + (text[n] == '\n');
	}
}

static int fail(int code, const char *msg)
{
	print_lines(msg);
	return code;
}

static void set(const char *name, const char *value)
{
	if (!value)
		return;
	setenv(name, value, 1);
	say("%s=%s", name, value);
}

/* The options given on the command line, as libvgpu's variables. */
static void apply_options(const struct vrun_args *a, const char *sim_lib)
{
	set("VGPU_MEMORY_LIMIT", a->memory);
	set("VGPU_COMPUTE_LIMIT", a->compute);
	set("VGPU_COMPUTE_POLICY", a->policy);
	set("VGPU_OVERCOMMIT", a->overcommit);
	set("VGPU_TENANT", a->tenant);
	set("VGPU_REAL_LIBCUDA", sim_lib);
	if (a->verbose)
		set("VGPU_VERBOSE", "1");
}

/* The environment as libvgpu will read it: a bad value or a variable that
 * names no option, which would refuse the device, stops vgpu-run now with
 * the library's own words; where the library would only warn, so does
 * vgpu-run, and goes on. */
static int check_environment(struct vgpu_options *o)
{
	static char err[ERR_MAX];
	int bad = vgpu__options_load(o, (const char *const *)environ, err,
				     sizeof(err));
	static char near[ERR_MAX];

	/* HAMi's names misspelt: warnings, as the library gives them. */
	if (vgpu__options_check_hami_names((const char *const *)environ,
					   near, sizeof(near)))
		for (const char *l = near; *l;) {
			size_t n = strcspn(l, "\n");

			fprintf(stderr, "vgpu-run: warning: %.*s\n", (int)n, l);
			l += n + (l[n] == '\n');
		}

	if (bad && o->on_error == VGPU_ON_ERROR_REFUSE && !o->disable) {
		print_lines(err);
		fprintf(stderr, "vgpu-run: fix the variable%s above, or set "
			"VGPU_ON_ERROR=warn to run as if %s unset\n",
			bad > 1 ? "s" : "", bad > 1 ? "they were" : "it was");
		return VRUN_EXIT_VALUE;
	}
	if (bad) {
		print_lines(err);
		fprintf(stderr, "vgpu-run: warning: %s: going on as if the "
			"variable%s above %s unset\n",
			o->disable ? "limits are off (VGPU_DISABLE)" :
			"VGPU_ON_ERROR=warn", bad > 1 ? "s" : "",
			bad > 1 ? "were" : "was");
	}
	return 0;
}

/* What the job reserves on the GPU it gets (ordinal 0 once placed). */
static struct vrun_request request_of(const struct vgpu_options *o)
{
	struct vrun_request r = { VGPU_LEDGER_UNLIMITED, 0 };
	unsigned pct = vgpu__options_compute_limit(o, 0);

	if (o->disable)
		return r;
	r.bytes = vgpu__options_memory_limit(o, 0);
	if (pct < 100 && o->compute_policy != VGPU_POLICY_OFF)
		r.pct = pct;
	return r;
}

static int find_uuid(const struct vrun_gpu *g, int n, const char *want)
{
	int found = -1;

	for (int i = 0; i < n; i++) {
		if (strcasecmp(g[i].uuid, want) == 0)
			return i;
		if (strncasecmp(g[i].uuid, want, strlen(want)) == 0)
			found = found == -1 ? i : -2;
	}
	return found;
}

/* "an AMD GPU (the HIP runtime lists it)" */
static const char *vendor_of(const struct vrun_gpu *g)
{
	if (g->fronts == (VRUN_FRONT_CUDA | VRUN_FRONT_HIP))
		return "a GPU both the CUDA driver and the HIP runtime list";
	return g->fronts & VRUN_FRONT_HIP ?
	       "an AMD GPU (the HIP runtime lists it)" :
	       "an NVIDIA GPU (the CUDA driver lists it)";
}

static const char *job_kind(bool hip)
{
	return hip ? "a HIP job" : "a CUDA job";
}

static bool usable(const struct vrun_gpu *g, bool hip)
{
	return g->fronts & (hip ? VRUN_FRONT_HIP : VRUN_FRONT_CUDA);
}

static int no_fit(const struct vrun_gpu *g, int n, const struct vrun_request *r)
{
	char mem[32], line[256];

	if (r->bytes == VGPU_LEDGER_UNLIMITED)
		snprintf(mem, sizeof(mem), "a whole GPU's");
	else
		vrun_human_size(r->bytes, mem, sizeof(mem));
	fprintf(stderr, "vgpu-run: no GPU has room for %s of memory and %u%% "
		"compute:\n", mem, r->pct);
	for (int i = 0; i < n; i++) {
		vrun_describe_gpu(&g[i], line, sizeof(line));
		fprintf(stderr, "vgpu-run:   %s\n", line);
	}
	return VRUN_EXIT_NOFIT;
}

/* Reads the reservations of the GPUs the job can use and places it among
 * them: the chosen GPU's position in g, or minus an exit code. */
static int place_auto(struct vrun_gpu *g, int n, const struct vgpu_options *o,
		      int mode, bool hip)
{
	static struct vrun_gpu c[VRUN_MAX_GPUS];
	struct vrun_request r = request_of(o);
	char err[VRUN_PATH_MAX + 1024], line[256];
	int m = 0, pick;

	for (int i = 0; i < n; i++)
		if (usable(&g[i], hip))
			c[m++] = g[i];
	if (m == 0) {
		fprintf(stderr, "vgpu-run: --gpu auto: no GPU for %s: %s lists "
			"none (a job runs only on its own vendor's GPUs)\n",
			job_kind(hip), hip ? "the HIP runtime" :
			"the CUDA driver");
		return -VRUN_EXIT_NOGPU;
	}
	for (int i = 0; i < m; i++) {
		if (vrun_scan_ledger(o->ledger_dir, o->ledger_group, o->tenant,
				     &c[i], err, sizeof(err)) != 0) {
			fprintf(stderr, "vgpu-run: warning: %s; GPU %u is not "
				"considered\n", err, c[i].index);
			c[i].reserved = c[i].total;
			c[i].reserved_pct = 100;
			c[i].unread = true;
		}
		vrun_describe_gpu(&c[i], line, sizeof(line));
		say("%s", line);
	}
	pick = vrun_place(c, (size_t)m, &r, mode);
	return pick < 0 ? -no_fit(c, m, &r) : (int)c[pick].index;
}

/* The listed GPUs, in --verbose. */
static void say_gpus(const struct vrun_gpu *g, int n, const char *note)
{
	char size[32];

	if (note[0])
		say("not listed from one source: %s", note);
	for (int i = 0; i < n; i++) {
		vrun_human_size(g[i].total, size, sizeof(size));
		say("GPU %d (%s): %s, %s", i, g[i].uuid, vendor_of(&g[i]),
		    size);
	}
}

/* --gpu INDEX or UUID: its position in g, or -1 with err set. */
static int pick_named(const struct vrun_args *a, const struct vrun_gpu *g,
		      int n, bool hip, char *err, size_t errlen)
{
	int pick;

	if (a->gpu_mode == VRUN_GPU_INDEX) {
		pick = a->gpu_index < (unsigned)n ? (int)a->gpu_index : -1;
		if (pick < 0)
			snprintf(err, errlen, "--gpu %s: no such GPU; "
				 "there %s %d (0 to %d)", a->gpu,
				 n == 1 ? "is" : "are", n, n - 1);
	} else {
		pick = find_uuid(g, n, a->gpu);
		if (pick < 0)
			snprintf(err, errlen, "--gpu %s: %s", a->gpu,
				 pick == -2 ? "more than one GPU has a UUID "
				 "starting so" : "no GPU has that UUID");
	}
	if (pick >= 0 && !usable(&g[pick], hip)) {
		snprintf(err, errlen, "--gpu %s: GPU %d (%s) is %s; %s cannot "
			 "run on it", a->gpu, pick, g[pick].uuid,
			 vendor_of(&g[pick]), job_kind(hip));
		pick = -1;
	}
	return pick;
}

/* Makes the chosen GPU the job's only one: CUDA_VISIBLE_DEVICES, its
 * UUID; HIP_VISIBLE_DEVICES, its runtime ordinal as the caller's lists
 * name it. */
static int make_visible(const struct vrun_gpu *g, bool hip)
{
	char v[256];

	if (!hip) {
		set("CUDA_VISIBLE_DEVICES", g->uuid);
		return 0;
	}
	if (vrun_hip_visible(getenv("HIP_VISIBLE_DEVICES"),
			     getenv("CUDA_VISIBLE_DEVICES"), g->hip_index, v,
			     sizeof(v)) != 0)
		return fail(VRUN_EXIT_VALUE, "HIP_VISIBLE_DEVICES (or "
			    "CUDA_VISIBLE_DEVICES) has no entry for the GPU "
			    "chosen");
	set("HIP_VISIBLE_DEVICES", v);
	return 0;
}

/* Chooses the GPU of --gpu among those the CUDA driver and the HIP
 * runtime list, one of the job's own vendor, and makes it the job's. */
static int choose_gpu(const struct vrun_args *a, const char *self,
		      const struct vrun_probe *p, const struct vgpu_options *o,
		      bool hip)
{
	static struct vrun_gpu g[VRUN_MAX_GPUS];
	char err[3 * VRUN_PATH_MAX + 1024];
	int n, pick;

	n = vrun_list_all_gpus(self, p, g, VRUN_MAX_GPUS, err, sizeof(err));
	if (n < 0)
		return fail(-n, err);
	say_gpus(g, n, err);
	if (n == 0) {
		snprintf(err, sizeof(err), "no GPU found (CUDA driver %s, HIP "
			 "runtime %s)", p->driver, p->hip_runtime);
		return fail(VRUN_EXIT_NOGPU, err);
	}
	if (a->gpu_mode == VRUN_GPU_AUTO) {
		pick = place_auto(g, n, o, a->place, hip);
		if (pick < 0)
			return -pick;
	} else if ((pick = pick_named(a, g, n, hip, err, sizeof(err))) < 0) {
		return fail(VRUN_EXIT_NOGPU, err);
	}
	say("GPU %d (%s) chosen%s", pick, g[pick].uuid,
	    a->gpu_mode != VRUN_GPU_AUTO ? "" :
	    a->place == VRUN_PLACE_BINPACK ? " by binpack" : " by spread");
	return make_visible(&g[pick], hip);
}

static int install_preload(const struct vrun_args *a, const char *lib)
{
	const char *file = a->preload_file ? a->preload_file
					   : "/etc/ld.so.preload";
	char err[VRUN_PATH_MAX + 1024];
	int rc = vrun_install_preload(file, lib, err, sizeof(err));

	if (rc < 0)
		return fail(VRUN_EXIT_PRELOAD, err);
	printf("vgpu-run: %s %s %s\n", file, rc == 1 ? "already lists" :
	       "now lists", lib);
	return 0;
}

/* A HIP job on the simulated GPU: the simulated runtime (sim/hip, or
 * vgpu-sim/ installed) and the simulated driver it is made of, first in
 * LD_LIBRARY_PATH. */
static int hip_sim_path(const char *sim_lib)
{
	static char path[3 * VRUN_PATH_MAX];
	const char *old = getenv("LD_LIBRARY_PATH");
	const char *slash = strrchr(sim_lib, '/');
	int n = slash ? (int)(slash - sim_lib) : 0;

	if (snprintf(path, sizeof(path), "%.*s/hip:%.*s%s%s", n, sim_lib, n,
		     sim_lib, old && *old ? ":" : "", old ? old : "") >=
	    (int)sizeof(path))
		return fail(VRUN_EXIT_VALUE, "LD_LIBRARY_PATH is too long");
	set("LD_LIBRARY_PATH", path);
	return 0;
}

/* The library to preload: libvgpu-hip.so for a HIP job (--hip, or a
 * program that links the HIP runtime), else libvgpu.so. */
static int front_end(const struct vrun_args *a, const char **lib,
		     bool *hip)
{
	static char hip_lib[VRUN_PATH_MAX];
	char err[2 * VRUN_PATH_MAX + 256];

	if (!a->hip && !vrun_is_hip_program(a->command[0]))
		return 0;
	if (vrun_find_hip_library(*lib, hip_lib, sizeof(hip_lib), err,
				  sizeof(err)) != 0)
		return fail(VRUN_EXIT_LIBRARY, err);
	say("a HIP job%s: preloading %s", a->hip ? "" : " (it links "
	    "libamdhip64)", hip_lib);
	*lib = hip_lib;
	*hip = true;
	return 0;
}

/* Where --gpu lists the GPUs: the driver libvgpu will use (the simulator
 * with --sim), and the HIP runtime a HIP job loads (the simulated one,
 * made of the simulated driver, with --sim). */
static const struct vrun_probe *probe_of(const struct vrun_args *a,
					 const struct vgpu_options *o,
					 const char *sim_lib)
{
	static char runtime[VRUN_PATH_MAX + 32];
	static struct vrun_probe p;
	const char *slash = strrchr(sim_lib, '/');

	p.driver = a->sim ? sim_lib : o->real_libcuda[0] ? o->real_libcuda :
		   "libcuda.so.1";
	p.hip_runtime = "libamdhip64.so.5";
	p.hip_driver = NULL;
	if (a->sim) {
		snprintf(runtime, sizeof(runtime), "%.*s/hip/libamdhip64.so.5",
			 slash ? (int)(slash - sim_lib) : 0, sim_lib);
		p.hip_runtime = runtime;
		p.hip_driver = sim_lib;
	}
	return &p;
}

static int run(const struct vrun_args *a, const char *self, const char *lib)
{
	static char preload[3 * VRUN_PATH_MAX], sim_lib[VRUN_PATH_MAX];
	static struct vgpu_options o;
	char err[2048];
	bool hip = false;
	int rc;

	if (a->sim && vrun_find_library(self, true, sim_lib, sizeof(sim_lib),
					err, sizeof(err)) != 0)
		return fail(VRUN_EXIT_LIBRARY, err);
	if ((rc = front_end(a, &lib, &hip)))
		return rc;
	if (a->sim && hip && (rc = hip_sim_path(sim_lib)))
		return rc;
	apply_options(a, a->sim ? sim_lib : NULL);
	unsetenv("VGPU_LIBRARY");	/* vgpu-run's own, already read */
	unsetenv("VGPU_HIP_LIBRARY");
	if ((rc = check_environment(&o)))
		return rc;
	if (a->gpu_mode != VRUN_GPU_NONE &&
	    (rc = choose_gpu(a, self, probe_of(a, &o, sim_lib), &o, hip)))
		return rc;
	if (vrun_merge_preload(getenv("LD_PRELOAD"), lib, preload,
			       sizeof(preload)) != 0)
		return fail(VRUN_EXIT_VALUE, "LD_PRELOAD is too long");
	set("LD_PRELOAD", preload);
	say("exec %s", a->command[0]);
	execvp(a->command[0], a->command);
	rc = errno == ENOENT || errno == ENOTDIR ? VRUN_EXIT_NOTFOUND
						  : VRUN_EXIT_NOEXEC;
	fprintf(stderr, "vgpu-run: cannot run %s: %s\n", a->command[0],
		strerror(errno));
	return rc;
}

int main(int argc, char **argv)
{
	static char self[VRUN_PATH_MAX], lib[VRUN_PATH_MAX];
	struct vrun_args a;
	char err[2048];
	ssize_t n;
	int rc;

	rc = vrun_parse_args(argc, argv, &a, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "vgpu-run: %s\n", err);
		return rc;
	}
	if (a.help) {
		fputs(vrun_usage, stdout);
		return 0;
	}
	if (a.probe_driver)
		return vrun_probe_main(a.probe_driver);
	if (a.probe_hip_runtime)
		return vrun_probe_hip_main(a.probe_hip_runtime,
					   a.probe_hip_driver);
	verbose = a.verbose;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return fail(VRUN_EXIT_LIBRARY, "cannot read /proc/self/exe");
	self[n] = '\0';
	if (vrun_find_library(self, false, lib, sizeof(lib), err,
			      sizeof(err)) != 0)
		return fail(VRUN_EXIT_LIBRARY, err);
	if (a.install_preload)
		return install_preload(&a, lib);
	return run(&a, self, lib);
}
