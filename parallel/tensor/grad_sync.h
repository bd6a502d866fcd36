// TpGradSync: the tensor-parallel part of the gradient reduction of one rank's parameters
// (ARCHITECTURE.md §3 "Parameter placement"; docs/tensor_parallel.md).
//   - The gradients of sequence-parallel weights (ParamPlacement::grad_over_tp) cover this rank's
//     tokens only: before a unit's data-parallel reduction they are all-reduced over the tp group,
//     one all-reduce of the unit's tp-reduced range (ZeroLayout puts them last in their unit).
//   - The blocks of parameter parts held by r < tp consecutive tp ranks (grouped-query key/value
//     heads when tp > n_kv_heads; ZeroUnit::tp_replicated) have on each rank the gradient of that
//     rank's query heads only: they are all-reduced over the sub-group of those r ranks
//     (TpGradGroups::replicas), in the same place.
//   - The gradient norm counts every element once: a rank sums the squares of its sharded slices
//     and, on tp rank 0 only, of its replicated parameters (identical on every tp rank once
//     reduced), and of a replicated block on the first of its r ranks only (counted_ranges); the
//     sums are then added over dp (when sharded by ZeRO) and over tp.
// Inactive (every call a no-op, the plain single-group norm) without a tp group of 2+ ranks, so a
// run without tensor parallelism does exactly what it did before.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/zero/layout.h"
#include "runtime/communicator.h"

namespace tetra {

// The tensor-parallel groups a rank's gradients are summed over (parallel/mesh_groups.h
// makes the sub-groups): the tp group (null: no tensor parallelism), and per replica count r of a
// replicated part, the r consecutive tp ranks that hold this rank's block.
struct TpGradGroups {
  TpGradGroups(Communicator* group = nullptr) : tp(group) {}  // NOLINT: a plain tp group converts
  Communicator* tp = nullptr;
  std::map<int, Communicator*> replicas;
};

class TpGradSync {
 public:
  // `groups.tp` may be null (no tensor parallelism). The layout, communicators and scheduler outlive
  // this. Fails unless every replica count of the layout's units has its group of that size.
  TpGradSync(const ZeroLayout& layout, const TpGradGroups& groups, CommScheduler& scheduler);

  bool active() const { return tp_ != nullptr && tp_->size() > 1; }
  // Some unit has gradients to all-reduce over tp.
  bool needed() const { return active() && any_reduced_; }
  Communicator* group() const { return active() ? tp_ : nullptr; }

  // unit_grads: unit u's full-size gradients (its padded elements from ZeroUnit::offset). All-reduces
  // the range of its sequence-parallel weights over tp and its replicated blocks over their
  // sub-groups; compute waits for them.
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
  std::map<int, Communicator*> replicas_;
  CommScheduler& scheduler_;
  bool any_reduced_ = false;
};

}  // namespace tetra
