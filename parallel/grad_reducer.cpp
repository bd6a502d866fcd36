#include "parallel/grad_reducer.h"

#include <algorithm>
#include <map>
#include <set>

namespace tetra {

GradReducer::GradReducer(ParamSet& params, Communicator& dp, CommScheduler& scheduler, double bucket_bytes,
                         TpGradSync* tp)
    : params_(params), dp_(dp), scheduler_(scheduler), tp_(tp) {
  // Walk parameters from the last layer to the first; close a bucket once it holds enough bytes,
  // always at a layer boundary so a bucket never waits on half a layer.
  std::map<int, std::pair<int64_t, int64_t>> layer_range;  // layer → [min offset, max end)
  for (Param* p : params.params()) {
    auto [it, fresh] = layer_range.try_emplace(p->layer_index, p->offset, p->offset + p->numel());
    if (!fresh) {
      it->second.first = std::min(it->second.first, p->offset);
      it->second.second = std::max(it->second.second, p->offset + p->numel());
    }
  }
  // Tied parameters (used by several layers) are owned by the layer listed in param.layer_index;
  // that layer is the last to finish them in backward (the embedding).
  const size_t elem = dtype_size(params.flat_grads().dtype());
  const int64_t bucket_elems = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / static_cast<double>(elem)));
  Bucket cur;
  bool open = false;
  int max_layer = layer_range.empty() ? 0 : layer_range.rbegin()->first;
  buckets_of_layer_.assign(static_cast<size_t>(max_layer) + 1, {});
  for (auto it = layer_range.rbegin(); it != layer_range.rend(); ++it) {
    auto [lo, hi] = it->second;
    if (!open) {
      cur = Bucket();
      cur.begin = lo;
      cur.end = hi;
      open = true;
    }
    cur.begin = std::min(cur.begin, lo);
    cur.end = std::max(cur.end, hi);
    cur.layers.push_back(it->first);
    if (cur.end - cur.begin >= bucket_elems) {
      buckets_.push_back(std::move(cur));
      open = false;
    }
  }
  if (open) buckets_.push_back(std::move(cur));
  // Parameters are laid out in forward order, so buckets built backwards are contiguous ranges;
  // check that no two buckets overlap.
  for (size_t i = 0; i < buckets_.size(); ++i) {
    for (int l : buckets_[i].layers) buckets_of_layer_[static_cast<size_t>(l)].push_back(static_cast<int>(i));
    if (i > 0) TETRA_CHECK(buckets_[i].end <= buckets_[i - 1].begin, "gradient buckets overlap");
  }
  // The first bucket of the buffer extends to offset 0 and the last to the end, so padding moves too.
  if (!buckets_.empty()) {
    buckets_.back().begin = 0;
    buckets_.front().end = params.flat_numel();
  }
  for (Param* p : params.params())
    for (Bucket& b : buckets_)
      if (p->offset >= b.begin && p->offset < b.end) b.params.push_back(p);
}

void GradReducer::begin_step() {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.layers.size());
    b.issued = false;
  }
}

void GradReducer::issue(Bucket& b) {
  b.issued = true;
  settle_grads(b.params);  // a gradient no backward reached this step reduces as zeros
  if (tp_ && tp_->needed()) {
    const ZeroLayout& layout = params_.layout();
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const ZeroUnit& zu = layout.units()[u];
      if (zu.offset >= b.begin && zu.offset < b.end)
        tp_->sync_unit(static_cast<int>(u), params_.flat_grads().slice_flat(zu.offset, {zu.padded}));
    }
  }
  if (dp_.size() <= 1) return;
  Tensor slice = params_.flat_grads().slice_flat(b.begin, {b.end - b.begin});
  b.ticket = scheduler_.issue("all_reduce grads[" + std::to_string(b.begin) + ":" + std::to_string(b.end) + "]",
                              static_cast<int64_t>(slice.nbytes()),
                              [&] { return dp_.all_reduce(slice, ReduceOp::Sum); });
}

void GradReducer::layer_done(int layer_index) {
  if (layer_index < 0 || static_cast<size_t>(layer_index) >= buckets_of_layer_.size()) return;
  for (int bi : buckets_of_layer_[static_cast<size_t>(layer_index)]) {
    Bucket& b = buckets_[static_cast<size_t>(bi)];
    if (--b.pending == 0 && reduces()) issue(b);
  }
}

void GradReducer::finish() {
  if (!reduces()) return;
  for (Bucket& b : buckets_) {
    if (!b.issued) issue(b);
    if (dp_.size() > 1) scheduler_.wait(b.ticket);
  }
}

}  // namespace tetra
