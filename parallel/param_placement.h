// Where a Param's local piece lies in its full tensor (ARCHITECTURE.md §3 "Parameter placement"):
// placing a Param on the tensor-parallel axis, the boxes of the full tensor its local tensor holds,
// and the element runs that map one onto the other. Used to initialise (every rank draws its slice of
// the same full tensor), to load full weights, to describe checkpoint pieces as boxes of the full
// tensor (a row- or column-split shard, or a per-head part of a fused QKV, is not a flat range of the
// flattened tensor), and to count every element once in the gradient norm.
//
// The local tensor of a Param is its boxes stacked along dim 0, in order: one box, except for a
// Param with parts (Param::parts) sharded along dim 0, which holds one block of rows of each part.
// All indices are row-major over the full (tetra-layout) shape.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/param.h"

namespace tetra {

// A box of a tensor: its first index and extent in every dimension.
struct TensorBox {
  Shape offset, shape;
  int64_t numel() const { return shape_numel(shape); }
  bool operator==(const TensorBox&) const = default;
  std::string str() const;  // "[0:64, 32:64]"
};
TensorBox whole_box(const Shape& full);
bool is_whole(const TensorBox& box, const Shape& full);
// The intersection of two boxes of one tensor (an empty shape entry, 0, where they do not meet).
TensorBox intersect(const TensorBox& a, const TensorBox& b);

// Calls f(box_flat, tensor_flat, length) for every run of `box` that is contiguous in both the box's
// own row-major order and the tensor's (`full` shape): one run when the box spans whole trailing
// dimensions, else one per line. Runs come in box order.
template <class F>
void for_each_run(const TensorBox& box, const Shape& full, F&& f);

// Shards `p` along `dim` over `size` tp ranks (this one: `rank`): sets placement.tp and local_shape.
// dim 0 of a Param with parts splits every part into size blocks of whole units (a head's rows).
// replicate_parts: a part whose units are fewer than `size` and divide it is split into one block a
// unit instead, each held by size/units consecutive ranks (AxisPlacement::part_replicas; grouped-
// query attention's key/value heads when tp > n_kv_heads).
// Throws a Config error naming the parameter when the dimension (or a part's units) does not divide.
void shard_over_tp(Param& p, int dim, int size, int rank, bool replicate_parts = false);
// How many consecutive tp ranks hold each block of a part of `units` whole units split over `size`
// ranks: 1 where size divides the units; size/units where replicate_parts and units divide size;
// 0 where it does not split.
int part_replicas_for(int64_t units, int size, bool replicate_parts);
// A full copy on each of `size` tp ranks; grad_over_tp as ParamPlacement says.
void replicate_over_tp(Param& p, int size, int rank, bool grad_over_tp);

// The boxes of the full tensor the local tensor holds, with the local row (dim 0) each starts at.
struct LocalBox {
  TensorBox box;
  int64_t local_row = 0;
};
std::vector<LocalBox> local_boxes(const Param& p);

// Runs (local offset, full offset, length) contiguous in both tensors, covering the local tensor in
// order.
struct ElementRun {
  int64_t local = 0, full = 0, length = 0;
};
std::vector<ElementRun> local_runs(const Param& p);

// The local piece (host fp32, local_shape) of `full` (host fp32, full_shape).
Tensor local_piece(const Param& p, const Tensor& full);

// Elements [begin, end) of the flattened local tensor as flat ranges of the boxes that hold them:
// [begin, end) of box `box` (its row-major order) sits at local elements [local_begin, ...).
struct BoxRange {
  TensorBox box;
  int64_t begin = 0, end = 0;
  int64_t local_begin = 0;
};
std::vector<BoxRange> box_ranges(const Param& p, int64_t begin, int64_t end);

// Whether this rank's copy of `p` is the one that counts where every element must count once
// (gradient norm, checkpoint pieces): a sharded slice always, a tp-replicated copy on tp rank 0 only
// (its copies are identical). A slice with replicated parts counts here in part: counted_ranges.
bool counted_here(const Param& p);

// Element ranges [begin, end) of p's local tensor (flattened) held by several tp ranks at once: the
// blocks of its replicated parts (AxisPlacement::part_replicas), with the number of consecutive tp
// ranks holding each. Their gradients are summed over those ranks. Ascending, adjacent ranges of one
// replica count merged. Empty for a parameter without replicated parts (a wholly tp-replicated
// one included: its gradient is complete on every rank, or summed over all of tp by grad_over_tp).
struct ReplicaRange {
  int64_t begin = 0, end = 0;
  int replicas = 1;
};
std::vector<ReplicaRange> replica_ranges(const Param& p);

// The local element ranges [begin, end) whose copy on this rank counts (see counted_here): all of a
// sharded slice but its replicated parts' blocks on every tp rank except the first of their
// replicas; all of a replicated parameter on tp rank 0, none elsewhere. Ascending, disjoint.
std::vector<std::pair<int64_t, int64_t>> counted_ranges(const Param& p);

// The mesh axes `p`'s gradient is summed over: dp (expert-dp for an expert's weights), and tp for a
// sequence-parallel weight (ParamPlacement::grad_over_tp).
std::vector<MeshAxis> grad_reduce_axes(const Param& p);

// ---- implementation of for_each_run -----------------------------------------------------------

template <class F>
void for_each_run(const TensorBox& box, const Shape& full, F&& f) {
  const size_t nd = full.size();
  if (box.numel() == 0) return;
  if (nd == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  // The run: the trailing dimensions the box spans whole, plus the last one it does not.
  size_t d = nd - 1;
  while (d > 0 && box.shape[d] == full[d] && box.offset[d] == 0) --d;
  int64_t run = 1;
  for (size_t k = d; k < nd; ++k) run *= box.shape[k];
  std::vector<int64_t> stride(nd, 1);
  for (size_t k = nd - 1; k > 0; --k) stride[k - 1] = stride[k] * full[k];
  std::vector<int64_t> idx(d, 0);  // position over the dimensions before d
  const int64_t lines = box.numel() / run;
  for (int64_t line = 0; line < lines; ++line) {
    int64_t off = box.offset[d] * stride[d];
    for (size_t k = 0; k < d; ++k) off += (box.offset[k] + idx[k]) * stride[k];
    f(line * run, off, run);
    for (size_t k = d; k-- > 0;) {
      if (++idx[k] < box.shape[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace tetra
