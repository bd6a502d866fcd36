// The config schema table, and the helpers that describe, check and print one key's value.
#include "launch/config/schema.h"

#include "launch/config/data.h"
#include "models/model_family.h"
#include "models/rope_scaling.h"
#include "runtime/text_join.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace tetra::launch::schema {

namespace {

// KEY(section, key, Type): the designators every row starts with.
#define KEY(sec, k, T)                                                  \
  .section = #sec, .key = #k, .type = Type::T, .get = [](Config& c) -> void* { return &c.sec.k; }

// ENUM_KEY(section, key): a choice key kept as an enum, its choices the enum's names (ChoiceText).
#define ENUM_KEY(sec, k)                                                                           \
  .section = #sec, .key = #k, .type = Type::Enum, .get = [](Config& c) -> void* { return &c.sec.k; }, \
  .index = [](const Config& c) { return static_cast<int>(c.sec.k); },                              \
  .set_index = [](Config& c, int i) { c.sec.k = static_cast<decltype(Config{}.sec.k)>(i); },        \
  .choices = choice_names<decltype(Config{}.sec.k)>()

// MOE_KEY(key, Type): a key of the model.moe mapping, "model.moe.KEY" (Field::key "moe.KEY"), a
// field of models/' MoeArgs.
#define MOE_KEY(k, T) \
  .section = "model", .key = "moe." #k, .type = Type::T, .get = [](Config& c) -> void* { return &c.model.moe.k; }

// ROPE_KEY(key, Type): a key of the model.rope_scaling mapping, a field of models/' RopeScalingArgs.
#define ROPE_KEY(k, T)                                                                               \
  .section = "model", .key = "rope_scaling." #k, .type = Type::T,                                    \
  .get = [](Config& c) -> void* { return &c.model.rope_scaling.k; }

constexpr double kIntMax = 2147483647.0;

// run: where the run directory goes and what makes it reproducible.
std::vector<Field> run_fields() {
  return {
    {KEY(run, name, String), .nonempty = true, .note = "a directory name under run.output_dir, e.g. tiny"},
    {KEY(run, output_dir, String), .nonempty = true},
    {KEY(run, seed, Int64), .lo = 0, .hi = 9.2e18},
    {KEY(run, comm_timeout_s, Float), .lo = 0, .lo_open = true, .note = "seconds"},
    {KEY(run, html_report, Bool), .note = "RUN_DIR/report.html at the end of every attempt (docs/goodput.md)"},
  };
}

// model: the network.
std::vector<Field> model_fields() {
  return {
    {KEY(model, arch, Choice), .choices = model_family_names(), .note = "the model family (docs/models.md)"},
    {KEY(model, vocab_size, Int64), .required = true, .lo = 1, .hi = kIntMax,
     .note = "e.g. 256 for byte-level text, 50304 for GPT-2"},
    {KEY(model, seq_len, Int64), .required = true, .lo = 1, .hi = kIntMax,
     .note = "the longest context, e.g. 1024"},
    {KEY(model, d_model, Int64), .required = true, .lo = 1, .hi = kIntMax, .note = "e.g. 768"},
    {KEY(model, n_layers, Int64), .required = true, .lo = 1, .hi = kIntMax, .note = "e.g. 12"},
    {KEY(model, n_heads, Int64), .required = true, .lo = 1, .hi = kIntMax, .note = "e.g. 12"},
    {KEY(model, init_from, String),
     .note = "a consolidated HDF5 checkpoint or a Hugging Face model folder; empty = random init"},
    {KEY(model, ln_eps, Float), .lo = 0, .lo_open = true, .note = "gpt2's LayerNorm epsilon"},
    {KEY(model, n_kv_heads, Int64), .lo = 0, .hi = kIntMax,
     .note = "llama: key/value heads, a divisor of model.n_heads (grouped-query attention); 0 = n_heads"},
    {KEY(model, ffn_dim, Int64), .lo = 0, .hi = kIntMax,
     .note = "llama: SwiGLU hidden width, e.g. 8192; 0 = 8·d_model/3 rounded up to a multiple of 256"},
    {KEY(model, norm_eps, Float), .lo = 0, .lo_open = true, .note = "llama's RMSNorm epsilon"},
    {KEY(model, rope_theta, Float), .lo = 0, .lo_open = true, .note = "llama: rotary base, e.g. 500000 for Llama 3"},
    {KEY(model, tie_embeddings, Bool), .note = "llama: the output layer is the token embedding"},
    {KEY(model, head_dim, Int64), .lo = 0, .hi = kIntMax,
     .note = "qwen3: channels per attention head, e.g. 128, need not be d_model / n_heads; 0 = d_model / n_heads"},
    {KEY(model, sliding_window, Int64), .lo = 0, .hi = kIntMax,
     .note = "mistral: attention window in positions, at least model.seq_len (full attention); 0 = none"},
  };
}

// model.rope_scaling: rotary frequencies for a longer context (llama; docs/models.md). Absent = none.
std::vector<Field> rope_scaling_fields() {
  return {
    {ROPE_KEY(type, Choice), .choices = rope_scaling_types(),
     .note = "llama: none (plain RoPE), linear (inv_freq / factor) or llama3 (Llama 3.1+)"},
    {ROPE_KEY(factor, Float), .lo = 0, .note = "linear, llama3: e.g. 32 for Llama 3.2; 0 = not set"},
    {ROPE_KEY(low_freq_factor, Float), .lo = 0, .note = "llama3: e.g. 1; 0 = not set"},
    {ROPE_KEY(high_freq_factor, Float), .lo = 0, .note = "llama3: above low_freq_factor, e.g. 4; 0 = not set"},
    {ROPE_KEY(original_max_position_embeddings, Int64), .lo = 0, .hi = kIntMax,
     .note = "llama3: the pretraining context, e.g. 8192; 0 = not set"},
  };
}

// model.moe: DeepSeek-style mixture of experts (llama; docs/models.md). Absent = dense.
std::vector<Field> moe_fields() {
  return {
    {MOE_KEY(n_experts, Int64), .lo = 0, .hi = kIntMax,
     .note = "llama: routed experts per MoE layer, e.g. 64; 0 = dense (no MoE layers)"},
    {MOE_KEY(top_k, Int64), .lo = 1, .hi = kIntMax, .note = "experts per token, at most model.moe.n_experts"},
    {MOE_KEY(n_shared, Int64), .lo = 0, .hi = kIntMax,
     .note = "shared experts, one SwiGLU of width n_shared·ffn_dim every token passes; 0 = none"},
    {MOE_KEY(ffn_dim, Int64), .lo = 0, .hi = kIntMax, .note = "each expert's SwiGLU width, e.g. 512; 0 = model.ffn_dim"},
    {MOE_KEY(first_k_dense, Int64), .lo = 0, .hi = kIntMax,
     .note = "leading layers that keep the dense MLP of model.ffn_dim, fewer than model.n_layers"},
    {MOE_KEY(route_scale, Float), .lo = 0, .lo_open = true,
     .note = "the normalised routing weights are multiplied by it (Hugging Face's routed_scaling_factor)"},
    {MOE_KEY(n_group, Int64), .lo = 1, .hi = kIntMax,
     .note = "expert groups for group-limited routing, a divisor of model.moe.n_experts; 1 = none"},
    {MOE_KEY(topk_group, Int64), .lo = 1, .hi = kIntMax, .note = "groups a token may route to, at most model.moe.n_group"},
    {MOE_KEY(bias_update_rate, Float), .lo = 0,
     .note = "auxiliary-loss-free balancing: the bias step after each optimizer step; 0 = off"},
    {MOE_KEY(aux_loss_coef, Float), .lo = 0, .note = "α of the sequence-wise balance loss, e.g. 1e-4; 0 = off"},
    {MOE_KEY(force_balance, Bool),
     .note = "a benchmark aid, not a model: token t goes to experts (t·top_k + j) mod n_experts"},
  };
}

// parallel: the mesh and how communication overlaps compute.
std::vector<Field> parallel_fields() {
  return {
    {KEY(parallel, dp, Int), .lo = 0, .hi = kIntMax, .note = "0 = world / (tp·pp)"},
    {KEY(parallel, tp, Int), .lo = 1, .hi = kIntMax},
    {KEY(parallel, pp, Int), .lo = 1, .hi = kIntMax},
    {KEY(parallel, ep, Int), .lo = 1, .hi = kIntMax, .note = "a divisor of dp"},
    {KEY(parallel, zero_stage, Int), .lo = 0, .hi = 3},
    {KEY(parallel, fsdp_prefetch, Int), .lo = 0, .hi = kIntMax, .note = "layers gathered ahead; 0 = none"},
    {ENUM_KEY(parallel, schedule)},
    {KEY(parallel, micro_batches, Int), .lo = 0, .hi = kIntMax,
     .note = "0 = train.global_batch / (dp·train.micro_batch)"},
    {KEY(parallel, stage_layers, IntList), .lo = 1, .hi = kIntMax,
     .note = "model.n_layers per pipeline stage, e.g. [7, 8, 8, 5]; [] = split by cost"},
    {KEY(parallel, overlap_grad_reduce, Bool)},
    {KEY(parallel, bucket_mb, Float), .lo = 0, .lo_open = true, .note = "megabytes"},
    {ENUM_KEY(parallel, grad_dtype),
     .note = "gradient accumulation and reduction; auto: bf16 for bf16 training unless stage 0-1 accumulates"},
    {ENUM_KEY(parallel, grad_all_reduce),
     .note = "stage 0: copy_engine moves gradients with the copy engines (one host)"},
    {KEY(parallel, moe_overlap, Bool),
     .note = "mixture of experts at pp = 1: two micro-batches interleaved so one's all-to-all runs while the "
             "other computes"},
    {KEY(parallel, sequence_parallel, Bool),
     .note = "tp > 1: norms and residuals on 1/tp of the tokens (docs/tensor_parallel.md)"},
    {ENUM_KEY(parallel, tp_comm_overlap),
     .note = "tp > 1: tensor-parallel collectives chunked under their GEMMs; auto: on a GPU"},
  };
}

// train: the loop.
std::vector<Field> train_fields() {
  return {
    {KEY(train, steps, Int), .required = true, .lo = 1, .hi = kIntMax},
    {KEY(train, global_batch, Int), .required = true, .lo = 1, .hi = kIntMax,
     .note = "sequences per step over all dp ranks"},
    {KEY(train, micro_batch, Int), .lo = 1, .hi = kIntMax, .note = "sequences per rank per micro-batch"},
    {KEY(train, seq_len, Int), .lo = 0, .hi = kIntMax, .note = "at most model.seq_len; 0 = model.seq_len"},
    {ENUM_KEY(train, precision)},
    {ENUM_KEY(train, residual_dtype),
     .note = "the residual stream between blocks under bf16 precision; fp32 on the CPU whatever it says"},
    {ENUM_KEY(train, device)},
    {KEY(train, grad_clip, Float), .lo = 0, .note = "0 = off"},
    {KEY(train, eval_every, Int), .lo = 0, .hi = kIntMax, .note = "0 = off"},
    {KEY(train, eval_batches, Int), .lo = 1, .hi = kIntMax},
    {ENUM_KEY(train, recompute)},
    {.section = "train", .key = "fp8.recipe", .type = Type::Enum,
     .get = [](Config& c) -> void* { return &c.train.fp8.recipe; },
     .index = [](const Config& c) { return static_cast<int>(c.train.fp8.recipe); },
     .set_index = [](Config& c, int i) { c.train.fp8.recipe = static_cast<Fp8Recipe>(i); },
     .choices = choice_names<Fp8Recipe>(),
     .note = "the blocks' projections in FP8: tensorwise (one scale per tensor) or blockwise (1x128 and 128x128 "
             "tiles); under tp, tokens of a micro-batch a multiple of 16·tp (docs/kernels.md)"},
    {ENUM_KEY(train, on_nonfinite)},
    {.section = "train", .key = "max_skipped_steps.consecutive", .type = Type::Int,
     .get = [](Config& c) -> void* { return &c.train.max_skipped_steps.consecutive; }, .lo = 1, .hi = kIntMax,
     .note = "under on_nonfinite: skip, more skipped steps in a row stop the run (exit 3)"},
    {.section = "train", .key = "max_skipped_steps.fraction", .type = Type::Float,
     .get = [](Config& c) -> void* { return &c.train.max_skipped_steps.fraction; }, .lo = 0, .lo_open = true, .hi = 1,
     .note = "under on_nonfinite: skip, more skipped steps than this share of the steps so far stop the run (once "
             "more than max_skipped_steps.consecutive were skipped); 1 = no limit by share"},
    {ENUM_KEY(train, run_ahead),
     .note = "launch the next step before this one is read back; auto: on a GPU (docs/kernels.md)"},
    {KEY(train, cuda_graphs, Bool), .note = "replay steps as CUDA graphs from the third on (ZeRO 0-2; docs/kernels.md)"},
  };
}

// optimizer: AdamW and its learning-rate schedule.
std::vector<Field> optimizer_fields() {
  return {
    {ENUM_KEY(optimizer, name)},
    {KEY(optimizer, lr, Float), .lo = 0, .lo_open = true, .note = "e.g. 3e-4"},
    {KEY(optimizer, betas, FloatPair), .lo = 0, .hi = 1, .hi_open = true},
    {KEY(optimizer, eps, Float), .lo = 0, .lo_open = true},
    {KEY(optimizer, weight_decay, Float), .lo = 0},
    {KEY(optimizer, warmup_steps, Int), .lo = 0, .hi = kIntMax, .note = "at most train.steps"},
    {ENUM_KEY(optimizer, schedule)},
    {KEY(optimizer, min_lr, Float), .lo = 0, .note = "at most optimizer.lr"},
    {KEY(optimizer, decay_steps, Int), .lo = 0, .hi = kIntMax,
     .note = "schedule wsd: the last steps, which decay to min_lr; 0 = decay_fraction"},
    {KEY(optimizer, decay_fraction, Float), .lo = 0, .hi = 1,
     .note = "schedule wsd: the decay's share of train.steps; 0 = 0.2 unless decay_steps is set"},
    {ENUM_KEY(optimizer, decay_shape)},
    {ENUM_KEY(optimizer, state_dtype),
     .note = "AdamW's exp_avg and exp_avg_sq; bf16: 4 instead of 8 bytes per parameter, fp32 master and math"},
  };
}

// data: token files and the loader.
std::vector<Field> data_fields() {
  return {
    {KEY(data, train, DataSources), .note = "e.g. data/tiny/train.h5 (docs/data.md)"},
    {KEY(data, val, DataSources), .note = "no weights; empty = no validation set"},
    {KEY(data, val_fraction, Float), .lo = 0, .hi = 1, .hi_open = true,
     .note = "share of each training dataset's windows (its tail) held out for validation; 0 = none"},
    {KEY(data, shuffle, Bool)},
    {KEY(data, prefetch, Int), .lo = 0, .hi = kIntMax, .note = "micro-batches read ahead"},
    {ENUM_KEY(data, io)},
    {KEY(data, loader_threads, Int), .lo = 1, .hi = kIntMax},
  };
}

// checkpoint: when to save, what to keep, where to resume.
std::vector<Field> checkpoint_fields() {
  return {
    {KEY(checkpoint, every, Int), .lo = 0, .hi = kIntMax, .note = "0 = off"},
    {KEY(checkpoint, keep, Int), .lo = 0, .hi = kIntMax, .note = "0 = keep all"},
    {KEY(checkpoint, resume, Resume), .nonempty = true,
     .note = "none, auto, or a checkpoint directory RUN_DIR/checkpoints/step_N"},
    {KEY(checkpoint, async, Bool)},
    {KEY(checkpoint, allow_data_change, Bool),
     .note = "resume although the training data's fingerprint differs from the checkpoint's"},
  };
}

// log: what is printed and profiled.
std::vector<Field> log_fields() {
  return {
    {KEY(log, every, Int), .lo = 1, .hi = kIntMax},
    {KEY(log, peak_tflops, Float), .lo = 0, .note = "0 = from the device"},
    {KEY(log, profile_steps, Int), .lo = 0, .hi = kIntMax, .note = "0 = off"},
    {KEY(log, tensorboard, Bool), .note = "TensorBoard event files in RUN_DIR/tensorboard"},
    {KEY(log, sample_every, Int), .lo = 0, .hi = kIntMax,
     .note = "print a greedy continuation of log.sample_prompt every N steps; 0 = off"},
    {KEY(log, sample_prompt, String), .note = "the samples' prompt, as text"},
    {KEY(log, sample_tokens, Int), .lo = 1, .hi = kIntMax, .note = "new tokens per sample"},
    {KEY(log, sample_tokenizer, String),
     .note = "byte, a tokenizer.json or a SentencePiece .model; empty = model.init_from's tokenizer.json, else byte"},
  };
}

// Every key, section by section in the order of sections(), model.rope_scaling and model.moe after model.
std::vector<Field> make_fields() {
  std::vector<Field> all;
  for (auto* section : {run_fields, model_fields, rope_scaling_fields, moe_fields, parallel_fields, train_fields, optimizer_fields,
                        data_fields, checkpoint_fields, log_fields}) {
    std::vector<Field> f = section();
    all.insert(all.end(), std::make_move_iterator(f.begin()), std::make_move_iterator(f.end()));
  }
  return all;
}
#undef KEY
#undef ENUM_KEY
#undef MOE_KEY
#undef ROPE_KEY

// Damerau-Levenshtein (optimal string alignment) distance, case-insensitive.
int edit_distance(const std::string& a, const std::string& b) {
  auto low = [](char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); };
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

bool in_range(const Field& f, double v) {
  if (v < f.lo || (f.lo_open && v == f.lo)) return false;
  if (v > f.hi || (f.hi_open && v == f.hi)) return false;
  return true;
}

std::string range_fail(const Field& f, double v, const std::string& shown) {
  if (!std::isfinite(v)) return shown + " is not a finite number";
  return shown + (v < f.lo || (f.lo_open && v == f.lo) ? " is too small" : " is too large");
}

}  // namespace

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"run",  "model", "parallel",   "train",
                                             "optimizer", "data", "checkpoint", "log"};
  return s;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = make_fields();
  return f;
}

