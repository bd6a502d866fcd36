// The FP8 path's weight operand (models/fp8_weight_operand.cpp): a Param whose FP8 copy is given
// (fp8_q, fp8_scale — what ZeRO-3 gathers, parallel/zero/fp8_gather.h) gives the forward and input
// gradient GEMMs bit for bit those of the same weight cast per GEMM from its value, under each
// recipe; without the copy the value is cast as before; a copy of another recipe's cast is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "models/fp8_linear.h"
#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::random_tensor;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// w [O, I] as a Param with its value and, with `cast`, the FP8 copy of the recipe's weight cast.
Param make_weight(Fp8Recipe recipe, const Tensor& value, bool cast) {
  Param w;
  w.name = std::string("w");
  w.full_shape = w.local_shape = value.shape();
  w.value = value;
  const Fp8Cast c = fp8_recipe_casts(recipe).weight;
  w.fp8_weight = true;
  w.fp8_scaling = c.scaling;
  w.fp8_format = c.format;
  if (cast) {
    w.fp8_q = Tensor::empty(value.shape(), c.format);
    w.fp8_scale = Tensor::empty(fp8_scale_shape(c.scaling, value.dim(0), value.dim(1)), DType::F32);
    ops::fp8_quantize(w.fp8_q, w.fp8_scale, value, c.scaling);
    w.value = Tensor();  // as ZeRO-3 leaves it: only the FP8 copy is there
  }
  return w;
}

TEST(Fp8WeightOperand, TheGatheredCopyGivesTheSameGemms) {
  Rng rng(3);
  const int64_t N = 48, O = 144, I = 272;  // partial 128×128 blocks on both sides of w
  const Tensor x = random_tensor(rng, {N, I}), dy = random_tensor(rng, {N, O}), w = random_tensor(rng, {O, I}, 0.1);
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
    const Param cast = make_weight(recipe, w, true), plain = make_weight(recipe, w, false);
    for (bool accumulate : {false, true}) {
      Tensor y_ref = random_tensor(rng, {N, O}), y = test::clone(y_ref);
      fp8_linear::forward(recipe, y_ref, x, w, accumulate);
      fp8_linear::forward(recipe, y, x, cast, accumulate);
      EXPECT_TRUE(same_bytes(y, y_ref)) << fp8_recipe_name(recipe) << ": forward";
      Tensor y_plain = Tensor::empty({N, O}, DType::F32);
      fp8_linear::forward(recipe, y_plain, x, plain, false);
      Tensor y0 = Tensor::empty({N, O}, DType::F32);
      fp8_linear::forward(recipe, y0, x, w, false);
      EXPECT_TRUE(same_bytes(y_plain, y0)) << fp8_recipe_name(recipe) << ": forward without the copy";

      Tensor dx_ref = random_tensor(rng, {N, I}), dx = test::clone(dx_ref);
      fp8_linear::backward_input(recipe, dx_ref, dy, w, accumulate);
      fp8_linear::backward_input(recipe, dx, dy, cast, accumulate);
      EXPECT_TRUE(same_bytes(dx, dx_ref)) << fp8_recipe_name(recipe) << ": input gradient";
    }
  }
}

TEST(Fp8WeightOperand, RefusesACopyOfAnotherCast) {
  Rng rng(4);
  const Tensor x = random_tensor(rng, {16, 32}), w = random_tensor(rng, {16, 32});
  const Param blockwise = make_weight(Fp8Recipe::Blockwise, w, true);
  Tensor y = Tensor::empty({16, 16}, DType::F32);
  EXPECT_THROW(fp8_linear::forward(Fp8Recipe::Tensorwise, y, x, blockwise, false), Error);
}

}  // namespace
}  // namespace tetra
