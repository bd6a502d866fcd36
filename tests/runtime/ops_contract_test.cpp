// The contracts of runtime/ops.h that finite differences and the PyTorch oracle do not reach:
// argument errors name the op, accumulate modes add to what was there, documented aliasing works,
// fp32 <-> bf16 conversion rounds to nearest even, reductions sum in double, AdamW's first step.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "op_test_util.h"

namespace tetra::test {
namespace {

// fn() must throw tetra::Error whose message contains `op` (and `detail`, when given).
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

TEST(OpsContract, WrongShapesNameTheOp) {
  Rng rng(1);
  Tensor x = random_tensor(rng, {4, 5}), w = random_tensor(rng, {3, 5}), b = random_tensor(rng, {3});
  Tensor y_bad = poisoned({4, 4}), dx_bad = poisoned({4, 6}), dw_bad = poisoned({3, 4}), dy = random_tensor(rng, {4, 3});
  expect_error([&] { ops::linear_forward(y_bad, x, w, b); }, "linear_forward", "y must be [4, 3]");
  Tensor y = poisoned({4, 3});
  Tensor b_bad = random_tensor(rng, {4});
  expect_error([&] { ops::linear_forward(y, x, w, b_bad); }, "linear_forward", "b must be [3]");
  Tensor x_bad = random_tensor(rng, {4, 6});
  expect_error([&] { ops::linear_forward(y, x_bad, w, b); }, "linear_forward", "x must be");
  expect_error([&] { ops::linear_backward_input(dx_bad, dy, w); }, "linear_backward_input", "dx must be [4, 5]");
  expect_error([&] { ops::linear_backward_weight(dw_bad, nullptr, dy, x, false); }, "linear_backward_weight");
  Tensor pre = random_tensor(rng, {4, 5}), pre_bad = random_tensor(rng, {4, 4}), dx = poisoned({4, 5});
  expect_error([&] { ops::linear_backward_input_gelu(dx_bad, dy, w, pre); }, "linear_backward_input_gelu",
               "dx must be [4, 5]");
  expect_error([&] { ops::linear_backward_input_gelu(dx, dy, w, pre_bad); }, "linear_backward_input_gelu",
               "gelu_pre must be [4, 5]");
  expect_error([&] { ops::linear_backward_input_gelu(pre, dy, w, pre); }, "linear_backward_input_gelu",
               "shares memory with the output");

  Tensor g = poisoned({4, 4});
  expect_error([&] { ops::gelu_forward(g, x); }, "gelu_forward", "y must be [4, 5]");
  expect_error([&] { ops::gelu_backward(g, x, x); }, "gelu_backward", "dx must be [4, 5]");

  Tensor lw = random_tensor(rng, {5}), lb = random_tensor(rng, {5}), mean = poisoned({4}), rstd = poisoned({4});
  Tensor ln_y = poisoned({4, 5}), mean_bad = poisoned({5});
  expect_error([&] { ops::layernorm_forward(ln_y, mean_bad, rstd, x, lw, lb, 1e-5f); }, "layernorm_forward",
               "mean must be [4]");
  Tensor dlw = Tensor::zeros({6}, DType::F32), dlb = Tensor::zeros({5}, DType::F32), ln_dx = poisoned({4, 5});
  expect_error([&] { ops::layernorm_backward(ln_dx, dlw, dlb, x, x, lw, mean, rstd); }, "layernorm_backward",
               "dw must be [5]");

  Tensor ids = random_ids(rng, {2, 3}, 0, 4), wte = random_tensor(rng, {4, 5}), wpe = random_tensor(rng, {3, 5});
  Tensor e_bad = poisoned({6, 5});
  expect_error([&] { ops::embedding_forward(e_bad, ids, wte, wpe, 3); }, "embedding_forward", "y must be [2, 3, 5]");
  Tensor wpe_short = random_tensor(rng, {2, 5}), e_y = poisoned({2, 3, 5});
  expect_error([&] { ops::embedding_forward(e_y, ids, wte, wpe_short, 3); }, "embedding_forward", "wpe");
  Tensor ids_flat = random_ids(rng, {7}, 0, 4), e7 = poisoned({7, 5});
  expect_error([&] { ops::embedding_forward(e7, ids_flat, wte, wpe, 3); }, "embedding_forward", "seq_len");
  Tensor dwte_bad = Tensor::zeros({4, 6}, DType::F32), e_dy = random_tensor(rng, {2, 3, 5});
  expect_error([&] { ops::embedding_backward(dwte_bad, nullptr, e_dy, ids, 3); }, "embedding_backward");

  Tensor qkv = random_tensor(rng, {2, 3, 12}), out = poisoned({2, 3, 4}), lse = poisoned({2, 2, 3});
  Tensor out_bad = poisoned({2, 3, 5}), lse_bad = poisoned({2, 3, 2});
  expect_error([&] { ops::attention_forward(out_bad, lse, qkv, 2); }, "attention_forward", "out must be [2, 3, 4]");
  expect_error([&] { ops::attention_forward(out, lse_bad, qkv, 2); }, "attention_forward", "lse must be [2, 2, 3]");
  expect_error([&] { ops::attention_forward(out, lse, qkv, 5); }, "attention_forward", "H = 5");
  Tensor dqkv_bad = poisoned({2, 3, 11});
  expect_error([&] { ops::attention_backward(dqkv_bad, out, qkv, out, lse, 2); }, "attention_backward",
               "dqkv must be [2, 3, 12]");

  Tensor logits = random_tensor(rng, {4, 5}), tgt = random_ids(rng, {4}, 0, 5), losses_bad = poisoned({5});
  expect_error([&] { ops::softmax_cross_entropy(losses_bad, nullptr, logits, tgt, 1.0f); }, "softmax_cross_entropy",
               "losses must be [4]");
  Tensor losses = poisoned({4}), dl_bad = poisoned({4, 6});
  expect_error([&] { ops::softmax_cross_entropy(losses, &dl_bad, logits, tgt, 1.0f); }, "softmax_cross_entropy",
               "dlogits must be [4, 5]");

  Tensor p = random_tensor(rng, {6}), grad_bad = random_tensor(rng, {5}), m = Tensor::zeros({6}, DType::F32),
         v = Tensor::zeros({6}, DType::F32);
  expect_error([&] { ops::adamw_update(p, grad_bad, m, v, ops::AdamWHyper{}); }, "adamw_update", "grad must be [6]");

  Tensor acc_bad = Tensor::zeros({2}, DType::F32);
  expect_error([&] { ops::sum_squares(acc_bad, p); }, "sum_squares", "acc must be [1]");
  Tensor a = random_tensor(rng, {2, 3}), a_bad = random_tensor(rng, {3, 2}), sum_y = poisoned({2, 3});
  expect_error([&] { ops::add(sum_y, a, a_bad); }, "add", "b must be [2, 3]");
}

TEST(OpsContract, WrongDtypesNameTheOp) {
  Rng rng(2);
  Tensor x = random_tensor(rng, {4, 5}), w = random_tensor(rng, {3, 5});
  Tensor y_bf16 = poisoned({4, 3}, DType::BF16);
  expect_error([&] { ops::linear_forward(y_bf16, x, w, Tensor()); }, "linear_forward", "fp32");
  Tensor logits = random_tensor(rng, {4, 5}), losses = poisoned({4});
  Tensor tgt_f = random_tensor(rng, {4});
  expect_error([&] { ops::softmax_cross_entropy(losses, nullptr, logits, tgt_f, 1.0f); }, "softmax_cross_entropy",
               "targets must be int32");
  Tensor ids = random_ids(rng, {4}, 0, 3);
  Tensor src = Tensor::empty({4}, DType::F32);
  expect_error([&] { ops::copy(src, ids); }, "copy", "cannot convert");
}

TEST(OpsContract, OutOfRangeIdsAndTargets) {
  Rng rng(3);
  Tensor ids = random_ids(rng, {2, 3}, 0, 4), wte = random_tensor(rng, {4, 5}), y = poisoned({2, 3, 5});
  ids.data<int32_t>()[4] = 4;
  expect_error([&] { ops::embedding_forward(y, ids, wte, Tensor(), 3); }, "embedding_forward", "token id 4");
  Tensor dwte = Tensor::zeros({4, 5}, DType::F32), dy = random_tensor(rng, {2, 3, 5});
  expect_error([&] { ops::embedding_backward(dwte, nullptr, dy, ids, 3); }, "embedding_backward", "token id 4");
  EXPECT_EQ(ops::sum_to_host(dwte), 0.0) << "a rejected embedding_backward must not write";

  Tensor logits = random_tensor(rng, {3, 5}), tgt = Tensor::from_vector(std::vector<int32_t>{0, 5, 1}, {3});
  Tensor losses = poisoned({3});
  expect_error([&] { ops::softmax_cross_entropy(losses, nullptr, logits, tgt, 1.0f); }, "softmax_cross_entropy",
               "target 5");
}

// copy_columns moves exactly the block of columns, row by row, in fp32 and bf16, and leaves every
// other element alone; a range outside either tensor, another dtype or overlapping tensors are errors.
TEST(OpsContract, CopyColumnsMovesOneBlock) {
  Rng rng(7);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor src = Tensor::empty({5, 9}, dt), dst = Tensor::empty({5, 6}, dt);
    ops::copy(src, random_tensor(rng, {5, 9}));
    ops::copy(dst, random_tensor(rng, {5, 6}));
    Tensor before = Tensor::empty({5, 6}, dt);
    ops::copy(before, dst);
    ops::copy_columns(dst, 1, src, 4, 3);
    const size_t es = dtype_size(dt);
    auto at = [&](const Tensor& t, int64_t r, int64_t c) {  // the element's bytes
      return std::string(static_cast<const char*>(t.data_ptr()) + (r * t.dim(1) + c) * es, es);
    };
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 6; ++c)
        EXPECT_EQ(at(dst, r, c), c >= 1 && c < 4 ? at(src, r, c + 3) : at(before, r, c))
            << dtype_name(dt) << " row " << r << " column " << c;
  }
  Tensor a = random_tensor(rng, {4, 8}), b = random_tensor(rng, {4, 8});
  expect_error([&] { ops::copy_columns(b, 6, a, 0, 3); }, "copy_columns", "columns [0, 3)");
  expect_error([&] { ops::copy_columns(b, 0, a, 7, 2); }, "copy_columns", "columns [7, 9)");
  Tensor c3 = random_tensor(rng, {3, 8});
  expect_error([&] { ops::copy_columns(c3, 0, a, 0, 2); }, "copy_columns", "the same rows");
  Tensor a16 = Tensor::empty({4, 8}, DType::BF16);
  expect_error([&] { ops::copy_columns(a16, 0, a, 0, 2); }, "copy_columns", "one dtype");
  Tensor half = a.view({2, 16});
  expect_error([&] { ops::copy_columns(half, 0, a, 0, 2); }, "copy_columns", "same rows");
  Tensor left = a.slice_flat(0, {4, 4});
  expect_error([&] { ops::copy_columns(left, 0, a, 4, 4); }, "copy_columns", "overlap");
}

