// CUDA router of DeepSeek-V3's mixture of experts (runtime/ops.h), with the scalar rules of
// runtime/moe_router_math.h that the CPU twin shares:
//   forward   logits [N, E] fp32, bias [E] → expert_ids int32 [N, k], weights fp32 [N, k], counts int32 [E]
//             (+ load int32 [E] +=)
//   backward  d_weights [N, k] (+ d_prob_sums [B, E]) → d_logits [N, E] (fp32 or bf16)
//   balance loss, bias update
// One warp per token: lane l owns experts [l·EPL, (l + 1)·EPL) (EPL = ⌈E/32⌉ rounded up to a power of
// two, E ≤ 1024), so a row of logits is one coalesced read. The choice is exact whatever the order of
// the warp's reductions: a group's score is the sum of its two largest values (a multiset, merged by
// max/min), and experts and groups are compared by (score descending, index ascending), a total order;
// so the CUDA kernel chooses what the CPU twin chooses. The weights' denominator is summed in slot order
// by every lane, as on the CPU. Counts: a shared-memory histogram per block (integer atomics: exact),
// added to the zeroed global counts once per block. Bytes: the logits (4·E per token) and the outputs
// (8·k per token): at N = 16384, E = 64, k = 6, 4.2 MB + 0.8 MB, ≈ 1.2 µs at 4.3 TB/s.
#include <cuda_runtime.h>

#include <cmath>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/moe_router_math.h"
#include "runtime/moe_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kRouterThreads = 256;  // 8 warps: 8 tokens at a time per block
constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 32;
constexpr int kMaxGroups = 32;

struct RouterArgs {
  int E, k, n_group, topk_group, group_size;
  float route_scale;
  bool force_balance;
};

// A candidate of a warp-wide choice: score v, index i; ok = false for none.
struct Pick {
  float v;
  int i;
  float s;  // the chosen expert's sigmoid score (carried along)
  bool ok;
};

__device__ __forceinline__ bool picked_before(const Pick& a, const Pick& b) {
  if (a.ok != b.ok) return a.ok;
  return a.ok && moe_chosen_before(a.v, a.i, b.v, b.i);
}

// Every lane ends with the warp's best candidate.
__device__ __forceinline__ Pick warp_best(Pick p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Pick q;
    q.v = __shfl_xor_sync(0xffffffffu, p.v, o);
    q.i = __shfl_xor_sync(0xffffffffu, p.i, o);
    q.s = __shfl_xor_sync(0xffffffffu, p.s, o);
    q.ok = __shfl_xor_sync(0xffffffffu, static_cast<int>(p.ok), o) != 0;
    if (picked_before(q, p)) p = q;
  }
  return p;
}

// (t1 ≥ t2) becomes the two largest of {t1, t2, v}; a repeated value counts twice.
__device__ __forceinline__ void top2_insert(float& t1, float& t2, float v) {
  if (v > t1) {
    t2 = t1;
    t1 = v;
  } else if (v > t2) {
    t2 = v;
  }
}

