// FP8 cast micro-benchmark (a program, not a test): ops::fp8_quantize of bf16 x [M, K] to E4M3 for
// each scaling, with and without the transposed copy (q_t and its scales), at Llama 3.2 1B's
// activation shapes [16384, 2048] and [16384, 8192] and at [8192, 8192]. One JSON line per
// measurement: the bytes the cast must move (x read, twice for Tensorwise, whose amax precedes every
// code; q, q_t and the scales written), the time per call by CUDA events, GB/s effective = bytes /
// time, and the floor: the same bytes at 4.3 TB/s (an H200's HBM). Tensorwise with q_t runs on both
// kernels (TETRA_FP8_DENSE_CAST=tile, the 128 × 128 tiles; auto, the transposing kernel of the grouped
// casts), each also with its amax given (as the models' producers measure it: x read once).
//
//   tetra_fp8_cast_bench [--reps R]
#include <cstdlib>
#include <cstring>

#include "scripts/bench/bench_util.h"

namespace tetra {
namespace {

using bench::gpu;
using bench::print;
using S = ops::Fp8Scaling;

constexpr double kHbmBytesPerSecond = 4.3e12;

const char* scaling_name(S s) {
  return s == S::Tensorwise ? "tensorwise" : s == S::Rows1x128 ? "1x128" : "128x128";
}

// kernel: "tile" or "auto" (TETRA_FP8_DENSE_CAST); amax: given (x read once) or measured here.
void bench_cast(const Tensor& x, S scaling, bool transposed, int reps, const char* kernel = "auto",
                const Tensor* amax = nullptr) {
  setenv("TETRA_FP8_DENSE_CAST", kernel, 1);
  const int64_t m = x.dim(0), k = x.dim(1);
  Tensor q = Tensor::empty({m, k}, DType::F8E4M3, gpu());
  Tensor scale = Tensor::empty(bench::fp8_scale_shape(scaling, m, k), DType::F32, gpu());
  Tensor q_t, scale_t;
  if (transposed) {
    q_t = Tensor::empty({k, m}, DType::F8E4M3, gpu());
    scale_t = Tensor::empty(bench::fp8_scale_shape(scaling, k, m), DType::F32, gpu());
  }
  const double ms = bench::time_ms(
      [&] {
        ops::fp8_quantize(q, scale, x, scaling, transposed ? &q_t : nullptr, transposed ? &scale_t : nullptr, amax);
      },
      reps, true);
  const double x_reads = scaling == S::Tensorwise && !amax ? 2.0 : 1.0;
  double bytes = x_reads * static_cast<double>(x.nbytes()) + static_cast<double>(q.nbytes() + scale.nbytes());
  if (transposed) bytes += static_cast<double>(q_t.nbytes() + scale_t.nbytes());
  const double floor_us = bytes / kHbmBytesPerSecond * 1e6;
  print({{"bench", "fp8_cast"}, {"m", m}, {"k", k}, {"x", "bf16"}, {"q", "e4m3"}, {"scaling", scaling_name(scaling)},
         {"transposed", transposed}, {"kernel", kernel}, {"amax_given", amax != nullptr}, {"us", ms * 1e3}, {"bytes", bytes}, {"gbs", bytes / ms / 1e6},
         {"floor_us", floor_us}, {"of_floor", floor_us / (ms * 1e3)}});
}

int run(int argc, char** argv) {
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tetra_fp8_cast_bench [--reps R]  (R > 0)\n");
      return 2;
    }
  }
  if (!bench::use_gpu("tetra_fp8_cast_bench")) return 1;
  if (!bench::print_device({{"reps", reps}, {"hbm_tbs", kHbmBytesPerSecond / 1e12}})) return 1;
  const std::pair<int64_t, int64_t> shapes[] = {{16384, 2048}, {16384, 8192}, {8192, 8192}};
  for (const auto& [m, k] : shapes) {
    const Tensor x = bench::random_device({m, k}, DType::BF16, 1.0, 1);
    for (S scaling : {S::Tensorwise, S::Rows1x128, S::Blocks128})
      for (bool transposed : {false, true}) bench_cast(x, scaling, transposed, reps);
    Tensor amax = Tensor::empty({1}, DType::U32, gpu());
    ops::fp8_amax(amax, x);
    for (const char* kernel : {"tile", "auto"}) {
      bench_cast(x, S::Tensorwise, true, reps, kernel);
      bench_cast(x, S::Tensorwise, true, reps, kernel, &amax);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::bench::run_main("tetra_fp8_cast_bench", tetra::run, argc, argv); }
