// Finite-difference checks of every op with a backward: the analytic gradient of the scalar
// L = Σ y·r (r random, fixed) must match central differences (L(x+ε) − L(x−ε)) / 2ε of the fp32
// forward, with L summed in double. Inputs are random and never zero.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>

#include "op_test_util.h"

namespace tetra::test {
namespace {

// Σ y·r in double.
double weighted_sum(const Tensor& y, const Tensor& r) {
  const float* py = y.data<float>();
  const float* pr = r.data<float>();
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(py[i]) * pr[i];
  return s;
}

// Compares `analytic` (dL/dx as the ops computed it) with central differences of loss() at every
// element of x, or at `max_points` random ones for large x. x is restored afterwards.
void check_gradient(const std::string& what, Tensor& x, const Tensor& analytic,
                    const std::function<double()>& loss, Rng& rng, double eps = 1e-2, double tol = 2e-3,
                    int64_t max_points = 96) {
  ASSERT_TRUE(x.same_shape(analytic)) << what << ": gradient shape " << analytic.describe() << " vs "
                                      << x.describe();
  float* px = x.data<float>();
  const float* pg = analytic.data<float>();
  std::vector<int64_t> points;
  if (x.numel() <= max_points) {
    for (int64_t i = 0; i < x.numel(); ++i) points.push_back(i);
  } else {
    for (int64_t k = 0; k < max_points; ++k) points.push_back(static_cast<int64_t>(rng.below(x.numel())));
  }
  std::vector<double> fd, an;
  for (int64_t i : points) {
    const float saved = px[i];
    px[i] = static_cast<float>(saved + eps);
    const double up = loss();
    px[i] = static_cast<float>(saved - eps);
    const double down = loss();
    px[i] = saved;
    // The step actually taken in fp32 (saved ± eps is rounded).
    const double h = static_cast<double>(static_cast<float>(saved + eps)) - static_cast<float>(saved - eps);
    fd.push_back((up - down) / h);
    an.push_back(pg[i]);
  }
  const double err = rel_error(an, fd);
  EXPECT_LE(err, tol) << what << ": analytic gradient vs central differences over " << points.size()
                      << " elements";
  for (size_t k = 0; k < fd.size(); ++k) {
    EXPECT_NEAR(an[k], fd[k], 10 * tol * (1.0 + std::fabs(fd[k])))
        << what << " element " << points[k];
  }
}

struct LinearCase {
  bool bias;
  ops::Activation act;
};

class LinearGrad : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearGrad, MatchesFiniteDifferences) {
  const auto [bias, act] = GetParam();
  Rng rng(11);
  const int64_t I = 7, O = 6;
  Tensor x = random_tensor(rng, {2, 3, I});  // leading dimensions [2, 3] act as N = 6
  Tensor w = random_tensor(rng, {O, I}, 0.5);
  Tensor b = bias ? random_tensor(rng, {O}, 0.5) : Tensor();
  Tensor r = random_tensor(rng, {2, 3, O});
  Tensor y = poisoned({2, 3, O}), pre = poisoned({2, 3, O});
  auto loss = [&] {
    ops::linear_forward(y, x, w, b, act, act == ops::Activation::Gelu ? &pre : nullptr);
    return weighted_sum(y, r);
  };
  loss();
  Tensor dpre = r;
  if (act == ops::Activation::Gelu) {
    dpre = poisoned({2, 3, O});
    ops::gelu_backward(dpre, r, pre);
  }
  Tensor dx = poisoned(x.shape()), dw = poisoned(w.shape()), db = poisoned({O});
  ops::linear_backward_input(dx, dpre, w, false);
  ops::linear_backward_weight(dw, bias ? &db : nullptr, dpre, x, false);
  check_gradient("linear dx", x, dx, loss, rng);
  check_gradient("linear dw", w, dw, loss, rng);
  if (bias) check_gradient("linear db", b, db, loss, rng);
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearGrad,
                         ::testing::Values(LinearCase{true, ops::Activation::None},
                                           LinearCase{false, ops::Activation::None},
                                           LinearCase{true, ops::Activation::Gelu},
                                           LinearCase{false, ops::Activation::Gelu}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.bias ? "Bias" : "NoBias") +
                                  (param_info.param.act == ops::Activation::Gelu ? "Gelu" : "Plain");
                         });

