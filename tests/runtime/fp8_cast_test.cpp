// FP8 formats and casts on the CPU (runtime/fp8_format.h, ops::fp8_quantize / fp8_dequantize).
// The conversion is checked against a brute-force reference written from the OCP FP8 definition
// (every code decoded, the nearest chosen, ties to the even code, saturation at the largest finite):
// on every bf16 bit pattern and a million random fp32 values, where one wrong rounding case shows.
// The casts: scale shapes, each group's amax landing on the format's largest value, dequantisation
// error within half an FP8 step of each element's group, q_t = q transposed, and a NaN kept as NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/fp8_format.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

// The OCP definition, independently of runtime/fp8_format.cpp's search: magnitude of a code from
// its fields, written out per format.
double reference_value(int code, Fp8Format f) {
  const int e_bits = f == Fp8Format::E4M3 ? 4 : 5, m_bits = 7 - e_bits, bias = f == Fp8Format::E4M3 ? 7 : 15;
  const int e = (code >> m_bits) & ((1 << e_bits) - 1), m = code & ((1 << m_bits) - 1);
  return e == 0 ? std::ldexp(m, 1 - bias - m_bits) : std::ldexp((1 << m_bits) + m, e - bias - m_bits);
}

uint8_t reference_encode(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7F;
  const int largest = f == Fp8Format::E4M3 ? 0x7E : 0x7B;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int c = 1; c <= largest; ++c) {
    const double d = std::fabs(reference_value(c, f) - a), db = std::fabs(reference_value(best, f) - a);
    if (d < db || (d == db && c % 2 == 0 && best % 2 == 1)) best = c;
  }
  if (a >= reference_value(largest, f)) best = largest;
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(Fp8Format, KnownValues) {
  EXPECT_EQ(fp8_to_float(0x7E, Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::E4M3), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_to_float(0x08, Fp8Format::E4M3), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7F, Fp8Format::E4M3)));
  EXPECT_EQ(fp8_to_float(0x7B, Fp8Format::E5M2), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::E5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_float(0x7C, Fp8Format::E5M2), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_from_float(1e9f, Fp8Format::E4M3), 0x7E);  // saturates
  EXPECT_EQ(fp8_from_float(-INFINITY, Fp8Format::E5M2), 0xFB);
  EXPECT_EQ(fp8_from_float(1.0625f, Fp8Format::E4M3), 0x38);  // halfway 1 | 1.125: the even code (1)
  EXPECT_EQ(fp8_from_float(1.1875f, Fp8Format::E4M3), 0x3A);  // halfway 1.125 | 1.25: the even code (1.25)
}

TEST(Fp8Format, EveryCodeRoundTrips) {
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_to_float(static_cast<uint8_t>(c), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      EXPECT_EQ(fp8_from_float(v, f), c) << fp8_format_name(f) << " code " << c;
    }
}

TEST(Fp8Format, MatchesTheDefinitionOnEveryBf16AndRandomFloats) {
  Rng rng(7);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    int64_t wrong = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = std::bit_cast<float>(b << 16);
      if (fp8_from_float(x, f) != reference_encode(x, f)) ++wrong;
    }
    for (int i = 0; i < 200000; ++i) {  // magnitudes around the format's range, both signs
      const float x = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(40)) - 20));
      if (fp8_from_float(x, f) != reference_encode(x, f)) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << fp8_format_name(f);
  }
}

Tensor random_tensor(Rng& rng, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)  // a few orders of magnitude, as activations have
    p[i] = static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(8))));
  return t;
}

struct CastCase {
  ops::Fp8Scaling scaling;
  Fp8Format format;
};

