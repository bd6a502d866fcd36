// GEMM micro-benchmark (a program, not a test): every dense-layer GEMM of a GPT-2 124M and a GPT
// 1.3B (d = 2048) training step, through the op library as the model calls it — forward with its
// epilogue (bias, bias + GELU aux, bias + residual), backward input (and through the GELU, fused),
// backward weight with fp32 (accumulating, beta = 1) and bf16 outputs and the bias gradient — timed
// with cuBLASLt's heuristic choice (TETRA_GEMM_TUNE=0) and autotuned. Then LayerNorm forward and
// backward at both widths, with the bytes they move, and the bias-gradient column sum at six widths.
// Prints one JSON object per line (stdout), then a summary line per model: the step's GEMM time (all
// layers) heuristic vs tuned.
//
//   tetra_gemm_bench [--tokens N] [--reps R] [--model gpt2-124m|gpt-1.3b|all]
//                    [--only gemm|layernorm|colsum|all] [--verbose]
//   (--verbose: the tuner's own per-problem lines on stderr)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/reduce.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"
#include "scripts/bench/bench_util.h"

namespace tetra {
namespace {

using bench::gpu;
using bench::print;
using bench::random_device;
using bench::time_ms;
using ops::Activation;

struct Options {
  int64_t tokens = 16 * 1024;
  int reps = 20;
  std::string model = "all";
  std::string only = "all";
  bool verbose = false;
};

struct Model {
  std::string name;
  int64_t d, vocab, layers;
};

const Model kModels[] = {{"gpt2-124m", 768, 50304, 12}, {"gpt-1.3b", 2048, 50304, 24}};

struct Result {
  double heuristic_ms = 0, tuned_ms = 0;
};

// f timed with the heuristic's algorithm, then tuned (the first tuned call, which tunes, is not timed).
Result time_both(const std::function<void()>& f, const Options& o) {
  Result r;
  cuda::set_gemm_tuning(cuda::GemmTuning::Off);
  r.heuristic_ms = time_ms(f, o.reps);
  cuda::set_gemm_tuning(o.verbose ? cuda::GemmTuning::Verbose : cuda::GemmTuning::On);
  f();
  device_synchronize(gpu());
  r.tuned_ms = time_ms(f, o.reps);
  return r;
}

struct Totals {
  double heuristic_ms = 0, tuned_ms = 0, flops = 0;
};

// One GEMM case: prints its line and adds it to the step totals `times` times (0: not part of the step).
void report(const Model& m, const std::string& layer, const std::string& op, const std::string& epilogue,
            const std::string& out, int64_t N, int64_t I, int64_t O, bool accumulate, const Result& r, int64_t times,
            Totals& totals) {
  const double flops = 2.0 * static_cast<double>(N) * static_cast<double>(I) * static_cast<double>(O);
  print({{"bench", "gemm"},
         {"model", m.name},
         {"layer", layer},
         {"op", op},
         {"epilogue", epilogue},
         {"tokens", N},
         {"in_features", I},
         {"out_features", O},
         {"inputs", "bf16"},
         {"output", out},
         {"accumulate", accumulate},
         {"ms_heuristic", r.heuristic_ms},
         {"tflops_heuristic", flops / (r.heuristic_ms * 1e-3) / 1e12},
         {"ms_tuned", r.tuned_ms},
         {"tflops_tuned", flops / (r.tuned_ms * 1e-3) / 1e12},
         {"speedup", r.heuristic_ms / r.tuned_ms},
         {"calls_per_step", times}});
  totals.heuristic_ms += r.heuristic_ms * static_cast<double>(times);
  totals.tuned_ms += r.tuned_ms * static_cast<double>(times);
  totals.flops += flops * static_cast<double>(times);
}

// The GEMMs of one linear layer [I → O]: forward variants, backward input, backward weight.
// step_forward: which forward variant the model runs ("bias", "bias+gelu_aux", "bias+residual", "none").
void bench_linear(const Model& m, const std::string& layer, int64_t I, int64_t O, bool bias,
                  const std::string& step_forward, int64_t layers, const Options& o, uint64_t seed, Totals& totals) {
  const int64_t N = o.tokens;
  const DType bf = DType::BF16, f32 = DType::F32;
  Tensor x = random_device({N, I}, bf, 1.0, seed);
  Tensor w = random_device({O, I}, bf, 1.0 / std::sqrt(static_cast<double>(I)), seed + 1);
  Tensor b = bias ? random_device({O}, bf, 0.1, seed + 2) : Tensor();
  Tensor dy = random_device({N, O}, bf, 1.0, seed + 3);
  Tensor y = Tensor::empty({N, O}, bf, gpu());
  auto times = [&](const std::string& variant) { return variant == step_forward ? layers : 0; };

  const std::string plain = bias ? "bias" : "none";
  report(m, layer, "forward", plain, "bf16", N, I, O, false,
         time_both([&] { ops::linear_forward(y, x, w, b); }, o), times(plain), totals);
  if (step_forward == "bias+gelu_aux") {
    Tensor pre = Tensor::empty({N, O}, bf, gpu());
    report(m, layer, "forward", "bias+gelu_aux", "bf16", N, I, O, false,
           time_both([&] { ops::linear_forward(y, x, w, b, Activation::Gelu, &pre); }, o), times("bias+gelu_aux"),
           totals);
  }
  if (step_forward == "bias+residual") {
    Tensor res = random_device({N, O}, bf, 1.0, seed + 4);
    report(m, layer, "forward", "bias+residual", "bf16", N, I, O, false,
           time_both([&] { ops::linear_forward(y, x, w, b, Activation::None, nullptr, &res); }, o), 0, totals);
    // In place, as a block would call it (y is the residual stream); the values grow by x·wᵀ + b per
    // call, which does not change the time.
    report(m, layer, "forward", "bias+residual(in place)", "bf16", N, I, O, false,
           time_both([&] { ops::linear_forward(res, x, w, b, Activation::None, nullptr, &res); }, o),
           times("bias+residual"), totals);
  }

  Tensor dx = Tensor::empty({N, I}, bf, gpu());
  report(m, layer, "backward_input", "none", "bf16", N, I, O, false,
         time_both([&] { ops::linear_backward_input(dx, dy, w, false); }, o), layers, totals);

  Tensor dw32 = Tensor::zeros({O, I}, f32, gpu()), db32 = Tensor::zeros({O}, f32, gpu());
  Tensor* db32p = bias ? &db32 : nullptr;
  report(m, layer, "backward_weight", bias ? "column_sum" : "none", "fp32", N, I, O, true,
         time_both([&] { ops::linear_backward_weight(dw32, db32p, dy, x, true); }, o), layers, totals);
  Tensor dw16 = Tensor::empty({O, I}, bf, gpu()), db16 = Tensor::empty({O}, bf, gpu());
  Tensor* db16p = bias ? &db16 : nullptr;
  report(m, layer, "backward_weight", bias ? "column_sum" : "none", "bf16", N, I, O, false,
         time_both([&] { ops::linear_backward_weight(dw16, db16p, dy, x, false); }, o), 0, totals);
  // bf16 gradients accumulated (beta = 1 into a zeroed buffer): what a single-micro-batch step runs.
  report(m, layer, "backward_weight", bias ? "column_sum" : "none", "bf16", N, I, O, true,
         time_both([&] { ops::linear_backward_weight(dw16, db16p, dy, x, true); }, o), 0, totals);
  if (bias) {
    // The bias gradient from cuBLASLt's BGRADB epilogue instead of a column sum (what tetra ran before).
    cuda::LtProblem p;
    p.trans_b = true;
    p.m = I, p.n = O, p.k = N;
    p.lda = I, p.ldb = O, p.ldd = I;
    p.ab_type = CUDA_R_16BF, p.d_type = CUDA_R_16BF;
    p.a = x.data_ptr(), p.b = dy.data_ptr(), p.d = dw16.data_ptr();
    p.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    p.bias = db16.data_ptr();
    bool ok = true;
    const Result r = time_both([&] { ok = ok && cuda::lt_matmul(p, gpu(), cuda::stream_of(gpu())); }, o);
    if (ok) report(m, layer, "backward_weight", "bgradb", "bf16", N, I, O, false, r, 0, totals);
    report(m, layer, "backward_weight", "none", "bf16", N, I, O, false,
           time_both([&] { ops::linear_backward_weight(dw16, nullptr, dy, x, false); }, o), 0, totals);
  }
  // mlp.c_proj's input gradient feeds the GELU: dpre = (dy·w) ⊙ gelu'(pre). Unfused: the GEMM, then
  // the GELU backward kernel; fused: cuBLASLt's DGELU epilogue (linear_backward_input_gelu).
  if (step_forward == "bias+residual" && I == 4 * m.d) {
    Tensor pre = random_device({N, I}, bf, 1.0, seed + 5);
    report(m, layer, "backward_input+gelu_backward", "none, then kernel", "bf16", N, I, O, false,
           time_both([&] {
             ops::linear_backward_input(dx, dy, w, false);
             ops::gelu_backward(dx, dx, pre);
           }, o), 0, totals);
    report(m, layer, "backward_input_gelu", "dgelu", "bf16", N, I, O, false,
           time_both([&] { ops::linear_backward_input_gelu(dx, dy, w, pre); }, o), 0, totals);
  }
}

void bench_gemms(const Model& m, const Options& o) {
  Totals totals;
  const int64_t d = m.d;
  uint64_t seed = 1000 * static_cast<uint64_t>(d);
  bench_linear(m, "attn.c_attn", d, 3 * d, true, "bias", m.layers, o, seed += 10, totals);
  bench_linear(m, "attn.c_proj", d, d, true, "bias+residual", m.layers, o, seed += 10, totals);
  bench_linear(m, "mlp.c_fc", d, 4 * d, true, "bias+gelu_aux", m.layers, o, seed += 10, totals);
  bench_linear(m, "mlp.c_proj", 4 * d, d, true, "bias+residual", m.layers, o, seed += 10, totals);
  bench_linear(m, "lm_head", d, m.vocab, false, "none", 1, o, seed += 10, totals);
  print({{"bench", "gemm_step_total"},
         {"model", m.name},
         {"tokens", o.tokens},
         {"note", "forward as the block runs it (residual fused), backward input, backward weight fp32"},
         {"ms_heuristic", totals.heuristic_ms},
         {"ms_tuned", totals.tuned_ms},
         {"tflops_heuristic", totals.flops / (totals.heuristic_ms * 1e-3) / 1e12},
         {"tflops_tuned", totals.flops / (totals.tuned_ms * 1e-3) / 1e12}});
}

// LayerNorm forward and backward (bf16 activations and weights, fp32 weight gradients) at [N, C].
void bench_layernorm(const Model& m, const Options& o) {
  const int64_t N = o.tokens, C = m.d;
  const DType bf = DType::BF16;
  Tensor x = random_device({N, C}, bf, 1.0, 7), dy = random_device({N, C}, bf, 1.0, 8);
  Tensor dres = random_device({N, C}, bf, 1.0, 9);
  Tensor w = random_device({C}, bf, 0.2, 10), b = random_device({C}, bf, 0.2, 11);
  Tensor y = Tensor::empty({N, C}, bf, gpu()), dx = Tensor::empty({N, C}, bf, gpu());
  Tensor mean = Tensor::empty({N}, DType::F32, gpu()), rstd = Tensor::empty({N}, DType::F32, gpu());
  Tensor dw = Tensor::zeros({C}, DType::F32, gpu()), db = Tensor::zeros({C}, DType::F32, gpu());
  const double act = 2.0 * static_cast<double>(N * C);  // bytes of one bf16 [N, C] tensor
  const double stats = 8.0 * static_cast<double>(N);
  struct Case {
    const char* op;
    const char* variant;
    double bytes;
    std::function<void()> f;
  };
  const Case cases[] = {
      {"layernorm_forward", "", 2 * act + stats, [&] { ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); }},
      {"layernorm_backward", "dresidual", 4 * act + stats,
       [&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres); }},
      {"layernorm_backward", "dresidual in place", 4 * act + stats,
       [&] { ops::layernorm_backward(dres, dw, db, dy, x, w, mean, rstd, false, &dres); }},
      {"layernorm_backward", "accumulate_dx", 4 * act + stats,
       [&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, true); }},
      {"layernorm_backward", "overwrite", 3 * act + stats,
       [&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false); }},
  };
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);  // the statistics the backward reads
  for (const Case& c : cases) {
    const double ms = time_ms(c.f, o.reps);
    print({{"bench", "layernorm"},
           {"model", m.name},
           {"op", c.op},
           {"variant", c.variant},
           {"rows", N},
           {"channels", C},
           {"ms", ms},
           {"us", ms * 1e3},
           {"bytes", c.bytes},
           {"GBps", c.bytes / (ms * 1e-3) / 1e9}});
  }
}

