// CUDA AdamW (single tensor and multi-tensor) against the CPU twin: fp32 and bf16 gradients, working
// copies in fp32, bf16 or none, fp32 and bf16 moments (optimizer.state_dtype), vectorised and
// misaligned segments, hundreds of segments (several launches), empty segments, and per-segment
// weight decay; each segment's amax word (AdamWSegment::amax) against the values it wrote, applied
// and skipped by the device control.
// bf16 moments: both backends compute the same fp32 update and round once; where their fp32 values
// differ in the last bit (contraction into FMAs) and straddle a bf16 rounding boundary, the stored
// moments differ by one bf16 ulp (2^-8 relative), hence tol(BF16) for them; the master weights are
// computed from the unrounded fp32 moments and keep the fp32 tolerance.
#include <cmath>
#include <sstream>

#include "runtime/fp8_format.h"
#include "runtime/multi_tensor.h"
#include "runtime/step_control.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

ops::AdamWHyper hyper() {
  ops::AdamWHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.step = 3;
  h.grad_scale = 0.7f;
  return h;
}

struct HostState {
  Tensor master, grad, m, v;
};

HostState random_state(Rng& rng, int64_t n, DType grad_dtype, DType state_dtype = DType::F32) {
  HostState s;
  s.master = random_host(rng, {n}, 0.05);
  s.grad = representable(random_host(rng, {n}, 0.01), grad_dtype);
  s.m = random_host(rng, {n}, 0.001);
  s.v = random_host(rng, {n}, 1e-5, 2e-5);  // v ≥ 0 in practice
  float* pv = s.v.data<float>();
  for (int64_t i = 0; i < n; ++i) pv[i] = std::abs(pv[i]) + 1e-7f;
  s.m = representable(s.m, state_dtype);
  s.v = representable(s.v, state_dtype);
  return s;
}

Tensor host_copy(const Tensor& t) { return representable(t, DType::F32); }

// A host tensor of dtype dt holding host_f32's values (the CPU twin's moments).
Tensor host_in(const Tensor& host_f32, DType dt) {
  Tensor t = Tensor::empty(host_f32.shape(), dt);
  ops::copy(t, host_f32);
  return t;
}

// A host fp32 tensor of t's values (bf16 widened).
Tensor host_f32(const Tensor& t) { return host_in(t, DType::F32); }

TEST(GpuAdamW, SingleTensorEveryDtypeMix) {
  TETRA_REQUIRE_GPU();
  const ops::AdamWHyper h = hyper();
  for (int64_t n : {int64_t{3 * 8192 + 16}, int64_t{1001}}) {
    for (DType gd : {DType::F32, DType::BF16}) {
      for (int work : {0, 1, 2}) {  // none, fp32, bf16
        for (DType sd : {DType::F32, DType::BF16}) {
          std::ostringstream what;
          what << "n=" << n << " grad " << dtype_name(gd) << " working "
               << (work == 0 ? "none" : work == 1 ? "fp32" : "bf16") << " moments " << dtype_name(sd);
          Rng rng(static_cast<uint64_t>(n) * 10 + static_cast<uint64_t>(work));
          HostState s = random_state(rng, n, gd, sd);
          Tensor p = host_copy(s.master), m = host_in(s.m, sd), v = host_in(s.v, sd);
          Tensor wk = Tensor::empty({n}, DType::F32);
          ops::adamw_update(p, s.grad, m, v, h, &wk);

          Tensor gp = upload(s.master, DType::F32), gm = upload(s.m, sd), gv = upload(s.v, sd);
          Tensor gg = upload(s.grad, gd);
          const DType wdt = work == 2 ? DType::BF16 : DType::F32;
          Tensor gw = poisoned({n}, wdt);
          ops::adamw_update(gp, gg, gm, gv, h, work == 0 ? nullptr : &gw);
          EXPECT_EQ(gm.dtype(), sd);
          EXPECT_LE(close_error(gp, p), kTolF32) << "master, " << what.str();
          EXPECT_LE(close_error(gm, host_f32(m)), tol(sd)) << "m, " << what.str();
          EXPECT_LE(close_error(gv, host_f32(v)), tol(sd)) << "v, " << what.str();
          if (work != 0) {
            EXPECT_LE(close_error(gw, p), tol(wdt)) << "working, " << what.str();
          }
        }
      }
    }
  }
}

