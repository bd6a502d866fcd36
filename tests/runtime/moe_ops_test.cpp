// The mixture-of-experts ops (runtime/ops.h, moe_*) on the CPU, where PyTorch is no oracle: ties and
// Hugging Face's 0.0 group masking, forced balance, finite-difference gradients of the router (with
// the balance loss), the combine and the grouped GEMMs, the permutation's order and inverse, empty and
// overfull experts, accumulation, the balancing bias step, and argument errors that name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "op_test_util.h"
#include "runtime/host_readback.h"
#include "runtime/step_control.h"

namespace tetra::test {
namespace {

void expect_error(const std::function<void()>& fn, const std::string& op, const std::string& detail = "") {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << "error does not name the op '" << op << "': " << msg;
    if (!detail.empty()) {
      EXPECT_NE(msg.find(detail), std::string::npos) << "error lacks '" << detail << "': " << msg;
    }
    return;
  }
  ADD_FAILURE() << op << ": expected a tetra::Error";
}

Tensor ints(const std::vector<int32_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }
Tensor filled_ints(const Shape& shape, int32_t value) {
  Tensor t = Tensor::empty(shape, DType::I32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = value;
  return t;
}
std::vector<int32_t> int_values(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

ops::MoeRouting routing(int64_t k, int64_t n_group = 1, int64_t topk_group = 1, float scale = 1.0f) {
  ops::MoeRouting r;
  r.top_k = k;
  r.n_group = n_group;
  r.topk_group = topk_group;
  r.route_scale = scale;
  return r;
}

// The logit whose sigmoid is p.
float logit_of(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

struct Routed {
  Tensor ids, w, counts;
};
Routed route(const Tensor& logits, const Tensor& bias, const ops::MoeRouting& r) {
  const int64_t N = logits.dim(0), E = logits.dim(1);
  Routed o{filled_ints({N, r.top_k}, -7), poisoned({N, r.top_k}), filled_ints({E}, -7)};
  ops::moe_router_forward(o.ids, o.w, o.counts, logits, bias, r);
  return o;
}

TEST(MoeRouter, EqualScoresGoToTheLowerIndex) {
  const int64_t N = 3, E = 8;
  Tensor logits = Tensor::from_vector(std::vector<float>(N * E, 0.25f), {N, E});
  Tensor bias = Tensor::zeros({E}, DType::F32);
  for (const auto& r : {routing(3), routing(3, 4, 2), routing(4, 2, 1)}) {
    const Routed o = route(logits, bias, r);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < r.top_k; ++j) EXPECT_EQ(o.ids.data<int32_t>()[n * r.top_k + j], j) << "token " << n;
    for (int64_t i = 0; i < o.w.numel(); ++i) EXPECT_FLOAT_EQ(o.w.data<float>()[i], 1.0f / static_cast<float>(r.top_k));
  }
}

// 4 groups of 2: group sums 1.0, 1.2, 1.1, 0.4. With topk_group = 2 only groups 1 and 2 are eligible,
// so the single best expert (0, in group 0) is passed over; experts 2 and 3 tie and come in index order.
TEST(MoeRouter, GroupLimitingScoresTheTwoBestOfEachGroup) {
  const std::vector<double> s = {0.9, 0.1, 0.6, 0.6, 0.55, 0.55, 0.2, 0.2};
  std::vector<float> l;
  for (double p : s) l.push_back(logit_of(p));
  Tensor logits = Tensor::from_vector(l, {1, 8}), bias = Tensor::zeros({8}, DType::F32);
  Routed o = route(logits, bias, routing(3, 4, 2, 2.0f));
  EXPECT_EQ(int_values(o.ids), (std::vector<int32_t>{2, 3, 4}));
  const double sum = s[2] + s[3] + s[4];
  EXPECT_NEAR(o.w.data<float>()[0], 2.0 * s[2] / sum, 1e-6);
  EXPECT_NEAR(o.w.data<float>()[2], 2.0 * s[4] / sum, 1e-6);
  EXPECT_EQ(int_values(o.counts), (std::vector<int32_t>{0, 0, 1, 1, 1, 0, 0, 0}));
  // Without groups the best experts win: 0, then 2 and 3.
  o = route(logits, bias, routing(3));
  EXPECT_EQ(int_values(o.ids), (std::vector<int32_t>{0, 2, 3}));
  // The bias steers the choice (and the group scores) but not the weights.
  Tensor push = Tensor::from_vector(std::vector<float>{0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.5f, 0.5f}, {8});
  o = route(logits, push, routing(2, 4, 1));
  EXPECT_EQ(int_values(o.ids), (std::vector<int32_t>{6, 7}));
  EXPECT_NEAR(o.w.data<float>()[0], 0.5, 1e-6);
}

// Hugging Face masks ineligible groups with 0.0, not −∞: when every eligible biased score is negative,
// the experts of the masked groups (score 0) come first, lowest index first.
TEST(MoeRouter, MaskedGroupsScoreZeroAsHuggingFace) {
  const std::vector<double> s = {0.3, 0.2, 0.9, 0.8, 0.1, 0.4};
  std::vector<float> l;
  for (double p : s) l.push_back(logit_of(p));
  Tensor logits = Tensor::from_vector(l, {1, 6});
  Tensor bias = Tensor::from_vector(std::vector<float>(6, -1.0f), {6});
  const Routed o = route(logits, bias, routing(2, 3, 1));  // group 1 (experts 2, 3) is eligible
  EXPECT_EQ(int_values(o.ids), (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouter, ForcedBalanceRoutesRoundRobin) {
  Rng rng(3);
  const int64_t N = 5, E = 4, k = 3;
  Tensor logits = random_tensor(rng, {N, E}, 2.0), bias = random_tensor(rng, {E}, 0.1);
  ops::MoeRouting r = routing(k, 1, 1, 1.5f);
  r.force_balance = true;
  const Routed o = route(logits, bias, r);
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(o.ids.data<int32_t>()[n * k + j], (n * k + j) % E);
      sum += o.w.data<float>()[n * k + j];
    }
    EXPECT_NEAR(sum, 1.5, 1e-6);
  }
  EXPECT_EQ(int_values(o.counts), (std::vector<int32_t>{4, 4, 4, 3}));
}

TEST(MoeRouter, LoadAccumulatesCounts) {
  Rng rng(4);
  Tensor logits = random_tensor(rng, {20, 8}, 2.0), bias = random_tensor(rng, {8}, 0.1);
  Tensor ids = filled_ints({20, 2}, -7), w = poisoned({20, 2}), counts = filled_ints({8}, -7);
  Tensor load = filled_ints({8}, 5);
  ops::moe_router_forward(ids, w, counts, logits, bias, routing(2), &load);
  ops::moe_router_forward(ids, w, counts, logits, bias, routing(2), &load);
  int64_t total = 0;
  for (int64_t e = 0; e < 8; ++e) {
    EXPECT_EQ(load.data<int32_t>()[e], 5 + 2 * counts.data<int32_t>()[e]);
    total += counts.data<int32_t>()[e];
  }
  EXPECT_EQ(total, 40);
}

double weighted_sum(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data<float>()[i]) * r.data<float>()[i];
  return s;
}

// Central differences of L(logits) at every element against the analytic gradient.
void check_logit_gradient(const std::string& what, Tensor& logits, const Tensor& analytic,
                          const std::function<double()>& loss, double eps = 1e-3, double tol = 2e-3) {
  std::vector<double> fd, an;
  float* p = logits.data<float>();
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float saved = p[i];
    p[i] = saved + static_cast<float>(eps);
    const double up = loss();
    p[i] = saved - static_cast<float>(eps);
    const double down = loss();
    p[i] = saved;
    const double h = static_cast<double>(saved + static_cast<float>(eps)) - static_cast<double>(saved - static_cast<float>(eps));
    fd.push_back((up - down) / h);
    an.push_back(analytic.data<float>()[i]);
  }
  EXPECT_LE(rel_error(an, fd), tol) << what;
}

TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  for (const auto& r : {routing(3, 1, 1, 2.5f), routing(4, 4, 2, 1.0f)}) {
    Rng rng(5 + r.n_group);
    const int64_t N = 6, E = 16, k = r.top_k;
    Tensor logits = random_tensor(rng, {N, E}, 2.0), bias = random_tensor(rng, {E}, 0.05);
    Tensor rw = random_tensor(rng, {N, k});
    const Routed o = route(logits, bias, r);  // the selection stays fixed under the small steps below
    Tensor w = poisoned({N, k}), counts = filled_ints({E}, 0), ids = filled_ints({N, k}, 0);
    auto loss = [&] {
      ops::moe_router_forward(ids, w, counts, logits, bias, r);
      EXPECT_EQ(int_values(ids), int_values(o.ids)) << "the selection moved";
      return weighted_sum(w, rw);
    };
    Tensor d_logits = poisoned({N, E});
    ops::moe_router_backward(d_logits, rw, logits, o.ids, r);
    check_logit_gradient("router d_logits", logits, d_logits, loss);
    // accumulate adds exactly what the plain call writes
    Tensor acc = random_tensor(rng, {N, E});
    const std::vector<double> want = plus(to_doubles(acc), to_doubles(d_logits));
    ops::moe_router_backward(acc, rw, logits, o.ids, r, nullptr, true);
    EXPECT_LE(rel_error(to_doubles(acc), want), 1e-6);
  }
}

