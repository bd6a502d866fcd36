// Config checks against the job, before any work: every value in range, then the combinations
// (mesh vs world, model vs mesh, batches, pipeline schedule, optimizer, device). Each error names
// the keys involved with their lines, and says what would be valid.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "launch/config/config.h"
#include "launch/config/data.h"
#include "launch/config/schema.h"
#include "launch/config/model.h"
#include "models/llama_config.h"
#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/stage_split.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace {

// "cfg.yaml:9: parallel.dp: WHAT [parallel.tp at cfg.yaml:10]" (or "--set parallel.dp: WHAT ..."):
// the first key is the one to fix; the others are listed with their origins when the user wrote them.
[[noreturn]] void fail(const Config& c, const std::vector<std::string>& keys, const std::string& what) {
  std::string also;
  for (size_t i = 1; i < keys.size(); ++i) {
    if (!c.origins.given(keys[i])) continue;
    also += (also.empty() ? " [" : ", ") + keys[i] + " at " + c.origins.where(keys[i]);
  }
  if (!also.empty()) also += "]";
  std::string where = c.origins.where(keys[0]);
  bool named = where == "--set " + keys[0];  // an override's origin already names its key
  TETRA_FAIL(Config, where, ": ", named ? "" : keys[0] + ": ", what, also);
}

std::string str(long long v) { return std::to_string(v); }

// The numbers dividing both a and b, "1, 2, 4".
std::string common_divisors(int a, int b) {
  std::string out;
  for (int d = 1; d <= std::min(a, b); ++d)
    if (a % d == 0 && b % d == 0) out += (out.empty() ? "" : ", ") + str(d);
  return out;
}

// The divisors of n, for "use one of ..." suggestions.
std::string divisors(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + str(d);
  return out;
}

