// The experiment config: one YAML file per run (ARCHITECTURE.md §5). The structs below mirror
// the file key for key (section.key, snake_case); load_config checks the file against that schema,
// validate checks the combinations against the job before any work, to_yaml writes it back.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/model_args.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tetra::launch {

// The choice keys' values. The schema (launch/config/schema.h) parses each key's text into its
// enum once and writes the same text back; ChoiceText<E>::names[i] is the text of E's value i, so
// an enum's values and its names are declared in the same order.
enum class DtypeChoice { Auto, FP32, BF16 };              // train.precision, parallel.grad_dtype
enum class ResidualDtype { BF16, FP32 };                  // train.residual_dtype
enum class DeviceChoice { Auto, Cpu, Cuda };              // train.device
enum class PipelineSchedule { GPipe, OneFOneB, Interleaved1F1B, ZbH1, DualPipe, DualPipeV };  // parallel.schedule
enum class GradAllReduce { Nccl, CopyEngine };            // parallel.grad_all_reduce
enum class Switch { Auto, On, Off };                      // parallel.tp_comm_overlap, train.run_ahead
enum class OnNonfinite { Skip, Stop };                    // train.on_nonfinite
enum class OptimizerName { AdamW };                       // optimizer.name
enum class StateDtype { FP32, BF16 };                     // optimizer.state_dtype
enum class LrDecay { Cosine, Constant, Linear, Wsd };     // optimizer.schedule
enum class DecayShape { Linear, Cosine, Sqrt };           // optimizer.decay_shape (under wsd)
enum class DataIo { Auto, Gds, Pinned, Posix };           // data.io
// train.recompute is models/'s Recompute (None, Mlp, Full); train.fp8.recipe models/' Fp8Recipe.

template <class E>
struct ChoiceText;
template <>
struct ChoiceText<DtypeChoice> {
  static constexpr std::array<const char*, 3> names = {"auto", "fp32", "bf16"};
};
template <>
struct ChoiceText<ResidualDtype> {
  static constexpr std::array<const char*, 2> names = {"bf16", "fp32"};
};
template <>
struct ChoiceText<DeviceChoice> {
  static constexpr std::array<const char*, 3> names = {"auto", "cpu", "cuda"};
};
template <>
struct ChoiceText<PipelineSchedule> {
  static constexpr std::array<const char*, 6> names = {"gpipe", "1f1b", "interleaved_1f1b",
                                                       "zb_h1", "dualpipe", "dualpipev"};
};
template <>
struct ChoiceText<GradAllReduce> {
  static constexpr std::array<const char*, 2> names = {"nccl", "copy_engine"};
};
template <>
struct ChoiceText<Switch> {
  static constexpr std::array<const char*, 3> names = {"auto", "on", "off"};
};
template <>
struct ChoiceText<OnNonfinite> {
  static constexpr std::array<const char*, 2> names = {"skip", "stop"};
};
template <>
struct ChoiceText<OptimizerName> {
  static constexpr std::array<const char*, 1> names = {"adamw"};
};
template <>
struct ChoiceText<StateDtype> {
  static constexpr std::array<const char*, 2> names = {"fp32", "bf16"};
};
template <>
struct ChoiceText<LrDecay> {
  static constexpr std::array<const char*, 4> names = {"cosine", "constant", "linear", "wsd"};
};
template <>
struct ChoiceText<DecayShape> {
  static constexpr std::array<const char*, 3> names = {"linear", "cosine", "sqrt"};
};
template <>
struct ChoiceText<DataIo> {
  static constexpr std::array<const char*, 4> names = {"auto", "gds", "pinned", "posix"};
};
template <>
struct ChoiceText<Recompute> {
  static constexpr std::array<const char*, 3> names = {"none", "mlp", "full"};
};

template <>
struct ChoiceText<Fp8Recipe> {
  static constexpr std::array<const char*, 3> names = kFp8RecipeNames;
};

// The config text of a choice ("1f1b" for PipelineSchedule::OneFOneB); "?" for a value outside
// the enum (a Config built in code with a cast).
template <class E>
const char* choice_name(E value) {
  const auto i = static_cast<std::size_t>(value);
  return i < ChoiceText<E>::names.size() ? ChoiceText<E>::names[i] : "?";
}

// Every choice's text, in enum order (the schema's "one of: ...").
template <class E>
std::vector<std::string> choice_names() {
  return {ChoiceText<E>::names.begin(), ChoiceText<E>::names.end()};
}

