// Return-code checks for the CUDA runtime, cuBLAS(Lt), cuDNN and NCCL: each failure names the
// call, the library's own error string, and the source line.
#pragma once
#include <cuda_runtime.h>

#include "runtime/error.h"

#define TETRA_CUDA_CHECK(call)                                                                   \
  do {                                                                                           \
    cudaError_t tetra_e_ = (call);                                                               \
    if (tetra_e_ != cudaSuccess)                                                                 \
      ::tetra::detail::throw_error(::tetra::ErrorKind::Device, __FILE__, __LINE__,               \
                                   ::tetra::detail::concat(#call, " failed: ", cudaGetErrorName(tetra_e_), \
                                                           " (", cudaGetErrorString(tetra_e_), ")"));       \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately.
#define TETRA_CUDA_CHECK_LAUNCH() TETRA_CUDA_CHECK(cudaGetLastError())
