// FP8 GEMM micro-benchmark (a program, not a test): ops::fp8_gemm against the bf16 GEMM the model
// uses today (ops::linear_forward, y = x·wᵀ) at 8192³ and at Llama 3.2 1B's dense-layer shapes
// (16384 tokens, d 2048, q+k+v 3072, SwiGLU 2×8192), for each FP8 recipe's operand pair, and the
// casts that make the operands (ops::fp8_quantize: GB/s against the bytes they move). One JSON line
// per measurement: TFLOP/s = 2·M·N·K / time; the dense FP8 peak of an H200 is 1,979 TFLOP/s on paper.
//
//   tetra_fp8_gemm_bench [--reps R]
#include <cstdlib>
#include <cstring>
#include <string>

#include "scripts/bench/bench_util.h"

namespace tetra {
namespace {

using bench::gpu;
using bench::print;
using bench::random_device;
using bench::time_ms;
using S = ops::Fp8Scaling;

struct Shape3 {
  const char* name;
  int64_t m, n, k;  // y[m, n] = a[m, k] · b[n, k]ᵀ
};

const Shape3 kShapes[] = {{"square-8192", 8192, 8192, 8192},
                          {"llama1b-qkv", 16384, 3072, 2048},
                          {"llama1b-o", 16384, 2048, 2048},
                          {"llama1b-gate-up", 16384, 16384, 2048},
                          {"llama1b-down", 16384, 2048, 8192}};

struct Operand {
  Tensor x, q, scale;
  S scaling;
};

Operand make_operand(int64_t rows, int64_t cols, S scaling, uint64_t seed) {
  Operand o{random_device({rows, cols}, DType::BF16, 1.0, seed), Tensor::empty({rows, cols}, DType::F8E4M3, gpu()),
            Tensor::empty(bench::fp8_scale_shape(scaling, rows, cols), DType::F32, gpu()), scaling};
  ops::fp8_quantize(o.q, o.scale, o.x, scaling);
  return o;
}

void bench_shape(const Shape3& s, int reps) {
  const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  Tensor y = Tensor::empty({s.m, s.n}, DType::BF16, gpu());
  {
    Tensor x = random_device({s.m, s.k}, DType::BF16, 1.0, 1), w = random_device({s.n, s.k}, DType::BF16, 1.0, 2);
    const double ms = time_ms([&] { ops::linear_forward(y, x, w, Tensor()); }, reps, true);
    print({{"bench", "gemm"}, {"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"type", "bf16"},
           {"ms", ms}, {"tflops", flop / ms / 1e9}});
  }
  const std::pair<const char*, std::pair<S, S>> recipes[] = {{"fp8-tensorwise", {S::Tensorwise, S::Tensorwise}},
                                                             {"fp8-1x128·128x128", {S::Rows1x128, S::Blocks128}},
                                                             {"fp8-1x128·1x128", {S::Rows1x128, S::Rows1x128}}};
  for (const auto& [name, scalings] : recipes) {
    Operand a = make_operand(s.m, s.k, scalings.first, 3), b = make_operand(s.n, s.k, scalings.second, 4);
    const double ms = time_ms([&] { ops::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling); }, reps, true);
    const double cast_ms = time_ms([&] { ops::fp8_quantize(a.q, a.scale, a.x, a.scaling); }, reps);
    // The cast reads x (bf16) and writes q: 3 bytes per element; Tensorwise reads x twice (its amax
    // precedes every code): 5. tetra_fp8_cast_bench measures the casts alone, with q_t too.
    const double cast_bytes = (a.scaling == S::Tensorwise ? 5.0 : 3.0) * static_cast<double>(s.m) * static_cast<double>(s.k);
    print({{"bench", "gemm"}, {"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"type", name},
           {"ms", ms}, {"tflops", flop / ms / 1e9}, {"cast_a_ms", cast_ms}, {"cast_a_gbs", cast_bytes / cast_ms / 1e6}});
    if (a.scaling != S::Tensorwise) continue;
    // The tensorwise recipe's forward: the same GEMM with Hopper's fast accumulation.
    const double fast_ms = time_ms(
        [&] { ops::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling, false, /*fast_accum=*/true); }, reps, true);
    print({{"bench", "gemm"}, {"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"type", "fp8-tensorwise-fast-accum"},
           {"ms", fast_ms}, {"tflops", flop / fast_ms / 1e9}});
  }
}

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: tetra_fp8_gemm_bench [--reps R]\n");
      return 2;
    }
  }
  if (!bench::use_gpu("tetra_fp8_gemm_bench")) return 1;
  if (!bench::print_device({{"reps", reps}})) return 1;
  for (const Shape3& s : kShapes) bench_shape(s, reps);
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::bench::run_main("tetra_fp8_gemm_bench", tetra::run, argc, argv); }
