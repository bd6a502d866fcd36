// The routed experts' grouped GEMMs under each FP8 recipe (models/fp8_grouped.h, runtime/ops.h
// moe_grouped_fp8_*) on the CPU, the recipes' emulation: each expert's GEMMs equal the FP8 projection
// (models/fp8_linear.h) called on that expert's rows and weight alone, bit for bit. The experts are
// ragged (no rows, 130 = 128 + 2 and 257 = 2·128 + 1 rows: the last 128-row run of the weight
// gradient's transposed operands is short) and their rows differ in magnitude by 4× from one expert
// to the next, so a scale or a tile that spanned two experts would change the codes; rows outside
// [offsets[0], offsets[G]) stay unwritten. And a MoE layer (models/moe_mlp.h) under a recipe runs its
// routed experts' three GEMMs through them.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "models/fp8_grouped.h"
#include "models/fp8_linear.h"
#include "models/fp8_step_weights.h"
#include "models/layer.h"
#include "models/moe_mlp.h"
#include "runtime/fp8_format.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

using test::clone;
using test::poisoned;
using test::random_tensor;
using test::amax_words;
using test::doubled_amaxes;
using test::row_amax_of;

constexpr int64_t G = 5, R = 400, O = 48, I = 160;  // I: a full 128-column block and a 32-column one
const std::vector<int32_t> kOffsets = {3, 3, 133, 133, 390, 395};

struct Problem {
  Tensor offsets, x, w, dy;
};

// x [R, in], dy [R, out] and w [G, out, in] at the widths out, in (O and I unless given).
Problem make_problem(uint64_t seed, int64_t out = O, int64_t in = I) {
  Rng rng(seed);
  Problem p;
  p.offsets = Tensor::empty({G + 1}, DType::I32);
  std::memcpy(p.offsets.data<int32_t>(), kOffsets.data(), kOffsets.size() * sizeof(int32_t));
  p.x = random_tensor(rng, {R, in});
  p.dy = random_tensor(rng, {R, out});
  p.w = random_tensor(rng, {G, out, in}, 0.05);
  for (int64_t g = 0; g < G; ++g) {  // expert g's rows at 4^g
    const float scale = std::pow(4.0f, static_cast<float>(g));
    for (int64_t r = kOffsets[g]; r < kOffsets[g + 1]; ++r) {
      for (int64_t i = 0; i < in; ++i) p.x.data<float>()[r * in + i] *= scale;
      for (int64_t o = 0; o < out; ++o) p.dy.data<float>()[r * out + o] /= scale;
    }
  }
  return p;
}

// a and b equal bit for bit over the experts' rows (row tensors) or whole (weights' gradients).
void expect_equal_over_experts(const Tensor& a, const Tensor& b, const char* what) {
  const int64_t rows = kOffsets.back() - kOffsets.front();
  const bool by_rows = a.ndim() == 2;
  const Tensor ia = by_rows ? a.narrow(kOffsets.front(), rows) : a, ib = by_rows ? b.narrow(kOffsets.front(), rows) : b;
  EXPECT_EQ(test::rel_error(ia, ib), 0.0) << what;
}

Tensor expert_weight(const Tensor& w, int64_t g) { return w.slice_flat(g * w.dim(1) * w.dim(2), {w.dim(1), w.dim(2)}); }

// got's rows [begin, begin + rows) (of width `width`) equal want's bit for bit.
void expect_rows_equal(const Tensor& got, int64_t begin, const Tensor& want, const char* what, int64_t g) {
  const int64_t n = want.numel(), offset = begin * (want.numel() / std::max<int64_t>(want.dim(0), 1));
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += got.data<float>()[offset + i] != want.data<float>()[i];
  EXPECT_EQ(differ, 0) << what << ": expert " << g << " has " << differ << " of " << n
                       << " elements unlike the per-expert FP8 projection";
}

void expect_unwritten_rows(const Tensor& t, const char* what) {
  const int64_t width = t.dim(1);
  for (int64_t r = 0; r < R; ++r) {
    if (r >= kOffsets.front() && r < kOffsets.back()) continue;
    for (int64_t c = 0; c < width; ++c)
      ASSERT_TRUE(std::isnan(t.data<float>()[r * width + c])) << what << ": row " << r << " outside the experts written";
  }
}

class Fp8Grouped : public ::testing::TestWithParam<Fp8Recipe> {};

TEST_P(Fp8Grouped, ForwardIsThePerExpertProjection) {
  const Fp8Recipe recipe = GetParam();
  Problem p = make_problem(11);
  Tensor y = poisoned({R, O});
  fp8_grouped::forward(recipe, y, p.x, p.w, p.offsets);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = kOffsets[g + 1] - kOffsets[g];
    if (m == 0) continue;
    Tensor want = Tensor::empty({m, O}, DType::F32);
    fp8_linear::forward(recipe, want, p.x.narrow(kOffsets[g], m), expert_weight(p.w, g), /*accumulate=*/false);
    expect_rows_equal(y, kOffsets[g], want, "forward", g);
  }
  expect_unwritten_rows(y, "forward");
  // The casts ran: the fp32 grouped GEMM differs, by FP8's rounding only.
  Tensor plain = poisoned({R, O});
  ops::moe_grouped_linear_forward(plain, p.x, p.w, p.offsets);
  const Tensor in_y = y.narrow(kOffsets.front(), kOffsets.back() - kOffsets.front());
  const Tensor in_plain = plain.narrow(kOffsets.front(), kOffsets.back() - kOffsets.front());
  const double err = test::rel_error(in_y, in_plain);
  EXPECT_GT(err, 1e-4);
  EXPECT_LT(err, 0.1);  // E4M3 keeps 3 mantissa bits: ~3 % per element, less over a 160-long sum
}

