// MoE op micro-benchmark (a program, not a test): the routed part of one DeepSeek-style MoE layer at
// the shape (16384 tokens of d 1536, 64 experts of width 512, top-6) through the op library
// as a model calls it — router forward and backward, the permutation map, permute and unpermute with
// their backwards, SwiGLU, and the six grouped GEMMs of the SwiGLU experts (gate|up and down: forward,
// backward input, backward weight) — for three routings: balanced (token t to experts (t·k + j) mod E,
// the peer's --force-balance), the router on random logits, and imbalanced (one expert in every
// token: max/mean load 10.7, as the peer's own router reached), and for each grouped-GEMM
// implementation asked for. Each op's line gives ms, and its floor: bytes at 4.8 TB/s for the
// memory-bound ops, FLOPs at 989 TFLOP/s for the GEMMs. A summary line per routing and implementation
// adds the layer's forward and backward (moe_layer), and a second one times them issued back to back,
// eagerly and replayed from a CUDA graph (moe_layer_sequence). Last, counts_readback: what the host
// waits to learn the router's counts (the expert-parallel exchange's sizes) per layer.
//
//   tetra_moe_bench [--tokens N] [--dim D] [--experts E] [--topk K] [--ffn F] [--reps R]
//                   [--routing balanced|router|imbalanced|all] [--impl wgmma|wgmma_ws|mma|simt|cublas|fp8|all]
// fp8 (also in all): the six grouped GEMMs in FP8 tensorwise (moe_grouped_fp8_*, casts included),
// lines with impl fp8_tensorwise and their sum (moe_gemm_sum) beside the bf16 layer's gemm_ms, after
// a line (bench fp8_kernel) naming the kernel that multiplies the codes: wgmma_fp8 (Hopper's tensor
// cores) or simt, with the reason the tensor cores do not apply; then the same calls split into
// their casts and their grouped GEMM on codes cast before (moe_fp8_split: the kernel's own rate; under
// tensorwise and under blockwise),
// and the six as the layer runs them with each row tensor cast once (moe_fp8_ahead); then each grouped
// cast alone (moe_fp8_cast) and the gathered ones each way (moe_gathered_cast).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda_graph.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_fp8.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/host_readback.h"
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

constexpr double kPeakFlops = 989e12;  // H200 dense bf16
constexpr double kPeakBytes = 4.8e12;  // H200 HBM3e

struct Options {
  int64_t tokens = 16384, dim = 1536, experts = 64, topk = 6, ffn = 512;
  int reps = 20;
  std::string routing = "all", impl = "all";
};

struct Layer {
  int64_t N, d, E, k, F, R;
  Tensor x, logits, bias, ids, w, counts, offsets, row_of, slot_of;
  Tensor xs, gu, h, out, y, dy, d_out, d_w, dh, dgu, dxs, dx, d_logits;
  Tensor w_gu, w_down, dw_gu, dw_down;
  Tensor dw_gu_bf16, dw_down_bf16;  // for cuBLAS's grouped GEMM, whose output has the operands' type
  Tensor& dw_gu_of(bool cublas) { return cublas ? dw_gu_bf16 : dw_gu; }
  Tensor& dw_down_of(bool cublas) { return cublas ? dw_down_bf16 : dw_down; }
};

Layer make_layer(const Options& o) {
  Layer L;
  L.N = o.tokens, L.d = o.dim, L.E = o.experts, L.k = o.topk, L.F = o.ffn, L.R = L.N * L.k;
  const Device g = gpu();
  const DType bf = DType::BF16;
  L.x = random_device({L.N, L.d}, bf, 1.0, 1);
  L.bias = Tensor::zeros({L.E}, DType::F32, g);
  L.ids = Tensor::empty({L.N, L.k}, DType::I32, g);
  L.w = Tensor::empty({L.N, L.k}, DType::F32, g);
  L.counts = Tensor::empty({L.E}, DType::I32, g);
  L.offsets = Tensor::empty({L.E + 1}, DType::I32, g);
  L.row_of = Tensor::empty({L.N, L.k}, DType::I32, g);
  L.slot_of = Tensor::empty({L.R}, DType::I32, g);
  L.xs = Tensor::empty({L.R, L.d}, bf, g);
  L.gu = random_device({L.R, 2 * L.F}, bf, 1.0, 2);
  L.h = random_device({L.R, L.F}, bf, 1.0, 3);
  L.out = random_device({L.R, L.d}, bf, 1.0, 4);
  L.y = Tensor::empty({L.N, L.d}, bf, g);
  L.dy = random_device({L.N, L.d}, bf, 1.0, 5);
  L.d_out = random_device({L.R, L.d}, bf, 1.0, 6);
  L.d_w = Tensor::empty({L.N, L.k}, DType::F32, g);
  L.dh = random_device({L.R, L.F}, bf, 1.0, 7);
  L.dgu = random_device({L.R, 2 * L.F}, bf, 1.0, 8);
  L.dxs = Tensor::empty({L.R, L.d}, bf, g);
  L.dx = Tensor::empty({L.N, L.d}, bf, g);
  L.d_logits = Tensor::empty({L.N, L.E}, DType::F32, g);
  L.w_gu = random_device({L.E, 2 * L.F, L.d}, bf, 0.02, 9);
  L.w_down = random_device({L.E, L.d, L.F}, bf, 0.02, 10);
  // fp32, as the model's gradient buffers
  L.dw_gu = Tensor::empty({L.E, 2 * L.F, L.d}, DType::F32, g);
  L.dw_down = Tensor::empty({L.E, L.d, L.F}, DType::F32, g);
  L.dw_gu_bf16 = Tensor::empty({L.E, 2 * L.F, L.d}, bf, g);
  L.dw_down_bf16 = Tensor::empty({L.E, L.d, L.F}, bf, g);
  return L;
}

