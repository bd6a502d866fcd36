// Shared helpers of the GPU tests: the skip guard, random host inputs (never zeros), bf16 rounding
// of host references, host <-> device transfers that convert on the host (so the device copy kernel
// is not trusted by the other tests), NaN poisoning of device outputs, and the error bound that
// covers the norm-wise error and the worst element.
// The CPU twin (runtime/cpu, fp32) is the reference; bf16 inputs are rounded identically for it.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"
#include "tests/runtime/op_test_util.h"

#define TETRA_REQUIRE_GPU() \
  if (!::tetra::cuda_available()) GTEST_SKIP() << "no GPU"

namespace tetra::gputest {

// The GPU the tests run on: cuda:0, or this rank's GPU in multi-rank tests (which set it first).
inline Device& test_gpu() {
  static Device d = Device::cuda(0);
  return d;
}
inline Device gpu() { return test_gpu(); }

// Tolerances on ‖gpu − cpu‖ / ‖cpu‖.
constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 1e-2;
inline double tol(DType t) { return t == DType::BF16 ? kTolBF16 : kTolF32; }

// fp32 host tensor of N(offset, scale²) values; an exact zero is nudged away.
inline Tensor random_host(Rng& rng, const Shape& shape, double scale = 1.0, double offset = 0.0) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = static_cast<float>(offset + scale * rng.normal());
    if (v == 0.0f) v = static_cast<float>(scale * 1e-3 + 1e-6);
    p[i] = v;
  }
  return t;
}

// int32 host tensor of values uniform in [lo, hi): the CPU op tests' own.
using test::random_ids;

// The host fp32 values a tensor of dtype `dt` can hold: bf16-rounded for bf16 (nearest even).
inline Tensor representable(const Tensor& host_f32, DType dt) {
  Tensor r = Tensor::empty(host_f32.shape(), DType::F32);
  const float* s = host_f32.data<float>();
  float* d = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) d[i] = dt == DType::BF16 ? bf16_to_float(float_to_bf16(s[i])) : s[i];
  return r;
}

// A host tensor of dtype `dt` holding host_f32's values (bf16 converted on the host).
inline Tensor host_as(const Tensor& host_f32, DType dt) {
  if (dt == DType::F32) {
    Tensor t = Tensor::empty(host_f32.shape(), DType::F32);
    std::memcpy(t.data_ptr(), host_f32.data_ptr(), t.nbytes());
    return t;
  }
  Tensor t = Tensor::empty(host_f32.shape(), DType::BF16);
  const float* s = host_f32.data<float>();
  uint16_t* d = t.bf16_bits();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = float_to_bf16(s[i]);
  return t;
}

// Raw bytes host -> device (same dtype); no conversion on the device.
inline Tensor upload_raw(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), gpu());
  cuda::copy_bytes(d.data_ptr(), gpu(), host.data_ptr(), Device::cpu(), host.nbytes(), /*blocking=*/true);
  return d;
}

// A device tensor of dtype `dt` holding host_f32's values (converted on the host).
inline Tensor upload(const Tensor& host_f32, DType dt) { return upload_raw(host_as(host_f32, dt)); }

// Raw bytes device -> host (same dtype).
inline Tensor download_raw(const Tensor& dev) {
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  cuda::copy_bytes(h.data_ptr(), Device::cpu(), dev.data_ptr(), dev.device(), dev.nbytes(), /*blocking=*/true);
  return h;
}

// Amax bits (U32 or I32 arrays of fp32 |x| bit patterns), element for element: equal, or NaN
// patterns on both sides. A NaN amax is the contract (it wins over every number and makes the cast's
// factor 1e-12 on both backends); its payload is not: on one H200 the two sides' NaN amaxes differed
// in their bits while every code and scale cast with them matched.
inline bool same_amax_bits(const Tensor& dev, const Tensor& host) {
  const Tensor got = download_raw(dev);
  if (got.nbytes() != host.nbytes()) return false;
  const auto* g = static_cast<const uint32_t*>(got.data_ptr());
  const auto* h = static_cast<const uint32_t*>(host.data_ptr());
  constexpr uint32_t kInfBits = 0x7f800000u;
  for (int64_t i = 0; i < host.numel(); ++i)
    if (g[i] != h[i] && !(g[i] > kInfBits && h[i] > kInfBits)) return false;
  return true;
}

// Device fp32/bf16 tensor -> host fp32 values.
inline std::vector<double> download(const Tensor& dev) {
  Tensor h = download_raw(dev);
  std::vector<double> v(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::F32) {
    const float* p = h.data<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else if (h.dtype() == DType::BF16) {
    const uint16_t* p = h.bf16_bits();
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(p[i]);
  } else {
    ADD_FAILURE() << "download: unsupported " << dev.describe();
  }
  return v;
}

inline std::vector<double> values(const Tensor& host_f32) {
  std::vector<double> v(static_cast<size_t>(host_f32.numel()));
  const float* p = host_f32.data<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  return v;
}

// Fills a device tensor with all-ones bits: NaN in fp32 and bf16. Whatever an op leaves unwritten fails.
inline void poison(Tensor& dev) {
  std::vector<unsigned char> ones(dev.nbytes(), 0xff);
  cuda::copy_bytes(dev.data_ptr(), dev.device(), ones.data(), Device::cpu(), dev.nbytes(), /*blocking=*/true);
}

inline Tensor poisoned(const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt, gpu());
  poison(t);
  return t;
}