TEST_P(Fp8Grouped, InputGradientIsThePerExpertProjection) {
  const Fp8Recipe recipe = GetParam();
  Problem p = make_problem(12);
  Tensor dx = poisoned({R, I});
  fp8_grouped::backward_input(recipe, dx, p.dy, p.w, p.offsets);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = kOffsets[g + 1] - kOffsets[g];
    if (m == 0) continue;
    Tensor want = Tensor::empty({m, I}, DType::F32);
    fp8_linear::backward_input(recipe, want, p.dy.narrow(kOffsets[g], m), expert_weight(p.w, g), /*accumulate=*/false);
    expect_rows_equal(dx, kOffsets[g], want, "backward input", g);
  }
  expect_unwritten_rows(dx, "backward input");
}

// Stored (an expert without rows gets zeros) and accumulated (it keeps its values).
TEST_P(Fp8Grouped, WeightGradientIsThePerExpertProjection) {
  const Fp8Recipe recipe = GetParam();
  Problem p = make_problem(13);
  Rng rng(14);
  const Tensor before = random_tensor(rng, {G, O, I});
  for (bool accumulate : {false, true}) {
    Tensor dw = accumulate ? clone(before) : poisoned({G, O, I});
    fp8_grouped::backward_weight(recipe, dw, p.dy, p.x, p.offsets, accumulate);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t m = kOffsets[g + 1] - kOffsets[g];
      Tensor want = accumulate ? clone(expert_weight(before, g)) : Tensor::zeros({O, I}, DType::F32);
      if (m > 0) fp8_linear::backward_weight(recipe, want, p.dy.narrow(kOffsets[g], m), p.x.narrow(kOffsets[g], m));
      expect_rows_equal(dw, g * O, want, accumulate ? "backward weight (accumulating)" : "backward weight", g);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Grouped, ::testing::Values(Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise),
                         [](const auto& param_info) { return std::string(fp8_recipe_name(param_info.param)); });

// Tensorwise casts each row tensor ahead, once for both GEMMs that read it (ops::moe_grouped_fp8_cast):
// its codes are each expert's fp8_quantize with its transposed copy, placed (rows in x's layout; the
// transposed codes at the expert's padded columns, zeros after its rows), and the GEMMs reading them
// equal the GEMMs casting for themselves bit for bit, with either layout dropped as the layer drops it.
TEST(Fp8GroupedAhead, CodesAreThePerExpertCasts) {
  Problem p = make_problem(16);
  const ops::Fp8Cast cast{ops::Fp8Scaling::Tensorwise, DType::F8E5M2};
  ops::Fp8GroupedCodes c;
  ops::moe_grouped_fp8_cast(c, p.dy, cast, &p.offsets);
  const int64_t Rp = ops::moe_grouped_fp8_padded_rows(R, G);
  ASSERT_EQ(c.q.shape(), (Shape{R, O}));
  ASSERT_EQ(c.q_t.shape(), (Shape{O, Rp}));
  ASSERT_EQ(c.scale.shape(), (Shape{G}));
  const auto* q = static_cast<const uint8_t*>(c.q.data_ptr());
  const auto* qt = static_cast<const uint8_t*>(c.q_t.data_ptr());
  int64_t p0 = 0;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = kOffsets[g + 1] - kOffsets[g], width = (m + 127) / 128 * 128;
    EXPECT_EQ(c.padded_offsets.data<int32_t>()[g], p0) << "expert " << g;
    if (m > 0) {
      Tensor want = Tensor::empty({m, O}, DType::F8E5M2), scale = Tensor::empty({1}, DType::F32);
      ops::fp8_quantize(want, scale, p.dy.narrow(kOffsets[g], m), ops::Fp8Scaling::Tensorwise);
      EXPECT_EQ(c.scale.data<float>()[g], scale.data<float>()[0]) << "expert " << g;
      const auto* w = static_cast<const uint8_t*>(want.data_ptr());
      int64_t bad = 0;
      for (int64_t r = 0; r < width; ++r)
        for (int64_t o = 0; o < O; ++o) {
          if (r < m) bad += q[(kOffsets[g] + r) * O + o] != w[r * O + o];
          bad += qt[o * Rp + p0 + r] != (r < m ? w[r * O + o] : 0);
        }
      EXPECT_EQ(bad, 0) << "expert " << g << ": codes unlike its own cast";
    }
    p0 += width;
  }
  EXPECT_EQ(c.padded_offsets.data<int32_t>()[G], p0);
}

std::vector<uint32_t> u32_values(const Tensor& t) {
  const auto* p = static_cast<const uint32_t*>(t.data_ptr());
  return std::vector<uint32_t>(p, p + t.numel());
}

struct Routing {
  Tensor offsets, row_of, slot_of;  // moe_permute_map's
};
// N tokens each routed to k of E experts at random.
Routing random_routing(Rng& rng, int64_t N, int64_t k, int64_t E) {
  const Tensor ids = test::random_ids(rng, {N, k}, 0, static_cast<int32_t>(E));
  Routing r{Tensor::empty({E + 1}, DType::I32), Tensor::empty({N, k}, DType::I32), Tensor::empty({N * k}, DType::I32)};
  ops::moe_permute_map(r.offsets, r.row_of, r.slot_of, ids);
  return r;
}

