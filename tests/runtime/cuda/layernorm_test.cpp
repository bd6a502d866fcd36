// CUDA LayerNorm against the CPU twin: the row kernels (rows in registers / streamed through shared
// memory, teams of 1 to 16 warps per row) at GPT-2 124M's [16384, 768], 1.3B's C = 2048 and the
// widths where the team and vector counts change, with row counts that leave blocks partly idle;
// the fallback kernels (C % 8 != 0, unaligned views, C beyond the row kernels); fp32 and bf16, bf16
// activations with fp32 weights and gradients, with and without bias, dx overwritten, accumulated,
// or dresidual + the LayerNorm's gradient (separately and in place); deterministic dw/db; the
// column sums of dx (dx_column_sum) against the CPU's and against a sum of the GPU's own dx.
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

Tensor host_sum(const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::empty(a.shape(), DType::F32);
  ops::add(s, a, b);
  return s;
}

// The dtype of w, b and their gradients: the activations' dtype, or fp32 whatever the activations.
enum class ParamType { SameAsX, F32 };

// Σ_n t[n, :] of a device tensor viewed as [N, C], summed on the host in double.
std::vector<double> column_sums(const Tensor& dev, int64_t C) {
  const std::vector<double> v = download(dev);
  std::vector<double> sums(static_cast<size_t>(C), 0.0);
  for (size_t i = 0; i < v.size(); ++i) sums[i % static_cast<size_t>(C)] += v[i];
  return sums;
}

// dx_column_sum must hold the column sums of the dx the same call wrote (the values as stored, summed
// in another order: fp32 rounding apart) and match the CPU's to the dtype's tolerance.
void expect_column_sum(const Tensor& gsum, const Tensor& gdx, const Tensor& cpu_sum, int64_t C, DType dt,
                       const std::string& what) {
  const std::vector<double> mine = download(gsum);
  EXPECT_LE(close_error(mine, column_sums(gdx, C)), 1e-5) << "dx_column_sum against the sum of dx, " << what;
  EXPECT_LE(close_error(mine, values(cpu_sum)), tol(dt)) << "dx_column_sum against the CPU, " << what;
}

