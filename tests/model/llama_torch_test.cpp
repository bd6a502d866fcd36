// The whole Llama against an independent PyTorch implementation (float64) from the same Hugging
// Face-named weights (tests/model/llama_torch_reference.py), for grouped-query attention with
// n_kv_heads ∈ {1, 2, n_heads} and a tied and an untied output layer: the loss and every tensor's
// gradient to 1e-5 relative (the fused q/k/v and gate/up gradients compared per Hugging Face
// tensor); then 10 AdamW steps (warmup + cosine, clipping, weight decay) through `tetra train` to
// 1e-4 in loss, gradient norm and the final weights (read back from `tetra ckpt consolidate
// --format hf`). The weights enter through a consolidated HDF5 file or a Hugging Face folder.
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
  int64_t kv_heads;
  bool tied;
  double rope_theta;
  double eps;
  bool from_hf;  // load the weights from the Hugging Face folder (else the HDF5 file)
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {{"kv1_untied_hf", 1, false, 10000.0, 1e-5, true},
                                         {"kv2_tied_h5", 2, true, 500000.0, 1e-6, false},
                                         {"kv4_untied_h5", 4, false, 10000.0, 1e-5, false}};
  return v;
}

LlamaConfig config_of(const Variant& v) {
  LlamaConfig c;
  c.vocab_size = 96;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = v.kv_heads;
  c.ffn_dim = 48;
  c.rope_theta = static_cast<float>(v.rope_theta);
  c.norm_eps = static_cast<float>(v.eps);
  c.tie_embeddings = v.tied;
  return c;
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

// The reference of a variant, made once per test process.
const fs::path& reference_dir(const Variant& v) {
  static ReferenceDirs made;
  auto& dirs = made.dirs;
  auto it = dirs.find(v.name);
  if (it != dirs.end()) return it->second;
  fs::path d = fs::temp_directory_path() / ("tetra_llama_ref_" + std::to_string(::getpid()) + "_" + v.name);
  char theta[32], eps[32];
  std::snprintf(theta, sizeof theta, "%.17g", v.rope_theta);
  std::snprintf(eps, sizeof eps, "%.17g", static_cast<double>(static_cast<float>(v.eps)));
  std::string cmd = std::string(TETRA_PYTHON) + " " + TETRA_SOURCE_DIR + "/tests/model/llama_torch_reference.py " +
                    d.string() + " --kv-heads " + std::to_string(v.kv_heads) + " --rope-theta " + theta + " --eps " +
                    eps + (v.tied ? " --tied" : "") + " > " + d.string() + ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "reference script failed: " << cmd;
  return dirs.emplace(v.name, d).first->second;
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
  double loss_sum = 0.0;
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
  EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();
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
  run.loss_sum = ops::sum_to_host(ctx.losses);
  run.tokens = B * T;
  Tensor dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    dy = (*it)->backward_input(ctx, dy);
    (*it)->backward_weight(ctx);
  }
  return run;
}

class LlamaTorch : public ::testing::TestWithParam<Variant> {};

}  // namespace

namespace {
// gtest prints a variant by its name.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

}  // namespace

TEST_P(LlamaTorch, LossAndEveryGradientMatch) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  ReferenceRun run = run_reference_batch(v);
  const double loss = run.loss_sum / static_cast<double>(run.tokens);
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  const double loss_ref = ref.read("loss0", DType::F64).data<double>()[0];
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));
  int checked = 0;
  for (Param* p : run.model->params()) {
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
  EXPECT_EQ(checked, 1 + 9 * 2 + 1 + (v.tied ? 0 : 1));  // embedding; 9 per block; norm; lm_head
}

TEST_P(LlamaTorch, TenAdamWStepsMatchLossNormAndFinalWeights) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  const fs::path runs = dir / "runs";
  const LlamaConfig c = config_of(v);
  char theta[32], eps[32];
  std::snprintf(theta, sizeof theta, "%.17g", v.rope_theta);
  std::snprintf(eps, sizeof eps, "%.9g", v.eps);
  std::ofstream(dir / "cfg.yaml") << "run: {name: ref, output_dir: " << runs.string() << ", seed: 1}\n"
                                  << "model: {arch: llama, vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, "
                                     "n_heads: 4, n_kv_heads: "
                                  << c.n_kv_heads << ", ffn_dim: 48, rope_theta: " << theta << ", norm_eps: " << eps
                                  << ", tie_embeddings: " << (v.tied ? "true" : "false") << ", init_from: "
                                  << (dir / (v.from_hf ? "hf" : "weights.h5")).string() << R"(}
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
    ++n;
  }
  EXPECT_EQ(n, 10);
  EXPECT_GT(clipped, 0) << "clipping never active";
  // The final weights, through the Hugging Face export of the last checkpoint.
  const fs::path out = dir / "final_hf";
  cmd = tetra + " ckpt consolidate " + (runs / "ref" / "checkpoints" / "step_10").string() + " --format hf --out " +
        out.string() + " >> " + (dir / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << (dir / "train.log");
  std::unique_ptr<WeightSource> final_weights = open_weights(out.string());
  int checked = 0;
  for (const std::string& name : final_weights->names()) {
    Tensor got = final_weights->read_f32(name);
    Tensor want = ref.read("final/" + name, DType::F64);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    const double e = rel_err(got.data<float>(), want.data<double>(), want.numel());
    EXPECT_LT(e, 1e-4) << "final " << name << " relative error " << e;
    ++checked;
  }
  EXPECT_EQ(checked, 1 + 9 * 2 + 1 + (v.tied ? 0 : 1));
}

// Recomputation changes what is kept, never the result: mlp and full equal none bit for bit.
TEST_P(LlamaTorch, RecomputeGivesTheSameGradients) {
  const Variant& v = GetParam();
  std::vector<std::vector<float>> grads[3];
  double losses[3];
  const Recompute modes[3] = {Recompute::None, Recompute::Mlp, Recompute::Full};
  for (int m = 0; m < 3; ++m) {
    ReferenceRun run = run_reference_batch(v, modes[m]);
    losses[m] = run.loss_sum;
    for (Param* p : run.model->params())
      grads[m].emplace_back(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  }
  for (int m = 1; m < 3; ++m) {
    EXPECT_EQ(losses[m], losses[0]) << "mode " << m;
    ASSERT_EQ(grads[m].size(), grads[0].size());
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[m][i], grads[0][i]) << "mode " << m << " param " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Gqa, LlamaTorch, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });
