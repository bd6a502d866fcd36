#include "parallel/replicated_optimizer.h"

#include "runtime/ops.h"

namespace tetra {

ReplicatedOptimizer::ReplicatedOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                                         const DistributedOptimizerOptions& o)
    : params_(params), dp_(dp), reducer_(params, dp, scheduler, o.bucket_bytes), adamw_(params, o.adamw) {}

void ReplicatedOptimizer::begin_step() {
  params_.zero_grads();
  reducer_.begin_step();
}

void ReplicatedOptimizer::after_backward(int layer, bool last_micro) {
  if (last_micro) reducer_.layer_done(layer);
}

void ReplicatedOptimizer::finish_gradients() { reducer_.finish(); }

double ReplicatedOptimizer::grad_norm() { return gradient_norm(params_.flat_grads()); }

void ReplicatedOptimizer::step(float lr, float grad_scale) { adamw_.step(lr, grad_scale); }

std::vector<StatePiece> ReplicatedOptimizer::all_pieces() {
  std::vector<StatePiece> out;
  for (Param* p : params_.params()) {
    StatePiece s;
    s.name = p->name;
    s.full_shape = p->full_shape;
    s.begin = 0;
    s.end = p->numel();
    s.master = adamw_.master().slice_flat(p->offset, {p->numel()});
    s.exp_avg = adamw_.exp_avg().slice_flat(p->offset, {p->numel()});
    s.exp_avg_sq = adamw_.exp_avg_sq().slice_flat(p->offset, {p->numel()});
    out.push_back(std::move(s));
  }
  return out;
}

// Every rank holds the same state: dp rank 0 writes it, every rank reads all of it.
std::vector<StatePiece> ReplicatedOptimizer::pieces_to_save() {
  return dp_.rank() == 0 ? all_pieces() : std::vector<StatePiece>{};
}

std::vector<StatePiece> ReplicatedOptimizer::pieces_to_load() { return all_pieces(); }

void ReplicatedOptimizer::after_load() {
  if (adamw_.has_separate_master()) ops::copy(params_.flat_values(), adamw_.master());
}

StateMemory ReplicatedOptimizer::memory() const {
  StateMemory m;
  const double n = static_cast<double>(params_.flat_numel());
  m.weights = n * static_cast<double>(dtype_size(params_.flat_values().dtype()));
  m.gradients = n * static_cast<double>(dtype_size(params_.flat_grads().dtype()));
  m.optimizer = n * (adamw_.has_separate_master() ? 12.0 : 8.0);
  return m;
}

std::unique_ptr<DistributedOptimizer> make_distributed_optimizer(ParamSet& params, Communicator& dp,
                                                                 CommScheduler& scheduler,
                                                                 const DistributedOptimizerOptions& options) {
  if (options.zero_stage == 0) return std::make_unique<ReplicatedOptimizer>(params, dp, scheduler, options);
  TETRA_FAIL(Config, "parallel.zero_stage ", options.zero_stage, " is not implemented yet (valid: 0)");
}

}  // namespace tetra
