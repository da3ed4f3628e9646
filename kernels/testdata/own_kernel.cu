/* own_kernel.cu - a user's own kernel, with no host form in libvgpu.
 *
 * Tests load its cubin to check that a kernel the simulator does not know
 * still loads, and that launching it behaves as documented.
 */
extern "C" __global__ void user_scale(float *p, float s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] *= s;
}
