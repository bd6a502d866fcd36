#include "launch/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "launch/checkpoint/files.h"
#include "launch/config/data.h"
#include "launch/report/goodput.h"
#include "launch/report/html_page.h"
#include "launch/job/rank_agreement.h"
#include "launch/job/signals.h"
#include "launch/train/copy_engine.h"
#include "launch/train/memory_plan.h"
#include "launch/config/model.h"
#include "models/layer_pass.h"
#include "models/moe_balance.h"
#include "models/parallelize.h"
#include "models/weight_source.h"
#include "parallel/expert/placement.h"
#include "parallel/expert/dense_and_expert_optimizer.h"
#include "runtime/device_info.h"
#include "runtime/memory.h"
#include "runtime/ops.h"
#include "runtime/stream.h"
#include "runtime/trace.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

std::string format_rate(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", tokens_per_s / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}

}  // namespace

Trainer::Trainer(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world)
    : cfg_(cfg), env_(env), world_(world) {
  setup();
}

Trainer::~Trainer() = default;

// A fresh run (checkpoint.resume: none) in a directory that holds an earlier job starts a new job:
// the earlier job's files move to RUN_DIR/previous/<UTC time>/ so its ledger is not mixed in.
void Trainer::archive_previous_run() {
  const fs::path dir(run_dir_);
  if (!fs::exists(dir / "goodput.jsonl")) return;
  std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&t));
  const fs::path dest = dir / "previous" / stamp;
  fs::create_directories(dest);
  for (const char* name : {"goodput.jsonl", "goodput.json", "metrics.jsonl", "config.yaml", "trace.json", "checkpoints"})
    if (fs::exists(dir / name)) fs::rename(dir / name, dest / name);
  std::printf("tetra: %s held an earlier run (checkpoint.resume is none): moved it to %s\n", run_dir_.c_str(),
              dest.c_str());
}

// Rank 0's run directory, ledger and metrics log (the other ranks write none of them).
void Trainer::prepare_run_dir() {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) {
    const std::string where = cfg_.origins.where("run.output_dir");
    TETRA_FAIL(Config, where, where == "--set run.output_dir" ? "" : ": run.output_dir",
               ": cannot create the run directory ", run_dir_, " (run.output_dir/run.name): ", ec.message(),
               "; choose a directory this job can write to, or fix its permissions");
  }
  if (cfg_.checkpoint.resume.kind == ResumeFrom::Kind::None) archive_previous_run();
  ledger_ = std::make_unique<GoodputLedger>(GoodputLedger::path_in(run_dir_));
  ledger_->attempt_start(env_.process_start_unix, env_.world_size, env_.host);
  const fs::path config_copy = fs::path(run_dir_) / "config.yaml";
  std::ofstream out(config_copy);
  out << to_yaml(cfg_);
  out.flush();
  if (!out) TETRA_FAIL(Data, "cannot write ", config_copy.string(), "; check free space and permissions of ", run_dir_);
  metrics_ = std::make_unique<MetricsLog>(MetricsLog::path_in(run_dir_), ledger_->attempt());
}

// A run whose memory plan (launch/train/memory_plan.h) exceeds the device stops here, before it allocates
// anything, with the plan and the keys that change it. On the CPU the ranks of a host share its
// physical memory, so the plan of every local rank together is compared with it.
void Trainer::check_memory_fits(int dp) const {
  // The model's parameters carry shapes only until a ParamSet is built: nothing is allocated here.
  // Under a pipeline, this rank's stages only (its pipeline rank: rank / (dp·tp), ARCHITECTURE.md §4).
  // Under tensor parallelism, this rank's slices (every tp rank holds the same sizes).
  const std::unique_ptr<Model> shapes = model_family_of(cfg_).build(model_args(cfg_));
  parallelize(*shapes, model_family_of(cfg_), model_args(cfg_),
              {cfg_.parallel.tp, 0, cfg_.parallel.sequence_parallel, nullptr, cfg_.parallel.ep, nullptr});
  const MemoryPlan plan = pipeline_memory_plan(cfg_, *pipe_, env_.rank / (dp * cfg_.parallel.tp), shapes->params(), dp);
  const double capacity = static_cast<double>(device_capacity_bytes(device_));
  const double sharing = device_.is_cpu() ? std::max(1, env_.local_size) : 1;
  if (capacity <= 0 || plan.total() * sharing <= capacity) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  auto at = [&](const char* key) {
    const std::string where = cfg_.origins.where(key);
    return std::string(key) + (where.rfind("--set", 0) == 0 || where.find(':') != std::string::npos
                                   ? " (" + where + ")" : std::string());
  };
  char head[256];
  std::snprintf(head, sizeof head, "the memory plan needs %.2f GiB per rank%s, but %s has %.2f GiB", plan.total() / gib,
                device_.is_cpu() ? (" × " + std::to_string(env_.local_size) + " ranks on this host").c_str() : "",
                device_.is_cpu() ? "the host" : device_.str().c_str(), capacity / gib);
  char parts[256];
  std::snprintf(parts, sizeof parts,
                "parameters %.2f, gradients %.2f, optimizer state %.2f, activations %.2f (one micro-batch), "
                "communication %.2f GiB",
                plan.state.weights / gib, plan.state.gradients / gib, plan.state.optimizer / gib,
                plan.activations / gib, plan.state.communication / gib);
  const bool state_bound = plan.state.total() >= plan.activations;
  std::string keys = state_bound ? at("parallel.zero_stage") + " (now " + std::to_string(cfg_.parallel.zero_stage) +
                                       "; 3 shards weights, gradients and optimizer state over dp), more ranks (dp " +
                                       std::to_string(dp) + "), or a smaller model (" + at("model.d_model") + ", " +
                                       at("model.n_layers") + ", " + at("model.vocab_size") + ")"
                                 : at("train.micro_batch") + " (now " + std::to_string(cfg_.train.micro_batch) + "), " +
                                       at("train.recompute") + " (now " + choice_name(cfg_.train.recompute) + "), or " +
                                       at("train.seq_len");
  TETRA_FAIL(Config, head, ": ", parts, " (`tetra plan` prints it). Change ", keys,
             "; the run stopped before allocating anything");
}