const Field* find(const std::string& section, const std::string& key) {
  for (const Field& f : fields())
    if (section == f.section && key == f.key) return &f;
  return nullptr;
}

bool is_mapping(const std::string& section, const std::string& name) { return !mapping_keys(section, name).empty(); }

std::vector<std::string> mapping_keys(const std::string& section, const std::string& name) {
  std::vector<std::string> keys;
  const std::string prefix = name + ".";
  for (const Field& f : fields()) {
    const std::string key = f.key;
    if (section == f.section && key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0)
      keys.push_back(key.substr(prefix.size()));
  }
  return keys;
}

std::string valid_text(const Field& f) {
  auto num = [](double v) { return format_double(v); };
  std::string s;
  switch (f.type) {
    case Type::Int:
    case Type::Int64: {
      bool has_hi = f.hi < kIntMax;
      if (f.lo > -kIntMax && has_hi)
        s = "an integer in " + num(f.lo) + ".." + num(f.hi);
      else if (f.lo > -kIntMax)
        s = "an integer ≥ " + num(f.lo);
      else
        s = "an integer";
      break;
    }
    case Type::Float:
    case Type::FloatPair: {
      std::string range;
      bool has_lo = std::isfinite(f.lo), has_hi = std::isfinite(f.hi);
      if (has_lo && has_hi)
        range = std::string(f.lo_open ? "(" : "[") + num(f.lo) + ", " + num(f.hi) + (f.hi_open ? ")" : "]");
      if (f.type == Type::FloatPair) {
        s = "a list of two numbers" + (range.empty() ? "" : " in " + range) + ", e.g. [0.9, 0.95]";
      } else if (!range.empty()) {
        s = "a number in " + range;
      } else if (has_lo) {
        s = std::string("a number ") + (f.lo_open ? "> " : "≥ ") + num(f.lo);
      } else {
        s = "a number";
      }
      break;
    }
    case Type::IntList: s = "a list of integers ≥ " + num(f.lo); break;
    case Type::Bool: s = "true or false"; break;
    case Type::String:
    case Type::Resume: s = f.nonempty ? "a non-empty string" : "a string"; break;
    case Type::Choice:
    case Type::Enum: s = "one of: " + join_text(f.choices, ", "); break;
    case Type::DataSources: s = data_sources_valid_text(); break;
  }
  if (f.note[0]) s += std::string("; ") + f.note;
  return s;
}

