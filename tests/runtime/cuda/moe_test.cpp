// CUDA mixture-of-experts ops against their CPU twins (runtime/cpu/moe_*.cpp), on random inputs
// (never zeros), outputs poisoned with NaN first, the norm-wise relative error and the worst element
// within the dtype's tolerance (tests/runtime/cuda/gpu_test_util.h); integer outputs (expert ids, counts,
// offsets, the permutation maps) bit for bit. Shapes: the issue's MoE layer (d 1536, 64 experts,
// top-6, expert width 512, 8×2048 tokens) and odd small ones; routings random, tied, forced balanced
// and imbalanced (experts without tokens, one expert with every token). Every grouped-GEMM
// implementation (wgmma, mma.sync, SIMT, cuBLAS) is checked. Last, a whole routed layer captured into a
// CUDA graph and replayed on new logits: the ops need no host synchronisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda_graph.h"
#include "runtime/host_readback.h"
#include "runtime/step_control.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

Tensor rand_bf16(Rng& rng, const Shape& shape, double scale, double offset = 0.0) {
  return representable(random_host(rng, shape, scale, offset), DType::BF16);
}

Tensor host_ints(const Shape& shape, int32_t value) {
  Tensor t = Tensor::empty(shape, DType::I32);
  std::fill(t.data<int32_t>(), t.data<int32_t>() + t.numel(), value);
  return t;
}

// A device int32 tensor filled with −7 (no valid index, count or offset).
Tensor poisoned_ints(const Shape& shape) { return upload_raw(host_ints(shape, -7)); }

void expect_same_ints(const Tensor& dev, const Tensor& host, const std::string& what) {
  const Tensor got = download_raw(dev);
  ASSERT_EQ(got.numel(), host.numel()) << what;
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (got.data<int32_t>()[i] != host.data<int32_t>()[i]) {
      if (first < 0) first = i;
      ++wrong;
    }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.numel() << " differ, first at " << first << " ("
                      << (first >= 0 ? got.data<int32_t>()[first] : 0) << " vs "
                      << (first >= 0 ? host.data<int32_t>()[first] : 0) << ")";
}

ops::MoeRouting routing(int64_t k, int64_t n_group = 1, int64_t topk_group = 1, float scale = 1.0f,
                        bool force = false) {
  return {.top_k = k, .n_group = n_group, .topk_group = topk_group, .route_scale = scale, .force_balance = force};
}

std::string describe(int64_t N, int64_t E, const ops::MoeRouting& r) {
  std::ostringstream os;
  os << "N " << N << " E " << E << " k " << r.top_k << " groups " << r.n_group << "/" << r.topk_group << " scale "
     << r.route_scale << (r.force_balance ? " forced" : "");
  return os.str();
}

// ---------- router ----------

// Forward (ids, weights, counts, load) and backward (fp32 and bf16 d_logits, with and without the
// balance loss's term, accumulating) against the CPU twin.
void check_router(int64_t N, int64_t E, const ops::MoeRouting& r, uint64_t seed, double logit_step = 0.0) {
  Rng rng(seed);
  const std::string what = describe(N, E, r);
  const int64_t k = r.top_k;
  Tensor logits = random_host(rng, {N, E}, 2.0);
  if (logit_step > 0) {  // quantised logits: many exact ties between experts (and groups)
    float* p = logits.data<float>();
    for (int64_t i = 0; i < logits.numel(); ++i) p[i] = static_cast<float>(std::round(p[i] / logit_step) * logit_step);
  }
  Tensor bias = logit_step > 0 ? Tensor::zeros({E}, DType::F32) : random_host(rng, {E}, 0.05);
  Tensor ids = host_ints({N, k}, 0), w = Tensor::empty({N, k}, DType::F32), counts = host_ints({E}, 0);
  Tensor load = host_ints({E}, 3);
  ops::moe_router_forward(ids, w, counts, logits, bias, r, &load);

  Tensor g_logits = upload(logits, DType::F32), g_bias = upload(bias, DType::F32);
  Tensor g_ids = poisoned_ints({N, k}), g_w = poisoned({N, k}, DType::F32), g_counts = poisoned_ints({E});
  Tensor g_load = upload_raw(host_ints({E}, 3));
  ops::moe_router_forward(g_ids, g_w, g_counts, g_logits, g_bias, r, &g_load);
  expect_same_ints(g_ids, ids, "expert_ids, " + what);
  expect_same_ints(g_counts, counts, "counts, " + what);
  expect_same_ints(g_load, load, "load, " + what);
  expect_close(g_w, w, DType::F32, "weights, " + what);

  // backward through the weights, then with the balance loss (sequences of T tokens)
  Tensor dw = random_host(rng, {N, k});
  Tensor d_logits = Tensor::empty({N, E}, DType::F32);
  ops::moe_router_backward(d_logits, dw, logits, ids, r);
  Tensor g_dw = upload(dw, DType::F32), g_d = poisoned({N, E}, DType::F32);
  ops::moe_router_backward(g_d, g_dw, g_logits, g_ids, r);
  expect_close(g_d, d_logits, DType::F32, "d_logits, " + what);
  Tensor g_d16 = poisoned({N, E}, DType::BF16);
  ops::moe_router_backward(g_d16, g_dw, g_logits, g_ids, r);
  expect_close(g_d16, d_logits, DType::BF16, "bf16 d_logits, " + what);

  const int64_t T = N % 4 == 0 ? N / 4 : N;
  const int64_t B = N / T;
  Tensor loss = Tensor::zeros({1}, DType::F64), g = Tensor::empty({B, E}, DType::F32);
  ops::moe_balance_loss(loss, g, logits, ids, T, 0.3f, 0.01f);
  Tensor g_loss = upload_raw(loss), g_g = poisoned({B, E}, DType::F32);  // += onto the CPU's own sum: 2×
  ops::moe_balance_loss(g_loss, g_g, g_logits, g_ids, T, 0.3f, 0.01f);
  const double want = 2.0 * loss.data<double>()[0], got = download_raw(g_loss).data<double>()[0];
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "balance loss, " << what;
  expect_close(g_g, g, DType::F32, "d_prob_sums, " + what);
  Tensor acc = random_host(rng, {N, E});
  Tensor d_bal = Tensor::empty({N, E}, DType::F32);
  ops::copy(d_bal, acc);
  ops::moe_router_backward(d_bal, dw, logits, ids, r, &g, /*accumulate=*/true);
  Tensor g_acc = upload(acc, DType::F32);
  ops::moe_router_backward(g_acc, g_dw, g_logits, g_ids, r, &g_g, /*accumulate=*/true);
  expect_close(g_acc, d_bal, DType::F32, "accumulated d_logits with the balance loss, " + what);
}

