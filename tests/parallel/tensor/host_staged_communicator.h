// HostStagedCommunicator (tests only): device tensors moved over MPI through host memory, so that
// ranks sharing one GPU — which NCCL refuses ("duplicate GPU") — can still run code that
// communicates device tensors. Each call copies its inputs to the host on the current stream
// (which, under the CommScheduler, has waited for compute's inputs), runs the MPI call to
// completion, and copies the results back, blocking; the returned Work is already complete. Only
// the calls the tensor-parallel primitives make are provided; the others fail.
#pragma once
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/mpi_communicator.h"

namespace tetra::gputest {

class HostStagedCommunicator : public Communicator {
 public:
  explicit HostStagedCommunicator(MpiCommunicator& host) : host_(host) { set_name("staged(" + host.name() + ")"); }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string backend() const override { return "mpi staged through the host"; }

  std::unique_ptr<Work> all_gather(Tensor& out, const Tensor& in) override {
    Tensor hin = to_host(in), hout = Tensor::empty(out.shape(), out.dtype());
    host_.all_gather(hout, hin)->wait();
    to_device(out, hout);
    return done();
  }
  std::unique_ptr<Work> batch_send_recv(const std::vector<P2PTransfer>& ops) override {
    std::vector<P2PTransfer> host_ops;
    std::vector<std::pair<Tensor, Tensor>> receives;  // (device, host)
    for (const P2PTransfer& op : ops) {
      if (op.kind == P2PTransfer::Kind::Send) {
        host_ops.push_back(P2PTransfer::send(to_host(op.tensor), op.peer));
      } else {
        Tensor h = Tensor::empty(op.tensor.shape(), op.tensor.dtype());
        receives.emplace_back(op.tensor, h);
        host_ops.push_back(P2PTransfer::recv(h, op.peer));
      }
    }
    host_.batch_send_recv(host_ops)->wait();
    for (auto& [dev, h] : receives) to_device(dev, h);
    return done();
  }
  std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) override {
    Tensor h = to_host(t);
    host_.all_reduce(h, op)->wait();
    to_device(t, h);
    return done();
  }
  std::unique_ptr<Work> broadcast(Tensor& t, int root) override {
    Tensor h = to_host(t);
    host_.broadcast(h, root)->wait();
    to_device(t, h);
    return done();
  }
  std::unique_ptr<Work> reduce_scatter(Tensor&, const Tensor&, ReduceOp) override {
    return unsupported("reduce_scatter");
  }
  std::unique_ptr<Work> all_to_all(Tensor&, const Tensor&) override { return unsupported("all_to_all"); }
  std::unique_ptr<Work> all_to_all_v(Tensor&, const std::vector<int64_t>&, const Tensor&,
                                     const std::vector<int64_t>&) override {
    return unsupported("all_to_all_v");
  }
  std::unique_ptr<Work> send(const Tensor&, int, int) override { return unsupported("send"); }
  std::unique_ptr<Work> recv(Tensor&, int, int) override { return unsupported("recv"); }
  void barrier() override { host_.barrier(); }
  std::unique_ptr<Communicator> split(int, int) override {
    unsupported("split");
    return nullptr;
  }

 private:
  struct Done : Work {
    void wait() override {}
    bool is_completed() override { return true; }
  };
  static std::unique_ptr<Work> done() { return std::make_unique<Done>(); }
  static std::unique_ptr<Work> unsupported(const char* what) {
    TETRA_FAIL(Internal, "HostStagedCommunicator::", what, " is not provided (tests only)");
  }
  static Tensor to_host(const Tensor& dev) {
    Tensor h = Tensor::empty(dev.shape(), dev.dtype());
    cuda::copy_bytes(h.data_ptr(), Device::cpu(), dev.data_ptr(), dev.device(), dev.nbytes(), /*blocking=*/true);
    return h;
  }
  static void to_device(const Tensor& dev, const Tensor& h) {
    cuda::copy_bytes(dev.data_ptr(), dev.device(), h.data_ptr(), Device::cpu(), h.nbytes(), /*blocking=*/true);
  }
  MpiCommunicator& host_;
};

}  // namespace tetra::gputest
