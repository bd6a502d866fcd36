// A CPU build compiles no accelerator library in (version_cuda.cpp in a CUDA build).
#include "launch/cli/version.h"

namespace tetra::launch {

std::vector<std::pair<std::string, std::string>> compiled_gpu_libraries() { return {}; }

}  // namespace tetra::launch
