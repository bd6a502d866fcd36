#include "parallel/tp_grad_sync.h"

#include <algorithm>

#include "parallel/param_placement.h"
#include "runtime/ops.h"

namespace tetra {

TpGradSync::TpGradSync(const ZeroLayout& layout, Communicator* tp, CommScheduler& scheduler)
    : layout_(layout), tp_(tp), scheduler_(scheduler) {
  for (const ZeroUnit& u : layout.units()) any_reduced_ |= u.has_tp_reduced();
}

void TpGradSync::sync_unit(int u, Tensor unit_grads) {
  if (!active()) return;
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  if (!zu.has_tp_reduced()) return;
  TETRA_CHECK(unit_grads.numel() >= zu.numel, "TpGradSync: gradients of unit (layer ", zu.layer, ") hold ",
              unit_grads.numel(), " elements, the unit ", zu.numel);
  Tensor range = unit_grads.slice_flat(zu.tp_reduced_begin, {zu.numel - zu.tp_reduced_begin});
  CommScheduler::Ticket t = scheduler_.issue("tp all_reduce sequence-parallel grads layer " + std::to_string(zu.layer),
                                             static_cast<int64_t>(range.nbytes()),
                                             [&] { return tp_->all_reduce(range, ReduceOp::Sum); }, MeshAxis::TP);
  scheduler_.wait(t);
}

std::vector<std::pair<int64_t, int64_t>> TpGradSync::norm_ranges(int shard_rank, const std::vector<Param*>& skip) const {
  const int64_t total = shard_rank < 0 ? layout_.total() : layout_.shard_total();
  const bool tp_copies = active() && tp_->rank() != 0;
  if (!tp_copies && skip.empty()) return {{0, total}};
  std::vector<std::pair<int64_t, int64_t>> out;
  bool previous_counted = false;
  auto add = [&](const Param* p, int64_t begin, int64_t end) {
    const bool counted = (!tp_copies || counted_here(*p)) && std::find(skip.begin(), skip.end(), p) == skip.end();
    if (counted) {
      if (previous_counted && !out.empty())
        out.back().second = end;  // only padding lies between
      else
        out.emplace_back(begin, end);
    }
    previous_counted = counted;
  };
  if (shard_rank < 0) {
    for (size_t i = 0; i < layout_.params().size(); ++i) {
      const int64_t off = layout_.offset_of(static_cast<int>(i));
      add(layout_.params()[i], off, off + layout_.params()[i]->numel());
    }
  } else {
    for (const ShardSegment& s : layout_.segments(shard_rank))
      add(layout_.params()[static_cast<size_t>(s.param)], s.shard_offset, s.shard_offset + s.numel());
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
