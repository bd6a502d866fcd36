// The argument checks of causal self-attention (runtime/ops.h), the same for every backend:
// qkv [B, T, 3·H·D] = q | k | v, each [H, D] per token; out, dout [B, T, H·D] and dqkv [B, T, 3·H·D]
// of qkv's dtype; lse [B, H, T] fp32; all on one device. Errors name the op and the tensor. Each
// backend checks first what it alone requires (the CPU: fp32; CUDA: a CUDA float tensor).
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace tetra {

struct AttentionDims {
  int64_t B, T, H, D;
  int64_t qkv_stride() const { return 3 * H * D; }  // elements between tokens in qkv
  int64_t out_stride() const { return H * D; }      // elements between tokens in out
};

AttentionDims check_attention_forward_shapes(const char* op, const Tensor& out, const Tensor& lse,
                                             const Tensor& qkv, int64_t n_heads);
AttentionDims check_attention_backward_shapes(const char* op, const Tensor& dqkv, const Tensor& dout,
                                              const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                              int64_t n_heads);

}  // namespace tetra
