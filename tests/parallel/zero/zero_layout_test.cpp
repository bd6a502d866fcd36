// ZeRO shard layout and memory accounting (no MPI): units per layer padded to shards × align,
// equal aligned shards, segments that cover every parameter exactly once over the ranks, the
// ParamSet built on the layout and its gradients' zeroed state, the stage formulas, and the gradient
// dtype the optimizer picks.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "models/gpt_model.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/param_set.h"
#include "parallel/zero/layout.h"
#include "parallel/zero/memory.h"
#include "runtime/ops.h"

using namespace tetra;

namespace {

// Parameters of awkward sizes over four layers; layer 0's first parameter is read by layer 3 too.
struct OddModel {
  std::vector<std::unique_ptr<Param>> owned;
  std::vector<Param*> params;
  OddModel() {
    const std::vector<std::pair<int, Shape>> spec = {{0, {37, 5}}, {0, {11}},    {1, {3, 3}}, {1, {1}},
                                                     {1, {129}},   {2, {64, 2}}, {3, {7}},    {3, {1000, 3}}};
    for (size_t i = 0; i < spec.size(); ++i) {
      auto p = std::make_unique<Param>();
      p->name = "p" + std::to_string(i);
      p->layer_index = spec[i].first;
      p->full_shape = p->local_shape = spec[i].second;
      params.push_back(p.get());
      owned.push_back(std::move(p));
    }
    params[0]->tied_layers = {3};
  }
};

void check_layout(const std::vector<Param*>& params, int shards) {
  SCOPED_TRACE("shards " + std::to_string(shards));
  const ZeroLayout L(params, shards);
  const int64_t align = ZeroLayout::kAlignElems;
  int64_t expect_offset = 0;
  for (const ZeroUnit& u : L.units()) {
    EXPECT_EQ(u.offset, expect_offset) << "units are back to back";
    EXPECT_EQ(u.padded % (shards * align), 0) << "unit padded to a multiple of shards × align";
    EXPECT_GE(u.padded, u.numel);
    EXPECT_LT(u.padded - u.numel, shards * align) << "no more padding than needed";
    EXPECT_EQ(u.shard * shards, u.padded) << "equal shards";
    EXPECT_EQ(u.shard % align, 0) << "every rank's shard starts aligned";
    EXPECT_EQ(u.shard_offset * shards, u.offset);
    int64_t prev_end = u.offset;
    for (int pi : u.params) {
      const int64_t off = L.offset_of(pi);
      EXPECT_EQ(off % align, 0) << L.params()[pi]->name << " aligned";
      EXPECT_GE(off, prev_end) << "parameters do not overlap";
      prev_end = off + L.params()[pi]->numel();
      EXPECT_EQ(L.params()[pi]->layer_index, u.layer);
    }
    EXPECT_EQ(prev_end, u.offset + u.numel);
    expect_offset += u.padded;
  }
  EXPECT_EQ(L.total(), expect_offset);
  EXPECT_EQ(L.shard_total() * shards, L.total());

  // Over all ranks the segments cover every element of every parameter exactly once, and each
  // rank's segments lie inside its shard buffer without overlapping.
  std::map<int, std::vector<int>> covered;
  for (size_t i = 0; i < L.params().size(); ++i) covered[static_cast<int>(i)].assign(L.params()[i]->numel(), 0);
  for (int r = 0; r < shards; ++r) {
    std::vector<int> used(static_cast<size_t>(L.shard_total()), 0);
    for (const ShardSegment& s : L.segments(r)) {
      ASSERT_LT(s.param_begin, s.param_end);
      ASSERT_LE(s.param_end, L.params()[s.param]->numel());
      const ZeroUnit& u = L.units()[s.unit];
      // The segment sits where the flat layout says: flat offset = unit offset + r·shard + local.
      EXPECT_EQ(L.offset_of(s.param) + s.param_begin, u.offset + r * u.shard + (s.shard_offset - u.shard_offset));
      for (int64_t e = s.param_begin; e < s.param_end; ++e) ++covered[s.param][static_cast<size_t>(e)];
      for (int64_t k = 0; k < s.numel(); ++k) ++used[static_cast<size_t>(s.shard_offset + k)];
    }
    for (int c : used) ASSERT_LE(c, 1);
  }
  for (auto& [pi, counts] : covered)
    for (size_t e = 0; e < counts.size(); ++e) ASSERT_EQ(counts[e], 1) << L.params()[pi]->name << "[" << e << "]";
}

}  // namespace

