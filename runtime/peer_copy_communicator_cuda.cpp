// PeerCopyCommunicator (runtime/peer_copy_communicator.h): CUDA IPC mappings of every peer's
// buffer, staging and flags, exchanged over MPI once; each all-reduce is copies, a handshake, a
// sum, copies and a handshake on the current stream.
#include "runtime/peer_copy_communicator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/peer_sum.h"
#include "runtime/cuda/stream_flags.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_communicator.h"

namespace tetra {
namespace {

// Flag words of a rank: for each slot (a distinct range, in the order ranges are first reduced),
// phase (arrived, reduced) and source rank, one word a peer sets to 1 and this rank resets to 0.
constexpr int kSlots = 1024;
constexpr int kArrived = 0, kReduced = 1;
constexpr size_t kFlagWords = static_cast<size_t>(kSlots) * 2 * cuda::kMaxPeerRanks;
size_t flag_index(int slot, int phase, int src) {
  return (static_cast<size_t>(slot) * 2 + static_cast<size_t>(phase)) * cuda::kMaxPeerRanks + static_cast<size_t>(src);
}
// Chunk boundaries are multiples of 8 elements (16 bytes of bf16), so the sum takes its vector path.
constexpr int64_t kChunkAlign = 8;

MPI_Comm mpi_handle(Communicator& host_comm) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&host_comm);
  TETRA_CHECK(mpi, "PeerCopyCommunicator: the host communicator of group ", host_comm.name(),
              " must be an MPI communicator");
  return mpi->handle();
}

// Every rank's fixed-size record, in rank order.
template <class T>
std::vector<T> all_gather_records(MPI_Comm comm, const T& mine, int size) {
  std::vector<T> all(static_cast<size_t>(size));
  TETRA_MPI_CHECK(MPI_Allgather(&mine, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, comm));
  return all;
}

struct IpcRecord {
  cudaIpcMemHandle_t buffer, staging, flags;
};

}  // namespace

struct PeerCopyCommunicator::Impl {
  Device device;
  int rank = 0, size = 1;
  DType dtype = DType::BF16;
  int64_t numel = 0;
  size_t elem = 2, bytes = 0;
  Tensor buffer;                                 // owns the registered memory (freed with the last view)
  std::shared_ptr<Storage> staging, flags;       // this rank's, exported to the peers
  std::vector<char*> peer_buffer, peer_staging;  // indexed by rank (nullptr for this rank)
  std::vector<uint32_t*> peer_flags;
  int64_t calls = 0;
  std::map<std::pair<int64_t, int64_t>, int> slots;  // range → flag slot

  char* base() const { return static_cast<char*>(buffer.storage()->data()); }
  uint32_t* my_flags() const { return static_cast<uint32_t*>(flags->data()); }
  char* my_staging() const { return staging ? static_cast<char*>(staging->data()) : nullptr; }
  // Byte offset of rank `src`'s region in rank `at`'s staging (one per other rank, in rank order).
  size_t staging_offset(int src, int at) const { return static_cast<size_t>(src < at ? src : src - 1) * bytes; }

  // Chunk r of [off, off + count): [lo, hi) in elements of the buffer.
  std::pair<int64_t, int64_t> chunk(int64_t off, int64_t count, int r) const {
    auto edge = [&](int k) -> int64_t {
      if (k >= size) return off + count;
      return off + (count * k / size) / kChunkAlign * kChunkAlign;
    };
    return {edge(r), edge(r + 1)};
  }

