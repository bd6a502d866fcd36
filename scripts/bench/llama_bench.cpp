// Llama layer micro-benchmark (a program, not a test): every op of a Llama 3.2 1B training step
// (16 layers, d 2048, 32 query / 8 key-value heads of 64, ffn 8192, vocabulary 128256, micro-batch
// 4 × 4096 = 16384 tokens) through the op library as a model calls it, each against its floor: the
// FLOPs at the bf16 dense rate measured on an H200 (790 TFLOP/s, a large cuBLASLt GEMM) or the bytes
// it must move at the H200's HBM bandwidth (4.3 TB/s), whichever is larger. One JSON object per op:
//   {"bench": "llama", "op": ..., "shape": ..., "ms": ..., "floor_ms": ..., "floor": "flops"|"bytes",
//    "x_floor": ms / floor_ms, "calls_per_step": ..., ...}
// then one "llama_step" line: the sum over a step of every op (ms and floor), the tokens/s and MFU that
// those ops alone would allow (no host overhead, no communication), and the share of each op kind.
// GEMMs are autotuned (TETRA_GEMM_TUNE semantics; the tuning call is not timed); attention runs cuDNN.
//
//   tetra_llama_bench [--batch B] [--seq T] [--reps R] [--layers L] [--skip-optimizer]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_backend.h"
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

constexpr double kBf16Flops = 790e12;  // bf16 dense, measured on an H200 (cuBLASLt)
constexpr double kPeakFlops = 989e12;  // H200 bf16 dense peak, for MFU
constexpr double kHbmBytes = 4.3e12;   // H200 HBM3e, bytes/s

struct Options {
  int64_t batch = 4, seq = 4096, layers = 16;
  int reps = 10;
  bool optimizer = true;
};

// Llama 3.2 1B with an untied head.
struct Llama {
  int64_t d = 2048, heads = 32, kv_heads = 8, head_dim = 64, ffn = 8192, vocab = 128256;
  float theta = 500000.0f, eps = 1e-5f;
  int64_t qkv() const { return (heads + 2 * kv_heads) * head_dim; }
};

// Random device tensors with no exact zeros.
Tensor random_device(const Shape& shape, DType dt, double scale, uint64_t seed) {
  return bench::random_device(shape, dt, scale, seed, /*nonzero=*/true);
}

struct Step {
  double ms = 0, floor_ms = 0;
  std::map<std::string, double> ms_by_kind, floor_by_kind;
};

// Times one op, prints its line and adds it `calls` times to the step. kind groups the step summary
// (gemm, attention, norm, rope, swiglu, loss, embedding, optimizer).
void run(Step& step, const std::string& kind, const std::string& op, const std::string& shape, double flops,
         double bytes, int64_t calls, const Options& o, const std::function<void()>& f) {
  const double ms = bench::time_ms(f, o.reps, /*settle_first=*/true);  // GEMM tuning, plan building first
  const double flops_ms = flops / kBf16Flops * 1e3, bytes_ms = bytes / kHbmBytes * 1e3;
  const double floor_ms = std::max(flops_ms, bytes_ms);
  nlohmann::json j = {{"bench", "llama"},        {"kind", kind},   {"op", op},
                      {"shape", shape},          {"ms", ms},       {"floor_ms", floor_ms},
                      {"floor", flops_ms >= bytes_ms ? "flops" : "bytes"},
                      {"x_floor", ms / floor_ms}, {"calls_per_step", calls}};
  if (flops > 0) j["tflops"] = flops / (ms * 1e-3) / 1e12;
  if (bytes > 0) j["GBps"] = bytes / (ms * 1e-3) / 1e9;
  print(j);
  step.ms += ms * static_cast<double>(calls);
  step.floor_ms += floor_ms * static_cast<double>(calls);
  step.ms_by_kind[kind] += ms * static_cast<double>(calls);
  step.floor_by_kind[kind] += floor_ms * static_cast<double>(calls);
}

std::string dims(std::initializer_list<int64_t> v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += 'x';
    s += std::to_string(x);
  }
  return s;
}

// One linear layer [I → O] without bias as Llama runs it: forward (optionally into the residual
// stream, in place), backward input (optionally accumulated), backward weight (bf16, overwritten:
// one micro-batch per step; the fp32 accumulating variant is printed but not counted).
void linear(Step& step, const std::string& name, int64_t N, int64_t I, int64_t O, bool residual, int64_t calls,
            const Options& o, uint64_t seed) {
  const DType bf = DType::BF16;
  Tensor x = random_device({N, I}, bf, 1.0, seed), w = random_device({O, I}, bf, 1.0 / std::sqrt(double(I)), seed + 1);
  Tensor dy = random_device({N, O}, bf, 1.0, seed + 2);
  const double flops = 2.0 * double(N) * double(I) * double(O);
  const double io = 2.0 * (double(N) * I + double(O) * I + double(N) * O);  // bf16 operands and result
  const std::string shape = dims({N, I, O});
  {
    Tensor y = residual ? random_device({N, O}, bf, 1.0, seed + 3) : Tensor::empty({N, O}, bf, gpu());
    run(step, "gemm", name + " forward" + (residual ? " (+ residual, in place)" : ""), shape, flops,
        io + (residual ? 2.0 * N * O : 0.0), calls, o, [&] {
          if (residual)
            ops::linear_forward(y, x, w, Tensor(), ops::Activation::None, nullptr, &y);
          else
            ops::linear_forward(y, x, w, Tensor());
        });
  }
  {
    Tensor dx = Tensor::empty({N, I}, bf, gpu());
    run(step, "gemm", name + " backward input", shape, flops, io, calls, o,
        [&] { ops::linear_backward_input(dx, dy, w, false); });
  }
  Tensor dw = Tensor::empty({O, I}, bf, gpu());
  run(step, "gemm", name + " backward weight (bf16)", shape, flops, io, calls, o,
      [&] { ops::linear_backward_weight(dw, nullptr, dy, x, false); });
  Tensor dw32 = Tensor::zeros({O, I}, DType::F32, gpu());
  run(step, "gemm", name + " backward weight (fp32, accumulate; not counted)", shape, flops,
      io + 6.0 * double(O) * I, 0, o, [&] { ops::linear_backward_weight(dw32, nullptr, dy, x, true); });
}

// RMSNorm: two per layer and the final one.
void bench_rmsnorm(Step& step, const Llama& m, const Options& o) {
  const int64_t N = o.batch * o.seq, L = o.layers, d = m.d;
  const DType bf = DType::BF16, f32 = DType::F32;
  Tensor x = random_device({N, d}, bf, 1.0, 1), w = random_device({d}, bf, 0.2, 2), y = Tensor::empty({N, d}, bf, gpu());
  Tensor rstd = Tensor::empty({N}, f32, gpu()), dy = random_device({N, d}, bf, 1.0, 3);
  Tensor dres = random_device({N, d}, bf, 1.0, 4), dw = Tensor::zeros({d}, f32, gpu());
  const double act = 2.0 * double(N) * d;
  run(step, "norm", "rmsnorm_forward", dims({N, d}), 0, 2 * act + 4.0 * N, 2 * L + 1, o,
      [&] { ops::rmsnorm_forward(y, rstd, x, w, m.eps); });
  run(step, "norm", "rmsnorm_backward (dresidual in place)", dims({N, d}), 0, 4 * act + 4.0 * N, 2 * L + 1, o,
      [&] { ops::rmsnorm_backward(dres, dw, dy, x, w, rstd, false, &dres); });
}

// RoPE on the q and k heads of qkv, forward and backward.
void bench_rope(Step& step, const Llama& m, const Options& o) {
  const int64_t B = o.batch, T = o.seq, N = B * T, L = o.layers;
  const DType bf = DType::BF16;
  Tensor qkv = random_device({B, T, m.qkv()}, bf, 1.0, 5);
  const double bytes = 2.0 * 2.0 * double(N) * double((m.heads + m.kv_heads) * m.head_dim);
  const std::string shape = dims({B, T, m.qkv()});
  run(step, "rope", "rope_forward", shape, 0, bytes, L, o,
      [&] { ops::rope_forward(qkv, m.heads, m.kv_heads, m.theta); });
  run(step, "rope", "rope_backward", shape, 0, bytes, L, o,
      [&] { ops::rope_backward(qkv, m.heads, m.kv_heads, m.theta); });
}

