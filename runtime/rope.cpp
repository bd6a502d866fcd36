#include "runtime/rope.h"

#include <cmath>

#include "runtime/error.h"

namespace tetra {

AttentionDims check_rope_args(const char* op, const char* what, const Tensor& qkv, int64_t n_heads,
                              int64_t n_kv_heads, float theta) {
  if (!qkv.defined() || (qkv.dtype() != DType::F32 && qkv.dtype() != DType::BF16))
    TETRA_FAIL(Internal, op, ": ", what, " must be fp32 or bf16, got ", qkv.describe());
  if (qkv.ndim() != 3)
    TETRA_FAIL(Internal, op, ": ", what, " must be [B, T, (H + 2·Hkv)·D], got ", qkv.describe());
  if (n_heads <= 0) TETRA_FAIL(Internal, op, ": n_heads must be > 0, got ", n_heads);
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    TETRA_FAIL(Internal, op, ": n_kv_heads = ", n_kv_heads, " must divide n_heads = ", n_heads);
  const int64_t heads = n_heads + 2 * n_kv_heads, width = qkv.dim(2);
  if (width == 0 || width % heads != 0)
    TETRA_FAIL(Internal, op, ": ", what, " ", qkv.describe(), " has a last dimension of ", width,
               ", which is not (H + 2·Hkv)·D for H = ", n_heads, " query heads and Hkv = ", n_kv_heads,
               " key/value heads");
  const int64_t D = width / heads;
  if (D % 2 != 0 || D > kRopeMaxHeadDim)
    TETRA_FAIL(Internal, op, ": head dim D = ", D, " must be even and at most ", kRopeMaxHeadDim,
               " (rotate-half pairs element i with i + D/2)");
  if (!std::isfinite(theta) || !(theta > 1.0f))
    TETRA_FAIL(Internal, op, ": rope theta must be a finite number > 1, got ", theta);
  return {qkv.dim(0), qkv.dim(1), n_heads, n_kv_heads, D};
}

std::vector<float> rope_inv_freq(int64_t head_dim, float theta) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(theta, exponent);
  }
  return f;
}

}  // namespace tetra
