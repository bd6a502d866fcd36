// CUDA rotary position embedding, in place on the q and k heads of a fused qkv (runtime/ops.h):
//   qkv [B, T, (H + 2·Hkv)·D], bf16 or fp32; the H + Hkv heads of q and k rotate, v is left alone.
//   forward   x'[i] = x[i]·cos a − x[i + D/2]·sin a,  x'[i + D/2] = x[i + D/2]·cos a + x[i]·sin a
//   backward  the same with sin a negated (the transpose of the rotation), on dqkv
// with a = fp32(t · inv_freq[i]) at position t = token mod T. inv_freq (plain or scaled) comes from the host
// (runtime/rope.h, the CPU twin's very values) as a kernel argument, so the angle is the CPU's fp32
// angle bit for bit; sincosf (full precision) then agrees with the CPU's cosf/sinf to fp32 rounding.
// Work split: a thread owns V consecutive pair indices i … i + V − 1 of one token (V = 8, 16-byte
// accesses, when D/2 % 8 == 0 and qkv is 16-byte aligned; else V = 1) for kHeadsPerThread heads: it
// computes its V angles' sin and cos once and rotates those heads with them. Consecutive threads take
// consecutive i, then the next group of heads, then the next token.
// Bytes: read and write the q and k part of qkv once ((H + Hkv)·D·2 bytes per token each way in bf16).
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/rope.h"

namespace tetra::cuda {

namespace {

constexpr int kHeadsPerThread = 8;
constexpr int kRopeThreads = 256;

// The inverse frequencies as a by-value kernel argument (captured with the launch in a CUDA graph),
// __grid_constant__ so that indexing it reads the parameter bank instead of a per-thread copy.
struct InvFreq {
  float f[kRopeMaxHeadDim / 2];
};

// rows = B·T tokens; width = (H + 2·Hkv)·D; rotated = H + Hkv heads; sign = +1 forward, −1 backward.
template <int V, class T>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(T* qkv, int64_t rows, int T_len, int width, int rotated, int D, const __grid_constant__ InvFreq inv,
                float sign, int position) {
  const int half = D / 2;
  const int chunks = half / V;                                        // thread slots per head's pairs
  const int groups = (rotated + kHeadsPerThread - 1) / kHeadsPerThread;  // head groups per token
  const int64_t items = rows * groups * chunks;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int chunk = static_cast<int>(item % chunks);
    const int64_t rest = item / chunks;
    const int group = static_cast<int>(rest % groups);
    const int64_t row = rest / groups;
    const float t = static_cast<float>(position + static_cast<int>(row % T_len));
    const int i0 = chunk * V;
    float c[V], s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float a = t * inv.f[i0 + j];  // the CPU twin's fp32 product
      sincosf(a, &s[j], &c[j]);
      s[j] *= sign;
    }
    T* token = qkv + row * width;
    const int h_end = min(rotated, (group + 1) * kHeadsPerThread);
    for (int h = group * kHeadsPerThread; h < h_end; ++h) {
      T* x1 = token + static_cast<int64_t>(h) * D + i0;
      T* x2 = x1 + half;
      float a[V], b[V], ra[V], rb[V];
      load_vec<V>(x1, a);
      load_vec<V>(x2, b);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        ra[j] = a[j] * c[j] - b[j] * s[j];
        rb[j] = b[j] * c[j] + a[j] * s[j];
      }
      store_vec<V>(x1, ra);
      store_vec<V>(x2, rb);
    }
  }
}

void rope_apply(const char* op, const char* what, Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope,
                float sign, int64_t position) {
  const AttentionDims d = check_rope_args(op, what, qkv, n_heads, n_kv_heads, rope);
  check_cuda_float(op, what, qkv);
  const int64_t rows = d.B * d.T;
  if (rows == 0) return;
  if (d.qkv_stride() > (int64_t{1} << 30) || d.T + position > (int64_t{1} << 30))
    TETRA_FAIL(Internal, op, ": ", what, " ", qkv.describe(), " is too wide for the RoPE kernel");
  InvFreq inv{};
  const std::vector<float> f = rope_inv_freq(d.D, rope);
  for (size_t i = 0; i < f.size(); ++i) inv.f[i] = f[i];
  const Device dev = qkv.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const int half = static_cast<int>(d.D / 2), rotated = static_cast<int>(d.H + d.Hkv);
  // 16-byte vectors: every head's first half and second half start 16-byte aligned.
  const int elem = static_cast<int>(dtype_size(qkv.dtype()));
  const bool vec = half % 8 == 0 && aligned16(qkv.data_ptr()) && (d.D * elem) % 16 == 0 &&
                   (d.qkv_stride() * elem) % 16 == 0 && (half * elem) % 16 == 0;
  const int64_t groups = (rotated + kHeadsPerThread - 1) / kHeadsPerThread;
  dispatch_float(qkv.dtype(), op, what, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(qkv.data_ptr());
    const int V = vec ? 8 : 1;
    const int64_t items = rows * groups * (half / V);
    const int blocks = grid_size(items, kRopeThreads, dev);
    if (vec)
      rope_kernel<8, T><<<blocks, kRopeThreads, 0, stream>>>(p, rows, static_cast<int>(d.T),
                                                              static_cast<int>(d.qkv_stride()), rotated,
                                                              static_cast<int>(d.D), inv, sign, static_cast<int>(position));
    else
      rope_kernel<1, T><<<blocks, kRopeThreads, 0, stream>>>(p, rows, static_cast<int>(d.T),
                                                              static_cast<int>(d.qkv_stride()), rotated,
                                                              static_cast<int>(d.D), inv, sign, static_cast<int>(position));
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope, int64_t position) {
  rope_apply("rope_forward", "qkv", qkv, n_heads, n_kv_heads, rope, 1.0f, position);
}

void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope) {
  rope_apply("rope_backward", "dqkv", dqkv, n_heads, n_kv_heads, rope, -1.0f, 0);
}

}  // namespace tetra::cuda
