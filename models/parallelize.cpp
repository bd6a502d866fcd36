#include "models/parallelize.h"

#include "models/moe_mlp.h"
#include "parallel/expert/placement.h"

namespace tetra {

void parallelize(Model& model, const ModelFamily& family, const ModelArgs& args, const ParallelizeContext& c) {
  if (c.tp > 1) {
    const TensorParallelPlan plan = family.tensor_parallel_plan(args);
    apply_tensor_parallel_plan(plan, model, c.tp, c.tp_rank, c.sequence_parallel);
    if (c.tensor_parallel) model.set_tensor_parallel(c.tensor_parallel, plan);
  }
  if (c.ep > 1) {
    place_experts(model.params(), c.ep);
    if (c.expert_parallel)
      for (MoeMlp* m : model.moe_layers()) m->set_expert_parallel(c.expert_parallel);
  }
}

}  // namespace tetra