void check_values(const Config& c) {
  for (const schema::Field& f : schema::fields()) {
    std::string wrong = schema::check_value(f, c);
    if (!wrong.empty()) fail(c, {f.path()}, wrong + " (" + schema::valid_text(f) + ")");
  }
  const std::string& name = c.run.name;
  if (name == "." || name == ".." || name.find('/') != std::string::npos)
    fail(c, {"run.name"}, "\"" + name + "\" is not a single directory name (e.g. tiny; the run goes to run.output_dir/run.name)");
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// model.* keys that the family of model.arch does not read (another family's n_kv_heads with
// gpt2, ...): an error when the user wrote them, or when a Config built in code moved them off
// their default, so that no setting is silently ignored.
void check_model_keys(const Config& c) {
  const ModelFamily& family = model_family_of(c);
  const std::vector<std::string> takes = family.config_keys();
  const Config defaults;
  for (const schema::Field& f : schema::fields()) {
    if (std::string(f.section) != "model" || contains(common_model_keys(), f.key) || contains(takes, f.key)) continue;
    if (!c.origins.given(f.path()) && schema::value_text(f, c) == schema::value_text(f, defaults)) continue;
    std::string others;
    for (const std::string& arch : model_family_names())
      if (contains(model_family(arch).config_keys(), f.key)) others += (others.empty() ? "" : ", ") + arch;
    std::string own;  // a nested mapping's keys ("moe.top_k") as the mapping, once
    std::vector<std::string> listed;
    for (const std::string& k : takes) {
      const std::string item = k.find('.') == std::string::npos ? k : "the " + k.substr(0, k.find('.')) + " mapping";
      if (contains(listed, item)) continue;
      listed.push_back(item);
      own += (own.empty() ? "" : ", ") + item;
    }
    fail(c, {f.path(), "model.arch"},
         "not read by " + c.model.arch + " models" + (others.empty() ? "" : " (a key of " + others + ")") +
             "; remove it" + (others.empty() ? "" : ", or set model.arch to " + others) +
             (own.empty() ? "" : " (" + c.model.arch + " takes, besides the common keys: " + own + ")"));
  }
}

// model.moe and the settings that need it: a dense model (n_experts 0) takes no other model.moe
// key; tp > 1 is refused (no tensor-parallel MoE layers yet); ep shards the experts; the two-micro-batch overlap needs MoE layers, pp = 1 and two
// micro-batches to interleave.
void check_moe(const Config& c, int dp) {
  const MoeArgs& moe = c.model.moe;
  const ParallelConfig& p = c.parallel;
  if (moe.n_experts == 0) {
    const Config defaults;
    for (const schema::Field& f : schema::fields()) {
      const std::string key = f.key;
      if (std::string(f.section) != "model" || key.rfind("moe.", 0) != 0 || key == "moe.n_experts") continue;
      if (!c.origins.given(f.path()) && schema::value_text(f, c) == schema::value_text(f, defaults)) continue;
      fail(c, {f.path(), "model.moe.n_experts"},
           "set, but model.moe.n_experts is 0 (a dense model, where it has no effect); set model.moe.n_experts to the "
           "number of routed experts, or remove it");
    }
    if (c.origins.line.count("model.moe"))
      fail(c, {"model.moe", "model.moe.n_experts"},
           "given without n_experts; set model.moe.n_experts to the number of routed experts (e.g. 8), or remove "
           "model.moe for a dense model");
    if (p.ep > 1)
      fail(c, {"parallel.ep", "model.moe.n_experts"},
           str(p.ep) + ", but the model has no experts to shard (model.moe.n_experts is 0); use ep 1, or give the "
           "model experts under model.moe");
    if (p.moe_overlap)
      fail(c, {"parallel.moe_overlap", "model.moe.n_experts"},
           "true, but the model has no MoE layers (model.moe.n_experts is 0) and nothing to overlap; set it to false");
    return;
  }
  if (p.tp > 1)
    fail(c, {"parallel.tp", "model.moe.n_experts"},
         str(p.tp) + " with model.moe.n_experts = " + str(moe.n_experts) + ": tensor parallelism of the MoE layers "
         "(routed and shared experts, router) is not implemented yet; use parallel.tp: 1 with model.moe (shard the "
         "experts with parallel.ep), or a dense model (no model.moe) with tp > 1");
  if (c.train.residual_dtype == ResidualDtype::FP32 && c.train.precision == DtypeChoice::BF16)
    fail(c, {"train.residual_dtype", "model.moe.n_experts"},
         "fp32 with MoE layers (model.moe.n_experts = " + str(moe.n_experts) + ") under bf16 precision: the MoE "
         "MLP's combine adds into a residual stream of the activation dtype only (docs/models.md \"Residual stream "
         "precision\"); use train.residual_dtype bf16, or a dense model");
  if (moe.n_experts % p.ep != 0)
    fail(c, {"parallel.ep", "model.moe.n_experts"},
         "ep = " + str(p.ep) + " does not divide model.moe.n_experts = " + str(moe.n_experts) +
             " (each expert-parallel rank holds n_experts / ep experts); use ep among the common divisors of " +
             str(moe.n_experts) + " and dp = " + str(dp) + ": " + common_divisors(static_cast<int>(moe.n_experts), dp));
  if (p.ep > 1 && c.train.cuda_graphs)
    fail(c, {"train.cuda_graphs", "parallel.ep"},
         "true with parallel.ep = " + str(p.ep) + ": the expert-parallel all-to-all sizes its buffers from token "
         "counts read on the host in every MoE layer, which a captured graph cannot do; set train.cuda_graphs to "
         "false, or ep to 1");
  if (p.moe_overlap) {
    if (p.pp > 1)
      fail(c, {"parallel.moe_overlap", "parallel.pp"},
           "true with parallel.pp = " + str(p.pp) + "; the two-micro-batch interleave is the pp = 1 form (a pipeline "
           "overlaps through its schedule's forward-backward pairs); set it to false or pp to 1");
    const long long per_round = static_cast<long long>(dp) * c.train.micro_batch;
    if (per_round > 0 && c.train.global_batch / per_round < 2)
      fail(c, {"parallel.moe_overlap", "train.global_batch", "train.micro_batch"},
           "true, but a step has " + str(c.train.global_batch / per_round) + " micro-batch per rank "
           "(global_batch / (dp·micro_batch)) and the interleave needs two; raise train.global_batch to " +
               str(2 * per_round) + " or more, lower train.micro_batch, or set it to false");
  }
}

void check_mesh(const Config& c, int world) {
  const ParallelConfig& p = c.parallel;
  long long tp_pp = static_cast<long long>(p.tp) * p.pp;
  std::string tp_pp_text = "tp·pp = " + str(p.tp) + "·" + str(p.pp) + " = " + str(tp_pp);
  if (p.dp == 0) {
    if (world % tp_pp != 0)
      fail(c, p.tp > 1 ? std::vector<std::string>{"parallel.tp", "parallel.pp"} : std::vector<std::string>{"parallel.pp", "parallel.tp"},
           tp_pp_text + " does not divide the " + str(world) + " ranks of the job, so parallel.dp cannot be derived; "
           "launch a multiple of " + str(tp_pp) + " ranks, or choose tp·pp among " + divisors(world));
    return;
  }
  long long total = static_cast<long long>(p.dp) * tp_pp;
  if (total == world) return;
  std::string what = "dp·tp·pp = " + str(p.dp) + "·" + str(p.tp) + "·" + str(p.pp) + " = " + str(total) +
                     " but the job has " + str(world) + (world == 1 ? " rank" : " ranks") + "; ";
  if (world % tp_pp == 0)
    what += "set parallel.dp to " + str(world / tp_pp) + " (or 0 to derive it) or launch " + str(total) + " ranks";
  else
    what += "launch " + str(total) + " ranks, or change parallel.tp and parallel.pp so that tp·pp divides " + str(world);
  fail(c, {"parallel.dp", "parallel.tp", "parallel.pp"}, what);
}

void check_model_split(const Config& c, int dp) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  if (dp % p.ep != 0)
    fail(c, {"parallel.ep", "parallel.dp"},
         "ep = " + str(p.ep) + " does not divide dp = " + str(dp) +
             " (the expert group is carved out of the data-parallel group); use ep among " + divisors(dp));
  // The family's own shape checks, against the tensor-parallel split too (heads, vocabulary).
  try {
    model_family_of(c).validate(model_args(c), p.tp);
  } catch (const ModelArgsError& e) {
    fail(c, e.keys(), e.detail());
  }
  // Stages hold contiguous layers, at least one each; how many each holds comes from their cost
  // (the embedding counted with the first, the output layer with the last) or parallel.stage_layers.
  int stages = pipeline_stages(p);
  std::string into = pipeline_chunks_per_rank(p.schedule) > 1 && p.pp > 1
                         ? str(stages) + " pipeline stages (parallel.pp = " + str(p.pp) +
                               " ranks × 2 chunks each for schedule " + choice_name(p.schedule) + ")"
                         : str(stages) + " pipeline stages of parallel.pp";
  if (m.n_layers < stages)
    fail(c, {"model.n_layers", "parallel.pp", "parallel.schedule"},
         str(m.n_layers) + (m.n_layers == 1 ? " layer cannot fill " : " layers cannot fill ") + into + ", which need at least one layer each; use at least " +
             str(stages) + " layers or a smaller pp");
  if (!p.stage_layers.empty()) {
    std::string wrong = stage_layers_problem(p.stage_layers, m.n_layers, stages);
    if (!wrong.empty())
      fail(c, {"parallel.stage_layers", "model.n_layers", "parallel.pp", "parallel.schedule"},
           wrong + " (" + into + "; or leave it out to split by cost)");
  }
}