TEST(MoeRouter, BalanceLossGradientMatchesFiniteDifferences) {
  Rng rng(6);
  const int64_t B = 3, T = 4, N = B * T, E = 8, k = 2;
  const ops::MoeRouting r = routing(k);
  Tensor logits = random_tensor(rng, {N, E}, 2.0), bias = random_tensor(rng, {E}, 0.05);
  const Routed o = route(logits, bias, r);
  const float loss_scale = 0.7f;
  Tensor g = poisoned({B, E});
  auto loss = [&] {
    Tensor sum = Tensor::zeros({1}, DType::F64);
    ops::moe_balance_loss(sum, g, logits, o.ids, T, loss_scale, loss_scale);
    return sum.data<double>()[0];
  };
  const double value = loss();
  // Σ_b Σ_i f·P over uniform scores would be 1 per sequence; random scores stay near it.
  EXPECT_GT(value, 0.2 * loss_scale * B);
  EXPECT_LT(value, 5.0 * loss_scale * B);
  Tensor zero_dw = Tensor::zeros({N, k}, DType::F32), d_logits = poisoned({N, E});
  ops::moe_router_backward(d_logits, zero_dw, logits, o.ids, r, &g);
  check_logit_gradient("balance loss d_logits", logits, d_logits, loss);
}