// Attention: cuDNN SDPA with grouped-query heads.
void bench_attention(Step& step, const Llama& m, const Options& o) {
  const int64_t B = o.batch, T = o.seq, L = o.layers, d = m.d;
  const DType bf = DType::BF16, f32 = DType::F32;
  Tensor qkv = random_device({B, T, m.qkv()}, bf, 1.0, 6), dout = random_device({B, T, d}, bf, 1.0, 7);
  Tensor out = Tensor::empty({B, T, d}, bf, gpu()), lse = Tensor::empty({B, m.heads, T}, f32, gpu());
  Tensor dqkv = Tensor::empty(qkv.shape(), bf, gpu());
  const double bhttd = double(B) * m.heads * double(T) * double(T) * m.head_dim;  // causal half: ×2 per matmul
  const std::string shape = dims({B, T, m.heads, m.kv_heads, m.head_dim});
  run(step, "attention", "attention_forward", shape, 2.0 * bhttd, 0, L, o,
      [&] { ops::attention_forward(out, lse, qkv, m.heads, m.kv_heads); });
  run(step, "attention", "attention_backward", shape, 5.0 * bhttd, 0, L, o,
      [&] { ops::attention_backward(dqkv, dout, qkv, out, lse, m.heads, m.kv_heads); });
}

// SwiGLU on the [gate | up] projection.
void bench_swiglu(Step& step, const Llama& m, const Options& o) {
  const int64_t N = o.batch * o.seq, L = o.layers, F = m.ffn;
  const DType bf = DType::BF16;
  Tensor gu = random_device({N, 2 * F}, bf, 1.0, 8), h = Tensor::empty({N, F}, bf, gpu());
  Tensor dh = random_device({N, F}, bf, 1.0, 9), dgu = Tensor::empty({N, 2 * F}, bf, gpu());
  const double nf = 2.0 * double(N) * F;  // bytes of one bf16 [N, F]
  run(step, "swiglu", "swiglu_forward", dims({N, 2 * F}), 0, 3 * nf, L, o, [&] { ops::swiglu_forward(h, gu); });
  run(step, "swiglu", "swiglu_backward", dims({N, 2 * F}), 0, 5 * nf, L, o,
      [&] { ops::swiglu_backward(dgu, dh, gu); });
}

// The loss on bf16 logits [N, V] (no fp32 copy), gradient in place.
void bench_loss(Step& step, const Llama& m, const Options& o) {
  const int64_t N = o.batch * o.seq, V = m.vocab;
  const DType bf = DType::BF16, f32 = DType::F32;
  Tensor logits = random_device({N, V}, bf, 2.0, 10), losses = Tensor::empty({N}, f32, gpu());
  Rng rng(11);
  Tensor targets_host = Tensor::empty({N}, DType::I32);
  for (int64_t i = 0; i < N; ++i) targets_host.data<int32_t>()[i] = static_cast<int32_t>(rng.below(uint64_t(V)));
  Tensor targets = Tensor::empty({N}, DType::I32, gpu());
  ops::copy(targets, targets_host);
  // Floor: read the logits once, write the gradient once (this kernel reads them twice).
  run(step, "loss", "softmax_cross_entropy (dlogits in place)", dims({N, V}), 0, 4.0 * double(N) * V, 1, o,
      [&] { ops::softmax_cross_entropy(losses, &logits, logits, targets, 1.0f / float(N)); });
}

// Token embedding without positions.
void bench_embedding(Step& step, const Llama& m, const Options& o) {
  const int64_t B = o.batch, T = o.seq, N = B * T, d = m.d, V = m.vocab;
  const DType bf = DType::BF16, f32 = DType::F32;
  Tensor wte = random_device({V, d}, bf, 1.0, 12), y = Tensor::empty({B, T, d}, bf, gpu());
  Tensor dwte = Tensor::zeros({V, d}, f32, gpu()), dy = random_device({B, T, d}, bf, 1.0, 13);
  Rng rng(14);
  Tensor ids_host = Tensor::empty({B, T}, DType::I32);
  for (int64_t i = 0; i < N; ++i) ids_host.data<int32_t>()[i] = static_cast<int32_t>(rng.below(uint64_t(V)));
  Tensor ids = Tensor::empty({B, T}, DType::I32, gpu());
  ops::copy(ids, ids_host);
  run(step, "embedding", "embedding_forward", dims({N, d}), 0, 4.0 * double(N) * d, 1, o,
      [&] { ops::embedding_forward(y, ids, wte, Tensor(), T); });
  run(step, "embedding", "embedding_backward (fp32 dwte)", dims({N, d}), 0, 2.0 * N * d + 8.0 * N * d, 1, o,
      [&] { ops::embedding_backward(dwte, nullptr, dy, ids, T); });
}

