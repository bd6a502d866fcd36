// The grouped FP8 expert GEMMs on CUDA (runtime/ops.h moe_grouped_fp8_*, Tensorwise) against the
// CPU twin, through both kernels (TETRA_MOE_GEMM's choice: the SIMT kernel, and auto: the wgmma FP8
// kernel where it applies): the same codes and scales, so the results differ only by summation order,
// the tensor cores' accumulation and the output's rounding. Ragged experts (empty, one row, counts
// around 16 and 128), rows outside the experts, widths off 128 and the 2B MoE's, bf16 and fp32
// operands and outputs, the weight gradient accumulating or not; the casts into the tensor-core
// layouts against the row layout; the permutation with its cast against the two ops; and the three ops replayed from a CUDA graph on new rows and new
// offsets (nothing read on the host).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda/device_context.h"
#include "runtime/fp8_format.h"
#include "runtime/cuda/moe_grouped_fp8_cast.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda_graph.h"
#include "tests/runtime/cuda/gpu_test_util.h"
#include "tests/runtime/cuda/moe_fp8_test_util.h"

namespace tetra::gputest {
namespace {

using ops::Fp8Cast;
constexpr Fp8Cast kE4M3{ops::Fp8Scaling::Tensorwise, DType::F8E4M3};
constexpr Fp8Cast kE5M2{ops::Fp8Scaling::Tensorwise, DType::F8E5M2};

// fn(the kernel's name) under each grouped GEMM kernel that multiplies FP8 codes: the SIMT one, then
// the tensor cores' (Auto, the default, which is set again afterwards).
template <class Fn>
void for_both_kernels(Fn&& fn) {
  for (const cuda::GroupedGemmImpl impl : {cuda::GroupedGemmImpl::Simt, cuda::GroupedGemmImpl::Auto}) {
    cuda::set_grouped_gemm_impl(impl);
    fn(std::string(cuda::grouped_gemm_impl_name(impl)));
  }
  cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);
}

struct Case {
  std::vector<int64_t> rows;
  int64_t O, I;
  DType in, out;
  int64_t lead = 0, tail = 0;  // rows before offsets[0] and after offsets[G]: left alone
  Fp8Cast act = kE4M3, grad = kE5M2, weight = kE4M3;
};

// Runs the case through the SIMT kernel and through auto (the tensor cores where they apply).
void check_case_with(const Case& c, uint64_t seed, cuda::GroupedGemmImpl impl) {
  const int64_t O = c.O, I = c.I;
  const GroupedOperands host = random_operands(c.rows, c.lead, c.tail, O, I, c.in, c.out, seed);
  const int64_t G = host.G, used = host.used, R = host.R;
  const Tensor &off = host.off, &x = host.x, &dy = host.dy, &w = host.w, &dw0 = host.dw0;
  const Tensor ax = abs_of(x), ady = abs_of(dy), aw = abs_of(w), adw0 = abs_of(dw0);
  std::ostringstream os;
  os << "G " << G << " rows " << used << " (+" << c.lead << "+" << c.tail << ") O " << O << " I " << I << " "
     << dtype_name(c.in) << "→" << dtype_name(c.out) << " " << cuda::grouped_gemm_impl_name(impl);
  const std::string what = os.str();
  const bool tc = impl != cuda::GroupedGemmImpl::Simt;

  // The CPU twin on the values and on their magnitudes (the bound's Σ|terms|).
  auto twin = [&](const Tensor& x_, const Tensor& dy_, const Tensor& w_, const Tensor& dw0_) {
    std::vector<Tensor> r{Tensor::zeros({R, O}, DType::F32), Tensor::zeros({R, I}, DType::F32),
                          Tensor::empty({G, O, I}, DType::F32), Tensor::empty({G, O, I}, DType::F32)};
    ops::moe_grouped_fp8_forward(r[0], x_, c.act, w_, c.weight, off);
    ops::moe_grouped_fp8_backward_input(r[1], dy_, c.grad, w_, c.weight, off);
    ops::moe_grouped_fp8_backward_weight(r[2], dy_, c.grad, x_, c.act, off, false);
    ops::copy(r[3], dw0_);
    ops::moe_grouped_fp8_backward_weight(r[3], dy_, c.grad, x_, c.act, off, true);
    return r;
  };
  const std::vector<Tensor> ref = twin(x, dy, w, dw0), mag = twin(ax, ady, aw, adw0);

  Tensor g_off = upload_raw(off), g_x = upload(x, c.in), g_dy = upload(dy, c.in), g_w = upload(w, c.in);
  Tensor g_y = poisoned({R, O}, c.out), g_dx = poisoned({R, I}, c.out), g_dw = poisoned({G, O, I}, c.out);
  Tensor g_dw_acc = upload(dw0, c.out);
  cuda::set_grouped_gemm_impl(impl);
  ops::moe_grouped_fp8_forward(g_y, g_x, c.act, g_w, c.weight, g_off);
  ops::moe_grouped_fp8_backward_input(g_dx, g_dy, c.grad, g_w, c.weight, g_off);
  ops::moe_grouped_fp8_backward_weight(g_dw, g_dy, c.grad, g_x, c.act, g_off, false);
  ops::moe_grouped_fp8_backward_weight(g_dw_acc, g_dy, c.grad, g_x, c.act, g_off, true);
  cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);

  const Layout rows_y{&off, 0, O}, rows_dx{&off, 0, I}, weights{nullptr, O, I};
  using K = cuda::GroupedGemmKind;
  expect_within(g_y, ref[0], mag[0], I, c.lead * O, (c.lead + used) * O, rows_y, "forward, " + what,
                tensor_core_rel(tc, K::Forward, I));
  expect_within(g_dx, ref[1], mag[1], O, c.lead * I, (c.lead + used) * I, rows_dx, "backward input, " + what,
                tensor_core_rel(tc, K::BackwardInput, O));
  expect_within(g_dw, ref[2], mag[2], R, 0, G * O * I, weights, "backward weight, " + what,
                tensor_core_rel(tc, K::BackwardWeight, R));
  expect_within(g_dw_acc, ref[3], mag[3], R, 0, G * O * I, weights, "backward weight accumulating, " + what,
                tensor_core_rel(tc, K::BackwardWeight, R));
  expect_outside_rows_untouched(g_y, O, g_dx, I, c.lead, used, what);
}

void check_case(const Case& c, uint64_t seed) {
  TETRA_REQUIRE_GPU();
  check_case_with(c, seed, cuda::GroupedGemmImpl::Simt);
  check_case_with(c, seed, cuda::GroupedGemmImpl::Auto);
}

// Empty experts, one row, counts off 16 and 128; rows outside the experts on both sides.
const std::vector<int64_t> kRagged = {37, 0, 1, 130, 16, 255, 0, 64, 3};

TEST(GpuMoeGroupedFp8, RaggedExpertsBf16) { check_case({kRagged, 256, 512, DType::BF16, DType::BF16, 3, 5}, 1); }

TEST(GpuMoeGroupedFp8, RaggedExpertsFp32Outputs) { check_case({kRagged, 512, 256, DType::BF16, DType::F32}, 2); }

TEST(GpuMoeGroupedFp8, Fp32Operands) { check_case({{5, 0, 40, 1}, 48, 80, DType::F32, DType::F32, 2, 0}, 3); }