TEST(Fp8Cast, GroupsScalesAndError) {
  Rng rng(11);
  const int64_t M = 260, K = 300;  // partial groups at both edges
  for (CastCase c : {CastCase{ops::Fp8Scaling::Tensorwise, Fp8Format::E4M3},
                     CastCase{ops::Fp8Scaling::Rows1x128, Fp8Format::E4M3},
                     CastCase{ops::Fp8Scaling::Rows1x128, Fp8Format::E5M2},
                     CastCase{ops::Fp8Scaling::Blocks128, Fp8Format::E4M3}}) {
    Tensor x = random_tensor(rng, {M, K});
    const int64_t gr = c.scaling == ops::Fp8Scaling::Rows1x128 ? 1 : 128;
    // Blocks128's 3 column blocks padded to 4 (fp8_scale_shape); M = 260 is a multiple of 4.
    const Shape scale_shape = c.scaling == ops::Fp8Scaling::Tensorwise ? Shape{1}
                              : c.scaling == ops::Fp8Scaling::Rows1x128 ? Shape{3, M}
                                                                         : Shape{(M + 127) / 128, 4};
    Tensor q = Tensor::empty({M, K}, dtype_of(c.format)), scale = Tensor::empty(scale_shape, DType::F32);
    ops::fp8_quantize(q, scale, x, c.scaling);
    Tensor y = Tensor::empty({M, K}, DType::F32);
    ops::fp8_dequantize(y, q, scale, c.scaling);
    // Per group: the largest |x| becomes ±largest; every element is within half an FP8 step at its
    // magnitude (relative 2^-4 for E4M3, 2^-3 for E5M2, at most) or, below the normal range, within
    // half the smallest subnormal step, each times the group's scale.
    const double rel = c.format == Fp8Format::E4M3 ? 0.0625 : 0.125;
    const double sub = std::ldexp(1.0, c.format == Fp8Format::E4M3 ? -10 : -17);
    int64_t bad = 0, at_largest = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = c.scaling == ops::Fp8Scaling::Tensorwise ? 0
                          : c.scaling == ops::Fp8Scaling::Rows1x128 ? (k / 128) * M + m
                                                                     : (m / gr) * 4 + k / 128;
        const double s = scale.data<float>()[g], xv = x.data<float>()[m * K + k], yv = y.data<float>()[m * K + k];
        if (std::fabs(yv - xv) > std::max(rel * std::fabs(xv), sub * s) * 1.0000001) ++bad;
        const uint8_t code = static_cast<const uint8_t*>(q.data_ptr())[m * K + k] & 0x7F;
        at_largest += code == (c.format == Fp8Format::E4M3 ? 0x7E : 0x7B);
      }
    EXPECT_EQ(bad, 0) << fp8_format_name(c.format);
    const int64_t groups = c.scaling == ops::Fp8Scaling::Tensorwise ? 1
                           : c.scaling == ops::Fp8Scaling::Rows1x128 ? 3 * M
                                                                      : (M + 127) / 128 * 3;
    EXPECT_GE(at_largest, groups) << "each group's amax maps to the largest value";
  }
}

TEST(Fp8Cast, TransposedCopyAndNaN) {
  Rng rng(3);
  Tensor x = random_tensor(rng, {5, 7});
  x.data<float>()[9] = NAN;
  Tensor q = Tensor::empty({5, 7}, DType::F8E4M3), qt = Tensor::empty({7, 5}, DType::F8E4M3);
  Tensor scale = Tensor::empty({1}, DType::F32);
  ops::fp8_quantize(q, scale, x, ops::Fp8Scaling::Tensorwise, &qt);
  const auto* pq = static_cast<const uint8_t*>(q.data_ptr());
  const auto* pt = static_cast<const uint8_t*>(qt.data_ptr());
  for (int m = 0; m < 5; ++m)
    for (int k = 0; k < 7; ++k) EXPECT_EQ(pq[m * 7 + k], pt[k * 5 + m]);
  EXPECT_EQ(pq[9] & 0x7F, 0x7F) << "NaN stays NaN";
  EXPECT_TRUE(std::isfinite(scale.data<float>()[0]));
}