TEST(OpsContract, LinearAccumulateAddsToPrefilled) {
  Rng rng(4);
  Tensor x = random_tensor(rng, {9, 6}), w = random_tensor(rng, {4, 6}), dy = random_tensor(rng, {9, 4});
  Tensor dx = poisoned({9, 6}), dw = poisoned({4, 6}), db = poisoned({4});
  ops::linear_backward_input(dx, dy, w, false);
  ops::linear_backward_weight(dw, &db, dy, x, false);
  Tensor dx2 = random_tensor(rng, {9, 6}), dw2 = random_tensor(rng, {4, 6}), db2 = random_tensor(rng, {4});
  const auto dx0 = to_doubles(dx2), dw0 = to_doubles(dw2), db0 = to_doubles(db2);
  ops::linear_backward_input(dx2, dy, w, true);
  ops::linear_backward_weight(dw2, &db2, dy, x, true);
  EXPECT_LE(rel_error(dx2, plus(to_doubles(dx), dx0)), 1e-6);
  EXPECT_LE(rel_error(dw2, plus(to_doubles(dw), dw0)), 1e-6);
  EXPECT_LE(rel_error(db2, plus(to_doubles(db), db0)), 1e-6);
}

TEST(OpsContract, LinearPreActWithoutActivationEqualsOutput) {
  Rng rng(5);
  Tensor x = random_tensor(rng, {3, 4}), w = random_tensor(rng, {5, 4}), b = random_tensor(rng, {5});
  Tensor y = poisoned({3, 5}), pre = poisoned({3, 5});
  ops::linear_forward(y, x, w, b, ops::Activation::None, &pre);
  EXPECT_EQ(rel_error(pre, y), 0.0);
  // And the output is x·wᵀ + b, by hand.
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 5; ++o) {
      double s = b.data<float>()[o];
      for (int i = 0; i < 4; ++i) s += static_cast<double>(x.data<float>()[n * 4 + i]) * w.data<float>()[o * 4 + i];
      EXPECT_NEAR(y.data<float>()[n * 5 + o], s, 1e-5 * (1 + std::fabs(s)));
    }
}

