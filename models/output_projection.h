// The output layer's projection and loss as every family's head runs them (models/gpt_head.h,
// models/llama_head.h): the normed rows xn [R, C] (R = N, or this rank's sequence shard) times the
// output matrix [V, C] (tensor-parallel: this rank's vocabulary rows [V/tp, C]) give the logits
// [N, V] ([N, V/tp]), and the fused softmax cross-entropy gives the per-token losses. In training the
// logits' gradient is written in place of the logits. Tensor-parallel: xn is gathered from the
// sequence shards (in chunks under the GEMM with parallel.tp_comm_overlap, parallel/tensor/linear.h),
// the loss comes from per-row statistics all-gathered over tp (loss parallel: the logits are never
// gathered), and the input gradient is reduce-scattered (all-reduced without sequence parallelism).
#pragma once
#include "models/layer.h"
#include "parallel/param.h"
#include "parallel/tensor/tensor_parallel.h"

namespace tetra {

struct OutputProjection {
  Param* weight = nullptr;
  TensorParallel* tp = nullptr;
  int64_t vocab_size = 0;

  // Sets x_full (xn, or a new [N, C] that the gather fills; the weight gradient reads it) and
  // ctx.losses fp32 [N]; returns the logits' gradient when training (the logits tensor), else empty.
  Tensor forward(MicroBatchContext& ctx, const Tensor& xn, Tensor& x_full) const;
  // dxn [R, C] from dlogits. With tp and W right after B (ctx.weights_follow) the weight gradient
  // runs under the input gradient's reduce-scatter: returns whether it did.
  bool backward_input(MicroBatchContext& ctx, Tensor& dxn, const Tensor& dlogits, const Tensor& x_full) const;
  // The weight gradient (added to weight->grad) unless backward_input computed it already.
  void backward_weight(const Tensor& dlogits, const Tensor& x_full, bool weights_done) const;

 private:
  // Loss parallel: each rank's (max, Σ exp, target logit) per row, all-gathered, give every rank the
  // same losses and its own columns of the logits' gradient.
  void loss_parallel(MicroBatchContext& ctx, Tensor& logits) const;
};

}  // namespace tetra