void check_layernorm(const Shape& x_shape, bool with_bias, uint64_t seed, ParamType ptype = ParamType::SameAsX) {
  Rng rng(seed);
  const int64_t C = x_shape.back();
  const Shape rows(x_shape.begin(), x_shape.end() - 1);
  const float eps = 1e-5f;
  const DType rd = DType::BF16;  // inputs representable in bf16 serve both dtypes
  Tensor x = representable(random_host(rng, x_shape, 2.0, 0.5), rd);
  Tensor w = representable(random_host(rng, {C}, 0.3, 1.0), rd);
  Tensor b = with_bias ? representable(random_host(rng, {C}, 0.2), rd) : Tensor();
  Tensor dy = representable(random_host(rng, x_shape), rd);
  Tensor dx0 = representable(random_host(rng, x_shape), rd);
  Tensor dw0 = representable(random_host(rng, {C}, 0.1), rd);
  Tensor db0 = representable(random_host(rng, {C}, 0.1), rd);

  Tensor y = Tensor::empty(x_shape, DType::F32), mean = Tensor::empty(rows, DType::F32),
         rstd = Tensor::empty(rows, DType::F32);
  ops::layernorm_forward(y, mean, rstd, x, w, b, eps);
  Tensor dx = Tensor::empty(x_shape, DType::F32);
  Tensor dw = representable(dw0, rd), db = representable(db0, rd);  // copies; weight grads accumulate
  Tensor db_arg = with_bias ? db : Tensor();
  ops::layernorm_backward(dx, dw, db_arg, dy, x, w, mean, rstd, false);
  const Tensor dx_acc = host_sum(dx, dx0);
  const Tensor dres = representable(random_host(rng, x_shape, 0.5), rd);
  const Tensor dx_res = host_sum(dx, dres);  // dx with dresidual
  // The CPU's column sums of dx: plain, and with dresidual (the residual stream's gradient).
  Tensor sum_plain = Tensor::empty({C}, DType::F32), sum_res = Tensor::empty({C}, DType::F32);
  {
    Tensor dx_scratch = Tensor::empty(x_shape, DType::F32), dw_scratch = Tensor::zeros({C}, DType::F32);
    Tensor db_scratch = with_bias ? Tensor::zeros({C}, DType::F32) : Tensor();
    ops::layernorm_backward(dx_scratch, dw_scratch, db_scratch, dy, x, w, mean, rstd, false, nullptr, &sum_plain);
    ops::layernorm_backward(dx_scratch, dw_scratch, db_scratch, dy, x, w, mean, rstd, false, &dres, &sum_res);
  }

  for (DType dt : {DType::F32, DType::BF16}) {
    const DType pt = ptype == ParamType::F32 ? DType::F32 : dt;
    std::ostringstream what;
    what << "x " << shape_str(x_shape) << " " << dtype_name(dt) << ", w " << dtype_name(pt)
         << (with_bias ? "" : " no bias");
    const double t = tol(dt);
    Tensor gx = upload(x, dt), gw = upload(w, pt), gdy = upload(dy, dt);
    Tensor gb = with_bias ? upload(b, pt) : Tensor();
    Tensor gy = poisoned(x_shape, dt), gmean = poisoned(rows, DType::F32), grstd = poisoned(rows, DType::F32);
    ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, eps);
    EXPECT_LE(close_error(gy, y), t) << "forward y, " << what.str();
    EXPECT_LE(close_error(gmean, mean), kTolF32) << "forward mean, " << what.str();
    EXPECT_LE(close_error(grstd, rstd), kTolF32) << "forward rstd, " << what.str();

    // Backward from the GPU's own statistics (they match the CPU's to fp32 precision).
    Tensor gdx = poisoned(x_shape, dt);
    Tensor gdw = upload(dw0, pt), gdb = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, false);
    EXPECT_LE(close_error(gdx, dx), t) << "backward dx, " << what.str();
    EXPECT_LE(close_error(gdw, dw), t) << "backward dw, " << what.str();
    if (with_bias) {
      EXPECT_LE(close_error(gdb, db), t) << "backward db, " << what.str();
    }

    Tensor gdx_acc = upload(dx0, dt);
    Tensor gdw2 = upload(dw0, pt), gdb2 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(gdx_acc, gdw2, gdb2, gdy, gx, gw, gmean, grstd, true);
    EXPECT_LE(close_error(gdx_acc, dx_acc), t) << "backward dx accumulate, " << what.str();

    // In place: y over x, dx over dy.
    Tensor gx2 = upload(x, dt);
    ops::layernorm_forward(gx2, gmean, grstd, gx2, gw, gb, eps);
    EXPECT_LE(close_error(gx2, y), t) << "forward in place, " << what.str();
    Tensor gdy2 = upload(dy, dt), gdw3 = upload(dw0, pt), gdb3 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(gdy2, gdw3, gdb3, gdy2, gx, gw, gmean, grstd, false);
    EXPECT_LE(close_error(gdy2, dx), t) << "backward in place, " << what.str();

    // dx = dresidual + the LayerNorm's gradient: into a separate dx, over dresidual, and over dy.
    Tensor gdres = upload(dres, dt);
    Tensor gdx_res = poisoned(x_shape, dt);
    Tensor gdw4 = upload(dw0, pt), gdb4 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(gdx_res, gdw4, gdb4, gdy, gx, gw, gmean, grstd, false, &gdres);
    EXPECT_LE(close_error(gdx_res, dx_res), t) << "backward with dresidual, " << what.str();
    EXPECT_EQ(close_error(gdres, dres), 0.0) << "dresidual unchanged, " << what.str();
    EXPECT_LE(close_error(gdw4, dw), t) << "backward with dresidual dw, " << what.str();
    if (with_bias) {
      EXPECT_LE(close_error(gdb4, db), t) << "backward with dresidual db, " << what.str();
    }
    Tensor over_res = upload(dres, dt), gdw5 = upload(dw0, pt), gdb5 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(over_res, gdw5, gdb5, gdy, gx, gw, gmean, grstd, false, &over_res);
    EXPECT_LE(close_error(over_res, dx_res), t) << "backward with dresidual, dx over dresidual, " << what.str();
    Tensor over_dy = upload(dy, dt), gdw6 = upload(dw0, pt), gdb6 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(over_dy, gdw6, gdb6, over_dy, gx, gw, gmean, grstd, false, &gdres);
    EXPECT_LE(close_error(over_dy, dx_res), t) << "backward with dresidual, dx over dy, " << what.str();

    // dx_column_sum (written over NaN, never accumulated): plain, and with dresidual in place.
    Tensor gsum = poisoned({C}, DType::F32), gdx7 = poisoned(x_shape, dt);
    Tensor gdw7 = upload(dw0, pt), gdb7 = with_bias ? upload(db0, pt) : Tensor();
    ops::layernorm_backward(gdx7, gdw7, gdb7, gdy, gx, gw, gmean, grstd, false, nullptr, &gsum);
    EXPECT_LE(close_error(gdx7, dx), t) << "backward dx with its column sum, " << what.str();
    EXPECT_LE(close_error(gdw7, dw), t) << "backward dw with the column sum of dx, " << what.str();
    if (with_bias) {
      EXPECT_LE(close_error(gdb7, db), t) << "backward db with the column sum of dx, " << what.str();
    }
    expect_column_sum(gsum, gdx7, sum_plain, C, dt, what.str());
    Tensor over_res2 = upload(dres, dt), gdw8 = upload(dw0, pt), gdb8 = with_bias ? upload(db0, pt) : Tensor();
    poison(gsum);
    ops::layernorm_backward(over_res2, gdw8, gdb8, gdy, gx, gw, gmean, grstd, false, &over_res2, &gsum);
    EXPECT_LE(close_error(over_res2, dx_res), t) << "backward with dresidual and the column sum, " << what.str();
    expect_column_sum(gsum, over_res2, sum_res, C, dt, what.str() + ", with dresidual");
  }
}

