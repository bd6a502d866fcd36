// The Trainer's pipeline parallelism (docs/pipeline.md): which parameters and layers this rank
// holds, the groups their gradients are summed over, the executor that runs the rank's schedule
// and the model side it drives. At pp = 1 the same path runs the trivial schedule.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "launch/config/model.h"
#include "launch/train/trainer.h"
#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/stage_split.h"
#include "runtime/ops.h"

namespace tetra::launch {

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::set<int> as_set(const std::vector<int>& v) { return {v.begin(), v.end()}; }

// The layers that read a parameter: its owner and its tied users (Param::tied_layers).
std::set<int> users_of(const Param& p) {
  std::set<int> u{p.layer_index};
  u.insert(p.tied_layers.begin(), p.tied_layers.end());
  return u;
}

bool meets(const std::set<int>& a, const std::set<int>& b) {
  return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) > 0; });
}

}  // namespace

std::vector<Param*> Trainer::pipeline_params() {
  const PipelineLayout& l = pipe_->schedule.layout;
  const MeshCoords& me = mesh_->coords();
  pp_rank_ = me.pp;
  std::vector<std::set<int>> layers_of;  // per pipeline rank
  for (int q = 0; q < l.ranks(); ++q) layers_of.push_back(as_set(pipeline_rank_layers(*pipe_, q)));
  const std::set<int>& held = layers_of[static_cast<size_t>(pp_rank_)];
  held_layers_.assign(held.begin(), held.end());
  // The pipeline ranks that hold the same layers as this one (DualPipe: the pair r, pp − 1 − r).
  std::vector<int> replicas;
  for (int q = 0; q < l.ranks(); ++q)
    if (layers_of[static_cast<size_t>(q)] == held) replicas.push_back(q);
  counts_norm_ = replicas.front() == pp_rank_;

  // Every rank works out every rank's groups, so that the splits below match.
  bool any_replicas = false, any_tie = false;
  std::vector<int> tie_members;  // pipeline ranks holding a copy of a tied weight this rank holds
  std::vector<Param*> mine;
  for (Param* p : model_->params()) {
    const std::set<int> users = users_of(*p);
    std::vector<int> holders;
    for (int q = 0; q < l.ranks(); ++q)
      if (meets(users, layers_of[static_cast<size_t>(q)])) holders.push_back(q);
    for (int q : holders) {
      const bool same_layers = layers_of[static_cast<size_t>(q)] == layers_of[static_cast<size_t>(holders.front())];
      any_replicas = any_replicas || (q != holders.front() && same_layers);
      any_tie = any_tie || !same_layers;
    }
    if (!meets(users, held)) continue;
    // Localised to this rank: owned by its first held user, tied to the other held ones.
    std::vector<int> here;
    for (int u : users)
      if (held.count(u)) here.push_back(u);
    const int owner = p->layer_index;
    p->layer_index = here.front();
    p->tied_layers.assign(here.begin() + 1, here.end());
    const bool elsewhere = std::any_of(holders.begin(), holders.end(), [&](int q) {
      return layers_of[static_cast<size_t>(q)] != held;
    });
    if (elsewhere) {
      // A copy on another pipeline rank that holds other layers (GPT-2's wte on the first and the
      // last stage): a unit of its own, summed over the ranks that hold it (DistributedOptimizer::tie).
      p->own_unit = true;
      tied_.push_back(p);
      tie_owner_ = held.count(owner) > 0;
      TETRA_CHECK(tie_members.empty() || tie_members == holders, "parameters tied across different pipeline ranks (",
                  p->name, ")");
      tie_members = holders;
    }
    mine.push_back(p);
  }

  // The gradient group: the data-parallel replicas of this rank's layers, on every pipeline rank
  // that holds them (ZeRO shards over all of them). The tie group: the ranks of this data-parallel
  // index that hold a copy of a tied weight (this rank alone where it holds none). Made by
  // create_pipeline_groups on every rank alike.
  if (any_replicas)
    for (int q : replicas)
      for (int d = 0; d < mesh_->shape().dp; ++d) grad_members_.push_back(mesh_->rank_of(q, d, me.tp));
  // The experts' gradient group likewise: this rank's expert-data group (the dp ranks holding the same
  // experts, dp ≡ this dp mod ep) on every pipeline rank holding copies of its layers.
  if (any_replicas && mesh_->shape().ep > 1)
    for (int q : replicas)
      for (int d = me.ep; d < mesh_->shape().dp; d += mesh_->shape().ep)
        expert_grad_members_.push_back(mesh_->rank_of(q, d, me.tp));
  if (any_tie)
    for (int q : tie_members.empty() ? std::vector<int>{pp_rank_} : tie_members)
      tie_members_.push_back(mesh_->rank_of(q, me.dp, me.tp));
  return mine;
}

