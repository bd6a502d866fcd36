// CudaStage where tetra is built without CUDA: the loader owns a (never made) stage through a
// unique_ptr, whose destructor needs these definitions. Constructing one is an error.
#ifndef TETRA_WITH_CUDA
#include "data/cuda_stage.h"
#include "runtime/error.h"

namespace tetra::data {

struct CudaStage::Impl {};

CudaStage::CudaStage(const Options& o) {
  TETRA_FAIL(Device, "cannot stage loader batches on ", o.device.str(), ": tetra was built without CUDA");
}
CudaStage::~CudaStage() = default;

}  // namespace tetra::data
#endif