// Rank 0: the run's facts into the ledger, and the start-up lines.
void Trainer::print_startup(const MeshShape& shape) {
  RunInfo info;
  info.flops_per_token = model_->flops_per_token(cfg_.train.seq_len);
  info.peak_flops_per_device = cfg_.log.peak_tflops > 0 ? cfg_.log.peak_tflops * 1e12
                                                        : peak_flops(device_, act_dtype_, env_.local_size);
  info.devices = env_.world_size;
  info.tokens_per_step = loader_->tokens_per_step();
  info.precision = dtype_name(act_dtype_);
  info.device_kind = device_name(device_);
  info.data_io = std::string(data::io_path_name(loader_->io().path)) +
                 (loader_->io().compat_mode ? " (cuFile compatibility mode)" : "");
  info.data_io_reason = loader_->io().reason;
  ledger_->run_info(info);
  const std::string precision = residual_dtype_ == act_dtype_ ? std::string(dtype_name(act_dtype_))
                                                              : std::string(dtype_name(act_dtype_)) + ", " +
                                                                    dtype_name(residual_dtype_) + " residual stream";
  std::printf("tetra: %s | %s, %lld params | world %d (dp %d tp %d pp %d) on %s (%s) | %s\n", cfg_.run.name.c_str(),
              model_->arch().c_str(), static_cast<long long>(model_->num_params()), env_.world_size, shape.dp,
              shape.tp, shape.pp, device_.str().c_str(), precision.c_str(), env_.launcher.c_str());
  std::printf("tetra: %d steps × %lld tokens (global batch %d × seq %d, micro-batch %d, %d accumulation steps)\n",
              cfg_.train.steps, static_cast<long long>(loader_->tokens_per_step()), cfg_.train.global_batch,
              cfg_.train.seq_len, cfg_.train.micro_batch, loader_->accumulation_steps());
  std::printf("tetra: run directory %s\n", run_dir_.c_str());
  if (shape.dp > 1)
    std::printf("tetra: data parallel over %d ranks: ZeRO stage %d, %s gradients reduced by %s\n", shape.dp,
                cfg_.parallel.zero_stage, dtype_name(params_.grad_dtype()),
                grad_comm_ ? "the copy engines (CUDA IPC)" : mesh_->device_comm(MeshAxis::DP).backend().c_str());
  if (shape.tp > 1)
    std::printf("tetra: tensor parallel over %d ranks: %s plan, sequence parallelism %s, collectives by %s, %s\n",
                shape.tp, model_->arch().c_str(), cfg_.parallel.sequence_parallel ? "on" : "off",
                mesh_->device_comm(MeshAxis::TP).backend().c_str(),
                tp_->overlap() ? "overlapped with the GEMMs (chunked)" : "not overlapped with the GEMMs");
  for (const std::string& line : loader_->describe()) std::printf("tetra: %s\n", line.c_str());
  if (expert_parallel_)
    std::printf("tetra: expert parallel over %d ranks: %lld of %d experts per MoE layer on each, expert gradients "
                "over expert-data groups of %d\n",
                shape.ep, static_cast<long long>(expert_parallel_->local_experts()),
                static_cast<int>(cfg_.model.moe.n_experts),
                shape.dp / shape.ep);
  if (cfg_.parallel.moe_overlap)
    std::printf("tetra: MoE overlap: each forward runs beside the previous micro-batch's backward, interleaved at "
                "the expert exchanges\n");
  if (cfg_.model.moe.force_balance)
    std::printf("tetra: model.moe.force_balance: routing forced to balance (a benchmark aid, not training)\n");
  if (shape.pp > 1) {
    std::string split;
    for (size_t s = 0; s < pipe_->stage_layers.size(); ++s) split += (s ? ", " : "") + std::to_string(pipe_->stage_layers[s]);
    std::printf("tetra: pipeline over %d ranks: schedule %s, %d micro-batches, %d stages of [%s] layers; simulated "
                "bubble %.1f%% (docs/pipeline.md)\n",
                shape.pp, choice_name(cfg_.parallel.schedule), pipe_->schedule.layout.micro_batches(),
                pipe_->schedule.layout.stages(), split.c_str(), 100.0 * pipe_->sim.bubble_fraction);
  }
  print_memory_plan(stdout, memory_plan(), "tetra: ");
  std::fflush(stdout);
}

