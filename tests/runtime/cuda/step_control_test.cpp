// The device-side step (runtime/step_control.h) on CUDA against its CPU twin: the loss-sum and
// sum-of-squares accumulators in fp64, the step control kernel (bit for bit, over random losses,
// norms, NaNs and both non-finite modes) and AdamW driven by the control, applied and skipped.
#include <cmath>
#include <limits>

#include "runtime/multi_tensor.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

Tensor host64(const std::vector<double>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::F64);
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t;
}

std::vector<double> down64(const Tensor& dev) {
  Tensor h = download_raw(dev);
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

TEST(GpuStepControl, SumAccumulateAndSquaresIntoFp64) {
  TETRA_REQUIRE_GPU();
  Rng rng(3);
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{16 * 1024 + 5}, int64_t{(1 << 21) + 8}}) {
    Tensor x = representable(random_host(rng, {n}, 1.0, 2.0), DType::BF16);
    for (DType dt : {DType::F32, DType::BF16}) {
      Tensor acc = host64({0.25});
      ops::sum_accumulate(acc, x);
      ops::sum_accumulate(acc, x);
      Tensor gacc = upload_raw(host64({0.25}));
      Tensor gx = upload(x, dt);
      ops::sum_accumulate(gacc, gx);
      ops::sum_accumulate(gacc, gx);
      const double want = acc.data<double>()[0], got = down64(gacc)[0];
      EXPECT_NEAR(got, want, 1e-12 * std::abs(want) * std::sqrt(static_cast<double>(n))) << "n=" << n << " " << name(dt);

      Tensor sq = host64({1.5});
      ops::sum_squares(sq, x);
      Tensor gsq = upload_raw(host64({1.5}));
      ops::sum_squares(gsq, gx);
      EXPECT_NEAR(down64(gsq)[0], sq.data<double>()[0], 1e-6 * sq.data<double>()[0]) << "n=" << n << " " << name(dt);
    }
  }
}

TEST(GpuStepControl, KernelEqualsCpuTwinBitForBit) {
  TETRA_REQUIRE_GPU();
  Rng rng(11);
  const int steps = 7;
  std::vector<double> lrs(steps);
  for (int i = 0; i < steps; ++i) lrs[i] = 6e-4 * std::cos(0.3 * i) + 1e-5 * rng.uniform();
  const Tensor lr_host = host64(lrs), lr_dev = upload_raw(lr_host);
  for (bool stop : {false, true}) {
    StepControlConfig cfg;
    cfg.max_norm = 0.8;
    cfg.tokens = 16 * 1024;
    cfg.beta1 = 0.9f;
    cfg.beta2 = 0.95f;
    cfg.stop_on_nonfinite = stop;
    std::vector<double> start(kStepControlSlots, 0.0);
    start[kCtlScheduleStep] = 1;
    start[kCtlUpdates] = 1;
    Tensor ch = host64(start), cd = upload_raw(host64(start));
    for (int s = 0; s < 9; ++s) {  // past the table's end too
      double loss = (3.0 + rng.uniform()) * cfg.tokens, sq = std::pow(10.0, 4.0 * rng.uniform() - 2.0);
      if (s == 4) sq = std::numeric_limits<double>::infinity();
      if (s == 6) loss = std::numeric_limits<double>::quiet_NaN();
      ops::step_control(ch, host64({loss}), host64({sq}), lr_host, cfg);
      ops::step_control(cd, upload_raw(host64({loss})), upload_raw(host64({sq})), lr_dev, cfg);
      const std::vector<double> got = down64(cd);
      for (int k = 0; k < kStepControlSlots; ++k) {
        const double want = ch.data<double>()[k];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[k])) << "slot " << k << " step " << s << " stop " << stop;
        else EXPECT_EQ(got[k], want) << "slot " << k << " step " << s << " stop " << stop;
      }
    }
  }
}

TEST(GpuStepControl, AdamWFromControlMatchesCpuAndSkips) {
  TETRA_REQUIRE_GPU();
  Rng rng(21);
  const int64_t n = 3 * 8192 + 7;
  Tensor master = random_host(rng, {n}, 0.05), grad = representable(random_host(rng, {n}, 0.01), DType::BF16);
  Tensor m = random_host(rng, {n}, 0.001), v = random_host(rng, {n}, 1e-5, 2e-5);
  for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::abs(v.data<float>()[i]) + 1e-7f;  // v ≥ 0
  StepControlConfig cfg;
  cfg.max_norm = 0.1;
  cfg.tokens = 1024;
  const Tensor lr_host = host64({1e-3, 8e-4, 6e-4});
  for (bool skip : {false, true}) {
    Tensor ch = host64(std::vector<double>(kStepControlSlots, 0.0));
    ch.data<double>()[kCtlScheduleStep] = 1;
    ch.data<double>()[kCtlUpdates] = 5;
    ops::step_control(ch, host64({skip ? NAN : 2.5 * 1024}), host64({0.04}), lr_host, cfg);
    Tensor cd = upload_raw(ch);

    Tensor p = representable(master, DType::F32), mm = representable(m, DType::F32), vv = representable(v, DType::F32);
    ops::AdamWHyper h;
    ops::AdamWSegment cs{p, grad, mm, vv, Tensor(), 0.1f, Tensor()};
    ops::adamw_update_multi({cs}, h, &ch);

    ops::AdamWSegment gs{upload(master, DType::F32), upload(grad, DType::BF16), upload(m, DType::F32),
                         upload(v, DType::F32), poisoned({n}, DType::BF16), 0.1f, Tensor()};
    const std::vector<double> before = download(gs.working);
    ops::adamw_update_multi({gs}, h, &cd);
    EXPECT_LE(close_error(gs.master, p), kTolF32) << (skip ? "skipped" : "applied");
    EXPECT_LE(close_error(gs.m, mm), kTolF32);
    EXPECT_LE(close_error(gs.v, vv), kTolF32);
    if (skip) {
      EXPECT_EQ(close_error(gs.master, master), 0.0) << "a skipped step must not move the weights";
      const std::vector<double> after = download(gs.working);
      for (int64_t i = 0; i < n; i += 997) ASSERT_TRUE(std::isnan(after[i]) == std::isnan(before[i]) && (std::isnan(after[i]) || after[i] == before[i]));
    } else {
      EXPECT_LE(close_error(gs.working, p), kTolBF16);
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