// Widths off 16 and 8 (the kernels take any shape), every operand E4M3.
TEST(GpuMoeGroupedFp8, OddWidthsAllE4M3) {
  Case c{{7, 19, 0, 2}, 24, 40, DType::BF16, DType::BF16};
  c.grad = kE4M3;
  check_case(c, 4);
}

// No expert has rows: rows outside them only, the weight gradients zero (or kept).
TEST(GpuMoeGroupedFp8, NoRows) { check_case({{0, 0, 0}, 64, 32, DType::BF16, DType::F32, 4, 4}, 5); }

// Expert row counts around the kernels' 128-row tiles and k-tiles, O and I multiples of 16 but not of
// 128 (the tensor-core kernel's K tails and partial n tiles).
const std::vector<int64_t> kAroundTiles = {0, 1, 127, 128, 129, 300, 0, 257};

TEST(GpuMoeGroupedFp8, AroundTilesBf16) { check_case({kAroundTiles, 144, 400, DType::BF16, DType::BF16, 3, 5}, 6); }

TEST(GpuMoeGroupedFp8, AroundTilesFp32Outputs) { check_case({kAroundTiles, 400, 144, DType::BF16, DType::F32}, 7); }

// The 2B MoE's expert GEMMs: gate_up (O 1024, I 1536) and down (O 1536, I 512).
TEST(GpuMoeGroupedFp8, MoeGateUpShape) { check_case({{129, 0, 300, 1}, 1024, 1536, DType::BF16, DType::BF16}, 8); }

TEST(GpuMoeGroupedFp8, MoeDownShape) { check_case({{256, 3, 0, 140}, 1536, 512, DType::BF16, DType::F32, 1, 0}, 9); }

// Where the build has sm_90a code and the device is a Hopper, the tensor cores take the 2B MoE's
// shapes in the recipe's formats (else the tests above would compare SIMT with SIMT); they refuse
// E5M2 weights and O or I off 16.
TEST(GpuMoeGroupedFp8, TensorCoresTakeTheRecipe) {
  TETRA_REQUIRE_GPU();
  cuda::DeviceScope scope(gpu());
  cuda::GroupedGemm p;
  static const float one = 1.0f;
  p.G = 8, p.R = 4096, p.O = 1024, p.I = 1536, p.a_scale = p.b_scale = &one;
  p.ab_type = DType::F8E4M3, p.b_fp8 = DType::F8E4M3, p.c_type = DType::BF16;
  const char* why = "";
  if (!cuda::grouped_gemm_fp8_wgmma_applies(p, &why)) {
    const std::string w = why;
    if (w.find("sm_90a") != std::string::npos || w.find("compute capability 9.0") != std::string::npos)
      GTEST_SKIP() << why;
    FAIL() << "the wgmma FP8 kernel refuses the 2B MoE's forward: " << why;
  }
  for (cuda::GroupedGemmKind kind :
       {cuda::GroupedGemmKind::Forward, cuda::GroupedGemmKind::BackwardInput, cuda::GroupedGemmKind::BackwardWeight}) {
    p.kind = kind;
    p.ab_type = kind == cuda::GroupedGemmKind::Forward ? DType::F8E4M3 : DType::F8E5M2;
    EXPECT_TRUE(cuda::grouped_gemm_fp8_wgmma_applies(p, &why)) << why;
  }
  p.b_fp8 = DType::F8E5M2;
  EXPECT_FALSE(cuda::grouped_gemm_fp8_wgmma_applies(p, nullptr)) << "E5M2 x E5M2";
  p.b_fp8 = DType::F8E4M3, p.I = 1544;
  EXPECT_FALSE(cuda::grouped_gemm_fp8_wgmma_applies(p, nullptr)) << "I off 16";
  // rows past what the transposing casts' grids hold (Rp / 32 rows of blocks ≤ 65535)
  p.I = 1536, p.R = 2'100'000;
  EXPECT_FALSE(cuda::grouped_gemm_fp8_wgmma_applies(p, nullptr)) << "R " << p.R;
  p.R = 2'000'000;
  EXPECT_TRUE(cuda::grouped_gemm_fp8_wgmma_applies(p, &why)) << "R " << p.R << ": " << why;
}

// The casts into the tensor-core layouts against the row-layout cast (itself checked against the CPU
// twin above): padded offsets, w[g]ᵀ, and the row tensors transposed into zero-padded column ranges.
TEST(GpuMoeGroupedFp8, TransposingCasts) {
  TETRA_REQUIRE_GPU();
  const Device dev = gpu();
  cuda::DeviceScope scope(dev);
  cudaStream_t stream = cuda::stream_of(dev);
  Rng rng(20);
  const std::vector<int64_t> rows = kAroundTiles;
  const int G = static_cast<int>(rows.size());
  const int64_t lead = 2, C = 144, O = 80;
  int64_t used = 0;
  for (int64_t r : rows) used += r;
  const int64_t R = lead + used + 3;
  const Tensor off = offsets_of(rows, lead);
  Tensor g_off = upload_raw(off), g_x = upload(random_host(rng, {R, C}, 2.0), DType::BF16);
  Tensor g_w = upload(random_host(rng, {G, O, C}, 0.1), DType::BF16);
  const Tensor po = download_raw(cuda::padded_offsets(g_off.data<int32_t>(), G, R, dev, stream));
  std::vector<int64_t> want_po{0};
  for (int64_t r : rows) want_po.push_back(want_po.back() + (r + 127) / 128 * 128);
  for (int g = 0; g <= G; ++g) ASSERT_EQ(po.data<int32_t>()[g], want_po[static_cast<size_t>(g)]) << "po[" << g << "]";
  const int64_t Rp = cuda::grouped_gemm_fp8_padded_rows(R, G);
  ASSERT_GE(Rp, want_po.back());

  const ops::Fp8Cast cast = kE5M2;
  cuda::Segments rs{g_off.data<int32_t>(), G, R, 0, C}, ws{nullptr, G, 0, O, C};
  Tensor g_po = upload_raw(po);
  const cuda::CodeLayout plain, transposed_rows{true, g_po.data<int32_t>(), Rp}, transposed_w{true, nullptr, 0};
  const auto rq = cuda::cast_segments(g_x, cast, rs, plain, dev, stream, "test");
  const auto tq = cuda::cast_segments(g_x, cast, rs, transposed_rows, dev, stream, "test");
  const auto wq = cuda::cast_segments(g_w, kE4M3, ws, plain, dev, stream, "test");
  const auto wtq = cuda::cast_segments(g_w, kE4M3, ws, transposed_w, dev, stream, "test");
  ASSERT_EQ(tq.q.shape(), (Shape{C, Rp}));
  ASSERT_EQ(wtq.q.shape(), (Shape{G, C, O}));
  const Tensor r = download_raw(rq.q), t = download_raw(tq.q), w = download_raw(wq.q), wt = download_raw(wtq.q);
  const auto* pr = static_cast<const uint8_t*>(r.data_ptr());
  const auto* pt = static_cast<const uint8_t*>(t.data_ptr());
  int64_t bad = 0;
  for (int g = 0; g < G; ++g) {
    const int64_t src0 = off.data<int32_t>()[g], base = want_po[static_cast<size_t>(g)];
    for (int64_t j = 0; j < want_po[static_cast<size_t>(g) + 1] - base; ++j)
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t want = j < rows[static_cast<size_t>(g)] ? pr[(src0 + j) * C + c] : 0;
        bad += pt[c * Rp + base + j] != want;
      }
  }
  EXPECT_EQ(bad, 0) << "row codes transposed into padded columns";
  const auto* pw = static_cast<const uint8_t*>(w.data_ptr());
  const auto* pwt = static_cast<const uint8_t*>(wt.data_ptr());
  bad = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c) bad += pwt[(g * C + c) * O + o] != pw[(g * O + o) * C + c];
  EXPECT_EQ(bad, 0) << "weight codes transposed";
  EXPECT_EQ(download_raw(rq.scale).data<float>()[3], download_raw(tq.scale).data<float>()[3]);
  EXPECT_EQ(download_raw(wq.scale).data<float>()[1], download_raw(wtq.scale).data<float>()[1]);
}