// The transposed copy of each scaling is the cast of xᵀ itself; for Blocks128 (a block is its own
// transpose) that is also q's codes transposed and the block scales transposed.
TEST(Fp8Cast, TransposedCopyOfBlockScalingsIsTheCastOfTheTranspose) {
  Rng rng(21);
  const int64_t M = 200, K = 300;  // partial groups at both edges of both copies
  Tensor x = random_tensor(rng, {M, K}), xt = Tensor::empty({K, M}, DType::F32);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xt.data<float>()[k * M + m] = x.data<float>()[m * K + k];
  for (ops::Fp8Scaling scaling : {ops::Fp8Scaling::Rows1x128, ops::Fp8Scaling::Blocks128}) {
    const bool rows = scaling == ops::Fp8Scaling::Rows1x128;
    // Inner dimensions padded to multiples of 4 (fp8_scale_shape): Blocks128's 3 and 2 blocks to 4.
    const Shape s_shape = rows ? Shape{3, M} : Shape{2, 4}, st_shape = rows ? Shape{2, K} : Shape{3, 4};
    Tensor q = Tensor::empty({M, K}, DType::F8E4M3), s = Tensor::empty(s_shape, DType::F32);
    Tensor qt = Tensor::empty({K, M}, DType::F8E4M3), st = Tensor::empty(st_shape, DType::F32);
    ops::fp8_quantize(q, s, x, scaling, &qt, &st);
    Tensor want_q = Tensor::empty({K, M}, DType::F8E4M3), want_s = Tensor::empty(st_shape, DType::F32);
    ops::fp8_quantize(want_q, want_s, xt, scaling);
    EXPECT_EQ(std::memcmp(qt.data_ptr(), want_q.data_ptr(), qt.nbytes()), 0);
    EXPECT_EQ(std::memcmp(st.data_ptr(), want_s.data_ptr(), st.nbytes()), 0);
    if (rows) continue;
    const auto* pq = static_cast<const uint8_t*>(q.data_ptr());
    const auto* pt = static_cast<const uint8_t*>(qt.data_ptr());
    int64_t differ = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) differ += pq[m * K + k] != pt[k * M + m];
    EXPECT_EQ(differ, 0);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(s.data<float>()[i * 4 + j], st.data<float>()[j * 4 + i]);
    EXPECT_EQ(s.data<float>()[3], 0.0f) << "padding holds 0";
    EXPECT_EQ(st.data<float>()[2], 0.0f) << "padding holds 0";
  }
}

// A tensor split into parts (tensor-parallel slices): each part's fp8_amax, maxed over the parts,
// is the whole's amax, and each part cast with it (fp8_quantize's amax) gives the whole cast's codes
// of its rows and the whole's scale, the transposed copy too. Without the given amax a part whose own
// amax is smaller than the whole's casts with another scale.
TEST(Fp8Cast, PartsCastWithTheWholesAmaxAreTheWholeCast) {
  Rng rng(17);
  const int64_t M = 96, K = 40, parts = 3, rows = M / parts;
  Tensor x = random_tensor(rng, {M, K});
  x.data<float>()[50 * K + 7] = -300.0f;  // the whole's amax, in part 1 only
  Tensor q = Tensor::empty({M, K}, DType::F8E5M2), scale = Tensor::empty({1}, DType::F32);
  ops::fp8_quantize(q, scale, x, ops::Fp8Scaling::Tensorwise);
  Tensor amax = Tensor::empty({1}, DType::U32), part_amax = Tensor::empty({1}, DType::U32);
  uint32_t reduced = 0;
  for (int64_t p = 0; p < parts; ++p) {
    ops::fp8_amax(part_amax, x.narrow(p * rows, rows));
    reduced = std::max(reduced, *static_cast<const uint32_t*>(part_amax.data_ptr()));
  }
  EXPECT_EQ(std::bit_cast<float>(reduced), 300.0f);
  *static_cast<uint32_t*>(amax.data_ptr()) = reduced;
  for (int64_t p = 0; p < parts; ++p) {
    Tensor part = x.narrow(p * rows, rows);
    Tensor qp = Tensor::empty({rows, K}, DType::F8E5M2), sp = Tensor::empty({1}, DType::F32);
    Tensor qpt = Tensor::empty({K, rows}, DType::F8E5M2), spt = Tensor::empty({1}, DType::F32);
    ops::fp8_quantize(qp, sp, part, ops::Fp8Scaling::Tensorwise, &qpt, &spt, &amax);
    EXPECT_EQ(std::memcmp(qp.data_ptr(), static_cast<const uint8_t*>(q.data_ptr()) + p * rows * K, qp.nbytes()), 0)
        << "part " << p;
    EXPECT_EQ(sp.data<float>()[0], scale.data<float>()[0]);
    EXPECT_EQ(spt.data<float>()[0], scale.data<float>()[0]);
    const auto* pq = static_cast<const uint8_t*>(qp.data_ptr());
    const auto* pt = static_cast<const uint8_t*>(qpt.data_ptr());
    int64_t differ = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t k = 0; k < K; ++k) differ += pq[m * K + k] != pt[k * rows + m];
    EXPECT_EQ(differ, 0) << "the transposed copy takes the given amax too";
    ops::fp8_quantize(qp, sp, part, ops::Fp8Scaling::Tensorwise);
    if (p != 1) {
      EXPECT_NE(sp.data<float>()[0], scale.data<float>()[0]) << "part " << p << "'s own amax is smaller";
    }
  }
  // An empty tensor's amax is 0; a given amax is Tensorwise only.
  ops::fp8_amax(part_amax, Tensor::empty({0, K}, DType::F32));
  EXPECT_EQ(*static_cast<const uint32_t*>(part_amax.data_ptr()), 0u);
  Tensor sr = Tensor::empty({1, 96}, DType::F32);
  EXPECT_THROW(ops::fp8_quantize(q, sr, x, ops::Fp8Scaling::Rows1x128, nullptr, nullptr, &amax), Error);
  Tensor wrong = Tensor::empty({1}, DType::F32);
  EXPECT_THROW(ops::fp8_quantize(q, scale, x, ops::Fp8Scaling::Tensorwise, nullptr, nullptr, &wrong), Error);
}

