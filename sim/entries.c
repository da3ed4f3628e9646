/* entries.c - the table behind cuGetProcAddress, generated from entries.def.
 *
 * This file does not include cuda.h: every entry point is declared here as
 * `void f(void)` only to take its address, which would clash with the
 * prototypes there. The table is never used to call with this type.
 */
#include "entries.h"

#define VSIM_ENTRY(name, version, symbol, per_thread) extern void symbol(void);
#include "entries.def"
#undef VSIM_ENTRY

#define VSIM_ENTRY(name, version, symbol, per_thread) \
	{ #name, version, per_thread, symbol },
const struct vsim_entry vsim_entries[] = {
#include "entries.def"
};
#undef VSIM_ENTRY

const size_t vsim_entries_count = sizeof(vsim_entries) / sizeof(vsim_entries[0]);
