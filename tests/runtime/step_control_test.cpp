// Step control (runtime/step_control.h) on the CPU: the device-side decisions equal the host-side
// ones they replace — clip_grad_norm_'s coefficient, AdamW's bias corrections, skipping and halting
// on a non-finite step — and AdamW driven by a control equals AdamW driven by host scalars.
#include <cmath>
#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "parallel/adamw.h"
#include "runtime/multi_tensor.h"
#include "tests/runtime/op_test_util.h"

namespace tetra::test {
namespace {

Tensor scalar64(double v) {
  Tensor t = Tensor::empty({1}, DType::F64);
  t.data<double>()[0] = v;
  return t;
}

Tensor lr_table(int n) {
  Tensor t = Tensor::empty({n}, DType::F64);
  for (int i = 0; i < n; ++i) t.data<double>()[i] = 1e-3 * (i + 1) / n;  // a warmup ramp
  return t;
}

TEST(StepControl, MatchesHostDecisionsStepByStep) {
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  control.data<double>()[kCtlScheduleStep] = 2;  // resumed after two steps, both applied
  control.data<double>()[kCtlUpdates] = 2;
  const Tensor lrs = lr_table(5);
  StepControlConfig cfg;
  cfg.max_norm = 1.0;
  cfg.tokens = 4096;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  const double grad_sq[] = {4.0, 0.25, std::numeric_limits<double>::quiet_NaN(), 9.0};
  int64_t updates = 2;
  for (int i = 0; i < 4; ++i) {
    const int64_t step = 2 + i;
    const double loss_sum = 3.5 * 4096 + i;
    ops::step_control(control, scalar64(loss_sum), scalar64(grad_sq[i]), lrs, cfg);
    const double* c = control.data<double>();
    const bool finite = std::isfinite(grad_sq[i]);
    if (finite) ++updates;
    EXPECT_EQ(c[kCtlScheduleStep], step + 1);
    EXPECT_EQ(c[kCtlUpdates], updates);
    EXPECT_EQ(c[kCtlSkipped], finite ? 0.0 : 1.0);
    EXPECT_EQ(c[kCtlNonFinite], finite ? 0.0 : 1.0);
    EXPECT_EQ(c[kCtlHalted], 0.0);  // skip mode never halts
    EXPECT_DOUBLE_EQ(c[kCtlLoss], loss_sum / 4096);
    const double want_lr = static_cast<float>(lrs.data<double>()[std::min<int64_t>(step, 4)]);
    EXPECT_EQ(c[kCtlLr], want_lr);
    if (!finite) continue;
    EXPECT_DOUBLE_EQ(c[kCtlGradNorm], std::sqrt(grad_sq[i]));
    EXPECT_EQ(c[kCtlGradScale], clip_coefficient(std::sqrt(grad_sq[i]), 1.0));
    const double bc1 = 1.0 - std::pow(0.9f, static_cast<double>(updates));
    const double bc2 = 1.0 - std::pow(0.95f, static_cast<double>(updates));
    EXPECT_EQ(c[kCtlStepSize], static_cast<float>(static_cast<double>(static_cast<float>(want_lr)) / bc1));
    EXPECT_EQ(c[kCtlInvBc2Sqrt], static_cast<float>(1.0 / std::sqrt(bc2)));
  }
}

TEST(StepControl, StopModeHaltsEveryLaterUpdateAndLrTableClamps) {
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  StepControlConfig cfg;
  cfg.stop_on_nonfinite = true;
  const Tensor lrs = lr_table(2);
  ops::step_control(control, scalar64(INFINITY), scalar64(1.0), lrs, cfg);
  EXPECT_EQ(control.data<double>()[kCtlHalted], 1.0);
  EXPECT_EQ(control.data<double>()[kCtlSkipped], 1.0);
  ops::step_control(control, scalar64(1.0), scalar64(1.0), lrs, cfg);
  EXPECT_EQ(control.data<double>()[kCtlSkipped], 1.0) << "halted: a finite step after a non-finite one is skipped";
  EXPECT_EQ(control.data<double>()[kCtlNonFinite], 0.0);
  EXPECT_EQ(control.data<double>()[kCtlUpdates], 0.0);
  ops::step_control(control, scalar64(1.0), scalar64(1.0), lrs, cfg);  // step 2 ≥ the table: its last entry
  EXPECT_EQ(control.data<double>()[kCtlLr], static_cast<double>(static_cast<float>(1e-3)));
  EXPECT_EQ(control.data<double>()[kCtlScheduleStep], 3.0);
}

TEST(StepControl, BadArgumentsAreNamed) {
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  Tensor short_control = Tensor::zeros({3}, DType::F64);
  Tensor f32 = Tensor::zeros({1}, DType::F32);
  StepControlConfig cfg;
  auto expect = [](const std::function<void()>& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "step_control accepted a bad " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("step_control"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect([&] { ops::step_control(short_control, scalar64(1), scalar64(1), lr_table(2), cfg); }, "control");
  expect([&] { ops::step_control(control, f32, scalar64(1), lr_table(2), cfg); }, "loss_sum");
  expect([&] { ops::step_control(control, scalar64(1), f32, lr_table(2), cfg); }, "grad_sq");
  expect([&] { ops::step_control(control, scalar64(1), scalar64(1), Tensor::zeros({0}, DType::F64), cfg); },
         "lr_table");
}

TEST(StepControl, NoClippingWhenMaxNormIsZero) {
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  StepControlConfig cfg;
  cfg.max_norm = 0;
  ops::step_control(control, scalar64(1.0), scalar64(1e6), lr_table(1), cfg);
  EXPECT_EQ(control.data<double>()[kCtlGradScale], 1.0);
}

TEST(StepControl, AdamWWithControlEqualsAdamWWithHostScalars) {
  Rng rng(5);
  const int64_t n = 777;
  Tensor p = random_tensor(rng, {n}), g = random_tensor(rng, {n}), m = random_tensor(rng, {n}, 0.01);
  Tensor v = random_tensor(rng, {n}, 1e-4, 2e-4);
  Tensor p2 = clone(p), m2 = clone(m), v2 = clone(v);
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  control.data<double>()[kCtlScheduleStep] = 3;
  control.data<double>()[kCtlUpdates] = 3;
  StepControlConfig cfg;
  cfg.max_norm = 0.5;
  cfg.beta2 = 0.95f;
  const Tensor lrs = lr_table(10);
  ops::step_control(control, scalar64(10.0), scalar64(2.0), lrs, cfg);

  ops::AdamWHyper h;
  h.beta2 = 0.95f;
  ops::AdamWSegment seg{p, g, m, v, Tensor(), 0.1f, Tensor()};
  ops::adamw_update_multi({seg}, h, &control);
  h.lr = static_cast<float>(lrs.data<double>()[3]);
  h.step = 4;
  h.grad_scale = clip_coefficient(std::sqrt(2.0), 0.5);
  ops::AdamWSegment seg2{p2, g, m2, v2, Tensor(), 0.1f, Tensor()};
  ops::adamw_update_multi({seg2}, h);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p.data<float>()[i], p2.data<float>()[i]) << i;
    ASSERT_EQ(m.data<float>()[i], m2.data<float>()[i]) << i;
    ASSERT_EQ(v.data<float>()[i], v2.data<float>()[i]) << i;
  }
  // A skipped step leaves everything as it was.
  ops::step_control(control, scalar64(NAN), scalar64(2.0), lrs, cfg);
  Tensor before = clone(p);
  ops::adamw_update_multi({seg}, h, &control);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p.data<float>()[i], before.data<float>()[i]) << i;
}

TEST(StepControl, SumAccumulateAddsInDouble) {
  Tensor acc = scalar64(0.5);
  Tensor x = Tensor::from_vector(std::vector<float>{1.25f, 2.5f, -1.0f}, {3});
  ops::sum_accumulate(acc, x);
  ops::sum_accumulate(acc, x);
  EXPECT_DOUBLE_EQ(acc.data<double>()[0], 0.5 + 2 * 2.75);
  Tensor acc64 = scalar64(1.0);
  ops::sum_squares(acc64, x);
  EXPECT_DOUBLE_EQ(acc64.data<double>()[0], 1.0 + 1.5625 + 6.25 + 1.0);
  Tensor bad = Tensor::from_vector(std::vector<float>{0.0f}, {1});
  try {
    ops::sum_accumulate(bad, x);
    ADD_FAILURE() << "sum_accumulate into an fp32 acc must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum_accumulate"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tetra::test
