// Llama with DeepSeek-V3 mixture-of-experts MLPs (model.moe) against an independent PyTorch
// implementation (float64) from the same Hugging Face-named weights and router biases
// (tests/model/moe_torch_reference.py): the loss (balance loss included) and every tensor's
// gradient to 1e-5 relative, per Hugging Face tensor (each expert's gate/up/down apart); then 10
// AdamW steps through `tetra train` with the auxiliary-loss-free bias update after each, to 1e-4 in
// loss, gradient norm, the final weights and the final router biases (read back from `tetra ckpt
// consolidate --format hf`). Two variants: top-2 of 8 with a shared expert and a dense first layer,
// weights from a Hugging Face folder; group-limited top-3 (2 of 4 groups) with route scale 2.5 and
// the sequence-wise balance loss, from a consolidated HDF5 file. Recomputation (mlp, full) gives the
// same gradients bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "models/llama_model.h"
#include "models/stored_tensors.h"
#include "models/weight_source.h"
#include "parallel/param_set.h"
#include "runtime/hdf5_file.h"
#include "runtime/ops.h"

namespace fs = std::filesystem;
using namespace tetra;

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
  LlamaConfig c;
  c.vocab_size = 96;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
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

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// The references this process made, removed when it ends (kept with TETRA_KEEP_TEST_DIRS=1).
struct ReferenceDirs {
  std::map<std::string, fs::path> dirs;
  ~ReferenceDirs() {
    if (const char* keep = std::getenv("TETRA_KEEP_TEST_DIRS"); keep && std::string(keep) == "1") return;
    std::error_code ec;
    for (const auto& [name, d] : dirs) {
      fs::remove_all(d, ec);
      fs::remove(d.string() + ".log", ec);
    }
  }
};

const fs::path& reference_dir(const Variant& v) {
  static ReferenceDirs made;
  auto it = made.dirs.find(v.name);
  if (it != made.dirs.end()) return it->second;
  fs::path d = fs::temp_directory_path() / ("tetra_moe_ref_" + std::to_string(::getpid()) + "_" + v.name);
  const std::string cmd = std::string(TETRA_PYTHON) + " " + TETRA_SOURCE_DIR + "/tests/model/moe_torch_reference.py " +
                          d.string() + " --experts " + std::to_string(v.experts) + " --topk " +
                          std::to_string(v.top_k) + " --shared " + std::to_string(v.shared) + " --dense-layers " +
                          std::to_string(v.dense_layers) + " --groups " + std::to_string(v.groups) +
                          " --topk-groups " + std::to_string(v.topk_groups) + " --route-scale " + num(v.route_scale) +
                          " --aux " + num(v.aux) + " --bias-rate " + num(v.bias_rate) + " > " + d.string() +
                          ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "reference script failed: " << cmd;
  return made.dirs.emplace(v.name, d).first->second;
}

