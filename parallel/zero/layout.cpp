#include "parallel/zero/layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "runtime/error.h"

namespace tetra {

namespace {
int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
}  // namespace

ZeroLayout::ZeroLayout(const std::vector<Param*>& params, int shards, int64_t align) : shards_(shards), align_(align) {
  TETRA_CHECK(shards >= 1, "ZeroLayout: shards must be ≥ 1, got ", shards);
  TETRA_CHECK(align >= 1, "ZeroLayout: align must be ≥ 1, got ", align);
  // Units ascending by layer (a parameter with own_unit after the rest of its layer, alone);
  // inside a unit the parameters keep the model's order.
  std::map<std::pair<int, int>, std::vector<Param*>> by_layer;
  std::set<Param*> seen;
  for (Param* p : params) {
    TETRA_CHECK(p != nullptr, "ZeroLayout: null parameter");
    TETRA_CHECK(seen.insert(p).second, "ZeroLayout: parameter ", p->name, " listed twice");
    TETRA_CHECK(p->layer_index >= 0, "ZeroLayout: parameter ", p->name, " has layer_index ", p->layer_index);
    by_layer[{p->layer_index, p->own_unit ? static_cast<int>(seen.size()) : 0}].push_back(p);
  }
  int max_layer = 0;
  for (auto& [key, ps] : by_layer) {
    const int layer = key.first;
    ZeroUnit u;
    u.layer = layer;
    std::set<int> users{layer};
    std::stable_partition(ps.begin(), ps.end(), [](const Param* p) { return !p->placement.grad_over_tp; });
    int64_t off = 0;
    u.tp_reduced_begin = -1;
    for (Param* p : ps) {
      for (int t : p->tied_layers) users.insert(t);
      if (p->placement.grad_over_tp && u.tp_reduced_begin < 0) u.tp_reduced_begin = off;
      for (const ReplicaRange& r : replica_ranges(*p)) u.tp_replicated.push_back({off + r.begin, off + r.end, r.replicas});
      u.params.push_back(static_cast<int>(params_.size()));
      params_.push_back(p);
      offsets_.push_back(total_ + off);  // fixed up below once the unit's offset is known
      param_unit_.push_back(static_cast<int>(units_.size()));
      off = round_up(off + p->numel(), align);
    }
    // numel: up to the end of the last parameter; the alignment gaps between parameters are inside.
    Param* last = ps.back();
    u.numel = offsets_.back() - total_ + last->numel();
    if (u.tp_reduced_begin < 0) u.tp_reduced_begin = u.numel;
    u.padded = round_up(std::max<int64_t>(u.numel, 1), static_cast<int64_t>(shards) * align);
    u.shard = u.padded / shards;
    u.offset = total_;
    u.shard_offset = total_ / shards;
    u.users.assign(users.begin(), users.end());
    for (int l : u.users) max_layer = std::max(max_layer, l);
    total_ += u.padded;
    units_.push_back(std::move(u));
  }
  units_of_layer_.assign(static_cast<size_t>(max_layer) + 1, {});
  std::set<int> layers;
  for (size_t ui = 0; ui < units_.size(); ++ui)
    for (int l : units_[ui].users) {
      TETRA_CHECK(l >= 0, "ZeroLayout: unit of layer ", units_[ui].layer, " is tied to layer ", l);
      units_of_layer_[static_cast<size_t>(l)].push_back(static_cast<int>(ui));
      layers.insert(l);
    }
  layers_.assign(layers.begin(), layers.end());
}

bool ZeroLayout::shards_are_units() const {
  if (shards_ != 1) return false;
  for (const ZeroUnit& u : units_)
    if (u.shard_offset != u.offset || u.shard != u.padded) return false;
  return true;
}

int64_t ZeroLayout::param_numel() const {
  int64_t n = 0;
  for (Param* p : params_) n += p->numel();
  return n;
}

const std::vector<int>& ZeroLayout::units_of_layer(int layer) const {
  static const std::vector<int> none;
  if (layer < 0 || static_cast<size_t>(layer) >= units_of_layer_.size()) return none;
  return units_of_layer_[static_cast<size_t>(layer)];
}

std::vector<ShardSegment> ZeroLayout::segments(int rank) const {
  TETRA_CHECK(rank >= 0 && rank < shards_, "ZeroLayout::segments: rank ", rank, " outside [0, ", shards_, ")");
  std::vector<ShardSegment> out;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const ZeroUnit& u = units_[ui];
    const int64_t lo = u.offset + rank * u.shard, hi = lo + u.shard;  // this rank's flat range
    for (int pi : u.params) {
      const int64_t p0 = offsets_[static_cast<size_t>(pi)], p1 = p0 + params_[static_cast<size_t>(pi)]->numel();
      const int64_t a = std::max(lo, p0), b = std::min(hi, p1);
      if (a >= b) continue;
      ShardSegment s;
      s.param = pi;
      s.unit = static_cast<int>(ui);
      s.param_begin = a - p0;
      s.param_end = b - p0;
      s.shard_offset = u.shard_offset + (a - lo);
      out.push_back(s);
    }
  }
  return out;
}

int64_t ZeroLayout::largest_units(int count, bool include_tied) const {
  std::vector<int64_t> sizes;
  for (const ZeroUnit& u : units_)
    if (include_tied || !u.tied()) sizes.push_back(u.padded);
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t n = 0;
  for (size_t i = 0; i < sizes.size() && static_cast<int>(i) < count; ++i) n += sizes[i];
  return n;
}

int64_t ZeroLayout::tied_elements() const {
  int64_t n = 0;
  for (const ZeroUnit& u : units_)
    if (u.tied()) n += u.padded;
  return n;
}

std::string ZeroLayout::describe() const {
  std::ostringstream os;
  for (const ZeroUnit& u : units_) {
    os << "unit layer " << u.layer << ": " << u.params.size() << " params, " << u.numel << " elements, padded "
       << u.padded << " = " << shards_ << " × " << u.shard;
    if (u.tied()) {
      os << ", read by layers";
      for (int l : u.users) os << ' ' << l;
    }
    os << '\n';
  }
  return os.str();
}

}  // namespace tetra