TEST(Fp8Cast, ShapeErrorsNameTheOperand) {
  Tensor x = Tensor::empty({4, 8}, DType::F32), q = Tensor::empty({4, 8}, DType::F8E4M3);
  Tensor bad_scale = Tensor::empty({4, 2}, DType::F32);
  try {
    ops::fp8_quantize(q, bad_scale, x, ops::Fp8Scaling::Rows1x128);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the scale of q must be fp32 [1, 4]"), std::string::npos) << e.what();
  }
  Tensor qt = Tensor::empty({8, 4}, DType::F8E4M3), scale = Tensor::empty({1, 4}, DType::F32);
  EXPECT_THROW(ops::fp8_quantize(q, scale, x, ops::Fp8Scaling::Rows1x128, &qt), Error);
}

// The CPU FP8 GEMM is the fp32 GEMM of the dequantised operands: against a double-precision sum
// (the floor is fp32 accumulation over K = 300: ≈ 1e-6 relative; a misplaced scale is off by ≥ 2×).
TEST(Fp8Gemm, IsTheGemmOfTheDequantisedOperands) {
  Rng rng(5);
  const int64_t M = 40, N = 24, K = 300;
  Tensor x = random_tensor(rng, {M, K}), w = random_tensor(rng, {N, K});
  Tensor qa = Tensor::empty({M, K}, DType::F8E4M3), sa = Tensor::empty({3, M}, DType::F32);
  Tensor qb = Tensor::empty({N, K}, DType::F8E4M3), sb = Tensor::empty({1, 4}, DType::F32);
  ops::fp8_quantize(qa, sa, x, ops::Fp8Scaling::Rows1x128);
  ops::fp8_quantize(qb, sb, w, ops::Fp8Scaling::Blocks128);
  Tensor da = Tensor::empty({M, K}, DType::F32), db = Tensor::empty({N, K}, DType::F32);
  ops::fp8_dequantize(da, qa, sa, ops::Fp8Scaling::Rows1x128);
  ops::fp8_dequantize(db, qb, sb, ops::Fp8Scaling::Blocks128);
  Tensor y = Tensor::empty({M, N}, DType::F32);
  ops::fp8_gemm(y, qa, sa, ops::Fp8Scaling::Rows1x128, qb, sb, ops::Fp8Scaling::Blocks128);
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(da.data<float>()[m * K + k]) * db.data<float>()[n * K + k];
        ref += t;
        mag += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(y.data<float>()[m * N + n] - ref) / mag);
    }
  EXPECT_LT(worst, 1e-5);
  // y[m, n] is near x[m]·w[n] (FP8 rounding: a few per cent).
  double err = 0, norm = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0;
      for (int64_t k = 0; k < K; ++k) exact += static_cast<double>(x.data<float>()[m * K + k]) * w.data<float>()[n * K + k];
      err += std::pow(y.data<float>()[m * N + n] - exact, 2);
      norm += exact * exact;
    }
  EXPECT_LT(std::sqrt(err / norm), 0.05);
}