// y = x·wᵀ + b + residual: dL/dresidual = dL/dy, and the other gradients are those of the plain layer.
TEST(OpsGradcheck, LinearResidual) {
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    Rng rng(17);
    const int64_t I = 5, O = 4;
    Tensor x = random_tensor(rng, {3, 2, I});
    Tensor w = random_tensor(rng, {O, I}, 0.5);
    Tensor b = bias ? random_tensor(rng, {O}, 0.5) : Tensor();
    Tensor res = random_tensor(rng, {3, 2, O}, 2.0);
    Tensor r = random_tensor(rng, {3, 2, O});
    Tensor y = poisoned({3, 2, O});
    auto loss = [&] {
      ops::linear_forward(y, x, w, b, ops::Activation::None, nullptr, &res);
      return weighted_sum(y, r);
    };
    Tensor dx = poisoned(x.shape()), dw = poisoned(w.shape()), db = poisoned({O});
    ops::linear_backward_input(dx, r, w, false);
    ops::linear_backward_weight(dw, bias ? &db : nullptr, r, x, false);
    check_gradient("linear+residual dresidual", res, r, loss, rng);
    check_gradient("linear+residual dx", x, dx, loss, rng);
    check_gradient("linear+residual dw", w, dw, loss, rng);
    if (bias) check_gradient("linear+residual db", b, db, loss, rng);
  }
}

// y = gelu(h)·wᵀ: the input gradient of the projection taken through the GELU in one op, against
// finite differences in h.
TEST(OpsGradcheck, LinearInputThroughGelu) {
  Rng rng(18);
  const int64_t I = 6, O = 5;
  Tensor h = random_tensor(rng, {2, 3, I}, 2.0);
  Tensor w = random_tensor(rng, {O, I}, 0.5);
  Tensor r = random_tensor(rng, {2, 3, O});
  Tensor act = poisoned(h.shape()), y = poisoned({2, 3, O});
  auto loss = [&] {
    ops::gelu_forward(act, h);
    ops::linear_forward(y, act, w, Tensor(), ops::Activation::None);
    return weighted_sum(y, r);
  };
  Tensor dh = poisoned(h.shape());
  ops::linear_backward_input_gelu(dh, r, w, h);
  check_gradient("linear input through gelu", h, dh, loss, rng);
}

TEST(OpsGradcheck, Gelu) {
  Rng rng(12);
  Tensor x = random_tensor(rng, {4, 9}, 2.0);
  Tensor r = random_tensor(rng, {4, 9});
  Tensor y = poisoned(x.shape());
  auto loss = [&] {
    ops::gelu_forward(y, x);
    return weighted_sum(y, r);
  };
  Tensor dx = poisoned(x.shape());
  ops::gelu_backward(dx, r, x);
  check_gradient("gelu dx", x, dx, loss, rng);
}

TEST(OpsGradcheck, LayerNorm) {
  Rng rng(13);
  const int64_t C = 10;
  Tensor x = random_tensor(rng, {2, 3, C}, 2.0, 0.5);
  Tensor w = random_tensor(rng, {C}, 0.3, 1.0);
  Tensor b = random_tensor(rng, {C}, 0.3);
  Tensor r = random_tensor(rng, {2, 3, C});
  Tensor y = poisoned(x.shape()), mean = poisoned({2, 3}), rstd = poisoned({2, 3});
  auto loss = [&] {
    ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
    return weighted_sum(y, r);
  };
  loss();
  Tensor dx = poisoned(x.shape());
  Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  ops::layernorm_backward(dx, dw, db, r, x, w, mean, rstd, false);
  check_gradient("layernorm dx", x, dx, loss, rng);
  check_gradient("layernorm dw", w, dw, loss, rng);
  check_gradient("layernorm db", b, db, loss, rng);
}

