#include "models/llama_embedding.h"

#include "runtime/error.h"

namespace tetra {

namespace {
struct EmbeddingActivations : Activations {
  Tensor ids, dy;
};
}  // namespace

LlamaEmbedding::LlamaEmbedding(const LlamaConfig& cfg, Param* embed_tokens) : cfg_(cfg), embed_(embed_tokens) {
  lookup_.weight = embed_;
  lookup_.vocab_size = cfg.vocab_size;
}

Tensor LlamaEmbedding::forward(MicroBatchContext& ctx, const Tensor& ids) {
  TETRA_CHECK(ids.ndim() == 2, "embedding: ids ", ids.describe());
  Tensor y = lookup_.forward(ctx, ids);
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
  lookup_.backward_weight(ctx, a.ids, a.dy);
  ctx.release(index_);
}

}  // namespace tetra