// Fast accumulation is a tensorwise mode (block-scaled GEMMs promote every block: cuBLASLt would run
// them exact anyway, so asking for it is a caller's mistake); the CPU's fp32 GEMM ignores it.
TEST(Fp8Gemm, FastAccumulationIsTensorwiseOnly) {
  Rng rng(6);
  const int64_t M = 32, N = 16, K = 256;
  Tensor x = random_tensor(rng, {M, K}), w = random_tensor(rng, {N, K});
  Tensor qa = Tensor::empty({M, K}, DType::F8E4M3), sa = Tensor::empty({1}, DType::F32);
  Tensor qb = Tensor::empty({N, K}, DType::F8E4M3), sb = Tensor::empty({1}, DType::F32);
  ops::fp8_quantize(qa, sa, x, ops::Fp8Scaling::Tensorwise);
  ops::fp8_quantize(qb, sb, w, ops::Fp8Scaling::Tensorwise);
  Tensor exact = Tensor::empty({M, N}, DType::F32), fast = Tensor::empty({M, N}, DType::F32);
  ops::fp8_gemm(exact, qa, sa, ops::Fp8Scaling::Tensorwise, qb, sb, ops::Fp8Scaling::Tensorwise);
  ops::fp8_gemm(fast, qa, sa, ops::Fp8Scaling::Tensorwise, qb, sb, ops::Fp8Scaling::Tensorwise, false, true);
  for (int64_t i = 0; i < exact.numel(); ++i) ASSERT_EQ(exact.data<float>()[i], fast.data<float>()[i]);
  Tensor ra = Tensor::empty({M, K}, DType::F8E4M3), rsa = Tensor::empty(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, M, K), DType::F32);
  ops::fp8_quantize(ra, rsa, x, ops::Fp8Scaling::Rows1x128);
  EXPECT_THROW(ops::fp8_gemm(fast, ra, rsa, ops::Fp8Scaling::Rows1x128, qb, sb, ops::Fp8Scaling::Tensorwise, false, true),
               Error);
}

// A producer's amax output (ops.h: here SwiGLU's) is the largest |value| it wrote as fp32 bits, and
// a Tensorwise cast given it writes the same codes and scales as the cast that measures x itself.
TEST(Fp8Cast, ProducersAmaxIsWhatTheCastWouldMeasure) {
  Rng rng(8);
  const int64_t N = 48, F = 96;
  Tensor gu = random_tensor(rng, {N, 2 * F}), dh = random_tensor(rng, {N, F});
  Tensor h = Tensor::empty({N, F}, DType::F32), dgu = Tensor::empty({N, 2 * F}, DType::F32);
  Tensor h_amax = Tensor::empty({1}, DType::U32), dgu_amax = Tensor::empty({1}, DType::U32);
  ops::swiglu_forward(h, gu, &h_amax);
  ops::swiglu_backward(dgu, dh, gu, &dgu_amax);
  auto largest = [](const Tensor& t) {
    uint32_t m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::bit_cast<uint32_t>(std::fabs(t.data<float>()[i])));
    return m;
  };
  EXPECT_EQ(*static_cast<uint32_t*>(h_amax.data_ptr()), largest(h));
  EXPECT_EQ(*static_cast<uint32_t*>(dgu_amax.data_ptr()), largest(dgu));
  for (auto [x, amax] : {std::pair{&h, &h_amax}, std::pair{&dgu, &dgu_amax}}) {
    const int64_t R = x->dim(0), C = x->dim(1);
    Tensor q1 = Tensor::empty({R, C}, DType::F8E4M3), q2 = Tensor::empty({R, C}, DType::F8E4M3);
    Tensor t1 = Tensor::empty({C, R}, DType::F8E4M3), t2 = Tensor::empty({C, R}, DType::F8E4M3);
    Tensor s1 = Tensor::empty({1}, DType::F32), s2 = Tensor::empty({1}, DType::F32);
    ops::fp8_quantize(q1, s1, *x, ops::Fp8Scaling::Tensorwise, &t1);
    ops::fp8_quantize(q2, s2, *x, ops::Fp8Scaling::Tensorwise, &t2, nullptr, amax);
    EXPECT_EQ(std::memcmp(q1.data_ptr(), q2.data_ptr(), q1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(t1.data_ptr(), t2.data_ptr(), t1.nbytes()), 0);
    EXPECT_EQ(s1.data<float>()[0], s2.data<float>()[0]);
  }
  // The amax given is what the cast scales by: half of it saturates the largest values.
  *static_cast<uint32_t*>(h_amax.data_ptr()) = std::bit_cast<uint32_t>(std::bit_cast<float>(largest(h)) / 2);
  Tensor q = Tensor::empty({N, F}, DType::F8E4M3), sc = Tensor::empty({1}, DType::F32);
  ops::fp8_quantize(q, sc, h, ops::Fp8Scaling::Tensorwise, nullptr, nullptr, &h_amax);
  EXPECT_FLOAT_EQ(sc.data<float>()[0], std::bit_cast<float>(largest(h)) / 2 / fp8_largest(Fp8Format::E4M3));
  // Block scalings measure every group themselves.
  Tensor rs = Tensor::empty(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, N, F), DType::F32);
  EXPECT_THROW(ops::fp8_quantize(q, rs, h, ops::Fp8Scaling::Rows1x128, nullptr, nullptr, &h_amax), Error);
}

