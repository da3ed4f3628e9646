/* attrs.cu - kernels exercising .nv.info attributes for
 * tests/sim/test_image.c.  Regenerate with ./gen.sh (see README). */

struct Large {
	int v[1250];
};			/* 5000 bytes: described by KPARAM_INFO_V2 (0x45) */

__constant__ float table[100];	/* 400 bytes of .nv.constant3 */

extern "C" __global__ void large(char c, Large l, int *o)
{
	o[0] = l.v[threadIdx.x] + c;
}

extern "C" __global__ void __launch_bounds__(128, 4) bounded(float *o)
{
	o[threadIdx.x] = table[threadIdx.x];
}

extern "C" __global__ void framed(float *o, const int *idx)
{
	float buf[256];	/* indexed at run time: 1024 bytes of local frame */

	for (int i = 0; i < 256; i++)
		buf[idx[i]] = o[i];
	o[threadIdx.x] = buf[idx[threadIdx.x]];
}

extern "C" __global__ void shared400(float *o)
{
	__shared__ float s[100];

	s[threadIdx.x] = o[0];
	__syncthreads();
	o[threadIdx.x] = s[(threadIdx.x + 1) % 100];
}
