// parallel.grad_all_reduce: copy_engine on CUDA (runtime/peer_copy_communicator.h).
#include "launch/train/builder.h"
#include "runtime/peer_copy_communicator.h"

namespace tetra::launch {

std::unique_ptr<Communicator> copy_engine_grad_comm(const Config& cfg, const Mesh& mesh, Communicator& grad,
                                                   Device device, ParamSet& params) {
  const std::string why = PeerCopyCommunicator::unsupported_reason(mesh.comm(MeshAxis::DP), device);
  if (!why.empty())
    TETRA_FAIL(Config, cfg.origins.where("parallel.grad_all_reduce"),
               ": parallel.grad_all_reduce: copy_engine needs every data-parallel rank on one host with peer "
               "access between their GPUs, but ",
               why, " (use nccl)");
  auto peer = std::make_unique<PeerCopyCommunicator>(grad, mesh.comm(MeshAxis::DP), device, params.flat_numel(),
                                                     params.grad_dtype());
  params.adopt_flat_grads(peer->buffer());
  return peer;
}

}  // namespace tetra::launch
