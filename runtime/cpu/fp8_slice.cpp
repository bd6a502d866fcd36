// CPU casts of a weight's flat slice and the FP8 transpose (runtime/ops.h), the twins of
// runtime/cuda/fp8_slice.cu bit for bit. Each element of the slice finds its group as
// fp8_quantize's loops do, so the amax (bits of |x|, a NaN wins), the factor and the codes are theirs.
#include <bit>
#include <cmath>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cpu {

void fp8_slice_amax(Tensor& amax, const Tensor& x, int64_t begin, int64_t rows, int64_t cols, ops::Fp8Scaling scaling) {
  const Fp8CastShape s = fp8_slice_shape("fp8_slice_amax", amax, x, begin, rows, cols, scaling);
  const FloatReader in(x);
  int32_t* a = amax.data<int32_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t e = begin + i;
    int32_t& g = a[s.scale_index(e / cols, e % cols)];
    g = std::max(g, static_cast<int32_t>(fp8_abs_bits(in[i])));
  }
}

void fp8_slice_quantize(Tensor& q, Tensor& scale, const Tensor& x, const Tensor& amax, int64_t begin, int64_t rows,
                        int64_t cols, ops::Fp8Scaling scaling) {
  const Fp8CastShape s = fp8_slice_shape("fp8_slice_quantize", amax, x, begin, rows, cols, scaling, &q, &scale);
  const float largest = fp8_largest(s.format);
  const int32_t* a = amax.data<int32_t>();
  auto factor = [&](int64_t g) { return fp8_quant_factor(std::bit_cast<float>(a[g]), largest); };
  float* out_scale = scale.data<float>();
  for (int64_t g = 0; g < scale.numel(); ++g) out_scale[g] = s.is_padding(g) ? 0.0f : 1.0f / factor(g);
  const FloatReader in(x);
  uint8_t* out = static_cast<uint8_t*>(q.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t e = begin + i;
    out[i] = fp8_from_float(in[i] * factor(s.scale_index(e / cols, e % cols)), s.format);
  }
}

void fp8_transpose(Tensor& q_t, Tensor& scale_t, const Tensor& q, const Tensor& scale, ops::Fp8Scaling scaling) {
  const Fp8CastShape s = fp8_transpose_shape("fp8_transpose", q_t, scale_t, q, scale, scaling);
  const uint8_t* in = static_cast<const uint8_t*>(q.data_ptr());
  uint8_t* out = static_cast<uint8_t*>(q_t.data_ptr());
  for (int64_t m = 0; m < s.rows; ++m)
    for (int64_t k = 0; k < s.cols; ++k) out[k * s.rows + m] = in[m * s.cols + k];
  const float* sc = scale.data<float>();
  float* sc_t = scale_t.data<float>();
  if (scaling == ops::Fp8Scaling::Tensorwise) {
    sc_t[0] = sc[0];
    return;
  }
  // Blocks128: block (i, j) of q is block (j, i) of q_t; the padding of each scale row holds 0.
  const int64_t ld_t = scale_t.dim(1);
  for (int64_t j = 0; j < scale_t.dim(0); ++j)
    for (int64_t i = 0; i < ld_t; ++i) sc_t[j * ld_t + i] = i < s.scale_rows ? sc[i * s.scale_ld + j] : 0.0f;
}

}  // namespace tetra::cpu
