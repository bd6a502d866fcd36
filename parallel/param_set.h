// ParamSet: the parameters of one model replica laid out in two flat buffers (values, gradients),
// each parameter a view at an aligned offset. One flat buffer lets data parallelism reduce
// gradients in a few large buckets and lets ZeRO shard contiguous ranges.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/param.h"

namespace tetra {

class ParamSet {
 public:
  static constexpr int64_t kAlignElems = 64;  // each param starts on a 64-element boundary

  // Lays out `params` in the given order and allocates the flat buffers on `device`.
  void build(std::vector<Param*> params, Device device, DType value_dtype, DType grad_dtype);
  // Fills every value from its init rule (normal(0, init_std) or constant), drawing the full
  // tensor from a seed derived from (seed, name) so any split or order gives the same weights.
  void initialize(uint64_t seed);
  void zero_grads();

  const std::vector<Param*>& params() const { return params_; }
  Param* find(const std::string& name) const;  // nullptr if absent
  Tensor& flat_values() { return values_; }
  Tensor& flat_grads() { return grads_; }
  int64_t flat_numel() const { return flat_numel_; }   // with alignment padding
  int64_t param_numel() const;                         // without padding
  Device device() const { return device_; }

 private:
  std::vector<Param*> params_;
  Tensor values_, grads_;
  int64_t flat_numel_ = 0;
  Device device_;
};

}  // namespace tetra