TEST(GpuAdamW, MultiTensorManySegments) {
  TETRA_REQUIRE_GPU();
  const ops::AdamWHyper h = hyper();
  Rng rng(77);
  const int count = 300;  // more than one launch's 256 segments
  std::vector<ops::AdamWSegment> cpu_segs, gpu_segs;
  std::vector<Tensor> expect_master, expect_m, expect_v, gpu_working;
  std::vector<DType> working_dtype;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i % 50 == 7 ? 0 : (i % 3 == 0 ? 8192 * (1 + i % 4) + 4 : 1 + (i * 37) % 999);
    const DType gd = i % 2 ? DType::BF16 : DType::F32;
    const DType sd = i % 4 < 2 ? DType::F32 : DType::BF16;  // every mix of grad and moment dtypes
    HostState s = random_state(rng, n, gd, sd);
    ops::AdamWSegment c;
    c.master = host_copy(s.master);
    c.grad = s.grad;
    c.m = host_in(s.m, sd);
    c.v = host_in(s.v, sd);
    c.working = Tensor::empty({n}, DType::F32);
    c.weight_decay = i % 5 == 0 ? 0.0f : 0.1f;
    cpu_segs.push_back(c);

    ops::AdamWSegment g;
    g.master = upload(s.master, DType::F32);
    g.grad = upload(s.grad, gd);
    g.m = upload(s.m, sd);
    g.v = upload(s.v, sd);
    const DType wdt = i % 3 == 1 ? DType::F32 : DType::BF16;
    if (i % 7 != 3) g.working = poisoned({n}, wdt);
    g.weight_decay = c.weight_decay;
    if (i % 11 == 5 && n > 1) {  // a misaligned view: one element into its buffers
      Tensor big_master = upload(representable(random_host(rng, {n + 1}), DType::F32), DType::F32);
      Tensor view = big_master.slice_flat(1, {n});
      ops::copy(view, g.master);
      g.master = view;
    }
    gpu_segs.push_back(g);
    working_dtype.push_back(wdt);
  }
  ops::adamw_update_multi(cpu_segs, h);
  ops::adamw_update_multi(gpu_segs, h);
  for (int i = 0; i < count; ++i) {
    if (cpu_segs[i].master.numel() == 0) continue;
    EXPECT_LE(close_error(gpu_segs[i].master, cpu_segs[i].master), kTolF32) << "segment " << i << " master";
    const DType sd = cpu_segs[i].m.dtype();
    EXPECT_LE(close_error(gpu_segs[i].m, host_f32(cpu_segs[i].m)), tol(sd)) << "segment " << i << " m";
    EXPECT_LE(close_error(gpu_segs[i].v, host_f32(cpu_segs[i].v)), tol(sd)) << "segment " << i << " v";
    if (gpu_segs[i].working.defined()) {
      EXPECT_LE(close_error(gpu_segs[i].working, cpu_segs[i].master), tol(working_dtype[i]))
          << "segment " << i << " working";
    }
  }
}


// The bits of max |x| over a device tensor's values as stored (bf16 widened exactly).
uint32_t stored_amax_bits(const Tensor& dev) { return test::row_amax_of(download_raw(dev).view({1, dev.numel()}))[0]; }

uint32_t word_of(const Tensor& dev_word) { return *static_cast<const uint32_t*>(download_raw(dev_word).data_ptr()); }

// Each segment's amax word holds the bits of the largest |value| the update stored where the model
// reads it (the working copy, else the master), exactly: across blocks (one atomicMax each), on the
// 4-wide and the scalar paths (a misaligned view), with bf16 rounding; a segment without a word beside
// them is unaffected. A step the control skips gives the unchanged values' amax.
TEST(GpuAdamW, SegmentAmaxIsOfTheValuesItStores) {
  TETRA_REQUIRE_GPU();
  const ops::AdamWHyper h = hyper();
  for (bool skip : {false, true}) {
    Rng rng(skip ? 91 : 90);
    std::vector<ops::AdamWSegment> segs;
    for (int i = 0; i < 6; ++i) {
      const int64_t n = i % 2 ? 3 * 8192 + 5 : 1001;
      const DType sd = i < 3 ? DType::F32 : DType::BF16;
      HostState s = random_state(rng, n, DType::BF16, sd);
      ops::AdamWSegment g;
      g.master = upload(s.master, DType::F32);
      g.grad = upload(s.grad, DType::BF16);
      g.m = upload(s.m, sd);
      g.v = upload(s.v, sd);
      if (i % 3 != 0) g.working = upload(s.master, i % 3 == 1 ? DType::F32 : DType::BF16);
      g.weight_decay = 0.1f;
      if (i == 4) {  // a misaligned view of the master: the scalar path
        Tensor big = upload(representable(random_host(rng, {n + 1}), DType::F32), DType::F32);
        Tensor view = big.slice_flat(1, {n});
        ops::copy(view, g.master);
        g.master = view;
      }
      if (i != 5) g.amax = upload_raw(Tensor::zeros({1}, DType::U32));
      segs.push_back(g);
    }
    Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
    control.data<double>()[kCtlSkipped] = skip ? 1.0 : 0.0;
    control.data<double>()[kCtlLr] = 1e-2;
    control.data<double>()[kCtlStepSize] = 1e-2;
    control.data<double>()[kCtlInvBc2Sqrt] = 1.0;
    control.data<double>()[kCtlGradScale] = 1.0;
    const Tensor dev_control = upload_raw(control);
    ops::adamw_update_multi(segs, h, &dev_control);
    for (int i = 0; i < 5; ++i) {
      const Tensor& read = segs[i].working.defined() ? segs[i].working : segs[i].master;
      EXPECT_EQ(word_of(segs[i].amax), stored_amax_bits(read)) << "segment " << i << (skip ? ", skipped" : "");
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