// A pre-LN residual: out = x + LN(x). With dresidual = dL/dout, layernorm_backward gives all of dL/dx.
TEST(OpsGradcheck, LayerNormWithResidual) {
  Rng rng(18);
  const int64_t C = 9;
  Tensor x = random_tensor(rng, {4, C}, 1.5, -0.3);
  Tensor w = random_tensor(rng, {C}, 0.3, 1.0);
  Tensor b = random_tensor(rng, {C}, 0.3);
  Tensor r = random_tensor(rng, {4, C});
  Tensor y = poisoned(x.shape()), out = poisoned(x.shape()), mean = poisoned({4}), rstd = poisoned({4});
  auto loss = [&] {
    ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
    ops::add(out, x, y);
    return weighted_sum(out, r);
  };
  loss();
  Tensor dx = poisoned(x.shape());
  Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  ops::layernorm_backward(dx, dw, db, r, x, w, mean, rstd, false, &r);
  check_gradient("layernorm+residual dx", x, dx, loss, rng);
  check_gradient("layernorm+residual dw", w, dw, loss, rng);
  check_gradient("layernorm+residual db", b, db, loss, rng);
}

TEST(OpsGradcheck, RmsNorm) {
  Rng rng(19);
  const int64_t C = 10;
  Tensor x = random_tensor(rng, {2, 3, C}, 1.5, 0.4);
  Tensor w = random_tensor(rng, {C}, 0.3, 1.0);
  Tensor r = random_tensor(rng, {2, 3, C});
  Tensor y = poisoned(x.shape()), rstd = poisoned({2, 3});
  auto loss = [&] {
    ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
    return weighted_sum(y, r);
  };
  loss();
  Tensor dx = poisoned(x.shape()), dw = Tensor::zeros({C}, DType::F32);
  ops::rmsnorm_backward(dx, dw, r, x, w, rstd, false);
  check_gradient("rmsnorm dx", x, dx, loss, rng);
  check_gradient("rmsnorm dw", w, dw, loss, rng);
}

// A pre-norm residual: out = x + RMSNorm(x). With dresidual = dL/dout, rmsnorm_backward gives all of dL/dx.
TEST(OpsGradcheck, RmsNormWithResidual) {
  Rng rng(20);
  const int64_t C = 9;
  Tensor x = random_tensor(rng, {4, C}, 1.5, -0.3);
  Tensor w = random_tensor(rng, {C}, 0.3, 1.0);
  Tensor r = random_tensor(rng, {4, C});
  Tensor y = poisoned(x.shape()), out = poisoned(x.shape()), rstd = poisoned({4});
  auto loss = [&] {
    ops::rmsnorm_forward(y, rstd, x, w, 1e-6f);
    ops::add(out, x, y);
    return weighted_sum(out, r);
  };
  loss();
  Tensor dx = poisoned(x.shape()), dw = Tensor::zeros({C}, DType::F32);
  ops::rmsnorm_backward(dx, dw, r, x, w, rstd, false, &r);
  check_gradient("rmsnorm+residual dx", x, dx, loss, rng);
  check_gradient("rmsnorm+residual dw", w, dw, loss, rng);
}

// L = Σ rope(qkv)·r: rope_backward applied to r is dL/dqkv (v passes straight through).
TEST(OpsGradcheck, Rope) {
  Rng rng(21);
  const int64_t B = 2, T = 5, H = 4, Hkv = 2, D = 6;
  const float theta = 10000.0f;
  Tensor qkv = random_tensor(rng, {B, T, (H + 2 * Hkv) * D});
  Tensor r = random_tensor(rng, qkv.shape());
  Tensor y = poisoned(qkv.shape());
  auto loss = [&] {
    ops::copy(y, qkv);
    ops::rope_forward(y, H, Hkv, theta);
    return weighted_sum(y, r);
  };
  Tensor dqkv = clone(r);
  ops::rope_backward(dqkv, H, Hkv, theta);
  check_gradient("rope dqkv", qkv, dqkv, loss, rng, 1e-2, 2e-3, 240);
}

TEST(OpsGradcheck, SwiGlu) {
  Rng rng(22);
  const int64_t F = 7;
  Tensor gu = random_tensor(rng, {2, 3, 2 * F}, 2.0);
  Tensor r = random_tensor(rng, {2, 3, F});
  Tensor h = poisoned({2, 3, F});
  auto loss = [&] {
    ops::swiglu_forward(h, gu);
    return weighted_sum(h, r);
  };
  Tensor dgu = poisoned(gu.shape());
  ops::swiglu_backward(dgu, r, gu);
  check_gradient("swiglu d_gate_up", gu, dgu, loss, rng);
}