ops::MoeRouting routing_of(const Layer& L, bool force) {
  ops::MoeRouting r;
  r.top_k = L.k;
  r.force_balance = force;
  return r;
}

struct Line {
  std::string op, phase;  // phase: "forward" or "backward"
  double ms, floor_ms;
};

// Routes with `how`, builds the map, and returns max/mean load.
double route(Layer& L, const std::string& how) {
  L.logits = random_device({L.N, L.E}, DType::F32, 1.0, 11);
  if (how == "imbalanced") {  // expert 0 first in every token
    Tensor col = Tensor::empty({L.N, L.E}, DType::F32, gpu());
    std::vector<float> host(static_cast<size_t>(L.N * L.E), 0.0f);
    for (int64_t n = 0; n < L.N; ++n) host[static_cast<size_t>(n * L.E)] = 6.0f;
    Tensor h = Tensor::from_vector(host, {L.N, L.E});
    ops::copy(col, h);
    ops::add(L.logits, L.logits, col);
  }
  ops::moe_router_forward(L.ids, L.w, L.counts, L.logits, L.bias, routing_of(L, how == "balanced"));
  ops::moe_permute_map(L.offsets, L.row_of, L.slot_of, L.ids);
  Tensor counts = Tensor::empty({L.E}, DType::I32);
  ops::copy(counts, L.counts);
  int64_t mx = 0;
  for (int64_t e = 0; e < L.E; ++e) mx = std::max<int64_t>(mx, counts.data<int32_t>()[e]);
  return static_cast<double>(mx) / (static_cast<double>(L.R) / static_cast<double>(L.E));
}

// The routed layer's forward then backward as a model issues them, one op after the other on one
// stream (so launch gaps and the tails between kernels count, which the per-op lines leave out):
// eager, and captured into one CUDA graph where the implementation needs no host synchronisation
// (all but cublas), the graph replayed. The routing is recomputed from the same logits every time.
void bench_sequence(Layer& L, const std::string& how, const std::string& name, bool capturable, double floor_ms,
                    double load, const ops::MoeRouting& r, int reps) {
  auto layer = [&] {
    ops::moe_router_forward(L.ids, L.w, L.counts, L.logits, L.bias, r);
    ops::moe_permute_map(L.offsets, L.row_of, L.slot_of, L.ids);
    ops::moe_permute(L.xs, L.x, L.slot_of, L.k);
    ops::moe_grouped_linear_forward(L.gu, L.xs, L.w_gu, L.offsets);
    ops::swiglu_forward(L.h, L.gu);
    ops::moe_grouped_linear_forward(L.out, L.h, L.w_down, L.offsets);
    ops::moe_unpermute(L.y, L.out, L.w, L.row_of);
    ops::moe_unpermute_backward(L.d_out, L.d_w, L.dy, L.out, L.w, L.row_of);
    ops::moe_grouped_linear_backward_input(L.dh, L.d_out, L.w_down, L.offsets);
    ops::moe_grouped_linear_backward_weight(L.dw_down_of(!capturable), L.d_out, L.h, L.offsets, false);
    ops::swiglu_backward(L.dgu, L.dh, L.gu);
    ops::moe_grouped_linear_backward_weight(L.dw_gu_of(!capturable), L.dgu, L.xs, L.offsets, false);
    ops::moe_grouped_linear_backward_input(L.dxs, L.dgu, L.w_gu, L.offsets);
    ops::moe_permute_backward(L.dx, L.dxs, L.row_of);
    ops::moe_router_backward(L.d_logits, L.d_w, L.logits, L.ids, r);
  };
  const Stream stream = Stream::create(gpu());
  StreamGuard guard(stream);
  const double eager_ms = time_ms(layer, reps);
  nlohmann::json line = {{"bench", "moe_layer_sequence"}, {"routing", how}, {"impl", name},
                         {"max_over_mean_load", load}, {"eager_ms", eager_ms}, {"floor_ms", floor_ms}};
  if (capturable) {
    CudaGraph graph(gpu());
    graph.begin_capture();
    try {
      layer();
    } catch (...) {
      graph.abort_capture();
      throw;
    }
    graph.end_capture();
    line["graph_ms"] = time_ms([&] { graph.replay(); }, reps);
    line["graph_nodes"] = graph.nodes();
  }
  print(line);
}

