// The FP8 projections (models/fp8_linear.h) on the CPU, the recipes' emulation: each GEMM reads the
// cast its recipe gives each operand (the transposed copies included), and a Linear under FP8 adds
// its bias, GELU and residual in the GEMM's epilogue as the working-dtype layer does.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/fp8_linear.h"
#include "models/modules.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::random_tensor;
using Matrix = std::vector<double>;  // row-major

Matrix values(const Tensor& t) {
  Matrix out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.data<float>()[i];
  return out;
}

Tensor transpose(const Tensor& x) {
  const int64_t R = x.dim(0), C = x.dim(1);
  Tensor t = Tensor::empty({C, R}, DType::F32);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t.data<float>()[c * R + r] = x.data<float>()[r * C + c];
  return t;
}

// x [R, C] as the recipe's cast sees it: quantised and dequantised, computed here from x itself.
Matrix cast_values(const Tensor& x, const Fp8Cast& cast) {
  const int64_t R = x.dim(0), C = x.dim(1);
  Tensor q = Tensor::empty({R, C}, cast.format), s = Tensor::empty(fp8_scale_shape(cast.scaling, R, C), DType::F32);
  ops::fp8_quantize(q, s, x, cast.scaling);
  Tensor y = Tensor::empty({R, C}, DType::F32);
  ops::fp8_dequantize(y, q, s, cast.scaling);
  return values(y);
}

// out[M, N] = a[M, K] · b[N, K]ᵀ in double.
Matrix matmul_nt(const Matrix& a, const Matrix& b, int64_t M, int64_t N, int64_t K) {
  Matrix out(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[m * K + k] * b[n * K + k];
      out[m * N + n] = s;
    }
  return out;
}

double rel(const Matrix& got, const Matrix& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Gemms {
  Matrix y, dx, dw;
};

// The three products of one recipe's operand casts: fp8_linear's own results, and what they must be.
TEST(Fp8Linear, EachGemmReadsItsRecipesCasts) {
  const int64_t N = 144, I = 160, O = 48;  // partial 128-groups along every dimension the casts tile
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
    Rng rng(31);
    // Rows and columns of different magnitudes, so that every group's scale differs.
    Tensor x = random_tensor(rng, {N, I}), w = random_tensor(rng, {O, I}, 0.05), dy = random_tensor(rng, {N, O}, 1e-3);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= std::ldexp(1.0f, static_cast<int>(i % 7) - 3);
    for (int64_t i = 0; i < dy.numel(); ++i) dy.data<float>()[i] *= std::ldexp(1.0f, static_cast<int>((i / 50) % 5));
    const Fp8RecipeCasts c = fp8_recipe_casts(recipe);
    Gemms want;
    want.y = matmul_nt(cast_values(x, c.activation), cast_values(w, c.weight), N, O, I);
    want.dx = matmul_nt(cast_values(dy, c.gradient), cast_values(transpose(w), c.weight), N, I, O);
    want.dw = matmul_nt(cast_values(transpose(dy), c.gradient), cast_values(transpose(x), c.activation), O, I, N);
    Tensor y = Tensor::empty({N, O}, DType::F32), dx = Tensor::empty({N, I}, DType::F32);
    Tensor dw = Tensor::zeros({O, I}, DType::F32);
    fp8_linear::forward(recipe, y, x, w, false);
    fp8_linear::backward_input(recipe, dx, dy, w, false);
    fp8_linear::backward_weight(recipe, dw, dy, x);
    // The same products in fp32 over K ≤ 160: a relative floor near 1e-7; reading another cast of an
    // operand (the untransposed one's tiles, another format) moves them by ≥ 1e-3.
    const char* name = fp8_recipe_name(recipe);
    EXPECT_LE(rel(values(y), want.y), 1e-5) << name << " forward";
    EXPECT_LE(rel(values(dx), want.dx), 1e-5) << name << " input gradient";
    EXPECT_LE(rel(values(dw), want.dw), 1e-5) << name << " weight gradient";
    // Against the exact products the casts' rounding shows: E4M3 keeps 3 mantissa bits (a relative
    // step of 2^-3, so ≈ 2^-4/√3 RMS per operand), E5M2 2 bits; measured 3.3–6.0 % here. A GEMM that
    // skipped the cast would be at the fp32 floor.
    const Matrix exact_y = matmul_nt(values(x), values(w), N, O, I);
    const Matrix exact_dw = matmul_nt(values(transpose(dy)), values(transpose(x)), O, I, N);
    EXPECT_GT(rel(values(y), exact_y), 1e-3) << name;
    EXPECT_LT(rel(values(y), exact_y), 0.1) << name;
    EXPECT_GT(rel(values(dw), exact_dw), 1e-3) << name;
    EXPECT_LT(rel(values(dw), exact_dw), 0.2) << name;
  }
}

