// Device dispatch of the multi-tensor ops (runtime/multi_tensor.h).
#include "runtime/multi_tensor.h"

#include "runtime/fp8_cast_shape.h"
#include "runtime/op_table.h"
#include "runtime/trace.h"

namespace tetra::ops {

void adamw_update_multi(const std::vector<AdamWSegment>& segments, const AdamWHyper& h, const Tensor* control) {
  TraceScope trace("adamw_update_multi", "op");
  if (segments.empty()) return;
  const Device dev = segments.front().master.device();
  for (const AdamWSegment& s : segments) {
    check_same_device("adamw_update_multi",
                      {&segments.front().master, &s.master, &s.grad, &s.m, &s.v, &s.working, &s.amax});
    if (s.amax.defined()) fp8_check_amax_out("adamw_update_multi", s.amax);
  }
  if (control) {
    check_same_device("adamw_update_multi", {&segments.front().master, control});
    check_dtype("adamw_update_multi", "control", *control, DType::F64);
    check_shape("adamw_update_multi", "control", *control, {kStepControlSlots});
  }
  op_table_for("adamw_update_multi", dev).adamw_update_multi(segments, h, control);
}

}  // namespace tetra::ops