// The norms' amax outputs (ops.h) are the largest |y| as stored — fp32 y, and bf16 y from an fp32 x
// (rounded before measuring) — what fp8_amax measures over y, bit for bit; a NaN in x makes it NaN.
// RMSNorm's row_amax is each row's (only the NaN's row NaN), as the routed experts' cast measures them.
TEST(Fp8Cast, NormsAmaxIsWhatTheCastWouldMeasure) {
  Rng rng(9);
  const int64_t N = 24, C = 80;
  Tensor x = random_tensor(rng, {N, C}), w = random_tensor(rng, {C}), b = random_tensor(rng, {C});
  auto bits = [](const Tensor& amax) { return *static_cast<const uint32_t*>(amax.data_ptr()); };
  for (DType yd : {DType::F32, DType::BF16}) {
    for (bool nan : {false, true}) {
      if (nan) x.data<float>()[3 * C + 7] = std::numeric_limits<float>::quiet_NaN();
      const std::string what = std::string(dtype_name(yd)) + (nan ? " with a NaN" : "");
      Tensor y = Tensor::empty({N, C}, yd);
      Tensor mean = Tensor::empty({N}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
      Tensor amax = Tensor::empty({1}, DType::U32), want = Tensor::empty({1}, DType::U32);
      Tensor rows = Tensor::empty({N}, DType::U32);
      ops::rmsnorm_forward(y, rstd, x, w, 1e-5f, &amax, &rows);
      ops::fp8_amax(want, y);
      EXPECT_EQ(bits(amax), bits(want)) << "rmsnorm, " << what;
      EXPECT_EQ(bits(amax) > 0x7f800000u, nan) << "rmsnorm, " << what;
      const auto* r = static_cast<const uint32_t*>(rows.data_ptr());
      EXPECT_EQ(std::vector<uint32_t>(r, r + N), test::row_amax_of(y)) << "rmsnorm rows, " << what;
      for (int64_t n = 0; n < N; ++n) EXPECT_EQ(r[n] > 0x7f800000u, nan && n == 3) << "row " << n << ", " << what;
      ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f, &amax);
      ops::fp8_amax(want, y);
      EXPECT_EQ(bits(amax), bits(want)) << "layernorm, " << what;
      EXPECT_EQ(bits(amax) > 0x7f800000u, nan) << "layernorm, " << what;
    }
    x.data<float>()[3 * C + 7] = 0.5f;
  }
  // The output must be U32 [1].
  Tensor y = Tensor::empty({N, C}, DType::F32);
  Tensor mean = Tensor::empty({N}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  Tensor wrong = Tensor::empty({1}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_forward(y, rstd, x, w, 1e-5f, &wrong), Error);
  EXPECT_THROW(ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f, &wrong), Error);
  // ... and the rows' U32 [N].
  Tensor short_rows = Tensor::empty({N - 1}, DType::U32);
  EXPECT_THROW(ops::rmsnorm_forward(y, rstd, x, w, 1e-5f, nullptr, &short_rows), Error);
}

