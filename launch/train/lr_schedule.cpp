#include "launch/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "launch/config/config.h"

namespace tetra::launch {

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == LrDecay::Constant) return lr;
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  double factor = kind == LrDecay::Linear ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr + (lr - min_lr) * factor;
}

LrSchedule LrSchedule::of(const Config& cfg) {
  LrSchedule s;
  s.kind = cfg.optimizer.schedule;
  s.lr = cfg.optimizer.lr;
  s.min_lr = cfg.optimizer.min_lr;
  s.warmup_steps = cfg.optimizer.warmup_steps;
  s.total_steps = cfg.train.steps;
  return s;
}

}  // namespace tetra::launch
