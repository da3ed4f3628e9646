/* memop.c - stream memory operations: cuStreamWriteValue32/64,
 * cuStreamWaitValue32/64 and cuStreamBatchMemOp, in their first ABI and
 * the _v2 one (CUDA 11.7), each with its per-thread stream form.
 *
 * Each operation is an op of its stream, run in order by the stream's
 * worker: a write stores the value (32 or 64 bits) at its address, a wait
 * polls the address until its condition holds (GEQ, EQ, AND, NOR, as
 * cuda.h defines them), holding its stream as long, as a GPU's does. The
 * address must lie in a device allocation, aligned to the value's size;
 * a batch's operations are queued one after the other. A flush or a
 * barrier is ordered by the stream already: nothing to do.
 */
#include "sim.h"

#include <time.h>

#define POLL_NS 20000L		/* a wait's poll */

static bool holds(const struct vsim_op *op)
{
	uint64_t have, want = op->u.memop.value;
	bool wide = op->u.memop.kind == CU_STREAM_MEM_OP_WAIT_VALUE_64;

	if (wide) {
		have = __atomic_load_n((uint64_t *)op->u.memop.addr,
				       __ATOMIC_ACQUIRE);
	} else {
		have = __atomic_load_n((uint32_t *)op->u.memop.addr,
				       __ATOMIC_ACQUIRE);
		want = (uint32_t)want;
	}
	switch (op->u.memop.flags & 3u) {
	case CU_STREAM_WAIT_VALUE_GEQ:
		return wide ? (int64_t)(have - want) >= 0
			    : (int32_t)(uint32_t)(have - want) >= 0;
	case CU_STREAM_WAIT_VALUE_EQ:
		return have == want;
	case CU_STREAM_WAIT_VALUE_AND:
		return (have & want) != 0;
	default:		/* NOR */
		return wide ? ~(have | want) != 0
			    : (uint32_t)~(have | want) != 0;
	}
}

void vsim_memop_run(const struct vsim_op *op)
{
	struct timespec poll = { 0, POLL_NS };

	switch (op->u.memop.kind) {
	case CU_STREAM_MEM_OP_WRITE_VALUE_32:
		__atomic_store_n((uint32_t *)op->u.memop.addr,
				 (uint32_t)op->u.memop.value, __ATOMIC_RELEASE);
		break;
	case CU_STREAM_MEM_OP_WRITE_VALUE_64:
		__atomic_store_n((uint64_t *)op->u.memop.addr,
				 op->u.memop.value, __ATOMIC_RELEASE);
		break;
	case CU_STREAM_MEM_OP_WAIT_VALUE_32:
	case CU_STREAM_MEM_OP_WAIT_VALUE_64:
		while (!holds(op))
			nanosleep(&poll, NULL);
		break;
	default:		/* a flush, a barrier: ordered already */
		break;
	}
}

