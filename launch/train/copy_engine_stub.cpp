// parallel.grad_all_reduce: copy_engine where tetra is built without CUDA: an error.
#include "launch/train/builder.h"

namespace tetra::launch {

std::unique_ptr<Communicator> copy_engine_grad_comm(const Config&, const Mesh&, Communicator&, Device, ParamSet&) {
  TETRA_FAIL(Config, "parallel.grad_all_reduce: copy_engine needs tetra built with CUDA");
}

}  // namespace tetra::launch
