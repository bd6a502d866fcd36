// CudaGraph where tetra is built without CUDA (runtime/cuda_graph.h): making one is an error, so the
// other members are never reached.
#include "runtime/cuda_graph.h"

#include "runtime/error.h"

namespace tetra {

struct CudaGraph::Impl {};

CudaGraph::CudaGraph(Device device) : device_(device), impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) TETRA_FAIL(Device, "CUDA graphs need a CUDA device, got ", device.str());
  TETRA_FAIL(Device, "CUDA graphs: tetra was built without CUDA");
}

CudaGraph::~CudaGraph() = default;
void CudaGraph::begin_capture() {}
void CudaGraph::end_capture() {}
void CudaGraph::abort_capture() noexcept {}
bool CudaGraph::captured() const { return false; }
void CudaGraph::replay() {}
size_t CudaGraph::nodes() const { return 0; }

}  // namespace tetra