TEST(GpuMoeRouter, IssueShape) {
  TETRA_REQUIRE_GPU();
  check_router(16384, 64, routing(6, 1, 1, 1.0f), 1);
  check_router(16384, 64, routing(6, 8, 4, 2.5f), 2);
}

TEST(GpuMoeRouter, TiesGoToTheLowerIndexOnBothBackends) {
  TETRA_REQUIRE_GPU();
  check_router(3000, 64, routing(6), 3, 0.5);
  check_router(3000, 64, routing(8, 8, 3), 4, 0.5);
  check_router(500, 16, routing(4, 4, 2), 5, 2.0);  // coarse: most scores tie
}

TEST(GpuMoeRouter, OddSizes) {
  TETRA_REQUIRE_GPU();
  check_router(37, 5, routing(1), 6);                 // E < 32: lanes without experts
  check_router(101, 100, routing(7, 4, 3, 1.5f), 7);  // E = 100: 4 per lane, the last lanes partly empty
  check_router(64, 1000, routing(16, 20, 5), 8);      // E near the CUDA limit
  check_router(9, 256, routing(32, 8, 8), 9);         // k at the CUDA limit
  check_router(1, 2, routing(2), 10);
  check_router(200, 64, routing(6, 1, 1, 1.0f, /*force=*/true), 11);
}

TEST(GpuMoeRouter, BiasUpdate) {
  TETRA_REQUIRE_GPU();
  Rng rng(12);
  const int64_t E = 77;
  Tensor bias = random_host(rng, {E}, 0.1), load = test::random_ids(rng, {E}, 0, 50);
  Tensor g_bias = upload(bias, DType::F32), g_load = upload_raw(load);
  ops::moe_bias_update(bias, load, 1e-3f);
  ops::moe_bias_update(g_bias, g_load, 1e-3f);
  EXPECT_EQ(download(g_bias), values(bias)) << "the bias step is exact";
  // The step control on the device: skipped leaves the bias, applied moves it as the CPU twin.
  Tensor control = Tensor::zeros({kStepControlSlots}, DType::F64);
  control.data<double>()[kCtlSkipped] = 1.0;
  Tensor g_control = upload_raw(control);
  const std::vector<double> before = download(g_bias);
  ops::moe_bias_update(g_bias, g_load, 1e-3f, &g_control);
  EXPECT_EQ(download(g_bias), before) << "a skipped step leaves the bias";
  control.data<double>()[kCtlSkipped] = 0.0;
  g_control = upload_raw(control);
  ops::moe_bias_update(bias, load, 1e-3f, &control);
  ops::moe_bias_update(g_bias, g_load, 1e-3f, &g_control);
  EXPECT_EQ(download(g_bias), values(bias)) << "an applied step moves it as the CPU twin";
}

// ---------- permutation ----------

enum class Routing { Random, Balanced, Imbalanced };

// expert ids [N, k], distinct per token: random; round robin; or imbalanced (expert 0 in every
// token's first slot, experts E−1 and E−2 never, the rest random).
Tensor make_ids(Rng& rng, int64_t N, int64_t k, int64_t E, Routing how) {
  Tensor ids = Tensor::empty({N, k}, DType::I32);
  int32_t* p = ids.data<int32_t>();
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t e = 0; e < E; ++e) perm[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    const int64_t pool = how == Routing::Imbalanced && E > k + 2 ? E - 2 : E;
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher–Yates over the pool
      const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(pool - j)));
      std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(pick)]);
    }
    if (how == Routing::Imbalanced) {
      auto zero = std::find(perm.begin(), perm.begin() + k, 0);
      if (zero != perm.begin() + k) std::swap(*zero, perm[0]);
      else perm[0] = 0;
    }
    for (int64_t j = 0; j < k; ++j)
      p[n * k + j] = how == Routing::Balanced ? static_cast<int32_t>((n * k + j) % E) : perm[static_cast<size_t>(j)];
  }
  return ids;
}

struct HostMap {
  Tensor offsets, row_of, slot_of;
};
HostMap host_map(const Tensor& ids, int64_t E) {
  HostMap m{Tensor::empty({E + 1}, DType::I32), Tensor::empty(ids.shape(), DType::I32),
            Tensor::empty({ids.numel()}, DType::I32)};
  ops::moe_permute_map(m.offsets, m.row_of, m.slot_of, ids);
  return m;
}