void Trainer::setup() {
  run_dir_ = (fs::path(cfg_.run.output_dir) / cfg_.run.name).string();
  world_.set_timeout(cfg_.run.comm_timeout_s);
  MeshShape shape;
  shape.dp = data_parallel_size(cfg_.parallel, env_.world_size);
  shape.tp = cfg_.parallel.tp;
  shape.pp = cfg_.parallel.pp;
  shape.ep = cfg_.parallel.ep;
  // The pipeline (docs/pipeline.md): its stage split, every rank's schedule, the simulated step.
  pipe_ = std::make_unique<PipelinePlan>(plan_pipeline(cfg_));

  // What can fail on some ranks only — rank 0's run directory, this rank's device — is agreed on
  // before the first collective, so that no rank is left waiting in it (launch/job/rank_agreement.h).
  agree(world_, [&] {
    // Device and precision (validate() refused the combinations they cannot run).
    if (cfg_.train.device == DeviceChoice::Cuda) {
      int n = cuda_device_count();
      device_ = Device::cuda(env_.local_rank % (n > 0 ? n : 1));
    } else {
      device_ = Device::cpu();
    }
    act_dtype_ = activation_dtype(cfg_);
    residual_dtype_ = residual_dtype(cfg_);
    check_memory_fits(shape.dp);
    faults_ = FaultPlan::from_environment();
    if (is_rank0()) prepare_run_dir();
  });

  // Mesh and communicators.
  mesh_ = std::make_unique<Mesh>(shape, env_.rank);
  mesh_->create_communicators(world_);
  if (device_.is_cuda()) mesh_->create_device_communicators(device_);

  // Model and parameters: fp32 or bf16 working weights; the optimizer decides the layout (ZeRO
  // shards), the gradient dtype and which full buffers exist (parallel/distributed_optimizer.h).
  // Every rank materialises the full weights of its pipeline stages once here; stage 3 keeps only
  // its shard of them. Agreed: an allocation or a model.init_from file can fail on one rank.
  // Tensor and expert parallelism (models/parallelize.h) place every parameter (this rank's slices;
  // init and loading below fill exactly those) before the ParamSet lays them out.
  model_ = model_family_of(cfg_).build(model_args(cfg_));  // shapes only: nothing allocated yet
  comm_ = std::make_unique<CommScheduler>(device_);
  ParallelizeContext pc{shape.tp, mesh_->coords().tp, cfg_.parallel.sequence_parallel, nullptr, shape.ep, nullptr};
  if (shape.tp > 1) {
    // parallel.tp_comm_overlap auto: on a GPU (on the CPU collectives progress beside compute anyway).
    const bool overlap = cfg_.parallel.tp_comm_overlap == Switch::On ||
                         (cfg_.parallel.tp_comm_overlap == Switch::Auto && device_.is_cuda());
    tp_ = std::make_unique<TensorParallel>(mesh_->device_comm(MeshAxis::TP), *comm_, cfg_.parallel.sequence_parallel,
                                           overlap);
    pc.tensor_parallel = tp_.get();
  }
  if (shape.ep > 1) {
    expert_parallel_ = std::make_unique<ExpertParallel>(mesh_->device_comm(MeshAxis::EP), *comm_,
                                                        static_cast<int64_t>(cfg_.model.moe.n_experts));
    pc.expert_parallel = expert_parallel_.get();
  }
  parallelize(*model_, model_family_of(cfg_), model_args(cfg_), pc);
  const std::vector<Param*> held = pipeline_params();
  create_pipeline_groups();
  // Parts replicated over r of the tp ranks: the groups their gradients are summed over, one per r
  // (from every parameter of the model, not only this stage's, so every rank creates the same).
  std::set<int> replica_counts;
  for (Param* p : model_->params())
    for (const ReplicaRange& r : replica_ranges(*p)) replica_counts.insert(r.replicas);
  for (int r : replica_counts) tp_replica_groups_[r] = mesh_->create_tp_replica_group(world_, r);
  DistributedOptimizerOptions oo = optimizer_options(cfg_, shape.dp);
  // Stage 3 under a schedule that interleaves micro-batches (a pipeline, or forward-backward pairs):
  // units stay gathered through the step.
  oo.keep_gathered_in_step = shape.pp > 1 || cfg_.parallel.moe_overlap;
  agree(world_, [&] {
    if (shape.ep > 1) {
      setup_experts(oo, held);
    } else {
      const ParamStorage storage = param_storage_for(oo, act_dtype_, grad_group().size());
      params_.build(held, device_, act_dtype_, storage.grad_dtype, storage.shards, storage.full_grads);
      initial_weights(params_);
    }
  });
  Communicator* grad_comm = &grad_group();
  if (cfg_.parallel.grad_all_reduce == GradAllReduce::CopyEngine && shape.dp > 1) {
    grad_comm_ = make_copy_engine_grad_comm(cfg_, *grad_comm, mesh_->comm(MeshAxis::DP), device_, params_);
    grad_comm = grad_comm_.get();
  }
  TpGradGroups tp_groups(shape.tp > 1 ? &mesh_->device_comm(MeshAxis::TP) : nullptr);
  for (const auto& [r, g] : tp_replica_groups_) tp_groups.replicas[r] = &g.on_device();
  optimizer_ = make_distributed_optimizer(params_, *grad_comm, *comm_, oo, tp_groups);
  if (!tied_.empty()) optimizer_->tie(tied_, tie_group_.on_device(), tie_owner_);
  if (expert_parallel_) {
    // The experts' state is reduced and sharded over the expert-data group (ARCHITECTURE.md §4).
    Communicator& edp = expert_grad_group();
    optimizer_ = std::make_unique<DenseAndExpertOptimizer>(
        std::move(optimizer_), make_distributed_optimizer(expert_params_, edp, *comm_, oo), expert_params_.params(),
        &mesh_->device_comm(MeshAxis::EP), params_.buffers(), mesh_->coords().dp == 0 && mesh_->coords().tp == 0);
  } else if (!params_.buffers().empty()) {
    // Buffers (the MoE routers' biases) ride along in checkpoints: written by data-parallel rank 0
    // (the same on every rank of a pipeline stage).
    optimizer_ = std::make_unique<DenseAndExpertOptimizer>(std::move(optimizer_), nullptr, std::vector<Param*>{},
                                                           nullptr, params_.buffers(),
                                                           mesh_->coords().dp == 0 && mesh_->coords().tp == 0);
  }
  // Mixture of experts: the routers' load balancing after every optimizer step (models/moe_balance.h).
  // Loads are summed over every rank of this tp index (dp, and the pipeline's ranks: a rank counts
  // the layers it holds), so every rank holds every layer's global loads and the same biases.
  balance_ = std::make_unique<MoeBalance>(model_->moe_layers(), device_,
                                          static_cast<float>(cfg_.model.moe.bias_update_rate));
  if (!balance_->empty() && shape.pp > 1) {
    std::vector<int> members;
    for (int r = 0; r < shape.world(); ++r)
      if (mesh_->coords_of(r).tp == mesh_->coords().tp) members.push_back(r);
    balance_group_ = mesh_->create_group(world_, members, "moe_balance");
  }

  // Data.
  data::SamplerConfig sc;
  sc.seq_len = cfg_.train.seq_len;
  sc.global_batch = cfg_.train.global_batch;
  sc.micro_batch = cfg_.train.micro_batch;
  sc.dp_rank = mesh_->coords().dp;
  sc.dp_size = shape.dp;
  sc.shuffle = cfg_.data.shuffle;
  sc.seed = static_cast<uint64_t>(cfg_.run.seed);
  // The loader opens and checks every file now, chooses the read path (data.io) and starts reading
  // ahead into device memory (data/data_loader.h); run() moves it to a resumed step.
  data::DataLoaderOptions lo;
  lo.train = data_spec(cfg_.data.train, "data.train");
  lo.val = data_spec(cfg_.data.val, "data.val");
  lo.val_fraction = cfg_.data.val_fraction;
  lo.sampler = sc;
  lo.model_vocab = cfg_.model.vocab_size;
  lo.device = device_;
  lo.io = choice_name(cfg_.data.io);  // data/ takes the text (auto | gds | pinned | posix)
  lo.threads = cfg_.data.loader_threads;
  lo.prefetch = cfg_.data.prefetch;
  lo.eval_batches = cfg_.train.eval_batches;
  // Agreed: this rank's data files (another node may not see them) and rank 0's ledger.
  agree(world_, [&] {
    loader_ = std::make_unique<data::DataLoader>(lo);
    loader_->start(start_step_);
    if (is_rank0()) print_startup(shape);
  });
  setup_pipeline();  // collective where it makes the pipeline's channels

  // Checkpoints: resume replaces the initial weights and optimizer state, and sets the position.
  checkpointer_ =
      std::make_unique<Checkpointer>(cfg_, run_dir_, world_, *mesh_, *optimizer_, model_->params(), ledger_.get());
  checkpointer_->set_data_fingerprint(loader_->corpus().fingerprint());
  checkpointer_->set_faults(&faults_);
  if (std::optional<TrainingProgress> p = checkpointer_->resume()) {
    start_step_ = p->step;
    tokens_seen_ = p->tokens_seen;
    skipped_steps_ = p->skipped_steps;
  }
  // Device-side step state: the step control starts at the resumed position (runtime/step_control.h).
  loss_sum_ = Tensor::zeros({1}, DType::F64, device_);
  grad_sq_ = Tensor::zeros({1}, DType::F64, device_);
  {
    const LrSchedule schedule = LrSchedule::of(cfg_);
    const int64_t steps = std::max(1, cfg_.train.steps);
    Tensor lr = Tensor::empty({steps}, DType::F64, Device::cpu());
    for (int64_t i = 0; i < steps; ++i) lr.data<double>()[i] = schedule.at(i);
    lr_table_ = Tensor::empty({steps}, DType::F64, device_);
    ops::copy(lr_table_, lr);
    Tensor c = Tensor::zeros({kStepControlSlots}, DType::F64, Device::cpu());
    c.data<double>()[kCtlScheduleStep] = static_cast<double>(start_step_);
    c.data<double>()[kCtlUpdates] = static_cast<double>(optimizer_->steps_taken());
    control_ = Tensor::empty({kStepControlSlots}, DType::F64, device_);
    ops::copy(control_, c);
  }
  control_cfg_.max_norm = cfg_.train.grad_clip;
  control_cfg_.tokens = static_cast<double>(loader_->tokens_per_step());
  control_cfg_.beta1 = oo.adamw.beta1;
  control_cfg_.beta2 = oo.adamw.beta2;
  control_cfg_.stop_on_nonfinite = cfg_.train.on_nonfinite == OnNonfinite::Stop;
  for (Slot& s : slots_) {
    s.readback = std::make_unique<HostReadback<double>>(device_, kStepControlSlots);
    s.opt_begin = std::make_unique<Event>(device_);
    s.opt_end = std::make_unique<Event>(device_);
    if (cfg_.train.cuda_graphs) s.graph = std::make_unique<CudaGraph>(device_);
  }
  if (cfg_.train.cuda_graphs) {
    // Two eager steps first: GEMM autotuning, attention plans and the memory pool settle there.
    graph_from_step_ = start_step_ + 2;
    for (int m = 0; m < loader_->accumulation_steps(); ++m) {
      graph_ids_.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device_));
      graph_targets_.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device_));
    }
  }
  device_synchronize(device_);

  // The measured peak covers the steps; start-up (which may hold the full weights once) apart.
  startup_peak_bytes_ = static_cast<double>(peak_allocated_bytes(device_));
  reset_peak_allocated(device_);
}

