// CountsReadback: int32 counts of device tensors (the router's per-expert counts, the counts an
// expert-parallel rank receives) brought to pinned host memory for sizes the host must know, such as
// NCCL all_to_all_v's send and receive counts (runtime/ops.h, moe_*; docs/kernels.md "Mixture of
// experts"). copy_from() enqueues one copy per tensor on the current stream, back to back into one
// pinned buffer, and records one event after them; wait() blocks the host on that event only, so the
// device keeps running whatever was queued before (a layer's shared experts, say) while the host
// waits. The values of the previous copy stay readable until the next copy_from. On the CPU the copy
// is immediate. A wait cannot be part of a captured CUDA graph: a dropless expert-parallel exchange
// splits a graph at each wait.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace tetra {

class CountsReadback {
 public:
  // Room for `capacity` int32 values in total.
  CountsReadback(Device device, int64_t capacity);
  ~CountsReadback();
  CountsReadback(const CountsReadback&) = delete;
  CountsReadback& operator=(const CountsReadback&) = delete;

  // srcs: int32 tensors on the device, placed one after the other (their total ≤ capacity).
  void copy_from(std::initializer_list<const Tensor*> srcs);
  void copy_from(const Tensor& src) { copy_from({&src}); }
  bool ready() const;        // the last copy has arrived (true when none is pending)
  const int32_t* wait();     // blocks until the last copy has arrived; the values, in copy order
  int64_t copied() const { return copied_; }  // values of the last copy

 private:
  Device device_;
  int64_t capacity_;
  int64_t copied_ = 0;
  int32_t* host_ = nullptr;  // pinned on CUDA
  Event done_;
  bool pending_ = false;
};

}  // namespace tetra
