#include "launch/cli/version.h"

#include <sstream>

// TETRA_VERSION and TETRA_BUILD_TYPE come from CMakeLists.txt (project(tetra VERSION …)), set on this
// file only so that a new version recompiles only it.
#ifndef TETRA_VERSION
#error "TETRA_VERSION must be defined by the build"
#endif
#ifndef TETRA_BUILD_TYPE
#define TETRA_BUILD_TYPE "unknown"
#endif

namespace tetra::launch {

namespace {
std::string compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown compiler";
#endif
}
}  // namespace

std::string version_text(const std::string& git_commit) {
  std::ostringstream out;
  out << "tetra " << TETRA_VERSION << "\n";
  out << "git commit: " << git_commit << "\n";
  out << "build: " << TETRA_BUILD_TYPE << ", " << compiler();
  const auto gpu = compiled_gpu_libraries();
  if (gpu.empty()) {
    for (const char* name : {"CUDA", "NCCL", "cuDNN"}) out << "\n" << name << ": none (CPU build)";
  }
  for (const auto& [name, version] : gpu) out << "\n" << name << ": " << version;
  return out.str();
}

}  // namespace tetra::launch
