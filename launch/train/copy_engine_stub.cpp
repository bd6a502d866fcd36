// The copy-engine gradient communicator where tetra is built without CUDA: none
// (launch/train/copy_engine.h).
#include "launch/train/copy_engine.h"

#include "runtime/error.h"

namespace tetra::launch {

std::unique_ptr<Communicator> make_copy_engine_grad_comm(const Config&, Communicator&, Communicator&, Device,
                                                         ParamSet&) {
  TETRA_FAIL(Config, "parallel.grad_all_reduce: copy_engine needs tetra built with CUDA");
}

}  // namespace tetra::launch
