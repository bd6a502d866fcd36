// CUDA reductions against the CPU twin: sum of squares (accumulating into acc[0], bit-reproducible),
// the sum to the host, column sums (the bias gradients), and the copy-engine all-reduce's n-way
// sum, over vectorised, odd and large sizes and every supported dtype.
#include <cmath>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/peer_sum.h"
#include "runtime/cuda/reduce.h"
#include "tests/runtime/cuda/gpu_test_util.h"

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
      EXPECT_LE(close_error(gacc, acc), kTolF32) << "n=" << n << " " << dtype_name(dt);
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

// out[c] (+)= Σ_r in[r, c] against sums in double: the 16-byte path (C % 8 == 0) with one and with
// several row blocks per group (R > 256 · 64), the element path (odd C, or a view 2 bytes off
// alignment), fp32 and bf16 on either side; and the same bits twice.
TEST(GpuReduce, ColumnSum) {
  TETRA_REQUIRE_GPU();
  Rng rng(3);
  const cuda::DeviceScope scope(gpu());
  struct Case {
    int64_t R, C, offset;  // offset: elements the input view starts into its buffer
  };
  // fp32 inputs of up to 64 rows take the single fold kernel (R = 1, 64 there; 65 not).
  for (const Case& k : {Case{1, 8, 0}, Case{1, 768, 0}, Case{64, 2048, 0}, Case{65, 40, 3}, Case{37, 768, 0},
                        Case{4096, 2304, 0}, Case{40000, 264, 0}, Case{16384, 768, 0}, Case{1000, 29, 0},
                        Case{300, 64, 1}}) {
    Tensor flat = representable(random_host(rng, {k.offset + k.R * k.C}, 1.0, 0.1), DType::BF16);
    Tensor init = representable(random_host(rng, {k.C}), DType::BF16);
    std::vector<double> want(static_cast<size_t>(k.C), 0.0);
    const float* pf = flat.data<float>() + k.offset;
    for (int64_t r = 0; r < k.R; ++r)
      for (int64_t c = 0; c < k.C; ++c) want[static_cast<size_t>(c)] += pf[r * k.C + c];
    std::vector<double> want_acc = want;
    for (int64_t c = 0; c < k.C; ++c) want_acc[static_cast<size_t>(c)] += init.data<float>()[c];
    for (DType in_dt : {DType::F32, DType::BF16}) {
      Tensor gflat = upload(flat, in_dt);
      const Tensor gin = gflat.slice_flat(k.offset, {k.R, k.C});
      for (DType out_dt : {DType::F32, DType::BF16}) {
        const std::string what = "R=" + std::to_string(k.R) + " C=" + std::to_string(k.C) + " offset " +
                                 std::to_string(k.offset) + " " + dtype_name(in_dt) + " -> " + dtype_name(out_dt);
        Tensor out = poisoned({k.C}, out_dt);
        cuda::column_sum(out, gin, k.R, k.C, /*accumulate=*/false);
        EXPECT_LE(close_error(download(out), want), tol(out_dt)) << what;
        Tensor again = poisoned({k.C}, out_dt);
        cuda::column_sum(again, gin, k.R, k.C, false);
        EXPECT_EQ(download(again), download(out)) << what << ": not deterministic";
        Tensor acc = upload(init, out_dt);
        cuda::column_sum(acc, gin, k.R, k.C, /*accumulate=*/true);
        EXPECT_LE(close_error(download(acc), want_acc), tol(out_dt)) << what << ", accumulate";
      }
    }
  }
}

// peer_sum (the owner's sum in the copy-engine all-reduce) against its CPU twin: 1 to 8 sources,
// vector and scalar paths (unaligned starts, odd counts), the destination aliasing source 0 as it
// does in the all-reduce; results must be bit-identical (fp32 accumulation in rank order).
TEST(GpuPeerSum, MatchesCpuTwin) {
  TETRA_REQUIRE_GPU();
  Rng rng(7);
  for (DType dt : {DType::BF16, DType::F32}) {
    for (int ranks : {1, 2, 3, 8}) {
      for (auto [n, skew] : {std::pair<int64_t, int64_t>{1, 0}, {1001, 0}, {8 * 4099, 0}, {8 * 4099, 3}, {(1 << 20) + 5, 1}}) {
        std::vector<Tensor> dev;
        std::vector<std::vector<float>> host;
        std::vector<float> before;  // source 0's elements ahead of the range
        for (int r = 0; r < ranks; ++r) {
          Tensor h = representable(random_host(rng, {n + skew}), dt);
          if (r == 0) before.assign(h.data<float>(), h.data<float>() + skew);
          host.emplace_back(h.data<float>() + skew, h.data<float>() + skew + n);
          dev.push_back(upload(h, dt));
        }
        const size_t es = dtype_size(dt);
        std::vector<const void*> src;
        for (Tensor& t : dev) src.push_back(static_cast<const char*>(t.data_ptr()) + skew * static_cast<int64_t>(es));
        void* dst = const_cast<void*>(src[0]);
        cuda::peer_sum(dst, src, n, dt, cuda::stream_of(gpu()));
        const std::vector<float> want = cuda::peer_sum_reference(host, dt);
        const std::vector<double> got = download(dev[0]);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i + skew)] != static_cast<double>(want[static_cast<size_t>(i)]);
        EXPECT_EQ(wrong, 0) << dtype_name(dt) << " ranks=" << ranks << " n=" << n << " skew=" << skew;
        for (int64_t i = 0; i < skew; ++i)  // elements before the range are untouched
          EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<double>(before[static_cast<size_t>(i)]));
      }
    }
  }
}

}  // namespace
}  // namespace tetra::gputest
