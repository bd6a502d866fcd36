// Learning-rate schedule: linear warmup from 0 over warmup_steps, then
//   cosine | linear: decay from lr to min_lr over the steps after the warmup;
//   constant: lr;
//   wsd: lr (the stable phase) until the last decay_steps, which decay to min_lr (their last step
//        at min_lr exactly) by decay_shape: linear 1 - p, cosine (1 + cos πp) / 2, sqrt 1 - √p.
// step is 0-based: the LR used by optimizer step `step`. Under wsd the LR of a step in the warmup
// or the stable phase does not depend on total_steps, so a run extended on resume keeps them.
#pragma once
#include <cstdint>

#include "launch/config/config.h"

namespace tetra::launch {

struct LrSchedule {
  LrDecay kind = LrDecay::Cosine;  // optimizer.schedule
  double lr = 3e-4, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1;
  int64_t decay_steps = 1;                      // wsd: the last steps, which decay
  DecayShape shape = DecayShape::Linear;        // wsd: optimizer.decay_shape
  double at(int64_t step) const;
  int64_t decay_start() const { return total_steps - decay_steps; }  // wsd: the first step below lr
  // The schedule a config describes (optimizer.*, over train.steps).
  static LrSchedule of(const Config& cfg);
};

}  // namespace tetra::launch
