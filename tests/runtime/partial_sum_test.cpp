// ops::sum_partials on the CPU: the order of the additions (s = 0 … S−1, then b, then the
// residual, one rounding), in place on the residual, bf16 storage, and the argument checks.
#include <cstring>

#include "tests/runtime/op_test_util.h"

namespace tetra::test {
namespace {

TEST(PartialSum, AddsInRankOrderThenBiasThenResidual) {
  // 1e8 + 1 − 1e8 is 0 in fp32 (1e8 + 1 rounds to 1e8), 1 in any other order that adds −1e8 first.
  Tensor parts = Tensor::from_vector(std::vector<float>{1e8f, 1.0f, -1e8f}, {3, 1, 1});
  Tensor out = poisoned({1, 1});
  ops::sum_partials(out, parts, Tensor());
  EXPECT_EQ(out.data<float>()[0], 0.0f);
  Tensor b = Tensor::from_vector(std::vector<float>{0.25f}, {1}),
         res = Tensor::from_vector(std::vector<float>{2.0f}, {1, 1});
  ops::sum_partials(out, parts, b, &res);
  EXPECT_EQ(out.data<float>()[0], 2.25f);
  ops::sum_partials(res, parts, b, &res);  // in place
  EXPECT_EQ(res.data<float>()[0], 2.25f);
}

TEST(PartialSum, MatchesASumInDouble) {
  Rng rng(3);
  const int64_t s = 5, m = 7, c = 9;
  Tensor parts = random_tensor(rng, {s, m, c}), b = random_tensor(rng, {c}), res = random_tensor(rng, {m, c});
  Tensor out = poisoned({m, c});
  ops::sum_partials(out, parts, b, &res);
  std::vector<double> want(static_cast<size_t>(m * c));
  for (int64_t i = 0; i < m * c; ++i) {
    double v = b.data<float>()[i % c] + res.data<float>()[i];
    for (int64_t k = 0; k < s; ++k) v += parts.data<float>()[k * m * c + i];
    want[static_cast<size_t>(i)] = v;
  }
  EXPECT_LE(rel_error(out, want), 1e-6);
  // bf16 storage: the same fp32 sum of the stored values, rounded once.
  Tensor pb = Tensor::empty(parts.shape(), DType::BF16), ob = Tensor::empty({m, c}, DType::BF16);
  ops::copy(pb, parts);
  ops::sum_partials(ob, pb, Tensor());
  for (int64_t i = 0; i < m * c; ++i) {
    float acc = bf16_to_float(pb.bf16_bits()[i]);
    for (int64_t k = 1; k < s; ++k) acc += bf16_to_float(pb.bf16_bits()[k * m * c + i]);
    EXPECT_EQ(ob.bf16_bits()[i], float_to_bf16(acc)) << i;
  }
}

TEST(PartialSum, RefusesWrongShapesAndOverlap) {
  Tensor parts = Tensor::zeros({2, 3, 4}, DType::F32);
  Tensor wrong = Tensor::zeros({3, 5}, DType::F32);
  EXPECT_THROW(ops::sum_partials(wrong, parts, Tensor()), Error);
  Tensor inside = parts.slice_flat(0, {3, 4});
  EXPECT_THROW(ops::sum_partials(inside, parts, Tensor()), Error);
  Tensor out = Tensor::zeros({3, 4}, DType::F32), bad_bias = Tensor::zeros({3}, DType::F32);
  EXPECT_THROW(ops::sum_partials(out, parts, bad_bias), Error);
}

}  // namespace
}  // namespace tetra::test