TEST(OpsContract, LinearResidualArgumentsAndAliasing) {
  Rng rng(14);
  Tensor x = random_tensor(rng, {4, 5}), w = random_tensor(rng, {3, 5}), b = random_tensor(rng, {3});
  Tensor res = random_tensor(rng, {4, 3}), y = poisoned({4, 3}), pre = poisoned({4, 3});
  expect_error([&] { ops::linear_forward(y, x, w, b, ops::Activation::Gelu, nullptr, &res); }, "linear_forward",
               "Activation::None");
  expect_error([&] { ops::linear_forward(y, x, w, b, ops::Activation::None, &pre, &res); }, "linear_forward",
               "pre_act");
  Tensor res_bad = random_tensor(rng, {4, 4});
  expect_error([&] { ops::linear_forward(y, x, w, b, ops::Activation::None, nullptr, &res_bad); }, "linear_forward",
               "residual must be [4, 3]");
  // y and the residual as overlapping, different windows of one buffer.
  Tensor buf = random_tensor(rng, {15});
  Tensor y_win = buf.slice_flat(0, {4, 3}), res_win = buf.slice_flat(3, {4, 3});
  expect_error([&] { ops::linear_forward(y_win, x, w, b, ops::Activation::None, nullptr, &res_win); },
               "linear_forward", "partly overlaps");

  // Separate output: y = x·wᵀ + b + residual, the residual untouched; in place: the same values.
  const std::vector<double> res0 = to_doubles(res);
  ops::linear_forward(y, x, w, b, ops::Activation::None, nullptr, &res);
  EXPECT_EQ(rel_error(res, res0), 0.0);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 3; ++o) {
      double want = res0[n * 3 + o] + b.data<float>()[o];
      for (int i = 0; i < 5; ++i) want += static_cast<double>(x.data<float>()[n * 5 + i]) * w.data<float>()[o * 5 + i];
      EXPECT_NEAR(y.data<float>()[n * 3 + o], want, 1e-5 * (1 + std::fabs(want)));
    }
  Tensor in_place = clone(res);
  ops::linear_forward(in_place, x, w, b, ops::Activation::None, nullptr, &in_place);
  EXPECT_EQ(rel_error(in_place, y), 0.0);
  // An undefined residual tensor is no residual.
  Tensor none, y_plain = poisoned({4, 3}), y_ref = poisoned({4, 3});
  ops::linear_forward(y_plain, x, w, b, ops::Activation::None, nullptr, &none);
  ops::linear_forward(y_ref, x, w, b);
  EXPECT_EQ(rel_error(y_plain, y_ref), 0.0);
  // No input features: y = b + residual.
  Tensor x0 = random_tensor(rng, {4, 0}), w0 = random_tensor(rng, {3, 0}), y0 = poisoned({4, 3});
  ops::linear_forward(y0, x0, w0, b, ops::Activation::None, nullptr, &res);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 3; ++o)
      EXPECT_EQ(y0.data<float>()[n * 3 + o], static_cast<float>(res0[n * 3 + o]) + b.data<float>()[o]);
}

TEST(OpsContract, LayerNormResidualArgumentsAndAliasing) {
  Rng rng(15);
  Tensor x = random_tensor(rng, {5, 8}, 1.5, 0.3), w = random_tensor(rng, {8}, 0.2, 1.0), b = random_tensor(rng, {8});
  Tensor y = poisoned({5, 8}), mean = poisoned({5}), rstd = poisoned({5});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dy = random_tensor(rng, {5, 8}), dres = random_tensor(rng, {5, 8});
  Tensor dw = Tensor::zeros({8}, DType::F32), db = Tensor::zeros({8}, DType::F32);
  Tensor dx = poisoned({5, 8});
  expect_error([&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, true, &dres); }, "layernorm_backward",
               "accumulate_dx");
  Tensor dres_bad = random_tensor(rng, {5, 7});
  expect_error([&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres_bad); },
               "layernorm_backward", "dresidual must be [5, 8]");

  // dx = dresidual + the plain gradient, the same bits as copying dresidual and accumulating.
  Tensor plain = poisoned({5, 8});
  ops::layernorm_backward(plain, dw, db, dy, x, w, mean, rstd, false);
  const std::vector<double> dres0 = to_doubles(dres);
  Tensor dw1 = Tensor::zeros({8}, DType::F32), db1 = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(dx, dw1, db1, dy, x, w, mean, rstd, false, &dres);
  EXPECT_LE(rel_error(dx, plus(to_doubles(plain), dres0)), 1e-7);
  EXPECT_EQ(rel_error(dres, dres0), 0.0) << "dresidual must not change";
  EXPECT_EQ(rel_error(dw1, dw), 0.0);
  EXPECT_EQ(rel_error(db1, db), 0.0);
  Tensor copied = clone(dres), dw2 = Tensor::zeros({8}, DType::F32), db2 = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(copied, dw2, db2, dy, x, w, mean, rstd, true);
  EXPECT_EQ(rel_error(dx, copied), 0.0);
  // dx may alias dresidual, and dy.
  Tensor over_res = clone(dres), dw3 = Tensor::zeros({8}, DType::F32), db3 = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(over_res, dw3, db3, dy, x, w, mean, rstd, false, &over_res);
  EXPECT_EQ(rel_error(over_res, dx), 0.0);
  Tensor over_dy = clone(dy), dw4 = Tensor::zeros({8}, DType::F32), db4 = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(over_dy, dw4, db4, over_dy, x, w, mean, rstd, false, &dres);
  EXPECT_EQ(rel_error(over_dy, dx), 0.0);
  EXPECT_EQ(rel_error(dw4, dw), 0.0);
}

