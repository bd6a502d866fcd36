// attention_bench: times causal attention forward and backward on the GPU, cuDNN fused attention
// (bf16) against the reference kernels (bf16 and fp32), one JSON object per line:
//   {"impl": "cudnn", "dtype": "bf16", "shape": {"B": 4, "T": 1024, "H": 12, "Hkv": 12, "D": 64},
//    "ms_fwd": ..., "ms_bwd": ..., "tflops_fwd": ..., "tflops_bwd": ..., "floor_ms_fwd": ...,
//    "floor_ms_bwd": ..., "plan_fwd": "...", ...}
// FLOPs count the causal half of the matmuls: forward 2 matmuls = 2·B·H·T²·D, backward 5 matmuls
// (S recomputed, dV, dP, dQ, dK) = 5·B·H·T²·D; grouped-query heads (Hkv < H) do the same FLOPs. The
// floors are those FLOPs at the bf16 dense rate measured on an H200 (790 TFLOP/s); the bytes (qkv,
// out, lse, dout, dqkv: a few tens of MB) are far below the FLOP time at these shapes.
// Usage: attention_bench [--iters N] [--tune] [--cudnn-only] [B T H Hkv D ...]
//   default shapes: GPT-2 124M and 1.3B, and Llama 3.2 1B (B 4, T 4096, H 32, Hkv 8, D 64)
// --tune times every engine config cuDNN offers and keeps the fastest (TETRA_ATTENTION_TUNE=verbose);
// --cudnn-only skips the (slow) reference kernels.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/random.h"
#include "runtime/stream.h"

namespace {

using tetra::Device;
using tetra::DType;
using tetra::Tensor;

struct Shape {
  int64_t B, T, H, Hkv, D;
};

constexpr double kBf16DenseFlops = 790e12;  // measured on an H200 (cuBLASLt, large bf16 GEMM)

// A device tensor of N(0, 1) values (never exactly zero), fp32 or bf16.
Tensor random_device(const tetra::Shape& shape, DType dtype, tetra::Rng& rng, Device dev) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  std::vector<float> f(static_cast<size_t>(t.numel()));
  for (float& v : f) {
    v = static_cast<float>(rng.normal());
    if (v == 0.0f) v = 1e-3f;
  }
  std::vector<uint16_t> bits;
  const void* src = f.data();
  if (dtype == DType::BF16) {
    bits.resize(f.size());
    for (size_t i = 0; i < f.size(); ++i) bits[i] = tetra::float_to_bf16(f[i]);
    src = bits.data();
  }
  if (cudaMemcpy(t.data_ptr(), src, t.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)
    throw std::runtime_error("attention_bench: copying the inputs to the GPU failed");
  return t;
}

// Milliseconds per call of f, averaged over `iters` calls after 3 warm-up calls.
template <class F>
double time_ms(Device dev, int iters, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  tetra::Event start(dev), stop(dev);
  start.record();
  for (int i = 0; i < iters; ++i) f();
  stop.record();
  return stop.elapsed_ms(start) / iters;
}

nlohmann::json bench(const Shape& s, DType dtype, tetra::cuda::AttentionImpl impl, int iters, Device dev) {
  using namespace tetra::cuda;
  tetra::Rng rng(1234);
  Tensor qkv = random_device({s.B, s.T, (s.H + 2 * s.Hkv) * s.D}, dtype, rng, dev);
  Tensor dout = random_device({s.B, s.T, s.H * s.D}, dtype, rng, dev);
  Tensor out = Tensor::empty({s.B, s.T, s.H * s.D}, dtype, dev);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, dev);
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype, dev);
  const bool cudnn = impl == AttentionImpl::Cudnn;
  nlohmann::json j = {{"impl", attention_impl_name(impl)},
                      {"dtype", tetra::dtype_name(dtype)},
                      {"shape", {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"Hkv", s.Hkv}, {"D", s.D}}}};
  try {
    auto fwd = [&] {
      if (cudnn)
        attention_forward_cudnn(out, lse, qkv, s.H, s.Hkv);
      else
        attention_forward_reference(out, lse, qkv, s.H, s.Hkv);
    };
    auto bwd = [&] {
      if (cudnn)
        attention_backward_cudnn(dqkv, dout, qkv, out, lse, s.H, s.Hkv);
      else
        attention_backward_reference(dqkv, dout, qkv, out, lse, s.H, s.Hkv);
    };
    const double ms_fwd = time_ms(dev, iters, fwd);
    const double ms_bwd = time_ms(dev, iters, bwd);
    const double bhttd = static_cast<double>(s.B) * s.H * s.T * s.T * s.D;
    j["ms_fwd"] = ms_fwd;
    j["ms_bwd"] = ms_bwd;
    j["tflops_fwd"] = 2.0 * bhttd / (ms_fwd * 1e-3) / 1e12;
    j["tflops_bwd"] = 5.0 * bhttd / (ms_bwd * 1e-3) / 1e12;
    j["floor_ms_fwd"] = 2.0 * bhttd / kBf16DenseFlops * 1e3;
    j["floor_ms_bwd"] = 5.0 * bhttd / kBf16DenseFlops * 1e3;
    if (cudnn) {
      j["plan_fwd"] = cudnn_attention_plan_info(qkv, s.H, s.Hkv, false);
      j["plan_bwd"] = cudnn_attention_plan_info(qkv, s.H, s.Hkv, true);
    }
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  bool cudnn_only = false;
  std::vector<Shape> shapes;
  std::vector<int64_t> nums;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--tune") == 0) {
      tetra::cuda::set_attention_tuning(tetra::cuda::AttentionTuning::Verbose);
    } else if (std::strcmp(argv[i], "--cudnn-only") == 0) {
      cudnn_only = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: attention_bench [--iters N] [--tune] [--cudnn-only] [B T H Hkv D ...]\n");
      return 0;
    } else {
      nums.push_back(std::atoll(argv[i]));
    }
  }
  if (nums.size() % 5 != 0 || iters <= 0) {
    std::fprintf(stderr,
                 "attention_bench: give shapes as groups of five numbers B T H Hkv D (Hkv dividing H), and "
                 "--iters N > 0\n");
    return 2;
  }
  for (size_t i = 0; i < nums.size(); i += 5) {
    shapes.push_back({nums[i], nums[i + 1], nums[i + 2], nums[i + 3], nums[i + 4]});
    const Shape& s = shapes.back();
    if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.D <= 0 || s.Hkv <= 0 || s.H % s.Hkv != 0) {
      std::fprintf(stderr, "attention_bench: shape %zu: B, T, H, Hkv, D must be > 0 and Hkv must divide H\n",
                   i / 5 + 1);
      return 2;
    }
  }
  if (shapes.empty())
    shapes = {{4, 1024, 12, 12, 64}, {8, 1024, 12, 12, 64}, {1, 2048, 16, 16, 128}, {4, 2048, 16, 16, 128},
              {4, 4096, 32, 8, 64}};
  if (!tetra::cuda_available()) {
    std::cout << nlohmann::json{{"error", "no GPU visible"}}.dump() << std::endl;
    return 1;
  }
  const Device dev = Device::cuda(0);
  for (const Shape& s : shapes) {
    std::cout << bench(s, DType::BF16, tetra::cuda::AttentionImpl::Cudnn, iters, dev).dump() << std::endl;
    if (cudnn_only) continue;
    std::cout << bench(s, DType::BF16, tetra::cuda::AttentionImpl::Reference, iters, dev).dump() << std::endl;
    std::cout << bench(s, DType::F32, tetra::cuda::AttentionImpl::Reference, iters, dev).dump() << std::endl;
  }
  return 0;
}
