// NVTX ranges with CUDA (runtime/nvtx.h): NVTX3, header-only, shipped with the CUDA toolkit; its
// calls go to the profiler's injection library when one is loaded.
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <cstring>

#include "runtime/nvtx.h"

namespace tetra::nvtx {

namespace {
bool read_enabled() {
  const char* knob = std::getenv("TETRA_NVTX");
  if (knob && std::strcmp(knob, "0") == 0) return false;
  if (knob && std::strcmp(knob, "1") == 0) return true;
  const char* tool = std::getenv("NVTX_INJECTION64_PATH");
  return tool != nullptr && *tool != '\0';
}

nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("tetra");
  return d;
}
}  // namespace

bool enabled() {
  static const bool on = read_enabled();
  return on;
}

void push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}

void pop() { nvtxDomainRangePop(domain()); }

}  // namespace tetra::nvtx
