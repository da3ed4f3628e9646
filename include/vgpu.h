/* vgpu.h - libvgpu's public header.
 *
 * What tools and outside readers may depend on. So far: the version. The
 * ledger's ABI and the stats layout join it with the shim.
 */
#ifndef VGPU_H
#define VGPU_H

#define VGPU_VERSION_MAJOR 0
#define VGPU_VERSION_MINOR 1
#define VGPU_VERSION_PATCH 0
#define VGPU_VERSION_STRING "0.1.0"

#endif