template <int EPL>
__global__ void __launch_bounds__(kRouterThreads)
    router_forward_kernel(int32_t* __restrict__ ids, float* __restrict__ weights, int32_t* __restrict__ counts,
                          int32_t* __restrict__ load, const float* __restrict__ logits,
                          const float* __restrict__ bias, int64_t N, RouterArgs a) {
  __shared__ int32_t hist[kMaxExperts];
  for (int e = threadIdx.x; e < a.E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float kNone = -INFINITY;
  float b[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane * EPL + i;
    b[i] = e < a.E ? bias[e] : 0.0f;
  }
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + warp; n < N; n += static_cast<int64_t>(gridDim.x) * warps) {
    const float* l = logits + n * a.E;
    float my_s = 0.0f, sum = 0.0f;
    int my_id = 0;
    if (a.force_balance) {
      if (lane < a.k) {
        my_id = static_cast<int>((n * a.k + lane) % a.E);
        my_s = moe_sigmoid(l[my_id]);
      }
      for (int j = 0; j < a.k; ++j) sum += __shfl_sync(0xffffffffu, my_s, j);
    } else {
      float s[EPL], c[EPL];
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        const int e = lane * EPL + i;
        s[i] = e < a.E ? moe_sigmoid(l[e]) : 0.0f;
        c[i] = e < a.E ? s[i] + b[i] : kNone;
      }
      if (a.n_group > 1) {
        float my_group = 0.0f;  // lane g < n_group: the score of group g
        for (int g = 0; g < a.n_group; ++g) {
          float t1 = kNone, t2 = kNone;
#pragma unroll
          for (int i = 0; i < EPL; ++i) {
            const int e = lane * EPL + i;
            if (e < a.E && e / a.group_size == g) top2_insert(t1, t2, c[i]);
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            const float u1 = __shfl_xor_sync(0xffffffffu, t1, o), u2 = __shfl_xor_sync(0xffffffffu, t2, o);
            const float hi = fmaxf(t1, u1), lo = fminf(t1, u1);
            t2 = fmaxf(lo, fmaxf(t2, u2));
            t1 = hi;
          }
          if (lane == g) my_group = t1 + t2;
        }
        uint32_t eligible = 0;
        for (int p = 0; p < a.topk_group; ++p) {
          Pick q{my_group, lane, 0.0f, lane < a.n_group && !((eligible >> lane) & 1u)};
          q = warp_best(q);
          eligible |= 1u << q.i;
        }
#pragma unroll
        for (int i = 0; i < EPL; ++i) {
          const int e = lane * EPL + i;
          if (e < a.E && !((eligible >> (e / a.group_size)) & 1u)) c[i] = 0.0f;  // Hugging Face's masked_fill(…, 0.0)
        }
      }
      uint32_t taken = 0;
      for (int j = 0; j < a.k; ++j) {
        Pick p{0.0f, 0, 0.0f, false};
#pragma unroll
        for (int i = 0; i < EPL; ++i) {
          const int e = lane * EPL + i;
          const Pick q{c[i], e, s[i], e < a.E && !((taken >> i) & 1u)};
          if (picked_before(q, p)) p = q;
        }
        p = warp_best(p);
        if (p.i / EPL == lane) taken |= 1u << (p.i % EPL);
        sum += p.s;  // in slot order, as moe_weight_denominator
        if (lane == j) {
          my_s = p.s;
          my_id = p.i;
        }
      }
    }
    if (lane < a.k) {
      const float den = sum + 1e-20f;
      ids[n * a.k + lane] = my_id;
      weights[n * a.k + lane] = moe_weight(my_s, den, a.route_scale);
      atomicAdd(&hist[my_id], 1);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
    const int32_t h = hist[e];
    if (h != 0) {
      atomicAdd(&counts[e], h);
      if (load) atomicAdd(&load[e], h);
    }
  }
}