void check_map(int64_t N, int64_t k, int64_t E, Routing how, uint64_t seed) {
  Rng rng(seed);
  const std::string what = "map N " + std::to_string(N) + " k " + std::to_string(k) + " E " + std::to_string(E);
  const Tensor ids = make_ids(rng, N, k, E, how);
  const HostMap m = host_map(ids, E);
  Tensor g_ids = upload_raw(ids);
  Tensor g_off = poisoned_ints({E + 1}), g_row = poisoned_ints({N, k}), g_slot = poisoned_ints({N * k});
  ops::moe_permute_map(g_off, g_row, g_slot, g_ids);
  expect_same_ints(g_off, m.offsets, "offsets, " + what);
  expect_same_ints(g_row, m.row_of, "row_of, " + what);
  expect_same_ints(g_slot, m.slot_of, "slot_of, " + what);
}

TEST(GpuMoePermute, MapMatchesTheCpuOrder) {
  TETRA_REQUIRE_GPU();
  check_map(16384, 6, 64, Routing::Random, 20);
  check_map(16384, 6, 64, Routing::Imbalanced, 21);
  check_map(16384, 6, 64, Routing::Balanced, 22);
  check_map(333, 3, 7, Routing::Random, 23);  // N·k not a multiple of the 1024-slot chunk
  check_map(5, 1, 1, Routing::Random, 24);    // one expert
  check_map(700, 8, 1000, Routing::Imbalanced, 25);
}

// The data movers on one routing: permute, its backward, the combine and its backward, in dtype dt,
// against the CPU twin on bf16-representable values.
void check_movers(int64_t N, int64_t k, int64_t E, int64_t d, DType dt, Routing how, uint64_t seed) {
  Rng rng(seed);
  std::ostringstream os;
  os << "N " << N << " k " << k << " E " << E << " d " << d << " " << dtype_name(dt);
  const std::string what = os.str();
  const int64_t R = N * k;
  const Tensor ids = make_ids(rng, N, k, E, how);
  const HostMap m = host_map(ids, E);
  const Tensor x = rand_bf16(rng, {N, d}, 1.0), rows_in = rand_bf16(rng, {R, d}, 1.0);
  const Tensor w = random_host(rng, {N, k}, 0.5, 0.2), dy = rand_bf16(rng, {N, d}, 1.0);
  const Tensor prior = rand_bf16(rng, {N, d}, 1.0);

  Tensor rows = Tensor::empty({R, d}, DType::F32), dx = Tensor::empty({N, d}, DType::F32);
  Tensor y = Tensor::empty({N, d}, DType::F32), y_acc = Tensor::empty({N, d}, DType::F32);
  Tensor d_rows = Tensor::empty({R, d}, DType::F32), d_w = Tensor::empty({N, k}, DType::F32);
  ops::moe_permute(rows, x, m.slot_of, k);
  ops::moe_permute_backward(dx, rows_in, m.row_of);
  ops::moe_unpermute(y, rows_in, w, m.row_of);
  ops::copy(y_acc, prior);
  ops::moe_unpermute(y_acc, rows_in, w, m.row_of, /*accumulate=*/true);
  ops::moe_unpermute_backward(d_rows, d_w, dy, rows_in, w, m.row_of);

  Tensor g_slot = upload_raw(m.slot_of), g_row = upload_raw(m.row_of), g_w = upload(w, DType::F32);
  Tensor g_x = upload(x, dt), g_rows_in = upload(rows_in, dt), g_dy = upload(dy, dt);
  Tensor g_rows = poisoned({R, d}, dt), g_dx = poisoned({N, d}, dt), g_y = poisoned({N, d}, dt);
  Tensor g_y_acc = upload(prior, dt), g_drows = poisoned({R, d}, dt), g_dw = poisoned({N, k}, DType::F32);
  ops::moe_permute(g_rows, g_x, g_slot, k);
  EXPECT_EQ(rel_error(g_rows, rows), 0.0) << "permute copies exactly, " << what;
  ops::moe_permute_backward(g_dx, g_rows_in, g_row);
  expect_close(g_dx, dx, dt, "permute backward, " + what);
  ops::moe_unpermute(g_y, g_rows_in, g_w, g_row);
  expect_close(g_y, y, dt, "unpermute, " + what);
  ops::moe_unpermute(g_y_acc, g_rows_in, g_w, g_row, /*accumulate=*/true);
  expect_close(g_y_acc, y_acc, dt, "unpermute accumulating, " + what);
  ops::moe_unpermute_backward(g_drows, g_dw, g_dy, g_rows_in, g_w, g_row);
  expect_close(g_drows, d_rows, dt, "unpermute backward d_rows, " + what);
  expect_close(g_dw, d_w, dt == DType::BF16 ? DType::BF16 : DType::F32, "unpermute backward d_weights, " + what);
}

TEST(GpuMoePermute, IssueShape) {
  TETRA_REQUIRE_GPU();
  check_movers(16384, 6, 64, 1536, DType::BF16, Routing::Random, 30);
  check_movers(16384, 6, 64, 1536, DType::BF16, Routing::Imbalanced, 31);
}

TEST(GpuMoePermute, OddShapesAndFp32) {
  TETRA_REQUIRE_GPU();
  check_movers(333, 3, 7, 40, DType::F32, Routing::Random, 32);
  check_movers(100, 2, 5, 13, DType::BF16, Routing::Random, 33);  // d % 8 ≠ 0: one value per thread
  check_movers(1, 1, 1, 8, DType::BF16, Routing::Random, 34);
  check_movers(257, 4, 9, 264, DType::F32, Routing::Imbalanced, 35);
  // more slots a token than the combine's backward holds at once (8): its second group of slots
  check_movers(300, 10, 16, 264, DType::F32, Routing::Random, 37);
  check_movers(64, 9, 12, 1536, DType::BF16, Routing::Imbalanced, 38);
}

