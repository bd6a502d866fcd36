// ParamSet: the parameters of one model replica laid out in two flat buffers (values, gradients),
// each parameter a view at an aligned offset. One flat buffer lets data parallelism reduce
// gradients in a few large buckets and lets ZeRO shard contiguous ranges: the layout is a
// ZeroLayout (one contiguous, padded range per layer), sharded over `shards` data-parallel ranks.
// A sharded optimizer may own less than the full buffers: stages 2–3 never allocate the full
// gradient buffer (gradients live in per-layer buffers they bind to Param::grad), stage 3 releases
// the full values after taking its shard (Param::value is bound while a layer is gathered).
// Buffers (Param::trainable false: DeepSeek-V3's router bias) are kept apart: each its own fp32
// tensor on the device, outside the flat buffers, the layout and the optimizer.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/param.h"
#include "parallel/zero/layout.h"

namespace tetra {

// Prepares `buf`, which holds elements [begin, begin + buf.numel()) of a ParamSet's flat gradient
// layout, for a step: zeroes it, except the gradients of those `params` (each lying in that range at
// Param::offset) whose first write writes every element (Param::grad_whole_writes: left stale), and
// marks each of the params as holding nothing of the step (Param::grad_empty, grad_stale). Padding
// and every other element become zero.
void prepare_grads(Tensor& buf, int64_t begin, const std::vector<Param*>& params);
// Zeroes the gradients among `params` that are still stale (Param::grad_stale: prepared without
// zeroing, not written since): call before reading gradients that a step's writes may not all have
// reached (a reduction). Each stays empty (Param::grad_empty), now as zeros.
void settle_grads(const std::vector<Param*>& params);

class ParamSet {
 public:
  static constexpr int64_t kAlignElems = ZeroLayout::kAlignElems;

  // Lays out the trainable `params` (ZeroLayout over `shards` ranks) and allocates the flat value
  // buffer, and the flat gradient buffer when `full_grads`, on `device`; buffers get their own fp32
  // zeros.
  void build(std::vector<Param*> params, Device device, DType value_dtype, DType grad_dtype, int shards = 1,
             bool full_grads = true);
  // Fills every value from its init rule (normal(0, init_std) or constant): element i of the full
  // tensor comes from a seed derived from (seed, name) and i, and each rank draws the elements of
  // its local piece only, so any split (tensor parallelism) or order gives the same model.
  void initialize(uint64_t seed);
  // Sets the initial values at full precision: `fill` writes every Param::value (initialize, a
  // weight file: models/weight_source.h) while the trainable ones are bound to fp32 host views of
  // the layout. Working weights narrower than fp32 (bf16) are then rounded from those values, which
  // stay in initial_values() — a flat fp32 host tensor of flat_values()'s layout — for the
  // optimizer's fp32 master to start from (parallel/adamw.h, parallel/zero/optimizer.h) until
  // release_initial_values(). fp32 working weights are written directly and nothing is kept.
  // Buffers (fp32 tensors of their own) are written directly either way.
  void set_initial_values(const std::function<void()>& fill);
  // The fp32 initial values (flat, host, padding zero); undefined unless set_initial_values kept them.
  const Tensor& initial_values() const { return initial_; }
  void release_initial_values() { initial_ = Tensor(); }
  // Prepares the flat gradient buffer (if any) for a step: prepare_grads below over all of it.
  void zero_grads();
  // Moves the flat gradient buffer into `grads` (same numel and dtype, on the same device: e.g.
  // memory a communicator registered for its peers) and binds every Param::grad to it.
  void adopt_flat_grads(Tensor grads);
  // Frees the full value buffer; every Param::value becomes undefined (stage 3 binds them again
  // to gathered layer buffers).
  void release_values();

  const std::vector<Param*>& params() const { return params_; }    // trainable, in layout order
  const std::vector<Param*>& buffers() const { return buffers_; }  // not trainable, in model order
  Param* find(const std::string& name) const;  // a parameter or buffer; nullptr if absent
  const ZeroLayout& layout() const { return layout_; }
  Tensor& flat_values() { return values_; }    // undefined after release_values()
  Tensor& flat_grads() { return grads_; }      // undefined unless built with full_grads
  int64_t flat_numel() const { return layout_.total(); }  // with alignment and shard padding
  int64_t param_numel() const { return layout_.param_numel(); }  // without padding
  Device device() const { return device_; }
  DType value_dtype() const { return value_dtype_; }
  DType grad_dtype() const { return grad_dtype_; }

 private:
  std::vector<Param*> params_, buffers_;
  ZeroLayout layout_;
  Tensor values_, grads_;
  Tensor initial_;  // set_initial_values: fp32 host copy while the working weights are narrower
  Device device_;
  DType value_dtype_ = DType::F32, grad_dtype_ = DType::F32;
};

}  // namespace tetra
