// The whole Llama against an independent PyTorch implementation (float64) from the same Hugging
// Face-named weights (tests/models/llama_torch_reference.py), for grouped-query attention with
// n_kv_heads ∈ {1, 2, n_heads} and a tied and an untied output layer: the loss and every tensor's
// gradient to 1e-5 relative (the fused q/k/v and gate/up gradients compared per Hugging Face
// tensor); then 10 AdamW steps (warmup + cosine, clipping, weight decay) through `tetra train` to
// 1e-4 in loss, gradient norm and the final weights (read back from `tetra ckpt consolidate
// --format hf`). The weights enter through a consolidated HDF5 file or a Hugging Face folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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
  LlamaConfig c = reference_llama_config();
  c.n_kv_heads = v.kv_heads;
  c.rope_theta = static_cast<float>(v.rope_theta);
  c.norm_eps = static_cast<float>(v.eps);
  c.tie_embeddings = v.tied;
  return c;
}

// The reference of a variant, made once per test process.
const fs::path& reference_dir(const Variant& v) {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.17g", static_cast<double>(static_cast<float>(v.eps)));
  return torchref::reference_dir("llama", v.name,
                                 " --kv-heads " + std::to_string(v.kv_heads) + " --rope-theta " + num(v.rope_theta) +
                                     " --eps " + eps + (v.tied ? " --tied" : ""));
}

using LlamaRun = ReferenceRun<LlamaModel>;

// One forward and backward of the reference batch (4 windows of 17 tokens, stride 16).
LlamaRun run_reference_batch(const Variant& v, Recompute recompute = Recompute::None) {
  const fs::path dir = reference_dir(v);
  LlamaConfig cfg = config_of(v);
  cfg.recompute = recompute;
  return torchref::run_reference_batch<LlamaModel>(cfg, dir, dir / (v.from_hf ? "hf" : "weights.h5"),
                                                   /*no_notes=*/true);
}

class LlamaTorch : public ::testing::TestWithParam<Variant> {};

}  // namespace

namespace {
// gtest prints a variant by its name.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

}  // namespace

TEST_P(LlamaTorch, LossAndEveryGradientMatch) {
  const Variant& v = GetParam();
  LlamaRun run = run_reference_batch(v);
  int checked = 0;
  check_loss_and_gradients(reference_dir(v), run.batch, run.model->params(), &checked);
  EXPECT_EQ(checked, 1 + 9 * 2 + 1 + (v.tied ? 0 : 1));  // embedding; 9 per block; norm; lm_head
}

TEST_P(LlamaTorch, TenAdamWStepsMatchLossNormAndFinalWeights) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  const LlamaConfig c = config_of(v);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", v.eps);
  std::ostringstream model;
  model << "model: {arch: llama, vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: "
        << c.n_kv_heads << ", ffn_dim: 48, rope_theta: " << num(v.rope_theta) << ", norm_eps: " << eps
        << ", tie_embeddings: " << (v.tied ? "true" : "false") << ", init_from: "
        << (dir / (v.from_hf ? "hf" : "weights.h5")).string() << "}";
  int checked = 0;
  check_ten_steps(dir, model.str(), nullptr, nullptr, &checked);
  EXPECT_EQ(checked, 1 + 9 * 2 + 1 + (v.tied ? 0 : 1));
}

// Recomputation changes what is kept, never the result: mlp and full equal none bit for bit.
// Generation with the key/value cache continues the reference's prompt as the float64 reference
// does greedily, token for token.
TEST_P(LlamaTorch, GreedyGenerationMatches) {
  LlamaRun run = run_reference_batch(GetParam());
  expect_reference_greedy(*run.model, reference_dir(GetParam()));
}

TEST_P(LlamaTorch, RecomputeGivesTheSameGradients) {
  const Variant& v = GetParam();
  std::vector<LlamaRun> runs;
  for (Recompute mode : {Recompute::None, Recompute::Mlp, Recompute::Full})
    runs.push_back(run_reference_batch(v, mode));
  expect_bitwise_equal(runs);
}

INSTANTIATE_TEST_SUITE_P(Gqa, LlamaTorch, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });
