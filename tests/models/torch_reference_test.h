// What the model-versus-PyTorch tests share (llama_torch_test and moe_torch_test; gpt_torch_test
// the error measure): the reference folder a script in tests/model writes (weights, tokens.h5,
// ref.h5), the reference batch forward and backward through a model, every gradient against the
// reference's, and ten steps of `tetra train` against its losses, gradient norms and final weights.
// CPU, fp32 against float64.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/generation.h"
#include "models/layer.h"
#include "models/llama_config.h"
#include "models/stored_tensors.h"
#include "models/weight_source.h"
#include "parallel/param.h"
#include "parallel/param_set.h"
#include "runtime/hdf5_file.h"
#include "runtime/ops.h"

namespace tetra::torchref {

namespace fs = std::filesystem;

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

// The reference of variant `name`, made once per test process by tests/models/SCRIPT_torch_reference.py
// with `args` into a temporary tetra_SCRIPT_ref_PID_NAME (its output beside it, .log).
inline const fs::path& reference_dir(const std::string& script, const std::string& name, const std::string& args) {
  static ReferenceDirs made;
  auto it = made.dirs.find(name);
  if (it != made.dirs.end()) return it->second;
  fs::path d = fs::temp_directory_path() / ("tetra_" + script + "_ref_" + std::to_string(::getpid()) + "_" + name);
  const std::string cmd = std::string(TETRA_PYTHON) + " " + TETRA_SOURCE_DIR + "/tests/models/" + script +
                          "_torch_reference.py " + d.string() + args + " > " + d.string() + ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "reference script failed: " << cmd;
  return made.dirs.emplace(name, d).first->second;
}

// The Llama both reference scripts build (before a variant's changes): a vocabulary of 96, 16
// tokens, d_model 32, 2 layers of 4 heads, an MLP of 48.
inline LlamaConfig reference_llama_config() {
  LlamaConfig c{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4, .ffn_dim = 48};
  return c;
}

// A double as the reference script reads it back exactly.
inline std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// ‖a − b‖ / ‖b‖ over n values.
inline double rel_err(const float* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// The reference's greedy continuation (ref.h5 greedy: a prompt of 5 ids, then 8 ids, each the float64
// argmax over the whole sequence recomputed) by `model`'s generation with the key/value cache (fp32,
// CPU). The references' random weights (std 0.05–0.5) spread the logits far more than fp32 rounding, so
// no argmax flips between the two.
inline void expect_reference_greedy(Model& model, const fs::path& dir) {
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  const Tensor g = ref.read("greedy", DType::I32);
  const std::vector<int32_t> all(g.data<int32_t>(), g.data<int32_t>() + g.numel());
  ASSERT_EQ(all.size(), 13u);
  const std::vector<int32_t> prompt(all.begin(), all.begin() + 5), want(all.begin() + 5, all.end());
  GenerationOptions options;
  options.max_new_tokens = static_cast<int64_t>(want.size());
  EXPECT_EQ(generate(model, prompt, 16, options, Device::cpu(), DType::F32), want);
}

struct BatchLoss {
  double loss_sum = 0.0;  // Σ per-token losses + the balance losses in the same units
  int64_t tokens = 0;
  bool aux_loss = false;  // the model produced a balance loss
};

// One forward and backward of the reference batch (4 windows of 17 tokens of DIR/tokens.h5, stride
// 16) through `layers`, whose gradients the caller has zeroed.
inline BatchLoss forward_backward(const std::vector<Layer*>& layers, const fs::path& dir) {
  Hdf5File tokens((dir / "tokens.h5").string(), Hdf5File::Mode::Read);
  Tensor all = tokens.read("tokens", DType::I32);
  const int64_t B = 4, T = 16;
  std::vector<int32_t> ids(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    ids[i] = all.data<int32_t>()[i];
    tgt[i] = all.data<int32_t>()[i + 1];
  }
  MicroBatchContext ctx(Device::cpu(), DType::F32);
  ctx.batch = B;
  ctx.seq_len = T;
  ctx.ids = Tensor::from_vector(ids, {B, T});
  ctx.targets = Tensor::from_vector(tgt, {B, T});
  ctx.loss_grad_scale = 1.0f / static_cast<float>(B * T);
  Tensor x = ctx.ids;
  for (Layer* l : layers) x = l->forward(ctx, x);
  BatchLoss r;
  r.aux_loss = ctx.aux_loss.defined();
  r.loss_sum = ops::sum_to_host(ctx.losses) + (r.aux_loss ? ops::sum_to_host(ctx.aux_loss) : 0.0);
  r.tokens = B * T;
  Tensor dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    dy = (*it)->backward_input(ctx, dy);
    (*it)->backward_weight(ctx);
  }
  return r;
}

// A fresh model (its parameters fp32 on the CPU) with the reference weights of `source` (a
// consolidated HDF5 file or a Hugging Face folder), after one forward and backward of the reference
// batch.
template <class M>
struct ReferenceRun {
  std::unique_ptr<M> model;
  std::unique_ptr<ParamSet> params;  // owns the gradients the model's Params point into
  BatchLoss batch;
};

// no_notes: loading must not leave notes either (names it did not know are always an error).
template <class M, class Config>
ReferenceRun<M> run_reference_batch(const Config& cfg, const fs::path& dir, const fs::path& source, bool no_notes) {
  ReferenceRun<M> run;
  run.model = std::make_unique<M>(cfg);
  run.params = std::make_unique<ParamSet>();
  run.params->build(run.model->params(), Device::cpu(), DType::F32, DType::F32);
  LoadReport loaded = load_weights(*open_weights(source.string()), *run.model);
  EXPECT_TRUE(loaded.unexpected.empty()) << loaded.unexpected.front();
  if (no_notes) {
    EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();
  }
  run.params->zero_grads();
  run.batch = forward_backward(run.model->layers(), dir);
  return run;
}

// Recomputation changes what is kept, never the result: each run's loss and trainable gradients
// equal the first run's bit for bit.
template <class M>
void expect_bitwise_equal(const std::vector<ReferenceRun<M>>& runs) {
  auto grads = [](const ReferenceRun<M>& r) {
    std::vector<std::vector<float>> g;
    for (Param* p : r.model->params())
      if (p->trainable) {
        const float* v = p->grad.data<float>();
        g.emplace_back(v, v + p->grad.numel());
      }
    return g;
  };
  const std::vector<std::vector<float>> first = grads(runs[0]);
  for (size_t m = 1; m < runs.size(); ++m) {
    EXPECT_EQ(runs[m].batch.loss_sum, runs[0].batch.loss_sum) << "mode " << m;
    const std::vector<std::vector<float>> g = grads(runs[m]);
    ASSERT_EQ(g.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(g[i], first[i]) << "mode " << m << " param " << i;
  }
}

// The loss of the reference batch against loss0 of DIR/ref.h5 (1e-5 relative) and the gradient of
// every stored tensor of the trainable params against grad/NAME (1e-5 relative); *checked: how many
// tensors were compared.
inline void check_loss_and_gradients(const fs::path& dir, const BatchLoss& batch, const std::vector<Param*>& params,
                                     int* checked) {
  const double loss = batch.loss_sum / static_cast<double>(batch.tokens);
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  const double loss_ref = ref.read("loss0", DType::F64).data<double>()[0];
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));
  *checked = 0;
  for (Param* p : params) {
    if (!p->trainable) continue;
    Tensor grad = Tensor::empty(p->full_shape, DType::F32);
    ops::copy(grad, p->grad);
    for (const StoredTensor& t : stored_tensors(*p)) {
      Tensor g = ref.read("grad/" + t.name, DType::F64);
      Tensor mine = to_stored(t, grad);
      ASSERT_EQ(mine.shape(), g.shape()) << t.name;
      const double e = rel_err(mine.data<float>(), g.data<double>(), g.numel());
      EXPECT_LT(e, 1e-5) << t.name << " relative error " << e;
      ++*checked;
    }
  }
}

