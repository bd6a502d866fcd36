// The scalars of one AdamW update and of gradient clipping, computed in double as PyTorch computes
// them in Python floats and rounded to the floats the kernels use. One definition serves the CPU
// AdamW, the CUDA AdamW's host set-up and the device step control (runtime/step_control.h), so
// every path takes bit-identical steps.
#pragma once
#include <cmath>

#include "runtime/host_device.h"

namespace tetra {

struct AdamWScalars {
  float step_size;     // lr / (1 − β1^t)
  float inv_bc2_sqrt;  // 1 / √(1 − β2^t)
};

// Update number t ≥ 1 (the bias-correction count) with learning rate lr.
TETRA_HOST_DEVICE inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, double t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  return {static_cast<float>(static_cast<double>(lr) / bc1), static_cast<float>(1.0 / std::sqrt(bc2))};
}

// torch.nn.utils.clip_grad_norm_'s coefficient: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm ≤ 0 (no clipping) or the norm is not finite.
TETRA_HOST_DEVICE inline float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0f;
  const double c = max_norm / (norm + 1e-6);
  return static_cast<float>(c < 1.0 ? c : 1.0);
}

}  // namespace tetra
