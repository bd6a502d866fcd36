// What one device of a training job holds in memory, by category (ARCHITECTURE.md §4): the
// training state from the ZeRO layout of the model's parameters (parallel/zero/memory.h — exact,
// padding included), the activations of one micro-batch (the model family's estimate),
// and the communication buffers. `tetra plan` prints it without devices; the trainer prints the
// same at start-up (rank 0) and, at the end, the measured peak beside it.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "launch/config/config.h"
#include "parallel/distributed_optimizer.h"

namespace tetra::launch {

// The optimizer options a resolved config asks for (stage, buckets, prefetch, AdamW, micro-batches).
DistributedOptimizerOptions optimizer_options(const Config& cfg, int dp);

// Bytes of activations the model keeps for one micro-batch in training, as its family counts them
// (ModelFamily::activation_bytes: what every layer saves for backward under train.recompute, plus
// the working set of one layer's backward).
double activation_bytes(const Config& cfg);

struct MemoryPlan {
  int zero_stage = 0, dp = 1;
  std::string weight_dtype, grad_dtype, state_dtype;  // state: AdamW's moments
  int64_t params = 0;       // parameters of the model (unpadded)
  StateMemory state;        // weights, gradients, optimizer state, communication buffers
  double activations = 0;   // estimate
  double fp8_weights = 0;   // train.fp8: the step's FP8 casts of the weights (models/fp8_step_weights.h)
  double total() const { return state.total() + activations + fp8_weights; }
};

// From the config and the model's parameters alone (no allocation): what a run would hold. The
// parameters are one rank's as parallelize() placed them (models/parallelize.h): its tensor-parallel
// slices, its experts' rows.
MemoryPlan plan_memory(const Config& cfg, const std::vector<Param*>& params, int dp);

// The same for a running job, from its optimizer's own accounting.
MemoryPlan plan_memory(const Config& cfg, const DistributedOptimizer& optimizer, const ParamSet& params, int dp);

// Prints the categories in bytes and GiB, the total and the persistent state per parameter.
void print_memory_plan(std::FILE* out, const MemoryPlan& plan, const std::string& indent = "  ");

}  // namespace tetra::launch
