// CUDA attention_decode (runtime/ops.h): the queries of the last Tq cache rows against every cached
// key before them (generation with a key/value cache). cache [B, T_max, (H + 2·Hkv)·D] bf16 or fp32,
// out [B, Tq, H·D]; query head h reads key/value head h / (H / Hkv); scale 1/√D; fp32 throughout.
// Work split: one block of kWarps warps per (b, query, head); warp w takes keys w, w + kWarps, ...,
// its lanes split the D values (lane c holds c, c + 32, ...), the dot product is a warp sum, and each
// warp keeps an online softmax (running max m, sum l, weighted values acc); the warps' partials are
// merged through shared memory at the end. A check of a few tokens, not a serving kernel: the cache
// is read once per query head (group-shared K/V are not reused across heads).
// CPU twin: runtime/cpu/attention_decode.cpp (tests/runtime/cuda/attention_decode_test.cpp).
#include <cmath>

#include "runtime/attention_shape.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // D ≤ 256

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_kernel(T* out, const T* cache, int T_max, int length, int Tq, int H, int group, int D,
                            int stride, float scale) {
  const int h = blockIdx.x % H;
  const int i = (blockIdx.x / H) % Tq;
  const int b = blockIdx.x / (H * Tq);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = length - Tq + i;  // the query's row, and the last key it attends
  const int kv = h / group;
  const T* rows = cache + static_cast<int64_t>(b) * T_max * stride;
  float q[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int c = lane + 32 * k;
    q[k] = c < D ? to_f32(rows[static_cast<int64_t>(r) * stride + h * D + c]) : 0.0f;
    acc[k] = 0.0f;
  }
  const int k_off = H * D + kv * D, v_off = (H + H / group) * D + kv * D;
  float m = -INFINITY, l = 0.0f;
  for (int j = warp; j <= r; j += kWarps) {
    const T* row = rows + static_cast<int64_t>(j) * stride;
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int c = lane + 32 * k;
      if (c < D) dot += q[k] * to_f32(row[k_off + c]);
    }
    const float s = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int c = lane + 32 * k;
      acc[k] = acc[k] * corr + (c < D ? p * to_f32(row[v_off + c]) : 0.0f);
    }
    m = m_new;
  }
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][kMaxPerLane * 32];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) sacc[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f;
  for (int w = 0; w < kWarps; ++w) L += sm[w] == -INFINITY ? 0.0f : sl[w] * expf(sm[w] - M);
  T* o = out + (static_cast<int64_t>(b) * Tq + i) * H * D + h * D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (sm[w] != -INFINITY) v += sacc[w][c] * expf(sm[w] - M);
    o[c] = from_f32<T>(v / L);
  }
}

}  // namespace

void attention_decode(Tensor& out, const Tensor& cache, int64_t length, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_decode";
  check_cuda_float(op, "cache", cache);
  const AttentionDims d = check_attention_decode_shapes(op, out, cache, length, n_heads, n_kv_heads);
  if (d.D > kMaxPerLane * 32) TETRA_FAIL(Internal, op, ": head dim ", d.D, " > ", kMaxPerLane * 32);
  if (d.qkv_stride() * cache.dim(1) > (int64_t{1} << 31) / 2)
    TETRA_FAIL(Internal, op, ": cache ", cache.describe(), " is too large for the decode kernel");
  const int64_t Tq = out.dim(1), blocks = d.B * Tq * d.H;
  if (blocks == 0) return;
  const Device dev = cache.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  dispatch_float(cache.dtype(), op, "cache", [&](auto tag) {
    using T = decltype(tag);
    attention_decode_kernel<T><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(cache.data_ptr()), static_cast<int>(cache.dim(1)),
        static_cast<int>(length), static_cast<int>(Tq), static_cast<int>(d.H), static_cast<int>(d.group()),
        static_cast<int>(d.D), static_cast<int>(d.qkv_stride()), scale);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tetra::cuda