TEST(OpsContract, LayerNormAccumulates) {
  Rng rng(6);
  Tensor x = random_tensor(rng, {5, 8}, 1.5, 0.3), w = random_tensor(rng, {8}, 0.2, 1.0), b = random_tensor(rng, {8});
  Tensor y = poisoned({5, 8}), mean = poisoned({5}), rstd = poisoned({5});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dy = random_tensor(rng, {5, 8});
  Tensor dx = poisoned({5, 8}), dw = Tensor::zeros({8}, DType::F32), db = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false);
  Tensor dx2 = random_tensor(rng, {5, 8}), dw2 = random_tensor(rng, {8}), db2 = random_tensor(rng, {8});
  const auto dx0 = to_doubles(dx2), dw0 = to_doubles(dw2), db0 = to_doubles(db2);
  ops::layernorm_backward(dx2, dw2, db2, dy, x, w, mean, rstd, true);
  EXPECT_LE(rel_error(dx2, plus(to_doubles(dx), dx0)), 1e-6);
  EXPECT_LE(rel_error(dw2, plus(to_doubles(dw), dw0)), 1e-6);
  EXPECT_LE(rel_error(db2, plus(to_doubles(db), db0)), 1e-6);
  // dx may alias dy.
  Tensor dy_alias = clone(dy);
  Tensor dw3 = Tensor::zeros({8}, DType::F32), db3 = Tensor::zeros({8}, DType::F32);
  ops::layernorm_backward(dy_alias, dw3, db3, dy_alias, x, w, mean, rstd, false);
  EXPECT_LE(rel_error(dy_alias, dx), 1e-7);
  EXPECT_LE(rel_error(dw3, dw), 1e-7);
}

// The column sum of dx a LayerNorm backward can hand over, and a dense layer's bias gradient taken
// from such a sum: the same values as summing dx / dy directly.
TEST(OpsContract, ColumnSumHandOver) {
  Rng rng(16);
  const int64_t N = 6, C = 8, I = 5;
  Tensor x = random_tensor(rng, {N, C}, 1.5, 0.3), w = random_tensor(rng, {C}, 0.2, 1.0), b = random_tensor(rng, {C});
  Tensor y = poisoned({N, C}), mean = poisoned({N}), rstd = poisoned({N});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dy = random_tensor(rng, {N, C}), dres = random_tensor(rng, {N, C});
  for (const Tensor* residual : std::initializer_list<const Tensor*>{nullptr, &dres}) {
    Tensor dx = poisoned({N, C}), sum = poisoned({C});
    Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, residual, &sum);
    std::vector<double> want(static_cast<size_t>(C), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) want[static_cast<size_t>(c)] += dx.data<float>()[n * C + c];
    EXPECT_LE(rel_error(sum, want), 1e-6) << (residual ? "with dresidual" : "plain");
    // dx and the weight gradients are those of a call without the sum.
    Tensor dx2 = poisoned({N, C}), dw2 = Tensor::zeros({C}, DType::F32), db2 = Tensor::zeros({C}, DType::F32);
    ops::layernorm_backward(dx2, dw2, db2, dy, x, w, mean, rstd, false, residual);
    EXPECT_EQ(rel_error(dx2, to_doubles(dx)), 0.0);
    EXPECT_EQ(rel_error(dw2, to_doubles(dw)), 0.0);
    EXPECT_EQ(rel_error(db2, to_doubles(db)), 0.0);
  }
  Tensor sum_bad = poisoned({C + 1}), dx = poisoned({N, C});
  Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  expect_error([&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, nullptr, &sum_bad); },
               "layernorm_backward", "dx_column_sum must be [8]");

  // The dense layer whose output gradient is that dx: its bias gradient from the handed-over sum.
  Tensor xin = random_tensor(rng, {N, I});
  Tensor sum = poisoned({C});
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres, &sum);
  Tensor lw = poisoned({C, I}), lb = poisoned({C});
  ops::linear_backward_weight(lw, &lb, dx, xin, false);
  for (bool accumulate : {false, true}) {
    Tensor lw2 = accumulate ? clone(lw) : poisoned({C, I}), lb2 = accumulate ? clone(lb) : poisoned({C});
    const std::vector<double> lb0 = to_doubles(lb);
    ops::linear_backward_weight(lw2, &lb2, dx, xin, accumulate, &sum);
    std::vector<double> want = to_doubles(sum);
    if (accumulate) want = plus(want, lb0);
    EXPECT_LE(rel_error(lb2, want), 1e-6) << (accumulate ? "accumulate" : "overwrite");
    EXPECT_LE(rel_error(lb2, accumulate ? plus(lb0, lb0) : lb0), 1e-6) << "the sum is Σ dy";
  }
  Tensor lw3 = poisoned({C, I});
  expect_error([&] { ops::linear_backward_weight(lw3, nullptr, dx, xin, false, &sum); }, "linear_backward_weight",
               "no db");
  Tensor lb3 = poisoned({C});
  expect_error([&] { ops::linear_backward_weight(lw3, &lb3, dx, xin, false, &sum_bad); }, "linear_backward_weight",
               "dy_column_sum must be [8]");
}

TEST(OpsContract, EmbeddingWithoutPositionsAndAccumulating) {
  Rng rng(7);
  const int64_t T = 3, V = 4, C = 2;
  Tensor ids = random_ids(rng, {2, T}, 0, V), wte = random_tensor(rng, {V, C}), y = poisoned({2, T, C});
  ops::embedding_forward(y, ids, wte, Tensor(), T);
  for (int64_t n = 0; n < 2 * T; ++n)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(y.data<float>()[n * C + c], wte.data<float>()[ids.data<int32_t>()[n] * C + c]);
  Tensor dy = random_tensor(rng, {2, T, C}), dwte = random_tensor(rng, {V, C}), dwpe = random_tensor(rng, {T + 1, C});
  std::vector<double> want_te = to_doubles(dwte), want_pe = to_doubles(dwpe);
  for (int64_t n = 0; n < 2 * T; ++n)
    for (int64_t c = 0; c < C; ++c) {
      want_te[ids.data<int32_t>()[n] * C + c] += dy.data<float>()[n * C + c];
      want_pe[(n % T) * C + c] += dy.data<float>()[n * C + c];
    }
  ops::embedding_backward(dwte, &dwpe, dy, ids, T);
  EXPECT_LE(rel_error(dwte, want_te), 1e-6);
  EXPECT_LE(rel_error(dwpe, want_pe), 1e-6);
}

