/* log.c - see log.h. */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int log_level = 1;	/* warnings until the options say otherwise */

void vgpu_log_set_level(int level)
{
	__atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}

int vgpu_log_level(void)
{
	return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

static void write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

void vgpu_log(int level, const char *fmt, ...)
{
	static const char *const tags[] = { "error: ", "warning: ", "", "" };
	char buf[1024];
	va_list ap;
	int saved = errno;
	int n;

	if (level > vgpu_log_level())
		return;
	n = snprintf(buf, sizeof(buf), "libvgpu: %s",
		     level < 0 ? "" : tags[level > 3 ? 3 : level]);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	write_all(buf, (size_t)n);
	errno = saved;
}

void vgpu_log_text(const char *text)
{
	while (text && *text) {
		const char *nl = strchr(text, '\n');
		size_t len = nl ? (size_t)(nl - text) : strlen(text);

		vgpu_log(-1, "%.*s", (int)len, text);
		text += len + (nl ? 1 : 0);
	}
}
