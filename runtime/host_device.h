// TETRA_HOST_DEVICE marks a function that the CPU backend and CUDA kernels share, so both compute
// the same bits: __host__ __device__ under nvcc, nothing under the host compiler.
#pragma once

#if defined(__CUDACC__)
#define TETRA_HOST_DEVICE __host__ __device__
#else
#define TETRA_HOST_DEVICE
#endif