// The ops that write the experts' row tensors measure each row's amax (ops.h row_amax), and the
// cast given them equals the cast that measures each expert itself, bit for bit (the CPU twins of
// GpuMoeGroupedFp8.ProducersMeasureEachRowsAmax).
TEST(Fp8GroupedAhead, RowAmaxesOfTheProducersCastAsTheirOwn) {
  Rng rng(17);
  const int64_t N = 40, k = 2, E = 4, d = 24, F = 20;
  const auto [off, row_of, slot_of] = random_routing(rng, N, k, E);
  const Tensor x = random_tensor(rng, {N, d}, 3.0);
  Tensor rows = poisoned({N * k, d}), rows_amax = Tensor::empty({N * k}, DType::U32);
  ops::moe_permute(rows, x, slot_of, k, &rows_amax);
  EXPECT_EQ(u32_values(rows_amax), row_amax_of(rows)) << "moe_permute";
  const ops::Fp8Cast cast{ops::Fp8Scaling::Tensorwise, DType::F8E4M3};
  ops::Fp8GroupedCodes own, given;
  ops::moe_grouped_fp8_cast(own, rows, cast, &off);
  ops::moe_grouped_fp8_cast(given, rows, cast, &off, &rows_amax);
  for (auto [a, b] : {std::pair{&own.q, &given.q}, {&own.q_t, &given.q_t}, {&own.scale, &given.scale}})
    EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), a->nbytes()), 0) << "the cast given the rows' amaxes";

  const Tensor dy = random_tensor(rng, {N, d}), w = random_tensor(rng, {N, k});
  Tensor d_rows = poisoned({N * k, d}), dw = Tensor::empty({N, k}, DType::F32);
  Tensor d_amax = Tensor::empty({N * k}, DType::U32);
  ops::moe_unpermute_backward(d_rows, dw, dy, rows, w, row_of, &d_amax);
  EXPECT_EQ(u32_values(d_amax), row_amax_of(d_rows)) << "moe_unpermute_backward";
  // Without d_rows: the same weights' gradient alone; no amax of rows not written.
  Tensor no_rows, dw_alone = Tensor::empty({N, k}, DType::F32);
  ops::moe_unpermute_backward(no_rows, dw_alone, dy, rows, w, row_of);
  EXPECT_EQ(std::memcmp(dw_alone.data_ptr(), dw.data_ptr(), dw.nbytes()), 0) << "d_weights without d_rows";
  EXPECT_THROW(ops::moe_unpermute_backward(no_rows, dw_alone, dy, rows, w, row_of, &d_amax), Error);

  const Tensor gu = random_tensor(rng, {N * k, 2 * F}, 2.0), dh = random_tensor(rng, {N * k, F});
  Tensor h = poisoned({N * k, F}), h_amax = Tensor::empty({N * k}, DType::U32);
  ops::swiglu_forward(h, gu, nullptr, &h_amax);
  EXPECT_EQ(u32_values(h_amax), row_amax_of(h)) << "swiglu_forward";
  Tensor dgu = poisoned({N * k, 2 * F}), dgu_amax = Tensor::empty({N * k}, DType::U32);
  ops::swiglu_backward(dgu, dh, gu, nullptr, &dgu_amax);
  EXPECT_EQ(u32_values(dgu_amax), row_amax_of(dgu)) << "swiglu_backward";
  // A row amax of the wrong length, or given for weights, is refused.
  Tensor short_amax = Tensor::empty({N * k - 1}, DType::U32);
  EXPECT_THROW(ops::swiglu_forward(h, gu, nullptr, &short_amax), Error);
  Tensor w3 = random_tensor(rng, {2, 16, 16}), w3_amax = Tensor::empty({2}, DType::U32);
  ops::Fp8GroupedCodes wc;
  EXPECT_THROW(ops::moe_grouped_fp8_cast(wc, w3, cast, nullptr, &w3_amax), Error);
}

// The weights' cast given each expert's amax (expert_amax: the optimizer's update measured it) takes
// it as it is: given the weights' own amaxes it equals the cast that measures them, bit for bit; given
// another, that expert's scale follows it. Refused for row tensors and at the wrong length.
TEST(Fp8GroupedAhead, TheWeightsCastTakesEachExpertsGivenAmax) {
  Rng rng(19);
  const int64_t experts = 3, rows_w = 16, cols_w = 40;
  const Tensor w = random_tensor(rng, {experts, rows_w, cols_w}, 0.1);
  Tensor amax = amax_words(row_amax_of(w.view({experts, rows_w * cols_w})));
  const ops::Fp8Cast cast{ops::Fp8Scaling::Tensorwise, DType::F8E4M3};
  ops::Fp8GroupedCodes own, given;
  ops::moe_grouped_fp8_cast(own, w, cast, nullptr);
  ops::moe_grouped_fp8_cast(given, w, cast, nullptr, nullptr, &amax);
  for (auto [a, b] : {std::pair{&own.q, &given.q}, {&own.q_t, &given.q_t}, {&own.scale, &given.scale}})
    EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), a->nbytes()), 0) << "the cast given the experts' amaxes";

  const float doubled = 2.0f * std::bit_cast<float>(static_cast<uint32_t*>(amax.data_ptr())[1]);
  static_cast<uint32_t*>(amax.data_ptr())[1] = std::bit_cast<uint32_t>(doubled);
  ops::moe_grouped_fp8_cast(given, w, cast, nullptr, nullptr, &amax);
  EXPECT_EQ(given.scale.data<float>()[0], own.scale.data<float>()[0]);
  EXPECT_EQ(given.scale.data<float>()[1], 1.0f / fp8_quant_factor(doubled, fp8_largest(Fp8Format::E4M3)))
      << "the given amax is taken as it is";

  const Tensor rows = random_tensor(rng, {10, cols_w});
  const Tensor off = Tensor::from_vector(std::vector<int32_t>{0, 4, 4, 10}, {experts + 1});
  ops::Fp8GroupedCodes none;
  EXPECT_THROW(ops::moe_grouped_fp8_cast(none, rows, cast, &off, nullptr, &amax), Error) << "rows take row_amax";
  Tensor short_amax = Tensor::empty({experts - 1}, DType::U32);
  EXPECT_THROW(ops::moe_grouped_fp8_cast(none, w, cast, nullptr, nullptr, &short_amax), Error);
}

