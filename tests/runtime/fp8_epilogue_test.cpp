// fp8_gemm's epilogue (ops::Fp8Epilogue) on the CPU: bias, the residual read as C, GELU with its
// pre-activation, the GELU backward and the amax of y, each equal bit for bit to the unfused
// sequence of ops it stands for (the CPU's fused call runs those same ops in that order, so nothing
// but exact equality is right), and its contract: what it may combine, each tensor's shape and dtype.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::random_tensor;
using S = ops::Fp8Scaling;

// a [M, K] (E4M3, 1×128 tiles) and b [N, K] (E5M2, tensorwise): two scalings and formats, as an input
// gradient GEMM of the blockwise and tensorwise recipes reads them.
struct Operands {
  Tensor qa, sa, qb, sb;
  S a_scaling = S::Rows1x128, b_scaling = S::Tensorwise;
};

Operands operands(Rng& rng, int64_t M, int64_t N, int64_t K) {
  Operands o;
  Tensor a = random_tensor(rng, {M, K}), b = random_tensor(rng, {N, K}, 0.05);
  o.qa = Tensor::empty({M, K}, DType::F8E4M3);
  o.sa = Tensor::empty(fp8_scale_shape(o.a_scaling, M, K), DType::F32);
  o.qb = Tensor::empty({N, K}, DType::F8E5M2);
  o.sb = Tensor::empty(fp8_scale_shape(o.b_scaling, N, K), DType::F32);
  ops::fp8_quantize(o.qa, o.sa, a, o.a_scaling);
  ops::fp8_quantize(o.qb, o.sb, b, o.b_scaling);
  return o;
}

void gemm(Tensor& y, const Operands& o, bool accumulate = false, const ops::Fp8Epilogue& e = {}) {
  ops::fp8_gemm(y, o.qa, o.sa, o.a_scaling, o.qb, o.sb, o.b_scaling, accumulate, false, e);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

uint32_t bits(const Tensor& amax) { return *static_cast<const uint32_t*>(amax.data_ptr()); }

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  ops::copy(c, t);
  return c;
}

TEST(Fp8Epilogue, EachEpilogueIsItsUnfusedSequenceBitForBit) {
  const int64_t M = 48, N = 80, K = 272;  // partial 128-tiles along K
  Rng rng(11);
  const Operands o = operands(rng, M, N, K);
  Tensor bias = random_tensor(rng, {N}, 0.5), residual = random_tensor(rng, {M, N});
  Tensor pre = random_tensor(rng, {M, N}, 2.0);  // a GELU's pre-activation, for the backward
  Tensor product = Tensor::empty({M, N}, DType::F32);
  gemm(product, o);

  // Bias, and the residual read as C: y = P + residual + bias (the residual left as it was).
  Tensor want = copy_of(residual);
  gemm(want, o, /*accumulate=*/true);
  ops::add_bias(want, bias);
  Tensor y = random_tensor(rng, {M, N}), amax = Tensor::empty({1}, DType::U32), want_amax = Tensor::empty({1}, DType::U32);
  const Tensor residual_before = copy_of(residual);
  ops::Fp8Epilogue e;
  e.bias = &bias;
  e.residual = &residual;
  e.amax = &amax;
  gemm(y, o, false, e);
  EXPECT_TRUE(same_bits(y, want)) << "bias + residual";
  EXPECT_TRUE(same_bits(residual, residual_before)) << "the residual is only read";
  ops::fp8_amax(want_amax, want);
  EXPECT_EQ(bits(amax), bits(want_amax)) << "amax of y as stored";

  // The residual in place (y is the residual), without a bias.
  Tensor in_place = copy_of(residual);
  ops::Fp8Epilogue r;
  r.residual = &in_place;
  gemm(in_place, o, false, r);
  Tensor want_r = copy_of(residual);
  gemm(want_r, o, /*accumulate=*/true);
  EXPECT_TRUE(same_bits(in_place, want_r)) << "residual in place";

  // GELU forward, with and without the bias: pre = P (+ bias), y = gelu(pre).
  for (const bool with_bias : {true, false}) {
    Tensor want_pre = copy_of(product), want_y = Tensor::empty({M, N}, DType::F32);
    if (with_bias) ops::add_bias(want_pre, bias);
    ops::gelu_forward(want_y, want_pre);
    Tensor got_pre = Tensor::empty({M, N}, DType::F32), got_y = Tensor::empty({M, N}, DType::F32);
    ops::Fp8Epilogue g;
    g.bias = with_bias ? &bias : nullptr;
    g.gelu_pre = &got_pre;
    g.amax = &amax;
    gemm(got_y, o, false, g);
    const std::string what = with_bias ? "GELU with bias" : "GELU";
    EXPECT_TRUE(same_bits(got_pre, want_pre)) << what << ": the pre-activation";
    EXPECT_TRUE(same_bits(got_y, want_y)) << what;
    ops::fp8_amax(want_amax, want_y);
    EXPECT_EQ(bits(amax), bits(want_amax)) << what << ": amax";
  }

  // GELU backward: y = P ⊙ gelu'(pre).
  Tensor want_d = Tensor::empty({M, N}, DType::F32), got_d = Tensor::empty({M, N}, DType::F32);
  ops::gelu_backward(want_d, product, pre);
  ops::Fp8Epilogue d;
  d.dgelu_pre = &pre;
  d.amax = &amax;
  gemm(got_d, o, false, d);
  EXPECT_TRUE(same_bits(got_d, want_d)) << "GELU backward";
  ops::fp8_amax(want_amax, want_d);
  EXPECT_EQ(bits(amax), bits(want_amax)) << "GELU backward: amax";

  // An amax alone, also after accumulating.
  Tensor acc = copy_of(residual);
  ops::Fp8Epilogue a;
  a.amax = &amax;
  gemm(acc, o, /*accumulate=*/true, a);
  EXPECT_TRUE(same_bits(acc, want_r));
  ops::fp8_amax(want_amax, want_r);
  EXPECT_EQ(bits(amax), bits(want_amax)) << "amax after accumulating";
}

