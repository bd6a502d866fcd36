// Opting a kernel into more dynamic shared memory than the default 48 KB (less its static shared
// memory): cudaFuncSetAttribute once per kernel and device, before its first launch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <set>
#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace tetra::cuda {

// Raises a kernel's dynamic shared-memory limit to `bytes`, once per (kernel, device).
template <class Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  static std::mutex mu;  // one set for every kernel of one signature: keyed by the kernel too
  static std::set<std::pair<const void*, int>> done;
  int dev = 0;
  TETRA_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (done.insert({reinterpret_cast<const void*>(kernel), dev}).second)
    TETRA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace tetra::cuda