// The casts read 8 elements a load where the columns are a multiple of 8 and the tensor 16-byte
// aligned, one otherwise: a view one element into a buffer (not aligned) takes the element kernels,
// a copy of it the vector ones; every code and scale, plain and transposed, rows and weights, agree.
TEST(GpuMoeGroupedFp8, ElementAndVectorCastsAgree) {
  TETRA_REQUIRE_GPU();
  const Device dev = gpu();
  cuda::DeviceScope scope(dev);
  cudaStream_t stream = cuda::stream_of(dev);
  Rng rng(21);
  const std::vector<int64_t> rows = kAroundTiles;
  const int G = static_cast<int>(rows.size());
  const int64_t C = 136, O = 96;  // O a multiple of 16: the weights' transposed codes take 16-byte stores
  int64_t R = 0;
  for (int64_t r : rows) R += r;
  const Tensor off = offsets_of(rows, 0);
  Tensor g_off = upload_raw(off);
  Tensor x_buf = upload(random_host(rng, {R * C + 1}, 3.0), DType::BF16);
  Tensor w_buf = upload(random_host(rng, {G * O * C + 1}, 0.1), DType::BF16);
  const Tensor x_odd = x_buf.slice_flat(1, {R, C}), w_odd = w_buf.slice_flat(1, {G, O, C});
  Tensor x_even = Tensor::empty({R, C}, DType::BF16, dev), w_even = Tensor::empty({G, O, C}, DType::BF16, dev);
  ops::copy(x_even, x_odd);
  ops::copy(w_even, w_odd);
  Tensor g_po = cuda::padded_offsets(g_off.data<int32_t>(), G, R, dev, stream);
  const int64_t Rp = cuda::grouped_gemm_fp8_padded_rows(R, G);
  const cuda::Segments rs{g_off.data<int32_t>(), G, R, 0, C}, ws{nullptr, G, 0, O, C};
  const cuda::CodeLayout plain, transposed_rows{true, g_po.data<int32_t>(), Rp}, transposed_w{true, nullptr, 0};
  struct Form {
    const Tensor *odd, *even;
    cuda::Segments segs;
    cuda::CodeLayout layout;
    Fp8Cast cast;
    const char* name;
  };
  for (const Form& f : {Form{&x_odd, &x_even, rs, plain, kE5M2, "rows"},
                        Form{&x_odd, &x_even, rs, transposed_rows, kE4M3, "rows transposed"},
                        Form{&w_odd, &w_even, ws, plain, kE4M3, "weights"},
                        Form{&w_odd, &w_even, ws, transposed_w, kE4M3, "weights transposed"}}) {
    const auto a = cuda::cast_segments(*f.odd, f.cast, f.segs, f.layout, dev, stream, "test");
    const auto b = cuda::cast_segments(*f.even, f.cast, f.segs, f.layout, dev, stream, "test");
    const Tensor qa = download_raw(a.q), qb = download_raw(b.q);
    const Tensor sa = download_raw(a.scale), sb = download_raw(b.scale);
    ASSERT_EQ(qa.shape(), qb.shape()) << f.name;
    const auto* pa = static_cast<const uint8_t*>(qa.data_ptr());
    const auto* pb = static_cast<const uint8_t*>(qb.data_ptr());
    // Transposed row codes past po[G] are not written (CodeLayout): compare up to there.
    const int64_t cols = f.layout.transposed && f.segs.offsets ? Rp : qa.numel() / qa.dim(0);
    const int64_t used = f.layout.transposed && f.segs.offsets ? download_raw(g_po).data<int32_t>()[G] : cols;
    int64_t bad = 0;
    for (int64_t r = 0; r < qa.numel() / cols; ++r)
      for (int64_t c = 0; c < used; ++c) bad += pa[r * cols + c] != pb[r * cols + c];
    EXPECT_EQ(bad, 0) << f.name;
    for (int g = 0; g < G; ++g) EXPECT_EQ(sa.data<float>()[g], sb.data<float>()[g]) << f.name << " scale " << g;
  }
}