// Random initialisation (of `set`), or model.init_from (into the model's parameters, wherever their
// values are bound).
void Trainer::initial_weights(ParamSet& set) {
  if (!cfg_.model.init_from.empty()) {
    // A consolidated HDF5 file or a Hugging Face folder (models/weight_source.h).
    const LoadReport loaded = load_weights(*open_weights(cfg_.model.init_from), *model_);
    if (is_rank0()) {
      if (!loaded.unexpected.empty())
        std::cerr << "tetra: warning: " << cfg_.model.init_from << " holds " << loaded.unexpected.size()
                  << " tensors the model does not use (first: " << loaded.unexpected.front() << ")\n";
      for (const std::string& note : loaded.notes)
        std::cerr << "tetra: note: " << cfg_.model.init_from << ": " << note << "\n";
    }
  } else {
    set.initialize(static_cast<uint64_t>(cfg_.run.seed));
  }
}

// Expert parallelism (parallel.ep > 1; parallel/expert/expert_parallel.h): every rank draws (or loads) the
// full weights once on the host, as any mesh does, then keeps its experts' slices (placed by
// parallelize: parallel/expert/placement.h) in a ParamSet of their own, laid out for ZeRO over the
// expert-data group; the other parameters and the buffers stay in params_, laid out over dp.
void Trainer::setup_experts(const DistributedOptimizerOptions& oo, const std::vector<Param*>& held) {
  std::vector<Param*> all = held;
  // The host copy holds the experts' full rows: their local shapes widen to the full ones for it.
  std::vector<Shape> placed;
  for (Param* p : all) {
    placed.push_back(p->local_shape);
    if (expert_owned(*p)) p->local_shape = p->full_shape;
  }
  ParamSet full;
  full.build(all, Device::cpu(), DType::F32, DType::F32, 1, /*full_grads=*/false);
  initial_weights(full);
  std::vector<Tensor> values;
  for (Param* p : all) values.push_back(p->value);
  for (size_t i = 0; i < all.size(); ++i) all[i]->local_shape = placed[i];
  std::vector<Param*> dense, experts;
  for (Param* p : all) (expert_owned(*p) ? experts : dense).push_back(p);
  const int edp = expert_grad_group().size();
  const ParamStorage ds = param_storage_for(oo, act_dtype_, grad_group().size());
  const ParamStorage es = param_storage_for(oo, act_dtype_, edp);
  params_.build(dense, device_, act_dtype_, ds.grad_dtype, ds.shards, ds.full_grads);
  expert_params_.build(experts, device_, act_dtype_, es.grad_dtype, es.shards, es.full_grads);
  const int rank = mesh_->coords().ep;
  for (size_t i = 0; i < all.size(); ++i)
    ops::copy(all[i]->value, expert_owned(*all[i]) ? expert_slice(*all[i], values[i], rank) : values[i]);
}

