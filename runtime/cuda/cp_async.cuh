// cp.async and shared-memory addressing in PTX (sm_80 and later), for kernels that stage operands
// through shared memory: 16-byte global → shared copies (zero-filling when out of range), their
// commit and wait groups. Used by the grouped GEMM kernels (moe_grouped_gemm_mma.cu,
// moe_grouped_wgmma.cuh; docs/kernels.md "Mixture of experts").
#pragma once
#include <cstdint>

namespace tetra::cuda {

// The 32-bit shared-window address of a generic pointer into this block's shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, or 16 zero bytes when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(size));
}

// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Blocks until at most N of this thread's committed groups are in flight; a compiler memory barrier
// too, so that no shared-memory read moves above it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace tetra::cuda