// How check_ten_steps launches `tetra train`: the config's parallel: line, the ranks (more than one
// under mpirun) and the run's name (its directory under DIR/runs, its export DIR/NAME_hf).
struct TenStepsLaunch {
  std::string parallel = "parallel: {dp: 1}";
  int ranks = 1;
  std::string name = "ref";
};

// Ten AdamW steps (warmup + cosine, clipping at 0.5, weight decay) of `tetra train` on DIR/tokens.h5
// with `model_yaml` (the config's model: line), then `tetra ckpt consolidate --format hf` of the last
// checkpoint: each step's loss and gradient norm against losses / grad_norms of DIR/ref.h5 (1e-4
// relative; clipping must be active at some step) and each final tensor against final/NAME (1e-4
// relative). on_step sees each metrics line, on_final each final tensor (name, value); *checked: how
// many final tensors were compared.
inline void check_ten_steps(const fs::path& dir, const std::string& model_yaml,
                            const std::function<void(const nlohmann::json& line)>& on_step,
                            const std::function<void(const std::string& name, const Tensor& got)>& on_final,
                            int* checked, const TenStepsLaunch& launch = {}) {
  *checked = 0;
  const fs::path runs = dir / "runs", cfg = dir / (launch.name + ".yaml"), log = dir / (launch.name + ".log");
  std::ofstream(cfg) << "run: {name: " << launch.name << ", output_dir: " << runs.string() << ", seed: 1}\n"
                     << model_yaml << "\n" << launch.parallel << R"(
train: {steps: 10, global_batch: 4, micro_batch: 2, device: cpu, precision: fp32, grad_clip: 0.5}
optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: 3, schedule: cosine, min_lr: 3.0e-4}
data: {train: )" << (dir / "tokens.h5").string() << R"(, shuffle: false}
checkpoint: {every: 10}
log: {every: 100}
)";
  const std::string tetra = std::getenv("TETRA_BIN") ? std::getenv("TETRA_BIN") : TETRA_BINARY_DIR "/tetra";
  std::string cmd = tetra + " train " + cfg.string() + " > " + log.string() + " 2>&1";
