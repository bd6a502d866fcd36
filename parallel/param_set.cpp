#include "parallel/param_set.h"

#include "runtime/ops.h"
#include "runtime/random.h"

namespace tetra {

void ParamSet::build(std::vector<Param*> params, Device device, DType value_dtype, DType grad_dtype, int shards,
                     bool full_grads) {
  params_ = std::move(params);
  device_ = device;
  value_dtype_ = value_dtype;
  grad_dtype_ = grad_dtype;
  layout_ = ZeroLayout(params_, shards);
  for (size_t i = 0; i < layout_.params().size(); ++i) layout_.params()[i]->offset = layout_.offset_of(static_cast<int>(i));
  values_ = Tensor::zeros({layout_.total()}, value_dtype, device);
  grads_ = full_grads ? Tensor::zeros({layout_.total()}, grad_dtype, device) : Tensor();
  for (Param* p : params_) {
    p->value = values_.slice_flat(p->offset, p->local_shape);
    p->grad = full_grads ? grads_.slice_flat(p->offset, p->local_shape) : Tensor();
  }
}

void ParamSet::initialize(uint64_t seed) {
  for (Param* p : params_) {
    TETRA_CHECK(p->local_shape == p->full_shape, "initialize: split parameters are initialised by their strategy (",
                p->name, ")");
    TETRA_CHECK(p->value.defined(), "initialize: ", p->name, " has no value buffer (released by a sharded optimizer)");
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

void ParamSet::release_values() {
  values_ = Tensor();
  for (Param* p : params_) p->value = Tensor();
}

Param* ParamSet::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace tetra
