// CUDA LayerNorm (one warp per row; deterministic dw/db through per-block partials) against the CPU
// twin: GPT-2's C = 768, an odd C (scalar path), a wide C that needs opt-in shared memory, fp32
// and bf16, with and without bias, dx overwritten or accumulated.
#include <sstream>
#include <string>

#include "tests/gpu/gpu_test_util.h"

namespace tetra::gputest {
namespace {

Tensor host_sum(const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::empty(a.shape(), DType::F32);
  ops::add(s, a, b);
  return s;
}

void check_layernorm(const Shape& x_shape, bool with_bias, uint64_t seed) {
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

  for (DType dt : {DType::F32, DType::BF16}) {
    std::ostringstream what;
    what << "x " << shape_str(x_shape) << " " << dtype_name(dt) << (with_bias ? "" : " no bias");
    const double t = tol(dt);
    Tensor gx = upload(x, dt), gw = upload(w, dt), gdy = upload(dy, dt);
    Tensor gb = with_bias ? upload(b, dt) : Tensor();
    Tensor gy = poisoned(x_shape, dt), gmean = poisoned(rows, DType::F32), grstd = poisoned(rows, DType::F32);
    ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, eps);
    EXPECT_LE(rel_error(gy, y), t) << "forward y, " << what.str();
    EXPECT_LE(rel_error(gmean, mean), kTolF32) << "forward mean, " << what.str();
    EXPECT_LE(rel_error(grstd, rstd), kTolF32) << "forward rstd, " << what.str();

    // Backward from the GPU's own statistics (they match the CPU's to fp32 precision).
    Tensor gdx = poisoned(x_shape, dt);
    Tensor gdw = upload(dw0, dt), gdb = with_bias ? upload(db0, dt) : Tensor();
    ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, false);
    EXPECT_LE(rel_error(gdx, dx), t) << "backward dx, " << what.str();
    EXPECT_LE(rel_error(gdw, dw), t) << "backward dw, " << what.str();
    if (with_bias) {
      EXPECT_LE(rel_error(gdb, db), t) << "backward db, " << what.str();
    }

    Tensor gdx_acc = upload(dx0, dt);
    Tensor gdw2 = upload(dw0, dt), gdb2 = with_bias ? upload(db0, dt) : Tensor();
    ops::layernorm_backward(gdx_acc, gdw2, gdb2, gdy, gx, gw, gmean, grstd, true);
    EXPECT_LE(rel_error(gdx_acc, dx_acc), t) << "backward dx accumulate, " << what.str();

    // In place: y over x, dx over dy.
    Tensor gx2 = upload(x, dt);
    ops::layernorm_forward(gx2, gmean, grstd, gx2, gw, gb, eps);
    EXPECT_LE(rel_error(gx2, y), t) << "forward in place, " << what.str();
    Tensor gdy2 = upload(dy, dt), gdw3 = upload(dw0, dt), gdb3 = with_bias ? upload(db0, dt) : Tensor();
    ops::layernorm_backward(gdy2, gdw3, gdb3, gdy2, gx, gw, gmean, grstd, false);
    EXPECT_LE(rel_error(gdy2, dx), t) << "backward in place, " << what.str();
  }
}

TEST(GpuLayerNorm, Gpt2Width) {
  TETRA_REQUIRE_GPU();
  check_layernorm({4, 1024, 768}, true, 1);
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
  check_layernorm({64, 8192}, true, 6);
}

// dw/db are reduced in a fixed order: two runs give the same bits.
TEST(GpuLayerNorm, BackwardIsDeterministic) {
  TETRA_REQUIRE_GPU();
  Rng rng(7);
  const int64_t N = 8192, C = 768;
  Tensor x = upload(random_host(rng, {N, C}), DType::BF16), dy = upload(random_host(rng, {N, C}), DType::BF16);
  Tensor w = upload(random_host(rng, {C}), DType::BF16), b = upload(random_host(rng, {C}), DType::BF16);
  Tensor y = Tensor::empty({N, C}, DType::BF16, gpu()), mean = Tensor::empty({N}, DType::F32, gpu()),
         rstd = Tensor::empty({N}, DType::F32, gpu()), dx = Tensor::empty({N, C}, DType::BF16, gpu());
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  std::vector<Tensor> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor dw = Tensor::zeros({C}, DType::F32, gpu()), db = Tensor::zeros({C}, DType::F32, gpu());
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false);
    runs.push_back(download_raw(dw));
    runs.push_back(download_raw(db));
  }
  EXPECT_EQ(std::memcmp(runs[0].data_ptr(), runs[2].data_ptr(), runs[0].nbytes()), 0);
  EXPECT_EQ(std::memcmp(runs[1].data_ptr(), runs[3].data_ptr(), runs[1].nbytes()), 0);
}

}  // namespace
}  // namespace tetra::gputest