// The bias-gradient column sum out[C] += Σ_n dy[n, :] (bf16 in and out) at the widths of both models.
void bench_column_sum(const Options& o) {
  for (int64_t C : {int64_t{768}, int64_t{2304}, int64_t{3072}, int64_t{2048}, int64_t{6144}, int64_t{8192}}) {
    const int64_t N = o.tokens;
    Tensor dy = random_device({N, C}, DType::BF16, 1.0, static_cast<uint64_t>(C));
    Tensor db = Tensor::zeros({C}, DType::BF16, gpu());
    const double bytes = 2.0 * static_cast<double>(N * C);
    const double ms = time_ms([&] { cuda::column_sum(db, dy, N, C, /*accumulate=*/true); }, o.reps);
    print({{"bench", "column_sum"}, {"rows", N}, {"cols", C}, {"us", ms * 1e3}, {"GBps", bytes / (ms * 1e-3) / 1e9}});
  }
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--tokens N] [--reps R] [--model gpt2-124m|gpt-1.3b|all] [--only gemm|layernorm|colsum|all] "
               "[--verbose]\n",
               argv0);
  return 2;
}

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--tokens") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.tokens = std::atoll(v);
    } else if (a == "--reps") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.reps = std::atoi(v);
    } else if (a == "--model") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.model = v;
    } else if (a == "--only") {
      const char* v = value();
      if (!v) return usage(argv[0]);
      o.only = v;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else {
      return usage(argv[0]);
    }
  }
  const bool only_ok = o.only == "all" || o.only == "gemm" || o.only == "layernorm" || o.only == "colsum";
  if (o.tokens <= 0 || o.reps <= 0 || !only_ok ||
      (o.model != "all" && o.model != "gpt2-124m" && o.model != "gpt-1.3b"))
    return usage(argv[0]);
  if (!bench::use_gpu("tetra_gemm_bench") || !bench::print_device({{"tokens", o.tokens}, {"reps", o.reps}})) return 1;
  for (const Model& m : kModels) {
    if (o.model != "all" && o.model != m.name) continue;
    if (o.only == "all" || o.only == "gemm") bench_gemms(m, o);
    if (o.only == "all" || o.only == "layernorm") bench_layernorm(m, o);
  }
  if (o.only == "all" || o.only == "colsum") bench_column_sum(o);
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::bench::run_main("tetra_gemm_bench", tetra::run, argc, argv); }
