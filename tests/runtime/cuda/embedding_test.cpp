// CUDA embedding (gather forward; sorted, deterministic scatter-free backward) against the CPU twin:
// GPT-2's padded vocabulary and width, heavy id collisions, odd widths, with and without positions.
#include <cmath>
#include <sstream>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

void check_embedding(int64_t B, int64_t T, int64_t V, int64_t C, int32_t id_hi, bool with_pos, uint64_t seed) {
  Rng rng(seed);
  const DType rd = DType::BF16;
  Tensor ids = random_ids(rng, {B, T}, 0, id_hi);
  Tensor wte = representable(random_host(rng, {V, C}, 0.1), rd);
  Tensor wpe = with_pos ? representable(random_host(rng, {T + 3, C}, 0.05), rd) : Tensor();
  Tensor dy = representable(random_host(rng, {B, T, C}), rd);
  Tensor dwte0 = representable(random_host(rng, {V, C}, 0.01), rd);
  Tensor dwpe0 = representable(random_host(rng, {T + 3, C}, 0.01), rd);

  Tensor y = Tensor::empty({B, T, C}, DType::F32);
  ops::embedding_forward(y, ids, wte, wpe, T);
  Tensor dwte = representable(dwte0, DType::F32), dwpe = representable(dwpe0, DType::F32);
  ops::embedding_backward(dwte, with_pos ? &dwpe : nullptr, dy, ids, T);

  Tensor gids = upload_raw(ids);
  for (DType dt : {DType::F32, DType::BF16}) {
    std::ostringstream what;
    what << "B=" << B << " T=" << T << " V=" << V << " C=" << C << " ids<" << id_hi << " " << dtype_name(dt)
         << (with_pos ? "" : " no wpe");
    const double t = tol(dt);
    Tensor gwte = upload(wte, dt), gwpe = with_pos ? upload(wpe, dt) : Tensor();
    Tensor gy = poisoned({B, T, C}, dt);
    ops::embedding_forward(gy, gids, gwte, gwpe, T);
    EXPECT_LE(close_error(gy, y), t) << "forward, " << what.str();

    Tensor gdwte = upload(dwte0, dt), gdwpe = upload(dwpe0, dt);
    ops::embedding_backward(gdwte, with_pos ? &gdwpe : nullptr, upload(dy, dt), gids, T);
    EXPECT_LE(close_error(gdwte, dwte), t) << "backward dwte, " << what.str();
    if (with_pos) {
      EXPECT_LE(close_error(gdwpe, dwpe), t) << "backward dwpe, " << what.str();
    }
  }
}

TEST(GpuEmbedding, Gpt2Shapes) {
  TETRA_REQUIRE_GPU();
  check_embedding(4, 1024, 50304, 768, 50257, true, 1);
}

TEST(GpuEmbedding, HeavyCollisions) {
  TETRA_REQUIRE_GPU();
  check_embedding(8, 256, 1000, 64, 5, true, 2);   // 2048 tokens over 5 ids
  check_embedding(2, 64, 17, 40, 1, false, 3);     // every token the same id
}

TEST(GpuEmbedding, OddSizes) {
  TETRA_REQUIRE_GPU();
  check_embedding(3, 7, 101, 45, 101, true, 4);
  check_embedding(1, 1, 1, 1, 1, true, 5);
}

// Ids outside [0, V) cannot raise an error on the device: their forward rows are NaN and backward
// skips them, so every other row is still exact.
TEST(GpuEmbedding, OutOfRangeIdsArePoisonedNotWritten) {
  TETRA_REQUIRE_GPU();
  Rng rng(6);
  const int64_t T = 4, V = 10, C = 16;
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 10, 3, -1}, {1, T});
  Tensor wte = random_host(rng, {V, C});
  Tensor gy = poisoned({1, T, C}, DType::F32);
  ops::embedding_forward(gy, upload_raw(ids), upload(wte, DType::F32), Tensor(), T);
  std::vector<double> y = download(gy);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(y[c], wte.data<float>()[1 * C + c]);
    EXPECT_TRUE(std::isnan(y[1 * C + c]));
    EXPECT_EQ(y[2 * C + c], wte.data<float>()[3 * C + c]);
    EXPECT_TRUE(std::isnan(y[3 * C + c]));
  }
  Tensor dy = random_host(rng, {1, T, C});
  Tensor gdwte = Tensor::zeros({V, C}, DType::F32, gpu());
  ops::embedding_backward(gdwte, nullptr, upload(dy, DType::F32), upload_raw(ids), T);
  std::vector<double> g = download(gdwte);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < C; ++c) {
      const double want = v == 1 ? dy.data<float>()[0 * C + c] : (v == 3 ? dy.data<float>()[2 * C + c] : 0.0);
      ASSERT_EQ(g[v * C + c], want) << "row " << v;
    }
}

}  // namespace
}  // namespace tetra::gputest
