// `tetra --version`: the release, the commit the binary was built from, and the accelerator
// libraries compiled in.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tetra::launch {

// The commit of the source tree at build time: 40 hex digits, "-dirty" appended where tracked files
// differed from it, or "unknown" (built from a tarball). Defined by the file cmake/git_commit.cmake
// generates at every build, which only the executable compiles, so a new commit relinks the
// executable and nothing else.
const char* build_git_commit();

// The accelerator libraries compiled in, as (name, version) pairs: CUDA (the runtime headers'
// CUDART_VERSION), NCCL and cuDNN as major.minor.patch. Empty in a CPU build (version_stub.cpp).
std::vector<std::pair<std::string, std::string>> compiled_gpu_libraries();

// The text `tetra --version` prints, one "key: value" per line after the first, no final newline:
//   tetra 0.1.0
//   git commit: 0123…cdef-dirty
//   build: Release, GCC 12.2.0
//   CUDA: 12.4   NCCL: 2.21.5   cuDNN: 9.1.0   (each on its line; "none (CPU build)" without CUDA)
std::string version_text(const std::string& git_commit);

}  // namespace tetra::launch
