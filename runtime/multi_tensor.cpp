// Device dispatch of the multi-tensor ops (runtime/multi_tensor.h).
#include "runtime/multi_tensor.h"

#include "runtime/trace.h"

#ifdef TETRA_WITH_CUDA
#include "runtime/cuda/cuda_ops.h"
#endif

namespace tetra::ops {

void adamw_update_multi(const std::vector<AdamWSegment>& segments, const AdamWHyper& h, const Tensor* control) {
  TraceScope trace("adamw_update_multi", "op");
  if (segments.empty()) return;
  const Device dev = segments.front().master.device();
  for (const AdamWSegment& s : segments)
    check_same_device("adamw_update_multi", {&segments.front().master, &s.master, &s.grad, &s.m, &s.v, &s.working});
  if (control) {
    check_same_device("adamw_update_multi", {&segments.front().master, control});
    check_dtype("adamw_update_multi", "control", *control, DType::F64);
    check_shape("adamw_update_multi", "control", *control, {kStepControlSlots});
  }
  if (dev.is_cpu()) return cpu::adamw_update_multi(segments, h, control);
#ifdef TETRA_WITH_CUDA
  return cuda::adamw_update_multi(segments, h, control);
#else
  TETRA_FAIL(Device, "adamw_update_multi: tensors on ", dev.str(), " but tetra was built without CUDA");
#endif
}

}  // namespace tetra::ops
