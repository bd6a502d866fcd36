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
  const char* op = "step_control";
  check_cuda_tensor(op, "control", control);
  check_dtype(op, "control", control, DType::F64);
  check_shape(op, "control", control, {kStepControlSlots});
  check_cuda_tensor(op, "loss_sum", loss_sum);
  check_dtype(op, "loss_sum", loss_sum, DType::F64);
  check_shape(op, "loss_sum", loss_sum, {1});
  check_cuda_tensor(op, "grad_sq", grad_sq);
  check_dtype(op, "grad_sq", grad_sq, DType::F64);
  check_shape(op, "grad_sq", grad_sq, {1});
  check_cuda_tensor(op, "lr_table", lr_table);
  check_dtype(op, "lr_table", lr_table, DType::F64);
  if (lr_table.ndim() != 1 || lr_table.numel() < 1)
    TETRA_FAIL(Internal, op, ": lr_table must be a non-empty vector, got ", lr_table.describe());
  DeviceScope scope(control.device());
  step_control_kernel<<<1, 32, 0, stream_of(control.device())>>>(control.data<double>(), loss_sum.data<double>(),
                                                                   grad_sq.data<double>(), lr_table.data<double>(),
                                                                   lr_table.numel(), cfg);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