// ops::moe_grouped_fp8_cast on the GPU against its CPU twin: padded offsets, scales, row codes within
// the experts and transposed codes up to po[G], rows and weights, bf16 and fp32, vector and element
// kernels (C 136 and 132; a view one element in); then the three GEMMs reading those codes (each
// layout alone) against the GEMMs casting for themselves, bit for bit, through both kernels.
void check_cast_ahead(int64_t C, int64_t O, DType in, bool unaligned, uint64_t seed) {
  const Device dev = gpu();
  Rng rng(seed);
  const std::vector<int64_t> rows = kAroundTiles;
  const int64_t G = static_cast<int64_t>(rows.size()), lead = 3;
  int64_t used = 0;
  for (int64_t r : rows) used += r;
  const int64_t R = lead + used + 2;
  const Tensor off = offsets_of(rows, lead);
  Tensor g_off = upload_raw(off);
  const Tensor x = representable(random_host(rng, {R, C}, 2.0), in);
  const Tensor w = representable(random_host(rng, {G, O, C}, 0.1), in);
  auto place = [&](const Tensor& host) {
    if (!unaligned) return upload(host, in);
    Tensor buf = Tensor::empty({host.numel() + 1}, in, dev);
    Tensor view = buf.slice_flat(1, host.shape());
    ops::copy(view, upload(host, in));
    return view;
  };
  const Tensor g_x = place(x), g_w = place(w);
  const std::string what = std::string(dtype_name(in)) + " C " + std::to_string(C) + (unaligned ? " unaligned" : "");
  for (const bool weights : {false, true}) {
    ops::Fp8GroupedCodes want, got;
    const Fp8Cast cast = weights ? kE4M3 : kE5M2;
    ops::moe_grouped_fp8_cast(want, weights ? w : x, cast, weights ? nullptr : &off);
    ops::moe_grouped_fp8_cast(got, weights ? g_w : g_x, cast, weights ? nullptr : &g_off);
    const std::string name = what + (weights ? " weights" : " rows");
    ASSERT_EQ(got.q.shape(), want.q.shape()) << name;
    ASSERT_EQ(got.q_t.shape(), want.q_t.shape()) << name;
    const Tensor q = download_raw(got.q), qt = download_raw(got.q_t), sc = download_raw(got.scale);
    for (int64_t g = 0; g < G; ++g) EXPECT_EQ(sc.data<float>()[g], want.scale.data<float>()[g]) << name << " scale " << g;
    const auto* a = static_cast<const uint8_t*>(q.data_ptr());
    const auto* b = static_cast<const uint8_t*>(want.q.data_ptr());
    const int64_t first = weights ? 0 : lead * C, last = weights ? q.numel() : (lead + used) * C;
    int64_t bad = 0;
    for (int64_t i = first; i < last; ++i) bad += a[i] != b[i];
    EXPECT_EQ(bad, 0) << name << ": row codes";
    const auto* at = static_cast<const uint8_t*>(qt.data_ptr());
    const auto* bt = static_cast<const uint8_t*>(want.q_t.data_ptr());
    bad = 0;
    if (weights) {
      for (int64_t i = 0; i < qt.numel(); ++i) bad += at[i] != bt[i];
    } else {
      const Tensor po = download_raw(got.padded_offsets);
      for (int64_t g = 0; g <= G; ++g)
        EXPECT_EQ(po.data<int32_t>()[g], want.padded_offsets.data<int32_t>()[g]) << name << " po " << g;
      const int64_t Rp = qt.dim(1), end = po.data<int32_t>()[G];
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < end; ++j) bad += at[c * Rp + j] != bt[c * Rp + j];
    }
    EXPECT_EQ(bad, 0) << name << ": transposed codes";
  }

  // The GEMMs reading the codes (O rows of dy; the weights [G, O, C]).
  const Tensor dy = representable(random_host(rng, {R, O}, 1e-3), in);
  const Tensor g_dy = upload(dy, in);
  ops::Fp8GroupedCodes xc, dyc, wc;
  ops::moe_grouped_fp8_cast(xc, g_x, kE4M3, &g_off);
  ops::moe_grouped_fp8_cast(dyc, g_dy, kE5M2, &g_off);
  ops::moe_grouped_fp8_cast(wc, g_w, kE4M3, nullptr);
  auto same = [&](const Tensor& a, const Tensor& b, const std::string& name) {
    const std::vector<double> ha = download(a), hb = download(b);
    const bool by_rows = a.ndim() == 2;
    const int64_t width = by_rows ? a.dim(1) : 0, n = static_cast<int64_t>(ha.size());
    int64_t bad = 0;
    for (int64_t i = by_rows ? lead * width : 0; i < (by_rows ? (lead + used) * width : n); ++i)
      bad += std::memcmp(&ha[static_cast<size_t>(i)], &hb[static_cast<size_t>(i)], sizeof(double)) != 0;
    EXPECT_EQ(bad, 0) << what << ": " << name;
  };
  for_both_kernels([&](const std::string& kernel) {
    const std::string k = " " + kernel;
    Tensor y = poisoned({R, O}, DType::BF16), y0 = poisoned({R, O}, DType::BF16);
    ops::moe_grouped_fp8_forward(y, g_x, kE4M3, g_w, kE4M3, g_off, &xc, &wc);
    ops::moe_grouped_fp8_forward(y0, g_x, kE4M3, g_w, kE4M3, g_off);
    same(y, y0, "forward" + k);
    Tensor dx = poisoned({R, C}, DType::BF16), dx0 = poisoned({R, C}, DType::BF16);
    ops::moe_grouped_fp8_backward_input(dx, g_dy, kE5M2, g_w, kE4M3, g_off, &dyc, &wc);
    ops::moe_grouped_fp8_backward_input(dx0, g_dy, kE5M2, g_w, kE4M3, g_off);
    same(dx, dx0, "backward input" + k);
    Tensor dw0 = poisoned({G, O, C}, DType::F32);
    ops::moe_grouped_fp8_backward_weight(dw0, g_dy, kE5M2, g_x, kE4M3, g_off, false);
    for (const bool keep_t : {true, false}) {
      ops::Fp8GroupedCodes xk = xc, dyk = dyc;
      (keep_t ? xk.q : xk.q_t) = Tensor();
      (keep_t ? dyk.q : dyk.q_t) = Tensor();
      Tensor dw = poisoned({G, O, C}, DType::F32);
      ops::moe_grouped_fp8_backward_weight(dw, g_dy, kE5M2, g_x, kE4M3, g_off, false, &dyk, &xk);
      same(dw, dw0, (keep_t ? "backward weight, transposed codes" : "backward weight, row codes") + k);
    }
  });
}

TEST(GpuMoeGroupedFp8, CastAheadBf16) {
  TETRA_REQUIRE_GPU();
  check_cast_ahead(144, 80, DType::BF16, false, 30);
}

TEST(GpuMoeGroupedFp8, CastAheadFp32Unaligned) {
  TETRA_REQUIRE_GPU();
  check_cast_ahead(136, 96, DType::F32, true, 31);
}

TEST(GpuMoeGroupedFp8, CastAheadElementKernels) {
  TETRA_REQUIRE_GPU();
  check_cast_ahead(132, 48, DType::BF16, false, 32);  // C not a multiple of 8
}

// Each row's largest |value| of a device result as stored (fp32 bits), rows of its last dimension.
std::vector<uint32_t> stored_row_amax(const Tensor& dev) { return test::row_amax_of(download_raw(dev)); }

std::vector<uint32_t> host_u32(const Tensor& dev) {
  const Tensor h = download_raw(dev);
  const auto* p = static_cast<const uint32_t*>(h.data_ptr());
  return std::vector<uint32_t>(p, p + h.numel());
}

// A random routing of N tokens to k of E experts, mapped on the GPU (ops::moe_permute_map).
struct GpuRouting {
  Tensor offsets, row_of, slot_of;
};
GpuRouting gpu_routing(Rng& rng, int64_t N, int64_t k, int64_t E) {
  const Device dev = gpu();
  const Tensor ids = upload_raw(random_ids(rng, {N, k}, 0, static_cast<int32_t>(E)));
  GpuRouting r{Tensor::empty({E + 1}, DType::I32, dev), Tensor::empty({N, k}, DType::I32, dev),
               Tensor::empty({N * k}, DType::I32, dev)};
  ops::moe_permute_map(r.offsets, r.row_of, r.slot_of, ids);
  return r;
}

// slot_of [R] (device) with each expert's rows [offsets[g], offsets[g + 1]) reordered, the even ones
// first, then the odd ones: a token tile's rows of an expert are then no longer one run.
Tensor interleaved_within_experts(const Tensor& slot_of, const Tensor& offsets) {
  Tensor h = download_raw(slot_of);
  const Tensor h_off = download_raw(offsets);
  auto* s = static_cast<int32_t*>(h.data_ptr());
  const auto* o = static_cast<const int32_t*>(h_off.data_ptr());
  for (int64_t g = 0; g + 1 < h_off.numel(); ++g) {
    const std::vector<int32_t> rows(s + o[g], s + o[g + 1]);
    int64_t at = o[g];
    for (int64_t start : {0, 1})
      for (size_t i = static_cast<size_t>(start); i < rows.size(); i += 2) s[at++] = rows[i];
  }
  return upload_raw(h);
}

// Whether two device tensors hold the same bytes.
bool same_device_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = download_raw(a), hb = download_raw(b);
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