// ops::moe_permute_fp8_cast gives the rows moe_permute writes and the codes moe_grouped_fp8_cast makes
// of them, and without rows (fp8_grouped::permute_rows) the same codes; the grouped GEMMs given those
// codes in place of x (undefined) equal the GEMMs reading x. A group-scaled recipe, which casts in its
// GEMMs, a cast of the wrong scaling, and an undefined x without the codes' layout are refused.
TEST(Fp8GroupedAhead, PermutingWithTheCastIsThePermutationThenTheCast) {
  Rng rng(19);
  const int64_t N = 40, k = 3, E = 4, d = 24, outs = 16;
  const auto [off, row_of, slot_of] = random_routing(rng, N, k, E);
  const Tensor x = random_tensor(rng, {N, d}, 3.0);
  const ops::Fp8Cast cast{ops::Fp8Scaling::Tensorwise, DType::F8E4M3};
  Tensor rows = poisoned({N * k, d}), rows_ref = poisoned({N * k, d});
  ops::Fp8GroupedCodes with_rows;
  ops::moe_permute_fp8_cast(rows, with_rows, x, slot_of, k, off, cast);
  const ops::Fp8GroupedCodes codes = fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, x, slot_of, k, off);
  ops::moe_permute(rows_ref, x, slot_of, k);
  const ops::Fp8GroupedCodes ref = fp8_grouped::cast_rows(Fp8Recipe::Tensorwise, rows_ref, off, /*gradient=*/false);
  EXPECT_EQ(std::memcmp(rows.data_ptr(), rows_ref.data_ptr(), rows.nbytes()), 0) << "the rows";
  for (const ops::Fp8GroupedCodes* c : std::initializer_list<const ops::Fp8GroupedCodes*>{&with_rows, &codes})
    for (auto [a, b] : {std::pair{&c->q, &ref.q}, {&c->q_t, &ref.q_t}, {&c->scale, &ref.scale},
                        {&c->padded_offsets, &ref.padded_offsets}})
      EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), a->nbytes()), 0) << a->describe();
  EXPECT_EQ(codes.format, DType::F8E4M3);

  // The forward and the weight gradient with the codes standing for x.
  const Tensor w = random_tensor(rng, {E, outs, d}, 0.1), dy = random_tensor(rng, {N * k, outs}, 0.01);
  Tensor y = poisoned({N * k, outs}), y_ref = poisoned({N * k, outs});
  fp8_grouped::forward(Fp8Recipe::Tensorwise, y, Tensor(), w, off, &codes);
  fp8_grouped::forward(Fp8Recipe::Tensorwise, y_ref, rows_ref, w, off);
  EXPECT_EQ(std::memcmp(y.data_ptr(), y_ref.data_ptr(), y.nbytes()), 0) << "the forward";
  ops::Fp8GroupedCodes kept_t = codes;
  kept_t.q = Tensor();  // as MoeMlp keeps them for W
  Tensor dw = poisoned({E, outs, d}), dw_ref = poisoned({E, outs, d});
  fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, dw, dy, Tensor(), off, false, nullptr, &kept_t);
  fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, dw_ref, dy, rows_ref, off, false);
  EXPECT_EQ(std::memcmp(dw.data_ptr(), dw_ref.data_ptr(), dw.nbytes()), 0) << "the weight gradient";

  EXPECT_THROW(fp8_grouped::permute_rows(Fp8Recipe::Blockwise, x, slot_of, k, off), Error);
  ops::Fp8GroupedCodes out;
  EXPECT_THROW(ops::moe_permute_fp8_cast(rows, out, x, slot_of, k, off, {ops::Fp8Scaling::Rows1x128, DType::F8E4M3}),
               Error);
  EXPECT_THROW(fp8_grouped::forward(Fp8Recipe::Tensorwise, y, Tensor(), w, off, &kept_t), Error);  // no row codes
  EXPECT_THROW(fp8_grouped::forward(Fp8Recipe::Tensorwise, y, Tensor(), w, off), Error);          // no codes at all
}

// The gathered cast given its tokens' amaxes (token_amax: the norm's row_amax of h, its backward's of
// dy) takes them as they are: the measured ones give the codes it makes measuring, bit for bit, with
// and without the routing weights (whose rows' amaxes are the tokens' times |w|); doubled ones double
// every expert's scale. A token_amax of another length is refused.
TEST(Fp8GroupedAhead, TheGatheredCastTakesItsTokensGivenAmaxes) {
  Rng rng(29);
  const int64_t N = 40, k = 3, E = 4, d = 24;
  const auto [off, row_of, slot_of] = random_routing(rng, N, k, E);
  const Tensor x = random_tensor(rng, {N, d}, 3.0), weights = random_tensor(rng, {N, k});
  const Tensor measured = amax_words(row_amax_of(x)), doubled = amax_words(doubled_amaxes(row_amax_of(x)));
  for (const Tensor* w : {static_cast<const Tensor*>(nullptr), &weights}) {
    const bool gradient = w != nullptr;
    const char* what = gradient ? "with the routing weights" : "without";
    const ops::Fp8GroupedCodes own = fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, x, slot_of, k, off, gradient, w);
    const ops::Fp8GroupedCodes given =
        fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, x, slot_of, k, off, gradient, w, &measured);
    for (auto [a, b] : {std::pair{&own.q, &given.q}, {&own.q_t, &given.q_t}, {&own.scale, &given.scale}})
      EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), a->nbytes()), 0) << what << ": " << a->describe();
    const ops::Fp8GroupedCodes big =
        fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, x, slot_of, k, off, gradient, w, &doubled);
    for (int64_t g = 0; g < E; ++g) {
      if (off.data<int32_t>()[g + 1] == off.data<int32_t>()[g]) continue;  // no rows: no amax to double
      EXPECT_EQ(big.scale.data<float>()[g], 2.0f * own.scale.data<float>()[g]) << what << ", expert " << g;
    }
  }
  const Tensor short_amax = amax_words(std::vector<uint32_t>(N - 1, 0));
  EXPECT_THROW(fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, x, slot_of, k, off, false, nullptr, &short_amax),
               Error);
}

