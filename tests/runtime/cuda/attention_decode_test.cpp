// CUDA attention_decode against its CPU twin (runtime/cpu/attention_decode.cpp): a cache
// [B, T_max, (H + 2·Hkv)·D] of random rows (never zero) with `length` filled and Tq queries at its end,
// fp32 and bf16, out poisoned first. Shapes: Llama 3.2 1B's heads (32 / 8 of 64) one token after a
// 300-token prefix, a prefill of 17 queries, multi-head GPT-2 style, multi-query, D = 128 and an odd
// D (lanes partly idle), a single cached row. The CPU twin itself is checked against the last rows of
// attention_forward in tests/models/generation_test.cpp.
#include "runtime/cpu/cpu_ops.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

struct DecodeShape {
  int64_t B, T_max, length, Tq, H, Hkv, D;
};

void check_decode(const DecodeShape& s, uint64_t seed) {
  Rng rng(seed);
  const Shape cache_shape{s.B, s.T_max, (s.H + 2 * s.Hkv) * s.D};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor cache = representable(random_host(rng, cache_shape, 1.5), dt);
    Tensor ref = Tensor::empty({s.B, s.Tq, s.H * s.D}, DType::F32);
    cpu::attention_decode(ref, cache, s.length, s.H, s.Hkv);
    Tensor out = poisoned({s.B, s.Tq, s.H * s.D}, dt);
    ops::attention_decode(out, upload(cache, dt), s.length, s.H, s.Hkv);
    expect_close(out, ref, dt,
                 "attention_decode " + std::string(name(dt)) + " length " + std::to_string(s.length) + " Tq " +
                     std::to_string(s.Tq) + " H " + std::to_string(s.H) + "/" + std::to_string(s.Hkv) + " D " +
                     std::to_string(s.D));
  }
}

TEST(GpuAttentionDecode, AgainstCpuTwin) {
  TETRA_REQUIRE_GPU();
  check_decode({1, 512, 301, 1, 32, 8, 64}, 1);   // Llama 3.2 1B, one new token
  check_decode({1, 64, 17, 17, 32, 8, 64}, 2);    // the prompt's pass
  check_decode({2, 40, 33, 3, 12, 12, 64}, 3);    // multi-head (GPT-2), two sequences
  check_decode({1, 100, 99, 2, 16, 1, 128}, 4);   // multi-query, D = 128
  check_decode({1, 20, 20, 5, 6, 3, 40}, 5);      // D not a multiple of 32
  check_decode({1, 8, 1, 1, 4, 2, 32}, 6);        // one cached row
}

}  // namespace
}  // namespace tetra::gputest