// add_bias adds b[c] to every row; a bias of another width is an error naming the op.
TEST(OpsContract, AddBiasAddsToEveryRow) {
  Rng rng(18);
  Tensor y = random_tensor(rng, {3, 5}), b = random_tensor(rng, {5});
  std::vector<double> want = to_doubles(y);
  const std::vector<double> bias = to_doubles(b);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % 5];
  ops::add_bias(y, b);
  EXPECT_LE(rel_error(y, want), 1e-7);
  Tensor b_bad = random_tensor(rng, {4});
  expect_error([&] { ops::add_bias(y, b_bad); }, "add_bias", "b must be [C]");
}

TEST(OpsContract, ElementwiseAliasing) {
  Rng rng(8);
  Tensor a = random_tensor(rng, {3, 5}), b = random_tensor(rng, {3, 5});
  std::vector<double> want = plus(to_doubles(a), to_doubles(b));
  Tensor y = poisoned({3, 5});
  ops::add(y, a, b);
  EXPECT_LE(rel_error(y, want), 1e-7);
  ops::add(a, a, b);  // y aliases a
  EXPECT_LE(rel_error(a, want), 1e-7);

  Tensor x = random_tensor(rng, {4, 6}, 2.0), dy = random_tensor(rng, {4, 6});
  Tensor dx = poisoned({4, 6});
  ops::gelu_backward(dx, dy, x);
  ops::gelu_backward(dy, dy, x);  // dx aliases dy
  EXPECT_EQ(rel_error(dy, dx), 0.0);
  Tensor gy = poisoned({4, 6});
  ops::gelu_forward(gy, x);
  ops::gelu_forward(x, x);  // in place
  EXPECT_EQ(rel_error(x, gy), 0.0);

  Tensor s = random_tensor(rng, {7});
  std::vector<double> want_s = to_doubles(s);
  for (double& v : want_s) v = static_cast<float>(v * -1.75f);
  ops::scale(s, -1.75f);
  EXPECT_EQ(rel_error(s, want_s), 0.0);
}

TEST(OpsContract, AddIntoSecondOperand) {
  Rng rng(9);
  Tensor a = random_tensor(rng, {11}), b = random_tensor(rng, {11});
  const std::vector<double> want = plus(to_doubles(a), to_doubles(b));
  ops::add(b, a, b);
  EXPECT_LE(rel_error(b, want), 1e-7);
}

TEST(OpsContract, CrossEntropyInPlaceAndStable) {
  Rng rng(10);
  const int64_t N = 5, V = 9;
  // Logits near 1000: exp() of them overflows fp32, so only a max-subtracted softmax survives.
  Tensor logits = random_tensor(rng, {N, V}, 3.0, 1000.0);
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{3, -1, 0, 8, 2}, {N});
  Tensor losses = poisoned({N}), dlogits = poisoned({N, V});
  ops::softmax_cross_entropy(losses, &dlogits, logits, targets, 0.25f);
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits.data<float>() + n * V;
    double mx = row[0];
    for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] - mx);
    const int32_t t = targets.data<int32_t>()[n];
    const double want = t < 0 ? 0.0 : mx + std::log(s) - row[t];
    EXPECT_NEAR(losses.data<float>()[n], want, 1e-5 * (1 + want)) << "row " << n;
    double row_sum = 0;
    for (int64_t v = 0; v < V; ++v) {
      const float g = dlogits.data<float>()[n * V + v];
      ASSERT_TRUE(std::isfinite(g));
      if (t < 0) {
        EXPECT_EQ(g, 0.0f);
      }
      row_sum += g;
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "softmax − onehot sums to 0 in every row";
  }
  // dlogits aliasing logits gives the same values.
  Tensor in_place = clone(logits), losses2 = poisoned({N});
  ops::softmax_cross_entropy(losses2, &in_place, in_place, targets, 0.25f);
  EXPECT_EQ(rel_error(in_place, dlogits), 0.0);
  EXPECT_EQ(rel_error(losses2, losses), 0.0);
}

TEST(OpsContract, AttentionSingleTokenAttendsToItself) {
  Rng rng(11);
  const int64_t B = 2, H = 3, D = 4;
  Tensor qkv = random_tensor(rng, {B, 1, 3 * H * D});
  Tensor out = poisoned({B, 1, H * D}), lse = poisoned({B, H, 1});
  ops::attention_forward(out, lse, qkv, H);
  const float* p = qkv.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* q = p + b * 3 * H * D + h * D;
      const float* k = q + H * D;
      const float* v = k + H * D;
      double qk = 0;
      for (int64_t d = 0; d < D; ++d) qk += static_cast<double>(q[d]) * k[d];
      EXPECT_NEAR(lse.data<float>()[b * H + h], qk / std::sqrt(static_cast<double>(D)), 1e-5);
      for (int64_t d = 0; d < D; ++d) EXPECT_FLOAT_EQ(out.data<float>()[b * H * D + h * D + d], v[d]);
    }
}

