// Good configs: values, defaults, overrides, derived sizes, the to_yaml round trip, and the
// shipped configs/ files.
#include <gtest/gtest.h>

#include <algorithm>

#include <functional>

#include "launch/config/config.h"
#include "launch/config/schema.h"
#include "launch/train/memory_plan.h"
#include "launch/config/model.h"
#include "runtime/error.h"
#include "tests/launch/config/config_test_util.h"

namespace tetra::launch {
namespace {

using testing::edit;
using testing::kBase;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Config, ParsesValuesAndLines) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase));
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.seq_len, 64);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.train.steps, 100);
  EXPECT_EQ(c.train.global_batch, 8);
  EXPECT_EQ(c.train.micro_batch, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.warmup_steps, 10);
  EXPECT_EQ(c.data.train, "data/x.h5");
  // Where each key came from.
  EXPECT_EQ(c.origins.line.at("train.steps"), 12);
  EXPECT_EQ(c.origins.line.at("train"), 11);
  EXPECT_EQ(c.origins.line.at("data.train"), 19);
  EXPECT_TRUE(c.origins.given("model.n_heads"));
  EXPECT_FALSE(c.origins.given("train.grad_clip"));
  EXPECT_EQ(c.origins.where("train.steps"), dir.path() + "/cfg.yaml:12");
  EXPECT_EQ(c.origins.where("train.grad_clip"), dir.path() + "/cfg.yaml");
}

TEST(Config, DefaultsAreFilledIn) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase));
  EXPECT_EQ(c.run.name, "tetra");
  EXPECT_EQ(c.run.output_dir, "runs");
  EXPECT_EQ(c.run.seed, 1234);
  EXPECT_DOUBLE_EQ(c.run.comm_timeout_s, 600);
  EXPECT_TRUE(c.run.html_report);
  EXPECT_EQ(c.model.arch, "gpt2");
  EXPECT_EQ(c.model.init_from, "");
  EXPECT_DOUBLE_EQ(c.model.ln_eps, 1e-5);
  EXPECT_EQ(c.parallel.tp, 1);
  EXPECT_EQ(c.parallel.pp, 1);
  EXPECT_EQ(c.parallel.ep, 1);
  EXPECT_EQ(c.parallel.zero_stage, 0);
  EXPECT_EQ(c.parallel.fsdp_prefetch, 1);
  EXPECT_EQ(c.parallel.schedule, PipelineSchedule::OneFOneB);
  EXPECT_EQ(c.parallel.micro_batches, 0);
  EXPECT_TRUE(c.parallel.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 25);
  EXPECT_EQ(c.train.seq_len, 64);  // from model.seq_len
  EXPECT_EQ(c.train.precision, DtypeChoice::Auto);
  EXPECT_EQ(c.train.device, DeviceChoice::Auto);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 1.0);
  EXPECT_EQ(c.train.eval_every, 0);
  EXPECT_EQ(c.train.recompute, Recompute::None);
  EXPECT_EQ(c.train.on_nonfinite, OnNonfinite::Skip);
  EXPECT_FALSE(c.train.cuda_graphs);
  EXPECT_EQ(c.optimizer.name, OptimizerName::AdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.optimizer.schedule, LrDecay::Cosine);
  EXPECT_DOUBLE_EQ(c.optimizer.min_lr, 0);
  EXPECT_EQ(c.data.val, "");
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.prefetch, 4);
  EXPECT_EQ(c.data.io, DataIo::Auto);
  EXPECT_EQ(c.data.loader_threads, 2);
  EXPECT_EQ(c.checkpoint.every, 0);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.checkpoint.resume.text(), "none");
  EXPECT_FALSE(c.checkpoint.async);
  EXPECT_EQ(c.log.every, 1);
  EXPECT_DOUBLE_EQ(c.log.peak_tflops, 0);
  EXPECT_EQ(c.log.profile_steps, 0);
  EXPECT_FALSE(c.log.tensorboard);
}

TEST(Config, EveryKindOfValueParses) {
  testing::TempDir dir;
  std::string yaml = std::string(kBase) +
                     "  val: \"data/my val.h5\"\n"
                     "  shuffle: no\n"
                     "  io: posix\n"
                     "run:\n"
                     "  name: 'exp #1'\n"
                     "  seed: +42\n"
                     "  comm_timeout_s: 30\n"
                     "checkpoint:\n"  // an empty section: all defaults
                     "log:\n"
                     "  peak_tflops: 989.5\n";
  Config c = load_config(dir.write("cfg.yaml", yaml));
  EXPECT_EQ(c.data.val, "data/my val.h5");
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.io, DataIo::Posix);
  EXPECT_EQ(c.run.name, "exp #1");
  EXPECT_EQ(c.run.seed, 42);
  EXPECT_DOUBLE_EQ(c.run.comm_timeout_s, 30);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_DOUBLE_EQ(c.log.peak_tflops, 989.5);
}

TEST(Config, OverridesNestedKeysListsAndStrings) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase),
                         {"train.steps=7", "optimizer.betas=[0.8, 0.99]", "parallel.schedule=gpipe",
                          "optimizer.lr=3e-4", "data.shuffle=false", "run.name=override run", "train.steps=19",
                          "data.val=", "checkpoint.resume=auto", "log.peak_tflops=100"});
  EXPECT_EQ(c.train.steps, 19);  // the last --set of a key wins
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.99);
  EXPECT_EQ(c.parallel.schedule, PipelineSchedule::GPipe);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.run.name, "override run");
  EXPECT_EQ(c.data.val, "");
  EXPECT_EQ(c.checkpoint.resume.text(), "auto");
  EXPECT_DOUBLE_EQ(c.log.peak_tflops, 100);
  EXPECT_EQ(c.origins.where("train.steps"), "--set train.steps");
  EXPECT_EQ(c.origins.where("optimizer.betas"), "--set optimizer.betas");
  EXPECT_TRUE(c.origins.given("log.peak_tflops"));
  // Overrides show in the resolved config.
  std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("  steps: 19\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  betas: [0.8, 0.99]\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  name: \"override run\"\n"), std::string::npos) << yaml;
  EXPECT_NO_THROW(validate(c, 2));
}

TEST(Config, OverrideThroughAnAliasChangesOnlyItsKey) {
  // model.d_model anchors the value that train.steps aliases: a --set of either key leaves the
  // other as written.
  testing::TempDir dir;
  std::string text = edit("  d_model: 64", "  d_model: &dm 64");
  text = edit("  steps: 100", "  steps: *dm", text);
  Config c = load_config(dir.write("cfg.yaml", text), {"train.steps=32"});
  EXPECT_EQ(c.train.steps, 32);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.origins.where("model.d_model"), dir.path() + "/cfg.yaml:4");
  Config d = load_config(dir.write("cfg2.yaml", text), {"model.d_model=128"});
  EXPECT_EQ(d.model.d_model, 128);
  EXPECT_EQ(d.train.steps, 64);
}

TEST(Config, OverrideFixesAnInvalidFile) {
  // Overrides are applied before validation: a file that is wrong alone may be right with --set.
  testing::TempDir dir;
  std::string path = dir.write("cfg.yaml", edit("  steps: 100", "  steps: ten"));
  EXPECT_THROW(load_config(path), Error);
  Config c = load_config(path, {"train.steps=50"});
  EXPECT_EQ(c.train.steps, 50);
  Config d = load_config(dir.write("cfg2.yaml", kBase), {"parallel.dp=1"});
  EXPECT_NE(message_of([&] { validate(d, 2); }).find("--set parallel.dp: dp·tp·pp = 1·1·1 = 1 but the job has 2 ranks"),
            std::string::npos);
}

// Blockwise FP8 with routed experts runs on a GPU where the experts' GEMMs are whole 128×128 weight
// blocks (config_errors_test has the refusal otherwise).
TEST(Config, BlockwiseFp8WithRoutedExpertsOnAGpuTakesWholeBlocks) {
  testing::TempDir dir;
  const std::string moe = edit("model:", "model:\n  arch: llama\n  moe:\n    n_experts: 8\n    top_k: 2\n    ffn_dim: 256");
  Config c = load_config(dir.write("cfg.yaml", moe),
                         {"model.d_model=128", "train.fp8.recipe=blockwise", "train.device=cuda"});
  EXPECT_NO_THROW(validate(c, 2));
  Config d = load_config(dir.write("cfg2.yaml", moe),
                         {"model.d_model=128", "model.moe.ffn_dim=320", "train.fp8.recipe=blockwise", "train.device=cuda"});
  EXPECT_NE(message_of([&] { validate(d, 2); }).find("(model.moe.ffn_dim: 320) must be multiples of 128"),
            std::string::npos);
}

TEST(Config, TrainSeqLenMayBeShorter) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase), {"train.seq_len=32"});
  EXPECT_EQ(c.train.seq_len, 32);
  EXPECT_EQ(c.model.seq_len, 64);
  EXPECT_NO_THROW(validate(c, 2));
  Config d = load_config(dir.write("cfg2.yaml", kBase), {"model.seq_len=128"});
  EXPECT_EQ(d.train.seq_len, 128);  // follows model.seq_len when not given
}

TEST(Config, DerivedDataParallelSize) {
  testing::TempDir dir;
  std::string yaml = edit("  dp: 2", "  dp: 0");
  Config c = load_config(dir.write("cfg.yaml", yaml), {"train.global_batch=16"});
  for (int world : {1, 2, 4, 8}) {
    EXPECT_NO_THROW(validate(c, world)) << world;
    EXPECT_EQ(data_parallel_size(c.parallel, world), world);
    Config r = resolve(c, world, false);
    EXPECT_EQ(r.parallel.dp, world);
    EXPECT_EQ(r.parallel.micro_batches, 16 / (world * 2));
    EXPECT_EQ(r.resolved.dp, world);
    EXPECT_EQ(r.resolved.accumulation_steps, 16 / (world * 2));
  }
  Config t = load_config(dir.write("cfg2.yaml", yaml), {"parallel.tp=2", "parallel.pp=2", "train.global_batch=16"});
  EXPECT_EQ(resolve(t, 8, false).parallel.dp, 2);
  EXPECT_EQ(resolve(t, 4, false).parallel.dp, 1);
  EXPECT_THROW(validate(t, 6), Error);  // 6 ranks do not hold a 2·2 mesh a whole number of times
  EXPECT_THROW(validate(t, 2), Error);
}

TEST(Config, ResolveDeviceAndPrecision) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase));
  Config cpu = resolve(c, 2, false);
  EXPECT_EQ(cpu.train.device, DeviceChoice::Cpu);
  EXPECT_EQ(cpu.train.precision, DtypeChoice::FP32);
  Config gpu = resolve(c, 2, true);
  EXPECT_EQ(gpu.train.device, DeviceChoice::Cuda);
  EXPECT_EQ(gpu.train.precision, DtypeChoice::BF16);
  Config fp32 = resolve(load_config(dir.write("c2.yaml", kBase), {"train.precision=fp32"}), 2, true);
  EXPECT_EQ(fp32.train.precision, DtypeChoice::FP32);
  // The same, typed, in `resolved`; a Config that resolve() did not return has none of it.
  EXPECT_FALSE(c.resolved.done);
  EXPECT_TRUE(cpu.resolved.done);
  EXPECT_EQ(cpu.resolved.device, DeviceKind::CPU);
  EXPECT_EQ(cpu.resolved.activation_dtype, DType::F32);
  EXPECT_EQ(cpu.resolved.residual_dtype, DType::F32);
  EXPECT_EQ(gpu.resolved.device, DeviceKind::CUDA);
  EXPECT_EQ(gpu.resolved.activation_dtype, DType::BF16);
  EXPECT_EQ(gpu.resolved.residual_dtype, DType::BF16);
  EXPECT_EQ(fp32.resolved.device, DeviceKind::CUDA);
  EXPECT_EQ(fp32.resolved.activation_dtype, DType::F32);

  Config want_gpu = load_config(dir.write("c3.yaml", kBase), {"train.device=cuda"});
  EXPECT_NO_THROW(validate(want_gpu, 2));  // validate needs no GPU
  std::string msg = message_of([&] { resolve(want_gpu, 2, false); });
  EXPECT_NE(msg.find("--set train.device: cuda, but no GPU is visible"), std::string::npos) << msg;
  Config graphs = load_config(dir.write("c4.yaml", kBase), {"train.cuda_graphs=true"});
  msg = message_of([&] { resolve(graphs, 2, false); });
  EXPECT_NE(msg.find("train.cuda_graphs: true, but train.device = auto found no GPU"), std::string::npos) << msg;
  EXPECT_EQ(resolve(graphs, 2, true).train.cuda_graphs, true);
}

TEST(Config, RoundTripThroughYaml) {
  testing::TempDir dir;
  // Every key away from its default, strings that YAML would misread unquoted.
  std::vector<std::string> sets = {
      "run.name=\"null\"", "run.output_dir=\"out dir/with: colon #hash\"", "run.seed=987654321012",
      "run.comm_timeout_s=0.1", "run.html_report=false", "model.init_from=\"it's \\\"quoted\\\"\\ttab\"", "model.ln_eps=1e-6",
      "parallel.dp=1", "parallel.tp=2", "parallel.zero_stage=3", "parallel.fsdp_prefetch=2",
      "parallel.schedule=zb_h1", "parallel.stage_layers=[3, 1]", "parallel.overlap_grad_reduce=false", "parallel.bucket_mb=12.5",
      "train.seq_len=48", "train.precision=fp32", "train.device=cpu", "train.grad_clip=0", "train.eval_every=5",
      "train.eval_batches=3", "train.recompute=mlp", "train.on_nonfinite=stop", "train.max_skipped_steps.consecutive=3",
      "train.max_skipped_steps.fraction=0.25", "optimizer.lr=0.1",
      "optimizer.betas=[0.85, 0.999]", "optimizer.eps=1.0e-12", "optimizer.weight_decay=0.01",
      "optimizer.schedule=linear", "optimizer.min_lr=1e-5", "data.val=\"true\"", "data.shuffle=false",
      "data.prefetch=0", "data.io=pinned", "data.loader_threads=3", "checkpoint.every=10", "checkpoint.keep=0",
      "checkpoint.resume=runs/x/checkpoints/step_10", "checkpoint.async=true", "log.every=5",
      "log.peak_tflops=312", "log.profile_steps=3", "log.tensorboard=true"};
  Config c = load_config(dir.write("cfg.yaml", kBase), sets);
  EXPECT_EQ(c.run.name, "null");
  EXPECT_FALSE(c.run.html_report);
  EXPECT_EQ(c.model.init_from, "it's \"quoted\"\ttab");
  EXPECT_EQ(c.data.val, "true");
  EXPECT_EQ(c.parallel.stage_layers, (std::vector<int>{3, 1}));
  EXPECT_TRUE(c.log.tensorboard);
  std::string yaml = to_yaml(c);
  Config back = load_config(dir.write("resolved.yaml", yaml));
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_EQ(to_yaml(back), yaml);
  EXPECT_EQ(back.run.output_dir, "out dir/with: colon #hash");
  EXPECT_EQ(back.run.seed, 987654321012);
  EXPECT_DOUBLE_EQ(back.optimizer.betas[1], 0.999);
  EXPECT_EQ(back.train.max_skipped_steps.consecutive, 3);
  EXPECT_DOUBLE_EQ(back.train.max_skipped_steps.fraction, 0.25);
  EXPECT_NE(yaml.find("  max_skipped_steps:\n    consecutive: 3\n    fraction: 0.25\n"), std::string::npos) << yaml;

  // Every key of the schema is in the YAML, each on its own line, except the model keys of
  // other families (gpt2 here: the llama, qwen3 and mistral keys, the model.rope_scaling and model.moe mappings among them) and the wsd
  // schedule's keys (the schedule is linear here).
  const std::vector<std::string> llama_only = {"n_kv_heads", "ffn_dim",  "norm_eps",      "rope_theta",
                                               "tie_embeddings", "head_dim", "sliding_window"};
  for (const auto& f : schema::fields()) {
    const std::string key = f.key;
    const bool other_family = (std::string(f.section) == "model" &&
                               (std::find(llama_only.begin(), llama_only.end(), key) != llama_only.end() ||
                                key.rfind("moe.", 0) == 0 || key.rfind("rope_scaling.", 0) == 0)) ||
                              (std::string(f.section) == "optimizer" && key.rfind("decay_", 0) == 0);
    // A key of a nested mapping ("max_skipped_steps.fraction") is written under the mapping.
    const size_t dot = key.find('.');
    const std::string line = dot == std::string::npos ? "\n  " + key + ": " : "\n    " + key.substr(dot + 1) + ": ";
    EXPECT_EQ(yaml.find(line) != std::string::npos, !other_family) << f.path();
  }
  EXPECT_EQ(yaml.find("moe"), yaml.find("moe_overlap")) << yaml;  // no model.moe mapping

  // Under wsd its keys are written, and read back.
  Config w = load_config(dir.write("wsd.yaml", kBase),
                         {"optimizer.schedule=wsd", "optimizer.decay_fraction=0.3", "optimizer.decay_shape=sqrt"});
  const std::string wsd_yaml = to_yaml(w);
  EXPECT_NE(wsd_yaml.find("  schedule: wsd\n  min_lr: 0\n  decay_steps: 0\n  decay_fraction: 0.3\n  decay_shape: sqrt\n"),
            std::string::npos)
      << wsd_yaml;
  Config w_back = load_config(dir.write("wsd_resolved.yaml", wsd_yaml));
  EXPECT_TRUE(w_back == w);
  EXPECT_EQ(w_back.optimizer.decay_shape, DecayShape::Sqrt);

  // The resolved config of a plain file round-trips too, derived dp included.
  Config r = resolve(load_config(dir.write("plain.yaml", edit("  dp: 2", "  dp: 0"))), 2, false);
  Config r_back = load_config(dir.write("plain_resolved.yaml", to_yaml(r)));
  EXPECT_TRUE(r_back == r);
  EXPECT_EQ(r_back.parallel.dp, 2);
  EXPECT_EQ(r_back.train.device, DeviceChoice::Cpu);
}

// A Llama config: its own keys round-trip, GPT-2's ln_eps is left out of its YAML.
TEST(Config, LlamaKeysRoundTrip) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase),
                         {"model.arch=llama", "model.n_kv_heads=2", "model.ffn_dim=96", "model.norm_eps=1e-6",
                          "model.rope_theta=500000", "model.tie_embeddings=true"});
  EXPECT_NO_THROW(validate(c, 2));
  EXPECT_EQ(c.model.n_kv_heads, 2);
  EXPECT_EQ(c.model.ffn_dim, 96);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000);
  EXPECT_TRUE(c.model.tie_embeddings);
  const std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("\n  n_kv_heads: 2\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\n  rope_theta: 5e+05\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\n  tie_embeddings: true\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("ln_eps"), std::string::npos) << yaml;
  Config back = load_config(dir.write("resolved.yaml", yaml));
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_NO_THROW(validate(back, 2));
  EXPECT_EQ(to_yaml(back), yaml);
}

// model.moe: a nested mapping in the file, section.mapping.key with --set, lines per key, written
// back nested; a dense Llama writes no mapping.
TEST(Config, MoeMappingRoundTrip) {
  testing::TempDir dir;
  const std::string yaml_in = edit("model:", "model:\n  arch: llama\n  moe:\n    n_experts: 8\n    top_k: 3\n"
                                             "    n_shared: 1\n    n_group: 4\n    topk_group: 2\n"
                                             "    route_scale: 2.5\n    aux_loss_coef: 1.0e-4");
  Config c = load_config(dir.write("cfg.yaml", yaml_in), {"model.moe.ffn_dim=32", "parallel.moe_overlap=true"});
  EXPECT_NO_THROW(validate(c, 2));
  EXPECT_EQ(c.model.moe.n_experts, 8);
  EXPECT_EQ(c.model.moe.top_k, 3);
  EXPECT_EQ(c.model.moe.n_shared, 1);
  EXPECT_EQ(c.model.moe.ffn_dim, 32);
  EXPECT_EQ(c.model.moe.n_group, 4);
  EXPECT_EQ(c.model.moe.topk_group, 2);
  EXPECT_DOUBLE_EQ(c.model.moe.route_scale, 2.5);
  EXPECT_DOUBLE_EQ(c.model.moe.aux_loss_coef, 1e-4);
  EXPECT_DOUBLE_EQ(c.model.moe.bias_update_rate, 1e-3);  // the default
  EXPECT_TRUE(c.parallel.moe_overlap);
  EXPECT_EQ(c.origins.where("model.moe"), dir.path() + "/cfg.yaml:3");
  EXPECT_EQ(c.origins.where("model.moe.top_k"), dir.path() + "/cfg.yaml:5");
  EXPECT_EQ(c.origins.where("model.moe.ffn_dim"), "--set model.moe.ffn_dim");
  const std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("\n  moe:\n    n_experts: 8\n    top_k: 3\n    n_shared: 1\n    ffn_dim: 32\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("\n    route_scale: 2.5\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\n  moe_overlap: true\n"), std::string::npos) << yaml;
  Config back = load_config(dir.write("resolved.yaml", yaml));
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_EQ(to_yaml(back), yaml);
  // Every model.moe key of the schema is in it, under the mapping.
  for (const std::string& k : schema::mapping_keys("model", "moe"))
    EXPECT_NE(yaml.find("\n    " + k + ": "), std::string::npos) << k;

  Config dense = load_config(dir.write("dense.yaml", edit("model:", "model:\n  arch: llama")));
  EXPECT_EQ(to_yaml(dense).find("moe:"), std::string::npos);
  EXPECT_TRUE(load_config(dir.write("dense_back.yaml", to_yaml(dense))) == dense);
}

// train.residual_dtype: the stream's dtype and its width in the activation estimate. fp32 precision
// (the CPU) keeps the stream fp32 whatever the key says; bf16 precision follows the key.
TEST(Config, ResidualDtype) {
  testing::TempDir dir;
  const std::string path = dir.write("cfg.yaml", kBase);
  EXPECT_EQ(load_config(path).train.residual_dtype, kDefaultResidualDtype);
  struct Case {
    const char* precision;
    const char* residual;
    DType want;
  };
  for (const Case& c : {Case{"bf16", "bf16", DType::BF16}, Case{"bf16", "fp32", DType::F32},
                        Case{"fp32", "bf16", DType::F32}, Case{"fp32", "fp32", DType::F32}}) {
    Config cfg = load_config(path, {std::string("train.precision=") + c.precision,
                                    std::string("train.residual_dtype=") + c.residual, "train.device=cuda"});
    EXPECT_NO_THROW(validate(cfg, 2)) << c.precision << " " << c.residual;
    EXPECT_EQ(residual_dtype(cfg), c.want) << c.precision << " " << c.residual;
    const ActivationShape s = activation_shape(cfg);
    EXPECT_EQ(s.residual_bytes, c.want == DType::F32 ? 4 : 2) << c.precision << " " << c.residual;
    EXPECT_EQ(s.value_bytes, std::string(c.precision) == "bf16" ? 2 : 4);
    // The estimate grows with the stream's width, never shrinks.
    Config narrow = cfg;
    narrow.train.residual_dtype = ResidualDtype::BF16;
    EXPECT_GE(activation_bytes(cfg), activation_bytes(narrow));
  }
  // Accepted on the CPU, where it changes nothing.
  Config cpu = load_config(path, {"train.device=cpu", "train.residual_dtype=fp32"});
  EXPECT_NO_THROW(resolve(cpu, 2, false));
  EXPECT_EQ(residual_dtype(resolve(cpu, 2, false)), DType::F32);
  // Not with MoE layers under bf16 precision: their combine adds into a stream of the working dtype.
  Config moe = load_config(dir.write("moe.yaml", edit("model:", "model:\n  arch: llama\n  moe:\n    n_experts: 4")),
                           {"train.precision=bf16", "train.residual_dtype=fp32", "train.device=cuda"});
  const std::string msg = message_of([&] { validate(moe, 2); });
  EXPECT_NE(msg.find("train.residual_dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.moe.n_experts"), std::string::npos) << msg;
  moe.train.residual_dtype = ResidualDtype::BF16;
  EXPECT_NO_THROW(validate(moe, 2));
  moe.train.residual_dtype = ResidualDtype::FP32;
  moe.train.precision = DtypeChoice::FP32;
  EXPECT_NO_THROW(validate(moe, 2));
}

TEST(Config, OptimizerStateDtype) {
  testing::TempDir dir;
  const std::string path = dir.write("cfg.yaml", kBase);
  const Config def = load_config(path);
  EXPECT_EQ(def.optimizer.state_dtype, StateDtype::FP32);
  EXPECT_EQ(resolve(def, 2, false).resolved.optimizer_state_dtype, DType::F32);
  EXPECT_EQ(optimizer_options(def, 2).adamw.state_dtype, DType::F32);
  for (const char* precision : {"fp32", "bf16"}) {
    Config cfg = load_config(path, {"optimizer.state_dtype=bf16", std::string("train.precision=") + precision,
                                    std::string("train.device=") + (std::string(precision) == "bf16" ? "cuda" : "cpu")});
    EXPECT_EQ(cfg.optimizer.state_dtype, StateDtype::BF16);
    EXPECT_NO_THROW(validate(cfg, 2)) << precision;
    EXPECT_EQ(resolve(cfg, 2, true).resolved.optimizer_state_dtype, DType::BF16) << precision;
    EXPECT_EQ(optimizer_options(cfg, 2).adamw.state_dtype, DType::BF16) << precision;
    // RUN_DIR/config.yaml says it and reads back the same.
    const std::string yaml = to_yaml(cfg);
    EXPECT_NE(yaml.find("state_dtype: bf16"), std::string::npos) << yaml;
    EXPECT_EQ(parse_config(yaml, "round_trip.yaml"), cfg);
  }
}

TEST(Config, EqualityComparesEveryKey) {
  // So that the round trip above can fail: changing any one key makes the configs differ.
  Config a;
  for (const auto& f : schema::fields()) {
    Config b = a;
    void* p = f.get(b);
    switch (f.type) {
      case schema::Type::Int: *static_cast<int*>(p) += 1; break;
      case schema::Type::Int64: *static_cast<std::int64_t*>(p) += 1; break;
      case schema::Type::Float: *static_cast<double*>(p) += 0.5; break;
      case schema::Type::Bool: *static_cast<bool*>(p) = !*static_cast<bool*>(p); break;
      case schema::Type::String:
      case schema::Type::Choice:
      case schema::Type::DataSources: *static_cast<std::string*>(p) += "x"; break;
      case schema::Type::Enum: f.set_index(b, f.index(b) + 1); break;
      case schema::Type::Resume: *static_cast<ResumeFrom*>(p) = ResumeFrom{ResumeFrom::Kind::Path, "x"}; break;
      case schema::Type::FloatPair: (*static_cast<std::array<double, 2>*>(p))[1] += 0.01; break;
      case schema::Type::IntList: static_cast<std::vector<int>*>(p)->push_back(3); break;
    }
    EXPECT_FALSE(a == b) << f.path();
  }
  Config c = a;
  c.origins.file = "elsewhere.yaml";  // origins are not part of the experiment
  EXPECT_TRUE(a == c);
}

TEST(Config, BuiltInCodeValidates) {
  Config c;
  c.model.vocab_size = 256;
  c.model.seq_len = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.train.steps = 10;
  c.train.global_batch = 4;
  EXPECT_NO_THROW(validate(c, 4));
  EXPECT_EQ(resolve(c, 4, false).train.seq_len, 32);
  c.train.steps = 0;
  std::string msg = message_of([&] { validate(c, 4); });
  EXPECT_EQ(msg, "config: train.steps: 0 is too small (an integer ≥ 1)");
  c.train.steps = 10;
  c.parallel.schedule = static_cast<PipelineSchedule>(17);  // no such schedule
  msg = message_of([&] { validate(c, 4); });
  EXPECT_NE(msg.find("config: parallel.schedule: 17 is not a valid choice (one of: gpipe"), std::string::npos)
      << msg;
}

TEST(Config, PipelineStagesPerSchedule) {
  ParallelConfig p;
  p.pp = 4;
  using S = PipelineSchedule;
  for (auto [s, stages] : std::vector<std::pair<S, int>>{
           {S::GPipe, 4}, {S::OneFOneB, 4}, {S::ZbH1, 4}, {S::DualPipe, 4}, {S::Interleaved1F1B, 8}, {S::DualPipeV, 8}}) {
    p.schedule = s;
    EXPECT_EQ(pipeline_stages(p), stages) << choice_name(s);
  }
  p.pp = 1;
  EXPECT_EQ(pipeline_stages(p), 1);
}

TEST(Config, PipelineSchedulesThatFit) {
  testing::TempDir dir;
  std::string yaml = edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2"));
  std::string path = dir.write("cfg.yaml", yaml);
  // 4 layers, pp 2, 8 micro-batches of 1 sequence: every schedule fits.
  for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "dualpipe", "dualpipev"}) {
    Config c = load_config(path, {std::string("parallel.schedule=") + s, "train.micro_batch=1"});
    EXPECT_NO_THROW(validate(c, 2)) << s;
    EXPECT_EQ(resolve(c, 2, false).parallel.micro_batches, 8) << s;
  }
}

TEST(Config, FileErrors) {
  testing::TempDir dir;
  std::string missing = dir.path() + "/nope.yaml";
  std::string msg = message_of([&] { load_config(missing); });
  EXPECT_NE(msg.find(missing + ": config file not found"), std::string::npos) << msg;
  msg = message_of([&] { load_config(dir.path()); });
  EXPECT_NE(msg.find("is a directory, not a config file"), std::string::npos) << msg;
  msg = message_of([&] { load_config(dir.write("empty.yaml", "")); });
  EXPECT_NE(msg.find("empty.yaml: model.vocab_size: missing required key"), std::string::npos) << msg;
  if (getuid() != 0) {  // root reads any file
    std::string locked = dir.write("locked.yaml", kBase);
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    msg = message_of([&] { load_config(locked); });
    EXPECT_NE(msg.find("locked.yaml: cannot read the config file"), std::string::npos) << msg;
  }
}

TEST(Config, TrainingInputsMustExist) {
  testing::TempDir dir;
  Config c = load_config(dir.write("cfg.yaml", kBase), {"data.train=" + dir.path() + "/train.h5"});
  std::string msg = message_of([&] { validate_for_training(c); });
  EXPECT_NE(msg.find("--set data.train: " + dir.path() + "/train.h5 does not exist"), std::string::npos) << msg;
  dir.write("train.h5", "tokens");
  EXPECT_NO_THROW(validate_for_training(c));

  Config no_train = load_config(dir.write("c2.yaml", edit("  train: data/x.h5", "  val: v.h5")));
  msg = message_of([&] { validate_for_training(no_train); });
  EXPECT_NE(msg.find("c2.yaml: data.train: not set; a training run needs a token file"), std::string::npos) << msg;
  EXPECT_NO_THROW(validate(no_train, 2));  // planning needs no data

  Config resume = load_config(dir.write("c3.yaml", kBase),
                              {"data.train=" + dir.path() + "/train.h5", "checkpoint.resume=runs/x/step_5"});
  msg = message_of([&] { validate_for_training(resume); });
  EXPECT_NE(msg.find("--set checkpoint.resume: runs/x/step_5 does not exist"), std::string::npos) << msg;
}

// The shipped configs.
const std::string kConfigs = std::string(TETRA_SOURCE_DIR) + "/configs/";

TEST(ShippedConfigs, TinyLoadsAndValidatesAtWorld2) {
  Config c = load_config(kConfigs + "tiny.yaml");
  EXPECT_NO_THROW(validate(c, 2));
  EXPECT_EQ(c.run.name, "tiny");
  EXPECT_EQ(c.run.output_dir, "runs");
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.seq_len, 128);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.train.global_batch, 16);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.eval_every, 50);
  EXPECT_EQ(c.train.eval_batches, 2);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 1.0);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.min_lr, 3e-4);
  EXPECT_EQ(c.optimizer.warmup_steps, 20);
  EXPECT_EQ(c.optimizer.schedule, LrDecay::Cosine);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.data.train, "data/tiny/train.h5");
  EXPECT_EQ(c.data.val, "data/tiny/val.h5");
  EXPECT_EQ(c.checkpoint.every, 100);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.log.every, 10);
  Config r = resolve(c, 2, false);
  EXPECT_EQ(r.parallel.micro_batches, 2);
  EXPECT_EQ(r.train.precision, DtypeChoice::FP32);
  EXPECT_THROW(validate(c, 1), Error);  // dp 2 is fixed: tiny wants two ranks
  EXPECT_NO_THROW(validate(load_config(kConfigs + "tiny.yaml", {"parallel.dp=1"}), 1));
}

TEST(ShippedConfigs, LlamaConfigs) {
  Config tiny = load_config(kConfigs + "tiny-llama.yaml");
  EXPECT_NO_THROW(validate(tiny, 2));
  EXPECT_EQ(tiny.model.arch, "llama");
  EXPECT_EQ(tiny.model.n_kv_heads, 2);
  EXPECT_EQ(resolve(tiny, 2, false).train.precision, DtypeChoice::FP32);

  Config c = load_config(kConfigs + "llama-1b.yaml");
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.n_layers, 16);
  EXPECT_EQ(c.model.d_model, 2048);
  EXPECT_EQ(c.model.n_heads, 32);
  EXPECT_EQ(c.model.n_kv_heads, 8);
  EXPECT_EQ(c.model.ffn_dim, 8192);
  EXPECT_EQ(c.model.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.seq_len, 4096);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.precision, DtypeChoice::BF16);
  EXPECT_EQ(c.train.device, DeviceChoice::Cuda);
  for (int world : {1, 2}) {
    Config w = load_config(kConfigs + "llama-1b.yaml", {"train.global_batch=" + std::to_string(4 * world)});
    EXPECT_NO_THROW(resolve(w, world, true)) << world;
  }
  // Tensor parallelism over 8 ranks splits its 8 key/value heads; over 16 it replicates each on 2
  // ranks; 64 ranks are more than its 32 query heads.
  EXPECT_NO_THROW(validate(load_config(kConfigs + "llama-1b.yaml", {"parallel.tp=8", "train.global_batch=4"}), 8));
  EXPECT_NO_THROW(validate(load_config(kConfigs + "llama-1b.yaml", {"parallel.tp=16", "train.global_batch=4"}), 16));
  EXPECT_THROW(validate(load_config(kConfigs + "llama-1b.yaml", {"parallel.tp=64", "train.global_batch=4"}), 64),
               Error);
}

TEST(ShippedConfigs, Gpt2At1And2Ranks) {
  Config c = load_config(kConfigs + "gpt2-124m.yaml");
  EXPECT_EQ(c.model.vocab_size, 50304);
  EXPECT_EQ(c.model.n_layers, 12);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.n_heads, 12);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.parallel.dp, 0);
  EXPECT_EQ(c.train.micro_batch, 16);
  EXPECT_EQ(c.train.global_batch, 32);
  EXPECT_EQ(c.train.precision, DtypeChoice::BF16);
  EXPECT_EQ(c.train.device, DeviceChoice::Cuda);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 6e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.min_lr, 6e-5);
  EXPECT_EQ(c.optimizer.warmup_steps, 700);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  for (int world : {1, 2}) {
    EXPECT_NO_THROW(validate(c, world)) << world;
    Config r = resolve(c, world, true);
    EXPECT_EQ(r.parallel.dp, world);
    EXPECT_EQ(r.parallel.micro_batches, 2 / world);
  }
  EXPECT_THROW(resolve(c, 1, false), Error);  // asks for cuda
  EXPECT_NO_THROW(validate(load_config(kConfigs + "gpt2-124m.yaml", {"train.global_batch=128"}), 8));
}

// A [64, 32] weight (layer 0) and a [64] bias (layer 1): the model a memory plan test lays out.
std::vector<Param> two_params() {
  std::vector<Param> owned(2);
  owned[0].name = "w";
  owned[0].full_shape = owned[0].local_shape = {64, 32};
  owned[1].name = "b";
  owned[1].full_shape = owned[1].local_shape = {64};
  owned[1].layer_index = 1;
  return owned;
}

// parallel.grad_all_reduce: copy_engine stages (dp − 1) copies of the flat gradient buffer per
// rank; the memory plan counts them as communication and as persistent state.
TEST(MemoryPlan, CopyEngineStagingIsCounted) {
  testing::TempDir dir;
  std::vector<Param> owned = two_params();
  std::vector<Param*> params{&owned[0], &owned[1]};
  const std::string path = dir.write("cfg.yaml", kBase);
  // One micro-batch per step on each of 2 ranks: bf16 gradients (2 bytes).
  Config nccl = load_config(path, {"train.precision=bf16", "train.global_batch=4"});
  Config ce =
      load_config(path, {"train.precision=bf16", "train.global_batch=4", "parallel.grad_all_reduce=copy_engine"});
  const MemoryPlan a = plan_memory(nccl, params, 2);
  const MemoryPlan b = plan_memory(ce, params, 2);
  const double flat = static_cast<double>(ZeroLayout(params, 1).total());
  EXPECT_GE(flat, 64.0 * 33.0);
  EXPECT_EQ(b.state.communication - a.state.communication, flat * 2.0);  // one peer, bf16 gradients
  EXPECT_EQ(b.state.persistent - a.state.persistent, flat * 2.0);
  EXPECT_EQ(plan_memory(ce, params, 1).state.communication, plan_memory(nccl, params, 1).state.communication);
}

// optimizer.state_dtype bf16: the plan counts 2 + 2 bytes per parameter for exp_avg and exp_avg_sq
// instead of 4 + 4, at every stage and working dtype; the fp32 master (where it exists) stays 4.
TEST(MemoryPlan, Bf16MomentsHalveTheMomentBytes) {
  testing::TempDir dir;
  std::vector<Param> owned = two_params();
  std::vector<Param*> params{&owned[0], &owned[1]};
  const std::string path = dir.write("cfg.yaml", kBase);
  for (const char* precision : {"fp32", "bf16"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const std::vector<std::string> o = {std::string("train.precision=") + precision,
                                          "parallel.zero_stage=" + std::to_string(stage)};
      std::vector<std::string> o16 = o;
      o16.push_back("optimizer.state_dtype=bf16");
      const MemoryPlan f32 = plan_memory(load_config(path, o), params, 2);
      const MemoryPlan b16 = plan_memory(load_config(path, o16), params, 2);
      // The elements this rank keeps state for: all of them at stage 0, its shard at 1–3.
      const double n = static_cast<double>(ZeroLayout(params, stage == 0 ? 1 : 2).shard_total());
      // The fp32 master is separate from the working weights under bf16, and at stages 1–2 always.
      const double master = std::string(precision) == "bf16" || stage == 1 || stage == 2 ? 4.0 : 0.0;
      const std::string what = std::string(precision) + " stage " + std::to_string(stage);
      EXPECT_EQ(f32.state.optimizer, (master + 8.0) * n) << what;
      EXPECT_EQ(b16.state.optimizer, (master + 4.0) * n) << what;
      EXPECT_EQ(f32.state.persistent - b16.state.persistent, 4.0 * n) << what;
      EXPECT_EQ(f32.state.weights, b16.state.weights) << what;
      EXPECT_EQ(f32.state.gradients, b16.state.gradients) << what;
      EXPECT_EQ(f32.state.communication, b16.state.communication) << what;
      EXPECT_EQ(b16.state_dtype, "bf16");
      EXPECT_EQ(f32.state_dtype, "fp32");
    }
  }
}

}  // namespace
}  // namespace tetra::launch
