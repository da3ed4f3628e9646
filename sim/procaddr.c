/* procaddr.c - cuGetProcAddress: (name, version, flags) to exactly the ABI
 * asked for.
 *
 * Among the entries of a name, the one with the highest version not above
 * the requested one wins; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * the per-thread variant is preferred where there is one.
 */
#include "sim.h"
#include "entries.h"

#include <string.h>

#define PROC_FLAGS (CU_GET_PROC_ADDRESS_LEGACY_STREAM | \
		    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)

/* Index of the first entry called name, or vsim_entries_count. */
static size_t first_of(const char *name)
{
	size_t lo = 0, hi = vsim_entries_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(vsim_entries[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static const struct vsim_entry *best(size_t i, const char *name, int version,
				     int per_thread)
{
	const struct vsim_entry *found = NULL;

	for (; i < vsim_entries_count && strcmp(vsim_entries[i].name, name) == 0;
	     i++)
		if (vsim_entries[i].per_thread == per_thread &&
		    vsim_entries[i].version <= version)
			found = &vsim_entries[i];
	return found;
}

static CUresult lookup(const char *symbol, void **pfn, int version,
		       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	const struct vsim_entry *e = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	size_t i;

	/* A version newer than this driver is refused, as cuda.h says. */
	if (!symbol || !pfn || (flags & ~(cuuint64_t)PROC_FLAGS) ||
	    version > VSIM_DRIVER_VERSION)
		return CUDA_ERROR_INVALID_VALUE;
	i = first_of(symbol);
	if (i < vsim_entries_count && strcmp(vsim_entries[i].name, symbol) == 0) {
		st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
			e = best(i, symbol, version, 1);
		if (!e)
			e = best(i, symbol, version, 0);
	}
	*pfn = e ? (void *)e->fn : NULL;
	if (status)
		*status = e ? CU_GET_PROC_ADDRESS_SUCCESS : st;
	return e ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn,
				  int cudaVersion, cuuint64_t flags);
VSIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn,
				      int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

VSIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn,
					 int cudaVersion, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status)
{
	return lookup(symbol, pfn, cudaVersion, flags, status);
}
