// The tensor-parallel plan of a model, as data (torchtitan's parallelize plan, Megatron-Core's
// layer specs): how every parameter splits over the tp group and how activations enter and leave
// every layer. A family writes it for a given shape (ModelFamily::tensor_parallel_plan); the
// tensor-parallel strategy applies it from outside (ARCHITECTURE.md §3, §9). Nothing here runs.
#pragma once
#include <string>
#include <vector>

#include "models/model.h"
#include "models/tp_style.h"

namespace tetra {


// How an activation tensor lies over the tp group between layers.
enum class TpLayout {
  Replicated,      // every rank holds all of it
  SequenceShard,   // split along tokens (sequence parallelism): [N/tp, C] per rank
  VocabShard,      // the logits, split along the vocabulary
};
const char* tp_layout_name(TpLayout l);

struct TpParamPlan {
  std::string param;  // Param::name (tetra's name; a fused Param's parts split with it)
  TpStyle style = TpStyle::Replicated;
  // ColumnParallel of a Param with parts: a part with fewer whole units than tp ranks, whose units
  // divide tp, is not split but replicated, each unit on tp/units consecutive ranks (grouped-query
  // attention's key/value heads when tp > n_kv_heads, as Megatron-LM does it; their gradients are
  // summed over those ranks: AxisPlacement::part_replicas).
  bool replicate_parts = false;
  // The dimension split over tp: 0 or 1 (−1: not split). A Param with parts splits dim 0 per part.
  int split_dim() const;
};

struct TpLayerPlan {
  std::string layer;  // Layer::name()
  TpLayout input = TpLayout::SequenceShard, output = TpLayout::SequenceShard;
};

struct TensorParallelPlan {
  std::vector<TpParamPlan> params;  // one entry per parameter of the model
  std::vector<TpLayerPlan> layers;  // one entry per layer, in model order
  const TpParamPlan* find(const std::string& param) const;  // nullptr when absent
};

// What is wrong with `plan` for `model` split over `tp` ranks, one line each (empty: nothing): a
// parameter without an entry or with two, an entry for no parameter, a split dimension (or a part's
// whole units) that tp does not divide (nor, where the entry replicates parts, is a multiple of),
// a layer missing or out of order.
std::vector<std::string> tensor_parallel_plan_problems(const TensorParallelPlan& plan, Model& model, int tp);

// Places every parameter of `model` on a tp group of `tp` ranks, this one `rank`, as `plan` says
// (ParamPlacement; parallel/param_placement.h): column-parallel and vocabulary-parallel weights
// shard dim 0 (a fused weight per part, or with parts replicated as the entry says), row-parallel
// ones dim 1; replicated ones stay whole;
// sequence-parallel ones stay whole with their gradient summed over tp (placement.grad_over_tp)
// when `sequence_parallel`, else they act on replicated activations and are plain replicated;
// per-head ones stay whole with their gradient always summed over tp.
// Throws a Config error naming parallel.tp and the plan's problems. At tp = 1 nothing changes.
void apply_tensor_parallel_plan(const TensorParallelPlan& plan, Model& model, int tp, int rank,
                                bool sequence_parallel);

// The tensor-parallel communication of one rank, from the plan and the parameters' full shapes,
// as the layers issue it (parallel/tensor/tensor_parallel.h): bytes this rank sends with ring collectives
// ((tp − 1)/tp of a gathered or scattered [N, W] tensor, twice that for an all-reduce).
//   per micro-batch of `tokens` tokens, forward and backward: with sequence parallelism an
//     all-gather before and a reduce-scatter after every column-parallel weight's GEMM (forward)
//     and the reverse in backward, the same around row-parallel ones, the embedding's
//     reduce-scatter, the output layer's gathered input and its loss statistics; without it one
//     all-reduce per row-parallel output (forward), column-parallel input gradient (backward),
//     embedding and output layer. recompute_forward: the forward's collectives run again in
//     backward (train.recompute full).
//   per step: the all-reduce of the sequence-parallel weights' gradients over tp, and of replicated
//   parts' blocks over the r ranks holding each.
struct TpTraffic {
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0;  // per micro-batch
  double all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
  double step_all_reduce_bytes = 0;  // sequence-parallel gradients and replicated blocks, once per step
  double micro_batch_bytes() const { return all_gather_bytes + reduce_scatter_bytes + all_reduce_bytes; }
};
TpTraffic tensor_parallel_traffic(const TensorParallelPlan& plan, Model& model, int64_t tokens, int tp,
                                  bool sequence_parallel, int64_t value_bytes, int64_t grad_bytes,
                                  bool recompute_forward);

}  // namespace tetra
