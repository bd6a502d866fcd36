#include "launch/train/builder.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "launch/config/data.h"
#include "launch/config/model.h"
#include "launch/job/rank_agreement.h"
#include "models/parallelize.h"
#include "models/weight_source.h"
#include "parallel/expert/dense_and_expert_optimizer.h"
#include "parallel/expert/placement.h"
#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/stage_split.h"
#include "runtime/device_info.h"
#include "runtime/memory.h"
#include "runtime/ops.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

// The steps of build_training, in order; each fills its parts of `p`.
class Builder {
 public:
  Builder(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world, TrainingParts& p)
      : cfg_(cfg), env_(env), world_(world), p_(p) {}
  void start();           // the device, the checks that need no communicator, rank 0's run directory
  void mesh_and_groups();
  void params();
  void optimizer();
  void loader();
  void pipeline();
  void checkpointer();
  void tensorboard();

 private:
  bool is_rank0() const { return env_.rank == 0; }
  void check_memory_fits() const;
  void prepare_run_dir();
  void archive_previous_run();
  void print_startup();
  void initial_weights(ParamSet& set);
  void experts(const std::vector<Param*>& held);

  const Config& cfg_;
  const LaunchEnvironment& env_;
  MpiCommunicator& world_;
  TrainingParts& p_;
  MeshShape shape_;
  std::vector<Param*> held_;  // this rank's parameters, localised to its layers
};

void Builder::start() {
  p_.run_dir = (fs::path(cfg_.run.output_dir) / cfg_.run.name).string();
  world_.set_timeout(cfg_.run.comm_timeout_s);
  shape_.dp = data_parallel_size(cfg_.parallel, env_.world_size);
  shape_.tp = cfg_.parallel.tp;
  shape_.pp = cfg_.parallel.pp;
  shape_.ep = cfg_.parallel.ep;
  p_.pipe = std::make_unique<PipelinePlan>(plan_pipeline(cfg_));
  // What can fail on some ranks only — rank 0's run directory, this rank's device — is agreed on
  // before the first collective, so that no rank is left waiting in it (launch/job/rank_agreement.h).
  agree(world_, [&] {
    // Device and precision (validate() refused the combinations they cannot run).
    if (cfg_.train.device == DeviceChoice::Cuda) {
      int n = cuda_device_count();
      p_.device = Device::cuda(env_.local_rank % (n > 0 ? n : 1));
    } else {
      p_.device = Device::cpu();
    }
    p_.act_dtype = activation_dtype(cfg_);
    p_.residual_dtype = residual_dtype(cfg_);
    check_memory_fits();
    p_.faults = FaultPlan::from_environment(env_.world_size);
    if (is_rank0()) prepare_run_dir();
  });
}

// A run whose memory plan (launch/train/memory_plan.h) exceeds the device stops here, before it allocates
// anything, with the plan and the keys that change it. On the CPU the ranks of a host share its
// physical memory, so the plan of every local rank together is compared with it.
void Builder::check_memory_fits() const {
  // The model's parameters carry shapes only until a ParamSet is built: nothing is allocated here.
  // Under a pipeline, this rank's stages only (its pipeline rank: rank / (dp·tp), ARCHITECTURE.md §4).
  // Under tensor parallelism, this rank's slices (every tp rank holds the same sizes).
  const int dp = shape_.dp;
  const Device device = p_.device;
  const std::unique_ptr<Model> shapes = model_family_of(cfg_).build(model_args(cfg_));
  parallelize(*shapes, model_family_of(cfg_), model_args(cfg_),
              {cfg_.parallel.tp, 0, cfg_.parallel.sequence_parallel, nullptr, cfg_.parallel.ep, nullptr});
  const MemoryPlan plan = pipeline_memory_plan(cfg_, *p_.pipe, env_.rank / (dp * cfg_.parallel.tp), shapes->params(), dp);
  const double capacity = static_cast<double>(device_capacity_bytes(device));
  const double sharing = device.is_cpu() ? std::max(1, env_.local_size) : 1;
  if (capacity <= 0 || plan.total() * sharing <= capacity) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  auto at = [&](const char* key) {
    const std::string where = cfg_.origins.where(key);
    return std::string(key) + (where.rfind("--set", 0) == 0 || where.find(':') != std::string::npos
                                   ? " (" + where + ")" : std::string());
  };
  char head[256];
  std::snprintf(head, sizeof head, "the memory plan needs %.2f GiB per rank%s, but %s has %.2f GiB", plan.total() / gib,
                device.is_cpu() ? (" × " + std::to_string(env_.local_size) + " ranks on this host").c_str() : "",
                device.is_cpu() ? "the host" : device.str().c_str(), capacity / gib);
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

// A fresh run (checkpoint.resume: none) in a directory that holds an earlier job starts a new job:
// the earlier job's files move to RUN_DIR/previous/<UTC time>/ so its ledger is not mixed in.
void Builder::archive_previous_run() {
  const fs::path dir(p_.run_dir);
  if (!fs::exists(dir / "goodput.jsonl")) return;
  std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&t));
  const fs::path dest = dir / "previous" / stamp;
  fs::create_directories(dest);
  for (const char* name : {"goodput.jsonl", "goodput.json", "metrics.jsonl", "config.yaml", "trace.json", "checkpoints"})
    if (fs::exists(dir / name)) fs::rename(dir / name, dest / name);
  std::printf("tetra: %s held an earlier run (checkpoint.resume is none): moved it to %s\n", p_.run_dir.c_str(),
              dest.c_str());
}

