// ZeRO stage 0: every data-parallel rank keeps the full fp32 state; gradients are all-reduced in
// buckets as backward finishes them (GradReducer), then every rank applies the same AdamW update.
// With tensor parallelism "full" means this rank's slices, and dp rank 0 of every tp rank saves them
// (a tp-replicated parameter: tp rank 0's copy only).
#pragma once
#include "parallel/distributed_optimizer.h"
#include "parallel/grad_reducer.h"

namespace tetra {

class ReplicatedOptimizer : public DistributedOptimizer {
 public:
  ReplicatedOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler,
                      const DistributedOptimizerOptions& options, const TpGradGroups& tp = {});
  Device device() const override { return params_.device(); }
  int zero_stage() const override { return 0; }
  void begin_step() override;
  void after_backward(int layer, bool last_micro) override;
  void finish_gradients() override;
  void grad_norm_squared(Tensor& acc) override;
  void step(float lr, float grad_scale) override;
  void step(const Tensor& control) override;
  int64_t steps_taken() const override { return adamw_.steps_taken(); }
  void set_steps_taken(int64_t s) override { adamw_.set_steps_taken(s); }
  std::vector<StatePiece> pieces_to_save() override;
  std::vector<StatePiece> pieces_to_load() override;
  void after_load() override;
  void tie(std::vector<Param*> params, Communicator& group, bool owner) override;
  StateMemory memory() const override;

 private:
  std::vector<StatePiece> all_pieces(bool saved_only);
  ParamSet& params_;
  Communicator& dp_;
  CommScheduler& scheduler_;
  std::vector<Param*> tied_;
  Communicator* tie_group_ = nullptr;
  bool tie_owner_ = true;
  TpGradSync tp_;
  GradReducer reducer_;
  AdamW adamw_;
  bool overlap_;  // parallel.overlap_grad_reduce: reduce buckets during backward
};

}  // namespace tetra
