#include "launch/train/memory_plan.h"

#include <algorithm>

#include "launch/config/model.h"
#include "models/fp8_step_weights.h"
#include "parallel/expert/placement.h"
#include "parallel/zero/memory.h"

namespace tetra::launch {

DistributedOptimizerOptions optimizer_options(const Config& cfg, int dp) {
  DistributedOptimizerOptions oo;
  oo.zero_stage = cfg.parallel.zero_stage;
  oo.bucket_bytes = cfg.parallel.bucket_mb * 1024 * 1024;
  oo.overlap_grad_reduce = cfg.parallel.overlap_grad_reduce;
  oo.fsdp_prefetch = cfg.parallel.fsdp_prefetch;
  const int per_micro = std::max(1, dp * std::max(1, cfg.train.micro_batch));
  oo.accumulation_steps = std::max(1, cfg.train.global_batch / per_micro);
  if (cfg.parallel.grad_dtype != DtypeChoice::Auto)
    oo.grad_dtype = cfg.parallel.grad_dtype == DtypeChoice::BF16 ? DType::BF16 : DType::F32;
  oo.adamw.beta1 = static_cast<float>(cfg.optimizer.betas[0]);
  oo.adamw.beta2 = static_cast<float>(cfg.optimizer.betas[1]);
  oo.adamw.eps = static_cast<float>(cfg.optimizer.eps);
  oo.adamw.weight_decay = static_cast<float>(cfg.optimizer.weight_decay);
  oo.adamw.state_dtype = optimizer_state_dtype(cfg);
  return oo;
}

double activation_bytes(const Config& cfg) {
  return model_family_of(cfg).activation_bytes(model_args(cfg), activation_shape(cfg));
}

namespace {

// parallel.grad_all_reduce: copy_engine stages dp − 1 copies of the flat gradient buffer per rank,
// communication buffers that live for the whole run.
void add_copy_engine_staging(StateMemory& state, const Config& cfg, int dp, int64_t flat_numel, DType grad_dtype) {
  if (cfg.parallel.grad_all_reduce != GradAllReduce::CopyEngine || dp <= 1) return;
  const double bytes =
      static_cast<double>(dp - 1) * static_cast<double>(flat_numel) * static_cast<double>(dtype_size(grad_dtype));
  state.communication += bytes;
  state.persistent += bytes;
}

}  // namespace

MemoryPlan plan_memory(const Config& cfg, const std::vector<Param*>& params, int dp) {
  const DistributedOptimizerOptions oo = optimizer_options(cfg, dp);
  const DType working = activation_dtype(cfg);
  const ParamStorage storage = param_storage_for(oo, working, dp);
  // Expert parallelism: each rank holds its experts' slices, laid out and sharded over the
  // expert-data group (dp / ep ranks); buffers (the routers' biases) are fp32 outside both layouts.
  const int ep = std::max(1, cfg.parallel.ep), edp = std::max(1, dp / ep);
  std::vector<Param*> dense, experts;
  double buffers = 0;
  for (Param* p : params) {
    if (!p->trainable)
      buffers += 4.0 * static_cast<double>(p->numel());
    else
      (ep > 1 && expert_owned(*p) ? experts : dense).push_back(p);
  }
  ZeroLayout layout(dense, storage.shards);
  ZeroMemorySpec spec;
  spec.stage = oo.zero_stage;
  spec.weight_dtype = working;
  spec.grad_dtype = storage.grad_dtype;
  spec.accumulation_steps = oo.accumulation_steps;
  spec.fsdp_prefetch = oo.fsdp_prefetch;
  spec.overlap_grad_reduce = oo.overlap_grad_reduce;
  spec.state_dtype = oo.adamw.state_dtype;
  MemoryPlan plan;
  plan.zero_stage = oo.zero_stage;
  plan.dp = dp;
  plan.weight_dtype = dtype_name(working);
  plan.grad_dtype = dtype_name(storage.grad_dtype);
  plan.state_dtype = dtype_name(oo.adamw.state_dtype);
  plan.params = layout.param_numel();
  plan.state = zero_state_memory(layout, spec);
  if (!experts.empty()) {
    const ParamStorage es = param_storage_for(oo, working, edp);
    ZeroLayout expert_layout(experts, es.shards);
    ZeroMemorySpec e = spec;
    e.grad_dtype = es.grad_dtype;
    const StateMemory m = zero_state_memory(expert_layout, e);
    plan.params += expert_layout.param_numel();
    plan.state.weights += m.weights;
    plan.state.gradients += m.gradients;
    plan.state.optimizer += m.optimizer;
    plan.state.communication += m.communication;
    plan.state.persistent += m.persistent;
  }
  plan.state.weights += buffers;
  plan.state.persistent += buffers;
  add_copy_engine_staging(plan.state, cfg, dp, layout.total(), storage.grad_dtype);
  plan.activations = activation_bytes(cfg);
  plan.fp8_weights = fp8_step_weight_bytes(params, oo.zero_stage == 3);
  return plan;
}

MemoryPlan plan_memory(const Config& cfg, const DistributedOptimizer& optimizer, const ParamSet& params, int dp) {
  MemoryPlan plan;
  plan.zero_stage = optimizer.zero_stage();
  plan.dp = dp;
  plan.weight_dtype = dtype_name(params.value_dtype());
  plan.grad_dtype = dtype_name(params.grad_dtype());
  plan.state_dtype = dtype_name(optimizer_state_dtype(cfg));
  plan.params = params.param_numel();
  plan.state = optimizer.memory();
  add_copy_engine_staging(plan.state, cfg, dp, params.flat_numel(), params.grad_dtype());
  plan.activations = activation_bytes(cfg);
  plan.fp8_weights = fp8_step_weight_bytes(params.params(), plan.zero_stage == 3);
  return plan;
}

void print_memory_plan(std::FILE* out, const MemoryPlan& p, const std::string& indent) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  auto line = [&](const char* what, double bytes, const char* note) {
    std::fprintf(out, "%s%-16s %16.0f B %10.3f GiB  %s\n", indent.c_str(), what, bytes, bytes / gib, note);
  };
  std::fprintf(out, "%smemory per device: zero_stage %d over dp %d, %s weights, %s gradients\n", indent.c_str(),
               p.zero_stage, p.dp, p.weight_dtype.c_str(), p.grad_dtype.c_str());
  const char* weights = p.zero_stage == 3 ? "working-weight shard" : "full working weights";
  const char* grads = p.zero_stage == 0   ? "full buffer, all-reduced"
                      : p.zero_stage == 1 ? "full buffer + reduced shard"
                                          : "reduced shard + per-layer buffers in flight";
  const std::string opt = "fp32 master + 2 " + p.state_dtype + (p.zero_stage == 0 ? " moments, replicated" : " moments of the shard");
  const char* comm = p.zero_stage == 3 ? "gathered layers (tied + 1 + prefetch)"
                     : p.zero_stage == 0 ? "in place"
                                         : "all-gather source shard";
  line("parameters", p.state.weights, weights);
  line("gradients", p.state.gradients, grads);
  line("optimizer state", p.state.optimizer, opt.c_str());
  line("activations", p.activations, "estimate, one micro-batch");
  if (p.fp8_weights > 0) line("fp8 weights", p.fp8_weights, "the step's FP8 casts of the weights and their transposes");
  line("communication", p.state.communication, comm);
  line("total", p.total(), "");
  const double n = static_cast<double>(std::max<int64_t>(1, p.params));
  std::fprintf(out, "%s%-16s %16.0f B %10.3f GiB  = %.2f B × N = %.2f B × N / dp (N = %lld)\n", indent.c_str(),
               "persistent state", p.state.persistent, p.state.persistent / gib, p.state.persistent / n,
               p.state.persistent * p.dp / n, static_cast<long long>(p.params));
}

}  // namespace tetra::launch
