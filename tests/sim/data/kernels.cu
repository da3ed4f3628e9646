/* kernels.cu - known signatures for tests/sim/test_image.c.
 * Regenerate the binaries next to it with ./gen.sh (see README). */

struct S {
	int x;
	double y;
	char z;
};			/* 24 bytes, aligned to 8 */

struct Big {
	char b[40];
};			/* 40 bytes, aligned to 1 */

__device__ __noinline__ int helper(int x)
{
	return x * 3 + 1;
}

extern "C" __global__ void k(int a, double b, char c, float4 d, int *p)
{
	if (p)
		p[threadIdx.x] = helper(a) + (int)b + c + (int)d.x;
}

extern "C" __global__ void noparams(void)
{
}

extern "C" __global__ void __launch_bounds__(256)
withstruct(S s, short h, Big big, float *out)
{
	__shared__ float tmp[64];

	tmp[threadIdx.x % 64] = s.x + s.y + s.z + h + big.b[3];
	__syncthreads();
	out[threadIdx.x] = tmp[(threadIdx.x + 1) % 64];
}

__global__ void mangled(float *x, unsigned long long n)
{
	if (threadIdx.x < n)
		x[threadIdx.x] *= 2.0f;
}
