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

// The forward GEMM of tp::LinearGemms on rows that `operand` makes FP8 (cast them, or take them as
// codes already cast): y = act(rows · wᵀ + b), the bias and GELU in the FP8 GEMM's epilogue as the
// plain layer's FP8 path takes them (ops::Fp8Epilogue).
template <class MakeOperand>
auto forward_gemm(const Fp8Operand& wq, const Fp8RecipeCasts& casts, MakeOperand operand) {
  return [wq, operand, fast = casts.forward_fast_accum](Tensor& y, const Tensor& rows, const Tensor& b,
                                                        ops::Activation act, Tensor* pre_act) {
    Tensor pre;  // GELU's pre-activation where the caller keeps none
    const bool gelu = act == ops::Activation::Gelu;
    if (gelu && !(pre_act && pre_act->defined())) pre = Tensor::empty(y.shape(), y.dtype(), y.device());
    ops::Fp8Epilogue e;
    e.bias = b.defined() ? &b : nullptr;
    e.gelu_pre = !gelu ? nullptr : pre.defined() ? &pre : pre_act;
    fp8_linear::gemm(y, operand(rows), wq, /*accumulate=*/false, fast, e);
  };
}

}  // namespace

tp::LinearGemms forward(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& x, Part x_part) {
  if (recipe == Fp8Recipe::None) return {};
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor w_amax = whole_amax(casts.weight, tp, w, Part::Split);
  const Fp8Operand wq = fp8_linear::cast(w, casts.weight, nullptr, given(w_amax));
  const Tensor x_amax = whole_amax(casts.activation, tp, x, x_part);
  tp::LinearGemms g;
  g.forward = forward_gemm(wq, casts, [x_amax, cast = casts.activation](const Tensor& rows) {
    return fp8_linear::cast(rows, cast, nullptr, given(x_amax));
  });
  return g;
}

bool casts_before_gather(Fp8Recipe recipe, const Fp8Saved* keep) {
  return recipe != Fp8Recipe::None && keep && fp8_recipe_casts(recipe).activation.scaling == ops::Fp8Scaling::Tensorwise;
}

double sp_kept_input(Fp8Recipe recipe, double value_bytes, bool keeps) {
  const Fp8Saved some;
  return casts_before_gather(recipe, keeps ? &some : nullptr) ? fp8_kept_bytes_per_element(recipe) : value_bytes;
}

tp::LinearGemms gathered_forward(Fp8Recipe recipe, TensorParallel& tp, const Tensor& w, const Tensor& x_shard,
                                 Fp8Saved* keep) {
  if (!casts_before_gather(recipe, keep)) return forward(recipe, tp, w, x_shard, Part::Split);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor w_amax = whole_amax(casts.weight, tp, w, Part::Split);
  const Fp8Operand wq = fp8_linear::cast(w, casts.weight, nullptr, given(w_amax));
  // The shard's codes with the whole input's scale: the rows of the gathered tensor's cast.
  const Tensor x_amax = whole_amax(casts.activation, tp, x_shard, Part::Split);
  const Fp8Operand shard = fp8_linear::cast(x_shard, casts.activation, nullptr, given(x_amax));
  tp::LinearGemms g;
  g.gather_shard = shard.q;
  g.forward = forward_gemm(wq, casts, [scale = shard.scale](const Tensor& codes) {
    return Fp8Operand{codes, scale, ops::Fp8Scaling::Tensorwise};
  });
  g.gathered = [keep, scale = shard.scale](const Tensor& codes) {
    // xᵀ [I, N] for the weight gradient: the gathered codes transposed, the scale shared.
    keep->x_t = Fp8Operand{Tensor::empty({codes.dim(1), codes.dim(0)}, codes.dtype(), codes.device()),
                           Tensor::empty({1}, DType::F32, codes.device()), ops::Fp8Scaling::Tensorwise};
    ops::fp8_transpose(keep->x_t.q, keep->x_t.scale, codes, scale, ops::Fp8Scaling::Tensorwise);
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
                     Part x_part, Fp8Saved* kept) {
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Tensor dy_amax = whole_amax(casts.gradient, tp, dy, dy_part);
  Fp8Operand dy_t, x_t;  // dyᵀ [O', N], xᵀ [I', N]: K = N tokens
  fp8_linear::cast(dy, casts.gradient, &dy_t, given(dy_amax));
  if (kept && kept->x_t.defined()) {
    x_t = std::move(kept->x_t);
    kept->x_t = Fp8Operand();
  } else {
    const Tensor x_amax = whole_amax(casts.activation, tp, x, x_part);
    fp8_linear::cast(x, casts.activation, &x_t, given(x_amax));
  }
  fp8_linear::gemm(dw, dy_t, x_t, /*accumulate=*/true);
}

}  // namespace tetra::fp8_tp