// The [N, C] tensors as views at an 8-byte offset into a buffer: not 16-byte aligned, so the row
// kernels must step aside for the element-wise fallback.
void check_unaligned(int64_t N, int64_t C, uint64_t seed) {
  Rng rng(seed);
  const DType dt = DType::BF16;
  Tensor x = representable(random_host(rng, {N, C}, 2.0, 0.5), dt), dy = representable(random_host(rng, {N, C}), dt);
  Tensor dres = representable(random_host(rng, {N, C}), dt);
  Tensor w = representable(random_host(rng, {C}, 0.3, 1.0), dt), b = representable(random_host(rng, {C}, 0.2), dt);
  Tensor y = Tensor::empty({N, C}, DType::F32), mean = Tensor::empty({N}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dx = Tensor::empty({N, C}, DType::F32), dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres);

  auto unaligned = [&](const Tensor& host) {  // 4 bf16 = 8 bytes in
    Tensor buf = Tensor::zeros({N * C + 4}, DType::F32);
    std::memcpy(buf.data<float>() + 4, host.data<float>(), host.nbytes());
    return upload(buf, dt).slice_flat(4, {N, C});
  };
  Tensor gx = unaligned(x), gdy = unaligned(dy), gdres = unaligned(dres), gy = unaligned(x), gdx = unaligned(x);
  poison(gy);
  poison(gdx);
  Tensor gw = upload(w, dt), gb = upload(b, dt), gmean = poisoned({N}, DType::F32), grstd = poisoned({N}, DType::F32);
  ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, 1e-5f);
  EXPECT_LE(close_error(gy, y), kTolBF16) << "unaligned forward y";
  Tensor gdw = Tensor::zeros({C}, DType::F32, gpu()), gdb = Tensor::zeros({C}, DType::F32, gpu());
  Tensor sum = Tensor::empty({C}, DType::F32);
  {
    Tensor dx2 = Tensor::empty({N, C}, DType::F32), dw2 = Tensor::zeros({C}, DType::F32);
    Tensor db2 = Tensor::zeros({C}, DType::F32);
    ops::layernorm_backward(dx2, dw2, db2, dy, x, w, mean, rstd, false, &dres, &sum);
  }
  Tensor gsum = poisoned({C}, DType::F32);
  ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, false, &gdres, &gsum);
  EXPECT_LE(close_error(gdx, dx), kTolBF16) << "unaligned backward dx";
  expect_column_sum(gsum, gdx, sum, C, dt, "unaligned");
  EXPECT_LE(close_error(gdw, dw), kTolBF16) << "unaligned backward dw";
  EXPECT_LE(close_error(gdb, db), kTolBF16) << "unaligned backward db";
}