// Sequence parallelism shards the tokens of a micro-batch over the tp ranks.
void check_tensor_parallel(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const TrainConfig& t = c.train;
  if (p.tp <= 1) return;
  if (t.residual_dtype == ResidualDtype::FP32 && t.precision == DtypeChoice::BF16)
    fail(c, {"train.residual_dtype", "parallel.tp"},
         "fp32 with parallel.tp = " + str(p.tp) + " under bf16 precision: the tensor-parallel layers' collectives "
         "and fused residual adds run in the activation dtype only (docs/tensor_parallel.md); use "
         "train.residual_dtype bf16, or parallel.tp 1");
  if (!p.sequence_parallel) return;
  const long long tokens = static_cast<long long>(t.micro_batch) * t.seq_len;
  if (tokens % p.tp != 0)
    fail(c, {"train.micro_batch", "train.seq_len", "parallel.tp", "parallel.sequence_parallel"},
         "a micro-batch of micro_batch·seq_len = " + str(t.micro_batch) + "·" + str(t.seq_len) + " = " + str(tokens) +
             " tokens does not split over parallel.tp = " + str(p.tp) +
             " ranks (sequence parallelism gives each 1/tp of them); make micro_batch·seq_len a multiple of " +
             str(p.tp) + ", or set parallel.sequence_parallel: false");
}

