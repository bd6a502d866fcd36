// The CUDA ops of an fp32 residual stream beside bf16 activations (train.residual_dtype: fp32,
// docs/kernels.md "Residual stream precision") against their CPU twins on the same values:
// LayerNorm and RMSNorm forward from an fp32 x into a bf16 y (row kernels and fallbacks); their
// backward from a bf16 dy into an fp32 dx with an fp32 dresidual, the bf16 copy of dx written in the
// same pass (dx_rounded: dx rounded to nearest even, bit for bit), dx's column sums and the weight
// gradients, in place over dresidual; the projection into the stream (bf16 x, w and bias, fp32
// residual and y, fused and in place, and the bias widened for an fp32 y without a residual); the
// embedding writing an fp32 stream from bf16 tables and reading an fp32 stream gradient. Inputs
// random (never zeros), outputs poisoned first; both the norm-wise and the worst-element error.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

using ops::Activation;

enum class Kind { LayerNorm, RmsNorm };
const char* kind_name(Kind k) { return k == Kind::LayerNorm ? "LayerNorm" : "RMSNorm"; }

// A host bf16 tensor's values as a host fp32 tensor (exact).
Tensor host_f32(const Tensor& host_bf16) {
  Tensor h = Tensor::empty(host_bf16.shape(), DType::F32);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = bf16_to_float(host_bf16.bf16_bits()[i]);
  return h;
}

// dx_rounded must be dx rounded to bf16, element by element (the same pass stores both).
void expect_rounded_copy(const Tensor& g_rounded, const Tensor& g_dx, const std::string& what) {
  ASSERT_EQ(g_rounded.dtype(), DType::BF16);
  Tensor r = download_raw(g_rounded), d = download_raw(g_dx);
  ASSERT_EQ(r.numel(), d.numel());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < r.numel(); ++i)
    if (r.bf16_bits()[i] != float_to_bf16(d.data<float>()[i]) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0) << what << ": dx_rounded is not dx rounded to bf16 (first at " << first << ")";
}

