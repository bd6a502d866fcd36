#include "models/fp8_tensor_parallel.h"

#include "parallel/tensor/tensor_parallel.h"

namespace tetra::fp8_tp {

namespace {

// Tensorwise: the amax bits (u32 [1]) of the whole tensor `t` is a part of, or of t itself when
// whole. Block scaling: undefined (each group takes its own).
Tensor whole_amax(const Fp8Cast& cast, TensorParallel& tp, const Tensor& t, Part part) {
  if (cast.scaling != ops::Fp8Scaling::Tensorwise) return Tensor();
  Tensor amax = Tensor::empty({1}, DType::U32, t.device());
  ops::fp8_amax(amax, t);
  if (part == Part::Split) tp.all_reduce_max(amax, "fp8 amax");
  return amax;
}

const Tensor* given(const Tensor& t) { return t.defined() ? &t : nullptr; }

}  // namespace

tp::LinearGemms forward(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& x, Part x_part) {
  if (recipe == Fp8Recipe::None) return {};
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor w_amax = whole_amax(casts.weight, tp, w, Part::Split);
  const Fp8Operand wq = fp8_linear::cast(w, casts.weight, nullptr, given(w_amax));
  const Tensor x_amax = whole_amax(casts.activation, tp, x, x_part);
  tp::LinearGemms g;
  g.forward = [wq, x_amax, cast = casts.activation, fast = casts.forward_fast_accum](
                  Tensor& y, const Tensor& rows, const Tensor& b, ops::Activation act, Tensor* pre_act) {
    // y = act(rows · wᵀ + b): the GEMM, then the bias and GELU as separate ops (as the plain
    // layer's FP8 path: the FP8 GEMMs have no epilogue).
    const bool gelu = act == ops::Activation::Gelu;
    Tensor out = !gelu ? y : pre_act && pre_act->defined() ? *pre_act : Tensor::empty(y.shape(), y.dtype(), y.device());
    fp8_linear::gemm(out, fp8_linear::cast(rows, cast, nullptr, given(x_amax)), wq, /*accumulate=*/false, fast);
    if (b.defined()) ops::add_bias(out, b);
    if (gelu) ops::gelu_forward(y, out);
  };
  return g;
}

tp::LinearGemms backward_input(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& dy, Part dy_part) {
  if (recipe == Fp8Recipe::None) return {};
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor w_amax = whole_amax(casts.weight, tp, w, Part::Split);
  Fp8Operand w_t;  // wᵀ [I', O']: the input gradient's K-major weight
  fp8_linear::cast(w, casts.weight, &w_t, given(w_amax));
  const Tensor dy_amax = whole_amax(casts.gradient, tp, dy, dy_part);
  tp::LinearGemms g;
  g.backward_input = [w_t, dy_amax, cast = casts.gradient](Tensor& dx, const Tensor& rows, const Tensor* gelu_pre) {
    fp8_linear::gemm(dx, fp8_linear::cast(rows, cast, nullptr, given(dy_amax)), w_t, /*accumulate=*/false);
    if (gelu_pre) ops::gelu_backward(dx, dx, *gelu_pre);
  };
  return g;
}

void backward_weight(Fp8Recipe recipe, TensorParallel& tp, Tensor& dw, const Tensor& dy, Part dy_part, const Tensor& x,
                     Part x_part) {
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor dy_amax = whole_amax(casts.gradient, tp, dy, dy_part);
  const Tensor x_amax = whole_amax(casts.activation, tp, x, x_part);
  Fp8Operand dy_t, x_t;  // dyᵀ [O', N], xᵀ [I', N]: K = N tokens
  fp8_linear::cast(dy, casts.gradient, &dy_t, given(dy_amax));
  fp8_linear::cast(x, casts.activation, &x_t, given(x_amax));
  fp8_linear::gemm(dw, dy_t, x_t, /*accumulate=*/true);
}

}  // namespace tetra::fp8_tp