// checkpoint.resume: none (a fresh run), auto (the newest usable checkpoint of RUN_DIR), or the
// path of a step_N directory; text() is how the config writes it.
struct ResumeFrom {
  enum class Kind { None, Auto, Path };
  Kind kind = Kind::None;
  std::string path;  // Kind::Path only
  std::string text() const { return kind == Kind::None ? "none" : kind == Kind::Auto ? "auto" : path; }
  bool operator==(const ResumeFrom&) const = default;
};

struct RunConfig {
  std::string name = "tetra";        // RUN_DIR = output_dir/name
  std::string output_dir = "runs";
  std::int64_t seed = 1234;          // model init, data order, dropout: the same seed, the same run
  double comm_timeout_s = 600;       // a collective that takes longer than this aborts the job
  bool html_report = true;           // write RUN_DIR/report.html at the end of every attempt
};

// The model section: models/' ModelArgs as the schema fills them (docs/models.md; `recompute` is
// train.recompute, set by model_args), and where the weights come from.
struct ModelConfig : ModelArgs {
  std::string init_from;             // a consolidated HDF5 checkpoint or Hugging Face folder; "" = random init
};

struct ParallelConfig {
  int dp = 0;                        // 0 = world / (tp·pp)
  int tp = 1;
  int pp = 1;
  int ep = 1;                        // carved out of dp; must divide it
  int zero_stage = 0;                // 0 plain DP, 1 optimizer states, 2 + grads, 3 + params (FSDP)
  int fsdp_prefetch = 1;             // layers whose parameters are all-gathered ahead (stage 3)
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  int micro_batches = 0;             // per step and pipeline; 0 = global_batch / (dp·micro_batch)
  // model.n_layers per pipeline stage, in stage order; empty = divided by cost (parallel/pipeline/stage_split.h).
  std::vector<int> stage_layers;
  bool overlap_grad_reduce = true;
  double bucket_mb = 25;             // gradient bucket size for the reduce
  // dtype gradients are accumulated and reduced in: auto = bf16 when training in bf16, except at
  // stages 0–1 with several micro-batches per step (an fp32 buffer keeps their sum exact).
  DtypeChoice grad_dtype = DtypeChoice::Auto;
  // Who moves stage 0's gradient all-reduce: nccl (kernels on the SMs), or copy_engine (the GPUs'
  // copy engines through CUDA IPC; every dp rank on one host; runtime/peer_copy_communicator.h).
  GradAllReduce grad_all_reduce = GradAllReduce::Nccl;
  // Mixture of experts at pp = 1: run the micro-batches of a step two at a time, interleaved at the
  // MoE layers' dispatch and combine, so one's all-to-all runs while the other computes.
  bool moe_overlap = false;
  // tp > 1: norms, residuals and elementwise work on 1/tp of the tokens, all-gather before the
  // column-parallel GEMMs and reduce-scatter after the row-parallel ones (else all-reduces).
  bool sequence_parallel = true;
  // tp > 1: the tensor-parallel collectives split into chunks pipelined with their GEMMs:
  // auto (on a GPU) | on | off.
  Switch tp_comm_overlap = Switch::Auto;
};

// train.residual_dtype's default. The one that reaches a given loss sooner on a GPU is the default:
// scripts/bench/residual_precision.sh measures both against PyTorch autocast (docs/models.md).
inline constexpr ResidualDtype kDefaultResidualDtype = ResidualDtype::BF16;

// train.max_skipped_steps: how many steps train.on_nonfinite: skip may skip before the run stops
// (exit 3). It stops at the first skipped step that makes more than `consecutive` in a row, or
// more than `fraction` of the steps so far (resumed ones included) once more than `consecutive`
// were skipped in all, so that one early skip in a short run does not stop it.
struct SkipLimit {
  int consecutive = 10;
  double fraction = 0.05;
};

// train.fp8: the blocks' projections in FP8 (models/fp8_linear.h; docs/kernels.md "FP8 training").
struct Fp8Config {
  Fp8Recipe recipe = Fp8Recipe::None;  // none | tensorwise | blockwise
};

