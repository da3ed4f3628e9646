/* ipc_common.c - the memory-sharing tests' peer protocol and helpers. */
#include "ipc_common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int ipc_send(int sock, const struct peer_msg *m, int fd)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = (void *)m, .iov_len = sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*m) ? 0 : -1;
}

int ipc_recv(int sock, struct peer_msg *m, int *fd)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl, .msg_controllen = sizeof(ctl),
	};
	struct cmsghdr *c;
	ssize_t n;

	*fd = -1;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*m))
		return -1;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

#ifdef SIMTEST_IPC_PEER
int peer_start(struct peer *p)
{
	struct peer_msg m;
	char arg[16];
	int sv[2], fd;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return -1;
	p->pid = fork();
	if (p->pid < 0)
		return -1;
	if (p->pid == 0) {
		/* Only the peer's end crosses exec. */
		fcntl(sv[1], F_SETFD, 0);
		snprintf(arg, sizeof(arg), "%d", sv[1]);
		execl(SIMTEST_IPC_PEER, SIMTEST_IPC_PEER, arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	p->sock = sv[0];
	if (ipc_recv(p->sock, &m, &fd) != 0 || m.rc != CUDA_SUCCESS)
		return -1;
	return 0;
}
#endif

int ipc_serve(int sock, int (*run)(struct peer_msg *m, int fd, int *out_fd))
{
	struct peer_msg m;
	int fd, out_fd;

	while (ipc_recv(sock, &m, &fd) == 0 && m.op != PEER_EXIT) {
		out_fd = -1;
		m.rc = run(&m, fd, &out_fd);
		if (fd >= 0)
			close(fd);
		if (ipc_send(sock, &m, out_fd) != 0)
			return 1;
		if (out_fd >= 0)
			close(out_fd);
	}
	return 0;
}

CUresult peer_do(struct peer *p, struct peer_msg *m, int fd, int *fd_out)
{
	int got;

	if (ipc_send(p->sock, m, fd) != 0 || ipc_recv(p->sock, m, &got) != 0)
		return CUDA_ERROR_UNKNOWN;
	if (fd_out)
		*fd_out = got;
	else if (got >= 0)
		close(got);
	return (CUresult)m->rc;
}

CUresult peer_run(struct peer *p, int op, uint64_t a, uint64_t b, uint64_t c,
		  uint64_t *out)
{
	struct peer_msg m = { .op = op, .a = a, .b = b, .c = c };
	CUresult rc = peer_do(p, &m, -1, NULL);

	if (out)
		*out = m.a;
	return rc;
}

int peer_kill(struct peer *p)
{
	int status;

	if (kill(p->pid, SIGKILL) != 0 || waitpid(p->pid, &status, 0) != p->pid)
		return -1;
	close(p->sock);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : -1;
}

int peer_exit(struct peer *p)
{
	struct peer_msg m = { .op = PEER_EXIT };
	int status;

	if (ipc_send(p->sock, &m, -1) != 0 ||
	    waitpid(p->pid, &status, 0) != p->pid)
		return -1;
	close(p->sock);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

CUresult ipc_fill(CUdeviceptr p, size_t n, unsigned char v)
{
	return cuMemsetD8(p, v, n);
}

CUresult ipc_check(CUdeviceptr p, size_t n, unsigned char v)
{
	unsigned char *buf = malloc(n);
	CUresult rc;

	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = cuMemcpyDtoH(buf, p, n);
	for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
		if (buf[i] != v)
			rc = CUDA_ERROR_ASSERT;
	free(buf);
	return rc;
}

CUresult ipc_vmm_create(size_t bytes, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};

	return cuMemCreate(h, bytes, &prop, 0);
}

CUresult ipc_vmm_map(CUmemGenericAllocationHandle h, size_t bytes,
		     CUdeviceptr *va)
{
	CUmemAccessDesc d = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUresult rc = cuMemAddressReserve(va, bytes, 0, 0, 0);

	if (rc == CUDA_SUCCESS)
		rc = cuMemMap(*va, bytes, 0, h, 0);
	if (rc == CUDA_SUCCESS)
		rc = cuMemSetAccess(*va, bytes, &d, 1);
	return rc;
}

CUresult ipc_vmm_unmap(CUdeviceptr va, size_t bytes)
{
	CUresult rc = cuMemUnmap(va, bytes);

	return rc == CUDA_SUCCESS ? cuMemAddressFree(va, bytes) : rc;
}