// Expert-parallel chunks: (rank, expert) → (expert, rank) and back, and the experts' offsets, bit for
// bit as on the CPU; rows past the chunks stay poisoned.
TEST(GpuMoePermute, SortChunks) {
  TETRA_REQUIRE_GPU();
  Rng rng(36);
  for (auto [A, B, d] : {std::array<int64_t, 3>{4, 16, 1536}, std::array<int64_t, 3>{3, 5, 13}, std::array<int64_t, 3>{1, 1, 8}}) {
    Tensor counts = test::random_ids(rng, {A, B}, 0, 300);
    counts.data<int32_t>()[0] = 0;  // an empty chunk first
    int64_t total = 0;
    for (int64_t i = 0; i < A * B; ++i) total += counts.data<int32_t>()[i];
    const int64_t R = total + 5;
    const Tensor in = rand_bf16(rng, {R, d}, 1.0);
    Tensor out = Tensor::empty({R, d}, DType::F32), back = Tensor::empty({R, d}, DType::F32);
    ops::fill(out, 0.0f);
    ops::fill(back, 0.0f);
    ops::moe_sort_chunks(out, in, counts);
    ops::moe_sort_chunks(back, out, counts, /*inverse=*/true);
    Tensor offsets = Tensor::empty({B + 1}, DType::I32);
    ops::moe_chunk_offsets(offsets, counts);
    for (DType dt : {DType::BF16, DType::F32}) {
      const std::string what = "sort_chunks A " + std::to_string(A) + " B " + std::to_string(B) + " d " +
                               std::to_string(d) + " " + dtype_name(dt);
      Tensor g_counts = upload_raw(counts), g_in = upload(in, dt);
      Tensor g_out = poisoned({R, d}, dt), g_back = poisoned({R, d}, dt), g_off = poisoned_ints({B + 1});
      ops::moe_sort_chunks(g_out, g_in, g_counts);
      ops::moe_sort_chunks(g_back, g_out, g_counts, /*inverse=*/true);
      ops::moe_chunk_offsets(g_off, g_counts);
      const std::vector<double> got = download(g_out), got_back = download(g_back), want = values(out);
      const std::vector<double> want_back = values(back);
      int64_t wrong = 0, unwritten = 0;
      for (int64_t i = 0; i < R * d; ++i) {
        if (i < total * d) wrong += got[static_cast<size_t>(i)] != want[static_cast<size_t>(i)] ||
                                    got_back[static_cast<size_t>(i)] != want_back[static_cast<size_t>(i)];
        else unwritten += !std::isnan(got[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(wrong, 0) << what;
      EXPECT_EQ(unwritten, 0) << what << ": rows past the chunks written";
      expect_same_ints(g_off, offsets, "chunk offsets, " + what);
    }
  }
}

// ---------- grouped GEMMs ----------

// offsets [G + 1] for per-expert row counts (a prefix sum starting at `start`).
Tensor offsets_of(const std::vector<int64_t>& rows, int64_t start = 0) {
  Tensor t = Tensor::empty({static_cast<int64_t>(rows.size()) + 1}, DType::I32);
  int32_t* p = t.data<int32_t>();
  p[0] = static_cast<int32_t>(start);
  for (size_t g = 0; g < rows.size(); ++g) p[g + 1] = p[g] + static_cast<int32_t>(rows[g]);
  return t;
}

// Per-expert row counts of a routing of N tokens to G experts, k slots each.
std::vector<int64_t> rows_of_routing(Rng& rng, int64_t N, int64_t k, int64_t G, Routing how) {
  const Tensor ids = make_ids(rng, N, k, G, how);
  std::vector<int64_t> rows(static_cast<size_t>(G), 0);
  for (int64_t i = 0; i < ids.numel(); ++i) ++rows[static_cast<size_t>(ids.data<int32_t>()[i])];
  return rows;
}

const cuda::GroupedGemmImpl kImpls[] = {cuda::GroupedGemmImpl::Wgmma, cuda::GroupedGemmImpl::WgmmaWs,
                                        cuda::GroupedGemmImpl::Mma, cuda::GroupedGemmImpl::Simt,
                                        cuda::GroupedGemmImpl::Cublas};

// Whether the wgmma kernel runs here (a compute capability 9.0 GPU and a build with sm_90a code).
bool wgmma_runs() {
  cuda::GroupedGemm p;
  p.O = p.I = 64;
  const char* why = "";
  const bool ok = cuda::grouped_gemm_wgmma_applies(p, &why);
  if (!ok) std::printf("wgmma grouped GEMM not available: %s\n", why);
  return ok;
}

// All three GEMMs of one projection w [G, O, I] on rows [R, ·] with the given row counts, with the
// chosen implementation, operands of dtype `dt` and outputs of dtype `out`, against the CPU twin.
// Rows before offsets[0] and after offsets[G] must stay poisoned.
void check_gemm(const std::vector<int64_t>& group_rows, int64_t O, int64_t I, DType dt, DType out,
                const std::vector<cuda::GroupedGemmImpl>& impls, uint64_t seed, int64_t lead = 0, int64_t tail = 0) {
  Rng rng(seed);
  const int64_t G = static_cast<int64_t>(group_rows.size());
  int64_t used = 0;
  for (int64_t r : group_rows) used += r;
  const int64_t R = lead + used + tail;
  const Tensor off = offsets_of(group_rows, lead);
  const Tensor x = rand_bf16(rng, {R, I}, 1.0), dy = rand_bf16(rng, {R, O}, 1.0);
  const Tensor w = rand_bf16(rng, {G, O, I}, 1.0 / std::sqrt(static_cast<double>(I)));
  const Tensor dw0 = rand_bf16(rng, {G, O, I}, 1.0);
  Tensor y = Tensor::empty({R, O}, DType::F32), dx = Tensor::empty({R, I}, DType::F32);
  Tensor dw = Tensor::empty({G, O, I}, DType::F32), dw_acc = Tensor::empty({G, O, I}, DType::F32);
  // The CPU twin writes only the experts' rows; the rest of y / dx is not compared.
  ops::fill(y, 0.0f);
  ops::fill(dx, 0.0f);
  ops::moe_grouped_linear_forward(y, x, w, off);
  ops::moe_grouped_linear_backward_input(dx, dy, w, off);
  ops::moe_grouped_linear_backward_weight(dw, dy, x, off, false);
  ops::copy(dw_acc, dw0);
  ops::moe_grouped_linear_backward_weight(dw_acc, dy, x, off, true);

  for (cuda::GroupedGemmImpl impl : impls) {
    std::ostringstream os;
    os << cuda::grouped_gemm_impl_name(impl) << " G " << G << " rows " << used << " (+" << lead << "+" << tail
       << ") O " << O << " I " << I << " " << dtype_name(dt) << "→" << dtype_name(out);
    const std::string what = os.str();
    if ((impl == cuda::GroupedGemmImpl::Wgmma || impl == cuda::GroupedGemmImpl::WgmmaWs) && !wgmma_runs())
      continue;
    cuda::set_grouped_gemm_impl(impl);
    Tensor g_off = upload_raw(off), g_x = upload(x, dt), g_dy = upload(dy, dt), g_w = upload(w, dt);
    Tensor g_y = poisoned({R, O}, out), g_dx = poisoned({R, I}, out), g_dw = poisoned({G, O, I}, out);
    Tensor g_dw_acc = upload(dw0, out);
    ops::moe_grouped_linear_forward(g_y, g_x, g_w, g_off);
    ops::moe_grouped_linear_backward_input(g_dx, g_dy, g_w, g_off);
    ops::moe_grouped_linear_backward_weight(g_dw, g_dy, g_x, g_off, false);
    ops::moe_grouped_linear_backward_weight(g_dw_acc, g_dy, g_x, g_off, true);
    cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);
    const DType tol_type = dt == DType::BF16 || out == DType::BF16 ? DType::BF16 : DType::F32;
    auto used_rows = [&](const Tensor& dev, const Tensor& host, int64_t cols) {
      std::vector<double> got = download(dev), ref = values(host);
      // rows outside the experts' range must still be NaN
      int64_t written = 0;
      for (int64_t r = 0; r < R; ++r)
        if (r < lead || r >= lead + used)
          for (int64_t c = 0; c < cols; ++c) written += !std::isnan(got[static_cast<size_t>(r * cols + c)]);
      EXPECT_EQ(written, 0) << "elements written outside the experts' rows, " << what;
      return std::make_pair(std::vector<double>(got.begin() + lead * cols, got.begin() + (lead + used) * cols),
                            std::vector<double>(ref.begin() + lead * cols, ref.begin() + (lead + used) * cols));
    };
    const auto [yg, yr] = used_rows(g_y, y, O);
    expect_close(yg, yr, tol_type, "forward, " + what);
    const auto [dxg, dxr] = used_rows(g_dx, dx, I);
    expect_close(dxg, dxr, tol_type, "backward input, " + what);
    expect_close(g_dw, dw, tol_type, "backward weight, " + what);
    expect_close(g_dw_acc, dw_acc, tol_type, "backward weight accumulating, " + what);
  }
}

// The issue's experts: 64 of width F = 512 on 16384 tokens × top-6, gate|up [64, 1024, 1536] and down
// [64, 1536, 512], balanced and imbalanced (one expert in every token, two in none).
TEST(GpuMoeGroupedGemm, IssueShape) {
  TETRA_REQUIRE_GPU();
  Rng rng(40);
  for (Routing how : {Routing::Random, Routing::Imbalanced}) {
    const std::vector<int64_t> rows = rows_of_routing(rng, 16384, 6, 64, how);
    const std::vector<cuda::GroupedGemmImpl> both = {cuda::GroupedGemmImpl::Wgmma, cuda::GroupedGemmImpl::WgmmaWs,
                                                     cuda::GroupedGemmImpl::Mma};
    check_gemm(rows, 1024, 1536, DType::BF16, DType::BF16, both, 41);
    check_gemm(rows, 1536, 512, DType::BF16, DType::BF16, both, 42);
  }
}

// More tiles than multiprocessors, so that every persistent block runs several in turn (one ring of
// pipeline stages across them; the warp-specialised kernel's mbarrier phases wrap many times);
// experts of unequal size, one empty.
TEST(GpuMoeGroupedGemm, ManyTilesPerBlock) {
  TETRA_REQUIRE_GPU();
  using Impl = cuda::GroupedGemmImpl;
  const std::vector<int64_t> rows = {2000, 0, 3100, 1500, 77, 2600, 1900, 1200};
  check_gemm(rows, 512, 1024, DType::BF16, DType::BF16, {Impl::Wgmma, Impl::WgmmaWs, Impl::Mma}, 53);
  check_gemm(rows, 256, 520, DType::BF16, DType::F32, {Impl::Wgmma, Impl::WgmmaWs}, 54, 3, 5);
}

// The warp-specialised kernel's staged epilogue (TETRA_GROUPED_EPILOGUE=staged, bf16 outputs: each
// whole slice through shared memory and the copy engine's tensor stores) stores the bits of its
// direct stores, and nothing else: the three GEMMs and an accumulating weight gradient (which keeps
// the direct stores), every output compared whole with the rows outside the experts still poisoned;
// ragged experts (partial row tiles, an empty one) and widths off 256 (partial column tiles); fp32
// outputs (direct either way).
TEST(GpuMoeGroupedGemm, WarpSpecialisedStagedEpilogueStoresTheBitsOfTheDirectOne) {
  TETRA_REQUIRE_GPU();
  if (!wgmma_runs()) GTEST_SKIP() << "no wgmma here";
  struct Shape {
    std::vector<int64_t> rows;
    int64_t O, I, lead, tail;
  };
  Rng rng(57);
  for (const Shape& sh : {Shape{{130, 0, 1, 255, 64}, 192, 320, 3, 2}, Shape{{300, 129}, 1024, 1536, 0, 0}}) {
    for (const DType out : {DType::BF16, DType::F32}) {
      const int64_t G = static_cast<int64_t>(sh.rows.size()), O = sh.O, I = sh.I;
      int64_t used = 0;
      for (int64_t r : sh.rows) used += r;
      const int64_t R = sh.lead + used + sh.tail;
      const Tensor g_off = upload_raw(offsets_of(sh.rows, sh.lead));
      const Tensor g_x = upload(rand_bf16(rng, {R, I}, 1.0), DType::BF16);
      const Tensor g_dy = upload(rand_bf16(rng, {R, O}, 1.0), DType::BF16);
      const Tensor g_w = upload(rand_bf16(rng, {G, O, I}, 0.05), DType::BF16);
      const Tensor dw0 = rand_bf16(rng, {G, O, I}, 1.0);
      auto run = [&](const char* epilogue) {
        setenv("TETRA_GROUPED_EPILOGUE", epilogue, 1);
        cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::WgmmaWs);
        std::vector<Tensor> o{poisoned({R, O}, out), poisoned({R, I}, out), poisoned({G, O, I}, out),
                              upload(dw0, out)};
        ops::moe_grouped_linear_forward(o[0], g_x, g_w, g_off);
        ops::moe_grouped_linear_backward_input(o[1], g_dy, g_w, g_off);
        ops::moe_grouped_linear_backward_weight(o[2], g_dy, g_x, g_off, false);
        ops::moe_grouped_linear_backward_weight(o[3], g_dy, g_x, g_off, true);
        cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);
        unsetenv("TETRA_GROUPED_EPILOGUE");
        std::vector<Tensor> host;
        for (const Tensor& t : o) host.push_back(download_raw(t));
        return host;
      };
      const std::vector<Tensor> direct = run("direct"), staged = run("staged");
      const char* names[] = {"forward", "backward input", "backward weight", "backward weight accumulating"};
      for (size_t k = 0; k < direct.size(); ++k)
        EXPECT_EQ(std::memcmp(staged[k].data_ptr(), direct[k].data_ptr(), direct[k].nbytes()), 0)
            << names[k] << ", O " << O << " I " << I << " " << dtype_name(out);
    }
  }
  setenv("TETRA_GROUPED_EPILOGUE", "stage", 1);
  EXPECT_THROW(cuda::grouped_gemm_epilogue(), Error);
  unsetenv("TETRA_GROUPED_EPILOGUE");
}

