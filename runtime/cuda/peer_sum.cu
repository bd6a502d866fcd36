// The copy-engine all-reduce's n-way sum: memory-bound, (n + 1)·count·size bytes.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/peer_sum.h"

namespace tetra::cuda {
namespace {

struct SumSources {
  const void* p[kMaxPeerRanks];
};

__device__ inline float load_as_float(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline float load_as_float(const float* p, int64_t i) { return p[i]; }
__device__ inline void store_from_float(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ inline void store_from_float(float* p, int64_t i, float v) { p[i] = v; }

// Scalar path: element i of every source.
template <class T>
__global__ void peer_sum_scalar(T* dst, SumSources src, int ranks, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) acc += load_as_float(static_cast<const T*>(src.p[r]), i);
    store_from_float(dst, i, acc);
  }
}

// Vector path: 16 bytes (8 bf16 or 4 fp32) per source and thread per iteration.
template <class T>
__global__ void peer_sum_vector(T* dst, SumSources src, int ranks, int64_t vectors) {
  constexpr int kPer = 16 / sizeof(T);
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < vectors;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[j] = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      const int4 raw = reinterpret_cast<const int4*>(src.p[r])[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] += load_as_float(e, j);
    }
    int4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int j = 0; j < kPer; ++j) store_from_float(o, j, acc[j]);
    reinterpret_cast<int4*>(dst)[v] = out;
  }
}

template <class T>
void launch_sum(void* dst, const SumSources& src, int ranks, int64_t count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr int64_t kPer = 16 / sizeof(T);
  bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  for (int r = 0; r < ranks; ++r) aligned = aligned && reinterpret_cast<uintptr_t>(src.p[r]) % 16 == 0;
  // A few blocks per SM are enough to stream at full bandwidth; the sum runs beside backward.
  const auto blocks = [&](int64_t items) {
    return static_cast<int>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, 264));
  };
  int64_t done = 0;
  if (aligned && count >= kPer) {
    const int64_t vectors = count / kPer;
    peer_sum_vector<T><<<blocks(vectors), kThreads, 0, stream>>>(static_cast<T*>(dst), src, ranks, vectors);
    TETRA_CUDA_CHECK_LAUNCH();
    done = vectors * kPer;
  }
  if (done < count) {
    SumSources rest = src;
    for (int r = 0; r < ranks; ++r) rest.p[r] = static_cast<const T*>(src.p[r]) + done;
    peer_sum_scalar<T><<<blocks(count - done), kThreads, 0, stream>>>(static_cast<T*>(dst) + done, rest, ranks,
                                                                      count - done);
    TETRA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void peer_sum(void* dst, const std::vector<const void*>& src, int64_t count, DType dtype, cudaStream_t stream) {
  TETRA_CHECK(!src.empty() && src.size() <= static_cast<size_t>(kMaxPeerRanks), "peer_sum: ", src.size(),
              " sources (1 to ", kMaxPeerRanks, ")");
  if (count <= 0) return;
  SumSources s{};
  for (size_t r = 0; r < src.size(); ++r) s.p[r] = src[r];
  const int ranks = static_cast<int>(src.size());
  if (dtype == DType::BF16) {
    launch_sum<__nv_bfloat16>(dst, s, ranks, count, stream);
  } else if (dtype == DType::F32) {
    launch_sum<float>(dst, s, ranks, count, stream);
  } else {
    TETRA_FAIL(Usage, "peer_sum: ", dtype_name(dtype), " (bf16 or fp32)");
  }
}

std::vector<float> peer_sum_reference(const std::vector<std::vector<float>>& src, DType dtype) {
  TETRA_CHECK(!src.empty(), "peer_sum_reference: no sources");
  std::vector<float> out(src[0].size(), 0.0f);
  for (size_t i = 0; i < out.size(); ++i) {
    float acc = 0.0f;
    for (const std::vector<float>& s : src) acc += s[i];
    out[i] = dtype == DType::BF16 ? bf16_to_float(float_to_bf16(acc)) : acc;
  }
  return out;
}

}  // namespace tetra::cuda
