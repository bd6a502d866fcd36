// NcclCommunicator (runtime/nccl_communicator.h): NCCL collectives on a communication stream, each
// followed by an event that its Work waits on; MPI bootstrap; non-blocking NCCL with polled,
// timeout-bounded progress for initialisation, split and host-blocking waits.
#include "runtime/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_context.h"
#include "runtime/mpi_communicator.h"

namespace tetra {

namespace {

// Reusable timing-free CUDA events for Works; shared, so a Work may outlive its communicator.
class EventPool {
 public:
  explicit EventPool(Device device) : device_(device) {}
  ~EventPool() {
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  }
  cudaEvent_t get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cuda::DeviceScope scope(device_);
    cudaEvent_t e = nullptr;
    TETRA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void put(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(e);
  }

 private:
  Device device_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

// Spin briefly (collectives usually finish within microseconds), then sleep between polls.
void backoff(int& spins) {
  if (++spins < 1000) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(100));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits while a non-blocking call on `comm` is in progress. Returns the final state (ncclSuccess or
// an error), or ncclInProgress when `timeout_s` (> 0) passed first.
ncclResult_t settle(ncclComm_t comm, ncclResult_t first, double timeout_s) {
  if (first != ncclInProgress) return first;
  const auto t0 = std::chrono::steady_clock::now();
  int spins = 0;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return q;
    if (state != ncclInProgress) return state;
    if (timeout_s > 0 && seconds_since(t0) > timeout_s) return ncclInProgress;
    backoff(spins);
  }
}

// Element type for reductions; data movement travels as bytes (ncclUint8) whatever the dtype.
ncclDataType_t reduce_type(DType t, const std::string& what) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U32: return ncclUint32;
    case DType::U8: return ncclUint8;
    case DType::U16:
    case DType::F8E4M3:
    case DType::F8E5M2: break;
  }
  TETRA_FAIL(Comm, what, ": NCCL cannot reduce ", dtype_name(t), " tensors (use fp32, bf16, fp64 or an int type)");
}

ncclRedOp_t reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;  // a duplicate of the MPI communicator this one was built from (for split)
  Device device;
  int rank = 0, size = 1;
  std::shared_ptr<Communicator> host;
  Stream stream;  // a CPU Stream(): use the device's current stream
  bool aborted = false;
  double timeout_s = 0;  // the owner's timeout(), refreshed at each call (used by the destructor)
  std::shared_ptr<EventPool> events;
  Tensor barrier_buf;  // int32 [1] of zeros, all-reduced by barrier()

  void abort() {
    if (comm && !aborted) {
      (void)ncclCommAbort(comm);
      aborted = true;
    }
  }

  // Throws a Comm error for `what` on `group` unless `r` settles to success; on failure or timeout
  // the communicator `c` (this one, or a child being created) is aborted first.
  void check(ncclComm_t c, ncclResult_t r, const std::string& what, const std::string& group, double timeout) {
    r = settle(c, r, timeout);
    if (r != ncclSuccess) raise(c, r, what, group, timeout);
  }

