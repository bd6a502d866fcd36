// NVTX ranges for Nsight Systems (`nsys profile -t cuda,nvtx,nccl ...`; README "Profiling"): the
// step, each pipeline instruction (F / B / W / FB, send and receive batches), each collective and
// the optimizer, named as the Chrome trace names them (runtime/trace.h), in the domain "tetra".
// Ranges are host-side push / pop pairs; Nsight projects the GPU work launched inside them onto
// the GPU rows. runtime/nvtx_cuda.cpp emits them, runtime/nvtx_stub.cpp (CPU builds) never.
//
// Emitted only when a tool that reads NVTX is attached (Nsight Systems sets NVTX_INJECTION64_PATH
// in the processes it profiles): without one a range costs one test of a cached flag, and the
// names that must be built (pipeline instructions) are not built. TETRA_NVTX=0 turns the ranges
// off under a profiler too, TETRA_NVTX=1 emits them without one: the two sides of an A/B of their
// cost. Read once, at the first range.
#pragma once
#include <string>

namespace tetra::nvtx {

bool enabled();
void push(const char* name);
void pop();

// A range over a scope; a null name (or ranges off) is no range.
class Range {
 public:
  explicit Range(const char* name) : on_(name != nullptr && enabled()) {
    if (on_) push(name);
  }
  explicit Range(const std::string& name) : Range(name.c_str()) {}
  ~Range() {
    if (on_) pop();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool on_;
};

}  // namespace tetra::nvtx
