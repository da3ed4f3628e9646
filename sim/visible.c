/* visible.c - CUDA_VISIBLE_DEVICES, parsed as the driver does.
 *
 * The value is a comma-separated list; each entry is a device index or a
 * device UUID as cuDeviceGetUuid's "GPU-xxxxxxxx-..." string, whole or any
 * prefix that only one device has (case-insensitive). The list ends at the
 * first entry that names no device (an index out of range, an unknown or
 * ambiguous UUID, anything else) or a device already listed: the entries
 * before it stay visible. Spaces around an entry are ignored.
 */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void vsim_uuid_format(const CUuuid *u, char out[VSIM_UUID_STRLEN])
{
	char hex[33];

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)u->bytes[i]);
	snprintf(out, VSIM_UUID_STRLEN, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", hex,
		 hex + 8, hex + 12, hex + 16, hex + 20);
}

/* The device an index entry names, or -1. */
static int parse_index(const char *e, size_t len, int nphys)
{
	long v = 0;

	if (len == 0 || len > 9)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (!isdigit((unsigned char)e[i]))
			return -1;
		v = v * 10 + (e[i] - '0');
	}
	return v < nphys ? (int)v : -1;
}

/* The one device whose UUID string starts with the entry, or -1. */
static int parse_uuid(const char *e, size_t len, int nphys,
		      char (*uuids)[VSIM_UUID_STRLEN])
{
	int found = -1;

	if (len <= 4 || len >= VSIM_UUID_STRLEN)
		return -1;
	for (int d = 0; d < nphys; d++) {
		if (strncasecmp(uuids[d], e, len) != 0)
			continue;
		if (found >= 0)
			return -1;
		found = d;
	}
	return found;
}

static int parse_entry(const char *e, size_t len, int nphys,
		       char (*uuids)[VSIM_UUID_STRLEN])
{
	while (len && isspace((unsigned char)*e)) {
		e++;
		len--;
	}
	while (len && isspace((unsigned char)e[len - 1]))
		len--;
	if (len >= 4 && strncasecmp(e, "GPU-", 4) == 0)
		return parse_uuid(e, len, nphys, uuids);
	return parse_index(e, len, nphys);
}

int vsim_visible_parse(const char *spec, int nphys,
		       char (*uuids)[VSIM_UUID_STRLEN], int *out, int max)
{
	int n = 0;

	while (n < max) {
		size_t len = strcspn(spec, ",");
		int d = parse_entry(spec, len, nphys, uuids);
		for (int i = 0; i < n && d >= 0; i++)
			if (out[i] == d)
				d = -1;
		if (d < 0)
			break;
		out[n++] = d;
		if (spec[len] == '\0')
			break;
		spec += len + 1;
	}
	return n;
}
