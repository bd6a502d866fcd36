// CUDA dense layer (cuBLASLt with fused bias / GELU / bias-gradient epilogues and their unfused
// fallbacks) against the CPU twin, on GPT-2 124M shapes and on odd sizes, fp32 and bf16, with and
// without accumulation, and with fp32 outputs from bf16 inputs.
#include <cmath>
#include <sstream>
#include <string>

#include "tests/gpu/gpu_test_util.h"

namespace tetra::gputest {
namespace {

using ops::Activation;

Shape with_last(Shape lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

// Values representable in bf16 serve both dtypes, so one CPU reference covers fp32 and bf16 runs.
Tensor rand_bf16(Rng& rng, const Shape& shape, double scale) {
  return representable(random_host(rng, shape, scale), DType::BF16);
}

Tensor host_sum(const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::empty(a.shape(), DType::F32);
  ops::add(s, a, b);
  return s;
}

struct Case {
  Shape lead;  // leading dimensions of x / y (their product is N)
  int64_t I, O;
  bool variants;  // also the no-bias and mixed-precision variants (cheap shapes only)
};

std::string label(const Case& c, DType dt, DType out, const char* what) {
  std::ostringstream os;
  os << what << ": N=" << shape_numel(c.lead) << " I=" << c.I << " O=" << c.O << " in " << dtype_name(dt) << " out "
     << dtype_name(out);
  return os.str();
}

void check_case(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const Shape x_shape = with_last(c.lead, c.I), y_shape = with_last(c.lead, c.O);
  Tensor x = rand_bf16(rng, x_shape, 1.0);
  Tensor w = rand_bf16(rng, {c.O, c.I}, 1.0 / std::sqrt(static_cast<double>(c.I)));
  Tensor b = rand_bf16(rng, {c.O}, 0.5);
  Tensor dy = rand_bf16(rng, y_shape, 1.0);
  Tensor dx0 = rand_bf16(rng, x_shape, 1.0);
  Tensor dw0 = rand_bf16(rng, {c.O, c.I}, 0.1);
  Tensor db0 = rand_bf16(rng, {c.O}, 1.0);

  // CPU references (three GEMMs; everything else derives from them).
  Tensor pre = Tensor::empty(y_shape, DType::F32), y_gelu = Tensor::empty(y_shape, DType::F32);
  ops::linear_forward(y_gelu, x, w, b, Activation::Gelu, &pre);
  Tensor dx = Tensor::empty(x_shape, DType::F32);
  ops::linear_backward_input(dx, dy, w, false);
  Tensor dw = Tensor::empty({c.O, c.I}, DType::F32), db = Tensor::empty({c.O}, DType::F32);
  ops::linear_backward_weight(dw, &db, dy, x, false);
  const Tensor dx_acc = host_sum(dx, dx0), dw_acc = host_sum(dw, dw0), db_acc = host_sum(db, db0);
  Tensor pre_nobias, y_gelu_nobias;
  if (c.variants) {
    pre_nobias = Tensor::empty(y_shape, DType::F32);
    ops::linear_forward(pre_nobias, x, w, Tensor(), Activation::None);
    y_gelu_nobias = Tensor::empty(y_shape, DType::F32);
    ops::gelu_forward(y_gelu_nobias, pre_nobias);
  }

  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor gx = upload(x, dt), gw = upload(w, dt), gb = upload(b, dt), gdy = upload(dy, dt);
    for (DType out : {DType::F32, DType::BF16}) {
      if (dt == DType::F32 && out == DType::BF16) continue;  // no fp32-in, bf16-out GEMM
      if (out != dt && !c.variants) continue;
      const double t = tol(out);
      Tensor gb_out = upload(b, out);

      Tensor y = poisoned(y_shape, out);
      ops::linear_forward(y, gx, gw, gb_out, Activation::None);
      EXPECT_LE(rel_error(y, pre), t) << label(c, dt, out, "forward + bias");

      Tensor yg = poisoned(y_shape, out), p = poisoned(y_shape, out);
      ops::linear_forward(yg, gx, gw, gb_out, Activation::Gelu, &p);
      EXPECT_LE(rel_error(yg, y_gelu), t) << label(c, dt, out, "forward + bias + GELU, y");
      EXPECT_LE(rel_error(p, pre), t) << label(c, dt, out, "forward + bias + GELU, pre_act");

      Tensor yg2 = poisoned(y_shape, out);
      ops::linear_forward(yg2, gx, gw, gb_out, Activation::Gelu);
      EXPECT_LE(rel_error(yg2, y_gelu), t) << label(c, dt, out, "forward + bias + GELU, no pre_act");

      if (c.variants) {
        Tensor y0 = poisoned(y_shape, out);
        ops::linear_forward(y0, gx, gw, Tensor(), Activation::None);
        EXPECT_LE(rel_error(y0, pre_nobias), t) << label(c, dt, out, "forward, no bias");
        Tensor yg0 = poisoned(y_shape, out), p0 = poisoned(y_shape, out);
        ops::linear_forward(yg0, gx, gw, Tensor(), Activation::Gelu, &p0);
        EXPECT_LE(rel_error(yg0, y_gelu_nobias), t) << label(c, dt, out, "forward + GELU, no bias, y");
        EXPECT_LE(rel_error(p0, pre_nobias), t) << label(c, dt, out, "forward + GELU, no bias, pre_act");
      }

      Tensor gdx = poisoned(x_shape, out);
      ops::linear_backward_input(gdx, gdy, gw, false);
      EXPECT_LE(rel_error(gdx, dx), t) << label(c, dt, out, "backward input");
      Tensor gdx_acc = upload(dx0, out);
      ops::linear_backward_input(gdx_acc, gdy, gw, true);
      EXPECT_LE(rel_error(gdx_acc, dx_acc), t) << label(c, dt, out, "backward input, accumulate");

      Tensor gdw = poisoned({c.O, c.I}, out), gdb = poisoned({c.O}, out);
      ops::linear_backward_weight(gdw, &gdb, gdy, gx, false);
      EXPECT_LE(rel_error(gdw, dw), t) << label(c, dt, out, "backward weight, dw");
      EXPECT_LE(rel_error(gdb, db), t) << label(c, dt, out, "backward weight, db");
      Tensor gdw_acc = upload(dw0, out), gdb_acc = upload(db0, out);
      ops::linear_backward_weight(gdw_acc, &gdb_acc, gdy, gx, true);
      EXPECT_LE(rel_error(gdw_acc, dw_acc), t) << label(c, dt, out, "backward weight, accumulate, dw");
      EXPECT_LE(rel_error(gdb_acc, db_acc), t) << label(c, dt, out, "backward weight, accumulate, db");
      Tensor gdw_only = upload(dw0, out);
      ops::linear_backward_weight(gdw_only, nullptr, gdy, gx, true);
      EXPECT_LE(rel_error(gdw_only, dw_acc), t) << label(c, dt, out, "backward weight, accumulate, no db");
    }
  }
}

// GPT-2 124M: attention qkv, attention projection, MLP up, MLP down, and the LM head (padded vocab).
TEST(GpuLinear, Gpt2QkvProjection) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 768, 2304, false}, 101);
}
TEST(GpuLinear, Gpt2AttentionOutput) {
  TETRA_REQUIRE_GPU();
  check_case({{4, 1024}, 768, 768, true}, 102);
}
TEST(GpuLinear, Gpt2MlpUp) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 768, 3072, false}, 103);
}
TEST(GpuLinear, Gpt2MlpDown) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 3072, 768, false}, 104);
}
TEST(GpuLinear, Gpt2LmHead) {
  TETRA_REQUIRE_GPU();
  check_case({{1024}, 768, 50304, false}, 105);
}