// Rank 0's run directory, ledger and metrics log (the other ranks write none of them).
void Builder::prepare_run_dir() {
  std::error_code ec;
  fs::create_directories(p_.run_dir, ec);
  if (ec) {
    const std::string where = cfg_.origins.where("run.output_dir");
    TETRA_FAIL(Config, where, where == "--set run.output_dir" ? "" : ": run.output_dir",
               ": cannot create the run directory ", p_.run_dir, " (run.output_dir/run.name): ", ec.message(),
               "; choose a directory this job can write to, or fix its permissions");
  }
  // Before anything in it changes: a live run there refuses this one (launch/job/run_lock.h).
  p_.run_lock = RunLock::acquire(p_.run_dir, env_);
  if (cfg_.checkpoint.resume.kind == ResumeFrom::Kind::None) archive_previous_run();
  p_.ledger = std::make_unique<GoodputLedger>(GoodputLedger::path_in(p_.run_dir));
  p_.ledger->attempt_start(env_.process_start_unix, env_.world_size, env_.host);
  const fs::path config_copy = fs::path(p_.run_dir) / "config.yaml";
  std::ofstream out(config_copy);
  out << to_yaml(cfg_);
  out.flush();
  if (!out) TETRA_FAIL(Data, "cannot write ", config_copy.string(), "; check free space and permissions of ", p_.run_dir);
  p_.metrics = std::make_unique<MetricsLog>(MetricsLog::path_in(p_.run_dir), p_.ledger->attempt());
}

// The mesh's communicators; the model's shapes (tensor and expert parallelism, models/parallelize.h,
// place every parameter, this rank's slices, before the ParamSet lays them out); what this rank
// holds and the groups it joins (parallel/rank_groups.h), made.
void Builder::mesh_and_groups() {
  p_.mesh = std::make_unique<Mesh>(shape_, env_.rank);
  p_.mesh->create_communicators(world_);
  if (p_.device.is_cuda()) p_.mesh->create_device_communicators(p_.device);
  p_.model = model_family_of(cfg_).build(model_args(cfg_));  // shapes only: nothing allocated yet
  p_.comm = std::make_unique<CommScheduler>(p_.device);
  ParallelizeContext pc{shape_.tp, p_.mesh->coords().tp, cfg_.parallel.sequence_parallel, nullptr, shape_.ep, nullptr};
  if (shape_.tp > 1) {
    // parallel.tp_comm_overlap auto: on a GPU (on the CPU collectives progress beside compute anyway).
    const bool overlap = cfg_.parallel.tp_comm_overlap == Switch::On ||
                         (cfg_.parallel.tp_comm_overlap == Switch::Auto && p_.device.is_cuda());
    p_.tp = std::make_unique<TensorParallel>(p_.mesh->device_comm(MeshAxis::TP), *p_.comm,
                                             cfg_.parallel.sequence_parallel, overlap);
    pc.tensor_parallel = p_.tp.get();
  }
  if (shape_.ep > 1) {
    p_.expert_parallel = std::make_unique<ExpertParallel>(p_.mesh->device_comm(MeshAxis::EP), *p_.comm,
                                                          static_cast<int64_t>(cfg_.model.moe.n_experts));
    pc.expert_parallel = p_.expert_parallel.get();
  }
  parallelize(*p_.model, model_family_of(cfg_), model_args(cfg_), pc);
  RankGroupsInput in;
  in.shape = shape_;
  in.rank = env_.rank;
  for (int q = 0; q < shape_.pp; ++q) in.layers.push_back(pipeline_rank_layers(*p_.pipe, q));
  for (const Param* param : p_.model->params()) in.params.push_back(param_use(*param));
  in.moe_layers = !p_.model->moe_layers().empty();
  p_.holding = plan_rank_groups(in);
  held_ = localise_params(p_.holding, p_.model->params());
  p_.groups = create_mesh_groups(*p_.mesh, world_, p_.holding);
}