struct TrainConfig {
  int steps = 0;                     // required
  int global_batch = 0;              // required: sequences per optimizer step, over all dp ranks
  int micro_batch = 1;               // sequences per rank per micro-batch
  int seq_len = 0;                   // tokens per sequence; load_config fills in model.seq_len
  DtypeChoice precision = DtypeChoice::Auto;  // auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16
  // The residual stream between blocks (and its gradient) under precision bf16: bf16 | fp32
  // (Megatron's --fp32-residual-connection); fp32 precision keeps it fp32 whatever this says.
  ResidualDtype residual_dtype = kDefaultResidualDtype;
  DeviceChoice device = DeviceChoice::Auto;  // auto (cuda where a GPU is visible) | cpu | cuda
  double grad_clip = 1.0;            // global gradient norm; 0 = off
  int eval_every = 0;                // steps between evaluations on data.val; 0 = off
  int eval_batches = 10;             // global batches per evaluation
  Recompute recompute = Recompute::None;  // none | mlp | full
  Fp8Config fp8;
  OnNonfinite on_nonfinite = OnNonfinite::Skip;  // skip the update of a step with a non-finite loss or grad, or stop
  SkipLimit max_skipped_steps;       // under on_nonfinite: skip
  bool cuda_graphs = false;
  Switch run_ahead = Switch::Auto;   // launch step s+1 before step s is read back: auto (on a GPU) | on | off
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::AdamW;
  double lr = 3e-4;                  // peak learning rate, reached after warmup_steps
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;         // decoupled; applied to matrices, not to biases and norms
  int warmup_steps = 0;              // linear warmup from 0 to lr
  // cosine | constant | linear (decay to min_lr at the last step) | wsd (warmup, stable at lr, then
  // decay to min_lr over the last decay_steps; README "Using tetra", launch/train/lr_schedule.h)
  LrDecay schedule = LrDecay::Cosine;
  double min_lr = 0;
  int decay_steps = 0;               // wsd: the decay's length in steps; 0 = decay_fraction of train.steps
  double decay_fraction = 0;         // wsd: the decay's share of train.steps; 0 (with decay_steps 0) = 0.2
  DecayShape decay_shape = DecayShape::Linear;  // wsd: linear | cosine | sqrt
  // AdamW's exp_avg and exp_avg_sq: fp32 | bf16 (as DeepSeek-V3: 2 + 2 bytes per parameter instead
  // of 4 + 4; the master weights stay fp32 and the update computes in fp32). Checkpoints hold them
  // in fp32 either way, so a run resumes under the other setting.
  StateDtype state_dtype = StateDtype::FP32;
};

// wsd: the steps the decay takes (the last ones of train.steps): decay_steps if set, else
// decay_fraction (0.2 if unset) of `steps`, rounded, at least 1.
int64_t wsd_decay_steps(const OptimizerConfig& o, int64_t steps);

struct DataConfig {
  // Token files (HDF5 or llm.c .bin): a path, a glob, a list of shards, or a weighted blend,
  // stored as text (launch/config/data.h: data_spec() reads it; docs/data.md). Required to train.
  std::string train;
  std::string val;                   // the same without weights; "" = no validation set
  double val_fraction = 0;           // hold out this share of each training dataset (its tail) instead
  bool shuffle = true;
  int prefetch = 4;                  // micro-batches read ahead; 0 = read when needed
  DataIo io = DataIo::Auto;          // auto | gds | pinned | posix
  int loader_threads = 2;
};

struct CheckpointConfig {
  int every = 0;                     // steps between checkpoints; 0 = off
  int keep = 2;                      // newest checkpoints kept; 0 = keep all
  ResumeFrom resume;                 // none | auto (newest in RUN_DIR/checkpoints) | a step_N path
  bool async = false;                // write in the background after the blocking copy
  bool allow_data_change = false;    // resume on training data other than the checkpoint's (fingerprint)
};

struct LogConfig {
  int every = 1;                     // steps between printed lines (metrics.jsonl has every step)
  double peak_tflops = 0;            // per-device peak for MFU; 0 = from the device
  int profile_steps = 0;             // trace the last N steps into trace.json; 0 = off
  bool tensorboard = false;          // rank 0 also writes RUN_DIR/tensorboard/events.out.tfevents.*
  int sample_every = 0;              // rank 0 prints the model's continuation of sample_prompt; 0 = off
  std::string sample_prompt;         // text, encoded by sample_tokenizer
  int sample_tokens = 32;            // new tokens per sample (greedy)
  std::string sample_tokenizer;      // make_tokenizer's spec; "" = model.init_from's tokenizer.json, else byte
};

