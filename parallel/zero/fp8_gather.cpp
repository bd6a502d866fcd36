#include "parallel/zero/fp8_gather.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/ops.h"

namespace tetra {

ZeroFp8Gather::ZeroFp8Gather(const ZeroLayout& layout, int rank, Tensor weight_shard)
    : layout_(layout), rank_(rank), weight_shard_(std::move(weight_shard)), units_(layout.units().size()) {
  int64_t groups = 0, others = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    plan_unit(static_cast<int>(u));
    Plan& plan = units_[u];
    for (Member& m : plan.members) {
      m.amax_offset = groups;
      groups += m.scale.numel();
    }
    plan.others_offset = others;
    others += plan.others_per_rank;
    any_ = any_ || plan.fp8;
  }
  if (!any_) return;
  const Device dev = weight_shard_.device();
  amax_ = Tensor::empty({groups}, DType::I32, dev);
  codes_shard_ = Tensor::empty({layout_.shard_total()}, format_, dev);
  others_shard_ = Tensor::empty({others}, weight_shard_.dtype(), dev);
}

// Unit u's FP8 weights (their part of this rank's shard) and how the other parameters' elements of
// every rank's shard are packed and unpacked.
void ZeroFp8Gather::plan_unit(int u) {
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  Plan& plan = units_[static_cast<size_t>(u)];
  for (int pi : zu.params) plan.fp8 = plan.fp8 || layout_.params()[static_cast<size_t>(pi)]->fp8_weight;
  if (!plan.fp8) return;
  const Device dev = weight_shard_.device();
  std::vector<int64_t> packed(static_cast<size_t>(layout_.shards()), 0);  // others so far, per rank
  std::vector<std::pair<int64_t, int64_t>> other_ranges;                    // [begin, end) in the unit
  for (int pi : zu.params) {
    const Param& p = *layout_.params()[static_cast<size_t>(pi)];
    const int64_t first = layout_.offset_of(pi) - zu.offset, last = first + p.numel();
    if (!p.fp8_weight) {
      plan.others.push_back({pi, plan.unpacked});
      other_ranges.push_back({first, last});
      plan.unpacked += (p.numel() + layout_.align() - 1) / layout_.align() * layout_.align();
      continue;
    }
    TETRA_CHECK(p.local_shape.size() == 2, p.name, ": an FP8 weight must be a matrix");
    TETRA_CHECK(!format_known_ || format_ == p.fp8_format, p.name,
                ": ZeRO-3's FP8 gather holds every weight in one FP8 format");
    format_ = p.fp8_format;
    format_known_ = true;
    Member m;
    m.param = pi;
    m.rows = p.local_shape[0];
    m.cols = p.local_shape[1];
    m.unit_offset = first;
    m.scale = Tensor::empty(fp8_scale_shape(p.fp8_scaling, m.rows, m.cols), DType::F32, dev);
    const int64_t lo = std::max(first, rank_ * zu.shard), hi = std::min(last, (rank_ + 1) * zu.shard);
    if (lo < hi) {
      m.begin = lo - first;
      m.count = hi - lo;
      m.shard_pos = lo - rank_ * zu.shard;
    }
    plan.members.push_back(std::move(m));
  }
  // The other parameters' pieces in each rank's shard, in order: rank r's packed others are
  // [r · others_per_rank, r · others_per_rank + packed[r]) of the gathered buffer.
  std::vector<Piece> pieces;  // src: position in rank r's packed others (fixed below), dst: unpacked
  std::vector<int> piece_rank;
  for (size_t i = 0; i < other_ranges.size(); ++i) {
    const auto [first, last] = other_ranges[i];
    for (int r = 0; r < layout_.shards(); ++r) {
      const int64_t lo = std::max(first, r * zu.shard), hi = std::min(last, (r + 1) * zu.shard);
      if (lo >= hi) continue;
      int64_t& pos = packed[static_cast<size_t>(r)];
      if (r == rank_) plan.pack.push_back({lo - r * zu.shard, pos, hi - lo});
      pieces.push_back({pos, plan.others[i].second + (lo - first), hi - lo});
      piece_rank.push_back(r);
      pos += hi - lo;
    }
  }
  plan.others_per_rank = *std::max_element(packed.begin(), packed.end());
  for (size_t i = 0; i < pieces.size(); ++i) {
    Piece p = pieces[i];
    p.src += piece_rank[i] * plan.others_per_rank;
    plan.unpack.push_back(p);
  }
}