  // Tells every peer this rank reached `phase` of `slot`, then waits until every peer has told it
  // the same and resets those flags for the slot's next use. A peer sets a flag again only after
  // the reduced phase of this use, which this rank signals after the reset.
  void handshake(int slot, int phase, cudaStream_t s) const {
    for (int q = 0; q < size; ++q)
      if (q != rank) cuda::stream_write_flag(s, peer_flags[static_cast<size_t>(q)] + flag_index(slot, phase, rank), 1);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      uint32_t* mine = my_flags() + flag_index(slot, phase, q);
      cuda::stream_wait_flag(s, mine, 1);
      cuda::stream_write_flag(s, mine, 0);
    }
  }

  // The slot of range [off, off + count): -1 once kSlots distinct ranges have been seen.
  int slot_of(int64_t off, int64_t count) {
    auto it = slots.try_emplace({off, count}, static_cast<int>(slots.size())).first;
    if (it->second >= kSlots) {
      slots.erase(it);
      return -1;
    }
    return it->second;
  }

  void all_reduce(int64_t off, int64_t count, int slot, cudaStream_t s) {
    ++calls;
    // 1. Chunk q of this rank's range into rank q's staging, nearest peer first.
    for (int i = 1; i < size; ++i) {
      const int q = (rank + i) % size;
      auto [lo, hi] = chunk(off, count, q);
      if (hi > lo)
        TETRA_CUDA_CHECK(cudaMemcpyAsync(peer_staging[static_cast<size_t>(q)] + staging_offset(rank, q) + lo * elem,
                                         base() + lo * elem, static_cast<size_t>(hi - lo) * elem,
                                         cudaMemcpyDeviceToDevice, s));
    }
    handshake(slot, kArrived, s);
    // 2. This rank's chunk: the sum of every rank's copy, in rank order.
    auto [lo, hi] = chunk(off, count, rank);
    if (hi > lo) {
      std::vector<const void*> src;
      for (int r = 0; r < size; ++r)
        src.push_back(r == rank ? base() + lo * elem : my_staging() + staging_offset(r, rank) + lo * elem);
      cuda::peer_sum(base() + lo * elem, src, hi - lo, dtype, s);
    }
    // 3. The reduced chunk into every peer's buffer.
    for (int i = 1; i < size; ++i) {
      const int q = (rank + i) % size;
      if (hi > lo)
        TETRA_CUDA_CHECK(cudaMemcpyAsync(peer_buffer[static_cast<size_t>(q)] + lo * elem, base() + lo * elem,
                                         static_cast<size_t>(hi - lo) * elem, cudaMemcpyDeviceToDevice, s));
    }
    handshake(slot, kReduced, s);
  }

  ~Impl() {
    if (!device.is_cuda() || peer_flags.empty()) return;
    cuda::DeviceScope scope(device);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      for (void* p : {static_cast<void*>(peer_buffer[static_cast<size_t>(q)]),
                      static_cast<void*>(peer_staging[static_cast<size_t>(q)]),
                      static_cast<void*>(peer_flags[static_cast<size_t>(q)])})
        if (p && cudaIpcCloseMemHandle(p) != cudaSuccess) (void)cudaGetLastError();
    }
  }
};

namespace {

// The current stream waits for the all-reduce's end.
class PeerCopyWork final : public Work {
 public:
  PeerCopyWork(Device device, cudaStream_t s) : device_(device) {
    cuda::DeviceScope scope(device_);
    TETRA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    TETRA_CUDA_CHECK(cudaEventRecord(done_, s));
  }
  ~PeerCopyWork() override {
    if (cudaEventDestroy(done_) != cudaSuccess) (void)cudaGetLastError();
  }
  void wait() override {
    cuda::DeviceScope scope(device_);
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream_of(device_), done_, 0));
  }
  bool is_completed() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) TETRA_CUDA_CHECK(e);
    return false;
  }

 private:
  Device device_;
  cudaEvent_t done_ = nullptr;
};

std::shared_ptr<Storage> shareable_storage(size_t bytes, Device device) {
  return std::make_shared<Storage>(cuda::allocate_shareable(bytes, device), bytes, device, cuda::release_shareable);
}

}  // namespace