// AdamW over every parameter (fp32 master, m, v; bf16 gradient and working copy).
void bench_adamw(Step& step, const Llama& m, const Options& o) {
  const int64_t L = o.layers, d = m.d, F = m.ffn, V = m.vocab;
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t P = 2 * V * d + L * (d * m.qkv() + d * d + 3 * d * F + 2 * d) + d;
  Tensor master = random_device({P}, f32, 0.02, 15), mom = Tensor::zeros({P}, f32, gpu());
  Tensor var = Tensor::zeros({P}, f32, gpu()), grad = random_device({P}, bf, 1e-3, 16);
  Tensor working = Tensor::empty({P}, bf, gpu());
  ops::AdamWHyper h;
  h.weight_decay = 0.1f;
  run(step, "optimizer", "adamw_update (" + std::to_string(P) + " parameters)", dims({P}), 0, 28.0 * double(P), 1,
      o, [&] { ops::adamw_update(master, grad, mom, var, h, &working); });
  // optimizer.state_dtype bf16: m and v move 2 + 2 bytes each way instead of 4 + 4 (printed, not
  // counted in the step).
  Tensor mom16 = Tensor::zeros({P}, bf, gpu()), var16 = Tensor::zeros({P}, bf, gpu());
  run(step, "optimizer", "adamw_update, bf16 moments (" + std::to_string(P) + " parameters)", dims({P}), 0,
      20.0 * double(P), 0, o, [&] { ops::adamw_update(master, grad, mom16, var16, h, &working); });
}

// The step: the ops' times summed, against their floors.
void print_step(const Step& step, const Llama& m, const Options& o) {
  const int64_t B = o.batch, T = o.seq, N = B * T, L = o.layers, d = m.d, F = m.ffn, V = m.vocab;
  const double flops_per_token = 6.0 * double(2 * V * d + L * (d * m.qkv() + d * d + 3 * d * F) - V * d) +
                                 12.0 * double(L) * d * double(T);
  nlohmann::json kinds;
  for (const auto& [k, ms] : step.ms_by_kind)
    kinds[k] = {{"ms", ms}, {"floor_ms", step.floor_by_kind.at(k)}, {"share", ms / step.ms}};
  const double tok_s = double(N) / (step.ms * 1e-3);
  print({{"bench", "llama_step"},
         {"tokens", N},
         {"ms", step.ms},
         {"floor_ms", step.floor_ms},
         {"x_floor", step.ms / step.floor_ms},
         {"tokens_per_s_ops_only", tok_s},
         {"mfu_ops_only", tok_s * flops_per_token / kPeakFlops},
         {"flops_per_token", flops_per_token},
         {"kinds", kinds},
         {"note", "sum of the ops of one step of one micro-batch, each timed alone; no host overhead, "
                  "no communication, no CUDA-graph or overlap effects"}});
}

int run_bench(const Options& o) {
  const Llama m;
  const int64_t B = o.batch, T = o.seq, N = B * T, L = o.layers, d = m.d, F = m.ffn, V = m.vocab;
  if (!bench::print_device({{"tokens", N}, {"layers", L}, {"reps", o.reps}})) return 1;
  Step step;

  // ---- GEMMs: per layer QKV, o_proj (+ residual), gate/up, down (+ residual); the head once ----
  linear(step, "qkv_proj", N, d, m.qkv(), false, L, o, 100);
  linear(step, "o_proj", N, m.heads * m.head_dim, d, true, L, o, 200);
  linear(step, "gate_up_proj", N, d, 2 * F, false, L, o, 300);
  linear(step, "down_proj", N, F, d, true, L, o, 400);
  linear(step, "lm_head", N, d, V, false, 1, o, 500);

  bench_rmsnorm(step, m, o);
  bench_rope(step, m, o);
  bench_attention(step, m, o);
  bench_swiglu(step, m, o);
  bench_loss(step, m, o);
  bench_embedding(step, m, o);

  if (o.optimizer) bench_adamw(step, m, o);

  print_step(step, m, o);
  return 0;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--batch B] [--seq T] [--reps R] [--layers L] [--skip-optimizer]\n", argv0);
  return 2;
}

int main_impl(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--skip-optimizer") {
      o.optimizer = false;
    } else if ((a == "--batch" || a == "--seq" || a == "--reps" || a == "--layers") && (v = value())) {
      const long long n = std::atoll(v);
      if (a == "--batch") o.batch = n;
      if (a == "--seq") o.seq = n;
      if (a == "--reps") o.reps = static_cast<int>(n);
      if (a == "--layers") o.layers = n;
    } else {
      return usage(argv[0]);
    }
  }
  if (o.batch <= 0 || o.seq <= 0 || o.reps <= 0 || o.layers <= 0) return usage(argv[0]);
  if (!bench::use_gpu("tetra_llama_bench")) return 1;
  return run_bench(o);
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::bench::run_main("tetra_llama_bench", tetra::main_impl, argc, argv); }