// Each row's amax of a device tensor (test::row_amax_of of it downloaded), as a device U32 [rows]:
// what a norm's row_amax writes, for moe_permute_fp8_cast's token_amax.
Tensor device_row_amax(const Tensor& dev) { return upload_raw(test::amax_words(test::row_amax_of(download_raw(dev)))); }

// Codes and scales of two casts of one row tensor (offsets from 0 to R), bit for bit: the row codes,
// the scales, and the transposed codes' columns up to the last expert's padded end (past it they are
// not written).
void expect_same_codes(const ops::Fp8GroupedCodes& a, const ops::Fp8GroupedCodes& b, const std::string& what) {
  for (auto [x, y] : {std::pair{&a.q, &b.q}, {&a.scale, &b.scale}}) {
    const Tensor hx = download_raw(*x), hy = download_raw(*y);
    ASSERT_EQ(hx.nbytes(), hy.nbytes()) << what;
    EXPECT_EQ(std::memcmp(hx.data_ptr(), hy.data_ptr(), hx.nbytes()), 0) << what << ": " << x->describe();
  }
  const Tensor ta = download_raw(a.q_t), tb = download_raw(b.q_t), po = download_raw(a.padded_offsets);
  ASSERT_EQ(ta.shape(), tb.shape()) << what;
  const int64_t cols = ta.dim(0), Rp = ta.dim(1), used = po.data<int32_t>()[po.numel() - 1];
  const auto* pa = static_cast<const uint8_t*>(ta.data_ptr());
  const auto* pb = static_cast<const uint8_t*>(tb.data_ptr());
  for (int64_t c = 0; c < cols; ++c)
    ASSERT_EQ(std::memcmp(pa + c * Rp, pb + c * Rp, static_cast<size_t>(used)), 0) << what << ": transposed codes, row " << c;
}

// x cast per expert given its rows' amaxes equals x cast measuring them itself.
void expect_cast_takes_row_amax(const Tensor& x, Fp8Cast cast, const Tensor& offsets, const Tensor& row_amax,
                                const std::string& what) {
  ops::Fp8GroupedCodes own, given;
  ops::moe_grouped_fp8_cast(own, x, cast, &offsets);
  ops::moe_grouped_fp8_cast(given, x, cast, &offsets, &row_amax);
  expect_same_codes(own, given, what + ": the cast given the rows' amaxes");
}

// The ops that write the routed experts' row tensors measure each row's amax as stored (ops.h
// row_amax: the permutation x_e, the combine's backward d_out_e, SwiGLU act_e and d_gu_e), and
// moe_grouped_fp8_cast given them casts exactly as when it measures the rows itself. Widths take the
// vector kernels with whole warps a row (256), vector kernels with warps across rows (200) and the
// element kernels (52, 13; SwiGLU 20 and 26): the row amaxes are then folded per thread.
TEST(GpuMoeGroupedFp8, ProducersMeasureEachRowsAmax) {
  TETRA_REQUIRE_GPU();
  const Device dev = gpu();
  Rng rng(41);
  const int64_t N = 300, k = 3, E = 5;
  const GpuRouting routing = gpu_routing(rng, N, k, E);
  const Tensor &g_off = routing.offsets, &g_row_of = routing.row_of, &g_slot_of = routing.slot_of;
  const Tensor g_w = upload(random_host(rng, {N, k}, 1.0), DType::F32);
  for (const int64_t d : {256, 200, 52, 13}) {
    const std::string what = "d " + std::to_string(d);
    const Tensor g_x = upload(random_host(rng, {N, d}, 3.0), DType::BF16);
    Tensor g_rows = poisoned({N * k, d}, DType::BF16), rows_amax = Tensor::empty({N * k}, DType::U32, dev);
    ops::moe_permute(g_rows, g_x, g_slot_of, k, &rows_amax);
    EXPECT_EQ(host_u32(rows_amax), stored_row_amax(g_rows)) << what << ": moe_permute";
    expect_cast_takes_row_amax(g_rows, kE4M3, g_off, rows_amax, what);

    const Tensor g_dy = upload(random_host(rng, {N, d}, 0.01), DType::BF16);
    Tensor g_d_rows = poisoned({N * k, d}, DType::BF16), g_dw = Tensor::empty({N, k}, DType::F32, dev);
    Tensor d_amax = Tensor::empty({N * k}, DType::U32, dev);
    ops::moe_unpermute_backward(g_d_rows, g_dw, g_dy, g_rows, g_w, g_row_of, &d_amax);
    EXPECT_EQ(host_u32(d_amax), stored_row_amax(g_d_rows)) << what << ": moe_unpermute_backward";
  }
  for (const int64_t F : {512, 256, 20, 26}) {
    const std::string what = "F " + std::to_string(F);
    const Tensor g_gu = upload(random_host(rng, {N * k, 2 * F}, 2.0), DType::BF16);
    Tensor g_h = poisoned({N * k, F}, DType::BF16), h_amax = Tensor::empty({N * k}, DType::U32, dev);
    ops::swiglu_forward(g_h, g_gu, nullptr, &h_amax);
    EXPECT_EQ(host_u32(h_amax), stored_row_amax(g_h)) << what << ": swiglu_forward";
    const Tensor g_dh = upload(random_host(rng, {N * k, F}, 0.01), DType::BF16);
    Tensor g_dgu = poisoned({N * k, 2 * F}, DType::BF16), dgu_amax = Tensor::empty({N * k}, DType::U32, dev);
    ops::swiglu_backward(g_dgu, g_dh, g_gu, nullptr, &dgu_amax);
    EXPECT_EQ(host_u32(dgu_amax), stored_row_amax(g_dgu)) << what << ": swiglu_backward";
    expect_cast_takes_row_amax(g_dgu, kE5M2, g_off, dgu_amax, what);
  }
}

// Offsets past x's rows are clamped to them wherever the cast reads them (group_rows): given the rows'
// amaxes, the experts' amaxes fold those of the rows [offsets[g], offsets[g + 1]) within x alone, as
// the cast measuring its rows itself does (read unclamped, they took amaxes from past row_amax's end).
TEST(GpuMoeGroupedFp8, GivenRowAmaxClampsOffsetsPastTheRows) {
  TETRA_REQUIRE_GPU();
  Rng rng(44);
  const Tensor g_x = upload(random_host(rng, {200, 256}, 3.0), DType::BF16);
  const Tensor g_off = upload_raw(Tensor::from_vector(std::vector<int32_t>{0, 100, 300}, {3}));
  expect_cast_takes_row_amax(g_x, kE4M3, g_off, device_row_amax(g_x), "offsets past the rows");
}

// Each way moe_permute_fp8_cast can make its codes (TETRA_MOE_GATHERED_CAST: cuda::GatheredCast), as
// `what` suffixed with its name; the default afterwards.
template <class Fn>
void for_each_gathered_cast(const std::string& what, Fn&& fn) {
  for (const char* kind : {"scatter", "gather", "separate"}) {
    setenv("TETRA_MOE_GATHERED_CAST", kind, 1);
    fn(what + ", " + kind);
  }
  unsetenv("TETRA_MOE_GATHERED_CAST");
}

