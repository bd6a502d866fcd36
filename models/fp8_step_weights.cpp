#include "models/fp8_step_weights.h"

#include "runtime/fp8_cast_shape.h"

namespace tetra {

Fp8StepWeights::Fp8StepWeights(std::vector<Param*> params, bool zero3) {
  for (Param* p : params)
    if (p->fp8_weight || (p->fp8_grouped && !zero3)) {
      p->fp8_step = Param::Fp8StepCopy{};
      p->fp8_step.enabled = true;
      params_.push_back(p);
    }
}

Fp8StepWeights::~Fp8StepWeights() {
  for (Param* p : params_) {
    p->fp8_step = Param::Fp8StepCopy{};
    p->fp8_update_amax.fresh = false;  // the step's cast took it; the next update measures again
  }
}

double fp8_step_weight_bytes(const std::vector<Param*>& params, bool zero3) {
  if (zero3) return 0.0;
  double bytes = 0.0;
  for (const Param* p : params) {
    if (p->local_shape.size() != 2) continue;
    if (p->fp8_grouped && p->fp8_scaling == ops::Fp8Scaling::Tensorwise) {  // a scale an expert, at most one a row
      bytes += 2.0 * static_cast<double>(p->numel()) + 4.0 * static_cast<double>(p->local_shape[0]);
      continue;
    }
    // A weight's cast, or a blockwise expert stack's (its blocks those of the whole [G·O, I]).
    if (!p->fp8_weight && !p->fp8_grouped) continue;
    const int64_t rows = p->local_shape[0], cols = p->local_shape[1];
    const double scales = static_cast<double>(shape_numel(fp8_scale_shape(p->fp8_scaling, rows, cols)) +
                                              shape_numel(fp8_scale_shape(p->fp8_scaling, cols, rows)));
    bytes += 2.0 * static_cast<double>(rows * cols) + 4.0 * scales;
  }
  return bytes;
}

}  // namespace tetra
