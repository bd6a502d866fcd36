// Host side of kernels that take large dynamic shared memory: opting a kernel in to more than
// 48 KB, and asking how many of its blocks fit on one SM. Shared by the norms' row kernels
// (norm.cu) and the staged cross-entropy (cross_entropy.cu).
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "runtime/cuda/cuda_check.h"
#include "runtime/device.h"

namespace tetra::cuda {

// Prepares `kernel` for launches of `threads` threads with `smem` bytes of dynamic shared memory
// (≤ the device's opt-in limit, max_shared_optin) on the current device, `dev`, and returns how
// many such blocks fit on one SM at once (0: none). Raises the kernel's dynamic shared memory limit
// when needed, and never lowers it (another shape may need more from the same instantiation).
// Cached; thread-safe.
template <class K>
int prepare_launch(K kernel, int threads, size_t smem, Device dev) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int>, int> blocks_cache;
  static std::map<std::pair<const void*, int>, size_t> smem_limit;
  const void* fn = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  size_t& limit = smem_limit[{fn, dev.index}];
  if (smem > 48 * 1024 && smem > limit) {
    TETRA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    limit = smem;
  }
  const auto key = std::make_tuple(fn, threads, smem, dev.index);
  auto it = blocks_cache.find(key);
  if (it != blocks_cache.end()) return it->second;
  int blocks = 0;
  TETRA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  blocks_cache.emplace(key, blocks);
  return blocks;
}

}  // namespace tetra::cuda
