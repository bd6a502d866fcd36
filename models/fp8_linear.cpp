#include "models/fp8_linear.h"

#include <utility>

#include "runtime/error.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra {

const char* fp8_recipe_name(Fp8Recipe recipe) {
  const auto i = static_cast<size_t>(recipe);
  return i < kFp8RecipeNames.size() ? kFp8RecipeNames[i] : "?";
}

Fp8RecipeCasts fp8_recipe_casts(Fp8Recipe recipe) {
  using S = ops::Fp8Scaling;
  switch (recipe) {
    case Fp8Recipe::Tensorwise:
      return {{S::Tensorwise, DType::F8E4M3}, {S::Tensorwise, DType::F8E4M3}, {S::Tensorwise, DType::F8E5M2},
              /*forward_fast_accum=*/true};
    case Fp8Recipe::Blockwise:
      return {{S::Rows1x128, DType::F8E4M3}, {S::Blocks128, DType::F8E4M3}, {S::Rows1x128, DType::F8E4M3},
              /*forward_fast_accum=*/false};
    case Fp8Recipe::None: break;
  }
  TETRA_FAIL(Internal, "fp8_recipe_casts: recipe none has no FP8 casts");
}

double fp8_kept_bytes_per_element(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::None: return 0.0;
    case Fp8Recipe::Tensorwise: return 1.0;
    case Fp8Recipe::Blockwise: return 1.0 + 4.0 / static_cast<double>(ops::kFp8Block);
  }
  return 0.0;
}

bool fp8_takes_measured_amax(Fp8Recipe recipe, bool gradient) {
  if (recipe == Fp8Recipe::None) return false;
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  return (gradient ? casts.gradient : casts.activation).scaling == ops::Fp8Scaling::Tensorwise;
}

Tensor* fp8_amax_slot(Fp8Recipe recipe, Fp8Saved* fp8, bool gradient, Device device) {
  if (!fp8 || !fp8_takes_measured_amax(recipe, gradient)) return nullptr;
  Tensor& slot = gradient ? fp8->dy_amax : fp8->x_amax;
  slot = Tensor::empty({1}, DType::U32, device);
  return &slot;
}

namespace {

Fp8Operand empty_operand(const Fp8Cast& cast, int64_t rows, int64_t cols, Device device) {
  return {Tensor::empty({rows, cols}, cast.format, device), Tensor::empty(fp8_scale_shape(cast.scaling, rows, cols), DType::F32, device),
          cast.scaling};
}

void check_matrix(const char* what, const Tensor& t) {
  if (t.ndim() != 2) TETRA_FAIL(Internal, "fp8_linear: ", what, " must be a matrix, got ", t.describe());
}

// x [M, K] cast as `cast` says; with `transposed`, xᵀ [K, M] too (in the same pass over x). measured
// (may be null): the amax to scale by (fp8_linear::cast); a tensorwise cast without one measures x
// with ops::fp8_amax first — the same pass fp8_quantize would make itself, visible in the op profile.
Fp8Operand cast_operand(const Tensor& x, const Fp8Cast& cast, Fp8Operand* transposed = nullptr,
                        const Tensor* measured = nullptr) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Tensor own;
  if (!measured && cast.scaling == ops::Fp8Scaling::Tensorwise) {
    own = Tensor::empty({1}, DType::U32, x.device());
    ops::fp8_amax(own, x);
    measured = &own;
  }
  Fp8Operand out = empty_operand(cast, rows, cols, x.device());
  if (!transposed) {
    ops::fp8_quantize(out.q, out.scale, x, cast.scaling, nullptr, nullptr, measured);
    return out;
  }
  *transposed = empty_operand(cast, cols, rows, x.device());
  ops::fp8_quantize(out.q, out.scale, x, cast.scaling, &transposed->q, &transposed->scale, measured);
  return out;
}

// What the producer of x (or dy) left in `slot` for this cast, taken out (the slot is left empty).
Tensor take_amax(Tensor* slot) { return slot ? std::exchange(*slot, Tensor()) : Tensor(); }

// xᵀ for a weight gradient: the kept one (moved out of *kept), else cast from x now.
Fp8Operand transposed_operand(const Tensor& x, const Fp8Cast& cast, Fp8Operand* kept) {
  if (kept && kept->defined()) {
    if (kept->q.dim(0) != x.dim(1) || kept->q.dim(1) != x.dim(0))
      TETRA_FAIL(Internal, "fp8_linear: a kept transposed operand is [", kept->q.dim(0), ", ", kept->q.dim(1),
                 "], not the transpose of ", x.describe());
    return std::exchange(*kept, Fp8Operand{});
  }
  Fp8Operand t;
  cast_operand(x, cast, &t);
  return t;
}

void gemm(Tensor& y, const Fp8Operand& a, const Fp8Operand& b, bool accumulate, bool fast_accum = false,
          const ops::Fp8Epilogue& epilogue = {}) {
  ops::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling, accumulate, fast_accum, epilogue);
}

}  // namespace