TEST(OpsContract, LlamaOpArgumentErrors) {
  Rng rng(21);
  Tensor x = random_tensor(rng, {4, 8}), w = random_tensor(rng, {8}), rstd = poisoned({4}), y = poisoned({4, 8});
  Tensor w_bad = random_tensor(rng, {7}), rstd_bad = poisoned({8}), y_bad = poisoned({4, 7});
  expect_error([&] { ops::rmsnorm_forward(y, rstd, x, w_bad, 1e-5f); }, "rmsnorm_forward", "x must be [..., 7]");
  expect_error([&] { ops::rmsnorm_forward(y, rstd_bad, x, w, 1e-5f); }, "rmsnorm_forward", "rstd must be [4]");
  expect_error([&] { ops::rmsnorm_forward(y_bad, rstd, x, w, 1e-5f); }, "rmsnorm_forward", "y must be [4, 8]");
  expect_error([&] { ops::rmsnorm_forward(y, rstd, x, w, -1.0f); }, "rmsnorm_forward", "eps");
  ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
  Tensor dx = poisoned({4, 8}), dw = Tensor::zeros({8}, DType::F32), dw_bad = Tensor::zeros({9}, DType::F32);
  expect_error([&] { ops::rmsnorm_backward(dx, dw_bad, x, x, w, rstd); }, "rmsnorm_backward", "dw must be [8]");
  Tensor dres = random_tensor(rng, {4, 8}), dres_bad = random_tensor(rng, {4, 9});
  expect_error([&] { ops::rmsnorm_backward(dx, dw, x, x, w, rstd, true, &dres); }, "rmsnorm_backward",
               "accumulate_dx");
  expect_error([&] { ops::rmsnorm_backward(dx, dw, x, x, w, rstd, false, &dres_bad); }, "rmsnorm_backward",
               "dresidual must be [4, 8]");

  // qkv [B, T, (H + 2·Hkv)·D] with H = 4, Hkv = 2, D = 4: width 32.
  Tensor qkv = random_tensor(rng, {2, 3, 32});
  expect_error([&] { ops::rope_forward(qkv, 4, 3, 1e4f); }, "rope_forward", "must divide n_heads = 4");
  expect_error([&] { ops::rope_forward(qkv, 4, 1, 1e4f); }, "rope_forward", "Hkv = 1");
  expect_error([&] { ops::rope_forward(qkv, 4, 2, 0.5f); }, "rope_forward", "theta");
  Tensor odd = random_tensor(rng, {2, 3, 24});  // H = 4, Hkv = 2: D = 3
  expect_error([&] { ops::rope_backward(odd, 4, 2, 1e4f); }, "rope_backward", "D = 3 must be even");
  Tensor flat = random_tensor(rng, {6, 32});
  expect_error([&] { ops::rope_forward(flat, 4, 2, 1e4f); }, "rope_forward", "[B, T, (H + 2·Hkv)·D]");
  Tensor qkv_bf16 = poisoned({2, 3, 32}, DType::BF16);
  expect_error([&] { ops::rope_forward(qkv_bf16, 4, 2, 1e4f); }, "rope_forward", "fp32");

  Tensor gu = random_tensor(rng, {3, 10}), h = poisoned({3, 5}), h_bad = poisoned({3, 10});
  expect_error([&] { ops::swiglu_forward(h_bad, gu); }, "swiglu_forward", "h must be [3, 5]");
  Tensor gu_odd = random_tensor(rng, {3, 9});
  expect_error([&] { ops::swiglu_forward(h, gu_odd); }, "swiglu_forward", "[..., 2F]");
  Tensor dgu = poisoned({3, 10}), dh = random_tensor(rng, {3, 5}), dh_bad = random_tensor(rng, {3, 4});
  expect_error([&] { ops::swiglu_backward(dgu, dh_bad, gu); }, "swiglu_backward", "dh must be [3, 5]");
  expect_error([&] { ops::swiglu_backward(gu, dh, gu); }, "swiglu_backward", "shares memory");

  Tensor out = poisoned({2, 3, 16}), lse = poisoned({2, 4, 3}), lse_kv = poisoned({2, 2, 3});
  expect_error([&] { ops::attention_forward(out, lse_kv, qkv, 4, 2); }, "attention_forward", "lse must be [2, 4, 3]");
  expect_error([&] { ops::attention_forward(out, lse, qkv, 4, 3); }, "attention_forward", "must divide n_heads = 4");
  expect_error([&] { ops::attention_forward(out, lse, qkv, 4, 4); }, "attention_forward", "Hkv = 4");
  Tensor dqkv_bad = poisoned({2, 3, 48});
  expect_error([&] { ops::attention_backward(dqkv_bad, out, qkv, out, lse, 4, 2); }, "attention_backward",
               "dqkv must be [2, 3, 32]");
}

TEST(OpsContract, RmsNormResidualAndAliasing) {
  Rng rng(22);
  Tensor x = random_tensor(rng, {5, 8}, 1.5, 0.3), w = random_tensor(rng, {8}, 0.2, 1.0);
  Tensor y = poisoned({5, 8}), rstd = poisoned({5});
  ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
  // y may alias x.
  Tensor in_place = clone(x), rstd2 = poisoned({5});
  ops::rmsnorm_forward(in_place, rstd2, in_place, w, 1e-5f);
  EXPECT_EQ(rel_error(in_place, y), 0.0);
  EXPECT_EQ(rel_error(rstd2, rstd), 0.0);
  Tensor dy = random_tensor(rng, {5, 8}), dres = random_tensor(rng, {5, 8});
  Tensor plain = poisoned({5, 8}), dw = Tensor::zeros({8}, DType::F32);
  ops::rmsnorm_backward(plain, dw, dy, x, w, rstd, false);
  // dx = dresidual + the plain gradient, the same bits as copying dresidual and accumulating.
  Tensor dx = poisoned({5, 8}), dw1 = Tensor::zeros({8}, DType::F32);
  const std::vector<double> dres0 = to_doubles(dres);
  ops::rmsnorm_backward(dx, dw1, dy, x, w, rstd, false, &dres);
  EXPECT_LE(rel_error(dx, plus(to_doubles(plain), dres0)), 1e-7);
  EXPECT_EQ(rel_error(dres, dres0), 0.0) << "dresidual must not change";
  EXPECT_EQ(rel_error(dw1, dw), 0.0);
  Tensor copied = clone(dres), dw2 = Tensor::zeros({8}, DType::F32);
  ops::rmsnorm_backward(copied, dw2, dy, x, w, rstd, true);
  EXPECT_EQ(rel_error(dx, copied), 0.0);
  // dx may alias dresidual, and dy; dw accumulates over what was there.
  Tensor over_res = clone(dres), dw3 = Tensor::zeros({8}, DType::F32);
  ops::rmsnorm_backward(over_res, dw3, dy, x, w, rstd, false, &over_res);
  EXPECT_EQ(rel_error(over_res, dx), 0.0);
  Tensor over_dy = clone(dy), dw4 = random_tensor(rng, {8});
  const auto dw40 = to_doubles(dw4);
  ops::rmsnorm_backward(over_dy, dw4, over_dy, x, w, rstd, false, &dres);
  EXPECT_EQ(rel_error(over_dy, dx), 0.0);
  EXPECT_LE(rel_error(dw4, plus(to_doubles(dw), dw40)), 1e-7);
  // A dresidual with accumulate_dx (two ways of adding to dx at once), or of another shape: refused,
  // for both norms.
  Tensor dx5 = poisoned({5, 8}), dw5 = Tensor::zeros({8}, DType::F32), short_res = random_tensor(rng, {4, 8});
  expect_error([&] { ops::rmsnorm_backward(dx5, dw5, dy, x, w, rstd, true, &dres); }, "rmsnorm_backward",
               "accumulate_dx must be false with a dresidual (dx = dresidual + the RMSNorm's gradient");
  expect_error([&] { ops::rmsnorm_backward(dx5, dw5, dy, x, w, rstd, false, &short_res); }, "rmsnorm_backward",
               "dresidual");
  Tensor mean = Tensor::zeros({5}, DType::F32), db = Tensor::zeros({8}, DType::F32);
  expect_error([&] { ops::layernorm_backward(dx5, dw5, db, dy, x, w, mean, rstd, true, &dres); },
               "layernorm_backward", "the LayerNorm's gradient");
  expect_error([&] { ops::layernorm_backward(dx5, dw5, db, dy, x, w, mean, rstd, false, &short_res); },
               "layernorm_backward", "dresidual");
}

