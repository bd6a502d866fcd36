#include "parallel/expert/dense_and_expert_optimizer.h"

#include "parallel/expert/placement.h"
#include "runtime/ops.h"

namespace tetra {

DenseAndExpertOptimizer::DenseAndExpertOptimizer(std::unique_ptr<DistributedOptimizer> dense,
                                                 std::unique_ptr<DistributedOptimizer> experts,
                                                 const std::vector<Param*>& expert_params, Communicator* ep,
                                                 std::vector<Param*> buffers, bool save_buffers)
    : dense_(std::move(dense)), experts_(std::move(experts)), ep_(ep), buffers_(std::move(buffers)),
      save_buffers_(save_buffers) {
  for (const Param* p : expert_params) expert_offsets_[p->name] = expert_offset(*p, ep ? ep->rank() : 0);
  TETRA_CHECK(dense_, "DenseAndExpertOptimizer: no optimizer of the dense parameters");
  TETRA_CHECK(!experts_ || experts_->zero_stage() == dense_->zero_stage(),
              "DenseAndExpertOptimizer: the experts' ZeRO stage ", experts_ ? experts_->zero_stage() : 0,
              " differs from the dense parameters' ", dense_->zero_stage());
  for (Param* b : buffers_) {
    TETRA_CHECK(!b->trainable && b->value.defined() && b->value.dtype() == DType::F32,
                "DenseAndExpertOptimizer: ", b->name, " is not an fp32 buffer");
    zero_moments_.push_back(Tensor::zeros({b->numel()}, DType::F32, b->value.device()));
  }
}

void DenseAndExpertOptimizer::begin_step() {
  dense_->begin_step();
  if (experts_) experts_->begin_step();
}

void DenseAndExpertOptimizer::before_forward(int layer) {
  dense_->before_forward(layer);
  if (experts_) experts_->before_forward(layer);
}

void DenseAndExpertOptimizer::after_forward(int layer) {
  dense_->after_forward(layer);
  if (experts_) experts_->after_forward(layer);
}

void DenseAndExpertOptimizer::before_backward(int layer) {
  dense_->before_backward(layer);
  if (experts_) experts_->before_backward(layer);
}

void DenseAndExpertOptimizer::after_backward(int layer, bool last_micro) {
  dense_->after_backward(layer, last_micro);
  if (experts_) experts_->after_backward(layer, last_micro);
}

void DenseAndExpertOptimizer::finish_gradients() {
  dense_->finish_gradients();
  if (experts_) experts_->finish_gradients();
}

void DenseAndExpertOptimizer::grad_norm_squared(Tensor& acc) {
  dense_->grad_norm_squared(acc);
  if (!experts_) return;
  // The experts' Σ g² over the expert-data group covers this rank's experts; the other experts'
  // are on the other ranks of the expert-parallel group.
  Tensor mine = Tensor::zeros({1}, DType::F64, acc.device());
  experts_->grad_norm_squared(mine);
  if (ep_ && ep_->size() > 1) ep_->all_reduce(mine, ReduceOp::Sum)->wait();
  ops::sum_accumulate(acc, mine);
}

void DenseAndExpertOptimizer::step(float lr, float grad_scale) {
  dense_->step(lr, grad_scale);
  if (experts_) experts_->step(lr, grad_scale);
}

void DenseAndExpertOptimizer::step(const Tensor& control) {
  dense_->step(control);
  if (experts_) experts_->step(control);
}

void DenseAndExpertOptimizer::set_steps_taken(int64_t s) {
  dense_->set_steps_taken(s);
  if (experts_) experts_->set_steps_taken(s);
}

std::vector<StatePiece> DenseAndExpertOptimizer::buffer_pieces() {
  std::vector<StatePiece> out;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Param* b = buffers_[i];
    StatePiece s;
    s.name = b->name;
    s.full_shape = b->full_shape;
    s.begin = 0;
    s.end = b->numel();
    s.master = b->value.flatten();
    s.exp_avg = zero_moments_[i];
    s.exp_avg_sq = zero_moments_[i];
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<StatePiece> DenseAndExpertOptimizer::placed(std::vector<StatePiece> pieces) const {
  for (StatePiece& s : pieces) {
    auto it = expert_offsets_.find(s.name);
    TETRA_CHECK(it != expert_offsets_.end(), "DenseAndExpertOptimizer: a piece of ", s.name,
                ", which is not an expert's weight");
    s.begin += it->second;
    s.end += it->second;
  }
  return pieces;
}

std::vector<StatePiece> DenseAndExpertOptimizer::pieces_to_save() {
  std::vector<StatePiece> out = dense_->pieces_to_save();
  if (experts_) {
    std::vector<StatePiece> e = placed(experts_->pieces_to_save());
    out.insert(out.end(), e.begin(), e.end());
  }
  if (save_buffers_) {
    std::vector<StatePiece> b = buffer_pieces();
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

std::vector<StatePiece> DenseAndExpertOptimizer::pieces_to_load() {
  std::vector<StatePiece> out = dense_->pieces_to_load();
  if (experts_) {
    std::vector<StatePiece> e = placed(experts_->pieces_to_load());
    out.insert(out.end(), e.begin(), e.end());
  }
  std::vector<StatePiece> b = buffer_pieces();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

void DenseAndExpertOptimizer::after_load() {
  dense_->after_load();
  if (experts_) experts_->after_load();
  for (Tensor& z : zero_moments_) ops::zero(z);  // loading wrote the saved zeros into them
}

void DenseAndExpertOptimizer::sync_weights() {
  dense_->sync_weights();
  if (experts_) experts_->sync_weights();
}

StateMemory DenseAndExpertOptimizer::memory() const {
  StateMemory m = dense_->memory();
  if (experts_) {
    const StateMemory e = experts_->memory();
    m.weights += e.weights;
    m.gradients += e.gradients;
    m.optimizer += e.optimizer;
    m.communication += e.communication;
    m.persistent += e.persistent;
  }
  double buffers = 0;
  for (const Param* b : buffers_) buffers += 4.0 * static_cast<double>(b->numel());
  m.weights += buffers;
  m.persistent += buffers;
  return m;
}

}  // namespace tetra