TEST(MoeRouter, BiasUpdateStepsTowardTheMeanLoad) {
  Tensor bias = Tensor::from_vector(std::vector<float>{0.5f, 0.0f, -0.25f, 1.0f}, {4});
  Tensor load = ints({10, 2, 4, 4}, {4});  // mean 5
  ops::moe_bias_update(bias, load, 0.125f);
  EXPECT_EQ(to_doubles(bias), (std::vector<double>{0.375, 0.125, -0.125, 1.125}));
  Tensor even = ints({3, 3, 3, 3}, {4});
  ops::moe_bias_update(bias, even, 0.125f);  // sign(0) = 0
  EXPECT_EQ(to_doubles(bias), (std::vector<double>{0.375, 0.125, -0.125, 1.125}));
  // With the step control: a skipped step leaves the bias, an applied one moves it.
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  control.data<double>()[kCtlSkipped] = 1.0;
  ops::moe_bias_update(bias, load, 0.125f, &control);
  EXPECT_EQ(to_doubles(bias), (std::vector<double>{0.375, 0.125, -0.125, 1.125}));
  control.data<double>()[kCtlSkipped] = 0.0;
  ops::moe_bias_update(bias, load, 0.125f, &control);
  EXPECT_EQ(to_doubles(bias), (std::vector<double>{0.25, 0.25, 0.0, 1.25}));
  Tensor short_control = Tensor::zeros({2}, DType::F64);
  expect_error([&] { ops::moe_bias_update(bias, load, 0.125f, &short_control); }, "moe_bias_update", "control");
}

