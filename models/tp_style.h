// How one parameter splits over the tensor-parallel group: the style a tensor-parallel plan gives
// it (models/tensor_parallel_plan.h) and, for a Linear (models/modules.h), how it runs.
#pragma once

namespace tetra {

enum class TpStyle {
  // A full copy on every tp rank that sees the whole (replicated) activation, so its gradient is
  // complete on every rank (the families' sequence-parallel plans do not use it; a plan without
  // sequence parallelism gives norms and row-parallel biases this style).
  Replicated,
  // [out, in] split along out (dim 0): a replicated (all-gathered) input, out/tp output features
  // per rank. A bias splits with it. A fused Param splits each of its parts (Param::parts)
  // separately: q, k, v per head, gate and up per half, so each rank holds whole heads.
  ColumnParallel,
  // [out, in] split along in (dim 1): each rank reads its in/tp input features and writes partial
  // sums, reduced over tp (all-reduce, or reduce-scatter into a sequence-parallel residual stream).
  RowParallel,
  // The token embedding [V, C] split along V: each rank looks up the ids in its rows (zeros
  // elsewhere) and the outputs are summed over tp (reduce-scatter along the sequence).
  VocabParallelEmbedding,
  // The output layer [V, C] split along V: logits sharded by vocabulary, the cross-entropy computed
  // across the shards (loss parallel), no [N, V] tensor gathered.
  VocabParallelOutput,
  // Replicated weights that act on a sequence-sharded activation (sequence parallelism): norm
  // weights, the bias of a row-parallel projection (added after the reduce-scatter), GPT-2's
  // position table. Each rank's gradient covers its tokens only: summed over tp as well as dp.
  SequenceParallel,
  // Replicated weights applied to each head of a column-parallel output (Qwen3's q_norm and k_norm
  // over the heads of q and k): each rank's gradient covers its heads only, so it is summed over tp
  // as well as dp, with or without sequence parallelism.
  PerHead,
};
const char* tp_style_name(TpStyle s);

}  // namespace tetra
