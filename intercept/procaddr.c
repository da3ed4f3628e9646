/* procaddr.c - cuGetProcAddress and cuGetProcAddress_v2.
 *
 * The real driver answers first, so whether a (name, version, flags)
 * exists, and which ABI it is, is always the driver's own decision. Where
 * its answer is a function the shim hooks, the caller gets the hook of
 * exactly that function; everything else is the driver's pointer. A
 * driver that answers with a pointer other than its exported symbol is
 * handled by mapping (name, version, flags) through hooks.def the way the
 * driver documents it: the highest version not above the one asked for,
 * the per-thread variant where flags ask for it.
 */
#include "shim.h"

#include <string.h>

/* Index of the first hook entry called name, or vgpu__hook_count. */
static size_t first_of(const char *name)
{
	size_t lo = 0, hi = vgpu__hook_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(vgpu__hook_entries[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static const struct vgpu_hook_entry *by_version(size_t i, const char *name,
						 int version, int per_thread)
{
	const struct vgpu_hook_entry *found = NULL;

	for (; i < vgpu__hook_count &&
	       strcmp(vgpu__hook_entries[i].name, name) == 0; i++)
		if (vgpu__hook_entries[i].per_thread == per_thread &&
		    vgpu__hook_entries[i].version <= version)
			found = &vgpu__hook_entries[i];
	return found;
}

/* The hook to hand out in place of the driver's fn, or fn itself. */
static void *hook_for(const char *symbol, void *fn, int version,
		      cuuint64_t flags)
{
	const struct vgpu_hook_entry *e = NULL;
	size_t i = first_of(symbol);

	for (size_t j = i; j < vgpu__hook_count &&
	     strcmp(vgpu__hook_entries[j].name, symbol) == 0; j++)
		if (*vgpu__hook_entries[j].real == fn)
			return vgpu__hook_entries[j].hook;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		e = by_version(i, symbol, version, 1);
	if (!e)
		e = by_version(i, symbol, version, 0);
	if (e && *e->real) {
		vgpu_log(VGPU_LOG_DEBUG, "cuGetProcAddress(%s, %d, %llu): the "
			 "driver's pointer is not its %s; handing out the hook",
			 symbol, version, (unsigned long long)flags, e->symbol);
		return e->hook;
	}
	return fn;
}

/* At debug level, one line per request: what was asked and who answers. */
static void trace(const char *symbol, void **pfn, int version,
		  cuuint64_t flags, CUresult r)
{
	const char *who = "driver";

	if (vgpu_log_level() < VGPU_LOG_DEBUG)
		return;
	if (r != CUDA_SUCCESS || !pfn || !*pfn)
		who = "not found";
	else
		for (size_t i = 0; i < vgpu__hook_count; i++)
			if (vgpu__hook_entries[i].hook == *pfn)
				who = "hook";
	vgpu_log(VGPU_LOG_DEBUG, "cuGetProcAddress %s %d %llu -> %s",
		 symbol ? symbol : "(null)", version,
		 (unsigned long long)flags, who);
}

/* No driver to ask (none found, or the GPU refused once it was up): every
 * function the driver has is found, so that a client calls cuInit and is
 * told why (no device, or the refusal), and can name the error, instead
 * of reporting "function cuInit is not found" (or cuGetErrorName): cuInit
 * and the hooks themselves, the answers a driver gives before cuInit
 * (real.c), every other function answering CUDA_ERROR_NOT_INITIALIZED;
 * a name the driver does not have is not found. */
static CUresult no_driver(const char *symbol, void **pfn, int version,
			  cuuint64_t flags,
			  CUdriverProcAddressQueryResult *status)
{
	const struct vgpu_hook_entry *e;
	void *fn = NULL;

	/* As a driver answers: flags it does not know are refused, and no
	 * function is older than the first version (a review). */
	if (!symbol || !pfn ||
	    (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
				   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return CUDA_ERROR_INVALID_VALUE;
	if (version <= 0) {
		*pfn = NULL;
		if (status)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_ERROR_NOT_FOUND;
	}
	if (strcmp(symbol, "cuInit") == 0)
		fn = (void *)cuInit;
	else if (strcmp(symbol, "cuGetProcAddress") == 0)
		fn = version >= 12000 ? (void *)cuGetProcAddress_v2
				      : (void *)cuGetProcAddress;
	else if ((e = by_version(first_of(symbol), symbol, version, 0)))
		fn = e->hook;
	else
		fn = vgpu__no_driver_fn(symbol);
	*pfn = fn;
	if (status)
		*status = fn ? CU_GET_PROC_ADDRESS_SUCCESS
			     : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	trace(symbol, pfn, version, 0, fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
	return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
			     cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	CUresult r;

	if (!vgpu__real_load() || !vgpu__real.cuGetProcAddress_v2 ||
	    vgpu__refused_late())
		return no_driver(symbol, pfn, cudaVersion, flags,
				 symbolStatus);
	r = vgpu__real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags,
					   symbolStatus);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hook_for(symbol, *pfn, cudaVersion, flags);
	trace(symbol, pfn, cudaVersion, flags, r);
	return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
			  cuuint64_t flags)
{
	CUresult r;

	if (!vgpu__real_load() || !vgpu__real.cuGetProcAddress ||
	    vgpu__refused_late())
		return no_driver(symbol, pfn, cudaVersion, flags, NULL);
	r = vgpu__real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		*pfn = hook_for(symbol, *pfn, cudaVersion, flags);
	trace(symbol, pfn, cudaVersion, flags, r);
	return r;
}
