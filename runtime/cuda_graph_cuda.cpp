// CudaGraph on the CUDA runtime (runtime/cuda_graph.h); cuda_graph_stub.cpp where tetra is built
// without CUDA.
#include "runtime/cuda_graph.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"
#include "runtime/stream.h"

namespace tetra {

struct CudaGraph::Impl {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;  // the stream the capture ran on
  size_t nodes = 0;
  ~Impl() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
};

CudaGraph::CudaGraph(Device device) : device_(device), impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) TETRA_FAIL(Device, "CUDA graphs need a CUDA device, got ", device.str());
}

CudaGraph::~CudaGraph() {
  if (capturing_) abort_capture();
}

void CudaGraph::begin_capture() {
  TETRA_CHECK(!capturing_ && !captured(), "CudaGraph::begin_capture: already captured");
  TETRA_CUDA_CHECK(cudaSetDevice(device_.index));
  impl_->stream = static_cast<cudaStream_t>(current_stream(device_).handle());
  // Relaxed: other threads (the data loader's) keep using CUDA while the step is captured.
  TETRA_CUDA_CHECK(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
}

void CudaGraph::end_capture() {
  TETRA_CHECK(capturing_, "CudaGraph::end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(impl_->stream, &graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    TETRA_FAIL(Device, "CUDA graph capture of the step failed on ", device_.str(), ": ", cudaGetErrorName(e), " (",
               cudaGetErrorString(e), "); the step issued work that cannot be captured (set train.cuda_graphs: false)");
  }
  impl_->graph = graph;
  TETRA_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &impl_->nodes));
  // Auto-free: memory the graph allocated and did not free is released before each relaunch.
  const cudaError_t ie = cudaGraphInstantiateWithFlags(&impl_->exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (ie != cudaSuccess) {
    (void)cudaGetLastError();
    TETRA_FAIL(Device, "CUDA graph instantiation failed on ", device_.str(), ": ", cudaGetErrorName(ie), " (",
               cudaGetErrorString(ie), ")");
  }
}

void CudaGraph::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(impl_->stream, &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

bool CudaGraph::captured() const {
  return impl_->exec != nullptr;
}

size_t CudaGraph::nodes() const {
  return impl_->nodes;
}

void CudaGraph::replay() {
  TETRA_CHECK(captured(), "CudaGraph::replay before a capture");
  TETRA_CUDA_CHECK(cudaSetDevice(device_.index));
  TETRA_CUDA_CHECK(cudaGraphLaunch(impl_->exec, static_cast<cudaStream_t>(current_stream(device_).handle())));
}

}  // namespace tetra
