// ZeroGradReducer: gradient reduction of the sharded stages (1–3), one reduce-scatter per FSDP
// unit (= layer), so each moves one contiguous padded buffer and rank r receives exactly its shard.
//
//   stage 1    gradients accumulate in the ParamSet's full flat buffer; unit u is reduce-scattered
//              from its range of that buffer into the rank's gradient shard.
//   stage 2–3  there is no full flat buffer. Unit u's full-size gradient buffer is allocated
//              (zeroed, but for gradients whose first write stores every element, its Params
//              marked Param::grad_empty) at the first backward that writes it, bound to
//              Param::grad, accumulates over the micro-batches of the step (as
//              FSDP's no_sync: one reduce-scatter per step instead of one per micro-batch), is
//              reduce-scattered once the last micro-batch's backward of every layer reading the
//              unit is done, and freed when that ends.
//
// A reduce-scatter is issued as soon as its unit is complete, so it overlaps the rest of backward;
// at most zero_reduce_scatters_in_flight(fsdp_prefetch) are in flight: issuing one more first
// waits for the oldest (and, in stages 2–3, frees its buffer), which bounds the gradient memory.
// Gradients are sums over ranks (the loss is already scaled by 1 / global tokens); padding is
// zero in every buffer, so it reduces to zero and the norm over shards sees none of it.
// With tensor parallelism (`tp` active) a unit's sequence-parallel gradients are all-reduced over the
// tp group right before its reduce-scatter (parallel/tensor/grad_sync.h).
#pragma once
#include <deque>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/param_set.h"
#include "parallel/tensor/grad_sync.h"
#include "runtime/communicator.h"

namespace tetra {

class ZeroGradReducer {
 public:
  // `grad_shard`: this rank's flat shard of reduced gradients [layout.shard_total()].
  ZeroGradReducer(ParamSet& params, Communicator& dp, CommScheduler& scheduler, int stage, Tensor grad_shard,
                  int max_in_flight, bool overlap, TpGradSync* tp = nullptr);

  void begin_step();
  // Layer `layer` is about to write gradients: stages 2–3 make sure its units' buffers exist.
  void before_backward(int layer);
  // Layer `layer` finished a backward; with `last_micro`, its units may be complete.
  void after_backward(int layer, bool last_micro);
  // Issues the units still pending, waits for every reduce-scatter, frees the unit buffers.
  void finish();

  // Elements of full-size unit gradient buffers alive now / at most since construction (stages 2–3).
  int64_t live_unit_elements() const { return live_elems_; }
  int64_t peak_unit_elements() const { return peak_elems_; }

 private:
  struct Unit {
    Tensor full;        // stages 2–3: the unit's full-size gradient buffer while it exists
    int pending = 0;    // layers reading the unit whose last backward of the step is not done yet
    bool issued = false;
    CommScheduler::Ticket ticket;
  };
  Tensor full_of(int u);
  std::vector<Param*> params_of(int u) const;
  void allocate(int u);
  void free_buffer(int u);
  void issue(int u);
  void wait_oldest();

  ParamSet& params_;
  const ZeroLayout& layout_;
  Communicator& dp_;
  CommScheduler& scheduler_;
  TpGradSync* tp_;
  int stage_;
  Tensor grad_shard_;
  int max_in_flight_;
  bool overlap_;
  std::vector<Unit> units_;
  std::deque<int> in_flight_;  // issued, not yet waited, oldest first
  int64_t live_elems_ = 0, peak_elems_ = 0;
};

}  // namespace tetra
