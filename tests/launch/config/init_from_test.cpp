// model.init_from a Hugging Face folder: config.json gives the model section (launch/config/init_from.h,
// models/hf_args.h). Only config.json is read here; the weights are the trainer's (tests/models).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "launch/config/config.h"
#include "launch/config/model.h"
#include "runtime/error.h"
#include "tests/launch/config/config_test_util.h"

namespace tetra::launch {
namespace {

using testing::TempDir;

// Llama 3.2 1B's config.json as the Hub has it (transformers 4 spelling).
const char* kLlama32 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
  "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "hidden_act": "silu"
})";

const std::string kRest = "train: {steps: 10, global_batch: 8}\ndata: {train: data/x.h5}\n";

// A folder with config.json `json` under the test's directory.
std::string folder(const TempDir& dir, const std::string& json, const std::string& name = "hf") {
  std::filesystem::create_directories(std::filesystem::path(dir.path()) / name);
  dir.write(name + "/config.json", json);
  return dir.path() + "/" + name;
}

std::string error_of(const std::function<void()>& f, ErrorKind kind = ErrorKind::Config) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(InitFromFolder, ConfigJsonIsTheModelSection) {
  TempDir dir;
  const std::string hf = folder(dir, kLlama32);
  Config c = load_config(dir.write("cfg.yaml", "model: {init_from: " + hf + ", seq_len: 4096}\n" + kRest));
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.vocab_size, 128256);
  EXPECT_EQ(c.model.d_model, 2048);
  EXPECT_EQ(c.model.n_layers, 16);
  EXPECT_EQ(c.model.n_heads, 32);
  EXPECT_EQ(c.model.n_kv_heads, 8);
  EXPECT_EQ(c.model.ffn_dim, 8192);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.rope_scaling.type, "llama3");
  EXPECT_EQ(c.model.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.model.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.model.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.model.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.model.seq_len, 4096);  // the YAML's: max_position_embeddings is not a training length
  EXPECT_EQ(c.train.seq_len, 4096);
  EXPECT_EQ(c.origins.where("model.n_layers"), hf + "/config.json (num_hidden_layers)");
  validate(c, 1);
  // The resolved config.yaml is complete: read back without the folder, the same experiment.
  std::filesystem::remove_all(hf);
  EXPECT_EQ(parse_config(to_yaml(c), "resolved.yaml"), c);
}

TEST(InitFromFolder, YamlKeysThatAgreeAreAcceptedOnesThatDifferNameBoth) {
  TempDir dir;
  const std::string hf = folder(dir, kLlama32);
  const std::string agree = "model:\n  arch: llama\n  init_from: " + hf +
                            "\n  seq_len: 128\n  n_layers: 16\n  rope_theta: 5.0e+5\n  rope_scaling: {type: llama3, "
                            "factor: 32}\n";
  EXPECT_EQ(load_config(dir.write("agree.yaml", agree + kRest)).model.n_layers, 16);
  const std::string differ = "model:\n  init_from: " + hf + "\n  seq_len: 128\n  n_layers: 4\n";
  const std::string e = error_of([&] { load_config(dir.write("cfg.yaml", differ + kRest)); });
  EXPECT_NE(e.find("cfg.yaml:4: model.n_layers: 4 here, but " + hf + "/config.json gives 16 (num_hidden_layers)"),
            std::string::npos) << e;
  const std::string scaling = "model:\n  init_from: " + hf + "\n  seq_len: 128\n  rope_scaling:\n    factor: 8\n";
  const std::string s = error_of([&] { load_config(dir.write("s.yaml", scaling + kRest)); });
  EXPECT_NE(s.find("s.yaml:5: model.rope_scaling.factor: 8 here, but " + hf + "/config.json gives 32 (rope_scaling)"),
            std::string::npos) << s;
  const std::string arch = "model:\n  arch: gpt2\n  init_from: " + hf + "\n  seq_len: 128\n";
  EXPECT_NE(error_of([&] { load_config(dir.write("a.yaml", arch + kRest)); }).find("model.arch: gpt2 here, but"),
            std::string::npos);
  // --set is checked the same way.
  const std::string set = error_of([&] {
    load_config(dir.write("o.yaml", "model: {init_from: " + hf + ", seq_len: 128}\n" + kRest), {"model.n_heads=16"});
  });
  EXPECT_NE(set.find("--set model.n_heads: 16 here, but"), std::string::npos) << set;
}

