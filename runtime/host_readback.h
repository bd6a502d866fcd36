// HostReadback<T>: values of device tensors (T = int32_t or double) brought to pinned host memory
// without stalling the device. copy_from() enqueues one copy per tensor on the current stream, back
// to back into one pinned buffer, and records one event after them; ready() asks and wait() blocks
// the host on that event only, so the device keeps running whatever was queued before (a layer's
// shared experts, say) while the host waits. The values of the previous copy stay readable until the
// next copy_from. On the CPU the copy is immediate. Neither a copy nor a wait can be part of a
// captured CUDA graph (the event would be recorded at capture only, never at a replay; copy_from
// refuses while the stream is capturing): a captured step keeps what it reads back in device
// tensors and copies them after the step (models/moe_balance.h).
//   HostReadback<double>: the trainer reads a step's loss, gradient norm and skip decision this way
//     while the next step already runs (launch/train/trainer.cpp).
//   CountsReadback = HostReadback<int32_t>: the router's per-expert counts and the counts an
//     expert-parallel rank receives, for sizes the host must know, such as NCCL all_to_all_v's send
//     and receive counts (runtime/ops.h, moe_*; docs/kernels.md "Mixture of experts").
#pragma once
#include <cstdint>
#include <initializer_list>

#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace tetra {

template <class T>
class HostReadback {
 public:
  // Room for `capacity` values of T in total.
  HostReadback(Device device, int64_t capacity);
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;

  // srcs: tensors of T's dtype on the device, placed one after the other (their total ≤ capacity).
  void copy_from(std::initializer_list<const Tensor*> srcs);
  void copy_from(const Tensor& src) { copy_from({&src}); }
  bool ready() const;        // the last copy has arrived (true when none is pending)
  const T* wait();           // blocks until the last copy has arrived; the values, in copy order
  int64_t copied() const { return copied_; }  // values of the last copy

 private:
  Device device_;
  int64_t capacity_;
  int64_t copied_ = 0;
  T* host_ = nullptr;  // pinned on CUDA
  Event done_;
  bool pending_ = false;
};

extern template class HostReadback<int32_t>;
extern template class HostReadback<double>;
using CountsReadback = HostReadback<int32_t>;

}  // namespace tetra