template <int EPL, class TD>
__global__ void __launch_bounds__(kRouterThreads)
    router_backward_kernel(TD* __restrict__ d_logits, const float* __restrict__ d_weights,
                           const float* __restrict__ logits, const int32_t* __restrict__ ids,
                           const float* __restrict__ d_prob_sums, int64_t seq_len, int64_t N, RouterArgs a,
                           bool accumulate) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + warp; n < N; n += static_cast<int64_t>(gridDim.x) * warps) {
    const float* l = logits + n * a.E;
    int my_id = -1;
    float my_s = 0.0f, my_dw = 0.0f;
    if (lane < a.k) {
      my_id = ids[n * a.k + lane];
      my_dw = d_weights[n * a.k + lane];
      my_s = my_id >= 0 && my_id < a.E ? moe_sigmoid(l[my_id]) : 0.0f;
    }
    // The CPU twin's order: the denominator, then Σ_l dw_l·(s_l/D), both in slot order.
    float sum = 0.0f;
    for (int j = 0; j < a.k; ++j) sum += __shfl_sync(0xffffffffu, my_s, j);
    const float den = sum + 1e-20f;
    float dot = 0.0f;
    for (int j = 0; j < a.k; ++j)
      dot += __shfl_sync(0xffffffffu, my_dw, j) * (__shfl_sync(0xffffffffu, my_s, j) / den);
    const float my_ds = a.route_scale / den * (my_dw - dot);
    float s[EPL], ds[EPL];
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = lane * EPL + i;
      s[i] = e < a.E ? moe_sigmoid(l[e]) : 0.0f;
      ds[i] = 0.0f;
    }
    for (int j = 0; j < a.k; ++j) {
      const int id = __shfl_sync(0xffffffffu, my_id, j);
      const float v = __shfl_sync(0xffffffffu, my_ds, j);
#pragma unroll
      for (int i = 0; i < EPL; ++i)
        if (id == lane * EPL + i) ds[i] += v;
    }
    if (d_prob_sums) {  // through P = Σ_t s_i / S: ds_i += (g_i − Σ_e g_e·s_e/S) / S
      const float* g = d_prob_sums + (n / seq_len) * a.E;
      float ge[EPL], S = 0.0f, gs = 0.0f;
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        const int e = lane * EPL + i;
        ge[i] = e < a.E ? g[e] : 0.0f;
        S += s[i];
        gs += ge[i] * s[i];
      }
      S = warp_sum(S);
      gs = warp_sum(gs) / S;
#pragma unroll
      for (int i = 0; i < EPL; ++i) ds[i] += (ge[i] - gs) / S;
    }
    TD* out = d_logits + n * a.E;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = lane * EPL + i;
      if (e < a.E) {
        const float v = ds[i] * s[i] * (1.0f - s[i]);
        out[e] = from_f32<TD>(accumulate ? to_f32(out[e]) + v : v);
      }
    }
  }
}

// Per sequence b (one block): partial[b] = Σ_i f_i·P_i (f_i = E/(k·T)·count_i, P_i = (1/T)·Σ_t s'_{t,i})
// and d_prob_sums[b, i] = grad_scale·f_i/T. Each warp sums its tokens' s/S per expert in registers;
// the warps' sums are folded in warp order: deterministic.
template <int EPL>
__global__ void __launch_bounds__(kRouterThreads)
    balance_loss_kernel(double* __restrict__ partial, float* __restrict__ d_prob_sums,
                        const float* __restrict__ logits, const int32_t* __restrict__ ids, int64_t T, int E, int k,
                        float grad_scale) {
  extern __shared__ float warp_sums[];  // [warps][E]
  __shared__ int32_t hist[kMaxExperts];
  __shared__ double scratch[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t b = blockIdx.x;
  float p[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) p[i] = 0.0f;
  for (int64_t t = b * T + warp; t < (b + 1) * T; t += warps) {
    const float* l = logits + t * E;
    float s[EPL], S = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int e = lane * EPL + i;
      s[i] = e < E ? moe_sigmoid(l[e]) : 0.0f;
      S += s[i];
    }
    S = warp_sum(S);
#pragma unroll
    for (int i = 0; i < EPL; ++i) p[i] += s[i] / S;
    if (lane < k) {
      const int32_t id = ids[t * k + lane];
      if (id >= 0 && id < E) atomicAdd(&hist[id], 1);
    }
  }
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane * EPL + i;
    if (e < E) warp_sums[warp * E + e] = p[i];
  }
  __syncthreads();
  const double f_per_slot = static_cast<double>(E) / (static_cast<double>(k) * static_cast<double>(T));
  double term = 0.0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float P = 0.0f;
    for (int w = 0; w < warps; ++w) P += warp_sums[w * E + e];
    const double f = f_per_slot * hist[e];
    term += f * static_cast<double>(P) / static_cast<double>(T);
    d_prob_sums[b * E + e] = static_cast<float>(static_cast<double>(grad_scale) * f / static_cast<double>(T));
  }
  term = block_sum(term, scratch);
  if (threadIdx.x == 0) partial[b] = term;
}