// Grouped-query heads: multi-query (Hkv = 1) and groups of 2 and 3 query heads.
TEST(OpsGradcheck, GroupedQueryAttention) {
  for (auto [B, T, H, Hkv, D] : {std::array<int64_t, 5>{2, 5, 4, 1, 3}, std::array<int64_t, 5>{1, 7, 4, 2, 2},
                                 std::array<int64_t, 5>{1, 6, 6, 2, 4}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " Hkv=" << Hkv << " D=" << D);
    Rng rng(23 + T);
    Tensor qkv = random_tensor(rng, {B, T, (H + 2 * Hkv) * D});
    Tensor r = random_tensor(rng, {B, T, H * D});
    Tensor out = poisoned({B, T, H * D}), lse = poisoned({B, H, T});
    auto loss = [&] {
      ops::attention_forward(out, lse, qkv, H, Hkv);
      return weighted_sum(out, r);
    };
    loss();
    Tensor dqkv = poisoned(qkv.shape());
    ops::attention_backward(dqkv, r, qkv, out, lse, H, Hkv);
    check_gradient("gqa attention dqkv", qkv, dqkv, loss, rng, 1e-2, 2e-3, 200);
  }
}

TEST(OpsGradcheck, Embedding) {
  Rng rng(14);
  const int64_t B = 3, T = 4, V = 5, C = 3;
  Tensor ids = random_ids(rng, {B, T}, 0, V);  // 12 tokens over 5 ids: repeats are certain
  Tensor wte = random_tensor(rng, {V, C});
  Tensor wpe = random_tensor(rng, {T + 2, C});
  Tensor r = random_tensor(rng, {B, T, C});
  Tensor y = poisoned({B, T, C});
  auto loss = [&] {
    ops::embedding_forward(y, ids, wte, wpe, T);
    return weighted_sum(y, r);
  };
  Tensor dwte = Tensor::zeros(wte.shape(), DType::F32), dwpe = Tensor::zeros(wpe.shape(), DType::F32);
  ops::embedding_backward(dwte, &dwpe, r, ids, T);
  check_gradient("embedding dwte", wte, dwte, loss, rng);
  check_gradient("embedding dwpe", wpe, dwpe, loss, rng);
}

TEST(OpsGradcheck, Attention) {
  for (auto [B, T, H, D] : {std::array<int64_t, 4>{2, 5, 2, 3}, std::array<int64_t, 4>{1, 1, 1, 4},
                            std::array<int64_t, 4>{1, 9, 3, 2}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " D=" << D);
    Rng rng(15 + T);
    Tensor qkv = random_tensor(rng, {B, T, 3 * H * D});
    Tensor r = random_tensor(rng, {B, T, H * D});
    Tensor out = poisoned({B, T, H * D}), lse = poisoned({B, H, T});
    auto loss = [&] {
      ops::attention_forward(out, lse, qkv, H);
      return weighted_sum(out, r);
    };
    loss();
    Tensor dqkv = poisoned(qkv.shape());
    ops::attention_backward(dqkv, r, qkv, out, lse, H);
    check_gradient("attention dqkv", qkv, dqkv, loss, rng, 1e-2, 2e-3, 200);
  }
}

TEST(OpsGradcheck, CrossEntropy) {
  Rng rng(16);
  const int64_t N = 6, V = 7;
  const float grad_scale = 0.7f;
  Tensor logits = random_tensor(rng, {N, V}, 2.0);
  Tensor targets = random_ids(rng, {N}, 0, V);
  targets.data<int32_t>()[2] = -1;  // ignored
  targets.data<int32_t>()[4] = -100;
  Tensor losses = poisoned({N});
  auto loss = [&] {
    ops::softmax_cross_entropy(losses, nullptr, logits, targets, 1.0f);
    return grad_scale * ops::sum_to_host(losses);
  };
  Tensor dlogits = poisoned({N, V});
  ops::softmax_cross_entropy(losses, &dlogits, logits, targets, grad_scale);
  check_gradient("cross-entropy dlogits", logits, dlogits, loss, rng);
}

}  // namespace
}  // namespace tetra::test