double rel_err(const float* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

struct ReferenceRun {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<ParamSet> params;
  double loss_sum = 0.0;  // Σ per-token losses + the balance losses in the same units
  int64_t tokens = 0;
};

// One forward and backward of the reference batch (4 windows of 17 tokens, stride 16).
ReferenceRun run_reference_batch(const Variant& v, Recompute recompute = Recompute::None) {
  const fs::path dir = reference_dir(v);
  Hdf5File tokens((dir / "tokens.h5").string(), Hdf5File::Mode::Read);
  Tensor all = tokens.read("tokens", DType::I32);
  const int64_t B = 4, T = 16;
  std::vector<int32_t> ids(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    ids[i] = all.data<int32_t>()[i];
    tgt[i] = all.data<int32_t>()[i + 1];
  }
  ReferenceRun run;
  LlamaConfig cfg = config_of(v);
  cfg.recompute = recompute;
  run.model = std::make_unique<LlamaModel>(cfg);
  run.params = std::make_unique<ParamSet>();
  run.params->build(run.model->params(), Device::cpu(), DType::F32, DType::F32);
  const std::string source = (dir / (v.from_hf ? "hf" : "weights.h5")).string();
  LoadReport loaded = load_weights(*open_weights(source), *run.model);
  EXPECT_TRUE(loaded.unexpected.empty()) << loaded.unexpected.front();
  MicroBatchContext ctx(Device::cpu(), DType::F32);
  ctx.batch = B;
  ctx.seq_len = T;
  ctx.ids = Tensor::from_vector(ids, {B, T});
  ctx.targets = Tensor::from_vector(tgt, {B, T});
  ctx.loss_grad_scale = 1.0f / static_cast<float>(B * T);
  run.params->zero_grads();
  auto layers = run.model->layers();
  Tensor x = ctx.ids;
  for (Layer* l : layers) x = l->forward(ctx, x);
  run.loss_sum = ops::sum_to_host(ctx.losses) + (ctx.aux_loss.defined() ? ops::sum_to_host(ctx.aux_loss) : 0.0);
  EXPECT_EQ(ctx.aux_loss.defined(), v.aux > 0);
  run.tokens = B * T;
  Tensor dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    dy = (*it)->backward_input(ctx, dy);
    (*it)->backward_weight(ctx);
  }
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
  const fs::path dir = reference_dir(v);
  ReferenceRun run = run_reference_batch(v);
  const double loss = run.loss_sum / static_cast<double>(run.tokens);
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  const double loss_ref = ref.read("loss0", DType::F64).data<double>()[0];
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));
  int checked = 0;
  for (Param* p : run.model->params()) {
    if (!p->trainable) continue;
    Tensor grad = Tensor::empty(p->full_shape, DType::F32);
    ops::copy(grad, p->grad);
    for (const StoredTensor& t : stored_tensors(*p)) {
      Tensor g = ref.read("grad/" + t.name, DType::F64);
      Tensor mine = to_stored(t, grad);
      ASSERT_EQ(mine.shape(), g.shape()) << t.name;
      const double e = rel_err(mine.data<float>(), g.data<double>(), g.numel());
      EXPECT_LT(e, 1e-5) << t.name << " relative error " << e;
      ++checked;
    }
  }
  EXPECT_EQ(checked, expected_tensors(v, false));
}

TEST_P(MoeTorch, TenStepsWithBiasUpdatesMatchLossNormWeightsAndBias) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  const fs::path runs = dir / "runs";
  std::ofstream(dir / "cfg.yaml") << "run: {name: ref, output_dir: " << runs.string() << ", seed: 1}\n"
                                  << "model: {arch: llama, vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, "
                                     "n_heads: 4, n_kv_heads: 2, ffn_dim: 48, init_from: "
                                  << (dir / (v.from_hf ? "hf" : "weights.h5")).string() << ",\n  moe: {n_experts: "
                                  << v.experts << ", top_k: " << v.top_k << ", n_shared: " << v.shared
                                  << ", ffn_dim: 16, first_k_dense: " << v.dense_layers << ", n_group: " << v.groups
                                  << ", topk_group: " << v.topk_groups << ", route_scale: " << num(v.route_scale)
                                  << ", aux_loss_coef: " << num(v.aux) << ", bias_update_rate: " << num(v.bias_rate)
                                  << R"(}}
