// CUDA step control: one thread runs step_control_update (runtime/step_control.h), the same code as
// the CPU twin. control fp64 [kStepControlSlots]; loss_sum, grad_sq fp64 [1]; lr_table fp64 [steps].
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {
__global__ void step_control_kernel(double* control, const double* loss_sum, const double* grad_sq,
                                    const double* lr_table, int64_t lr_steps, StepControlConfig cfg) {
  if (threadIdx.x == 0 && blockIdx.x == 0) step_control_update(control, loss_sum[0], grad_sq[0], lr_table, lr_steps, cfg);
}
}  // namespace

void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg) {
  // Shapes, dtypes and one device are checked by ops::step_control.
  check_cuda_tensor("step_control", "control", control);
  DeviceScope scope(control.device());
  step_control_kernel<<<1, 32, 0, stream_of(control.device())>>>(control.data<double>(), loss_sum.data<double>(),
                                                                   grad_sq.data<double>(), lr_table.data<double>(),
                                                                   lr_table.numel(), cfg);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
