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
  Tensor y = ctx.residual({ids.numel(), cfg_.d_model});  // the residual stream starts here
  ops::embedding_forward(y, ids.flatten(), embed_->value, Tensor(), ids.dim(1));
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
  ops::embedding_backward(embed_->grad, nullptr, a.dy, a.ids.flatten(), a.ids.dim(1));
  ctx.release(index_);
}

}  // namespace tetra