// RoPE rotates q and k only, leaves position 0 and every v bit-identical, and its backward (the
// transpose of a rotation) undoes the forward.
TEST(OpsContract, RopeTouchesOnlyQkAndInverts) {
  Rng rng(23);
  const int64_t B = 2, T = 9, H = 6, Hkv = 2, D = 8, W = (H + 2 * Hkv) * D;
  Tensor qkv = random_tensor(rng, {B, T, W});
  const std::vector<double> before = to_doubles(qkv);
  Tensor rotated = clone(qkv);
  ops::rope_forward(rotated, H, Hkv, 500000.0f);
  const std::vector<double> after = to_doubles(rotated);
  int64_t moved = 0;
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < W; ++c) {
      const size_t i = static_cast<size_t>(bt * W + c);
      const bool v_part = c >= (H + Hkv) * D, first_position = bt % T == 0;
      if (v_part || first_position) {
        ASSERT_EQ(after[i], before[i]) << "token " << bt << " channel " << c << " must not change";
      } else if (after[i] != before[i]) {
        ++moved;
      }
    }
  EXPECT_GT(moved, (B * (T - 1) * (H + Hkv) * D) / 2) << "q and k past position 0 must rotate";
  // The rotation keeps each pair's length, and the backward applied to the forward gives x back.
  ops::rope_backward(rotated, H, Hkv, 500000.0f);
  EXPECT_LE(rel_error(rotated, before), 1e-6);
}

// Grouped-query attention equals multi-head attention on K/V heads repeated to H (transformers'
// repeat_kv), whose dK/dV summed over each group are the grouped gradients.
TEST(OpsContract, GroupedQueryAttentionEqualsRepeatedHeads) {
  Rng rng(24);
  const int64_t B = 2, T = 11, H = 6, Hkv = 2, D = 4, G = H / Hkv;
  Tensor qkv = random_tensor(rng, {B, T, (H + 2 * Hkv) * D});
  Tensor wide = Tensor::empty({B, T, 3 * H * D}, DType::F32);
  const float* src = qkv.data<float>();
  float* dst = wide.data<float>();
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* s = src + bt * (H + 2 * Hkv) * D;
    float* d = dst + bt * 3 * H * D;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t e = 0; e < D; ++e) {
        d[h * D + e] = s[h * D + e];
        d[(H + h) * D + e] = s[(H + h / G) * D + e];
        d[(2 * H + h) * D + e] = s[(H + Hkv + h / G) * D + e];
      }
  }
  Tensor out = poisoned({B, T, H * D}), lse = poisoned({B, H, T});
  Tensor out_w = poisoned({B, T, H * D}), lse_w = poisoned({B, H, T});
  ops::attention_forward(out, lse, qkv, H, Hkv);
  ops::attention_forward(out_w, lse_w, wide, H);
  EXPECT_LE(rel_error(out, out_w), 1e-6);
  EXPECT_LE(rel_error(lse, lse_w), 1e-6);
  Tensor dout = random_tensor(rng, {B, T, H * D});
  Tensor dqkv = poisoned(qkv.shape()), dwide = poisoned(wide.shape());
  ops::attention_backward(dqkv, dout, qkv, out, lse, H, Hkv);
  ops::attention_backward(dwide, dout, wide, out_w, lse_w, H);
  std::vector<double> expect(static_cast<size_t>(qkv.numel()), 0.0);
  const float* g = dwide.data<float>();
  for (int64_t bt = 0; bt < B * T; ++bt) {
    double* e = expect.data() + bt * (H + 2 * Hkv) * D;
    const float* w = g + bt * 3 * H * D;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t k = 0; k < D; ++k) {
        e[h * D + k] = w[h * D + k];
        e[(H + h / G) * D + k] += w[(H + h) * D + k];
        e[(H + Hkv + h / G) * D + k] += w[(2 * H + h) * D + k];
      }
  }
  EXPECT_LE(rel_error(dqkv, expect), 1e-6);
}

TEST(OpsContract, CopyRoundsToNearestEven) {
  auto bits_of = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  // (fp32 bits, expected bf16 bits)
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000u, 0x3f80},  // 1.0 exactly
      {0x3f808000u, 0x3f80},  // tie, even below: stays
      {0x3f818000u, 0x3f82},  // tie, odd below: rounds up to even
      {0x3f808001u, 0x3f81},  // just above the tie: up
      {0x3f807fffu, 0x3f80},  // just below the tie: down
      {0xbf818000u, 0xbf82},  // negative tie
      {0x7f7fffffu, 0x7f80},  // largest fp32 rounds to +inf
      {0x7f800000u, 0x7f80},  // +inf
      {0xff800000u, 0xff80},  // -inf
      {0x80000000u, 0x8000},  // -0
      {0x00000001u, 0x0000},  // smallest denormal rounds to 0
  };
  std::vector<float> src;
  for (auto [f, b] : cases) src.push_back(from_bits(f));
  src.push_back(std::numeric_limits<float>::quiet_NaN());
  Tensor x = Tensor::from_vector(src, {static_cast<int64_t>(src.size())});
  Tensor h = poisoned(x.shape(), DType::BF16);
  h.bf16_bits()[0] = 0x1234;  // poison that is not NaN for the NaN check below
  ops::copy(h, x);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(h.bf16_bits()[i], cases[i].second) << "fp32 bits 0x" << std::hex << cases[i].first;
  EXPECT_TRUE(std::isnan(bf16_to_float(h.bf16_bits()[cases.size()]))) << "NaN must stay NaN";
  // bf16 -> fp32 is exact.
  Tensor back = poisoned(x.shape());
  ops::copy(back, h);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(bits_of(back.data<float>()[i]), static_cast<uint32_t>(cases[i].second) << 16);
  // Same dtype: a byte copy, and shapes may differ when the counts agree.
  Tensor flat = poisoned({static_cast<int64_t>(src.size())}), other = poisoned({1, static_cast<int64_t>(src.size())});
  ops::copy(flat, back);
  ops::copy(other, flat);
  EXPECT_EQ(std::memcmp(other.data_ptr(), back.data_ptr(), back.nbytes()), 0);
  Tensor short_dst = poisoned({3});
  expect_error([&] { ops::copy(short_dst, x); }, "copy");
}

