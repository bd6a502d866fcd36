// The whole Llama against an independent PyTorch implementation (float64) from the same Hugging
// Face-named weights (tests/models/llama_torch_reference.py), for grouped-query attention with
// n_kv_heads ∈ {1, 2, n_heads} and a tied and an untied output layer: the loss and every tensor's
// gradient to 1e-5 relative (the fused q/k/v and gate/up gradients compared per Hugging Face
// tensor); then 10 AdamW steps (warmup + cosine, clipping, weight decay) through `tetra train` to
// 1e-4 in loss, gradient norm and the final weights (read back from `tetra ckpt consolidate
// --format hf`). The weights enter through a consolidated HDF5 file or a Hugging Face folder.
// The families built from the same blocks run the same checks: qwen2 (random q/k/v biases, their
// gradients compared too), qwen3 (per-head q/k norms before RoPE, a head_dim of 12 with d_model 32
// and 4 heads, and one equal to d_model / n_heads) and mistral (a sliding window equal to the
// context: full attention).
// Rope scaling (linear, llama3; config.json's rope_scaling or transformers 5's rope_parameters) the
// same way, the llama3 folder's runs configured by model.init_from and seq_len alone, and its ten
// steps again at tp 2 and at pp 2 (under mpirun); its export writes rope_scaling back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "models/llama_model.h"
#include "models/rope_scaling.h"
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
  std::string arch = "llama";
  int64_t sliding_window = 0;  // mistral
  int64_t head_dim = 0;        // qwen3: model.head_dim (0: d_model / n_heads)
  RopeScalingArgs scaling{};
  bool rope_parameters = false;  // the folder spells it as transformers 5 does
  // The ten steps' model section is `{init_from: FOLDER, seq_len: 16}` (from_hf only): every shape key
  // from config.json.
  bool init_from_only = false;
};

const RopeScalingArgs kLlama3{.type = "llama3", .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                              .original_max_position_embeddings = 2048};
const RopeScalingArgs kLinear{.type = "linear", .factor = 4};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {{"kv1_untied_hf", 1, false, 10000.0, 1e-5, true},
                                         {"kv2_tied_h5", 2, true, 500000.0, 1e-6, false},
                                         {"kv4_untied_h5", 4, false, 10000.0, 1e-5, false},
                                         // theta 10000, head dim 8, original context 2048: wavelengths
                                         // 6.3 and 63 kept, 628 blended, 6283 divided by the factor.
                                         {"llama3_tied_hf", 2, true, 10000.0, 1e-5, true, "llama", 0, 0, kLlama3, false, true},
                                         {"llama3_untied_hf_v5", 1, false, 10000.0, 1e-5, true, "llama", 0, 0, kLlama3, true, true},
                                         {"linear_untied_h5", 2, false, 10000.0, 1e-5, false, "llama", 0, 0, kLinear},
                                         {"qwen2_kv2_untied_hf", 2, false, 1000000.0, 1e-6, true, "qwen2"},
                                         {"qwen2_kv1_tied_h5", 1, true, 10000.0, 1e-5, false, "qwen2"},
                                         {"qwen3_kv2_hd12_untied_hf", 2, false, 1000000.0, 1e-6, true, "qwen3", 0, 12},
                                         {"qwen3_kv4_hd8_tied_h5", 4, true, 10000.0, 1e-6, false, "qwen3", 0, 8},
                                         {"mistral_kv2_untied_hf", 2, false, 10000.0, 1e-5, true, "mistral", 16},
                                         {"mistral_kv4_tied_h5", 4, true, 10000.0, 1e-5, false, "mistral", 16}};
  return v;
}

LlamaConfig config_of(const Variant& v) {
  ModelArgs args = reference_llama_config().args();
  args.arch = v.arch;
  args.sliding_window = v.sliding_window;
  args.head_dim = v.head_dim;
  LlamaConfig c = LlamaConfig::from(args);
  c.n_kv_heads = v.kv_heads;
  c.rope_theta = static_cast<float>(v.rope_theta);
  c.norm_eps = static_cast<float>(v.eps);
  c.tie_embeddings = v.tied;
  c.rope_scaling = v.scaling;
  return c;
}

// The reference script's arguments for a variant's rope scaling.
std::string rope_args(const Variant& v) {
  const RopeScalingArgs& s = v.scaling;
  if (s.type == "none") return v.rope_parameters ? " --rope-parameters" : "";
  return " --rope-type " + s.type + " --rope-factor " + num(s.factor) +
         (s.type == "llama3" ? " --low-freq-factor " + num(s.low_freq_factor) + " --high-freq-factor " +
                                   num(s.high_freq_factor) + " --original-context " +
                                   std::to_string(s.original_max_position_embeddings)
                             : "") +
         (v.rope_parameters ? " --rope-parameters" : "");
}

// The ten steps' model: section.
std::string model_yaml(const Variant& v, const fs::path& dir) {
  const LlamaConfig c = config_of(v);
  const std::string source = (dir / (v.from_hf ? "hf" : "weights.h5")).string();
  if (v.init_from_only) return "model: {init_from: " + source + ", seq_len: 16}";
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", v.eps);
  std::ostringstream model;
  model << "model: {arch: " << v.arch << ", vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: "
        << c.n_kv_heads << ", ffn_dim: 48, rope_theta: " << num(v.rope_theta) << ", norm_eps: " << eps
        << ", tie_embeddings: " << (v.tied ? "true" : "false")
        << (v.sliding_window ? ", sliding_window: " + std::to_string(v.sliding_window) : std::string())
        << (v.head_dim ? ", head_dim: " + std::to_string(v.head_dim) : std::string()) << ", init_from: " << source;
  const RopeScalingArgs& s = v.scaling;
  if (s.type != "none")
    model << ", rope_scaling: {type: " << s.type << ", factor: " << num(s.factor)
          << (s.type == "llama3" ? ", low_freq_factor: " + num(s.low_freq_factor) + ", high_freq_factor: " +
                                       num(s.high_freq_factor) + ", original_max_position_embeddings: " +
                                       std::to_string(s.original_max_position_embeddings)
                                 : "")
          << "}";
  model << "}";
  return model.str();
}