// The weights' cast given each expert's amax (expert_amax, the optimizer's update measured it) takes
// it as it is, as the CPU twin does: codes in both layouts and scales bit for bit, with the experts'
// own amaxes and with one doubled, on the vector kernels (I 1536) and the element ones (I 13).
TEST(GpuMoeGroupedFp8, WeightsCastTakesTheExpertsGivenAmax) {
  TETRA_REQUIRE_GPU();
  Rng rng(43);
  const int64_t G = 4;
  for (const auto& [O, I] : {std::pair<int64_t, int64_t>{1024, 1536}, {52, 13}}) {
    const std::string what = "O " + std::to_string(O) + " I " + std::to_string(I);
    const Tensor w = representable(random_host(rng, {G, O, I}, 0.1), DType::BF16);
    std::vector<uint32_t> own = test::row_amax_of(w.view({G, O * I}));
    own[2] = test::doubled_amaxes({own[2]})[0];  // not the weights' own: taken as it is
    const Tensor amax = test::amax_words(own);
    ops::Fp8GroupedCodes want, got;
    ops::moe_grouped_fp8_cast(want, w, kE4M3, nullptr, nullptr, &amax);
    const Tensor g_amax = upload_raw(amax);
    ops::moe_grouped_fp8_cast(got, upload(w, DType::BF16), kE4M3, nullptr, nullptr, &g_amax);
    for (auto [x, y] : {std::pair{&got.q, &want.q}, {&got.q_t, &want.q_t}, {&got.scale, &want.scale}}) {
      const Tensor h = download_raw(*x);
      ASSERT_EQ(h.nbytes(), y->nbytes()) << what;
      EXPECT_EQ(std::memcmp(h.data_ptr(), y->data_ptr(), h.nbytes()), 0) << what << ": " << x->describe();
    }
  }
}

TEST(GpuMoeGroupedFp8, GatheredCastSettingIsChecked) {
  TETRA_REQUIRE_GPU();
  setenv("TETRA_MOE_GATHERED_CAST", "scattered", 1);
  EXPECT_THROW(cuda::gathered_cast_kind(), Error);
  unsetenv("TETRA_MOE_GATHERED_CAST");
  EXPECT_EQ(cuda::gathered_cast_kind(), cuda::GatheredCast::Scatter);
}

// moe_permute_fp8_cast writes what moe_permute and moe_grouped_fp8_cast of its rows write, bit for
// bit, made each of its ways: the rows, the row and transposed codes, the scales; and given its
// tokens' amaxes (token_amax, as the norm measures them) the same codes. Ragged routing (5
// experts of 300 tokens × 3, 64 of 512 × 6), widths through the one-pass kernels (1536, 200 and 8:
// whole 512-column blocks, a partial one, one vector a row) and through the two ops (52, 13: not
// 8-column vectors), bf16 and fp32, E4M3 and E5M2. The last routing interleaves each expert's rows
// (a map not in moe_permute's token order): no way of the cast may rely on that order.
TEST(GpuMoeGroupedFp8, PermuteWithItsCastIsThePermutationThenTheCast) {
  TETRA_REQUIRE_GPU();
  Rng rng(43);
  struct Routing {
    int64_t N, k, E;
    bool interleaved;
  };
  for (const Routing r : {Routing{300, 3, 5, false}, Routing{512, 6, 64, false}, Routing{300, 3, 5, true}}) {
    const GpuRouting routing = gpu_routing(rng, r.N, r.k, r.E);
    const Tensor& g_off = routing.offsets;
    const Tensor g_slot_of = r.interleaved ? interleaved_within_experts(routing.slot_of, g_off) : routing.slot_of;
    for (const int64_t d : {1536, 200, 8, 52, 13}) {
      for (const DType dt : {DType::BF16, DType::F32}) {
        const Fp8Cast cast = dt == DType::BF16 ? kE4M3 : kE5M2;
        const std::string what = "N " + std::to_string(r.N) + " E " + std::to_string(r.E) + " d " + std::to_string(d) +
                                 " " + dtype_name(dt) + (r.interleaved ? ", rows interleaved" : "");
        const Tensor g_x = upload(random_host(rng, {r.N, d}, 3.0), dt);
        Tensor rows_ref = poisoned({r.N * r.k, d}, dt);
        ops::Fp8GroupedCodes codes_ref;
        ops::moe_permute(rows_ref, g_x, g_slot_of, r.k);
        ops::moe_grouped_fp8_cast(codes_ref, rows_ref, cast, &g_off);
        const Tensor h_ref = download_raw(rows_ref), token_amax = device_row_amax(g_x);
        for_each_gathered_cast(what, [&](const std::string& how) {
          Tensor rows = poisoned({r.N * r.k, d}, dt);
          ops::Fp8GroupedCodes codes;
          ops::moe_permute_fp8_cast(rows, codes, g_x, g_slot_of, r.k, g_off, cast);
          const Tensor h_rows = download_raw(rows);
          EXPECT_EQ(std::memcmp(h_rows.data_ptr(), h_ref.data_ptr(), h_ref.nbytes()), 0) << how << ": the rows";
          expect_same_codes(codes, codes_ref, how);
          ops::Fp8GroupedCodes alone;  // without the rows
          Tensor no_rows;
          ops::moe_permute_fp8_cast(no_rows, alone, g_x, g_slot_of, r.k, g_off, cast);
          expect_same_codes(alone, codes_ref, how + ", codes alone");
          ops::Fp8GroupedCodes given;
          ops::moe_permute_fp8_cast(no_rows, given, g_x, g_slot_of, r.k, g_off, cast, nullptr, &token_amax);
          expect_same_codes(given, codes_ref, how + ", the tokens' amaxes given");
        });
      }
    }
  }
}

// The forward and the weight gradient given x's codes alone (x undefined, as MoeMlp runs them after
// moe_permute_fp8_cast) equal the same GEMMs given x, bit for bit, through both kernels: the
// tensor-core one reads the transposed codes for W, the SIMT one their row layout, transposed back.
TEST(GpuMoeGroupedFp8, GemmsOnCodesAloneEqualGemmsOnX) {
  TETRA_REQUIRE_GPU();
  const Device dev = gpu();
  Rng rng(47);
  const int64_t N = 512, k = 6, E = 64, d = 256, O = 128;
  const GpuRouting routing = gpu_routing(rng, N, k, E);
  const Tensor &g_off = routing.offsets, &g_slot_of = routing.slot_of;
  const Tensor g_x = upload(random_host(rng, {N, d}, 1.0), DType::BF16);
  const Tensor g_w = upload(random_host(rng, {E, O, d}, 0.05), DType::BF16);
  const Tensor g_dy = upload(random_host(rng, {N * k, O}, 1e-3), DType::BF16);
  Tensor rows = Tensor::empty({N * k, d}, DType::BF16, dev), none;
  ops::Fp8GroupedCodes codes;
  ops::moe_permute_fp8_cast(rows, codes, g_x, g_slot_of, k, g_off, kE4M3);
  for_both_kernels([&](const std::string& what) {
    Tensor y = poisoned({N * k, O}, DType::BF16), y_ref = poisoned({N * k, O}, DType::BF16);
    ops::moe_grouped_fp8_forward(y, none, kE4M3, g_w, kE4M3, g_off, &codes);
    ops::moe_grouped_fp8_forward(y_ref, rows, kE4M3, g_w, kE4M3, g_off);
    EXPECT_TRUE(same_device_bytes(y, y_ref)) << what << ": the forward";
    ops::Fp8GroupedCodes kept_t = codes;
    kept_t.q = Tensor();
    Tensor dw = poisoned({E, O, d}, DType::F32), dw_ref = poisoned({E, O, d}, DType::F32);
    ops::moe_grouped_fp8_backward_weight(dw, g_dy, kE5M2, none, kE4M3, g_off, false, nullptr, &kept_t);
    ops::moe_grouped_fp8_backward_weight(dw_ref, g_dy, kE5M2, rows, kE4M3, g_off, false);
    EXPECT_TRUE(same_device_bytes(dw, dw_ref)) << what << ": the weight gradient";
  });
}