// The expert-grouped order: by expert, then token, then slot; the two maps are each other's inverse.
TEST(MoePermute, MapIsStableAndInverse) {
  const int64_t N = 5, k = 2, E = 4;
  // expert 2 receives nothing, expert 1 most
  Tensor ids = ints({1, 0, 3, 1, 1, 0, 1, 3, 0, 1}, {N, k});
  Tensor offsets = filled_ints({E + 1}, -7), row_of = filled_ints({N, k}, -7), slot_of = filled_ints({N * k}, -7);
  ops::moe_permute_map(offsets, row_of, slot_of, ids);
  EXPECT_EQ(int_values(offsets), (std::vector<int32_t>{0, 3, 8, 8, 10}));
  EXPECT_EQ(int_values(slot_of), (std::vector<int32_t>{1, 5, 8, 0, 3, 4, 6, 9, 2, 7}));
  for (int64_t i = 0; i < N * k; ++i) EXPECT_EQ(slot_of.data<int32_t>()[row_of.data<int32_t>()[i]], i);
  Tensor bad_ids = ints({1, 0, 3, 1, 1, 0, 1, 4, 0, 1}, {N, k});
  expect_error([&] { ops::moe_permute_map(offsets, row_of, slot_of, bad_ids); }, "moe_permute_map",
               "expert_ids[3, 1] = 4");
}

struct Permuted {
  Tensor offsets, row_of, slot_of;
};
Permuted permute_map(const Tensor& ids, int64_t E) {
  const int64_t N = ids.dim(0), k = ids.dim(1);
  Permuted p{filled_ints({E + 1}, -7), filled_ints({N, k}, -7), filled_ints({N * k}, -7)};
  ops::moe_permute_map(p.offsets, p.row_of, p.slot_of, ids);
  return p;
}

// permute_backward is permute's transpose, unpermute_backward unpermute's (dot-product tests), and
// both backwards match finite differences through the combine.
TEST(MoePermute, BackwardsAreTransposes) {
  Rng rng(7);
  const int64_t N = 7, k = 3, E = 5, d = 6, R = N * k;
  Tensor ids = random_ids(rng, {N, k}, 0, E);
  for (int64_t n = 0; n < N; ++n)  // distinct experts per token, as the router gives
    for (int64_t j = 0; j < k; ++j) ids.data<int32_t>()[n * k + j] = static_cast<int32_t>((n + 2 * j) % E);
  const Permuted p = permute_map(ids, E);
  Tensor x = random_tensor(rng, {N, d}), rows = poisoned({R, d});
  ops::moe_permute(rows, x, p.slot_of, k);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(rows.data<float>()[r * d + c], x.data<float>()[(p.slot_of.data<int32_t>()[r] / k) * d + c]);
  Tensor g = random_tensor(rng, {R, d}), dx = poisoned({N, d});
  ops::moe_permute_backward(dx, g, p.row_of);
  EXPECT_NEAR(weighted_sum(rows, g), weighted_sum(x, dx), 1e-4);
  Tensor acc = random_tensor(rng, {N, d});
  const std::vector<double> want = plus(to_doubles(acc), to_doubles(dx));
  ops::moe_permute_backward(acc, g, p.row_of, true);
  EXPECT_LE(rel_error(to_doubles(acc), want), 1e-6);

  Tensor out = random_tensor(rng, {R, d}), w = random_tensor(rng, {N, k}), ry = random_tensor(rng, {N, d});
  Tensor y = poisoned({N, d});
  auto loss = [&] {
    ops::moe_unpermute(y, out, w, p.row_of);
    return weighted_sum(y, ry);
  };
  loss();
  Tensor d_out = poisoned({R, d}), d_w = poisoned({N, k});
  ops::moe_unpermute_backward(d_out, d_w, ry, out, w, p.row_of);
  check_logit_gradient("unpermute d_rows", out, d_out, loss, 1e-2);
  check_logit_gradient("unpermute d_weights", w, d_w, loss, 1e-2);
  loss();  // y at the unperturbed inputs again
  Tensor y_acc = random_tensor(rng, {N, d});
  const std::vector<double> y_want = plus(to_doubles(y_acc), to_doubles(y));
  ops::moe_unpermute(y_acc, out, w, p.row_of, true);
  EXPECT_LE(rel_error(to_doubles(y_acc), y_want), 1e-6);
}

