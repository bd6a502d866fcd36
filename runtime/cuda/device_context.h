// The host side of every CUDA op: make the tensor's device current, find the stream the op runs on
// (the calling thread's current stream of that device, runtime/stream.h), size grids from the SM
// count, and check that arguments live on a CUDA device with a float dtype.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/tensor.h"

namespace tetra::cuda {

// Makes `device` current for the scope and restores the previous device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// The stream ops issued now by this thread on `device` run on.
cudaStream_t stream_of(Device device);

// Streaming multiprocessors of the device (cached after the first query).
int sm_count(Device device);
// Largest dynamic shared memory a block may opt in to (bytes, cached).
int max_shared_optin(Device device);

// Blocks for a grid-stride kernel over `items` work items with `threads` per block: enough to cover
// the items, at most `waves` blocks per SM, at least 1.
int grid_size(int64_t items, int threads, Device device, int waves = 16);

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Argument checks for CUDA ops: a defined tensor on a CUDA device, fp32 or bf16.
void check_cuda_tensor(const char* op, const char* what, const Tensor& t);
void check_cuda_float(const char* op, const char* what, const Tensor& t);
// An op's amax output (runtime/ops.h: U32 [1], or a row_amax U32 [rows]; may be null): checked,
// zeroed on `stream` before the kernel folds its maxima into it (block_amax_to, warp_row_amax_to);
// its bits, or null when not asked for.
unsigned* start_amax(const char* op, Tensor* amax, cudaStream_t stream);


// An optional tensor argument (pointer that may be null or point to an undefined tensor).
inline bool given(const Tensor* t) { return t != nullptr && t->defined(); }

}  // namespace tetra::cuda