void ZeroFp8Gather::prepare(Communicator& dp, CommScheduler& scheduler) {
  ops::zero(amax_);
  auto weight = [&](const ZeroUnit& zu, const Member& m) {
    return weight_shard_.slice_flat(zu.shard_offset + m.shard_pos, {m.count});
  };
  auto amax = [&](const Member& m) { return amax_.slice_flat(m.amax_offset, m.scale.shape()); };
  for (size_t u = 0; u < units_.size(); ++u)
    for (const Member& m : units_[u].members) {
      if (m.count == 0) continue;
      Tensor a = amax(m);
      const Param& p = *layout_.params()[static_cast<size_t>(m.param)];
      ops::fp8_slice_amax(a, weight(layout_.units()[u], m), m.begin, m.rows, m.cols, p.fp8_scaling);
    }
  if (dp.size() > 1) {
    CommScheduler::Ticket t = scheduler.issue("all_reduce fp8 weight amax", static_cast<int64_t>(amax_.nbytes()),
                                              [&] { return dp.all_reduce(amax_, ReduceOp::Max); });
    scheduler.wait(t);
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const ZeroUnit& zu = layout_.units()[u];
    const Plan& plan = units_[u];
    for (const Member& m : plan.members) {
      Tensor a = amax(m), scale = m.scale;
      Tensor q = codes_shard_.slice_flat(zu.shard_offset + m.shard_pos, {m.count});
      const Param& p = *layout_.params()[static_cast<size_t>(m.param)];
      ops::fp8_slice_quantize(q, scale, weight(zu, m), a, m.begin, m.rows, m.cols, p.fp8_scaling);
    }
    for (const Piece& piece : plan.pack) {
      Tensor dst = others_shard_.slice_flat(plan.others_offset + piece.dst, {piece.count});
      ops::copy(dst, weight_shard_.slice_flat(zu.shard_offset + piece.src, {piece.count}));
    }
  }
  prepared_ = true;
}

ZeroFp8Gather::Buffers ZeroFp8Gather::allocate(int u) const {
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  const Plan& plan = units_[static_cast<size_t>(u)];
  Buffers b;
  b.codes = Tensor::empty({zu.padded}, format_, weight_shard_.device());
  if (plan.others_per_rank > 0)
    b.others = Tensor::empty({plan.others_per_rank * layout_.shards()}, weight_shard_.dtype(), weight_shard_.device());
  return b;
}

Tensor ZeroFp8Gather::codes_shard(int u) const {
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  return codes_shard_.slice_flat(zu.shard_offset, {zu.shard});
}

Tensor ZeroFp8Gather::others_shard(int u) const {
  const Plan& plan = units_[static_cast<size_t>(u)];
  return others_shard_.slice_flat(plan.others_offset, {plan.others_per_rank});
}

int64_t ZeroFp8Gather::gathered_bytes(int u) const {
  const ZeroUnit& zu = layout_.units()[static_cast<size_t>(u)];
  const Plan& plan = units_[static_cast<size_t>(u)];
  const int64_t elem = static_cast<int64_t>(dtype_size(weight_shard_.dtype()));
  return zu.padded * static_cast<int64_t>(dtype_size(format_)) +
         (plan.others_per_rank * layout_.shards() + plan.unpacked) * elem;
}

Tensor ZeroFp8Gather::bind(int u, const Buffers& b) const {
  const Plan& plan = units_[static_cast<size_t>(u)];
  for (const Member& m : plan.members) {
    Param* p = layout_.params()[static_cast<size_t>(m.param)];
    p->fp8_q = b.codes.slice_flat(m.unit_offset, {m.rows, m.cols});
    p->fp8_scale = m.scale;
  }
  if (plan.others.empty()) return Tensor();
  Tensor unpacked = Tensor::empty({plan.unpacked}, weight_shard_.dtype(), weight_shard_.device());
  for (const Piece& piece : plan.unpack) {
    Tensor dst = unpacked.slice_flat(piece.dst, {piece.count});
    ops::copy(dst, b.others.slice_flat(piece.src, {piece.count}));
  }
  for (const auto& [pi, offset] : plan.others) {
    Param* p = layout_.params()[static_cast<size_t>(pi)];
    p->value = unpacked.slice_flat(offset, p->local_shape);
  }
  return unpacked;
}

void ZeroFp8Gather::unbind(int u) const {
  for (const Member& m : units_[static_cast<size_t>(u)].members) {
    Param* p = layout_.params()[static_cast<size_t>(m.param)];
    p->fp8_q = Tensor();
    p->fp8_scale = Tensor();
  }
}

}  // namespace tetra
