#include "parallel/replicated_optimizer.h"

#include <algorithm>

#include "parallel/zero/memory.h"
#include "runtime/ops.h"

namespace tetra {

ReplicatedOptimizer::ReplicatedOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                                         const DistributedOptimizerOptions& o, const TpGradGroups& tp)
    : params_(params),
      dp_(dp),
      scheduler_(scheduler),
      tp_(params.layout(), tp, scheduler),
      reducer_(params, dp, scheduler, o.bucket_bytes, &tp_),
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
  // Without reduction (dp 1) nothing has read the gradients yet; the norm and AdamW read them all.
  settle_grads(params_.params());
  reducer_.finish();
  // Pipeline copies: the data-parallel sums of every copy, added up.
  if (!tie_group_ || tie_group_->size() <= 1) return;
  for (Param* p : tied_) {
    CommScheduler::Ticket t = scheduler_.issue("all_reduce tied " + p->name, static_cast<int64_t>(p->grad.nbytes()),
                                               [&] { return tie_group_->all_reduce(p->grad, ReduceOp::Sum); });
    scheduler_.wait(t);
  }
}

// Every element once: tp-replicated parameters on tp rank 0 only, pipeline copies of a tied weight on
// its owner only.
void ReplicatedOptimizer::grad_norm_squared(Tensor& acc) {
  tp_.norm_squared(acc, params_.flat_grads(), nullptr, -1, tie_owner_ ? std::vector<Param*>{} : tied_);
}

void ReplicatedOptimizer::step(float lr, float grad_scale) { adamw_.step(lr, grad_scale); }

void ReplicatedOptimizer::step(const Tensor& control) { adamw_.step(control); }

std::vector<StatePiece> ReplicatedOptimizer::all_pieces(bool saved_only) {
  std::vector<StatePiece> out;
  for (Param* p : params_.params()) {
    // Saving: not what another tp rank saves (its identical copy of a replicated parameter or block).
    auto append = saved_only ? append_saved_state_pieces : append_state_pieces;
    append(out, *p, 0, p->numel(), adamw_.master().slice_flat(p->offset, {p->numel()}),
           adamw_.exp_avg().slice_flat(p->offset, {p->numel()}), adamw_.exp_avg_sq().slice_flat(p->offset, {p->numel()}));
  }
  return out;
}

// Every dp rank holds the same state: dp rank 0 writes it, every rank reads all of it.
std::vector<StatePiece> ReplicatedOptimizer::pieces_to_save() {
  if (dp_.rank() != 0) return {};
  std::vector<StatePiece> out;
  for (StatePiece& s : all_pieces(/*saved_only=*/true)) {
    const bool copy = !tie_owner_ && std::any_of(tied_.begin(), tied_.end(), [&](Param* p) { return p->name == s.name; });
    if (!copy) out.push_back(std::move(s));
  }
  return out;
}

std::vector<StatePiece> ReplicatedOptimizer::pieces_to_load() { return all_pieces(/*saved_only=*/false); }

void ReplicatedOptimizer::after_load() {
  if (adamw_.has_separate_master()) ops::copy(params_.flat_values(), adamw_.master());
  adamw_.weights_replaced();
}

StateMemory ReplicatedOptimizer::memory() const {
  ZeroMemorySpec s;
  s.stage = 0;
  s.weight_dtype = params_.value_dtype();
  s.grad_dtype = params_.grad_dtype();
  s.state_dtype = adamw_.config().state_dtype;
  return zero_state_memory(params_.layout(), s);
}

}  // namespace tetra
