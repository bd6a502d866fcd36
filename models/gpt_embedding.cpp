#include "models/gpt_embedding.h"

#include "runtime/error.h"

namespace tetra {

namespace {
struct EmbeddingActivations : Activations {
  Tensor ids, dy;
};
}  // namespace

GptEmbedding::GptEmbedding(const GptConfig& cfg, Param* wte) : cfg_(cfg), wte_(wte) {
  wpe_.name = "transformer.wpe.weight";
  wpe_.full_shape = wpe_.local_shape = {cfg.max_seq_len, cfg.d_model};
  wpe_.init_std = 0.01f;  // GPT-2 draws positions with std 0.01
  wpe_.weight_decay = true;
  wpe_.layer_index = 0;
  lookup_.weight = wte_;
  lookup_.positions = &wpe_;
  lookup_.vocab_size = cfg.vocab_size;
}

Tensor GptEmbedding::forward(MicroBatchContext& ctx, const Tensor& ids) {
  TETRA_CHECK(ids.ndim() == 2 && ctx.position + ids.dim(1) <= cfg_.max_seq_len, "embedding: ids ", ids.describe(),
              " from position ", ctx.position, " (sequence longer than model.seq_len = ", cfg_.max_seq_len, "?)");
  Tensor y = lookup_.forward(ctx, ids);
  if (ctx.training) ctx.slot<EmbeddingActivations>(index_).ids = ids;
  return y;
}

Tensor GptEmbedding::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  ctx.take_grad(dy);  // the lookup's gradient reads dy itself (fp32 with an fp32 stream)
  ctx.slot<EmbeddingActivations>(index_).dy = dy;
  return Tensor();
}

void GptEmbedding::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<EmbeddingActivations>(index_);
  lookup_.backward_weight(ctx, a.ids, a.dy);
  ctx.release(index_);
}

}  // namespace tetra