std::string value_text(const Field& f, const Config& c) {
  const void* p = f.cget(c);
  switch (f.type) {
    case Type::Int: return std::to_string(*static_cast<const int*>(p));
    case Type::Int64: return std::to_string(*static_cast<const std::int64_t*>(p));
    case Type::Float: return format_double(*static_cast<const double*>(p));
    case Type::Bool: return *static_cast<const bool*>(p) ? "true" : "false";
    case Type::String:
    case Type::Choice: return quote_if_needed(*static_cast<const std::string*>(p));
    case Type::Enum: {
      const int i = f.index(c);
      return i >= 0 && i < static_cast<int>(f.choices.size()) ? quote_if_needed(f.choices[static_cast<size_t>(i)])
                                                              : std::to_string(i);
    }
    case Type::Resume: return quote_if_needed(static_cast<const ResumeFrom*>(p)->text());
    case Type::DataSources: return data_sources_yaml(*static_cast<const std::string*>(p));
    case Type::FloatPair: {
      const auto& a = *static_cast<const std::array<double, 2>*>(p);
      return bracketed_text(a, ", ", format_double);
    }
    case Type::IntList: {
      return bracketed_text(*static_cast<const std::vector<int>*>(p), ", ");
    }
  }
  return "";
}

std::string check_value(const Field& f, const Config& c) {
  const void* p = f.cget(c);
  switch (f.type) {
    case Type::Int: {
      int v = *static_cast<const int*>(p);
      return in_range(f, v) ? "" : range_fail(f, v, std::to_string(v));
    }
    case Type::Int64: {
      std::int64_t v = *static_cast<const std::int64_t*>(p);
      double d = static_cast<double>(v);
      return in_range(f, d) ? "" : range_fail(f, d, std::to_string(v));
    }
    case Type::Float: {
      double v = *static_cast<const double*>(p);
      return std::isfinite(v) && in_range(f, v) ? "" : range_fail(f, v, format_double(v));
    }
    case Type::FloatPair: {
      const auto& a = *static_cast<const std::array<double, 2>*>(p);
      for (int i = 0; i < 2; ++i)
        if (!std::isfinite(a[i]) || !in_range(f, a[i]))
          return range_fail(f, a[i], std::string(i ? "the second value " : "the first value ") + format_double(a[i]));
      return "";
    }
    case Type::IntList: {
      const auto& v = *static_cast<const std::vector<int>*>(p);
      for (size_t i = 0; i < v.size(); ++i)
        if (!in_range(f, v[i])) return range_fail(f, v[i], "entry " + std::to_string(i) + " = " + std::to_string(v[i]));
      return "";
    }
    case Type::Bool: return "";
    case Type::DataSources: return "";  // checked as it is read (read_data_sources)
    case Type::String: {
      const auto& s = *static_cast<const std::string*>(p);
      return f.nonempty && s.empty() ? "must not be empty" : "";
    }
    case Type::Resume: {
      const auto& r = *static_cast<const ResumeFrom*>(p);
      return f.nonempty && r.kind == ResumeFrom::Kind::Path && r.path.empty() ? "must not be empty" : "";
    }
    case Type::Choice: {
      const auto& s = *static_cast<const std::string*>(p);
      if (std::find(f.choices.begin(), f.choices.end(), s) != f.choices.end()) return "";
      return choice_error(f, s);
    }
    case Type::Enum: {
      const int i = f.index(c);
      return i >= 0 && i < static_cast<int>(f.choices.size()) ? "" : choice_error(f, std::to_string(i));
    }
  }
  return "";
}

