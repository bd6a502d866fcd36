// CUDA RMSNorm against the CPU twin (runtime/cpu/rmsnorm.cpp): the LayerNorm row kernels' RMSNorm
// instantiation at Llama 3.2 1B's [16384, 2048] and at the widths where their team and vector counts
// change (1 to 16 warps per row), row counts that leave blocks partly idle, and the fallback kernels
// (C % 8 != 0, unaligned views, C beyond the backward row kernels); fp32 and bf16, bf16 activations with
// fp32 weights; dx overwritten, accumulated, or dresidual + the norm's gradient (separately, over
// dresidual and over dy); y over x; deterministic dw. Outputs are poisoned with NaN first; each result
// must be within the dtype's norm-wise and worst-element tolerances (tests/runtime/cuda/gpu_test_util.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

Tensor host_sum(const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::empty(a.shape(), DType::F32);
  ops::add(s, a, b);
  return s;
}

// The dtype of w and dw: the activations' dtype, or fp32 whatever the activations.
enum class ParamType { SameAsX, F32 };

void check_rmsnorm(const Shape& x_shape, uint64_t seed, ParamType ptype = ParamType::SameAsX) {
  Rng rng(seed);
  const int64_t C = x_shape.back();
  const Shape rows(x_shape.begin(), x_shape.end() - 1);
  const float eps = 1e-5f;
  const DType rd = DType::BF16;  // inputs representable in bf16 serve both dtypes
  Tensor x = representable(random_host(rng, x_shape, 1.5, 0.3), rd);
  Tensor w = representable(random_host(rng, {C}, 0.3, 1.0), rd);
  Tensor dy = representable(random_host(rng, x_shape), rd);
  Tensor dx0 = representable(random_host(rng, x_shape), rd);
  Tensor dw0 = representable(random_host(rng, {C}, 0.1), rd);
  Tensor dres = representable(random_host(rng, x_shape, 0.5), rd);

  Tensor y = Tensor::empty(x_shape, DType::F32), rstd = Tensor::empty(rows, DType::F32);
  ops::rmsnorm_forward(y, rstd, x, w, eps);
  Tensor dx = Tensor::empty(x_shape, DType::F32), dw = representable(dw0, rd);  // dw accumulates over dw0
  ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false);
  const Tensor dx_acc = host_sum(dx, dx0), dx_res = host_sum(dx, dres);

  for (DType dt : {DType::F32, DType::BF16}) {
    const DType pt = ptype == ParamType::F32 ? DType::F32 : dt;
    std::ostringstream os;
    os << "x " << shape_str(x_shape) << " " << dtype_name(dt) << ", w " << dtype_name(pt);
    const std::string what = os.str();
    Tensor gx = upload(x, dt), gw = upload(w, pt), gdy = upload(dy, dt);
    Tensor gy = poisoned(x_shape, dt), grstd = poisoned(rows, DType::F32);
    ops::rmsnorm_forward(gy, grstd, gx, gw, eps);
    expect_close(gy, y, dt, "forward y, " + what);
    expect_close(grstd, rstd, DType::F32, "forward rstd, " + what);

    // Backward from the GPU's own rstd (it matches the CPU's to fp32 precision).
    Tensor gdx = poisoned(x_shape, dt), gdw = upload(dw0, pt);
    ops::rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd, false);
    expect_close(gdx, dx, dt, "backward dx, " + what);
    expect_close(gdw, dw, pt == DType::F32 && dt == DType::F32 ? DType::F32 : DType::BF16, "backward dw, " + what);

    Tensor gdx_acc = upload(dx0, dt), gdw2 = upload(dw0, pt);
    ops::rmsnorm_backward(gdx_acc, gdw2, gdy, gx, gw, grstd, true);
    expect_close(gdx_acc, dx_acc, dt, "backward dx accumulated, " + what);

    // In place: y over x, dx over dy.
    Tensor gx2 = upload(x, dt);
    ops::rmsnorm_forward(gx2, grstd, gx2, gw, eps);
    expect_close(gx2, y, dt, "forward in place, " + what);
    Tensor gdy2 = upload(dy, dt), gdw3 = upload(dw0, pt);
    ops::rmsnorm_backward(gdy2, gdw3, gdy2, gx, gw, grstd, false);
    expect_close(gdy2, dx, dt, "backward in place over dy, " + what);

    // dx = dresidual + the norm's gradient: into a separate dx, over dresidual, and over dy.
    Tensor gdres = upload(dres, dt), gdx_res = poisoned(x_shape, dt), gdw4 = upload(dw0, pt);
    ops::rmsnorm_backward(gdx_res, gdw4, gdy, gx, gw, grstd, false, &gdres);
    expect_close(gdx_res, dx_res, dt, "backward with dresidual, " + what);
    EXPECT_EQ(rel_error(gdres, dres), 0.0) << "dresidual unchanged, " << what;
    Tensor over_res = upload(dres, dt), gdw5 = upload(dw0, pt);
    ops::rmsnorm_backward(over_res, gdw5, gdy, gx, gw, grstd, false, &over_res);
    expect_close(over_res, dx_res, dt, "backward with dresidual, dx over dresidual, " + what);
    Tensor over_dy = upload(dy, dt), gdw6 = upload(dw0, pt);
    ops::rmsnorm_backward(over_dy, gdw6, over_dy, gx, gw, grstd, false, &gdres);
    expect_close(over_dy, dx_res, dt, "backward with dresidual, dx over dy, " + what);
  }
}