// train.fp8: the FP8 GEMMs take every dimension in multiples of 16, the tokens of a micro-batch too
// (under tensor parallelism each of the tp chunks of them that the tensor-parallel GEMMs run on); on
// a GPU the routed experts' blockwise GEMMs take whole 128×128 weight blocks.
void check_fp8(const Config& c) {
  const TrainConfig& t = c.train;
  if (t.fp8.recipe == Fp8Recipe::None) return;
  const std::string recipe = fp8_recipe_name(t.fp8.recipe);
  // The grouped kernel's blockwise mainloop (runtime/cuda/moe_grouped_gemm.h GroupedGemm::blockwise):
  // an output tile is one weight block wide, so both of an expert GEMM's widths are whole blocks.
  if (c.model.moe.n_experts > 0 && t.device == DeviceChoice::Cuda && t.fp8.recipe == Fp8Recipe::Blockwise) {
    const int64_t C = c.model.d_model, F = LlamaConfig::from(model_args(c)).expert_ffn();
    if (C % ops::kFp8Block != 0 || F % ops::kFp8Block != 0)
      fail(c, {"train.fp8.recipe", C % ops::kFp8Block != 0 ? "model.d_model" : "model.moe.ffn_dim", "train.device"},
           recipe + " with routed experts on a GPU: the experts' blockwise FP8 GEMMs take whole 128×128 weight "
           "blocks, so model.d_model (" + str(C) + ") and the experts' width (model.moe.ffn_dim: " + str(F) +
           ") must be multiples of 128; use train.fp8.recipe: tensorwise, widths of whole blocks, or "
           "train.device: cpu (the CPU emulates every recipe at any width)");
  }
  const long long tokens = static_cast<long long>(t.micro_batch) * t.seq_len;
  if (tokens % kFp8Multiple != 0)
    fail(c, {"train.fp8.recipe", "train.micro_batch", "train.seq_len"},
         recipe + ": a micro-batch of micro_batch·seq_len = " + str(tokens) + " tokens; the FP8 GEMMs need a multiple of " +
             str(kFp8Multiple) + " (every GEMM dimension is one)");
  const long long tp_multiple = static_cast<long long>(kFp8Multiple) * c.parallel.tp;
  if (c.parallel.tp > 1 && tokens % tp_multiple != 0)
    fail(c, {"train.fp8.recipe", "train.micro_batch", "train.seq_len", "parallel.tp"},
         recipe + " with parallel.tp = " + str(c.parallel.tp) + ": a micro-batch of micro_batch·seq_len = " +
             str(tokens) + " tokens; the tensor-parallel FP8 GEMMs run on chunks of 1/tp of them, each a multiple of " +
             str(kFp8Multiple) + ", so the micro-batch needs a multiple of " + str(tp_multiple));
  // Samples decode one token at a time through the training model, whose projections would then run
  // FP8 GEMMs of one row.
  if (c.log.sample_every > 0)
    fail(c, {"train.fp8.recipe", "log.sample_every"},
         recipe + " with samples: decoding runs the projections on one token at a time, and the FP8 GEMMs need "
         "multiples of " + str(kFp8Multiple) + " rows; set log.sample_every: 0, or sample from a checkpoint with "
         "`tetra generate` (which runs in the working dtype)");
}