std::string choice_error(const Field& f, const std::string& text) {
  std::string best = closest(text, f.choices);
  return quote_if_needed(text) + " is not a valid choice" + (best.empty() ? "" : " (did you mean " + best + "?)");
}

std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const std::string& c : candidates) {
    int d = edit_distance(name, c);
    // A prefix of at least 4 letters also counts as close ("warmup" for "warmup_steps").
    bool prefix = std::min(name.size(), c.size()) >= 4 &&
                  (c.rfind(name, 0) == 0 || name.rfind(c, 0) == 0);
    if (prefix) d = std::min(d, 1);
    if (d < best_d) best_d = d, best = c;
  }
  int limit = std::max<int>(2, static_cast<int>(name.size()) / 3);
  return best_d <= limit && best_d < static_cast<int>(name.size()) ? best : "";
}

std::string suggest_key(const std::string& section, const std::string& key) {
  std::vector<std::string> keys;
  for (const Field& f : fields())
    if (section == f.section) keys.push_back(f.key);
  std::string best = closest(key, keys);
  if (!best.empty()) return "did you mean " + section + "." + best + "?";
  // The right key in the wrong section ("train.lr" for "optimizer.lr").
  for (const Field& f : fields())
    if (key == f.key) return "did you mean " + f.path() + "?";
  if (std::string alias = known_alias(key); !alias.empty()) return "did you mean " + alias + "?";
  // A close key of another section ("train.warmup" for "optimizer.warmup_steps").
  std::vector<std::string> all;
  for (const Field& f : fields()) all.push_back(f.key);
  best = closest(key, all);
  if (!best.empty())
    for (const Field& f : fields())
      if (best == f.key) return "did you mean " + f.path() + "?";
  return "valid keys of " + section + ": " + join_text(keys, ", ");
}

std::string quote_if_needed(const std::string& s) {
  bool plain = !s.empty();
  for (size_t i = 0; i < s.size() && plain; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    bool ok = std::isalnum(ch) || ch == '_' || ch == '.' || ch == '/' || (i > 0 && (ch == '-' || ch == '+'));
    plain = ok;
  }
  // Words that YAML reads as null (or as a bool or number in other readers) stay quoted.
  static const std::array<const char*, 10> special = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"};
  std::string low = s;
  for (char& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* w : special)
    if (low == w) plain = false;
  if (plain) return s;
  std::string out = "\"";
  for (char ch : s) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string format_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

}  // namespace tetra::launch::schema