std::string PeerCopyCommunicator::unsupported_reason(Communicator& host_comm, Device device) {
  MPI_Comm comm = mpi_handle(host_comm);
  const int size = host_comm.size(), rank = host_comm.rank();
  struct Where {
    char host[256];
    char bus[32];
  } me{};
  if (gethostname(me.host, sizeof(me.host) - 1) != 0) std::strncpy(me.host, "?", sizeof(me.host) - 1);
  std::string reason;
  if (!device.is_cuda()) reason = "the device is " + device.str() + ", not a GPU";
  else {
    cuda::DeviceScope scope(device);
    TETRA_CUDA_CHECK(cudaDeviceGetPCIBusId(me.bus, sizeof(me.bus), device.index));
  }
  const std::vector<Where> all = all_gather_records(comm, me, size);
  if (reason.empty() && size > cuda::kMaxPeerRanks)
    reason = std::to_string(size) + " ranks (at most " + std::to_string(cuda::kMaxPeerRanks) + ")";
  for (int q = 0; q < size && reason.empty(); ++q) {
    const Where& w = all[static_cast<size_t>(q)];
    if (std::strcmp(w.host, me.host) != 0) {
      reason = std::string("rank ") + std::to_string(q) + " runs on host " + w.host + ", not on " + me.host;
      break;
    }
    if (q == rank) continue;
    int ordinal = -1;
    if (cudaDeviceGetByPCIBusId(&ordinal, w.bus) != cudaSuccess) {
      (void)cudaGetLastError();
      reason = std::string("the GPU of rank ") + std::to_string(q) + " (PCI " + w.bus + ") is not visible here";
      break;
    }
    if (ordinal == device.index) {
      // A stream waiting on a flag could stall the other rank's work on the same GPU.
      reason = std::string("rank ") + std::to_string(q) + " uses the same GPU (" + w.bus + ")";
      break;
    }
    int can = 0;
    TETRA_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device.index, ordinal));
    if (!can) reason = std::string("no peer access from ") + me.bus + " to the GPU of rank " + std::to_string(q) +
                       " (" + w.bus + ")";
  }
  // Every rank returns the same answer: the first rank's reason that is not empty.
  struct Reason {
    char text[512];
  } mine{};
  std::strncpy(mine.text, reason.c_str(), sizeof(mine.text) - 1);
  for (int q = 0; const Reason& r : all_gather_records(comm, mine, size)) {
    if (r.text[0]) return "rank " + std::to_string(q) + ": " + r.text;
    ++q;
  }
  return "";
}

PeerCopyCommunicator::PeerCopyCommunicator(Communicator& device_comm, Communicator& host_comm, Device device,
                                           int64_t numel, DType dtype)
    : impl_(std::make_unique<Impl>()), inner_(device_comm) {
  TETRA_CHECK(inner_.size() == host_comm.size() && inner_.rank() == host_comm.rank(),
              "PeerCopyCommunicator: the device and host communicators of group ", host_comm.name(), " differ");
  if (dtype != DType::BF16 && dtype != DType::F32)
    TETRA_FAIL(Usage, "PeerCopyCommunicator: a ", dtype_name(dtype), " buffer (bf16 or fp32)");
  TETRA_CHECK(numel > 0, "PeerCopyCommunicator: an empty buffer");
  set_name(inner_.name());
  set_timeout(inner_.timeout());
  const std::string why = unsupported_reason(host_comm, device);
  if (!why.empty()) TETRA_FAIL(Comm, "copy-engine all-reduce on group ", name(), ": ", why);

  Impl& im = *impl_;
  im.device = device;
  im.rank = host_comm.rank();
  im.size = host_comm.size();
  im.dtype = dtype;
  im.numel = numel;
  im.elem = dtype_size(dtype);
  im.bytes = static_cast<size_t>(numel) * im.elem;
  cuda::DeviceScope scope(device);
  im.buffer = Tensor::on_storage(shareable_storage(im.bytes, device), {numel}, dtype);
  const size_t staging_bytes = static_cast<size_t>(im.size - 1) * im.bytes;
  if (staging_bytes > 0)
    im.staging = shareable_storage(staging_bytes, device);
  const size_t flag_bytes = kFlagWords * sizeof(uint32_t);
  im.flags = shareable_storage(flag_bytes, device);

  IpcRecord mine{};
  TETRA_CUDA_CHECK(cudaIpcGetMemHandle(&mine.buffer, im.base()));
  if (im.staging) TETRA_CUDA_CHECK(cudaIpcGetMemHandle(&mine.staging, im.my_staging()));
  TETRA_CUDA_CHECK(cudaIpcGetMemHandle(&mine.flags, im.my_flags()));
  const std::vector<IpcRecord> all = all_gather_records(mpi_handle(host_comm), mine, im.size);
  im.peer_buffer.assign(static_cast<size_t>(im.size), nullptr);
  im.peer_staging.assign(static_cast<size_t>(im.size), nullptr);
  im.peer_flags.assign(static_cast<size_t>(im.size), nullptr);
  for (int q = 0; q < im.size; ++q) {
    if (q == im.rank) continue;
    const IpcRecord& r = all[static_cast<size_t>(q)];
    void* p = nullptr;
    TETRA_CUDA_CHECK(cudaIpcOpenMemHandle(&p, r.buffer, cudaIpcMemLazyEnablePeerAccess));
    im.peer_buffer[static_cast<size_t>(q)] = static_cast<char*>(p);
    TETRA_CUDA_CHECK(cudaIpcOpenMemHandle(&p, r.staging, cudaIpcMemLazyEnablePeerAccess));
    im.peer_staging[static_cast<size_t>(q)] = static_cast<char*>(p);
    TETRA_CUDA_CHECK(cudaIpcOpenMemHandle(&p, r.flags, cudaIpcMemLazyEnablePeerAccess));
    im.peer_flags[static_cast<size_t>(q)] = static_cast<uint32_t*>(p);
  }
  // No rank may signal a peer before that peer has mapped and zeroed what it owns.
  host_comm.barrier();
}