namespace fp8_linear {

Fp8Operand cast(const Tensor& x, const Fp8Cast& c, Fp8Operand* transposed, const Tensor* amax) {
  check_matrix("x", x);
  return cast_operand(x, c, transposed, amax);
}

void gemm(Tensor& y, const Fp8Operand& a, const Fp8Operand& b, bool accumulate, bool fast_accum,
          const ops::Fp8Epilogue& epilogue) {
  tetra::gemm(y, a, b, accumulate, fast_accum, epilogue);
}

namespace {

// y (+)= x · wᵀ with w already in FP8 (wq [O, I]): x cast with its kept transpose and amax.
void forward_with(const Fp8RecipeCasts& casts, Tensor& y, const Tensor& x, const Fp8Operand& wq, bool accumulate,
                  Fp8Saved* keep, const ops::Fp8Epilogue& epilogue) {
  check_matrix("x", x);
  const Tensor x_amax = take_amax(keep ? &keep->x_amax : nullptr);
  const Fp8Operand xq = cast_operand(x, casts.activation, keep ? &keep->x_t : nullptr, x_amax.defined() ? &x_amax : nullptr);
  gemm(y, xq, wq, accumulate, casts.forward_fast_accum, epilogue);
}

// dx (+)= dy · w with wᵀ already in FP8 (w_t [I, O]).
void backward_input_with(const Fp8RecipeCasts& casts, Tensor& dx, const Tensor& dy, const Fp8Operand& w_t,
                         bool accumulate, Fp8Saved* keep, const ops::Fp8Epilogue& epilogue) {
  check_matrix("dy", dy);
  const Tensor dy_amax = take_amax(keep ? &keep->dy_amax : nullptr);
  gemm(dx, cast_operand(dy, casts.gradient, keep ? &keep->dy_t : nullptr, dy_amax.defined() ? &dy_amax : nullptr), w_t,
       accumulate, /*fast_accum=*/false, epilogue);
}

// w's copy that ZeRO-3 gathered in FP8 (Param::fp8_q), checked against the recipe's weight cast; an
// undefined operand where there is none.
Fp8Operand gathered_weight(Fp8Recipe recipe, const Param& w) {
  if (!w.fp8_q.defined()) return {};
  const Fp8Cast cast = fp8_recipe_casts(recipe).weight;
  TETRA_CHECK(w.fp8_scaling == cast.scaling && w.fp8_q.dtype() == cast.format && w.fp8_q.ndim() == 2, w.name,
              ": its FP8 copy ", w.fp8_q.describe(), " is not the recipe ", fp8_recipe_name(recipe), "'s weight cast");
  return {w.fp8_q, w.fp8_scale, w.fp8_scaling};
}

// w's FP8 copy of this step (Param::fp8_step), cast with its transpose at the step's first use;
// null outside a step.
const Param::Fp8StepCopy* step_weight(Fp8Recipe recipe, const Param& w) {
  Param::Fp8StepCopy& copy = w.fp8_step;
  if (!copy.enabled) return nullptr;
  if (!copy.q.defined()) {
    check_matrix("w", w.value);
    Fp8Operand t;
    const Fp8Operand q = cast_operand(w.value, fp8_recipe_casts(recipe).weight, &t);
    copy.q = q.q;
    copy.scale = q.scale;
    copy.q_t = t.q;
    copy.scale_t = t.scale;
  }
  return &copy;
}

}  // namespace

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, bool accumulate, Fp8Saved* keep,
             const ops::Fp8Epilogue& epilogue) {
  check_matrix("w", w);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  forward_with(casts, y, x, cast_operand(w, casts.weight), accumulate, keep, epilogue);
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate, Fp8Saved* keep,
                    const ops::Fp8Epilogue& epilogue) {
  check_matrix("w", w);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  Fp8Operand w_t;
  cast_operand(w, casts.weight, &w_t);
  backward_input_with(casts, dx, dy, w_t, accumulate, keep, epilogue);
}

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Param& w, bool accumulate, Fp8Saved* keep,
             const ops::Fp8Epilogue& epilogue) {
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  if (const Fp8Operand wq = gathered_weight(recipe, w); wq.defined())
    return forward_with(casts, y, x, wq, accumulate, keep, epilogue);
  if (const Param::Fp8StepCopy* c = step_weight(recipe, w))
    return forward_with(casts, y, x, {c->q, c->scale, casts.weight.scaling}, accumulate, keep, epilogue);
  forward(recipe, y, x, w.value, accumulate, keep, epilogue);
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Param& w, bool accumulate, Fp8Saved* keep,
                    const ops::Fp8Epilogue& epilogue) {
  const Fp8Operand wq = gathered_weight(recipe, w);
  if (!wq.defined()) {
    const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
    if (const Param::Fp8StepCopy* c = step_weight(recipe, w))
      return backward_input_with(casts, dx, dy, {c->q_t, c->scale_t, casts.weight.scaling}, accumulate, keep, epilogue);
    return backward_input(recipe, dx, dy, w.value, accumulate, keep, epilogue);
  }
  // The input gradient reads wᵀ [I, O]: the gathered codes transposed, as the cast of w writes them.
  const int64_t out = wq.q.dim(0), in = wq.q.dim(1);
  Fp8Operand w_t{Tensor::empty({in, out}, wq.q.dtype(), wq.q.device()),
                 Tensor::empty(fp8_scale_shape(wq.scaling, in, out), DType::F32, wq.q.device()), wq.scaling};
  ops::fp8_transpose(w_t.q, w_t.scale, wq.q, wq.scale, wq.scaling);
  backward_input_with(fp8_recipe_casts(recipe), dx, dy, w_t, accumulate, keep, epilogue);
}

void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x, Fp8Saved* kept) {
  check_matrix("dy", dy);
  check_matrix("x", x);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  const Fp8Operand dy_t = transposed_operand(dy, casts.gradient, kept ? &kept->dy_t : nullptr);
  const Fp8Operand x_t = transposed_operand(x, casts.activation, kept ? &kept->x_t : nullptr);
  gemm(dw, dy_t, x_t, /*accumulate=*/true);
}

}  // namespace fp8_linear

}  // namespace tetra