TEST(OpsContract, FillZeroAndSumToHost) {
  Tensor f = poisoned({3, 4}), h = poisoned({5}, DType::BF16);
  ops::fill(f, 2.5f);
  ops::fill(h, -1.25f);
  EXPECT_DOUBLE_EQ(ops::sum_to_host(f), 30.0);
  EXPECT_DOUBLE_EQ(ops::sum_to_host(h), -6.25);
  ops::scale(h, 2.0f);
  EXPECT_DOUBLE_EQ(ops::sum_to_host(h), -12.5);
  ops::zero(f);
  EXPECT_DOUBLE_EQ(ops::sum_to_host(f), 0.0);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, -2, 7}, {3});
  EXPECT_DOUBLE_EQ(ops::sum_to_host(ids), 6.0);
}

TEST(OpsContract, SumSquaresAccumulatesInDouble) {
  Rng rng(12);
  const int64_t n = 1 << 20;
  Tensor x = random_tensor(rng, {n}, 1.0, 0.5);
  Tensor acc = Tensor::from_vector(std::vector<float>{0.75f}, {1});
  double want = 0.75;
  for (int64_t i = 0; i < n; ++i) want += static_cast<double>(x.data<float>()[i]) * x.data<float>()[i];
  ops::sum_squares(acc, x);
  // fp32 accumulation of a million terms misses by ~1e-5 relative; double then one rounding does not.
  EXPECT_NEAR(acc.data<float>()[0], want, 2e-7 * want);
  // bf16 input, accumulating on top of the previous value.
  Tensor hb = Tensor::empty({1000}, DType::BF16);
  ops::copy(hb, x.narrow(0, 1000));
  double want_b = acc.data<float>()[0];
  for (int64_t i = 0; i < 1000; ++i) want_b += std::pow(static_cast<double>(bf16_to_float(hb.bf16_bits()[i])), 2);
  ops::sum_squares(acc, hb);
  EXPECT_NEAR(acc.data<float>()[0], want_b, 2e-7 * want_b);
}

TEST(OpsContract, AdamWFirstStepMovesByLearningRate) {
  // At step 1, m̂ = g and v̂ = g², so p1 = p0·(1 − lr·wd) − lr·g/(|g| + eps) ≈ p0·(1 − lr·wd) − lr·sign(g).
  Rng rng(13);
  const int64_t n = 64;
  Tensor p = random_tensor(rng, {n}), g = random_tensor(rng, {n});
  const std::vector<double> p0 = to_doubles(p), g0 = to_doubles(g);
  Tensor m = poisoned({n}), v = poisoned({n});
  ops::zero(m);
  ops::zero(v);
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  h.grad_scale = 3.0f;
  h.step = 1;
  Tensor working = poisoned({n}, DType::BF16);
  ops::adamw_update(p, g, m, v, h, &working);
  for (int64_t i = 0; i < n; ++i) {
    const double sign = g0[i] > 0 ? 1.0 : -1.0;
    EXPECT_NEAR(p.data<float>()[i], p0[i] * (1 - 0.001) - 0.01 * sign, 1e-6);
    EXPECT_NEAR(m.data<float>()[i], 0.1 * 3.0 * g0[i], 1e-6);
    EXPECT_NEAR(v.data<float>()[i], 0.001 * 9.0 * g0[i] * g0[i], 1e-6);
    EXPECT_EQ(working.bf16_bits()[i], float_to_bf16(p.data<float>()[i]));
  }
  h.step = 0;
  expect_error([&] { ops::adamw_update(p, g, m, v, h); }, "adamw_update", "step");
}

TEST(OpsContract, AdamWBf16MomentsAreTheFp32UpdateRounded) {
  // optimizer.state_dtype bf16: the op widens the bf16 moments, computes the fp32 update and rounds
  // each new moment once. Started from moments that bf16 holds exactly, it must take the fp32 op's
  // step bit for bit (the new weights come from the unrounded fp32 moments) and store that op's
  // moments rounded to nearest even: no tolerance, it is the same fp32 arithmetic on the same values.
  Rng rng(29);
  const int64_t n = 1000;
  Tensor g = random_tensor(rng, {n}, 0.01);
  Tensor m16 = poisoned({n}, DType::BF16), v16 = poisoned({n}, DType::BF16);
  ops::copy(m16, random_tensor(rng, {n}, 1e-3));
  Tensor v_src = random_tensor(rng, {n}, 1e-5);
  for (int64_t i = 0; i < n; ++i) v_src.data<float>()[i] = std::abs(v_src.data<float>()[i]) + 1e-8f;
  ops::copy(v16, v_src);
  Tensor m32 = poisoned({n}), v32 = poisoned({n});
  ops::copy(m32, m16);
  ops::copy(v32, v16);
  Tensor p32 = random_tensor(rng, {n}, 0.05), p16 = clone(p32);
  ops::AdamWHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.7f;
  h.step = 4;
  Tensor working = poisoned({n}, DType::BF16);
  ops::adamw_update(p32, g, m32, v32, h);
  ops::adamw_update(p16, g, m16, v16, h, &working);
  int moved = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&p16.data<float>()[i], &p32.data<float>()[i], sizeof(float)), 0) << "p[" << i << "]";
    ASSERT_EQ(m16.bf16_bits()[i], float_to_bf16(m32.data<float>()[i])) << "m[" << i << "]";
    ASSERT_EQ(v16.bf16_bits()[i], float_to_bf16(v32.data<float>()[i])) << "v[" << i << "]";
    ASSERT_EQ(working.bf16_bits()[i], float_to_bf16(p16.data<float>()[i]));
    moved += bf16_to_float(v16.bf16_bits()[i]) != v32.data<float>()[i];
  }
  EXPECT_GT(moved, n / 2) << "the fp32 moments should mostly lie between bf16 values";

  // m and v share one dtype; the master stays fp32.
  Tensor v_wrong = poisoned({n});
  expect_error([&] { ops::adamw_update(p16, g, m16, v_wrong, h); }, "adamw_update", "v must be");
  Tensor p_bf16 = poisoned({n}, DType::BF16);
  expect_error([&] { ops::adamw_update(p_bf16, g, m16, v16, h); }, "adamw_update", "master");
}

}  // namespace
}  // namespace tetra::test
