// CUDA RoPE against the CPU twin (runtime/cpu/rope.cpp), in place on a fused qkv [B, T, (H + 2·Hkv)·D]:
// Llama 3.2 1B's shape (B 4, T 4096, 32 query and 8 key/value heads of 64, theta 500000), multi-head,
// multi-query, the element-wise path (D/2 % 8 != 0) and D = 128; with Llama 3.2's llama3 rope scaling
// and with linear scaling (the scaled inverse frequencies are the host's, shared by both kernels);
// fp32 and bf16; forward and backward.
// Inputs random (never zero), the device copy of qkv being the output. Beyond the norm-wise and
// worst-element tolerances: v must come back bit-identical, and in bf16 every element must be within
// one bf16 unit of the CPU's fp32 result — the angles are fp32 on both sides (the contract of
// runtime/ops.h), so only the final rounding to bf16 may differ.
#include <cmath>
#include <sstream>
#include <string>

#include "runtime/cpu/cpu_ops.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

struct RopeShape {
  int64_t B, T, H, Hkv, D;
  float theta;
  RopeScaling scaling{};
  Rope rope() const { return Rope(theta, scaling); }
  int64_t width() const { return (H + 2 * Hkv) * D; }
  std::string str() const {
    std::ostringstream os;
    os << "[B=" << B << ", T=" << T << ", H=" << H << ", Hkv=" << Hkv << ", D=" << D << ", theta=" << theta << "]";
    return os.str();
  }
};

// Every element of `out` (device, bf16) within one bf16 unit in the last place of the CPU's fp32 `ref`:
// |out − ref| ≤ 2⁻⁸·|ref| (round to nearest is within half of that), plus 1e-5 for results that cancel
// to near zero (fp32 rounding of the rotation of inputs of a few units is ~1e-6; an angle rounded to
// bf16 would be off by ~1e-3 of the inputs).
void expect_within_one_bf16_ulp(const std::vector<double>& out, const std::vector<double>& ref,
                                const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!(std::fabs(out[i] - ref[i]) <= std::ldexp(std::fabs(ref[i]), -8) + 1e-5) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << out[i] << ", the CPU's fp32 value " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": elements more than one bf16 unit from the CPU twin";
}

void check_rope(const RopeShape& s, uint64_t seed) {
  Rng rng(seed);
  const Shape shape{s.B, s.T, s.width()};
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::string what = s.str() + " " + dtype_name(dt);
    const Tensor x = representable(random_host(rng, shape, 1.5), dt);
    // Forward from position 0 (training), forward from position 37 (decoding after a cached prefix),
    // backward.
    for (const int64_t position : {int64_t{0}, int64_t{37}, int64_t{-1}}) {
      const bool backward = position < 0;
      Tensor ref = Tensor::empty(shape, DType::F32);
      ops::copy(ref, x);
      if (backward)
        cpu::rope_backward(ref, s.H, s.Hkv, s.rope());
      else
        cpu::rope_forward(ref, s.H, s.Hkv, s.rope(), position);
      Tensor g = upload(x, dt);
      if (backward)
        ops::rope_backward(g, s.H, s.Hkv, s.rope());
      else
        ops::rope_forward(g, s.H, s.Hkv, s.rope(), position);
      const std::string w = what + (backward ? " backward" : " forward at " + std::to_string(position));
      const std::vector<double> out = download(g), want = values(ref);
      expect_close(out, want, dt, w);
      if (dt == DType::BF16) expect_within_one_bf16_ulp(out, want, w);
      // v is untouched: the same bits as the input.
      const std::vector<double> in = values(x);
      int64_t changed = 0;
      for (int64_t bt = 0; bt < s.B * s.T; ++bt)
        for (int64_t c = (s.H + s.Hkv) * s.D; c < s.width(); ++c) {
          const size_t i = static_cast<size_t>(bt * s.width() + c);
          changed += out[i] != in[i];
        }
      EXPECT_EQ(changed, 0) << w << ": v elements changed";
    }
  }
}

TEST(GpuRope, Llama1bShape) {
  TETRA_REQUIRE_GPU();
  check_rope({4, 4096, 32, 8, 64, 500000.0f}, 1);
}