// Where each key's value came from, so that errors can point at the line to fix.
struct KeyOrigins {
  std::string file;                       // the config file as given; "" for a Config built in code
  std::map<std::string, int> line;        // "train.steps" → 1-based line in file (sections too: "train")
  std::set<std::string> overridden;       // keys set by --set (they win over the file)
  // Model keys that model.init_from's config.json set: "DIR/config.json (num_hidden_layers)".
  std::map<std::string, std::string> from_folder;

  // "FILE:LINE" for a key of the file, "--set KEY" for an override, "DIR/config.json (FIELD)" for a
  // key model.init_from's folder set, "FILE" (or "config") otherwise.
  std::string where(const std::string& key) const;
  // True when the user wrote this key (in the file or with --set), false when it is a default.
  bool given(const std::string& key) const { return line.count(key) || overridden.count(key); }
};

// What resolve() derives for a run, typed. Not keys of the file: to_yaml and operator== ignore it;
// a Config that resolve() did not return has done == false and the defaults below.
struct Resolved {
  bool done = false;
  int dp = 0;                            // data-parallel ranks: parallel.dp, or world / (tp·pp)
  int accumulation_steps = 0;            // micro-batches per step and pipeline: global_batch / (dp·micro_batch)
  DeviceKind device = DeviceKind::CPU;   // train.device, auto decided by whether a GPU is visible
  DType activation_dtype = DType::F32;   // train.precision, auto decided by the device
  DType residual_dtype = DType::F32;     // the residual stream's (train.residual_dtype; docs/models.md)
  DType optimizer_state_dtype = DType::F32;  // AdamW's moments (optimizer.state_dtype)
};

struct Config {
  RunConfig run;
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  KeyOrigins origins;  // not part of the experiment: ignored by operator== and to_yaml
  Resolved resolved;   // likewise: filled by resolve()

  // Equal experiments: every key of every section (origins are not compared).
  bool operator==(const Config& other) const;
};

// Reads the YAML file, applies the overrides ("section.key=value", value parsed as YAML: 3, 3e-4,
// true, [0.9, 0.95], a string), and checks every key against the schema: unknown keys, wrong types,
// values out of range, invalid choices and missing required keys throw a tetra::Error of kind
// Config, "FILE:LINE: key.path: what is wrong (what would be valid)". When model.init_from is a
// Hugging Face folder, its config.json gives the model's shape keys (launch/config/init_from.h); a
// key the YAML also gives must agree. Fills train.seq_len from model.seq_len when absent. Does not
// look at the job: that is validate().
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from YAML text; source_name stands for the file in messages. Reads no other file: the
// model section is taken as written (a run directory's config.yaml, a checkpoint's, is complete).
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

// Checks every value and every combination against a job of world_size ranks: the mesh
// (dp·tp·pp = world, ep | dp), the model against the mesh (tp | n_heads, pp stages | n_layers),
// batch sizes, schedule constraints, the optimizer, what the training step cannot combine. Every
// check that depends on the config and the world size alone lives here, so that `tetra plan` and
// `tetra train` accept the same configs. Throws a Config error naming the keys involved, their
// lines, and what would be valid. Needs no GPU and touches no file.
void validate(const Config& cfg, int world_size);

// The checks that only a training run needs: data.train is set and exists, data.val,
// model.init_from and a checkpoint.resume path exist.
void validate_for_training(const Config& cfg);

// The config a run works with: validate()d; parallel.dp, parallel.micro_batches, train.device and
// train.precision set to what they stand for when 0 or auto (so that RUN_DIR/config.yaml says what
// ran), and `resolved` filled (cuda_available: a GPU is visible to this process). Throws when
// train.device is cuda but cuda_available is false, or when auto found no GPU for a key that needs one.
Config resolve(const Config& cfg, int world_size, bool cuda_available);

// Every key of every section, defaults included, as YAML that load_config reads back to an equal
// Config (RUN_DIR/config.yaml).
std::string to_yaml(const Config& cfg);

// dp as configured, or world / (tp·pp) when parallel.dp is 0 (no divisibility check: see validate).
int data_parallel_size(const ParallelConfig& p, int world_size);

// Model chunks each pipeline rank holds under a schedule: 2 for interleaved_1f1b (two virtual
// stages per rank) and dualpipev (the V: chunks r and 2·pp-1-r), else 1. DualPipe holds two
// chunks too, but they are copies of stages r and pp-1-r, so the model still has pp stages.
int pipeline_chunks_per_rank(PipelineSchedule schedule);

// The number of pipeline stages the model is cut into: pp · pipeline_chunks_per_rank(schedule).
int pipeline_stages(const ParallelConfig& p);

}  // namespace tetra::launch
