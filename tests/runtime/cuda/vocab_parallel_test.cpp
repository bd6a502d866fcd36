// The CUDA pieces of tensor parallelism's vocabulary split against their CPU twins on one GPU:
// the vocabulary-parallel cross-entropy (per-shard statistics, then the loss and gradient from every
// shard's statistics) over tp = 1, 2, 4 and 3 shards, fp32 and bf16 logits, ignored targets, the
// gradient separate and in place; and the embedding lookup and its backward on a vocabulary shard.
// Outputs are poisoned first; both the norm-wise relative error and the worst element (relative to
// the reference's largest magnitude) must lie within the dtype's tolerance. The losses are also
// checked against the unsplit ops::softmax_cross_entropy.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

// max |out − ref| / max |ref|.
double worst_element(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double scale = 0, worst = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = std::abs(out[i] - ref[i]);
    if (!std::isfinite(out[i]) || !(d == d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst / std::max(scale, 1e-30);
}

void expect_close(const Tensor& dev, const Tensor& ref_host, double t, const std::string& what) {
  const std::vector<double> out = download(dev), ref = values(ref_host);
  EXPECT_LE(rel_error(out, ref), t) << what << " (norm-wise)";
  EXPECT_LE(worst_element(out, ref), t) << what << " (worst element)";
}

// Columns [begin, begin + n) of a host fp32 [N, V] tensor.
Tensor columns(const Tensor& m, int64_t begin, int64_t n) {
  const int64_t N = m.dim(0), V = m.dim(1);
  Tensor out = Tensor::empty({N, n}, DType::F32);
  for (int64_t r = 0; r < N; ++r)
    std::copy_n(m.data<float>() + r * V + begin, n, out.data<float>() + r * n);
  return out;
}

void check_vocab_parallel_loss(int64_t N, int64_t V, int tp, uint64_t seed) {
  Rng rng(seed);
  Tensor logits = representable(random_host(rng, {N, V}, 3.0), DType::BF16);
  Tensor targets = random_ids(rng, {N}, 0, static_cast<int32_t>(V));
  targets.data<int32_t>()[1 % N] = -1;  // ignored positions
  if (N > 5) targets.data<int32_t>()[5] = -100;
  const float grad_scale = 1.0f / static_cast<float>(N);
  const int64_t Vr = V / tp;

  // The unsplit loss, for the losses.
  Tensor full_losses = Tensor::empty({N}, DType::F32), full_d = Tensor::empty({N, V}, DType::F32);
  ops::softmax_cross_entropy(full_losses, &full_d, logits, targets, grad_scale);

  // The CPU twin, shard by shard.
  std::vector<Tensor> shard_logits;
  Tensor all_stats = Tensor::empty({tp, 3, N}, DType::F32);
  for (int r = 0; r < tp; ++r) {
    shard_logits.push_back(columns(logits, r * Vr, Vr));
    Tensor st = all_stats.slice_flat(static_cast<int64_t>(r) * 3 * N, {3, N});
    ops::cross_entropy_shard_stats(st, shard_logits[static_cast<size_t>(r)], targets, {r * Vr, V});
  }
  Tensor gtargets = upload_raw(targets);
  for (DType dt : {DType::F32, DType::BF16}) {
    // The device statistics of every shard, assembled as the all-gather would.
    Tensor gall = poisoned({tp, 3, N}, DType::F32);
    std::vector<Tensor> glogits;
    for (int r = 0; r < tp; ++r) {
      std::ostringstream what;
      what << "N=" << N << " V=" << V << " tp=" << tp << " shard " << r << " " << dtype_name(dt);
      glogits.push_back(upload(shard_logits[static_cast<size_t>(r)], dt));
      Tensor gst = gall.slice_flat(static_cast<int64_t>(r) * 3 * N, {3, N});
      ops::cross_entropy_shard_stats(gst, glogits.back(), gtargets, {r * Vr, V});
      expect_close(gst, all_stats.slice_flat(static_cast<int64_t>(r) * 3 * N, {3, N}), kTolF32,
                   "shard statistics, " + what.str());
    }
    for (int r = 0; r < tp; ++r) {
      std::ostringstream what;
      what << "N=" << N << " V=" << V << " tp=" << tp << " shard " << r << " " << dtype_name(dt);
      const ops::VocabShard shard{r * Vr, V};
      Tensor losses = Tensor::empty({N}, DType::F32), d = Tensor::empty({N, Vr}, DType::F32);
      ops::cross_entropy_from_stats(losses, &d, shard_logits[static_cast<size_t>(r)], targets, shard, all_stats,
                                    grad_scale);
      EXPECT_LE(rel_error(values(losses), values(full_losses)), 1e-6) << "CPU losses against the unsplit loss, "
                                                                      << what.str();
      EXPECT_LE(rel_error(values(d), values(columns(full_d, r * Vr, Vr))), 1e-6)
          << "CPU gradient against the unsplit one, " << what.str();

      Tensor gloss = poisoned({N}, DType::F32), gd = poisoned({N, Vr}, dt);
      ops::cross_entropy_from_stats(gloss, &gd, glogits[static_cast<size_t>(r)], gtargets, shard, gall, grad_scale);
      expect_close(gloss, losses, kTolF32, "losses, " + what.str());
      expect_close(gd, d, tol(dt), "dlogits, " + what.str());

      Tensor gloss2 = poisoned({N}, DType::F32);
      ops::cross_entropy_from_stats(gloss2, nullptr, glogits[static_cast<size_t>(r)], gtargets, shard, gall, 1.0f);
      expect_close(gloss2, losses, kTolF32, "losses without gradient, " + what.str());

      Tensor in_place = upload(shard_logits[static_cast<size_t>(r)], dt);
      Tensor gloss3 = poisoned({N}, DType::F32);
      ops::cross_entropy_from_stats(gloss3, &in_place, in_place, gtargets, shard, gall, grad_scale);
      expect_close(gloss3, losses, kTolF32, "losses in place, " + what.str());
      expect_close(in_place, d, tol(dt), "dlogits in place, " + what.str());
    }
  }
}

TEST(GpuVocabParallelLoss, Gpt2PaddedVocabulary) {
  TETRA_REQUIRE_GPU();
  check_vocab_parallel_loss(64, 50304, 2, 1);
  check_vocab_parallel_loss(32, 50304, 4, 2);
}

TEST(GpuVocabParallelLoss, OddShards) {
  TETRA_REQUIRE_GPU();
  check_vocab_parallel_loss(33, 771, 3, 3);  // 257 columns a shard: the scalar path
  check_vocab_parallel_loss(7, 6, 2, 4);
  check_vocab_parallel_loss(5, 40, 1, 5);  // one shard: the unsplit loss
}

// A target ≥ V cannot raise on the device: its loss is NaN and its gradient row zero.
TEST(GpuVocabParallelLoss, OutOfRangeTargetGivesNaNLoss) {
  TETRA_REQUIRE_GPU();
  Rng rng(6);
  Tensor logits = random_host(rng, {2, 8});
  Tensor targets = upload_raw(Tensor::from_vector(std::vector<int32_t>{3, 16}, {2}));
  Tensor glogits = upload(logits, DType::F32);
  Tensor stats = poisoned({1, 3, 2}, DType::F32);
  Tensor st = stats.view({3, 2});
  ops::cross_entropy_shard_stats(st, glogits, targets, {8, 16});  // ids [8, 16) of 16
  Tensor gl = poisoned({2}, DType::F32), gd = poisoned({2, 8}, DType::F32);
  ops::cross_entropy_from_stats(gl, &gd, glogits, targets, {8, 16}, stats, 1.0f);
  std::vector<double> l = download(gl), d = download(gd);
  EXPECT_TRUE(std::isfinite(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  for (int v = 0; v < 8; ++v) EXPECT_EQ(d[8 + v], 0.0);
}

// The embedding on a vocabulary shard: another shard's ids give the position row alone and update
// nothing; over all shards the lookups sum to the unsplit one.
void check_embedding_shard(int64_t B, int64_t T, int64_t V, int64_t C, int tp, uint64_t seed) {
  Rng rng(seed);
  const DType rd = DType::BF16;
  Tensor ids = random_ids(rng, {B, T}, 0, static_cast<int32_t>(V));
  Tensor wte = representable(random_host(rng, {V, C}, 0.1), rd);
  Tensor wpe = representable(random_host(rng, {T, C}, 0.05), rd);
  Tensor dy = representable(random_host(rng, {B, T, C}), rd);
  const int64_t Vr = V / tp;
  Tensor gids = upload_raw(ids);
  for (int r = 0; r < tp; ++r) {
    const ops::VocabShard shard{r * Vr, V};
    Tensor rows = Tensor::empty({Vr, C}, DType::F32);
    std::copy_n(wte.data<float>() + r * Vr * C, Vr * C, rows.data<float>());
    Tensor y = Tensor::empty({B, T, C}, DType::F32);
    ops::embedding_forward(y, ids, rows, wpe, T, shard);
    Tensor dw0 = representable(random_host(rng, {Vr, C}, 0.01), rd);
    Tensor dw = representable(dw0, DType::F32);
    ops::embedding_backward(dw, nullptr, dy, ids, T, shard);
    for (DType dt : {DType::F32, DType::BF16}) {
      std::ostringstream what;
      what << "B=" << B << " T=" << T << " V=" << V << " C=" << C << " tp=" << tp << " shard " << r << " "
           << dtype_name(dt);
      Tensor gy = poisoned({B, T, C}, dt);
      ops::embedding_forward(gy, gids, upload(rows, dt), upload(wpe, dt), T, shard);
      expect_close(gy, y, tol(dt), "forward, " + what.str());
      Tensor gdw = upload(dw0, dt);
      ops::embedding_backward(gdw, nullptr, upload(dy, dt), gids, T, shard);
      expect_close(gdw, dw, tol(dt), "backward, " + what.str());
    }
  }
}

TEST(GpuVocabParallelEmbedding, Gpt2Shapes) {
  TETRA_REQUIRE_GPU();
  check_embedding_shard(4, 1024, 50304, 768, 2, 7);
}

TEST(GpuVocabParallelEmbedding, OddSizes) {
  TETRA_REQUIRE_GPU();
  check_embedding_shard(3, 7, 102, 45, 3, 8);
  check_embedding_shard(2, 5, 8, 8, 4, 9);
}

}  // namespace
}  // namespace tetra::gputest
