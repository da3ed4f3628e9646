/* log.h - the core's messages: one line each, "libvgpu: " first, written
 * to standard error with one write(2). No allocation, no locks, no stdio
 * streams, so it is safe anywhere in a hook or after fork.
 */
#ifndef VGPU_LOG_H
#define VGPU_LOG_H

#include <stdarg.h>

/* Levels as enum vgpu_log_level: 0 error, 1 warn, 2 info, 3 debug. */
void vgpu_log_set_level(int level);
int vgpu_log_level(void);
void vgpu_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Writes each line of text prefixed, untagged, whatever the level. */
void vgpu_log_text(const char *text);

#endif
