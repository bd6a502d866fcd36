// The CUDA FP8 GEMM's epilogue (ops::Fp8Epilogue: cuBLASLt's BIAS, GELU_AUX(_BIAS), DGELU and C
// distinct from D, or the unfused ops where cuBLASLt has no algorithm) against the CPU twin — the
// unfused sequence in fp32 — and against the unfused sequence on the GPU, for each epilogue. The GPU's
// GEMM differs from the CPU's fp32 sum by its accumulation (below 2e-4, fp8_cast_test.cpp) and a bf16
// y by one rounding (the unfused sequence rounds the product, then the bias, then the GELU: up to
// three), so bf16's bounds hold both comparisons and an fp32 y (the fp32 residual stream) is held at
// 1e-3; a misplaced bias, a missing residual or GELU is off by O(1). The amax is compared bit for bit
// with fp8_amax of the y the GPU stored.
#include <string>
#include <utility>
#include <vector>

#include "runtime/fp8_cast_shape.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

using S = ops::Fp8Scaling;

struct Operand {
  Tensor q, scale;  // host
  S scaling;
};

Operand quantised(Rng& rng, int64_t rows, int64_t K, S scaling, DType format, double scale) {
  Operand o{Tensor::empty({rows, K}, format), Tensor::empty(fp8_scale_shape(scaling, rows, K), DType::F32), scaling};
  ops::fp8_quantize(o.q, o.scale, random_host(rng, {rows, K}, scale), scaling);
  return o;
}

// The epilogue's tensors on one side (host fp32 or device), built from the same host values.
struct Side {
  Tensor bias, residual, pre;
};

struct EpilogueCase {
  std::string name;
  bool bias = false, residual = false, in_place = false, gelu = false, dgelu = false, amax = true;
  DType y_dtype = DType::BF16;
  S a_scaling = S::Tensorwise, b_scaling = S::Tensorwise;
  DType a_format = DType::F8E4M3;
};

// residual: the side's residual, or y itself (in place).
ops::Fp8Epilogue epilogue_of(const EpilogueCase& c, Side& s, const Tensor* residual, Tensor* gelu_pre, Tensor* amax) {
  ops::Fp8Epilogue e;
  e.bias = c.bias ? &s.bias : nullptr;
  e.residual = c.residual ? residual : nullptr;
  e.gelu_pre = c.gelu ? gelu_pre : nullptr;
  e.dgelu_pre = c.dgelu ? &s.pre : nullptr;
  e.amax = amax;
  return e;
}

// y of the case's dtype on the device: the residual's values when in place, else poisoned.
Tensor device_y(const EpilogueCase& c, const Side& h, int64_t M, int64_t N) {
  return c.in_place ? upload(h.residual, c.y_dtype) : poisoned({M, N}, c.y_dtype);
}

void check_case(const EpilogueCase& c, int64_t M, int64_t N, int64_t K, uint64_t seed) {
  Rng rng(seed);
  const Operand a = quantised(rng, M, K, c.a_scaling, c.a_format, 1.0);
  const Operand b = quantised(rng, N, K, c.b_scaling, DType::F8E4M3, 0.05);
  // Values representable in the device dtypes, so that both sides start from the same numbers.
  Side h{representable(random_host(rng, {N}, 0.5), DType::BF16), representable(random_host(rng, {M, N}), c.y_dtype),
         representable(random_host(rng, {M, N}, 2.0), c.y_dtype)};
  Side d{upload(h.bias, DType::BF16), upload(h.residual, c.y_dtype), upload(h.pre, c.y_dtype)};
  const Tensor da[2] = {upload_raw(a.q), upload_raw(a.scale)}, db[2] = {upload_raw(b.q), upload_raw(b.scale)};
  auto gpu_gemm = [&](Tensor& y, bool accumulate, const ops::Fp8Epilogue& e) {
    ops::fp8_gemm(y, da[0], da[1], a.scaling, db[0], db[1], b.scaling, accumulate, false, e);
  };

  // The CPU twin.
  Tensor y = Tensor::empty({M, N}, DType::F32), pre = Tensor::empty({M, N}, DType::F32);
  if (c.in_place) ops::copy(y, h.residual);
  ops::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling, false, false,
                epilogue_of(c, h, c.in_place ? &y : &h.residual, &pre, nullptr));
  // The GPU's fused call.
  Tensor d_y = device_y(c, h, M, N), d_pre = poisoned({M, N}, c.y_dtype), d_amax = poisoned({1}, DType::U32);
  gpu_gemm(d_y, false, epilogue_of(c, d, c.in_place ? &d_y : &d.residual, &d_pre, c.amax ? &d_amax : nullptr));
  // The unfused sequence on the GPU: the plain GEMM (onto the residual), then the ops.
  Tensor u_y = device_y(c, h, M, N), u_pre = poisoned({M, N}, c.y_dtype);
  Tensor& z = c.gelu ? u_pre : u_y;
  if (c.residual && !c.in_place) ops::copy(u_y, d.residual);
  gpu_gemm(z, /*accumulate=*/c.residual, {});
  if (c.bias) ops::add_bias(z, d.bias);
  if (c.gelu) ops::gelu_forward(u_y, z);
  if (c.dgelu) ops::gelu_backward(u_y, u_y, d.pre);

  const double norm_bound = c.y_dtype == DType::BF16 ? kTolBF16 : 1e-3;
  const double worst_bound = c.y_dtype == DType::BF16 ? kWorstBF16 : 1e-2;
  auto expect_near = [&](const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    EXPECT_LE(rel_error(got, want), norm_bound) << c.name << ": " << what << ", norm-wise";
    EXPECT_LE(worst_element_error(got, want), worst_bound) << c.name << ": " << what << ", worst element";
  };
  const std::vector<double> stored = download(d_y);
  expect_near(stored, values(y), "fused y against the CPU twin");
  expect_near(stored, download(u_y), "fused y against the GPU's unfused sequence");
  if (c.residual && !c.in_place) expect_near(download(d.residual), values(h.residual), "the residual, only read");
  if (c.gelu) {
    expect_near(download(d_pre), values(pre), "the pre-activation against the CPU twin");
    expect_near(download(d_pre), download(u_pre), "the pre-activation against the unfused sequence");
  }
  if (c.amax) {
    Tensor host_y = Tensor::empty({M, N}, DType::F32), want = Tensor::empty({1}, DType::U32);
    for (int64_t i = 0; i < host_y.numel(); ++i) host_y.data<float>()[i] = static_cast<float>(stored[i]);
    ops::fp8_amax(want, host_y);
    EXPECT_TRUE(same_amax_bits(d_amax, want)) << c.name << ": amax of y as stored";
  }
}

