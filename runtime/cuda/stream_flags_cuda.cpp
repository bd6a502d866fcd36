// Stream memory operations through the runtime's driver entry points (no link against libcuda, so
// the binaries still start on machines without a GPU driver).
#include "runtime/cuda/stream_flags.h"

#include <cuda.h>

#include <mutex>

#include "runtime/cuda/cuda_check.h"

namespace tetra::cuda {
namespace {

using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct StreamValueOps {
  StreamValueFn write = nullptr, wait = nullptr;
};

StreamValueFn entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  TETRA_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || !fn)
    TETRA_FAIL(Device, "the CUDA driver has no ", symbol, " (stream memory operations; status ", static_cast<int>(status),
               ")");
  return reinterpret_cast<StreamValueFn>(fn);
}

const StreamValueOps& ops() {
  static StreamValueOps o;
  static std::once_flag once;
  std::call_once(once, [] {
    o.write = entry_point("cuStreamWriteValue32");
    o.wait = entry_point("cuStreamWaitValue32");
  });
  return o;
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    TETRA_FAIL(Device, what, " failed with CUresult ", static_cast<int>(r));
}

}  // namespace

void stream_write_flag(cudaStream_t stream, uint32_t* flag, uint32_t value) {
  check(ops().write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                    CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32");
}

void stream_wait_flag(cudaStream_t stream, const uint32_t* flag, uint32_t value) {
  check(ops().wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                   CU_STREAM_WAIT_VALUE_EQ),
        "cuStreamWaitValue32");
}

}  // namespace tetra::cuda