// One norm, forward and backward, x [N, C] fp32 with bf16 activations, against the CPU (which
// takes the same mixed dtypes); weights of dtype pt.
void check_norm(Kind kind, int64_t N, int64_t C, DType pt, uint64_t seed) {
  Rng rng(seed);
  const bool ln = kind == Kind::LayerNorm;
  std::ostringstream label;
  label << kind_name(kind) << " [" << N << ", " << C << "], fp32 x, bf16 y/dy, " << dtype_name(pt) << " w";
  const std::string what = label.str();
  const float eps = 1e-5f;
  // x spans several binades (an fp32 stream carries what bf16 would round away).
  Tensor x = random_host(rng, {N, C}, 3.0, 0.25);
  Tensor w = representable(random_host(rng, {C}, 0.3, 1.0), DType::BF16);
  Tensor b = representable(random_host(rng, {C}, 0.2), DType::BF16);
  Tensor dy = host_as(random_host(rng, {N, C}), DType::BF16);  // bf16 on the host: the CPU takes it
  Tensor dres = random_host(rng, {N, C}, 0.5);
  Tensor dw0 = representable(random_host(rng, {C}, 0.1), DType::BF16);
  Tensor db0 = representable(random_host(rng, {C}, 0.1), DType::BF16);

  // CPU twin, the same dtypes: y bf16 from fp32 x; dx fp32, dx_rounded bf16 from bf16 dy.
  Tensor y = Tensor::empty({N, C}, DType::BF16), mean = Tensor::empty({N}, DType::F32);
  Tensor rstd = Tensor::empty({N}, DType::F32);
  if (ln) ops::layernorm_forward(y, mean, rstd, x, w, b, eps);
  else ops::rmsnorm_forward(y, rstd, x, w, eps);
  Tensor dx = Tensor::empty({N, C}, DType::F32), dx_r = Tensor::empty({N, C}, DType::BF16);
  Tensor dw = representable(dw0, DType::F32), db = representable(db0, DType::F32);
  Tensor sum = Tensor::empty({C}, DType::F32);
  if (ln) ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres, &sum, &dx_r);
  else ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, &dres, &dx_r);

  Tensor gx = upload(x, DType::F32), gw = upload(w, pt), gb = upload(b, pt), gdy = upload_raw(dy);
  Tensor gy = poisoned({N, C}, DType::BF16), gmean = poisoned({N}, DType::F32), grstd = poisoned({N}, DType::F32);
  if (ln) ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, eps);
  else ops::rmsnorm_forward(gy, grstd, gx, gw, eps);
  expect_close(gy, host_f32(y), DType::BF16, what + ": forward y");
  if (ln) expect_close(gmean, mean, DType::F32, what + ": forward mean");
  expect_close(grstd, rstd, DType::F32, what + ": forward rstd");

  // Backward into a separate dx, from the GPU's own statistics.
  Tensor gdres = upload(dres, DType::F32);
  Tensor gdx = poisoned({N, C}, DType::F32), gdx_r = poisoned({N, C}, DType::BF16);
  Tensor gdw = upload(dw0, DType::F32), gdb = upload(db0, DType::F32), gsum = poisoned({C}, DType::F32);
  if (ln) ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, false, &gdres, &gsum, &gdx_r);
  else ops::rmsnorm_backward(gdx, gdw, gdy, gx, gw, grstd, false, &gdres, &gdx_r);
  expect_close(gdx, dx, DType::F32, what + ": backward dx");
  expect_close(gdx_r, host_f32(dx_r), DType::BF16, what + ": backward dx_rounded");
  expect_rounded_copy(gdx_r, gdx, what);
  expect_close(gdw, dw, DType::F32, what + ": backward dw");
  if (ln) {
    expect_close(gdb, db, DType::F32, what + ": backward db");
    expect_close(gsum, sum, DType::F32, what + ": backward dx column sum");
  }
  EXPECT_EQ(rel_error(gdres, dres), 0.0) << what << ": dresidual unchanged";

  // In place over dresidual (the blocks' dx2 → dx), without dx_rounded (the copy is optional).
  Tensor over = upload(dres, DType::F32);
  Tensor gdw2 = upload(dw0, DType::F32), gdb2 = upload(db0, DType::F32);
  if (ln) ops::layernorm_backward(over, gdw2, gdb2, gdy, gx, gw, gmean, grstd, false, &over);
  else ops::rmsnorm_backward(over, gdw2, gdy, gx, gw, grstd, false, &over);
  expect_close(over, dx, DType::F32, what + ": backward dx over dresidual");

  // Without dresidual (the head's final norm), dx_rounded still written.
  Tensor plain = Tensor::empty({N, C}, DType::F32), plain_r = Tensor::empty({N, C}, DType::BF16);
  Tensor dw3 = representable(dw0, DType::F32), db3 = representable(db0, DType::F32);
  if (ln) ops::layernorm_backward(plain, dw3, db3, dy, x, w, mean, rstd, false, nullptr, nullptr, &plain_r);
  else ops::rmsnorm_backward(plain, dw3, dy, x, w, rstd, false, nullptr, &plain_r);
  Tensor gplain = poisoned({N, C}, DType::F32), gplain_r = poisoned({N, C}, DType::BF16);
  Tensor gdw3 = upload(dw0, DType::F32), gdb3 = upload(db0, DType::F32);
  if (ln) ops::layernorm_backward(gplain, gdw3, gdb3, gdy, gx, gw, gmean, grstd, false, nullptr, nullptr, &gplain_r);
  else ops::rmsnorm_backward(gplain, gdw3, gdy, gx, gw, grstd, false, nullptr, &gplain_r);
  expect_close(gplain, plain, DType::F32, what + ": backward dx, no dresidual");
  expect_rounded_copy(gplain_r, gplain, what + ", no dresidual");
}

// The widths of the measured GPT-2 (384), GPT-2 124M (768), the 1.3B and Llama 1B (2048), row
// counts that leave blocks partly idle; fp32 and bf16 weights.
TEST(GpuResidualStream, NormsAtModelWidths) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 1;
  for (Kind k : {Kind::LayerNorm, Kind::RmsNorm})
    for (int64_t C : {384, 768, 2048})
      for (DType pt : {DType::BF16, DType::F32}) {
        check_norm(k, 1001, C, pt, seed++);
      }
  check_norm(Kind::LayerNorm, 8192, 384, DType::BF16, seed++);  // the measured model's micro-batch
}

