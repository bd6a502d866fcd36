#include "launch/train/pipeline_plan.h"

#include <numeric>

#include "launch/config/model.h"
#include "parallel/pipeline/generators.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/rank_groups.h"

namespace tetra::launch {

namespace {

// The family's per-layer costs (embedding, the blocks, the output layer), checked to have that shape.
std::vector<LayerCost> layer_costs_of(const Config& cfg) {
  std::vector<LayerCost> costs = model_family_of(cfg).layer_costs(model_args(cfg), activation_shape(cfg));
  TETRA_CHECK(costs.size() == static_cast<size_t>(cfg.model.n_layers) + 2, "model family ", cfg.model.arch, " gives ",
              costs.size(), " layer costs for ", cfg.model.n_layers,
              " blocks; a pipeline needs the embedding, every block and the output layer");
  return costs;
}

std::vector<double> forward_flops(const std::vector<LayerCost>& costs) {
  std::vector<double> out;
  for (const LayerCost& c : costs) out.push_back(c.forward_flops);
  return out;
}

}  // namespace

std::vector<int> pipeline_stage_layers(const Config& cfg) {
  if (!cfg.parallel.stage_layers.empty()) return cfg.parallel.stage_layers;
  const int stages = pipeline_stages(cfg.parallel);
  if (stages == 1) return {static_cast<int>(cfg.model.n_layers)};
  return split_layers_by_cost(forward_flops(layer_costs_of(cfg)), stages);
}

PipelinePlan plan_pipeline(const Config& cfg, const std::string& costs_text) {
  PipelinePlan p;
  const ParallelConfig& par = cfg.parallel;
  p.schedule = make_schedule(choice_name(par.schedule), par.pp, par.micro_batches);
  if (par.pp == 1 && par.moe_overlap) {
    // Two micro-batches in flight: each forward beside the previous one's backward (docs/moe.md).
    p.schedule.name = "forward_backward_pairs";
    p.schedule.ranks[0] = forward_backward_pairs_ops(par.micro_batches);
  }
  p.stage_layers = pipeline_stage_layers(cfg);
  p.split_by_cost = par.stage_layers.empty();
  const int stages = p.schedule.layout.stages();

  // Default costs from the forward FLOPs of each stage's layers (the model family's), in units of
  // a pipeline rank's share of the model's forward (total / pp), so that schedules with more,
  // smaller stages per rank are drawn on the same clock. B = 2·F; W = F, the weight-gradient GEMMs
  // repeating the forward's (attention's weightless score products make it a slight overestimate).
  const std::vector<LayerCost> layers = layer_costs_of(cfg);
  const std::vector<double> f = stage_costs(forward_flops(layers), p.stage_layers);
  const double mean = std::accumulate(f.begin(), f.end(), 0.0) / static_cast<double>(par.pp);
  PipelineCosts model;
  model.f.clear();
  model.b.clear();
  model.w.clear();
  for (int s = 0; s < stages; ++s) {
    model.f.push_back(f[static_cast<size_t>(s)] / mean);
    model.b.push_back(2 * f[static_cast<size_t>(s)] / mean);
    model.w.push_back(f[static_cast<size_t>(s)] / mean);
  }
  p.costs_from_model = costs_text.empty();
  p.costs = p.costs_from_model ? model : PipelineCosts::parse(costs_text, stages, model);
  p.sim = simulate(p.schedule, p.costs);

  std::vector<double> bytes;
  for (const LayerCost& c : layers) bytes.push_back(c.activation_bytes);
  p.stage_activation_bytes = stage_costs(bytes, p.stage_layers);
  for (int r = 0; r < par.pp; ++r)
    p.peak_activation_bytes.push_back(peak_activation_bytes(p.schedule, r, p.stage_activation_bytes));
  return p;
}

std::vector<Param*> pipeline_rank_params(const PipelinePlan& plan, int rank, const std::vector<Param*>& all) {
  const std::vector<int> layers = pipeline_rank_layers(plan, rank);
  std::vector<Param*> out;
  for (Param* p : all)
    if (holds(layers, param_use(*p))) out.push_back(p);
  return out;
}

MemoryPlan pipeline_memory_plan(const Config& cfg, const PipelinePlan& plan, int rank, const std::vector<Param*>& all,
                                int dp) {
  if (cfg.parallel.pp == 1 && !cfg.parallel.moe_overlap) return plan_memory(cfg, all, dp);
  MemoryPlan m = plan_memory(cfg, pipeline_rank_params(plan, rank, all), dp);
  m.activations = plan.peak_activation_bytes[static_cast<size_t>(rank)] +
                  model_family_of(cfg).backward_working_bytes(model_args(cfg), activation_shape(cfg));
  return m;
}

std::vector<int> pipeline_rank_layers(const PipelinePlan& plan, int rank) {
  return tetra::pipeline_rank_layers(plan.schedule.layout, plan.stage_layers, rank);
}

}  // namespace tetra::launch
