/* entries.h - the simulated driver's table of entry points (entries.def). */
#ifndef VGPU_SIM_ENTRIES_H
#define VGPU_SIM_ENTRIES_H

#include <stddef.h>

struct vsim_entry {
	const char *name;      /* as passed to cuGetProcAddress */
	int version;           /* CUDA version that introduced this ABI */
	int per_thread;        /* the _ptds/_ptsz variant */
	void (*fn)(void);      /* address only: never called through this type */
};

/* Sorted by name (strcmp), then version. */
extern const struct vsim_entry vsim_entries[];
extern const size_t vsim_entries_count;

#endif