void Trainer::create_pipeline_groups() {
  if (!grad_members_.empty()) grad_group_ = mesh_->create_group(world_, grad_members_, "pp_replicas");
  if (!tie_members_.empty()) tie_group_ = mesh_->create_group(world_, tie_members_, "pp_tie");
  if (!expert_grad_members_.empty())
    expert_grad_group_ = mesh_->create_group(world_, expert_grad_members_, "pp_expert_replicas");
}

Communicator& Trainer::grad_group() const {
  return grad_group_.host ? grad_group_.on_device() : mesh_->device_comm(MeshAxis::DP);
}

Communicator& Trainer::expert_grad_group() const {
  return expert_grad_group_.host ? expert_grad_group_.on_device() : mesh_->device_comm(MeshAxis::ExpertDP);
}

void Trainer::setup_pipeline() {
  const Schedule& schedule = pipe_->schedule;
  const PipelineLayout& l = schedule.layout;
  std::vector<Layer*> layers = model_->layers();
  std::vector<std::vector<Layer*>> chunks;
  for (int c = 0; c < l.chunks(); ++c) {
    chunks.emplace_back();
    for (int i : stage_layer_indices(pipe_->stage_layers, l.stage_of(pp_rank_, c)))
      chunks.back().push_back(layers[static_cast<size_t>(i)]);
  }
  // Under sequence parallelism a stage boundary carries this tp rank's 1/tp of the tokens.
  const int64_t tokens = static_cast<int64_t>(cfg_.train.micro_batch) * cfg_.train.seq_len;
  const bool sequence_sharded = cfg_.parallel.tp > 1 && cfg_.parallel.sequence_parallel;
  stages_ = std::make_unique<ModelStages>(l, pp_rank_, std::move(chunks), *optimizer_, device_, act_dtype_,
                                          residual_dtype_, cfg_.train.micro_batch, cfg_.train.seq_len,
                                          cfg_.model.d_model, sequence_sharded ? tokens / cfg_.parallel.tp : tokens);
  // TETRA_FAULT nan_grad: the step's first weight gradient on this rank turns NaN.
  stages_->set_after_weight([this](const Layer& layer) {
    if (poison_grad_) poison_gradient(layer);
  });
  const Schedule eval = make_forward_only_schedule(choice_name(cfg_.parallel.schedule), l.ranks(), l.micro_batches());
  if (l.ranks() > 1) {
    p2p_ = std::make_unique<CommScheduler>(device_);
    Communicator& pp = mesh_->comm(MeshAxis::PP);
    if (device_.is_cuda())
      transport_ = channel_transport(pp, schedule, [this](std::shared_ptr<Communicator> two) {
        return mesh_->device_twin(std::move(two), /*own_stream=*/true);
      });
    else
      transport_ = tagged_transport(pp);
  }
  executor_ = std::make_unique<PipelineExecutor>(schedule, pp_rank_, transport_.get(), p2p_.get());
  eval_executor_ = std::make_unique<PipelineExecutor>(eval, pp_rank_, transport_.get(), p2p_.get());
  eval_loss_ = Tensor::zeros({1}, DType::F64, device_);
  // The step's micro-batches are copied where a schedule may use one after asking for the next (the
  // loader's buffers last until its next batch): pipelines, and pp = 1 with forward-backward pairs.
  if ((l.ranks() > 1 || cfg_.parallel.moe_overlap) && (stages_->needs_inputs() || stages_->needs_targets()))
    for (int m = 0; m < l.micro_batches(); ++m) {
      step_ids_.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device_));
      step_targets_.push_back(Tensor::empty({cfg_.train.micro_batch, cfg_.train.seq_len}, DType::I32, device_));
    }
}

void Trainer::copy_batches(int64_t index, bool eval, double* data_wait_s) {
  for (size_t m = 0; m < step_ids_.size(); ++m) {
    const double t0 = seconds_now();
    data::LoadedBatch b = eval ? loader_->eval_batch(index, static_cast<int>(m)) : loader_->batch(index, static_cast<int>(m));
    if (data_wait_s) *data_wait_s += seconds_now() - t0;
    ops::copy(step_ids_[m], b.inputs);
    ops::copy(step_targets_[m], b.targets);
  }
}

void Trainer::run_schedule(int64_t step, bool graph_inputs, double* data_wait_s) {
  ModelStages::BatchSource source;
  if (graph_inputs) {  // the step graph's fixed buffers, filled before each replay (pp = 1)
    source = [this](int m) { return data::LoadedBatch{graph_ids_[static_cast<size_t>(m)], graph_targets_[static_cast<size_t>(m)]}; };
  } else if (!step_ids_.empty()) {
    copy_batches(step, /*eval=*/false, data_wait_s);
    source = [this](int m) { return data::LoadedBatch{step_ids_[static_cast<size_t>(m)], step_targets_[static_cast<size_t>(m)]}; };
  } else {
    // pp = 1: from the loader as each forward needs it, as the loader reads ahead.
    source = [this, step, data_wait_s](int m) {
      const double t0 = seconds_now();
      data::LoadedBatch b = loader_->batch(step, m);
      *data_wait_s += seconds_now() - t0;
      return b;
    };
  }
  stages_->begin(/*training=*/true, std::move(source), loss_sum_, 1.0f / static_cast<float>(loader_->tokens_per_step()));
  executor_->run(*stages_);
  stages_->end();
}

double Trainer::evaluate() {
  optimizer_->sync_weights();  // ZeRO 1–2 leave part of the last update to the next step's forward
  const int64_t batches = std::min<int64_t>(cfg_.train.eval_batches, loader_->num_eval_batches());
  if (p2p_) p2p_->begin_step();  // its records of the evaluation are not a step's
  ops::zero(eval_loss_);
  for (int64_t b = 0; b < batches; ++b) {
    ModelStages::BatchSource source;
    if (!step_ids_.empty()) {
      copy_batches(b, /*eval=*/true, nullptr);
      source = [this](int m) { return data::LoadedBatch{step_ids_[static_cast<size_t>(m)], step_targets_[static_cast<size_t>(m)]}; };
    } else {
      source = [this, b](int m) { return loader_->eval_batch(b, m); };
    }
    stages_->begin(/*training=*/false, std::move(source), eval_loss_, 1.0f);
    eval_executor_->run(*stages_);
    stages_->end();
  }
  // The losses are on the ranks that hold the output layer: summed over the pipeline, then over
  // the data-parallel replicas.
  std::vector<double> sum{ops::sum_to_host(eval_loss_)};
  if (mesh_->shape().pp > 1) mesh_->comm(MeshAxis::PP).all_reduce_host(sum);
  Communicator& dp = mesh_->comm(MeshAxis::DP);
  if (dp.size() > 1) dp.all_reduce_host(sum);
  return sum[0] / static_cast<double>(batches * loader_->tokens_per_step());
}

void Trainer::reduce_loss_and_norm() {
  // Loss: the sum over every token of the global batch, from the ranks holding the output layer.
  Communicator& dp = mesh_->device_comm(MeshAxis::DP);
  if (dp.size() > 1) dp.all_reduce(loss_sum_, ReduceOp::Sum)->wait();
  if (mesh_->shape().pp > 1) mesh_->device_comm(MeshAxis::PP).all_reduce(loss_sum_, ReduceOp::Sum)->wait();
  // Gradient norm: every element once — each pipeline rank's layers (one rank of a DualPipe pair
  // for both; the owner's copy of a tied weight), over the data-parallel shards.
  ops::zero(grad_sq_);
  optimizer_->grad_norm_squared(grad_sq_);
  if (mesh_->shape().pp > 1) {
    if (!counts_norm_) ops::zero(grad_sq_);
    mesh_->device_comm(MeshAxis::PP).all_reduce(grad_sq_, ReduceOp::Sum)->wait();
  }
}

MemoryPlan Trainer::memory_plan() const {
  // The running optimizer's own accounting of this rank's parameters.
  MemoryPlan plan = plan_memory(cfg_, *optimizer_, params_, mesh_->shape().dp);
  if (expert_parallel_) plan.params += expert_params_.param_numel();
  if (mesh_->shape().pp > 1 || cfg_.parallel.moe_overlap) {
    // This rank's stages' activations at the schedule's peak, and one layer's backward.
    plan.activations = pipe_->peak_activation_bytes[static_cast<size_t>(pp_rank_)] +
                       model_family_of(cfg_).backward_working_bytes(model_args(cfg_), activation_shape(cfg_));
  }
  return plan;
}

void Trainer::report_pipeline_peaks() {
  const int pp = mesh_->shape().pp;
  if (pp <= 1) return;
  // Each pipeline rank's measured peak of micro-batches in flight beside the simulator's.
  std::vector<double> peaks(static_cast<size_t>(pp), 0.0);
  peaks[static_cast<size_t>(pp_rank_)] = stages_->peak_contexts();
  mesh_->comm(MeshAxis::PP).all_reduce_host(peaks);
  if (!is_rank0()) return;
  std::string measured, simulated;
  for (int r = 0; r < pp; ++r) {
    measured += (r ? ", " : "") + std::to_string(static_cast<int>(peaks[static_cast<size_t>(r)]));
    simulated += (r ? ", " : "") + std::to_string(pipe_->sim.peak_activations[static_cast<size_t>(r)]);
  }
  std::printf("tetra: pipeline peak activations per rank [%s] (simulated [%s]), in (chunk, micro-batch) units\n",
              measured.c_str(), simulated.c_str());
  std::fflush(stdout);
}

}  // namespace tetra::launch
