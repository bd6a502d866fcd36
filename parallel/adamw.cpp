#include "parallel/adamw.h"

#include <cmath>

#include "runtime/multi_tensor.h"

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
  update(cfg_.hyper(lr, step_, grad_scale), nullptr);
}

void AdamW::step(const Tensor& control) { update(cfg_.hyper(0.0f, 1, 1.0f), &control); }

void AdamW::update(const ops::AdamWHyper& h, const Tensor* control) {
  // One multi-tensor update over every parameter (a few kernel launches on CUDA).
  std::vector<ops::AdamWSegment> segments;
  segments.reserve(params_.params().size());
  for (Param* p : params_.params()) {
    ops::AdamWSegment s;
    s.master = master_.slice_flat(p->offset, {p->numel()});
    s.grad = p->grad.flatten();
    s.m = m_.slice_flat(p->offset, {p->numel()});
    s.v = v_.slice_flat(p->offset, {p->numel()});
    if (separate_master_) s.working = p->value.flatten();
    s.weight_decay = p->weight_decay ? cfg_.weight_decay : 0.0f;
    segments.push_back(std::move(s));
  }
  ops::adamw_update_multi(segments, h, control);
}

void gradient_norm_squared(Tensor& acc, Tensor& flat_grads, Communicator* shard_group) {
  gradient_norm_squared(acc, std::vector<Tensor>{flat_grads}, shard_group);
}

void gradient_norm_squared(Tensor& acc, std::vector<Tensor> pieces, Communicator* shard_group) {
  if (!shard_group || shard_group->size() <= 1) {
    for (Tensor& p : pieces)
      if (p.numel() > 0) ops::sum_squares(acc, p);
    return;
  }
  // Each rank's share alone, summed over the group, then added: acc may hold a value already.
  Tensor mine = Tensor::zeros({1}, DType::F64, acc.device());
  for (Tensor& p : pieces)
    if (p.numel() > 0) ops::sum_squares(mine, p);
  shard_group->all_reduce(mine, ReduceOp::Sum)->wait();
  ops::sum_accumulate(acc, mine);
}

}  // namespace tetra
