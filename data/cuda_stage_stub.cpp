// CudaStage where tetra is built without CUDA: the loader cannot feed a GPU, so making one is an
// error and the other members are never reached; they exist so that the loader links.
#include "data/cuda_stage.h"
#include "runtime/error.h"

namespace tetra::data {

struct CudaStage::Impl {};

namespace {
const Tensor& no_tensor() {
  static const Tensor none;
  return none;
}
}  // namespace

CudaStage::CudaStage(const Options& o) {
  TETRA_FAIL(Device, "the data loader cannot feed ", o.device.str(), ": tetra was built without CUDA");
}
CudaStage::~CudaStage() = default;

void* CudaStage::host_staging(int) const { return nullptr; }
StagedRow* CudaStage::host_rows(int) const { return nullptr; }
void CudaStage::wait_writable(int) {}
void CudaStage::submit(int, size_t, int64_t, int, bool) {}
int64_t CudaStage::device_check(int) { return -1; }
void CudaStage::read_back(int, int64_t, void*, size_t) {}
void CudaStage::release(int) {}
bool CudaStage::acquire(int) { return false; }
const Tensor& CudaStage::inputs(int) const { return no_tensor(); }
const Tensor& CudaStage::targets(int) const { return no_tensor(); }

}  // namespace tetra::data
