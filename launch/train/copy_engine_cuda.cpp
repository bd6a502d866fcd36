// The copy-engine gradient communicator on CUDA (launch/train/copy_engine.h).
#include "launch/train/copy_engine.h"

#include <string>

#include "runtime/error.h"
#include "runtime/peer_copy_communicator.h"

namespace tetra::launch {

std::unique_ptr<Communicator> make_copy_engine_grad_comm(const Config& cfg, Communicator& grad_comm,
                                                         Communicator& dp_host, Device device, ParamSet& params) {
  const std::string why = PeerCopyCommunicator::unsupported_reason(dp_host, device);
  if (!why.empty())
    TETRA_FAIL(Config, cfg.origins.where("parallel.grad_all_reduce"),
               ": parallel.grad_all_reduce: copy_engine needs every data-parallel rank on one host with peer "
               "access between their GPUs, but ",
               why, " (use nccl)");
  auto peer =
      std::make_unique<PeerCopyCommunicator>(grad_comm, dp_host, device, params.flat_numel(), params.grad_dtype());
  params.adopt_flat_grads(peer->buffer());
  return peer;
}

}  // namespace tetra::launch