// What the expert-parallel exchange pays to learn its sizes (runtime/host_readback.h): the host time
// from enqueueing the router to holding its counts, with CountsReadback (copy to pinned memory, one
// event wait), against the router followed by a plain stream synchronisation. µs per layer.
void bench_counts_readback(Layer& L, int reps) {
  const ops::MoeRouting r = routing_of(L, false);
  const Stream stream = current_stream(gpu());
  CountsReadback rb(gpu(), L.E);
  auto host_us = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  int64_t check = 0;
  const double readback_us = host_us([&] {
    ops::moe_router_forward(L.ids, L.w, L.counts, L.logits, L.bias, r);
    rb.copy_from(L.counts);
    const int32_t* c = rb.wait();
    check += c[0];
  });
  const double sync_us = host_us([&] {
    ops::moe_router_forward(L.ids, L.w, L.counts, L.logits, L.bias, r);
    stream.synchronize();
  });
  int64_t sum = 0;
  for (int64_t e = 0; e < L.E; ++e) sum += rb.wait()[e];
  if (sum != L.R) TETRA_FAIL(Internal, "tetra_moe_bench: the counts read back sum to ", sum, ", not ", L.R);
  print({{"bench", "counts_readback"}, {"tokens", L.N}, {"experts", L.E}, {"router_then_readback_us", readback_us},
         {"router_then_sync_us", sync_us}});
}

// How the kernel of a line stores its tiles in this run (TETRA_GROUPED_EPILOGUE; auto, the default,
// stages the FP8 tensor-core kernel's and not wgmma_ws's; every other kernel stores directly).
std::string epilogue_name(bool staged) { return staged ? "staged" : "direct"; }

// Times one grouped GEMM (C[M, N] = A[M, K]·B[K, N] summed over the experts) and prints its line.
struct GemmTimer {
  const Layer& L;
  const std::string& how;
  const std::string& name;
  double load;
  int reps;
  std::vector<Line>& lines;
  std::string epilogue;  // epilogue_name of the kernel that runs the calls
  void operator()(const std::string& op, const std::string& phase, double M, double Nn, double K,
                  const std::function<void()>& f) const {
    const double flops = 2.0 * M * Nn * K, ms = time_ms(f, reps);
    lines.push_back({op, phase, ms, flops / kPeakFlops * 1e3});
    print({{"bench", "moe_gemm"}, {"routing", how}, {"impl", name}, {"op", op}, {"phase", phase}, {"rows", L.R},
           {"n", Nn}, {"k", K}, {"epilogue", epilogue}, {"ms", ms}, {"tflops", flops / (ms * 1e-3) / 1e12},
           {"floor_ms", flops / kPeakFlops * 1e3}, {"max_over_mean_load", load}});
  }
};

// The casts of the recipe's activations, gradients and weights (models/fp8_linear.h fp8_recipe_casts):
// tensorwise (E4M3, E5M2 gradients) or blockwise (DeepSeek-V3's 1×128 rows and 128×128 weight blocks,
// all E4M3).
struct RecipeCasts {
  ops::Fp8Cast act, grad, weight;
};
RecipeCasts recipe_casts(bool blockwise) {
  using S = ops::Fp8Scaling;
  if (blockwise) return {{S::Rows1x128, DType::F8E4M3}, {S::Rows1x128, DType::F8E4M3}, {S::Blocks128, DType::F8E4M3}};
  return {{S::Tensorwise, DType::F8E4M3}, {S::Tensorwise, DType::F8E5M2}, {S::Tensorwise, DType::F8E4M3}};
}

