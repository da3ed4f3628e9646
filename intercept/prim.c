/* prim.c - the core's primitives (vgpu/prim.h) over the CUDA driver. */
#include "devices.h"

/* Pools keep freed blocks until trimmed or synchronised: their charge is
 * read again from the driver (pools.c). */
static bool reclaim(int dev)
{
	return vgpu__pools_settle_device(dev);
}

const struct vgpu_prim vgpu__prim = {
	.reclaim = reclaim,
};