parallel: {dp: 1}
train: {steps: 10, global_batch: 4, micro_batch: 2, device: cpu, precision: fp32, grad_clip: 0.5}
optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: 3, schedule: cosine, min_lr: 3.0e-4}
data: {train: )" << (dir / "tokens.h5").string() << R"(, shuffle: false}
checkpoint: {every: 10}
log: {every: 100}
)";
  const std::string tetra = std::getenv("TETRA_BIN") ? std::getenv("TETRA_BIN") : TETRA_BINARY_DIR "/tetra";
  std::string cmd = tetra + " train " + (dir / "cfg.yaml").string() + " > " + (dir / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << (dir / "train.log");
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  Tensor losses = ref.read("losses", DType::F64), norms = ref.read("grad_norms", DType::F64);
  Tensor balance = ref.read("load_max_over_mean", DType::F64);
  const int64_t moe_layers = 2 - v.dense_layers;
  std::ifstream metrics(runs / "ref" / "metrics.jsonl");
  int n = 0, clipped = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    const int64_t step = j["step"];
    ASSERT_GE(step, 1);
    ASSERT_LE(step, 10);
    const double want = losses.data<double>()[step - 1], got = j["loss"];
    EXPECT_NEAR(got, want, 1e-4 * std::abs(want)) << "step " << step;
    const double want_norm = norms.data<double>()[step - 1], got_norm = j["grad_norm"];
    EXPECT_NEAR(got_norm, want_norm, 1e-4 * std::abs(want_norm)) << "grad norm at step " << step;
    clipped += want_norm > 0.5;
    // Each MoE layer's max/mean expert load of the step (the same integers as the reference).
    for (int64_t l = 0; l < moe_layers; ++l) {
      const std::string key = "moe_load_max_over_mean_" + std::to_string(v.dense_layers + l);
      ASSERT_TRUE(j.contains(key)) << line;
      EXPECT_NEAR(j[key].get<double>(), balance.data<double>()[(step - 1) * moe_layers + l], 1e-9) << key;
    }
    ++n;
  }
  EXPECT_EQ(n, 10);
  EXPECT_GT(clipped, 0) << "clipping never active";
  const fs::path out = dir / "final_hf";
  cmd = tetra + " ckpt consolidate " + (runs / "ref" / "checkpoints" / "step_10").string() + " --format hf --out " +
        out.string() + " >> " + (dir / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << (dir / "train.log");
  std::unique_ptr<WeightSource> final_weights = open_weights(out.string());
  int checked = 0, biases = 0;
  for (const std::string& name : final_weights->names()) {
    Tensor got = final_weights->read_f32(name);
    Tensor want = ref.read("final/" + name, DType::F64);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    const double e = rel_err(got.data<float>(), want.data<double>(), want.numel());
    EXPECT_LT(e, 1e-4) << "final " << name << " relative error " << e;
    if (name.find("e_score_correction_bias") != std::string::npos) {
      ++biases;
      // The bias moved by ±rate per step: its values are the initial ones plus multiples of rate.
      double moved = 0;
      Tensor first = open_weights((dir / "hf").string())->read_f32(name);
      for (int64_t i = 0; i < got.numel(); ++i)
        moved = std::max(moved, std::abs(static_cast<double>(got.data<float>()[i] - first.data<float>()[i])));
      EXPECT_GT(moved, 0.5 * v.bias_rate) << name << " never moved";
    }
    ++checked;
  }
  EXPECT_EQ(biases, moe_layers);
  EXPECT_EQ(checked, expected_tensors(v, true));
}

// Recomputation changes what is kept, never the result: mlp and full equal none bit for bit.
TEST_P(MoeTorch, RecomputeGivesTheSameGradients) {
  const Variant& v = GetParam();
  std::vector<std::vector<float>> grads[3];
  double losses[3];
  const Recompute modes[3] = {Recompute::None, Recompute::Mlp, Recompute::Full};
  for (int m = 0; m < 3; ++m) {
    ReferenceRun run = run_reference_batch(v, modes[m]);
    losses[m] = run.loss_sum;
    for (Param* p : run.model->params())
      if (p->trainable) grads[m].emplace_back(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  }
  for (int m = 1; m < 3; ++m) {
    EXPECT_EQ(losses[m], losses[0]) << "mode " << m;
    ASSERT_EQ(grads[m].size(), grads[0].size());
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[m][i], grads[0][i]) << "mode " << m << " param " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeTorch, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });
