// Bad configs: each row is a config (file text and --set overrides) for a job of some world size,
// and the pieces its error message must hold: FILE:LINE, the key path, what is wrong, what is valid.
#include <gtest/gtest.h>

#include "launch/config/config.h"
#include "runtime/error.h"
#include "tests/launch/config/config_test_util.h"

namespace tetra::launch {
namespace {

using testing::edit;
using testing::kBase;

struct BadCase {
  const char* name;
  std::string yaml;
  std::vector<std::string> overrides;
  int world;
  std::vector<std::string> expect;  // substrings of the error message
};

// kBase as a Llama with 8 routed experts, top 2: model.moe is lines 3-5, vocab_size line 6,
// n_layers (4) line 9, dp (2) line 12, global_batch (8) line 17, micro_batch (2) line 18.
std::string moe_base(const std::string& more = "") {
  return edit("model:", "model:\n  arch: llama\n  moe:\n    n_experts: 8\n    top_k: 2" + more);
}

// The file against the schema.
std::vector<BadCase> schema_cases() {
  return {
      {"unknown_key_typo", edit("  steps: 100", "  stpes: 100"), {}, 2,
       {"cfg.yaml:12: train.stpes: unknown key (did you mean train.steps?)"}},
      {"skip_limit_not_a_mapping", edit("  micro_batch: 2", "  micro_batch: 2\n  max_skipped_steps: 10"), {}, 2,
       {"cfg.yaml:15: train.max_skipped_steps: expected a mapping of keys, got 10",
        "keys of train.max_skipped_steps: consecutive, fraction"}},
      {"skip_fraction_zero",
       edit("  micro_batch: 2", "  micro_batch: 2\n  max_skipped_steps: {consecutive: 5, fraction: 0}"), {}, 2,
       {"cfg.yaml:15: train.max_skipped_steps.fraction: 0 is", "1 = no limit by share"}},
      {"key_in_wrong_section", edit("  micro_batch: 2", "  micro_batch: 2\n  lr: 0.1"), {}, 2,
       {"cfg.yaml:15: train.lr: unknown key (did you mean optimizer.lr?)"}},
      {"unknown_key_no_suggestion", edit("  pp: 1", "  pp: 1\n  quantum: 7"), {}, 2,
       {"cfg.yaml:11: parallel.quantum: unknown key (valid keys of parallel: dp, tp, pp, ep, zero_stage"}},
      {"other_trainers_name", edit("  steps: 100", "  train_iters: 100"), {}, 2,
       {"cfg.yaml:12: train.train_iters: unknown key (did you mean train.steps?)"}},
      {"close_key_other_section", kBase, {"train.warmup=3"}, 2,
       {"--set train.warmup: unknown key (did you mean optimizer.warmup_steps?)"}},
      {"unknown_section", edit("train:", "trian:"), {}, 2,
       {"cfg.yaml:11: trian: unknown section (did you mean train?)"}},
      {"key_at_top_level", std::string(kBase) + "steps: 5\n", {}, 2,
       {"cfg.yaml:20: steps: unknown section (did you mean train.steps?"}},
      {"string_for_int", edit("  steps: 100", "  steps: ten"), {}, 2,
       {"cfg.yaml:12: train.steps: ten is not an integer (an integer ≥ 1)"}},
      {"quoted_int", edit("  steps: 100", "  steps: \"100\""), {}, 2,
       {"cfg.yaml:12: train.steps: \"100\" is a quoted string, not an integer"}},
      {"float_for_int", edit("  global_batch: 8", "  global_batch: 8.5"), {}, 2,
       {"cfg.yaml:13: train.global_batch: 8.5 is not an integer"}},
      {"int_overflow", edit("  steps: 100", "  steps: 99999999999"), {}, 2,
       {"cfg.yaml:12: train.steps: 99999999999 is too large"}},
      {"negative_count", edit("  micro_batch: 2", "  micro_batch: -2"), {}, 2,
       {"cfg.yaml:14: train.micro_batch: -2 is too small (an integer ≥ 1"}},
      {"list_for_scalar", edit("  n_layers: 4", "  n_layers: [4]"), {}, 2,
       {"cfg.yaml:5: model.n_layers: expected an integer, got a list"}},
      {"mapping_for_scalar", edit("  d_model: 64", "  d_model: {a: 1}"), {}, 2,
       {"cfg.yaml:4: model.d_model: expected an integer, got a mapping"}},
      {"empty_value", edit("  steps: 100", "  steps:"), {}, 2,
       {"cfg.yaml:12: train.steps: missing value, expected an integer"}},
      {"bad_bool", edit("  train: data/x.h5", "  train: data/x.h5\n  shuffle: maybe"), {}, 2,
       {"cfg.yaml:20: data.shuffle: maybe is not true or false (true or false)"}},
      {"invalid_choice", edit("  micro_batch: 2", "  micro_batch: 2\n  precision: fp16"), {}, 2,
       {"cfg.yaml:15: train.precision: fp16 is not a valid choice", "(one of: auto, fp32, bf16)"}},
      {"invalid_residual_dtype", edit("  micro_batch: 2", "  micro_batch: 2\n  residual_dtype: fp16"), {}, 2,
       {"cfg.yaml:15: train.residual_dtype: fp16 is not a valid choice (did you mean bf16?)", "(one of: bf16, fp32;"}},
      {"invalid_state_dtype", kBase, {"optimizer.state_dtype=fp16"}, 2,
       {"--set optimizer.state_dtype: fp16 is not a valid choice", "(one of: fp32, bf16;"}},
      {"megatron_residual_flag", edit("  micro_batch: 2", "  micro_batch: 2\n  fp32_residual_connection: true"), {}, 2,
       {"cfg.yaml:15: train.fp32_residual_connection: unknown key (did you mean train.residual_dtype?)"}},
      {"invalid_choice_suggestion", edit("  pp: 1", "  pp: 1\n  schedule: 1F1B"), {}, 2,
       {"cfg.yaml:11: parallel.schedule: 1F1B is not a valid choice (did you mean 1f1b?)",
        "gpipe, 1f1b, interleaved_1f1b, zb_h1, dualpipe, dualpipev"}},
      {"missing_required", edit("  vocab_size: 256", ""), {}, 2,
       {"cfg.yaml:1: model.vocab_size: missing required key (an integer ≥ 1"}},
      {"missing_section", "model: {vocab_size: 256, seq_len: 64, d_model: 64, n_layers: 4, n_heads: 4}\n", {}, 1,
       {"cfg.yaml: train.steps: missing required key"}},
      {"duplicate_key", edit("  micro_batch: 2", "  micro_batch: 2\n  steps: 5"), {}, 2,
       {"cfg.yaml:15: train.steps: duplicate key (first at line 12)"}},
      {"section_not_mapping", edit("  lr: 1.0e-3\n  warmup_steps: 10", "", edit("optimizer:", "optimizer: adamw")), {}, 2,
       {"cfg.yaml:15: optimizer: expected a mapping of keys, got adamw"}},
      {"document_not_mapping", "- model\n- train\n", {}, 1,
       {"cfg.yaml:1: the config must be a mapping of sections (run, model, parallel"}},
      {"yaml_syntax", edit("  steps: 100", "  steps: [100, 200"), {}, 2, {"cfg.yaml:1", "YAML syntax error at column"}},
      {"yaml_bad_indent", edit("  seq_len: 64", " seq_len: 64"), {}, 2, {"cfg.yaml:3: YAML syntax error"}},
      {"lr_zero", edit("  lr: 1.0e-3", "  lr: 0"), {}, 2,
       {"cfg.yaml:16: optimizer.lr: 0 is too small (a number > 0"}},
      {"lr_nan", edit("  lr: 1.0e-3", "  lr: .nan"), {}, 2,
       {"cfg.yaml:16: optimizer.lr: .nan is not a finite number"}},
      {"betas_out_of_range", kBase, {"optimizer.betas=[0.9,1.0]"}, 2,
       {"--set optimizer.betas: the second value 1 is too large (a list of two numbers in [0, 1)"}},
      {"betas_wrong_length", edit("  lr: 1.0e-3", "  lr: 1.0e-3\n  betas: [0.9]"), {}, 2,
       {"cfg.yaml:17: optimizer.betas: expected a list of two numbers, got a list of 1"}},
      {"zero_stage_range", kBase, {"parallel.zero_stage=4"}, 2,
       {"--set parallel.zero_stage: 4 is too large (an integer in 0..3)"}},
      {"run_name_path", "run:\n  name: a/b\n" + std::string(kBase), {}, 2,
       {"cfg.yaml:2: run.name: \"a/b\" is not a single directory name"}},
  };
}

// Overrides.
std::vector<BadCase> override_cases() {
  return {
      {"override_unknown_key", kBase, {"train.stepz=5"}, 2,
       {"--set train.stepz: unknown key (did you mean train.steps?)"}},
      {"override_unknown_section", kBase, {"trainer.steps=5"}, 2,
       {"--set trainer.steps: unknown section trainer (did you mean train?)"}},
      {"override_no_section", kBase, {"steps=5"}, 2, {"--set steps: not a section.key path (did you mean train.steps?)"}},
      {"override_no_equals", kBase, {"train.steps"}, 2, {"--set train.steps: expected section.key=value"}},
      {"override_bad_type", kBase, {"train.steps=abc"}, 2, {"--set train.steps: abc is not an integer"}},
      {"override_bad_yaml", kBase, {"optimizer.betas=[0.9,"}, 2, {"--set optimizer.betas=[0.9,: not a YAML value"}},
  };
}

// Combinations against the job.
std::vector<BadCase> job_cases() {
  return {
      {"mesh_mismatch", edit("  dp: 2", "  dp: 3"), {}, 2,
       {"cfg.yaml:8: parallel.dp: dp·tp·pp = 3·1·1 = 3 but the job has 2 ranks; set parallel.dp to 2 (or 0 to derive it) "
        "or launch 3 ranks"}},
      {"mesh_mismatch_no_divisor", edit("  tp: 1", "  tp: 2"), {}, 3,
       {"cfg.yaml:8: parallel.dp: dp·tp·pp = 2·2·1 = 4 but the job has 3 ranks; launch 4 ranks, or change parallel.tp",
        "[parallel.tp at ", "cfg.yaml:9, parallel.pp at "}},
      {"mesh_underivable", edit("  tp: 1", "  tp: 3", edit("  dp: 2", "  dp: 0")), {}, 4,
       {"cfg.yaml:9: parallel.tp: tp·pp = 3·1 = 3 does not divide the 4 ranks of the job, so parallel.dp cannot be derived"}},
      {"heads_vs_tp", edit("  n_heads: 4", "  n_heads: 3", edit("  d_model: 64", "  d_model: 63", edit("  dp: 2", "  dp: 1", edit("  tp: 1", "  tp: 2")))), {}, 2,
       {"cfg.yaml:6: model.n_heads: 3 heads do not split over parallel.tp = 2 ranks; use tp among 1, 3", "[parallel.tp at "}},
      {"d_model_vs_heads", edit("  d_model: 64", "  d_model: 66"), {}, 2,
       {"cfg.yaml:4: model.d_model: 66 is not divisible by model.n_heads = 4", "e.g. 64 or 68"}},
      {"vocab_vs_tp", edit("  vocab_size: 256", "  vocab_size: 255", edit("  dp: 2", "  dp: 1", edit("  tp: 1", "  tp: 2"))), {}, 2,
       {"cfg.yaml:2: model.vocab_size: 255 does not split over parallel.tp = 2", "e.g. 256"}},
      {"tokens_vs_sequence_parallel",
       edit("  micro_batch: 2", "  micro_batch: 1", edit("  dp: 2", "  dp: 1", edit("  tp: 1", "  tp: 4"))),
       {"train.seq_len=63"}, 4,
       {"cfg.yaml:14: train.micro_batch: a micro-batch of micro_batch·seq_len = 1·63 = 63 tokens does not split over "
        "parallel.tp = 4 ranks", "or set parallel.sequence_parallel: false", "[train.seq_len at --set train.seq_len"}},
      {"residual_fp32_with_tp", kBase,
       {"parallel.tp=2", "parallel.dp=1", "train.precision=bf16", "train.residual_dtype=fp32"}, 2,
       {"--set train.residual_dtype: fp32 with parallel.tp = 2 under bf16 precision", "use train.residual_dtype bf16",
        "[parallel.tp at --set parallel.tp]"}},
      {"layers_vs_pp", edit("  n_layers: 4", "  n_layers: 1", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2"))), {}, 2,
       {"cfg.yaml:5: model.n_layers: 1 layer cannot fill 2 pipeline stages of parallel.pp, which need at least one "
        "layer each", "[parallel.pp at "}},
      {"layers_vs_interleaved", edit("  n_layers: 4", "  n_layers: 3", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2"))),
       {"parallel.schedule=interleaved_1f1b"}, 2,
       {"cfg.yaml:5: model.n_layers: 3 layers cannot fill 4 pipeline stages", "2 chunks each",
        "parallel.schedule at --set parallel.schedule"}},
      {"stage_layers_count", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2\n  stage_layers: [1, 1, 2]")), {}, 2,
       {"cfg.yaml:11: parallel.stage_layers: 3 entries, but the model is cut into 2 pipeline stages",
        "or leave it out to split by cost"}},
      {"stage_layers_sum", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2\n  stage_layers: [1, 2]")), {}, 2,
       {"cfg.yaml:11: parallel.stage_layers: the entries sum to 3 layers, but model.n_layers is 4", "[model.n_layers at "}},
      {"stage_layers_zero", edit("  pp: 1", "  pp: 1\n  stage_layers: [0]"), {}, 2,
       {"cfg.yaml:11: parallel.stage_layers: entry 0 = 0 is too small (a list of integers ≥ 1"}},
      {"stage_layers_not_list", edit("  pp: 1", "  pp: 1\n  stage_layers: 4"), {}, 2,
       {"cfg.yaml:11: parallel.stage_layers: expected a list of integers such as [4, 4], got 4"}},
      {"ep_vs_dp", edit("  pp: 1", "  pp: 1\n  ep: 3"), {}, 2,
       {"cfg.yaml:11: parallel.ep: ep = 3 does not divide dp = 2", "use ep among 1, 2"}},
      {"ep_vs_derived_dp", edit("  dp: 2", "  dp: 0"), {"parallel.ep=4"}, 2,
       {"--set parallel.ep: ep = 4 does not divide dp = 2"}},
      {"global_batch_split", edit("  global_batch: 8", "  global_batch: 10"), {}, 2,
       {"cfg.yaml:13: train.global_batch: 10 sequences do not split into micro-batches of dp·micro_batch = 2·2 = 4; "
        "use a multiple of 4 (e.g. 8 or 12)"}},
      {"micro_batches_mismatch", edit("  pp: 1", "  pp: 1\n  micro_batches: 3"), {}, 2,
       {"cfg.yaml:11: parallel.micro_batches: 3 but train.global_batch / (dp·train.micro_batch) = 8 / (2·2) = 2"}},
      {"train_seq_len", edit("  micro_batch: 2", "  micro_batch: 2\n  seq_len: 128"), {}, 2,
       {"cfg.yaml:15: train.seq_len: 128 exceeds model.seq_len = 64", "[model.seq_len at ", "cfg.yaml:3]"}},
      {"warmup_vs_steps", edit("  warmup_steps: 10", "  warmup_steps: 200"), {}, 2,
       {"cfg.yaml:17: optimizer.warmup_steps: 200 exceeds train.steps = 100; use at most 100", "[train.steps at "}},
      {"min_lr_vs_lr", edit("  lr: 1.0e-3", "  lr: 1.0e-3\n  min_lr: 0.01"), {}, 2,
       {"cfg.yaml:17: optimizer.min_lr: 0.01 exceeds optimizer.lr = 0.001"}},
      {"decay_steps_without_wsd", edit("  warmup_steps: 10", "  warmup_steps: 10\n  decay_steps: 20"), {}, 2,
       {"cfg.yaml:18: optimizer.decay_steps: set, but read only under optimizer.schedule: wsd (the schedule is cosine)"}},
      {"decay_shape_without_wsd", kBase, {"optimizer.decay_shape=sqrt"}, 2,
       {"--set optimizer.decay_shape: set, but read only under optimizer.schedule: wsd"}},
      {"wsd_decay_both", edit("  warmup_steps: 10", "  warmup_steps: 10\n  schedule: wsd\n  decay_steps: 20"),
       {"optimizer.decay_fraction=0.1"}, 2,
       {"cfg.yaml:19: optimizer.decay_steps: both set (20 steps and 0.1 of train.steps)", "set the other to 0"}},
      {"wsd_decay_too_long", edit("  warmup_steps: 10", "  warmup_steps: 10\n  schedule: wsd\n  decay_steps: 95"), {}, 2,
       {"cfg.yaml:19: optimizer.decay_steps: a decay of 95 steps after a warmup of 10 does not fit in train.steps = 100"}},
      {"wsd_fraction_too_long", edit("  warmup_steps: 10", "  warmup_steps: 10\n  schedule: wsd"),
       {"optimizer.decay_fraction=0.95"}, 2,
       {"--set optimizer.decay_fraction: a decay of 95 steps after a warmup of 10 does not fit"}},
      {"eval_without_val", kBase, {"train.eval_every=10"}, 2,
       {"--set train.eval_every: 10 but data.val is not set"}},
      {"dualpipe_few_micro_batches", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2\n  schedule: dualpipe")),
       {"train.global_batch=4"}, 2,
       {"cfg.yaml:11: parallel.schedule: dualpipe with pp = 2 needs at least 2·pp = 4 micro-batches, got 2 micro-batches"}},
      {"dualpipe_odd_pp", edit("  n_layers: 4", "  n_layers: 3", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 3\n  schedule: dualpipe"))),
       {"train.global_batch=12"}, 3, {"parallel.pp: dualpipe needs an even number of pipeline ranks, got 3"}},
      {"bf16_on_cpu", edit("  micro_batch: 2", "  micro_batch: 2\n  device: cpu\n  precision: bf16"), {}, 2,
       {"cfg.yaml:16: train.precision: bf16 with train.device = cpu; the CPU backend computes in fp32"}},
      {"copy_engine_on_cpu", edit("  micro_batch: 2", "  micro_batch: 2\n  device: cpu"),
       {"parallel.grad_all_reduce=copy_engine"}, 2,
       {"--set parallel.grad_all_reduce: copy_engine moves gradients between GPUs, but train.device = cpu; use nccl"}},
      {"copy_engine_with_zero", kBase, {"parallel.grad_all_reduce=copy_engine", "parallel.zero_stage=1"}, 2,
       {"--set parallel.grad_all_reduce: copy_engine serves stage 0's all-reduce only, but parallel.zero_stage = 1"}},
      // What the training step cannot combine, whatever the device (tetra train checked these only as
      // it set up; tests/launch/config/plan_train_agree.py runs both commands on them).
      {"cuda_graphs_with_pipeline", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2")), {"train.cuda_graphs=true"}, 2,
       {"--set train.cuda_graphs: not supported with parallel.pp > 1 (the pipeline's transfers are issued from the "
        "host between its instructions); set train.cuda_graphs: false [parallel.pp at "}},
      {"copy_engine_with_pipeline", edit("  dp: 2", "  dp: 1", edit("  pp: 1", "  pp: 2")),
       {"parallel.grad_all_reduce=copy_engine"}, 2,
       {"--set parallel.grad_all_reduce: copy_engine is not supported with parallel.pp > 1; use nccl [parallel.pp at "}},
      {"cuda_graphs_with_zero3", kBase, {"train.cuda_graphs=true", "parallel.zero_stage=3"}, 2,
       {"--set train.cuda_graphs: not supported with parallel.zero_stage 3 (use stage 0, 1 or 2, or set "
        "train.cuda_graphs: false) [parallel.zero_stage at --set parallel.zero_stage]"}},
      {"unknown_arch", "model:\n  arch: mamba\n" + edit("model:", ""), {}, 2,
       {"cfg.yaml:2: model.arch: mamba is not a valid choice", "(one of: gpt2, llama"}},
  };
}

// Model families: keys of another family, impossible Llama shapes.
std::vector<BadCase> family_cases() {
  return {
      {"llama_key_with_gpt2", edit("  n_heads: 4", "  n_heads: 4\n  rope_theta: 500000"), {}, 2,
       {"cfg.yaml:7: model.rope_theta: not read by gpt2 models (a key of llama, qwen2, qwen3, mistral); remove it, or "
        "set model.arch to llama, qwen2, qwen3, mistral (gpt2 takes, besides the common keys: ln_eps)"}},
      {"llama_key_by_override", kBase, {"model.n_kv_heads=2"}, 2,
       {"--set model.n_kv_heads: not read by gpt2 models (a key of llama, qwen2, qwen3, mistral)"}},
      // A key of one family built from Llama's blocks is not read by another.
      {"mistral_key_with_llama", edit("model:", "model:\n  arch: llama\n  sliding_window: 4096"), {}, 2,
       {"cfg.yaml:3: model.sliding_window: not read by llama models (a key of mistral); remove it, or set model.arch "
        "to mistral"}},
      {"qwen3_key_with_qwen2", edit("model:", "model:\n  arch: qwen2\n  head_dim: 32"), {}, 2,
       {"cfg.yaml:3: model.head_dim: not read by qwen2 models (a key of qwen3)"}},
      // Mistral: a window shorter than the context is refused by name, before any work.
      {"mistral_window_shorter_than_context", edit("model:", "model:\n  arch: mistral\n  sliding_window: 32"), {}, 2,
       {"cfg.yaml:3: model.sliding_window: 32 positions is shorter than the context model.seq_len = 64: "
        "sliding-window (band) attention does not run in tetra yet", "[model.seq_len at ", "cfg.yaml:5]"}},
      {"gpt2_key_with_llama", edit("  n_heads: 4", "  n_heads: 4\n  ln_eps: 1.0e-6", edit("model:", "model:\n  arch: llama")), {}, 2,
       {"cfg.yaml:8: model.ln_eps: not read by llama models (a key of gpt2); remove it, or set model.arch to gpt2 "
        "(llama takes, besides the common keys: n_kv_heads, ffn_dim, norm_eps, rope_theta, the rope_scaling mapping, tie_embeddings, the moe "
        "mapping)"}},
      {"kv_heads_not_dividing", edit("model:", "model:\n  arch: llama\n  n_kv_heads: 3"), {}, 2,
       {"cfg.yaml:3: model.n_kv_heads: 3 key/value heads do not divide model.n_heads = 4", "use one of 1, 2, 4",
        "[model.n_heads at ", "cfg.yaml:8]"}},
      // tp neither dividing the key/value heads nor a multiple of them (2 against 3; 1, 3 or 6 would do).
      {"kv_heads_vs_tp",
       edit("model:", "model:\n  arch: llama\n  n_kv_heads: 3",
            edit("  d_model: 64", "  d_model: 48", edit("  n_heads: 4", "  n_heads: 6", edit("  dp: 2", "  dp: 1", edit("  tp: 1", "  tp: 2"))))),
       {}, 2,
       {"cfg.yaml:3: model.n_kv_heads: 3 key/value heads and parallel.tp = 2 ranks: tp must divide the key/value "
        "heads (each rank holds whole heads) or be a multiple of them (each head replicated over tp / n_kv_heads "
        "ranks); use tp among 1, 3, 6, or n_kv_heads among 1, 2, 6", "[parallel.tp at "}},
      {"odd_head_dim", edit("  d_model: 64", "  d_model: 60", edit("model:", "model:\n  arch: llama")), {}, 2,
       {"cfg.yaml:5: model.d_model: 60 / model.n_heads = 15 channels per head, an odd number", "e.g. d_model 64"}},
  };
}

// Sizes whose products overflow (a d_model near 2^31).
std::vector<BadCase> overflow_cases() {
  return {
      {"d_model_near_2_31", edit("  d_model: 64", "  d_model: 2147483644"), {}, 2,
       {"cfg.yaml:4: model.d_model: makes an MLP weight (4·d_model·d_model) 1.84e+19 elements, more than the "
        "2^60 a tensor may hold (model.d_model = 2147483644); use smaller sizes"}},
      {"logits_overflow", edit("  vocab_size: 256", "  vocab_size: 2147483646"),
       {"train.micro_batch=1000000000", "train.global_batch=2000000000"}, 2,
       {"--set train.micro_batch: makes a micro-batch's logits (micro_batch·seq_len·vocab_size)",
        "train.micro_batch = 1000000000, train.seq_len = 64, model.vocab_size = 2147483646",
        "[model.vocab_size at ", "cfg.yaml:2]"}},
  };
}

// Model.moe: mixture of experts.
std::vector<BadCase> moe_cases() {
  return {
      {"moe_key_with_gpt2", edit("  n_heads: 4", "  n_heads: 4\n  moe:\n    n_experts: 8"), {}, 2,
       {"cfg.yaml:8: model.moe.n_experts: not read by gpt2 models (a key of llama)"}},
      {"moe_top_k_too_large", moe_base(), {"model.moe.top_k=9"}, 2,
       {"--set model.moe.top_k: 9 experts per token, but model.moe.n_experts = 8; use 1..8",
        "[model.moe.n_experts at ", "cfg.yaml:4]"}},
      {"moe_groups_not_dividing", moe_base("\n    n_group: 3"), {}, 2,
       {"cfg.yaml:6: model.moe.n_group: 3 expert groups do not divide model.moe.n_experts = 8; use one of 1, 2, 4, 8"}},
      {"moe_topk_group_too_large", moe_base("\n    n_group: 2\n    topk_group: 3"), {}, 2,
       {"cfg.yaml:7: model.moe.topk_group: 3 groups per token, but model.moe.n_group = 2; use 1..2"}},
      {"moe_groups_hold_too_few", moe_base("\n    n_group: 4"), {"model.moe.top_k=3"}, 2,
       {"--set model.moe.top_k: 3 experts per token, but model.moe.topk_group = 1 groups of 2 experts hold only 2; "
        "raise topk_group to at least 2 or lower top_k"}},
      {"moe_group_of_one", moe_base("\n    n_group: 8\n    topk_group: 4"), {}, 2,
       {"cfg.yaml:6: model.moe.n_group: 8 groups of 1 expert; a group scores the sum of its two best experts"}},
      {"moe_no_moe_layer", moe_base("\n    first_k_dense: 4"), {}, 2,
       {"cfg.yaml:6: model.moe.first_k_dense: 4 leading dense layers leave no MoE layer among model.n_layers = 4; "
        "use 0..3"}},
      {"moe_ep_not_dividing_experts", edit("  dp: 2", "  dp: 4", moe_base()), {"model.moe.n_experts=6", "parallel.ep=4"}, 4,
       {"--set parallel.ep: ep = 4 does not divide model.moe.n_experts = 6", "common divisors of 6 and dp = 4: 1, 2"}},
      {"moe_ep_on_dense_model", edit("model:", "model:\n  arch: llama"), {"parallel.ep=2"}, 2,
       {"--set parallel.ep: 2, but the model has no experts to shard (model.moe.n_experts is 0)"}},
      {"moe_key_without_experts", edit("model:", "model:\n  arch: llama\n  moe:\n    top_k: 4"), {}, 2,
       {"cfg.yaml:4: model.moe.top_k: set, but model.moe.n_experts is 0 (a dense model, where it has no effect)"}},
      {"moe_empty_mapping", edit("model:", "model:\n  arch: llama\n  moe:"), {}, 2,
       {"cfg.yaml:3: model.moe: given without n_experts"}},
      {"moe_not_a_mapping", edit("model:", "model:\n  arch: llama\n  moe: 8"), {}, 2,
       {"cfg.yaml:3: model.moe: expected a mapping of keys, got 8 (keys of model.moe: n_experts, top_k, n_shared"}},
      {"moe_unknown_key", edit("model:", "model:\n  arch: llama\n  moe:\n    n_expert: 8"), {}, 2,
       {"cfg.yaml:4: model.moe.n_expert: unknown key (did you mean model.moe.n_experts?)"}},
      {"moe_set_mapping", moe_base(), {"model.moe=8"}, 2,
       {"--set model.moe: a mapping, not a key (set its keys one by one, e.g. --set model.moe.n_experts=...)"}},
      {"moe_other_trainers_name", edit("  n_heads: 4", "  n_heads: 4\n  num_experts_per_tok: 2"), {}, 2,
       {"cfg.yaml:7: model.num_experts_per_tok: unknown key (did you mean model.moe.top_k?)"}},
      {"moe_overlap_on_dense_model", kBase, {"parallel.moe_overlap=true"}, 2,
       {"--set parallel.moe_overlap: true, but the model has no MoE layers"}},
      {"moe_overlap_one_micro_batch", moe_base(), {"parallel.moe_overlap=true", "train.global_batch=4"}, 2,
       {"--set parallel.moe_overlap: true, but a step has 1 micro-batch per rank", "the interleave needs two"}},
      {"moe_overlap_with_pipeline", moe_base(), {"parallel.moe_overlap=true", "parallel.pp=2", "parallel.dp=1"}, 2,
       {"--set parallel.moe_overlap: true with parallel.pp = 2"}},
      {"moe_with_tp", moe_base(), {"parallel.tp=2", "parallel.dp=1"}, 2,
       {"--set parallel.tp: 2 with model.moe.n_experts = 8: tensor parallelism of the MoE layers",
        "use parallel.tp: 1 with model.moe", "[model.moe.n_experts at ", "cfg.yaml:4]"}},
      {"moe_cuda_graphs_with_ep", moe_base(), {"parallel.ep=2", "train.device=cuda", "train.cuda_graphs=true"}, 2,
       {"--set train.cuda_graphs: true with parallel.ep = 2"}},
      {"moe_fp8_blockwise_on_gpu_off_blocks", moe_base(), {"train.fp8.recipe=blockwise", "train.device=cuda",
                                                           "model.moe.ffn_dim=192"}, 2,
       {"--set train.fp8.recipe: blockwise with routed experts on a GPU", "whole 128×128 weight blocks",
        "model.d_model (64) and the experts' width (model.moe.ffn_dim: 192) must be multiples of 128",
        "use train.fp8.recipe: tensorwise"}},
  };
}

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> all;
  for (auto section : {schema_cases, override_cases, job_cases, family_cases, overflow_cases, moe_cases})
    for (BadCase& c : section()) all.push_back(std::move(c));
  return all;
}

// gtest prints a failing row by its name.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, FailsWithKeyLineAndFix) {
  const BadCase& c = GetParam();
  testing::TempDir dir;
  std::string path = dir.write("cfg.yaml", c.yaml);
  try {
    Config cfg = load_config(path, c.overrides);
    validate(cfg, c.world);
    FAIL() << c.name << ": no error for\n" << c.yaml;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
    for (const std::string& piece : c.expect) EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
        << c.name << ": message\n  " << e.what() << "\nlacks\n  " << piece;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfig, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& p) { return std::string(p.param.name); });

TEST(BadConfig, TableIsLargeAndNamesUnique) {
  auto cases = bad_cases();
  EXPECT_GE(cases.size(), 20u);
  std::set<std::string> names;
  for (const auto& c : cases) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

// The base config of the table is itself valid at world 2: every row fails for its own edit.
TEST(BadConfig, BaseIsValid) {
  testing::TempDir dir;
  Config cfg = load_config(dir.write("cfg.yaml", kBase), {});
  EXPECT_NO_THROW(validate(cfg, 2));
}

// The routed experts' grouped FP8 GEMMs have CUDA kernels for tensorwise at any width: a MoE under it
// on a GPU is valid (blockwise needs whole 128×128 weight blocks, refused above off them).
TEST(BadConfig, Fp8TensorwiseWithRoutedExpertsOnAGpuIsValid) {
  testing::TempDir dir;
  Config cfg = load_config(dir.write("cfg.yaml", moe_base()), {"train.fp8.recipe=tensorwise", "train.device=cuda"});
  EXPECT_NO_THROW(validate(cfg, 2));
}

}  // namespace
}  // namespace tetra::launch