// Parameters: fp32 or bf16 working weights; the optimizer decides the layout (ZeRO shards), the
// gradient dtype and which full buffers exist (parallel/distributed_optimizer.h). Every rank
// materialises the full weights of its pipeline stages once here; stage 3 keeps only its shard of
// them. Agreed: an allocation or a model.init_from file can fail on one rank.
void Builder::params() {
  p_.optimizer_options = optimizer_options(cfg_, shape_.dp);
  // Stage 3 under a schedule that interleaves micro-batches (a pipeline, or forward-backward pairs):
  // units stay gathered through the step.
  p_.optimizer_options.keep_gathered_in_step = shape_.pp > 1 || cfg_.parallel.moe_overlap;
  agree(world_, [&] {
    if (shape_.ep > 1) {
      experts(held_);
    } else {
      const ParamStorage storage =
          param_storage_for(p_.optimizer_options, p_.act_dtype, p_.groups.grad_comm(*p_.mesh).size());
      p_.params.build(held_, p_.device, p_.act_dtype, storage.grad_dtype, storage.shards, storage.full_grads);
      p_.params.set_initial_values([&] { initial_weights(p_.params); });
    }
  });
}

// Random initialisation (of `set`), or model.init_from (into the model's parameters, wherever their
// values are bound: under bf16 working weights, fp32 host views that the optimizer's master starts
// from, ParamSet::set_initial_values).
void Builder::initial_weights(ParamSet& set) {
  if (!cfg_.model.init_from.empty()) {
    // A consolidated HDF5 file or a Hugging Face folder (models/weight_source.h).
    const LoadReport loaded = load_weights(*open_weights(cfg_.model.init_from), *p_.model);
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
// expert-data group; the other parameters and the buffers stay in params, laid out over dp.
void Builder::experts(const std::vector<Param*>& held) {
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
  const int edp = p_.groups.expert_grad_comm(*p_.mesh).size();
  const ParamStorage ds = param_storage_for(p_.optimizer_options, p_.act_dtype, p_.groups.grad_comm(*p_.mesh).size());
  const ParamStorage es = param_storage_for(p_.optimizer_options, p_.act_dtype, edp);
  p_.params.build(dense, p_.device, p_.act_dtype, ds.grad_dtype, ds.shards, ds.full_grads);
  p_.expert_params.build(experts, p_.device, p_.act_dtype, es.grad_dtype, es.shards, es.full_grads);
  // Each set keeps the fp32 values for its optimizer's master where its working weights are bf16.
  const int rank = p_.mesh->coords().ep;
  auto fill = [&](bool expert) {
    for (size_t i = 0; i < all.size(); ++i)
      if (expert_owned(*all[i]) == expert)
        ops::copy(all[i]->value, expert ? expert_slice(*all[i], values[i], rank) : values[i]);
  };
  p_.params.set_initial_values([&] { fill(false); });
  p_.expert_params.set_initial_values([&] { fill(true); });
}

void Builder::optimizer() {
  const MeshGroups& g = p_.groups;
  const Mesh& mesh = *p_.mesh;
  Communicator* grad_comm = &g.grad_comm(mesh);
  if (cfg_.parallel.grad_all_reduce == GradAllReduce::CopyEngine && shape_.dp > 1) {
    p_.grad_comm = copy_engine_grad_comm(cfg_, mesh, *grad_comm, p_.device, p_.params);
    grad_comm = p_.grad_comm.get();
  }
  TpGradGroups tp_groups(shape_.tp > 1 ? &mesh.device_comm(MeshAxis::TP) : nullptr);
  for (const auto& [r, group] : g.tp_replicas) tp_groups.replicas[r] = &group.on_device();
  const DistributedOptimizerOptions& oo = p_.optimizer_options;
  p_.optimizer = make_distributed_optimizer(p_.params, *grad_comm, *p_.comm, oo, tp_groups);
  std::vector<Param*> tied;
  for (const HeldParam& h : p_.holding.params)
    if (h.tied_across) tied.push_back(p_.model->params()[h.index]);
  if (!tied.empty()) p_.optimizer->tie(tied, g.tie.on_device(), p_.holding.tie_owner);
  // Checkpoints' buffers (the MoE routers' biases) and experts are written by dp rank 0, tp rank 0.
  const bool writes_buffers = mesh.coords().dp == 0 && mesh.coords().tp == 0;
  if (p_.expert_parallel) {
    // The experts' state is reduced and sharded over the expert-data group (ARCHITECTURE.md §4).
    Communicator& edp = g.expert_grad_comm(mesh);
    p_.optimizer = std::make_unique<DenseAndExpertOptimizer>(
        std::move(p_.optimizer), make_distributed_optimizer(p_.expert_params, edp, *p_.comm, oo),
        p_.expert_params.params(), &mesh.device_comm(MeshAxis::EP), p_.params.buffers(), writes_buffers);
  } else if (!p_.params.buffers().empty()) {
    // Buffers ride along in checkpoints (the same on every rank of a pipeline stage).
    p_.optimizer = std::make_unique<DenseAndExpertOptimizer>(std::move(p_.optimizer), nullptr, std::vector<Param*>{},
                                                             nullptr, p_.params.buffers(), writes_buffers);
  }
  // The masters hold the fp32 initial values now (bf16 working weights): their host copies go.
  p_.params.release_initial_values();
  p_.expert_params.release_initial_values();
  // Mixture of experts: the routers' load balancing after every optimizer step (models/moe_balance.h),
  // the loads summed over MeshGroups::balance_comm.
  p_.balance = std::make_unique<MoeBalance>(p_.model->moe_layers(), p_.device,
                                            static_cast<float>(cfg_.model.moe.bias_update_rate));
}

// The loader opens and checks every file now, chooses the read path (data.io) and starts reading
// ahead into device memory (data/data_loader.h); the Trainer moves it to a resumed step.
void Builder::loader() {
  data::SamplerConfig sc;
  sc.seq_len = cfg_.train.seq_len;
  sc.global_batch = cfg_.train.global_batch;
  sc.micro_batch = cfg_.train.micro_batch;
  sc.dp_rank = p_.mesh->coords().dp;
  sc.dp_size = shape_.dp;
  sc.shuffle = cfg_.data.shuffle;
  sc.seed = static_cast<uint64_t>(cfg_.run.seed);
  data::DataLoaderOptions lo;
  lo.train = data_spec(cfg_.data.train, "data.train");
  lo.val = data_spec(cfg_.data.val, "data.val");
  lo.val_fraction = cfg_.data.val_fraction;
  lo.sampler = sc;
  lo.model_vocab = cfg_.model.vocab_size;
  lo.device = p_.device;
  lo.io = choice_name(cfg_.data.io);  // data/ takes the text (auto | gds | pinned | posix)
  lo.threads = cfg_.data.loader_threads;
  lo.prefetch = cfg_.data.prefetch;
  lo.eval_batches = cfg_.train.eval_batches;
  // Agreed: this rank's data files (another node may not see them) and rank 0's ledger.
  agree(world_, [&] {
    p_.loader = std::make_unique<data::DataLoader>(lo);
    p_.loader->start(0);
    if (is_rank0()) print_startup();
  });
}

// Rank 0: the run's facts into the ledger, and the start-up lines.
void Builder::print_startup() {
  const Model& model = *p_.model;
  const data::DataLoader& loader = *p_.loader;
  const Device device = p_.device;
  RunInfo info;
  info.flops_per_token = model.flops_per_token(cfg_.train.seq_len);
  info.peak_flops_per_device = cfg_.log.peak_tflops > 0 ? cfg_.log.peak_tflops * 1e12
                                                        : peak_flops(device, p_.act_dtype, env_.local_size);
  info.devices = env_.world_size;
  info.tokens_per_step = loader.tokens_per_step();
  const Fp8Recipe fp8 = cfg_.train.fp8.recipe;
  info.precision = std::string(dtype_name(p_.act_dtype)) +
                   (fp8 == Fp8Recipe::None ? "" : std::string(" + fp8 ") + fp8_recipe_name(fp8));
  info.device_kind = device_name(device);
  info.data_io = std::string(data::io_path_name(loader.io().path)) +
                 (loader.io().compat_mode ? " (cuFile compatibility mode)" : "");
  info.data_io_reason = loader.io().reason;
  p_.ledger->run_info(info);
  p_.run_info = info;
  const std::string act = info.precision;
  std::string precision =
      p_.residual_dtype == p_.act_dtype ? act : act + ", " + dtype_name(p_.residual_dtype) + " residual stream";
  if (p_.optimizer_options.adamw.state_dtype != DType::F32)
    precision += std::string(", ") + dtype_name(p_.optimizer_options.adamw.state_dtype) + " AdamW moments";
  std::printf("tetra: %s | %s, %lld params | world %d (dp %d tp %d pp %d) on %s (%s) | %s\n", cfg_.run.name.c_str(),
              model.arch().c_str(), static_cast<long long>(model.num_params()), env_.world_size, shape_.dp,
              shape_.tp, shape_.pp, device.str().c_str(), precision.c_str(), env_.launcher.c_str());
  std::printf("tetra: %d steps × %lld tokens (global batch %d × seq %d, micro-batch %d, %d accumulation steps)\n",
              cfg_.train.steps, static_cast<long long>(loader.tokens_per_step()), cfg_.train.global_batch,
              cfg_.train.seq_len, cfg_.train.micro_batch, loader.accumulation_steps());
  std::printf("tetra: run directory %s\n", p_.run_dir.c_str());
  if (shape_.dp > 1)
    std::printf("tetra: data parallel over %d ranks: ZeRO stage %d, %s gradients reduced by %s\n", shape_.dp,
                cfg_.parallel.zero_stage, dtype_name(p_.params.grad_dtype()),
                p_.grad_comm ? "the copy engines (CUDA IPC)" : p_.mesh->device_comm(MeshAxis::DP).backend().c_str());
  if (shape_.tp > 1)
    std::printf("tetra: tensor parallel over %d ranks: %s plan, sequence parallelism %s, collectives by %s, %s\n",
                shape_.tp, model.arch().c_str(), cfg_.parallel.sequence_parallel ? "on" : "off",
                p_.mesh->device_comm(MeshAxis::TP).backend().c_str(),
                p_.tp->overlap() ? "overlapped with the GEMMs (chunked)" : "not overlapped with the GEMMs");
  for (const std::string& line : loader.describe()) std::printf("tetra: %s\n", line.c_str());
  if (p_.expert_parallel)
    std::printf("tetra: expert parallel over %d ranks: %lld of %d experts per MoE layer on each, expert gradients "
                "over expert-data groups of %d\n",
                shape_.ep, static_cast<long long>(p_.expert_parallel->local_experts()),
                static_cast<int>(cfg_.model.moe.n_experts),
                shape_.dp / shape_.ep);
  if (cfg_.parallel.moe_overlap)
    std::printf("tetra: MoE overlap: each forward runs beside the previous micro-batch's backward, interleaved at "
                "the expert exchanges\n");
  if (cfg_.model.moe.force_balance)
    std::printf("tetra: model.moe.force_balance: routing forced to balance (a benchmark aid, not training)\n");
  const PipelinePlan& pipe = *p_.pipe;
  if (shape_.pp > 1) {
    const std::string split = bracketed_text(pipe.stage_layers, ", ");
    std::printf("tetra: pipeline over %d ranks: schedule %s, %d micro-batches, %d stages of %s layers; simulated "
                "bubble %.1f%% (docs/pipeline.md)\n",
                shape_.pp, choice_name(cfg_.parallel.schedule), pipe.schedule.layout.micro_batches(),
                pipe.schedule.layout.stages(), split.c_str(), 100.0 * pipe.sim.bubble_fraction);
  }
  print_memory_plan(stdout, rank_memory_plan(cfg_, p_), "tetra: ");
  std::fflush(stdout);
}

// The model side of the pipeline (this rank's chunks), the transfers, the executors (collective
// where it makes the pipeline's channels). At pp = 1 the same path runs the trivial schedule.
void Builder::pipeline() {
  const Schedule& schedule = p_.pipe->schedule;
  const PipelineLayout& l = schedule.layout;
  const int pp_rank = p_.holding.pp_rank;
  const Device device = p_.device;
  std::vector<Layer*> layers = p_.model->layers();
  std::vector<std::vector<Layer*>> chunks;
  for (int c = 0; c < l.chunks(); ++c) {
    chunks.emplace_back();
    for (int i : stage_layer_indices(p_.pipe->stage_layers, l.stage_of(pp_rank, c)))
      chunks.back().push_back(layers[static_cast<size_t>(i)]);
  }
  // Under sequence parallelism a stage boundary carries this tp rank's 1/tp of the tokens.
  const int64_t tokens = static_cast<int64_t>(cfg_.train.micro_batch) * cfg_.train.seq_len;
  const bool sequence_sharded = cfg_.parallel.tp > 1 && cfg_.parallel.sequence_parallel;
  p_.stages = std::make_unique<ModelStages>(l, pp_rank, std::move(chunks), *p_.optimizer, device, p_.act_dtype,
                                            p_.residual_dtype, cfg_.train.micro_batch, cfg_.train.seq_len,
                                            cfg_.model.d_model, sequence_sharded ? tokens / cfg_.parallel.tp : tokens);
  const Schedule eval = make_forward_only_schedule(choice_name(cfg_.parallel.schedule), l.ranks(), l.micro_batches());
  if (l.ranks() > 1) {
    p_.p2p = std::make_unique<CommScheduler>(device);
    Communicator& pp = p_.mesh->comm(MeshAxis::PP);
    const Mesh* mesh = p_.mesh.get();
    if (device.is_cuda())
      p_.transport = channel_transport(pp, schedule, [mesh](std::shared_ptr<Communicator> two) {
        return mesh->device_twin(std::move(two), /*own_stream=*/true);
      });
    else
      p_.transport = tagged_transport(pp);
  }
  p_.executor = std::make_unique<PipelineExecutor>(schedule, pp_rank, p_.transport.get(), p_.p2p.get());
  p_.eval_executor = std::make_unique<PipelineExecutor>(eval, pp_rank, p_.transport.get(), p_.p2p.get());
  p_.eval_loss = Tensor::zeros({1}, DType::F64, device);
  // The step's micro-batches are copied where a schedule may use one after asking for the next (the
  // loader's buffers last until its next batch): pipelines, and pp = 1 with forward-backward pairs.
  if ((l.ranks() > 1 || cfg_.parallel.moe_overlap) && (p_.stages->needs_inputs() || p_.stages->needs_targets()))
    for (int m = 0; m < l.micro_batches(); ++m) {
      p_.step_ids.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device));
      p_.step_targets.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device));
    }
}

