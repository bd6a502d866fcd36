// The grouped FP8 expert GEMMs with DeepSeek-V3's blockwise scales on CUDA (runtime/ops.h
// moe_grouped_fp8_* with Rows1x128 rows and gradients, Blocks128 weights; the tensor-core kernel's
// blockwise mainloop, runtime/cuda/moe_grouped_fp8_blockwise.cu) against the CPU twin, which casts
// each expert on its own: the 128×1 transposed runs bit for bit, the three GEMMs within the bound of
// moe_fp8_test_util.h. Ragged experts (empty, one row, counts around 128), rows outside the experts,
// the 2B MoE's shapes, bf16 and fp32 outputs, the weight gradient accumulating or not.
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_fp8.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/fp8_format.h"
#include "tests/runtime/cuda/gpu_test_util.h"
#include "tests/runtime/cuda/moe_fp8_test_util.h"

namespace tetra::gputest {
namespace {

using ops::Fp8Cast;
constexpr Fp8Cast kRows{ops::Fp8Scaling::Rows1x128, DType::F8E4M3};
constexpr Fp8Cast kBlocks{ops::Fp8Scaling::Blocks128, DType::F8E4M3};

// Skips where the blockwise kernel cannot run (no sm_90a code or not a Hopper), which the ops then
// refuse with a Config error (checked here too).
bool blockwise_kernel_runs() {
  cuda::DeviceScope scope(gpu());
  cuda::GroupedGemm p;
  static const float one = 1.0f;
  p.G = 2, p.R = 256, p.O = 128, p.I = 128, p.a_scale = p.b_scale = &one, p.blockwise = true;
  p.ab_type = DType::F8E4M3, p.b_fp8 = DType::F8E4M3, p.c_type = DType::BF16;
  const char* why = "";
  if (cuda::grouped_gemm_fp8_wgmma_applies(p, &why)) return true;
  const Tensor off = upload_raw(offsets_of({16, 16}, 0));
  Tensor x = poisoned({32, 128}, DType::BF16), w = poisoned({2, 128, 128}, DType::BF16);
  Tensor y = poisoned({32, 128}, DType::BF16);
  EXPECT_THROW(ops::moe_grouped_fp8_forward(y, x, kRows, w, kBlocks, off), Error);
  std::printf("blockwise grouped FP8 kernel does not apply: %s\n", why);
  return false;
}

// The CPU's per-expert Rows1x128 cast of x's rows with its transposed copy, laid out as
// cast_expert_runs_transposed lays them: codes [C, Rp] and scales [Rp/128, padded C].
void runs_on_cpu(const Tensor& x, const Tensor& off, int64_t Rp, std::vector<uint8_t>* codes,
                 std::vector<float>* scales, std::vector<int32_t>* po) {
  const int64_t G = off.numel() - 1, C = x.dim(1);
  const Shape scale_shape = fp8_scale_shape(ops::Fp8Scaling::Rows1x128, C, Rp);
  codes->assign(static_cast<size_t>(C * Rp), 0);
  scales->assign(static_cast<size_t>(scale_shape[0] * scale_shape[1]), 0.0f);
  po->assign(static_cast<size_t>(G + 1), 0);
  const int32_t* o = off.data<int32_t>();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = o[g + 1] - o[g], p0 = (*po)[g];
    (*po)[g + 1] = static_cast<int32_t>(p0 + fp8_padded_expert_rows(m));
    if (m == 0) continue;
    Tensor q = Tensor::empty({m, C}, DType::F8E4M3), s = Tensor::empty(fp8_scale_shape(kRows.scaling, m, C), DType::F32);
    Tensor q_t = Tensor::empty({C, m}, DType::F8E4M3), s_t = Tensor::empty(fp8_scale_shape(kRows.scaling, C, m), DType::F32);
    ops::fp8_quantize(q, s, x.narrow(o[g], m), kRows.scaling, &q_t, &s_t);
    const auto* qt = static_cast<const uint8_t*>(q_t.data_ptr());
    for (int64_t c = 0; c < C; ++c) std::memcpy(codes->data() + c * Rp + p0, qt + c * m, static_cast<size_t>(m));
    for (int64_t b = 0; b < (m + 127) / 128; ++b)
      for (int64_t c = 0; c < C; ++c)
        (*scales)[static_cast<size_t>((p0 / 128 + b) * scale_shape[1] + c)] = s_t.data<float>()[b * s_t.dim(1) + c];
  }
}

// The GPU's runs of x (dtype `in`) from the offsets gpu_off against the CPU's from `off` (the same
// offsets, or gpu_off clamped to x's rows).
void expect_runs(const Tensor& x, DType in, const Tensor& off, const Tensor& gpu_off) {
  const int64_t R = x.dim(0), C = x.dim(1), G = off.numel() - 1;
  const int64_t Rp = ops::moe_grouped_fp8_padded_rows(R, G);
  std::vector<uint8_t> want_codes;
  std::vector<float> want_scales;
  std::vector<int32_t> po;
  runs_on_cpu(x, off, Rp, &want_codes, &want_scales, &po);

  cuda::DeviceScope scope(gpu());
  const Tensor g_off = upload_raw(gpu_off), g_po = upload_raw(Tensor::from_vector(po, {G + 1})), g_x = upload(x, in);
  const cuda::ExpertCodes got = cuda::cast_expert_runs_transposed(
      g_x, DType::F8E4M3, g_off.data<int32_t>(), g_po.data<int32_t>(), static_cast<int>(G), Rp,
      cuda::stream_of(gpu()), "test");
  const Tensor codes = download_raw(got.q), scales = download_raw(got.scale);
  const auto* c = static_cast<const uint8_t*>(codes.data_ptr());
  int64_t code_misses = 0, scale_misses = 0;
  for (int64_t i = 0; i < C * po[G]; ++i) {  // every expert's padded columns, row by row
    const int64_t col = i % po[G], k = i / po[G];
    code_misses += c[k * Rp + col] != want_codes[static_cast<size_t>(k * Rp + col)];
  }
  const int64_t ld = got.scale.dim(1);
  for (int64_t b = 0; b < po[G] / 128; ++b)
    for (int64_t k = 0; k < C; ++k) {
      const float g = scales.data<float>()[b * ld + k], w = want_scales[static_cast<size_t>(b * ld + k)];
      scale_misses += std::memcmp(&g, &w, sizeof(float)) != 0;
    }
  EXPECT_EQ(code_misses, 0) << "codes differ from the CPU's per-expert casts, C " << C;
  EXPECT_EQ(scale_misses, 0) << "scales differ from the CPU's per-expert casts, C " << C;
}

void check_runs(const std::vector<int64_t>& rows, int64_t lead, int64_t C, DType in, uint64_t seed) {
  Rng rng(seed);
  int64_t used = 0;
  for (int64_t r : rows) used += r;
  const Tensor off = offsets_of(rows, lead);
  const Tensor x = representable(random_host(rng, {lead + used + 3, C}, 1.0), in);
  expect_runs(x, in, off, off);
}

// Each expert's 128×1 runs from its own first row, zero codes after its rows: the CPU's per-expert
// transposed Rows1x128 cast, bit for bit.
TEST(GpuMoeGroupedFp8Blockwise, TransposedRunsAreEachExpertsOwnCast) {
  TETRA_REQUIRE_GPU();
  check_runs({37, 0, 1, 130, 16, 255, 0, 64, 3}, 2, 384, DType::BF16, 11);
  check_runs({129, 128, 127}, 0, 144, DType::F32, 12);
  check_runs({200, 5, 0, 77}, 1, 144, DType::BF16, 13);  // a last column tile of 16 of its 128
}

// Offsets past x's rows are clamped to them, as every grouped kernel reads them (group_rows): the runs
// of {0, 100, 300} over 200 rows are those of {0, 100, 200}, the second expert's zero codes after its
// 100th row (read unclamped, its run went on past x's last row).
TEST(GpuMoeGroupedFp8Blockwise, TransposedRunsClampOffsetsPastTheRows) {
  TETRA_REQUIRE_GPU();
  Rng rng(14);
  const Tensor x = representable(random_host(rng, {200, 128}, 1.0), DType::BF16);
  expect_runs(x, DType::BF16, Tensor::from_vector(std::vector<int32_t>{0, 100, 200}, {3}),
              Tensor::from_vector(std::vector<int32_t>{0, 100, 300}, {3}));
}

struct Case {
  std::vector<int64_t> rows;
  int64_t O, I;
  DType out;
  int64_t lead = 0, tail = 0;
};

void check_case(const Case& c, uint64_t seed) {
  TETRA_REQUIRE_GPU();
  if (!blockwise_kernel_runs()) GTEST_SKIP() << "no sm_90a kernel for this device";
  const int64_t O = c.O, I = c.I;
  const GroupedOperands host = random_operands(c.rows, c.lead, c.tail, O, I, DType::BF16, c.out, seed);
  const int64_t G = host.G, used = host.used, R = host.R;
  const Tensor &off = host.off, &x = host.x, &dy = host.dy, &w = host.w, &dw0 = host.dw0;
  auto twin = [&](const Tensor& x_, const Tensor& dy_, const Tensor& w_, const Tensor& dw0_) {
    std::vector<Tensor> r{Tensor::zeros({R, O}, DType::F32), Tensor::zeros({R, I}, DType::F32),
                          Tensor::empty({G, O, I}, DType::F32), Tensor::empty({G, O, I}, DType::F32)};
    ops::moe_grouped_fp8_forward(r[0], x_, kRows, w_, kBlocks, off);
    ops::moe_grouped_fp8_backward_input(r[1], dy_, kRows, w_, kBlocks, off);
    ops::moe_grouped_fp8_backward_weight(r[2], dy_, kRows, x_, kRows, off, false);
    ops::copy(r[3], dw0_);
    ops::moe_grouped_fp8_backward_weight(r[3], dy_, kRows, x_, kRows, off, true);
    return r;
  };
  // The magnitudes give the same scales (a group's amax is that of its |values|) and Σ|terms|.
  const std::vector<Tensor> ref = twin(x, dy, w, dw0), mag = twin(abs_of(x), abs_of(dy), abs_of(w), abs_of(dw0));

  Tensor g_off = upload_raw(off), g_x = upload(x, DType::BF16), g_dy = upload(dy, DType::BF16);
  Tensor g_w = upload(w, DType::BF16), g_dw_acc = upload(dw0, c.out);
  Tensor g_y = poisoned({R, O}, c.out), g_dx = poisoned({R, I}, c.out), g_dw = poisoned({G, O, I}, c.out);
  ops::moe_grouped_fp8_forward(g_y, g_x, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_backward_input(g_dx, g_dy, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_backward_weight(g_dw, g_dy, kRows, g_x, kRows, g_off, false);
  ops::moe_grouped_fp8_backward_weight(g_dw_acc, g_dy, kRows, g_x, kRows, g_off, true);

  const std::string what = "blockwise G " + std::to_string(G) + " rows " + std::to_string(used) + " O " +
                           std::to_string(O) + " I " + std::to_string(I) + " → " + dtype_name(c.out);
  const Layout rows_y{&off, 0, O}, rows_dx{&off, 0, I}, weights{nullptr, O, I};
  // Every kind promotes each k-tile (one scale block of K) into fp32: tensor_core_rel's promoted bound.
  const double tc = std::ldexp(1.0, -7);
  expect_within(g_y, ref[0], mag[0], I, c.lead * O, (c.lead + used) * O, rows_y, "forward, " + what, tc);
  expect_within(g_dx, ref[1], mag[1], O, c.lead * I, (c.lead + used) * I, rows_dx, "backward input, " + what, tc);
  expect_within(g_dw, ref[2], mag[2], R, 0, G * O * I, weights, "backward weight, " + what, tc);
  expect_within(g_dw_acc, ref[3], mag[3], R, 0, G * O * I, weights, "backward weight accumulating, " + what, tc);
  expect_outside_rows_untouched(g_y, O, g_dx, I, c.lead, used, what);
}

// Empty experts, one row, counts off 128 (partial last runs of the weight gradient's K), rows
// outside the experts; O and I of 2 and 3 weight blocks (an odd number of 128-wide n tiles).
const std::vector<int64_t> kRagged = {37, 0, 1, 130, 16, 255, 0, 64, 3};

TEST(GpuMoeGroupedFp8Blockwise, RaggedExpertsBf16) { check_case({kRagged, 256, 384, DType::BF16, 3, 5}, 21); }

TEST(GpuMoeGroupedFp8Blockwise, RaggedExpertsFp32Outputs) { check_case({kRagged, 384, 256, DType::F32}, 22); }

// Counts around the 128-row tiles and k-tiles; no rows at all.
TEST(GpuMoeGroupedFp8Blockwise, AroundTiles) { check_case({{0, 1, 127, 128, 129, 300, 0, 257}, 128, 128, DType::BF16}, 23); }

TEST(GpuMoeGroupedFp8Blockwise, NoRows) { check_case({{0, 0, 0}, 128, 256, DType::F32, 4, 4}, 24); }

// The 2B MoE's expert GEMMs: gate_up (O 1024, I 1536) and down (O 1536, I 512).
TEST(GpuMoeGroupedFp8Blockwise, MoeGateUpShape) { check_case({{129, 0, 300, 1}, 1024, 1536, DType::BF16}, 25); }

TEST(GpuMoeGroupedFp8Blockwise, MoeDownShape) { check_case({{256, 3, 0, 140}, 1536, 512, DType::F32, 1, 0}, 26); }

// The experts' weights cast ahead as the stack's blocks (ops::moe_grouped_fp8_cast with Blocks128,
// as the training step's copy casts them: models/fp8_grouped.h step_weight) give the forward and the
// input gradient the bits of the GEMMs' own casts: the same codes, read from the codes' layouts.
TEST(GpuMoeGroupedFp8Blockwise, WeightsCastAheadGiveTheBitsOfTheGemmsOwnCast) {
  TETRA_REQUIRE_GPU();
  if (!blockwise_kernel_runs()) GTEST_SKIP() << "no sm_90a kernel for this device";
  const int64_t O = 256, I = 384;
  const GroupedOperands host = random_operands(kRagged, 3, 5, O, I, DType::BF16, DType::BF16, 27);
  const int64_t R = host.R;
  cuda::DeviceScope scope(gpu());
  Tensor g_off = upload_raw(host.off), g_x = upload(host.x, DType::BF16), g_dy = upload(host.dy, DType::BF16);
  Tensor g_w = upload(host.w, DType::BF16);
  ops::Fp8GroupedCodes w_codes;
  ops::moe_grouped_fp8_cast(w_codes, g_w, kBlocks, nullptr);
  ASSERT_EQ(w_codes.q_t.shape(), (Shape{I, host.G * O}));
  Tensor y = poisoned({R, O}, DType::BF16), dx = poisoned({R, I}, DType::BF16);
  Tensor y_own = poisoned({R, O}, DType::BF16), dx_own = poisoned({R, I}, DType::BF16);
  ops::moe_grouped_fp8_forward(y_own, g_x, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_backward_input(dx_own, g_dy, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_forward(y, g_x, kRows, g_w, kBlocks, g_off, nullptr, &w_codes);
  ops::moe_grouped_fp8_backward_input(dx, g_dy, kRows, g_w, kBlocks, g_off, nullptr, &w_codes);
  const Tensor a = download_raw(y), b = download_raw(y_own), c = download_raw(dx), d = download_raw(dx_own);
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(R * O) * 2), 0) << "forward";
  EXPECT_EQ(std::memcmp(c.data_ptr(), d.data_ptr(), static_cast<size_t>(R * I) * 2), 0) << "input gradient";
  // A stack whose experts' rows are not whole blocks has no such cast.
  Tensor odd = upload(Tensor::zeros({2, 64, 128}, DType::F32), DType::BF16);
  ops::Fp8GroupedCodes none;
  EXPECT_THROW(ops::moe_grouped_fp8_cast(none, odd, kBlocks, nullptr), Error);
}

// Bytes of a [rows, cols] host tensor (raw, of any dtype) that differ from want's in rows [r0, r1)
// and columns [0, cols_used).
int64_t raw_misses(const Tensor& got, const Tensor& want, int64_t r0, int64_t r1, int64_t cols_used) {
  const int64_t cols = got.dim(1), esize = static_cast<int64_t>(dtype_size(got.dtype()));
  const auto* g = static_cast<const uint8_t*>(got.data_ptr());
  const auto* w = static_cast<const uint8_t*>(want.data_ptr());
  int64_t misses = 0;
  for (int64_t r = r0; r < r1; ++r)
    misses += std::memcmp(g + r * cols * esize, w + r * cols * esize, static_cast<size_t>(cols_used * esize)) != 0;
  return misses;
}

// A blockwise row tensor cast ahead (ops::moe_grouped_fp8_cast with Rows1x128: the rows' 1×128 codes
// beside the 128×1 runs from one read of bf16 x; fp32 x by the two casts) is the CPU twin's cast bit
// for bit over the experts' rows and padded runs, and gives the three GEMMs the bits of their own casts.
void check_rows_cast_ahead(DType in, uint64_t seed) {
  const int64_t O = 256, I = 384, lead = 3;
  const GroupedOperands host = random_operands(kRagged, lead, 5, O, I, in, DType::BF16, seed);
  const int64_t G = host.G, R = host.R, used = host.used;
  ops::Fp8GroupedCodes cpu_x;
  ops::moe_grouped_fp8_cast(cpu_x, host.x, kRows, &host.off);
  cuda::DeviceScope scope(gpu());
  Tensor g_off = upload_raw(host.off), g_x = upload(host.x, in), g_dy = upload(host.dy, in);
  Tensor g_w = upload(host.w, DType::BF16);
  ops::Fp8GroupedCodes xc, dyc;
  ops::moe_grouped_fp8_cast(xc, g_x, kRows, &g_off);
  ops::moe_grouped_fp8_cast(dyc, g_dy, kRows, &g_off);
  const int32_t po_end = download_raw(xc.padded_offsets).data<int32_t>()[G];
  EXPECT_EQ(po_end, cpu_x.padded_offsets.data<int32_t>()[G]);
  // Codes by rows, scales by the columns of the experts' rows (each row's at its index), runs whole.
  EXPECT_EQ(raw_misses(download_raw(xc.q), cpu_x.q, lead, lead + used, I), 0) << "row codes";
  const Tensor scale = download_raw(xc.scale);
  int64_t scale_misses = 0;
  for (int64_t k = 0; k < I / 128; ++k)
    scale_misses += std::memcmp(scale.data<float>() + k * scale.dim(1) + lead,
                                cpu_x.scale.data<float>() + k * scale.dim(1) + lead, static_cast<size_t>(used) * 4) != 0;
  EXPECT_EQ(scale_misses, 0) << "row scales";
  EXPECT_EQ(raw_misses(download_raw(xc.q_t), cpu_x.q_t, 0, I, po_end), 0) << "runs";
  EXPECT_EQ(raw_misses(download_raw(xc.scale_t), cpu_x.scale_t, 0, po_end / 128, I), 0) << "run scales";

  Tensor y = poisoned({R, O}, DType::BF16), y_own = poisoned({R, O}, DType::BF16);
  Tensor dx = poisoned({R, I}, DType::BF16), dx_own = poisoned({R, I}, DType::BF16);
  Tensor dw = poisoned({G, O, I}, DType::F32), dw_own = poisoned({G, O, I}, DType::F32);
  ops::moe_grouped_fp8_forward(y_own, g_x, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_forward(y, g_x, kRows, g_w, kBlocks, g_off, &xc);
  ops::moe_grouped_fp8_backward_input(dx_own, g_dy, kRows, g_w, kBlocks, g_off);
  ops::moe_grouped_fp8_backward_input(dx, g_dy, kRows, g_w, kBlocks, g_off, &dyc);
  ops::moe_grouped_fp8_backward_weight(dw_own, g_dy, kRows, g_x, kRows, g_off, false);
  xc.q = dyc.q = Tensor();  // the runs alone, as the layer keeps them for W
  ops::moe_grouped_fp8_backward_weight(dw, g_dy, kRows, g_x, kRows, g_off, false, &dyc, &xc);
  EXPECT_EQ(raw_misses(download_raw(y), download_raw(y_own), lead, lead + used, O), 0) << "forward";
  EXPECT_EQ(raw_misses(download_raw(dx), download_raw(dx_own), lead, lead + used, I), 0) << "input gradient";
  const Tensor a = download_raw(dw), b = download_raw(dw_own);
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(G * O * I) * 4), 0) << "weight gradient";
}

TEST(GpuMoeGroupedFp8Blockwise, Bf16RowsCastAheadInOneReadAreTheCpusAndTheGemmsOwn) {
  TETRA_REQUIRE_GPU();
  if (!blockwise_kernel_runs()) GTEST_SKIP() << "no sm_90a kernel for this device";
  check_rows_cast_ahead(DType::BF16, 28);
}

TEST(GpuMoeGroupedFp8Blockwise, Fp32RowsCastAheadAreTheCpusAndTheGemmsOwn) {
  TETRA_REQUIRE_GPU();
  if (!blockwise_kernel_runs()) GTEST_SKIP() << "no sm_90a kernel for this device";
  check_rows_cast_ahead(DType::F32, 29);
}

// O or I off 128 has no blockwise kernel: a Config error naming why, not a wrong result.
TEST(GpuMoeGroupedFp8Blockwise, WidthsOffWholeBlocksAreRefused) {
  TETRA_REQUIRE_GPU();
  const Tensor off = upload_raw(offsets_of({16, 16}, 0));
  Tensor x = poisoned({32, 144}, DType::BF16), w = poisoned({2, 128, 144}, DType::BF16);
  Tensor y = poisoned({32, 128}, DType::BF16);
  try {
    ops::moe_grouped_fp8_forward(y, x, kRows, w, kBlocks, off);
    ADD_FAILURE() << "I = 144 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blockwise"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tetra::gputest
