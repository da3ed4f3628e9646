/* fuzz_options.c - libFuzzer target: the option parser (vgpu/options.h).
 *
 * The input is read as an environment, one NAME=VALUE per line (a line
 * without '=' is a value alone). Every value goes through each pure parser
 * and, when it parses, back through the formatter; the whole environment
 * is then loaded from these lines (its names checked as it is), the names
 * checked alone, and the result dumped to /dev/null (the first definition
 * of a name wins, as with getenv). Corpus: corpus/fuzz_options.
 */
#include "options.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_MAX_LINES	256
#define FUZZ_MAX_INPUT	(64 * 1024)

/* The environment of the current input, NULL-terminated. */
static char *fuzz_env[FUZZ_MAX_LINES + 1];
static size_t fuzz_nenv;
static int fuzz_null_fd = -1;

static void fuzz_value(const char *s)
{
	static const char *const words[] = { "hard", "elastic", "off", NULL };
	char buf[64];
	uint64_t size = 0, back = 0;
	unsigned pct;
	bool b;
	int e;

	/* What the dump prints must read back as the same size
	 * (UINT64_MAX prints as "unlimited", an option word). */
	if (vgpu__parse_size(s, &size) == VGPU_PARSE_OK &&
	    size != VGPU_UNLIMITED &&
	    (vgpu__format_size(buf, sizeof(buf), size) < 0 ||
	     vgpu__parse_size(buf, &back) != VGPU_PARSE_OK || back != size))
		abort();
	vgpu__format_size(buf, 3, size);
	vgpu__parse_percent(s, &pct);
	vgpu__parse_bool(s, &b);
	vgpu__parse_enum(s, words, &e);
	vgpu__parse_strerror(vgpu__parse_log_level(s, &e));
	vgpu__format_tenant(buf, sizeof(buf), (unsigned long)strlen(s), s);
}

/* Splits text (NUL-terminated, ours) into lines, in place. */
static void fuzz_split(char *text)
{
	char *line = text, *nl;

	fuzz_nenv = 0;
	while (line && fuzz_nenv < FUZZ_MAX_LINES) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		fuzz_env[fuzz_nenv++] = line;
		line = nl ? nl + 1 : NULL;
	}
	fuzz_env[fuzz_nenv] = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct vgpu_options opts;
	char err[512], *text, *eq;

	if (size > FUZZ_MAX_INPUT)
		return 0;
	if (fuzz_null_fd < 0)
		fuzz_null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	fuzz_value(text);		/* the whole input, up to a NUL */
	fuzz_split(text);
	for (size_t i = 0; i < fuzz_nenv; i++) {
		eq = strchr(fuzz_env[i], '=');
		fuzz_value(eq ? eq + 1 : fuzz_env[i]);
	}
	vgpu__options_load(&opts, (const char *const *)fuzz_env, err,
			   sizeof(err));
	vgpu__options_load(&opts, (const char *const *)fuzz_env, err, 8);
	vgpu__options_check_names((const char *const *)fuzz_env, err,
				  sizeof(err));
	vgpu__options_check_names((const char *const *)fuzz_env, err, 1);
	vgpu__options_check_hami_names((const char *const *)fuzz_env, err,
				       sizeof(err));
	vgpu__options_check_hami_names((const char *const *)fuzz_env, err, 1);
	for (unsigned count = 0; count < VGPU_MAX_DEVICES + 2; count += 13)
		vgpu__options_check_devices((const char *const *)fuzz_env,
					    count, count & 1, err, sizeof(err));
	vgpu__options_check_devices((const char *const *)fuzz_env, 0, false,
				    err, 1);
	vgpu__options_check_devices((const char *const *)fuzz_env, 0, true,
				    err, 1);
	for (unsigned dev = 0; dev < VGPU_MAX_DEVICES + 1; dev++) {
		vgpu__options_memory_limit(&opts, dev);
		vgpu__options_compute_limit(&opts, dev);
	}
	if (fuzz_null_fd >= 0)
		vgpu__options_dump(&opts, fuzz_null_fd);
	free(text);
	return 0;
}
