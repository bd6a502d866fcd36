// The versions of the CUDA runtime, NCCL and cuDNN headers this binary was compiled against (the
// libraries loaded at run time must be ABI-compatible with these; `ldd tetra` shows which they are).
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <nccl.h>

#include "launch/cli/version.h"

namespace tetra::launch {

namespace {
std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> compiled_gpu_libraries() {
  // CUDART_VERSION = 1000·major + 10·minor (12040 for 12.4).
  const std::string cuda = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  return {{"CUDA", cuda},
          {"NCCL", dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)},
          {"cuDNN", dotted(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL)}};
}

}  // namespace tetra::launch
