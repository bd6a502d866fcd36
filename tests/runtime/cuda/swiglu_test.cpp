// CUDA SwiGLU against the CPU twin (runtime/cpu/swiglu.cpp) on a fused gate/up projection
// gu[N, 2F] = [gate | up]: Llama 3.2 1B's width F = 8192 (a few tokens' worth: the CPU twin is the slow
// side), the vector path (F % 8 == 0), the element-wise path, unaligned views, fp32 and bf16 and mixed
// dtypes; forward h[N, F] and backward d_gate_up[N, 2F], outputs poisoned with NaN first and within the
// dtype's norm-wise and worst-element tolerances (tests/runtime/cuda/gpu_test_util.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

// act: the dtype of gate_up and dh; out: the dtype of h and d_gate_up.
void check_swiglu(int64_t N, int64_t F, DType act, DType out, uint64_t seed) {
  Rng rng(seed);
  const std::string what = "N " + std::to_string(N) + ", F " + std::to_string(F) + ", inputs " +
                           dtype_name(act) + ", outputs " + dtype_name(out);
  const Tensor gu = representable(random_host(rng, {N, 2 * F}, 2.0), act);
  const Tensor dh = representable(random_host(rng, {N, F}), act);
  Tensor h = Tensor::empty({N, F}, DType::F32), dgu = Tensor::empty({N, 2 * F}, DType::F32);
  ops::swiglu_forward(h, gu);
  ops::swiglu_backward(dgu, dh, gu);
  const DType tol_type = act == DType::BF16 || out == DType::BF16 ? DType::BF16 : DType::F32;

  Tensor ggu = upload(gu, act), gdh = upload(dh, act);
  Tensor gh = poisoned({N, F}, out), gdgu = poisoned({N, 2 * F}, out);
  ops::swiglu_forward(gh, ggu);
  expect_close(gh, h, tol_type, "forward h, " + what);
  ops::swiglu_backward(gdgu, gdh, ggu);
  expect_close(gdgu, dgu, tol_type, "backward d_gate_up, " + what);
  EXPECT_EQ(rel_error(ggu, gu), 0.0) << "gate_up unchanged, " << what;
}

TEST(GpuSwiGlu, Llama1bWidth) {
  TETRA_REQUIRE_GPU();
  check_swiglu(64, 8192, DType::BF16, DType::BF16, 1);
  check_swiglu(16, 8192, DType::F32, DType::F32, 2);
}

TEST(GpuSwiGlu, VectorAndElementwisePaths) {
  TETRA_REQUIRE_GPU();
  check_swiglu(1000, 1000, DType::BF16, DType::BF16, 3);  // F % 8 == 0
  check_swiglu(333, 13, DType::BF16, DType::BF16, 4);     // F % 8 != 0: one element per thread
  check_swiglu(77, 24, DType::F32, DType::F32, 5);
  check_swiglu(1, 4, DType::F32, DType::F32, 6);
  check_swiglu(129, 64, DType::BF16, DType::F32, 7);  // bf16 activations, fp32 outputs
  // Several rows a block (F / 8 groups a multiple of 32 dividing the block: 4 and 8 rows; the row
  // counts leave a partial last pass) and a whole block a row (F / 8 = 256).
  check_swiglu(1003, 512, DType::BF16, DType::BF16, 9);
  check_swiglu(257, 256, DType::BF16, DType::BF16, 10);
  check_swiglu(65, 2048, DType::BF16, DType::BF16, 11);
}

// Views at an 8-byte offset into a buffer: not 16-byte aligned, so the vector path must step aside.
TEST(GpuSwiGlu, UnalignedViews) {
  TETRA_REQUIRE_GPU();
  const int64_t N = 100, F = 256;
  const DType dt = DType::BF16;
  Rng rng(8);
  const Tensor gu = representable(random_host(rng, {N, 2 * F}, 2.0), dt);
  const Tensor dh = representable(random_host(rng, {N, F}), dt);
  Tensor h = Tensor::empty({N, F}, DType::F32), dgu = Tensor::empty({N, 2 * F}, DType::F32);
  ops::swiglu_forward(h, gu);
  ops::swiglu_backward(dgu, dh, gu);
  auto unaligned = [&](const Tensor& host) {  // 4 bf16 = 8 bytes in
    Tensor buf = Tensor::zeros({host.numel() + 4}, DType::F32);
    std::memcpy(buf.data<float>() + 4, host.data<float>(), host.nbytes());
    return upload(buf, dt).slice_flat(4, host.shape());
  };
  Tensor ggu = unaligned(gu), gdh = unaligned(dh), gh = unaligned(h), gdgu = unaligned(dgu);
  poison(gh);
  poison(gdgu);
  ops::swiglu_forward(gh, ggu);
  expect_close(gh, h, dt, "unaligned forward");
  ops::swiglu_backward(gdgu, gdh, ggu);
  expect_close(gdgu, dgu, dt, "unaligned backward");
}