// ‖out − ref‖ / ‖ref‖ as the CPU op tests measure it (+inf for non-finite values or unequal sizes).
inline double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  return test::rel_error(out, ref);
}
// Device result against a host fp32 reference.
inline double rel_error(const Tensor& dev, const Tensor& ref_host_f32) {
  return rel_error(download(dev), values(ref_host_f32));
}

// The worst element: max_i |out_i − ref_i| / (|ref_i| + rms(ref)), relative where an element is large
// and on the reference's own scale where it is near zero (+inf for non-finite values or unequal sizes).
inline double worst_element_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double ss = 0.0;
  for (double r : ref) ss += r * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(ref.size()));
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    const double den = std::fabs(ref[i]) + rms, diff = std::fabs(out[i] - ref[i]);
    worst = std::max(worst, den > 0.0 ? diff / den : diff);
  }
  return worst;
}
// Tolerances on the worst element (bf16: a few units in the last place of bf16's 8-bit mantissa).
constexpr double kWorstF32 = 1e-4;
constexpr double kWorstBF16 = 4e-2;
inline double worst_tol(DType t) { return t == DType::BF16 ? kWorstBF16 : kWorstF32; }

// Both measures against the CPU twin within dtype `dt`'s tolerances.
inline void expect_close(const std::vector<double>& out, const std::vector<double>& ref, DType dt,
                         const std::string& what) {
  const double norm = rel_error(out, ref), worst = worst_element_error(out, ref);
  EXPECT_LE(norm, tol(dt)) << what << ": norm-wise relative error";
  EXPECT_LE(worst, worst_tol(dt)) << what << ": worst element";
}
inline void expect_close(const Tensor& dev, const Tensor& ref_host_f32, DType dt, const std::string& what) {
  expect_close(download(dev), values(ref_host_f32), dt, what);
}

// Both measures of a device result against its reference, for the tests that state one tolerance:
// `EXPECT_LE(close_error(out, ref), tol)` holds when the norm-wise error is within `tol` and the
// worst element within the worst-element tolerance that goes with it (kWorstBF16 for kTolBF16,
// kWorstF32 for kTolF32, scaled with `tol`); `EXPECT_EQ(close_error(out, ref), 0.0)` asks for
// identical values. A failure prints both measures.
struct Closeness {
  double norm = 0, worst = 0;
};
inline double worst_bound(double tol) {
  return tol >= kTolBF16 ? kWorstBF16 * (tol / kTolBF16) : kWorstF32 * (tol / kTolF32);
}
inline bool operator<=(const Closeness& c, double tol) { return c.norm <= tol && c.worst <= worst_bound(tol); }
inline bool operator==(const Closeness& c, double v) { return c.norm == v && c.worst == v; }
inline std::ostream& operator<<(std::ostream& os, const Closeness& c) {
  return os << "norm-wise " << c.norm << ", worst element " << c.worst;
}
inline Closeness close_error(const std::vector<double>& out, const std::vector<double>& ref) {
  return {rel_error(out, ref), worst_element_error(out, ref)};
}
inline Closeness close_error(const Tensor& dev, const Tensor& ref_host_f32) {
  return close_error(download(dev), values(ref_host_f32));
}

inline const char* name(DType t) { return dtype_name(t); }