void check_batches(const Config& c, int dp) {
  const TrainConfig& t = c.train;
  const ParallelConfig& p = c.parallel;
  long long per_round = static_cast<long long>(dp) * t.micro_batch;
  if (t.global_batch % per_round != 0) {
    long long lo = t.global_batch / per_round * per_round, hi = lo + per_round;
    fail(c, {"train.global_batch", "train.micro_batch", "parallel.dp"},
         str(t.global_batch) + " sequences do not split into micro-batches of dp·micro_batch = " + str(dp) + "·" +
             str(t.micro_batch) + " = " + str(per_round) + "; use a multiple of " + str(per_round) +
             (lo > 0 ? " (e.g. " + str(lo) + " or " + str(hi) + ")" : " (e.g. " + str(hi) + ")") +
             ", or change train.micro_batch");
  }
  int m = static_cast<int>(t.global_batch / per_round);
  if (p.micro_batches != 0 && p.micro_batches != m)
    fail(c, {"parallel.micro_batches", "train.global_batch", "train.micro_batch"},
         str(p.micro_batches) + " but train.global_batch / (dp·train.micro_batch) = " + str(t.global_batch) + " / (" +
             str(dp) + "·" + str(t.micro_batch) + ") = " + str(m) + "; set it to " + str(m) + " or 0 (derived)");
  // What each schedule needs of pp and the micro-batch count (parallel/pipeline/generators.h).
  const std::string needs = schedule_requirement(choice_name(p.schedule), p.pp, m);
  if (!needs.empty()) {
    if (p.schedule == PipelineSchedule::DualPipe && p.pp % 2 != 0)
      fail(c, {"parallel.pp", "parallel.schedule"}, needs + "; use an even pp or schedule dualpipev");
    fail(c, {"parallel.schedule", "train.global_batch", "train.micro_batch", "parallel.pp"},
         needs + " micro-batches per step (global_batch / (dp·micro_batch)); change train.global_batch or "
         "train.micro_batch, or choose another parallel.schedule");
  }
  if (t.seq_len > c.model.seq_len)
    fail(c, {"train.seq_len", "model.seq_len"},
         str(t.seq_len) + " exceeds model.seq_len = " + str(c.model.seq_len) +
             " (the positional table); use at most " + str(c.model.seq_len) + " or raise model.seq_len");
  if (t.eval_every > 0 && c.data.val.empty() && c.data.val_fraction == 0)
    fail(c, {"train.eval_every", "data.val"},
         str(t.eval_every) + " but data.val is not set; set data.val to a token file (or data.val_fraction to hold "
         "out part of the training data), or train.eval_every to 0");
}

// Products of sizes, in doubles (exact enough to compare with the limit, and never overflowing): a
// tensor must have fewer than 2^60 elements (its fp32 bytes then fit an int64), so that no size
// computed later in integers overflows. A model this large never
// fits a device (launch/train/memory_plan.h stops it before allocating); this catches the sizes whose
// arithmetic would itself be undefined behaviour, with the keys to change.
void check_sizes(const Config& c) {
  using Big = double;
  const Big kMaxElements = std::ldexp(1.0, 60);
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  struct Product {
    const char* what;
    Big elements;
    std::vector<std::string> keys;
  };
  const Big V = m.vocab_size, T = m.seq_len, C = m.d_model, L = m.n_layers, B = t.micro_batch, G = t.global_batch;
  const Big S = t.seq_len > 0 ? t.seq_len : m.seq_len;
  const std::vector<Product> products = {
      {"the token embedding (vocab_size·d_model)", V * C, {"model.vocab_size", "model.d_model"}},
      {"the position embedding (seq_len·d_model)", T * C, {"model.seq_len", "model.d_model"}},
      {"an MLP weight (4·d_model·d_model)", 4 * C * C, {"model.d_model"}},
      {"an MLP weight (ffn_dim·d_model)", static_cast<Big>(m.ffn_dim) * C, {"model.ffn_dim", "model.d_model"}},
      {"the parameters of all layers (12·n_layers·d_model²)", 12 * L * C * C, {"model.n_layers", "model.d_model"}},
      {"a micro-batch's MLP activation (micro_batch·seq_len·4·d_model)", 4 * B * S * C,
       {"train.micro_batch", "train.seq_len", "model.d_model"}},
      {"a micro-batch's logits (micro_batch·seq_len·vocab_size)", B * S * V,
       {"train.micro_batch", "train.seq_len", "model.vocab_size"}},
      {"a step's tokens (global_batch·seq_len)", G * S, {"train.global_batch", "train.seq_len"}},
  };
  for (const Product& p : products) {
    if (p.elements < kMaxElements) continue;
    std::string values;
    for (const std::string& k : p.keys) {
      const schema::Field* f = schema::find(k.substr(0, k.find('.')), k.substr(k.find('.') + 1));
      values += (values.empty() ? "" : ", ") + k + " = " + (f ? schema::value_text(*f, c) : std::string("?"));
    }
    char count[32];
    std::snprintf(count, sizeof count, "%.3g", p.elements);
    fail(c, p.keys,
         "makes " + std::string(p.what) + " " + count +
             " elements, more than the 2^60 a tensor may hold (" + values + "); use smaller sizes");
  }
}

