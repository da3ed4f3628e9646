/* vgpu-ctl-args.c - vgpu-ctl's command line, checked before any ledger is
 * touched. Values go through the library's own option parsers, so a value
 * vgpu-ctl accepts is one libvgpu accepts in its variable, and a bad one is
 * refused with the option's name and what was expected.
 */
#include "vgpu-ctl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"

const char ctl_usage[] =
"NAME\n"
"    vgpu-ctl - change or show a running tenant's slice of a GPU\n"
"\n"
"SYNOPSIS\n"
"    vgpu-ctl set TENANT [--gpu N|UUID] [--memory SIZE] [--compute PCT]\n"
"                        [--policy hard|elastic|off|opportunistic]\n"
"                        [--host-spill SIZE] [--ledger-dir DIR]\n"
"    vgpu-ctl show TENANT [--gpu N|UUID] [--ledger-dir DIR]\n"
"    vgpu-ctl suspend TENANT [--gpu N|UUID] [--wait SECONDS]\n"
"                            [--ledger-dir DIR]\n"
"    vgpu-ctl resume TENANT [--gpu N|UUID] [--wait SECONDS]\n"
"                           [--ledger-dir DIR]\n"
"\n"
"DESCRIPTION\n"
"    set changes the terms of TENANT in the ledger of each GPU it is on\n"
"    (or of the GPU --gpu names), under the tenant's lock, and records who\n"
"    changed what and when in the tenant's record. A memory or spill limit\n"
"    applies at each process's next allocation; a compute share or policy\n"
"    within 100 ms at every process that synchronises, allocates or frees\n"
"    (also one started without a share). A memory limit below what the\n"
"    tenant holds refuses its new allocations until its usage is below it.\n"
"    show prints the terms, the usage, how far over its limit the tenant\n"
"    is, and the last change. At least one option is needed for set.\n"
"\n"
"    suspend holds the launches of TENANT's processes (they wait, they do\n"
"    not fail), lets what is in flight finish and moves their device\n"
"    memory to the host at the same addresses, freeing the GPU's memory\n"
"    for others; resume moves it back and lets the launches go. Only\n"
"    processes started with VGPU_CONTROL=1 can be suspended (idle ones\n"
"    too, within 1 s); the others are named. Both wait until every such\n"
"    process has carried the change out, and print what each holds where.\n"
"\n"
"OPTIONS\n"
"    --gpu N|UUID      N: the CUDA device N (as the driver shows it, after\n"
"                      CUDA_VISIBLE_DEVICES); UUID: a GPU's UUID or a\n"
"                      unique prefix of it (an AMD GPU's: its ledger key,\n"
"                      GPU-... or PCI-..., as vgpu-run --verbose lists it).\n"
"                      Default: every GPU whose ledger has TENANT\n"
"    --memory SIZE     device memory limit (8GiB, 4096m, unlimited)\n"
"    --compute PCT     share of the GPU's time, 1-100 (100: no cap)\n"
"    --policy P        compute policy: hard, elastic, off or opportunistic\n"
"    --host-spill SIZE host memory the tenant may spill to (overcommit)\n"
"    --wait SECONDS    suspend, resume: how long to wait for the processes\n"
"                      (default 30; 0: do not wait)\n"
"    --ledger-dir DIR  the ledgers' directory (default $VGPU_LEDGER_DIR,\n"
"                      else /dev/shm/vgpu)\n"
"    -h, --help        this text\n"
"\n"
"PERMISSIONS\n"
"    set needs write access to the ledger file (its owner, root, or with\n"
"    mode 0660 its group); show needs read access.\n"
"\n"
"EXIT STATUS\n"
"    0 done; 64 usage; 65 bad value or tenant name; 66 no such tenant;\n"
"    67 no such GPU or no ledger; 68 driver unusable (--gpu N);\n"
"    69 suspend: a process of the tenant cannot be suspended (started\n"
"    without VGPU_CONTROL; the others are); 74 ledger unusable; 75 the\n"
"    tenant's lock was held too long (a stopped process: its pid is\n"
"    named), or a process did not carry out a suspend or resume within\n"
"    --wait (the change stays made); 77 permission denied.\n"
"\n"
"SEE ALSO\n"
"    docs/control.md, vgpu-top, vgpu-run\n";

__attribute__((format(printf, 4, 5)))
static int bad(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return code;
}