// Row kernels of several warps per row, the widest backward row kernel, and the fallback kernels
// (C % 8 != 0; C beyond the backward row kernels).
TEST(GpuResidualStream, NormsAtOtherWidths) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 100;
  for (Kind k : {Kind::LayerNorm, Kind::RmsNorm}) {
    check_norm(k, 37, 8, DType::BF16, seed++);
    check_norm(k, 64, 8192, DType::BF16, seed++);
    check_norm(k, 19, 12288, DType::BF16, seed++);
    check_norm(k, 9, 16384, DType::BF16, seed++);
    check_norm(k, 37, 45, DType::BF16, seed++);
    check_norm(k, 3, 5, DType::F32, seed++);
  }
}

// [N, C] device views at an 8-byte offset: not 16-byte aligned, so the backward takes the
// element-wise fallback, dx_rounded included.
TEST(GpuResidualStream, UnalignedNormsTakeTheFallback) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 77, C = 384;
  Rng rng(7);
  Tensor x = random_host(rng, {N, C}, 2.0), w = representable(random_host(rng, {C}, 0.3, 1.0), DType::BF16);
  Tensor b = representable(random_host(rng, {C}, 0.2), DType::BF16);
  Tensor dy = host_as(random_host(rng, {N, C}), DType::BF16), dres = random_host(rng, {N, C});
  Tensor y = Tensor::empty({N, C}, DType::BF16), mean = Tensor::empty({N}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dx = Tensor::empty({N, C}, DType::F32), dx_r = Tensor::empty({N, C}, DType::BF16);
  Tensor dw = Tensor::zeros({C}, DType::F32), db = Tensor::zeros({C}, DType::F32);
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres, nullptr, &dx_r);

  auto unaligned = [&](const Tensor& host_f32, DType dt) {  // 2 fp32 or 4 bf16 elements in: 8 bytes
    const int64_t pad = dt == DType::F32 ? 2 : 4;
    Tensor buf = Tensor::zeros({N * C + pad}, DType::F32);
    std::memcpy(buf.data<float>() + pad, host_f32.data<float>(), host_f32.nbytes());
    return upload(buf, dt).slice_flat(pad, {N, C});
  };
  Tensor gx = unaligned(x, DType::F32), gdres = unaligned(dres, DType::F32);
  Tensor gdy = unaligned(host_f32(dy), DType::BF16);
  Tensor gy = unaligned(x, DType::BF16), gdx = unaligned(x, DType::F32), gdx_r = unaligned(x, DType::BF16);
  poison(gy);
  poison(gdx);
  poison(gdx_r);
  Tensor gw = upload(w, DType::BF16), gb = upload(b, DType::BF16);
  Tensor gmean = poisoned({N}, DType::F32), grstd = poisoned({N}, DType::F32);
  ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, 1e-5f);
  expect_close(gy, host_f32(y), DType::BF16, "unaligned forward y");
  Tensor gdw = Tensor::zeros({C}, DType::F32, gpu()), gdb = Tensor::zeros({C}, DType::F32, gpu());
  ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, false, &gdres, nullptr, &gdx_r);
  expect_close(gdx, dx, DType::F32, "unaligned backward dx");
  expect_rounded_copy(gdx_r, gdx, "unaligned");
  expect_close(gdw, dw, DType::F32, "unaligned backward dw");
  expect_close(gdb, db, DType::F32, "unaligned backward db");
}

