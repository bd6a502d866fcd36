#include "parallel/adamw.h"

#include <cmath>

#include "runtime/multi_tensor.h"

namespace tetra {

AdamW::AdamW(ParamSet& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  Tensor& values = params.flat_values();
  separate_master_ = values.dtype() != DType::F32;
  if (separate_master_) {
    // From the full-precision initial values where the ParamSet keeps them (set_initial_values),
    // else from the working copy (what a resumed checkpoint then replaces).
    master_ = Tensor::empty(values.shape(), DType::F32, values.device());
    const Tensor& initial = params.initial_values();
    ops::copy(master_, initial.defined() ? initial : values);
  } else {
    master_ = values;
  }
  TETRA_CHECK(cfg.state_dtype == DType::F32 || cfg.state_dtype == DType::BF16, "AdamW: state_dtype ",
              dtype_name(cfg.state_dtype), " (valid: fp32, bf16)");
  m_ = Tensor::zeros(values.shape(), cfg.state_dtype, values.device());
  v_ = Tensor::zeros(values.shape(), cfg.state_dtype, values.device());
  amaxes_ = Fp8UpdateAmaxes(params.params(), values.device(), /*updates_whole=*/true);
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
    amaxes_.append(segments, std::move(s), *p);
  }
  amaxes_.begin();
  ops::adamw_update_multi(segments, h, control);
  amaxes_.end();
}

}  // namespace tetra
