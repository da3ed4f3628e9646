/* hip_peer.h - hip-peer, test_hip.c's HIP process for VMM and IPC.
 *
 * hip-peer speaks the protocol of the simulator's memory-sharing peer
 * (tests/sim/ipc_common.h: one command at a time on a socketpair, file
 * descriptors with SCM_RIGHTS, the test orders every step) and makes each
 * command of HIP calls on the simulated HIP runtime, device 0. An answer's
 * rc is a hipError_t. The peer asserts nothing: the test reads the device's
 * used memory between steps and checks each answer.
 *
 * The ipc_common.h commands, in HIP:
 *   PEER_ALLOC, PEER_FREE          hipMalloc, hipFree
 *   PEER_IPC_GET                   a: pointer -> handle (hipIpcGetMemHandle)
 *   PEER_IPC_OPEN                  handle, b: flags -> a: pointer
 *   PEER_IPC_CLOSE                 a: pointer
 *   PEER_FILL, PEER_CHECK          hipMemset; hipMemcpy to the host and
 *                                  compare (hipErrorAssert where a byte
 *                                  differs)
 *   PEER_VMM_CREATE                a: bytes -> a: handle, device 0, pinned,
 *                                  exportable as an fd
 *   PEER_VMM_EXPORT                a: handle, b: handle type, c: flags ->
 *                                  an fd with the answer
 *   PEER_VMM_IMPORT                an fd with the command, or c: the fd's
 *                                  number (0: NULL), b: handle type ->
 *                                  a: handle
 *   PEER_VMM_MAP                   a: handle, b: bytes -> a: address,
 *                                  reserved, mapped and read-write
 *   PEER_VMM_UNMAP                 a: address, b: bytes: unmapped, unreserved
 *   PEER_VMM_RELEASE               a: handle (any value, 0 included)
 *   PEER_EXIT                      returns from main, freeing nothing
 *
 * And each VMM call alone, its arguments as given (pointers as numbers;
 * structures in the message's 64 handle bytes):
 */
#ifndef VGPU_HIP_PEER_H
#define VGPU_HIP_PEER_H

#include "ipc_common.h"

enum hip_peer_op {
	HPEER_CREATE = 100,   /* handle: hipMemAllocationProp, a: bytes, b: flags,
			       * c: HPEER_NULL_* -> a: handle */
	HPEER_GRANULARITY,    /* handle: prop, b: option, c: HPEER_NULL_* ->
			       * a: bytes */
	HPEER_PROPS,          /* a: handle -> handle: hipMemAllocationProp */
	HPEER_RETAIN,         /* a: address, c: HPEER_NULL_OUT -> a: handle */
	HPEER_RESERVE,        /* a: bytes, b: alignment, c: flags -> a: address */
	HPEER_ADDRESS_FREE,   /* a: address, b: bytes */
	HPEER_MAP,            /* a: address, b: bytes, c: handle */
	HPEER_UNMAP,          /* a: address, b: bytes */
	HPEER_SET_ACCESS,     /* handle: one hipMemAccessDesc, a: address,
			       * b: bytes */
};

#define HPEER_NULL_OUT 1u     /* the call's out pointer is NULL */
#define HPEER_NULL_PROP 2u    /* its prop pointer is NULL */

#endif
