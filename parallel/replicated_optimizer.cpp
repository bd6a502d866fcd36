#include "parallel/replicated_optimizer.h"

#include <algorithm>

#include "parallel/zero_memory.h"
#include "runtime/ops.h"

namespace tetra {

ReplicatedOptimizer::ReplicatedOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                                         const DistributedOptimizerOptions& o)
    : params_(params),
      dp_(dp),
      scheduler_(scheduler),
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

void ReplicatedOptimizer::tie(std::vector<Param*> params, Communicator& group, bool owner) {
  for (Param* p : params)
    TETRA_CHECK(p->own_unit && params_.find(p->name) == p, "tie: ", p->name,
                " must be a parameter of this ParamSet laid out as a unit of its own");
  tied_ = std::move(params);
  tie_group_ = &group;
  tie_owner_ = owner;
}

void ReplicatedOptimizer::finish_gradients() {
  reducer_.finish();
  // Pipeline copies: the data-parallel sums of every copy, added up.
  if (!tie_group_ || tie_group_->size() <= 1) return;
  for (Param* p : tied_) {
    CommScheduler::Ticket t = scheduler_.issue("all_reduce tied " + p->name, static_cast<int64_t>(p->grad.nbytes()),
                                               [&] { return tie_group_->all_reduce(p->grad, ReduceOp::Sum); });
    scheduler_.wait(t);
  }
}

void ReplicatedOptimizer::grad_norm_squared(Tensor& acc) {
  if (tie_owner_ || tied_.empty()) return gradient_norm_squared(acc, params_.flat_grads());
  // Another rank counts the tied copies: every unit but theirs.
  std::vector<Tensor> pieces;
  for (const ZeroUnit& u : params_.layout().units()) {
    const Param* first = params_.layout().params()[static_cast<size_t>(u.params.front())];
    if (std::find(tied_.begin(), tied_.end(), first) != tied_.end()) continue;
    pieces.push_back(params_.flat_grads().slice_flat(u.offset, {u.padded}));
  }
  gradient_norm_squared(acc, pieces);
}

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
  if (dp_.rank() != 0) return {};
  std::vector<StatePiece> out;
  for (StatePiece& s : all_pieces()) {
    const bool copy = !tie_owner_ && std::any_of(tied_.begin(), tied_.end(), [&](Param* p) { return p->name == s.name; });
    if (!copy) out.push_back(std::move(s));
  }
  return out;
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
