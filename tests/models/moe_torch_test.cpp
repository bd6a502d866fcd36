// Llama with DeepSeek-V3 mixture-of-experts MLPs (model.moe) against an independent PyTorch
// implementation (float64) from the same Hugging Face-named weights and router biases
// (tests/models/moe_torch_reference.py): the loss (balance loss included) and every tensor's
// gradient to 1e-5 relative, per Hugging Face tensor (each expert's gate/up/down apart); then 10
// AdamW steps through `tetra train` with the auxiliary-loss-free bias update after each, to 1e-4 in
// loss, gradient norm, the final weights and the final router biases (read back from `tetra ckpt
// consolidate --format hf`). Two variants: top-2 of 8 with a shared expert and a dense first layer,
// weights from a Hugging Face folder; group-limited top-3 (2 of 4 groups) with route scale 2.5 and
// the sequence-wise balance loss, from a consolidated HDF5 file. Recomputation (mlp, full) gives the
// same gradients bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

#include "models/llama_model.h"
#include "models/weight_source.h"
#include "parallel/param_set.h"
#include "tests/models/torch_reference_test.h"

namespace fs = std::filesystem;
using namespace tetra;
using namespace tetra::torchref;

namespace {

struct Variant {
  std::string name;
  int64_t experts, top_k, shared, dense_layers, groups, topk_groups;
  double route_scale, aux, bias_rate;
  bool from_hf;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {{"top2_shared_hf", 8, 2, 1, 1, 1, 1, 1.0, 0.0, 1e-3, true},
                                         {"groups_aux_h5", 8, 3, 0, 0, 4, 2, 2.5, 0.01, 5e-3, false}};
  return v;
}

LlamaConfig config_of(const Variant& v) {
  LlamaConfig c = reference_llama_config();
  c.n_kv_heads = 2;
  c.moe.n_experts = v.experts;
  c.moe.top_k = v.top_k;
  c.moe.n_shared = v.shared;
  c.moe.ffn_dim = 16;
  c.moe.first_k_dense = v.dense_layers;
  c.moe.n_group = v.groups;
  c.moe.topk_group = v.topk_groups;
  c.moe.route_scale = v.route_scale;
  c.moe.aux_loss_coef = v.aux;
  c.moe.bias_update_rate = v.bias_rate;
  return c;
}

const fs::path& reference_dir(const Variant& v) {
  return torchref::reference_dir(
      "moe", v.name,
      " --experts " + std::to_string(v.experts) + " --topk " + std::to_string(v.top_k) + " --shared " +
          std::to_string(v.shared) + " --dense-layers " + std::to_string(v.dense_layers) + " --groups " +
          std::to_string(v.groups) + " --topk-groups " + std::to_string(v.topk_groups) + " --route-scale " +
          num(v.route_scale) + " --aux " + num(v.aux) + " --bias-rate " + num(v.bias_rate));
}

using LlamaRun = ReferenceRun<LlamaModel>;

// One forward and backward of the reference batch (4 windows of 17 tokens, stride 16).
LlamaRun run_reference_batch(const Variant& v, Recompute recompute = Recompute::None) {
  const fs::path dir = reference_dir(v);
  LlamaConfig cfg = config_of(v);
  cfg.recompute = recompute;
  LlamaRun run = torchref::run_reference_batch<LlamaModel>(cfg, dir, dir / (v.from_hf ? "hf" : "weights.h5"),
                                                      /*no_notes=*/false);
  EXPECT_EQ(run.batch.aux_loss, v.aux > 0);
  return run;
}

int expected_tensors(const Variant& v, bool with_buffers) {
  const int moe_layers = static_cast<int>(2 - v.dense_layers);
  // embedding; per layer 6 (norms, q/k/v/o); dense MLP 3, MoE: gate, 3 per expert, 3 shared;
  // the bias buffer; final norm; lm_head
  return 1 + 2 * 6 + static_cast<int>(v.dense_layers) * 3 +
         moe_layers * (1 + 3 * static_cast<int>(v.experts) + (v.shared ? 3 : 0) + (with_buffers ? 1 : 0)) + 2;
}

class MoeTorch : public ::testing::TestWithParam<Variant> {};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

}  // namespace

TEST_P(MoeTorch, LossAndEveryGradientMatch) {
  const Variant& v = GetParam();
  LlamaRun run = run_reference_batch(v);
  int checked = 0;
  check_loss_and_gradients(reference_dir(v), run.batch, run.model->params(), &checked);
  EXPECT_EQ(checked, expected_tensors(v, false));
}

TEST_P(MoeTorch, TenStepsWithBiasUpdatesMatchLossNormWeightsAndBias) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  std::ostringstream model;
  model << "model: {arch: llama, vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
           "ffn_dim: 48, init_from: "
        << (dir / (v.from_hf ? "hf" : "weights.h5")).string() << ",\n  moe: {n_experts: " << v.experts
        << ", top_k: " << v.top_k << ", n_shared: " << v.shared << ", ffn_dim: 16, first_k_dense: " << v.dense_layers
        << ", n_group: " << v.groups << ", topk_group: " << v.topk_groups << ", route_scale: " << num(v.route_scale)
        << ", aux_loss_coef: " << num(v.aux) << ", bias_update_rate: " << num(v.bias_rate) << "}}";
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  Tensor balance = ref.read("load_max_over_mean", DType::F64);
  const int64_t moe_layers = 2 - v.dense_layers;
  // Each MoE layer's max/mean expert load of the step (the same integers as the reference).
  auto loads_match = [&](const nlohmann::json& j) {
    const int64_t step = j["step"];
    for (int64_t l = 0; l < moe_layers; ++l) {
      const std::string key = "moe_load_max_over_mean_" + std::to_string(v.dense_layers + l);
      ASSERT_TRUE(j.contains(key)) << j.dump();
      EXPECT_NEAR(j[key].get<double>(), balance.data<double>()[(step - 1) * moe_layers + l], 1e-9) << key;
    }
  };
  int biases = 0;
  auto bias_moved = [&](const std::string& name, const Tensor& got) {
    if (name.find("e_score_correction_bias") == std::string::npos) return;
    ++biases;
    // The bias moved by ±rate per step: its values are the initial ones plus multiples of rate.
    double moved = 0;
    Tensor first = open_weights((dir / "hf").string())->read_f32(name);
    for (int64_t i = 0; i < got.numel(); ++i)
      moved = std::max(moved, std::abs(static_cast<double>(got.data<float>()[i] - first.data<float>()[i])));
    EXPECT_GT(moved, 0.5 * v.bias_rate) << name << " never moved";
  };
  int checked = 0;
  check_ten_steps(dir, model.str(), loads_match, bias_moved, &checked);
  EXPECT_EQ(biases, moe_layers);
  EXPECT_EQ(checked, expected_tensors(v, true));
}

// Recomputation changes what is kept, never the result: mlp and full equal none bit for bit.
TEST_P(MoeTorch, RecomputeGivesTheSameGradients) {
  const Variant& v = GetParam();
  std::vector<LlamaRun> runs;
  for (Recompute mode : {Recompute::None, Recompute::Mlp, Recompute::Full})
    runs.push_back(run_reference_batch(v, mode));
  expect_bitwise_equal(runs);
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeTorch, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });
