// DenseAndExpertOptimizer: the DistributedOptimizer of a model with routed experts, made of two
// (ARCHITECTURE.md §4; docs/moe.md). With expert parallelism the experts' weights live in a
// ParamSet of their own, laid out and ZeRO-sharded over the expert-data group (the ranks holding
// the same experts) and reduced over it, while the dense parameters' ParamSet is reduced and
// sharded over dp: two optimizers, one per group, driven by the same hooks. The gradient norm adds
// the experts' share summed over the expert-parallel group (each rank's experts are different), so
// every element counts once. The routers' bias buffers (Param::trainable false) ride along in
// checkpoints as pieces whose moments are zero: one rank per pipeline stage writes them (they are
// the same on every rank), every rank loads them. Without expert parallelism it holds the dense
// optimizer alone, for the buffers.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/distributed_optimizer.h"

namespace tetra {

class DenseAndExpertOptimizer : public DistributedOptimizer {
 public:
  // dense: over dp. experts: over the expert-data group, of `expert_params` (this rank's slices,
  // parallel/expert/placement.h), or null where the experts are among the dense parameters (ep = 1).
  // ep: the expert-parallel group for device tensors (null or of size 1: no experts' norm to sum;
  // its rank places the slices in the full tensors of checkpoint pieces). buffers: the model's
  // buffers (ParamSet::buffers()); save_buffers: this rank writes them into checkpoints.
  DenseAndExpertOptimizer(std::unique_ptr<DistributedOptimizer> dense, std::unique_ptr<DistributedOptimizer> experts,
               const std::vector<Param*>& expert_params, Communicator* ep, std::vector<Param*> buffers,
               bool save_buffers);

  int zero_stage() const override { return dense_->zero_stage(); }
  Device device() const override { return dense_->device(); }
  void begin_step() override;
  void before_forward(int layer) override;
  void after_forward(int layer) override;
  void before_backward(int layer) override;
  void after_backward(int layer, bool last_micro) override;
  void finish_gradients() override;
  void grad_norm_squared(Tensor& acc) override;
  void step(float lr, float grad_scale) override;
  void step(const Tensor& control) override;
  int64_t steps_taken() const override { return dense_->steps_taken(); }
  void set_steps_taken(int64_t s) override;
  std::vector<StatePiece> pieces_to_save() override;
  std::vector<StatePiece> pieces_to_load() override;
  void after_load() override;
  // Tied weights (embeddings) are dense parameters.
  void tie(std::vector<Param*> params, Communicator& group, bool owner) override {
    dense_->tie(std::move(params), group, owner);
  }
  void sync_weights() override;
  StateMemory memory() const override;

  DistributedOptimizer& dense() { return *dense_; }
  DistributedOptimizer* experts() { return experts_.get(); }

 private:
  std::vector<StatePiece> buffer_pieces();
  // The experts' pieces address this rank's slices: moved to their place in the full tensors.
  std::vector<StatePiece> placed(std::vector<StatePiece> pieces) const;
  std::map<std::string, int64_t> expert_offsets_;  // expert Param name → first element of its slice
  std::unique_ptr<DistributedOptimizer> dense_, experts_;
  Communicator* ep_;
  std::vector<Param*> buffers_;
  bool save_buffers_;
  std::vector<Tensor> zero_moments_;  // fp32 zeros, one per buffer: the pieces' exp_avg and exp_avg_sq
};

}  // namespace tetra
