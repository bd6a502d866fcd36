#include "models/vocab_embedding.h"

#include "runtime/ops.h"

namespace tetra {

Tensor VocabEmbedding::forward(MicroBatchContext& ctx, const Tensor& ids) const {
  const int64_t N = ids.numel(), C = weight->full_shape.at(1);
  // Positions from ctx.position on (generation after a cached prefix; 0 otherwise).
  Tensor wpe = positions ? positions->value : Tensor();
  if (wpe.defined() && ctx.position > 0) wpe = wpe.narrow(ctx.position, wpe.dim(0) - ctx.position);
  if (!tp) {
    Tensor y = ctx.residual({N, C});  // the residual stream starts here
    ops::embedding_forward(y, ids.flatten(), weight->value, wpe, ids.dim(1));
    return y;
  }
  // This rank's vocabulary rows, the positions once (tp rank 0), summed over the group.
  Tensor partial = ctx.activation({N, C});
  ops::embedding_forward(partial, ids.flatten(), weight->value, tp->rank() == 0 ? wpe : Tensor(), ids.dim(1),
                         tp->vocab_shard(vocab_size));
  if (!tp->sequence_parallel()) {
    tp->all_reduce(partial, "embedding");
    return partial;
  }
  // The stream's dtype is the activation dtype under tp > 1 (launch/config/validate.cpp).
  Tensor y = ctx.residual({tp->local_rows(N, "embedding"), C});
  tp->reduce_scatter_rows(y, partial, "embedding");
  return y;
}

void VocabEmbedding::backward_weight(MicroBatchContext& ctx, const Tensor& ids, const Tensor& dy) const {
  Tensor* dwpe = positions ? &positions->grad : nullptr;
  if (!tp) return ops::embedding_backward(weight->grad, dwpe, dy, ids.flatten(), ids.dim(1));
  // The positions' gradient: complete on every rank from the replicated dy without sequence
  // parallelism; with it tp rank 0 takes all of it and the others none, and the sum over tp (the
  // position table is a sequence-parallel weight) adds exact zeros.
  Tensor full = dy;
  if (tp->sequence_parallel()) {
    full = ctx.activation({ids.numel(), weight->full_shape.at(1)});
    tp->all_gather_rows(full, dy, "embedding gradient");
    if (tp->rank() != 0) dwpe = nullptr;
  }
  ops::embedding_backward(weight->grad, dwpe, full, ids.flatten(), ids.dim(1), tp->vocab_shard(vocab_size));
}

}  // namespace tetra