TEST(InitFromFolder, Gpt2SeqLenIsThePositionTable) {
  TempDir dir;
  const std::string hf = folder(dir, R"({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
    "n_ctx": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "layer_norm_epsilon": 1e-05,
    "tie_word_embeddings": true})");
  Config c = load_config(dir.write("cfg.yaml", "model: {init_from: " + hf + "}\n" + kRest));
  EXPECT_EQ(c.model.arch, "gpt2");
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.model.n_layers, 12);
  EXPECT_FALSE(c.model.tie_embeddings);  // not a gpt2 key: left at its default
  validate(c, 1);
  const std::string e = error_of(
      [&] { load_config(dir.write("c2.yaml", "model: {init_from: " + hf + ", seq_len: 2048}\n" + kRest)); });
  EXPECT_NE(e.find("model.seq_len: 2048 here, but " + hf + "/config.json gives 1024 (n_positions)"), std::string::npos)
      << e;
}

TEST(InitFromFolder, TransformersFiveRopeParameters) {
  TempDir dir;
  std::string json = kLlama32;
  auto replace = [&](const std::string& from, const std::string& to) { json.replace(json.find(from), from.size(), to); };
  replace("\"rope_theta\": 500000.0,", "");
  replace("\"rope_scaling\"", "\"rope_parameters\"");
  replace("\"rope_type\": \"llama3\"", "\"rope_type\": \"llama3\", \"rope_theta\": 500000.0");
  const std::string hf = folder(dir, json);
  Config c = load_config(dir.write("cfg.yaml", "model: {init_from: " + hf + ", seq_len: 64}\n" + kRest));
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.model.rope_scaling.type, "llama3");
  EXPECT_EQ(c.model.rope_scaling.factor, 32.0);
}

TEST(InitFromFolder, RefusedFolders) {
  TempDir dir;
  const std::string yarn = folder(dir, R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", "yarn");
  const std::string e = error_of(
      [&] { load_config(dir.write("y.yaml", "model: {init_from: " + yarn + ", seq_len: 64}\n" + kRest)); });
  EXPECT_NE(e.find(yarn + "/config.json: rope_scaling.rope_type is 'yarn'"), std::string::npos) << e;
  const std::string qwen = folder(dir, R"({"model_type": "falcon", "vocab_size": 64})", "falcon");
  EXPECT_NE(error_of([&] { load_config(dir.write("q.yaml", "model: {init_from: " + qwen + ", seq_len: 64}\n" + kRest)); })
                .find("model_type 'falcon' is not a family tetra has"),
            std::string::npos);
  const std::string missing = folder(dir, R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})", "m");
  EXPECT_NE(error_of([&] { load_config(dir.write("m.yaml", "model: {init_from: " + missing + ", seq_len: 64}\n" + kRest)); })
                .find("rope_scaling.low_freq_factor is missing"),
            std::string::npos);
  // No seq_len for a Llama: the one key config.json does not give.
  const std::string hf = folder(dir, kLlama32);
  EXPECT_NE(error_of([&] { load_config(dir.write("n.yaml", "model: {init_from: " + hf + "}\n" + kRest)); })
                .find("model.seq_len: missing required key; model.init_from's config.json does not give it"),
            std::string::npos);
  // A path that is not there: the shape is missing, and the message says why.
  EXPECT_NE(error_of([&] { load_config(dir.write("g.yaml", "model: {init_from: /no/such/dir, seq_len: 64}\n" + kRest)); })
                .find("model.init_from /no/such/dir is not a Hugging Face folder"),
            std::string::npos);
}

TEST(RopeScalingKeys, ForRunsFromScratch) {
  TempDir dir;
  const std::string model =
      "model: {arch: llama, vocab_size: 64, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 4, rope_scaling: "
      "{type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192}}\n";
  Config c = load_config(dir.write("cfg.yaml", model + kRest));
  validate(c, 1);
  EXPECT_EQ(model_args(c).rope_scaling.type, "llama3");
  EXPECT_EQ(load_config(dir.write("back.yaml", to_yaml(c))), c);
  Config bad = load_config(dir.write("bad.yaml", model + kRest), {"model.rope_scaling.high_freq_factor=0"});
  EXPECT_NE(error_of([&] { validate(bad, 1); }).find("model.rope_scaling.high_freq_factor: missing; type llama3 needs it"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_config(dir.write("t.yaml", model + kRest), {"model.rope_scaling.type=yarn"}); })
                .find("model.rope_scaling.type: yarn is not a valid choice"),
            std::string::npos);
  // A gpt2 model reads no rope_scaling key.
  Config gpt = load_config(dir.write("g.yaml", kRest + ("model: {vocab_size: 64, seq_len: 32, d_model: 32, "
                                                                    "n_layers: 2, n_heads: 4, rope_scaling: {type: linear, factor: 2}}\n")));
  EXPECT_NE(error_of([&] { validate(gpt, 1); }).find("not read by gpt2 models"), std::string::npos);
}

}  // namespace
}  // namespace tetra::launch