// The same six calls in their two parts (runtime/cuda/moe_grouped_fp8.h): the casts of both operands
// alone (casts_ms), and the grouped GEMM alone on codes cast once before (gemm_ms, tflops on its
// FLOPs), under one recipe: tensorwise, or blockwise (DeepSeek-V3's 1×128 rows and 128×128 weight
// blocks, all E4M3, on the tensor-core kernel's blockwise mainloop). Lines bench moe_fp8_split, then
// their sums (moe_fp8_split_sum), each with its recipe.
void bench_fp8_split(Layer& L, const std::string& how, int reps, bool blockwise, const std::string& epilogue) {
  const auto [act, grad, weight] = recipe_casts(blockwise);
  const std::string recipe = blockwise ? "blockwise" : "tensorwise";
  const double R = static_cast<double>(L.R), d = static_cast<double>(L.d), F = static_cast<double>(L.F);
  using K = cuda::GroupedGemmKind;
  double casts_sum = 0, gemm_sum = 0, flops_sum = 0;
  auto split = [&](const std::string& op, K kind, double flops, Tensor& c, const Tensor& a, ops::Fp8Cast ac,
                   const Tensor& b, ops::Fp8Cast bc) {
    const double casts_ms = time_ms([&] { cuda::cast_grouped_fp8(op.c_str(), kind, c, a, ac, b, bc, L.offsets); }, reps);
    const cuda::GroupedFp8Call call = cuda::cast_grouped_fp8(op.c_str(), kind, c, a, ac, b, bc, L.offsets);
    const double gemm_ms = time_ms([&] { cuda::grouped_gemm_fp8(call.p, gpu(), cuda::stream_of(gpu())); }, reps);
    casts_sum += casts_ms, gemm_sum += gemm_ms, flops_sum += flops;
    print({{"bench", "moe_fp8_split"}, {"routing", how}, {"recipe", recipe}, {"op", op}, {"epilogue", epilogue},
           {"casts_ms", casts_ms}, {"gemm_ms", gemm_ms}, {"gemm_tflops", flops / (gemm_ms * 1e-3) / 1e12}});
  };
  split("gate_up_forward", K::Forward, 2 * R * 2 * F * d, L.gu, L.xs, act, L.w_gu, weight);
  split("down_forward", K::Forward, 2 * R * d * F, L.out, L.h, act, L.w_down, weight);
  split("down_backward_input", K::BackwardInput, 2 * R * F * d, L.dh, L.d_out, grad, L.w_down, weight);
  split("down_backward_weight", K::BackwardWeight, 2 * d * F * R, L.dw_down, L.d_out, grad, L.h, act);
  split("gate_up_backward_weight", K::BackwardWeight, 2 * 2 * F * d * R, L.dw_gu, L.dgu, grad, L.xs, act);
  split("gate_up_backward_input", K::BackwardInput, 2 * R * d * 2 * F, L.dxs, L.dgu, grad, L.w_gu, weight);
  print({{"bench", "moe_fp8_split_sum"}, {"routing", how}, {"recipe", recipe}, {"casts_ms", casts_sum},
         {"gemm_ms", gemm_sum}, {"gemm_tflops", flops_sum / (gemm_sum * 1e-3) / 1e12}});
}

// The six calls as the layer runs them (models/moe_mlp.cpp): x, h, d_out and d_gu each cast once,
// both layouts (ops::moe_grouped_fp8_cast), the GEMMs reading the codes. Tensorwise: the weights
// cast in each call; blockwise: the weights' blocks cast once ahead, as a step of one micro-batch
// casts them (Param::fp8_step), and the rows in 1×128 groups with their 128×1 runs. One line,
// moe_fp8_ahead: the whole sequence's ms beside the six calls casting for themselves
// (moe_gemm_sum, and moe_fp8_split_sum's casts plus GEMMs).
void bench_fp8_ahead(Layer& L, const std::string& how, int reps, bool blockwise) {
  const auto [act, grad, weight] = recipe_casts(blockwise);
  auto layer = [&] {
    ops::Fp8GroupedCodes xc, hc, oc, gc, wg, wd;
    if (blockwise) {
      ops::moe_grouped_fp8_cast(wg, L.w_gu, weight, nullptr);
      ops::moe_grouped_fp8_cast(wd, L.w_down, weight, nullptr);
    }
    const ops::Fp8GroupedCodes* w_gu = blockwise ? &wg : nullptr;
    const ops::Fp8GroupedCodes* w_down = blockwise ? &wd : nullptr;
    ops::moe_grouped_fp8_cast(xc, L.xs, act, &L.offsets);
    ops::moe_grouped_fp8_forward(L.gu, L.xs, act, L.w_gu, weight, L.offsets, &xc, w_gu);
    ops::moe_grouped_fp8_cast(hc, L.h, act, &L.offsets);
    ops::moe_grouped_fp8_forward(L.out, L.h, act, L.w_down, weight, L.offsets, &hc, w_down);
    ops::moe_grouped_fp8_cast(oc, L.d_out, grad, &L.offsets);
    ops::moe_grouped_fp8_backward_input(L.dh, L.d_out, grad, L.w_down, weight, L.offsets, &oc, w_down);
    ops::moe_grouped_fp8_backward_weight(L.dw_down, L.d_out, grad, L.h, act, L.offsets, false, &oc, &hc);
    ops::moe_grouped_fp8_cast(gc, L.dgu, grad, &L.offsets);
    ops::moe_grouped_fp8_backward_weight(L.dw_gu, L.dgu, grad, L.xs, act, L.offsets, false, &gc, &xc);
    ops::moe_grouped_fp8_backward_input(L.dxs, L.dgu, grad, L.w_gu, weight, L.offsets, &gc, w_gu);
  };
  const double ms = time_ms(layer, reps);
  double cast_ms = 0;
  for (const Tensor* t : {&L.xs, &L.h, &L.d_out, &L.dgu}) {
    const ops::Fp8Cast c = t == &L.xs || t == &L.h ? act : grad;
    cast_ms += time_ms([&] {
      ops::Fp8GroupedCodes codes;
      ops::moe_grouped_fp8_cast(codes, *t, c, &L.offsets);
    }, reps);
  }
  print({{"bench", "moe_fp8_ahead"}, {"routing", how}, {"recipe", blockwise ? "blockwise" : "tensorwise"},
         {"layer_ms", ms}, {"row_casts_ms", cast_ms}});
}

