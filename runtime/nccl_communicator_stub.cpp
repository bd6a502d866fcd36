// runtime/nccl_communicator.h where tetra is built without CUDA: no device communicators.
#include "runtime/error.h"
#include "runtime/nccl_communicator.h"

namespace tetra {

std::shared_ptr<Communicator> make_nccl_twin(const std::shared_ptr<Communicator>&, Device device, bool) {
  TETRA_FAIL(Device, "device communicators on ", device.str(), ": tetra was built without CUDA");
}

}  // namespace tetra
