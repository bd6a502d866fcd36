// CudaGraph: work issued on a device's current stream, captured once and replayed as one launch
// (CUDA graphs), for steps whose kernels are too short to hide the host's launch overhead.
//
// Between begin_capture() and end_capture() nothing runs: every kernel, copy, collective, event
// record/wait and stream-ordered allocation issued on the capturing stream (and on streams that
// joined it through events) is recorded. The captured work must not synchronise the host, and its
// allocations must be freed inside the capture (they become the graph's own memory, the same
// addresses at every replay); memory it reads or writes from outside must keep its address.
// Replays run in order on the current stream, after the work issued before them.
#pragma once
#include <memory>

#include "runtime/device.h"

namespace tetra {

class CudaGraph {
 public:
  explicit CudaGraph(Device device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void begin_capture();
  // Ends the capture and instantiates the graph; throws (and leaves nothing captured) if the
  // captured work broke a rule above.
  void end_capture();
  // Ends a capture that is being abandoned (an error was thrown inside it), without throwing.
  void abort_capture() noexcept;
  bool captured() const;
  void replay();
  size_t nodes() const;

 private:
  struct Impl;
  Device device_;
  bool capturing_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tetra