// Each expert's rows against linear_forward / backward on that expert's slice; empty experts, one
// expert with every row, and rows outside [offsets[0], offsets[G]) left as they were.
TEST(MoeGroupedLinear, MatchesOneLinearPerExpert) {
  Rng rng(8);
  const int64_t R = 23, I = 7, O = 5, G = 4;
  for (const std::vector<int32_t>& off : {std::vector<int32_t>{0, 6, 6, 15, 23}, std::vector<int32_t>{0, 0, 23, 23, 23},
                                          std::vector<int32_t>{2, 2, 9, 9, 20}, std::vector<int32_t>{0, 0, 0, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "offsets " << off[0] << " " << off[1] << " " << off[2] << " " << off[3] << " " << off[4]);
    Tensor offsets = ints(off, {G + 1});
    Tensor x = random_tensor(rng, {R, I}), w = random_tensor(rng, {G, O, I}), dy = random_tensor(rng, {R, O});
    Tensor y = poisoned({R, O}), dx = poisoned({R, I}), dw = poisoned({G, O, I});
    ops::moe_grouped_linear_forward(y, x, w, offsets);
    ops::moe_grouped_linear_backward_input(dx, dy, w, offsets);
    ops::moe_grouped_linear_backward_weight(dw, dy, x, offsets, false);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t m = off[g + 1] - off[g];
      const Tensor wg = w.slice_flat(g * O * I, {O, I});
      const Tensor dwg = dw.slice_flat(g * O * I, {O, I});
      if (m == 0) {
        for (int64_t i = 0; i < O * I; ++i) EXPECT_EQ(dwg.data<float>()[i], 0.0f) << "expert " << g << " has no rows";
        continue;
      }
      Tensor ref_y = poisoned({m, O}), ref_dx = poisoned({m, I}), ref_dw = poisoned({O, I});
      ops::linear_forward(ref_y, x.narrow(off[g], m), wg, Tensor());
      ops::linear_backward_input(ref_dx, dy.narrow(off[g], m), wg);
      ops::linear_backward_weight(ref_dw, nullptr, dy.narrow(off[g], m), x.narrow(off[g], m), false);
      EXPECT_LE(rel_error(y.narrow(off[g], m), ref_y), 1e-6) << "expert " << g;
      EXPECT_LE(rel_error(dx.narrow(off[g], m), ref_dx), 1e-6) << "expert " << g;
      EXPECT_LE(rel_error(dwg, ref_dw), 1e-6) << "expert " << g;
    }
    for (int64_t r = 0; r < R; ++r) {
      if (r >= off[0] && r < off[G]) continue;
      EXPECT_TRUE(std::isnan(y.data<float>()[r * O])) << "row " << r << " is no expert's, yet written";
      EXPECT_TRUE(std::isnan(dx.data<float>()[r * I])) << "row " << r << " is no expert's, yet written";
    }
    Tensor acc = random_tensor(rng, {G, O, I});
    const std::vector<double> want = plus(to_doubles(acc), to_doubles(dw));
    ops::moe_grouped_linear_backward_weight(acc, dy, x, offsets, true);
    EXPECT_LE(rel_error(to_doubles(acc), want), 1e-6);
  }
}

