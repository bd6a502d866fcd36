// fp32 master weights start from the full-precision initial values (CPU backend, no MPI): a
// ParamSet with bf16 working weights filled through set_initial_values keeps the fp32 values the
// fill wrote, rounds its working copy from them, and every optimizer — replicated (ZeRO 0) and
// ZeRO 1–3, each rank of a sharded layout taking its shard's slice — starts its master from those
// values bit for bit, not from the bf16 working copy. With fp32 working weights nothing changes:
// the values are the ones ParamSet::initialize writes directly.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "parallel/comm_scheduler.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/param_set.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"
#include "tests/parallel/optimizer_test_util.h"

using namespace tetra;
using tetra::test::ShapeOnlyGroup;
using tetra::test::TestParams;

namespace {

// Parameters of odd sizes over three layers (units padded, shards cut inside parameters), normal
// and constant initialisation, and one buffer.
struct SmallModel : TestParams {
  SmallModel() {
    add("embed.weight", 0, {37, 5});
    add("h.0.weight", 1, {3, 129});
    add("h.0.bias", 1, {11}).init_std = 0.5f;
    Param& norm = add("h.1.norm", 2, {7});
    norm.init_constant = true;
    norm.init_value = 1.0f;
    add("h.1.weight", 2, {64, 3}).init_std = 1.7f;
    Param& buf = add("h.1.router_bias", 2, {4});
    buf.trainable = false;
  }
};

constexpr uint64_t kSeed = 1234;

// name → the fp32 values ParamSet::initialize writes into fp32 working weights (today's CPU path).
std::map<std::string, std::vector<float>> fp32_reference() {
  SmallModel m;
  ParamSet set;
  set.build(m.params, Device::cpu(), DType::F32, DType::F32);
  set.initialize(kSeed);
  std::map<std::string, std::vector<float>> out;
  for (Param* p : m.params) {
    const float* v = p->value.data<float>();
    out[p->name].assign(v, v + p->numel());
  }
  return out;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// Builds a bf16 ParamSet for `stage` over `shards` ranks and fills it through set_initial_values.
void build_bf16(SmallModel& m, ParamSet& set, int stage, int shards) {
  DistributedOptimizerOptions o;
  o.zero_stage = stage;
  const ParamStorage s = param_storage_for(o, DType::BF16, shards);
  set.build(m.params, Device::cpu(), DType::BF16, s.grad_dtype, s.shards, s.full_grads);
  set.set_initial_values([&] { set.initialize(kSeed); });
}

TEST(InitialMaster, Bf16WorkingWeightsKeepTheFp32Values) {
  const auto ref = fp32_reference();
  SmallModel m;
  ParamSet set;
  build_bf16(m, set, 0, 1);
  const Tensor& initial = set.initial_values();
  ASSERT_TRUE(initial.defined());
  EXPECT_EQ(initial.dtype(), DType::F32);
  EXPECT_TRUE(initial.device().is_cpu());
  EXPECT_EQ(initial.numel(), set.flat_numel());
  int64_t not_bf16 = 0;
  for (Param* p : set.params()) {
    const std::vector<float>& want = ref.at(p->name);
    const float* got = initial.data<float>() + p->offset;
    EXPECT_TRUE(same_bits(got, want.data(), p->numel())) << p->name << ": the fp32 draws of the fp32 path";
    ASSERT_EQ(p->value.dtype(), DType::BF16) << p->name << " is bound to the working copy again";
    for (int64_t i = 0; i < p->numel(); ++i) {
      EXPECT_EQ(p->value.bf16_bits()[i], float_to_bf16(want[static_cast<size_t>(i)])) << p->name << "[" << i << "]";
      if (bf16_to_float(float_to_bf16(want[static_cast<size_t>(i)])) != want[static_cast<size_t>(i)]) ++not_bf16;
    }
  }
  EXPECT_GT(not_bf16, 100) << "the draws must have bits that bf16 drops, or the test shows nothing";
  // The buffer is fp32 and written directly.
  const Param* buf = set.find("h.1.router_bias");
  ASSERT_NE(buf, nullptr);
  EXPECT_TRUE(same_bits(buf->value.data<float>(), ref.at(buf->name).data(), buf->numel()));
  set.release_initial_values();
  EXPECT_FALSE(set.initial_values().defined());
}

TEST(InitialMaster, Fp32WorkingWeightsAreWrittenDirectly) {
  const auto ref = fp32_reference();
  SmallModel m;
  ParamSet set;
  set.build(m.params, Device::cpu(), DType::F32, DType::F32);
  const Tensor before = set.flat_values();
  set.set_initial_values([&] { set.initialize(kSeed); });
  EXPECT_FALSE(set.initial_values().defined()) << "nothing kept: the working weights are the master";
  EXPECT_EQ(set.flat_values().data_ptr(), before.data_ptr());
  for (Param* p : m.params)
    EXPECT_TRUE(same_bits(p->value.data<float>(), ref.at(p->name).data(), p->numel())) << p->name;
}

TEST(InitialMaster, AFailedFillLeavesTheWorkingCopyBound) {
  SmallModel m;
  ParamSet set;
  build_bf16(m, set, 0, 1);
  EXPECT_THROW(set.set_initial_values([] { throw std::runtime_error("bad weight file"); }), std::runtime_error);
  for (Param* p : set.params()) EXPECT_EQ(p->value.dtype(), DType::BF16) << p->name;
  EXPECT_FALSE(set.initial_values().defined());
}

// Every optimizer's master pieces equal the fp32 values of the elements they cover, and together
// the ranks' pieces cover every element once.
TEST(InitialMaster, EveryOptimizerStartsFromTheFp32Values) {
  const auto ref = fp32_reference();
  for (int stage = 0; stage <= 3; ++stage)
    for (int shards : {1, 2, 3}) {
      if (stage == 0 && shards > 1) continue;  // replicated: every rank holds the same full state
      std::map<std::string, int64_t> covered;
      for (int rank = 0; rank < shards; ++rank) {
        SCOPED_TRACE("stage " + std::to_string(stage) + ", rank " + std::to_string(rank) + " of " +
                     std::to_string(shards));
        SmallModel m;
        ParamSet set;
        build_bf16(m, set, stage, shards);
        ShapeOnlyGroup dp(rank, shards);
        CommScheduler scheduler(Device::cpu());
        DistributedOptimizerOptions o;
        o.zero_stage = stage;
        std::unique_ptr<DistributedOptimizer> opt = make_distributed_optimizer(set, dp, scheduler, o);
        for (const StatePiece& piece : opt->pieces_to_load()) {
          const std::vector<float>& want = ref.at(piece.name);
          ASSERT_EQ(piece.master.dtype(), DType::F32);
          EXPECT_TRUE(same_bits(piece.master.data<float>(), want.data() + piece.begin, piece.end - piece.begin))
              << piece.name << "[" << piece.begin << ":" << piece.end << "]: the master holds the fp32 values";
          covered[piece.name] += piece.end - piece.begin;
        }
      }
      for (const auto& [name, values] : ref) {
        if (name == "h.1.router_bias") continue;  // a buffer: no optimizer state
        EXPECT_EQ(covered[name], static_cast<int64_t>(values.size())) << name << " covered once, stage " << stage;
      }
    }
}

}  // namespace
