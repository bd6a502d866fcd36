// CPU FP8 casts (runtime/ops.h): the emulation that the FP8 recipes' CPU runs train with, and the
// twin of runtime/cuda/fp8_cast.cu, bit for bit. A group's amax is the largest |x| compared as bit
// patterns (as the CUDA kernels' atomicMax on unsigned bits: a NaN wins over every number, and
// fp8_quant_factor then treats it as 1e-12; the NaN itself stays NaN in q).
#include <bit>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cpu {

void fp8_amax(Tensor& amax, const Tensor& x) {
  fp8_check_amax_out("fp8_amax", amax);
  const FloatReader in(x);
  uint32_t a = 0;
  for (int64_t i = 0; i < x.numel(); ++i) a = std::max(a, fp8_abs_bits(in[i]));
  *static_cast<uint32_t*>(amax.data_ptr()) = a;
}

void fp8_row_amax(Tensor& row_amax, const Tensor& y, int64_t first, int64_t count) {
  const int64_t C = y.ndim() == 0 ? 1 : y.dim(-1), rows = C == 0 ? row_amax.numel() : y.numel() / C;
  const int64_t end = count < 0 ? rows : first + count;
  const FloatReader in(y);
  auto* out = static_cast<uint32_t*>(row_amax.data_ptr());
  for (int64_t r = first; r < end; ++r) {
    uint32_t a = 0;
    for (int64_t c = 0; c < C; ++c) a = std::max(a, fp8_abs_bits(in[r * C + c]));
    out[r] = a;
  }
}

void fp8_quantize(Tensor& q, Tensor& scale, const Tensor& x, ops::Fp8Scaling scaling, Tensor* q_t, Tensor* scale_t,
                  const Tensor* amax) {
  const Fp8CastShape s = fp8_cast_shape("fp8_quantize", q, scale, x, scaling, q_t, scale_t);
  const bool amax_given = fp8_check_amax("fp8_quantize", amax, scaling);
  const FloatReader in(x);
  std::vector<uint32_t> amax_bits(static_cast<size_t>(scale.numel()), 0);
  if (amax_given)
    amax_bits[0] = *static_cast<const uint32_t*>(amax->data_ptr());
  else
    for (int64_t m = 0; m < s.rows; ++m)
      for (int64_t k = 0; k < s.cols; ++k) {
        uint32_t& a = amax_bits[s.scale_index(m, k)];
        a = std::max(a, fp8_abs_bits(in[m * s.cols + k]));
      }
  const float largest = fp8_largest(s.format);
  std::vector<float> factor(amax_bits.size());
  float* out_scale = scale.data<float>();
  for (size_t g = 0; g < amax_bits.size(); ++g) {
    factor[g] = fp8_quant_factor(std::bit_cast<float>(amax_bits[g]), largest);
    out_scale[g] = s.is_padding(static_cast<int64_t>(g)) ? 0.0f : 1.0f / factor[g];
  }
  uint8_t* out = static_cast<uint8_t*>(q.data_ptr());
  for (int64_t m = 0; m < s.rows; ++m)
    for (int64_t k = 0; k < s.cols; ++k)
      out[m * s.cols + k] = fp8_from_float(in[m * s.cols + k] * factor[s.scale_index(m, k)], s.format);
  if (!given(q_t)) return;
  // The transposed copy is, by definition, the cast of xᵀ (exact in fp32) with its own groups.
  Tensor x_t = Tensor::empty({s.cols, s.rows}, DType::F32, Device::cpu());
  float* xt = x_t.data<float>();
  for (int64_t m = 0; m < s.rows; ++m)
    for (int64_t k = 0; k < s.cols; ++k) xt[k * s.rows + m] = in[m * s.cols + k];
  Tensor own_scale = given(scale_t) ? *scale_t : Tensor::empty(scale.shape(), DType::F32, Device::cpu());
  cpu::fp8_quantize(*q_t, own_scale, x_t, scaling, nullptr, nullptr, amax);
}

void fp8_dequantize(Tensor& y, const Tensor& q, const Tensor& scale, ops::Fp8Scaling scaling) {
  const Fp8CastShape s = fp8_cast_shape("fp8_dequantize", q, scale, y, scaling);
  const FloatWriter out(y);
  const uint8_t* in = static_cast<const uint8_t*>(q.data_ptr());
  const float* sc = scale.data<float>();
  for (int64_t m = 0; m < s.rows; ++m)
    for (int64_t k = 0; k < s.cols; ++k)
      out.set(m * s.cols + k, fp8_to_float(in[m * s.cols + k], s.format) * sc[s.scale_index(m, k)]);
}

}  // namespace tetra::cpu