#ifdef TETRA_MPIRUN
  if (launch.ranks > 1)
    cmd = std::string(TETRA_MPIRUN) + " --oversubscribe --bind-to none -np " + std::to_string(launch.ranks) + " " + cmd;
#else
  ASSERT_EQ(launch.ranks, 1) << "this test was built without TETRA_MPIRUN";
#endif
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << log;
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  Tensor losses = ref.read("losses", DType::F64), norms = ref.read("grad_norms", DType::F64);
  std::ifstream metrics(runs / launch.name / "metrics.jsonl");
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
    if (on_step) on_step(j);
    ++n;
  }
  EXPECT_EQ(n, 10);
  EXPECT_GT(clipped, 0) << "clipping never active";
  // The final weights, through the Hugging Face export of the last checkpoint.
  const fs::path out = dir / (launch.name + "_hf");
  cmd = tetra + " ckpt consolidate " + (runs / launch.name / "checkpoints" / "step_10").string() +
        " --format hf --out " + out.string() + " >> " + log.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << log;
  std::unique_ptr<WeightSource> final_weights = open_weights(out.string());
  for (const std::string& name : final_weights->names()) {
    Tensor got = final_weights->read_f32(name);
    Tensor want = ref.read("final/" + name, DType::F64);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    const double e = rel_err(got.data<float>(), want.data<double>(), want.numel());
    EXPECT_LT(e, 1e-4) << "final " << name << " relative error " << e;
    if (on_final) on_final(name, got);
    ++*checked;
  }
}

}  // namespace tetra::torchref
