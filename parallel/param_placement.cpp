#include "parallel/param_placement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace tetra {

std::string TensorBox::str() const {
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < shape.size(); ++d) os << (d ? ", " : "") << offset[d] << ":" << offset[d] + shape[d];
  os << "]";
  return os.str();
}

TensorBox whole_box(const Shape& full) { return {Shape(full.size(), 0), full}; }

bool is_whole(const TensorBox& box, const Shape& full) { return box == whole_box(full); }

TensorBox intersect(const TensorBox& a, const TensorBox& b) {
  TETRA_CHECK(a.shape.size() == b.shape.size() && a.offset.size() == a.shape.size() &&
                  b.offset.size() == b.shape.size(),
              "intersect: boxes ", a.str(), " and ", b.str(), " of different ranks");
  TensorBox r;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    r.offset.push_back(lo);
    r.shape.push_back(std::max<int64_t>(0, hi - lo));
  }
  return r;
}

int part_replicas_for(int64_t units, int size, bool replicate_parts) {
  if (units <= 0 || size < 1) return 0;
  if (units % size == 0) return 1;
  if (replicate_parts && size % units == 0) return static_cast<int>(size / units);
  return 0;
}

void shard_over_tp(Param& p, int dim, int size, int rank, bool replicate_parts) {
  TETRA_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_over_tp: rank ", rank, " of ", size, " (", p.name, ")");
  TETRA_CHECK(dim >= 0 && dim < static_cast<int>(p.full_shape.size()), "shard_over_tp: ", p.name, " ",
              shape_str(p.full_shape), " has no dimension ", dim);
  Shape local = p.full_shape;
  std::vector<int> replicas;
  if (dim == 0 && !p.parts.empty()) {
    local[0] = 0;
    bool any_replicated = false;
    for (const ParamPart& part : p.parts) {
      const int64_t unit = std::max<int64_t>(1, part.unit_rows);
      const int r = part.rows % unit == 0 ? part_replicas_for(part.rows / unit, size, replicate_parts) : 0;
      if (r == 0)
        TETRA_FAIL(Config, "parallel.tp: ", p.name, ": its part ", part.name.empty() ? "at row " + std::to_string(part.row_begin) : part.name,
                   " has ", part.rows / unit, " units of ", unit, " rows (heads), which do not split over tp = ", size,
                   replicate_parts ? " (nor is tp a multiple of them, which would replicate each over tp / units ranks)"
                                   : "");
      replicas.push_back(r);
      any_replicated |= r > 1;
      local[0] += part.rows / (size / r);
    }
    if (!any_replicated) replicas.clear();
  } else {
    const int64_t n = p.full_shape[static_cast<size_t>(dim)];
    if (n % size != 0)
      TETRA_FAIL(Config, "parallel.tp: ", p.name, ": dimension ", dim, " of ", shape_str(p.full_shape),
                 " does not split over tp = ", size);
    local[static_cast<size_t>(dim)] = n / size;
  }
  p.local_shape = local;
  p.placement.tp = {AxisPlacement::Kind::Sharded, dim, size, rank, std::move(replicas)};
  p.placement.grad_over_tp = false;
}

void replicate_over_tp(Param& p, int size, int rank, bool grad_over_tp) {
  TETRA_CHECK(size >= 1 && rank >= 0 && rank < size, "replicate_over_tp: rank ", rank, " of ", size, " (", p.name,
              ")");
  p.local_shape = p.full_shape;
  p.placement.tp = {AxisPlacement::Kind::Replicated, -1, size, rank, {}};
  p.placement.grad_over_tp = grad_over_tp && size > 1;
}

std::vector<LocalBox> local_boxes(const Param& p) {
  const AxisPlacement& tp = p.placement.tp;
  if (!tp.sharded()) return {{whole_box(p.full_shape), 0}};
  const size_t dim = static_cast<size_t>(tp.dim);
  if (dim == 0 && !p.parts.empty()) {
    std::vector<LocalBox> out;
    int64_t row = 0;
    for (size_t i = 0; i < p.parts.size(); ++i) {
      const ParamPart& part = p.parts[i];
      const int r = tp.replicas_of_part(i);  // block rank / r of size / r
      const int64_t rows = part.rows / (tp.size / r);
      TensorBox b = whole_box(p.full_shape);
      b.offset[0] = part.row_begin + (tp.rank / r) * rows;
      b.shape[0] = rows;
      out.push_back({b, row});
      row += rows;
    }
    return out;
  }
  TensorBox b = whole_box(p.full_shape);
  b.shape[dim] = p.full_shape[dim] / tp.size;
  b.offset[dim] = tp.rank * b.shape[dim];
  return {{b, 0}};
}

