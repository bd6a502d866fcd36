// The argument checks of causal self-attention with grouped-query heads (runtime/ops.h), the same for
// every backend: qkv [B, T, (H + 2·Hkv)·D] = q | k | v per token (H query heads, then Hkv key heads,
// then Hkv value heads, each D contiguous values; Hkv divides H, Hkv = H is plain multi-head);
// out, dout [B, T, H·D] and dqkv (qkv's shape) of qkv's dtype; lse [B, H, T] fp32; all on one device.
// Errors name the op and the tensor. Each backend checks first what it alone requires (the CPU:
// fp32; CUDA: a CUDA float tensor).
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace tetra {

struct AttentionDims {
  int64_t B, T, H, Hkv, D;
  int64_t group() const { return H / Hkv; }                 // query heads per key/value head
  int64_t qkv_stride() const { return (H + 2 * Hkv) * D; }  // elements between tokens in qkv
  int64_t out_stride() const { return H * D; }              // elements between tokens in out
  int64_t k_offset() const { return H * D; }                // elements from a token's q to its k
  int64_t v_offset() const { return (H + Hkv) * D; }        // elements from a token's q to its v
};

AttentionDims check_attention_forward_shapes(const char* op, const Tensor& out, const Tensor& lse,
                                             const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
// attention_decode: cache [B, T_max, (H + 2·Hkv)·D], out [B, Tq, H·D] of its dtype, Tq ≤ length ≤ T_max.
// T of the result is `length` (the keys attended).
AttentionDims check_attention_decode_shapes(const char* op, const Tensor& out, const Tensor& cache, int64_t length,
                                            int64_t n_heads, int64_t n_kv_heads);
AttentionDims check_attention_backward_shapes(const char* op, const Tensor& dqkv, const Tensor& dout,
                                              const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                              int64_t n_heads, int64_t n_kv_heads);

}  // namespace tetra
