// Helpers of the GPU micro-benchmarks (tetra_gemm_bench, tetra_llama_bench, tetra_moe_bench, the FP8
// GEMM and cast benches: programs, not tests): the GPU check and the device line they start with,
// large random device tensors, event timing of one call, FP8 scale shapes, the JSON line each result
// is printed as, and main()'s error handling. All on cuda:0, on the current stream.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/device.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace tetra::bench {

inline Device gpu() { return Device::cuda(0); }

// Makes cuda:0 current: false, with "PROGRAM: no GPU" on stderr, where there is none.
inline bool use_gpu(const char* program) {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "%s: no GPU\n", program);
    return false;
  }
  cuda::set_device(gpu());
  return true;
}

// A device tensor of N(0, scale²) values: a block of up to 2^20 values made on the host, uploaded
// and repeated on the device to fill the tensor (logits run to billions of elements). nonzero: a
// value that comes out 0 becomes scale · 1e-3.
inline Tensor random_device(const Shape& shape, DType dt, double scale, uint64_t seed, bool nonzero = false) {
  Tensor d = Tensor::empty(shape, dt, gpu());
  const int64_t n = d.numel(), block_n = std::min<int64_t>(n, int64_t{1} << 20);
  if (n == 0) return d;
  Rng rng(seed);
  Tensor host = Tensor::empty({block_n}, DType::F32);
  float* p = host.data<float>();
  for (int64_t i = 0; i < block_n; ++i) {
    p[i] = static_cast<float>(scale * rng.normal());
    if (nonzero && p[i] == 0.0f) p[i] = static_cast<float>(scale * 1e-3);
  }
  Tensor block = Tensor::empty({block_n}, dt, gpu());
  ops::copy(block, host);
  const size_t elem = dtype_size(dt);
  for (int64_t at = 0; at < n; at += block_n) {
    const int64_t len = std::min(block_n, n - at);
    cuda::copy_bytes(static_cast<char*>(d.data_ptr()) + at * static_cast<int64_t>(elem), gpu(), block.data_ptr(),
                     gpu(), static_cast<size_t>(len) * elem, /*blocking=*/false);
  }
  device_synchronize(gpu());
  return d;
}

// Milliseconds per call of f on the current stream: 3 warm-up calls, then `reps` timed by events.
// settle_first: the first warm-up call is followed by a device synchronize (GEMM tuning, plan
// building), so that the timed calls start on an idle device.
inline double time_ms(const std::function<void()>& f, int reps, bool settle_first = false) {
  if (settle_first) {
    f();
    device_synchronize(gpu());
  }
  for (int i = settle_first ? 1 : 0; i < 3; ++i) f();
  Event start(gpu()), stop(gpu());
  start.record();
  for (int i = 0; i < reps; ++i) f();
  stop.record();
  stop.synchronize();
  return static_cast<double>(stop.elapsed_ms(start)) / reps;
}

// The scale shape fp8_quantize writes for x [rows, cols] (runtime/fp8_cast_shape.h).
inline Shape fp8_scale_shape(ops::Fp8Scaling s, int64_t rows, int64_t cols) { return tetra::fp8_scale_shape(s, rows, cols); }

// One result: a JSON object on a line of stdout, flushed.
inline void print(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The line a benchmark prints first: the run's options (tokens, reps, …) with {"bench": "device"},
// the GPU's name and its SM count; false where the device properties cannot be read.
inline bool print_device(nlohmann::json options) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  options["bench"] = "device";
  options["name"] = prop.name;
  options["sms"] = prop.multiProcessorCount;
  print(options);
  return true;
}

// main() of a benchmark: run(argc, argv)'s exit code; an exception ends the program with
// "PROGRAM: what" on stderr and exit code 1.
inline int run_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace tetra::bench