static bool wide_op(unsigned kind)
{
	return kind == CU_STREAM_MEM_OP_WAIT_VALUE_64 ||
	       kind == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

static bool wait_op(unsigned kind)
{
	return kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
	       kind == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

/* Whether one operation may be queued: its kind, flags and address. */
static CUresult check(unsigned kind, CUdeviceptr addr, unsigned flags)
{
	size_t size = wide_op(kind) ? 8 : 4;

	switch (kind) {
	case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
	case CU_STREAM_MEM_OP_BARRIER:
		return CUDA_SUCCESS;
	case CU_STREAM_MEM_OP_WAIT_VALUE_32:
	case CU_STREAM_MEM_OP_WAIT_VALUE_64:
	case CU_STREAM_MEM_OP_WRITE_VALUE_32:
	case CU_STREAM_MEM_OP_WRITE_VALUE_64:
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (wait_op(kind) ? flags & ~(3u | CU_STREAM_WAIT_VALUE_FLUSH)
			  : flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
		return CUDA_ERROR_INVALID_VALUE;
	if (addr % size || vsim_mem_check_device(addr, size) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* One operation, checked, queued on s. */
static CUresult queue(struct CUstream_st *s, unsigned kind, CUdeviceptr addr,
		      uint64_t value, unsigned flags)
{
	struct vsim_op *op = vsim_op_new(VSIM_OP_MEMOP);

	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.memop.addr = (void *)(uintptr_t)addr;
	op->u.memop.value = value;
	op->u.memop.kind = kind;
	op->u.memop.flags = flags;
	return vsim_stream_submit(s, op, NULL);
}

/* One operation queued on h, or refused: kind, address, value, flags. */
static CUresult submit(CUstream h, bool ptsz, unsigned kind, CUdeviceptr addr,
		       uint64_t value, unsigned flags)
{
	struct CUstream_st *s;
	CUresult rc = vsim_stream_resolve(h, ptsz, &s);

	if (rc == CUDA_SUCCESS)
		rc = check(kind, addr, flags);
	return rc == CUDA_SUCCESS ? queue(s, kind, addr, value, flags) : rc;
}

/* An operation of a batch as (kind, address, value, flags). */
static void unpack(const CUstreamBatchMemOpParams *p, CUdeviceptr *addr,
		   uint64_t *value, unsigned *flags)
{
	bool wide = wide_op(p->operation);

	*addr = 0;
	*value = 0;
	*flags = 0;
	if (wait_op(p->operation)) {
		*addr = p->waitValue.address;
		*value = wide ? p->waitValue.value64 : p->waitValue.value;
		*flags = p->waitValue.flags;
	} else if (p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
		   p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
		*addr = p->writeValue.address;
		*value = wide ? p->writeValue.value64 : p->writeValue.value;
		*flags = p->writeValue.flags;
	}
}

/* A batch is checked whole before any of it is queued: one bad operation
 * refuses the call and queues nothing. At most 255 operations ("less
 * than 256"). */
static CUresult batch(CUstream h, bool ptsz, unsigned count,
		      CUstreamBatchMemOpParams *ops, unsigned flags)
{
	struct CUstream_st *s;
	CUresult rc;

	if (count == 0)
		return CUDA_SUCCESS;
	if (!ops || flags || count >= 256)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = vsim_stream_resolve(h, ptsz, &s)) != CUDA_SUCCESS)
		return rc;
	for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++) {
		CUdeviceptr addr;
		uint64_t value;
		unsigned f;

		unpack(&ops[i], &addr, &value, &f);
		rc = check(ops[i].operation, addr, f);
	}
	for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++) {
		CUdeviceptr addr;
		uint64_t value;
		unsigned f;

		unpack(&ops[i], &addr, &value, &f);
		rc = queue(s, ops[i].operation, addr, value, f);
	}
	return rc;
}

#define VALUE_OP(name, type, kind, ptsz)                                      \
	CUresult CUDAAPI name(CUstream h, CUdeviceptr a, type v,              \
			      unsigned int flags);                            \
	VSIM_EXPORT CUresult name(CUstream h, CUdeviceptr a, type v,          \
				  unsigned int flags)                         \
	{                                                                     \
		return submit(h, ptsz, kind, a, v, flags);                    \
	}
#define BATCH_OP(name, ptsz)                                                  \
	CUresult CUDAAPI name(CUstream h, unsigned int count,                 \
			      CUstreamBatchMemOpParams *ops,                  \
			      unsigned int flags);                            \
	VSIM_EXPORT CUresult name(CUstream h, unsigned int count,             \
				  CUstreamBatchMemOpParams *ops,              \
				  unsigned int flags)                         \
	{                                                                     \
		return batch(h, ptsz, count, ops, flags);                     \
	}

#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp

VALUE_OP(cuStreamWriteValue32, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32, false)
VALUE_OP(cuStreamWriteValue32_ptsz, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32, true)
VALUE_OP(cuStreamWriteValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32, false)
VALUE_OP(cuStreamWriteValue32_v2_ptsz, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32, true)
VALUE_OP(cuStreamWriteValue64, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64, false)
VALUE_OP(cuStreamWriteValue64_ptsz, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64, true)
VALUE_OP(cuStreamWriteValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64, false)
VALUE_OP(cuStreamWriteValue64_v2_ptsz, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64, true)
VALUE_OP(cuStreamWaitValue32, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32, false)
VALUE_OP(cuStreamWaitValue32_ptsz, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32, true)
VALUE_OP(cuStreamWaitValue32_v2, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32, false)
VALUE_OP(cuStreamWaitValue32_v2_ptsz, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32, true)
VALUE_OP(cuStreamWaitValue64, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64, false)
VALUE_OP(cuStreamWaitValue64_ptsz, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64, true)
VALUE_OP(cuStreamWaitValue64_v2, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64, false)
VALUE_OP(cuStreamWaitValue64_v2_ptsz, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64, true)
BATCH_OP(cuStreamBatchMemOp, false)
BATCH_OP(cuStreamBatchMemOp_ptsz, true)
BATCH_OP(cuStreamBatchMemOp_v2, false)
BATCH_OP(cuStreamBatchMemOp_v2_ptsz, true)