// xᵀ kept by the forward and dyᵀ kept by the input gradient (Fp8Saved) are what the weight gradient
// would cast from x and dy itself: the same codes, so the same dw bit for bit; W releases them.
TEST(Fp8Linear, KeptTransposesGiveTheWeightGradientOfFreshCasts) {
  const int64_t N = 144, I = 160, O = 48;
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
    Rng rng(7);
    Tensor x = random_tensor(rng, {N, I}), w = random_tensor(rng, {O, I}, 0.05), dy = random_tensor(rng, {N, O}, 1e-3);
    Tensor y = Tensor::empty({N, O}, DType::F32), dx = Tensor::empty({N, I}, DType::F32);
    Fp8Saved kept;
    fp8_linear::forward(recipe, y, x, w, false, &kept);
    fp8_linear::backward_input(recipe, dx, dy, w, false, &kept);
    ASSERT_TRUE(kept.x_t.defined() && kept.dy_t.defined()) << fp8_recipe_name(recipe);
    EXPECT_EQ(kept.x_t.q.shape(), (Shape{I, N}));
    EXPECT_EQ(kept.dy_t.q.shape(), (Shape{O, N}));
    Tensor dw_kept = Tensor::zeros({O, I}, DType::F32), dw_fresh = Tensor::zeros({O, I}, DType::F32);
    fp8_linear::backward_weight(recipe, dw_kept, dy, x, &kept);
    EXPECT_FALSE(kept.x_t.defined() || kept.dy_t.defined()) << "W releases what it read";
    fp8_linear::backward_weight(recipe, dw_fresh, dy, x);
    EXPECT_EQ(values(dw_kept), values(dw_fresh)) << fp8_recipe_name(recipe);
    // A kept operand of another tensor's shape is a bug in the caller, not silently read.
    fp8_linear::forward(recipe, y, x, w, false, &kept);
    Tensor x_short = random_tensor(rng, {N - 16, I}), dy_short = random_tensor(rng, {N - 16, O});
    EXPECT_THROW(fp8_linear::backward_weight(recipe, dw_fresh, dy_short, x_short, &kept), Error);
  }
}

Param param(const Shape& shape, Rng& rng, double scale) {
  Param p;
  p.name = "p";
  p.full_shape = p.local_shape = shape;
  p.value = random_tensor(rng, shape, scale);
  p.grad = Tensor::zeros(shape, DType::F32);
  return p;
}

// A Linear under FP8: its bias, GELU and residual around fp8_linear's GEMMs, as linear_forward
// fuses them for the working dtype; its bias gradient the column sums of dy.
TEST(Fp8Linear, LinearAddsBiasGeluAndResidualAroundTheGemm) {
  const int64_t N = 32, I = 48, O = 64;
  Rng rng(5);
  Linear lin;
  lin.init("l", O, I, true, 0.02f, false, 1);
  lin.weight = param({O, I}, rng, 0.1);
  lin.bias = param({O}, rng, 0.5);
  lin.set_fp8(Fp8Recipe::Tensorwise);
  Tensor x = random_tensor(rng, {N, I}), residual = random_tensor(rng, {N, O});
  Tensor gemm = Tensor::empty({N, O}, DType::F32);
  fp8_linear::forward(Fp8Recipe::Tensorwise, gemm, x, lin.weight.value, false);
  const Matrix g = values(gemm), b = values(lin.bias.value), r = values(residual);

  Tensor y = Tensor::empty({N, O}, DType::F32), pre = Tensor::empty({N, O}, DType::F32);
  lin.forward(y, x, nullptr, ops::Activation::Gelu, &pre);
  Tensor want_pre = Tensor::empty({N, O}, DType::F32), want_y = Tensor::empty({N, O}, DType::F32);
  for (int64_t i = 0; i < N * O; ++i) want_pre.data<float>()[i] = static_cast<float>(g[i] + b[i % O]);
  ops::gelu_forward(want_y, want_pre);
  EXPECT_LE(rel(values(pre), values(want_pre)), 1e-7);
  EXPECT_LE(rel(values(y), values(want_y)), 1e-7);

  lin.forward_residual(residual, x, residual);  // in place, as the blocks call it
  Matrix want_res(static_cast<size_t>(N * O));
  for (int64_t i = 0; i < N * O; ++i) want_res[i] = r[i] + g[i] + b[i % O];
  EXPECT_LE(rel(values(residual), want_res), 1e-6);

  Tensor dy = random_tensor(rng, {N, O});
  lin.backward_weight(dy, x);
  const Matrix d = values(dy);
  Matrix col_sums(static_cast<size_t>(O), 0.0);
  for (int64_t i = 0; i < N * O; ++i) col_sums[i % O] += d[i];
  EXPECT_LE(rel(values(lin.bias.grad), col_sums), 1e-6);
  Tensor dw = Tensor::zeros({O, I}, DType::F32);
  fp8_linear::backward_weight(Fp8Recipe::Tensorwise, dw, dy, x);
  EXPECT_LE(rel(values(lin.weight.grad), values(dw)), 1e-7);
}

