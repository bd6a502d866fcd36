// The FP8 path's weight operand (models/fp8_linear.h): the copy ZeRO-3 gathered in FP8 when there is
// one, else the bf16 (or fp32) value cast per GEMM. The gathered codes and scales are those the
// cast of the whole weight writes (parallel/zero/fp8_gather.h), so both give the same GEMMs.
#include "models/fp8_linear.h"
#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::fp8_linear {

namespace {

// w's gathered copy, checked against the recipe's weight cast.
bool gathered(Fp8Recipe recipe, const Param& w) {
  if (!w.fp8_q.defined()) return false;
  const Fp8Cast cast = fp8_recipe_casts(recipe).weight;
  TETRA_CHECK(w.fp8_scaling == cast.scaling && w.fp8_q.dtype() == cast.format && w.fp8_q.ndim() == 2, w.name,
              ": its FP8 copy ", w.fp8_q.describe(), " is not the recipe ", fp8_recipe_name(recipe), "'s weight cast");
  return true;
}

// An operand of the other side, cast as `cast` says.
void gemm_with(Tensor& y, const Tensor& x, const Fp8Cast& cast, const Tensor& wq, const Tensor& ws,
               ops::Fp8Scaling w_scaling, bool accumulate) {
  Tensor q = Tensor::empty(x.shape(), cast.format, x.device());
  Tensor scale = Tensor::empty(fp8_scale_shape(cast.scaling, x.dim(0), x.dim(1)), DType::F32, x.device());
  ops::fp8_quantize(q, scale, x, cast.scaling);
  ops::fp8_gemm(y, q, scale, cast.scaling, wq, ws, w_scaling, accumulate);
}

}  // namespace

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Param& w, bool accumulate) {
  if (!gathered(recipe, w)) return forward(recipe, y, x, w.value, accumulate);
  gemm_with(y, x, fp8_recipe_casts(recipe).activation, w.fp8_q, w.fp8_scale, w.fp8_scaling, accumulate);
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Param& w, bool accumulate) {
  if (!gathered(recipe, w)) return backward_input(recipe, dx, dy, w.value, accumulate);
  // The input gradient reads wᵀ [I, O]: the gathered codes transposed, as the cast of w writes them.
  const int64_t out = w.fp8_q.dim(0), in = w.fp8_q.dim(1);
  Tensor q_t = Tensor::empty({in, out}, w.fp8_q.dtype(), w.fp8_q.device());
  Tensor scale_t = Tensor::empty(fp8_scale_shape(w.fp8_scaling, in, out), DType::F32, w.fp8_q.device());
  ops::fp8_transpose(q_t, scale_t, w.fp8_q, w.fp8_scale, w.fp8_scaling);
  gemm_with(dx, dy, fp8_recipe_casts(recipe).gradient, q_t, scale_t, w.fp8_scaling, accumulate);
}

}  // namespace tetra::fp8_linear