// Each grouped cast as the layer makes it (ops::moe_grouped_fp8_cast, both layouts): the row tensors
// with their rows' amaxes given (the producers measure them; 0x3f3f3f3f, ≈ 0.75, stands in), so
// one pass reading x and writing two codes; the stacked weights with their own amax pass. Lines
// bench moe_fp8_cast: us, and the byte floor at kPeakBytes (rows: 2 + 1 + 1 bytes an element; weights
// 2 more for the amax pass) as a share.
void bench_fp8_casts(Layer& L, const std::string& how, int reps) {
  const ops::Fp8Cast act{ops::Fp8Scaling::Tensorwise, DType::F8E4M3}, grad{ops::Fp8Scaling::Tensorwise, DType::F8E5M2};
  Tensor row_amax = Tensor::empty({L.R}, DType::U32, gpu());
  TETRA_CUDA_CHECK(cudaMemset(row_amax.data_ptr(), 0x3f, row_amax.nbytes()));
  auto one = [&](const char* what, const Tensor& x, ops::Fp8Cast c, bool rows) {
    const double ms = time_ms([&] {
      ops::Fp8GroupedCodes codes;
      ops::moe_grouped_fp8_cast(codes, x, c, rows ? &L.offsets : nullptr, rows ? &row_amax : nullptr);
    }, reps);
    const double bytes = static_cast<double>(x.numel()) * (rows ? 4.0 : 6.0);
    print({{"bench", "moe_fp8_cast"}, {"routing", how}, {"tensor", what}, {"shape", shape_str(x.shape())},
           {"us", ms * 1e3}, {"floor_us", bytes / kPeakBytes * 1e6}, {"of_floor", bytes / kPeakBytes / (ms * 1e-3)}});
  };
  one("x_e", L.xs, act, true);
  one("act_e", L.h, act, true);
  one("d_out_e", L.d_out, grad, true);
  one("d_gu_e", L.dgu, grad, true);
  one("w_gate_up", L.w_gu, act, false);
  one("w_down", L.w_down, act, false);
}

// moe_permute_fp8_cast as the layer makes x_e's codes from its tokens x and d_out_e's from dy times the
// routing weights, each way it can (TETRA_MOE_GATHERED_CAST: scatter, gather, separate). Lines bench
// moe_gathered_cast: us, and as floor the bytes of reading the tokens once and writing both code
// layouts (2 bytes a token's element, 2 a row's) at kPeakBytes.
void bench_gathered_casts(Layer& L, const std::string& how, int reps) {
  const ops::Fp8Cast act{ops::Fp8Scaling::Tensorwise, DType::F8E4M3}, grad{ops::Fp8Scaling::Tensorwise, DType::F8E5M2};
  const double bytes = 2.0 * static_cast<double>(L.N * L.d) + 2.0 * static_cast<double>(L.R * L.d);
  for (const char* kind : {"scatter", "gather", "separate"}) {
    setenv("TETRA_MOE_GATHERED_CAST", kind, 1);
    auto one = [&](const char* what, const Tensor& x, ops::Fp8Cast c, const Tensor* weights) {
      const double ms = time_ms([&] {
        Tensor no_rows;
        ops::Fp8GroupedCodes codes;
        ops::moe_permute_fp8_cast(no_rows, codes, x, L.slot_of, L.k, L.offsets, c, weights);
      }, reps);
      print({{"bench", "moe_gathered_cast"}, {"routing", how}, {"tensor", what}, {"kind", kind}, {"us", ms * 1e3},
             {"floor_us", bytes / kPeakBytes * 1e6}, {"of_floor", bytes / kPeakBytes / (ms * 1e-3)}});
    };
    one("x_e", L.x, act, nullptr);
    one("d_out_e", L.dy, grad, &L.w);
  }
  unsetenv("TETRA_MOE_GATHERED_CAST");
}

