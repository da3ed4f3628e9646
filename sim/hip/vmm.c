/* vmm.c - the simulated HIP runtime's virtual memory management: physical
 * handles (hipMemCreate, hipMemRelease, hipMemRetainAllocationHandle),
 * address reservations, mappings and access, and handles shared between
 * processes as POSIX file descriptors.
 *
 * Each call is the simulated driver's cuMem* call of the same name, so the
 * memory lives as the driver keeps it: while the handle, a retained handle
 * or any mapping refers to it, in any process that imported it, and the
 * device counts it once all that time.
 *
 * A HIP handle (hipMemGenericAllocationHandle_t, a pointer type) is the
 * driver's handle (an unsigned long long) converted by value: the
 * simulated driver's handles are the addresses of its records, never 0,
 * so the value makes the round trip and NULL is never a live handle.
 * hipMemAllocationProp is laid out differently from CUmemAllocationProp
 * and is translated field by field; its enums have the driver's values
 * but are translated all the same. Argument checks that the real runtime
 * makes itself (NULL pointers, nonzero flags, a location that is not one
 * of the runtime's devices, a handle type other than a file descriptor
 * when sharing) are hipErrorInvalidValue; the rest is the driver's answer
 * through vhip_result.
 */
#include "hip_sim.h"

#include <stdint.h>
#include <string.h>

_Static_assert(sizeof(uintptr_t) >= sizeof(CUmemGenericAllocationHandle),
	       "a driver handle fits a HIP handle");

static hipMemGenericAllocationHandle_t to_hip(CUmemGenericAllocationHandle h)
{
	return (hipMemGenericAllocationHandle_t)(uintptr_t)h;
}

static CUmemGenericAllocationHandle to_cu(hipMemGenericAllocationHandle_t h)
{
	return (CUmemGenericAllocationHandle)(uintptr_t)h;
}

static CUdeviceptr dptr(const void *p)
{
	return (CUdeviceptr)(uintptr_t)p;
}

/* One of this process's HIP devices (after vhip_enter). */
static bool location_ok(const hipMemLocation *loc)
{
	int n = 0;

	return loc->type == hipMemLocationTypeDevice &&
	       hipGetDeviceCount(&n) == hipSuccess && loc->id >= 0 &&
	       loc->id < n;
}

/* The handle types HIP names, as the driver's bits; false for others. */
static bool handle_type_to_cu(hipMemAllocationHandleType t,
			      CUmemAllocationHandleType *out)
{
	switch (t) {
	case hipMemHandleTypeNone:
		*out = CU_MEM_HANDLE_TYPE_NONE;
		return true;
	case hipMemHandleTypePosixFileDescriptor:
		*out = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		return true;
	case hipMemHandleTypeWin32:
		*out = CU_MEM_HANDLE_TYPE_WIN32;
		return true;
	case hipMemHandleTypeWin32Kmt:
		*out = CU_MEM_HANDLE_TYPE_WIN32_KMT;
		return true;
	default:
		return false;
	}
}

/* HIP's properties as the driver's; false for what the real runtime
 * refuses as invalid (not pinned, not one of its devices, an unknown
 * handle type). Windows handle types pass, for the driver to refuse. */
static bool prop_to_cu(const hipMemAllocationProp *p, CUmemAllocationProp *cp)
{
	memset(cp, 0, sizeof(*cp));
	if (p->type != hipMemAllocationTypePinned || !location_ok(&p->location))
		return false;
	cp->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	cp->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	cp->location.id = p->location.id;
	cp->win32HandleMetaData = p->win32HandleMetaData;
	cp->allocFlags.compressionType = p->compressionType;
	cp->allocFlags.usage = p->usage;
	return handle_type_to_cu(p->requestedHandleType,
				 &cp->requestedHandleTypes);
}

/* The driver's properties as HIP's: what HIP cannot name (host
 * locations, fabric handles) reads as its Invalid or None. */
static void prop_from_cu(const CUmemAllocationProp *cp, hipMemAllocationProp *p)
{
	unsigned t = (unsigned)cp->requestedHandleTypes;

	memset(p, 0, sizeof(*p));
	p->type = cp->type == CU_MEM_ALLOCATION_TYPE_PINNED ?
		  hipMemAllocationTypePinned : hipMemAllocationTypeInvalid;
	p->location.type = cp->location.type == CU_MEM_LOCATION_TYPE_DEVICE ?
			   hipMemLocationTypeDevice : hipMemLocationTypeInvalid;
	p->location.id = cp->location.id;
	p->requestedHandleType = (hipMemAllocationHandleType)(
		(t & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ?
		 hipMemHandleTypePosixFileDescriptor : 0) |
		(t & CU_MEM_HANDLE_TYPE_WIN32 ? hipMemHandleTypeWin32 : 0) |
		(t & CU_MEM_HANDLE_TYPE_WIN32_KMT ? hipMemHandleTypeWin32Kmt : 0));
	p->win32HandleMetaData = cp->win32HandleMetaData;
	p->compressionType = cp->allocFlags.compressionType;
	p->usage = cp->allocFlags.usage;
}

/* ---- physical handles ------------------------------------------------------ */

VHIP_EXPORT hipError_t hipMemGetAllocationGranularity(size_t *granularity,
		const hipMemAllocationProp *prop,
		hipMemAllocationGranularity_flags option)
{
	CUmemAllocationGranularity_flags co;
	CUmemAllocationProp cp;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!granularity || !prop || !prop_to_cu(prop, &cp))
		return vhip_error(hipErrorInvalidValue);
	switch (option) {
	case hipMemAllocationGranularityMinimum:
		co = CU_MEM_ALLOC_GRANULARITY_MINIMUM;
		break;
	case hipMemAllocationGranularityRecommended:
		co = CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
		break;
	default:
		return vhip_error(hipErrorInvalidValue);
	}
	return vhip_result(cuMemGetAllocationGranularity(granularity, &cp, co));
}