// Llama 3.2 1B: one micro-batch of 4 × 4096 tokens at d = 2048, with bf16 and with fp32 weights.
TEST(GpuRmsNorm, Llama1bShape) {
  TETRA_REQUIRE_GPU();
  check_rmsnorm({4, 4096, 2048}, 1);
  check_rmsnorm({4, 4096, 2048}, 2, ParamType::F32);
}

// The one-stage backward row kernel (TETRA_NORM_BACKWARD_STAGES=1; blocks of ≤ 256 threads: the
// Llama 1B width as teams of three warps, 1024 as two) against the CPU twin.
TEST(GpuRmsNorm, OneStageBackwardAgainstTheCpu) {
  TETRA_REQUIRE_GPU();
  setenv("TETRA_NORM_BACKWARD_STAGES", "1", 1);
  check_rmsnorm({4, 4096, 2048}, 3);
  check_rmsnorm({1001, 1024}, 4, ParamType::F32);
  unsetenv("TETRA_NORM_BACKWARD_STAGES");
}

// Where the row kernels change shape: vectors per thread (1 to 4) and warps per row (1 to 16), with
// row counts that leave the last rows of blocks idle.
TEST(GpuRmsNorm, RowKernelWidths) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 20;
  for (int64_t C : {8, 256, 768, 1000, 1024, 2048, 3072, 4096}) {
    SCOPED_TRACE(testing::Message() << "C = " << C);
    check_rmsnorm({37, C}, seed++);
    check_rmsnorm({1001, C}, seed++, C % 2048 == 0 ? ParamType::F32 : ParamType::SameAsX);
  }
  check_rmsnorm({1, 2048}, seed++);
}

TEST(GpuRmsNorm, OddWidthAndRows) {
  TETRA_REQUIRE_GPU();
  check_rmsnorm({37, 45}, 2);
  // One row of odd width. Not C = 1: there dx = w·dy·rstd·eps/(x² + eps), an fp32 cancellation of
  // 1 − x²·rstd² whose relative error (~6e-3 on the device, measured) says nothing about the kernel.
  check_rmsnorm({1, 3}, 3);
  check_rmsnorm({5, 3, 100}, 4);  // C % 8 != 0 with leading dimensions
}

TEST(GpuRmsNorm, WideRowsNeedOptInSharedMemory) {
  TETRA_REQUIRE_GPU();
  check_rmsnorm({64, 8192}, 6);   // teams of 8 (forward) and 11 (backward) warps
  check_rmsnorm({19, 12288}, 7);  // the widest backward row kernel: 16 warps
  check_rmsnorm({9, 16384}, 8);   // forward row kernel of 16 warps; backward fallback
}