// With the routing weights, moe_permute_fp8_cast gathers d_out_e = weight · dy: its rows and codes
// equal moe_unpermute_backward's d_rows and their cast, bit for bit (widths through the one-pass kernel
// and through the fallback, bf16 and fp32), and moe_unpermute_backward without d_rows gives the same
// weights' gradient. The input and weight gradients on those codes alone (dy undefined, as MoeMlp runs
// them) equal the GEMMs on d_rows through both kernels.
TEST(GpuMoeGroupedFp8, CombinesGradientGatheredWithItsCastIsItsBackwardThenTheCast) {
  TETRA_REQUIRE_GPU();
  const Device dev = gpu();
  Rng rng(53);
  struct Routing {
    int64_t N, k, E;
  };
  for (const Routing r : {Routing{300, 3, 5}, Routing{512, 6, 64}}) {
    const GpuRouting routing = gpu_routing(rng, r.N, r.k, r.E);
    const Tensor &g_off = routing.offsets, &g_row_of = routing.row_of, &g_slot_of = routing.slot_of;
    const Tensor g_weights = upload(random_host(rng, {r.N, r.k}, 1.0), DType::F32);
    for (const int64_t d : {1536, 200, 8, 52, 13}) {
      for (const DType dt : {DType::BF16, DType::F32}) {
        const std::string what = "N " + std::to_string(r.N) + " E " + std::to_string(r.E) + " d " + std::to_string(d) +
                                 " " + dtype_name(dt);
        const Tensor g_dy = upload(random_host(rng, {r.N, d}, 3.0), dt);
        const Tensor g_rows_out = upload(random_host(rng, {r.N * r.k, d}, 1.0), dt);
        Tensor d_rows = poisoned({r.N * r.k, d}, dt), dw = Tensor::empty({r.N, r.k}, DType::F32, dev);
        ops::moe_unpermute_backward(d_rows, dw, g_dy, g_rows_out, g_weights, g_row_of);
        ops::Fp8GroupedCodes ref;
        ops::moe_grouped_fp8_cast(ref, d_rows, kE5M2, &g_off);
        const Tensor h_ref = download_raw(d_rows), token_amax = device_row_amax(g_dy);
        for_each_gathered_cast(what, [&](const std::string& how) {
          ops::Fp8GroupedCodes codes, alone, given;
          Tensor rows = poisoned({r.N * r.k, d}, dt), no_rows;
          ops::moe_permute_fp8_cast(rows, codes, g_dy, g_slot_of, r.k, g_off, kE5M2, &g_weights);
          ops::moe_permute_fp8_cast(no_rows, alone, g_dy, g_slot_of, r.k, g_off, kE5M2, &g_weights);
          const Tensor h_rows = download_raw(rows);
          EXPECT_EQ(std::memcmp(h_rows.data_ptr(), h_ref.data_ptr(), h_ref.nbytes()), 0) << how << ": the rows";
          expect_same_codes(codes, ref, how);
          expect_same_codes(alone, ref, how + ", codes alone");
          ops::moe_permute_fp8_cast(no_rows, given, g_dy, g_slot_of, r.k, g_off, kE5M2, &g_weights, &token_amax);
          expect_same_codes(given, ref, how + ", the tokens' amaxes given");
        });
        Tensor no_rows, dw_alone = Tensor::empty({r.N, r.k}, DType::F32, dev);
        ops::moe_unpermute_backward(no_rows, dw_alone, g_dy, g_rows_out, g_weights, g_row_of);
        const Tensor h_dw = download_raw(dw), h_dw_alone = download_raw(dw_alone);
        EXPECT_EQ(std::memcmp(h_dw.data_ptr(), h_dw_alone.data_ptr(), h_dw.nbytes()), 0) << what << ": d_weights alone";
      }
    }
  }

  const int64_t N = 512, k = 6, E = 64, O = 256, I = 128;
  const GpuRouting routing = gpu_routing(rng, N, k, E);
  const Tensor &g_off = routing.offsets, &g_slot_of = routing.slot_of;
  const Tensor g_weights = upload(random_host(rng, {N, k}, 0.5), DType::F32);
  const Tensor g_dy = upload(random_host(rng, {N, O}, 1e-3), DType::BF16);
  const Tensor g_w = upload(random_host(rng, {E, O, I}, 0.05), DType::BF16);
  const Tensor g_x = upload(random_host(rng, {N * k, I}, 1.0), DType::BF16);
  Tensor d_rows = Tensor::empty({N * k, O}, DType::BF16, dev), none;
  ops::Fp8GroupedCodes codes;
  ops::moe_permute_fp8_cast(d_rows, codes, g_dy, g_slot_of, k, g_off, kE5M2, &g_weights);
  for_both_kernels([&](const std::string& what) {
    Tensor dx = poisoned({N * k, I}, DType::BF16), dx_ref = poisoned({N * k, I}, DType::BF16);
    ops::moe_grouped_fp8_backward_input(dx, none, kE5M2, g_w, kE4M3, g_off, &codes);
    ops::moe_grouped_fp8_backward_input(dx_ref, d_rows, kE5M2, g_w, kE4M3, g_off);
    EXPECT_TRUE(same_device_bytes(dx, dx_ref)) << what << ": the input gradient";
    ops::Fp8GroupedCodes kept_t = codes;
    kept_t.q = Tensor();
    Tensor dw = poisoned({E, O, I}, DType::F32), dw_ref = poisoned({E, O, I}, DType::F32);
    ops::moe_grouped_fp8_backward_weight(dw, none, kE5M2, g_x, kE4M3, g_off, false, &kept_t);
    ops::moe_grouped_fp8_backward_weight(dw_ref, d_rows, kE5M2, g_x, kE4M3, g_off, false);
    EXPECT_TRUE(same_device_bytes(dw, dw_ref)) << what << ": the weight gradient";
  });
}