// The amax a plain FP8 Linear hands the next cast (Linear::forward's y_amax, backward_input_residual's
// dx_amax: what GPT-2's c_fc and mlp.c_proj give each other's casts) is fp8_amax of what it wrote,
// and the GELU backward in mlp.c_proj's input-gradient epilogue is the GEMM then gelu_backward, bit
// for bit (the CPU runs that sequence); a tensorwise cast given the amax writes the codes of one that
// measures its input itself.
TEST(Fp8Linear, LinearHandsTheNextCastItsOutputsAmax) {
  const int64_t N = 32, I = 48, O = 64;
  Rng rng(9);
  Linear lin;
  lin.init("l", O, I, true, 0.02f, false, 1);
  lin.weight = param({O, I}, rng, 0.1);
  lin.bias = param({O}, rng, 0.5);
  lin.set_fp8(Fp8Recipe::Tensorwise);
  Tensor x = random_tensor(rng, {N, I}), y = Tensor::empty({N, O}, DType::F32), pre = Tensor::empty({N, O}, DType::F32);
  Tensor amax = Tensor::empty({1}, DType::U32), want = Tensor::empty({1}, DType::U32);
  lin.forward(y, x, nullptr, ops::Activation::Gelu, &pre, nullptr, &amax);
  ops::fp8_amax(want, y);
  EXPECT_EQ(*static_cast<uint32_t*>(amax.data_ptr()), *static_cast<uint32_t*>(want.data_ptr())) << "forward";

  Tensor dy = random_tensor(rng, {N, I}), dx = Tensor::empty({N, O}, DType::F32);
  Linear down;  // the next projection: [I, O], reading gelu(pre)
  down.init("d", I, O, true, 0.02f, false, 1);
  down.weight = param({I, O}, rng, 0.1);
  down.bias = param({I}, rng, 0.5);
  down.set_fp8(Fp8Recipe::Tensorwise);
  down.backward_input_residual(dx, dy, nullptr, &pre, nullptr, &amax);
  Tensor want_dx = Tensor::empty({N, O}, DType::F32);
  fp8_linear::backward_input(Fp8Recipe::Tensorwise, want_dx, dy, down.weight.value, false);
  ops::gelu_backward(want_dx, want_dx, pre);
  EXPECT_EQ(values(dx), values(want_dx)) << "the GELU backward in the epilogue";
  ops::fp8_amax(want, dx);
  EXPECT_EQ(*static_cast<uint32_t*>(amax.data_ptr()), *static_cast<uint32_t*>(want.data_ptr())) << "input gradient";
  const Fp8Cast g = fp8_recipe_casts(Fp8Recipe::Tensorwise).gradient;
  EXPECT_EQ(cast_values(dx, g), values([&] {
              const Fp8Operand q = fp8_linear::cast(dx, g, nullptr, &amax);
              Tensor v = Tensor::empty({N, O}, DType::F32);
              ops::fp8_dequantize(v, q.q, q.scale, q.scaling);
              return v;
            }()));
}

TEST(Fp8Linear, WidthsNotMultiplesOf16AreAConfigError) {
  Linear lin;
  lin.init("model.layers.0.mlp.down_proj", 40, 64, false, 0.02f, false, 1);
  try {
    lin.set_fp8(Fp8Recipe::Blockwise);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.down_proj.weight is [40, 64]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tetra