// The [N, C] tensors as views at an 8-byte offset into a buffer: not 16-byte aligned, so the row
// kernels must step aside for the element-wise fallback.
TEST(GpuRmsNorm, UnalignedViewsTakeTheFallback) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 513, C = 2048;
  const DType dt = DType::BF16;
  Rng rng(10);
  Tensor x = representable(random_host(rng, {N, C}, 1.5, 0.3), dt), dy = representable(random_host(rng, {N, C}), dt);
  Tensor dres = representable(random_host(rng, {N, C}), dt), w = representable(random_host(rng, {C}, 0.3, 1.0), dt);
  Tensor y = Tensor::empty({N, C}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
  Tensor dx = Tensor::empty({N, C}, DType::F32), dw = Tensor::zeros({C}, DType::F32);
  ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, &dres);
  auto unaligned = [&](const Tensor& host) {  // 4 bf16 = 8 bytes in
    Tensor buf = Tensor::zeros({N * C + 4}, DType::F32);
    std::memcpy(buf.data<float>() + 4, host.data<float>(), host.nbytes());
    return upload(buf, dt).slice_flat(4, {N, C});
  };
  Tensor gx = unaligned(x), gdy = unaligned(dy), gdres = unaligned(dres), gy = unaligned(x), gdx = unaligned(x);
  poison(gy);
  poison(gdx);
  Tensor gw = upload(w, dt), grstd = poisoned({N}, DType::F32), gdw = Tensor::zeros({C}, DType::F32, gpu());
  ops::rmsnorm_forward(gy, grstd, gx, gw, 1e-5f);
  expect_close(gy, y, dt, "unaligned forward y");
  ops::rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd, false, &gdres);
  expect_close(gdx, dx, dt, "unaligned backward dx");
  expect_close(gdw, dw, dt, "unaligned backward dw");
}

// dw is reduced in a fixed order: two backward passes over the same inputs give the same bits of dw
// and dx, with one warp per row and with teams of warps.
TEST(GpuRmsNorm, BackwardIsDeterministic) {
  TETRA_REQUIRE_GPU();
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{8192, 768}, {3000, 2048}}) {
    Rng rng(static_cast<uint64_t>(C));
    Tensor x = upload(random_host(rng, {N, C}), DType::BF16), dy = upload(random_host(rng, {N, C}), DType::BF16);
    Tensor dres = upload(random_host(rng, {N, C}), DType::BF16), w = upload(random_host(rng, {C}), DType::BF16);
    Tensor y = Tensor::empty({N, C}, DType::BF16, gpu()), rstd = Tensor::empty({N}, DType::F32, gpu());
    Tensor dx = Tensor::empty({N, C}, DType::BF16, gpu());
    ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
    std::vector<Tensor> runs;
    for (int r = 0; r < 2; ++r) {
      Tensor dw = Tensor::zeros({C}, DType::F32, gpu());
      ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, &dres);
      runs.push_back(download_raw(dw));
      runs.push_back(download_raw(dx));
    }
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(std::memcmp(runs[k].data_ptr(), runs[k + 2].data_ptr(), runs[k].nbytes()), 0)
          << "output " << k << " at C = " << C;
  }
}

// The amax output (FP8 tensorwise casts of the projection the norm feeds): gpu_test_util.h.
TEST(GpuRmsNorm, AmaxOutputIsTheLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  check_norm_amax("rmsnorm", [](Tensor& y, const Tensor& x, Tensor& amax) {
    Rng rng(3);
    const int64_t C = x.dim(-1), N = x.numel() / C;
    Tensor w = upload(random_host(rng, {C}, 0.3, 1.0), DType::F32), rstd = poisoned({N}, DType::F32);
    ops::rmsnorm_forward(y, rstd, x, w, 1e-5f, &amax);
  });
}

// The backward's dx_amax (the FP8 cast of the output gradient of the projection below): gpu_test_util.h.
TEST(GpuRmsNorm, BackwardAmaxIsTheLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  check_norm_backward_amax("rmsnorm", [](Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                         const Tensor& dres, Tensor* dx_rounded, Tensor* amax) {
    Rng rng(3);
    const int64_t C = x.dim(-1), N = x.numel() / C;
    Tensor w = upload(random_host(rng, {C}, 0.3, 1.0), DType::F32), rstd = poisoned({N}, DType::F32);
    Tensor y = poisoned({N, C}, x.dtype());
    ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
    ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, &dres, dx_rounded, amax);
  });
}

