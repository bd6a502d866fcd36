// The experts' amaxes measured by the optimizer's update (parallel/fp8_update_amax.h; CPU, no MPI):
// where an optimizer updates the whole of a routed experts' stacked weight on this rank and the model
// reads it as written (stage 0; ZeRO 1–2 at one rank), the update leaves each expert's amax of the
// bf16 working weights, bit for bit, and marks it fresh; the step's FP8 cast of the weight
// (fp8_grouped::step_weight) takes it then and only then — not after the step that took it ended, not
// after a checkpoint load, and not where shards or a gather come between (ZeRO 1–2 over two ranks,
// ZeRO-3), where the cast measures the weights itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/fp8_grouped.h"
#include "models/fp8_step_weights.h"
#include "parallel/comm_scheduler.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/param_set.h"
#include "runtime/fp8_format.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/parallel/optimizer_test_util.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::ShapeOnlyGroup;
using test::TestParams;

constexpr int64_t kG = 3, kO = 8, kI = 20;  // experts, rows and columns of each expert's weight

// An embedding, the routed experts' stacked gate/up-like weight and a bias, in two layers.
struct MoeParams : TestParams {
  Param* experts = nullptr;
  MoeParams() {
    add("embed.weight", 0, {37, 5});
    experts = &add("layers.1.mlp.experts.gate_up_proj", 1, {kG * kO, kI});
    experts->fp8_grouped = true;
    experts->fp8_group_rows = kO;
    add("layers.1.bias", 1, {11}).weight_decay = false;
  }
};

// One optimizer of `stage` at `rank` of `shards` over bf16 working weights (the CUDA setting: the
// amax is of the rounded copy the model reads, not of the fp32 master).
struct OptimizedMoe {
  MoeParams m;
  ParamSet set;
  ShapeOnlyGroup dp;
  CommScheduler scheduler{Device::cpu()};
  std::unique_ptr<DistributedOptimizer> opt;
  // local_experts < kG: expert parallelism's narrowing of the stacked weight, after the layer set it up.
  // scaling: the experts' FP8 weight cast (Blocks128: blockwise, whose blocks need no expert's amax).
  OptimizedMoe(int stage, int rank, int shards, int64_t local_experts = kG,
               ops::Fp8Scaling scaling = ops::Fp8Scaling::Tensorwise)
      : dp(rank, shards) {
    m.experts->local_shape = {local_experts * kO, kI};
    m.experts->fp8_scaling = scaling;
    DistributedOptimizerOptions o;
    o.zero_stage = stage;
    o.adamw.weight_decay = 0.1f;
    const ParamStorage s = param_storage_for(o, DType::BF16, shards);
    set.build(m.params, Device::cpu(), DType::BF16, s.grad_dtype, s.shards, s.full_grads);
    set.set_initial_values([&] { set.initialize(7); });
    opt = make_distributed_optimizer(set, dp, scheduler, o);
  }
  // Random gradients where the optimizer reads them from the params (stages 0 and 1 at one rank).
  void random_grads(uint64_t seed) {
    Rng rng(seed);
    for (Param* p : set.params()) {
      if (!p->grad.defined()) continue;
      Tensor g = Tensor::empty(p->grad.shape(), DType::F32);
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = static_cast<float>(rng.normal() * 0.5);
      ops::copy(p->grad, g);
    }
  }
};

// Each expert's amax bits of the weight's working values.
std::vector<uint32_t> experts_amax(const Param& w) {
  return test::row_amax_of(w.value.view({w.fp8_groups(), kO * kI}));
}

std::vector<uint32_t> words(const Tensor& bits) {
  const auto* p = static_cast<const uint32_t*>(bits.data_ptr());
  return {p, p + bits.numel()};
}

// The weight's step cast within a step scope: its scales [G].
std::vector<float> step_cast_scales(Param& w) {
  const Fp8StepWeights step({&w});
  const ops::Fp8GroupedCodes codes =
      fp8_grouped::step_weight(Fp8Recipe::Tensorwise, w, w.value.view({w.fp8_groups(), kO, kI}));
  return {codes.scale.data<float>(), codes.scale.data<float>() + w.fp8_groups()};
}

