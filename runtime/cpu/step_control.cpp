// CPU step control: the same step_control_update as the CUDA kernel (runtime/step_control.h).
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg) {
  // Shapes and dtypes are checked by ops::step_control.
  step_control_update(control.data<double>(), loss_sum.data<double>()[0], grad_sq.data<double>()[0],
                      lr_table.data<double>(), lr_table.numel(), cfg);
}

}  // namespace tetra::cpu
