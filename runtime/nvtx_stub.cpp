// NVTX ranges without CUDA: none (runtime/nvtx.h).
#include "runtime/nvtx.h"

namespace tetra::nvtx {

bool enabled() { return false; }
void push(const char*) {}
void pop() {}

}  // namespace tetra::nvtx