VHIP_EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle,
				    size_t size,
				    const hipMemAllocationProp *prop,
				    unsigned long long flags)
{
	CUmemGenericAllocationHandle h = 0;
	CUmemAllocationProp cp;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!handle || !prop || !size || flags || !prop_to_cu(prop, &cp))
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemCreate(&h, size, &cp, 0));
	if (e == hipSuccess)
		*handle = to_hip(h);
	return e;
}

VHIP_EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!handle)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemRelease(to_cu(handle)));
}

/* The handle of the memory mapped at addr, with a reference more that a
 * hipMemRelease gives back (the driver's rule). */
VHIP_EXPORT hipError_t hipMemRetainAllocationHandle(
		hipMemGenericAllocationHandle_t *handle, void *addr)
{
	CUmemGenericAllocationHandle h = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!handle || !addr)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemRetainAllocationHandle(&h, addr));
	if (e == hipSuccess)
		*handle = to_hip(h);
	return e;
}

VHIP_EXPORT hipError_t hipMemGetAllocationPropertiesFromHandle(
		hipMemAllocationProp *prop, hipMemGenericAllocationHandle_t handle)
{
	CUmemAllocationProp cp;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!prop || !handle)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemGetAllocationPropertiesFromHandle(&cp,
							       to_cu(handle)));
	if (e == hipSuccess)
		prop_from_cu(&cp, prop);
	return e;
}

/* ---- shareable handles: POSIX file descriptors ------------------------------- */

/* An int fd in *shareableHandle: the caller's, to pass on and close. */
VHIP_EXPORT hipError_t hipMemExportToShareableHandle(void *shareableHandle,
		hipMemGenericAllocationHandle_t handle,
		hipMemAllocationHandleType handleType, unsigned long long flags)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!shareableHandle || !handle || flags ||
	    handleType != hipMemHandleTypePosixFileDescriptor)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemExportToShareableHandle(shareableHandle,
		to_cu(handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
}

/* osHandle is the fd's value cast to a pointer; NULL (fd 0) is refused,
 * as by the real runtime. */
VHIP_EXPORT hipError_t hipMemImportFromShareableHandle(
		hipMemGenericAllocationHandle_t *handle, void *osHandle,
		hipMemAllocationHandleType shHandleType)
{
	CUmemGenericAllocationHandle h = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!handle || !osHandle ||
	    shHandleType != hipMemHandleTypePosixFileDescriptor)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemImportFromShareableHandle(&h, osHandle,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	if (e == hipSuccess)
		*handle = to_hip(h);
	return e;
}

/* ---- address ranges, mappings, access ------------------------------------------ */

VHIP_EXPORT hipError_t hipMemAddressReserve(void **ptr, size_t size,
					    size_t alignment, void *addr,
					    unsigned long long flags)
{
	CUdeviceptr d = 0;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr || !size || flags)
		return vhip_error(hipErrorInvalidValue);
	e = vhip_result(cuMemAddressReserve(&d, size, alignment, dptr(addr), 0));
	if (e == hipSuccess)
		*ptr = (void *)(uintptr_t)d;
	return e;
}

VHIP_EXPORT hipError_t hipMemAddressFree(void *devPtr, size_t size)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!devPtr || !size)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemAddressFree(dptr(devPtr), size));
}

/* The mapping holds the memory until hipMemUnmap, whatever becomes of the
 * handle. */
VHIP_EXPORT hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
				 hipMemGenericAllocationHandle_t handle,
				 unsigned long long flags)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr || !size || !handle || flags)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemMap(dptr(ptr), size, offset, to_cu(handle), 0));
}

VHIP_EXPORT hipError_t hipMemUnmap(void *ptr, size_t size)
{
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr || !size)
		return vhip_error(hipErrorInvalidValue);
	return vhip_result(cuMemUnmap(dptr(ptr), size));
}

static bool access_to_cu(const hipMemAccessDesc *d, CUmemAccessDesc *cd)
{
	memset(cd, 0, sizeof(*cd));
	if (!location_ok(&d->location))
		return false;
	cd->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	cd->location.id = d->location.id;
	switch (d->flags) {
	case hipMemAccessFlagsProtNone:
		cd->flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
		return true;
	case hipMemAccessFlagsProtRead:
		cd->flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
		return true;
	case hipMemAccessFlagsProtReadWrite:
		cd->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		return true;
	default:
		return false;
	}
}

/* Every descriptor is checked before the first is applied; each is then
 * the driver's call of its own (no array to allocate). */
VHIP_EXPORT hipError_t hipMemSetAccess(void *ptr, size_t size,
				       const hipMemAccessDesc *desc,
				       size_t count)
{
	CUmemAccessDesc cd;
	hipError_t e = vhip_enter();

	if (e != hipSuccess)
		return e;
	if (!ptr || !size || !desc || !count)
		return vhip_error(hipErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		if (!access_to_cu(&desc[i], &cd))
			return vhip_error(hipErrorInvalidValue);
	for (size_t i = 0; i < count && e == hipSuccess; i++) {
		access_to_cu(&desc[i], &cd);
		e = vhip_result(cuMemSetAccess(dptr(ptr), size, &cd, 1));
	}
	return e;
}
