// What every backend of the rotary position embedding (runtime/ops.h rope_forward/backward) shares:
// the argument checks and the fp32 inverse frequencies, computed once on the host so that the CPU and
// CUDA kernels rotate by bit-identical fp32 angles a = fp32(t · inv_freq[i]).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/attention_shape.h"
#include "runtime/tensor.h"

namespace tetra {

// The largest head dim RoPE takes (the inverse frequencies travel as a kernel argument on CUDA).
constexpr int64_t kRopeMaxHeadDim = 256;

// Checks qkv [B, T, (H + 2·Hkv)·D] (fp32 or bf16, Hkv dividing H), D even and ≤ kRopeMaxHeadDim, theta
// finite and > 1; returns the dimensions. `what` names the tensor in errors ("qkv" or "dqkv").
AttentionDims check_rope_args(const char* op, const char* what, const Tensor& qkv, int64_t n_heads,
                              int64_t n_kv_heads, float theta);

// inv_freq[i] = 1 / theta^(2i/D) for i < D/2, in fp32 as transformers' LlamaRotaryEmbedding computes it
// (exponent (2i)/D rounded to fp32, fp32 pow, fp32 reciprocal).
std::vector<float> rope_inv_freq(int64_t head_dim, float theta);

}  // namespace tetra
