// Step control: the decisions at the end of an optimizer step — learning rate, gradient clipping,
// skipping a non-finite step, AdamW's bias corrections — taken on the device, from device values,
// so that a step needs no host synchronisation (the host reads the outcome later, and a whole step
// can be captured as a CUDA graph). The same function runs in the CUDA kernel and on the CPU, so
// both backends decide bit for bit alike.
//
// The control tensor is fp64 [kStepControlSlots] on the run's device; slots below. Slots marked
// "state" persist from step to step (and are set from a checkpoint); the others are outputs of the
// last step_control call.
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/adamw_scalars.h"

namespace tetra {

enum StepControlSlot : int {
  kCtlScheduleStep = 0,  // state: optimizer steps begun (0-based index of the next one's LR)
  kCtlUpdates = 1,       // state: AdamW updates applied (the bias-correction count)
  kCtlHalted = 2,        // state: 1 once a non-finite step was seen under on_nonfinite: stop (sticky)
  kCtlSkipped = 3,       // 1: this step is not applied (non-finite, or halted)
  kCtlNonFinite = 4,     // 1: this step's loss or gradient norm is not finite
  kCtlLoss = 5,          // mean loss over the global batch
  kCtlGradNorm = 6,      // global L2 norm of the gradients (before clipping)
  kCtlLr = 7,            // learning rate of this step (the float AdamW uses)
  kCtlGradScale = 8,     // clipping coefficient min(1, max_norm / (norm + 1e-6))
  kCtlStepSize = 9,      // lr / (1 − β1^t)  (t = updates after this step)
  kCtlInvBc2Sqrt = 10,   // 1 / √(1 − β2^t)
  kStepControlSlots = 11
};

struct StepControlConfig {
  double max_norm = 0;            // ≤ 0: no clipping
  double tokens = 1;              // tokens of the global batch (the loss sum's divisor)
  float beta1 = 0.9f, beta2 = 0.999f;
  bool stop_on_nonfinite = false; // a non-finite step halts every later update (train.on_nonfinite: stop)
};

// One step's decisions. loss_sum: Σ token losses over the global batch; grad_sq: Σ g² over every
// gradient; lr_table[i]: the LR of step i (i < lr_steps; later steps use the last entry).
TETRA_HOST_DEVICE inline void step_control_update(double* c, double loss_sum, double grad_sq, const double* lr_table,
                                                  int64_t lr_steps, const StepControlConfig& cfg) {
  const int64_t step = static_cast<int64_t>(c[kCtlScheduleStep]);
  const int64_t at = step < lr_steps ? step : lr_steps - 1;
  const float lr = static_cast<float>(lr_table[at < 0 ? 0 : at]);
  const double loss = loss_sum / cfg.tokens;
  const double norm = std::sqrt(grad_sq);
  const bool nonfinite = !std::isfinite(loss) || !std::isfinite(norm);
  bool halted = c[kCtlHalted] != 0.0;
  const bool skipped = nonfinite || halted;
  if (nonfinite && cfg.stop_on_nonfinite) halted = true;
  const double updates = c[kCtlUpdates] + (skipped ? 0.0 : 1.0);
  // t ≥ 1 whenever the update is applied; a skipped step's scalars are never used.
  const AdamWScalars s = adamw_scalars(lr, cfg.beta1, cfg.beta2, updates < 1.0 ? 1.0 : updates);
  c[kCtlScheduleStep] = static_cast<double>(step + 1);
  c[kCtlUpdates] = updates;
  c[kCtlHalted] = halted ? 1.0 : 0.0;
  c[kCtlSkipped] = skipped ? 1.0 : 0.0;
  c[kCtlNonFinite] = nonfinite ? 1.0 : 0.0;
  c[kCtlLoss] = loss;
  c[kCtlGradNorm] = norm;
  c[kCtlLr] = static_cast<double>(lr);
  c[kCtlGradScale] = static_cast<double>(clip_coefficient(norm, cfg.max_norm));
  c[kCtlStepSize] = static_cast<double>(s.step_size);
  c[kCtlInvBc2Sqrt] = static_cast<double>(s.inv_bc2_sqrt);
}

}  // namespace tetra