TEST(GpuRope, GroupRatiosAndHeadDims) {
  TETRA_REQUIRE_GPU();
  check_rope({2, 300, 12, 12, 64, 10000.0f}, 2);  // multi-head (GPT-style qkv)
  check_rope({3, 129, 16, 1, 64, 500000.0f}, 3);  // multi-query
  check_rope({2, 64, 8, 2, 128, 1000000.0f}, 4);  // D = 128
  check_rope({1, 4096, 4, 2, 32, 500000.0f}, 5);  // D/2 = 16: two vectors per half
}

// Rope scaling: Llama 3.2's llama3 (factor 32, low 1, high 4, original context 8192) at the 1B shape
// (its 32 frequencies fall in all three bands), on the element-wise path, and linear.
TEST(GpuRope, ScaledFrequencies) {
  TETRA_REQUIRE_GPU();
  const RopeScaling llama3{.type = RopeScaling::Type::Llama3, .factor = 32, .low_freq_factor = 1,
                           .high_freq_factor = 4, .original_max_position_embeddings = 8192};
  const RopeScaling linear{.type = RopeScaling::Type::Linear, .factor = 4};
  check_rope({4, 4096, 32, 8, 64, 500000.0f, llama3}, 10);
  check_rope({2, 33, 5, 5, 12, 10000.0f, llama3}, 11);
  check_rope({2, 300, 12, 4, 64, 10000.0f, linear}, 12);
  // The scaling changes the result (the low frequencies turn slower): not the plain rotation.
  Rng rng(13);
  const RopeShape s{1, 4096, 4, 2, 64, 500000.0f, llama3};
  const Tensor x = random_host(rng, {s.B, s.T, s.width()});
  Tensor scaled = upload(x, DType::F32), plain = upload(x, DType::F32);
  ops::rope_forward(scaled, s.H, s.Hkv, s.rope());
  ops::rope_forward(plain, s.H, s.Hkv, s.theta);
  EXPECT_GT(rel_error(download(scaled), download(plain)), 1e-3);
}

// D/2 % 8 != 0: the element-wise path (and odd head counts that leave a partial group of heads).
TEST(GpuRope, ElementwisePath) {
  TETRA_REQUIRE_GPU();
  check_rope({2, 33, 5, 5, 12, 10000.0f}, 6);
  check_rope({1, 17, 9, 3, 6, 10000.0f}, 7);
  check_rope({1, 1, 3, 1, 2, 10000.0f}, 8);
}

// The backward is the forward's inverse (a rotation's transpose): forward then backward on the GPU
// gives the input back to fp32 rounding.
TEST(GpuRope, BackwardInvertsForward) {
  TETRA_REQUIRE_GPU();
  Rng rng(9);
  const RopeShape s{2, 1024, 32, 8, 64, 500000.0f};
  const Tensor x = random_host(rng, {s.B, s.T, s.width()});
  Tensor g = upload(x, DType::F32);
  ops::rope_forward(g, s.H, s.Hkv, s.theta);
  EXPECT_GT(rel_error(g, x), 1e-2) << "the forward must rotate";
  ops::rope_backward(g, s.H, s.Hkv, s.theta);
  expect_close(g, x, DType::F32, "forward then backward");
}

TEST(GpuRope, RejectsBadArguments) {
  TETRA_REQUIRE_GPU();
  Tensor qkv = Tensor::zeros({2, 8, 48}, DType::BF16, gpu());  // H 4, Hkv 2, D 6 or H 2, Hkv 1, D 12
  EXPECT_THROW(ops::rope_forward(qkv, 4, 3, 10000.0f), Error);  // Hkv does not divide H
  EXPECT_THROW(ops::rope_forward(qkv, 5, 5, 10000.0f), Error);  // 48 is not 15·D
  EXPECT_THROW(ops::rope_forward(qkv, 4, 2, 0.0f), Error);      // theta
  EXPECT_THROW(ops::rope_forward(qkv, 4, 2, Rope(10000.0f, {.type = RopeScaling::Type::Llama3, .factor = 8,
                                                            .low_freq_factor = 4, .high_freq_factor = 1})),
               Error);  // high_freq_factor not above low_freq_factor
  Tensor odd = Tensor::zeros({2, 8, 30}, DType::BF16, gpu());    // H 2, Hkv 2, D 5
  EXPECT_THROW(ops::rope_backward(odd, 2, 2, 10000.0f), Error);
}

}  // namespace
}  // namespace tetra::gputest