// Mixed-dtype arguments the norms refuse, on both backends.
TEST(GpuResidualStream, NormsRejectWhatTheyCannotDo) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 4, C = 16;
  auto t = [&](DType dt) { return Tensor::zeros({N, C}, dt, gpu()); };
  Tensor x32 = t(DType::F32), x16 = t(DType::BF16), dy16 = t(DType::BF16), dx32 = t(DType::F32);
  Tensor w = Tensor::zeros({C}, DType::BF16, gpu()), dw = Tensor::zeros({C}, DType::F32, gpu());
  Tensor db = Tensor::zeros({C}, DType::F32, gpu());
  Tensor mean = Tensor::zeros({N}, DType::F32, gpu()), rstd = Tensor::zeros({N}, DType::F32, gpu());
  Tensor y32 = t(DType::F32), r16 = t(DType::BF16), r32 = t(DType::F32);
  // fp32 activations beside a bf16 stream: not a pairing the kernels have.
  EXPECT_THROW(ops::layernorm_forward(y32, mean, rstd, x16, w, Tensor(), 1e-5f), Error);
  EXPECT_THROW(ops::rmsnorm_forward(y32, rstd, x16, w, 1e-5f), Error);
  // dx_rounded of dx's own dtype would be a copy of dx.
  Tensor dx16 = t(DType::BF16), same16 = t(DType::BF16);
  EXPECT_THROW(ops::layernorm_backward(dx16, dw, db, dy16, x16, w, mean, rstd, false, nullptr, nullptr, &same16), Error);
  // dx_rounded must have dy's dtype, and overlap nothing.
  EXPECT_THROW(ops::layernorm_backward(dx32, dw, db, dy16, x32, w, mean, rstd, false, nullptr, nullptr, &r32), Error);
  EXPECT_THROW(ops::rmsnorm_backward(dx32, dw, dy16, x32, w, rstd, false, nullptr, &dy16), Error);
  // dx must have x's dtype.
  EXPECT_THROW(ops::rmsnorm_backward(dx16, dw, dy16, x32, w, rstd, false, nullptr, &r16), Error);
  // The CPU refuses the same.
  Tensor hx = Tensor::zeros({N, C}, DType::F32), hdy = Tensor::zeros({N, C}, DType::BF16);
  Tensor hdx = Tensor::zeros({N, C}, DType::F32), hr = Tensor::zeros({N, C}, DType::F32);
  Tensor hw = Tensor::zeros({C}, DType::F32), hdw = Tensor::zeros({C}, DType::F32), hrstd = Tensor::zeros({N}, DType::F32);
  EXPECT_THROW(ops::rmsnorm_backward(hdx, hdw, hdy, hx, hw, hrstd, false, nullptr, &hr), Error);
}

// The projections into the stream: bf16 x, w and bias; fp32 residual and y (separate and in
// place), against the CPU's fp32 GEMM on the same values; and an fp32 y from a bf16 bias without
// a residual (plain and through the GELU), where the bias is widened for cuBLASLt's epilogue.
void check_projection(int64_t N, int64_t I, int64_t O, uint64_t seed) {
  Rng rng(seed);
  std::ostringstream label;
  label << "projection N=" << N << " I=" << I << " O=" << O << ", bf16 x/w/b, fp32 y";
  const std::string what = label.str();
  Tensor x = representable(random_host(rng, {N, I}), DType::BF16);
  Tensor w = representable(random_host(rng, {O, I}, 1.0 / std::sqrt(static_cast<double>(I))), DType::BF16);
  Tensor b = representable(random_host(rng, {O}, 0.5), DType::BF16);
  Tensor res = random_host(rng, {N, O}, 2.0);  // fp32: not representable in bf16
  Tensor y_res = Tensor::empty({N, O}, DType::F32), y = Tensor::empty({N, O}, DType::F32);
  Tensor y_gelu = Tensor::empty({N, O}, DType::F32);
  ops::linear_forward(y_res, x, w, b, Activation::None, nullptr, &res);
  ops::linear_forward(y, x, w, b, Activation::None);
  ops::gelu_forward(y_gelu, y);

  Tensor gx = upload(x, DType::BF16), gw = upload(w, DType::BF16), gb = upload(b, DType::BF16);
  Tensor gres = upload(res, DType::F32);
  Tensor gy = poisoned({N, O}, DType::F32);
  ops::linear_forward(gy, gx, gw, gb, Activation::None, nullptr, &gres);
  expect_close(gy, y_res, DType::F32, what + ", residual");
  EXPECT_EQ(rel_error(gres, res), 0.0) << what << ": residual unchanged";
  Tensor in_place = upload(res, DType::F32);
  ops::linear_forward(in_place, gx, gw, gb, Activation::None, nullptr, &in_place);
  expect_close(in_place, y_res, DType::F32, what + ", residual in place");
  Tensor gy2 = poisoned({N, O}, DType::F32);
  ops::linear_forward(gy2, gx, gw, gb, Activation::None);
  expect_close(gy2, y, DType::F32, what + ", no residual");
  Tensor gyg = poisoned({N, O}, DType::F32), gpre = poisoned({N, O}, DType::F32);
  ops::linear_forward(gyg, gx, gw, gb, Activation::Gelu, &gpre);
  expect_close(gyg, y_gelu, DType::F32, what + ", GELU y");
  expect_close(gpre, y, DType::F32, what + ", GELU pre_act");
  // A bias of neither y's nor x's dtype is refused.
  Tensor b16x = upload(b, DType::BF16), gx32 = upload(x, DType::F32), gw32 = upload(w, DType::F32);
  Tensor gy32 = poisoned({N, O}, DType::F32);
  EXPECT_NO_THROW(ops::linear_forward(gy32, gx32, gw32, upload(b, DType::F32), Activation::None));
  EXPECT_THROW(ops::linear_forward(gy32, gx32, gw32, b16x, Activation::None), Error);
}