// The GELU ops' amax outputs: the largest |value| each wrote, as fp8_amax measures it.
TEST(Fp8Epilogue, GeluOpsMeasureTheirOutputsAmax) {
  Rng rng(12);
  Tensor x = random_tensor(rng, {40, 24}, 3.0), dy = random_tensor(rng, {40, 24});
  Tensor y = Tensor::empty({40, 24}, DType::F32), dx = Tensor::empty({40, 24}, DType::F32);
  Tensor amax = Tensor::empty({1}, DType::U32), want = Tensor::empty({1}, DType::U32);
  ops::gelu_forward(y, x, &amax);
  ops::fp8_amax(want, y);
  EXPECT_EQ(bits(amax), bits(want));
  ops::gelu_backward(dx, dy, x, &amax);
  ops::fp8_amax(want, dx);
  EXPECT_EQ(bits(amax), bits(want));
  Tensor wrong = Tensor::empty({2}, DType::U32);
  EXPECT_THROW(ops::gelu_forward(y, x, &wrong), Error);
}

// What an epilogue may not be asked: each an Internal error naming what is wrong, before any write.
TEST(Fp8Epilogue, ContractViolationsAreErrors) {
  const int64_t M = 16, N = 32, K = 128;
  Rng rng(13);
  const Operands o = operands(rng, M, N, K);
  Tensor y = Tensor::empty({M, N}, DType::F32), bias = random_tensor(rng, {N}), res = random_tensor(rng, {M, N});
  Tensor pre = random_tensor(rng, {M, N}), short_bias = random_tensor(rng, {N - 1});
  auto fails_with = [&](const ops::Fp8Epilogue& e, bool accumulate, const std::string& what) {
    try {
      gemm(y, o, accumulate, e);
      ADD_FAILURE() << "no error; expected one about " << what;
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::Internal);
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  ops::Fp8Epilogue e;
  e.bias = &bias;
  fails_with(e, /*accumulate=*/true, "accumulate must be false");
  e = {};
  e.residual = &res;
  e.gelu_pre = &pre;
  fails_with(e, false, "at most one of residual, gelu_pre and dgelu_pre");
  e = {};
  e.dgelu_pre = &pre;
  e.bias = &bias;
  fails_with(e, false, "adds no bias");
  e = {};
  e.bias = &short_bias;
  fails_with(e, false, "bias must be fp32 or bf16 [32]");
  e = {};
  e.gelu_pre = &y;
  fails_with(e, false, "gelu_pre");
  Tensor wide = random_tensor(rng, {M, N + 16});
  e = {};
  e.residual = &wide;
  fails_with(e, false, "residual must be");
}

}  // namespace
}  // namespace tetra
