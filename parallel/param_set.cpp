#include "parallel/param_set.h"

#include "runtime/ops.h"
#include "runtime/random.h"

namespace tetra {

void ParamSet::build(std::vector<Param*> params, Device device, DType value_dtype, DType grad_dtype) {
  params_ = std::move(params);
  device_ = device;
  int64_t off = 0;
  for (Param* p : params_) {
    p->offset = off;
    off += (p->numel() + kAlignElems - 1) / kAlignElems * kAlignElems;
  }
  flat_numel_ = off;
  values_ = Tensor::zeros({flat_numel_}, value_dtype, device);
  grads_ = Tensor::zeros({flat_numel_}, grad_dtype, device);
  for (Param* p : params_) {
    p->value = values_.slice_flat(p->offset, p->local_shape);
    p->grad = grads_.slice_flat(p->offset, p->local_shape);
  }
}

void ParamSet::initialize(uint64_t seed) {
  for (Param* p : params_) {
    TETRA_CHECK(p->local_shape == p->full_shape, "initialize: split parameters are initialised by their strategy (",
                p->name, ")");
    std::vector<float> host(static_cast<size_t>(p->numel()));
    if (p->init_constant) {
      std::fill(host.begin(), host.end(), p->init_value);
    } else {
      Rng rng(seed ^ hash_name(p->name));
      for (float& x : host) x = static_cast<float>(rng.normal() * p->init_std);
    }
    Tensor src = Tensor::from_vector(host, p->local_shape);
    ops::copy(p->value, src);
  }
}

void ParamSet::zero_grads() {
  if (grads_.defined()) ops::zero(grads_);
}

Param* ParamSet::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->name == name) return p;
  return nullptr;
}

int64_t ParamSet::param_numel() const {
  int64_t n = 0;
  for (Param* p : params_) n += p->numel();
  return n;
}

}  // namespace tetra