// No rows at all (R = 0, e.g. a rank that received no tokens): the warp-specialised kernel, whose
// tensor maps cannot have a zero extent, stores a zero weight gradient or leaves an accumulated one.
TEST(GpuMoeGroupedGemm, WarpSpecialisedKernelWithoutRows) {
  TETRA_REQUIRE_GPU();
  if (!wgmma_runs()) GTEST_SKIP() << "no wgmma here";
  const int64_t G = 3, O = 64, I = 128;
  const Tensor off = upload_raw(offsets_of({0, 0, 0}));
  Rng rng(56);
  const Tensor start = rand_bf16(rng, {G, O, I}, 1.0);
  for (bool accumulate : {false, true}) {
    Tensor dw = upload(start, DType::F32);
    cuda::GroupedGemm p;
    p.kind = cuda::GroupedGemmKind::BackwardWeight;
    p.G = G, p.R = 0, p.O = O, p.I = I;
    p.offsets = off.data<int32_t>();
    p.a = p.b = nullptr;
    p.c = dw.data_ptr();
    p.ab_type = DType::BF16, p.c_type = DType::F32, p.accumulate = accumulate;
    cuda::grouped_gemm(p, dw.device(), cuda::stream_of(dw.device()), cuda::GroupedGemmImpl::WgmmaWs);
    const std::vector<double> got = download(dw), before = values(start);
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != (accumulate ? before[i] : 0.0);
    EXPECT_EQ(wrong, 0) << (accumulate ? "accumulating: the gradient must stay" : "storing: the gradient must be zero");
  }
}

