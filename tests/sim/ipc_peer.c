/* ipc_peer.c - sim-ipc-peer, the second process of test_ipc.c and
 * test_vmm_share.c (ipc_common.h has the protocol).
 *
 * Usage: sim-ipc-peer SOCKET-FD. Initialises the driver (device 0's primary
 * context), says so, then runs each command it reads and answers it, until
 * PEER_EXIT or the socket closes: then it returns from main, freeing
 * nothing, as most programs end.
 */
#include "ipc_common.h"

#include <stdlib.h>
#include <unistd.h>

#include "vgpu_kernels.h"

/* vgpu_touch's pattern under seed c in the n words at p. */
static CUresult check_touch(CUdeviceptr p, uint64_t n, uint32_t seed)
{
	uint32_t *buf = malloc(n * sizeof(*buf));
	CUresult rc;

	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = cuMemcpyDtoH(buf, p, n * sizeof(*buf));
	for (uint64_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
		if (buf[i] != vgpu_touch_pattern(seed, i))
			rc = CUDA_ERROR_ASSERT;
	free(buf);
	return rc;
}

static CUresult run_vmm(struct peer_msg *m, int fd, int *out_fd)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CUresult rc;

	switch (m->op) {
	case PEER_VMM_CREATE:
		rc = ipc_vmm_create(m->a, &h);
		m->a = h;
		return rc;
	case PEER_VMM_EXPORT:
		return cuMemExportToShareableHandle(out_fd, m->a,
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	case PEER_VMM_IMPORT:
		rc = cuMemImportFromShareableHandle(&h,
				(void *)(uintptr_t)(fd >= 0 ? (uint64_t)fd : m->c),
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		m->a = h;
		return rc;
	case PEER_VMM_MAP:
		rc = ipc_vmm_map(m->a, m->b, &va);
		m->a = va;
		return rc;
	case PEER_VMM_UNMAP:
		return ipc_vmm_unmap(m->a, m->b);
	case PEER_VMM_RELEASE:
		return cuMemRelease(m->a);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult run(struct peer_msg *m, int fd, int *out_fd)
{
	CUdeviceptr p;
	CUresult rc;

	switch (m->op) {
	case PEER_ALLOC:
		rc = cuMemAlloc(&p, m->a);
		m->a = p;
		return rc;
	case PEER_FREE:
		return cuMemFree(m->a);
	case PEER_IPC_GET:
		return cuIpcGetMemHandle(&m->handle, m->a);
	case PEER_IPC_OPEN:
		rc = cuIpcOpenMemHandle(&p, m->handle,
					CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		m->a = p;
		return rc;
	case PEER_IPC_CLOSE:
		return cuIpcCloseMemHandle(m->a);
	case PEER_FILL:
		return ipc_fill(m->a, m->b, (unsigned char)m->c);
	case PEER_CHECK:
		return ipc_check(m->a, m->b, (unsigned char)m->c);
	case PEER_CHECK_TOUCH:
		return check_touch(m->a, m->b, (uint32_t)m->c);
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
	CUcontext ctx;
	int sock;

	if (argc != 2)
		return 2;
	sock = atoi(argv[1]);
	m.rc = cuInit(0);
	if (m.rc == CUDA_SUCCESS)
		m.rc = cuDevicePrimaryCtxRetain(&ctx, 0);
	if (m.rc == CUDA_SUCCESS)
		m.rc = cuCtxSetCurrent(ctx);
	if (ipc_send(sock, &m, -1) != 0 || m.rc != CUDA_SUCCESS)
		return 1;
	return ipc_serve(sock, serve);
}