void check_optimizer(const Config& c) {
  const OptimizerConfig& o = c.optimizer;
  if (o.warmup_steps > c.train.steps)
    fail(c, {"optimizer.warmup_steps", "train.steps"},
         str(o.warmup_steps) + " exceeds train.steps = " + str(c.train.steps) + "; use at most " + str(c.train.steps));
  if (o.min_lr > o.lr)
    fail(c, {"optimizer.min_lr", "optimizer.lr"},
         schema::format_double(o.min_lr) + " exceeds optimizer.lr = " + schema::format_double(o.lr) +
             "; the schedule decays from lr down to min_lr, so use min_lr ≤ lr");
  if (o.schedule != LrDecay::Wsd) {
    const Config defaults;
    for (const char* k : {"decay_steps", "decay_fraction", "decay_shape"}) {
      const schema::Field& f = *schema::find("optimizer", k);
      const std::string key = f.path();
      if (c.origins.given(key) || schema::value_text(f, c) != schema::value_text(f, defaults))
        fail(c, {key, "optimizer.schedule"},
             "set, but read only under optimizer.schedule: wsd (the schedule is " +
                 std::string(choice_name(o.schedule)) + "); remove it, or set optimizer.schedule: wsd");
    }
    return;
  }
  if (o.decay_steps > 0 && o.decay_fraction > 0)
    fail(c, {"optimizer.decay_steps", "optimizer.decay_fraction"},
         "both set (" + str(o.decay_steps) + " steps and " + schema::format_double(o.decay_fraction) +
             " of train.steps); the decay's length is one of them, so set the other to 0");
  const int64_t decay = wsd_decay_steps(o, c.train.steps);
  if (o.warmup_steps + decay > c.train.steps) {
    const std::string how = o.decay_steps > 0 ? "optimizer.decay_steps" : "optimizer.decay_fraction";
    fail(c, {how, "optimizer.warmup_steps", "train.steps"},
         "a decay of " + str(decay) + " steps after a warmup of " + str(o.warmup_steps) +
             " does not fit in train.steps = " + str(c.train.steps) + "; shorten the warmup or the decay");
  }
}

void check_device(const Config& c) {
  const TrainConfig& t = c.train;
  const bool cpu = t.device == DeviceChoice::Cpu;
  if (cpu && t.precision == DtypeChoice::BF16)
    fail(c, {"train.precision", "train.device"},
         "bf16 with train.device = cpu; the CPU backend computes in fp32 (use fp32 or auto)");
  if (cpu && t.cuda_graphs)
    fail(c, {"train.cuda_graphs", "train.device"}, "true with train.device = cpu; CUDA graphs need a GPU (set it to false)");
  if (cpu && c.data.io == DataIo::Gds)
    fail(c, {"data.io", "train.device"},
         "gds reads straight into GPU memory, but train.device = cpu; use auto, pinned or posix");
  if (c.parallel.grad_all_reduce == GradAllReduce::CopyEngine) {
    if (cpu)
      fail(c, {"parallel.grad_all_reduce", "train.device"},
           "copy_engine moves gradients between GPUs, but train.device = cpu; use nccl");
    if (c.parallel.zero_stage != 0)
      fail(c, {"parallel.grad_all_reduce", "parallel.zero_stage"},
           "copy_engine serves stage 0's all-reduce only, but parallel.zero_stage = " + str(c.parallel.zero_stage) +
               "; use nccl or stage 0");
  }
}

