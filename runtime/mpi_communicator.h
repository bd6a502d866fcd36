// MpiCommunicator: the Communicator for host tensors, over an MPI communicator. Collectives are
// non-blocking MPI calls; Work::wait() polls with MPI_Test so a peer that never answers ends the
// run with an error naming the collective after timeout() seconds instead of hanging forever.
#pragma once
#include <mpi.h>

#include <functional>

#include "runtime/communicator.h"

namespace tetra {

// MPI_Init_thread if MPI is not initialised yet (safe to call for a lone process without mpirun).
void mpi_initialize(int* argc, char*** argv);
void mpi_finalize();
// Aborts every rank of the job (used when a collective times out or a rank fails fatally).
[[noreturn]] void mpi_abort(int code);

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm` (MPI_COMM_WORLD or a split of it); `owned` communicators are freed on destruction.
  explicit MpiCommunicator(MPI_Comm comm, bool owned = false);
  ~MpiCommunicator() override;
  static std::unique_ptr<MpiCommunicator> world();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override;
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts, const Tensor& in,
                                     const std::vector<int64_t>& send_counts) override;
  std::unique_ptr<Work> broadcast(Tensor& t, int root) override;
  std::unique_ptr<Work> send(const Tensor& t, int peer, int tag) override;
  std::unique_ptr<Work> recv(Tensor& t, int peer, int tag) override;
  std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>& ops) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  std::unique_ptr<Work> make_work(const char* what, std::vector<MPI_Request> reqs, std::function<void()> after = {});
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace tetra