TEST(ZeroLayout, UnitsPaddedAlignedAndShardsCoverEveryParameterOnce) {
  OddModel m;
  for (int shards : {1, 2, 3, 4, 8}) check_layout(m.params, shards);
  GptConfig g{.vocab_size = 257, .max_seq_len = 33, .d_model = 48, .n_layers = 3, .n_heads = 4};
  GptModel gpt(g);
  for (int shards : {1, 2, 4, 7}) check_layout(gpt.params(), shards);
}

TEST(ZeroLayout, UnitsFollowLayersAndTiedUsers) {
  OddModel m;
  const ZeroLayout L(m.params, 2);
  ASSERT_EQ(L.units().size(), 4u);
  EXPECT_EQ(L.units()[0].users, (std::vector<int>{0, 3}));
  EXPECT_TRUE(L.units()[0].tied());
  EXPECT_FALSE(L.units()[1].tied());
  EXPECT_EQ(L.units_of_layer(3), (std::vector<int>{0, 3}));
  EXPECT_EQ(L.units_of_layer(1), (std::vector<int>{1}));
  EXPECT_TRUE(L.units_of_layer(9).empty());
  EXPECT_EQ(L.layers(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(L.tied_elements(), L.units()[0].padded);
  EXPECT_EQ(L.largest_units(1, false), L.units()[3].padded);  // 1000×3 + 7, the largest untied
  // GPT-2: wte lives in the embedding's unit and is read by the head too.
  GptConfig g{.vocab_size = 64, .max_seq_len = 8, .d_model = 16, .n_layers = 2, .n_heads = 2};
  GptModel gpt(g);
  const ZeroLayout G(gpt.params(), 2);
  EXPECT_EQ(G.units().front().users, (std::vector<int>{0, 3}));
  EXPECT_EQ(G.units_of_layer(3).size(), 2u);
}

TEST(ZeroLayout, ParamSetViewsFollowTheLayout) {
  OddModel m;
  ParamSet ps;
  ps.build(m.params, Device::cpu(), DType::F32, DType::F32, /*shards=*/4, /*full_grads=*/false);
  EXPECT_EQ(ps.flat_numel(), ps.layout().total());
  EXPECT_FALSE(ps.flat_grads().defined());
  for (size_t i = 0; i < ps.layout().params().size(); ++i) {
    Param* p = ps.layout().params()[i];
    EXPECT_EQ(p->offset, ps.layout().offset_of(static_cast<int>(i)));
    EXPECT_EQ(static_cast<char*>(p->value.data_ptr()) - static_cast<char*>(ps.flat_values().data_ptr()),
              p->offset * 4);
    EXPECT_FALSE(p->grad.defined());
  }
  ps.initialize(7);
  ps.release_values();
  for (Param* p : m.params) EXPECT_FALSE(p->value.defined());
  EXPECT_THROW(ps.initialize(7), Error);
}

TEST(ZeroMemory, StagesMatchTheFormula) {
  GptConfig g;  // GPT-2 124M shapes
  g.vocab_size = 50257;
  g.max_seq_len = 1024;
  g.d_model = 768;
  g.n_layers = 12;
  g.n_heads = 12;
  GptModel gpt(g);
  const double N = static_cast<double>(g.num_params());
  for (int dp : {1, 2, 8}) {
    const ZeroLayout L(gpt.params(), dp);
    const double T = static_cast<double>(L.total()), S = static_cast<double>(L.shard_total());
    EXPECT_LT(T / N - 1, 1e-3) << "padding stays below 0.1%";
    ZeroMemorySpec s;
    s.weight_dtype = DType::BF16;
    s.grad_dtype = DType::BF16;
    s.stage = 3;
    StateMemory m3 = zero_state_memory(L, s);
    EXPECT_DOUBLE_EQ(m3.persistent, 16.0 * S) << "(2 + 2 + 12)·N/dp";
    EXPECT_DOUBLE_EQ(m3.weights, 2.0 * S);
    EXPECT_DOUBLE_EQ(m3.optimizer, 12.0 * S);
    // Gathered layers: wte's unit (tied) and the 1 + prefetch largest blocks.
    EXPECT_DOUBLE_EQ(m3.communication, 2.0 * static_cast<double>(L.tied_elements() + L.largest_units(2, false)));
    s.accumulation_steps = 4;  // gradients accumulate in every layer's full buffer
    EXPECT_DOUBLE_EQ(zero_state_memory(L, s).gradients, 2.0 * (S + T));
    s.stage = 1;
    s.grad_dtype = DType::F32;
    StateMemory m1 = zero_state_memory(L, s);
    // One rank: the optimizer updates the flat weights and reads the flat gradients themselves (no
    // working-weight shard, no gradient shard; with fp32 weights no master beside them).
    const bool whole = dp == 1;
    EXPECT_DOUBLE_EQ(m1.total(), 2 * T + 4 * (T + (whole ? 0 : S)) + 12 * S + (whole ? 0 : 2 * S));
    s.stage = 0;
    EXPECT_DOUBLE_EQ(zero_state_memory(L, s).total(), (2 + 4 + 12) * T);
    s.weight_dtype = DType::F32;
    s.stage = 1;
    EXPECT_DOUBLE_EQ(zero_state_memory(L, s).total(), 4 * T + 4 * (T + (whole ? 0 : S)) + (whole ? 8 : 12) * S);
    s.stage = 3;
    EXPECT_DOUBLE_EQ(zero_state_memory(L, s).persistent, 16.0 * S) << "fp32: 4 weights(=master) + 4 + 8";
  }
}

// ZeRO-3 with FP8 weights keeps the shard cast to FP8 (a byte an element) and the FP8 units' other
// parameters packed in the working dtype, for the whole run (parallel/zero/fp8_gather.h).
TEST(ZeroMemory, Stage3CountsTheFp8Shard) {
  GptConfig g;
  g.vocab_size = 1000;
  g.max_seq_len = 64;
  g.d_model = 64;
  g.n_layers = 2;
  g.n_heads = 4;
  g.fp8 = Fp8Recipe::Tensorwise;
  GptModel gpt(g);
  ZeroMemorySpec s;
  s.weight_dtype = DType::BF16;
  s.grad_dtype = DType::BF16;
  s.stage = 3;
  const ZeroLayout L(gpt.params(), 2);
  const StateMemory fp8 = zero_state_memory(L, s);
  int64_t others = 0;  // per block: ln_1, ln_2 (weight, bias), and the 4 projections' biases
  for (Param* p : gpt.params())
    if (p->name.find(".h.") != std::string::npos && !p->fp8_weight) others += p->numel();
  for (Param* p : gpt.params()) p->fp8_weight = false;
  const StateMemory plain = zero_state_memory(L, s);
  const double extra = static_cast<double>(L.shard_total()) + 2.0 * static_cast<double>(others);
  EXPECT_DOUBLE_EQ(fp8.communication - plain.communication, extra);
  EXPECT_DOUBLE_EQ(fp8.persistent - plain.persistent, extra);
}

// parallel.grad_dtype auto: bf16 gradients for bf16 training when they are sharded (stages 2–3)
// or nothing accumulates (one micro-batch per step); fp32 where stages 0–1 sum micro-batches.
TEST(ZeroMemory, GradientDtypeIsTheOptimizersChoice) {
  DistributedOptimizerOptions o;
  for (int accumulation : {1, 4}) {
    o.accumulation_steps = accumulation;
    for (int stage = 0; stage <= 3; ++stage) {
      o.zero_stage = stage;
      o.grad_dtype.reset();
      const ParamStorage cpu = param_storage_for(o, DType::F32, 4);
      const ParamStorage gpu = param_storage_for(o, DType::BF16, 4);
      EXPECT_EQ(cpu.grad_dtype, DType::F32);
      EXPECT_EQ(gpu.grad_dtype, stage >= 2 || accumulation == 1 ? DType::BF16 : DType::F32)
          << "stage " << stage << ", " << accumulation << " micro-batches";
      EXPECT_EQ(cpu.shards, stage == 0 ? 1 : 4);
      EXPECT_EQ(cpu.full_grads, stage <= 1);
      o.grad_dtype = DType::F32;
      EXPECT_EQ(param_storage_for(o, DType::BF16, 4).grad_dtype, DType::F32);
      o.grad_dtype = DType::BF16;
      EXPECT_EQ(param_storage_for(o, DType::BF16, 4).grad_dtype, DType::BF16);
      EXPECT_THROW(param_storage_for(o, DType::F32, 4), Error);  // bf16 gradients of fp32 weights
    }
  }
  o.grad_dtype.reset();
  o.zero_stage = 4;
  EXPECT_THROW(param_storage_for(o, DType::F32, 2), Error);
}

// Param::grad_empty: set exactly where a step's gradient buffer is zeroed, cleared by the first
// write (the routed experts' weight gradients then store instead of adding, models/moe_mlp.cpp).
TEST(ZeroLayout, ZeroGradsMarksGradientsEmptyUntilTheirFirstWrite) {
  OddModel m;
  Param buffer;
  buffer.name = "b";
  buffer.full_shape = buffer.local_shape = {4};
  buffer.trainable = false;
  std::vector<Param*> all = m.params;
  all.push_back(&buffer);
  ParamSet ps;
  ps.build(all, Device::cpu(), DType::F32, DType::F32, /*shards=*/2, /*full_grads=*/true);
  for (Param* p : m.params) EXPECT_FALSE(p->grad_empty) << p->name << ": not yet zeroed for a step";
  ops::fill(ps.flat_grads(), 3.0f);
  ps.zero_grads();
  const float* g = ps.flat_grads().data<float>();
  for (int64_t i = 0; i < ps.flat_numel(); ++i) ASSERT_EQ(g[i], 0.0f) << "element " << i;
  for (Param* p : m.params) EXPECT_TRUE(p->grad_empty) << p->name;
  EXPECT_FALSE(buffer.grad_empty) << "a buffer has no gradient";
  Param* p = m.params[2];
  EXPECT_TRUE(p->first_grad_write()) << "the step's first write may store";
  EXPECT_FALSE(p->grad_empty);
  EXPECT_FALSE(p->first_grad_write()) << "a second write must add";
  EXPECT_TRUE(m.params[3]->grad_empty) << "another parameter's write leaves this one's state";
  ps.zero_grads();
  EXPECT_TRUE(p->first_grad_write()) << "the next step's zeroing marks it again";
  // Stages 2–3 keep no flat buffer: nothing is zeroed here, so nothing is marked (ZeroGradReducer
  // marks a unit's parameters when it allocates their zeroed buffer).
  OddModel sharded;
  ParamSet ps2;
  ps2.build(sharded.params, Device::cpu(), DType::F32, DType::F32, /*shards=*/2, /*full_grads=*/false);
  ps2.zero_grads();
  for (Param* q : sharded.params) EXPECT_FALSE(q->grad_empty) << q->name;
}

// A gradient whose first write stores every element (Param::grad_whole_writes: the routed experts')
// is left as it was by the step's preparation (stale), everything else — padding included — is zeroed;
// settle_grads zeroes what is still stale before a reader, and a write ends the staleness.
TEST(ZeroLayout, PreparingSkipsGradientsWrittenWholeAndSettlingZeroesThem) {
  OddModel m;
  m.params[2]->grad_whole_writes = true;  // layer 1, first of three
  m.params[7]->grad_whole_writes = true;  // layer 3, last (its unit's padding follows)
  ParamSet ps;
  ps.build(m.params, Device::cpu(), DType::F32, DType::F32, /*shards=*/2, /*full_grads=*/true);
  ops::fill(ps.flat_grads(), 3.0f);
  ps.zero_grads();
  const float* g = ps.flat_grads().data<float>();
  auto inside = [&](int64_t i, const Param* p) { return i >= p->offset && i < p->offset + p->numel(); };
  for (int64_t i = 0; i < ps.flat_numel(); ++i) {
    const bool whole = inside(i, m.params[2]) || inside(i, m.params[7]);
    ASSERT_EQ(g[i], whole ? 3.0f : 0.0f) << "element " << i << (whole ? " (left stale)" : " (zeroed)");
  }
  for (Param* p : m.params) {
    EXPECT_TRUE(p->grad_empty) << p->name;
    EXPECT_EQ(p->grad_stale, p->grad_whole_writes) << p->name;
  }
  EXPECT_TRUE(m.params[7]->first_grad_write()) << "the first write stores";
  EXPECT_FALSE(m.params[7]->grad_stale) << "and leaves nothing stale";
  settle_grads(m.params);  // a reader: params[2] was never written this step
  for (int64_t i = 0; i < ps.flat_numel(); ++i)
    ASSERT_EQ(g[i], inside(i, m.params[7]) ? 3.0f : 0.0f) << "element " << i << " after settling";
  EXPECT_FALSE(m.params[2]->grad_stale);
  EXPECT_TRUE(m.params[2]->grad_empty) << "settled: zeros, still nothing of the step";
  // A unit buffer of its own (ZeRO 2–3: ZeroGradReducer prepares each as it allocates it).
  const ZeroUnit& u = ps.layout().units()[1];
  Tensor unit = Tensor::empty({u.padded}, DType::F32);
  ops::fill(unit, 5.0f);
  std::vector<Param*> unit_params;
  for (int pi : u.params) unit_params.push_back(ps.layout().params()[static_cast<size_t>(pi)]);
  prepare_grads(unit, u.offset, unit_params);
  for (int64_t i = 0; i < u.padded; ++i)
    ASSERT_EQ(unit.data<float>()[i], inside(u.offset + i, m.params[2]) ? 5.0f : 0.0f) << "unit element " << i;
}
