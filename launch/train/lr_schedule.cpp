#include "launch/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "launch/config/config.h"

namespace tetra::launch {

namespace {
// The share of (lr - min_lr) left at decay progress p in [0, 1]: 1 at 0, 0 at 1.
double remaining(DecayShape shape, double p) {
  switch (shape) {
    case DecayShape::Cosine: return 0.5 * (1.0 + std::cos(M_PI * p));
    case DecayShape::Sqrt: return 1.0 - std::sqrt(p);
    case DecayShape::Linear: break;
  }
  return 1.0 - p;
}
}  // namespace

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == LrDecay::Constant) return lr;
  if (kind == LrDecay::Wsd) {
    if (step < decay_start()) return lr;
    // Decay step i (0-based) of decay_steps is at progress (i + 1) / decay_steps: the first is
    // already below lr, the last (the run's last step) at min_lr.
    const double d = static_cast<double>(std::max<int64_t>(1, decay_steps));
    const double progress = std::clamp(static_cast<double>(step - decay_start() + 1) / d, 0.0, 1.0);
    return min_lr + (lr - min_lr) * remaining(shape, progress);
  }
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(span), 0.0, 1.0);
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
  s.decay_steps = wsd_decay_steps(cfg.optimizer, cfg.train.steps);
  s.shape = cfg.optimizer.decay_shape;
  return s;
}

}  // namespace tetra::launch