TEST(GpuMoeGroupedGemm, EveryImplementationOnOddShapes) {
  TETRA_REQUIRE_GPU();
  using Impl = cuda::GroupedGemmImpl;
  const std::vector<Impl> all(std::begin(kImpls), std::end(kImpls));
  // partial tiles in every dimension; an empty expert first and in the middle; a lead and a tail
  check_gemm({0, 77, 300, 0, 129, 1}, 200, 136, DType::BF16, DType::BF16, all, 43, 5, 9);
  // one expert with every row; K longer than the pipeline and not a multiple of its k step
  check_gemm({0, 0, 1000, 0}, 64, 96, DType::BF16, DType::BF16, all, 44);
  check_gemm({3, 200}, 264, 1000, DType::BF16, DType::BF16, all, 51);
  // no rows at all: dw is zero
  check_gemm({0, 0, 0}, 16, 24, DType::BF16, DType::BF16, all, 45, 3, 0);
  // fp32 outputs from bf16 operands (cuBLAS's grouped GEMM wants the operands' type)
  check_gemm({31, 64, 17}, 128, 256, DType::BF16, DType::F32, {Impl::Wgmma, Impl::WgmmaWs, Impl::Mma, Impl::Simt},
             46);
  // fp32 operands, and bf16 shapes the tensor-core kernels do not take
  check_gemm({5, 0, 40, 19}, 24, 40, DType::F32, DType::F32, {Impl::Simt, Impl::Cublas}, 47, 2, 2);
  check_gemm({7, 9}, 13, 21, DType::BF16, DType::BF16, {Impl::Simt}, 48);
}

