/* options_dump.c - the verbose dump: every effective option, one line each,
 * with where its value came from.
 *
 * Usable from a library constructor: no allocation, no locks, no stdio.
 * Lines are formatted into a stack buffer and written with write(2).
 */
#include "options.h"

#include <errno.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void fb_var(struct vgpu_fmtbuf *b, const char *name, int dev)
{
	vgpu__fb_puts(b, name);
	if (dev >= 0) {
		vgpu__fb_putc(b, '_');
		vgpu__fb_u64(b, (uint64_t)dev);
	}
}

/* The value in a form the option's own parser accepts. */
static void fb_value(struct vgpu_fmtbuf *b, const struct vgpu_options *o,
		     enum vgpu_opt_id id, int dev)
{
	const struct vgpu_opt_desc *d = vgpu__option_desc(id);
	size_t off = vgpu__option_value_offset(d, dev);
	uint64_t num = vgpu__option_load_num(o, d, off);
	const char *word;
	char size[32];

	switch (d->kind) {
	case VGPU_KIND_SIZE:
		vgpu__format_size(size, sizeof(size), num);
		vgpu__fb_puts(b, size);
		break;
	case VGPU_KIND_PERCENT:
		vgpu__fb_u64(b, num);
		break;
	case VGPU_KIND_ENUM:
	case VGPU_KIND_BOOL:
		word = vgpu__option_value_name(id, (int)num);
		vgpu__fb_puts(b, word ? word : "?");
		break;
	case VGPU_KIND_PATH:
	case VGPU_KIND_STRING:
		vgpu__fb_puts(b, (const char *)o + off);
		break;
	}
}

/* "default", "set by VGPU_X_3", "set by VGPU_X, ALIAS ignored". */
static void fb_source(struct vgpu_fmtbuf *b, const struct vgpu_opt_desc *d,
		      uint8_t src, int dev)
{
	switch (src & VGPU_SRC_MASK) {
	case VGPU_SRC_NAME:
	case VGPU_SRC_DEVICE_NAME:
		vgpu__fb_puts(b, "set by ");
		fb_var(b, d->name, dev);
		break;
	case VGPU_SRC_ALIAS:
	case VGPU_SRC_DEVICE_ALIAS:
		vgpu__fb_puts(b, "set by ");
		fb_var(b, d->alias, dev);
		break;
	default:
		vgpu__fb_puts(b, "default");
		break;
	}
	if ((src & VGPU_SRC_SHADOWED) && d->alias) {
		vgpu__fb_puts(b, ", ");
		fb_var(b, d->alias, dev);
		vgpu__fb_puts(b, " ignored");
	}
}

/* vgpu: option VGPU_X[_<i>]=value (source)\n */
static int dump_line(const struct vgpu_options *o, enum vgpu_opt_id id,
		     int dev, int fd)
{
	const struct vgpu_opt_desc *d = vgpu__option_desc(id);
	uint8_t src = dev < 0 ? o->src[id] : o->device_src[id][dev];
	char line[VGPU_PATH_MAX + 256];
	struct vgpu_fmtbuf b;

	vgpu__fb_init(&b, line, sizeof(line));
	vgpu__fb_puts(&b, "vgpu: option ");
	fb_var(&b, d->name, dev);
	vgpu__fb_putc(&b, '=');
	fb_value(&b, o, id, dev);
	vgpu__fb_puts(&b, " (");
	fb_source(&b, d, src, dev);
	vgpu__fb_puts(&b, ")\n");
	return write_all(fd, line, b.len);
}

static bool device_overridden(const struct vgpu_options *o,
			      enum vgpu_opt_id id, int dev)
{
	uint8_t src = o->device_src[id][dev] & VGPU_SRC_MASK;

	return src == VGPU_SRC_DEVICE_NAME || src == VGPU_SRC_DEVICE_ALIAS;
}

/*
 * Writes every effective option once, one line each, with where its value
 * came from; per-device lines only for devices a _<i> variable set.
 * Returns 0, or -1 if a write failed.
 */
int vgpu__options_dump(const struct vgpu_options *o, int fd)
{
	unsigned id;
	int dev, rc = 0;

	for (id = 0; id < VGPU_OPT_COUNT; id++) {
		bool per_device = vgpu__option_desc(id)->per_device;

		rc |= dump_line(o, id, -1, fd);
		for (dev = 0; per_device && dev < VGPU_MAX_DEVICES; dev++)
			if (device_overridden(o, id, dev))
				rc |= dump_line(o, id, dev, fd);
	}
	return rc;
}
