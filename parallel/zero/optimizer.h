// ZeroOptimizer: ZeRO stages 1–3 over the data-parallel group (DeepSpeed ZeRO, PyTorch FSDP).
// Every FSDP unit (= layer, see ZeroLayout) is split into dp equal shards; rank r owns shard r of
// every unit and keeps, as flat buffers of layout.shard_total() elements:
//   master, exp_avg, exp_avg_sq   AdamW state of its shard (stages 1–3): master fp32, moments of
//                                 options.adamw.state_dtype (fp32 or bf16)
//   grad shard                    its reduced gradients (grad dtype)
//   weight shard                  working dtype; the all-gather source. It *is* the master when
//                                 the working weights are fp32, a bf16 copy otherwise.
//
//   stage 1  full working weights and full gradients (ParamSet); per-layer reduce-scatter of the
//            gradients into the shard, AdamW on the shard, per-layer all-gather of the weights:
//            the first layer's units right after their update (overlapping the rest of AdamW),
//            every other unit at the start of the next step, each waited for only by the forward
//            of its layer (Megatron's overlapped parameter gather). Whatever reads the full
//            weights outside a training step (evaluation) calls sync_weights() first.
//   stage 2  + no full gradient buffer: per-layer buffers exist from the layer's backward to the
//            end of its reduce-scatter (ZeroGradReducer).
//   stage 3  + no full weights: each layer's weights are all-gathered before its forward and again
//            before its backward, prefetched, and freed after use (ZeroParamGather).
//
// The gradient norm is the square root of the all-reduced sum of squares of the local shards —
// the unsharded norm, as padding is zero. Checkpoint pieces are exactly this rank's shard, cut at
// parameter boundaries, so a checkpoint reshards to any stage and dp size on load.
// With tensor parallelism the units hold this rank's tp slices and the shards are over this tp
// rank's dp group; the norm also sums over tp (each element once), and a tp-replicated parameter's
// shard pieces are saved by tp rank 0 only, a replicated block's by the first of its ranks
// (parallel/param_placement.h counted_ranges).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "parallel/distributed_optimizer.h"
#include "parallel/fp8_update_amax.h"
#include "parallel/zero/grad_reducer.h"
#include "parallel/zero/param_gather.h"

namespace tetra {

class ZeroOptimizer : public DistributedOptimizer {
 public:
  ZeroOptimizer(ParamSet& params, Communicator& dp, CommScheduler& scheduler, const DistributedOptimizerOptions& options,
                const TpGradGroups& tp = {});
  ~ZeroOptimizer() override;

  Device device() const override { return params_.device(); }
  int zero_stage() const override { return stage_; }
  void begin_step() override;
  void before_forward(int layer) override;
  void after_forward(int layer) override;
  void before_backward(int layer) override;
  void after_backward(int layer, bool last_micro) override;
  void finish_gradients() override;
  void grad_norm_squared(Tensor& acc) override;
  void step(float lr, float grad_scale) override;
  void step(const Tensor& control) override;
  int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(int64_t s) override { steps_ = s; }
  std::vector<StatePiece> pieces_to_save() override;
  std::vector<StatePiece> pieces_to_load() override;
  void after_load() override;
  void sync_weights() override;
  void tie(std::vector<Param*> params, Communicator& group, bool owner) override;
  StateMemory memory() const override;

  // For tests and tools.
  const ZeroLayout& layout() const { return params_.layout(); }
  Tensor& master_shard() { return master_; }
  Tensor& grad_shard() { return grad_shard_; }
  const ZeroParamGather* gather() const { return gather_.get(); }
  const ZeroGradReducer& reducer() const { return *reducer_; }

 private:
  void update(const ops::AdamWHyper& h, const Tensor* control);
  // Stages 1–2: unit u's updated weight shard into the full working weights on the current
  // stream (a copy at dp 1: nullptr), and the same through the scheduler (no ticket at dp 1).
  std::unique_ptr<Work> gather_weights(int u);
  std::optional<CommScheduler::Ticket> issue_weight_gather(int u);
  void wait_weight_gather(size_t u);  // if this step issued one for u
  bool gathered_with_update(int u) const;  // u belongs to the first layer of the forward
  std::vector<StatePiece> shard_pieces(bool saved_only);

  ParamSet& params_;
  Communicator& dp_;
  CommScheduler& scheduler_;
  TpGradSync tp_;
  DistributedOptimizerOptions options_;
  int stage_;
  int rank_;
  bool separate_master_;  // working weights are not fp32: the weight shard is a separate copy
  Tensor master_, exp_avg_, exp_avg_sq_, weight_shard_, grad_shard_;
  std::vector<std::vector<ShardSegment>> segments_;  // per unit: this rank's parameter pieces
  std::unique_ptr<ZeroGradReducer> reducer_;
  std::unique_ptr<ZeroParamGather> gather_;  // stage 3
  // The experts' amaxes measured by the update where the shard is the working weights themselves.
  Fp8UpdateAmaxes amaxes_;
  // Stages 1–2: per unit, the all-gather this step's forward waits for (issued by begin_step).
  std::vector<std::optional<CommScheduler::Ticket>> weight_gathers_;
  int first_layer_ = 0;  // the smallest layer index of any unit
  int64_t steps_ = 0;
  // Pipeline copies (tie()): their units, the group that sums them, whether this copy counts.
  std::vector<int> tied_units_;
  std::vector<std::string> tied_names_;
  Communicator* tie_group_ = nullptr;
  bool tie_owner_ = true;
};

}  // namespace tetra
