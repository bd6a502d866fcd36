#include "models/fp8_linear.h"

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
      return {{S::Tensorwise, DType::F8E4M3}, {S::Tensorwise, DType::F8E4M3}, {S::Tensorwise, DType::F8E5M2}};
    case Fp8Recipe::Blockwise:
      return {{S::Rows1x128, DType::F8E4M3}, {S::Blocks128, DType::F8E4M3}, {S::Rows1x128, DType::F8E4M3}};
    case Fp8Recipe::None: break;
  }
  TETRA_FAIL(Internal, "fp8_recipe_casts: recipe none has no FP8 casts");
}

namespace {

Fp8Operand empty_operand(const Fp8Cast& cast, int64_t rows, int64_t cols, Device device) {
  return {Tensor::empty({rows, cols}, cast.format, device), Tensor::empty(fp8_scale_shape(cast.scaling, rows, cols), DType::F32, device),
          cast.scaling};
}

void check_matrix(const char* what, const Tensor& t) {
  if (t.ndim() != 2) TETRA_FAIL(Internal, "fp8_linear: ", what, " must be a matrix, got ", t.describe());
}

// x [M, K] cast as `cast` says; with `transposed`, xᵀ [K, M] too (in the same pass over x).
Fp8Operand cast_operand(const Tensor& x, const Fp8Cast& cast, Fp8Operand* transposed = nullptr,
                        const Tensor* amax = nullptr) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Fp8Operand out = empty_operand(cast, rows, cols, x.device());
  if (!transposed) {
    ops::fp8_quantize(out.q, out.scale, x, cast.scaling, nullptr, nullptr, amax);
    return out;
  }
  *transposed = empty_operand(cast, cols, rows, x.device());
  ops::fp8_quantize(out.q, out.scale, x, cast.scaling, &transposed->q, &transposed->scale, amax);
  return out;
}

void gemm(Tensor& y, const Fp8Operand& a, const Fp8Operand& b, bool accumulate) {
  ops::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling, accumulate);
}

}  // namespace

namespace fp8_linear {

Fp8Operand cast(const Tensor& x, const Fp8Cast& c, Fp8Operand* transposed, const Tensor* amax) {
  check_matrix("x", x);
  return cast_operand(x, c, transposed, amax);
}

void gemm(Tensor& y, const Fp8Operand& a, const Fp8Operand& b, bool accumulate) { tetra::gemm(y, a, b, accumulate); }

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, bool accumulate) {
  check_matrix("x", x);
  check_matrix("w", w);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  gemm(y, cast_operand(x, casts.activation), cast_operand(w, casts.weight), accumulate);
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate) {
  check_matrix("dy", dy);
  check_matrix("w", w);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  Fp8Operand w_t;
  cast_operand(w, casts.weight, &w_t);
  gemm(dx, cast_operand(dy, casts.gradient), w_t, accumulate);
}

void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x) {
  check_matrix("dy", dy);
  check_matrix("x", x);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  Fp8Operand dy_t, x_t;
  cast_operand(dy, casts.gradient, &dy_t);
  cast_operand(x, casts.activation, &x_t);
  gemm(dw, dy_t, x_t, /*accumulate=*/true);
}

}  // namespace fp8_linear

}  // namespace tetra
