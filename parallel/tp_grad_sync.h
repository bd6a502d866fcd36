// TpGradSync: the tensor-parallel part of the gradient reduction of one rank's parameters
// (ARCHITECTURE.md §3 "Parameter placement"; docs/tensor_parallel.md).
//   - The gradients of sequence-parallel weights (ParamPlacement::grad_over_tp) cover this rank's
//     tokens only: before a unit's data-parallel reduction they are all-reduced over the tp group,
//     one all-reduce of the unit's tp-reduced range (ZeroLayout puts them last in their unit).
//   - The gradient norm counts every element once: a rank sums the squares of its sharded slices
//     and, on tp rank 0 only, of its replicated parameters (identical on every tp rank once
//     reduced); the sums are then added over dp (when sharded by ZeRO) and over tp.
// Inactive (every call a no-op, the plain single-group norm) without a tp group of 2+ ranks, so a
// run without tensor parallelism does exactly what it did before.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/zero_layout.h"
#include "runtime/communicator.h"

namespace tetra {

class TpGradSync {
 public:
  // `tp` may be null (no tensor parallelism). The layout, communicator and scheduler outlive this.
  TpGradSync(const ZeroLayout& layout, Communicator* tp, CommScheduler& scheduler);

  bool active() const { return tp_ != nullptr && tp_->size() > 1; }
  // Some unit has gradients to all-reduce over tp.
  bool needed() const { return active() && any_reduced_; }
  Communicator* group() const { return active() ? tp_ : nullptr; }

  // unit_grads: unit u's full-size gradients (its padded elements from ZeroUnit::offset). All-reduces
  // the range of its sequence-parallel weights over tp; compute waits for it.
  void sync_unit(int u, Tensor unit_grads);

  // Element ranges [begin, end) of a gradient buffer whose squares this rank adds to the norm:
  // for the flat buffer (shard_rank < 0, offsets as the layout's) or for dp rank shard_rank's shard
  // buffer. Everything on tp rank 0 (or without tp); elsewhere the sharded parameters' elements;
  // never those of `skip` (pipeline copies of a tied weight that another rank counts). Adjacent
  // ranges are merged across padding.
  std::vector<std::pair<int64_t, int64_t>> norm_ranges(int shard_rank = -1, const std::vector<Param*>& skip = {}) const;

  // acc fp64 [1] (+)= Σ g² over norm_ranges of `grads`, summed over `shard_group` (may be null: not
  // sharded) and the tp group. Device-side, no host synchronisation.
  void norm_squared(Tensor& acc, Tensor& grads, Communicator* shard_group, int shard_rank = -1,
                    const std::vector<Param*>& skip = {}) const;

 private:
  const ZeroLayout& layout_;
  Communicator* tp_;
  CommScheduler& scheduler_;
  bool any_reduced_ = false;
};

}  // namespace tetra