__global__ void balance_loss_finish_kernel(double* loss_sum, const double* partial, int64_t B, float loss_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) total += partial[b];
  loss_sum[0] += static_cast<double>(loss_scale) * total;
}

__global__ void bias_update_kernel(float* bias, const int32_t* load, int E, float rate, const double* control) {
  if (control && control[kCtlSkipped] != 0.0) return;  // a skipped step changes nothing
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) sum += load[e];
  sum = block_sum(sum, scratch);  // integers below 2^53: exact in any order
  const double mean = sum / static_cast<double>(E);
  for (int e = threadIdx.x; e < E; e += blockDim.x) bias[e] += moe_bias_step(load[e], mean, rate);
}

// Calls f(std::integral_constant<int, EPL>) for the experts-per-lane that covers E.
template <class F>
void dispatch_epl(int64_t E, const char* op, F&& f) {
  if (E <= 32) return f(std::integral_constant<int, 1>{});
  if (E <= 64) return f(std::integral_constant<int, 2>{});
  if (E <= 128) return f(std::integral_constant<int, 4>{});
  if (E <= 256) return f(std::integral_constant<int, 8>{});
  if (E <= 512) return f(std::integral_constant<int, 16>{});
  if (E <= kMaxExperts) return f(std::integral_constant<int, 32>{});
  TETRA_FAIL(Internal, op, ": the CUDA router takes at most ", kMaxExperts, " experts, got E = ", E);
}

RouterArgs router_args(const char* op, const MoeRouterDims& d, const ops::MoeRouting& r) {
  if (d.k > kMaxTopK) TETRA_FAIL(Internal, op, ": the CUDA router takes top_k ≤ ", kMaxTopK, ", got ", d.k);
  if (r.n_group > kMaxGroups)
    TETRA_FAIL(Internal, op, ": the CUDA router takes n_group ≤ ", kMaxGroups, ", got ", r.n_group);
  return {static_cast<int>(d.E), static_cast<int>(d.k), static_cast<int>(r.n_group), static_cast<int>(r.topk_group),
          static_cast<int>(d.group_size), r.route_scale, r.force_balance};
}

void check_on_cuda(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  for (const auto& [name, t] : ts)
    if (t != nullptr && t->defined()) check_cuda_tensor(op, name, *t);
}

}  // namespace

