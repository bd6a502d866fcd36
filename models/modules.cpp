#include "models/modules.h"

#include "models/tensor_parallel_plan.h"
#include "runtime/error.h"

namespace tetra {

namespace {
Param make_param(const std::string& name, const Shape& shape, int layer) {
  Param p;
  p.name = name;
  p.full_shape = shape;
  p.local_shape = shape;
  p.layer_index = layer;
  p.weight_decay = shape.size() >= 2;
  return p;
}
}  // namespace

void Linear::init(const std::string& name, int64_t out, int64_t in, bool bias_on, float init_std, bool conv1d_layout,
                  int layer) {
  weight = make_param(name + ".weight", {out, in}, layer);
  weight.init_std = init_std;
  weight.transposed_in_checkpoint = conv1d_layout;
  has_bias = bias_on;
  if (has_bias) {
    bias = make_param(name + ".bias", {out}, layer);
    bias.init_constant = true;
    bias.init_value = 0.0f;
  }
}

void Linear::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  if (has_bias) out.push_back(&bias);
}

void Linear::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  const TpParamPlan* entry = plan.find(weight.name);
  style_ = entry ? entry->style : TpStyle::Replicated;
  const bool split = style_ == TpStyle::ColumnParallel || style_ == TpStyle::RowParallel;
  tp_ = split && tp && tp->size() > 1 ? tp : nullptr;
  // A tensor-parallel slice casts itself with the tp group's amax (models/fp8_tensor_parallel.h): ZeRO-3
  // gathers it in the working dtype.
  weight.fp8_weight = fp8_ != Fp8Recipe::None && !tp_;
  check_fp8_blocks_under_tp();
}

void Linear::check_fp8_blocks_under_tp() const {
  const AxisPlacement& p = weight.placement.tp;
  if (!tp_ || fp8_ != Fp8Recipe::Blockwise || !p.sharded()) return;
  // Each run of the split dimension this rank holds (one per part of a fused weight): where it
  // begins in the full tensor and how long it is.
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (p.dim == 0 && !weight.parts.empty()) {
    for (size_t i = 0; i < weight.parts.size(); ++i) {
      const ParamPart& part = weight.parts[i];
      const int64_t rows = part.rows / (p.size / p.replicas_of_part(i));
      runs.push_back({part.row_begin + (p.rank / p.replicas_of_part(i)) * rows, rows});
    }
  } else {
    const int64_t extent = weight.full_shape[static_cast<size_t>(p.dim)] / p.size;
    runs.push_back({p.rank * extent, extent});
  }
  for (const auto& [begin, extent] : runs)
    if (begin % ops::kFp8Block != 0 || extent % ops::kFp8Block != 0)
      TETRA_FAIL(Config, "train.fp8.recipe blockwise with parallel.tp = ", tp_->size(), ": ", weight.name, " [",
                 weight.full_shape[0], ", ", weight.full_shape[1], "]: this rank's slice is ",
                 p.dim == 0 ? "rows" : "columns", " [", begin, ", ", begin + extent,
                 "), not a whole number of 128-wide groups; blockwise's 1×128 tiles and 128×128 blocks must "
                 "each lie in one rank's slice (every slice, and each of q, k, v or gate, up in a fused weight, a "
                 "multiple of 128 wide). Use train.fp8.recipe: tensorwise, a smaller parallel.tp, or wider layers");
}

void Linear::set_fp8(Fp8Recipe recipe) {
  fp8_ = recipe;
  weight.fp8_weight = recipe != Fp8Recipe::None && !tp_;  // ZeRO-3 gathers it in FP8 (plain layers)
  if (recipe == Fp8Recipe::None) return;
  weight.fp8_scaling = fp8_recipe_casts(recipe).weight.scaling;
  weight.fp8_format = fp8_recipe_casts(recipe).weight.format;
  const int64_t out = weight.full_shape[0], in = weight.full_shape[1];
  if (out % kFp8Multiple != 0 || in % kFp8Multiple != 0)
    TETRA_FAIL(Config, "train.fp8.recipe ", fp8_recipe_name(recipe), ": ", weight.name, " is [", out, ", ", in,
               "]; FP8 GEMMs need both widths multiples of ", kFp8Multiple, " (set train.fp8.recipe: none, or change the model's widths)");
  check_fp8_blocks_under_tp();
}

