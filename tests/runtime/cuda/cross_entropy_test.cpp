// CUDA fused softmax cross-entropy against the CPU twin: GPT-2's padded vocabulary (bf16: the staged
// kernel, its row in shared memory; fp32: 201 KB a row, the two-read vector kernel), Llama 3's (both
// dtypes too large to stage), small aligned vocabularies (staged in both dtypes) and unpadded ones
// (scalar path), ignored targets, gradient separate or written over the logits in place.
#include <cmath>
#include <sstream>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

void check_cross_entropy(int64_t N, int64_t V, uint64_t seed) {
  Rng rng(seed);
  Tensor logits = representable(random_host(rng, {N, V}, 3.0), DType::BF16);
  Tensor targets = random_ids(rng, {N}, 0, static_cast<int32_t>(V));
  targets.data<int32_t>()[1 % N] = -1;  // ignored positions
  if (N > 5) targets.data<int32_t>()[5] = -100;
  const float grad_scale = 1.0f / static_cast<float>(N);

  Tensor losses = Tensor::empty({N}, DType::F32), dlogits = Tensor::empty({N, V}, DType::F32);
  ops::softmax_cross_entropy(losses, &dlogits, logits, targets, grad_scale);
  Tensor gtargets = upload_raw(targets);

  for (DType dt : {DType::F32, DType::BF16}) {
    std::ostringstream what;
    what << "N=" << N << " V=" << V << " " << dtype_name(dt);
    Tensor glogits = upload(logits, dt);
    Tensor gloss = poisoned({N}, DType::F32), gd = poisoned({N, V}, dt);
    ops::softmax_cross_entropy(gloss, &gd, glogits, gtargets, grad_scale);
    EXPECT_LE(close_error(gloss, losses), kTolF32) << "losses, " << what.str();
    EXPECT_LE(close_error(gd, dlogits), tol(dt)) << "dlogits, " << what.str();

    Tensor gloss2 = poisoned({N}, DType::F32);
    ops::softmax_cross_entropy(gloss2, nullptr, glogits, gtargets, grad_scale);
    EXPECT_LE(close_error(gloss2, losses), kTolF32) << "losses without gradient, " << what.str();

    Tensor gloss3 = poisoned({N}, DType::F32);
    ops::softmax_cross_entropy(gloss3, &glogits, glogits, gtargets, grad_scale);  // in place
    EXPECT_LE(close_error(gloss3, losses), kTolF32) << "losses in place, " << what.str();
    EXPECT_LE(close_error(glogits, dlogits), tol(dt)) << "dlogits in place, " << what.str();
  }
}

TEST(GpuCrossEntropy, Gpt2PaddedVocabulary) {
  TETRA_REQUIRE_GPU();
  check_cross_entropy(64, 50304, 1);
}

TEST(GpuCrossEntropy, LargeAndSmallAlignedVocabularies) {
  TETRA_REQUIRE_GPU();
  check_cross_entropy(6, 128256, 6);
  check_cross_entropy(300, 16, 7);
  check_cross_entropy(9, 4104, 8);
}

TEST(GpuCrossEntropy, OddVocabulary) {
  TETRA_REQUIRE_GPU();
  check_cross_entropy(33, 50257, 2);
  check_cross_entropy(7, 3, 3);
  check_cross_entropy(2, 1, 4);
}

// A target ≥ V cannot raise on the device: its loss is NaN and its gradient row zero.
TEST(GpuCrossEntropy, OutOfRangeTargetGivesNaNLoss) {
  TETRA_REQUIRE_GPU();
  Rng rng(5);
  Tensor logits = random_host(rng, {2, 16});
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{3, 16}, {2});
  Tensor gl = poisoned({2}, DType::F32), gd = poisoned({2, 16}, DType::F32);
  ops::softmax_cross_entropy(gl, &gd, upload(logits, DType::F32), upload_raw(targets), 1.0f);
  std::vector<double> l = download(gl), d = download(gd);
  EXPECT_TRUE(std::isfinite(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  for (int v = 0; v < 16; ++v) EXPECT_EQ(d[16 + v], 0.0);
}

}  // namespace
}  // namespace tetra::gputest
