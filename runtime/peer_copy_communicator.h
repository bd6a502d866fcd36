// PeerCopyCommunicator: a device Communicator for the ranks of one host whose sum all-reduce of
// tensors inside one registered flat buffer (the gradients) is moved by the GPUs' copy engines
// instead of by kernels on the SMs. Every other call goes to the wrapped (NCCL) communicator.
//
// Why: NCCL's all-reduce runs as kernels that hold SMs beside the backward pass it overlaps
// (docs/kernels.md NOTES v9). Here each rank owns chunk r of a reduced range; for one all-reduce
//   1. every rank copies chunk q of its range into rank q's staging buffer (cudaMemcpyAsync
//      between CUDA-IPC-mapped peer memory: a copy engine over NVLink, no SM);
//   2. a flag handshake tells each owner its chunks have arrived (stream memory operations on
//      flags in peer memory: the GPU's front end waits, no SM); the owner sums the ranks' copies
//      of its chunk (fp32 accumulation, rank order, one rounding: for 2 ranks the same bits as
//      NCCL's sum) into its own buffer, the only step that runs on SMs;
//   3. every owner copies its reduced chunk into the same place in every peer's buffer; a second
//      handshake ends the all-reduce.
// Each distinct range gets its own flags (up to 1024 ranges; later ones go to NCCL), so a CUDA
// graph can replay the same writes and waits every step.
// All on the stream current at the call (the CommScheduler's communication stream), so it is
// ordered, timed and captured into CUDA graphs like any collective. Staging costs (size − 1) ×
// the buffer's bytes on each rank. Needs: every rank on this host, peer access between every pair
// of their GPUs (one GPU per rank), and the same call sequence on every rank (as every collective).
// Plain C++ declarations; the implementation exists only with CUDA (peer_copy_communicator_cuda.cpp),
// so its users are CUDA code too (launch/train/copy_engine_cuda.cpp).
#pragma once
#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace tetra {

class PeerCopyCommunicator : public Communicator {
 public:
  // Collective over `host_comm` (MPI; its ranks and order match device_comm's, and both outlive
  // this). Allocates the registered buffer: `numel` elements of `dtype` (bf16 or fp32), zeroed,
  // on `device`.
  PeerCopyCommunicator(Communicator& device_comm, Communicator& host_comm, Device device, int64_t numel,
                       DType dtype);
  ~PeerCopyCommunicator() override;

  // The registered buffer [numel]: all_reduce of a slice of it takes the copy-engine path.
  Tensor& buffer();
  // Why the ranks of `host_comm` cannot use it on `device` ("" when they can); collective.
  static std::string unsupported_reason(Communicator& host_comm, Device device);

  int rank() const override;
  int size() const override;
  std::string backend() const override { return "nccl+copy_engine"; }

  // Sum over a slice of buffer(): the copy engines; anything else: the wrapped communicator.
  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum) override;
  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all(Tensor& out, const Tensor& in) override;
  std::unique_ptr<Work> all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts, const Tensor& in,
                                     const std::vector<int64_t>& send_counts) override;
  std::unique_ptr<Work> broadcast(Tensor& t, int root) override;
  std::unique_ptr<Work> send(const Tensor& t, int peer, int tag = 0) override;
  std::unique_ptr<Work> recv(Tensor& t, int peer, int tag = 0) override;
  std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>& ops) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void all_reduce_host(std::vector<double>& values, ReduceOp op = ReduceOp::Sum) override;

  // Copy-engine all-reduces issued so far (tests check that the path was taken).
  int64_t copy_engine_all_reduces() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  Communicator& inner_;
};

}  // namespace tetra