void Linear::fp8_forward(Tensor& y, const Tensor& x, ops::Activation act, Tensor* pre_act, const Tensor* residual,
                         Fp8Saved* keep, Tensor* y_amax) const {
  Tensor pre;  // GELU's pre-activation where the caller keeps none
  if (act == ops::Activation::Gelu && !pre_act) pre = Tensor::empty(y.shape(), y.dtype(), y.device());
  ops::Fp8Epilogue e;
  e.bias = has_bias ? &bias.value : nullptr;
  e.residual = residual;
  e.gelu_pre = act != ops::Activation::Gelu ? nullptr : pre_act ? pre_act : &pre;
  e.amax = y_amax;
  fp8_linear::forward(fp8_, y, x, weight, /*accumulate=*/false, keep, e);
}

void Linear::forward(Tensor& y, const Tensor& x, Tensor* x_full, ops::Activation act, Tensor* pre_act,
                     Fp8Saved* fp8, Tensor* y_amax) const {
  const Tensor b = has_bias ? bias.value : Tensor();
  if (!tp_ && fp8_ != Fp8Recipe::None) return fp8_forward(y, x, act, pre_act, nullptr, fp8, y_amax);
  if (!tp_) {
    ops::linear_forward(y, x, weight.value, b, act, pre_act);
  } else {
    TETRA_CHECK(style_ == TpStyle::ColumnParallel, weight.name,
                ": forward runs a column-parallel layer, this one is ", tp_style_name(style_), " (forward_residual)");
    // Sequence-sharded: the shard cast before the gather where the recipe allows (its xᵀ kept in fp8).
    const tp::LinearGemms g = sequence_sharded() ? fp8_tp::gathered_forward(fp8_, *tp_, weight.value, x, fp8)
                                                 : fp8_tp::forward(fp8_, *tp_, weight.value, x, fp8_tp::Part::Whole);
    tp_->column_forward(y, x, x_full, weight.value, b, act, pre_act, &g);
  }
  if (y_amax) ops::fp8_amax(*y_amax, y);
}

void Linear::forward_residual(Tensor& y, const Tensor& x, const Tensor& residual, Fp8Saved* fp8) const {
  const Tensor b = has_bias ? bias.value : Tensor();
  if (!tp_ && fp8_ != Fp8Recipe::None) return fp8_forward(y, x, ops::Activation::None, nullptr, &residual, fp8);
  if (!tp_) return ops::linear_forward(y, x, weight.value, b, ops::Activation::None, nullptr, &residual);
  TETRA_CHECK(style_ == TpStyle::RowParallel, weight.name, ": forward_residual runs a row-parallel layer, this one is ",
              tp_style_name(style_), " (forward)");
  // x [N, I/tp]: this rank's columns of the input
  const tp::LinearGemms g = fp8_tp::forward(fp8_, *tp_, weight.value, x, fp8_tp::Part::Split);
  tp_->row_forward(y, x, weight.value, b, &residual, &g);
}

bool Linear::backward_input(Tensor& dx, const Tensor& dy, const std::function<void()>& overlap, bool accumulate,
                            Fp8Saved* fp8) const {
  if (!tp_) {
    if (fp8_ != Fp8Recipe::None)
      fp8_linear::backward_input(fp8_, dx, dy, weight, accumulate, fp8);
    else
      ops::linear_backward_input(dx, dy, weight.value, accumulate);
    return false;
  }
  TETRA_CHECK(style_ == TpStyle::ColumnParallel && !accumulate, weight.name,
              ": backward_input runs a column-parallel layer (without accumulate), this one is ", tp_style_name(style_));
  // dy [N, O/tp]: this rank's columns of the output gradient
  const tp::LinearGemms g = fp8_tp::backward_input(fp8_, *tp_, weight.value, dy, fp8_tp::Part::Split);
  tp_->column_backward_input(dx, dy, weight.value, overlap, &g);
  return static_cast<bool>(overlap);
}