// The model's weight gradient over two micro-batches (models/moe_mlp.cpp, Param::grad_empty): the
// step's first call stores into a poisoned buffer, writing every expert (zeros where it has no rows),
// the second adds; experts empty in one micro-batch or both included.
TEST(MoeGroupedLinear, FirstMicroBatchStoresEveryExpertSecondAdds) {
  Rng rng(9);
  const int64_t I = 6, O = 5, G = 5;
  const std::vector<int32_t> off1 = {0, 0, 7, 7, 12, 12}, off2 = {0, 4, 4, 4, 9, 15};
  const int64_t R1 = off1.back(), R2 = off2.back();
  Tensor x1 = random_tensor(rng, {R1, I}), dy1 = random_tensor(rng, {R1, O});
  Tensor x2 = random_tensor(rng, {R2, I}), dy2 = random_tensor(rng, {R2, O});
  Tensor dw = poisoned({G, O, I});
  ops::moe_grouped_linear_backward_weight(dw, dy1, x1, ints(off1, {G + 1}), /*accumulate=*/false);
  ops::moe_grouped_linear_backward_weight(dw, dy2, x2, ints(off2, {G + 1}), /*accumulate=*/true);
  for (int64_t g = 0; g < G; ++g) {
    Tensor want = Tensor::zeros({O, I}, DType::F32);
    auto add = [&](const std::vector<int32_t>& off, const Tensor& x, const Tensor& dy) {
      const int64_t r0 = off[static_cast<size_t>(g)], m = off[static_cast<size_t>(g) + 1] - r0;
      if (m > 0) ops::linear_backward_weight(want, nullptr, dy.narrow(r0, m), x.narrow(r0, m), /*accumulate=*/true);
    };
    add(off1, x1, dy1);
    add(off2, x2, dy2);
    const Tensor got = dw.slice_flat(g * O * I, {O, I});
    if (g == 2) {  // no rows in either micro-batch
      for (int64_t i = 0; i < O * I; ++i) EXPECT_EQ(got.data<float>()[i], 0.0f) << "expert 2 element " << i;
      continue;
    }
    EXPECT_LE(rel_error(got, want), 1e-6) << "expert " << g;
  }
}

// Chunks from 3 ranks for 4 local experts: (rank, expert) order → (expert, rank) order and back; rows
// past the chunks stay as they were.
TEST(MoePermute, SortChunksGroupsEachExpertsRows) {
  Rng rng(10);
  const int64_t A = 3, B = 4, d = 5;
  Tensor counts = ints({2, 0, 3, 1, 0, 0, 4, 2, 1, 5, 0, 3}, {A, B});
  int64_t total = 0;
  for (int64_t i = 0; i < A * B; ++i) total += counts.data<int32_t>()[i];
  const int64_t R = total + 3;
  Tensor in = random_tensor(rng, {R, d}), out = poisoned({R, d}), back = poisoned({R, d});
  ops::moe_sort_chunks(out, in, counts);
  // expected: for b, for a: the rows of chunk (a, b)
  std::vector<int64_t> start(static_cast<size_t>(A * B));
  int64_t at = 0;
  for (int64_t i = 0; i < A * B; ++i) start[static_cast<size_t>(i)] = at, at += counts.data<int32_t>()[i];
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a)
      for (int32_t r = 0; r < counts.data<int32_t>()[a * B + b]; ++r, ++row)
        for (int64_t c = 0; c < d; ++c)
          EXPECT_EQ(out.data<float>()[row * d + c], in.data<float>()[(start[static_cast<size_t>(a * B + b)] + r) * d + c])
              << "row " << row;
  for (int64_t r = total; r < R; ++r) EXPECT_TRUE(std::isnan(out.data<float>()[r * d])) << "row " << r << " written";
  ops::moe_sort_chunks(back, out, counts, /*inverse=*/true);
  for (int64_t i = 0; i < total * d; ++i) EXPECT_EQ(back.data<float>()[i], in.data<float>()[i]);
  Tensor offsets = filled_ints({B + 1}, -7);
  ops::moe_chunk_offsets(offsets, counts);
  EXPECT_EQ(int_values(offsets), (std::vector<int32_t>{0, 3, 8, 15, 21}));
  Tensor small = poisoned({total - 1, d}), small_out = poisoned({total - 1, d});
  expect_error([&] { ops::moe_sort_chunks(small_out, small, counts); }, "moe_sort_chunks", "only R = 20");
}

