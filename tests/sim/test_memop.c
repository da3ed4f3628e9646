/* test_memop.c - stream memory operations: values written and waited for
 * in stream order, alone and in batches, in every ABI; a wait holds its
 * stream until the value comes; bad arguments refused.
 */
#include "simtest.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

TestSuite(memop, .init = simtest_clean_env, .fini = simtest_remove_state);

#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned);
CUresult cuStreamWriteValue64(CUstream, CUdeviceptr, cuuint64_t, unsigned);
CUresult cuStreamWaitValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned);
CUresult cuStreamWriteValue32_ptsz(CUstream, CUdeviceptr, cuuint32_t,
				   unsigned);
CUresult cuStreamWriteValue32_v2(CUstream, CUdeviceptr, cuuint32_t, unsigned);
CUresult cuStreamWriteValue64_v2(CUstream, CUdeviceptr, cuuint64_t, unsigned);
CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, cuuint32_t, unsigned);
CUresult cuStreamWaitValue64_v2(CUstream, CUdeviceptr, cuuint64_t, unsigned);
CUresult cuStreamBatchMemOp_v2(CUstream, unsigned, CUstreamBatchMemOpParams *,
			       unsigned);

Test(memop, writes_land_in_order_in_every_abi)
{
	CUdeviceptr d;
	uint32_t w[4];
	uint64_t q;
	CUstream s;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 64));
	CU_OK(cuMemsetD8(d, 0, 64));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamWriteValue32(s, d, 11, 0));
	CU_OK(cuStreamWriteValue32_v2(s, d + 4, 22, 0));
	CU_OK(cuStreamWriteValue32_ptsz(NULL, d + 8, 33, 0));
	CU_OK(cuStreamWriteValue32_v2(s, d + 12, 1, 0));
	CU_OK(cuStreamWriteValue32_v2(s, d + 12, 44, 0));	/* in order */
	CU_OK(cuStreamWriteValue64_v2(s, d + 16, 0x0123456789abcdefull, 0));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuCtxSynchronize());
	CU_OK(cuMemcpyDtoH(w, d, sizeof(w)));
	CU_OK(cuMemcpyDtoH(&q, d + 16, sizeof(q)));
	cr_assert(w[0] == 11 && w[1] == 22 && w[2] == 33 && w[3] == 44,
		  "%u %u %u %u", w[0], w[1], w[2], w[3]);
	cr_assert_eq(q, 0x0123456789abcdefull);
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuMemFree(d));
}

struct later {
	CUdeviceptr d;
	uint32_t value;
	CUcontext ctx;
};

static void *write_later(void *arg)
{
	struct later *l = arg;
	struct timespec t = { 0, 50 * 1000000 };

	nanosleep(&t, NULL);
	cuCtxSetCurrent(l->ctx);
	cuMemcpyHtoD(l->d, &l->value, sizeof(l->value));
	return NULL;
}

/* A wait holds its stream (and what is queued behind it) until the value
 * comes; each condition, 32 and 64 bits. */
Test(memop, a_wait_holds_its_stream_until_the_value_comes)
{
	struct later l;
	CUdeviceptr d;
	pthread_t t;
	uint32_t got;
	CUstream s;

	l.ctx = simtest_init();
	CU_OK(cuMemAlloc(&d, 64));
	CU_OK(cuMemsetD8(d, 0, 64));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamWaitValue32_v2(s, d, 5, CU_STREAM_WAIT_VALUE_GEQ));
	CU_OK(cuStreamWriteValue32_v2(s, d + 4, 77, 0));
	cr_assert_eq(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
	l.d = d;
	l.value = 7;
	cr_assert_eq(pthread_create(&t, NULL, write_later, &l), 0);
	CU_OK(cuStreamSynchronize(s));
	pthread_join(t, NULL);
	CU_OK(cuMemcpyDtoH(&got, d + 4, sizeof(got)));
	cr_assert_eq(got, 77);
	/* Conditions that hold at once: EQ, AND, NOR, 64-bit GEQ. */
	CU_OK(cuStreamWaitValue32_v2(s, d, 7, CU_STREAM_WAIT_VALUE_EQ));
	CU_OK(cuStreamWaitValue32_v2(s, d, 2, CU_STREAM_WAIT_VALUE_AND));
	CU_OK(cuStreamWaitValue32_v2(s, d, 0xfffffff0u,
				     CU_STREAM_WAIT_VALUE_NOR));
	CU_OK(cuStreamWaitValue64_v2(s, d + 8, 0, CU_STREAM_WAIT_VALUE_GEQ));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuMemFree(d));
}

Test(memop, a_batch_runs_its_operations_in_order)
{
	CUstreamBatchMemOpParams ops[4];
	CUdeviceptr d;
	uint32_t w[2];
	CUstream s;

	simtest_init();
	CU_OK(cuMemAlloc(&d, 64));
	CU_OK(cuMemsetD8(d, 0, 64));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	memset(ops, 0, sizeof(ops));
	ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ops[0].writeValue.address = d;
	ops[0].writeValue.value = 9;
	ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
	ops[1].waitValue.address = d;
	ops[1].waitValue.value = 9;
	ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
	ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
	ops[3].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ops[3].writeValue.address = d + 4;
	ops[3].writeValue.value = 10;
	CU_OK(cuStreamBatchMemOp_v2(s, 4, ops, 0));
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuMemcpyDtoH(w, d, sizeof(w)));
	cr_assert(w[0] == 9 && w[1] == 10, "%u %u", w[0], w[1]);
	/* Refused: flags, an unknown operation, a misaligned or foreign
	 * address, a NULL array. */
	cr_assert_eq(cuStreamBatchMemOp_v2(s, 4, ops, 1),
		     CUDA_ERROR_INVALID_VALUE);
	ops[2].operation = 77;
	cr_assert_eq(cuStreamBatchMemOp_v2(s, 4, ops, 0),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(cuStreamBatchMemOp_v2(s, 1, NULL, 0),
		     CUDA_ERROR_INVALID_VALUE);
	/* A bad operation after good ones: none of the batch is queued. */
	ops[2].operation = CU_STREAM_MEM_OP_BARRIER;
	ops[0].writeValue.value = 11;
	ops[1].waitValue.value = 11;
	ops[3].writeValue.address = d + 2;	/* misaligned */
	cr_assert_eq(cuStreamBatchMemOp_v2(s, 4, ops, 0),
		     CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuMemcpyDtoH(w, d, sizeof(w)));
	cr_assert(w[0] == 9 && w[1] == 10, "a refused batch ran: %u %u",
		  w[0], w[1]);
	/* "Less than 256" operations. */
	{
		static CUstreamBatchMemOpParams many[256];

		for (int i = 0; i < 256; i++)
			many[i].memoryBarrier.operation =
				CU_STREAM_MEM_OP_BARRIER;
		cr_assert_eq(cuStreamBatchMemOp_v2(s, 256, many, 0),
			     CUDA_ERROR_INVALID_VALUE);
		CU_OK(cuStreamBatchMemOp_v2(s, 255, many, 0));
	}
	cr_assert_eq(cuStreamWriteValue32_v2(s, d + 2, 1, 0),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(cuStreamWriteValue64_v2(s, d + 4, 1, 0),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(cuStreamWriteValue32_v2(s, d + 64, 1, 0),
		     CUDA_ERROR_INVALID_VALUE);
	cr_assert_eq(cuStreamWaitValue32_v2(s, d, 1, 0x10),
		     CUDA_ERROR_INVALID_VALUE);
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuMemFree(d));
}
