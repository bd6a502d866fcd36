// A training step's FP8 weight casts (models/fp8_step_weights.h): within a step each weight is cast
// once and every GEMM of the step reads that cast; the results are those of a cast at each GEMM.
#include <gtest/gtest.h>

#include <vector>

#include "models/fp8_grouped.h"
#include "models/fp8_linear.h"
#include "models/fp8_step_weights.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::random_tensor;

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

Param fp8_weight(Fp8Recipe recipe, const Shape& shape, Rng& rng) {
  Param p;
  p.name = std::string("w");
  p.full_shape = p.local_shape = shape;
  p.value = random_tensor(rng, shape, 0.05);
  p.fp8_weight = true;
  p.fp8_scaling = fp8_recipe_casts(recipe).weight.scaling;
  p.fp8_format = fp8_recipe_casts(recipe).weight.format;
  return p;
}

// The forward and input gradient read the step's one cast of w and give, bit for bit, what a cast at
// each GEMM gives. That they read the step's copy shows in a change to w.value within the step, which
// they do not see (the optimizer changes weights only between steps); after the step they cast again.
TEST(Fp8StepWeights, EachWeightIsCastOnceAStep) {
  const int64_t N = 144, I = 256, O = 128;
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
    SCOPED_TRACE(fp8_recipe_name(recipe));
    Rng rng(11);
    Param w = fp8_weight(recipe, {O, I}, rng);
    Param plain = fp8_weight(recipe, {O, I}, rng);
    plain.fp8_weight = false;
    const Tensor x = random_tensor(rng, {N, I}), dy = random_tensor(rng, {N, O}, 1e-3);
    Tensor y_each = Tensor::empty({N, O}, DType::F32), dx_each = Tensor::empty({N, I}, DType::F32);
    fp8_linear::forward(recipe, y_each, x, w.value, false);
    fp8_linear::backward_input(recipe, dx_each, dy, w.value, false);

    Tensor y = Tensor::empty({N, O}, DType::F32), dx = Tensor::empty({N, I}, DType::F32);
    {
      const Fp8StepWeights step({&w, &plain});
      EXPECT_TRUE(w.fp8_step.enabled);
      EXPECT_FALSE(plain.fp8_step.enabled) << "a weight no FP8 GEMM casts keeps no copy";
      fp8_linear::forward(recipe, y, x, w, false);
      EXPECT_EQ(values(y), values(y_each));
      ASSERT_TRUE(w.fp8_step.q.defined() && w.fp8_step.q_t.defined());
      EXPECT_EQ(w.fp8_step.q_t.shape(), (Shape{I, O}));
      ops::zero(w.value);
      fp8_linear::backward_input(recipe, dx, dy, w, false);
      EXPECT_EQ(values(dx), values(dx_each)) << "the input gradient reads the step's cast";
      fp8_linear::forward(recipe, y, x, w, false);
      EXPECT_EQ(values(y), values(y_each)) << "a second micro-batch reads the step's cast";
    }
    EXPECT_FALSE(w.fp8_step.enabled || w.fp8_step.q.defined()) << "the step's copy is dropped";
    fp8_linear::forward(recipe, y, x, w, false);
    EXPECT_EQ(values(y), std::vector<float>(static_cast<size_t>(N * O), 0.0f)) << "outside a step: cast at the GEMM";
  }
}

// The routed experts' stacked weight (Param::fp8_grouped): cast once a step with both layouts —
// tensorwise per expert, blockwise as the stack's 128×128 blocks where each expert's rows O are whole
// blocks — the grouped forward and input gradient reading that cast bit for bit as if each cast for
// itself; no copy under ZeRO-3, none outside a step, none under blockwise with O off whole blocks.
struct GroupedCase {
  Fp8Recipe recipe;
  int64_t G, O, I;
};