// GPT-2 124M: one 16×1024-token micro-batch.
TEST(GpuLayerNorm, Gpt2Width) {
  TETRA_REQUIRE_GPU();
  check_layernorm({16, 1024, 768}, true, 1);
}

// bf16 activations with fp32 weights and fp32 weight gradients.
TEST(GpuLayerNorm, Bf16ActivationsFp32Weights) {
  TETRA_REQUIRE_GPU();
  check_layernorm({2048, 768}, true, 11, ParamType::F32);
  check_layernorm({300, 2048}, false, 12, ParamType::F32);
}

// Where the row kernels change shape: vectors per thread (1 to 4) and warps per row (1 to 16),
// with row counts that leave the last rows of blocks idle. 1600 = GPT-2 XL, 2048 = the 1.3B model.
TEST(GpuLayerNorm, RowKernelWidths) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 20;
  for (int64_t C : {8, 256, 512, 1024, 1536, 1600, 2048, 3072, 4096}) {
    SCOPED_TRACE(testing::Message() << "C = " << C);
    check_layernorm({37, C}, true, seed++);
    check_layernorm({1001, C}, C % 512 == 0, seed++);
  }
  check_layernorm({1, 2048}, true, seed++);
}

TEST(GpuLayerNorm, OddWidthAndRows) {
  TETRA_REQUIRE_GPU();
  check_layernorm({37, 45}, true, 2);
  check_layernorm({37, 45}, false, 3);
  check_layernorm({1, 1}, true, 4);
  check_layernorm({5, 3, 100}, false, 5);  // C % 8 != 0 with leading dimensions
}

TEST(GpuLayerNorm, WideRowsNeedOptInSharedMemory) {
  TETRA_REQUIRE_GPU();
  check_layernorm({64, 8192}, true, 6);   // teams of 8 (forward) and 11 (backward) warps
  check_layernorm({19, 12288}, true, 8);  // the widest backward row kernel: 16 warps
  check_layernorm({9, 16384}, false, 9);  // forward row kernel of 16 warps; backward fallback
}

// The amax output (FP8 tensorwise casts of the projection the norm feeds): gpu_test_util.h.
TEST(GpuLayerNorm, AmaxOutputIsTheLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  check_norm_amax("layernorm", [](Tensor& y, const Tensor& x, Tensor& amax) {
    Rng rng(4);
    const int64_t C = x.dim(-1), N = x.numel() / C;
    Tensor w = upload(random_host(rng, {C}, 0.3, 1.0), DType::F32), b = upload(random_host(rng, {C}), DType::F32);
    Tensor mean = poisoned({N}, DType::F32), rstd = poisoned({N}, DType::F32);
    ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f, &amax);
  });
}

// The backward's dx_amax (the FP8 cast of the output gradient of the projection below), here beside
// the column sum of dx as GPT-2's blocks ask for both: gpu_test_util.h.
TEST(GpuLayerNorm, BackwardAmaxIsTheLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  check_norm_backward_amax("layernorm", [](Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x,
                                           const Tensor& dres, Tensor* dx_rounded, Tensor* amax) {
    Rng rng(4);
    const int64_t C = x.dim(-1), N = x.numel() / C;
    Tensor w = upload(random_host(rng, {C}, 0.3, 1.0), DType::F32), b = upload(random_host(rng, {C}), DType::F32);
    Tensor mean = poisoned({N}, DType::F32), rstd = poisoned({N}, DType::F32), y = poisoned({N, C}, x.dtype());
    Tensor db = Tensor::zeros({C}, DType::F32, gpu()), sum = poisoned({C}, DType::F32);
    ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres, &sum, dx_rounded, amax);
  });
}

