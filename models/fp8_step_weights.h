// The FP8 weight casts of a training step (Param::fp8_step): under train.fp8 every projection's
// weight is cast once a step, with the transposed copy its input gradient reads, instead of once per
// GEMM (each micro-batch's forward, its recompute and its input gradient). The trainer opens a scope
// around the step's forward and backward; evaluation, generation and tests that call the layers
// directly run without one and cast at each GEMM as before.
#pragma once
#include <vector>

#include "parallel/param.h"

namespace tetra {

// Enables the step copies of `params`' FP8 weights (Param::fp8_weight, and Param::fp8_grouped
// except under ZeRO-3, zero3 true, which gathers the experts' weights per use: a copy kept all step
// would hold what the sharding frees) for its lifetime, and drops them when it ends: the optimizer
// then changes the weights, and the memory goes back to the pool. The experts' amaxes of the last
// update (Param::fp8_update_amax) are stale from then on: the next update measures them again.
class Fp8StepWeights {
 public:
  explicit Fp8StepWeights(std::vector<Param*> params, bool zero3 = false);
  ~Fp8StepWeights();
  Fp8StepWeights(const Fp8StepWeights&) = delete;
  Fp8StepWeights& operator=(const Fp8StepWeights&) = delete;

 private:
  std::vector<Param*> params_;
};

// Bytes the step copies of `params` hold at most (the memory plans): codes and transposed codes of
// every FP8 weight (2 bytes an element) and their scales (a tensorwise grouped weight's: at most a
// float per row; a blockwise one's: its stack's blocks). 0 under ZeRO-3 (zero3 true), whose FP8
// weights come gathered already cast and whose grouped weights keep no copy.
double fp8_step_weight_bytes(const std::vector<Param*>& params, bool zero3);

}  // namespace tetra