// With the routing weights, ops::moe_permute_fp8_cast gives the rows moe_unpermute_backward writes
// (d_out_e: each slot's weight times its token's dy) and their cast as a gradient, bit for bit; the
// input and weight gradients given those codes in place of dy (undefined) equal the GEMMs reading
// d_out_e. Weights of the wrong shape, and a dy that neither it nor its codes' layout gives, are refused.
TEST(Fp8GroupedAhead, GatheringTheCombinesGradientIsItsBackwardThenTheCast) {
  Rng rng(23);
  const int64_t N = 40, k = 3, E = 4, outs = 24, in = 16;
  const auto [off, row_of, slot_of] = random_routing(rng, N, k, E);
  const Tensor dy = random_tensor(rng, {N, outs}, 3.0), weights = random_tensor(rng, {N, k});
  const Tensor rows_out = random_tensor(rng, {N * k, outs});
  Tensor d_out_e = poisoned({N * k, outs}), d_weights = Tensor::empty({N, k}, DType::F32);
  ops::moe_unpermute_backward(d_out_e, d_weights, dy, rows_out, weights, row_of);
  const ops::Fp8GroupedCodes ref = fp8_grouped::cast_rows(Fp8Recipe::Tensorwise, d_out_e, off, /*gradient=*/true);
  const ops::Fp8GroupedCodes codes =
      fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, dy, slot_of, k, off, /*gradient=*/true, &weights);
  Tensor rows = poisoned({N * k, outs});
  ops::Fp8GroupedCodes with_rows;
  ops::moe_permute_fp8_cast(rows, with_rows, dy, slot_of, k, off, {ops::Fp8Scaling::Tensorwise, DType::F8E5M2},
                            &weights);
  EXPECT_EQ(std::memcmp(rows.data_ptr(), d_out_e.data_ptr(), rows.nbytes()), 0) << "the rows";
  EXPECT_EQ(codes.format, DType::F8E5M2);
  for (const ops::Fp8GroupedCodes* c : std::initializer_list<const ops::Fp8GroupedCodes*>{&with_rows, &codes})
    for (auto [a, b] : {std::pair{&c->q, &ref.q}, {&c->q_t, &ref.q_t}, {&c->scale, &ref.scale}})
      EXPECT_EQ(std::memcmp(a->data_ptr(), b->data_ptr(), a->nbytes()), 0) << a->describe();

  // The input gradient reads the row codes, the weight gradient (after MoeMlp drops them) the transposed.
  const Tensor w = random_tensor(rng, {E, outs, in}, 0.1), x = random_tensor(rng, {N * k, in});
  Tensor dx = poisoned({N * k, in}), dx_ref = poisoned({N * k, in});
  fp8_grouped::backward_input(Fp8Recipe::Tensorwise, dx, Tensor(), w, off, &codes);
  fp8_grouped::backward_input(Fp8Recipe::Tensorwise, dx_ref, d_out_e, w, off);
  EXPECT_EQ(std::memcmp(dx.data_ptr(), dx_ref.data_ptr(), dx.nbytes()), 0) << "the input gradient";
  ops::Fp8GroupedCodes kept_t = codes;
  kept_t.q = Tensor();
  Tensor dw = poisoned({E, outs, in}), dw_ref = poisoned({E, outs, in});
  fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, dw, Tensor(), x, off, false, &kept_t);
  fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, dw_ref, d_out_e, x, off, false);
  EXPECT_EQ(std::memcmp(dw.data_ptr(), dw_ref.data_ptr(), dw.nbytes()), 0) << "the weight gradient";

  const Tensor short_weights = random_tensor(rng, {N, k - 1});
  EXPECT_THROW(fp8_grouped::permute_rows(Fp8Recipe::Tensorwise, dy, slot_of, k, off, true, &short_weights), Error);
  EXPECT_THROW(fp8_grouped::backward_input(Fp8Recipe::Tensorwise, dx, Tensor(), w, off, &kept_t), Error);  // no q
  EXPECT_THROW(fp8_grouped::backward_input(Fp8Recipe::Tensorwise, dx, Tensor(), w, off), Error);  // no codes
  ops::Fp8GroupedCodes x_t = fp8_grouped::cast_rows(Fp8Recipe::Tensorwise, x, off, /*gradient=*/false);
  x_t.q = Tensor();
  EXPECT_THROW(fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, dw, Tensor(), Tensor(), off, false, &kept_t, &x_t),
               Error);  // neither row tensor fixes R
}

TEST(Fp8GroupedAhead, GemmsReadingCodesEqualGemmsCasting) {
  const Fp8Recipe recipe = Fp8Recipe::Tensorwise;
  ASSERT_TRUE(fp8_grouped::casts_ahead(recipe));
  EXPECT_FALSE(fp8_grouped::casts_ahead(Fp8Recipe::Blockwise));
  Problem p = make_problem(17);
  ops::Fp8GroupedCodes xc = fp8_grouped::cast_rows(recipe, p.x, p.offsets, /*gradient=*/false);
  ops::Fp8GroupedCodes dyc = fp8_grouped::cast_rows(recipe, p.dy, p.offsets, /*gradient=*/true);
  Tensor y = poisoned({R, O}), y_want = poisoned({R, O});
  fp8_grouped::forward(recipe, y, p.x, p.w, p.offsets, &xc);
  fp8_grouped::forward(recipe, y_want, p.x, p.w, p.offsets);
  expect_equal_over_experts(y, y_want, "forward");
  Tensor dx = poisoned({R, I}), dx_want = poisoned({R, I});
  fp8_grouped::backward_input(recipe, dx, p.dy, p.w, p.offsets, &dyc);
  fp8_grouped::backward_input(recipe, dx_want, p.dy, p.w, p.offsets);
  expect_equal_over_experts(dx, dx_want, "backward input");
  Tensor dw_want = poisoned({G, O, I});
  fp8_grouped::backward_weight(recipe, dw_want, p.dy, p.x, p.offsets, false);
  // The weight gradient from the transposed codes alone (the layer drops the row codes after the
  // first GEMM), and from the row codes alone.
  for (bool keep_t : {true, false}) {
    ops::Fp8GroupedCodes xk = xc, dyk = dyc;
    (keep_t ? xk.q : xk.q_t) = Tensor();
    (keep_t ? dyk.q : dyk.q_t) = Tensor();
    Tensor dw = poisoned({G, O, I});
    fp8_grouped::backward_weight(recipe, dw, p.dy, p.x, p.offsets, false, &dyk, &xk);
    expect_equal_over_experts(dw, dw_want, keep_t ? "backward weight from the transposed codes" : "backward weight from the row codes");
  }
}

