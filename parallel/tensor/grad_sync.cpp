#include "parallel/tensor/grad_sync.h"

#include <algorithm>

#include "parallel/param_placement.h"
#include "runtime/ops.h"

namespace tetra {

TpGradSync::TpGradSync(const ZeroLayout& layout, const TpGradGroups& groups, CommScheduler& scheduler)
    : layout_(layout), tp_(groups.tp), replicas_(groups.replicas), scheduler_(scheduler) {
  for (const ZeroUnit& u : layout.units()) {
    any_reduced_ |= u.has_tp_reduced() || !u.tp_replicated.empty();
    for (const ReplicaRange& r : u.tp_replicated) {
      auto it = replicas_.find(r.replicas);
      TETRA_CHECK(active() && it != replicas_.end() && it->second && it->second->size() == r.replicas,
                  "TpGradSync: the parameters of layer ", u.layer, " hold blocks replicated over ", r.replicas,
                  " tp ranks, but no group of ", r.replicas, " tp ranks was given");
    }
  }
}

void TpGradSync::sync_unit(int u, Tensor unit_grads) {
  if (!active()) return;
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  if (!zu.has_tp_reduced() && zu.tp_replicated.empty()) return;
  TETRA_CHECK(unit_grads.numel() >= zu.numel, "TpGradSync: gradients of unit (layer ", zu.layer, ") hold ",
              unit_grads.numel(), " elements, the unit ", zu.numel);
  // Every rank of a group issues its collectives in the same order: the replicated blocks in layout
  // order, then the sequence-parallel range.
  std::vector<CommScheduler::Ticket> tickets;
  for (const ReplicaRange& r : zu.tp_replicated) {
    Tensor range = unit_grads.slice_flat(r.begin, {r.end - r.begin});
    Communicator* group = replicas_.at(r.replicas);
    tickets.push_back(scheduler_.issue(
        "tp all_reduce replicated grads layer " + std::to_string(zu.layer) + " over " + std::to_string(r.replicas),
        static_cast<int64_t>(range.nbytes()), [&] { return group->all_reduce(range, ReduceOp::Sum); }, MeshAxis::TP));
  }
  if (zu.has_tp_reduced()) {
    Tensor range = unit_grads.slice_flat(zu.tp_reduced_begin, {zu.numel - zu.tp_reduced_begin});
    tickets.push_back(scheduler_.issue("tp all_reduce sequence-parallel grads layer " + std::to_string(zu.layer),
                                       static_cast<int64_t>(range.nbytes()),
                                       [&] { return tp_->all_reduce(range, ReduceOp::Sum); }, MeshAxis::TP));
  }
  for (CommScheduler::Ticket& t : tickets) scheduler_.wait(t);
}

std::vector<std::pair<int64_t, int64_t>> TpGradSync::norm_ranges(int shard_rank, const std::vector<Param*>& skip) const {
  const int64_t total = shard_rank < 0 ? layout_.total() : layout_.shard_total();
  const bool tp_copies = active() && tp_->rank() != 0;
  if (!tp_copies && skip.empty()) return {{0, total}};
  std::vector<std::pair<int64_t, int64_t>> out;
  bool previous_counted = false;
  // Elements [begin, end) of p's local tensor, at `at` in the buffer: those counted here.
  auto add = [&](const Param* p, int64_t begin, int64_t end, int64_t at) {
    const bool skipped = std::find(skip.begin(), skip.end(), p) != skip.end();
    std::vector<std::pair<int64_t, int64_t>> mine;
    if (!skipped) mine = tp_copies ? counted_ranges(*p) : std::vector<std::pair<int64_t, int64_t>>{{0, p->numel()}};
    bool counted_to_end = false;
    for (const auto& [lo, hi] : mine) {
      const int64_t a = std::max(lo, begin), b = std::min(hi, end);
      if (a >= b) continue;
      if (previous_counted && a == begin && !out.empty())
        out.back().second = at + (b - begin);  // only padding lies between
      else
        out.emplace_back(at + (a - begin), at + (b - begin));
      counted_to_end = b == end;
    }
    previous_counted = counted_to_end;
  };
  if (shard_rank < 0) {
    for (size_t i = 0; i < layout_.params().size(); ++i) {
      const Param* p = layout_.params()[i];
      add(p, 0, p->numel(), layout_.offset_of(static_cast<int>(i)));
    }
  } else {
    for (const ShardSegment& s : layout_.segments(shard_rank))
      add(layout_.params()[static_cast<size_t>(s.param)], s.param_begin, s.param_end, s.shard_offset);
  }
  return out;
}

void TpGradSync::norm_squared(Tensor& acc, Tensor& grads, Communicator* shard_group, int shard_rank,
                              const std::vector<Param*>& skip) const {
  const bool sharded = shard_group && shard_group->size() > 1;
  if (!active() && !sharded && skip.empty()) {
    ops::sum_squares(acc, grads);
    return;
  }
  // This rank's share alone, summed over the groups, then added: acc may hold a value already.
  Tensor mine = Tensor::zeros({1}, DType::F64, grads.device());
  for (const auto& [begin, end] : norm_ranges(sharded ? shard_rank : -1, skip))
    if (end > begin) ops::sum_squares(mine, grads.slice_flat(begin, {end - begin}));
  if (sharded) shard_group->all_reduce(mine, ReduceOp::Sum)->wait();
  if (active()) tp_->all_reduce(mine, ReduceOp::Sum)->wait();
  ops::sum_accumulate(acc, mine);
}

}  // namespace tetra
