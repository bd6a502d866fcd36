// CPU multi-tensor AdamW (runtime/multi_tensor.h): adamw_update on each segment in turn, with the
// segment's own weight decay.
#include "runtime/cpu/cpu_ops.h"
#include "runtime/multi_tensor.h"

namespace tetra::cpu {

void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const ops::AdamWHyper& h) {
  for (const ops::AdamWSegment& s : segments) {
    ops::AdamWHyper hs = h;
    hs.weight_decay = s.weight_decay;
    Tensor master = s.master, m = s.m, v = s.v, working = s.working;
    cpu::adamw_update(master, s.grad, m, v, hs, working.defined() ? &working : nullptr);
  }
}

}  // namespace tetra::cpu