TEST(GpuLayerNorm, UnalignedViewsTakeTheFallback) {
  TETRA_REQUIRE_GPU();
  check_unaligned(513, 768, 10);
}

// dw/db are reduced in a fixed order: two backward passes over the same inputs give the same bits
// of dw, db and dx (with dresidual when asked).
void expect_backward_deterministic(uint64_t seed, int64_t N, int64_t C, bool with_dresidual) {
  Rng rng(seed);
  Tensor x = upload(random_host(rng, {N, C}), DType::BF16), dy = upload(random_host(rng, {N, C}), DType::BF16);
  Tensor dres = with_dresidual ? upload(random_host(rng, {N, C}), DType::BF16) : Tensor();
  Tensor w = upload(random_host(rng, {C}), DType::BF16), b = upload(random_host(rng, {C}), DType::BF16);
  Tensor y = Tensor::empty({N, C}, DType::BF16, gpu()), mean = Tensor::empty({N}, DType::F32, gpu()),
         rstd = Tensor::empty({N}, DType::F32, gpu()), dx = Tensor::empty({N, C}, DType::BF16, gpu());
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  std::vector<Tensor> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor dw = Tensor::zeros({C}, DType::F32, gpu()), db = Tensor::zeros({C}, DType::F32, gpu());
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, with_dresidual ? &dres : nullptr);
    runs.push_back(download_raw(dw));
    runs.push_back(download_raw(db));
    runs.push_back(download_raw(dx));
  }
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(std::memcmp(runs[k].data_ptr(), runs[k + 3].data_ptr(), runs[k].nbytes()), 0) << "output " << k;
}

TEST(GpuLayerNorm, BackwardIsDeterministic) {
  TETRA_REQUIRE_GPU();
  expect_backward_deterministic(7, 8192, 768, /*with_dresidual=*/false);
}

// The same with teams of several warps per row (shared-memory row sums) and dresidual.
TEST(GpuLayerNorm, BackwardIsDeterministicWithTeams) {
  TETRA_REQUIRE_GPU();
  expect_backward_deterministic(8, 3000, 2048, /*with_dresidual=*/true);
}

// TETRA_NORM_BACKWARD_STAGES for the guard's lifetime (the norm reads it at every call).
class BackwardStages {
 public:
  explicit BackwardStages(const char* value) { setenv("TETRA_NORM_BACKWARD_STAGES", value, 1); }
  ~BackwardStages() { unsetenv("TETRA_NORM_BACKWARD_STAGES"); }
};

// The one-stage backward row kernel (blocks of ≤ 256 threads: C = 768 as one warp a row, 1024 as
// two, 2048 as three; wider rows keep two stages) against the CPU twin, every variant of
// check_layernorm (accumulate, in place, dresidual, the column sums of dx).
TEST(GpuLayerNorm, OneStageBackwardAgainstTheCpu) {
  TETRA_REQUIRE_GPU();
  BackwardStages one("1");
  check_layernorm({16, 1024, 768}, true, 31);
  check_layernorm({2048, 768}, true, 32, ParamType::F32);
  for (int64_t C : {256, 1024, 2048}) {
    SCOPED_TRACE(testing::Message() << "C = " << C);
    check_layernorm({1001, C}, true, 33 + C);
  }
}

