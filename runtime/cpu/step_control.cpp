// CPU step control: the same step_control_update as the CUDA kernel (runtime/step_control.h).
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg) {
  const char* op = "step_control";
  check_dtype(op, "control", control, DType::F64);
  check_shape(op, "control", control, {kStepControlSlots});
  check_dtype(op, "loss_sum", loss_sum, DType::F64);
  check_shape(op, "loss_sum", loss_sum, {1});
  check_dtype(op, "grad_sq", grad_sq, DType::F64);
  check_shape(op, "grad_sq", grad_sq, {1});
  check_dtype(op, "lr_table", lr_table, DType::F64);
  if (lr_table.ndim() != 1 || lr_table.numel() < 1)
    TETRA_FAIL(Internal, op, ": lr_table must be a non-empty vector, got ", lr_table.describe());
  step_control_update(control.data<double>(), loss_sum.data<double>()[0], grad_sq.data<double>()[0],
                      lr_table.data<double>(), lr_table.numel(), cfg);
}

}  // namespace tetra::cpu