void moe_router_forward(Tensor& expert_ids, Tensor& weights, Tensor& counts, const Tensor& logits, const Tensor& bias,
                        const ops::MoeRouting& routing, Tensor* load) {
  const char* op = "moe_router_forward";
  const MoeRouterDims d = check_moe_router_forward(op, expert_ids, weights, counts, logits, bias, routing, load);
  check_on_cuda(op, {{"expert_ids", &expert_ids}, {"weights", &weights}, {"counts", &counts}, {"logits", &logits},
                     {"bias", &bias}, {"load", load}});
  const RouterArgs a = router_args(op, d, routing);
  const Device dev = logits.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  TETRA_CUDA_CHECK(cudaMemsetAsync(counts.data_ptr(), 0, counts.nbytes(), stream));
  if (d.N == 0) return;
  const int warps = kRouterThreads / 32;
  const int blocks = grid_size(d.N, warps, dev, 8);
  int32_t* pload = given(load) ? load->data<int32_t>() : nullptr;
  dispatch_epl(d.E, op, [&](auto epl) {
    router_forward_kernel<decltype(epl)::value><<<blocks, kRouterThreads, 0, stream>>>(
        expert_ids.data<int32_t>(), weights.data<float>(), counts.data<int32_t>(), pload, logits.data<float>(),
        bias.data<float>(), d.N, a);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

void moe_router_backward(Tensor& d_logits, const Tensor& d_weights, const Tensor& logits, const Tensor& expert_ids,
                         const ops::MoeRouting& routing, const Tensor* d_prob_sums, bool accumulate) {
  const char* op = "moe_router_backward";
  int64_t T = 0;
  const MoeRouterDims d =
      check_moe_router_backward(op, d_logits, d_weights, logits, expert_ids, routing, d_prob_sums, &T);
  check_cuda_float(op, "d_logits", d_logits);
  check_on_cuda(op, {{"d_weights", &d_weights}, {"logits", &logits}, {"expert_ids", &expert_ids},
                     {"d_prob_sums", d_prob_sums}});
  const RouterArgs a = router_args(op, d, routing);
  if (d.N == 0) return;
  const Device dev = logits.device();
  DeviceScope scope(dev);
  const int blocks = grid_size(d.N, kRouterThreads / 32, dev, 8);
  const float* pg = T > 0 ? d_prob_sums->data<float>() : nullptr;
  dispatch_epl(d.E, op, [&](auto epl) {
    dispatch_float(d_logits.dtype(), op, "d_logits", [&](auto td) {
      using TD = decltype(td);
      router_backward_kernel<decltype(epl)::value, TD><<<blocks, kRouterThreads, 0, stream_of(dev)>>>(
          static_cast<TD*>(d_logits.data_ptr()), d_weights.data<float>(), logits.data<float>(),
          expert_ids.data<int32_t>(), pg, T > 0 ? T : 1, d.N, a, accumulate);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void moe_balance_loss(Tensor& loss_sum, Tensor& d_prob_sums, const Tensor& logits, const Tensor& expert_ids,
                      int64_t seq_len, float loss_scale, float grad_scale) {
  const char* op = "moe_balance_loss";
  const int64_t B = check_moe_balance_loss(op, loss_sum, d_prob_sums, logits, expert_ids, seq_len);
  check_on_cuda(op, {{"loss_sum", &loss_sum}, {"d_prob_sums", &d_prob_sums}, {"logits", &logits},
                     {"expert_ids", &expert_ids}});
  const int64_t E = logits.dim(1), k = expert_ids.dim(1);
  if (B == 0) return;
  const Device dev = logits.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  Tensor partial = Tensor::empty({B}, DType::F64, dev);
  const int warps = kRouterThreads / 32;
  const size_t smem = static_cast<size_t>(warps) * static_cast<size_t>(E) * sizeof(float);  // ≤ 32 KB
  dispatch_epl(E, op, [&](auto epl) {
    balance_loss_kernel<decltype(epl)::value><<<static_cast<unsigned>(B), kRouterThreads, smem, stream>>>(partial.data<double>(), d_prob_sums.data<float>(),
                                                                      logits.data<float>(), expert_ids.data<int32_t>(),
                                                                      seq_len, static_cast<int>(E), static_cast<int>(k),
                                                                      grad_scale);
    TETRA_CUDA_CHECK_LAUNCH();
  });
  balance_loss_finish_kernel<<<1, 32, 0, stream>>>(loss_sum.data<double>(), partial.data<double>(), B, loss_scale);
  TETRA_CUDA_CHECK_LAUNCH();
}

void moe_bias_update(Tensor& bias, const Tensor& load, float rate, const Tensor* control) {
  const char* op = "moe_bias_update";
  check_moe_bias_update(op, bias, load, control);
  check_on_cuda(op, {{"bias", &bias}, {"load", &load}});
  const Device dev = bias.device();
  DeviceScope scope(dev);
  bias_update_kernel<<<1, 256, 0, stream_of(dev)>>>(bias.data<float>(), load.data<int32_t>(),
                                                    static_cast<int>(bias.numel()), rate,
                                                    control ? control->data<double>() : nullptr);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