// The six grouped GEMMs of the layer in FP8 (runtime/ops.h moe_grouped_fp8_*, tensorwise: E4M3
// activations and weights, E5M2 gradients; each call casts its operands per expert, as a training
// step does), with the bf16 operands and outputs of the bf16 rows, and their sum (moe_gemm_sum).
// TFLOP/s counts the GEMMs' FLOPs against the whole call, casts included; floor_ms stays bf16's peak.
void bench_fp8_gemms(Layer& L, const std::string& how, double load, int reps) {
  const ops::Fp8Cast act{ops::Fp8Scaling::Tensorwise, DType::F8E4M3}, grad{ops::Fp8Scaling::Tensorwise, DType::F8E5M2};
  const double R = static_cast<double>(L.R), d = static_cast<double>(L.d), F = static_cast<double>(L.F);
  const std::string name = "fp8_tensorwise";
  cuda::GroupedGemm p;  // the gate|up forward as grouped_gemm_fp8 sees it (scales: only their presence)
  static const float one = 1.0f;
  p.G = L.E, p.R = L.R, p.O = 2 * L.F, p.I = L.d, p.ab_type = DType::F8E4M3, p.c_type = DType::BF16;
  p.a_scale = p.b_scale = &one;
  p.c = L.gu.data_ptr();
  const char* why = "";
  const bool tc =
      cuda::grouped_gemm_impl() != cuda::GroupedGemmImpl::Simt && cuda::grouped_gemm_fp8_wgmma_applies(p, &why);
  print({{"bench", "fp8_kernel"}, {"kernel", tc ? "wgmma_fp8" : "simt"}, {"why", tc ? "" : why}});
  std::vector<Line> lines;
  const std::string epilogue = epilogue_name(tc && cuda::grouped_gemm_fp8_staged_epilogue());
  const GemmTimer gemm{L, how, name, load, reps, lines, epilogue};
  gemm("gate_up_forward", "forward", R, 2 * F, d,
       [&] { ops::moe_grouped_fp8_forward(L.gu, L.xs, act, L.w_gu, act, L.offsets); });
  gemm("down_forward", "forward", R, d, F,
       [&] { ops::moe_grouped_fp8_forward(L.out, L.h, act, L.w_down, act, L.offsets); });
  gemm("down_backward_input", "backward", R, F, d,
       [&] { ops::moe_grouped_fp8_backward_input(L.dh, L.d_out, grad, L.w_down, act, L.offsets); });
  gemm("down_backward_weight", "backward", d, F, R,
       [&] { ops::moe_grouped_fp8_backward_weight(L.dw_down, L.d_out, grad, L.h, act, L.offsets, false); });
  gemm("gate_up_backward_weight", "backward", 2 * F, d, R,
       [&] { ops::moe_grouped_fp8_backward_weight(L.dw_gu, L.dgu, grad, L.xs, act, L.offsets, false); });
  gemm("gate_up_backward_input", "backward", R, d, 2 * F,
       [&] { ops::moe_grouped_fp8_backward_input(L.dxs, L.dgu, grad, L.w_gu, act, L.offsets); });
  double ms = 0, floor = 0;
  for (const Line& l : lines) ms += l.ms, floor += l.floor_ms;
  print({{"bench", "moe_gemm_sum"}, {"routing", how}, {"impl", name}, {"max_over_mean_load", load}, {"gemm_ms", ms},
         {"gemm_floor_ms", floor}, {"gemm_tflops", floor / ms * kPeakFlops / 1e12}});
  bench_fp8_split(L, how, reps, /*blockwise=*/false, epilogue);
  bench_fp8_ahead(L, how, reps, /*blockwise=*/false);
  try {  // the blockwise mainloop is Hopper's tensor-core kernel only: elsewhere a line saying why
    bench_fp8_split(L, how, reps, /*blockwise=*/true, epilogue);
    bench_fp8_ahead(L, how, reps, /*blockwise=*/true);
  } catch (const Error& e) {
    print({{"bench", "moe_fp8_split"}, {"routing", how}, {"recipe", "blockwise"}, {"skipped", std::string(e.what())}});
  }
  bench_fp8_casts(L, how, reps);
  bench_gathered_casts(L, how, reps);
}

