// The token lookup as every family's input layer runs it (models/gpt_embedding.h,
// models/llama_embedding.h), the twin of models/output_projection.h: ids int32 [B, T] and the table
// [V, C] (tensor-parallel: this rank's vocabulary rows [V/tp, C]) give the residual stream [R, C]
// (R = N = B·T, or this rank's sequence shard N/tp). Optional positions [T_max, C] are added to every
// token (GPT-2's wpe). Vocabulary-parallel: each rank looks up the ids in its rows (zero rows
// elsewhere; tp rank 0 adds the positions) and the partial lookups are summed over tp —
// reduce-scattered into the sequence shard with sequence parallelism, all-reduced to [N, C] without.
// Adding the other ranks' zero rows is exact, so every tp gives the tp = 1 values.
#pragma once
#include "models/layer.h"
#include "parallel/param.h"
#include "parallel/tensor/tensor_parallel.h"

namespace tetra {

struct VocabEmbedding {
  Param* weight = nullptr;
  Param* positions = nullptr;  // null: no position table
  TensorParallel* tp = nullptr;  // null (or one rank): the plain lookup
  int64_t vocab_size = 0;

  // The residual stream's rows [R, C] (residual dtype) for ids [B, T].
  Tensor forward(MicroBatchContext& ctx, const Tensor& ids) const;
  // Adds the lookup's gradient from dy [R, C] to weight->grad (and positions->grad). Under tensor
  // parallelism with sequence parallelism the shards are gathered first, so that every token's
  // gradient reaches the rank that holds its row.
  void backward_weight(MicroBatchContext& ctx, const Tensor& ids, const Tensor& dy) const;
};

}  // namespace tetra
