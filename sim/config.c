/* config.c - the simulator's VGPU_SIM_* environment, parsed by pure functions.
 *
 * VGPU_SIM_DEVICES   number of devices, 1..16 (default 1)
 * VGPU_SIM_MEMORY    memory per device, a size (default 16GiB)
 * VGPU_SIM_SM_COUNT  multiprocessors per device, 1..1024 (default 132)
 * VGPU_SIM_NAME      device name (default "libvgpu simulated GPU")
 * VGPU_SIM_STATE_DIR where the state shared between processes lives
 * VGPU_SIM_KERNEL_NS duration of a kernel with no host form (default 10000)
 * VGPU_SIM_FAIL      fault injection, e.g. "alloc:3", "launch:5-", "alloc:%4"
 * VGPU_SIM_GREEN_CONTEXTS  green contexts on (1, the default) or off (0)
 * VGPU_SIM_HOST_LATE_NS    a loaded host, for tests: every wait of a host
 *                          thread for a kernel's time, and every wake-up of
 *                          an idle stream worker, comes this much late
 *                          (0..1 s, default 0)
 * VGPU_SIM_BUS_BANDWIDTH   bytes per second of kernels' accesses to host
 *                    memory, a size with an optional "/s" (default 16GiB/s;
 *                    0: no cost)
 */
#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void vsim_config_defaults(struct vsim_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->devices = 1;
	cfg->memory = 16ull << 30;
	cfg->sm_count = 132;
	snprintf(cfg->name, sizeof(cfg->name), "libvgpu simulated GPU");
	if (access("/dev/shm", W_OK) == 0)
		snprintf(cfg->state_dir, sizeof(cfg->state_dir),
			 "/dev/shm/vgpu-sim-%u", (unsigned)getuid());
	else
		snprintf(cfg->state_dir, sizeof(cfg->state_dir),
			 "/tmp/vgpu-sim-%u", (unsigned)getuid());
	cfg->kernel_ns = 10000;
	cfg->green_contexts = true;
	cfg->bus_bandwidth = 16ull << 30;
}

/* Parses an unsigned decimal number; the whole string must be digits. */
static int parse_u64(const char *s, const char **end, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*end = p;
	*out = v;
	return 0;
}

/* Sizes: a number with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB
 * (case-insensitive, powers of two). */
int vsim_parse_size(const char *s, uint64_t *out)
{
	static const struct { const char *unit; unsigned shift; } units[] = {
		{ "", 0 }, { "b", 0 },
		{ "k", 10 }, { "kb", 10 }, { "kib", 10 },
		{ "m", 20 }, { "mb", 20 }, { "mib", 20 },
		{ "g", 30 }, { "gb", 30 }, { "gib", 30 },
		{ "t", 40 }, { "tb", 40 }, { "tib", 40 },
	};
	const char *end;
	uint64_t v;

	if (!s || parse_u64(s, &end, &v) != 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(end, units[i].unit) != 0)
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return -1;
		*out = v << units[i].shift;
		return 0;
	}
	return -1;
}

/* A rate: a size, optionally followed by "/s". */
static int parse_rate(const char *s, uint64_t *out)
{
	char buf[64];
	size_t n = strlen(s);

	if (n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n + 1);
	if (n > 2 && strcmp(buf + n - 2, "/s") == 0)
		buf[n - 2] = '\0';
	return vsim_parse_size(buf, out);
}

static int parse_range(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	const char *end;

	if (parse_u64(s, &end, out) != 0 || *end != '\0')
		return -1;
	return (*out < lo || *out > hi) ? -1 : 0;
}

/* One rule of VGPU_SIM_FAIL: KIND:N (the Nth call), KIND:N- (the Nth and all
 * later), KIND:N-M, KIND:%K (every Kth), KIND:* (every call). */
static int parse_fail_rule(struct vsim_config *cfg, const char *item, size_t len)
{
	static const char *const kinds[VSIM_FAIL_KINDS] = { "alloc", "launch" };
	struct vsim_fail_rule r = { .active = true };
	char buf[64];
	const char *colon, *p, *end;
	int kind = -1;

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, item, len);
	buf[len] = '\0';
	colon = strchr(buf, ':');
	if (!colon)
		return -1;
	for (int k = 0; k < VSIM_FAIL_KINDS; k++)
		if ((size_t)(colon - buf) == strlen(kinds[k]) &&
		    strncmp(buf, kinds[k], strlen(kinds[k])) == 0)
			kind = k;
	if (kind < 0)
		return -1;
	p = colon + 1;
	if (strcmp(p, "*") == 0) {
		r.first = 1;
		r.last = UINT64_MAX;
	} else if (*p == '%') {
		if (parse_range(p + 1, 1, UINT64_MAX, &r.every) != 0)
			return -1;
	} else {
		if (parse_u64(p, &end, &r.first) != 0 || r.first == 0)
			return -1;
		r.last = r.first;
		if (*end == '-') {
			r.last = UINT64_MAX;
			if (end[1] != '\0' &&
			    parse_range(end + 1, r.first, UINT64_MAX, &r.last) != 0)
				return -1;
		} else if (*end != '\0') {
			return -1;
		}
	}
	cfg->fail[kind] = r;
	return 0;
}

