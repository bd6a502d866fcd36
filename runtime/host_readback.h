// HostReadback: a few fp64 values of a device tensor brought to the host without stalling the
// device. copy_from() enqueues the copy into pinned host memory on the current stream and records
// an event after it; the host asks ready() or wait()s only when it needs the values. The trainer
// reads a step's loss, gradient norm and skip decision this way while the next step already runs.
// On the CPU the copy is immediate.
#pragma once
#include <cstdint>
#include <memory>

#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace tetra {

class HostReadback {
 public:
  HostReadback(Device device, int64_t count);
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;

  // src: fp64 [count] on the device. The values of an earlier copy stay readable until this call.
  void copy_from(const Tensor& src);
  bool ready() const;           // the last copy has arrived (true when none is pending)
  const double* wait();         // blocks until the last copy has arrived; the values

 private:
  Device device_;
  int64_t count_;
  double* host_ = nullptr;  // pinned on CUDA
  Event done_;
  bool pending_ = false;
};

}  // namespace tetra