PeerCopyCommunicator::~PeerCopyCommunicator() = default;

Tensor& PeerCopyCommunicator::buffer() { return impl_->buffer; }
int PeerCopyCommunicator::rank() const { return impl_->rank; }
int PeerCopyCommunicator::size() const { return impl_->size; }
int64_t PeerCopyCommunicator::copy_engine_all_reduces() const { return impl_->calls; }

std::unique_ptr<Work> PeerCopyCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  Impl& im = *impl_;
  if (op != ReduceOp::Sum || im.size == 1 || !t.defined() || t.storage() != im.buffer.storage() ||
      t.dtype() != im.dtype)
    return inner_.all_reduce(t, op);
  const int64_t off = t.storage_offset_bytes() / static_cast<int64_t>(im.elem);
  TETRA_CHECK(off >= 0 && off + t.numel() <= im.numel, "PeerCopyCommunicator::all_reduce: ", t.describe(),
              " at element ", off, " lies outside the registered buffer of ", im.numel);
  const int slot = im.slot_of(off, t.numel());
  if (slot < 0) return inner_.all_reduce(t, op);  // every rank sees the same ranges in the same order
  cuda::DeviceScope scope(im.device);
  const cudaStream_t s = cuda::stream_of(im.device);
  im.all_reduce(off, t.numel(), slot, s);
  return std::make_unique<PeerCopyWork>(im.device, s);
}

std::unique_ptr<Work> PeerCopyCommunicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  return inner_.reduce_scatter(out, in, op);
}
std::unique_ptr<Work> PeerCopyCommunicator::all_gather(Tensor& out, const Tensor& in) {
  return inner_.all_gather(out, in);
}
std::unique_ptr<Work> PeerCopyCommunicator::all_to_all(Tensor& out, const Tensor& in) {
  return inner_.all_to_all(out, in);
}
std::unique_ptr<Work> PeerCopyCommunicator::all_to_all_v(Tensor& out, const std::vector<int64_t>& recv_counts,
                                                         const Tensor& in, const std::vector<int64_t>& send_counts) {
  return inner_.all_to_all_v(out, recv_counts, in, send_counts);
}
std::unique_ptr<Work> PeerCopyCommunicator::broadcast(Tensor& t, int root) { return inner_.broadcast(t, root); }
std::unique_ptr<Work> PeerCopyCommunicator::send(const Tensor& t, int peer, int tag) {
  return inner_.send(t, peer, tag);
}
std::unique_ptr<Work> PeerCopyCommunicator::recv(Tensor& t, int peer, int tag) { return inner_.recv(t, peer, tag); }
std::unique_ptr<Work> PeerCopyCommunicator::batch_send_recv(const std::vector<P2PTransfer>& ops) {
  return inner_.batch_send_recv(ops);
}
void PeerCopyCommunicator::barrier() { inner_.barrier(); }
std::unique_ptr<Communicator> PeerCopyCommunicator::split(int color, int key) { return inner_.split(color, key); }
void PeerCopyCommunicator::all_reduce_host(std::vector<double>& values, ReduceOp op) {
  inner_.all_reduce_host(values, op);
}

}  // namespace tetra
