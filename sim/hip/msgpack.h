/* msgpack.h - a bounded reader of the msgpack subset AMDGPU metadata uses.
 *
 * Pure: reads a buffer, never past its end, never deeper than
 * VHIP_MP_MAX_DEPTH nested containers. Every function returns false on
 * bad or truncated input and then leaves the cursor where it was not
 * meaningful to continue (callers give up).
 */
#ifndef VGPU_SIM_HIP_MSGPACK_H
#define VGPU_SIM_HIP_MSGPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VHIP_MP_MAX_DEPTH 32

struct vhip_mp {
	const uint8_t *p, *end;
};

/* A map or array header: its element count (a map's pairs). */
bool vhip_mp_map(struct vhip_mp *c, uint32_t *n);
bool vhip_mp_array(struct vhip_mp *c, uint32_t *n);
/* A string, in place (not NUL-terminated). */
bool vhip_mp_str(struct vhip_mp *c, const char **s, uint32_t *n);
/* A non-negative integer (positive fixint or uint8..64; a non-negative
 * signed int too). */
bool vhip_mp_uint(struct vhip_mp *c, uint64_t *v);
/* Skips one object of any type, containers with what they hold. */
bool vhip_mp_skip(struct vhip_mp *c);
/* True when the string s (length n) equals the C string key. */
bool vhip_mp_eq(const char *s, uint32_t n, const char *key);

#endif
