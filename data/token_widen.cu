// CUDA twin of widen_tokens (data/token_widen.h): one thread per staged id, grid-stride.
//   staging  bytes, rows of seq_len + 1 little-endian ids of W bytes at rows[r].byte_offset
//   inputs   int32 [rows, T]: id(r, t)        targets int32 [rows, T]: id(r, t + 1)
//   bad      uint64: min over out-of-range ids of r·(T + 1) + t (atomicMin; untouched if none)
#include <cuda_runtime.h>

#include <algorithm>

#include "data/token_widen.h"
#include "runtime/cuda/cuda_check.h"

namespace tetra::data {

namespace {

template <int W>
__global__ void widen_tokens_kernel(const unsigned char* __restrict__ staging, const StagedRow* __restrict__ rows,
                                    int64_t n_rows, int64_t T, int32_t* __restrict__ inputs,
                                    int32_t* __restrict__ targets, unsigned long long* bad) {
  const int64_t n = n_rows * (T + 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / (T + 1), t = i - r * (T + 1);
    const StagedRow row = rows[r];
    // Byte loads: a GDS read keeps the file's byte alignment, which may be odd.
    const unsigned char* p = staging + row.byte_offset + t * W;
    uint32_t id = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
    if constexpr (W == 4) id |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
    const unsigned long long limit = row.limit > 0 ? static_cast<unsigned long long>(row.limit) : (1ull << 31);
    if (id >= limit && bad) atomicMin(bad, static_cast<unsigned long long>(i));
    if (inputs) {
      if (t < T) inputs[r * T + t] = static_cast<int32_t>(id);
      if (t > 0) targets[r * T + t - 1] = static_cast<int32_t>(id);
    }
  }
}

}  // namespace

void widen_tokens_cuda(const void* staging, int width, const StagedRow* rows, int64_t n_rows, int64_t seq_len,
                       int32_t* inputs, int32_t* targets, unsigned long long* bad, void* stream) {
  TETRA_CHECK(width == 2 || width == 4, "token width ", width, " (2 or 4 bytes)");
  const int64_t n = n_rows * (seq_len + 1);
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  auto s = static_cast<cudaStream_t>(stream);
  const auto* bytes = static_cast<const unsigned char*>(staging);
  if (width == 2)
    widen_tokens_kernel<2><<<blocks, kThreads, 0, s>>>(bytes, rows, n_rows, seq_len, inputs, targets, bad);
  else
    widen_tokens_kernel<4><<<blocks, kThreads, 0, s>>>(bytes, rows, n_rows, seq_len, inputs, targets, bad);
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::data
