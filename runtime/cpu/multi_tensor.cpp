// CPU multi-tensor AdamW (runtime/multi_tensor.h): adamw_update on each segment in turn, with the
// segment's own weight decay.
#include "runtime/cpu/cpu_ops.h"
#include "runtime/multi_tensor.h"

namespace tetra::cpu {

void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const ops::AdamWHyper& h,
                        const Tensor* control) {
  ops::AdamWHyper hc = h;
  if (control) {
    // The step's values as the CUDA kernel reads them from the control (runtime/step_control.h).
    const double* c = control->data<double>();
    if (c[kCtlSkipped] != 0.0) return;
    hc.lr = static_cast<float>(c[kCtlLr]);
    hc.step = static_cast<int64_t>(c[kCtlUpdates]);
    hc.grad_scale = static_cast<float>(c[kCtlGradScale]);
  }
  for (const ops::AdamWSegment& s : segments) {
    ops::AdamWHyper hs = hc;
    hs.weight_decay = s.weight_decay;
    Tensor master = s.master, m = s.m, v = s.v, working = s.working;
    cpu::adamw_update(master, s.grad, m, v, hs, working.defined() ? &working : nullptr);
  }
}

}  // namespace tetra::cpu