TEST(MoeCountsReadback, CopiesTensorsBackToBack) {
  CountsReadback rb(Device::cpu(), 8);
  Tensor a = ints({3, 1, 4}, {3}), b = ints({1, 5, 9, 2}, {2, 2});
  rb.copy_from({&a, &b});
  EXPECT_TRUE(rb.ready());
  const int32_t* v = rb.wait();
  EXPECT_EQ(std::vector<int32_t>(v, v + rb.copied()), (std::vector<int32_t>{3, 1, 4, 1, 5, 9, 2}));
  Tensor too_many = filled_ints({9}, 0), floats = poisoned({2});
  expect_error([&] { rb.copy_from(too_many); }, "CountsReadback", "capacity of 8");
  expect_error([&] { rb.copy_from(floats); }, "CountsReadback", "int32");
}

TEST(MoeContract, ArgumentErrorsNameTheOp) {
  Rng rng(9);
  const int64_t N = 4, E = 8;
  Tensor logits = random_tensor(rng, {N, E}), bias = random_tensor(rng, {E});
  Tensor ids = filled_ints({N, 2}, 0), w = poisoned({N, 2}), counts = filled_ints({E}, 0);
  const char* fwd = "moe_router_forward";
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(9)); }, fwd, "top_k = 9");
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(2, 3, 1)); }, fwd,
               "n_group = 3 must divide");
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(2, 2, 3)); }, fwd, "topk_group = 3");
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(2, 8, 1)); }, fwd, "two best");
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(3, 4, 1)); }, fwd,
               "top_k = 3 exceeds the 2 experts");
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias, routing(3)); }, fwd, "expert_ids must be [4, 3]");
  Tensor bias_bad = random_tensor(rng, {E + 1});
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits, bias_bad, routing(2)); }, fwd, "bias must be [8]");
  Tensor logits_i = filled_ints({N, E}, 0);
  expect_error([&] { ops::moe_router_forward(ids, w, counts, logits_i, bias, routing(2)); }, fwd, "logits");
  Tensor d_logits = poisoned({N, E}), dw = random_tensor(rng, {N, 2}), g_bad = random_tensor(rng, {3, E});
  expect_error([&] { ops::moe_router_backward(d_logits, dw, logits, ids, routing(2), &g_bad); }, "moe_router_backward",
               "sequences dividing the N = 4");
  expect_error([&] { ops::moe_router_backward(logits, dw, logits, ids, routing(2)); }, "moe_router_backward",
               "shares memory");
  Tensor loss = Tensor::zeros({1}, DType::F64), g = poisoned({2, E});
  expect_error([&] { ops::moe_balance_loss(loss, g, logits, ids, 3, 1.f, 1.f); }, "moe_balance_loss", "seq_len = 3");
  Tensor load_f = poisoned({E});
  expect_error([&] { ops::moe_bias_update(bias, load_f, 0.1f); }, "moe_bias_update", "load");

  Tensor x = random_tensor(rng, {N, 6}), rows = poisoned({N * 2, 5}), slot_of = filled_ints({N * 2}, 0);
  expect_error([&] { ops::moe_permute(rows, x, slot_of, 2); }, "moe_permute", "d = 6");
  Tensor rows_ok = poisoned({N * 2, 6}), slot_bad = filled_ints({N * 2}, N * 2);
  expect_error([&] { ops::moe_permute(rows_ok, x, slot_bad, 2); }, "moe_permute", "slot_of[0] = 8");
  Tensor row_of_bad = filled_ints({N, 2}, 99), y = poisoned({N, 6});
  expect_error([&] { ops::moe_unpermute(y, rows_ok, w, row_of_bad); }, "moe_unpermute", "row_of[0, 0] = 99");

  Tensor wg = random_tensor(rng, {3, 5, 6}), yg = poisoned({N, 5}), off_bad = ints({0, 3, 2, 4}, {4});
  expect_error([&] { ops::moe_grouped_linear_forward(yg, x, wg, off_bad); }, "moe_grouped_linear_forward",
               "offsets[2] = 2");
  Tensor off_short = ints({0, 4}, {2});
  expect_error([&] { ops::moe_grouped_linear_forward(yg, x, wg, off_short); }, "moe_grouped_linear_forward",
               "offsets must be [4]");
  Tensor w2 = random_tensor(rng, {5, 6});
  expect_error([&] { ops::moe_grouped_linear_forward(yg, x, w2, off_short); }, "moe_grouped_linear_forward", "3-D");
}

}  // namespace
}  // namespace tetra::test
