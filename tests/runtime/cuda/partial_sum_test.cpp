// CUDA sum_partials (runtime/cuda/partial_sum.cu) against its CPU twin: random partials (never
// zeros), outputs poisoned first; fp32 and bf16; with and without bias and residual, in place; the
// 16-byte path (C % 8 == 0, aligned) and the element path (odd C, a view 2 bytes off alignment);
// S = 1 … 8 partials. Both add in the same order and round once, so besides the norm-wise error the
// results must be the same bits.
#include <cstring>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

bool same_bits(const Tensor& dev, const Tensor& host) {
  Tensor d = download_raw(dev);
  return d.nbytes() == host.nbytes() && std::memcmp(d.data_ptr(), host.data_ptr(), host.nbytes()) == 0;
}

TEST(GpuPartialSum, MatchesTheCpuTwinBitForBit) {
  TETRA_REQUIRE_GPU();
  Rng rng(7);
  struct Case {
    int64_t s, m, c;
  };
  for (const Case cs : {Case{1, 3, 8}, Case{2, 7, 5}, Case{3, 13, 64}, Case{4, 129, 2048}, Case{8, 5, 24}}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int with = 0; with < 4; ++with) {
        const bool bias = with & 1, residual = with & 2;
        Tensor parts = representable(random_host(rng, {cs.s, cs.m, cs.c}), dt);
        Tensor b = representable(random_host(rng, {cs.c}, 0.5), dt);
        Tensor res = representable(random_host(rng, {cs.m, cs.c}), dt);
        // The CPU twin on the same dtype (bf16 inputs and output on the host too).
        Tensor hparts = host_as(parts, dt), hb = host_as(b, dt), hres = host_as(res, dt);
        Tensor want = Tensor::empty({cs.m, cs.c}, dt);
        ops::sum_partials(want, hparts, bias ? hb : Tensor(), residual ? &hres : nullptr);
        Tensor got = poisoned({cs.m, cs.c}, dt), gres = upload(res, dt);
        ops::sum_partials(got, upload(parts, dt), bias ? upload(b, dt) : Tensor(), residual ? &gres : nullptr);
        const std::string what = std::string(name(dt)) + " S=" + std::to_string(cs.s) + " M=" +
                                 std::to_string(cs.m) + " C=" + std::to_string(cs.c) + " with=" + std::to_string(with);
        EXPECT_LE(rel_error(download(got), test::to_doubles(want)), tol(dt)) << what;
        EXPECT_TRUE(same_bits(got, want)) << what;
        if (residual) {  // in place: the residual stream receives the sum
          ops::sum_partials(gres, upload(parts, dt), bias ? upload(b, dt) : Tensor(), &gres);
          EXPECT_TRUE(same_bits(gres, want)) << what << " in place";
        }
      }
    }
  }
}

TEST(GpuPartialSum, UnalignedViewsTakeTheElementPath) {
  TETRA_REQUIRE_GPU();
  Rng rng(8);
  const int64_t s = 3, m = 6, c = 16;
  Tensor parts = representable(random_host(rng, {s * m * c + 1}), DType::BF16);
  Tensor hparts = host_as(parts, DType::BF16);
  Tensor want = Tensor::empty({m, c}, DType::BF16);
  ops::sum_partials(want, hparts.slice_flat(1, {s, m, c}), Tensor());
  Tensor gparts = upload(parts, DType::BF16);
  Tensor got = poisoned({m, c}, DType::BF16);
  ops::sum_partials(got, gparts.slice_flat(1, {s, m, c}), Tensor());  // 2 bytes off 16-byte alignment
  EXPECT_TRUE(same_bits(got, want));
}

TEST(GpuPartialSum, RefusesOverlapAndShapeMismatch) {
  TETRA_REQUIRE_GPU();
  Tensor parts = Tensor::zeros({2, 4, 8}, DType::F32, gpu());
  Tensor inside = parts.slice_flat(0, {4, 8});
  EXPECT_THROW(ops::sum_partials(inside, parts, Tensor()), Error);
  Tensor wrong = Tensor::zeros({4, 7}, DType::F32, gpu());
  EXPECT_THROW(ops::sum_partials(wrong, parts, Tensor()), Error);
}

}  // namespace
}  // namespace tetra::gputest