static int parse_fail(struct vsim_config *cfg, const char *s)
{
	while (*s) {
		size_t len = strcspn(s, ",");
		if (parse_fail_rule(cfg, s, len) != 0)
			return -1;
		s += len;
		if (*s == ',')
			s++;
	}
	return 0;
}

bool vsim_fail_hit(const struct vsim_fail_rule *r, uint64_t n)
{
	if (!r->active)
		return false;
	if (r->every)
		return n % r->every == 0;
	return n >= r->first && n <= r->last;
}

/* Booleans: 1/0, true/false, yes/no, on/off, in any case. */
static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

static int set_string(char *dst, size_t cap, const char *value)
{
	size_t n = strlen(value);

	if (n == 0 || n >= cap)
		return -1;
	memcpy(dst, value, n + 1);
	return 0;
}

int vsim_config_parse_var(struct vsim_config *cfg, const char *var,
			  const char *value, char *err, size_t errlen)
{
	const char *expected;
	uint64_t v;
	int rc = -1;

	if (strcmp(var, "VGPU_SIM_DEVICES") == 0) {
		expected = "a device count from 1 to 16";
		if (parse_range(value, 1, VSIM_MAX_DEVICES, &v) == 0) {
			cfg->devices = (int)v;
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_MEMORY") == 0) {
		expected = "a size such as 16GiB, 512MiB or 1073741824, at least 1MiB";
		if (vsim_parse_size(value, &v) == 0 && v >= (1u << 20)) {
			cfg->memory = v;
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_SM_COUNT") == 0) {
		expected = "a multiprocessor count from 1 to 1024";
		if (parse_range(value, 1, 1024, &v) == 0) {
			cfg->sm_count = (int)v;
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_NAME") == 0) {
		expected = "a name of 1 to 255 bytes";
		rc = set_string(cfg->name, sizeof(cfg->name), value);
	} else if (strcmp(var, "VGPU_SIM_STATE_DIR") == 0) {
		expected = "an absolute directory path";
		if (value[0] == '/')
			rc = set_string(cfg->state_dir, sizeof(cfg->state_dir) - 64,
					value);
	} else if (strcmp(var, "VGPU_SIM_KERNEL_NS") == 0) {
		expected = "nanoseconds from 0 to 60000000000";
		if (parse_range(value, 0, 60000000000ull, &v) == 0) {
			cfg->kernel_ns = v;
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_HOST_LATE_NS") == 0) {
		expected = "nanoseconds from 0 to 1000000000";
		if (parse_range(value, 0, 1000000000ull, &v) == 0) {
			cfg->host_late_ns = v;
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_FAIL") == 0) {
		expected = "comma-separated rules KIND:N, KIND:N-, KIND:N-M, KIND:%K "
			   "or KIND:* with KIND alloc or launch";
		rc = parse_fail(cfg, value);
	} else if (strcmp(var, "VGPU_SIM_GREEN_CONTEXTS") == 0) {
		expected = "1, true, yes or on (green contexts), or 0, false, "
			   "no or off (their entry points are not supported)";
		rc = parse_bool(value, &cfg->green_contexts);
	} else if (strcmp(var, "VGPU_SIM_UNKNOWN_KERNEL") == 0) {
		expected = "wait (a kernel with no host form waits out "
			   "VGPU_SIM_KERNEL_NS) or fail (its launch returns "
			   "CUDA_ERROR_NOT_SUPPORTED)";
		if (strcmp(value, "wait") == 0 || strcmp(value, "fail") == 0) {
			cfg->unknown_kernel_fail = value[0] == 'f';
			rc = 0;
		}
	} else if (strcmp(var, "VGPU_SIM_BUS_BANDWIDTH") == 0) {
		expected = "a size per second such as 16GiB, 16GiB/s or "
			   "500MiB/s, or 0 for no bus cost";
		if (parse_rate(value, &v) == 0) {
			cfg->bus_bandwidth = v;
			rc = 0;
		}
	} else {
		snprintf(err, errlen, "unknown simulator variable %s", var);
		return -1;
	}
	if (rc != 0)
		snprintf(err, errlen, "%s=\"%s\" is invalid: expected %s",
			 var, value, expected);
	return rc;
}

int vsim_config_from_env(struct vsim_config *cfg, char *err, size_t errlen)
{
	static const char *const vars[] = {
		"VGPU_SIM_DEVICES", "VGPU_SIM_MEMORY", "VGPU_SIM_SM_COUNT",
		"VGPU_SIM_NAME", "VGPU_SIM_STATE_DIR", "VGPU_SIM_KERNEL_NS",
		"VGPU_SIM_FAIL", "VGPU_SIM_GREEN_CONTEXTS",
		"VGPU_SIM_BUS_BANDWIDTH", "VGPU_SIM_HOST_LATE_NS",
		"VGPU_SIM_UNKNOWN_KERNEL",
	};

	vsim_config_defaults(cfg);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *value = getenv(vars[i]);
		if (value && vsim_config_parse_var(cfg, vars[i], value, err,
						   errlen) != 0)
			return -1;
	}
	return 0;
}
