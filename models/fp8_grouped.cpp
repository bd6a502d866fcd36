#include "models/fp8_grouped.h"

namespace tetra::fp8_grouped {

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_forward(y, x, w, offsets);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_forward(y, x, casts.activation, w, casts.weight, offsets);
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_backward_input(dx, dy, w, offsets);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_backward_input(dx, dy, casts.gradient, w, casts.weight, offsets);
}

void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                     bool accumulate) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_backward_weight(dw, dy, x, offsets, accumulate);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_backward_weight(dw, dy, casts.gradient, x, casts.activation, offsets, accumulate);
}

}  // namespace tetra::fp8_grouped
