/* ipc_common.h - the memory-sharing tests' second process, and what both
 * sides use.
 *
 * test_ipc.c and test_vmm_share.c drive peers: sim-ipc-peer (ipc_peer.c),
 * started with fork and exec, so that a peer shares nothing with the test
 * but the state directory and the fds it inherits. A peer runs one command
 * at a time from a socketpair (SOCK_SEQPACKET, one message each way) and
 * answers each: the test orders every step of every process and checks the
 * device in between. File descriptors travel with SCM_RIGHTS.
 *
 * Nothing here asserts: the peer has no Criterion. Functions return a
 * CUresult, or 0 / -1.
 */
#ifndef VGPU_IPC_COMMON_H
#define VGPU_IPC_COMMON_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IPC_GRAN ((size_t)2 << 20)      /* the VMM granularity */

enum peer_op {
	PEER_ALLOC = 1,     /* a: bytes -> a: pointer (cuMemAlloc) */
	PEER_FREE,          /* a: pointer */
	PEER_IPC_GET,       /* a: pointer -> handle */
	PEER_IPC_OPEN,      /* handle -> a: pointer */
	PEER_IPC_CLOSE,     /* a: pointer */
	PEER_FILL,          /* a: pointer, b: bytes, c: byte value */
	PEER_CHECK,         /* the same; CUDA_ERROR_ASSERT where a byte differs */
	PEER_CHECK_TOUCH,   /* a: pointer, b: 32-bit words, c: vgpu_touch seed */
	PEER_VMM_CREATE,    /* a: bytes -> a: handle, exportable as an fd */
	PEER_VMM_EXPORT,    /* a: handle -> an fd with the answer */
	PEER_VMM_IMPORT,    /* an fd with the command, or c: the number of
			     * one inherited -> a: handle */
	PEER_VMM_MAP,       /* a: handle, b: bytes -> a: address, read-write */
	PEER_VMM_UNMAP,     /* a: address, b: bytes: unmapped and unreserved */
	PEER_VMM_RELEASE,   /* a: handle */
	PEER_EXIT,          /* returns from main without freeing anything */
};

struct peer_msg {
	int32_t op;
	int32_t rc;         /* the answer's CUresult */
	uint64_t a, b, c;
	CUipcMemHandle handle;
};

/* Sends m, with fd when fd >= 0; 0 or -1. */
int ipc_send(int sock, const struct peer_msg *m, int fd);
/* Receives a message, and the fd that came with it in *fd (-1: none);
 * 0, or -1 when the other end is gone. */
int ipc_recv(int sock, struct peer_msg *m, int *fd);
/* The peer's side: answers each command with run(m, fd, &out_fd) (its
 * result in m->rc, an fd to send back in out_fd) until PEER_EXIT or the
 * test's end is gone; 0, or 1 when an answer could not be sent. */
int ipc_serve(int sock, int (*run)(struct peer_msg *m, int fd, int *out_fd));

struct peer {
	pid_t pid;
	int sock;
};

/* Forks and execs the peer; 0 once it is ready (cuInit done, device 0's
 * primary context current), -1 otherwise. */
int peer_start(struct peer *p);
/* Runs command m in the peer; m becomes the answer, and its rc is
 * returned. fd (>= 0) goes with the command; an fd that comes with the
 * answer is stored in *fd_out (closed when fd_out is NULL). */
CUresult peer_do(struct peer *p, struct peer_msg *m, int fd, int *fd_out);
/* peer_do without fds: the answer's a in *out (unless NULL). */
CUresult peer_run(struct peer *p, int op, uint64_t a, uint64_t b, uint64_t c,
		  uint64_t *out);
/* Kills the peer (SIGKILL) and reaps it; 0 when it died of that. */
int peer_kill(struct peer *p);
/* Tells the peer to return from main, and reaps it: its exit status, or
 * -1 when it did not exit. */
int peer_exit(struct peer *p);

/* Both sides. */
CUresult ipc_fill(CUdeviceptr p, size_t n, unsigned char v);
CUresult ipc_check(CUdeviceptr p, size_t n, unsigned char v);
/* A device-0 handle whose memory may be exported as an fd. */
CUresult ipc_vmm_create(size_t bytes, CUmemGenericAllocationHandle *h);
/* Reserves, maps h over the whole range and makes it read-write. */
CUresult ipc_vmm_map(CUmemGenericAllocationHandle h, size_t bytes,
		     CUdeviceptr *va);
CUresult ipc_vmm_unmap(CUdeviceptr va, size_t bytes);

#endif
