#!/bin/sh
# gen.sh - regenerates the test inputs of tests/sim/test_image.c.
# Needs the CUDA toolkit (made with CUDA 13.0, nvcc V13.0.88).
set -e
cd "$(dirname "$0")"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
PTXAS=${PTXAS:-/usr/local/cuda/bin/ptxas}

$NVCC -cubin -arch=sm_80 -o kernels_sm80.cubin kernels.cu
$NVCC -ptx -arch=sm_80 -o kernels_sm80.ptx kernels.cu
# uncompressed: sm_75, sm_80, sm_86, sm_90 cubins and compute_90 PTX
$NVCC -fatbin --no-compress \
	-gencode arch=compute_75,code=sm_75 \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_86,code=sm_86 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90 \
	-o kernels.fatbin kernels.cu
# no PTX: sm_80 and the arch-specific sm_90a
$NVCC -fatbin --no-compress \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90a,code=sm_90a \
	-o kernels_noptx.fatbin kernels.cu
# every entry compressed (the default compresses only the PTX)
$NVCC -fatbin -Xfatbin -compress-all \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_80,code=compute_80 \
	-o kernels_compressed.fatbin kernels.cu
$NVCC -cubin -arch=sm_90 -o attrs_sm90.cubin attrs.cu
$PTXAS -arch=sm_80 -o reqntid_sm80.cubin reqntid.ptx
