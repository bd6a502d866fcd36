#include "parallel/replicated_optimizer.h"

#include "parallel/zero_memory.h"
#include "runtime/ops.h"

namespace tetra {

ReplicatedOptimizer::ReplicatedOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                                         const DistributedOptimizerOptions& o)
    : params_(params),
      dp_(dp),
      reducer_(params, dp, scheduler, o.bucket_bytes),
      adamw_(params, o.adamw),
      overlap_(o.overlap_grad_reduce) {}

void ReplicatedOptimizer::begin_step() {
  params_.zero_grads();
  reducer_.begin_step();
}

void ReplicatedOptimizer::after_backward(int layer, bool last_micro) {
  // Without overlap every bucket is issued by finish_gradients(), after backward.
  if (last_micro && overlap_) reducer_.layer_done(layer);
}

void ReplicatedOptimizer::finish_gradients() { reducer_.finish(); }

void ReplicatedOptimizer::grad_norm_squared(Tensor& acc) { gradient_norm_squared(acc, params_.flat_grads()); }

void ReplicatedOptimizer::step(float lr, float grad_scale) { adamw_.step(lr, grad_scale); }

void ReplicatedOptimizer::step(const Tensor& control) { adamw_.step(control); }

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
  ZeroMemorySpec s;
  s.stage = 0;
  s.weight_dtype = params_.value_dtype();
  s.grad_dtype = params_.grad_dtype();
  return zero_state_memory(params_.layout(), s);
}

}  // namespace tetra