// Blockwise row tensors whole 1×128 groups wide cast ahead (fp8_grouped::cast_rows: their 1×128 rows
// and 128×1 runs in one call, as the layer casts d_out_e and d_gu_e) give the three GEMMs the bits of
// their own casts, the weight gradient from the runs alone; the same experts and magnitudes as
// make_problem's, O and I made whole groups (128, 256).
TEST(Fp8GroupedAhead, BlockwiseRowsCastAheadEqualGemmsCasting) {
  const Fp8Recipe recipe = Fp8Recipe::Blockwise;
  EXPECT_TRUE(fp8_grouped::casts_rows_ahead(recipe, 128));
  EXPECT_FALSE(fp8_grouped::casts_rows_ahead(recipe, 48)) << "a part of a 1×128 group";
  EXPECT_TRUE(fp8_grouped::casts_rows_ahead(Fp8Recipe::Tensorwise, 48));
  EXPECT_FALSE(fp8_grouped::casts_rows_ahead(Fp8Recipe::None, 128));
  constexpr int64_t Ob = 128, Ib = 256;
  const Problem base = make_problem(19, Ob, Ib);
  const Tensor &x = base.x, &dy = base.dy, &w = base.w;
  const ops::Fp8GroupedCodes xc = fp8_grouped::cast_rows(recipe, x, base.offsets, /*gradient=*/false);
  ops::Fp8GroupedCodes dyc = fp8_grouped::cast_rows(recipe, dy, base.offsets, /*gradient=*/true);
  ASSERT_TRUE(dyc.scale_t.defined() && dyc.padded_offsets.defined());
  Tensor y = poisoned({R, Ob}), y_want = poisoned({R, Ob});
  fp8_grouped::forward(recipe, y, x, w, base.offsets, &xc);
  fp8_grouped::forward(recipe, y_want, x, w, base.offsets);
  expect_equal_over_experts(y, y_want, "forward");
  Tensor dx = poisoned({R, Ib}), dx_want = poisoned({R, Ib});
  fp8_grouped::backward_input(recipe, dx, dy, w, base.offsets, &dyc);
  fp8_grouped::backward_input(recipe, dx_want, dy, w, base.offsets);
  expect_equal_over_experts(dx, dx_want, "backward input");
  Tensor dw = poisoned({G, Ob, Ib}), dw_want = poisoned({G, Ob, Ib});
  fp8_grouped::backward_weight(recipe, dw_want, dy, x, base.offsets, false);
  ops::Fp8GroupedCodes xk = xc;
  xk.q = dyc.q = Tensor();  // the layer keeps the runs alone for W
  fp8_grouped::backward_weight(recipe, dw, dy, x, base.offsets, false, &dyc, &xk);
  expect_equal_over_experts(dw, dw_want, "backward weight from the runs");
  Tensor dw_one = poisoned({G, Ob, Ib});  // one operand's runs given, the other cast there
  fp8_grouped::backward_weight(recipe, dw_one, dy, x, base.offsets, false, &dyc, nullptr);
  expect_equal_over_experts(dw_one, dw_want, "backward weight from dy's runs and x cast there");
}

// Codes of another cast or shape are an error, not a wrong result.
TEST(Fp8GroupedAhead, MismatchedCodesAreRefused) {
  Problem p = make_problem(18);
  ops::Fp8GroupedCodes xc = fp8_grouped::cast_rows(Fp8Recipe::Tensorwise, p.x, p.offsets, /*gradient=*/false);
  Tensor dx = poisoned({R, I});
  // x's codes (E4M3, [R, I]) handed as dy's (E5M2, [R, O]).
  EXPECT_THROW(fp8_grouped::backward_input(Fp8Recipe::Tensorwise, dx, p.dy, p.w, p.offsets, &xc), Error);
  // Blockwise rows 160 wide (a 1×128 group and part of another) are cast in their GEMMs, not ahead.
  const ops::Fp8Cast rows128{ops::Fp8Scaling::Rows1x128, DType::F8E4M3};
  ops::Fp8GroupedCodes none;
  EXPECT_THROW(ops::moe_grouped_fp8_cast(none, p.x, rows128, &p.offsets), Error);
}

// Recipe none is the working dtype's grouped GEMMs themselves.
TEST(Fp8GroupedNone, RunsTheGroupedGemms) {
  Problem p = make_problem(15);
  Tensor y = poisoned({R, O}), want = poisoned({R, O});
  fp8_grouped::forward(Fp8Recipe::None, y, p.x, p.w, p.offsets);
  ops::moe_grouped_linear_forward(want, p.x, p.w, p.offsets);
  const Tensor a = y.narrow(kOffsets.front(), kOffsets.back() - kOffsets.front());
  const Tensor b = want.narrow(kOffsets.front(), kOffsets.back() - kOffsets.front());
  EXPECT_EQ(test::rel_error(a, b), 0.0);
}