// Sizes that are no multiple of 8: cuBLASLt picks unaligned algorithms; O % 8 != 0 also takes the
// unfused GELU path (its aux leading dimension must be a multiple of 8).
TEST(GpuLinear, OddSizes) {
  TETRA_REQUIRE_GPU();
  check_case({{37}, 45, 29, true}, 201);
  check_case({{3, 5}, 3, 1, true}, 202);
  check_case({{1}, 1, 1, true}, 203);
  check_case({{64}, 72, 40, true}, 204);
}

// Weights at an unaligned offset of a flat buffer (a 2-byte-aligned bf16 view).
TEST(GpuLinear, UnalignedWeightView) {
  TETRA_REQUIRE_GPU();
  Rng rng(301);
  const int64_t N = 16, I = 24, O = 32;
  Tensor x = rand_bf16(rng, {N, I}, 1.0);
  Tensor flat = rand_bf16(rng, {1 + O * I}, 0.2);
  Tensor w = Tensor::empty({O, I}, DType::F32);
  std::memcpy(w.data_ptr(), flat.data<float>() + 1, w.nbytes());
  Tensor ref = Tensor::empty({N, O}, DType::F32);
  ops::linear_forward(ref, x, w, Tensor(), Activation::None);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor gflat = upload(flat, dt);
    Tensor gw = gflat.slice_flat(1, {O, I});
    Tensor y = poisoned({N, O}, dt);
    ops::linear_forward(y, upload(x, dt), gw, Tensor(), Activation::None);
    EXPECT_LE(rel_error(y, ref), tol(dt)) << dtype_name(dt);
  }
}

TEST(GpuLinear, RejectsBadArguments) {
  TETRA_REQUIRE_GPU();
  Tensor x = Tensor::empty({4, 8}, DType::F32, gpu());
  Tensor w = Tensor::empty({6, 8}, DType::BF16, gpu());
  Tensor y = Tensor::empty({4, 6}, DType::F32, gpu());
  EXPECT_THROW(ops::linear_forward(y, x, w, Tensor(), Activation::None), Error);  // x and w dtypes differ
  Tensor w32 = Tensor::empty({6, 7}, DType::F32, gpu());
  EXPECT_THROW(ops::linear_forward(y, x, w32, Tensor(), Activation::None), Error);  // I mismatch
}

}  // namespace
}  // namespace tetra::gputest