void check_grouped_cast_once(const GroupedCase& c) {
  const int64_t G = c.G, O = c.O, I = c.I, R = 40;
  Rng rng(12);
  Param w;
  w.name = "experts.w";
  w.full_shape = w.local_shape = {G * O, I};
  w.value = random_tensor(rng, w.local_shape, 0.05);
  w.fp8_grouped = true;
  w.fp8_scaling = fp8_recipe_casts(c.recipe).weight.scaling;
  const Tensor view = w.value.view({G, O, I});
  Tensor offsets = Tensor::from_vector(std::vector<int32_t>{0, 17, 17, R}, {G + 1});
  const Tensor x = random_tensor(rng, {R, I}), dy = random_tensor(rng, {R, O}, 1e-3);
  Tensor y_each = Tensor::empty({R, O}, DType::F32), dx_each = Tensor::empty({R, I}, DType::F32);
  fp8_grouped::forward(c.recipe, y_each, x, view, offsets);
  fp8_grouped::backward_input(c.recipe, dx_each, dy, view, offsets);
  EXPECT_FALSE(fp8_grouped::step_weight(c.recipe, w, view).defined()) << "outside a step";
  {
    const Fp8StepWeights step({&w}, /*zero3=*/true);
    EXPECT_FALSE(w.fp8_step.enabled) << "ZeRO-3 gathers the experts per use: no copy kept all step";
  }
  Tensor saved = Tensor::empty(w.local_shape, DType::F32);
  ops::copy(saved, w.value);
  {
    const Fp8StepWeights step({&w});
    ASSERT_TRUE(w.fp8_step.enabled);
    const bool blockwise = c.recipe == Fp8Recipe::Blockwise;
    const ops::Fp8GroupedCodes codes = fp8_grouped::step_weight(c.recipe, w, view);
    if (blockwise && O % ops::kFp8Block != 0) {
      EXPECT_FALSE(codes.defined()) << "blockwise blocks would span two experts: cast per GEMM";
      return;
    }
    ASSERT_TRUE(codes.defined() && codes.q.defined() && codes.q_t.defined());
    EXPECT_EQ(codes.q_t.shape(), blockwise ? (Shape{I, G * O}) : (Shape{G, I, O}));
    Tensor y = Tensor::empty({R, O}, DType::F32), dx = Tensor::empty({R, I}, DType::F32);
    fp8_grouped::forward(c.recipe, y, x, view, offsets, nullptr, &codes);
    EXPECT_EQ(values(y), values(y_each));
    ops::zero(w.value);
    const ops::Fp8GroupedCodes again = fp8_grouped::step_weight(c.recipe, w, view);
    fp8_grouped::backward_input(c.recipe, dx, dy, view, offsets, nullptr, &again);
    EXPECT_EQ(values(dx), values(dx_each)) << "the input gradient reads the step's cast";
  }
  EXPECT_FALSE(w.fp8_step.enabled || w.fp8_step.q.defined()) << "the step's copy is dropped";
  ops::copy(w.value, saved);
  EXPECT_EQ(fp8_step_weight_bytes({&w}, true), 0.0);
}

TEST(Fp8StepWeights, GroupedWeightsAreCastOnceAStep) {
  check_grouped_cast_once({Fp8Recipe::Tensorwise, 3, 32, 48});
  const int64_t G = 3, O = 32, I = 48;
  Param w;
  w.full_shape = w.local_shape = {G * O, I};
  w.fp8_grouped = true;
  EXPECT_GE(fp8_step_weight_bytes({&w}, false), 2.0 * G * O * I + 4.0 * G);
  EXPECT_LE(fp8_step_weight_bytes({&w}, false), 2.0 * G * O * I + 4.0 * G * O);
}

TEST(Fp8StepWeights, BlockwiseGroupedWeightsAreCastOnceAStepAsTheStacksBlocks) {
  check_grouped_cast_once({Fp8Recipe::Blockwise, 3, 128, 256});
  // The blocks' share: the stack [384, 256] in 3 × 2 blocks and its transpose in 2 × 3, rows padded to 4 floats.
  Param w;
  w.full_shape = w.local_shape = {3 * 128, 256};
  w.fp8_grouped = true;
  w.fp8_scaling = ops::Fp8Scaling::Blocks128;
  EXPECT_EQ(fp8_step_weight_bytes({&w}, false), 2.0 * 384 * 256 + 4.0 * (3 * 4 + 2 * 4));
}

TEST(Fp8StepWeights, BlockwiseGroupedWeightsOffWholeBlocksAreCastInEachGemm) {
  check_grouped_cast_once({Fp8Recipe::Blockwise, 3, 32, 128});
}

// The memory plans' share: codes and transposed codes (2 bytes an element) and the two scale
// tensors; none where ZeRO-3 gathers the weights already cast, or for weights no FP8 GEMM casts.
TEST(Fp8StepWeights, BytesCountCodesTransposesAndScales) {
  Rng rng(3);
  Param w = fp8_weight(Fp8Recipe::Blockwise, {256, 512}, rng);
  Param other = fp8_weight(Fp8Recipe::Blockwise, {64, 64}, rng);
  other.fp8_weight = false;
  const double codes = 2.0 * 256 * 512;
  const double bytes = fp8_step_weight_bytes({&w, &other}, /*zero3=*/false);
  EXPECT_GE(bytes, codes + 4.0 * 2 * 8);        // two grids of 2 × 4 blocks, a float each at least
  EXPECT_LE(bytes, codes + 4.0 * 2 * 8 * 4);    // the grids' rows padded to 4 floats at most
  EXPECT_EQ(fp8_step_weight_bytes({&w}, /*zero3=*/true), 0.0);
}

}  // namespace
}  // namespace tetra
