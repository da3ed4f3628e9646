/* prim.c - the core's primitives (vgpu/prim.h) over the CUDA driver. */
#include "devices.h"

/* Pools keep freed blocks until trimmed or synchronised: at the slice's
 * edge they are trimmed and their charge read again (pools.c). */
static bool reclaim(int dev)
{
	return vgpu__pools_reclaim(dev);
}

const struct vgpu_prim vgpu__prim = {
	.reclaim = reclaim,
};
