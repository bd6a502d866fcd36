// The FP8 projections on a GPU (cuBLASLt's FP8 GEMMs, label gpu) against their CPU emulation: the
// same bf16 operands, so the same casts bit for bit; the GEMMs then differ by the tensor cores'
// accumulation (below 2e-4, docs/kernels.md) and the outputs' rounding: bf16 outputs at bf16's bound,
// an fp32 weight gradient at 1e-3. In the dtypes training uses: bf16 x, w and dy; y and dx bf16
// (the forward's residual accumulated in place); dw fp32 and bf16, accumulated onto what was there.
#include <gtest/gtest.h>

#include "models/fp8_linear.h"
#include "models/modules.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

TEST(GpuFp8Linear, GemmsMatchTheCpuEmulation) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 256, I = 384, O = 160;
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
    const std::string name = fp8_recipe_name(recipe);
    Rng rng(41);
    Tensor x = representable(random_host(rng, {N, I}), DType::BF16);
    Tensor w = representable(random_host(rng, {O, I}, 0.05), DType::BF16);
    Tensor dy = representable(random_host(rng, {N, O}, 1e-3), DType::BF16);
    Tensor residual = representable(random_host(rng, {N, O}), DType::BF16);
    Tensor dw0 = representable(random_host(rng, {O, I}, 1e-2), DType::BF16);
    Tensor dx0 = representable(random_host(rng, {N, I}, 1e-3), DType::BF16);
    // The CPU's fp32 results.
    Tensor y = Tensor::empty({N, O}, DType::F32);
    ops::copy(y, residual);
    fp8_linear::forward(recipe, y, x, w, /*accumulate=*/true);
    Tensor dx = Tensor::empty({N, I}, DType::F32);
    ops::copy(dx, dx0);
    fp8_linear::backward_input(recipe, dx, dy, w, /*accumulate=*/true);
    Tensor dw = Tensor::empty({O, I}, DType::F32);
    ops::copy(dw, dw0);
    fp8_linear::backward_weight(recipe, dw, dy, x);
    // The GPU's, in training's dtypes.
    Tensor d_x = upload(x, DType::BF16), d_w = upload(w, DType::BF16), d_dy = upload(dy, DType::BF16);
    Tensor d_y = upload(residual, DType::BF16), d_dx = upload(dx0, DType::BF16);
    fp8_linear::forward(recipe, d_y, d_x, d_w, true);
    fp8_linear::backward_input(recipe, d_dx, d_dy, d_w, true);
    expect_close(d_y, y, DType::BF16, name + " forward, residual accumulated");
    expect_close(d_dx, dx, DType::BF16, name + " input gradient, accumulated");
    for (DType grad : {DType::F32, DType::BF16}) {
      Tensor d_dw = upload(dw0, grad);
      fp8_linear::backward_weight(recipe, d_dw, d_dy, d_x);
      const std::vector<double> got = download(d_dw), want = values(dw);
      EXPECT_LE(rel_error(got, want), grad == DType::BF16 ? kTolBF16 : 1e-3)
          << name << " weight gradient into " << dtype_name(grad);
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
