/* vgpu-run-args.c - vgpu-run's command line, checked before anything runs.
 *
 * Option values go through the library's own option parsers (the
 * descriptor table of vgpu/options.c), so a value vgpu-run accepts is one
 * libvgpu accepts, and the messages say what the library would expect.
 */
#include "vgpu-run.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "options.h"

const char vrun_usage[] =
"usage: vgpu-run [OPTIONS] [--] COMMAND [ARGS...]\n"
"       vgpu-run --install-preload [PATH]\n"
"\n"
"Runs COMMAND in a slice of a GPU: sets the slice in its environment,\n"
"preloads libvgpu.so and execs it. Without options the slice is whatever\n"
"VGPU_* (or HAMi's CUDA_DEVICE_*) variables already say.\n"
"\n"
"  --memory SIZE         device memory slice (8GiB, 4096m, unlimited)\n"
"  --compute PCT         share of the GPU's time, 1-100\n"
"  --policy hard|elastic|off|opportunistic   compute policy\n"
"  --overcommit MODE     off, managed, host or auto\n"
"  --gpu auto|INDEX|UUID the GPU to run on (auto: placed by the ledger)\n"
"  --place spread|binpack  how --gpu auto chooses (default spread)\n"
"  --tenant NAME         who the slice belongs to\n"
"  --sim                 run on the simulated GPU\n"
"  --hip                 a HIP job: preload libvgpu-hip.so (found by itself\n"
"                        when the program links libamdhip64)\n"
"  --verbose             say what vgpu-run does; libvgpu prints its options\n"
"  --install-preload [PATH]  add libvgpu.so to /etc/ld.so.preload (or PATH)\n"
"  -h, --help            this text\n"
"\n"
"Exit status: the command's own, or 64 usage, 65 bad value, 66 no GPU fits,\n"
"67 no such GPU (or one of the other vendor), 68 neither the CUDA driver nor\n"
"the HIP runtime usable, 69 library not found, 70 preload file not\n"
"writable, 126 command not executable, 127 command not found.\n";

/* Options that take a value, and where it goes. */
#define NO_FIELD ((size_t)-1)	/* checked and stored by its own parser */

struct vrun_valopt {
	const char *name;
	size_t offset;		/* of the const char * in struct vrun_args */
};

static const struct vrun_valopt valopts[] = {
	{ "--memory", offsetof(struct vrun_args, memory) },
	{ "--compute", offsetof(struct vrun_args, compute) },
	{ "--policy", offsetof(struct vrun_args, policy) },
	{ "--overcommit", offsetof(struct vrun_args, overcommit) },
	{ "--tenant", offsetof(struct vrun_args, tenant) },
	{ "--gpu", offsetof(struct vrun_args, gpu) },
	{ "--place", NO_FIELD },
	{ "--probe-gpus", offsetof(struct vrun_args, probe_driver) },
	{ "--probe-hip-gpus", offsetof(struct vrun_args, probe_hip_runtime) },
	{ "--probe-hip-driver", offsetof(struct vrun_args, probe_hip_driver) },
};

__attribute__((format(printf, 4, 5)))
static int bad(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return code;
}

/* "--memory \"8GB\" has an unknown unit; expected ..." */
static int bad_value(char *err, size_t errlen, const char *opt,
		     const char *value, int status, const char *expect)
{
	char quoted[80];
	struct vgpu_fmtbuf b;

	vgpu__fb_init(&b, quoted, sizeof(quoted));
	vgpu__fb_quoted(&b, value);
	vgpu__fb_finish(&b);
	snprintf(err, errlen, "%s %s %s; expected %s", opt, quoted,
		 vgpu__parse_strerror(status), expect);
	return VRUN_EXIT_VALUE;
}

/* Checks value with option id's own parser, as libvgpu reads VGPU_X. */
static int check_option(enum vgpu_opt_id id, const char *opt,
			const char *value, char *err, size_t errlen)
{
	const struct vgpu_opt_desc *d = vgpu__option_desc(id);
	struct vgpu_optval v = { 0 };
	int rc = d->parse(d, value, &v);

	return rc ? bad_value(err, errlen, opt, value, rc, d->expect) : 0;
}