Param& param_named(std::vector<Param*>& params, const std::string& suffix) {
  for (Param* p : params)
    if (p->name.size() >= suffix.size() && p->name.compare(p->name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return *p;
  ADD_FAILURE() << "no parameter named *" << suffix;
  return *params.front();
}

void expect_same(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < want.numel(); ++i) differ += got.data<float>()[i] != want.data<float>()[i];
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << want.numel() << " elements differ";
}

// A MoE layer of E = 4 experts of width F = 16 (top 2, no shared experts) over d = C = 32 under
// tensorwise, its weights random (rng), and a training context of N = 64 tokens.
struct TensorwiseMoe {
  static constexpr int64_t C = 32, E = 4, F = 16, N = 64;
  MoeShape shape;
  MoeMlp moe;
  std::vector<Param*> params;
  MicroBatchContext ctx{Device::cpu(), DType::F32};
  explicit TensorwiseMoe(Rng& rng) {
    shape.d_model = C;
    shape.experts = E;
    shape.top_k = shape.routing.top_k = 2;
    shape.expert_ffn = F;
    moe.init("model.layers.0.mlp", 0, shape, 0, 0.02f);
    moe.set_fp8(Fp8Recipe::Tensorwise);
    moe.collect(params);
    for (Param* p : params) {
      p->value = random_tensor(rng, p->local_shape, 0.1);
      p->grad = Tensor::zeros(p->local_shape, DType::F32);
    }
    ctx.batch = 2;
    ctx.seq_len = N / 2;
    ctx.loss_grad_scale = 1.0f / N;
  }
};

// One micro-batch through a MoE layer of 4 experts (top 2, no shared experts) under tensorwise: the
// experts' GEMMs — forward of gate|up, input gradient of gate|up, weight gradient of down — are the
// recipe's grouped GEMMs on the rows each expert got, not the working dtype's.
TEST(Fp8GroupedMoe, TheRoutedExpertsRunTheRecipe) {
  Rng rng(21);
  TensorwiseMoe layer(rng);
  constexpr int64_t C = TensorwiseMoe::C, E = TensorwiseMoe::E, F = TensorwiseMoe::F, N = TensorwiseMoe::N;
  const MoeShape& shape = layer.shape;
  MoeMlp& moe = layer.moe;
  std::vector<Param*>& params = layer.params;
  MicroBatchContext& ctx = layer.ctx;
  const Tensor gate_up = param_named(params, "experts.gate_up_proj.weight").value.view({E, 2 * F, C});
  Param& down = param_named(params, "experts.down_proj.weight");
  MoeMlp::State s;
  moe.forward(ctx, s, random_tensor(rng, {N, C}), random_tensor(rng, {N, C}));
  // Training under tensorwise: x_e and act_e cast once, their transposed codes kept for W.
  EXPECT_TRUE(s.x_codes.q_t.defined() && !s.x_codes.q.defined()) << "x_e's codes as kept";
  EXPECT_TRUE(s.act_codes.q_t.defined() && !s.act_codes.q.defined()) << "act_e's codes as kept";

  // Without the exchange x_e is never written: only its codes, gathered from h (the slots' index kept).
  EXPECT_FALSE(s.x_e.defined()) << "x_e itself";
  ASSERT_TRUE(s.slot_of.defined());
  Tensor x_e = Tensor::empty({N * shape.top_k, C}, DType::F32);
  ops::moe_permute(x_e, s.h, s.slot_of, shape.top_k);
  Tensor gu = Tensor::empty(s.gu_e.shape(), DType::F32), plain = Tensor::empty(s.gu_e.shape(), DType::F32);
  fp8_grouped::forward(Fp8Recipe::Tensorwise, gu, x_e, gate_up, s.e_offsets);
  expect_same(s.gu_e, gu, "gate|up forward");
  ops::moe_grouped_linear_forward(plain, x_e, gate_up, s.e_offsets);
  EXPECT_GT(test::rel_error(s.gu_e, plain), 1e-4) << "the forward ran in the working dtype";

  const Tensor dy = random_tensor(rng, {N, C});
  moe.backward_combine(ctx, s, dy);
  EXPECT_FALSE(s.d_rows.defined()) << "d_out_e's rows (the combine's backward makes the weights' gradient alone)";
  moe.backward_experts(ctx, s);
  EXPECT_FALSE(s.d_out_e.defined()) << "d_out_e itself";
  Tensor d_x = Tensor::empty(s.d_rows.shape(), DType::F32);
  fp8_grouped::backward_input(Fp8Recipe::Tensorwise, d_x, s.d_gu_e, gate_up, s.e_offsets);
  expect_same(s.d_rows, d_x, "gate|up input gradient");
  EXPECT_TRUE(s.d_out_codes.q_t.defined() && s.d_gu_codes.q_t.defined()) << "the gradients' codes kept for W";
  moe.backward_route(ctx, s);
  moe.backward_weight(s);
  EXPECT_FALSE(s.x_codes.defined() || s.act_codes.defined() || s.d_out_codes.defined() || s.d_gu_codes.defined())
      << "W released the codes";
  // d_out_e as moe_unpermute_backward writes it: each slot's weight times its token's dy.
  const int64_t k = shape.top_k;
  Tensor d_out_e = Tensor::empty({N * k, C}, DType::F32);
  ops::moe_permute(d_out_e, dy, s.slot_of, k);
  for (int64_t r = 0; r < N * k; ++r)
    for (int64_t c = 0; c < C; ++c) d_out_e.data<float>()[r * C + c] *= s.weights.data<float>()[s.slot_of.data<int32_t>()[r]];
  Tensor d_down = Tensor::zeros({E, C, F}, DType::F32);
  fp8_grouped::backward_weight(Fp8Recipe::Tensorwise, d_down, d_out_e, s.act_e, s.e_offsets, /*accumulate=*/true);
  expect_same(down.grad, d_down, "down weight gradient");
}

// A MoE layer's gathered casts take the tokens' amaxes their writers measured: the norm's row amaxes
// of h (MoeMlp::input_row_amax_slot, which the block hands to the norm) and those of dy the layer
// above's norm backward offers (backward_combine's dy_row_amax). Doubled ones double x_e's and
// d_out_e's scales, so the layer reads them rather than measuring.
TEST(Fp8GroupedMoe, TheGatheredCastsTakeTheTokensAmaxesTheirWritersMeasured) {
  Rng rng(31);
  TensorwiseMoe layer(rng);
  constexpr int64_t C = TensorwiseMoe::C, E = TensorwiseMoe::E, N = TensorwiseMoe::N;
  MoeMlp& moe = layer.moe;
  MicroBatchContext& ctx = layer.ctx;
  const Tensor h = random_tensor(rng, {N, C}), residual = random_tensor(rng, {N, C}), dy = random_tensor(rng, {N, C});
  auto doubled_rows = [](const Tensor& t) { return amax_words(doubled_amaxes(row_amax_of(t))); };
  MoeMlp::State own, given;
  moe.forward(ctx, own, h, residual);
  Tensor* slot = moe.input_row_amax_slot(ctx, given, N);
  ASSERT_NE(slot, nullptr) << "training under tensorwise without the exchange gathers x_e's codes";
  ops::copy(*slot, doubled_rows(h));
  moe.forward(ctx, given, h, residual);
  moe.backward_combine(ctx, own, dy);
  moe.backward_combine(ctx, given, dy, Tensor(), doubled_rows(dy));
  moe.backward_experts(ctx, own);
  moe.backward_experts(ctx, given);
  for (int64_t g = 0; g < E; ++g) {
    if (own.e_offsets.data<int32_t>()[g + 1] == own.e_offsets.data<int32_t>()[g]) continue;
    EXPECT_EQ(given.x_codes.scale.data<float>()[g], 2.0f * own.x_codes.scale.data<float>()[g]) << "x_e, expert " << g;
    EXPECT_EQ(given.d_out_codes.scale.data<float>()[g], 2.0f * own.d_out_codes.scale.data<float>()[g])
        << "d_out_e, expert " << g;
  }
}

// A MoE layer under blockwise (E = 4 experts, top 2, over d = C = 128, N = 64 tokens, within a
// step's FP8 weight casts): the row tensors whole 1×128 groups wide are cast ahead in both layouts
// (the runs kept for W), the experts' weights once a step as their stack's blocks, and every expert
// GEMM gives the bits of the same GEMM casting its operands itself. F = 128: all four row tensors and
// both weights; F = 16: act_e (16 wide) and d_gu_e (32) cast in their GEMMs, the gate/up stack (rows
// of 32 an expert) too.
void check_blockwise_layer(int64_t F) {
  constexpr int64_t C = 128, E = 4, N = 64;
  const Fp8Recipe bw = Fp8Recipe::Blockwise;
  Rng rng(41);
  MoeShape shape;
  shape.d_model = C, shape.experts = E, shape.top_k = shape.routing.top_k = 2, shape.expert_ffn = F;
  MoeMlp moe;
  moe.init("model.layers.0.mlp", 0, shape, 0, 0.02f);
  moe.set_fp8(bw);
  std::vector<Param*> params;
  moe.collect(params);
  for (Param* p : params) {
    p->value = random_tensor(rng, p->local_shape, 0.1);
    p->grad = Tensor::zeros(p->local_shape, DType::F32);
  }
  MicroBatchContext ctx{Device::cpu(), DType::F32};
  ctx.batch = 2, ctx.seq_len = N / 2, ctx.loss_grad_scale = 1.0f / N;
  Param& gate_up = param_named(params, "experts.gate_up_proj.weight");
  Param& down = param_named(params, "experts.down_proj.weight");
  const Tensor w_gu = gate_up.value.view({E, 2 * F, C}), w_down = down.value.view({E, C, F});
  const bool whole = F % ops::kFp8Block == 0;
  const Fp8StepWeights step(params);
  MoeMlp::State s;
  moe.forward(ctx, s, random_tensor(rng, {N, C}), random_tensor(rng, {N, C}));
  EXPECT_TRUE(s.x_codes.q_t.defined() && !s.x_codes.q.defined()) << "x_e's runs kept for W";
  EXPECT_EQ(s.act_codes.q_t.defined(), whole) << "act_e's runs kept where it is whole groups wide";
  EXPECT_EQ(gate_up.fp8_step.q.defined(), whole) << "the gate/up stack's blocks cast once for the step";
  EXPECT_TRUE(down.fp8_step.q.defined()) << "the down stack's blocks cast once for the step";
  Tensor gu = Tensor::empty(s.gu_e.shape(), DType::F32);
  fp8_grouped::forward(bw, gu, s.x_e, w_gu, s.e_offsets);
  expect_same(s.gu_e, gu, "gate|up forward");
  moe.backward_combine(ctx, s, random_tensor(rng, {N, C}));
  moe.backward_experts(ctx, s);
  EXPECT_TRUE(s.d_out_codes.q_t.defined()) << "d_out_e's runs kept for W";
  EXPECT_EQ(s.d_gu_codes.q_t.defined(), (2 * F) % ops::kFp8Block == 0) << "d_gu_e's runs";
  Tensor d_x = Tensor::empty(s.d_rows.shape(), DType::F32);
  fp8_grouped::backward_input(bw, d_x, s.d_gu_e, w_gu, s.e_offsets);
  expect_same(s.d_rows, d_x, "gate|up input gradient");
  Tensor d_down = Tensor::zeros({E, C, F}, DType::F32), d_gu = Tensor::zeros({E, 2 * F, C}, DType::F32);
  fp8_grouped::backward_weight(bw, d_down, s.d_out_e, s.act_e, s.e_offsets, /*accumulate=*/true);
  fp8_grouped::backward_weight(bw, d_gu, s.d_gu_e, s.x_e, s.e_offsets, /*accumulate=*/true);
  moe.backward_route(ctx, s);
  moe.backward_weight(s);
  expect_same(down.grad, d_down, "down weight gradient");
  expect_same(gate_up.grad, d_gu, "gate|up weight gradient");
}

TEST(Fp8GroupedMoe, BlockwiseCastsWholeGroupRowsAheadAndTheWeightsOnceAStep) { check_blockwise_layer(128); }

TEST(Fp8GroupedMoe, BlockwiseCastsNarrowRowsInTheirGemms) { check_blockwise_layer(16); }

}  // namespace
}  // namespace tetra