bool Trainer::graph_step(int64_t step) const {
  if (graph_from_step_ < 0 || step < graph_from_step_) return false;
  if (Tracer::instance().enabled()) return false;          // traced steps time each op: eager
  // The host changes the loss or a gradient: eager.
  if (faults_.poison_loss(step + 1, env_.rank) || faults_.poison_grad(step + 1, env_.rank)) return false;
  return true;
}

// TETRA_FAULT nan_grad: one element of the first parameter of layer `l` (the first layer in
// backward that has one) becomes NaN before its gradient is reduced, so every rank sees it.
void Trainer::poison_gradient(const Layer& l) {
  for (Param* p : model_->params()) {
    if (p->layer_index != l.index() || !p->grad.defined() || p->grad.numel() == 0) continue;
    Tensor one = p->grad.slice_flat(0, {1});
    ops::fill(one, std::nanf(""));
    poison_grad_ = false;
    std::fprintf(stderr, "tetra: TETRA_FAULT: rank %d makes a gradient element of %s NaN\n", env_.rank,
                 p->name.c_str());
    return;
  }
}

// TETRA_FAULT data_stall: this rank waits for its data as behind slow storage.
void Trainer::stall_for_drill(int64_t step) const {
  const double s = faults_.data_stall(step + 1, env_.rank);
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

void Trainer::enqueue_step(int64_t step, bool graph_inputs, double* data_wait_s) {
  Slot& slot = slots_[slot_of(step)];
  faults_.inside_step(step + 1, env_.rank);
  comm_->begin_step(graph_inputs, slot_of(step));
  if (p2p_) p2p_->begin_step(graph_inputs, slot_of(step));
  optimizer_->begin_step();
  ops::zero(loss_sum_);
  if (!graph_inputs) {
    const double t0 = now_s();
    stall_for_drill(step);
    *data_wait_s += now_s() - t0;
  }
  poison_grad_ = !graph_inputs && faults_.poison_grad(step + 1, env_.rank);
  run_schedule(step, graph_inputs, data_wait_s);
  optimizer_->finish_gradients();

  // The optimizer phase (loss and norm reductions, the step control, the update), timed on the
  // compute stream: the host reaches this point long before backward has finished.
  const Stream compute = current_stream(device_);
  slot.opt_begin->record_timing(compute);
  if (!graph_inputs && faults_.poison_loss(step + 1, env_.rank)) {
    Tensor nan = Tensor::empty({1}, DType::F64, Device::cpu());
    nan.data<double>()[0] = std::nan("");
    ops::copy(loss_sum_, nan);
  }
  // Loss and gradient norm over the global batch and every parameter, whatever the split.
  reduce_loss_and_norm();
  // Every rank holds the same loss and norm, so every rank decides alike (clip, skip, stop).
  ops::step_control(control_, loss_sum_, grad_sq_, lr_table_, control_cfg_);
  optimizer_->step(control_);
  // The MoE routers' biases follow the step's loads over the global batch (every dp rank's tokens).
  balance_->finish_step(balance_group_.host ? &balance_group_.on_device() : &mesh_->device_comm(MeshAxis::DP),
                        &control_, slot_of(step));
  slot.opt_end->record_timing(compute);
}

Trainer::Launched Trainer::launch_step(int64_t step) {
  Launched l;
  l.step = step;
  Slot& slot = slots_[slot_of(step)];
  if (graph_step(step)) {
    // The graph reads its micro-batches from fixed buffers: copy the loader's there first (on
    // the compute stream, so after the previous step's graph has read them).
    for (int micro = 0; micro < loader_->accumulation_steps(); ++micro) {
      double t0 = now_s();
      if (micro == 0) stall_for_drill(step);
      data::LoadedBatch batch = loader_->batch(step, micro);
      l.data_wait_s += now_s() - t0;
      ops::copy(graph_ids_[static_cast<size_t>(micro)], batch.inputs);
      ops::copy(graph_targets_[static_cast<size_t>(micro)], batch.targets);
    }
    if (!slot.graph->captured()) {
      slot.graph->begin_capture();
      try {
        enqueue_step(step, /*graph_inputs=*/true, &l.data_wait_s);
      } catch (...) {
        slot.graph->abort_capture();
        throw;
      }
      slot.graph->end_capture();
      if (is_rank0()) {
        std::printf("tetra: step %lld captured as a CUDA graph of %zu nodes; later steps replay it\n",
                    static_cast<long long>(step + 1), slot.graph->nodes());
        std::fflush(stdout);
      }
    } else {
      comm_->begin_replay(slot_of(step));
      if (p2p_) p2p_->begin_replay(slot_of(step));
    }
    slot.graph->replay();
  } else {
    enqueue_step(step, /*graph_inputs=*/false, &l.data_wait_s);
  }
  slot.readback->copy_from(control_);
  return l;
}

const double* Trainer::wait_readback(int64_t step) {
  HostReadback<double>& rb = *slots_[slot_of(step)].readback;
  const double timeout = cfg_.run.comm_timeout_s;
  const double t0 = now_s();
  while (!rb.ready()) {
    if (timeout > 0 && now_s() - t0 > timeout) {
      // Name what the device waits for: the first of the step's collectives that has not completed.
      const Communicator& dp = mesh_->device_comm(MeshAxis::DP);
      const std::string stuck = comm_->first_unfinished(slot_of(step));
      const std::string group =
          " on group " + dp.name() + " (rank " + std::to_string(dp.rank()) + " of " + std::to_string(dp.size()) + ")";
      TETRA_FAIL(Comm, "step ", step + 1, " did not finish on ", device_.str(), " within run.comm_timeout_s = ",
                 timeout, " s: ", stuck.empty() ? "its collectives" + group : stuck + group + " has not completed",
                 ", waiting for a rank that stopped or failed (this is rank ", env_.rank, " of ", env_.world_size,
                 " on ", env_.host, ")");
    }
    std::this_thread::yield();
  }
  return rb.wait();
}

Trainer::StepResult Trainer::finish_step(const Launched& l) {
  StepResult r;
  r.data_wait_s = l.data_wait_s;
  const double* c = wait_readback(l.step);
  r.loss = c[kCtlLoss];
  r.grad_norm = c[kCtlGradNorm];
  r.lr = c[kCtlLr];
  r.skipped = c[kCtlSkipped] != 0.0;
  if (r.skipped) ++skipped_steps_;
  r.stop_nonfinite = c[kCtlNonFinite] != 0.0 && cfg_.train.on_nonfinite == OnNonfinite::Stop;
  optimizer_->set_steps_taken(static_cast<int64_t>(c[kCtlUpdates]));
  Slot& slot = slots_[slot_of(l.step)];
  r.optimizer_s = slot.opt_end->elapsed_ms(*slot.opt_begin) / 1e3;
  comm_->end_step(slot_of(l.step));
  r.exposed_comm_s = comm_->exposed_ms() / 1e3;
  if (p2p_) {
    p2p_->end_step(slot_of(l.step));
    r.bubble_s = p2p_->exposed_ms() / 1e3;
  }
  for (MeshAxis a : kMeshAxes) {
    // Pipeline transfers are waited for through p2p_ and counted as the bubble, not here; the
    // expert-parallel exchanges only with expert parallelism. The expert-data group's gradient
    // reductions and ZeRO gathers are issued by its optimizer on the DP stream and count under dp.
    if (a == MeshAxis::PP || a == MeshAxis::ExpertDP) continue;
    if (mesh_->axis_size(a) > 1 && (a != MeshAxis::EP || mesh_->shape().ep > 1))
      r.exposed_comm_axis_s[axis_name(a)] = comm_->exposed_ms(a) / 1e3;
  }
  r.moe_max_over_mean = balance_->max_over_mean(slot_of(l.step));
  return r;
}

bool Trainer::eval_due(int64_t step) const {
  return cfg_.train.eval_every > 0 && loader_->has_validation() &&
         ((step + 1) % cfg_.train.eval_every == 0 || step + 1 == cfg_.train.steps);
}

bool Trainer::checkpoint_due(int64_t step) const {
  const int64_t done = step + 1;
  const int every = cfg_.checkpoint.every;
  return every > 0 && (done % every == 0 || done == cfg_.train.steps);
}

// Step + 1 may start before step is finished unless something must happen in between on the host
// with the state after step: an evaluation, a checkpoint, the last step, traced steps, a planned
// fault.
bool Trainer::may_run_ahead(int64_t step) const {
  // train.run_ahead auto: on a GPU only (CPU ops run as they are issued: nothing to overlap).
  if (cfg_.train.run_ahead == Switch::Off || (cfg_.train.run_ahead == Switch::Auto && device_.is_cpu())) return false;
  if (step + 1 >= cfg_.train.steps || eval_due(step) || checkpoint_due(step)) return false;
  if (cfg_.log.profile_steps > 0 && step + 1 >= cfg_.train.steps - cfg_.log.profile_steps) return false;
  return !faults_.blocks_run_ahead(step + 1);  // a drill acts after this step, or inside the next
}

void Trainer::log_step(int64_t step, const StepResult& r, double step_seconds, std::optional<double> val_loss) {
  const int64_t tokens = loader_->tokens_per_step();
  double rate = static_cast<double>(tokens) / step_seconds;
  tokens_per_s_ema_ = tokens_per_s_ema_ == 0 ? rate : 0.9 * tokens_per_s_ema_ + 0.1 * rate;
  MetricsRecord m;
  m.step = step + 1;
  m.loss = r.loss;
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.tokens = tokens_seen_;
  m.step_ms = step_seconds * 1e3;
  m.tokens_per_s = rate;
  m.extra["exposed_comm_ms"] = r.exposed_comm_s * 1e3;
  m.extra["data_wait_ms"] = r.data_wait_s * 1e3;
  m.extra["optimizer_ms"] = r.optimizer_s * 1e3;
  if (mesh_->shape().pp > 1) m.extra["bubble_ms"] = r.bubble_s * 1e3;
  for (const auto& [axis, seconds] : r.exposed_comm_axis_s) m.extra["exposed_comm_ms_" + axis] = seconds * 1e3;
  m.extra["mem_peak_gib"] = peak_memory_bytes(device_) / (1024.0 * 1024.0 * 1024.0);
  if (r.skipped) m.extra["skipped"] = true;
  // Each MoE layer's max/mean expert load over the step's global batch (1 = balanced).
  const std::vector<MoeMlp*> moe = model_->moe_layers();
  for (size_t i = 0; i < r.moe_max_over_mean.size() && i < moe.size(); ++i)
    m.extra["moe_load_max_over_mean_" + std::to_string(moe[i]->block())] = r.moe_max_over_mean[i];
  if (val_loss) m.extra["val_loss"] = *val_loss;
  metrics_->log(m);
  const int every = std::max(1, cfg_.log.every);
  if ((step + 1) % every == 0 || step + 1 == cfg_.train.steps || step == start_step_) {
    double left = static_cast<double>(cfg_.train.steps - step - 1) * static_cast<double>(tokens) / tokens_per_s_ema_;
    std::printf("step %5lld/%d | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | %.0f ms | eta %s%s\n",
                static_cast<long long>(step + 1), cfg_.train.steps, r.loss, r.lr, r.grad_norm,
                format_rate(tokens_per_s_ema_).c_str(), step_seconds * 1e3, format_duration(left).c_str(),
                r.skipped ? " | SKIPPED (non-finite)" : "");
  }
  if (val_loss)
    std::printf("eval  %5lld/%d | val loss %.4f\n", static_cast<long long>(step + 1), cfg_.train.steps, *val_loss);
  std::fflush(stdout);
}

int Trainer::run() {
  loader_->start(start_step_);  // a resumed run reads ahead from its step (no-op when already there)
  // Whatever ends the attempt with an error, rank 0's ledger says so first (if it still can).
  auto record = [&](int code) {
    try {
      if (ledger_ && !ledger_->ended()) ledger_->attempt_end("error", code);
    } catch (const std::exception& e) {
      std::cerr << "tetra: warning: could not record the end of the attempt: " << e.what() << "\n";
    }
    if (ledger_) write_page(nullptr);  // the failed attempt's page too (write_page never throws)
  };
  try {
    return run_steps();
  } catch (const Error& e) {
    record(exit_code_for(e.kind()));
    throw;
  } catch (const std::exception&) {
    record(exit_code::kError);
    throw;
  }
}

void Trainer::write_page(const GoodputReport* report) {
  if (!cfg_.run.html_report) return;
  try {  // the page is a view of the run: its failure never changes the run's outcome
    const std::string path = report ? write_html_report(run_dir_, *report)
                                    : write_html_report(run_dir_, load_and_compute(run_dir_));
    std::printf("tetra: wrote %s\n", path.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tetra: warning: the report page was not written: %s\n", e.what());
  }
}

TrainingProgress Trainer::progress(int64_t steps_done) const {
  TrainingProgress p;
  p.step = steps_done;
  p.tokens_seen = tokens_seen_;
  p.skipped_steps = skipped_steps_;
  return p;
}

int Trainer::agree_after_step() {
  // One small all-reduce per step: the highest-priority stop signal any rank holds, and whether
  // any rank's background checkpoint write is still going.
  std::vector<double> flags{static_cast<double>(stop_signal_priority(stop_signal())),
                            checkpointer_->writing() ? 1.0 : 0.0};
  if (world_.size() > 1) world_.all_reduce_host(flags, ReduceOp::Max);
  if (flags[1] == 0.0 && checkpointer_->uncommitted()) checkpointer_->commit();
  return signal_of_priority(static_cast<int>(flags[0]));
}

int Trainer::end_attempt(const std::string& reason, int code, const std::string& message) {
  if (is_rank0()) {
    std::printf("tetra: %s\n", message.c_str());
    ledger_->attempt_end(reason, code);
    GoodputReport report = load_and_compute(run_dir_);
    write_report(run_dir_, report);
    print_report(report, std::cout);
    write_page(&report);
    std::fflush(stdout);
  }
  // A launcher may kill the whole job as soon as one rank exits non-zero (mpirun does): nobody
  // leaves before rank 0 has recorded the end of the attempt.
  if (world_.size() > 1) world_.barrier();
  return code;
}

// The last log.profile_steps steps are traced: ops, layers (F/B/W) and collectives per rank.
void Trainer::trace_step_begin(int64_t step) {
  const int n = cfg_.log.profile_steps;
  if (n <= 0 || step < cfg_.train.steps - n) return;
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) tr.start(device_, env_.rank, "rank " + std::to_string(env_.rank) + " (" + device_.str() + ")");
  tr.mark_step_start();
}

void Trainer::trace_step_end(int64_t step, double seconds) {
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) return;
  const double t0 = tr.step_start_us();
  tr.complete("step " + std::to_string(step + 1), "step", "compute", t0, seconds * 1e6);
  std::vector<CommScheduler::Record> records = comm_->records();
  if (p2p_) records.insert(records.end(), p2p_->records().begin(), p2p_->records().end());
  for (const CommScheduler::Record& c : records) {
    const double start = c.start_ms >= 0 ? c.start_ms : c.issued_ms;
    const double end = c.end_ms >= 0 ? c.end_ms : c.issued_ms;
    // Data parallelism's stream keeps the "communication" row; other axes get a row each.
    const std::string row = c.axis == MeshAxis::DP ? "communication" : std::string("communication ") + axis_name(c.axis);
    tr.complete(c.name, "comm", row, t0 + 1e3 * start, 1e3 * (end - start),
                {{"bytes", c.bytes}, {"compute_waited_ms", c.waited_ms}, {"axis", axis_name(c.axis)}});
  }
  tr.end_step();
}