  // Aborts `c` and throws: r = ncclInProgress means `timeout` seconds passed, else r is the error.
  [[noreturn]] void raise(ncclComm_t c, ncclResult_t r, const std::string& what, const std::string& group,
                          double timeout) {
    const char* last_error = c ? ncclGetLastError(c) : nullptr;
    const std::string last = last_error ? last_error : "";
    if (c == comm) abort();
    else if (c) (void)ncclCommAbort(c);
    const std::string where = " on group " + group + " (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                              ", " + device.str() + ")";
    if (r == ncclInProgress)
      TETRA_FAIL(Comm, "NCCL ", what, where, " did not complete within ", timeout,
                 " s: a peer rank may have failed or stopped issuing collectives in the same order. "
                 "The communicator was aborted.");
    TETRA_FAIL(Comm, "NCCL ", what, where, " failed: ", ncclGetErrorString(r), last.empty() ? "" : ": ", last);
  }

  ~Impl() {
    if (mpi != MPI_COMM_NULL) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&mpi);
    }
    if (!comm || aborted) return;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != device.index) (void)cudaSetDevice(device.index);
    // Finalize flushes the queued collectives (it needs the peers); destroy then frees locally.
    if (settle(comm, ncclCommFinalize(comm), timeout_s) == ncclSuccess) (void)ncclCommDestroy(comm);
    else (void)ncclCommAbort(comm);
    if (current >= 0 && current != device.index) (void)cudaSetDevice(current);
  }
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::Impl> impl, cudaEvent_t done, std::string what, std::string group,
           double timeout)
      : impl_(std::move(impl)), done_(done), what_(std::move(what)), group_(std::move(group)), timeout_(timeout) {}
  ~NcclWork() override { impl_->events->put(done_); }

  // The current stream of the device waits for the collective; the host does not.
  void wait() override {
    cuda::DeviceScope scope(impl_->device);
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream_of(impl_->device), done_, 0));
  }

  bool is_completed() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) TETRA_CUDA_CHECK(e);
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    if (impl_->aborted)
      TETRA_FAIL(Comm, "NCCL ", what_, " on group ", group_, ": the communicator was aborted after an earlier failure");
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(impl_->comm, &state);
    if (q != ncclSuccess) state = q;
    if (state != ncclSuccess && state != ncclInProgress) impl_->raise(impl_->comm, state, what_, group_, timeout_);
    return false;
  }

  // Blocks the host until the collective is done, for at most the communicator's timeout.
  void host_wait() {
    const auto t0 = std::chrono::steady_clock::now();
    int spins = 0;
    while (!is_completed()) {
      if (timeout_ > 0 && seconds_since(t0) > timeout_) impl_->raise(impl_->comm, ncclInProgress, what_, group_, timeout_);
      backoff(spins);
    }
  }

 private:
  std::shared_ptr<NcclCommunicator::Impl> impl_;
  cudaEvent_t done_;
  std::string what_, group_;
  double timeout_;
};

// Enqueues one collective (or a group) on the communication stream and returns its Work.
std::unique_ptr<NcclWork> issue(const std::shared_ptr<NcclCommunicator::Impl>& im, const std::string& group,
                                double timeout, const char* what, const std::function<ncclResult_t(cudaStream_t)>& enqueue) {
  if (im->aborted)
    TETRA_FAIL(Comm, "NCCL ", what, " on group ", group, ": the communicator was aborted after an earlier failure");
  im->timeout_s = timeout;
  cuda::DeviceScope scope(im->device);
  cudaStream_t current = cuda::stream_of(im->device);
  cudaStream_t s = im->stream.device().is_cuda() ? static_cast<cudaStream_t>(im->stream.handle()) : current;
  if (s != current) {
    // Inputs are produced on the current stream: the communication stream starts after them.
    cudaEvent_t ready = im->events->get();
    TETRA_CUDA_CHECK(cudaEventRecord(ready, current));
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(s, ready, 0));
    im->events->put(ready);  // the wait captured the record; the event may be reused
  }
  im->check(im->comm, enqueue(s), what, group, timeout);
  cudaEvent_t done = im->events->get();
  TETRA_CUDA_CHECK(cudaEventRecord(done, s));
  return std::make_unique<NcclWork>(im, done, what, group, timeout);
}

