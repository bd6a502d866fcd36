#include "parallel/expert/placement.h"

#include "runtime/error.h"

namespace tetra {

bool expert_owned(const Param& p) { return p.placement.ep.kind == AxisPlacement::Kind::Expert; }

void place_experts(const std::vector<Param*>& params, int ep) {
  for (Param* p : params) {
    if (!expert_owned(*p)) continue;
    const int64_t rows = p->full_shape.at(0);
    TETRA_CHECK(ep >= 1 && rows % ep == 0, p->name, ": ", rows, " rows do not split over ", ep,
                " expert-parallel ranks");
    p->local_shape = p->full_shape;
    p->local_shape[0] = rows / ep;
  }
}

int64_t expert_offset(const Param& p, int rank) { return static_cast<int64_t>(rank) * p.numel(); }

Tensor expert_slice(const Param& p, const Tensor& full, int rank) {
  TETRA_CHECK(full.device().is_cpu() && full.dtype() == DType::F32 && full.shape() == p.full_shape, "expert_slice: ",
              p.name, " needs a host fp32 ", shape_str(p.full_shape), ", got ", full.describe());
  return full.slice_flat(expert_offset(p, rank), p.local_shape);
}

}  // namespace tetra