// A norm's amax output (ops.h: U32 [1], the largest |y| as stored) over the row kernels (a team of
// one warp, of 8 warps, rows leaving blocks partly idle) and the fallback (C % 8 != 0); y bf16 or fp32
// of its x's dtype, and bf16 y of an fp32 x; with and without a NaN in x. Each against the CPU twin's
// measure of the y written (ops::fp8_amax over the downloaded y; NaN against NaN), and a Tensorwise
// cast given it writes the codes and scale of the cast that measures y itself.
// forward(y, x, amax): the norm on device tensors (its weights of its own).
template <class Forward>
void check_norm_amax(const char* norm, Forward&& forward) {
  uint64_t seed = 60;
  const std::pair<int64_t, int64_t> shapes[] = {{1001, 2048}, {64, 8192}, {37, 45}};
  const std::pair<DType, DType> dtypes[] = {
      {DType::BF16, DType::BF16}, {DType::F32, DType::F32}, {DType::F32, DType::BF16}};
  for (const auto& [N, C] : shapes)
    for (const auto& [xd, yd] : dtypes)
      for (bool nan : {false, true}) {
        const std::string what = std::string(norm) + " [" + std::to_string(N) + ", " + std::to_string(C) + "] x " +
                                 dtype_name(xd) + " y " + dtype_name(yd) + (nan ? ", a NaN in x" : "");
        Rng rng(seed++);
        Tensor x = random_host(rng, {N, C}, 1.5, 0.3);
        if (nan) x.data<float>()[N / 2 * C + C / 3] = std::numeric_limits<float>::quiet_NaN();
        Tensor gx = upload(x, xd), gy = poisoned({N, C}, yd), amax = Tensor::empty({1}, DType::U32, gpu());
        poison(amax);
        forward(gy, gx, amax);
        Tensor want = Tensor::empty({1}, DType::U32);
        ops::fp8_amax(want, download_raw(gy));
        EXPECT_TRUE(same_amax_bits(amax, want)) << what;
        EXPECT_EQ(*static_cast<const uint32_t*>(download_raw(amax).data_ptr()) > 0x7f800000u, nan) << what;
        Tensor q1 = Tensor::empty({N, C}, DType::F8E4M3, gpu()), q2 = Tensor::empty({N, C}, DType::F8E4M3, gpu());
        Tensor s1 = Tensor::empty({1}, DType::F32, gpu()), s2 = Tensor::empty({1}, DType::F32, gpu());
        ops::fp8_quantize(q1, s1, gy, ops::Fp8Scaling::Tensorwise);
        ops::fp8_quantize(q2, s2, gy, ops::Fp8Scaling::Tensorwise, nullptr, nullptr, &amax);
        const Tensor b1 = download_raw(q1), b2 = download_raw(q2);
        EXPECT_EQ(std::memcmp(b1.data_ptr(), b2.data_ptr(), b1.nbytes()), 0) << what << ": codes";
        EXPECT_EQ(std::memcmp(download_raw(s1).data_ptr(), download_raw(s2).data_ptr(), sizeof(float)), 0)
            << what << ": scale";
      }
}

// The norm backward's dx_amax (ops.h), on the row kernel's shapes and the fallback's (C % 8 ≠ 0): dy
// and dx of one dtype (bf16, fp32), and bf16 dy with an fp32 dx and its bf16 copy dx_rounded; with
// and without a NaN in dresidual. The amax is the CPU twin's measure of what was stored (ops::fp8_amax
// over the downloaded dx_rounded, else dx), and dx, dx_rounded and dw are bit for bit those of the
// same call without the amax (it changes nothing the kernel writes).
// backward(dx, dw, dy, x, dres, dx_rounded, amax): the norm's backward with dresidual on device
// tensors (its weights and statistics of its own, the same on every call); dx_rounded, amax may be null.
template <class Backward>
void check_norm_backward_amax(const char* norm, Backward&& backward) {
  uint64_t seed = 90;
  const std::pair<int64_t, int64_t> shapes[] = {{1001, 2048}, {64, 8192}, {37, 45}};
  const std::pair<DType, DType> dtypes[] = {  // {dy, x and dx}
      {DType::BF16, DType::BF16}, {DType::F32, DType::F32}, {DType::BF16, DType::F32}};
  for (const auto& [N, C] : shapes)
    for (const auto& [ad, xd] : dtypes)
      for (bool nan : {false, true}) {
        const std::string what = std::string(norm) + " backward [" + std::to_string(N) + ", " + std::to_string(C) +
                                 "] dy " + dtype_name(ad) + " dx " + dtype_name(xd) +
                                 (nan ? ", a NaN in dresidual" : "");
        Rng rng(seed++);
        Tensor x = random_host(rng, {N, C}, 1.5, 0.3), dy = random_host(rng, {N, C}), res = random_host(rng, {N, C}, 0.5);
        if (nan) res.data<float>()[N / 2 * C + C / 3] = std::numeric_limits<float>::quiet_NaN();
        const Tensor gx = upload(x, xd), gdy = upload(dy, ad), gres = upload(res, xd);
        const bool rounded = ad != xd;
        std::vector<Tensor> outs[2];  // each run's dx, dw (and dx_rounded), downloaded
        for (int run = 0; run < 2; ++run) {
          Tensor dx = poisoned({N, C}, xd), dw = Tensor::zeros({C}, DType::F32, gpu());
          Tensor copy = rounded ? poisoned({N, C}, ad) : Tensor();
          Tensor amax = Tensor::empty({1}, DType::U32, gpu());
          poison(amax);
          backward(dx, dw, gdy, gx, gres, rounded ? &copy : nullptr, run == 1 ? &amax : nullptr);
          outs[run] = {download_raw(dx), download_raw(dw)};
          if (rounded) outs[run].push_back(download_raw(copy));
          if (run == 0) continue;
          Tensor want = Tensor::empty({1}, DType::U32);
          ops::fp8_amax(want, outs[run][rounded ? 2 : 0]);  // dx_rounded where written, else dx
          EXPECT_TRUE(same_amax_bits(amax, want)) << what;
          EXPECT_EQ(*static_cast<const uint32_t*>(download_raw(amax).data_ptr()) > 0x7f800000u, nan) << what;
        }
        const char* names[] = {"dx", "dw", "dx_rounded"};
        for (size_t k = 0; k < outs[0].size(); ++k)
          EXPECT_EQ(std::memcmp(outs[0][k].data_ptr(), outs[1][k].data_ptr(), outs[0][k].nbytes()), 0)
              << what << ": " << names[k] << " differs with the amax";
      }
}

}  // namespace tetra::gputest