// Checkpoints: resume replaces the initial weights and optimizer state, and sets the position.
void Builder::checkpointer() {
  p_.checkpointer = std::make_unique<Checkpointer>(cfg_, p_.run_dir, world_, *p_.mesh, *p_.optimizer,
                                                   p_.model->params(), p_.ledger.get());
  p_.checkpointer->set_data_fingerprint(p_.loader->corpus().fingerprint());
  p_.checkpointer->set_faults(&p_.faults);
  if (std::optional<TrainingProgress> resumed = p_.checkpointer->resume()) p_.resumed = *resumed;
}

// log.tensorboard: rank 0 starts this attempt's event file at the first step it will train.
void Builder::tensorboard() {
  if (!cfg_.log.tensorboard) return;
  agree(world_, [&] {
    if (is_rank0())
      p_.tensorboard = std::make_unique<TensorBoardWriter>(TensorBoardWriter::dir_in(p_.run_dir), p_.ledger->attempt(),
                                                           p_.resumed.step + 1);
  });
}

}  // namespace

std::unique_ptr<TrainingParts> build_training(const Config& cfg, const LaunchEnvironment& env, MpiCommunicator& world) {
  auto parts = std::make_unique<TrainingParts>();
  Builder b(cfg, env, world, *parts);
  b.start();
  b.mesh_and_groups();
  b.params();
  b.optimizer();
  b.loader();
  b.pipeline();
  b.checkpointer();
  b.tensorboard();
  return parts;
}

MemoryPlan rank_memory_plan(const Config& cfg, const TrainingParts& parts) {
  MemoryPlan plan = plan_memory(cfg, *parts.optimizer, parts.params, parts.mesh->shape().dp);
  if (parts.expert_parallel) plan.params += parts.expert_params.param_numel();
  if (parts.mesh->shape().pp > 1 || cfg.parallel.moe_overlap) {
    // This rank's stages' activations at the schedule's peak, and one layer's backward.
    plan.activations = parts.pipe->peak_activation_bytes[static_cast<size_t>(parts.holding.pp_rank)] +
                       model_family_of(cfg).backward_working_bytes(model_args(cfg), activation_shape(cfg));
  }
  return plan;
}

}  // namespace tetra::launch
