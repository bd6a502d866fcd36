// NcclCommunicator: the Communicator for tensors on one CUDA device, over NCCL, bootstrapped over
// MPI (rank 0 makes the NCCL unique id and MPI_Bcast's it). Collectives are enqueued on a
// communication stream — the one given to set_stream, else the device's current stream at the call
// — after that stream has been made to wait for the current stream (so inputs produced there are
// ready). The returned Work's wait() makes the then-current stream wait for the collective without
// blocking the host; is_completed() polls it. NCCL runs non-blocking (ncclConfig.blocking = 0), so
// initialisation, split and host-blocking waits (barrier, all_reduce_host) honour timeout(): past it
// the communicator is aborted and a Comm error names the collective and the group.
// Plain C++ declarations (no CUDA or NCCL headers). Where tetra is built without CUDA only
// make_nccl_twin exists, and says so (nccl_communicator_stub.cpp).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/stream.h"

namespace tetra {

class NcclCommunicator : public Communicator {
 public:
  // Collective over every rank of `comm`; this rank's GPU is `device`. `host_comm` (may be null)
  // serves all_reduce_host; without it host values travel through the GPU. Its timeout() is inherited.
  NcclCommunicator(MPI_Comm comm, Device device, std::shared_ptr<Communicator> host_comm);
  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "nccl"; }
  Device device() const;

  // The stream collectives are enqueued on from now on; a default Stream() (or a CPU one) restores
  // the default, the device's current stream at each call.
  void set_stream(const Stream& s);

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts, const Tensor& in,
                                     const std::vector<int64_t>& send_counts) override;
  std::unique_ptr<Work> broadcast(Tensor& t, int root) override;
  // NCCL has no tags: sends and receives between two ranks match in issue order; `tag` is ignored.
  std::unique_ptr<Work> send(const Tensor& t, int peer, int tag = 0) override;
  std::unique_ptr<Work> recv(Tensor& t, int peer, int tag = 0) override;
  // One NCCL group of ncclSend/ncclRecv.
  std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>& ops) override;
  // Blocks the host until every rank has reached the barrier (and this rank's queued work before it).
  void barrier() override;
  // ncclCommSplit (and the host communicator's split); color < 0 leaves this rank out: nullptr.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void all_reduce_host(std::vector<double>& values, ReduceOp op = ReduceOp::Sum) override;

  struct Impl;

 private:
  explicit NcclCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The NCCL communicator of `comm`'s ranks on `device` (see NcclCommunicator).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Device device,
                                                     std::shared_ptr<Communicator> host_comm);

// The NCCL twin of `host` (an MPI communicator, which bootstraps it) on `device`: the same ranks,
// name and timeout, with `host` for all_reduce_host. own_stream: its collectives run on a new stream
// of their own (set_stream), else on the current stream at each call.
std::shared_ptr<Communicator> make_nccl_twin(const std::shared_ptr<Communicator>& host, Device device,
                                             bool own_stream = false);

}  // namespace tetra