std::vector<ElementRun> local_runs(const Param& p) {
  std::vector<ElementRun> out;
  const int64_t row_elems = p.local_shape.empty() || p.local_shape[0] == 0 ? 1 : p.numel() / p.local_shape[0];
  for (const LocalBox& lb : local_boxes(p)) {
    const int64_t base = lb.local_row * row_elems;
    for_each_run(lb.box, p.full_shape, [&](int64_t in_box, int64_t full, int64_t n) {
      out.push_back({base + in_box, full, n});
    });
  }
  return out;
}

Tensor local_piece(const Param& p, const Tensor& full) {
  TETRA_CHECK(full.device().is_cpu() && full.dtype() == DType::F32 && full.shape() == p.full_shape, "local_piece: ",
              p.name, " needs a host fp32 ", shape_str(p.full_shape), ", got ", full.describe());
  if (p.local_shape == p.full_shape) return full;
  Tensor out = Tensor::empty(p.local_shape, DType::F32);
  const float* src = full.data<float>();
  float* dst = out.data<float>();
  for (const ElementRun& r : local_runs(p))
    std::memcpy(dst + r.local, src + r.full, static_cast<size_t>(r.length) * sizeof(float));
  return out;
}

std::vector<BoxRange> box_ranges(const Param& p, int64_t begin, int64_t end) {
  TETRA_CHECK(begin >= 0 && begin <= end && end <= p.numel(), "box_ranges: [", begin, ", ", end, ") of ", p.name,
              " (", p.numel(), " elements)");
  std::vector<BoxRange> out;
  const int64_t row_elems = p.local_shape.empty() || p.local_shape[0] == 0 ? 1 : p.numel() / p.local_shape[0];
  for (const LocalBox& lb : local_boxes(p)) {
    const int64_t lo = lb.local_row * row_elems, hi = lo + lb.box.numel();  // the box's local elements
    const int64_t a = std::max(begin, lo), b = std::min(end, hi);
    if (a >= b) continue;
    out.push_back({lb.box, a - lo, b - lo, a});
  }
  return out;
}

bool counted_here(const Param& p) { return p.placement.tp.sharded() || p.placement.tp.rank == 0; }

std::vector<ReplicaRange> replica_ranges(const Param& p) {
  const AxisPlacement& tp = p.placement.tp;
  std::vector<ReplicaRange> out;
  if (!tp.sharded() || tp.part_replicas.empty()) return out;
  const std::vector<LocalBox> boxes = local_boxes(p);
  const int64_t row_elems = p.local_shape[0] == 0 ? 1 : p.numel() / p.local_shape[0];
  for (size_t i = 0; i < boxes.size(); ++i) {
    const int r = tp.replicas_of_part(i);
    if (r <= 1) continue;
    const int64_t begin = boxes[i].local_row * row_elems, end = begin + boxes[i].box.numel();
    if (!out.empty() && out.back().end == begin && out.back().replicas == r)
      out.back().end = end;
    else
      out.push_back({begin, end, r});
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> counted_ranges(const Param& p) {
  if (!counted_here(p)) return {};
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const ReplicaRange& r : replica_ranges(p)) {
    if (p.placement.tp.rank % r.replicas == 0) continue;  // the first of its replicas counts it
    if (r.begin > at) out.emplace_back(at, r.begin);
    at = r.end;
  }
  if (p.numel() > at) out.emplace_back(at, p.numel());
  return out;
}

std::vector<MeshAxis> grad_reduce_axes(const Param& p) {
  std::vector<MeshAxis> out{p.placement.ep.kind == AxisPlacement::Kind::Expert ? MeshAxis::ExpertDP : MeshAxis::DP};
  if (p.placement.grad_over_tp) out.push_back(MeshAxis::TP);
  return out;
}

}  // namespace tetra