TEST(GpuResidualStream, ProjectionsIntoTheStream) {
  TETRA_REQUIRE_GPU();
  check_projection(8192, 384, 384, 11);    // the measured GPT-2: attention c_proj
  check_projection(8192, 1536, 384, 12);   // its mlp.c_proj
  check_projection(4096, 3072, 768, 13);   // GPT-2 124M mlp.c_proj
  check_projection(2048, 8192, 2048, 14);  // Llama 1B down_proj
  check_projection(37, 45, 29, 15);        // odd sizes: unaligned algorithms, the unfused bias
}

// The embedding starts the stream: fp32 rows from bf16 tables; its backward reads the fp32 stream
// gradient into bf16 or fp32 table gradients.
TEST(GpuResidualStream, EmbeddingOfAnFp32Stream) {
  TETRA_REQUIRE_GPU();
  const int64_t B = 4, T = 256, V = 256, C = 384;
  Rng rng(21);
  Tensor ids = random_ids(rng, {B, T}, 0, static_cast<int32_t>(V));
  Tensor wte = representable(random_host(rng, {V, C}, 0.1), DType::BF16);
  Tensor wpe = representable(random_host(rng, {T, C}, 0.05), DType::BF16);
  Tensor dy = random_host(rng, {B, T, C});  // fp32 stream gradient
  Tensor y = Tensor::empty({B, T, C}, DType::F32);
  ops::embedding_forward(y, ids, wte, wpe, T);
  Tensor gids = upload_raw(ids);
  Tensor gy = poisoned({B, T, C}, DType::F32);
  ops::embedding_forward(gy, gids, upload(wte, DType::BF16), upload(wpe, DType::BF16), T);
  expect_close(gy, y, DType::F32, "embedding forward, bf16 tables, fp32 y");
  for (DType gt : {DType::BF16, DType::F32}) {
    Tensor dwte0 = representable(random_host(rng, {V, C}, 0.01), DType::BF16);
    Tensor dwpe0 = representable(random_host(rng, {T, C}, 0.01), DType::BF16);
    Tensor dwte = representable(dwte0, DType::F32), dwpe = representable(dwpe0, DType::F32);
    ops::embedding_backward(dwte, &dwpe, dy, ids, T);
    Tensor gdwte = upload(dwte0, gt), gdwpe = upload(dwpe0, gt);
    ops::embedding_backward(gdwte, &gdwpe, upload(dy, DType::F32), gids, T);
    const std::string what = std::string("embedding backward, fp32 dy, ") + dtype_name(gt) + " gradients";
    expect_close(gdwte, dwte, gt, what + ", dwte");
    expect_close(gdwpe, dwpe, gt, what + ", dwpe");
  }
}

}  // namespace
}  // namespace tetra::gputest
