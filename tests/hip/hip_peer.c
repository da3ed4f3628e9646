/* hip_peer.c - hip-peer, test_hip.c's HIP process (hip_peer.h has the
 * commands).
 *
 * Usage: hip-peer SOCKET-FD. hipSetDevice(0), says so, then runs each
 * command it reads and answers it, until PEER_EXIT or the socket closes:
 * then it returns from main, freeing nothing, as most programs end.
 */
#include "hip_peer.h"

#include <hip/hip_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(hipMemAllocationProp) <= sizeof(CUipcMemHandle) &&
	       sizeof(hipMemAccessDesc) <= sizeof(CUipcMemHandle) &&
	       sizeof(hipIpcMemHandle_t) == sizeof(CUipcMemHandle),
	       "HIP's structures travel in the message's handle bytes");

static void *ptr(uint64_t v)
{
	return (void *)(uintptr_t)v;
}

static uint64_t num(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static hipMemGenericAllocationHandle_t handle(uint64_t v)
{
	return (hipMemGenericAllocationHandle_t)(uintptr_t)v;
}

static hipError_t check(void *p, size_t n, unsigned char v)
{
	unsigned char *buf = malloc(n);
	hipError_t e;

	if (!buf)
		return hipErrorOutOfMemory;
	e = hipMemcpy(buf, p, n, hipMemcpyDeviceToHost);
	for (size_t i = 0; e == hipSuccess && i < n; i++)
		if (buf[i] != v)
			e = hipErrorAssert;
	free(buf);
	return e;
}

static hipError_t vmm_create(size_t n, uint64_t *out)
{
	hipMemAllocationProp prop = {
		.type = hipMemAllocationTypePinned,
		.requestedHandleType = hipMemHandleTypePosixFileDescriptor,
		.location = { .type = hipMemLocationTypeDevice, .id = 0 },
	};
	hipMemGenericAllocationHandle_t h = NULL;
	hipError_t e = hipMemCreate(&h, n, &prop, 0);

	*out = num(h);
	return e;
}

static hipError_t vmm_map(uint64_t h, size_t n, uint64_t *out)
{
	hipMemAccessDesc d = {
		.location = { .type = hipMemLocationTypeDevice, .id = 0 },
		.flags = hipMemAccessFlagsProtReadWrite,
	};
	void *va = NULL;
	hipError_t e = hipMemAddressReserve(&va, n, 0, NULL, 0);

	if (e == hipSuccess)
		e = hipMemMap(va, n, 0, handle(h), 0);
	if (e == hipSuccess)
		e = hipMemSetAccess(va, n, &d, 1);
	*out = num(va);
	return e;
}

static hipError_t vmm_unmap(void *va, size_t n)
{
	hipError_t e = hipMemUnmap(va, n);

	return e == hipSuccess ? hipMemAddressFree(va, n) : e;
}

/* The VMM calls one at a time, their arguments as the test gave them. */
static hipError_t run_call(struct peer_msg *m)
{
	hipMemGenericAllocationHandle_t h = NULL;
	hipMemAllocationProp prop;
	hipMemAccessDesc desc;
	size_t n = 0;
	void *va = NULL;
	hipError_t e;

	memcpy(&prop, m->handle.reserved, sizeof(prop));
	switch (m->op) {
	case HPEER_CREATE:
		e = hipMemCreate(m->c & HPEER_NULL_OUT ? NULL : &h, m->a,
				 m->c & HPEER_NULL_PROP ? NULL : &prop, m->b);
		m->a = num(h);
		return e;
	case HPEER_GRANULARITY:
		e = hipMemGetAllocationGranularity(
			m->c & HPEER_NULL_OUT ? NULL : &n,
			m->c & HPEER_NULL_PROP ? NULL : &prop,
			(hipMemAllocationGranularity_flags)m->b);
		m->a = n;
		return e;
	case HPEER_PROPS:
		memset(&prop, 0xee, sizeof(prop));
		e = hipMemGetAllocationPropertiesFromHandle(&prop, handle(m->a));
		memcpy(m->handle.reserved, &prop, sizeof(prop));
		return e;
	case HPEER_RETAIN:
		e = hipMemRetainAllocationHandle(
			m->c & HPEER_NULL_OUT ? NULL : &h, ptr(m->a));
		m->a = num(h);
		return e;
	case HPEER_RESERVE:
		e = hipMemAddressReserve(&va, m->a, m->b, NULL, m->c);
		m->a = num(va);
		return e;
	case HPEER_ADDRESS_FREE:
		return hipMemAddressFree(ptr(m->a), m->b);
	case HPEER_MAP:
		return hipMemMap(ptr(m->a), m->b, 0, handle(m->c), 0);
	case HPEER_UNMAP:
		return hipMemUnmap(ptr(m->a), m->b);
	case HPEER_SET_ACCESS:
		memcpy(&desc, m->handle.reserved, sizeof(desc));
		return hipMemSetAccess(ptr(m->a), m->b, &desc, 1);
	default:
		return hipErrorInvalidValue;
	}
}

static hipError_t run_vmm(struct peer_msg *m, int fd, int *out_fd)
{
	hipMemGenericAllocationHandle_t h = NULL;

	switch (m->op) {
	case PEER_VMM_CREATE:
		return vmm_create(m->a, &m->a);
	case PEER_VMM_EXPORT:
		return hipMemExportToShareableHandle(out_fd, handle(m->a),
			(hipMemAllocationHandleType)m->b, m->c);
	case PEER_VMM_IMPORT: {
		hipError_t e = hipMemImportFromShareableHandle(&h,
			ptr(fd >= 0 ? (uint64_t)fd : m->c),
			(hipMemAllocationHandleType)m->b);
		m->a = num(h);
		return e;
	}
	case PEER_VMM_MAP:
		return vmm_map(m->a, m->b, &m->a);
	case PEER_VMM_UNMAP:
		return vmm_unmap(ptr(m->a), m->b);
	case PEER_VMM_RELEASE:
		return hipMemRelease(handle(m->a));
	default:
		return run_call(m);
	}
}

static hipError_t run(struct peer_msg *m, int fd, int *out_fd)
{
	hipIpcMemHandle_t ih;
	void *p = NULL;
	hipError_t e;

	switch (m->op) {
	case PEER_ALLOC:
		e = hipMalloc(&p, m->a);
		m->a = num(p);
		return e;
	case PEER_FREE:
		return hipFree(ptr(m->a));
	case PEER_IPC_GET:
		memset(&ih, 0, sizeof(ih));
		e = hipIpcGetMemHandle(&ih, ptr(m->a));
		memcpy(&m->handle, &ih, sizeof(ih));
		return e;
	case PEER_IPC_OPEN:
		memcpy(&ih, &m->handle, sizeof(ih));
		e = hipIpcOpenMemHandle(&p, ih, (unsigned)m->b);
		m->a = num(p);
		return e;
	case PEER_IPC_CLOSE:
		return hipIpcCloseMemHandle(ptr(m->a));
	case PEER_FILL:
		return hipMemset(ptr(m->a), (int)m->c, m->b);
	case PEER_CHECK:
		return check(ptr(m->a), m->b, (unsigned char)m->c);
	default:
		return run_vmm(m, fd, out_fd);
	}
}

static int serve(struct peer_msg *m, int fd, int *out_fd)
{
	return (int)run(m, fd, out_fd);
}

int main(int argc, char **argv)
{
	struct peer_msg m = { 0 };
	int sock;

	if (argc != 2)
		return 2;
	sock = atoi(argv[1]);
	m.rc = hipSetDevice(0);
	if (ipc_send(sock, &m, -1) != 0 || m.rc != hipSuccess)
		return 1;
	return ipc_serve(sock, serve);
}