TEST(GpuMoeGroupedGemm, AutoTakesTheSimtKernelWhereTensorCoresDoNotApply) {
  TETRA_REQUIRE_GPU();
  check_gemm({7, 0, 9}, 13, 21, DType::BF16, DType::BF16, {cuda::GroupedGemmImpl::Auto}, 49);  // O, I % 8 ≠ 0
  check_gemm({70, 33}, 40, 48, DType::F32, DType::F32, {cuda::GroupedGemmImpl::Auto}, 50);
  check_gemm({70, 0, 33}, 40, 48, DType::BF16, DType::BF16, {cuda::GroupedGemmImpl::Auto}, 52);  // a tensor-core kernel
  const char* why = nullptr;
  cuda::GroupedGemm p;
  p.O = 13, p.I = 16;
  EXPECT_FALSE(cuda::grouped_gemm_mma_applies(p, &why));
  EXPECT_NE(std::string(why ? why : "").find("multiple of 8"), std::string::npos);
}

// The model's weight gradient over two micro-batches (models/moe_mlp.cpp, Param::grad_empty): the
// step's first call stores (accumulate = false) into a poisoned buffer, the second adds. Every expert
// must be written by the first call, those without rows in it too (zeros; else the second adds to
// NaN), including experts that get rows only in the second micro-batch and one that gets none in
// either; and a micro-batch of no rows at all. Each implementation, bf16 and fp32 gradients, against
// the CPU twin's dw1 + dw2.
TEST(GpuMoeGroupedGemm, FirstMicroBatchStoresEveryExpertSecondAdds) {
  TETRA_REQUIRE_GPU();
  using Impl = cuda::GroupedGemmImpl;
  Rng rng(53);
  const std::vector<int64_t> rows1 = {0, 150, 0, 77, 300, 0}, rows2 = {64, 0, 0, 129, 1, 200};
  const int64_t G = static_cast<int64_t>(rows1.size()), O = 128, I = 136;
  int64_t R1 = 0, R2 = 0;
  for (int64_t r : rows1) R1 += r;
  for (int64_t r : rows2) R2 += r;
  const Tensor off1 = offsets_of(rows1), off2 = offsets_of(rows2);
  const Tensor x1 = rand_bf16(rng, {R1, I}, 1.0), dy1 = rand_bf16(rng, {R1, O}, 1.0);
  const Tensor x2 = rand_bf16(rng, {R2, I}, 1.0), dy2 = rand_bf16(rng, {R2, O}, 1.0);
  Tensor want = Tensor::empty({G, O, I}, DType::F32);
  std::fill(want.data<float>(), want.data<float>() + want.numel(), std::nanf(""));
  ops::moe_grouped_linear_backward_weight(want, dy1, x1, off1, /*accumulate=*/false);
  ops::moe_grouped_linear_backward_weight(want, dy2, x2, off2, /*accumulate=*/true);
  for (DType out : {DType::BF16, DType::F32})
    for (Impl impl : kImpls) {
      if (impl == Impl::Cublas && out != DType::BF16) continue;  // cuBLAS's grouped GEMM: one type
      const std::string what = std::string(cuda::grouped_gemm_impl_name(impl)) + " → " + dtype_name(out);
      if ((impl == Impl::Wgmma || impl == Impl::WgmmaWs) && !wgmma_runs()) continue;
      cuda::set_grouped_gemm_impl(impl);
      // A micro-batch without any rows (an expert-parallel rank that received none) stores zeros
      // when it comes first and adds nothing after.
      Tensor g_none = poisoned({G, O, I}, out);
      Tensor g_x0 = Tensor::empty({0, I}, DType::BF16, gpu()), g_dy0 = Tensor::empty({0, O}, DType::BF16, gpu());
      Tensor g_off0 = upload_raw(offsets_of(std::vector<int64_t>(static_cast<size_t>(G), 0)));
      ops::moe_grouped_linear_backward_weight(g_none, g_dy0, g_x0, g_off0, /*accumulate=*/false);
      ops::moe_grouped_linear_backward_weight(g_none, g_dy0, g_x0, g_off0, /*accumulate=*/true);
      int64_t not_zero = 0;
      for (double v : download(g_none)) not_zero += v != 0.0;
      EXPECT_EQ(not_zero, 0) << what << ": a micro-batch of no rows";
      Tensor g_dw = poisoned({G, O, I}, out);
      Tensor g_x1 = upload(x1, DType::BF16), g_dy1 = upload(dy1, DType::BF16), g_off1 = upload_raw(off1);
      Tensor g_x2 = upload(x2, DType::BF16), g_dy2 = upload(dy2, DType::BF16), g_off2 = upload_raw(off2);
      ops::moe_grouped_linear_backward_weight(g_dw, g_dy1, g_x1, g_off1, /*accumulate=*/false);
      ops::moe_grouped_linear_backward_weight(g_dw, g_dy2, g_x2, g_off2, /*accumulate=*/true);
      cuda::set_grouped_gemm_impl(Impl::Auto);
      const std::vector<double> got = download(g_dw);
      int64_t nan = 0;
      for (double v : got) nan += std::isnan(v);
      EXPECT_EQ(nan, 0) << what << ": elements the first micro-batch left poisoned";
      // the expert without rows in either micro-batch holds exact zeros
      int64_t nonzero = 0;
      for (int64_t i = 2 * O * I; i < 3 * O * I; ++i) nonzero += got[static_cast<size_t>(i)] != 0.0;
      EXPECT_EQ(nonzero, 0) << what << ": expert 2 has no rows in either micro-batch";
      expect_close(got, values(want), DType::BF16, "dw1 + dw2, " + what);
    }
}