// row_amax and dx_row_amax (ops.h): each row's largest |value| as stored — the CPU's measure of the
// downloaded y, and of dx_rounded where written, else dx — on the row kernel's rows of one warp (C =
// 2048) and of several (8192) and the fallback's (C % 8 ≠ 0), with a NaN in one row of x (forward) and
// of dresidual (backward); the tensor's amax alongside is the largest of them, and y, dx are the bits
// of the call without them.
TEST(GpuRmsNorm, RowAmaxesAreEachRowsLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  // The largest word of a host vector as a U32 [1] tensor, for same_amax_bits (NaNs alike).
  auto largest = [](const std::vector<uint32_t>& v) {
    return test::amax_words({*std::max_element(v.begin(), v.end())});
  };
  uint64_t seed = 70;
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{1001, 2048}, {64, 8192}, {37, 45}})
    for (const auto& [ad, xd] : {std::pair{DType::BF16, DType::BF16}, {DType::BF16, DType::F32}}) {
      const std::string what = "[" + std::to_string(N) + ", " + std::to_string(C) + "] x " + dtype_name(xd);
      Rng rng(seed++);
      Tensor x = random_host(rng, {N, C}, 1.5, 0.3), dy = random_host(rng, {N, C}), res = random_host(rng, {N, C});
      x.data<float>()[N / 2 * C + C / 3] = std::numeric_limits<float>::quiet_NaN();
      res.data<float>()[N / 3 * C + C / 2] = std::numeric_limits<float>::quiet_NaN();
      const Tensor gx = upload(x, xd), gdy = upload(dy, ad), gres = upload(res, xd);
      const Tensor w = upload(random_host(rng, {C}, 0.3, 1.0), DType::F32);
      // forward: y in dy's dtype (an fp32 stream normalised into bf16 where x is fp32)
      Tensor y = poisoned({N, C}, ad), y0 = poisoned({N, C}, ad), rstd = poisoned({N}, DType::F32);
      Tensor amax = Tensor::empty({1}, DType::U32, gpu()), rows = Tensor::empty({N}, DType::U32, gpu());
      poison(amax), poison(rows);
      ops::rmsnorm_forward(y0, rstd, gx, w, 1e-5f);
      ops::rmsnorm_forward(y, rstd, gx, w, 1e-5f, &amax, &rows);
      const Tensor hy = download_raw(y);
      EXPECT_EQ(std::memcmp(hy.data_ptr(), download_raw(y0).data_ptr(), hy.nbytes()), 0) << what << ": y";
      const std::vector<uint32_t> want = test::row_amax_of(hy);
      EXPECT_TRUE(same_amax_bits(rows, test::amax_words(want))) << what << ": the forward's rows";
      EXPECT_TRUE(same_amax_bits(amax, largest(want))) << what << ": the forward's tensor";
      // backward with dresidual, into dx (x's dtype) and, where the dtypes differ, its rounded copy
      const bool rounded = ad != xd;
      Tensor dx = poisoned({N, C}, xd), dx0 = poisoned({N, C}, xd), copy = poisoned({N, C}, ad);
      Tensor dw = Tensor::zeros({C}, DType::F32, gpu());
      poison(amax), poison(rows);
      ops::rmsnorm_backward(dx0, dw, gdy, gx, w, rstd, false, &gres, rounded ? &copy : nullptr);
      ops::rmsnorm_backward(dx, dw, gdy, gx, w, rstd, false, &gres, rounded ? &copy : nullptr, &amax, &rows);
      const Tensor hdx = download_raw(dx);
      EXPECT_EQ(std::memcmp(hdx.data_ptr(), download_raw(dx0).data_ptr(), hdx.nbytes()), 0) << what << ": dx";
      const std::vector<uint32_t> want_dx = test::row_amax_of(rounded ? download_raw(copy) : hdx);
      EXPECT_TRUE(same_amax_bits(rows, test::amax_words(want_dx))) << what << ": the backward's rows";
      EXPECT_TRUE(same_amax_bits(amax, largest(want_dx))) << what << ": the backward's tensor";
    }
}

TEST(GpuRmsNorm, RejectsBadArguments) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 4, C = 16;
  Tensor x = Tensor::zeros({N, C}, DType::BF16, gpu()), dy = Tensor::zeros({N, C}, DType::BF16, gpu());
  Tensor w = Tensor::zeros({C}, DType::BF16, gpu()), dw = Tensor::zeros({C}, DType::F32, gpu());
  Tensor dx = Tensor::zeros({N, C}, DType::BF16, gpu()), rstd = Tensor::zeros({N}, DType::F32, gpu());
  Tensor rstd_bad = Tensor::zeros({C}, DType::F32, gpu()), y = Tensor::zeros({N, C}, DType::BF16, gpu());
  Tensor dres = Tensor::zeros({N, C}, DType::BF16, gpu()), dres32 = Tensor::zeros({N, C}, DType::F32, gpu());
  EXPECT_THROW(ops::rmsnorm_forward(y, rstd_bad, x, w, 1e-5f), Error);
  EXPECT_THROW(ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, true, &dres), Error);    // accumulate too
  EXPECT_THROW(ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, &dres32), Error);  // dtype
}

}  // namespace
}  // namespace tetra::gputest
