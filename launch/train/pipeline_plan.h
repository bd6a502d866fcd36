// The pipeline of a resolved config, planned without devices (docs/pipeline.md): how
// the model's layers are cut into stages, every pipeline rank's schedule, the costs per stage and
// the simulated step. `tetra plan` prints it; the trainer cuts its model the same way.
#pragma once
#include <string>
#include <vector>

#include "launch/config/config.h"
#include "launch/train/memory_plan.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/pipeline/schedule.h"

namespace tetra::launch {

// The stage split a run uses, model.n_layers per stage: parallel.stage_layers when set, else the
// blocks divided by the model's forward FLOPs, the embedding counted with the first stage and the
// output layer with the last (parallel/pipeline/stage_split.h). One entry at pp = 1.
std::vector<int> pipeline_stage_layers(const Config& cfg);

struct PipelinePlan {
  Schedule schedule;                // with its P2P batches
  std::vector<int> stage_layers;    // model.n_layers per stage
  bool split_by_cost = true;        // false: parallel.stage_layers
  PipelineCosts costs;
  bool costs_from_model = true;     // false: given as --costs
  PipelineSimulation sim;
  std::vector<double> stage_activation_bytes;  // one micro-batch's activations kept per stage
  std::vector<double> peak_activation_bytes;   // per pipeline rank, at its peak
};

// costs_text: `--costs` ("" = from the model family's forward FLOPs per stage: F, B = 2·F, W = F,
// in units of the model's forward divided by pp).
PipelinePlan plan_pipeline(const Config& cfg, const std::string& costs_text = "");

// The layers (Layer::index) pipeline rank `rank` holds: those of its chunks' stages, in chunk order
// (parallel/rank_groups.h).
std::vector<int> pipeline_rank_layers(const PipelinePlan& plan, int rank);

// The parameters of the model's `all` that pipeline rank `rank` holds: those of its layers, tied
// ones (GPT-2's wte, read by the embedding and the LM head) on every rank that uses them.
std::vector<Param*> pipeline_rank_params(const PipelinePlan& plan, int rank, const std::vector<Param*>& all);

// What pipeline rank `rank` holds in memory (launch/train/memory_plan.h): the training state of its
// parameters, the activations of its stages at the schedule's peak plus one layer's backward
// working set. At pp = 1, plan_memory of the whole model.
MemoryPlan pipeline_memory_plan(const Config& cfg, const PipelinePlan& plan, int rank, const std::vector<Param*>& all,
                                int dp);

}  // namespace tetra::launch
