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
}

void Linear::set_fp8(Fp8Recipe recipe) {
  fp8_ = recipe;
  weight.fp8_weight = recipe != Fp8Recipe::None;
  if (recipe == Fp8Recipe::None) return;
  weight.fp8_scaling = fp8_recipe_casts(recipe).weight.scaling;
  weight.fp8_format = fp8_recipe_casts(recipe).weight.format;
  const int64_t out = weight.full_shape[0], in = weight.full_shape[1];
  if (out % kFp8Multiple != 0 || in % kFp8Multiple != 0)
    TETRA_FAIL(Config, "train.fp8.recipe ", fp8_recipe_name(recipe), ": ", weight.name, " is [", out, ", ", in,
               "]; FP8 GEMMs need both widths multiples of ", kFp8Multiple, " (set train.fp8.recipe: none, or change the model's widths)");
}

void Linear::check_no_fp8_under_tp() const {
  TETRA_CHECK(fp8_ == Fp8Recipe::None, weight.name, ": FP8 under tensor parallelism is not implemented (validation refuses it)");
}

void Linear::fp8_forward(Tensor& y, const Tensor& x, ops::Activation act, Tensor* pre_act, const Tensor* residual) const {
  if (residual) {
    if (y.data_ptr() != residual->data_ptr()) ops::copy(y, *residual);
    fp8_linear::forward(fp8_, y, x, weight, /*accumulate=*/true);
    if (has_bias) ops::add_bias(y, bias.value);
    return;
  }
  const bool gelu = act == ops::Activation::Gelu;
  Tensor out = !gelu ? y : pre_act ? *pre_act : Tensor::empty(y.shape(), y.dtype(), y.device());
  fp8_linear::forward(fp8_, out, x, weight, /*accumulate=*/false);
  if (has_bias) ops::add_bias(out, bias.value);
  if (gelu) ops::gelu_forward(y, out);
}

void Linear::forward(Tensor& y, const Tensor& x, Tensor* x_full, ops::Activation act, Tensor* pre_act) const {
  const Tensor b = has_bias ? bias.value : Tensor();
  if (!tp_ && fp8_ != Fp8Recipe::None) return fp8_forward(y, x, act, pre_act, nullptr);
  if (!tp_) return ops::linear_forward(y, x, weight.value, b, act, pre_act);
  check_no_fp8_under_tp();
  TETRA_CHECK(style_ == TpStyle::ColumnParallel, weight.name, ": forward runs a column-parallel layer, this one is ",
              tp_style_name(style_), " (forward_residual)");
  tp_->column_forward(y, x, x_full, weight.value, b, act, pre_act);
}

void Linear::forward_residual(Tensor& y, const Tensor& x, const Tensor& residual) const {
  const Tensor b = has_bias ? bias.value : Tensor();
  if (!tp_ && fp8_ != Fp8Recipe::None) return fp8_forward(y, x, ops::Activation::None, nullptr, &residual);
  if (!tp_) return ops::linear_forward(y, x, weight.value, b, ops::Activation::None, nullptr, &residual);
  check_no_fp8_under_tp();
  TETRA_CHECK(style_ == TpStyle::RowParallel, weight.name, ": forward_residual runs a row-parallel layer, this one is ",
              tp_style_name(style_), " (forward)");
  tp_->row_forward(y, x, weight.value, b, &residual);
}

bool Linear::backward_input(Tensor& dx, const Tensor& dy, const std::function<void()>& overlap, bool accumulate) const {
  if (!tp_) {
    if (fp8_ != Fp8Recipe::None)
      fp8_linear::backward_input(fp8_, dx, dy, weight, accumulate);
    else
      ops::linear_backward_input(dx, dy, weight.value, accumulate);
    return false;
  }
  check_no_fp8_under_tp();
  TETRA_CHECK(style_ == TpStyle::ColumnParallel && !accumulate, weight.name,
              ": backward_input runs a column-parallel layer (without accumulate), this one is ", tp_style_name(style_));
  tp_->column_backward_input(dx, dy, weight.value, overlap);
  return static_cast<bool>(overlap);
}

void Linear::backward_input_residual(Tensor& dx, const Tensor& dy, Tensor* dy_full, const Tensor* gelu_pre) const {
  if (!tp_ && fp8_ != Fp8Recipe::None) {
    fp8_linear::backward_input(fp8_, dx, dy, weight, /*accumulate=*/false);
    if (gelu_pre) ops::gelu_backward(dx, dx, *gelu_pre);
    return;
  }
  if (!tp_) {
    if (gelu_pre)
      ops::linear_backward_input_gelu(dx, dy, weight.value, *gelu_pre);
    else
      ops::linear_backward_input(dx, dy, weight.value);
    return;
  }
  check_no_fp8_under_tp();
  TETRA_CHECK(style_ == TpStyle::RowParallel, weight.name,
              ": backward_input_residual runs a row-parallel layer, this one is ", tp_style_name(style_));
  tp_->row_backward_input(dx, dy, dy_full, weight.value, gelu_pre);
}

void Linear::backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dy_sum) {
  if (fp8_ == Fp8Recipe::None) {
    ops::linear_backward_weight(weight.grad, has_bias ? &bias.grad : nullptr, dy, x, /*accumulate=*/true,
                                has_bias && dy_sum.defined() ? &dy_sum : nullptr);
    return;
  }
  fp8_linear::backward_weight(fp8_, weight.grad, dy, x);
  bias_grad(dy, dy_sum);
}

void Linear::bias_grad(const Tensor& dy, const Tensor& dy_sum) {
  if (!has_bias) return;
  // The bias alone: linear_backward_weight over an input of no features runs only its bias path.
  Tensor no_dw = Tensor::empty({weight.grad.dim(0), 0}, weight.grad.dtype(), weight.grad.device());
  Tensor no_x = Tensor::empty({dy.dim(0), 0}, dy.dtype(), dy.device());
  ops::linear_backward_weight(no_dw, &bias.grad, dy, no_x, /*accumulate=*/true, dy_sum.defined() ? &dy_sum : nullptr);
}

void Linear::backward_weight_residual(const Tensor& dy_full, const Tensor& x, const Tensor& dy, const Tensor& dy_sum) {
  if (!sequence_sharded()) return backward_weight(dy, x, dy_sum);
  check_no_fp8_under_tp();
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
