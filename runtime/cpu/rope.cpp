// CPU rotary position embedding, in place on the q and k heads of a fused qkv (runtime/ops.h):
//   qkv [B, T, (H + 2·Hkv)·D]; per token the H + Hkv heads of q and k are rotated, v is left alone.
//   forward   x'[i] = x[i]·cos a − x[i + D/2]·sin a,  x'[i + D/2] = x[i + D/2]·cos a + x[i]·sin a
//   backward  the transpose: dx[i] = dx'[i]·cos a + dx'[i + D/2]·sin a,
//                            dx[i + D/2] = dx'[i + D/2]·cos a − dx'[i]·sin a
// with a = fp32(t · inv_freq[i]) (inv_freq plain or scaled, runtime/rope.h) at position t = position + row of the sequence, sin and cos in fp32.
// fp32 tensors (the CPU computes in fp32).
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/rope.h"

namespace tetra::cpu {

namespace {

// sign = +1: the forward rotation; −1: its transpose (the rotation by −a).
void rotate(const char* op, const char* what, Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope,
            float sign, int64_t position) {
  const AttentionDims d = check_rope_args(op, what, qkv, n_heads, n_kv_heads, rope);
  check_dtype(op, what, qkv, DType::F32);
  const int64_t half = d.D / 2, rotated = d.H + d.Hkv;  // q heads, then k heads
  const std::vector<float> inv_freq = rope_inv_freq(d.D, rope);
  std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half));
  float* base = qkv.data<float>();
  for (int64_t t = 0; t < d.T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(position + t) * inv_freq[static_cast<size_t>(i)];
      cos_a[static_cast<size_t>(i)] = std::cos(a);
      sin_a[static_cast<size_t>(i)] = sign * std::sin(a);
    }
    for (int64_t b = 0; b < d.B; ++b) {
      float* token = base + (b * d.T + t) * d.qkv_stride();
      for (int64_t h = 0; h < rotated; ++h) {
        float* x = token + h * d.D;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cos_a[static_cast<size_t>(i)], s = sin_a[static_cast<size_t>(i)];
          const float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * s;
          x[i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}

}  // namespace

void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope, int64_t position) {
  rotate("rope_forward", "qkv", qkv, n_heads, n_kv_heads, rope, 1.0f, position);
}

void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope) {
  rotate("rope_backward", "dqkv", dqkv, n_heads, n_kv_heads, rope, -1.0f, 0);
}

}  // namespace tetra::cpu