void Linear::backward_input_residual(Tensor& dx, const Tensor& dy, Tensor* dy_full, const Tensor* gelu_pre,
                                     Fp8Saved* fp8, Tensor* dx_amax) const {
  if (!tp_ && fp8_ != Fp8Recipe::None) {
    ops::Fp8Epilogue e;
    e.dgelu_pre = gelu_pre;
    e.amax = dx_amax;
    fp8_linear::backward_input(fp8_, dx, dy, weight, /*accumulate=*/false, fp8, e);
    return;
  }
  if (!tp_ && gelu_pre) {
    ops::linear_backward_input_gelu(dx, dy, weight.value, *gelu_pre);
  } else if (!tp_) {
    ops::linear_backward_input(dx, dy, weight.value);
  } else {
    TETRA_CHECK(style_ == TpStyle::RowParallel, weight.name,
                ": backward_input_residual runs a row-parallel layer, this one is ", tp_style_name(style_));
    const tp::LinearGemms g = fp8_tp::backward_input(fp8_, *tp_, weight.value, dy, stream_part());
    tp_->row_backward_input(dx, dy, dy_full, weight.value, gelu_pre, &g);
  }
  if (dx_amax) ops::fp8_amax(*dx_amax, dx);
}

void Linear::backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dy_sum, Fp8Saved* fp8) {
  if (fp8_ == Fp8Recipe::None) {
    ops::linear_backward_weight(weight.grad, has_bias ? &bias.grad : nullptr, dy, x, /*accumulate=*/true,
                                has_bias && dy_sum.defined() ? &dy_sum : nullptr);
    return;
  }
  if (tp_) {
    // Column-parallel: dy [N, O/tp] is this rank's columns, x whole; row-parallel: dy whole, x [N, I/tp].
    const bool column = style_ == TpStyle::ColumnParallel;
    using fp8_tp::Part;
    fp8_tp::backward_weight(fp8_, *tp_, weight.grad, dy, column ? Part::Split : Part::Whole, x,
                            column ? Part::Whole : Part::Split, column ? fp8 : nullptr);
  } else {
    fp8_linear::backward_weight(fp8_, weight.grad, dy, x, fp8);
  }
  bias_grad(dy, dy_sum);
}

void Linear::bias_grad(const Tensor& dy, const Tensor& dy_sum) {
  if (!has_bias) return;
  // The bias alone: linear_backward_weight over an input of no features runs only its bias path.
  Tensor no_dw = Tensor::empty({weight.grad.dim(0), 0}, weight.grad.dtype(), weight.grad.device());
  Tensor no_x = Tensor::empty({dy.dim(0), 0}, dy.dtype(), dy.device());
  ops::linear_backward_weight(no_dw, &bias.grad, dy, no_x, /*accumulate=*/true, dy_sum.defined() ? &dy_sum : nullptr);
}

void Linear::backward_weight_residual(const Tensor& dy_full, const Tensor& x, const Tensor& dy, const Tensor& dy_sum,
                                      Fp8Saved* fp8) {
  if (!sequence_sharded()) return backward_weight(dy, x, dy_sum, fp8);
  if (fp8_ != Fp8Recipe::None)  // dy_full [N, O] gathered whole, x [N, I/tp] this rank's columns
    fp8_tp::backward_weight(fp8_, *tp_, weight.grad, dy_full, fp8_tp::Part::Whole, x, fp8_tp::Part::Split);
  else
    ops::linear_backward_weight(weight.grad, nullptr, dy_full, x, /*accumulate=*/true);
  bias_grad(dy, dy_sum);
}

void LayerNorm::init(const std::string& name, int64_t channels, float epsilon, int layer) {
  eps = epsilon;
  weight = make_param(name + ".weight", {channels}, layer);
  weight.init_constant = true;
  weight.init_value = 1.0f;
  bias = make_param(name + ".bias", {channels}, layer);
  bias.init_constant = true;
  bias.init_value = 0.0f;
}

void LayerNorm::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  out.push_back(&bias);
}

void RMSNorm::init(const std::string& name, int64_t channels, float epsilon, int layer) {
  eps = epsilon;
  weight = make_param(name + ".weight", {channels}, layer);
  weight.init_constant = true;
  weight.init_value = 1.0f;
}

}  // namespace tetra
