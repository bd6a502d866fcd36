#include "models/gpt_embedding.h"

#include "runtime/ops.h"

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
}

Tensor GptEmbedding::forward(MicroBatchContext& ctx, const Tensor& ids) {
  TETRA_CHECK(ids.ndim() == 2 && ids.dim(1) <= cfg_.max_seq_len, "embedding: ids ", ids.describe(),
              " (sequence longer than model.seq_len = ", cfg_.max_seq_len, "?)");
  const int64_t N = ids.numel(), C = cfg_.d_model;
  Tensor y;
  if (!tp_) {
    y = ctx.residual({N, C});  // the residual stream starts here
    ops::embedding_forward(y, ids.flatten(), wte_->value, wpe_.value, ids.dim(1));
  } else {
    // This rank's vocabulary rows, the positions once (tp rank 0), summed over the group: adding the
    // other ranks' zero rows is exact, so every tp gives the tp = 1 values.
    Tensor partial = ctx.activation({N, C});
    ops::embedding_forward(partial, ids.flatten(), wte_->value, tp_->rank() == 0 ? wpe_.value : Tensor(), ids.dim(1),
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

Tensor GptEmbedding::backward_input(MicroBatchContext& ctx, const Tensor& dy) {
  ctx.take_grad(dy);  // the lookup's gradient reads dy itself (fp32 with an fp32 stream)
  ctx.slot<EmbeddingActivations>(index_).dy = dy;
  return Tensor();
}

void GptEmbedding::backward_weight(MicroBatchContext& ctx) {
  auto& a = ctx.slot<EmbeddingActivations>(index_);
  if (!tp_) {
    ops::embedding_backward(wte_->grad, &wpe_.grad, a.dy, a.ids.flatten(), a.ids.dim(1));
  } else {
    // Every token's gradient reaches the rank that holds its vocabulary row: gather the sequence
    // shards. The positions' gradient: complete on every rank from the replicated dy without
    // sequence parallelism; with it tp rank 0 takes all of it and the others none, and the sum over
    // tp (wpe is a sequence-parallel weight) adds exact zeros.
    Tensor dy = a.dy;
    if (tp_->sequence_parallel()) {
      dy = ctx.activation({a.ids.numel(), cfg_.d_model});
      tp_->all_gather_rows(dy, a.dy, "embedding gradient");
    }
    const bool positions = !tp_->sequence_parallel() || tp_->rank() == 0;
    ops::embedding_backward(wte_->grad, positions ? &wpe_.grad : nullptr, dy, a.ids.flatten(), a.ids.dim(1),
                            tp_->vocab_shard(cfg_.vocab_size));
  }
  ctx.release(index_);
}

}  // namespace tetra
