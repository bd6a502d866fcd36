#include "parallel/adamw.h"

#include <cmath>

namespace tetra {

AdamW::AdamW(ParamSet& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  Tensor& values = params.flat_values();
  separate_master_ = values.dtype() != DType::F32;
  if (separate_master_) {
    master_ = Tensor::empty(values.shape(), DType::F32, values.device());
    ops::copy(master_, values);
  } else {
    master_ = values;
  }
  m_ = Tensor::zeros(values.shape(), DType::F32, values.device());
  v_ = Tensor::zeros(values.shape(), DType::F32, values.device());
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  ops::AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = step_;
  h.grad_scale = grad_scale;
  for (Param* p : params_.params()) {
    h.weight_decay = p->weight_decay ? cfg_.weight_decay : 0.0f;
    Tensor master = master_.slice_flat(p->offset, p->local_shape);
    Tensor m = m_.slice_flat(p->offset, p->local_shape);
    Tensor v = v_.slice_flat(p->offset, p->local_shape);
    ops::adamw_update(master, p->grad, m, v, h, separate_master_ ? &p->value : nullptr);
  }
}

double gradient_norm(Tensor& flat_grads, Communicator* shard_group) {
  Tensor acc = Tensor::zeros({1}, DType::F32, flat_grads.device());
  ops::sum_squares(acc, flat_grads);
  double sq = ops::sum_to_host(acc);
  if (shard_group && shard_group->size() > 1) sq = shard_group->all_reduce_scalar(sq);
  return std::sqrt(sq);
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0f;
  double c = max_norm / (norm + 1e-6);
  return static_cast<float>(c < 1.0 ? c : 1.0);
}

}  // namespace tetra