// What the training step cannot combine, whatever the device: the pipeline's transfers are issued
// from the host between its instructions (no CUDA graph, no copy-engine all-reduce, which serves
// the one flat gradient buffer of pp = 1), and ZeRO-3 gathers each layer's weights into buffers
// that outlive a step's end, while a captured step must free what it allocates (runtime/cuda_graph.h).
void check_step_modes(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.pp > 1 && c.train.cuda_graphs)
    fail(c, {"train.cuda_graphs", "parallel.pp"},
         "not supported with parallel.pp > 1 (the pipeline's transfers are issued from the host between its "
         "instructions); set train.cuda_graphs: false");
  if (p.pp > 1 && p.grad_all_reduce == GradAllReduce::CopyEngine)
    fail(c, {"parallel.grad_all_reduce", "parallel.pp"}, "copy_engine is not supported with parallel.pp > 1; use nccl");
  if (c.train.cuda_graphs && p.zero_stage == 3)
    fail(c, {"train.cuda_graphs", "parallel.zero_stage"},
         "not supported with parallel.zero_stage 3 (use stage 0, 1 or 2, or set train.cuda_graphs: false)");
}

// log.sample_every: rank 0 generates with the whole model in its own memory (models/generation.h).
void check_samples(const Config& c) {
  if (c.log.sample_every == 0) return;
  if (c.log.sample_prompt.empty())
    fail(c, {"log.sample_prompt", "log.sample_every"}, "is empty; give the text the samples continue");
  const ParallelConfig& p = c.parallel;
  for (const auto& [key, size] : {std::pair<const char*, int>{"parallel.pp", p.pp}, {"parallel.tp", p.tp},
                                  {"parallel.ep", p.ep}})
    if (size > 1)
      fail(c, {"log.sample_every", key},
           std::string("samples need the whole model on rank 0, which ") + key + " " + str(size) +
               " splits; set log.sample_every: 0, or sample from a checkpoint with `tetra generate`");
  if (p.zero_stage == 3)
    fail(c, {"log.sample_every", "parallel.zero_stage"},
         "samples need the whole model on rank 0, which ZeRO-3 shards; set log.sample_every: 0, or sample from a "
         "checkpoint with `tetra generate`");
}

// data.train / data.val read as data sources (launch/config/data.h) and their combinations.
void check_data(const Config& c) {
  const data::DataSpec val = data_spec(c.data.val, "data.val");
  if (val.blend)
    fail(c, {"data.val"}, "validation data cannot be a weighted blend; list its shards without weights, "
                          "e.g. [val_a.bin, val_b.bin]");
  if (!val.empty() && c.data.val_fraction > 0)
    fail(c, {"data.val_fraction", "data.val"},
         schema::format_double(c.data.val_fraction) + " holds out part of data.train for validation, but data.val "
         "names a validation set too; set one of them (data.val_fraction: 0, or data.val empty)");
}

}  // namespace

void validate(const Config& cfg, int world_size) {
  if (world_size < 1) TETRA_FAIL(Usage, "the job has ", world_size, " ranks; a job needs at least one");
  check_values(cfg);
  check_model_keys(cfg);
  check_mesh(cfg, world_size);
  int dp = data_parallel_size(cfg.parallel, world_size);
  check_sizes(cfg);  // before any code multiplies the sizes
  check_model_split(cfg, dp);
  check_batches(cfg, dp);
  check_moe(cfg, dp);
  check_tensor_parallel(cfg);
  check_fp8(cfg);
  check_optimizer(cfg);
  check_device(cfg);
  check_step_modes(cfg);
  check_samples(cfg);
  check_data(cfg);
}