// The three ops captured once and replayed on new values and new expert row counts: the replay
// equals the eager run bit for bit (the kernels read the offsets on the device and run in a fixed
// order; an op that synchronised the host would fail the capture).
void replay_from_a_graph(cuda::GroupedGemmImpl impl) {
  cuda::set_grouped_gemm_impl(impl);
  const int64_t G = 6, O = 256, I = 128, R = 600;
  const Device dev = gpu();
  Tensor g_off = Tensor::empty({G + 1}, DType::I32, dev), g_x = Tensor::empty({R, I}, DType::BF16, dev);
  Tensor g_dy = Tensor::empty({R, O}, DType::BF16, dev), g_w = Tensor::empty({G, O, I}, DType::BF16, dev);
  Tensor g_y = Tensor::empty({R, O}, DType::BF16, dev), g_dx = Tensor::empty({R, I}, DType::BF16, dev);
  Tensor g_dw = Tensor::empty({G, O, I}, DType::F32, dev);
  auto ops3 = [&] {
    ops::moe_grouped_fp8_forward(g_y, g_x, kE4M3, g_w, kE4M3, g_off);
    ops::moe_grouped_fp8_backward_input(g_dx, g_dy, kE5M2, g_w, kE4M3, g_off);
    ops::moe_grouped_fp8_backward_weight(g_dw, g_dy, kE5M2, g_x, kE4M3, g_off, false);
  };
  auto set_inputs = [&](uint64_t seed, const std::vector<int64_t>& rows) {
    Rng rng(seed);
    for (auto& [t, scale] : {std::pair<Tensor*, double>{&g_x, 1.0}, {&g_dy, 1e-3}, {&g_w, 0.05}}) {
      const Tensor h = host_as(random_host(rng, t->shape(), scale), DType::BF16);
      cuda::copy_bytes(t->data_ptr(), dev, h.data_ptr(), Device::cpu(), h.nbytes(), /*blocking=*/true);
    }
    const Tensor off = offsets_of(rows, 0);
    cuda::copy_bytes(g_off.data_ptr(), dev, off.data_ptr(), Device::cpu(), off.nbytes(), /*blocking=*/true);
  };
  const Stream stream = Stream::create(dev);
  StreamGuard guard(stream);
  set_inputs(10, {100, 100, 100, 100, 100, 100});
  ops3();  // warm-up outside the capture
  stream.synchronize();
  CudaGraph graph(dev);
  graph.begin_capture();
  ops3();
  graph.end_capture();
  const std::vector<std::vector<int64_t>> counts = {{0, 1, 599, 0, 0, 0}, {17, 0, 300, 3, 129, 151}};
  for (size_t i = 0; i < counts.size(); ++i) {
    set_inputs(11 + i, counts[i]);
    graph.replay();
    stream.synchronize();
    const std::vector<double> y = download(g_y), dx = download(g_dx), dw = download(g_dw);
    ops3();
    stream.synchronize();
    EXPECT_EQ(download(g_y), y) << "forward: graph replay vs eager, counts " << i;
    EXPECT_EQ(download(g_dx), dx) << "backward input: graph replay vs eager, counts " << i;
    EXPECT_EQ(download(g_dw), dw) << "backward weight: graph replay vs eager, counts " << i;
  }
  cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);
}

TEST(GpuMoeGroupedFp8, ReplaysFromAGraph) {
  TETRA_REQUIRE_GPU();
  replay_from_a_graph(cuda::GroupedGemmImpl::Simt);
  replay_from_a_graph(cuda::GroupedGemmImpl::Auto);
}

// The four ops of case c (recipe blockwise or tensorwise) with the epilogue `epilogue`: y, dx, dw, and
// dw accumulated onto dw0, each output poisoned first.
std::vector<Tensor> run_with_epilogue(const Case& c, const GroupedOperands& host, bool blockwise,
                                      const char* epilogue) {
  const int64_t G = host.G, R = host.R, O = c.O, I = c.I;
  const Fp8Cast rows_cast{ops::Fp8Scaling::Rows1x128, DType::F8E4M3};
  const Fp8Cast act = blockwise ? rows_cast : c.act, grad = blockwise ? rows_cast : c.grad;
  const Fp8Cast weight = blockwise ? Fp8Cast{ops::Fp8Scaling::Blocks128, DType::F8E4M3} : c.weight;
  const Tensor g_off = upload_raw(host.off), g_x = upload(host.x, c.in), g_dy = upload(host.dy, c.in);
  const Tensor g_w = upload(host.w, c.in);
  std::vector<Tensor> out{poisoned({R, O}, c.out), poisoned({R, I}, c.out), poisoned({G, O, I}, c.out),
                          upload(host.dw0, c.out)};
  setenv("TETRA_GROUPED_EPILOGUE", epilogue, 1);
  try {
    ops::moe_grouped_fp8_forward(out[0], g_x, act, g_w, weight, g_off);
    ops::moe_grouped_fp8_backward_input(out[1], g_dy, grad, g_w, weight, g_off);
    ops::moe_grouped_fp8_backward_weight(out[2], g_dy, grad, g_x, act, g_off, false);
    ops::moe_grouped_fp8_backward_weight(out[3], g_dy, grad, g_x, act, g_off, true);
  } catch (...) {
    unsetenv("TETRA_GROUPED_EPILOGUE");
    throw;
  }
  unsetenv("TETRA_GROUPED_EPILOGUE");
  return out;
}

void expect_staged_epilogue_bits(const Case& c, bool blockwise, uint64_t seed) {
  const GroupedOperands host = random_operands(c.rows, c.lead, c.tail, c.O, c.I, c.in, c.out, seed);
  const std::vector<Tensor> direct = run_with_epilogue(c, host, blockwise, "direct");
  const char* names[] = {"forward", "backward input", "backward weight", "backward weight accumulating"};
  for (const char* setting : {"staged", "auto"}) {
    const std::vector<Tensor> staged = run_with_epilogue(c, host, blockwise, setting);
    for (size_t k = 0; k < direct.size(); ++k)
      EXPECT_TRUE(same_device_bytes(staged[k], direct[k]))
          << setting << ": " << names[k] << ", O " << c.O << " I " << c.I << " " << dtype_name(c.out)
          << (blockwise ? " blockwise" : "");
  }
}

// The tensor-core kernel's staged epilogue (its default; each whole slice through shared memory and
// the copy engine's tensor stores) stores the bits of the direct one (TETRA_GROUPED_EPILOGUE=direct),
// and nothing else: every output compared whole, the rows outside the experts still poisoned. Both
// mainloops (the fast forward, the promoted backward), tensorwise and blockwise, bf16 and fp32
// outputs (the fast shape's fp32 keeps direct stores), ragged experts with partial row and column
// tiles, and a weight gradient accumulating (which keeps the direct path: it reads the previous
// values). An unknown setting is an error.
TEST(GpuMoeGroupedFp8, StagedEpilogueStoresTheBitsOfTheDirectOne) {
  TETRA_REQUIRE_GPU();
  const std::vector<int64_t> around = {0, 1, 127, 128, 129, 300, 0, 257};
  uint64_t seed = 60;
  for (const DType out : {DType::BF16, DType::F32}) {
    expect_staged_epilogue_bits({around, 144, 400, DType::BF16, out, 3, 5}, false, ++seed);
    expect_staged_epilogue_bits({{129, 0, 300, 1}, 1024, 1536, DType::BF16, out}, false, ++seed);
    expect_staged_epilogue_bits({around, 128, 256, DType::BF16, out, 2, 2}, true, ++seed);
  }
  const Case small{{4}, 128, 128, DType::BF16, DType::BF16};
  EXPECT_THROW(run_with_epilogue(small, random_operands(small.rows, 0, 0, 128, 128, small.in, small.out, 1), false,
                                 "stage"),
               Error);
}

}  // namespace
}  // namespace tetra::gputest