// The scales of the cast that measures the weights itself.
std::vector<float> measured_scales(const Param& w) {
  ops::Fp8GroupedCodes own;
  ops::moe_grouped_fp8_cast(own, w.value.view({w.fp8_groups(), kO, kI}), fp8_recipe_casts(Fp8Recipe::Tensorwise).weight,
                            nullptr);
  return {own.scale.data<float>(), own.scale.data<float>() + w.fp8_groups()};
}

// Also with this rank's share of the experts only (expert parallelism narrows the stacked weight
// after the layer set it up): one word a local expert.
TEST(Fp8UpdateAmax, TheUpdateMeasuresEachExpertWhereItWritesTheWholeWeight) {
  for (int stage : {0, 1, 2})
    for (int64_t local : {kG, int64_t{1}}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " at one rank, " + std::to_string(local) + " local experts");
      OptimizedMoe s(stage, 0, 1, local);
      Param& w = *s.m.experts;
      ASSERT_TRUE(w.fp8_update_amax.bits.defined());
      EXPECT_EQ(w.fp8_update_amax.bits.numel(), local);
      EXPECT_FALSE(w.fp8_update_amax.fresh) << "no update yet: the initial weights' amaxes are not measured";
      for (uint64_t step = 1; step <= 2; ++step) {
        s.random_grads(step);
        s.opt->step(1e-2f, 1.0f);
        EXPECT_TRUE(w.fp8_update_amax.fresh);
        EXPECT_EQ(words(w.fp8_update_amax.bits), experts_amax(w)) << "step " << step << ": the rounded working values'";
        EXPECT_EQ(step_cast_scales(w), measured_scales(w)) << "the cast given them is the cast measuring them";
        EXPECT_FALSE(w.fp8_update_amax.fresh) << "the step that took them ended";
      }
    }
}

// That the cast takes the amaxes shows in a word changed after the update: the scale follows it
// exactly when the amaxes are fresh, and not otherwise.
TEST(Fp8UpdateAmax, TheStepCastTakesThemOnlyWhileFresh) {
  OptimizedMoe s(0, 0, 1);
  Param& w = *s.m.experts;
  s.random_grads(3);
  s.opt->step(1e-2f, 1.0f);
  const std::vector<float> own = measured_scales(w);
  auto* word0 = static_cast<uint32_t*>(w.fp8_update_amax.bits.data_ptr());
  const float doubled = 2.0f * std::bit_cast<float>(*word0);
  *word0 = std::bit_cast<uint32_t>(doubled);
  const std::vector<float> taken = step_cast_scales(w);
  EXPECT_EQ(taken[0], 1.0f / fp8_quant_factor(doubled, fp8_largest(Fp8Format::E4M3))) << "fresh: taken as it is";
  EXPECT_EQ(taken[1], own[1]);
  EXPECT_EQ(step_cast_scales(w), own) << "the next step, no update between: measured";

  s.random_grads(4);
  s.opt->step(1e-2f, 1.0f);
  ASSERT_TRUE(w.fp8_update_amax.fresh);
  *word0 = std::bit_cast<uint32_t>(doubled);
  s.opt->after_load();  // a checkpoint's weights replace the update's
  EXPECT_FALSE(w.fp8_update_amax.fresh);
  EXPECT_EQ(step_cast_scales(w), measured_scales(w)) << "after a load: measured";
}

// Shards or a gather between the update and the model's weights: nothing is measured in the update.
TEST(Fp8UpdateAmax, NoneWhereTheUpdateWritesShards) {
  for (int stage : {1, 2, 3})
    for (int shards : {1, 2}) {
      if (shards == 1 && stage < 3) continue;
      SCOPED_TRACE("stage " + std::to_string(stage) + " over " + std::to_string(shards));
      OptimizedMoe s(stage, 0, shards);
      EXPECT_FALSE(s.m.experts->fp8_update_amax.bits.defined());
    }
  OptimizedMoe replicated(0, 1, 2);  // stage 0 over two ranks: each rank updates the whole weight
  EXPECT_TRUE(replicated.m.experts->fp8_update_amax.bits.defined());
}

// Blockwise experts' weights are cast once a step as 128×128 blocks: no expert's amax is measured.
TEST(Fp8UpdateAmax, NoneForBlockwiseWeights) {
  OptimizedMoe s(0, 0, 1, kG, ops::Fp8Scaling::Blocks128);
  EXPECT_FALSE(s.m.experts->fp8_update_amax.bits.defined());
}

}  // namespace
}  // namespace tetra