void validate_for_training(const Config& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (cfg.data.train.empty())
    fail(cfg, {"data.train"},
         "not set; a training run needs a token file (make one with `tetra data prepare --input FILES --tokenizer byte "
         "--out data/NAME/train.h5`)");
  auto need_file = [&](const std::string& key, const std::string& path, const std::string& how) {
    if (!fs::exists(path, ec))
      fail(cfg, {key}, path + " does not exist (working directory " + fs::current_path(ec).string() + "); " + how);
  };
  // Every listed file exists and every glob matches (the files themselves are checked when the
  // loader opens them, before the first step).
  auto need_data = [&](const std::string& key, const std::string& text) {
    const data::DataSpec spec = data_spec(text, key);
    for (const data::SourceSpec& source : spec.sources) {
      try {
        data::expand_shards(source, key);
      } catch (const Error& e) {
        std::string what = e.what();
        if (what.rfind(key + ": ", 0) == 0) what.erase(0, key.size() + 2);
        fail(cfg, {key}, what);
      }
    }
  };
  need_data("data.train", cfg.data.train);
  need_data("data.val", cfg.data.val);
  if (!cfg.model.init_from.empty())
    need_file("model.init_from", cfg.model.init_from,
              "give a consolidated HDF5 file or a Hugging Face model folder (make one with `tetra ckpt consolidate`), "
              "or fix the path");
  const ResumeFrom& r = cfg.checkpoint.resume;
  if (r.kind == ResumeFrom::Kind::Path)
    need_file("checkpoint.resume", r.path, "use none, auto (the newest checkpoint of the run) or a step_N directory");
}

Config resolve(const Config& cfg, int world_size, bool cuda_available) {
  validate(cfg, world_size);
  Config r = cfg;
  const TrainConfig& t = cfg.train;
  if (t.device == DeviceChoice::Cuda && !cuda_available)
    fail(cfg, {"train.device"},
         std::string("cuda, but no GPU is visible to this process (check the driver and CUDA_VISIBLE_DEVICES, or ") +
             (built_with_cuda() ? "" : "build tetra with CUDA; ") + "use train.device: auto or cpu)");
  const bool on_cuda = t.device == DeviceChoice::Cuda || (t.device == DeviceChoice::Auto && cuda_available);
  const DtypeChoice precision =
      t.precision != DtypeChoice::Auto ? t.precision : on_cuda ? DtypeChoice::BF16 : DtypeChoice::FP32;
  if (!on_cuda && t.device == DeviceChoice::Auto) {
    if (precision == DtypeChoice::BF16)
      fail(cfg, {"train.precision", "train.device"},
           "bf16, but train.device = auto found no GPU and the CPU backend computes in fp32; use fp32 or auto");
    if (t.cuda_graphs)
      fail(cfg, {"train.cuda_graphs", "train.device"},
           "true, but train.device = auto found no GPU and runs on the CPU; set train.cuda_graphs to false");
    if (cfg.data.io == DataIo::Gds)
      fail(cfg, {"data.io", "train.device"},
           "gds, but train.device = auto found no GPU and runs on the CPU; use auto, pinned or posix");
    if (cfg.parallel.grad_all_reduce == GradAllReduce::CopyEngine)
      fail(cfg, {"parallel.grad_all_reduce", "train.device"},
           "copy_engine, but train.device = auto found no GPU and runs on the CPU; use nccl");
  }
  // The keys say what runs (RUN_DIR/config.yaml); `resolved` holds the same, typed for the run.
  r.parallel.dp = data_parallel_size(cfg.parallel, world_size);
  r.parallel.micro_batches = t.global_batch / (r.parallel.dp * t.micro_batch);
  if (r.train.seq_len == 0) r.train.seq_len = r.model.seq_len;
  r.train.device = on_cuda ? DeviceChoice::Cuda : DeviceChoice::Cpu;
  r.train.precision = precision;
  validate(r, world_size);
  r.resolved.done = true;
  r.resolved.dp = r.parallel.dp;
  r.resolved.accumulation_steps = r.parallel.micro_batches;
  r.resolved.device = on_cuda ? DeviceKind::CUDA : DeviceKind::CPU;
  r.resolved.activation_dtype = activation_dtype(r);
  r.resolved.residual_dtype = residual_dtype(r);
  r.resolved.optimizer_state_dtype = optimizer_state_dtype(r);
  return r;
}

}  // namespace tetra::launch
