#include "runtime/rope.h"

#include <cmath>
#include <numbers>

#include "runtime/error.h"

namespace tetra {

namespace {

void check_scaling(const char* op, const RopeScaling& s) {
  using Type = RopeScaling::Type;
  if (s.type == Type::None) return;
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(s.factor)) TETRA_FAIL(Internal, op, ": rope scaling factor must be a finite number > 0, got ", s.factor);
  if (s.type != Type::Llama3) return;
  if (!positive(s.low_freq_factor) || !positive(s.high_freq_factor) || !(s.high_freq_factor > s.low_freq_factor))
    TETRA_FAIL(Internal, op, ": llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got ",
               s.low_freq_factor, " and ", s.high_freq_factor);
  if (!positive(s.original_max_position_embeddings))
    TETRA_FAIL(Internal, op, ": llama3 rope scaling needs original_max_position_embeddings > 0, got ",
               s.original_max_position_embeddings);
}

// _compute_llama3_parameters on fp32 tensors: every Python number rounded to fp32 where it meets the
// tensor, x / y as one fp32 division, 2π / x and L / x as fp32(1/x)·fp32(2π or L) (Tensor.__rtruediv__).
void llama3_scale(std::vector<float>& inv_freq, const RopeScaling& s) {
  const double L = s.original_max_position_embeddings;
  const float factor = static_cast<float>(s.factor), low = static_cast<float>(s.low_freq_factor);
  const float low_wavelen = static_cast<float>(L / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(L / s.high_freq_factor);
  const float span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi), context = static_cast<float>(L);
  for (float& x : inv_freq) {
    const float wavelen = (1.0f / x) * two_pi;
    const float scaled = wavelen > low_wavelen ? x / factor : x;
    const float smooth = ((1.0f / wavelen) * context - low) / span;
    const float blended = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    x = medium ? blended : scaled;
  }
}

}  // namespace

AttentionDims check_rope_args(const char* op, const char* what, const Tensor& qkv, int64_t n_heads,
                              int64_t n_kv_heads, const Rope& rope) {
  const float theta = rope.theta;
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
  check_scaling(op, rope.scaling);
  return {qkv.dim(0), qkv.dim(1), n_heads, n_kv_heads, D};
}

std::vector<float> rope_inv_freq(int64_t head_dim, const Rope& rope) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(rope.theta, exponent);
  }
  if (rope.scaling.type == RopeScaling::Type::Linear) {
    const float factor = static_cast<float>(rope.scaling.factor);
    for (float& x : f) x = x / factor;
  } else if (rope.scaling.type == RopeScaling::Type::Llama3) {
    llama3_scale(f, rope.scaling);
  }
  return f;
}

}  // namespace tetra
