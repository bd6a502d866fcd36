// Communicator: collectives over a group of ranks, asynchronous, returning a Work handle.
// MPI backs host tensors (the CPU backend); NCCL backs device tensors and is bootstrapped over MPI.
// Every call is collective over the group in the same order on every rank.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tetra {

enum class ReduceOp { Sum, Max, Min, Avg };

// One transfer of a batch of point-to-point operations (Communicator::batch_send_recv): send
// `tensor` to rank `peer` of the group, or receive into it from `peer`. The tensor is a view of
// memory that must stay untouched (send) or unread (receive) until the batch's Work is done.
struct P2PTransfer {
  enum class Kind { Send, Recv };
  Kind kind = Kind::Send;
  Tensor tensor;
  int peer = 0;
  static P2PTransfer send(const Tensor& t, int peer) { return {Kind::Send, t, peer}; }
  static P2PTransfer recv(const Tensor& t, int peer) { return {Kind::Recv, t, peer}; }
};

// A collective in flight. wait() blocks the host until it is done (CPU) or makes the current
// compute stream wait for it (CUDA); is_completed() polls without blocking.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"
  // Human-readable name of the group, for errors and traces (e.g. "dp[0,2]").
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  // Seconds a blocking wait may take before the run is aborted with an error naming the
  // collective (0 = wait forever).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // In place over every rank: t = op(t_0, ..., t_{n-1}).
  virtual std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // in has size()·out.numel() elements; rank r receives reduced chunk r.
  virtual std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum) = 0;
  // out has size()·in.numel() elements, chunk r from rank r.
  virtual std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& in) = 0;
  // in and out split into size() equal chunks; chunk j of in goes to rank j.
  virtual std::unique_ptr<Work> all_to_all(Tensor& out, const Tensor& in) = 0;
  // Variable chunk sizes (in elements): send_counts[j] to rank j, recv_counts[j] from rank j.
  virtual std::unique_ptr<Work> all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts,
                                             const Tensor& in, const std::vector<int64_t>& send_counts) = 0;
  virtual std::unique_ptr<Work> broadcast(Tensor& t, int root) = 0;
  virtual std::unique_ptr<Work> send(const Tensor& t, int peer, int tag = 0) = 0;
  virtual std::unique_ptr<Work> recv(Tensor& t, int peer, int tag = 0) = 0;
  // Every send and receive of `ops` posted together (MPI Isend/Irecv; one NCCL group) under one
  // Work, so that no order in which the ranks reach the call deadlocks (a ring step: send to r+1,
  // receive from r-1, on every rank at once). Between one pair of ranks, sends match receives in
  // the order they are listed. A send to this rank itself needs its receive in the same batch.
  // Empty tensors are skipped.
  virtual std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>& ops) = 0;
  virtual void barrier() = 0;

  // A sub-group of the ranks with the same color, ordered by key (as MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Blocking all-reduce of host doubles (loss sums, token counts, norms), in fp64.
  virtual void all_reduce_host(std::vector<double>& values, ReduceOp op = ReduceOp::Sum);
  double all_reduce_scalar(double v, ReduceOp op = ReduceOp::Sum);

 protected:
  std::string name_ = "world";
  double timeout_s_ = 0;
};

}  // namespace tetra
