// parallelize(): applies the parallelisms of one rank to a model, in one call (torchtitan's
// parallelize_llama; ARCHITECTURE.md §9: parallelisms are applied to a model, not baked into it).
//   tensor parallelism  the family's plan (ModelFamily::tensor_parallel_plan) places every
//                       parameter — this rank's slices — and, given the group, sets each layer's
//                       projections to the style the plan names (models/modules.h Linear,
//                       models/vocab_embedding.h, models/output_projection.h);
//   expert parallelism  every expert-owned parameter keeps this rank's experts' rows
//                       (parallel/expert/placement.h) and, given the exchanges, every MoE MLP uses them.
// Run it on a model fresh from ModelFamily::build, before a ParamSet binds its parameters. Without
// the group and the exchanges (null) it only places, which is what a memory plan of a throw-away
// model needs: the parameters carry shapes only until a ParamSet is built.
#pragma once
#include "models/model.h"
#include "models/model_family.h"
#include "parallel/expert/expert_parallel.h"
#include "parallel/tensor/tensor_parallel.h"

namespace tetra {

struct ParallelizeContext {
  // Tensor parallelism: group size, this rank's index in it (mesh coordinate tp), sequence parallelism
  // (parallel.sequence_parallel); the group the layers run over (null: place only).
  int tp = 1;
  int tp_rank = 0;
  bool sequence_parallel = false;
  TensorParallel* tensor_parallel = nullptr;
  // Expert parallelism: group size (parallel.ep); the exchanges of this rank (null: place only).
  int ep = 1;
  ExpertParallel* expert_parallel = nullptr;
};

// Applies `c` to `model` (built by `family` from `args`). Fails with a Config error naming
// parallel.tp where the family's plan does not fit the model over c.tp ranks or its layers have no
// tensor-parallel form, and where c.ep does not divide an expert-owned parameter's rows.
void parallelize(Model& model, const ModelFamily& family, const ModelArgs& args, const ParallelizeContext& c);

}  // namespace tetra
