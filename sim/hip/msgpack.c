/* msgpack.c - the bounded msgpack reader (msgpack.h).
 *
 * Formats by first byte: fixint 00-7f, fixmap 80-8f, fixarray 90-9f,
 * fixstr a0-bf, nil c0, false/true c2-c3, bin c4-c6, ext c7-c9,
 * float ca-cb, uint cc-cf, int d0-d3, fixext d4-d8, str d9-db,
 * array dc-dd, map de-df, negative fixint e0-ff (c1 is never used).
 */
#include "msgpack.h"

#include <string.h>

static bool take(struct vhip_mp *c, size_t n, const uint8_t **at)
{
	if ((size_t)(c->end - c->p) < n)
		return false;
	*at = c->p;
	c->p += n;
	return true;
}

/* A big-endian unsigned integer of 1, 2, 4 or 8 bytes. */
static bool be(struct vhip_mp *c, unsigned bytes, uint64_t *v)
{
	const uint8_t *at;

	if (!take(c, bytes, &at))
		return false;
	*v = 0;
	for (unsigned i = 0; i < bytes; i++)
		*v = *v << 8 | at[i];
	return true;
}

static bool byte(struct vhip_mp *c, uint8_t *b)
{
	const uint8_t *at;

	if (!take(c, 1, &at))
		return false;
	*b = *at;
	return true;
}

/* A container header: fix form in [fix, fix+15], else the 16/32 forms. */
static bool container(struct vhip_mp *c, uint8_t fix, uint8_t form16,
		      uint32_t *n)
{
	struct vhip_mp save = *c;
	uint64_t v;
	uint8_t b;

	if (!byte(c, &b))
		return false;
	if (b >= fix && b <= fix + 15) {
		*n = b - fix;
		return true;
	}
	if ((b == form16 && be(c, 2, &v)) || (b == form16 + 1 && be(c, 4, &v))) {
		*n = (uint32_t)v;
		return true;
	}
	*c = save;
	return false;
}

bool vhip_mp_map(struct vhip_mp *c, uint32_t *n)
{
	return container(c, 0x80, 0xde, n);
}

bool vhip_mp_array(struct vhip_mp *c, uint32_t *n)
{
	return container(c, 0x90, 0xdc, n);
}

bool vhip_mp_str(struct vhip_mp *c, const char **s, uint32_t *n)
{
	struct vhip_mp save = *c;
	const uint8_t *at;
	uint64_t len;
	uint8_t b;

	if (!byte(c, &b))
		return false;
	if (b >= 0xa0 && b <= 0xbf)
		len = b - 0xa0;
	else if (b < 0xd9 || b > 0xdb || !be(c, 1u << (b - 0xd9), &len))
		goto bad;
	if (!take(c, (size_t)len, &at))
		goto bad;
	*s = (const char *)at;
	*n = (uint32_t)len;
	return true;
bad:
	*c = save;
	return false;
}

bool vhip_mp_uint(struct vhip_mp *c, uint64_t *v)
{
	struct vhip_mp save = *c;
	uint8_t b;

	if (!byte(c, &b))
		return false;
	if (b <= 0x7f) {
		*v = b;
		return true;
	}
	if (b >= 0xcc && b <= 0xcf && be(c, 1u << (b - 0xcc), v))
		return true;
	if (b >= 0xd0 && b <= 0xd3) {
		unsigned bytes = 1u << (b - 0xd0);

		if (be(c, bytes, v) && !(*v >> (bytes * 8 - 1)))
			return true;
	}
	*c = save;
	return false;
}

/* The payload length of a bin, ext or str of first byte b (after b). */
static bool payload(struct vhip_mp *c, uint8_t b, uint64_t *len)
{
	if (b >= 0xa0 && b <= 0xbf) {
		*len = b - 0xa0;
		return true;
	}
	if (b >= 0xc4 && b <= 0xc6)
		return be(c, 1u << (b - 0xc4), len);
	if (b >= 0xc7 && b <= 0xc9) {
		if (!be(c, 1u << (b - 0xc7), len))
			return false;
		*len += 1;                    /* the ext's type byte */
		return true;
	}
	if (b >= 0xd4 && b <= 0xd8) {
		*len = 1 + (1u << (b - 0xd4));
		return true;
	}
	if (b >= 0xd9 && b <= 0xdb)
		return be(c, 1u << (b - 0xd9), len);
	return false;
}

static bool skip_depth(struct vhip_mp *c, unsigned depth);

/* Skips n objects (2n for a map's pairs). */
static bool skip_n(struct vhip_mp *c, uint64_t n, unsigned depth)
{
	for (uint64_t i = 0; i < n; i++)
		if (!skip_depth(c, depth))
			return false;
	return true;
}

static bool skip_depth(struct vhip_mp *c, unsigned depth)
{
	const uint8_t *at;
	uint64_t len;
	uint32_t n;
	uint8_t b;

	if (depth > VHIP_MP_MAX_DEPTH || c->p >= c->end)
		return false;
	b = *c->p;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return take(c, 1, &at);
	if (b >= 0xca && b <= 0xd3)
		return take(c, 1 + (b == 0xca ? 4 : b == 0xcb ? 8 :
				    1u << ((b - 0xcc) & 3)), &at);
	if (vhip_mp_map(c, &n))
		return skip_n(c, 2ull * n, depth + 1);
	if (vhip_mp_array(c, &n))
		return skip_n(c, n, depth + 1);
	c->p++;
	if (!payload(c, b, &len))
		return false;
	return take(c, (size_t)len, &at);
}

bool vhip_mp_skip(struct vhip_mp *c)
{
	return skip_depth(c, 0);
}

bool vhip_mp_eq(const char *s, uint32_t n, const char *key)
{
	return strlen(key) == n && memcmp(s, key, n) == 0;
}