// The stage count changes how many blocks an SM holds, so which rows a block sums into its dw/db
// partials (a fixed order per launch shape, not across shapes): dx, and its amax, are the same bits
// in both; dw, db and dx's column sums are fp32 sums of the same 16,384 terms of size ≈ 1 in another
// grouping: each sum is ≈ √N = 128 in size and its rounding differs by ≈ √N · 6e-8 ≈ 1e-5, 1e-7 of
// the sums' RMS, against the 1e-5 norm-wise (1e-4 worst element) allowed; a row dropped or counted
// twice moves an element by ≈ 1, 8e-3 of the RMS.
TEST(GpuLayerNorm, OneStageBackwardGivesTheBitsOfTwoStages) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 16384, C = 768;
  Rng rng(41);
  Tensor x = upload(random_host(rng, {N, C}), DType::BF16), dy = upload(random_host(rng, {N, C}), DType::BF16);
  Tensor dres = upload(random_host(rng, {N, C}), DType::BF16);
  Tensor w = upload(random_host(rng, {C}), DType::BF16), b = upload(random_host(rng, {C}), DType::BF16);
  Tensor y = Tensor::empty({N, C}, DType::BF16, gpu()), mean = Tensor::empty({N}, DType::F32, gpu()),
         rstd = Tensor::empty({N}, DType::F32, gpu());
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  std::vector<Tensor> out[2];
  for (const char* stages : {"2", "1"}) {
    BackwardStages set(stages);
    Tensor dx = poisoned({N, C}, DType::BF16), dw = Tensor::zeros({C}, DType::F32, gpu()),
           db = Tensor::zeros({C}, DType::F32, gpu()), sum = poisoned({C}, DType::F32),
           amax = Tensor::zeros({1}, DType::U32, gpu());
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres, &sum, nullptr, &amax);
    for (const Tensor& o : {dx, amax, dw, db, sum}) out[stages[0] - '1'].push_back(download_raw(o));
  }
  const char* names[] = {"dx", "dx amax", "dw", "db", "dx column sum"};
  for (int k = 0; k < 2; ++k)
    EXPECT_EQ(std::memcmp(out[0][k].data_ptr(), out[1][k].data_ptr(), out[0][k].nbytes()), 0) << names[k];
  for (int k = 2; k < 5; ++k) EXPECT_LE(close_error(values(out[1][k]), values(out[0][k])), 1e-5) << names[k];
}

// The arguments of a small bf16 LayerNorm backward (zeros), for the argument checks.
struct SmallBackward {
  static constexpr int64_t N = 4, C = 16;
  Tensor x = Tensor::zeros({N, C}, DType::BF16, gpu()), dy = Tensor::zeros({N, C}, DType::BF16, gpu());
  Tensor w = Tensor::zeros({C}, DType::BF16, gpu()), dw = Tensor::zeros({C}, DType::F32, gpu());
  Tensor db = Tensor::zeros({C}, DType::F32, gpu()), dx = Tensor::zeros({N, C}, DType::BF16, gpu());
  Tensor mean = Tensor::zeros({N}, DType::F32, gpu()), rstd = Tensor::zeros({N}, DType::F32, gpu());
  void run(bool accumulate = false, const Tensor* dres = nullptr) {
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, accumulate, dres);
  }
};

TEST(GpuLayerNorm, BackwardStagesSettingIsChecked) {
  TETRA_REQUIRE_GPU();
  SmallBackward a;
  BackwardStages bad("3");
  try {
    a.run();
    ADD_FAILURE() << "TETRA_NORM_BACKWARD_STAGES=3 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_NE(std::string(e.what()).find("TETRA_NORM_BACKWARD_STAGES"), std::string::npos) << e.what();
  }
}

TEST(GpuLayerNorm, RejectsBadResidualArguments) {
  TETRA_REQUIRE_GPU();
  SmallBackward a;
  const int64_t N = SmallBackward::N, C = SmallBackward::C;
  Tensor dres = Tensor::zeros({N, C}, DType::BF16, gpu()), dres32 = Tensor::zeros({N, C}, DType::F32, gpu());
  Tensor dres_short = Tensor::zeros({N, C - 8}, DType::BF16, gpu());
  EXPECT_THROW(a.run(true, &dres), Error);         // accumulate too
  EXPECT_THROW(a.run(false, &dres32), Error);      // dtype
  EXPECT_THROW(a.run(false, &dres_short), Error);  // shape
}

}  // namespace
}  // namespace tetra::gputest