void bench_routing(Layer& L, const std::string& how, const std::vector<cuda::GroupedGemmImpl>& impls, bool fp8,
                   int reps) {
  const double load = route(L, how);
  const ops::MoeRouting r = routing_of(L, how == "balanced");
  const double N = static_cast<double>(L.N), R = static_cast<double>(L.R), d = static_cast<double>(L.d),
               E = static_cast<double>(L.E), k = static_cast<double>(L.k), F = static_cast<double>(L.F);
  std::vector<Line> lines;
  auto mem = [&](const std::string& op, const std::string& phase, double bytes, const std::function<void()>& f) {
    const double ms = time_ms(f, reps);
    lines.push_back({op, phase, ms, bytes / kPeakBytes * 1e3});
    print({{"bench", "moe_op"}, {"routing", how}, {"op", op}, {"phase", phase}, {"ms", ms},
           {"floor_ms", bytes / kPeakBytes * 1e3}, {"gb_per_s", bytes / (ms * 1e-3) / 1e9}, {"max_over_mean_load", load}});
  };
  // bf16 activations (2 bytes), fp32 logits, weights and their gradients, int32 indices
  mem("router_forward", "forward", N * E * 4 + N * k * 8, [&] {
    ops::moe_router_forward(L.ids, L.w, L.counts, L.logits, L.bias, r);
  });
  mem("permute_map", "forward", N * k * 4 * 4, [&] { ops::moe_permute_map(L.offsets, L.row_of, L.slot_of, L.ids); });
  mem("permute", "forward", N * d * 2 + R * d * 2 + R * 4, [&] { ops::moe_permute(L.xs, L.x, L.slot_of, L.k); });
  mem("swiglu_forward", "forward", R * F * 2 * 3, [&] { ops::swiglu_forward(L.h, L.gu); });
  mem("unpermute", "forward", R * d * 2 + N * d * 2 + N * k * 8, [&] { ops::moe_unpermute(L.y, L.out, L.w, L.row_of); });
  mem("unpermute_backward", "backward", N * d * 2 + 2 * R * d * 2 + N * k * 12,
      [&] { ops::moe_unpermute_backward(L.d_out, L.d_w, L.dy, L.out, L.w, L.row_of); });
  mem("swiglu_backward", "backward", R * F * 2 * 5, [&] { ops::swiglu_backward(L.dgu, L.dh, L.gu); });
  mem("permute_backward", "backward", R * d * 2 + N * d * 2 + N * k * 4,
      [&] { ops::moe_permute_backward(L.dx, L.dxs, L.row_of); });
  mem("router_backward", "backward", N * E * 8 + N * k * 12,
      [&] { ops::moe_router_backward(L.d_logits, L.d_w, L.logits, L.ids, r); });
  const std::vector<Line> memory_lines = lines;

  for (cuda::GroupedGemmImpl impl : impls) {
    const std::string name = cuda::grouped_gemm_impl_name(impl);
    if (impl == cuda::GroupedGemmImpl::Wgmma || impl == cuda::GroupedGemmImpl::WgmmaWs) {
      cuda::GroupedGemm probe;
      probe.O = probe.I = 64;
      const char* why = "";
      if (!cuda::grouped_gemm_wgmma_applies(probe, &why)) {
        print({{"bench", "skipped"}, {"impl", name}, {"why", why}});
        continue;
      }
    }
    cuda::set_grouped_gemm_impl(impl);
    const bool cublas = impl == cuda::GroupedGemmImpl::Cublas;
    std::vector<Line> gemm_lines;
    const bool staged = impl == cuda::GroupedGemmImpl::WgmmaWs && cuda::grouped_gemm_ws_staged_epilogue();
    const GemmTimer gemm{L, how, name, load, reps, gemm_lines, epilogue_name(staged)};
    gemm("gate_up_forward", "forward", R, 2 * F, d, [&] { ops::moe_grouped_linear_forward(L.gu, L.xs, L.w_gu, L.offsets); });
    gemm("down_forward", "forward", R, d, F, [&] { ops::moe_grouped_linear_forward(L.out, L.h, L.w_down, L.offsets); });
    gemm("down_backward_input", "backward", R, F, d,
         [&] { ops::moe_grouped_linear_backward_input(L.dh, L.d_out, L.w_down, L.offsets); });
    gemm("down_backward_weight", "backward", d, F, R,
         [&] { ops::moe_grouped_linear_backward_weight(L.dw_down_of(cublas), L.d_out, L.h, L.offsets, false); });
    gemm("gate_up_backward_weight", "backward", 2 * F, d, R,
         [&] { ops::moe_grouped_linear_backward_weight(L.dw_gu_of(cublas), L.dgu, L.xs, L.offsets, false); });
    gemm("gate_up_backward_input", "backward", R, d, 2 * F,
         [&] { ops::moe_grouped_linear_backward_input(L.dxs, L.dgu, L.w_gu, L.offsets); });
    {  // the weight gradients added to the previous ones (a later micro-batch), not in the layer's sum
      const size_t kept = gemm_lines.size();
      gemm("down_backward_weight_accumulate", "backward", d, F, R,
           [&] { ops::moe_grouped_linear_backward_weight(L.dw_down_of(cublas), L.d_out, L.h, L.offsets, true); });
      gemm("gate_up_backward_weight_accumulate", "backward", 2 * F, d, R,
           [&] { ops::moe_grouped_linear_backward_weight(L.dw_gu_of(cublas), L.dgu, L.xs, L.offsets, true); });
      gemm_lines.resize(kept);
    }
    double fwd = 0, bwd = 0, floor = 0, gemm_ms = 0, gemm_floor = 0;
    for (const std::vector<Line>* ls : {&memory_lines, static_cast<const std::vector<Line>*>(&gemm_lines)})
      for (const Line& l : *ls) {
        (l.phase == "forward" ? fwd : bwd) += l.ms;
        floor += l.floor_ms;
      }
    for (const Line& l : gemm_lines) gemm_ms += l.ms, gemm_floor += l.floor_ms;
    print({{"bench", "moe_layer"}, {"routing", how}, {"impl", name}, {"max_over_mean_load", load},
           {"forward_ms", fwd}, {"backward_ms", bwd}, {"total_ms", fwd + bwd}, {"floor_ms", floor},
           {"gemm_ms", gemm_ms}, {"gemm_floor_ms", gemm_floor}, {"gemm_tflops", gemm_floor / gemm_ms * kPeakFlops / 1e12}});
    bench_sequence(L, how, name, impl != cuda::GroupedGemmImpl::Cublas, floor, load, r, reps);
  }
  cuda::set_grouped_gemm_impl(cuda::GroupedGemmImpl::Auto);
  if (fp8) bench_fp8_gemms(L, how, load, reps);
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--tokens N] [--dim D] [--experts E] [--topk K] [--ffn F] [--reps R] "
               "[--routing balanced|router|imbalanced|all] [--impl wgmma|wgmma_ws|mma|simt|cublas|fp8|all]\n",
               argv0);
  return 2;
}

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto number = [&](int64_t& out) {
      if (!v) return false;
      out = std::atoll(v);
      ++i;
      return out > 0;
    };
    bool ok = true;
    if (a == "--tokens") ok = number(o.tokens);
    else if (a == "--dim") ok = number(o.dim);
    else if (a == "--experts") ok = number(o.experts);
    else if (a == "--topk") ok = number(o.topk);
    else if (a == "--ffn") ok = number(o.ffn);
    else if (a == "--reps") {
      int64_t r = 0;
      ok = number(r);
      o.reps = static_cast<int>(r);
    } else if (a == "--routing" && v) o.routing = v, ++i;
    else if (a == "--impl" && v) o.impl = v, ++i;
    else ok = false;
    if (!ok) return usage(argv[0]);
  }
  const std::vector<std::string> all_routings = {"balanced", "router", "imbalanced"};
  if (o.routing != "all" && std::find(all_routings.begin(), all_routings.end(), o.routing) == all_routings.end())
    return usage(argv[0]);
  std::vector<cuda::GroupedGemmImpl> impls;
  if (o.impl == "all" || o.impl == "wgmma") impls.push_back(cuda::GroupedGemmImpl::Wgmma);
  if (o.impl == "all" || o.impl == "wgmma_ws") impls.push_back(cuda::GroupedGemmImpl::WgmmaWs);
  if (o.impl == "all" || o.impl == "mma") impls.push_back(cuda::GroupedGemmImpl::Mma);
  if (o.impl == "all" || o.impl == "cublas") impls.push_back(cuda::GroupedGemmImpl::Cublas);
  if (o.impl == "simt") impls.push_back(cuda::GroupedGemmImpl::Simt);
  const bool fp8 = o.impl == "all" || o.impl == "fp8";
  if (impls.empty() && !fp8) return usage(argv[0]);
  if (o.topk > o.experts) return usage(argv[0]);
  if (!bench::use_gpu("tetra_moe_bench") ||
      !bench::print_device({{"tokens", o.tokens}, {"dim", o.dim}, {"experts", o.experts}, {"topk", o.topk},
                            {"ffn", o.ffn}, {"reps", o.reps}}))
    return 1;
  Layer L = make_layer(o);
  for (const std::string& how : all_routings)
    if (o.routing == "all" || o.routing == how) bench_routing(L, how, impls, fp8, o.reps);
  bench_counts_readback(L, o.reps);
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) { return tetra::bench::run_main("tetra_moe_bench", tetra::run, argc, argv); }
