// CUDA reductions against the CPU twin: sum of squares (accumulating into acc[0], bit-reproducible)
// and the sum to the host, over vectorised, odd and large sizes and every supported dtype.
#include <cmath>

#include "tests/gpu/gpu_test_util.h"

namespace tetra::gputest {
namespace {

TEST(GpuReduce, SumSquaresAccumulates) {
  TETRA_REQUIRE_GPU();
  Rng rng(1);
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{8 * 12345}, int64_t{(1 << 22) + 3}}) {
    Tensor x = representable(random_host(rng, {n}), DType::BF16);
    for (DType dt : {DType::F32, DType::BF16}) {
      Tensor acc = Tensor::from_vector(std::vector<float>{2.5f}, {1});
      ops::sum_squares(acc, x);
      Tensor gacc = upload(Tensor::from_vector(std::vector<float>{2.5f}, {1}), DType::F32);
      Tensor gx = upload(x, dt);
      ops::sum_squares(gacc, gx);
      EXPECT_LE(rel_error(gacc, acc), kTolF32) << "n=" << n << " " << dtype_name(dt);
      // Deterministic: the same inputs give the same bits.
      Tensor again = upload(Tensor::from_vector(std::vector<float>{2.5f}, {1}), DType::F32);
      ops::sum_squares(again, gx);
      EXPECT_EQ(download(again)[0], download(gacc)[0]) << "n=" << n << " " << dtype_name(dt);
    }
  }
}

TEST(GpuReduce, SumToHostEveryDtype) {
  TETRA_REQUIRE_GPU();
  Rng rng(2);
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{(1 << 20) + 17}}) {
    Tensor x = representable(random_host(rng, {n}, 1.0, 0.25), DType::BF16);
    const double want = ops::sum_to_host(x);
    for (DType dt : {DType::F32, DType::BF16}) {
      const double got = ops::sum_to_host(upload(x, dt));
      EXPECT_NEAR(got, want, 1e-9 * (1.0 + std::abs(want)) + 1e-6 * std::sqrt(static_cast<double>(n)))
          << "n=" << n << " " << dtype_name(dt);
    }
    Tensor ids = random_ids(rng, {n}, -1000, 1000);
    EXPECT_EQ(ops::sum_to_host(upload_raw(ids)), ops::sum_to_host(ids)) << "int32 n=" << n;
    Tensor wide = Tensor::empty({n}, DType::I64);
    Tensor dbl = Tensor::empty({n}, DType::F64);
    for (int64_t i = 0; i < n; ++i) {
      wide.data<int64_t>()[i] = (int64_t{1} << 20) + ids.data<int32_t>()[i];  // sums stay exact in fp64
      dbl.data<double>()[i] = x.data<float>()[i] * 1e-3;
    }
    EXPECT_EQ(ops::sum_to_host(upload_raw(wide)), ops::sum_to_host(wide)) << "int64 n=" << n;
    EXPECT_NEAR(ops::sum_to_host(upload_raw(dbl)), ops::sum_to_host(dbl), 1e-9) << "fp64 n=" << n;
  }
}

}  // namespace
}  // namespace tetra::gputest