// The norms' backward dx_amax (ops.h) is the largest |value| of the copy the projections' GEMMs read
// as stored, after dresidual is added: dx itself, or dx_rounded (bf16) beside an fp32 dx — what
// fp8_amax measures over that tensor, bit for bit; a NaN or an infinity in dresidual reaches it.
// RMSNorm's dx_row_amax is each row's of the same tensor.
TEST(Fp8Cast, NormsBackwardAmaxIsWhatTheCastWouldMeasure) {
  Rng rng(10);
  const int64_t N = 24, C = 80;
  Tensor x = random_tensor(rng, {N, C}), w = random_tensor(rng, {C}), b = random_tensor(rng, {C});
  Tensor res = random_tensor(rng, {N, C});
  Tensor mean = Tensor::empty({N}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  Tensor y = Tensor::empty({N, C}, DType::F32);
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  auto bits = [](const Tensor& amax) { return *static_cast<const uint32_t*>(amax.data_ptr()); };
  const float specials[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  for (bool rounded : {false, true}) {
    for (float special : specials) {
      const bool plain = special == 0.0f;
      if (!plain) res.data<float>()[5 * C + 11] = -special;
      const std::string what = std::string(rounded ? "bf16 copy" : "fp32 dx") +
                               (plain ? "" : std::isnan(special) ? " with a NaN" : " with an infinity");
      Tensor dy = random_tensor(rng, {N, C});
      Tensor dyr = Tensor::empty({N, C}, rounded ? DType::BF16 : DType::F32);
      ops::copy(dyr, dy);
      Tensor dx = Tensor::empty({N, C}, DType::F32), copy = Tensor::empty({N, C}, DType::BF16);
      Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
      Tensor amax = Tensor::empty({1}, DType::U32), want = Tensor::empty({1}, DType::U32);
      Tensor* out_copy = rounded ? &copy : nullptr;
      Tensor rows = Tensor::empty({N}, DType::U32);
      ops::rmsnorm_backward(dx, dw, dyr, x, w, rstd, false, &res, out_copy, &amax, &rows);
      ops::fp8_amax(want, rounded ? copy : dx);
      EXPECT_EQ(bits(amax), bits(want)) << "rmsnorm, " << what;
      const auto* r = static_cast<const uint32_t*>(rows.data_ptr());
      EXPECT_EQ(std::vector<uint32_t>(r, r + N), test::row_amax_of(rounded ? copy : dx)) << "rmsnorm rows, " << what;
      EXPECT_EQ(bits(amax), plain ? bits(want) : std::bit_cast<uint32_t>(std::fabs(special))) << "rmsnorm, " << what;
      ops::layernorm_backward(dx, dw, db, dyr, x, w, mean, rstd, false, &res, nullptr, out_copy, &amax);
      ops::fp8_amax(want, rounded ? copy : dx);
      EXPECT_EQ(bits(amax), bits(want)) << "layernorm, " << what;
      EXPECT_EQ(bits(amax) > 0x7f800000u, std::isnan(special)) << "layernorm, " << what;
      // Without dresidual (the final norm before the output layer): dx alone.
      ops::layernorm_backward(dx, dw, db, dyr, x, w, mean, rstd, false, nullptr, nullptr, out_copy, &amax);
      ops::fp8_amax(want, rounded ? copy : dx);
      EXPECT_EQ(bits(amax), bits(want)) << "layernorm without dresidual, " << what;
      if (!plain) res.data<float>()[5 * C + 11] = 0.25f;
    }
  }
  // The output must be U32 [1].
  Tensor dx = Tensor::empty({N, C}, DType::F32), dy = random_tensor(rng, {N, C});
  Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  Tensor wrong = Tensor::empty({1}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, nullptr, nullptr, &wrong), Error);
  EXPECT_THROW(ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, nullptr, nullptr, nullptr, &wrong),
               Error);
}

}  // namespace
}  // namespace tetra