// Every rank writes its part; rank 0 merges them into RUN_DIR/trace.json and prints the op profile.
void Trainer::write_trace() {
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) return;
  tr.stop();
  const fs::path part = fs::path(run_dir_) / ("trace.rank" + std::to_string(env_.rank) + ".json");
  std::ofstream(part) << tr.chrome_events().dump();
  if (world_.size() > 1) world_.barrier();
  if (!is_rank0()) return;
  nlohmann::json all = nlohmann::json::array();
  for (int r = 0; r < env_.world_size; ++r) {
    const fs::path p = fs::path(run_dir_) / ("trace.rank" + std::to_string(r) + ".json");
    std::ifstream in(p);
    if (!in) continue;
    for (auto& e : nlohmann::json::parse(in)) all.push_back(std::move(e));
    fs::remove(p);
  }
  std::ofstream(fs::path(run_dir_) / "trace.json") << nlohmann::json{{"traceEvents", all}}.dump();
  std::vector<std::pair<std::string, Tracer::OpStat>> ops(tr.op_profile().begin(), tr.op_profile().end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.total_ms > b.second.total_ms; });
  double total = 0;
  for (auto& [name, s] : ops) total += s.total_ms;
  std::printf("tetra: op profile of rank 0 over %d steps (device time per step), trace in %s/trace.json\n",
              tr.steps(), run_dir_.c_str());
  for (auto& [name, s] : ops)
    std::printf("  %-28s %8.3f ms %6.1f %%  %6.1f calls\n", name.c_str(), s.total_ms / tr.steps(),
                100.0 * s.total_ms / total, static_cast<double>(s.calls) / tr.steps());
  std::fflush(stdout);
}

