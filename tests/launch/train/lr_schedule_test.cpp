// The learning-rate schedules against their formulas written out by hand, and the property wsd
// exists for: a longer train.steps leaves the LR of every step before the old decay unchanged.
#include "launch/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tetra::launch {
namespace {

// lr 1, min_lr 0.1, 2 warmup steps, 10 steps, the last 4 decaying (steps 6..9, 0-based).
Config wsd_config(DecayShape shape, int steps = 10) {
  Config c;
  c.train.steps = steps;
  c.optimizer.lr = 1.0;
  c.optimizer.min_lr = 0.1;
  c.optimizer.warmup_steps = 2;
  c.optimizer.schedule = LrDecay::Wsd;
  c.optimizer.decay_steps = 4;
  c.optimizer.decay_shape = shape;
  return c;
}

// Every value is a few double operations from its formula: exact to a few ulps.
constexpr double kTol = 1e-15;

TEST(LrSchedule, WsdLinear) {
  const LrSchedule s = LrSchedule::of(wsd_config(DecayShape::Linear));
  const double want[10] = {0.5, 1, 1, 1, 1, 1, 0.1 + 0.9 * 0.75, 0.1 + 0.9 * 0.5, 0.1 + 0.9 * 0.25, 0.1};
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(s.at(i), want[i], kTol) << "step " << i;
  EXPECT_NEAR(s.at(8), 0.325, kTol);
  EXPECT_EQ(s.decay_start(), 6);
}

TEST(LrSchedule, WsdSqrt) {
  // MiniCPM's 1 - sqrt(progress): lr = min + (max - min)·(1 - √p), p = 1/4, 2/4, 3/4, 1.
  const LrSchedule s = LrSchedule::of(wsd_config(DecayShape::Sqrt));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(s.at(i), i == 0 ? 0.5 : 1.0, kTol) << "step " << i;
  EXPECT_NEAR(s.at(6), 0.55, kTol);  // 1 - √(1/4) = 1/2
  EXPECT_NEAR(s.at(7), 0.1 + 0.9 * (1 - std::sqrt(0.5)), kTol);
  EXPECT_NEAR(s.at(7), 0.36360389693210724, 1e-12);
  EXPECT_NEAR(s.at(8), 0.1 + 0.9 * (1 - std::sqrt(0.75)), kTol);
  EXPECT_NEAR(s.at(9), 0.1, kTol);
}

TEST(LrSchedule, WsdCosine) {
  const LrSchedule s = LrSchedule::of(wsd_config(DecayShape::Cosine));
  for (int i = 1; i < 6; ++i) EXPECT_EQ(s.at(i), 1.0) << "step " << i;
  EXPECT_NEAR(s.at(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), kTol);
  EXPECT_NEAR(s.at(7), 0.55, kTol);
  EXPECT_NEAR(s.at(8), 0.1 + 0.9 * 0.5 * (1 + std::cos(3 * M_PI / 4)), kTol);
  EXPECT_NEAR(s.at(9), 0.1, kTol);
}

TEST(LrSchedule, WsdDecayFraction) {
  Config c = wsd_config(DecayShape::Linear, 100);
  c.optimizer.decay_steps = 0;  // neither set: 0.2 of train.steps
  EXPECT_EQ(wsd_decay_steps(c.optimizer, 100), 20);
  EXPECT_EQ(LrSchedule::of(c).decay_start(), 80);
  EXPECT_EQ(LrSchedule::of(c).at(79), 1.0);
  EXPECT_NEAR(LrSchedule::of(c).at(80), 0.1 + 0.9 * 19.0 / 20.0, kTol);
  c.optimizer.decay_fraction = 0.25;
  EXPECT_EQ(wsd_decay_steps(c.optimizer, 10), 3);  // 2.5 rounds away from zero
  EXPECT_EQ(wsd_decay_steps(c.optimizer, 1), 1);   // at least one step decays
  c.optimizer.decay_steps = 7;
  c.optimizer.decay_fraction = 0;
  EXPECT_EQ(wsd_decay_steps(c.optimizer, 100), 7);
}

TEST(LrSchedule, WsdExtendedKeepsStablePart) {
  for (bool by_fraction : {false, true}) {
    Config a = wsd_config(DecayShape::Sqrt, 10), b = wsd_config(DecayShape::Sqrt, 25);
    if (by_fraction) {
      a.optimizer.decay_steps = b.optimizer.decay_steps = 0;
      a.optimizer.decay_fraction = b.optimizer.decay_fraction = 0.3;
    }
    const LrSchedule short_run = LrSchedule::of(a), long_run = LrSchedule::of(b);
    for (int64_t i = 0; i < short_run.decay_start(); ++i) EXPECT_EQ(short_run.at(i), long_run.at(i)) << "step " << i;
    EXPECT_LT(short_run.at(short_run.decay_start()), long_run.at(short_run.decay_start()));
    EXPECT_NEAR(long_run.at(24), 0.1, kTol);
  }
  // Cosine over train.steps cannot: a longer run changes the LR right after the warmup.
  Config a = wsd_config(DecayShape::Linear, 10), b = wsd_config(DecayShape::Linear, 25);
  a.optimizer.schedule = b.optimizer.schedule = LrDecay::Cosine;
  a.optimizer.decay_steps = b.optimizer.decay_steps = 0;
  EXPECT_NE(LrSchedule::of(a).at(3), LrSchedule::of(b).at(3));
}

// The other schedules keep their formulas: cosine from lr at the first step after the warmup
// towards min_lr at step train.steps.
TEST(LrSchedule, CosineAndLinear) {
  Config c = wsd_config(DecayShape::Linear);
  c.optimizer.schedule = LrDecay::Cosine;
  c.optimizer.decay_steps = 0;
  const LrSchedule cosine = LrSchedule::of(c);
  for (int i = 2; i < 10; ++i)
    EXPECT_NEAR(cosine.at(i), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * (i - 2) / 8.0)), kTol) << "step " << i;
  c.optimizer.schedule = LrDecay::Linear;
  const LrSchedule linear = LrSchedule::of(c);
  for (int i = 2; i < 10; ++i) EXPECT_NEAR(linear.at(i), 0.1 + 0.9 * (1 - (i - 2) / 8.0), kTol) << "step " << i;
}

}  // namespace
}  // namespace tetra::launch
