#include "models/fp8_grouped.h"

namespace tetra::fp8_grouped {

namespace {
// Codes only where they exist (an undefined holder: the op casts that operand itself).
const ops::Fp8GroupedCodes* given(const ops::Fp8GroupedCodes* codes) {
  return codes && codes->defined() ? codes : nullptr;
}
}  // namespace

bool casts_ahead(Fp8Recipe recipe) { return recipe == Fp8Recipe::Tensorwise; }

namespace {
// Tensorwise, or blockwise at a width of whole 128-wide groups (1×128 tiles of a row, or 128-row
// blocks of an expert's weight): where a cast of the whole tensor is each expert's own.
bool whole_groups(Fp8Recipe recipe, int64_t width) {
  return recipe == Fp8Recipe::Tensorwise || (recipe == Fp8Recipe::Blockwise && width % ops::kFp8Block == 0);
}
}  // namespace

bool casts_rows_ahead(Fp8Recipe recipe, int64_t cols) { return whole_groups(recipe, cols); }

ops::Fp8GroupedCodes cast_rows(Fp8Recipe recipe, const Tensor& x, const Tensor& offsets, bool gradient,
                               const Tensor* row_amax) {
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::Fp8GroupedCodes codes;
  ops::moe_grouped_fp8_cast(codes, x, gradient ? casts.gradient : casts.activation, &offsets,
                            row_amax && row_amax->defined() ? row_amax : nullptr);
  return codes;
}

ops::Fp8GroupedCodes permute_rows(Fp8Recipe recipe, const Tensor& x, const Tensor& slot_of, int64_t top_k,
                                  const Tensor& offsets, bool gradient, const Tensor* weights,
                                  const Tensor* token_amax) {
  TETRA_CHECK(casts_ahead(recipe), "fp8_grouped::permute_rows: the recipe casts in each GEMM");
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::Fp8GroupedCodes codes;
  Tensor no_rows;
  ops::moe_permute_fp8_cast(no_rows, codes, x, slot_of, top_k, offsets, gradient ? casts.gradient : casts.activation,
                            weights, token_amax && token_amax->defined() ? token_amax : nullptr);
  return codes;
}

Tensor* row_amax_slot(Fp8Recipe recipe, Tensor& slot, int64_t rows, Device device) {
  if (!casts_ahead(recipe)) return nullptr;
  slot = Tensor::empty({rows}, DType::U32, device);
  return &slot;
}

bool casts_weights_once(Fp8Recipe recipe, int64_t O) { return whole_groups(recipe, O); }

ops::Fp8GroupedCodes step_weight(Fp8Recipe recipe, const Param& w, const Tensor& w_view) {
  Param::Fp8StepCopy& copy = w.fp8_step;
  if (!copy.enabled || !casts_weights_once(recipe, w_view.dim(1))) return {};
  const ops::Fp8Cast cast = fp8_recipe_casts(recipe).weight;
  const bool tensorwise = cast.scaling == ops::Fp8Scaling::Tensorwise;
  if (!copy.q.defined()) {
    // Each expert's amax from the optimizer's update where it is of these weights (tensorwise scales).
    const Param::Fp8UpdateAmax& updated = w.fp8_update_amax;
    const bool given = tensorwise && updated.fresh && updated.bits.defined();
    ops::Fp8GroupedCodes codes;
    ops::moe_grouped_fp8_cast(codes, w_view, cast, nullptr, nullptr, given ? &updated.bits : nullptr);
    copy.q = codes.q, copy.q_t = codes.q_t, copy.scale = codes.scale;
    copy.scale_t = tensorwise ? codes.scale : codes.scale_t;
  }
  TETRA_CHECK(copy.q.shape() == w_view.shape() && copy.q.dtype() == cast.format, w.name, ": its step copy ",
              copy.q.describe(), " is not the grouped cast of ", w_view.describe());
  ops::Fp8GroupedCodes codes{copy.q, copy.q_t, copy.scale, Tensor(), cast.format, Tensor()};
  if (!tensorwise) codes.scale_t = copy.scale_t;
  return codes;
}

void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets,
             const ops::Fp8GroupedCodes* x_codes, const ops::Fp8GroupedCodes* w_codes) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_forward(y, x, w, offsets);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_forward(y, x, casts.activation, w, casts.weight, offsets, given(x_codes), given(w_codes));
}

void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets,
                    const ops::Fp8GroupedCodes* dy_codes, const ops::Fp8GroupedCodes* w_codes) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_backward_input(dx, dy, w, offsets);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_backward_input(dx, dy, casts.gradient, w, casts.weight, offsets, given(dy_codes),
                                      given(w_codes));
}

void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                     bool accumulate, const ops::Fp8GroupedCodes* dy_codes, const ops::Fp8GroupedCodes* x_codes) {
  if (recipe == Fp8Recipe::None) return ops::moe_grouped_linear_backward_weight(dw, dy, x, offsets, accumulate);
  const Fp8RecipeCasts casts = fp8_recipe_casts(recipe);
  ops::moe_grouped_fp8_backward_weight(dw, dy, casts.gradient, x, casts.activation, offsets, accumulate,
                                       given(dy_codes), given(x_codes));
}

}  // namespace tetra::fp8_grouped