// The amax outputs (ops.h, FP8 tensorwise casts): the largest |value| as stored (bf16-rounded for a
// bf16 output), bit for bit against the downloaded output, on the vector and element paths; and a
// Tensorwise cast given it writes the bytes of the cast that measures the output itself.
TEST(GpuSwiGlu, AmaxOutputsAreTheLargestStoredValue) {
  TETRA_REQUIRE_GPU();
  uint64_t seed = 20;
  for (DType dt : {DType::BF16, DType::F32})
    for (int64_t F : {int64_t{1024}, int64_t{13}}) {
      const int64_t N = 96;
      Rng rng(seed++);
      const std::string what = std::string(dtype_name(dt)) + " F " + std::to_string(F);
      Tensor ggu = upload(random_host(rng, {N, 2 * F}, 3.0), dt), gdh = upload(random_host(rng, {N, F}), dt);
      Tensor gh = poisoned({N, F}, dt), gdgu = poisoned({N, 2 * F}, dt);
      Tensor h_amax = Tensor::empty({1}, DType::U32, gpu()), d_amax = Tensor::empty({1}, DType::U32, gpu());
      poison(h_amax);
      poison(d_amax);
      ops::swiglu_forward(gh, ggu, &h_amax);
      ops::swiglu_backward(gdgu, gdh, ggu, &d_amax);
      auto largest = [](const Tensor& dev) {
        uint32_t m = 0;
        for (double v : download(dev)) m = std::max(m, std::bit_cast<uint32_t>(std::fabs(static_cast<float>(v))));
        return m;
      };
      auto bits = [](const Tensor& amax) { return *static_cast<const uint32_t*>(download_raw(amax).data_ptr()); };
      EXPECT_EQ(bits(h_amax), largest(gh)) << what << ": forward";
      EXPECT_EQ(bits(d_amax), largest(gdgu)) << what << ": backward";
      Tensor q1 = Tensor::empty({N, F}, DType::F8E4M3, gpu()), q2 = Tensor::empty({N, F}, DType::F8E4M3, gpu());
      Tensor s1 = Tensor::empty({1}, DType::F32, gpu()), s2 = Tensor::empty({1}, DType::F32, gpu());
      ops::fp8_quantize(q1, s1, gh, ops::Fp8Scaling::Tensorwise);
      ops::fp8_quantize(q2, s2, gh, ops::Fp8Scaling::Tensorwise, nullptr, nullptr, &h_amax);
      const Tensor b1 = download_raw(q1), b2 = download_raw(q2);
      EXPECT_EQ(std::memcmp(b1.data_ptr(), b2.data_ptr(), b1.nbytes()), 0) << what << ": codes";
      EXPECT_EQ(download(s1), download(s2)) << what << ": scale";
    }
}

TEST(GpuSwiGlu, RejectsBadArguments) {
  TETRA_REQUIRE_GPU();
  Tensor gu = Tensor::zeros({4, 16}, DType::BF16, gpu()), h = Tensor::zeros({4, 8}, DType::BF16, gpu());
  Tensor h_bad = Tensor::zeros({4, 16}, DType::BF16, gpu()), gu_odd = Tensor::zeros({4, 15}, DType::BF16, gpu());
  EXPECT_THROW(ops::swiglu_forward(h_bad, gu), Error);
  EXPECT_THROW(ops::swiglu_forward(h, gu_odd), Error);
  EXPECT_THROW(ops::swiglu_backward(gu, h, gu), Error);  // d_gate_up over gate_up
}

}  // namespace
}  // namespace tetra::gputest
