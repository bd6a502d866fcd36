// CUDA grouped FP8 expert GEMMs (runtime/ops.h moe_grouped_fp8_*): not implemented yet. The experts'
// token offsets live on the device, so neither cuBLASLt (one call per expert, host shapes) nor the
// FP8 casts of fp8_quantize (one tensor per call) serve without a host synchronisation; they need
// their own wgmma kernels. Until those exist a GPU run refuses train.fp8 with routed experts
// (launch/config/validate.cpp), and a call that gets here anyway is an Internal error.
#include "runtime/cuda/cuda_ops.h"
#include "runtime/error.h"

namespace tetra::cuda {

namespace {

[[noreturn]] void not_yet(const char* op) {
  TETRA_FAIL(Internal, op, ": the grouped FP8 expert GEMMs have no CUDA kernels yet (they run on CPU ranks; "
             "a GPU run of train.fp8 with routed experts is refused by the config)");
}

}  // namespace

void moe_grouped_fp8_forward(Tensor&, const Tensor&, ops::Fp8Cast, const Tensor&, ops::Fp8Cast, const Tensor&) {
  not_yet("moe_grouped_fp8_forward");
}

void moe_grouped_fp8_backward_input(Tensor&, const Tensor&, ops::Fp8Cast, const Tensor&, ops::Fp8Cast,
                                    const Tensor&) {
  not_yet("moe_grouped_fp8_backward_input");
}

void moe_grouped_fp8_backward_weight(Tensor&, const Tensor&, ops::Fp8Cast, const Tensor&, ops::Fp8Cast, const Tensor&,
                                     bool) {
  not_yet("moe_grouped_fp8_backward_weight");
}

}  // namespace tetra::cuda