/* Checks value with option id's parser; its number in *out. */
static int parse_opt(enum vgpu_opt_id id, const char *opt, const char *value,
		     uint64_t *out, char *err, size_t errlen)
{
	const struct vgpu_opt_desc *d = vgpu__option_desc(id);
	struct vgpu_optval v = { 0 };
	struct vgpu_fmtbuf b;
	char quoted[80];
	int rc = d->parse(d, value, &v);

	if (rc == 0) {
		*out = v.num;
		return 0;
	}
	vgpu__fb_init(&b, quoted, sizeof(quoted));
	vgpu__fb_quoted(&b, value);
	vgpu__fb_finish(&b);
	return bad(err, errlen, CTL_EXIT_VALUE, "%s %s %s; expected %s", opt,
		   quoted, vgpu__parse_strerror(rc), d->expect);
}

static int parse_gpu(struct ctl_args *a, char *err, size_t errlen)
{
	const char *s = a->gpu;
	uint64_t v;
	int rc;

	/* A key of the ledger: a UUID, or an AMD GPU's PCI bus id key. */
	if (strncasecmp(s, "GPU-", 4) == 0 || strncasecmp(s, "MIG-", 4) == 0 ||
	    strncasecmp(s, "PCI-", 4) == 0)
		return s[4] ? 0 : bad(err, errlen, CTL_EXIT_VALUE, "--gpu "
			"'%s': a UUID needs more than its prefix", s);
	rc = vgpu__parse_whole(&s, &v);
	if (rc == 0 && *s)
		rc = VGPU_PARSE_TRAILING;
	if (rc == 0 && v >= CTL_MAX_GPUS)
		rc = VGPU_PARSE_RANGE;
	if (rc)
		return bad(err, errlen, CTL_EXIT_VALUE, "--gpu '%s' %s; "
			   "expected a GPU index (0 to %d) or a GPU UUID "
			   "(GPU-...)", a->gpu, vgpu__parse_strerror(rc),
			   CTL_MAX_GPUS - 1);
	a->gpu_is_index = true;
	a->gpu_index = (unsigned)v;
	return 0;
}

/* One --option VALUE of set (or show's --gpu, --ledger-dir). */
static int option(struct ctl_args *a, const char *opt, const char *val,
		  char *err, size_t errlen)
{
	struct vgpu_ledger_change *c = &a->change;
	uint64_t n;
	int rc;

	if (!strcmp(opt, "--gpu")) {
		a->gpu = val;
		return parse_gpu(a, err, errlen);
	}
	if (!strcmp(opt, "--ledger-dir") || !strcmp(opt, "--dir")) {
		if (val[0] != '/')
			return bad(err, errlen, CTL_EXIT_VALUE, "%s '%s': "
				   "expected an absolute path", opt, val);
		a->dir = val;
		return 0;
	}
	if (!strcmp(opt, "--wait") &&
	    (a->cmd == CTL_SUSPEND || a->cmd == CTL_RESUME)) {
		const char *p = val;

		rc = vgpu__parse_whole(&p, &n);
		if (rc == 0 && *p)
			rc = VGPU_PARSE_TRAILING;
		if (rc == 0 && n > 3600)
			rc = VGPU_PARSE_RANGE;
		if (rc)
			return bad(err, errlen, CTL_EXIT_VALUE, "--wait '%s' "
				   "%s; expected whole seconds, 0 to 3600",
				   val, vgpu__parse_strerror(rc));
		a->wait_ms = (unsigned)n * 1000u;
		return 0;
	}
	if (a->cmd != CTL_SET)
		return bad(err, errlen, CTL_EXIT_USAGE, "%s: %s takes only "
			   "--gpu%s and --ledger-dir", opt,
			   a->cmd == CTL_SHOW ? "show" : a->cmd == CTL_SUSPEND
			   ? "suspend" : "resume",
			   a->cmd == CTL_SHOW ? "" : ", --wait");
	if (!strcmp(opt, "--memory")) {
		rc = parse_opt(VGPU_OPT_MEMORY_LIMIT, opt, val, &c->mem_limit,
			       err, errlen);
		c->fields |= VGPU_LEDGER_CTL_MEMORY;
	} else if (!strcmp(opt, "--compute")) {
		rc = parse_opt(VGPU_OPT_COMPUTE_LIMIT, opt, val, &n, err,
			       errlen);
		c->share_pct = (uint32_t)n;
		c->fields |= VGPU_LEDGER_CTL_COMPUTE;
	} else if (!strcmp(opt, "--policy")) {
		rc = parse_opt(VGPU_OPT_COMPUTE_POLICY, opt, val, &n, err,
			       errlen);
		c->policy = (uint32_t)n;
		c->fields |= VGPU_LEDGER_CTL_POLICY;
	} else if (!strcmp(opt, "--host-spill")) {
		rc = parse_opt(VGPU_OPT_HOST_SPILL_LIMIT, opt, val,
			       &c->spill_limit, err, errlen);
		c->fields |= VGPU_LEDGER_CTL_SPILL;
	} else {
		rc = bad(err, errlen, CTL_EXIT_USAGE, "unknown option '%s' "
			 "(vgpu-ctl --help lists them)", opt);
	}
	return rc;
}