// ncclGroupStart, the calls, ncclGroupEnd: the group's result is the first failed call's, else the end's.
ncclResult_t grouped(const std::function<ncclResult_t()>& calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  const ncclResult_t inner = calls();
  const ncclResult_t end = ncclGroupEnd();
  return (inner != ncclSuccess && inner != ncclInProgress) ? inner : end;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, Device device, std::shared_ptr<Communicator> host_comm)
    : impl_(std::make_shared<Impl>()) {
  if (!device.is_cuda()) TETRA_FAIL(Comm, "NcclCommunicator needs a CUDA device, got ", device.str());
  Impl& im = *impl_;
  im.device = device;
  im.host = std::move(host_comm);
  im.events = std::make_shared<EventPool>(device);
  if (im.host) {
    set_name(im.host->name());
    set_timeout(im.host->timeout());
  }
  int rank = 0, size = 1;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS)
    TETRA_FAIL(Comm, "NcclCommunicator: invalid MPI communicator for group ", name());
  im.rank = rank;
  im.size = size;
  if (MPI_Comm_dup(comm, &im.mpi) != MPI_SUCCESS)
    TETRA_FAIL(Comm, "NcclCommunicator: MPI_Comm_dup failed on group ", name());

  // Rank 0 makes the unique id; a failure there still broadcasts (zeros) so no rank hangs.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  ncclResult_t id_result = ncclSuccess;
  if (rank == 0) id_result = ncclGetUniqueId(&id);
  if (MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm) != MPI_SUCCESS)
    TETRA_FAIL(Comm, "NcclCommunicator: MPI_Bcast of the NCCL unique id failed on group ", name());
  if (id_result != ncclSuccess)
    TETRA_FAIL(Comm, "ncclGetUniqueId failed on rank 0 of group ", name(), ": ", ncclGetErrorString(id_result));
  static const ncclUniqueId zero_id{};
  if (std::memcmp(&id, &zero_id, sizeof id) == 0)
    TETRA_FAIL(Comm, "NcclCommunicator: rank 0 of group ", name(), " could not create the NCCL unique id");

  cuda::DeviceScope scope(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
#if defined(NCCL_CTA_POLICY_EFFICIENCY)
  // TETRA_NCCL_CTA_POLICY=efficiency: NCCL uses as few CTAs as give decent bandwidth, leaving SMs
  // to the compute that collectives overlap with (docs/kernels.md NOTES measures it).
  if (const char* policy = std::getenv("TETRA_NCCL_CTA_POLICY")) {
    if (std::strcmp(policy, "efficiency") == 0) config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
    else if (std::strcmp(policy, "default") != 0)
      TETRA_FAIL(Usage, "TETRA_NCCL_CTA_POLICY: '", policy, "' (valid: default, efficiency)");
  }
#endif
  const ncclResult_t r = ncclCommInitRankConfig(&im.comm, size, id, rank, &config);
  im.check(im.comm, r, "initialisation", name(), timeout());
  im.barrier_buf = Tensor::zeros({1}, DType::I32, device);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
Device NcclCommunicator::device() const { return impl_->device; }

void NcclCommunicator::set_stream(const Stream& s) {
  if (s.device().is_cuda() && !(s.device() == impl_->device))
    TETRA_FAIL(Comm, "NcclCommunicator::set_stream: stream on ", s.device().str(), ", communicator on ",
               impl_->device.str());
  impl_->stream = s;
}

namespace {
void check_tensor(const NcclCommunicator::Impl& im, const char* what, const char* arg, const Tensor& t) {
  if (!t.defined()) TETRA_FAIL(Comm, "NCCL ", what, ": ", arg, " is an undefined tensor");
  if (!(t.device() == im.device))
    TETRA_FAIL(Comm, "NCCL ", what, ": ", arg, " is ", t.describe(), " but the communicator is on ", im.device.str());
}
}  // namespace

std::unique_ptr<Work> NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_tensor(*impl_, "all_reduce", "t", t);
  const ncclDataType_t type = reduce_type(t.dtype(), "all_reduce on group " + name());
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "all_reduce", [&](cudaStream_t s) {
    if (t.numel() == 0) return ncclSuccess;
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, reduce_op(op), comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor(*impl_, "reduce_scatter", "out", out);
  check_tensor(*impl_, "reduce_scatter", "in", in);
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * size())
    TETRA_FAIL(Comm, "NCCL reduce_scatter on group ", name(), ": in ", in.describe(), " must hold ", size(),
               " × out ", out.describe(), " elements of the same dtype");
  const ncclDataType_t type = reduce_type(in.dtype(), "reduce_scatter on group " + name());
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "reduce_scatter", [&](cudaStream_t s) {
    if (out.numel() == 0) return ncclSuccess;
    return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), type, reduce_op(op),
                             comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::all_gather(Tensor& out, const Tensor& in) {
  check_tensor(*impl_, "all_gather", "out", out);
  check_tensor(*impl_, "all_gather", "in", in);
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * size())
    TETRA_FAIL(Comm, "NCCL all_gather on group ", name(), ": out ", out.describe(), " must hold ", size(), " × in ",
               in.describe(), " elements of the same dtype");
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "all_gather", [&](cudaStream_t s) {
    if (in.numel() == 0) return ncclSuccess;
    return ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::all_to_all(Tensor& out, const Tensor& in) {
  check_tensor(*impl_, "all_to_all", "out", out);
  check_tensor(*impl_, "all_to_all", "in", in);
  const int n = size();
  if (in.dtype() != out.dtype() || in.numel() != out.numel() || in.numel() % n != 0)
    TETRA_FAIL(Comm, "NCCL all_to_all on group ", name(), ": in ", in.describe(), " and out ", out.describe(),
               " must have the same dtype and element count, divisible by the group size ", n);
  const size_t chunk = in.nbytes() / static_cast<size_t>(n);
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "all_to_all", [&](cudaStream_t s) {
    if (chunk == 0) return ncclSuccess;
    return grouped([&] {
      const char* src = static_cast<const char*>(in.data_ptr());
      char* dst = static_cast<char*>(out.data_ptr());
      for (int j = 0; j < n; ++j) {
        ncclResult_t r = ncclSend(src + j * chunk, chunk, ncclUint8, j, comm, s);
        if (r != ncclSuccess && r != ncclInProgress) return r;
        r = ncclRecv(dst + j * chunk, chunk, ncclUint8, j, comm, s);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  });
}

std::unique_ptr<Work> NcclCommunicator::all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts,
                                                     const Tensor& in, const std::vector<int64_t>& send_counts) {
  check_tensor(*impl_, "all_to_all_v", "out", out);
  check_tensor(*impl_, "all_to_all_v", "in", in);
  const int n = size();
  if (in.dtype() != out.dtype())
    TETRA_FAIL(Comm, "NCCL all_to_all_v on group ", name(), ": in ", in.describe(), " and out ", out.describe(),
               " must have the same dtype");
  if (static_cast<int>(recv_counts.size()) != n || static_cast<int>(send_counts.size()) != n)
    TETRA_FAIL(Comm, "NCCL all_to_all_v on group ", name(), ": ", send_counts.size(), " send and ", recv_counts.size(),
               " receive counts for a group of ", n);
  for (int j = 0; j < n; ++j)
    if (send_counts[j] < 0 || recv_counts[j] < 0)
      TETRA_FAIL(Comm, "NCCL all_to_all_v on group ", name(), ": negative count for rank ", j);
  const int64_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  const int64_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  if (send_total > in.numel() || recv_total > out.numel())
    TETRA_FAIL(Comm, "NCCL all_to_all_v on group ", name(), ": sends ", send_total, " elements from ", in.describe(),
               " and receives ", recv_total, " into ", out.describe());
  const size_t elem = dtype_size(in.dtype());
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "all_to_all_v", [&](cudaStream_t s) {
    if (send_total == 0 && recv_total == 0) return ncclSuccess;
    return grouped([&] {
      const char* src = static_cast<const char*>(in.data_ptr());
      char* dst = static_cast<char*>(out.data_ptr());
      int64_t send_off = 0, recv_off = 0;
      for (int j = 0; j < n; ++j) {
        if (send_counts[j] > 0) {
          const ncclResult_t r = ncclSend(src + send_off * elem, static_cast<size_t>(send_counts[j]) * elem, ncclUint8,
                                          j, comm, s);
          if (r != ncclSuccess && r != ncclInProgress) return r;
        }
        if (recv_counts[j] > 0) {
          const ncclResult_t r = ncclRecv(dst + recv_off * elem, static_cast<size_t>(recv_counts[j]) * elem, ncclUint8,
                                          j, comm, s);
          if (r != ncclSuccess && r != ncclInProgress) return r;
        }
        send_off += send_counts[j];
        recv_off += recv_counts[j];
      }
      return ncclSuccess;
    });
  });
}

std::unique_ptr<Work> NcclCommunicator::broadcast(Tensor& t, int root) {
  check_tensor(*impl_, "broadcast", "t", t);
  if (root < 0 || root >= size())
    TETRA_FAIL(Comm, "NCCL broadcast on group ", name(), ": root ", root, " outside [0, ", size(), ")");
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "broadcast", [&](cudaStream_t s) {
    if (t.numel() == 0) return ncclSuccess;
    return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::send(const Tensor& t, int peer, int /*tag*/) {
  check_tensor(*impl_, "send", "t", t);
  if (peer < 0 || peer >= size())
    TETRA_FAIL(Comm, "NCCL send on group ", name(), ": peer ", peer, " outside [0, ", size(), ")");
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "send", [&](cudaStream_t s) {
    if (t.numel() == 0) return ncclSuccess;
    return ncclSend(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::recv(Tensor& t, int peer, int /*tag*/) {
  check_tensor(*impl_, "recv", "t", t);
  if (peer < 0 || peer >= size())
    TETRA_FAIL(Comm, "NCCL recv on group ", name(), ": peer ", peer, " outside [0, ", size(), ")");
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "recv", [&](cudaStream_t s) {
    if (t.numel() == 0) return ncclSuccess;
    return ncclRecv(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm, s);
  });
}

std::unique_ptr<Work> NcclCommunicator::batch_send_recv(const std::vector<P2PTransfer>& ops) {
  for (const P2PTransfer& op : ops) {
    const char* what = op.kind == P2PTransfer::Kind::Send ? "batch_send_recv (send)" : "batch_send_recv (recv)";
    check_tensor(*impl_, what, "tensor", op.tensor);
    if (op.peer < 0 || op.peer >= size())
      TETRA_FAIL(Comm, "NCCL ", what, " on group ", name(), ": peer ", op.peer, " outside [0, ", size(), ")");
  }
  const ncclComm_t comm = impl_->comm;
  return issue(impl_, name(), timeout(), "batch_send_recv", [&](cudaStream_t s) {
    return grouped([&] {
      for (const P2PTransfer& op : ops) {
        if (op.tensor.numel() == 0) continue;
        const ncclResult_t r = op.kind == P2PTransfer::Kind::Send
                                   ? ncclSend(op.tensor.data_ptr(), op.tensor.nbytes(), ncclUint8, op.peer, comm, s)
                                   : ncclRecv(op.tensor.data_ptr(), op.tensor.nbytes(), ncclUint8, op.peer, comm, s);
        if (r != ncclSuccess && r != ncclInProgress) return r;
      }
      return ncclSuccess;
    });
  });
}

void NcclCommunicator::barrier() {
  const ncclComm_t comm = impl_->comm;
  Tensor& buf = impl_->barrier_buf;
  auto work = issue(impl_, name(), timeout(), "barrier", [&](cudaStream_t s) {
    return ncclAllReduce(buf.data_ptr(), buf.data_ptr(), 1, ncclInt32, ncclSum, comm, s);
  });
  work->host_wait();
}

void NcclCommunicator::all_reduce_host(std::vector<double>& values, ReduceOp op) {
  if (impl_->host) return impl_->host->all_reduce_host(values, op);
  if (values.empty()) return;
  // No host communicator: through the GPU, in fp64.
  const Device dev = impl_->device;
  const size_t bytes = values.size() * sizeof(double);
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::F64, dev);
  cuda::copy_bytes(t.data_ptr(), dev, values.data(), Device::cpu(), bytes, /*blocking=*/false);
  const ncclComm_t comm = impl_->comm;
  auto work = issue(impl_, name(), timeout(), "all_reduce_host", [&](cudaStream_t s) {
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), values.size(), ncclFloat64, reduce_op(op), comm, s);
  });
  work->host_wait();
  work->wait();
  cuda::copy_bytes(values.data(), Device::cpu(), t.data_ptr(), dev, bytes, /*blocking=*/true);
}

// A split goes through MPI: the ranks split the MPI communicator this one was built from and the
// new group bootstraps its own NCCL communicator from it (as the constructor does). ncclCommSplit
// was tried first and returned no child handle when 2 ranks split into two 1-rank groups (NCCL
// 2.28 on H200s, blocking and non-blocking alike; the cause was not established).
std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  if (impl_->aborted)
    TETRA_FAIL(Comm, "NCCL split on group ", name(), ": the communicator was aborted after an earlier failure");
  MPI_Comm child_mpi = MPI_COMM_NULL;
  if (MPI_Comm_split(impl_->mpi, color < 0 ? MPI_UNDEFINED : color, key, &child_mpi) != MPI_SUCCESS)
    TETRA_FAIL(Comm, "NCCL split(color ", color, ", key ", key, ") on group ", name(), ": MPI_Comm_split failed");
  // The host communicator splits the same way (collective over the same ranks, same order).
  std::shared_ptr<Communicator> host_child;
  if (impl_->host) host_child = impl_->host->split(color, key);
  if (child_mpi == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<NcclCommunicator> sub;
  try {
    sub = std::make_unique<NcclCommunicator>(child_mpi, impl_->device, std::move(host_child));
  } catch (...) {
    MPI_Comm_free(&child_mpi);
    throw;
  }
  MPI_Comm_free(&child_mpi);  // the new communicator keeps its own duplicate
  sub->impl_->stream = impl_->stream;
  sub->set_name(name() + "/" + std::to_string(color));
  sub->set_timeout(timeout());
  return sub;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Device device,
                                                     std::shared_ptr<Communicator> host_comm) {
  return std::make_unique<NcclCommunicator>(comm, device, std::move(host_comm));
}

std::shared_ptr<Communicator> make_nccl_twin(const std::shared_ptr<Communicator>& host, Device device,
                                             bool own_stream) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(host.get());
  TETRA_CHECK(mpi, "the host communicator ", host->name(), " must be an MPI communicator to bootstrap NCCL");
  auto nccl = std::make_shared<NcclCommunicator>(mpi->handle(), device, host);
  nccl->set_name(host->name());
  nccl->set_timeout(host->timeout());
  if (own_stream) nccl->set_stream(Stream::create(device));
  return nccl;
}

}  // namespace tetra