// The router's counts and a second tensor reach pinned host memory with one event; the device may
// already run later work while the host waits.
TEST(GpuMoeCounts, ReadbackOfRouterCounts) {
  TETRA_REQUIRE_GPU();
  Rng rng(55);
  const int64_t N = 4096, E = 64, k = 6;
  const Tensor logits = random_host(rng, {N, E}, 2.0), bias = random_host(rng, {E}, 0.05);
  Tensor ids = host_ints({N, k}, 0), w = Tensor::empty({N, k}, DType::F32), counts = host_ints({E}, 0);
  ops::moe_router_forward(ids, w, counts, logits, bias, routing(k));
  Tensor g_logits = upload(logits, DType::F32), g_bias = upload(bias, DType::F32);
  Tensor g_ids = poisoned_ints({N, k}), g_w = poisoned({N, k}, DType::F32), g_counts = poisoned_ints({E});
  Tensor extra = upload_raw(host_ints({3}, 42));
  CountsReadback rb(gpu(), E + 3);
  ops::moe_router_forward(g_ids, g_w, g_counts, g_logits, g_bias, routing(k));
  rb.copy_from({&g_counts, &extra});
  const int32_t* v = rb.wait();
  ASSERT_EQ(rb.copied(), E + 3);
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(v[e], counts.data<int32_t>()[e]) << "expert " << e;
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(v[E + i], 42);
  EXPECT_TRUE(rb.ready());
}

// ---------- a routed layer in a CUDA graph ----------

// router → map → permute → gate|up GEMM → SwiGLU → down GEMM → combine, captured once and replayed on
// new logits: the replay must equal the eager run on those logits, though the expert row counts
// changed (nothing in the layer was read on the host).
TEST(GpuMoeLayer, RoutedLayerReplaysFromAGraph) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 2048, E = 16, k = 4, d = 256, F = 128, R = N * k;
  const ops::MoeRouting r = routing(k, 4, 2, 1.5f);
  Rng rng(60);
  const Device dev = gpu();
  Tensor x = upload(rand_bf16(rng, {N, d}, 1.0), DType::BF16);
  Tensor w_gu = upload(rand_bf16(rng, {E, 2 * F, d}, 0.06), DType::BF16);
  Tensor w_d = upload(rand_bf16(rng, {E, d, F}, 0.09), DType::BF16);
  Tensor bias = upload(random_host(rng, {E}, 0.05), DType::F32);
  Tensor logits = Tensor::empty({N, E}, DType::F32, dev);
  Tensor ids = Tensor::empty({N, k}, DType::I32, dev), w = Tensor::empty({N, k}, DType::F32, dev);
  Tensor counts = Tensor::empty({E}, DType::I32, dev), off = Tensor::empty({E + 1}, DType::I32, dev);
  Tensor row_of = Tensor::empty({N, k}, DType::I32, dev), slot_of = Tensor::empty({R}, DType::I32, dev);
  Tensor xs = Tensor::empty({R, d}, DType::BF16, dev), gu = Tensor::empty({R, 2 * F}, DType::BF16, dev);
  Tensor h = Tensor::empty({R, F}, DType::BF16, dev), out = Tensor::empty({R, d}, DType::BF16, dev);
  Tensor y = Tensor::empty({N, d}, DType::BF16, dev);
  auto layer = [&] {
    ops::moe_router_forward(ids, w, counts, logits, bias, r);
    ops::moe_permute_map(off, row_of, slot_of, ids);
    ops::moe_permute(xs, x, slot_of, k);
    ops::moe_grouped_linear_forward(gu, xs, w_gu, off);
    ops::swiglu_forward(h, gu);
    ops::moe_grouped_linear_forward(out, h, w_d, off);
    ops::moe_unpermute(y, out, w, row_of);
  };
  auto set_logits = [&](uint64_t seed) {
    Rng lr(seed);
    const Tensor l = random_host(lr, {N, E}, 2.0);
    cuda::copy_bytes(logits.data_ptr(), dev, l.data_ptr(), Device::cpu(), l.nbytes(), /*blocking=*/true);
  };
  const Stream stream = Stream::create(dev);
  StreamGuard guard(stream);
  set_logits(61);
  layer();  // warm-up outside the capture (first launches, attributes)
  stream.synchronize();
  CudaGraph graph(dev);
  graph.begin_capture();
  layer();
  graph.end_capture();
  for (uint64_t seed : {62, 63}) {
    set_logits(seed);
    graph.replay();
    stream.synchronize();
    const std::vector<double> replayed = download(y);
    const Tensor counts_replayed = download_raw(counts);
    layer();
    stream.synchronize();
    EXPECT_EQ(download(y), replayed) << "graph replay vs eager, logits seed " << seed;
    const Tensor counts_eager = download_raw(counts);
    for (int64_t e = 0; e < E; ++e) EXPECT_EQ(counts_replayed.data<int32_t>()[e], counts_eager.data<int32_t>()[e]);
  }
}

}  // namespace
}  // namespace tetra::gputest