// The reference of a variant, made once per test process.
const fs::path& reference_dir(const Variant& v) {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.17g", static_cast<double>(static_cast<float>(v.eps)));
  return torchref::reference_dir("llama", v.name,
                                 " --kv-heads " + std::to_string(v.kv_heads) + " --rope-theta " + num(v.rope_theta) +
                                     " --eps " + eps + (v.tied ? " --tied" : "") + " --arch " + v.arch +
                                     " --sliding-window " + std::to_string(v.sliding_window) + " --head-dim " +
                                     std::to_string(v.head_dim) + rope_args(v));
}

using LlamaRun = ReferenceRun<LlamaModel>;

// Hugging Face tensors of a variant: embedding; 9 per block (12 with qwen2's q/k/v biases, 11 with
// qwen3's q/k norms); norm; lm_head.
int tensors(const Variant& v) {
  return 1 + (v.arch == "qwen2" ? 12 : v.arch == "qwen3" ? 11 : 9) * 2 + 1 + (v.tied ? 0 : 1);
}

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
  EXPECT_EQ(checked, tensors(v));
}

TEST_P(LlamaTorch, TenAdamWStepsMatchLossNormAndFinalWeights) {
  const Variant& v = GetParam();
  const fs::path dir = reference_dir(v);
  int checked = 0;
  check_ten_steps(dir, model_yaml(v, dir), nullptr, nullptr, &checked);
  EXPECT_EQ(checked, tensors(v));
  if (v.scaling.type != "none") {
    // The export writes the rope scaling back, as Hugging Face spells it (transformers 4's rope_scaling).
    std::ifstream config(dir / "ref_hf" / "config.json");
    const nlohmann::json j = nlohmann::json::parse(config);
    EXPECT_EQ(j.at("rope_scaling"), rope_scaling_json(v.scaling)) << j.dump();
    EXPECT_EQ(j.at("rope_theta"), v.rope_theta);
  }
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

// What a family does not run is refused by name, never loaded as something else: a Qwen2 folder
// whose config.json turns on use_sliding_window, a Mistral folder whose window differs from
// model.sliding_window (a window shorter than the context is refused by validate, ModelFamily tests).
TEST(LlamaFamilies, FoldersWithSettingsTheModelDoesNotRunAreRefused) {
  auto load_error = [](const Variant& v, const std::string& key, const nlohmann::json& value) {
    const fs::path src = reference_dir(v) / "hf", dir = reference_dir(v) / ("hf_" + key);
    fs::create_directories(dir);
    fs::copy_file(src / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
    config[key] = value;
    std::ofstream(dir / "config.json") << config.dump(2);
    LlamaModel model(config_of(v));
    ParamSet params;
    params.build(model.params(), Device::cpu(), DType::F32, DType::F32);
    try {
      load_weights(*open_weights(dir.string()), model);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Variant& qwen2 = variants()[6];
  ASSERT_EQ(qwen2.arch, "qwen2");
  EXPECT_NE(load_error(qwen2, "use_sliding_window", true)
                .find("use_sliding_window is true in the file; tetra's qwen2 runs only use_sliding_window false"),
            std::string::npos);
  const Variant& mistral = variants()[10];
  ASSERT_EQ(mistral.arch, "mistral");
  EXPECT_NE(load_error(mistral, "sliding_window", 8)
                .find("sliding_window is 8 in the file, but model.sliding_window gives 16; set "
                      "model.sliding_window: 8"),
            std::string::npos);
  EXPECT_NE(load_error(mistral, "model_type", "llama").find("holds a llama model, but model.arch is mistral"),
            std::string::npos);
  const Variant& qwen3 = variants()[8];
  ASSERT_EQ(qwen3.arch, "qwen3");
  EXPECT_NE(load_error(qwen3, "attention_bias", true)
                .find("attention_bias is true in the file; tetra's qwen3 runs only attention_bias false"),
            std::string::npos);
  EXPECT_NE(load_error(qwen3, "head_dim", 16).find("head_dim is 16 in the file, but model.head_dim gives 12"),
            std::string::npos);
}

// The llama3 folder's ten steps at tp 2 and at pp 2 (two ranks each): the same losses, gradient norms
// and final weights as the reference.
TEST(LlamaTorchRopeScaling, TenStepsAtTp2AndPp2) {
  const Variant& v = variants()[3];
  ASSERT_EQ(v.name, "llama3_tied_hf");
  const fs::path dir = reference_dir(v);
  for (const char* parallel : {"tp", "pp"}) {
    SCOPED_TRACE(parallel);
    int checked = 0;
    check_ten_steps(dir, model_yaml(v, dir), nullptr, nullptr, &checked,
                    {.parallel = std::string("parallel: {") + parallel + ": 2}", .ranks = 2,
                     .name = std::string(parallel) + "2"});
    EXPECT_EQ(checked, 1 + 9 * 2 + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Gqa, LlamaTorch, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& i) { return i.param.name; });