static bool takes_value(const char *opt)
{
	static const char *const names[] = {
		"--gpu", "--ledger-dir", "--dir", "--memory", "--compute",
		"--policy", "--host-spill", "--wait",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(opt, names[i]))
			return true;
	return false;
}

/* 1..63 bytes, no control characters: what a ledger takes. */
static int check_tenant(const char *t, char *err, size_t errlen)
{
	size_t n = strlen(t);

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
			n = 0;
	if (n == 0 || n >= VGPU_LEDGER_NAME_MAX)
		return bad(err, errlen, CTL_EXIT_VALUE, "tenant name '%s': "
			   "expected 1 to %d bytes, no control characters", t,
			   VGPU_LEDGER_NAME_MAX - 1);
	return 0;
}

static int parse_command(struct ctl_args *a, const char *cmd, char *err,
			 size_t errlen)
{
	if (!strcmp(cmd, "set"))
		a->cmd = CTL_SET;
	else if (!strcmp(cmd, "show"))
		a->cmd = CTL_SHOW;
	else if (!strcmp(cmd, "suspend") || !strcmp(cmd, "resume")) {
		a->cmd = cmd[0] == 's' ? CTL_SUSPEND : CTL_RESUME;
		a->change.fields = VGPU_LEDGER_CTL_SUSPEND;
		a->change.suspend = a->cmd == CTL_SUSPEND;
		a->wait_ms = 30000;
	} else
		return bad(err, errlen, CTL_EXIT_USAGE, "unknown command '%s': "
			   "expected set, show, suspend or resume (vgpu-ctl "
			   "--help)", cmd);
	return 0;
}

static int parse_rest(int argc, char **argv, struct ctl_args *a, char *err,
		      size_t errlen)
{
	int rc;

	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			a->help = true;
			return 0;
		}
		if (!takes_value(argv[i]))
			return option(a, argv[i], "", err, errlen);
		if (i + 1 >= argc)
			return bad(err, errlen, CTL_EXIT_USAGE, "%s needs a "
				   "value", argv[i]);
		rc = option(a, argv[i], argv[i + 1], err, errlen);
		if (rc)
			return rc;
		i++;
	}
	if (a->cmd == CTL_SET && !a->change.fields)
		return bad(err, errlen, CTL_EXIT_USAGE, "set: nothing to set; "
			   "give --memory, --compute, --policy or --host-spill");
	return 0;
}

int ctl_parse_args(int argc, char **argv, struct ctl_args *a, char *err,
		   size_t errlen)
{
	const char *env = getenv("VGPU_LEDGER_DIR");
	int rc;

	memset(a, 0, sizeof(*a));
	a->dir = env && env[0] == '/' ? env : "/dev/shm/vgpu";
	if ((argc >= 2 && (!strcmp(argv[1], "-h") ||
			   !strcmp(argv[1], "--help"))) ||
	    (argc >= 3 && (!strcmp(argv[2], "-h") ||
			   !strcmp(argv[2], "--help")))) {
		a->help = true;
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "--probe-gpus")) {
		a->probe_driver = argv[2];
		return 0;
	}
	if (argc < 3)
		return bad(err, errlen, CTL_EXIT_USAGE, "usage: vgpu-ctl set|"
			   "show|suspend|resume TENANT [OPTIONS] (vgpu-ctl "
			   "--help)");
	rc = parse_command(a, argv[1], err, errlen);
	if (rc)
		return rc;
	/* "set --memory 1GiB a" took "--memory" for the tenant and then
	 * said "unknown option '1GiB'" (a hostile review); so did
	 * "--memory=1GiB". A tenant's name never starts with '-' here. */
	if (argv[2][0] == '-')
		return bad(err, errlen, CTL_EXIT_USAGE, "%s: the tenant comes "
			   "first: vgpu-ctl %s TENANT [OPTIONS]", argv[2],
			   argv[1]);
	a->tenant = argv[2];
	rc = parse_rest(argc, argv, a, err, errlen);
	if (rc || a->help)
		return rc;
	return check_tenant(a->tenant, err, errlen);
}
