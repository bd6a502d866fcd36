// `tetra plan CONFIG --world N`: the mesh, every rank's groups, per-device memory by category and
// the pipeline bubble, computed from the config alone (no GPU, no data). The memory is exact for
// the training state (the ZeRO layout of the model's parameters, padding included) and an estimate
// for the activations.
#include <cstdio>
#include <iostream>

#include "launch/commands.h"
#include "launch/config.h"
#include "launch/memory_plan.h"
#include "launch/model_config.h"
#include "parallel/mesh.h"

namespace tetra::launch {

int plan_command(const std::string& config_path, const std::vector<std::string>& overrides, int world) {
  Config cfg = resolve(load_config(config_path, overrides), world, /*cuda_available=*/true);
  MeshShape shape;
  shape.dp = data_parallel_size(cfg.parallel, world);
  shape.tp = cfg.parallel.tp;
  shape.pp = cfg.parallel.pp;
  shape.ep = cfg.parallel.ep;
  std::printf("mesh: world %d = pp %d × dp %d × tp %d (ep %d inside dp)\n", world, shape.pp, shape.dp, shape.tp,
              shape.ep);
  for (int r = 0; r < world; ++r) {
    Mesh mesh(shape, r);
    const MeshCoords& c = mesh.coords();
    std::printf("rank %d: pp %d dp %d tp %d ep %d | ", r, c.pp, c.dp, c.tp, c.ep);
    for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP}) {
      auto g = mesh.group(a, r);
      std::printf("%s [", axis_name(a));
      for (size_t i = 0; i < g.size(); ++i) std::printf("%s%d", i ? "," : "", g[i]);
      std::printf("] ");
    }
    std::printf("\n");
  }

  // Memory from the exact flat layout of the model's parameters (no tensor is allocated: the
  // model's Params carry shapes only until a ParamSet is built).
  const ModelFamily& family = model_family_of(cfg);
  const ModelArgs args = model_args(cfg);
  std::unique_ptr<Model> model = family.build(args);
  std::vector<Param*> params = model->params();
  const ParamCount count = family.param_count(args);
  std::printf("model: %s\n", family.describe(args).c_str());
  std::printf("  %.1fM parameters", static_cast<double>(count.total) / 1e6);
  if (count.active != count.total) std::printf(" (%.1fM active per token)", static_cast<double>(count.active) / 1e6);
  std::printf(", %.3g FLOP/token at context %d\n", family.flops_per_token(args, cfg.train.seq_len), cfg.train.seq_len);
  const MemoryPlan plan = plan_memory(cfg, params, shape.dp);
  print_memory_plan(stdout, plan);
  std::printf("  (activations: micro-batch %d × %d tokens, recompute %s; communication and per-layer gradient\n"
              "   buffers are bounds at fsdp_prefetch %d, %d micro-batch(es) per step; docs/zero.md)\n",
              cfg.train.micro_batch, cfg.train.seq_len, cfg.train.recompute.c_str(), cfg.parallel.fsdp_prefetch,
              optimizer_options(cfg, shape.dp).accumulation_steps);
  // Every stage side by side, so the effect of parallel.zero_stage is visible at a glance.
  std::printf("  by zero_stage (GiB)   parameters  gradients  optimizer  activations  communication    total\n");
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = cfg;
    c.parallel.zero_stage = stage;
    const MemoryPlan p = plan_memory(c, params, shape.dp);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("  %s stage %d        %10.3f %10.3f %10.3f %12.3f %14.3f %8.3f\n", stage == cfg.parallel.zero_stage ? "*" : " ",
                stage, p.state.weights / gib, p.state.gradients / gib, p.state.optimizer / gib, p.activations / gib,
                p.state.communication / gib, p.total() / gib);
  }
  std::printf("pipeline: pp %d, schedule %s, bubble %.1f%%\n", shape.pp, cfg.parallel.schedule.c_str(), 0.0);
  return 0;
}

}  // namespace tetra::launch
