// CPU multi-tensor AdamW (runtime/multi_tensor.h): adamw_update on each segment in turn, with the
// segment's own weight decay, and a segment's amax from the values it leaves.
#include <algorithm>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_format.h"
#include "runtime/multi_tensor.h"

namespace tetra::cpu {

namespace {
// amax[0] = max(amax[0], the bits of max |values|).
void max_amax_of(const Tensor& amax, const Tensor& values) {
  const FloatReader in(values);
  uint32_t& a = *static_cast<uint32_t*>(amax.data_ptr());
  for (int64_t i = 0; i < values.numel(); ++i) a = std::max(a, fp8_abs_bits(in[i]));
}
}  // namespace

void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const ops::AdamWHyper& h,
                        const Tensor* control) {
  ops::AdamWHyper hc = h;
  bool skipped = false;
  if (control) {
    // The step's values as the CUDA kernel reads them from the control (runtime/step_control.h).
    const double* c = control->data<double>();
    skipped = c[kCtlSkipped] != 0.0;
    hc.lr = static_cast<float>(c[kCtlLr]);
    hc.step = static_cast<int64_t>(c[kCtlUpdates]);
    hc.grad_scale = static_cast<float>(c[kCtlGradScale]);
  }
  for (const ops::AdamWSegment& s : segments) {
    ops::AdamWHyper hs = hc;
    hs.weight_decay = s.weight_decay;
    Tensor master = s.master, m = s.m, v = s.v, working = s.working;
    if (!skipped) cpu::adamw_update(master, s.grad, m, v, hs, working.defined() ? &working : nullptr);
    if (s.amax.defined()) max_amax_of(s.amax, working.defined() ? working : master);
  }
}

}  // namespace tetra::cpu
