// What every backend of the rotary position embedding (runtime/ops.h rope_forward/backward) shares:
// the argument checks and the fp32 inverse frequencies (plain, or rescaled for a longer context as
// Llama 3.1's `rope_scaling` says), computed once on the host so that the CPU and CUDA kernels rotate
// by bit-identical fp32 angles a = fp32(t · inv_freq[i]).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/attention_shape.h"
#include "runtime/tensor.h"

namespace tetra {

// Hugging Face's rope_scaling (transformers 5: rope_parameters) for the types tetra applies; every
// type rescales the inverse frequencies only (attention_factor 1):
//   linear  inv_freq[i] / factor
//   llama3  wavelength w = 2π / inv_freq[i] against the original context L = original_max_position_embeddings:
//           w < L / high_freq_factor: unchanged; w > L / low_freq_factor: / factor; between, the blend
//           (1 − s)·inv/factor + s·inv with s = (L / w − low_freq_factor) / (high_freq_factor − low_freq_factor).
struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1;                          // linear, llama3
  double low_freq_factor = 1;                 // llama3
  double high_freq_factor = 4;                // llama3, > low_freq_factor
  double original_max_position_embeddings = 8192;  // llama3: the context the model was pretrained at
  bool operator==(const RopeScaling&) const = default;
};

// The rotary embedding's parameters: base theta and the scaling. Built from a theta alone it is plain
// RoPE.
struct Rope {
  float theta = 10000.0f;
  RopeScaling scaling{};
  Rope(float theta_ = 10000.0f, RopeScaling scaling_ = {}) : theta(theta_), scaling(scaling_) {}  // NOLINT: implicit
};

// The largest head dim RoPE takes (the inverse frequencies travel as a kernel argument on CUDA).
constexpr int64_t kRopeMaxHeadDim = 256;

// Checks qkv [B, T, (H + 2·Hkv)·D] (fp32 or bf16, Hkv dividing H), D even and ≤ kRopeMaxHeadDim, theta
// finite and > 1, the scaling's factors finite and positive (llama3: high_freq_factor > low_freq_factor);
// returns the dimensions. `what` names the tensor in errors ("qkv" or "dqkv").
AttentionDims check_rope_args(const char* op, const char* what, const Tensor& qkv, int64_t n_heads,
                              int64_t n_kv_heads, const Rope& rope);

// inv_freq[i] = 1 / theta^(2i/D) for i < D/2, in fp32 as transformers' LlamaRotaryEmbedding computes it
// (exponent (2i)/D rounded to fp32, fp32 pow, fp32 reciprocal), then scaled as rope.scaling says, each
// step one fp32 operation in transformers' order (_compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters on the CPU: 2π / x as fp32(1/x)·fp32(2π), Python numbers rounded to fp32).
std::vector<float> rope_inv_freq(int64_t head_dim, const Rope& rope);

}  // namespace tetra