TEST(GpuFp8Epilogue, EachEpilogueMatchesTheCpuTwinAndTheUnfusedSequence) {
  TETRA_REQUIRE_GPU();
  std::vector<EpilogueCase> cases;
  auto add = [&](const char* name, auto set) {
    EpilogueCase c;
    c.name = name;
    set(c);
    cases.push_back(c);
  };
  using C = EpilogueCase;
  add("bias (c_attn)", [](C& c) { c.bias = true; });
  add("bias + residual (the projections into the stream)", [](C& c) { c.bias = c.residual = true; });
  add("bias + residual, fp32 stream", [](C& c) {
    c.bias = c.residual = true;
    c.y_dtype = DType::F32;
  });
  add("residual in place (o_proj, down_proj)", [](C& c) { c.residual = c.in_place = true; });
  add("bias + GELU (c_fc)", [](C& c) { c.bias = c.gelu = true; });
  add("GELU without bias", [](C& c) { c.gelu = true; });
  add("GELU backward (mlp.c_proj's input gradient)", [](C& c) {
    c.dgelu = true;
    c.a_format = DType::F8E5M2;
  });
  add("blockwise bias + GELU", [](C& c) {
    c.bias = c.gelu = true;
    c.a_scaling = S::Rows1x128;
    c.b_scaling = S::Blocks128;
  });
  add("blockwise GELU backward", [](C& c) {
    c.dgelu = true;
    c.a_scaling = S::Rows1x128;
    c.b_scaling = S::Blocks128;
  });
  uint64_t seed = 500;
  for (const EpilogueCase& c : cases) {
    check_case(c, 256, 384, 512, seed++);
    check_case(c, 272, 160, 400, seed++);  // partial 128-groups in every dimension
  }
}

// The GELU kernels' amax outputs (the unfused epilogue's, elementwise.cuh) against fp8_amax of what
// they stored, bit for bit, on and off the vector path (a length not a multiple of 8), and their
// values against the CPU twin (the kernels' usual bounds).
TEST(GpuFp8Epilogue, GeluAmaxIsTheAmaxOfTheStoredOutput) {
  TETRA_REQUIRE_GPU();
  for (const int64_t n : {int64_t{4096 * 33}, int64_t{1001}}) {
    for (const DType dt : {DType::BF16, DType::F32}) {
      Rng rng(static_cast<uint64_t>(n) + (dt == DType::BF16 ? 1 : 2));
      Tensor x = representable(random_host(rng, {n}, 3.0), dt), dy = representable(random_host(rng, {n}), dt);
      Tensor y = Tensor::empty({n}, DType::F32), dx = Tensor::empty({n}, DType::F32);
      ops::gelu_forward(y, x);
      ops::gelu_backward(dx, dy, x);
      Tensor d_x = upload(x, dt), d_dy = upload(dy, dt), d_y = poisoned({n}, dt), d_dx = poisoned({n}, dt);
      Tensor amax_y = poisoned({1}, DType::U32), amax_dx = poisoned({1}, DType::U32);
      ops::gelu_forward(d_y, d_x, &amax_y);
      ops::gelu_backward(d_dx, d_dy, d_x, &amax_dx);
      const std::string what = std::string(dtype_name(dt)) + " n = " + std::to_string(n);
      expect_close(d_y, y, dt, "gelu_forward " + what);
      expect_close(d_dx, dx, dt, "gelu_backward " + what);
      for (auto [out, amax] : {std::pair{&d_y, &amax_y}, std::pair{&d_dx, &amax_dx}}) {
        const std::vector<double> stored = download(*out);
        Tensor host = Tensor::empty({n}, DType::F32), want = Tensor::empty({1}, DType::U32);
        for (int64_t i = 0; i < n; ++i) host.data<float>()[i] = static_cast<float>(stored[i]);
        ops::fp8_amax(want, host);
        EXPECT_TRUE(same_amax_bits(*amax, want)) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
