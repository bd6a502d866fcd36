// parallel.grad_all_reduce: copy_engine: the data-parallel gradient all-reduce moved by the GPUs'
// copy engines (runtime/peer_copy_communicator.h) instead of NCCL's kernels. Built with CUDA only
// (copy_engine_cuda.cpp); without it, copy_engine_stub.cpp says that tetra needs CUDA for it.
#pragma once
#include <memory>

#include "launch/config/config.h"
#include "parallel/param_set.h"
#include "runtime/communicator.h"

namespace tetra::launch {

// The communicator that wraps `grad_comm` (the device communicator of the dp ranks, whose host
// communicator is dp_host) with the copy-engine all-reduce; params' flat gradients become its
// registered buffer. A Config error naming parallel.grad_all_reduce where the dp ranks cannot use it.
std::unique_ptr<Communicator> make_copy_engine_grad_comm(const Config& cfg, Communicator& grad_comm,
                                                         Communicator& dp_host, Device device, ParamSet& params);

}  // namespace tetra::launch
