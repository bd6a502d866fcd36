#include "models/modules.h"

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

void Linear::backward_weight_rows(const Tensor& dy_full, const Tensor& x, const Tensor& dy_rows,
                                  const Tensor& dy_rows_sum) {
  ops::linear_backward_weight(weight.grad, nullptr, dy_full, x, /*accumulate=*/true);
  if (!has_bias) return;
  // The bias alone: linear_backward_weight over an input of no features runs only its bias path.
  Tensor no_dw = Tensor::empty({weight.grad.dim(0), 0}, weight.grad.dtype(), weight.grad.device());
  Tensor no_x = Tensor::empty({dy_rows.dim(0), 0}, dy_rows.dtype(), dy_rows.device());
  ops::linear_backward_weight(no_dw, &bias.grad, dy_rows, no_x, /*accumulate=*/true,
                              dy_rows_sum.defined() ? &dy_rows_sum : nullptr);
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