static bool is_uuid_like(const char *s)
{
	size_t n = strlen(s);

	if (n < 5 || n >= VGPU_LEDGER_UUID_MAX ||
	    (strncasecmp(s, "GPU-", 4) != 0 && strncasecmp(s, "MIG-", 4) != 0 &&
	     strncasecmp(s, "PCI-", 4) != 0))
		return false;
	for (size_t i = 4; i < n; i++)
		if (!(s[i] == '-' || s[i] == '_' || (s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
			return false;
	return true;
}

static int check_gpu(struct vrun_args *a, char *err, size_t errlen)
{
	static const char expect[] = "auto, a GPU index (0, 1, ...) or a GPU "
				     "UUID as nvidia-smi -L prints it (GPU-...), or "
				     "an AMD GPU's key as --verbose lists it (GPU-... "
				     "or PCI-...)";
	const char *s = a->gpu;
	uint64_t v;
	int rc;

	if (vgpu__word_eq(s, "auto")) {
		a->gpu_mode = VRUN_GPU_AUTO;
		return 0;
	}
	if (is_uuid_like(s)) {
		a->gpu_mode = VRUN_GPU_UUID;
		return 0;
	}
	rc = vgpu__parse_whole(&s, &v);
	if (rc == 0 && *s)
		rc = VGPU_PARSE_TRAILING;
	if (rc == 0 && v >= VRUN_MAX_GPUS)
		rc = VGPU_PARSE_RANGE;
	if (rc)
		return bad_value(err, errlen, "--gpu", a->gpu, rc, expect);
	a->gpu_mode = VRUN_GPU_INDEX;
	a->gpu_index = (unsigned)v;
	return 0;
}

static int check_place(struct vrun_args *a, const char *s, char *err,
		       size_t errlen)
{
	static const char *const names[] = { "spread", "binpack", NULL };
	int rc = vgpu__parse_enum(s, names, &a->place);

	a->place_given = true;
	return rc ? bad_value(err, errlen, "--place", s, rc,
			      "spread or binpack") : 0;
}

/* Every value given, checked; then the combinations. */
static int check_all(struct vrun_args *a, char *err, size_t errlen)
{
	static const struct {
		enum vgpu_opt_id id;
		const char *opt;
		size_t offset;
	} checks[] = {
		{ VGPU_OPT_MEMORY_LIMIT, "--memory", offsetof(struct vrun_args, memory) },
		{ VGPU_OPT_COMPUTE_LIMIT, "--compute", offsetof(struct vrun_args, compute) },
		{ VGPU_OPT_COMPUTE_POLICY, "--policy", offsetof(struct vrun_args, policy) },
		{ VGPU_OPT_OVERCOMMIT, "--overcommit", offsetof(struct vrun_args, overcommit) },
		{ VGPU_OPT_TENANT, "--tenant", offsetof(struct vrun_args, tenant) },
	};
	int rc;

	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		const char *v = *(const char **)((char *)a + checks[i].offset);

		if (v && (rc = check_option(checks[i].id, checks[i].opt, v,
					    err, errlen)))
			return rc;
	}
	if (a->gpu && (rc = check_gpu(a, err, errlen)))
		return rc;
	if (a->place_given && a->gpu_mode != VRUN_GPU_AUTO)
		return bad(err, errlen, VRUN_EXIT_USAGE,
			   "--place applies only to --gpu auto");
	if (a->install_preload && a->command)
		return bad(err, errlen, VRUN_EXIT_USAGE, "--install-preload "
			   "takes no command (%s ...)", a->command[0]);
	if (!a->install_preload && !a->help && !a->probe_driver &&
	    !a->probe_hip_runtime && !a->command)
		return bad(err, errlen, VRUN_EXIT_USAGE,
			   "no command given; try vgpu-run --help");
	return 0;
}

/* The value of option o at argv[*i]: "--opt=VALUE" or "--opt VALUE". */
static int take_value(int argc, char **argv, int *i, const char *o,
		      const char **out, char *err, size_t errlen)
{
	const char *arg = argv[*i];
	size_t n = strlen(o);

	if (arg[n] == '=') {
		*out = arg + n + 1;
		return 0;
	}
	if (*i + 1 >= argc)
		return bad(err, errlen, VRUN_EXIT_USAGE,
			   "%s needs a value", o);
	*out = argv[++*i];
	return 0;
}

/* Whether arg is option o, alone or as "o=...". */
static bool is_opt(const char *arg, const char *o)
{
	size_t n = strlen(o);

	return strncmp(arg, o, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int parse_flag(struct vrun_args *a, int argc, char **argv, int *i,
		      char *err, size_t errlen)
{
	const char *arg = argv[*i];

	if (strcmp(arg, "--sim") == 0)
		a->sim = true;
	else if (strcmp(arg, "--hip") == 0)
		a->hip = true;
	else if (strcmp(arg, "--verbose") == 0)
		a->verbose = true;
	else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
		a->help = true;
	else if (is_opt(arg, "--install-preload")) {
		a->install_preload = true;
		if (arg[17] == '=')
			a->preload_file = arg + 18;
		else if (*i + 1 < argc && argv[*i + 1][0] != '-')
			a->preload_file = argv[++*i];
		if (a->preload_file && a->preload_file[0] != '/')
			return bad(err, errlen, VRUN_EXIT_VALUE,
				   "--install-preload \"%s\" is not an absolute "
				   "path; expected a file such as "
				   "/etc/ld.so.preload", a->preload_file);
	} else
		return bad(err, errlen, VRUN_EXIT_USAGE,
			   "unknown option %s; try vgpu-run --help", arg);
	return 0;
}

int vrun_parse_args(int argc, char **argv, struct vrun_args *a,
		    char *err, size_t errlen)
{
	int i, rc;

	memset(a, 0, sizeof(*a));
	if (errlen)
		err[0] = '\0';
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];
		size_t k;

		if (strcmp(arg, "--") == 0) {
			i++;
			break;
		}
		if (arg[0] != '-' || arg[1] == '\0')
			break;			/* the command */
		for (k = 0; k < sizeof(valopts) / sizeof(valopts[0]); k++)
			if (is_opt(arg, valopts[k].name))
				break;
		if (k == sizeof(valopts) / sizeof(valopts[0])) {
			if ((rc = parse_flag(a, argc, argv, &i, err, errlen)))
				return rc;
			continue;
		}
		const char *v = NULL;
		if ((rc = take_value(argc, argv, &i, valopts[k].name, &v, err,
				     errlen)))
			return rc;
		if (valopts[k].offset == NO_FIELD) {
			if ((rc = check_place(a, v, err, errlen)))
				return rc;
		} else {
			*(const char **)((char *)a + valopts[k].offset) = v;
		}
	}
	if (i < argc)
		a->command = argv + i;
	return check_all(a, err, errlen);
}
