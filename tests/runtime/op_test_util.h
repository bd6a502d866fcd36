// Shared helpers of the op tests: random host tensors (never zeros), NaN poisoning of outputs so an
// unwritten element fails the comparison, and norm-relative errors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/fp8_format.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

namespace tetra::test {

// fp32 tensor of N(offset, scale²) values; exact zeros are nudged away so no input is ever 0.
inline Tensor random_tensor(Rng& rng, const Shape& shape, double scale = 1.0, double offset = 0.0) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = static_cast<float>(offset + scale * rng.normal());
    if (v == 0.0f) v = static_cast<float>(scale * 1e-3);
    p[i] = v;
  }
  return t;
}

// int32 tensor of values uniform in [lo, hi).
inline Tensor random_ids(Rng& rng, const Shape& shape, int32_t lo, int32_t hi) {
  Tensor t = Tensor::empty(shape, DType::I32);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + static_cast<int32_t>(rng.below(static_cast<uint64_t>(hi - lo)));
  return t;
}

// Fills an fp32 or bf16 tensor with NaN: whatever the op does not write stays NaN.
inline void poison(Tensor& t) {
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  } else if (t.dtype() == DType::BF16) {
    uint16_t* p = t.bf16_bits();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0x7fc0;
  } else {
    ADD_FAILURE() << "poison: unsupported " << t.describe();
  }
}

inline Tensor poisoned(const Shape& shape, DType dtype = DType::F32) {
  Tensor t = Tensor::empty(shape, dtype);
  poison(t);
  return t;
}

inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  ops::copy(c, t);
  return c;
}

inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32) {
    const float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else if (t.dtype() == DType::BF16) {
    const uint16_t* p = t.bf16_bits();
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(p[i]);
  } else {
    ADD_FAILURE() << "to_doubles: unsupported " << t.describe();
  }
  return v;
}

// Each row's largest |value| of a host fp32 or bf16 tensor [..., C], as fp32 bits: ops.h's row_amax
// (of a [1, n] view: the tensor's amax, as fp8_quantize measures it).
inline std::vector<uint32_t> row_amax_of(const Tensor& t) {
  const std::vector<double> v = to_doubles(t);
  const int64_t C = std::max<int64_t>(t.dim(-1), 1), rows = t.numel() / C;
  std::vector<uint32_t> out(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c)
      out[static_cast<size_t>(r)] = std::max(out[static_cast<size_t>(r)], fp8_abs_bits(static_cast<float>(v[r * C + c])));
  return out;
}

// A host U32 [n] tensor of the words v: amaxes as ops.h takes them (fp32 bits), e.g. row_amax_of's.
inline Tensor amax_words(const std::vector<uint32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::U32);
  std::copy(v.begin(), v.end(), static_cast<uint32_t*>(t.data_ptr()));
  return t;
}

// Each amax of v (fp32 bits) times two: amaxes that give twice the scales.
inline std::vector<uint32_t> doubled_amaxes(std::vector<uint32_t> v) {
  for (uint32_t& b : v) b = std::bit_cast<uint32_t>(2.0f * std::bit_cast<float>(b));
  return v;
}

// ‖out − ref‖ / ‖ref‖ (plain ‖out − ref‖ when ref is 0); +inf if any element of out is not finite
// or the sizes differ.
inline double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double rel_error(const Tensor& out, const std::vector<double>& ref) { return rel_error(to_doubles(out), ref); }
inline double rel_error(const Tensor& out, const Tensor& ref) { return rel_error(to_doubles(out), to_doubles(ref)); }

// ref + add, elementwise (expected values of an accumulating op over a pre-filled output).
inline std::vector<double> plus(std::vector<double> ref, const std::vector<double>& add) {
  EXPECT_EQ(ref.size(), add.size());
  for (size_t i = 0; i < ref.size() && i < add.size(); ++i) ref[i] += add[i];
  return ref;
}

}  // namespace tetra::test