int Trainer::run_steps() {
  int stop = 0;            // the stop signal the ranks agreed on, 0 while none
  bool nonfinite = false;  // a non-finite step under train.on_nonfinite: stop
  int64_t step = start_step_;
  std::optional<Launched> ahead;  // step + 1, launched before step was finished
  double clock = 0, ledger_clock = 0;  // when the step being finished began (its predecessor ended)
  for (; step < cfg_.train.steps; ++step) {
    Launched cur;
    if (ahead) {
      cur = *ahead;
      ahead.reset();
    } else {
      ledger_clock = ledger_ ? ledger_->now() : 0;
      trace_step_begin(step);
      clock = now_s();
      cur = launch_step(step);
    }
    if (stop == 0 && may_run_ahead(step)) ahead = launch_step(step + 1);
    StepResult r = finish_step(cur);
    const double t_start = ledger_clock;
    const double finished = now_s();
    const double seconds = finished - clock;
    clock = finished;
    ledger_clock = ledger_ ? ledger_->now() : 0;
    trace_step_end(step, seconds);
    tokens_seen_ += loader_->tokens_per_step();
    losses_.push_back(r.loss);
    // The step-level rows of the ledger come from every rank: each category is the mean over the
    // ranks of its share of that rank's step, times the step's time on rank 0 — so the categories
    // still add up within the step (docs/goodput.md). Taken before anything after the step can
    // stop a rank, so every rank takes part.
    const double span = is_rank0() ? ledger_->now() - t_start : seconds;
    if (world_.size() > 1 && seconds > 0) {
      std::vector<double> share{std::min(1.0, r.exposed_comm_s / seconds), std::min(1.0, r.optimizer_s / seconds),
                                std::min(1.0, r.data_wait_s / seconds), std::min(1.0, r.bubble_s / seconds)};
      // The split of exposed communication by mesh axis (the same axes on every rank) likewise.
      for (const auto& [axis, s] : r.exposed_comm_axis_s) share.push_back(std::min(1.0, s / seconds));
      world_.all_reduce_host(share, ReduceOp::Sum);
      const double n = static_cast<double>(world_.size());
      r.exposed_comm_s = share[0] / n * span;
      r.optimizer_s = share[1] / n * span;
      r.data_wait_s = share[2] / n * span;
      r.bubble_s = share[3] / n * span;
      size_t k = 4;
      for (auto& [axis, s] : r.exposed_comm_axis_s) s = share[k++] / n * span;
    }
    if (is_rank0()) {
      StepTiming t;
      t.step = step + 1;
      t.start = t_start;
      t.end = t_start + span;
      t.tokens = loader_->tokens_per_step();
      t.breakdown.exposed_comm = r.exposed_comm_s;
      t.breakdown.bubble = r.bubble_s;
      t.breakdown.exposed_comm_by_axis = r.exposed_comm_axis_s;
      t.breakdown.optimizer = r.optimizer_s;
      t.breakdown.data_wait = r.data_wait_s;
      t.loss = r.loss;
      ledger_->step(t);
    }
    const bool eval_now = eval_due(step);
    std::optional<double> val_loss;
    if (eval_now) {
      double e0 = ledger_ ? ledger_->now() : 0;
      val_loss = evaluate();
      if (is_rank0()) ledger_->eval(e0, ledger_->now(), step + 1);
    }
    if (is_rank0()) log_step(step, r, seconds, val_loss);
    if (r.stop_nonfinite) {
      nonfinite = true;
      // The step launched ahead changed nothing (the device control halts every update after a
      // non-finite step under on_nonfinite: stop); let it end before the state is saved.
      if (ahead) (void)wait_readback(ahead->step);
      break;
    }
    faults_.after_step(step + 1, env_.rank);
    const int agreed = agree_after_step();
    if (stop == 0) stop = agreed;
    // A stop signal takes effect after the step already launched ahead, if any.
    if (ahead && stop != 0) continue;
    if (stop != 0 || checkpoint_due(step)) checkpointer_->save(progress(step + 1));
    if (stop != 0) {
      ++step;
      break;
    }
  }
  checkpointer_->finish();
  write_trace();
  if (nonfinite) {
    // Step `step + 1` was skipped: the state is the one after `step` steps; save it for a look or
    // a resume with other settings, unless that is the checkpoint just written.
    TrainingProgress p = progress(step);
    p.tokens_seen -= loader_->tokens_per_step();
    p.skipped_steps -= 1;
    if (checkpointer_->last_committed_step() != step) {
      checkpointer_->save(p);
      checkpointer_->finish();
    }
    return end_attempt("nonfinite", exit_code::kNonFinite,
                       "step " + std::to_string(step + 1) + " had a non-finite loss or gradient norm and " +
                           "train.on_nonfinite is stop: saved the state after step " + std::to_string(step) + " as " +
                           checkpoints_dir(run_dir_) + "/" + step_dir_name(step) +
                           "; lower optimizer.lr or train.grad_clip, or set train.on_nonfinite: skip, and resume with "
                           "checkpoint.resume: auto (exit code " + std::to_string(exit_code::kNonFinite) + ")");
  }
  if (stop != 0 && step < cfg_.train.steps) {
    const bool interrupted = stop == SIGINT;
    const int code = interrupted ? exit_code::kInterrupted : exit_code::kPreempted;
    return end_attempt(interrupted ? "interrupted" : "preempted", code,
                       std::string(signal_name(stop)) + " received: stopped after step " + std::to_string(step) +
                           " on every rank and saved " + checkpoints_dir(run_dir_) + "/" + step_dir_name(step) +
                           (interrupted ? "; resume with checkpoint.resume: auto"
                                        : "; exit code " + std::to_string(code) +
                                              " asks the scheduler to requeue the job, which resumes with "
                                              "checkpoint.resume: auto"));
  }
  // Measured peak of tetra's allocations on the device over the steps, the largest over all ranks,
  // beside the plan printed at start-up.
  const double peak = world_.all_reduce_scalar(static_cast<double>(peak_allocated_bytes(device_)), ReduceOp::Max);
  const double startup_peak = world_.all_reduce_scalar(startup_peak_bytes_, ReduceOp::Max);
  const double planned = world_.all_reduce_scalar(memory_plan().total(), ReduceOp::Max);
  report_pipeline_peaks();
  if (is_rank0()) {
    std::printf("tetra: memory peak %.0f B (%.3f GiB) measured over the steps on %s (largest rank; start-up %.0f B), "
                "planned %.0f B (%.3f GiB)\n",
                peak, peak / (1024.0 * 1024.0 * 1024.0), device_.str().c_str(), startup_peak, planned,
                planned / (1024.0 * 1024.0 * 1024.0));
  }
  if (is_rank0()) {
    ledger_->attempt_end("finished", 0);
    GoodputReport report = load_and_compute(run_dir_);
    write_report(run_dir_, report);
    print_report(report, std::cout);
    write_page(&report);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace tetra::launch
