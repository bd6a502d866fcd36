// Learning-rate schedule: linear warmup from 0 over warmup_steps, then cosine (or linear) decay to
// min_lr at the last step, or constant. step is 0-based: the LR used by optimizer step `step`.
#pragma once
#include <cstdint>

#include "launch/config/config.h"

namespace tetra::launch {

struct LrSchedule {
  LrDecay kind = LrDecay::Cosine;  // optimizer.schedule
  double lr = 3e-4, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1;
  double at(int64_t step) const;
  // The schedule a config describes (optimizer.*, over train.steps).
  static LrSchedule of(const Config& cfg);
};

}  // namespace tetra::launch
