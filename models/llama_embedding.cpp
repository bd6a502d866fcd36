#include "models/llama_embedding.h"

#include "runtime/ops.h"

namespace tetra {

namespace {
struct EmbeddingActivations : Activations {
  Tensor ids, dy;
};
}  // namespace

LlamaEmbedding::LlamaEmbedding(const LlamaConfig& cfg, Param* embed_tokens) : cfg_(cfg), embed_(embed_tokens) {}

Tensor LlamaEmbedding::forward(MicroBatchContext& ctx, const Tensor& ids) {
  TETRA_CHECK(ids.ndim() == 2, "embedding: ids ", ids.describe());
  const int64_t N = ids.numel(), C = cfg_.d_model;
  Tensor y;
  if (!tp_) {
    y = ctx.residual({N, C});  // the residual stream starts here
    ops::embedding_forward(y, ids.flatten(), embed_->value, Tensor(), ids.dim(1));
  } else {
    // This rank's vocabulary rows (zero rows for the others' ids), summed over the group.
    Tensor partial = ctx.activation({N, C});
    ops::embedding_forward(partial, ids.flatten(), embed_->value, Tensor(), ids.dim(1),
                           tp_->vocab_shard(cfg_.vocab_size));
    if (tp_->sequence_parallel()) {
      // The stream's dtype is the activation dtype under tp > 1 (launch/config/validate.cpp).
      y = ctx.residual({tp_->local_rows(N, "embedding"), C});
      tp_->reduce_scatter_rows(y, partial, "embedding");
    } else {
      tp_->all_reduce(partial, "embedding");
      y = partial;
    }
  }
  if (ctx.training) ctx.slot<EmbeddingActivations>(index_).ids = ids;
  return y;
}

Tensor LlamaEmbedding::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  ctx.take_grad(dy);  // the lookup's gradient reads dy itself (fp32 with an fp32 stream)
  ctx.slot<EmbeddingActivations>(index_).dy = dy;
  return Tensor();
}

void LlamaEmbedding::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<EmbeddingActivations>(index_);
  if (!tp_) {
    ops::embedding_backward(embed_->grad, nullptr, a.dy, a.ids.flatten(), a.ids.dim(1));
  } else {
    Tensor dy = a.dy;  // every token's gradient, for the rank that holds its row
    if (tp_->sequence_parallel()) {
      dy = ctx.activation({a.ids.numel(), cfg_.d_model});
      tp_->all_gather_rows(dy, a.dy, "embedding gradient");
    }
    ops::embedding_backward(embed_->grad, nullptr, dy, a.ids.flatten(), a.ids.dim(1),
                            tp_->vocab_shard(cfg_.vocab_size));
  }
  ctx.release(index_);
}

}  // namespace tetra
