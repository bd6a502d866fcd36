// ZeroLayout: where every parameter lives in the flat buffers, grouped into FSDP units (one unit
// per model layer, Param::layer_index), and how each unit is cut into equal per-rank shards.
//
//   flat buffer   | unit 0 (layer 0)            | unit 1 (layer 1)      | ...
//   unit u        | p0 ▒ p1 ▒ p2 ▒ ······ pad   |   each param starts on an `align` boundary,
//                 |<- shard r=0 ->|<- r=1 ->|…  |   the unit is padded to a multiple of shards·align
//   shard buffer  | u0 shard of r | u1 shard of r | ...   (every rank: total() / shards elements)
//
// So every collective of a unit (all-gather of its weights, reduce-scatter of its gradients) moves
// one contiguous buffer, every rank's shard has the same size and starts aligned for vector loads,
// and padding is never part of a parameter (it stays zero: gradient norms see nothing of it).
// With shards = 1 this is the stage-0 layout: each parameter aligned, each unit contiguous.
//
// Inside a unit the parameters keep the model's order, except that those whose gradient is also
// summed over the tensor-parallel group (ParamPlacement::grad_over_tp: sequence-parallel norms and
// biases) come last, so each unit's such gradients are one range (ZeroUnit::tp_reduced_begin to
// its numel): one all-reduce over tp per unit. Without tensor parallelism nothing moves. The blocks
// of parameter parts held by several tp ranks (AxisPlacement::part_replicas: grouped-query key/value
// heads when tp > n_kv_heads) are listed per unit (ZeroUnit::tp_replicated), to be summed over the
// ranks that hold them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/param.h"
#include "parallel/param_placement.h"

namespace tetra {

struct ZeroUnit {
  int layer = 0;             // Param::layer_index of its parameters (the owning layer)
  std::vector<int> users;    // layers that read them: the owner and any tied users, ascending
  std::vector<int> params;   // indices into ZeroLayout::params(), in buffer order
  int64_t offset = 0;        // first element in the flat (full) buffer
  int64_t numel = 0;         // elements up to the end of the last parameter (before tail padding)
  int64_t padded = 0;        // numel rounded up to a multiple of shards·align
  int64_t shard = 0;         // padded / shards: this unit's elements on every rank
  int64_t shard_offset = 0;  // offset / shards: first element of this unit in a rank's shard buffer
  // First element (from offset) of the parameters whose gradient is summed over tp; numel if none.
  int64_t tp_reduced_begin = 0;
  // Element ranges (from offset) of the blocks several tp ranks hold (parallel/param_placement.h
  // replica_ranges), ascending: their gradients are summed over the `replicas` ranks holding them.
  std::vector<ReplicaRange> tp_replicated;
  bool tied() const { return users.size() > 1; }
  bool has_tp_reduced() const { return tp_reduced_begin < numel; }
};

// The part of one parameter that lies in one rank's shard.
struct ShardSegment {
  int param = 0;                        // index into ZeroLayout::params()
  int unit = 0;
  int64_t param_begin = 0, param_end = 0;  // element range of the flattened parameter
  int64_t shard_offset = 0;             // first element in the rank's flat shard buffer
  int64_t numel() const { return param_end - param_begin; }
};

class ZeroLayout {
 public:
  static constexpr int64_t kAlignElems = 64;  // 128 B in bf16, 256 B in fp32

  ZeroLayout() = default;
  // Groups `params` by layer_index (units ascending by layer, params in the given order inside a
  // unit, those with placement.grad_over_tp last) and shards every unit over `shards` ranks.
  ZeroLayout(const std::vector<Param*>& params, int shards, int64_t align = kAlignElems);

  int shards() const { return shards_; }
  int64_t align() const { return align_; }
  const std::vector<ZeroUnit>& units() const { return units_; }
  const std::vector<Param*>& params() const { return params_; }  // buffer order
  int64_t offset_of(int param) const { return offsets_[static_cast<size_t>(param)]; }
  int unit_of_param(int param) const { return param_unit_[static_cast<size_t>(param)]; }
  int64_t total() const { return total_; }                     // flat elements, with padding
  int64_t shard_total() const { return total_ / shards_; }     // elements of one rank's shard buffer
  int64_t param_numel() const;                                 // without padding
  // One shard: every unit's shard is the whole unit at the unit's own offset, so that the shard
  // buffers may be the flat buffers themselves.
  bool shards_are_units() const;

  // Units whose parameters layer `layer` reads (its own and tied ones), ascending; empty if none.
  const std::vector<int>& units_of_layer(int layer) const;
  // Layers that read some parameter, ascending (the forward order of the units' users).
  const std::vector<int>& layers() const { return layers_; }

  // The pieces of parameters in rank `rank`'s shard, in shard-buffer order. Over all ranks they
  // cover every element of every parameter exactly once.
  std::vector<ShardSegment> segments(int rank) const;
  // Largest unit sizes (padded elements), for memory bounds.
  int64_t largest_units(int count, bool include_tied) const;
  int64_t tied_elements() const;  // padded elements of the tied units
  std::string describe() const;   // one line per unit

 private:
  int shards_ = 1;
  int64_t align_ = kAlignElems;
  std::vector<Param*> params_;
  std::vector<int64_t> offsets_;
  std::vector<int> param_unit_;
  std::vector<ZeroUnit> units_;
  std::vector<int> layers_;
  std::vector<std::vector<int>> units_of_layer_;  // indexed by layer
  int64_t total_ = 0;
};

}  // namespace tetra
