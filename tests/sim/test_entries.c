/* test_entries.c - sim/entries.def, the table behind cuGetProcAddress: kept
 * sorted (lookups are a binary search), without duplicates, and every entry
 * reachable by asking for its own name and version.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "sim.h"
#include "entries.h"

static int compare(const struct vsim_entry *a, const struct vsim_entry *b)
{
	int c = strcmp(a->name, b->name);

	if (c)
		return c;
	return (a->version > b->version) - (a->version < b->version);
}

Test(entries, sorted_by_name_then_version)
{
	cr_assert_gt(vsim_entries_count, 100);
	for (size_t i = 1; i < vsim_entries_count; i++)
		cr_assert_leq(compare(&vsim_entries[i - 1], &vsim_entries[i]), 0,
			      "%s@%d before %s@%d", vsim_entries[i - 1].name,
			      vsim_entries[i - 1].version, vsim_entries[i].name,
			      vsim_entries[i].version);
}

Test(entries, no_duplicates)
{
	for (size_t i = 0; i < vsim_entries_count; i++)
		for (size_t j = i + 1; j < vsim_entries_count; j++) {
			const struct vsim_entry *a = &vsim_entries[i];
			const struct vsim_entry *b = &vsim_entries[j];
			cr_assert(strcmp(a->name, b->name) != 0 ||
				  a->version != b->version ||
				  a->per_thread != b->per_thread,
				  "%s@%d listed twice", a->name, a->version);
			cr_assert_neq(a->fn, b->fn, "%s and %s: one function",
				      a->name, b->name);
		}
}

Test(entries, names_are_base_names)
{
	for (size_t i = 0; i < vsim_entries_count; i++) {
		const char *n = vsim_entries[i].name;
		size_t len = strlen(n);
		cr_assert_eq(strncmp(n, "cu", 2), 0, "%s", n);
		cr_assert(len < 3 || strcmp(n + len - 3, "_v2") != 0, "%s", n);
		cr_assert(len < 5 || (strcmp(n + len - 5, "_ptsz") != 0 &&
				      strcmp(n + len - 5, "_ptds") != 0), "%s", n);
		cr_assert_geq(vsim_entries[i].version, 2000, "%s", n);
		cr_assert_leq(vsim_entries[i].version, VSIM_DRIVER_VERSION, "%s", n);
	}
}

Test(entries, every_entry_reachable)
{
	for (size_t i = 0; i < vsim_entries_count; i++) {
		const struct vsim_entry *e = &vsim_entries[i];
		cuuint64_t flags = e->per_thread ?
			CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM :
			CU_GET_PROC_ADDRESS_LEGACY_STREAM;
		CUdriverProcAddressQueryResult st;
		void *fn = NULL;

		cr_assert_eq(cuGetProcAddress_v2(e->name, &fn, e->version, flags,
						 &st), CUDA_SUCCESS,
			     "%s@%d", e->name, e->version);
		cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
		cr_assert_eq(fn, (void *)e->fn, "%s@%d%s: another function",
			     e->name, e->version, e->per_thread ? " (ptds)" : "");
	}
}
